"""``tiered-proxy serve --tier-all-topics`` in front of real brokers tiers topics created straight on
the broker, with the settings set on them there: a broker's defaults (noida-db lists
``remote.storage.enable=false`` and ``local.retention.*=-2`` for every topic) never count as the
topic's own, Tansu's listings of only the set keys do (tiering.topic_configs.BrokerTopicConfigs)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from proxy.embedded_broker import EmbeddedBroker, start_broker
from tests.admin_clients import Admin
from tests.delivery import CheckedProducer
from tests.proxy_process import ProxyProcess, start_proxy
from tests.tiering_checks import check_segment, direct_log, partitions_of, wait_until
from tiering.broker_client import EARLIEST, BrokerClient
from tiering.metadata.view import load_metadata
from tiering.model import RemoteLogSegmentMetadata
from tiering.storage.local_folder import LocalFolderStorage

PARTITIONS = 2
MESSAGES = 6000  # ~0.5 MB per partition: dozens of 16 KiB segments
SEGMENT_BYTES = "16384"
STATIC_BROKER_CONFIG, DYNAMIC_TOPIC_CONFIG, DEFAULT_CONFIG = 4, 1, 5


@pytest.fixture(scope="module")
def own_tansu(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedBroker]:
    """A Tansu of this module's own: a proxy tiering every topic must not copy the session's."""
    broker = start_broker("tansu", tmp_path_factory.mktemp("own-tansu"))
    yield broker
    broker.stop()


@pytest.fixture(params=["noida", "tansu"])
def tier_all(request, tmp_path_factory) -> Iterator[tuple[EmbeddedBroker, ProxyProcess, Path]]:
    broker = request.getfixturevalue(f"own_{request.param}")
    work = tmp_path_factory.mktemp(f"tier-all-{request.param}")
    proxy = start_proxy(broker.bootstrap, work / "proxy", "--tier-all-topics", "--data-dir", str(work / "data"),
                        "--set", "remote.log.manager.task.interval.ms=500")
    yield broker, proxy, work / "data"
    proxy.stop()


def create_on_broker(bootstrap: str, topic: str, configs: dict[str, str]) -> None:
    """Straight on the broker with kafka-python's admin, as a tool that knows nothing of the proxy."""
    from kafka.admin import KafkaAdminClient, NewTopic

    admin = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=30_000)
    try:
        admin.create_topics([NewTopic(topic, PARTITIONS, 1, topic_configs=configs)], timeout_ms=30_000)
    finally:
        admin.close()
    client = BrokerClient(bootstrap)
    try:
        assert wait_until(lambda: topic in client.metadata([topic]), 30)
    finally:
        client.close()


def produce_small_batches(bootstrap: str, topic: str) -> None:
    """MESSAGES numbered messages in batches of at most 4 KiB, so that 16 KiB segments roll
    between batches (one large batch would make one large segment)."""
    import random

    producer = CheckedProducer({"bootstrap.servers": bootstrap, "linger.ms": 5, "batch.size": 4096,
                         "compression.type": "lz4"})
    for i in range(MESSAGES):
        producer.produce(topic, key=f"k{i}".encode(), value=f"v{i}-".encode() + random.randbytes(150),
                         partition=i % PARTITIONS)
        if i % 1000 == 0:
            producer.poll(0)
    producer.deliver_all(60)


def remote_segments(data_dir: Path, topic: str) -> dict[int, list[RemoteLogSegmentMetadata]]:
    """Finished segments per partition in the serve process's journal, read without writing."""
    state = load_metadata(f"file://{data_dir / 'metadata'}")
    return {tp.partition: state.finished(tp) for tp in state.partitions if tp.topic == topic}


def test_tier_all_topics_tiers_topics_created_at_the_broker(tier_all, unique_name):
    broker, proxy, data_dir = tier_all
    topic, compacted, opted_out = f"all-{unique_name}", f"compacted-{unique_name}", f"optout-{unique_name}"
    create_on_broker(broker.bootstrap, topic, {"segment.bytes": SEGMENT_BYTES})
    create_on_broker(broker.bootstrap, compacted, {"cleanup.policy": "compact", "segment.bytes": SEGMENT_BYTES})
    create_on_broker(broker.bootstrap, opted_out, {"remote.storage.enable": "false", "segment.bytes": SEGMENT_BYTES})
    for name in (topic, compacted, opted_out):
        produce_small_batches(broker.bootstrap, name)

    # Only segment.bytes set at the broker rolls segments this small (the proxy's default is 1 GiB
    # and segment.ms 7 days): segments in the remote tier prove the topic's own setting was used.
    per_partition = MESSAGES // PARTITIONS
    assert wait_until(lambda: len(remote_segments(data_dir, topic)) == PARTITIONS and all(
        len(segments) >= 5 and segments[-1].end_offset >= per_partition // 2
        for segments in remote_segments(data_dir, topic).values()), 90), proxy.log_text()[-3000:]

    client = BrokerClient(broker.bootstrap)
    storage = LocalFolderStorage(data_dir / "remote")
    try:
        tiered = remote_segments(data_dir, topic)
        for tp in partitions_of(client, topic):
            leader = client.metadata([topic])[topic].partitions[tp.partition].leader
            error, log_start = client.list_offset(leader, topic, tp.partition, EARLIEST)
            assert error == 0
            segments = tiered[tp.partition]
            assert max(s.segment_size_bytes for s in segments) <= 2 * int(SEGMENT_BYTES)  # rolled at 16 KiB
            assert segments[0].start_offset == log_start  # contiguous from the broker's log start
            for before, after in zip(segments, segments[1:], strict=False):
                assert after.start_offset == before.end_offset + 1, (before, after)
            remote = b"".join(check_segment(storage, s) for s in segments)
            assert direct_log(client, tp, log_start)[0].startswith(remote)  # the broker's bytes
    finally:
        client.close()
        storage.close()

    # A compacted topic is never tiered; a topic that set remote.storage.enable=false itself opted out.
    for name in (compacted, opted_out):
        assert remote_segments(data_dir, name) == {}
    assert f"topic {compacted} is compacted: not tiered" in proxy.log_text()
    assert load_metadata(f"file://{data_dir / 'metadata'}").topics.get(opted_out) is None

    # Described through the proxy as Kafka would with the cluster-wide default on: the topic's
    # own setting where it has one, the proxy's static setting otherwise.
    admin = Admin("kafka-python", proxy.bootstrap)
    try:
        described = admin.describe(topic)
        assert (described["remote.storage.enable"].value, described["remote.storage.enable"].source) == (
            "true", STATIC_BROKER_CONFIG)
        assert (described["local.retention.ms"].value, described["local.retention.ms"].source) == ("-2", DEFAULT_CONFIG)
        described = admin.describe(opted_out)
        assert (described["remote.storage.enable"].value, described["remote.storage.enable"].source) == (
            "false", DYNAMIC_TOPIC_CONFIG)
    finally:
        admin.close()
