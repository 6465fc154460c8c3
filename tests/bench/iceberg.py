"""``tiered-proxy iceberg`` against ``tiered-proxy backfill`` to plain Parquet, on the same tiered
history, in one run (issue 40's goals).

One Apache Kafka 4.4 broker (tests/kafka_cluster.py) and a proxy tiering a 3-partition topic of 1 KiB
JSON records to a local folder, with local retention of one segment, so nearly all of it is only in
the remote tier. Then, alternating, ``--runs`` times each, in the Spark 4.1 environment of the
Iceberg tests (tests/iceberg_spark.py), on ``local[2]``:

- **backfill**: the whole history to a new Parquet folder;
- **iceberg**: the whole history into a new Iceberg table (a new warehouse each time);
- **iceberg, JSON**: the same with ``--value-format json`` (the schema inferred from the first
  10,000 values, each value parsed into ``decoded_value``);
- **iceberg, JSON declared**: the same with the schema given (``--value-schema``), nothing inferred;

each timed from the command's start to its exit (Spark's start included in both), and once more
**iceberg, nothing new**: a run against the last table. Prints the medians and the goals: the
Iceberg run at most 1.2x the backfill, and a run with nothing new under 10 s.

    python -m tests.bench.iceberg [--mb 300] [--runs 3] [--segment-mb 16]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

from confluent_kafka.admin import AdminClient, NewTopic

from tests.delivery import CheckedProducer
from tests.iceberg_spark import iceberg_command
from tests.kafka_cluster import start_single
from tests.proxy_process import start_proxy
from tests.tiering_checks import leader_offsets, wait_until

TOPIC = "events"
PARTITIONS = 3
LATEST_TIERED = -5
VALUE_SCHEMA = "id BIGINT, user STRING, kind STRING, amount BIGINT, pad STRING"


def produce(bootstrap: str, megabytes: int) -> int:
    # Uncompressed, random padding: the log is as large as the payload, so the copier's segments
    # close at their size (a segment held open is not tiered, as the brokers' active one is not).
    producer = CheckedProducer({"bootstrap.servers": bootstrap, "linger.ms": 20, "batch.size": 1 << 20,
                                "queue.buffering.max.messages": 1_000_000})
    count = (megabytes << 20) // 1024
    for i in range(count):
        # A JSON object padded with spaces to exactly 1 KiB (still JSON: --value-format json parses it).
        value = json.dumps({"id": i, "user": f"u{i % 5000}", "kind": ("view", "buy", "cart")[i % 3],
                            "amount": i % 997, "pad": os.urandom(465).hex()})
        producer.produce_waiting(TOPIC, value.encode().ljust(1024), str(i % 5000).encode(), i % PARTITIONS)
    producer.deliver_all(120)
    return count


def timed(command: list[str], env: dict[str, str]) -> float:
    started = time.monotonic()
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=1800, stdin=subprocess.DEVNULL)
    took = time.monotonic() - started
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(command[:4])} failed:\n{done.stderr[-3000:]}")
    dead = [line for line in done.stderr.splitlines() if "_dead_letters" in line and ", 0 to " not in line]
    if dead:
        raise RuntimeError(f"every value here is JSON, yet: {dead}")
    return took


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--mb", type=int, default=300, help="MB of 1 KiB JSON records (default 300)")
    parser.add_argument("--runs", type=int, default=3, help="runs of each (default 3)")
    parser.add_argument("--segment-mb", type=int, default=16, help="the proxy's log.segment.bytes in MiB (default 16)")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="iceberg-bench-"))
    broker = start_single(work / "broker")
    proxy = start_proxy(broker.bootstrap, work / "proxy", "--data-dir", str(work / "data"),
                        "--set", "remote.log.manager.task.interval.ms=500",
                        "--set", f"log.segment.bytes={args.segment_mb << 20}")
    try:
        admin = AdminClient({"bootstrap.servers": proxy.bootstrap})
        admin.create_topics([NewTopic(TOPIC, PARTITIONS, 1, config={
            "remote.storage.enable": "true", "local.retention.bytes": str(args.segment_mb << 20)})])[TOPIC].result(30)
        count = produce(proxy.bootstrap, args.mb)
        ends = leader_offsets(proxy.bootstrap, TOPIC, -1)
        # Tiered up to the copier's open segment: all but at most one segment per partition.
        per_segment = (args.segment_mb << 20) // 1100
        assert wait_until(lambda: all(o + 1 >= ends[p] - per_segment for p, o in
                                      leader_offsets(proxy.bootstrap, TOPIC, LATEST_TIERED).items()), 900)
        tiered = sum(o + 1 for o in leader_offsets(proxy.bootstrap, TOPIC, LATEST_TIERED).values())
        print(f"Kafka 4.4, {count:,} records of 1 KiB JSON in {PARTITIONS} partitions, {tiered:,} tiered", flush=True)
        common = ["--bootstrap-servers", proxy.bootstrap, "--topic", TOPIC, "--remote", f"file://{work}/data/remote",
                  "--metadata", f"file://{work}/data/metadata", "--master", "local[2]"]
        ending = json.dumps({TOPIC: {str(p): o + 1 for p, o in
                                     leader_offsets(proxy.bootstrap, TOPIC, LATEST_TIERED).items()}})
        times: dict[str, list[float]] = {"backfill": [], "iceberg": [], "json": [], "declared": []}
        for run in range(args.runs):
            command, env = iceberg_command(*common, "--output", str(work / f"parquet-{run}"),
                                           "--option", f"endingOffsets={ending}", command="backfill")
            times["backfill"].append(timed(command, env))
            command, env = iceberg_command(*common, "--warehouse", f"file://{work}/warehouse-{run}")
            times["iceberg"].append(timed(command, env))
            command, env = iceberg_command(*common, "--warehouse", f"file://{work}/warehouse-json-{run}",
                                           "--value-format", "json")
            times["json"].append(timed(command, env))
            command, env = iceberg_command(*common, "--warehouse", f"file://{work}/warehouse-declared-{run}",
                                           "--value-format", "json", "--value-schema", VALUE_SCHEMA)
            times["declared"].append(timed(command, env))
            print(f"  run {run + 1}: backfill {times['backfill'][-1]:.1f} s, iceberg {times['iceberg'][-1]:.1f} s, "
                  f"iceberg JSON {times['json'][-1]:.1f} s, declared {times['declared'][-1]:.1f} s", flush=True)
            if run < args.runs - 1:
                shutil.rmtree(work / f"parquet-{run}", ignore_errors=True)
        command, env = iceberg_command(*common, "--warehouse", f"file://{work}/warehouse-{args.runs - 1}")
        nothing_new = timed(command, env)
        backfill, iceberg = statistics.median(times["backfill"]), statistics.median(times["iceberg"])
        decoded, declared = statistics.median(times["json"]), statistics.median(times["declared"])
        mb = tiered * 1024 / 1e6
        print(f"\n{args.runs} runs each, alternating, medians (min-max), local[2], Spark 4.1\n")
        print("| run | seconds | MB/s | ratio to backfill | goal |")
        print("|---|---|---|---|---|")
        print(f"| backfill to Parquet | {backfill:.1f} ({min(times['backfill']):.1f}-{max(times['backfill']):.1f}) | "
              f"{mb / backfill:.1f} | 1.00x | |")
        print(f"| iceberg, whole history | {iceberg:.1f} ({min(times['iceberg']):.1f}-{max(times['iceberg']):.1f}) | "
              f"{mb / iceberg:.1f} | {iceberg / backfill:.2f}x | <= 1.2x |")
        print(f"| iceberg, JSON decoded | {decoded:.1f} ({min(times['json']):.1f}-{max(times['json']):.1f}) | "
              f"{mb / decoded:.1f} | {decoded / backfill:.2f}x | <= 1.2x |")
        print(f"| iceberg, JSON declared | {declared:.1f} ({min(times['declared']):.1f}-{max(times['declared']):.1f}) | "
              f"{mb / declared:.1f} | {declared / backfill:.2f}x | <= 1.2x |")
        print(f"| iceberg, nothing new | {nothing_new:.1f} | | | < 10 s |")
    finally:
        proxy.stop()
        broker.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
