"""Backfill through the proxy from the remote tier, against reading the same data from the broker.

One run on an embedded noida-db: two topics with identical content are produced; ``direct`` is
never tiered and is read straight from the broker (the baseline), ``tiered`` is tiered by the
proxy, which then moves the broker's log start to the end of what it tiered (local retention), so
reading it from offset 0 through the proxy comes from the remote tier. For each remote tier
(local folder, moto's S3 server over HTTP) a fresh proxy is started, so its caches are cold:

- cold first byte: one raw Fetch at offset 0 (remote) vs the same Fetch of ``direct`` at the broker;
- backfill: a confluent-kafka consumer reads every record from offset 0 (payload MB/s, records/s);
- the proxy's CPU seconds per GB of payload served in that backfill (user + system, from /proc):
  less noisy than throughput on a small machine where broker, proxy and client share the cores;
- the proxy's peak resident memory (VmHWM) at the end of that backfill;
- the proxy's segment chunk cache hit ratio and prefetches for that backfill (from its shutdown line).

    python -m tests.bench.backfill [--megabytes 100] [--segment-mb 2] [--value-bytes 1000]
"""

from __future__ import annotations

import argparse
import os
import random
import re
import statistics
import tempfile
import time
import uuid
from pathlib import Path

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from protocol.apis import FETCH
from proxy.embedded_broker import start_broker
from tests.integration.s3_server import DUMMY_CREDENTIALS, REGION, MotoS3, new_bucket
from tests.proxy_process import ProxyProcess, start_proxy
from tests.raw import RawClient
from tests.tiering_checks import wait_until
from tiering.broker_client import EARLIEST, LATEST, BrokerClient

PARTITIONS = 3


def produce(bootstrap: str, topics: list[str], megabytes: int, value_bytes: int, segment_mb: int,
            tiered: str) -> int:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for topic in topics:
        config = {"segment.bytes": str(segment_mb << 20)}
        if topic == tiered:
            config |= {"remote.storage.enable": "true", "local.retention.bytes": str(segment_mb << 20)}
        admin.create_topics([NewTopic(topic, PARTITIONS, 1, config=config)])[topic].result(30)
    time.sleep(1)
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "batch.size": 1 << 20,
                         "compression.type": "lz4", "queue.buffering.max.messages": 1_000_000,
                         "enable.idempotence": False})
    count = (megabytes << 20) // value_bytes
    rng = random.Random(7)  # the same values in every topic
    half = value_bytes // 2
    for i in range(count):
        # Half random, half repeated: compressible like real payloads, not trivially so.
        value = rng.randbytes(half) + b"x" * (value_bytes - half)
        for topic in topics:
            while True:
                try:
                    producer.produce(topic, value=value, key=str(i).encode(), partition=i % PARTITIONS)
                    break
                except BufferError:
                    producer.poll(0.05)
        if i % 10_000 == 0:
            producer.poll(0)
    assert producer.flush(300) == 0
    return count


def backfill(bootstrap: str, topic: str, expected: int, timeout: float = 600) -> tuple[float, int, int]:
    """Seconds to read ``expected`` records from offset 0, records and payload bytes read."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"bench-{uuid.uuid4().hex[:8]}",
                         "enable.auto.commit": False, "enable.partition.eof": False,
                         "fetch.max.bytes": 64 << 20, "max.partition.fetch.bytes": 8 << 20})
    consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(PARTITIONS)])
    got = size = 0
    started = time.perf_counter()
    deadline = started + timeout
    try:
        while got < expected and time.perf_counter() < deadline:
            for m in consumer.consume(10_000, 0.5):
                if m.error() is not None:
                    if m.error().code() != KafkaError._PARTITION_EOF:
                        raise RuntimeError(m.error())
                    continue
                got += 1
                size += len(m.value()) + len(m.key() or b"")
        return time.perf_counter() - started, got, size
    finally:
        consumer.close()


def first_byte_ms(bootstrap: str, topic: str) -> float:
    """Milliseconds for one Fetch at offset 0 of partition 0 on a new connection."""
    client = RawClient(bootstrap)
    try:
        started = time.perf_counter()
        answer = client.request(FETCH, 12, {
            "replica_id": -1, "max_wait_ms": 100, "min_bytes": 1, "max_bytes": 1 << 20, "isolation_level": 0,
            "session_id": 0, "session_epoch": -1, "rack_id": "", "forgotten_topics_data": [],
            "topics": [{"topic": topic, "partitions": [{"partition": 0, "fetch_offset": 0, "current_leader_epoch": -1,
                                                         "last_fetched_epoch": -1, "log_start_offset": -1,
                                                         "partition_max_bytes": 1 << 20}]}]})
        elapsed = (time.perf_counter() - started) * 1000
    finally:
        client.close()
    (topic_answer,) = answer["responses"]
    (partition,) = topic_answer["partitions"]
    assert partition["error_code"] == 0 and len(partition["records"]) > 0, partition["error_code"]
    return elapsed


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process so far (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def peak_rss_mb(pid: int) -> float:
    """The process's peak resident set size so far (Linux /proc), in MB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024 / 1e6
    return float("nan")


def mostly_trimmed(client: BrokerClient, leader: int, topic: str) -> bool:
    """The broker's log start is past 60% of every partition (the rest: the local retention)."""
    return all(client.list_offset(leader, topic, p, EARLIEST)[1] >= client.list_offset(leader, topic, p, LATEST)[1] * 0.6
               for p in range(PARTITIONS))


def cache_line(proxy: ProxyProcess) -> str:
    match = re.search(r"tiered reads: (.*)", proxy.log_text())
    return match.group(1) if match else "(no stats line)"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--megabytes", type=int, default=100, help="payload per topic")
    parser.add_argument("--segment-mb", type=int, default=2, help="topic segment.bytes in MiB")
    parser.add_argument("--value-bytes", type=int, default=1000)
    parser.add_argument("--repeats", type=int, default=2, help="backfills per tier (median reported)")
    args = parser.parse_args()

    work = Path(tempfile.mkdtemp(prefix="bench-backfill-"))
    broker = start_broker("noida", work / "broker")
    moto = MotoS3()
    moto.start()
    bootstrap = f"{broker.host}:{broker.port}"
    try:
        direct, tiered = "bench-direct", "bench-tiered"
        count = produce(bootstrap, [direct, tiered], args.megabytes, args.value_bytes, args.segment_mb, tiered)
        client = BrokerClient(bootstrap)
        leader = client.metadata([tiered])[tiered].partitions[0].leader
        print(f"{count} records of {args.value_bytes} B per topic, {PARTITIONS} partitions, "
              f"segment.bytes {args.segment_mb} MiB, lz4")

        times = [backfill(bootstrap, direct, count) for _ in range(args.repeats)]
        direct_s = statistics.median(t for t, _, _ in times)
        payload = times[0][2]
        direct_fb = statistics.median(first_byte_ms(bootstrap, direct) for _ in range(3))
        print(f"{'source':<28}{'MB/s':>9}{'rec/s':>11}{'vs direct':>11}{'first byte ms':>15}{'proxy CPU s/GB':>16}{'peak RSS MB':>13}")
        print(f"{'broker, direct':<28}{payload / direct_s / 1e6:>9.1f}{count / direct_s:>11.0f}{1:>11.2f}"
              f"{direct_fb:>15.1f}")

        tiers = {"local folder": [], "moto S3 (HTTP)": []}
        bucket = new_bucket(moto.endpoint)
        tiers["moto S3 (HTTP)"] = [
            "--remote", f"s3://{bucket}/bench?endpoint_url={moto.endpoint}&region={REGION}",
            "--set", f"remote.log.storage.s3.access.key.id={DUMMY_CREDENTIALS['aws_access_key_id']}",
            "--set", f"remote.log.storage.s3.secret.access.key={DUMMY_CREDENTIALS['aws_secret_access_key']}"]
        tiered_topic = tiered
        for name, remote in tiers.items():
            data = work / f"data-{len(name)}"
            if name != "local folder":
                # A second tiered copy of the data for this tier: a new topic, same content.
                tiered_topic = f"{tiered}-s3"
                produce(bootstrap, [tiered_topic], args.megabytes, args.value_bytes, args.segment_mb, tiered_topic)
            proxy = start_proxy(bootstrap, work / f"proxy-{len(name)}", "--data-dir", str(data), *remote,
                                "--set", "remote.log.manager.task.interval.ms=200")
            try:
                assert wait_until(lambda t=tiered_topic: mostly_trimmed(client, leader, t), 300), \
                    "tiering did not finish"
            finally:
                proxy.stop()
            results = []
            for _ in range(args.repeats):
                # A fresh proxy per backfill: cold caches, metadata from its store.
                proxy = start_proxy(bootstrap, work / f"proxy-{len(name)}", "--data-dir", str(data), *remote,
                                    "--set", "remote.log.manager.task.interval.ms=60000")
                try:
                    cold = first_byte_ms(proxy.bootstrap, tiered_topic)
                    cpu = cpu_seconds(proxy.process.pid)
                    seconds, got, size = backfill(proxy.bootstrap, tiered_topic, count)
                    cpu = cpu_seconds(proxy.process.pid) - cpu
                    rss = peak_rss_mb(proxy.process.pid)
                    assert got == count, f"read {got} of {count}"
                finally:
                    proxy.stop()
                results.append((seconds, cold, cache_line(proxy), cpu / (size / 1e9), rss))
            seconds = statistics.median(r[0] for r in results)
            cold = statistics.median(r[1] for r in results)
            cpu_per_gb = statistics.median(r[3] for r in results)
            rss = max(r[4] for r in results)
            print(f"{'proxy, remote ' + name:<28}{payload / seconds / 1e6:>9.1f}{count / seconds:>11.0f}"
                  f"{direct_s / seconds:>11.2f}{cold:>15.1f}{cpu_per_gb:>16.2f}{rss:>13.0f}")
            print(f"    {results[-1][2]}")
        low = [client.list_offset(leader, tiered, p, EARLIEST)[1] for p in range(PARTITIONS)]
        print(f"broker log start of the tiered topic: {low} (of {count // PARTITIONS} per partition)")
    finally:
        moto.stop()
        broker.stop()


if __name__ == "__main__":
    main()
