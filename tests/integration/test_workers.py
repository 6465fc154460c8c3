"""``proxy.workers=2`` through the real ``tiered-proxy serve``: two worker processes share the
listening ports (SO_REUSEPORT), the kernel spreads connections over both, clients read a tiered
topic's whole history from offset 0, a worker killed with -9 is replaced, and SIGTERM to the
supervisor stops every worker. The metadata store is a topic on Apache Kafka 4.4, as workers require."""

from __future__ import annotations

import os
import random
import re
import signal
import socket
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from confluent_kafka import Producer

from protocol.apis import API_VERSIONS
from proxy.cli import main
from tests.clients import check_every_offset, every_client_reads_at_once, offsets_read
from tests.proxy_process import ProxyProcess, start_proxy
from tests.raw import RawClient
from tests.tiering_checks import create_tiered_topic, wait_until

PARTITIONS = 3
MESSAGES = 6000


def two_free_ports() -> int:
    """A port P with P+1 also free (worker i serves metrics on P+i), below the kernel's ephemeral
    range: a worker started again binds its port again, and in the second between, an outgoing
    connection of any process took an ephemeral one once (the new worker could not serve metrics
    and exited, three times, and the supervisor stopped the proxy)."""
    low, _ = (int(n) for n in Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split())
    rng = random.Random()
    for _ in range(200):
        port = rng.randrange(max(1024, low - 12_000), low - 1)
        try:
            with socket.socket() as a, socket.socket() as b:
                a.bind(("127.0.0.1", port))
                b.bind(("127.0.0.1", port + 1))
            return port
        except OSError:
            continue
    raise AssertionError("no two consecutive free ports")


@dataclass
class Workers:
    proxy: ProxyProcess
    topic: str
    metrics_port: int

    def metric(self, worker: int, name: str) -> float:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_port + worker}/metrics", timeout=10) as r:
            text = r.read().decode()
        return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
                   if line.startswith(name) and line[len(name)] in " {")

    def worker_pids(self) -> dict[int, int]:
        """Worker index -> pid of its latest start, from the supervisor's log lines."""
        return {int(i): int(pid) for i, pid in re.findall(r"worker (\d+) started \(pid (\d+)\)", self.proxy.log_text())}

    def listening(self) -> int:
        return self.proxy.log_text().count("proxy listening on")


@pytest.fixture(scope="module")
def workers(kafka, tmp_path_factory) -> Iterator[Workers]:
    # Kafka keeps the whole log (no local retention set), so the proxy serves the tiered range
    # with remote-preferred routing.
    broker = kafka
    work = tmp_path_factory.mktemp("workers")
    topic = f"workers-{work.name}"
    metrics_port = two_free_ports()
    proxy = start_proxy(broker.bootstrap, work / "proxy", "--metadata", f"topic://meta-{work.name}",
                        "--set", "proxy.workers=2", "--set", "remote.log.manager.task.interval.ms=100",
                        "--set", "proxy.fetch.routing.policy=remote-preferred",
                        "--set", "remote.log.metadata.topic.num.partitions=2",
                        "--set", "remote.log.manager.group.session.timeout.ms=6000",
                        "--set", f"proxy.metrics.listen=127.0.0.1:{metrics_port}", timeout=60)
    state = Workers(proxy, topic, metrics_port)
    try:
        assert wait_until(lambda: state.listening() >= 2, 60), proxy.log_text()[-3000:]
        # Tiered through the proxy, as an operator would (the broker refuses the key itself).
        create_tiered_topic(proxy.bootstrap, topic, PARTITIONS, **{"segment.bytes": str(64 * 1024), "segment.ms": "1000"})
        producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 5, "batch.size": 16 * 1024})
        for i in range(MESSAGES):
            producer.produce(topic, key=str(i).encode(), value=i.to_bytes(4, "big") + bytes(300), partition=i % PARTITIONS)
        assert producer.flush(30) == 0

        def tiered_ends() -> dict[int, int]:
            ends = {p: -1 for p in range(PARTITIONS)}
            for p, end in re.findall(rf"tiered {re.escape(topic)}-(\d+) \(.*?\) offsets \d+\.\.(\d+)", proxy.log_text()):
                ends[int(p)] = max(ends[int(p)], int(end))
            return ends

        # Most of each partition in the remote tier (whichever worker copied it).
        assert wait_until(lambda: min(tiered_ends().values()) >= MESSAGES // PARTITIONS * 3 // 4, 120), \
            (tiered_ends(), proxy.log_text()[-3000:])
        yield state
    finally:
        proxy.stop(timeout=45)


def test_connections_spread_over_both_workers_and_every_client_reads_the_history(workers):
    before = [workers.metric(w, "tiered_proxy_connections_total") for w in (0, 1)]
    raws = [RawClient(workers.proxy.bootstrap) for _ in range(16)]
    try:
        for raw in raws:
            assert raw.request(API_VERSIONS, 0, {})["error_code"] == 0
    finally:
        for raw in raws:
            raw.close()
    accepted = [workers.metric(w, "tiered_proxy_connections_total") - before[w] for w in (0, 1)]
    assert sum(accepted) == 16 and min(accepted) > 0, accepted  # 2 * 2**-16 odds of a false failure
    every_client_reads_at_once(workers.proxy.bootstrap, workers.topic, PARTITIONS, MESSAGES)
    remote = [workers.metric(w, "kafka_server_brokertopicmetrics_remotefetchbytespersec_total") for w in (0, 1)]
    assert sum(remote) > 0, remote


def test_a_worker_killed_with_minus_9_is_replaced(workers):
    old = workers.worker_pids()[1]
    listening = workers.listening()
    os.kill(old, signal.SIGKILL)
    assert wait_until(lambda: workers.worker_pids()[1] != old and workers.listening() > listening, 30), \
        workers.proxy.log_text()[-3000:]
    assert f"worker 1 (pid {old}) exited with -9; restarting it" in workers.proxy.log_text()
    results: dict[str, object] = {}
    offsets_read("confluent", workers.proxy.bootstrap, workers.topic, PARTITIONS, MESSAGES, results)
    check_every_offset(results["confluent"], PARTITIONS, MESSAGES // PARTITIONS)


def test_sigterm_to_the_supervisor_stops_every_worker(workers):
    pids = list(workers.worker_pids().values())
    assert workers.proxy.stop(timeout=45) == 0
    for pid in pids:
        assert wait_until(lambda pid=pid: not _alive(pid), 10), pid


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(") ", 1)[1][0] != "Z"
    except FileNotFoundError:
        return False


def test_more_than_one_worker_needs_a_shared_metadata_store(capsys, tmp_path):
    code = main(["serve", "--bootstrap-servers", "127.0.0.1:1", "--data-dir", str(tmp_path),
                 "--set", "proxy.workers=2"])
    assert code == 2
    err = capsys.readouterr().err
    assert "proxy.workers=2 needs a metadata store the workers share" in err and "--metadata topic://" in err
