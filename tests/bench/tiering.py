"""Tiering throughput: how fast the proxy's copier moves a backlog to the remote tier.

One run: start an embedded broker, produce a backlog with confluent-kafka (the produce rate is
the baseline printed alongside), then for each remote tier (local folder, SeaweedFS's S3 gateway over
HTTP) start ``tiered-proxy serve`` on the backlog and time it until every byte below the last
stable offset is in COPY_SEGMENT_FINISHED segments. Prints MB/s and the proxy's peak RSS.

    python -m tests.bench.tiering [--broker noida|tansu] [--megabytes 200] [--segment-mb 16]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from protocol.record_set import iter_batches
from proxy.embedded_broker import start_broker
from tests.integration.s3_server import SeaweedFS, new_bucket, s3_uri_args
from tests.proxy_process import start_proxy
from tiering.broker_client import BrokerClient
from tiering.metadata.journal_store import JOURNAL_NAME, read_journal
from tiering.metadata.state import MetadataState
from tiering.model import TopicIdPartition

TOPIC = "bench-tiering"
PARTITIONS = 3
VALUE_BYTES = 1000


def produce(bootstrap: str, megabytes: int, segment_mb: int) -> tuple[float, int]:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    config = {"remote.storage.enable": "true", "segment.bytes": str(segment_mb << 20), "segment.ms": "2000"}
    admin.create_topics([NewTopic(TOPIC, PARTITIONS, 1, config=config)])[TOPIC].result(30)
    time.sleep(1)
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "batch.size": 1 << 20,
                         "queue.buffering.max.messages": 1_000_000, "enable.idempotence": False})
    count = (megabytes << 20) // VALUE_BYTES
    value = b"v" * VALUE_BYTES
    started = time.perf_counter()
    for i in range(count):
        while True:
            try:
                producer.produce(TOPIC, value=value, key=str(i).encode(), partition=i % PARTITIONS)
                break
            except BufferError:
                producer.poll(0.05)
        if i % 10_000 == 0:
            producer.poll(0)
    assert producer.flush(300) == 0
    return time.perf_counter() - started, count


def log_bytes(bootstrap: str) -> tuple[dict[TopicIdPartition, int], int]:
    """Last stable offset per partition, and the bytes below them as the broker serves them."""
    client = BrokerClient(bootstrap)
    info = client.metadata([TOPIC])[TOPIC]
    ends, total = {}, 0
    for p, part in sorted(info.partitions.items()):
        offset = 0
        while True:
            answer = client.fetch(part.leader, TOPIC, p, offset, max_bytes=16 << 20, read_committed=False)
            batches = [(h, len(b)) for h, b in iter_batches(answer.records) if h.last_offset >= offset]
            if not batches:
                break
            total += sum(size for _, size in batches)
            offset = batches[-1][0].last_offset + 1
        ends[TopicIdPartition(info.topic_id, TOPIC, p)] = answer.last_stable_offset
    client.close()
    return ends, total


def tiered_to(journal: Path) -> dict[TopicIdPartition, int]:
    if not journal.exists():
        return {}
    state = MetadataState()
    for record in read_journal(journal.read_bytes())[0]:
        state.apply(record)
    return {tp: s.finished()[-1].end_offset for tp, s in state.partitions.items() if s.finished()}


def peak_rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def run_tier(bootstrap: str, work: Path, name: str, ends: dict[TopicIdPartition, int], *remote: str) -> tuple[float, float]:
    data_dir = work / f"data-{name}"
    proxy = start_proxy(bootstrap, work / f"proxy-{name}", "--data-dir", str(data_dir),
                        "--set", "remote.log.manager.task.interval.ms=100", *remote)
    started = time.perf_counter()
    journal = data_dir / "metadata" / JOURNAL_NAME
    try:
        deadline = time.monotonic() + 1800
        while time.monotonic() < deadline:
            done = tiered_to(journal)
            if all(done.get(tp, -1) + 1 >= end for tp, end in ends.items()):
                break
            time.sleep(0.2)
        else:
            raise SystemExit(f"{name}: not tiered within 30 min; see {proxy.log_path}")
        elapsed = time.perf_counter() - started
        return elapsed, peak_rss_mb(proxy.process.pid)
    finally:
        proxy.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--broker", default="noida", choices=["noida", "tansu"])
    parser.add_argument("--megabytes", type=int, default=200, help="backlog to produce and tier")
    parser.add_argument("--segment-mb", type=int, default=16, help="topic segment.bytes in MiB")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-tiering-"))
    broker = start_broker(args.broker, work / "broker")
    store = SeaweedFS(work / "seaweedfs").start()
    try:
        produce_s, count = produce(broker.bootstrap, args.megabytes, args.segment_mb)
        ends, total = log_bytes(broker.bootstrap)
        mb = total / 1e6
        print(f"broker {args.broker}: {count} messages, {mb:.1f} MB of batches in {PARTITIONS} partitions, "
              f"segment.bytes {args.segment_mb} MiB")
        print(f"{'workload':<28}{'seconds':>9}{'MB/s':>9}{'vs produce':>12}{'proxy peak RSS MB':>20}")
        print(f"{'produce (confluent, direct)':<28}{produce_s:>9.1f}{mb / produce_s:>9.1f}{1.0:>12.2f}{'-':>20}")
        endpoint = store.gateway().endpoint
        for name, remote in [
            ("tier -> local folder", ()),
            ("tier -> SeaweedFS S3", s3_uri_args(new_bucket(endpoint), "bench", endpoint)),
        ]:
            seconds, rss = run_tier(broker.bootstrap, work, name.split()[-1].strip("()"), ends, *remote)
            rate = mb / seconds
            print(f"{name:<28}{seconds:>9.1f}{rate:>9.1f}{rate / (mb / produce_s):>12.2f}{rss:>20.0f}")
    finally:
        store.close()
        broker.stop()


if __name__ == "__main__":
    main()
