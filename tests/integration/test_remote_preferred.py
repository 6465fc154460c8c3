"""The ``remote-preferred`` routing policy on Apache Kafka 4.4 with the topic's whole log kept by the
broker (no local retention set, so without the policy every read would come from the broker): what the proxy serves from the remote tier equals
the broker's own batches byte for byte, and consumers read the whole history from it."""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from protocol.apis import FETCH
from protocol.record_set import iter_batches
from tests.clients import CLIENTS, Record, consume_records, read_to_end
from tests.proxy_process import ProxyProcess, start_proxy
from tests.raw import RawClient
from tests.tiering_checks import create_tiered_topic, direct_log, partitions_of, produce_mixed, wait_until
from tiering.broker_client import BrokerClient
from tiering.metadata.journal_store import JOURNAL_NAME, read_journal
from tiering.metadata.state import MetadataState

PARTITIONS = 3
ABORTED_PREFIXES = (b"tx2-", b"tx5-", b"tx8-")  # produce_mixed aborts every third transaction


@dataclass
class Preferred:
    proxy: ProxyProcess
    topic: str
    everything: dict[int, list[Record]]
    remote_ends: dict[int, int]  # Ry per partition once the fixture was ready


@pytest.fixture(scope="module")
def preferred(kafka, tmp_path_factory) -> Iterator[Preferred]:
    work = tmp_path_factory.mktemp("preferred")
    topic = f"preferred-{work.name}"
    journal = work / "data" / "metadata" / JOURNAL_NAME
    proxy = start_proxy(kafka.bootstrap, work / "proxy", "--data-dir", str(work / "data"),
                        "--set", "remote.log.manager.task.interval.ms=100",
                        "--set", "proxy.fetch.routing.policy=remote-preferred")
    try:
        # Tiered through the proxy (the broker refuses the key itself), filled on the broker.
        create_tiered_topic(proxy.bootstrap, topic, PARTITIONS, **{"segment.bytes": str(64 * 1024), "segment.ms": "1000"})
        produce_mixed(kafka.bootstrap, topic, 30_000, transactions=10, transaction_size=600)
        everything = read_to_end(kafka.bootstrap, topic, PARTITIONS, isolation="read_uncommitted")
        tps = partitions_of(BrokerClient(kafka.bootstrap), topic)

        def remote_ends() -> dict[int, int]:
            state = MetadataState()
            for record in read_journal(journal.read_bytes())[0] if journal.exists() else []:
                state.apply(record)
            ends = {}
            for tp in tps:
                segments = state.finished(tp)
                ends[tp.partition] = segments[-1].end_offset if segments else -1
            return ends

        # Everything but the open segment's tail is tiered once segment.ms has rolled it.
        last = {p: records[-1].offset for p, records in everything.items()}
        assert wait_until(lambda: all(end >= last[p] for p, end in remote_ends().items()), 90), remote_ends()
        yield Preferred(proxy, topic, everything, remote_ends())
    finally:
        proxy.stop()

def _raw_batches(proxy: ProxyProcess, topic: str, partition: int, end: int, *, version: int = 12,
                 topic_id: bytes = b"") -> bytes:
    """Batches of a partition from offset 0 through ``end``, fetched through the proxy (topics by
    name up to v12, by id from v13)."""
    (port,) = proxy.node_ports.values()
    client = RawClient(f"127.0.0.1:{port}")
    out = bytearray()
    offset = 0
    try:
        for _ in range(10_000):
            if offset > end:
                break
            answer = client.request(FETCH, version, {
                "replica_id": -1, "max_wait_ms": 100, "min_bytes": 1, "max_bytes": 256 * 1024, "isolation_level": 0,
                "session_id": 0, "session_epoch": -1, "rack_id": "", "forgotten_topics_data": [],
                "replica_state": {"replica_id": -1, "replica_epoch": -1},
                "topics": [{"topic": topic, "topic_id": topic_id, "partitions": [{
                    "partition": partition, "fetch_offset": offset, "current_leader_epoch": -1,
                    "last_fetched_epoch": -1, "log_start_offset": -1, "partition_max_bytes": 64 * 1024}]}]})
            (part,) = answer["responses"][0]["partitions"]
            assert part["error_code"] == 0, part["error_code"]
            assert len(part["records"]) > 0, f"no records at offset {offset}"
            for header, batch in iter_batches(part["records"]):
                if header.last_offset >= offset and header.base_offset <= end:
                    out += batch
                    offset = header.last_offset + 1
    finally:
        client.close()
    return bytes(out)


def test_remote_batches_equal_the_brokers_own(preferred, kafka):
    client = BrokerClient(kafka.bootstrap)
    for tp in partitions_of(client, preferred.topic):
        end = preferred.remote_ends[tp.partition]
        broker_bytes, _ = direct_log(client, tp)
        broker_prefix = bytearray()
        for header, batch in iter_batches(broker_bytes):
            if header.base_offset <= end:
                broker_prefix += batch
        assert _raw_batches(preferred.proxy, preferred.topic, tp.partition, end) == bytes(broker_prefix)


@pytest.mark.parametrize("version", [13, 15, 16, 17])
def test_fetch_by_topic_id_reads_the_same_batches(preferred, kafka, version):
    """Fetch v13+ names topics by id: the proxy finds the tiered partition by it and answers as by name."""
    client = BrokerClient(kafka.bootstrap)
    topic_id = client.metadata([preferred.topic])[preferred.topic].topic_id.bytes
    for partition in range(PARTITIONS):
        end = preferred.remote_ends[partition]
        by_name = _raw_batches(preferred.proxy, preferred.topic, partition, end)
        assert _raw_batches(preferred.proxy, preferred.topic, partition, end, version=version,
                            topic_id=topic_id) == by_name


@pytest.mark.parametrize("client", CLIENTS)
def test_consumers_read_the_history_from_the_remote_tier(preferred, client):
    total = sum(len(v) for v in preferred.everything.values())
    got = consume_records(client, preferred.proxy.bootstrap, preferred.topic, PARTITIONS, total,
                          isolation="read_uncommitted", timeout=120)
    assert got == preferred.everything


def test_read_committed_gets_its_aborted_transactions_from_the_remote_tier(preferred):
    """The aborted transactions of a remote read come from the remote tier's transaction index."""
    want = {p: [r for r in records if not r.value.startswith(ABORTED_PREFIXES)]
            for p, records in preferred.everything.items()}
    got = consume_records("kafka-python", preferred.proxy.bootstrap, preferred.topic, PARTITIONS,
                          sum(len(v) for v in want.values()), timeout=120)
    assert got == want


def test_the_broker_does_not_hold_a_fetch_the_remote_tier_answers(preferred):
    """The proxy asks the broker for what follows the remote answer; a broker holds a Fetch with
    nothing new for its whole max_wait_ms, unless the proxy shortens it (on Tansu a consumer then
    read 50 MB/s instead of 250, one wait per Fetch)."""
    (port,) = preferred.proxy.node_ports.values()
    client = RawClient(f"127.0.0.1:{port}")
    try:
        started = time.monotonic()
        answer = client.request(FETCH, 12, {
            "replica_id": -1, "max_wait_ms": 5000, "min_bytes": 1, "max_bytes": 1 << 20, "isolation_level": 0,
            "session_id": 0, "session_epoch": -1, "rack_id": "", "forgotten_topics_data": [],
            "topics": [{"topic": preferred.topic, "partitions": [{
                "partition": 0, "fetch_offset": 0, "current_leader_epoch": -1, "last_fetched_epoch": -1,
                "log_start_offset": -1, "partition_max_bytes": 1 << 20}]}]})
        seconds = time.monotonic() - started
    finally:
        client.close()
    (part,) = answer["responses"][0]["partitions"]
    assert part["error_code"] == 0 and len(part["records"]) > 0
    assert seconds < 2.5, f"answered after {seconds:.1f} s: the broker held it for max_wait_ms"


def test_a_clients_last_fetched_epoch_does_not_turn_a_remote_answer_into_a_divergence(preferred):
    """The authorization probe at an offset no log has must not carry the client's last fetched
    epoch: the broker would answer that the epoch ends below the probe (a diverging epoch), and a
    client given that with the remote records throws them away and fetches them again (kafka-python
    stalled so on a partition with two epochs)."""
    (port,) = preferred.proxy.node_ports.values()
    client = RawClient(f"127.0.0.1:{port}")
    try:
        answer = client.request(FETCH, 12, {
            "replica_id": -1, "max_wait_ms": 100, "min_bytes": 1, "max_bytes": 256 * 1024, "isolation_level": 0,
            "session_id": 0, "session_epoch": -1, "rack_id": "", "forgotten_topics_data": [],
            "topics": [{"topic": preferred.topic, "partitions": [{
                "partition": 0, "fetch_offset": 100, "current_leader_epoch": -1,
                "last_fetched_epoch": 0, "log_start_offset": -1, "partition_max_bytes": 64 * 1024}]}]})
    finally:
        client.close()
    (part,) = answer["responses"][0]["partitions"]
    assert part["error_code"] == 0
    assert part["diverging_epoch"]["epoch"] == -1, part["diverging_epoch"]
    assert next(iter(iter_batches(part["records"])))[0].base_offset <= 100


def test_the_remote_tier_served_the_reads(preferred):
    """Last: stop the proxy and read its shutdown line; the reads above came from the remote tier."""
    preferred.proxy.stop()
    line = next(line for line in preferred.proxy.log_text().splitlines() if "tiered reads:" in line)
    remote_bytes = int(line.split("remote fetch bytes ")[1].split(",")[0])
    assert remote_bytes > 0, line

