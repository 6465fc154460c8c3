"""Operating tiering per topic with Kafka's own admin clients through the proxy (KIP-950, KIP-917,
deletes), against both test brokers: every step is checked on the remote tier (the proxy's
metadata journal and storage folder) and in what consumers read through the proxy."""

from __future__ import annotations

import time
import uuid
from pathlib import Path

import pytest

from protocol.apis import CREATE_TOPICS, METADATA
from protocol.errors import ErrorCode
from tests.admin_clients import ADMIN_CLIENTS, Admin, AdminError
from tests.clients import consume_records
from tests.proxy_process import ProxyProcess, start_proxy
from tests.raw import RawClient
from tests.scripted_broker import KAFKA_4_2, ScriptedBroker
from tests.tiering_checks import message_number, produce_numbered, wait_until
from tiering.broker_client import EARLIEST, BrokerClient
from tiering.metadata.journal_store import JOURNAL_NAME, read_journal
from tiering.metadata.state import MetadataState
from tiering.model import RemoteLogSegmentMetadata, RemotePartitionDeleteState, TieringState, TopicIdPartition

PARTITIONS = 2
BATCH = 3000  # messages per produce round
CONSUMER = {"kafka-python": "kafka-python", "confluent": "confluent"}


class Tier:
    """What the proxy's embedded metadata store and remote folder hold, read from disk."""

    def __init__(self, proxy: ProxyProcess, data_dir: Path) -> None:
        self.proxy = proxy
        self.data_dir = data_dir

    def state(self) -> MetadataState:
        state = MetadataState()
        path = self.data_dir / "metadata" / JOURNAL_NAME
        for record in read_journal(path.read_bytes())[0]:
            state.apply(record)
        return state

    def topic_state(self, topic: str):  # noqa: ANN201 - TopicTieringState | None
        return self.state().topics.get(topic)

    def partitions(self, topic: str) -> list[TopicIdPartition]:
        state = self.state()
        current = state.topics.get(topic)
        return sorted(tp for tp, p in state.partitions.items() if tp.topic == topic and p.delete_state is None
                      and (current is None or current.topic_id == tp.topic_id))

    def segments(self, topic: str) -> dict[int, list[RemoteLogSegmentMetadata]]:
        state = self.state()
        return {tp.partition: state.finished(tp) for tp in self.partitions(topic)}

    def remote_end(self, topic: str) -> dict[int, int]:
        return {p: s[-1].end_offset for p, s in self.segments(topic).items() if s}

    def log_objects(self, topic: str) -> list[Path]:
        return sorted((self.data_dir / "remote").glob(f"**/{topic}-*/**/*.log"))


def produce(bootstrap: str, topic: str, start: int, count: int) -> None:
    # In rounds of 500: one flush can put a partition's whole round in one batch, and so one
    # segment, and local retention never removes the segment holding the log end.
    for first in range(start, start + count, 500):
        produce_numbered(bootstrap, topic, first, min(500, start + count - first), PARTITIONS, value_bytes=120)


def values_read(client: str, bootstrap: str, topic: str, expected: int) -> dict[int, list[tuple[int, bytes]]]:
    records = consume_records(CONSUMER[client], bootstrap, topic, PARTITIONS, expected, timeout=90)
    return {p: [(r.offset, r.value) for r in rs] for p, rs in records.items()}


def check_read(client: str, proxy: ProxyProcess, topic: str, first: int, last: int, starts: dict[int, int]) -> None:
    """A consumer from the beginning gets messages ``first..last`` (those at or past each
    partition's ``starts``), each exactly once, in order, at consecutive offsets."""
    wanted = {p: [i for i in range(first, last + 1) if i % PARTITIONS == p] for p in range(PARTITIONS)}
    expected = sum(len(v) for v in wanted.values()) - sum(starts.values())
    got = values_read(client, proxy.bootstrap, topic, expected)
    for p in range(PARTITIONS):
        offsets = [o for o, _ in got.get(p, [])]
        assert offsets == list(range(starts[p], starts[p] + len(offsets))), (p, offsets[:5])
        assert [message_number(v) for _, v in got.get(p, [])] == wanted[p][starts[p]:]


def earliest(proxy: ProxyProcess, topic: str, broker: str | None = None) -> dict[int, int]:
    client = BrokerClient(broker or proxy.bootstrap)
    try:
        leader = client.metadata([topic])[topic].partitions[0].leader
        return {p: client.list_offset(leader, topic, p, EARLIEST)[1] for p in range(PARTITIONS)}
    finally:
        client.close()


def _tiered_topic_with_data(proxy: ProxyProcess, tier: Tier, topic: str) -> Admin:
    """A tiered topic created through the proxy, BATCH messages in, every partition tiered."""
    admin = Admin("confluent", proxy.bootstrap)
    admin.create_topic(topic, PARTITIONS, {"remote.storage.enable": "true", "segment.bytes": "16384",
                                           "segment.ms": "1000"})
    produce(proxy.bootstrap, topic, 0, BATCH)
    assert wait_until(lambda: len(tier.remote_end(topic)) == PARTITIONS and tier.log_objects(topic), 60)
    return admin


@pytest.fixture(params=["noida", "tansu"])
def setup(request, tmp_path_factory):
    """A proxy of its own (local folder, embedded store) in front of the session's broker."""
    broker = request.getfixturevalue(request.param)
    work = tmp_path_factory.mktemp(f"admin-{request.param}")
    proxy = start_proxy(broker.bootstrap, work / "proxy", "--data-dir", str(work / "data"),
                        "--set", "remote.log.manager.task.interval.ms=200",
                        "--set", "proxy.deleted.topic.grace.ms=1000")
    yield broker, proxy, Tier(proxy, work / "data")
    proxy.stop()


@pytest.mark.parametrize("admin_client", ADMIN_CLIENTS)
def test_tiering_lifecycle_with_admin_tools(setup, admin_client, unique_name):
    broker, proxy, tier = setup
    noida = broker.kind == "noida"
    topic = f"admin-{unique_name}"
    admin = Admin(admin_client, proxy.bootstrap)
    try:
        _lifecycle(admin, admin_client, broker, proxy, tier, topic, noida)
    finally:
        admin.close()


def _lifecycle(admin: Admin, client: str, broker, proxy: ProxyProcess, tier: Tier, topic: str, noida: bool) -> None:
    configs = {"remote.storage.enable": "true", "segment.bytes": "16384", "segment.ms": "1000"}
    if noida:  # the proxy moves noida-db's log start; Tansu never moves it
        configs["local.retention.bytes"] = "32768"
    admin.create_topic(topic, PARTITIONS, configs)

    # Stored by the proxy, never sent to the broker; described the way a broker describes configs.
    # (noida-db lists every config it knows, tiering keys included, with their defaults.)
    at_broker = BrokerClient(broker.bootstrap).topic_configs([topic])[topic]
    assert at_broker.tiering_values() == {}  # nothing set on the topic at the broker
    assert at_broker.in_effect.get("remote.storage.enable") in (None, "false")
    assert at_broker.in_effect.get("local.retention.bytes") in (None, "-2")
    described = admin.describe(topic)
    assert (described["remote.storage.enable"].value, described["remote.storage.enable"].source) == ("true", 1)
    assert described["remote.log.disable.policy"].value == "retain"
    assert described["local.retention.bytes"].value == ("32768" if noida else "-2")
    assert ("log.local.retention.bytes", "-2", 5) in described["local.retention.bytes"].synonyms

    # Kafka's validation: refused requests change nothing.
    with pytest.raises(AdminError) as refused:
        admin.set_configs(topic, {"remote.log.disable.policy": "sometimes"})
    assert refused.value.code == ErrorCode.INVALID_REQUEST and "retain or delete" in refused.value.message
    with pytest.raises(AdminError) as refused:
        admin.set_configs(topic, {"local.retention.ms": "7200000", "retention.ms": "3600000"})
    assert refused.value.code == ErrorCode.INVALID_CONFIG
    with pytest.raises(AdminError) as refused:
        admin.create_topic(f"{topic}-compacted", 1, {"remote.storage.enable": "true", "cleanup.policy": "compact"})
    assert refused.value.code == ErrorCode.INVALID_CONFIG
    assert f"{topic}-compacted" not in BrokerClient(broker.bootstrap).metadata()
    assert tier.topic_state(topic).config_map.get("remote.log.disable.policy") is None

    # Tiered: contiguous segments from 0; on noida the broker's log start moved past some of them.
    produce(proxy.bootstrap, topic, 0, BATCH)
    per_partition = BATCH // PARTITIONS
    assert wait_until(lambda: all(e >= per_partition * 2 // 3 for e in tier.remote_end(topic).values())
                      and len(tier.remote_end(topic)) == PARTITIONS, 60), tier.remote_end(topic)
    if noida:
        assert wait_until(lambda: min(earliest(proxy, topic, broker.bootstrap).values()) > 0, 60)
    for segments in tier.segments(topic).values():
        assert segments[0].start_offset == 0
        assert all(a.end_offset + 1 == b.start_offset for a, b in zip(segments, segments[1:], strict=False))
    check_read(client, proxy, topic, 0, BATCH - 1, dict.fromkeys(range(PARTITIONS), 0))
    epoch = tier.topic_state(topic).tiered_epoch

    # Disable, retain: copying stops, remote data stays readable.
    admin.set_configs(topic, {"remote.storage.enable": "false"})
    assert wait_until(lambda: tier.topic_state(topic).state == TieringState.DISABLED, 30)
    assert tier.topic_state(topic).tiered_epoch == epoch + 1
    ends = tier.remote_end(topic)
    produce(proxy.bootstrap, topic, BATCH, BATCH)
    time.sleep(3)  # many manager rounds
    assert tier.remote_end(topic) == ends
    check_read(client, proxy, topic, 0, 2 * BATCH - 1, dict.fromkeys(range(PARTITIONS), 0))

    # Re-enable (KIP-950 scenario 3): copying continues right after Ry, offsets continuous.
    admin.set_configs(topic, {"remote.storage.enable": "true"})
    assert wait_until(lambda: tier.topic_state(topic).state == TieringState.ENABLED, 30)
    assert tier.topic_state(topic).tiered_epoch == epoch + 2
    assert wait_until(lambda: all(tier.remote_end(topic)[p] > ends[p] + per_partition // 2 for p in ends), 60)
    for segments in tier.segments(topic).values():
        assert segments[0].start_offset == 0
        assert all(a.end_offset + 1 == b.start_offset for a, b in zip(segments, segments[1:], strict=False))

    # Disable, delete: remote data unreadable at once (log start becomes Lx), then deleted.
    admin.set_configs(topic, {"remote.log.disable.policy": "delete", "remote.storage.enable": "false"})
    assert earliest(proxy, topic) == earliest(proxy, topic, broker.bootstrap)
    assert wait_until(lambda: tier.topic_state(topic).state == TieringState.DISABLED, 30)
    assert wait_until(lambda: not any(tier.segments(topic).values()) and not tier.log_objects(topic), 30)
    lx = earliest(proxy, topic, broker.bootstrap)
    check_read(client, proxy, topic, 0, 2 * BATCH - 1, lx)

    # Re-enable after delete (scenario 1): tiering starts again from the brokers' log start.
    admin.set_configs(topic, {"remote.storage.enable": "true"})
    produce(proxy.bootstrap, topic, 2 * BATCH, BATCH)
    assert wait_until(lambda: len(tier.remote_end(topic)) == PARTITIONS
                      and all(e > lx[p] + per_partition // 2 for p, e in tier.remote_end(topic).items()), 60)
    for p, segments in tier.segments(topic).items():
        assert segments[0].start_offset == lx[p]
    assert admin.describe(topic)["remote.log.disable.policy"].value == "delete"

    if noida:
        # DeleteRecords inside the remote range moves Rx; segments wholly below it go.
        assert wait_until(lambda: min(earliest(proxy, topic, broker.bootstrap)[p] - lx[p] for p in lx) > 100, 60)
        assert earliest(proxy, topic) == lx
        target = {p: lx[p] + 50 for p in lx}
        assert admin.delete_records(topic, target) == target
        assert earliest(proxy, topic) == target
        assert wait_until(lambda: all(s[0].end_offset >= target[p] for p, s in tier.segments(topic).items()), 30)
        check_read(client, proxy, topic, 0, 3 * BATCH - 1, target)
    else:
        check_read(client, proxy, topic, 0, 3 * BATCH - 1, lx)

    # DeleteTopics: the remote partitions are deleted; a topic recreated under the name is new.
    admin.delete_topic(topic)
    assert wait_until(lambda: topic not in BrokerClient(broker.bootstrap).metadata(), 30)
    state = tier.state()
    old = [tp for tp in state.partitions if tp.topic == topic]
    assert wait_until(lambda: all(tier.state().partitions[tp].delete_state
                                  == RemotePartitionDeleteState.DELETE_PARTITION_FINISHED for tp in old), 30)
    assert not tier.log_objects(topic)
    admin.create_topic(topic, PARTITIONS, {"remote.storage.enable": "true", "segment.bytes": "16384",
                                           "segment.ms": "1000"})
    produce(proxy.bootstrap, topic, 0, 20)
    assert earliest(proxy, topic) == dict.fromkeys(range(PARTITIONS), 0)
    check_read(client, proxy, topic, 0, 19, dict.fromkeys(range(PARTITIONS), 0))
    assert tier.topic_state(topic).topic_id not in {tp.topic_id for tp in old}


def test_describe_shows_both_tiers(setup, unique_name):
    """``tiered-proxy describe`` against a running proxy: offsets of both tiers, remote size and
    segment count equal to the store's, and the KIP-950 state; kafka-python's describe_log_dirs
    sees the remote tier as a log dir."""
    import subprocess
    import sys

    broker, proxy, tier = setup
    topic = f"describe-{unique_name}"
    admin = _tiered_topic_with_data(proxy, tier, topic)

    def describe() -> str:
        return subprocess.run([sys.executable, "-m", "proxy.cli", "describe", "--bootstrap-servers", proxy.bootstrap,
                               "--topic", topic], capture_output=True, text=True, timeout=60, check=True).stdout

    # Tiering goes on meanwhile (segment.ms=1000): compare against a store that did not change
    # while describe ran.
    for _attempt in range(10):
        before = tier.segments(topic)
        out = describe()
        segments = tier.segments(topic)
        if segments == before:
            break
    else:
        pytest.fail("the remote tier kept changing for 10 describe runs")
    lines = out.splitlines()
    assert lines[0].split()[:6] == ["TOPIC", "PARTITION", "Rx", "Ry", "Lx", "Lz"]
    rows = {int(line.split()[1]): line.split() for line in lines[1:]}
    for p in range(PARTITIONS):
        _, _, rx, ry, lx, lz, count, size, stored, _lag, lost, diverged, owner, state, policy, epoch = rows[p]
        assert (int(rx), int(count), int(size)) == (0, len(segments[p]), sum(s.segment_size_bytes for s in segments[p]))
        assert int(stored) == int(size)  # in the clear in a local folder: the data, as it is stored
        assert int(lost) == int(diverged) == 0
        assert int(ry) >= segments[p][-1].end_offset
        assert int(lx) == 0
        if broker.kind == "noida":  # Tansu's LATEST can be wrong (tests/UPSTREAMS.md)
            assert int(lz) == BATCH // PARTITIONS
        assert (owner, state, policy, epoch) == ("proxy", "ENABLED", "retain", "1")
    admin.set_configs(topic, {"remote.storage.enable": "false"})
    assert wait_until(lambda: tier.topic_state(topic).state == TieringState.DISABLED, 30)
    # Tiered by nobody once the manager's next round has seen it disabled.
    assert wait_until(lambda: all(line.split()[-4:] == ["none", "DISABLED", "retain", "2"]
                                  for line in describe().splitlines()[1:]), 10)

    from kafka.admin import KafkaAdminClient

    kafka_admin = KafkaAdminClient(bootstrap_servers=proxy.bootstrap)
    try:
        dirs = kafka_admin.describe_log_dirs()
    finally:
        kafka_admin.close()
    assert "remote:" in repr(dirs) and topic in repr(dirs)
    admin.close()


def test_disablement_and_partition_delete_finish_after_a_restart(noida, tmp_path, unique_name, seaweedfs):
    """The remote tier (SeaweedFS's S3 gateway) is down while a topic is disabled with ``delete`` and another
    is deleted: both stay in progress; the proxy is killed (-9) and restarted with S3 back; both
    complete, no object is left, and consumers still read everything the broker holds."""
    import signal

    from tests.integration.s3_server import DUMMY_CREDENTIALS, REGION, new_bucket, s3_client

    server = seaweedfs.gateway()  # its own, so stopping it leaves the session's alone
    bucket = new_bucket(server.endpoint)
    args = ("--data-dir", str(tmp_path / "data"),
            "--remote", f"s3://{bucket}/tiered?endpoint_url={server.endpoint}&region={REGION}",
            "--set", f"remote.log.storage.s3.access.key.id={DUMMY_CREDENTIALS['aws_access_key_id']}",
            "--set", f"remote.log.storage.s3.secret.access.key={DUMMY_CREDENTIALS['aws_secret_access_key']}",
            "--set", "remote.log.manager.task.interval.ms=100")
    proxy = start_proxy(noida.bootstrap, tmp_path / "proxy", *args)
    tier = Tier(proxy, tmp_path / "data")
    disabled, deleted = f"disabled-{unique_name}", f"deleted-{unique_name}"
    try:
        admin = Admin("kafka-python", proxy.bootstrap)
        for topic in (disabled, deleted):
            admin.create_topic(topic, PARTITIONS, {"remote.storage.enable": "true", "segment.bytes": "16384",
                                                   "segment.ms": "1000"})
            produce(proxy.bootstrap, topic, 0, BATCH)
        assert wait_until(lambda: all(len(tier.remote_end(t)) == PARTITIONS for t in (disabled, deleted)), 60)

        def objects(topic: str) -> list[str]:
            listing = s3_client(server.endpoint).list_objects_v2(Bucket=bucket)
            return [o["Key"] for o in listing.get("Contents", []) if f"/{topic}-" in o["Key"]]

        assert objects(disabled) and objects(deleted)
        # KIP-917: the S3 store's custom metadata (key prefix, stored size) shows in segment listings.
        import subprocess
        import sys

        listing = subprocess.run([sys.executable, "-m", "proxy.cli", "segments", "--metadata",
                                  f"file://{tmp_path / 'data' / 'metadata'}", "--topic", deleted],
                                 capture_output=True, text=True, timeout=60, check=True).stdout.splitlines()
        assert len(listing) > PARTITIONS
        finished = set()
        for line in listing[1:]:
            cells = line.split("\t")
            assert cells[0] == deleted
            if cells[6] == "COPY_SEGMENT_FINISHED":
                assert cells[8].startswith("prefix=tiered stored_bytes=") and int(cells[8].rsplit("=", 1)[1]) > 0
                finished.add(cells[1])
            else:  # a copy in flight: the storage returns its custom metadata when the copy ends
                assert (cells[6], cells[8]) == ("COPY_SEGMENT_STARTED", "-"), cells
        assert len(finished) == PARTITIONS
        old = [tp for tp in tier.state().partitions if tp.topic == deleted]
        server.stop()
        admin.set_configs(disabled, {"remote.log.disable.policy": "delete", "remote.storage.enable": "false"})
        admin.delete_topic(deleted)
        admin.close()
        time.sleep(3)  # rounds that try and fail
        assert tier.topic_state(disabled).state == TieringState.DISABLING
        assert all(tier.state().partitions[tp].delete_state != RemotePartitionDeleteState.DELETE_PARTITION_FINISHED
                   for tp in old)
        proxy.stop(signal.SIGKILL)

        server.start()
        proxy = start_proxy(noida.bootstrap, tmp_path / "proxy", *args)
        assert wait_until(lambda: tier.topic_state(disabled).state == TieringState.DISABLED, 60)
        assert wait_until(lambda: all(tier.state().partitions[tp].delete_state
                                      == RemotePartitionDeleteState.DELETE_PARTITION_FINISHED for tp in old), 60)
        # The manifests that described them follow within proxy.manifest.interval.ms, and a turn of
        # the writer and S3 (over 10 s once in CI, beside the other worker's tests).
        assert wait_until(lambda: not objects(disabled) and not objects(deleted), 30), \
            (objects(disabled), objects(deleted))
        assert not any(tier.segments(disabled).values())
        check_read("confluent", proxy, disabled, 0, BATCH - 1, earliest(proxy, disabled, noida.bootstrap))
    finally:
        proxy.stop()
        server.stop()


def test_topic_deleted_at_the_broker_is_deleted_from_the_remote_tier(setup, unique_name):
    """Deleted without the proxy: once the topic has been missing from the listings for
    ``proxy.deleted.topic.grace.ms``, its remote partitions are deleted too."""
    broker, proxy, tier = setup
    topic = f"behind-{unique_name}"
    _tiered_topic_with_data(proxy, tier, topic).close()
    old = [tp for tp in tier.state().partitions if tp.topic == topic]
    Admin("confluent", broker.bootstrap).delete_topic(topic)  # straight to the broker
    assert wait_until(lambda: all(tier.state().partitions[tp].delete_state
                                  == RemotePartitionDeleteState.DELETE_PARTITION_FINISHED for tp in old), 30)
    assert not tier.log_objects(topic)
    assert "gone from the cluster" in proxy.log_text()


# --- DescribeConfigs like a broker's describe --all ---------------------------------------------

DYNAMIC_TOPIC_CONFIG, DEFAULT_CONFIG = 1, 5
SHOWN_KEYS = ("remote.storage.enable", "local.retention.ms", "local.retention.bytes", "remote.log.disable.policy")


@pytest.mark.parametrize("admin_client", ADMIN_CLIENTS)
def test_describe_configs_shows_every_tiering_key(proxy, upstream, admin_client, unique_name):
    """Every tiering key for every topic, with its value and source, whatever the broker lists
    for it (noida-db lists remote.storage.enable=false and local.retention.*=-2 as defaults;
    Tansu lists only what was set on the topic)."""
    tiered, plain, at_broker = (f"dc-{kind}-{unique_name}" for kind in ("tiered", "plain", "broker"))
    admin = Admin(admin_client, proxy.bootstrap)
    direct = Admin("kafka-python", upstream.bootstrap)
    try:
        admin.create_topic(tiered, 1, {"remote.storage.enable": "true", "local.retention.ms": "60000",
                                       "remote.log.disable.policy": "delete", "segment.bytes": "1048576"})
        admin.create_topic(plain, 1, {})
        # Set at the broker, which keeps the key (noida-db as the topic's own, DYNAMIC_TOPIC_CONFIG;
        # Tansu in its listing of set keys); the proxy has no record of it.
        direct.create_topic(at_broker, 1, {"local.retention.bytes": "1048576"})
        expected = {
            tiered: {"remote.storage.enable": ("true", DYNAMIC_TOPIC_CONFIG),
                     "local.retention.ms": ("60000", DYNAMIC_TOPIC_CONFIG),
                     "local.retention.bytes": ("-2", DEFAULT_CONFIG),
                     "remote.log.disable.policy": ("delete", DYNAMIC_TOPIC_CONFIG)},
            plain: {"remote.storage.enable": ("false", DEFAULT_CONFIG), "local.retention.ms": ("-2", DEFAULT_CONFIG),
                    "local.retention.bytes": ("-2", DEFAULT_CONFIG),
                    "remote.log.disable.policy": ("retain", DEFAULT_CONFIG)},
            at_broker: {"remote.storage.enable": ("false", DEFAULT_CONFIG), "local.retention.ms": ("-2", DEFAULT_CONFIG),
                        "local.retention.bytes": ("1048576", DYNAMIC_TOPIC_CONFIG),
                        "remote.log.disable.policy": ("retain", DEFAULT_CONFIG)},
        }
        for topic, keys in expected.items():
            described = admin.describe(topic)
            assert {k: (described[k].value, described[k].source) for k in SHOWN_KEYS if k in described} == keys, topic
            if upstream.kind == "noida":  # the broker's own configs stay as it describes them
                assert described["cleanup.policy"].value == "delete"
        described = admin.describe(tiered)
        assert described["segment.bytes"].value == "1048576"  # forwarded to the broker, which lists it
        if admin_client == "kafka-python":  # confluent-kafka asks for no synonyms
            assert described["local.retention.ms"].synonyms == [("local.retention.ms", "60000", DYNAMIC_TOPIC_CONFIG),
                                                                ("log.local.retention.ms", "-2", DEFAULT_CONFIG)]
    finally:
        admin.close()
        direct.close()


def _describe_raw(bootstrap: str, resources: list[tuple[str, list[str] | None]]) -> list[dict]:
    """DescribeConfigs v4 as sent (confluent-kafka cannot name keys: librdkafka sends null)."""
    from protocol.apis import DESCRIBE_CONFIGS

    client = BrokerClient(bootstrap)
    try:
        body = {"resources": [{"resource_type": 2, "resource_name": name, "configuration_keys": keys}
                              for name, keys in resources], "include_synonyms": False, "include_documentation": False}
        return client.request(None, DESCRIBE_CONFIGS, 4, body)["results"]
    finally:
        client.close()


def test_describe_configs_of_named_keys(proxy, upstream, unique_name):
    """Named keys: only those (tiering keys or the broker's); an empty list means every key, as
    Kafka answers; a topic the broker does not have gains no tiering keys."""
    from kafka.admin import ConfigResource, ConfigResourceType

    topic = f"dc-named-{unique_name}"
    admin = Admin("kafka-python", proxy.bootstrap)
    try:
        admin.create_topic(topic, 1, {"remote.storage.enable": "true", "segment.bytes": "1048576"})
        for keys in (["remote.storage.enable", "segment.bytes"], ["local.retention.ms"],
                     ["remote.log.disable.policy", "local.retention.bytes", "no.such.key"], ["cleanup.policy"]):
            result = admin.admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, topic,
                                                                  configs=dict.fromkeys(keys))], config_filter="all")
            got = next(iter(result.values()))[topic]
            listed_by_broker = {"segment.bytes", "cleanup.policy"}  # a named key the broker has
            assert set(got) == {k for k in keys if k in SHOWN_KEYS or k in listed_by_broker}, keys
        (shown,) = _describe_raw(proxy.bootstrap, [(topic, ["remote.storage.enable"])])
        assert [(c["name"], c["value"], c["config_source"]) for c in shown["configs"]] == [
            ("remote.storage.enable", "true", DYNAMIC_TOPIC_CONFIG)]
    finally:
        admin.close()
    everything, missing = _describe_raw(proxy.bootstrap, [(topic, []), (f"missing-{unique_name}", None)])
    names = [c["name"] for c in everything["configs"]]
    assert set(SHOWN_KEYS) <= set(names) and len(names) == len(set(names))
    assert "segment.bytes" in names
    assert missing["configs"] == []  # Kafka and noida-db: UNKNOWN_TOPIC_OR_PARTITION


def test_a_new_topic_waits_for_its_id_as_long_as_the_client_waits(tmp_path):
    """Kafka 4.4 listed a new topic of 5,000 partitions more than 5 s after CreateTopics answered.
    A broker scripted to list its new topic 7 s late: a CreateTopics (v5, which carries no id)
    that gives the broker 30 s gets the topic recorded under the broker's id, not a zero id (which
    the copier would take for another incarnation, and never tier)."""
    topic, topic_id, late_s = "late-listed", uuid.UUID("0b7a6c1e-2f4d-4e8a-9c3b-5d6e7f8091a2"), 7.0
    first_asked: list[float] = []

    def metadata(version: int, request: dict) -> dict:
        named = [t["name"] for t in request["topics"] or []]
        if topic in named and not first_asked:
            first_asked.append(time.monotonic())
        listed = bool(first_asked) and time.monotonic() - first_asked[0] >= late_s
        topics = [{"error_code": 0, "name": topic, "topic_id": topic_id.bytes, "is_internal": False,
                   "partitions": [{"error_code": 0, "partition_index": 0, "leader_id": 1, "leader_epoch": 0,
                                   "replica_nodes": [1], "isr_nodes": [1], "offline_replicas": []}]}] if listed else \
                 [{"error_code": ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "name": topic, "topic_id": bytes(16),
                   "is_internal": False, "partitions": []}] if topic in named else []
        return {"throttle_time_ms": 0, "cluster_id": "scripted", "controller_id": 1, "topics": topics,
                "brokers": [{"node_id": 1, "host": "127.0.0.1", "port": broker.port, "rack": None}]}

    def create_topics(version: int, request: dict) -> dict:
        return {"throttle_time_ms": 0, "topics": [
            {"name": t["name"], "error_code": 0, "error_message": None, "num_partitions": 1, "replication_factor": 1,
             "configs": []} for t in request["topics"]]}

    broker = ScriptedBroker(KAFKA_4_2, {METADATA: metadata, CREATE_TOPICS: create_topics})
    proxy = start_proxy(broker.bootstrap, tmp_path / "proxy", "--data-dir", str(tmp_path / "data"), node_ids=[1])
    try:
        client = RawClient(proxy.bootstrap, timeout=40)
        try:
            answer = client.request(CREATE_TOPICS, 5, {"timeout_ms": 30_000, "validate_only": False, "topics": [
                {"name": topic, "num_partitions": 1, "replication_factor": 1, "assignments": [],
                 "configs": [{"name": "remote.storage.enable", "value": "true"}]}]})
        finally:
            client.close()
        assert [t["error_code"] for t in answer["topics"]] == [0]
        state = Tier(proxy, tmp_path / "data").topic_state(topic)
        assert state is not None and state.topic_id == topic_id, state
        assert time.monotonic() - first_asked[0] >= late_s  # it did wait past the old 5 s
    finally:
        proxy.stop()
        broker.close()
