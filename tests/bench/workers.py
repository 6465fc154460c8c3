"""Reads by several consumers at once through ``proxy.workers=1`` against ``proxy.workers=N``, in
one run, on Apache Kafka 4.4 (issue 26, item 5).

A single-node Kafka 4.4 broker (tests/kafka_cluster.py) holds the same records in two 3-partition
topics, written through a first proxy (tests/bench/backfill.py's data): an untiered one, read
through the proxy's pass-through path, and a tiered one (metadata topic, local-folder tier) whose
log start that proxy moved past all but one segment, so reading it from offset 0 comes from the
remote tier. Then, alternating (1, N, 1, N, ... ``--repeat`` times), a fresh ``tiered-proxy serve``
with that many workers on the same metadata topic and remote folder, and ``--consumers``
confluent-kafka consumer processes that each read a whole topic from offset 0 at the same time,
first the untiered topic, then the tiered one. Prints, per path and worker count, the aggregate
payload MB/s (median and range), its ratio to one worker, and the proxy's CPU seconds per GB served
(all its processes). The proxies, with all their worker processes and threads, run on CPUs of their
own, the broker and the consumers on the others (tests/cpu_sets.py); ``--shared`` lets every process
run anywhere. On two cores the proxy has one: N workers there measure what they cost, not what
they give.

    python -m tests.bench.workers [--megabytes 100] [--consumers 3] [--workers 2] [--repeat 3] [--client raw]
                                  [--shared] [--keep-work-dir]

``--client raw`` reads with tests/bench/wire_speed.py's raw Fetch loop instead of consumers.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import re
import statistics
import time
from pathlib import Path

from tests.bench.backfill import DIRECT_TOPIC, PARTITIONS, TIERED_TOPIC, log_starts, produce
from tests.bench.process_hygiene import run_in_work_dir
from tests.cpu_sets import pin_self, pin_tree, placement
from tests.kafka_cluster import start_single
from tests.proxy_process import ProxyProcess, start_proxy
from tests.tiering_checks import wait_until
from tiering.broker_client import BrokerClient

METADATA = "topic://bench-workers-metadata"
PATHS = {"pass-through": DIRECT_TOPIC, "remote tier": TIERED_TOPIC}


def wait_tiered(client: BrokerClient, timeout: float, topic: str = TIERED_TOPIC) -> bool:
    """Until local retention has moved every partition's log start past 0 and it has not moved for
    5 s (the copier runs every 200 ms)."""
    seen: list[int] = []
    since = time.monotonic()

    def settled() -> bool:
        nonlocal seen, since
        starts = log_starts(client, 1, topic)
        if starts != seen:
            seen, since = starts, time.monotonic()
        return min(starts) > 0 and time.monotonic() - since >= 5

    return wait_until(settled, timeout)


def consume(bootstrap: str, topic: str, count: int, out: mp.Queue) -> None:
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"bench-{os.getpid()}",
                         "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(PARTITIONS)])
    got = payload = 0
    deadline = time.monotonic() + 600
    while got < count and time.monotonic() < deadline:
        for message in consumer.consume(10_000, 1.0):
            if message.error() is None:
                got += 1
                payload += len(message.value())
    consumer.close()
    out.put((got, payload))


def read_raw(bootstrap: str, topic: str, _count: int, out: mp.Queue) -> None:
    """tests/bench/wire_speed.py's raw Fetch loop (one Fetch in flight, batch headers only): a
    client that costs little per byte, so the proxy's share shows. Bytes are record bytes as
    stored (lz4); records, the offsets it reached (the topics hold no control records)."""
    from tests.bench.wire_speed import raw_fetch_loop

    read = raw_fetch_loop(bootstrap, topic, 1)
    out.put((sum(read.end_offsets), read.record_bytes))


CLIENTS = {"confluent": consume, "raw": read_raw}


def proxy_cpu_seconds(proxy: ProxyProcess) -> float:
    """User + system CPU of the proxy's processes (the supervisor and its workers, if any)."""
    pids = {proxy.process.pid, *(int(p) for p in re.findall(r"started \(pid (\d+)\)", proxy.log_text()))}
    return sum(process_cpu_seconds(pid) for pid in pids)


def process_cpu_seconds(pid: int) -> float:
    """User + system CPU of one process, all its threads; 0 once it is gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except FileNotFoundError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def measure(bootstrap: str, topic: str, count: int, consumers: int, client: str) -> tuple[float, int]:
    """(seconds, bytes) for ``consumers`` processes each reading ``topic`` at once."""
    queue: mp.Queue = mp.Queue()
    procs = [mp.Process(target=CLIENTS[client], args=(bootstrap, topic, count, queue)) for _ in range(consumers)]
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
    parser.add_argument("--megabytes", type=int, default=100, help="payload per topic")
    parser.add_argument("--value-bytes", type=int, default=1000)
    parser.add_argument("--segment-mb", type=int, default=4)
    parser.add_argument("--consumers", type=int, default=3)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--client", choices=tuple(CLIENTS), default="confluent",
                        help="confluent: consumer processes, MB/s of payload; raw: raw Fetch loops, MB/s of "
                             "record bytes as stored")
    parser.add_argument("--shared", action="store_true", help="let every process run on any CPU, instead of the "
                        "proxies on CPUs of their own and the broker and the consumers on the others")
    parser.add_argument("--keep-work-dir", action="store_true", help="keep the working folder in /tmp")
    args = parser.parse_args()
    if args.megabytes < 24 * args.segment_mb:
        # Half-random values compress to about half; a partition needs segments beyond the one
        # local retention keeps before any of it is read from the remote tier.
        parser.error(f"--megabytes {args.megabytes} is too little for --segment-mb {args.segment_mb}: "
                     f"at least {24 * args.segment_mb} (3 partitions of several segments each)")
    # Ended by SIGTERM as by Ctrl-C; brokers and proxies still running are stopped, the folder removed.
    run_in_work_dir("bench-workers-", args.keep_work_dir, lambda work: run(args, work))


def run(args: argparse.Namespace, work: Path) -> None:
    where = placement(not args.shared)
    pin_self(where)  # the broker and the consumers inherit it
    broker = start_single(work / "broker")
    proxies: list[ProxyProcess] = []
    figures: dict[tuple[str, int], list[tuple[float, float]]] = {}
    try:
        common = ("--metadata", METADATA, "--data-dir", str(work / "data"))
        tiering = start_proxy(broker.bootstrap, work / "tiering", *common,
                              "--set", "remote.log.manager.task.interval.ms=200")
        proxies.append(tiering)
        # Through the proxy: Kafka without its own tiered storage refuses remote.storage.enable.
        count = produce(tiering.bootstrap, [DIRECT_TOPIC, TIERED_TOPIC], args.megabytes, args.value_bytes,
                        args.segment_mb, "lz4", tiered={TIERED_TOPIC})
        assert wait_tiered(BrokerClient(broker.bootstrap), 600), "tiering did not finish"
        tiering.stop()
        for _ in range(args.repeat):
            for workers in (1, args.workers):
                proxy = start_proxy(broker.bootstrap, work / f"w{workers}", *common,
                                    "--set", f"proxy.workers={workers}",
                                    "--set", "remote.log.manager.task.interval.ms=60000", timeout=60,
                                    cpus=where.proxy)
                proxies.append(proxy)
                assert wait_until(lambda p=proxy, w=workers: p.log_text().count("proxy listening on") >= w, 60)
                if where.proxy is not None:
                    pin_tree(proxy.process.pid, where.proxy)  # workers that started after the first listened
                for path, topic in PATHS.items():
                    cpu_before = proxy_cpu_seconds(proxy)
                    seconds, payload = measure(proxy.bootstrap, topic, count, args.consumers, args.client)
                    cpu = proxy_cpu_seconds(proxy) - cpu_before
                    figures.setdefault((path, workers), []).append((payload / seconds / 1e6, cpu / (payload / 1e9)))
                    print(f"  {path}, workers={workers}: {payload / seconds / 1e6:7.1f} MB/s, proxy CPU "
                          f"{cpu / (payload / 1e9):5.2f} s/GB", flush=True)
                proxy.stop(timeout=45)
    finally:
        for proxy in proxies:
            proxy.stop()
        broker.stop()
    print(f"\n{args.consumers} {args.client} clients each reading {args.megabytes} MB from offset 0 through the proxy, Kafka "
          f"{broker.release.version}, {args.repeat} runs; CPUs: {where.describe()}")
    print(f"{'path':>13} {'workers':>8} {'MB/s median':>12} {'range':>15} {'ratio':>7} {'CPU s/GB':>9}")
    for path in PATHS:
        base = statistics.median(mbs for mbs, _ in figures[(path, 1)])
        for workers in (1, args.workers):
            runs = figures[(path, workers)]
            speeds = [mbs for mbs, _ in runs]
            median = statistics.median(speeds)
            print(f"{path:>13} {workers:>8} {median:>12.1f} {min(speeds):>7.1f}-{max(speeds):<7.1f} "
                  f"{median / base:>7.2f} {statistics.median(c for _, c in runs):>9.2f}")


if __name__ == "__main__":
    main()
