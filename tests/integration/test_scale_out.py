"""Several proxies in front of one cluster share the topic-based metadata store and divide the
copying with a consumer group over the metadata topic's partitions, on Apache Kafka 4.4 (the
topic is tiered through the first proxy, as an operator would: the broker refuses the key)."""

from __future__ import annotations

import re
import signal
import time

from tests.delivery import CheckedProducer
from tests.proxy_process import start_proxy
from tests.tiering_checks import check_contiguous, create_tiered_topic, direct_log, partitions_of, wait_until
from tiering.broker_client import BrokerClient
from tiering.metadata.codec import metadata_partition
from tiering.metadata.view import load_metadata
from tiering.model import TopicIdPartition

PARTITIONS = 6
METADATA_PARTITIONS = 6


class _Segments:
    """The shared store's finished segments, read with a store of the test's own."""

    def __init__(self, uri: str, bootstrap: str) -> None:
        self.uri, self.bootstrap = uri, bootstrap

    def ends(self, tps: list[TopicIdPartition]) -> dict[TopicIdPartition, int]:
        state = load_metadata(self.uri, self.bootstrap, {"remote.log.metadata.topic.num.partitions": METADATA_PARTITIONS})
        return {tp: state.finished(tp)[-1].end_offset for tp in tps if state.finished(tp)}


def _produce(bootstrap: str, topic: str, count: int, start: int) -> None:

    # Batches well under the topic's 128 KiB segment.bytes: Kafka refuses a larger one
    # (RECORD_LIST_TOO_LARGE), and librdkafka's default batch is 1 MB.
    producer = CheckedProducer({"bootstrap.servers": bootstrap, "linger.ms": 5, "batch.size": 16384})
    for i in range(start, start + count):
        producer.produce(topic, key=str(i).encode(), value=f"v{i}-".encode() + bytes(200), partition=i % PARTITIONS)
    producer.deliver_all(30)


def _copied_partitions(log_text: str, topic: str) -> set[int]:
    return {int(m) for m in re.findall(rf"tiered {re.escape(topic)}-(\d+) ", log_text)}


def _owned_metadata_partitions(log_text: str) -> set[int]:
    """What the instance's latest assignment made it copy for (empty before its first)."""
    assignments = re.findall(r"now copying for metadata partitions \[([\d, ]+)\]", log_text)
    return {int(m) for m in assignments[-1].split(",")} if assignments else set()


def test_two_proxies_divide_the_copying_and_one_takes_over(kafka, tmp_path, unique_name):
    topic = f"scale-{unique_name}"
    metadata = f"topic://rlmm-{unique_name}"
    common = ("--metadata", metadata, "--remote", f"file://{tmp_path / 'remote'}",
              "--set", f"remote.log.metadata.topic.num.partitions={METADATA_PARTITIONS}",
              "--set", f"remote.log.manager.group.id=copiers-{unique_name}",
              "--set", "remote.log.manager.group.session.timeout.ms=6000",
              "--set", "remote.log.manager.task.interval.ms=200")
    first = start_proxy(kafka.bootstrap, tmp_path / "a", "--data-dir", str(tmp_path / "a-data"), *common)
    create_tiered_topic(first.bootstrap, topic, PARTITIONS)
    second = start_proxy(kafka.bootstrap, tmp_path / "b", "--data-dir", str(tmp_path / "b-data"), *common)
    client = BrokerClient(kafka.bootstrap)
    tps = partitions_of(client, topic)
    segments = _Segments(metadata, kafka.bootstrap)
    try:
        def divided() -> bool:
            owned_a, owned_b = _owned_metadata_partitions(first.log_text()), _owned_metadata_partitions(second.log_text())
            return bool(owned_a and owned_b and not owned_a & owned_b
                        and owned_a | owned_b == set(range(METADATA_PARTITIONS)))

        assert wait_until(divided, 30)  # both members in the group before there is anything to copy
        owned_a, owned_b = _owned_metadata_partitions(first.log_text()), _owned_metadata_partitions(second.log_text())
        _produce(kafka.bootstrap, topic, 12_000, 0)
        # The last offset each partition holds, from what was produced (every record delivered).
        wanted = {tp: 12_000 // PARTITIONS - 1 for tp in tps}
        assert wait_until(lambda: all(segments.ends(tps).get(tp, -1) >= wanted[tp] for tp in tps), 90)
        # Each instance copies exactly the partitions whose metadata partition it owns. (Which
        # those are follows from the topic id the broker chose, so one instance copies nothing
        # in about one run of 35.)
        by_owner = {owner: {tp.partition for tp in tps if metadata_partition(tp, METADATA_PARTITIONS) in owned}
                    for owner, owned in (("a", owned_a), ("b", owned_b))}
        assert _copied_partitions(first.log_text(), topic) == by_owner["a"]
        assert _copied_partitions(second.log_text(), topic) == by_owner["b"]

        first.stop(signal.SIGKILL)  # its partitions move to the other after the session timeout
        time.sleep(1)
        _produce(kafka.bootstrap, topic, 12_000, 12_000)
        wanted = {tp: 24_000 // PARTITIONS - 1 for tp in tps}
        assert wait_until(lambda: all(segments.ends(tps).get(tp, -1) >= wanted[tp] for tp in tps), 120), \
            (segments.ends(tps), second.log_text()[-3000:])
        assert _copied_partitions(second.log_text(), topic) == set(range(PARTITIONS)), second.log_text()[-3000:]

        # Nothing lost or copied twice: contiguous from 0, and the bytes are the broker's.
        from tiering.metadata.topic_store import TopicMetadataStore
        from tiering.storage.local_folder import LocalFolderStorage

        store = TopicMetadataStore(kafka.bootstrap, tmp_path / "check", topic=metadata.removeprefix("topic://"),
                                   partitions=METADATA_PARTITIONS)
        storage = LocalFolderStorage(tmp_path / "remote")
        try:
            for tp in tps:
                chain = check_contiguous(store, tp)
                remote = b"".join(storage.fetch_log_segment(s, 0) for s in chain)
                assert remote == direct_log(client, tp)[0][:len(remote)]
                assert chain[-1].end_offset >= wanted[tp]
        finally:
            store.close()
            storage.close()
    finally:
        first.stop()
        second.stop()
