"""Reading a topic's history with the ``tiered-kafka`` Spark data source vs one kafka-python
consumer reading the same history through the proxy, in one run.

An embedded noida-db holds a 3-partition topic that a proxy has tiered to a local folder and
trimmed (local retention), so nearly all of it is remote. Then, one after the other:

- baseline: one kafka-python consumer through the proxy, offset 0 to the end (``--repeat``
  reads, the median counts);
- the data source's splits read one after the other in this process, without Spark (the Python
  work its executors do: fetching, decoding, Arrow);
- the data source on ``local[1]`` and on ``local[2]``, a new session each; the read is forced with
  Spark's ``noop`` sink, so nothing is written, and timed without session start-up. The first
  read of a session ("first job") also pays for Spark's warm-up: its Python workers start and
  import, the JVM compiles; 3-6 s on this machine whatever the size. The next ``--repeat`` reads
  of the same session ("warm", median) are the data source's throughput.

Prints records/s and payload MB/s, each figure as a ratio of the baseline, and the issue's goals:
warm ``local[2]`` >= 2x the consumer, and ``local[1]`` -> ``local[2]`` near-linear.

    python -m tests.bench.spark_backfill [--megabytes 100] [--segment-mb 4] [--value-bytes 1000] [--repeat 3]
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from proxy.embedded_broker import start_broker
from tests.proxy_process import start_proxy
from tests.tiering_checks import wait_until
from tiering.broker_client import EARLIEST, BrokerClient

PARTITIONS = 3
TOPIC = "history"


def produce(bootstrap: str, megabytes: int, value_bytes: int, segment_mb: int) -> int:
    # local.retention.bytes 1: every tiered segment leaves the broker, only the open one stays (Kafka
    # keeps a segment while dropping it would leave less than the limit, so a limit of one segment
    # kept two of them, and at small sizes most of the history, local).
    config = {"segment.bytes": str(segment_mb << 20), "remote.storage.enable": "true",
              "local.retention.bytes": "1"}
    admin = AdminClient({"bootstrap.servers": bootstrap})  # kept alive until the result arrives
    admin.create_topics([NewTopic(TOPIC, PARTITIONS, 1, config=config)])[TOPIC].result(30)
    time.sleep(1)
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "batch.size": 1 << 20,
                         "compression.type": "lz4", "queue.buffering.max.messages": 1_000_000})
    count = (megabytes << 20) // value_bytes
    rng = random.Random(7)
    half = value_bytes // 2
    for i in range(count):
        value = rng.randbytes(half) + b"x" * (value_bytes - half)  # compressible, not trivially
        while True:
            try:
                producer.produce(TOPIC, key=str(i).encode(), value=value, partition=i % PARTITIONS)
                break
            except BufferError:
                producer.poll(0.1)
    assert producer.flush(120) == 0
    return count


def wait_tiered(client: BrokerClient, timeout: float) -> bool:
    """Until local retention has dropped every tiered segment: each partition's log start is past 0
    and has not moved for 5 s (the copier runs every 200 ms)."""
    seen: list[int] = []
    since = time.monotonic()

    def settled() -> bool:
        nonlocal seen, since
        starts = [client.list_offset(1, TOPIC, p, EARLIEST)[1] for p in range(PARTITIONS)]
        if starts != seen:
            seen, since = starts, time.monotonic()
        return min(starts) > 0 and time.monotonic() - since >= 5

    return wait_until(settled, timeout)


def kafka_python_read(bootstrap: str, count: int) -> tuple[float, int]:
    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, group_id=None,
                             auto_offset_reset="earliest", fetch_max_bytes=64 << 20,
                             max_partition_fetch_bytes=16 << 20)
    tps = [TopicPartition(TOPIC, p) for p in range(PARTITIONS)]
    consumer.assign(tps)
    consumer.seek_to_beginning(*tps)
    got = payload = 0
    started = time.monotonic()
    try:
        while got < count:
            for messages in consumer.poll(timeout_ms=1000, max_records=50_000).values():
                got += len(messages)
                payload += sum(len(m.value) for m in messages)
    finally:
        consumer.close()
    return time.monotonic() - started, payload


def spark_reads(master: str, options: dict[str, str], reads: int) -> tuple[list[float], int]:
    """Seconds of each of ``reads`` whole reads in one new session (the first pays the warm-up),
    and the number of tasks a read has."""
    from tiering.spark.backfill import spark_session

    spark = spark_session(master, "spark-backfill-bench", **{"spark.ui.enabled": "false"})
    try:
        times = []
        for _ in range(reads):
            df = spark.read.format("tiered-kafka").options(**options).load()
            tasks = df.rdd.getNumPartitions()
            started = time.monotonic()
            df.write.format("noop").mode("overwrite").save()
            times.append(time.monotonic() - started)
        return times, tasks
    finally:
        spark.stop()


def in_process_read(options: dict[str, str], count: int) -> tuple[float, int]:
    """Every split of the data source read in this process, one after the other (what its
    executors do in Python, without Spark's scheduling and Arrow hand-over); (seconds, splits)."""
    from tiering.spark.splits import TieredKafkaBatchReader

    reader = TieredKafkaBatchReader(options)
    splits = reader.partitions()
    started = time.monotonic()
    rows = sum(batch.num_rows for split in splits for batch in reader.read(split))
    seconds = time.monotonic() - started
    assert rows == count, f"read {rows} rows of {count}"
    return seconds, len(splits)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--megabytes", type=int, default=100)
    parser.add_argument("--segment-mb", type=int, default=4)
    parser.add_argument("--value-bytes", type=int, default=1000)
    parser.add_argument("--repeat", type=int, default=3, help="consumer reads, and warm reads per Spark session")
    args = parser.parse_args()
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    work = Path(tempfile.mkdtemp(prefix="spark-backfill-bench-"))
    broker = start_broker("noida", work / "broker")
    proxy = None
    try:
        count = produce(broker.bootstrap, args.megabytes, args.value_bytes, args.segment_mb)
        proxy = start_proxy(broker.bootstrap, work / "proxy", "--data-dir", str(work / "data"),
                            "--set", "remote.log.manager.task.interval.ms=200")
        client = BrokerClient(broker.bootstrap)
        assert wait_tiered(client, 600), "tiering did not catch up"
        remote_share = sum(client.list_offset(1, TOPIC, p, EARLIEST)[1] for p in range(PARTITIONS)) / count
        payload = count * args.value_bytes
        print(f"history: {count} records, {payload / 1e6:.0f} MB payload, {remote_share:.0%} only in the remote tier")
        seconds = statistics.median(kafka_python_read(proxy.bootstrap, count)[0] for _ in range(args.repeat))
        base = count / seconds
        rows = [(f"kafka-python consumer through the proxy (median of {args.repeat})", seconds, "-")]
        options = {"kafka.bootstrap.servers": proxy.bootstrap, "subscribe": TOPIC,
                   "remote.log.storage.uri": f"file://{work / 'data' / 'remote'}",
                   "remote.log.metadata.uri": f"file://{work / 'data' / 'metadata'}"}
        seconds, tasks = in_process_read(options, count)
        rows.append(("the source's splits read here, no Spark", seconds, str(tasks)))
        warm: dict[str, float] = {}
        for master in ("local[1]", "local[2]"):
            times, tasks = spark_reads(master, options, 1 + args.repeat)
            warm[master] = statistics.median(times[1:])
            rows.append((f"tiered-kafka, {master}, first job of the session", times[0], str(tasks)))
            rows.append((f"tiered-kafka, {master}, warm (median of {args.repeat})", warm[master], str(tasks)))
        print(f"{'reader':54} {'tasks':>5} {'seconds':>8} {'records/s':>10} {'MB/s':>7} {'vs consumer':>11}")
        for name, seconds, tasks in rows:
            rate = count / seconds
            print(f"{name:54} {tasks:>5} {seconds:8.2f} {rate:10.0f} {payload / seconds / 1e6:7.1f} {rate / base:10.2f}x")
        versus = count / base  # the consumer's seconds
        print(f"\ngoal: warm local[2] >= 2x the consumer: {versus / warm['local[2]']:.2f}x; "
              f"local[1] -> local[2]: {warm['local[1]'] / warm['local[2]']:.2f}x on {os.cpu_count()} cores "
              f"(shared with the broker and the proxy)")
    finally:
        if proxy is not None:
            proxy.stop()
        broker.stop()


if __name__ == "__main__":
    main()
