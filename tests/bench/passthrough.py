"""Pass-through throughput: confluent-kafka direct to the broker vs through the proxy, in one run.

    python tests/bench/passthrough.py [--broker noida|tansu] [--messages N] [--size BYTES]

Prints produce and consume MB/s and msgs/s for both paths and the proxy/direct ratio. Broker,
proxy and client share this machine, so the absolute figures say little; the ratio is the point.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from confluent_kafka import Consumer, Producer, TopicPartition  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402
from tests.upstreams import start_upstream  # noqa: E402

from tests.proxy_process import start_proxy  # noqa: E402

PARTITIONS = 3


def create_topic(bootstrap: str, name: str) -> None:
    futures = AdminClient({"bootstrap.servers": bootstrap}).create_topics([NewTopic(name, PARTITIONS, 1)])
    for f in futures.values():
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
                         "enable.auto.commit": False, "fetch.max.bytes": 52_428_800})
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


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--broker", default="noida", choices=["noida", "tansu"])
    parser.add_argument("--messages", type=int, default=200_000)
    parser.add_argument("--size", type=int, default=512)
    parser.add_argument("--rounds", type=int, default=2, help="consume rounds per path; the best is reported")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-passthrough-"))
    broker = start_upstream(args.broker, work / "broker")
    proxy = start_proxy(broker.bootstrap, work / "proxy")
    try:
        mb = args.messages * args.size / 1e6
        rows = []
        t_direct, t_proxy = f"direct-{uuid.uuid4().hex[:6]}", f"proxy-{uuid.uuid4().hex[:6]}"
        create_topic(broker.bootstrap, t_direct)
        create_topic(broker.bootstrap, t_proxy)
        pd = produce(broker.bootstrap, t_direct, args.messages, args.size)
        pp = produce(proxy.bootstrap, t_proxy, args.messages, args.size)
        rows.append(("produce", pd, pp))
        cd = cp = float("inf")
        for _ in range(args.rounds):
            cd = min(cd, consume(broker.bootstrap, t_direct, args.messages))
            cp = min(cp, consume(proxy.bootstrap, t_direct, args.messages))
        rows.append(("consume", cd, cp))
        print(f"broker={args.broker} messages={args.messages} size={args.size}B ({mb:.1f} MB) client=confluent-kafka")
        print(f"{'workload':<9} {'direct MB/s':>12} {'direct msg/s':>13} {'proxy MB/s':>11} {'proxy msg/s':>12} {'ratio':>6}")
        for name, direct, via in rows:
            print(f"{name:<9} {mb / direct:>12.1f} {args.messages / direct:>13.0f} "
                  f"{mb / via:>11.1f} {args.messages / via:>12.0f} {direct / via:>6.2f}")
    finally:
        proxy.stop()
        broker.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
