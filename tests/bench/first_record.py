"""The first record from the remote tier, from a proxy that has just started (issue 26), side by side
with a baseline checkout's proxy and with the broker's own local log in one run.

    python -m tests.bench.first_record [--mb 30] [--runs 5] [--shared] [--baseline DIR] [--keep-work-dir]

One single-node Kafka 4.4 broker holds ``--mb`` MB of 1 KiB records in 3 partitions of a topic that
a proxy tiers (1 MiB segments) until the broker's log start has moved past most of it; that proxy
then stops. Each run starts a fresh proxy on the tiered data (``tests/bench/kafka_native.py``'s
``fresh_proxy``: the copier finds nothing to do), waits a second for it to settle, and measures a new
confluent-kafka consumer (read_committed, librdkafka's default) assigned at offset 0 of every
partition, from its creation to its first record: **first** (every cache of the proxy cold, its
connections to the brokers as it made them at start) and, right after, **again** with a second
consumer (the proxy warm). ``--baseline DIR`` (e.g. ``git worktree add /tmp/before <commit>``) runs
that checkout's proxy in the same runs, alternating. **broker** is the floor: the same consumer on a
topic the broker still holds whole, asked directly. Medians [min-max] in ms. The proxies run on CPUs
of their own, the broker and the consumers on the others (tests/cpu_sets.py); ``--shared`` lets
every process run anywhere. Every wait is bounded;
the broker and proxies are stopped at the end, also on an error or Ctrl-C.
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

from confluent_kafka import Producer

from tests.bench import kafka_native as native
from tests.bench.process_hygiene import run_in_work_dir
from tests.cpu_sets import pin_self, placement
from tests.kafka_cluster import start_single
from tests.proxy_process import start_proxy

SEGMENT_BYTES = 1 << 20
WHOLE = "bench-whole"  # a topic the broker keeps whole: the direct floor


def cell(values: list[float]) -> str:
    return f"{statistics.median(values):.0f} [{min(values):.0f}-{max(values):.0f}]"


def run(args: argparse.Namespace, work: Path) -> None:
    where = placement(not args.shared)
    pin_self(where)  # the broker and the consumers inherit it
    broker = start_single(work / "broker")
    tiering = None
    try:
        native.create_topic(broker.bootstrap, native.PROXY, SEGMENT_BYTES)
        native.create_topic(broker.bootstrap, WHOLE, SEGMENT_BYTES)
        producer = Producer({"bootstrap.servers": broker.bootstrap})
        for i in range(3000):
            producer.produce(WHOLE, bytes(native.RECORD_BYTES), partition=i % native.PARTITIONS)
        if producer.flush(60):
            raise RuntimeError(f"{WHOLE}: records undelivered")
        records, _ = native.produce([(broker.bootstrap, [native.PROXY])], args.mb)
        data_dir = work / "proxy-data"
        tiering = start_proxy(broker.bootstrap, work / "tiering", "--data-dir", str(data_dir),
                              "--set", f"log.segment.bytes={SEGMENT_BYTES}",
                              "--set", f"remote.log.manager.task.interval.ms={native.TASK_INTERVAL_MS}")
        log_end = native.list_offsets(broker.bootstrap, native.PROXY, native.LATEST)
        native.tier(native.PROXY, tiering.bootstrap, tiering.bootstrap, broker.bootstrap, native.EARLIEST,
                    lambda ends: native.proxy_done(data_dir, native.PROXY, ends, log_end, SEGMENT_BYTES),
                    lambda ends: native.proxy_tiered_bytes(data_dir, native.PROXY, ends),
                    lambda: native.proxy_trim_target(data_dir, native.PROXY, log_end), records, 60 + args.mb)
        tiering.stop()
        tiering = None
        starts = native.list_offsets(broker.bootstrap, native.PROXY, native.EARLIEST)
        print(f"Kafka {broker.version}: {records:,} records in {native.PROXY}, tiered; the broker's log starts at "
              f"{starts} (offset 0 is in the remote tier only)", flush=True)
        sources: dict[str, Path | None] = {"proxy": None}
        if args.baseline:
            sources["baseline"] = Path(args.baseline)
        first: dict[str, list[float]] = {name: [] for name in sources}
        again: dict[str, list[float]] = {name: [] for name in sources}
        floor: list[float] = []
        for run_no in range(1, args.runs + 1):
            for name, source in sources.items():
                # The copier's next round a minute away: it finds nothing to copy at start.
                proxy = start_proxy(broker.bootstrap, work / name, "--data-dir", str(data_dir),
                                    "--set", "remote.log.manager.task.interval.ms=60000", source=source,
                                    cpus=where.proxy)
                try:
                    time.sleep(1)
                    first[name].append(native.first_record_ms(proxy.bootstrap, native.PROXY))
                    again[name].append(native.first_record_ms(proxy.bootstrap, native.PROXY))
                finally:
                    proxy.stop()
            floor.append(native.first_record_ms(broker.bootstrap, WHOLE))
            print(f"  run {run_no}: " + ", ".join(f"{n} {first[n][-1]:.0f} / {again[n][-1]:.0f} ms" for n in sources)
                  + f", broker {floor[-1]:.0f} ms", flush=True)
    finally:
        if tiering is not None:
            tiering.stop()
        broker.stop()
    print(f"\nfirst record from offset 0 of {native.PROXY} (remote tier only), a new consumer, ms; "
          f"{args.runs} runs, medians [min-max]; CPUs: {where.describe()}\n")
    print("| path | first (fresh proxy) | again (warm proxy) |")
    print("|---|---|---|")
    for name in sources:
        print(f"| {name} | {cell(first[name])} | {cell(again[name])} |")
    print(f"| broker, its own local log (floor) | {cell(floor)} | |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--mb", type=int, default=30, help="MB of 1 KiB records tiered (default 30)")
    parser.add_argument("--runs", type=int, default=5, help="fresh proxies per path (default 5)")
    parser.add_argument("--baseline", metavar="DIR", help="also run the proxy of this checkout, alternating")
    parser.add_argument("--shared", action="store_true", help="let every process run on any CPU, instead of the "
                        "proxies on CPUs of their own and the broker and the consumers on the others")
    parser.add_argument("--keep-work-dir", action="store_true", help="keep the broker's and proxies' folders")
    args = parser.parse_args()
    run_in_work_dir("bench-first-record-", args.keep_work_dir, lambda work: run(args, work))


if __name__ == "__main__":
    main()
