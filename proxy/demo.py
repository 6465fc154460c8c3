"""``tiered-proxy demo``: an embedded broker and the proxy on loopback, with a sample round trip.

The sample topic is tiered into a local folder with small segments and ``local.retention.bytes``
set, so the demo shows the copier at work and the proxy moving the broker's log start forward
(only past offsets already in the remote tier).
"""

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
from tiering.broker_client import EARLIEST, BrokerClient
from tiering.service import TieringService

log = logging.getLogger("tiered-proxy.demo")

DEMO_TOPIC = "demo"
# Small enough that a few thousand messages roll several segments and trigger local retention.
DEMO_TOPIC_CONFIG = {"remote.storage.enable": "true", "segment.bytes": str(16 * 1024), "segment.ms": "2000",
                     "local.retention.bytes": str(32 * 1024)}


def sample_round_trip(bootstrap: str, messages: int) -> None:
    """Create the demo topic, produce and read back ``messages`` records through the proxy."""
    from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition
    from kafka.admin import NewTopic
    from kafka.errors import TopicAlreadyExistsError

    admin = KafkaAdminClient(bootstrap_servers=bootstrap, client_id="demo")
    try:
        admin.create_topics([NewTopic(DEMO_TOPIC, 3, 1, topic_configs=DEMO_TOPIC_CONFIG)])
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
        config = config_from_args(args, {
            "bootstrap.servers": broker.bootstrap, "proxy.data.dir": str(data_dir / "tiering"),
            "remote.log.manager.task.interval.ms": "500"})
        tiering = TieringService.from_properties(config.bootstrap, config.extra)
        # Tiering starts after the round trip: reading moved-away offsets back through the proxy
        # needs tiered reads (the next milestone), and the round trip reads from offset 0.
        proxy = Proxy(config)
        with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
            async with trio.open_nursery() as nursery:
                await nursery.start(proxy.run)
                print(f"proxy on {proxy.bootstrap_address}; sample round trip of {args.messages} messages:", flush=True)
                await trio.to_thread.run_sync(sample_round_trip, proxy.bootstrap_address, args.messages)
                if tiering is not None:
                    tiering.start()
                    nursery.start_soon(_stop_on_exit, tiering)
                    await trio.to_thread.run_sync(show_tiering, tiering, broker.bootstrap)
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


async def _stop_on_exit(tiering: TieringService) -> None:
    try:
        await trio.sleep_forever()
    finally:
        with trio.CancelScope(shield=True):
            await trio.to_thread.run_sync(tiering.stop)


def show_tiering(tiering: TieringService, broker_bootstrap: str, timeout: float = 30) -> None:
    """Wait until the copier has tiered the sample and local retention has acted; print both."""
    client = BrokerClient(broker_bootstrap)
    leaders = {p: info.leader for p, info in client.metadata([DEMO_TOPIC])[DEMO_TOPIC].partitions.items()}
    print(f"  tiering {DEMO_TOPIC} into {tiering.storage_uri} ...", flush=True)
    deadline = time.monotonic() + timeout
    lines: list[str] = []
    while time.monotonic() < deadline:
        lines, moved = [], 0
        for tp in sorted(t for t in tiering.metadata.partitions() if t.topic == DEMO_TOPIC):
            segments = tiering.metadata.copied_segments(tp)
            log_start = client.list_offset(leaders[tp.partition], DEMO_TOPIC, tp.partition, EARLIEST)[1]
            moved += log_start > 0
            if segments:
                lines.append(f"  {DEMO_TOPIC}-{tp.partition}: remote offsets {segments[0].start_offset}.."
                             f"{segments[-1].end_offset} in {len(segments)} segments; broker log start {log_start}")
        if len(lines) == len(leaders) and moved == len(leaders):
            break
        time.sleep(0.5)
    client.close()
    print("\n".join(lines) if lines else "  nothing tiered yet", flush=True)
    metrics = tiering.manager.metrics.snapshot()
    print(f"  copied {metrics['copied_segments']} segments ({metrics['copied_bytes']} bytes); "
          f"local retention moved the broker's log start {metrics['local_log_start_moves']} times", flush=True)


def run_demo(args: argparse.Namespace, data_dir: Path) -> int:
    return trio.run(_demo, args, data_dir)
