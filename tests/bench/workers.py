"""Deep reads by several consumers at once through ``proxy.workers=1`` against ``proxy.workers=N``,
in one run.

An embedded noida-db holds a 3-partition topic that a proxy tiered (metadata topic, local-folder
tier) and trimmed to its open segment, so reading it from offset 0 comes from the remote tier (the
topic and its tiering are tests/bench/spark_backfill.py's). Then, alternating
(1, N, 1, N, ... ``--repeat`` times), a fresh ``tiered-proxy serve`` with that many workers on the
same metadata topic and remote folder, and ``--consumers`` confluent-kafka consumer processes
that each read the whole topic from offset 0 at the same time. Prints, per worker count, the
aggregate payload MB/s (median and range), its ratio to one worker, and the proxy's CPU seconds
per GB served (all its processes). Broker, proxies and consumers share this machine's cores.

    python -m tests.bench.workers [--megabytes 100] [--consumers 4] [--workers 2] [--repeat 3]
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import re
import statistics
import tempfile
import time
from pathlib import Path

from proxy.embedded_broker import start_broker
from tests.bench.spark_backfill import PARTITIONS, TOPIC, produce, wait_tiered
from tests.proxy_process import ProxyProcess, start_proxy
from tests.tiering_checks import wait_until
from tiering.broker_client import BrokerClient

METADATA = "topic://bench-workers-metadata"


def consume(bootstrap: str, count: int, out: mp.Queue) -> None:
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"bench-{os.getpid()}",
                         "enable.auto.commit": False})
    consumer.assign([TopicPartition(TOPIC, p, OFFSET_BEGINNING) for p in range(PARTITIONS)])
    got = payload = 0
    deadline = time.monotonic() + 600
    while got < count and time.monotonic() < deadline:
        for message in consumer.consume(10_000, 1.0):
            if message.error() is None:
                got += 1
                payload += len(message.value())
    consumer.close()
    out.put((got, payload))


def proxy_cpu_seconds(proxy: ProxyProcess) -> float:
    """User + system CPU of the proxy's processes (the supervisor and its workers, if any)."""
    pids = {proxy.process.pid, *(int(p) for p in re.findall(r"started \(pid (\d+)\)", proxy.log_text()))}
    total = 0.0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except FileNotFoundError:
            continue
        total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return total


def measure(bootstrap: str, count: int, consumers: int) -> tuple[float, int]:
    """(seconds, payload bytes) for ``consumers`` processes each reading everything at once."""
    queue: mp.Queue = mp.Queue()
    procs = [mp.Process(target=consume, args=(bootstrap, count, queue)) for _ in range(consumers)]
    started = time.monotonic()
    for p in procs:
        p.start()
    results = [queue.get(timeout=660) for _ in procs]
    elapsed = time.monotonic() - started
    for p in procs:
        p.join(10)
    for got, _ in results:
        assert got >= count, f"a consumer read {got} of {count} records"
    return elapsed, sum(payload for _, payload in results)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--megabytes", type=int, default=100)
    parser.add_argument("--value-bytes", type=int, default=1000)
    parser.add_argument("--segment-mb", type=int, default=4)
    parser.add_argument("--consumers", type=int, default=4)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-workers-"))
    broker = start_broker("noida", work / "broker")
    proxies: list[ProxyProcess] = []
    try:
        count = produce(broker.bootstrap, args.megabytes, args.value_bytes, args.segment_mb)
        common = ("--metadata", METADATA, "--data-dir", str(work / "data"))
        tiering = start_proxy(broker.bootstrap, work / "tiering", *common,
                              "--set", "remote.log.manager.task.interval.ms=200")
        proxies.append(tiering)
        assert wait_tiered(BrokerClient(broker.bootstrap), 600), "tiering did not finish"
        tiering.stop()
        figures: dict[int, list[tuple[float, float]]] = {1: [], args.workers: []}
        for _ in range(args.repeat):
            for workers in (1, args.workers):
                proxy = start_proxy(broker.bootstrap, work / f"w{workers}", *common,
                                    "--set", f"proxy.workers={workers}",
                                    "--set", "remote.log.manager.task.interval.ms=60000", timeout=60)
                proxies.append(proxy)
                assert wait_until(lambda p=proxy, w=workers: p.log_text().count("proxy listening on") >= w, 60)
                cpu_before = proxy_cpu_seconds(proxy)
                seconds, payload = measure(proxy.bootstrap, count, args.consumers)
                cpu = proxy_cpu_seconds(proxy) - cpu_before
                proxy.stop(timeout=45)
                figures[workers].append((payload / seconds / 1e6, cpu / (payload / 1e9)))
                print(f"  workers={workers}: {payload / seconds / 1e6:7.1f} MB/s, proxy CPU "
                      f"{cpu / (payload / 1e9):5.2f} s/GB", flush=True)
    finally:
        for proxy in proxies:
            proxy.stop()
        broker.stop()
    base = statistics.median(mbs for mbs, _ in figures[1])
    print(f"\n{args.consumers} consumers reading {args.megabytes} MB each from offset 0 (remote tier), "
          f"{args.repeat} runs, {os.cpu_count()} cores shared with broker and consumers")
    print(f"{'workers':>8} {'MB/s median':>12} {'range':>15} {'ratio':>7} {'CPU s/GB':>9}")
    for workers, runs in figures.items():
        speeds = [mbs for mbs, _ in runs]
        median = statistics.median(speeds)
        print(f"{workers:>8} {median:>12.1f} {min(speeds):>7.1f}-{max(speeds):<7.1f} {median / base:>7.2f} "
              f"{statistics.median(c for _, c in runs):>9.2f}")


if __name__ == "__main__":
    main()
