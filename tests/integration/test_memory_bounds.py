"""Bytes the proxy holds for clients stay within its buffers, through the real path: a proxy with
tiny ``proxy.remote.fetch.buffer.max.bytes`` and ``proxy.response.buffer.max.bytes`` in front of
noida-db, a tiered topic the broker has mostly forgotten, and three client libraries backfilling
it at once. The buffers' own metrics say what was held; every record still arrives, a client
that stops reading holds up no one else, and everything held goes back."""

from __future__ import annotations

import socket
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
from confluent_kafka import Producer

from protocol.apis import FETCH
from proxy.embedded_broker import EmbeddedBroker, start_broker
from tests.clients import CLIENTS, check_every_offset, every_client_reads_at_once, offsets_read
from tests.proxy_process import ProxyProcess, free_port, start_proxy
from tests.raw import RawClient
from tests.tiering_checks import create_tiered_topic, wait_until
from tiering.broker_client import EARLIEST, BrokerClient

PARTITIONS = 3
MESSAGES = 6000
BATCH_BYTES = 16 * 1024  # the producer's batch.size: no batch is much larger
REMOTE_BUFFER = 128 * 1024
RESPONSE_BUFFER = 16 * 1024
REMOTE = "proxy.remote.fetch.buffer.max.bytes"
RESPONSE = "proxy.response.buffer.max.bytes"


@dataclass
class Bounded:
    proxy: ProxyProcess
    topic: str
    metrics_url: str
    log_starts: dict[int, int]


@pytest.fixture(scope="module")
def bounded_noida(tmp_path_factory) -> Iterator[EmbeddedBroker]:
    """A broker of its own: on a shared one, another test's proxy (the history's) tiers this topic
    too and its local retention drops records this proxy has not copied yet."""
    broker = start_broker("noida", tmp_path_factory.mktemp("bounded-noida"))
    yield broker
    broker.stop()


@pytest.fixture(scope="module")
def bounded(bounded_noida, tmp_path_factory) -> Iterator[Bounded]:
    broker = bounded_noida
    work = tmp_path_factory.mktemp("bounded")
    topic = f"bounded-{work.name}"
    create_tiered_topic(broker.bootstrap, topic, PARTITIONS, **{"local.retention.bytes": str(128 * 1024)})
    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 5, "batch.size": BATCH_BYTES})
    for i in range(MESSAGES):
        producer.produce(topic, key=str(i).encode(), value=i.to_bytes(4, "big") + bytes(300), partition=i % PARTITIONS)
        if i % 1000 == 0:
            producer.poll(0)
    assert producer.flush(30) == 0
    metrics_port = free_port()
    proxy = start_proxy(broker.bootstrap, work / "proxy", "--data-dir", str(work / "data"),
                        "--set", "remote.log.manager.task.interval.ms=100",
                        "--set", "remote.log.chunk.size.bytes=65536",
                        "--set", f"{REMOTE}={REMOTE_BUFFER}", "--set", f"{RESPONSE}={RESPONSE_BUFFER}",
                        "--set", f"proxy.metrics.listen=127.0.0.1:{metrics_port}")
    try:
        client = BrokerClient(broker.bootstrap)
        leader = client.metadata([topic])[topic].partitions[0].leader

        def log_starts() -> dict[int, int]:
            return {p: client.list_offset(leader, topic, p, EARLIEST)[1] for p in range(PARTITIONS)}

        per_partition = MESSAGES // PARTITIONS
        assert wait_until(lambda: all(s > per_partition // 2 for s in log_starts().values()), 120), log_starts()
        yield Bounded(proxy, topic, f"http://127.0.0.1:{metrics_port}/metrics", log_starts())
    finally:
        proxy.stop()


def buffers(url: str) -> dict[tuple[str, str], float]:
    """(metric, budget) -> value, for the tiered_proxy_buffer* families."""
    with urllib.request.urlopen(url, timeout=10) as response:
        text = response.read().decode()
    out = {}
    for line in text.splitlines():
        if line.startswith("tiered_proxy_buffer") and "{" in line:
            name, rest = line.split("{", 1)
            budget = rest.split('budget="', 1)[1].split('"', 1)[0]
            out[(name, budget)] = float(line.rsplit(" ", 1)[1])
    return out


def test_three_backfills_at_once_stay_within_the_remote_fetch_buffer(bounded):
    every_client_reads_at_once(bounded.proxy.bootstrap, bounded.topic, PARTITIONS, MESSAGES)
    seen = buffers(bounded.metrics_url)
    # Beyond the buffer: per Fetch in flight (one per client), the room it took after waiting
    # half of remote.fetch.max.wait.ms (at most the buffer) and, per partition, the part of one
    # batch past its share.
    slack = len(CLIENTS) * REMOTE_BUFFER + len(CLIENTS) * PARTITIONS * (BATCH_BYTES + 1024)
    assert 0 < seen[("tiered_proxy_buffered_bytes_peak", REMOTE)] <= REMOTE_BUFFER + slack, seen
    # Everything held goes back once the clients have their answers.
    assert wait_until(lambda: all(v == 0 for (name, _), v in buffers(bounded.metrics_url).items()
                                  if name == "tiered_proxy_buffered_bytes"), 10), buffers(bounded.metrics_url)


def test_a_client_that_stops_reading_holds_up_no_other_client(bounded):
    """A raw client pipelines Fetches of the remote range and reads none of the answers; a
    consumer started after it still reads everything, and when the stalled client goes, all it
    held goes back."""
    node, port = next(iter(bounded.proxy.node_ports.items()))
    stalled = RawClient.__new__(RawClient)
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # its kernel takes little of the answers
    sock.connect(("127.0.0.1", port))
    stalled.sock, stalled.next_corr, stalled.sent = sock, 1, {}
    try:
        fetch = {"replica_id": -1, "max_wait_ms": 0, "min_bytes": 1, "max_bytes": 4 << 20, "isolation_level": 0,
                 "topics": [{"topic": bounded.topic, "partitions": [
                     {"partition": p, "fetch_offset": 0, "log_start_offset": -1, "partition_max_bytes": 1 << 20}
                     for p in range(PARTITIONS)]}]}
        for _ in range(4):
            stalled.send(FETCH, 11, fetch)
        assert wait_until(lambda: buffers(bounded.metrics_url)[("tiered_proxy_buffered_bytes", RESPONSE)] > 0, 10)
        started = time.monotonic()
        results: dict[str, object] = {}
        offsets_read("confluent", bounded.proxy.bootstrap, bounded.topic, PARTITIONS, MESSAGES, results)
        check_every_offset(results["confluent"], PARTITIONS, MESSAGES // PARTITIONS)
        assert time.monotonic() - started < 60
        # The stalled client's later Fetches waited for room its first answer holds: the bound held.
        assert buffers(bounded.metrics_url)[("tiered_proxy_buffer_waits_total", REMOTE)] > 0
    finally:
        stalled.close()
    assert wait_until(lambda: all(v == 0 for (name, _), v in buffers(bounded.metrics_url).items()
                                  if name == "tiered_proxy_buffered_bytes"), 10), buffers(bounded.metrics_url)
