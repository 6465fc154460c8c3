"""Pass-through throughput: confluent-kafka direct to the broker vs through the proxy, in one run.

    python tests/bench/passthrough.py [--broker noida|tansu] [--messages N] [--size BYTES]

Prints produce and consume MB/s and msgs/s for both paths and the proxy/direct ratio. Broker,
proxy and client share this machine, so the absolute figures say little; the ratio is the point.
"""

from __future__ import annotations

import argparse
import collections
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from confluent_kafka import Consumer, Producer, TopicPartition  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

from proxy.embedded_broker import start_broker  # noqa: E402
from tests.proxy_process import start_proxy  # noqa: E402

PARTITIONS = 3


def create_topic(bootstrap: str, name: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})  # must outlive its futures
    for f in admin.create_topics([NewTopic(name, PARTITIONS, 1)]).values():
        f.result(30)


def produce(bootstrap: str, topic: str, count: int, size: int) -> float:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "batch.size": 1_000_000,
                         "queue.buffering.max.messages": 1_000_000})
    payload = b"x" * size
    start = time.perf_counter()
    for i in range(count):
        while True:
            try:
                producer.produce(topic, payload, key=str(i).encode())
                break
            except BufferError:
                producer.poll(0.05)
    left = producer.flush(120)
    elapsed = time.perf_counter() - start
    if left:
        raise RuntimeError(f"{left} messages not delivered")
    return elapsed


def consume(bootstrap: str, topic: str, count: int) -> float:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"bench-{uuid.uuid4().hex[:8]}",
                         "enable.auto.commit": False, "fetch.max.bytes": 52_428_800,
                         # noida-db ignores fetch byte limits: allow its large responses.
                         "receive.message.max.bytes": 1_000_000_000})
    consumer.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
    got = 0
    start = time.perf_counter()
    deadline = start + 300
    while got < count and time.perf_counter() < deadline:
        for msg in consumer.consume(10_000, 1.0):
            if msg.error() is None:
                got += 1
    elapsed = time.perf_counter() - start
    consumer.close()
    if got < count:
        raise RuntimeError(f"consumed {got} of {count}")
    return elapsed


def print_profile(path: Path, top: int = 15) -> None:
    """Share of samples in which each function is on the stack (inclusive), highest first."""
    inclusive: collections.Counter[str] = collections.Counter()
    total = 0
    for line in path.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        n = int(count)
        total += n
        for frame in set(stack.split(";")):
            inclusive[frame] += n
    print(f"proxy CPU profile ({total} samples, inclusive share):")
    for frame, n in inclusive.most_common(top):
        print(f"  {100 * n / max(total, 1):5.1f}%  {frame}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--broker", default="noida", choices=["noida", "tansu"])
    parser.add_argument("--messages", type=int, default=100_000)
    parser.add_argument("--size", type=int, default=512)
    parser.add_argument("--rounds", type=int, default=3, help="rounds per path; the best of each is reported")
    parser.add_argument("--profile", metavar="FILE", help="sample the proxy with py-spy into FILE and print its top frames")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-passthrough-"))
    broker = start_broker(args.broker, work / "broker")
    proxy = start_proxy(broker.bootstrap, work / "proxy")
    profiler = None
    if args.profile:
        # py-spy samples the proxy process for the whole run; its top frames say what the CPU does.
        profiler = subprocess.Popen(["py-spy", "record", "-p", str(proxy.process.pid), "-o", args.profile,
                                     "-f", "raw", "-r", "200"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(1)
    try:
        mb = args.messages * args.size / 1e6
        best = {"produce": [float("inf"), float("inf")], "consume": [float("inf"), float("inf")]}
        for _ in range(args.rounds):
            t_direct, t_proxy = f"direct-{uuid.uuid4().hex[:6]}", f"proxy-{uuid.uuid4().hex[:6]}"
            create_topic(broker.bootstrap, t_direct)
            create_topic(broker.bootstrap, t_proxy)
            for i, path in enumerate((broker.bootstrap, proxy.bootstrap)):
                topic = t_direct if i == 0 else t_proxy
                best["produce"][i] = min(best["produce"][i], produce(path, topic, args.messages, args.size))
            for i, path in enumerate((broker.bootstrap, proxy.bootstrap)):
                best["consume"][i] = min(best["consume"][i], consume(path, t_direct, args.messages))
        print(f"broker={args.broker} messages={args.messages} size={args.size}B ({mb:.1f} MB) "
              f"client=confluent-kafka, best of {args.rounds} rounds")
        print(f"{'workload':<9} {'direct MB/s':>12} {'direct msg/s':>13} {'proxy MB/s':>11} {'proxy msg/s':>12} {'ratio':>6}")
        for name, (direct, via) in best.items():
            print(f"{name:<9} {mb / direct:>12.1f} {args.messages / direct:>13.0f} "
                  f"{mb / via:>11.1f} {args.messages / via:>12.0f} {direct / via:>6.2f}")
        if profiler is not None:
            profiler.send_signal(signal.SIGINT)
            profiler.wait(30)
            print_profile(Path(args.profile))
    finally:
        proxy.stop()
        broker.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
