"""``tiered-proxy demo``: an embedded broker and the proxy on loopback, with a sample round trip."""

from __future__ import annotations

import argparse
import logging
import signal
import time
from pathlib import Path

import trio

from proxy.cli import config_from_args
from proxy.embedded_broker import start_broker
from proxy.server import Proxy

log = logging.getLogger("tiered-proxy.demo")

DEMO_TOPIC = "demo"


def sample_round_trip(bootstrap: str, messages: int) -> None:
    """Create the demo topic, produce and read back ``messages`` records through the proxy."""
    from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition
    from kafka.admin import NewTopic
    from kafka.errors import TopicAlreadyExistsError

    admin = KafkaAdminClient(bootstrap_servers=bootstrap, client_id="demo")
    try:
        admin.create_topics([NewTopic(DEMO_TOPIC, 3, 1)])
    except TopicAlreadyExistsError:
        pass
    finally:
        admin.close()
    producer = KafkaProducer(bootstrap_servers=bootstrap, compression_type="gzip", linger_ms=5)
    start = time.monotonic()
    step = max(messages // 10, 1)
    for i in range(messages):
        producer.send(DEMO_TOPIC, key=f"key-{i % 100}".encode(), value=f"message {i}".encode())
        if (i + 1) % step == 0:
            print(f"  produced {i + 1}/{messages}", flush=True)
    producer.flush()
    producer.close()
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, consumer_timeout_ms=5000)
    partitions = [TopicPartition(DEMO_TOPIC, p) for p in range(3)]
    consumer.assign(partitions)
    consumer.seek_to_beginning(*partitions)
    ends = consumer.end_offsets(partitions)
    read = sum(1 for _ in consumer)
    consumer.close()
    print(f"  read back {read} records through the proxy in {time.monotonic() - start:.1f}s; "
          f"log end offsets {', '.join(f'p{tp.partition}={o}' for tp, o in sorted(ends.items()))}", flush=True)


async def _demo(args: argparse.Namespace, data_dir: Path) -> int:
    broker = await trio.to_thread.run_sync(start_broker, args.broker, data_dir / "broker")
    try:
        print(f"embedded {args.broker} broker on {broker.bootstrap} (data in {data_dir})", flush=True)
        config = config_from_args(args, {"bootstrap.servers": broker.bootstrap})
        proxy = Proxy(config)
        with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
            async with trio.open_nursery() as nursery:
                await nursery.start(proxy.run)
                print(f"proxy on {proxy.bootstrap_address}; sample round trip of {args.messages} messages:", flush=True)
                await trio.to_thread.run_sync(sample_round_trip, proxy.bootstrap_address, args.messages)
                print(
                    "\nPoint any Kafka client at the proxy, e.g.\n"
                    f"  kcat -b {proxy.bootstrap_address} -t {DEMO_TOPIC} -C -e\n"
                    f"  python -c \"from kafka import KafkaConsumer; "
                    f"print(next(iter(KafkaConsumer('{DEMO_TOPIC}', bootstrap_servers='{proxy.bootstrap_address}', "
                    "auto_offset_reset='earliest'))))\"",
                    flush=True,
                )
                if args.exit_after:
                    nursery.cancel_scope.cancel()
                    return 0
                print("Serving until Ctrl-C.", flush=True)
                async for _ in signals:
                    nursery.cancel_scope.cancel()
                    break
        return 0
    finally:
        await trio.to_thread.run_sync(broker.stop)


def run_demo(args: argparse.Namespace, data_dir: Path) -> int:
    return trio.run(_demo, args, data_dir)
