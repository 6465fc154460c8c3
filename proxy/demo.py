"""``tiered-proxy demo``: the product in one command.

It starts an embedded broker and the proxy *with* tiering on loopback, produces a sample through
the proxy into a topic with small segments and ``local.retention.bytes`` set, waits until the
sample is tiered and the proxy has moved the broker's log start past part of it, and then proves
it the way any client would see it: ListOffsets -2/-4/-5/-1 per partition through the proxy, and
the whole history read from offset 0 through the proxy. Then it prints commands to try, and
serves until Ctrl-C. The proxy's status page (both tiers of every partition, drawn) is served on
a free loopback port unless ``proxy.metrics.listen`` says where; the demo prints its address.
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import shutil
import signal
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import trio

from proxy.command_line_config import config_from_args
from proxy.describe import PartitionRow, describe
from proxy.embedded_broker import start_broker
from proxy.filters import build_chain
from proxy.filters.metrics import PrometheusMetrics
from proxy.filters.tiered_reads import TieredReads
from proxy.server import Proxy
from tiering.service import TieringService

DEMO_TOPIC = "demo"
DEMO_PARTITIONS = 3
# Small segments and a small local retention, so a few thousand records roll many segments and
# the proxy moves the broker's log start past most of them (only past what is tiered).
DEMO_SEGMENT_BYTES = 16 * 1024
DEMO_LOCAL_RETENTION_BYTES = 64 * 1024
DEMO_TOPIC_CONFIG = {"remote.storage.enable": "true", "segment.bytes": str(DEMO_SEGMENT_BYTES), "segment.ms": "2000"}
DEMO_VALUE_BYTES = 100  # uncompressed: 10,000 records are ~1.2 MB, ~400 KB a partition
# Tansu keeps everything: it has no retention of its own and its in-memory engine does not
# implement DeleteRecords, so nothing can move its log start (tests/UPSTREAMS.md).
BROKERS_THAT_KEEP_EVERYTHING = ("tansu",)


@dataclass
class HistoryRead:
    """What a consumer read from offset 0 of one partition."""

    count: int = 0
    first: int = -1
    last: int = -1
    duplicates: int = 0
    from_remote: int = 0  # records at offsets only the remote tier could serve
    high_watermark: int = -1  # the log end the proxy's fetch answers reported


def _say(text: str = "") -> None:
    print(text, flush=True)


def produce_sample(bootstrap: str, messages: int, topic_config: dict[str, str]) -> None:
    """Create the demo topic through the proxy and produce ``messages`` records through it."""
    from kafka import KafkaAdminClient, KafkaProducer
    from kafka.admin import NewTopic
    from kafka.errors import TopicAlreadyExistsError

    admin = KafkaAdminClient(bootstrap_servers=bootstrap, client_id="tiered-proxy-demo")
    try:
        admin.create_topics([NewTopic(DEMO_TOPIC, DEMO_PARTITIONS, 1, topic_configs=topic_config)])
    except TopicAlreadyExistsError:
        pass
    finally:
        admin.close()
    producer = KafkaProducer(bootstrap_servers=bootstrap, linger_ms=5, client_id="tiered-proxy-demo")
    step = max(messages // 4, 1)
    for i in range(messages):
        value = f"message {i} ".encode().ljust(DEMO_VALUE_BYTES, b".")
        producer.send(DEMO_TOPIC, key=f"key-{i % 100}".encode(), value=value)
        if (i + 1) % step == 0 or i + 1 == messages:
            _say(f"  produced {i + 1}/{messages}")
    producer.flush()
    producer.close()


def _tiered_and_trimmed(rows: list[PartitionRow], broker_trims: bool) -> bool:
    """Every partition tiered up to its log end and, where the broker can, its log start moved
    past the remote log start."""
    return bool(rows) and all(
        r.ry is not None and r.rx is not None and r.ry + 1 >= r.lz and (r.lx > r.rx or not broker_trims)
        for r in rows)


def wait_for_tiering(bootstrap: str, broker_trims: bool, timeout: float) -> list[PartitionRow]:
    """Ask the proxy (ListOffsets, DescribeLogDirs) until the sample is tiered and trimmed; print
    progress when it changes. Returns the last answer, done or not."""
    deadline = time.monotonic() + timeout
    started = time.monotonic()
    last_line = ""
    rows: list[PartitionRow] = []
    while True:
        rows = describe(bootstrap, DEMO_TOPIC)
        tiered = sum(1 for r in rows if r.ry is not None and r.ry + 1 >= r.lz)
        trimmed = sum(1 for r in rows if r.rx is not None and r.lx > r.rx)
        line = f"  {tiered}/{len(rows)} partitions tiered to their log end"
        if broker_trims:
            line += f", broker log start moved on {trimmed}/{len(rows)}"
        if line != last_line:
            _say(f"{line} ({time.monotonic() - started:.1f}s)")
            last_line = line
        if _tiered_and_trimmed(rows, broker_trims) or time.monotonic() >= deadline:
            return rows
        time.sleep(0.5)


def read_history(bootstrap: str, rows: list[PartitionRow], remote_below: dict[int, int],
                 timeout: float = 60) -> dict[int, HistoryRead]:
    """Read every partition from offset 0 to its log end through the proxy with kafka-python.
    ``remote_below[p]``: offsets below this could only have come from the remote tier."""
    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, client_id="tiered-proxy-demo",
                             auto_offset_reset="earliest")
    partitions = {r.partition: TopicPartition(DEMO_TOPIC, r.partition) for r in rows}
    consumer.assign(list(partitions.values()))
    for tp in partitions.values():
        consumer.seek(tp, 0)
    reads = {p: HistoryRead() for p in partitions}
    seen: dict[int, set[int]] = {p: set() for p in partitions}
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline and any(consumer.position(tp) < _end(consumer, tp, r.lz)
                                                  for r, tp in zip(rows, partitions.values(), strict=True)):
            for tp, records in consumer.poll(timeout_ms=1000).items():
                reads[tp.partition].high_watermark = consumer.highwater(tp) or -1
                read, offsets = reads[tp.partition], seen[tp.partition]
                for record in records:
                    if record.offset in offsets:
                        read.duplicates += 1
                        continue
                    offsets.add(record.offset)
                    read.count += 1
                    read.first = record.offset if read.first < 0 else min(read.first, record.offset)
                    read.last = max(read.last, record.offset)
                    read.from_remote += record.offset < remote_below[tp.partition]
    finally:
        consumer.close()
    return reads


def _end(consumer: object, tp: object, listed_end: int) -> int:
    """Where a partition's log ends: the high watermark of the last fetch answer, once there is
    one (Tansu's ListOffsets LATEST can lag it), else what ListOffsets said."""
    return max(listed_end, consumer.highwater(tp) or -1)  # type: ignore[attr-defined]


def show_proof(rows: list[PartitionRow], reads: dict[int, HistoryRead], broker_trims: bool) -> None:
    header = ("partition", "remote log start (-2)", "broker log start (-4)", "highest tiered (-5)",
              "log end", "read from offset 0", "from the remote tier")
    table = [header]
    for r in rows:
        read = reads[r.partition]
        span = f"{read.count} ({read.first}..{read.last})" if read.count else "0"
        table.append((f"{DEMO_TOPIC}-{r.partition}", str(r.rx), str(r.lx), str(r.ry), str(max(r.lz, read.high_watermark)), span,
                      str(read.from_remote)))
    widths = [max(len(line[i]) for line in table) for i in range(len(header))]
    for line in table:
        _say("  " + "  ".join(cell.rjust(w) if i else cell.ljust(w) for i, (cell, w) in
                              enumerate(zip(line, widths, strict=True))).rstrip())
    total = sum(read.count for read in reads.values())
    remote = sum(read.from_remote for read in reads.values())
    duplicates = sum(read.duplicates for read in reads.values())
    where = ("below the broker's log start: the broker no longer has them" if broker_trims
             else "at tiered offsets, served from the remote tier (remote-preferred routing)")
    _say(f"  read {total} records from offset 0 through the proxy; {remote} of them {where}"
         + (f"; {duplicates} duplicates" if duplicates else ""))


def _command(name: str) -> str:
    """How this user runs our console script (the venv's, when run from one)."""
    script = Path(sys.executable).parent / name
    return str(script) if script.exists() else name


def status_page_url(proxy: Proxy) -> str | None:
    """The address of the proxy's status page (the metrics listener's ``/``), if it serves one."""
    metrics = proxy.find(PrometheusMetrics)
    if not isinstance(metrics, PrometheusMetrics) or metrics.server is None:
        return None
    host = metrics.listen[0]
    if host in ("", "0.0.0.0", "::"):
        host = "127.0.0.1"
    return f"http://{f'[{host}]' if ':' in host else host}:{metrics.port}/"


def show_commands(bootstrap: str, metadata_uri: str, storage_uri: str) -> None:
    python = sys.executable
    consumer = (f"from kafka import KafkaConsumer; c = KafkaConsumer('{DEMO_TOPIC}', bootstrap_servers='{bootstrap}', "
                "auto_offset_reset='earliest', consumer_timeout_ms=5000); "
                "print(sum(1 for _ in c), 'records from offset 0')")
    _say("\nTry it against the running demo (any Kafka client works; point it at the proxy):")
    _say(f"  kcat -C -b {bootstrap} -t {DEMO_TOPIC} -o beginning -e")
    _say(f"  {python} -c \"{consumer}\"")
    _say(f"  {_command('tiered-proxy')} describe --bootstrap-servers {bootstrap} --topic {DEMO_TOPIC}")
    _say(f"  {_command('tiered-proxy')} segments --metadata {metadata_uri} --topic {DEMO_TOPIC}")
    _say(f"  {_command('tiered-proxy')} segments --remote {storage_uri} --topic {DEMO_TOPIC}"
         "   # the same, from the remote tier alone")


async def _demo(args: argparse.Namespace, data_dir: Path) -> int:
    broker = await trio.to_thread.run_sync(start_broker, args.broker, data_dir / "broker")
    try:
        broker_trims = args.broker not in BROKERS_THAT_KEEP_EVERYTHING
        _say(f"Embedded {args.broker} broker on {broker.bootstrap} (data in {data_dir}).")
        extra = {"bootstrap.servers": broker.bootstrap, "proxy.data.dir": str(data_dir / "tiering"),
                 "remote.log.manager.task.interval.ms": "500"}
        if not broker_trims:
            extra["proxy.fetch.routing.policy"] = "remote-preferred"
        config = config_from_args(args, extra)
        if config.metrics_listen is None:
            # The status page shows what the demo proves, drawn: a free loopback port (the
            # demo's default listener port may be taken by another demo's page otherwise).
            config = dataclasses.replace(config, metrics_listen=("127.0.0.1", 0))
        tiering = TieringService.from_properties(config.bootstrap, config.extra)
        if tiering is None:
            raise ValueError("the demo needs tiering: remove remote.log.storage.system.enable=false")
        proxy = Proxy(config, build_chain(config, tiering), [tiering])
        outcome = 0
        async with trio.open_nursery() as nursery:
            await nursery.start(proxy.run)
            nursery.start_soon(_stop_on_signal, nursery.cancel_scope)
            outcome = await _show(args, proxy, tiering, broker_trims)
            if outcome != 0 or args.exit_after:
                nursery.cancel_scope.cancel()
            else:
                _say(f"\nServing on {proxy.bootstrap_address} until Ctrl-C.")
        return outcome
    finally:
        await trio.to_thread.run_sync(broker.stop)


async def _stop_on_signal(scope: trio.CancelScope) -> None:
    with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
        async for _ in signals:
            scope.cancel()
            return


async def _show(args: argparse.Namespace, proxy: Proxy, tiering: TieringService, broker_trims: bool) -> int:
    """Steps 1-3 and the commands to try; 0 when the proof holds. The client work runs on
    threads abandoned on Ctrl-C, so a signal stops the demo at once in any step."""
    bootstrap = proxy.bootstrap_address
    _say(f"Proxy on {bootstrap}, tiering into {tiering.storage_uri}.")
    page = status_page_url(proxy)
    if page is not None:
        _say(f"Status page: {page} (both tiers of every partition; Prometheus metrics at {page}metrics)")
    _say()
    topic_config = dict(DEMO_TOPIC_CONFIG)
    if broker_trims:
        topic_config["local.retention.bytes"] = str(DEMO_LOCAL_RETENTION_BYTES)
    _say(f"1. Producing {args.messages} records through the proxy to topic '{DEMO_TOPIC}' ({DEMO_PARTITIONS} "
         f"partitions; {', '.join(f'{k}={v}' for k, v in topic_config.items())}):")
    await trio.to_thread.run_sync(produce_sample, bootstrap, args.messages, topic_config, abandon_on_cancel=True)
    if broker_trims:
        _say("\n2. Waiting until the proxy has tiered the sample and moved the broker's log start:")
    else:
        _say(f"\n2. Waiting until the proxy has tiered the sample. {args.broker} never moves its log "
             "start (no retention of its own, and DeleteRecords is not implemented by its in-memory "
             "engine), so local retention cannot act on it; the proxy serves every tiered offset from "
             "the remote tier instead (proxy.fetch.routing.policy=remote-preferred):")
    rows = await trio.to_thread.run_sync(wait_for_tiering, bootstrap, broker_trims, args.timeout,
                                         abandon_on_cancel=True)
    if not _tiered_and_trimmed(rows, broker_trims):
        _say(f"tiered-proxy demo: not tiered within {args.timeout:.0f}s; see the log (--log-level INFO)")
        return 1
    remote_below = {r.partition: (r.lx if broker_trims else (r.ry or 0) + 1) for r in rows}
    _say("\n3. Reading the whole history from offset 0 through the proxy:")
    reads = await trio.to_thread.run_sync(read_history, bootstrap, rows, remote_below, abandon_on_cancel=True)
    show_proof(rows, reads, broker_trims)
    reads = proxy.find(TieredReads)
    if isinstance(reads, TieredReads):
        _say(f"  the proxy's own count: {reads.remote_fetch_bytes} bytes served from "
             f"the remote tier in {reads.remote_fetches} remote reads")
    if page is not None:
        _say(f"  the same per partition, drawn (Rx, Ry, Lx, Lz, segments, copy lag): open {page} in a browser")
    show_commands(bootstrap, tiering.metadata_uri, tiering.storage_uri)
    return 0


def run_demo(args: argparse.Namespace, data_dir: Path, owns_data_dir: bool) -> int:
    """``owns_data_dir``: the demo made a temporary one, and removes it when it stops."""
    if args.log_level == "WARNING":
        # The default: the demo's own lines only. kafka-python warns and errs of its own event
        # loop and of races in its close() (a slow machine, a refresh cancelled at close) while
        # nothing failed; the demo checks and prints what it read itself. --log-level INFO shows all.
        logging.getLogger("kafka").setLevel(logging.CRITICAL)
    try:
        return trio.run(_demo, args, data_dir)
    finally:
        if owns_data_dir:
            shutil.rmtree(data_dir, ignore_errors=True)
            _say(f"Demo stopped; removed {data_dir}." if not data_dir.exists()
                 else f"Demo stopped; could not remove all of {data_dir}.")
        else:
            _say(f"Demo stopped; its data is in {data_dir}.")
