"""Consumers read a topic's whole history through the proxy after the brokers' log start has moved
past most of it: the old part comes from the remote tier, the rest from the broker."""

from __future__ import annotations

import pytest

from protocol.errors import ErrorCode
from tests.clients import CLIENTS, COMPRESSIONS, Rec, consume_all, produce
from tests.proxy_process import ProxyProcess, start_proxy
from tests.tiering_checks import create_tiered_topic, wait_until
from tiering.broker_client import EARLIEST, BrokerClient

PER_CODEC = 6_000
PARTITIONS = 3


@pytest.fixture(scope="module")
def history(noida, tmp_path_factory) -> tuple[ProxyProcess, str, dict[int, list[tuple[bytes | None, bytes]]], dict]:
    """A tiered topic whose broker log start has moved past most of its history (noida-db, local
    retention run by the proxy), and the proxy that tiered it."""
    work = tmp_path_factory.mktemp("tiered-reads")
    topic = f"history-{work.name}"
    create_tiered_topic(noida.bootstrap, topic, PARTITIONS, **{"segment.bytes": str(32 * 1024),
                                                              "local.retention.bytes": str(64 * 1024)})
    proxy = start_proxy(noida.bootstrap, work / "proxy", "--data-dir", str(work / "data"),
                        "--set", "remote.log.manager.task.interval.ms=100")
    try:
        expected: dict[int, list[tuple[bytes | None, bytes]]] = {p: [] for p in range(PARTITIONS)}
        for codec in COMPRESSIONS:
            records = []
            for i in range(PER_CODEC):
                key = None if i % 10 == 0 else f"{codec}-{i}".encode()
                rec = Rec(i % PARTITIONS, key, f"{codec}-{i}-".encode() + bytes([i % 251]) * (i % 300))
                records.append(rec)
                expected[rec.partition].append((rec.key, rec.value))
            produce("confluent", proxy.bootstrap, topic, records, compression=codec)
        client = BrokerClient(noida.bootstrap)
        leader = client.metadata([topic])[topic].partitions[0].leader

        def log_starts() -> dict[int, int]:
            return {p: client.list_offset(leader, topic, p, EARLIEST)[1] for p in range(PARTITIONS)}

        # Wait until the brokers keep less than half of each partition.
        assert wait_until(lambda: all(s > len(expected[p]) // 2 for p, s in log_starts().items()), 90), log_starts()
        yield proxy, topic, expected, log_starts()
    finally:
        proxy.stop()


@pytest.mark.parametrize("client", CLIENTS)
def test_consumers_read_the_whole_history_through_the_proxy(history, client):
    proxy, topic, expected, log_starts = history
    total = sum(len(v) for v in expected.values())
    consumed = consume_all(client, proxy.bootstrap, topic, PARTITIONS, total, timeout=120)
    for partition, records in expected.items():
        got = consumed.get(partition, [])
        assert [o for o, _, _ in got] == list(range(len(records))), f"partition {partition}: offsets not 0..n-1"
        assert [(k, v) for _, k, v in got] == records, f"partition {partition}: content differs"
        assert log_starts[partition] > 0


def test_the_broker_itself_no_longer_has_the_start(history, noida):
    """What makes the test above meaningful: offset 0 is gone from the broker."""
    _, topic, _, log_starts = history
    client = BrokerClient(noida.bootstrap)
    leader = client.metadata([topic])[topic].partitions[0].leader
    for partition in range(PARTITIONS):
        answer = client.fetch(leader, topic, partition, 0, max_bytes=1 << 20, read_committed=False)
        assert answer.error_code == ErrorCode.OFFSET_OUT_OF_RANGE
        # The proxy keeps tiering and trimming while tests run, so the start only moves forward.
        assert answer.log_start_offset >= log_starts[partition] > 0


def test_list_offsets_earliest_is_the_remote_log_start(history):
    from kafka import KafkaConsumer, TopicPartition

    proxy, topic, expected, log_starts = history
    consumer = KafkaConsumer(bootstrap_servers=proxy.bootstrap)
    try:
        tps = [TopicPartition(topic, p) for p in range(PARTITIONS)]
        assert consumer.beginning_offsets(tps) == {tp: 0 for tp in tps}
        ends = consumer.end_offsets(tps)
        assert ends == {TopicPartition(topic, p): len(v) for p, v in expected.items()}
    finally:
        consumer.close()
