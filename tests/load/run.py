"""Load through the proxy: produce, tail consume and backfill at once, from several librdkafka
(confluent-kafka) processes, for a bounded time; prints throughput and p50/p99 latency per
workload, and the proxy's peak RSS and CPU, against the memory bound its configuration implies.

    python -m tests.load.run [--seconds 60] [--producers 2] [--tail-consumers 2] [--backfillers 2]
                             [--history-mb 100]

One embedded noida-db, one ``tiered-proxy serve`` (local-folder tier, caches sized below). The
backfill topic is tiered and trimmed before the clock starts, so backfill reads come from the
remote tier while produce and tail traffic go to the broker.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import random
import statistics
import tempfile
import threading
import time
from pathlib import Path

PARTITIONS = 3
VALUE_BYTES = 512
CHUNK_CACHE = 64 << 20
INDEX_CACHE = 16 << 20
CHUNK = 1 << 20
READER_THREADS = 10
PREFETCH_THREADS = 2
REMOTE_FETCH_BUFFER = 16 << 20  # proxy.remote.fetch.buffer.max.bytes (the default)
RESPONSE_BUFFER = 32 << 20  # proxy.response.buffer.max.bytes (the default)


def _percentiles(values: list[float]) -> tuple[float, float]:
    if not values:
        return float("nan"), float("nan")
    ordered = sorted(values)
    return ordered[len(ordered) // 2], ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]


def producer(bootstrap: str, topic: str, seconds: float, out: mp.Queue) -> None:
    from confluent_kafka import Producer

    latencies: list[float] = []
    sent = [0, 0]  # messages, bytes
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "acks": "all", "compression.type": "lz4",
                  "queue.buffering.max.messages": 200_000})
    payload = os.urandom(VALUE_BYTES)
    deadline = time.monotonic() + seconds

    def delivered(err: object, msg: object, started: float = 0.0) -> None:
        if err is None:
            latencies.append(time.monotonic() - started)
            sent[0] += 1
            sent[1] += VALUE_BYTES

    while time.monotonic() < deadline:
        started = time.monotonic()
        try:
            p.produce(topic, payload, on_delivery=lambda e, m, s=started: delivered(e, m, s))
        except BufferError:
            p.poll(0.05)
        p.poll(0)
    p.flush(30)
    out.put(("produce", sent[0], sent[1], seconds, latencies[::10]))


def tail_consumer(bootstrap: str, topic: str, seconds: float, out: mp.Queue) -> None:
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"tail-{os.getpid()}", "enable.auto.commit": False,
                  "auto.offset.reset": "latest"})
    c.assign([TopicPartition(topic, p, -1) for p in range(PARTITIONS)])  # from the end
    latencies: list[float] = []
    got = size = 0
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        for m in c.consume(1000, 0.5):
            if m.error() is None:
                got += 1
                size += len(m.value())
                latencies.append(time.time() - m.timestamp()[1] / 1000)  # end to end, produce to consume
    c.close()
    out.put(("tail consume", got, size, seconds, latencies[::10]))


def backfiller(bootstrap: str, topic: str, seconds: float, out: mp.Queue) -> None:
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    got = size = 0
    fetch_gaps: list[float] = []
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:  # read the history from offset 0, again and again
        c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"backfill-{os.getpid()}",
                      "enable.auto.commit": False, "fetch.max.bytes": 16 << 20})
        c.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(PARTITIONS)])
        idle = 0
        last = time.monotonic()
        while time.monotonic() < deadline and idle < 3:
            batch = c.consume(5000, 1.0)
            now = time.monotonic()
            if not batch:
                idle += 1
                continue
            idle = 0
            fetch_gaps.append(now - last)  # time to get the next batch of records
            last = now
            for m in batch:
                if m.error() is None:
                    got += 1
                    size += len(m.value())
        c.close()
    out.put(("backfill", got, size, seconds, fetch_gaps))


class Sampler(threading.Thread):
    """The proxy's RSS and CPU time from /proc, once a second."""

    def __init__(self, pid: int) -> None:
        super().__init__(daemon=True)
        self.pid = pid
        self.rss: list[int] = []
        self.cpu: list[tuple[float, float]] = []
        self.stop = threading.Event()

    def run(self) -> None:
        ticks = os.sysconf("SC_CLK_TCK")
        while not self.stop.wait(1.0):
            try:
                status = Path(f"/proc/{self.pid}/status").read_text()
                stat = Path(f"/proc/{self.pid}/stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                return
            self.rss.append(next(int(line.split()[1]) for line in status.splitlines() if line.startswith("VmRSS")) * 1024)
            self.cpu.append((time.monotonic(), (int(stat[11]) + int(stat[12])) / ticks))


def main() -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    from proxy.embedded_broker import start_broker
    from tests.proxy_process import start_proxy
    from tests.tiering_checks import wait_until
    from tiering.broker_client import EARLIEST, BrokerClient

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=60)
    parser.add_argument("--producers", type=int, default=2)
    parser.add_argument("--tail-consumers", type=int, default=2)
    parser.add_argument("--backfillers", type=int, default=2)
    parser.add_argument("--history-mb", type=int, default=100)
    args = parser.parse_args()

    work = Path(tempfile.mkdtemp(prefix="tiered-load-"))
    broker = start_broker("noida", work / "broker")
    proxy = None
    try:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        for topic, config in (("load-history", {"remote.storage.enable": "true", "segment.bytes": str(4 << 20),
                                                "local.retention.bytes": str(4 << 20)}),
                              ("load-live", {})):
            admin.create_topics([NewTopic(topic, PARTITIONS, 1, config=config)])[topic].result(30)
        from confluent_kafka import Producer

        p = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 20, "compression.type": "lz4",
                      "queue.buffering.max.messages": 1_000_000})
        rng = random.Random(3)
        for i in range((args.history_mb << 20) // VALUE_BYTES):
            while True:
                try:
                    p.produce("load-history", rng.randbytes(VALUE_BYTES // 2) + bytes(VALUE_BYTES // 2),
                              partition=i % PARTITIONS)
                    break
                except BufferError:
                    p.poll(0.1)
        p.flush(120)
        proxy = start_proxy(broker.bootstrap, work / "proxy", "--data-dir", str(work / "data"),
                            "--set", "remote.log.manager.task.interval.ms=500",
                            "--set", f"remote.log.chunk.cache.size.bytes={CHUNK_CACHE}",
                            "--set", f"remote.log.index.file.cache.total.size.bytes={INDEX_CACHE}",
                            "--set", f"remote.log.reader.threads={READER_THREADS}")
        client = BrokerClient(broker.bootstrap)
        assert wait_until(lambda: all(client.list_offset(1, "load-history", q, EARLIEST)[1] > 0
                                      for q in range(PARTITIONS)), 300), "history not tiered"
        idle_rss = next(int(line.split()[1]) for line in Path(f"/proc/{proxy.process.pid}/status").read_text()
                        .splitlines() if line.startswith("VmRSS")) * 1024
        sampler = Sampler(proxy.process.pid)
        sampler.start()
        results: mp.Queue = mp.Queue()
        workers = ([mp.Process(target=producer, args=(proxy.bootstrap, "load-live", args.seconds, results))
                    for _ in range(args.producers)]
                   + [mp.Process(target=tail_consumer, args=(proxy.bootstrap, "load-live", args.seconds, results))
                      for _ in range(args.tail_consumers)]
                   + [mp.Process(target=backfiller, args=(proxy.bootstrap, "load-history", args.seconds, results))
                      for _ in range(args.backfillers)])
        for w in workers:
            w.start()
        collected = [results.get(timeout=args.seconds + 180) for _ in workers]
        for w in workers:
            w.join(30)
        sampler.stop.set()
        sampler.join(5)
    finally:
        if proxy is not None:
            proxy.stop()
        broker.stop()

    print(f"load: {args.seconds:.0f}s, {args.producers} producers, {args.tail_consumers} tail consumers, "
          f"{args.backfillers} backfillers (confluent-kafka processes), {args.history_mb} MB tiered history")
    print(f"{'workload':14} {'clients':>7} {'msg/s':>9} {'MB/s':>7} {'p50 ms':>8} {'p99 ms':>8}  latency of")
    meaning = {"produce": "delivery (acks=all)", "tail consume": "produce to consume",
               "backfill": "next batch of 5000 (remote)"}
    for workload in ("produce", "tail consume", "backfill"):
        rows = [r for r in collected if r[0] == workload]
        count = sum(r[1] for r in rows)
        size = sum(r[2] for r in rows)
        p50, p99 = _percentiles([v for r in rows for v in r[4]])
        print(f"{workload:14} {len(rows):>7} {count / args.seconds:9.0f} {size / args.seconds / 1e6:7.1f} "
              f"{p50 * 1000:8.1f} {p99 * 1000:8.1f}  {meaning[workload]}")
    caches = CHUNK_CACHE + INDEX_CACHE + (READER_THREADS + PREFETCH_THREADS) * CHUNK
    buffers = REMOTE_FETCH_BUFFER + RESPONSE_BUFFER
    cpu = [(b[1] - a[1]) / (b[0] - a[0]) for a, b in zip(sampler.cpu, sampler.cpu[1:], strict=False)]
    peak = max(sampler.rss)
    print(f"proxy RSS: idle (tiering done, before load) {idle_rss / 1e6:.0f} MB, peak {peak / 1e6:.0f} MB, "
          f"median {statistics.median(sampler.rss) / 1e6:.0f} MB")
    print(f"bound (docs/operating-tiering.md, Memory): idle + remote-read caches (chunk cache + index cache + one chunk per "
          f"reader/prefetch thread: {caches / 1e6:.0f} MB) + buffers (remote fetch + response: {buffers / 1e6:.0f} MB)"
          f" = {(idle_rss + caches + buffers) / 1e6:.0f} MB; peak is {peak / (idle_rss + caches + buffers):.0%} of it")
    print(f"proxy CPU: mean {statistics.mean(cpu):.0%} of one core, peak {max(cpu):.0%}")


if __name__ == "__main__":
    main()
