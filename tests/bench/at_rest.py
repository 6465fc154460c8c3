"""Data at rest: segments stored plain against segments stored sealed (AES-256-GCM per chunk, and
zstd per chunk), side by side in one run on Apache Kafka 4.4, with the plain figures as the baseline.

    python -m tests.bench.at_rest [--mb 200] [--segment-mb 4] [--tier-runs 3] [--runs 3] [--first-runs 9]
                                  [--readers 3] [--zstd-level N] [--s3] [--shared] [--keep-work-dir]

One single-node Kafka 4.4 broker (tests/kafka_cluster.py) and three topics of the same ``--mb`` MB of
JSON events (a web shop's clickstream: random ids, timestamps, users, pages, devices, carts, about
500 B each, no two alike; produced uncompressed, so that compression at rest has something to do; 3
partitions, ``segment.bytes`` = ``--segment-mb``), each tiered by proxies of its own mode, on data
dirs and remote tiers of their own (``{data dir}/remote``; with ``--s3`` a bucket of SeaweedFS's S3
gateway each):

- **plain**: nothing at rest changed: the baseline;
- **AES-GCM**: ``remote.log.storage.encryption.key.ring.file`` and ``.key.id`` (a key ring written with
  ``tiering.storage.key_ring.key_block``): every chunk encrypted under a data key of its segment;
- **AES-GCM + zstd**: the same and ``remote.log.storage.compression.type=zstd`` (``--zstd-level``
  sets ``remote.log.storage.compression.zstd.level``; the proxy's default is 1).

What is measured, in this order:

1. Tiering throughput, ``--tier-runs`` rounds, round-robin over the modes: a new proxy on a new data dir
   (and remote tier) switches tiering of its topic on (``remote.storage.enable=true`` through it) and
   LATEST_TIERED is polled through it every 50 ms until less than one segment is left untiered per
   partition (timed as ``tests/bench/kafka_native.py``'s ``tier`` does): MB/s of logical segment
   bytes (the metadata's sizes) copied to the remote tier, from the broker's whole log. The earlier
   rounds' data dirs are thrown away; in the last round the proxy then also tiers the rest
   (``segment.ms`` 1 s, as tests/bench/archived_reads.py does) and moves the broker's log start past
   it (``local.retention.bytes=1``): that remote tier is the one read below. The tiering proxy's peak
   RSS (VmHWM) is read before it stops. Goal: AES-GCM + zstd at least 0.8x plain.
2. Stored against logical bytes: the kept remote tier's objects of each topic are walked (the folder;
   with ``--s3`` the bucket is listed): the ``.log`` objects' bytes over the logical bytes of the same
   segments (goal for AES-GCM + zstd: at most 0.5), and every object of the topic (indexes and
   envelopes too) against the plain mode's.
3. ``--first-runs`` rounds, round-robin over the modes, of the first record from the remote tier with
   a fresh proxy (tests/bench/first_record.py's measure: the proxy started, a second to settle, then a
   new confluent-kafka consumer assigned at offset 0 of every partition, from its creation to its
   first record; then once more, a new consumer on the same proxy), and of the raw first byte on
   another fresh proxy (tests/bench/backfill.py's ``first_byte_ms``: one Fetch at offset 0 of
   partition 0 on a new connection, 1 MiB, no client library). Goal: AES-GCM within 2 ms of plain.
4. ``--runs`` rounds of reads from offset 0, each on a fresh proxy (cold caches,
   ``proxy.fetch.routing.policy=remote-preferred``: every offset from the remote tier), the three
   modes back to back for each kind of read: one confluent-kafka consumer; ``--readers`` consumers at
   once (each a process of its own, so that one client process's GIL does not cap them; started,
   assigned, then released together; payload MB/s of all of them from the first one's start to the
   last one's end); and tests/bench/backfill.py's raw Fetch loop (one Fetch in flight, nothing
   decoded: what the proxy itself serves). The proxy's peak RSS is read before it stops. Goal:
   AES-GCM at least 0.8x plain.

Printed: progress lines, then a Markdown table: medians [min-max] per mode, AES-GCM / plain and
AES-GCM + zstd / plain (differences in ms for latencies), the goal and whether the medians meet it.
Nothing is asserted. Then what the proxies logged at ERROR (and how many WARNING lines): a product
problem shows there.

The proxies run on CPUs of their own, the broker and the clients on the others (tests/cpu_sets.py);
``--shared`` lets every process run anywhere. At the default size a run takes about 4-5 minutes on a
2-core machine (5 with ``--s3``). Every wait is bounded; the broker, the proxies, the readers and
SeaweedFS are stopped by PID at the end, also on an error, Ctrl-C or SIGTERM; the work folder (in
``$TMPDIR``) is removed unless ``--keep-work-dir``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import random
import re
import select
import shutil
import statistics
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource

from tests.bench import kafka_native as native
from tests.bench.backfill import (
    MEASURING_PROPS,
    REMOTE_PREFERRED_PROPS,
    first_byte_ms,
    peak_rss_mb,
    raw_backfill,
    tiered_read_stats,
)
from tests.bench.process_hygiene import run_in_work_dir
from tests.cpu_sets import Placement, pin_self, placement
from tests.integration.s3_server import SeaweedFS, new_bucket, s3_client, s3_uri_args
from tests.kafka_cluster import start_single
from tests.proxy_process import ProxyProcess, start_proxy
from tiering.storage.at_rest import DEFAULT_ZSTD_LEVEL
from tiering.storage.key_ring import ACTIVE_KEY_ID_CONFIG, KEY_RING_FILE_CONFIG, key_block

REPO = Path(__file__).resolve().parents[2]
PARTITIONS = native.PARTITIONS
KEY_ID = "bench-kek"
TASK_INTERVAL_MS = native.TASK_INTERVAL_MS
READ_TIMEOUT_S = 300


@dataclass(frozen=True)
class Mode:
    name: str
    slug: str
    encrypt: bool
    compress: bool

    @property
    def topic(self) -> str:
        return f"at-rest-{self.slug}"

    def props(self, ring: Path) -> tuple[str, ...]:
        props: tuple[str, ...] = ()
        if self.encrypt:
            props += ("--set", f"{KEY_RING_FILE_CONFIG}={ring}", "--set", f"{ACTIVE_KEY_ID_CONFIG}={KEY_ID}")
        if self.compress:
            props += ("--set", "remote.log.storage.compression.type=zstd")
        return props


PLAIN = Mode("plain", "plain", False, False)
AES = Mode("AES-GCM", "aes", True, False)
AES_ZSTD = Mode("AES-GCM + zstd", "aes-zstd", True, True)
MODES = (PLAIN, AES, AES_ZSTD)


# --- the records -----------------------------------------------------------------------------------

EVENTS = ("page_view", "page_view", "page_view", "search", "add_to_cart", "remove_from_cart", "checkout",
          "purchase", "login", "logout")
COUNTRIES = ("DE", "FR", "US", "US", "GB", "IN", "BR", "JP", "NL", "ES", "IT", "CA", "PL", "SE")
PLANS = ("free", "free", "basic", "pro", "enterprise")
CATEGORIES = ("shoes", "books", "garden", "kitchen", "toys", "audio", "laptops", "phones", "outdoor", "beauty")
BROWSERS = ("Chrome", "Firefox", "Safari", "Edge", "Samsung Internet")
OSES = ("Windows 11", "macOS 14.4", "iOS 17.5", "Android 14", "Ubuntu 24.04", "ChromeOS")
REFERRERS = ("https://www.google.com/", "https://duckduckgo.com/", "https://news.ycombinator.com/", "direct",
             "https://www.bing.com/search", "email:newsletter-2026-11", "https://t.co/")
WORDS = ("sale", "new", "gift", "eco", "premium", "bundle", "clearance", "limited", "bestseller", "refurbished",
         "wireless", "organic", "kids", "pro", "compact", "large", "blue", "black", "steel", "cotton")


def json_event(rng: random.Random, i: int, base_ms: int) -> bytes:
    """One event as a web shop's clickstream might carry it: varied fields, random ids, no padding."""
    kind = rng.choice(EVENTS)
    items = [{"sku": f"SKU-{rng.randrange(100_000):05d}", "qty": rng.randint(1, 4),
              "price": round(rng.uniform(2, 400), 2), "category": rng.choice(CATEGORIES)}
             for _ in range(rng.choice((0, 0, 1, 1, 2, 3, 5)) if kind in ("add_to_cart", "checkout", "purchase") else 0)]
    category = rng.choice(CATEGORIES)
    event = {
        "event_id": uuid.UUID(int=rng.getrandbits(128), version=4).hex,
        "type": kind,
        "ts": base_ms + i * 3 + rng.randrange(3),
        "user": {"id": rng.randrange(5_000_000), "country": rng.choice(COUNTRIES), "plan": rng.choice(PLANS),
                 "logged_in": rng.random() < 0.7},
        "session": f"{rng.getrandbits(64):016x}",
        "page": f"/{category}/{rng.choice(WORDS)}-{rng.choice(WORDS)}/p/{rng.randrange(1_000_000)}",
        "referrer": rng.choice(REFERRERS),
        "device": {"os": rng.choice(OSES), "browser": rng.choice(BROWSERS),
                   "version": f"{rng.randint(90, 131)}.0.{rng.randrange(7000)}.{rng.randrange(200)}",
                   "screen": rng.choice(("1920x1080", "1440x900", "390x844", "412x915", "2560x1440"))},
        "ip": f"{rng.randint(1, 223)}.{rng.randrange(256)}.{rng.randrange(256)}.{rng.randint(1, 254)}",
        "latency_ms": round(rng.lognormvariate(4, 0.6), 1),
        "tags": rng.sample(WORDS, rng.randint(0, 4)),
        "experiment": {"id": f"exp-{rng.randrange(40)}", "arm": rng.choice(("control", "a", "b"))}
        if rng.random() < 0.4 else None,
    }
    if kind == "search":
        event["query"] = " ".join(rng.sample(WORDS, rng.randint(1, 3)))
        event["results"] = rng.randrange(500)
    if items:
        event["cart"] = {"items": items, "total": round(sum(x["qty"] * x["price"] for x in items), 2),
                         "currency": rng.choice(("EUR", "USD", "GBP"))}
    return json.dumps(event, separators=(",", ":")).encode()


def produce_events(bootstrap: str, topics: list[str], megabytes: int) -> tuple[int, int, float]:
    """The same JSON events (uncompressed) into every topic, round-robin over the partitions, until
    ``megabytes`` MB of values per topic; (records per topic, value bytes per topic, seconds)."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "batch.size": 1 << 20,
                         "queue.buffering.max.messages": 1_000_000, "enable.idempotence": False,
                         "compression.type": "none"})
    rng = random.Random(2026)
    base_ms = int(time.time() * 1000) - 86_400_000
    count = size = 0
    started = time.perf_counter()
    while size < megabytes * 1_000_000:
        value = json_event(rng, count, base_ms)
        for topic in topics:
            while True:
                try:
                    producer.produce(topic, value=value, partition=count % PARTITIONS)
                    break
                except BufferError:
                    producer.poll(0.05)
        count += 1
        size += len(value)
        if count % 20_000 == 0:
            producer.poll(0)
    if producer.flush(300) != 0:
        raise RuntimeError("records left undelivered")
    return count, size, time.perf_counter() - started


# --- reading -----------------------------------------------------------------------------------------


def read_one(bootstrap: str, topic: str, expected: int) -> None:
    """A reader process (``--read-one``): a confluent-kafka consumer assigned at offset 0 of every
    partition says ``ready``, waits for ``go`` on stdin, reads ``expected`` records and prints its
    payload bytes and its monotonic start and end (comparable across processes on Linux) as JSON."""
    consumer = Consumer(native.consumer_config(bootstrap))
    try:
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(PARTITIONS)])
        print("ready", flush=True)
        if sys.stdin.readline().strip() != "go":
            return
        started = time.monotonic()
        got, size = native.drain(consumer, expected, READ_TIMEOUT_S)
        ended = time.monotonic()
    finally:
        consumer.close()
    print(json.dumps({"records": got, "bytes": size, "start": started, "end": ended}), flush=True)


def _stop_reader(process: subprocess.Popen) -> None:
    if process.poll() is None:
        process.kill()
    process.wait(10)


def readers_mb_per_s(bootstrap: str, topic: str, expected: int, readers: int) -> float:
    """``readers`` reader processes at once, released together: payload MB/s of all of them, from the
    first one's start to the last one's end."""
    processes = [subprocess.Popen([sys.executable, "-m", "tests.bench.at_rest", "--read-one", bootstrap, topic,
                                   str(expected)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                                  cwd=REPO) for _ in range(readers)]
    try:
        deadline = time.monotonic() + 60
        for p in processes:
            assert p.stdout is not None
            ready, _, _ = select.select([p.stdout], [], [], max(0.0, deadline - time.monotonic()))
            if not ready or p.stdout.readline().strip() != "ready":
                raise RuntimeError(f"reader {p.pid} did not get ready (exit code {p.poll()})")
        for p in processes:
            assert p.stdin is not None
            p.stdin.write("go\n")
            p.stdin.flush()
        results = []
        for p in processes:
            out, _ = p.communicate(timeout=READ_TIMEOUT_S + 30)
            lines = out.strip().splitlines()
            if p.returncode != 0 or not lines:
                raise RuntimeError(f"reader {p.pid} exited {p.returncode}")
            results.append(json.loads(lines[-1]))
    finally:
        for p in processes:
            _stop_reader(p)
    short = [r["records"] for r in results if r["records"] != expected]
    if short:
        raise RuntimeError(f"readers read {short} of {expected} records of {topic}")
    seconds = max(r["end"] for r in results) - min(r["start"] for r in results)
    return sum(r["bytes"] for r in results) / seconds / 1e6


# --- the remote tier ------------------------------------------------------------------------------


@dataclass
class Tier:
    """Where a mode's proxy keeps its remote tier: its data dir's folder, or a bucket of its own."""

    data_dir: Path
    remote_args: tuple[str, ...] = ()
    endpoint: str | None = None
    bucket: str | None = None

    def objects(self) -> Iterator[tuple[str, int]]:
        """(key, size) of every object in the remote tier."""
        if self.endpoint is None:
            root = self.data_dir / "remote"
            for path in root.rglob("*"):
                if path.is_file():
                    yield str(path.relative_to(root)), path.stat().st_size
            return
        pages = s3_client(self.endpoint).get_paginator("list_objects_v2").paginate(Bucket=self.bucket)
        for page in pages:
            for item in page.get("Contents", []):
                yield item["Key"], item["Size"]


@dataclass(frozen=True)
class Stored:
    log_bytes: int  # the topic's .log objects
    topic_bytes: int  # every object of the topic (indexes, envelopes)
    all_bytes: int  # everything in the tier (manifests too)
    logical_log_bytes: int  # the same segments' .log bytes, as the broker had them (the metadata's sizes)

    @property
    def log_ratio(self) -> float:
        return self.log_bytes / self.logical_log_bytes


def stored_bytes(tier: Tier, topic: str) -> Stored:
    log = in_topic = total = 0
    topic_dir = re.compile(rf"(^|/){re.escape(topic)}-[A-Za-z0-9_-]{{22}}/")
    for key, size in tier.objects():
        total += size
        if topic_dir.search(key):
            in_topic += size
            if key.endswith(".log"):
                log += size
    logical = sum(s.segment_size_bytes for segments in native.proxy_segments(tier.data_dir, topic).values()
                  for s in segments)
    return Stored(log, in_topic, total, logical)


# --- tiering ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Backlog:
    """One timed tiering of the topic's backlog by a new proxy on a new data dir and remote tier."""

    megabytes: float  # logical bytes of the finished segments (the metadata's sizes), / 1e6
    seconds: float  # from switching tiering on to the poll that first saw the final offsets
    rss_mb: float  # the tiering proxy's peak resident set (VmHWM)

    @property
    def mb_per_s(self) -> float:
        return self.megabytes / self.seconds


def set_topic_configs(bootstrap: str, topic: str, configs: dict[str, str]) -> None:
    """IncrementalAlterConfigs SET of ``configs`` on ``topic`` (through a proxy: it keeps the tiering keys)."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic, incremental_configs=[
        ConfigEntry(name, value, incremental_operation=AlterConfigOpType.SET) for name, value in configs.items()])
    admin.incremental_alter_configs([resource])[resource].result(30)


def tier_backlog(broker_bootstrap: str, work: Path, mode: Mode, data_dir: Path, proxy_args: tuple[str, ...],
                 segment_bytes: int, cpus: frozenset[int] | None, timeout: float, keep: bool) -> Backlog:
    """A new proxy tiers ``mode.topic`` from offset 0: ``remote.storage.enable=true`` through it, then
    LATEST_TIERED polled every 50 ms until less than a segment is left untiered per partition (as
    ``kafka_native.tier`` times it; without local retention, so that the broker keeps the whole log for
    the next round). ``keep``: then the rest is tiered too (``segment.ms`` 1 s) and the proxy's local
    retention (``local.retention.bytes=1``) moves the broker's log start past it, for the reads."""
    proxy = start_proxy(broker_bootstrap, work / f"tier-{mode.slug}", *proxy_args,
                        "--set", f"log.segment.bytes={segment_bytes}",
                        "--set", f"remote.log.manager.task.interval.ms={TASK_INTERVAL_MS}", cpus=cpus)
    try:
        topic = mode.topic
        log_end = native.list_offsets(broker_bootstrap, topic, native.LATEST)
        ends: dict[int, int] = {}
        started = time.perf_counter()
        changed = [started]
        set_topic_configs(proxy.bootstrap, topic, {"remote.storage.enable": "true"})

        def tiered() -> bool:
            now = native.list_offsets(proxy.bootstrap, topic, native.LATEST_TIERED)
            if now != ends:
                ends.update(now)
                changed.append(time.perf_counter())
            return native.proxy_done(data_dir, topic, ends, log_end, segment_bytes)

        native.wait_for(f"tiering of {topic} (LATEST_TIERED {ends})", tiered, timeout, 0.05)
        backlog = Backlog(native.proxy_tiered_bytes(data_dir, topic, ends) / 1e6, changed[-1] - started, 0.0)
        if keep:
            set_topic_configs(proxy.bootstrap, topic, {"segment.ms": "1000", "local.retention.bytes": "1"})

            def all_tiered() -> bool:
                last = {p: s[-1].end_offset for p, s in native.proxy_segments(data_dir, topic).items() if s}
                return all(last.get(p, -1) + 1 >= log_end[p] for p in range(PARTITIONS))

            native.wait_for(f"{topic} tiered to its end {log_end}", all_tiered, 120, 0.2)
            target = native.proxy_trim_target(data_dir, topic, log_end)
            native.wait_for(f"the broker's log start of {topic} at {target}", lambda: all(
                v >= target[p] for p, v in native.list_offsets(broker_bootstrap, topic, native.EARLIEST).items()),
                120, 0.2)
        return Backlog(backlog.megabytes, backlog.seconds, peak_rss_mb(proxy.process.pid))
    finally:
        proxy.stop()


# --- figures -------------------------------------------------------------------------------------


Figures, attempt = native.Figures, native.attempt


READS = ("1 consumer", "N consumers", "raw Fetch loop")


@dataclass
class ModeFigures:
    reads: dict[str, Figures] = field(default_factory=lambda: {r: Figures() for r in READS})
    first: Figures = field(default_factory=Figures)
    again: Figures = field(default_factory=Figures)
    first_byte: Figures = field(default_factory=Figures)
    tiering: Figures = field(default_factory=Figures)  # MB/s
    tiering_rss: list[float] = field(default_factory=list)
    read_rss: dict[str, list[float]] = field(default_factory=lambda: {r: [] for r in READS})
    remote_mb: list[float] = field(default_factory=list)  # per 1-consumer read: MB the proxy read remotely
    not_available: int = 0
    stored: Stored | None = None


@contextlib.contextmanager
def measured_proxy(broker_bootstrap: str, work: Path, args: tuple[str, ...], figures: ModeFigures,
                   cpus: frozenset[int] | None, rss: list[float] | None = None) -> Iterator[ProxyProcess]:
    """A fresh proxy on the tiered data; its peak RSS (read just before it stops) and its
    "tiered storage not available" answers are kept."""
    proxy = start_proxy(broker_bootstrap, work, *args, cpus=cpus)
    try:
        yield proxy
    finally:
        if rss is not None:
            with contextlib.suppress(OSError):
                rss.append(peak_rss_mb(proxy.process.pid))
        proxy.stop()
    stats = tiered_read_stats(proxy)
    if stats is not None:
        figures.not_available += stats.not_available


def read_mb_per_s(read: str, bootstrap: str, topic: str, records: int, readers: int) -> float:
    if read == "raw Fetch loop":
        return raw_backfill(bootstrap, topic, READ_TIMEOUT_S)
    return readers_mb_per_s(bootstrap, topic, records, 1 if read == "1 consumer" else readers)


def proxy_log_problems(paths: list[Path]) -> tuple[dict[str, int], dict[str, int]]:
    """The ERROR and the WARNING lines of the proxies' logs: each distinct message (the time cut off,
    numbers as #) with its count."""
    found: dict[str, dict[str, int]] = {"ERROR": {}, "WARNING": {}}
    for path in paths:
        with contextlib.suppress(OSError):
            for line in path.read_text(errors="replace").splitlines():
                for level, seen in found.items():
                    if f" {level} " in line:
                        message = re.sub(r"\d+", "#", line.split(f" {level} ", 1)[1])[:300]
                        seen[message] = seen.get(message, 0) + 1
    return found["ERROR"], found["WARNING"]


# --- the run ---------------------------------------------------------------------------------------


def new_tier(work: Path, mode: Mode, name: str, endpoint: str | None) -> Tier:
    """A new data dir for ``mode``'s proxy, and its remote tier: the data dir's folder, or a new bucket."""
    data_dir = work / name
    if endpoint is None:
        return Tier(data_dir)
    bucket = new_bucket(endpoint)
    return Tier(data_dir, s3_uri_args(bucket, "bench", endpoint), endpoint, bucket)


def run(args: argparse.Namespace, work: Path) -> None:
    bench_started = time.perf_counter()
    where = placement(not args.shared)
    pin_self(where)  # the broker, the readers and every client thread inherit it
    segment_bytes = args.segment_mb << 20
    ring = work / "keys" / "ring.pem"
    ring.parent.mkdir(parents=True)
    ring.write_text(key_block(KEY_ID))
    ring.chmod(0o600)
    level = (("--set", f"remote.log.storage.compression.zstd.level={args.zstd_level}")
             if args.zstd_level is not None else ())
    with contextlib.ExitStack() as stack:
        broker = start_single(work / "broker")
        stack.callback(broker.stop)
        endpoint = None
        if args.s3:
            store = stack.enter_context(SeaweedFS(work / "seaweedfs"))
            endpoint = store.gateway().endpoint
        print(f"Kafka {broker.version} at {broker.bootstrap}; remote tier: "
              f"{'SeaweedFS S3 ' + endpoint if endpoint else 'local folders'}; CPUs: {where.describe()}", flush=True)
        for mode in MODES:
            native.create_topic(broker.bootstrap, mode.topic, segment_bytes)
        records, payload, produce_s = produce_events(broker.bootstrap, [m.topic for m in MODES], args.mb)
        print(f"produced {records:,} JSON events ({payload / records:.0f} B on average, {payload / 1e6:.0f} MB) "
              f"into each of {', '.join(m.topic for m in MODES)} in {produce_s:.0f} s", flush=True)

        def args_of(mode: Mode, tier: Tier) -> tuple[str, ...]:
            return ("--data-dir", str(tier.data_dir), *tier.remote_args, *mode.props(ring),
                    *(level if mode.compress else ()))

        figures = {mode: ModeFigures() for mode in MODES}
        tiers: dict[Mode, Tier] = {}  # the last round's: the reads' remote tier
        for round_ in range(1, args.tier_runs + 1):
            keep = round_ == args.tier_runs
            shown = []
            for mode in MODES:
                f = figures[mode]
                tier = new_tier(work, mode, f"data-{mode.slug}" if keep else f"data-{mode.slug}-try{round_}", endpoint)
                try:
                    backlog = tier_backlog(broker.bootstrap, work, mode, tier.data_dir, args_of(mode, tier),
                                           segment_bytes, where.proxy, 120 + args.mb, keep)
                except Exception as e:
                    f.tiering.errors.append(f"round {round_}: {type(e).__name__}: {str(e)[:300]}")
                    if keep:
                        raise  # the reads need this round's tiering
                    shown.append(f"{mode.name} FAILED")
                    continue
                finally:
                    if not keep:
                        shutil.rmtree(tier.data_dir, ignore_errors=True)
                f.tiering.values.append(backlog.mb_per_s)
                f.tiering_rss.append(backlog.rss_mb)
                shown.append(f"{mode.name} {backlog.megabytes:.0f} MB in {backlog.seconds:.2f} s = "
                             f"{backlog.mb_per_s:.0f} MB/s (RSS {backlog.rss_mb:.0f} MB)")
                if keep:
                    tiers[mode] = tier
            print(f"  tiering round {round_}/{args.tier_runs}{' (kept for the reads)' if keep else ''}: "
                  f"{', '.join(shown)}", flush=True)
        for mode in MODES:
            figures[mode].stored = s = stored_bytes(tiers[mode], mode.topic)
            print(f"  [{mode.name}] stored: .log {s.log_bytes / 1e6:.1f} MB of {s.logical_log_bytes / 1e6:.1f} MB "
                  f"logical ({s.log_ratio:.3f}); the topic's objects {s.topic_bytes / 1e6:.1f} MB; the whole tier "
                  f"{s.all_bytes / 1e6:.1f} MB", flush=True)
        starts = {m.topic: native.list_offsets(broker.bootstrap, m.topic, native.EARLIEST) for m in MODES}
        ends = native.list_offsets(broker.bootstrap, PLAIN.topic, native.LATEST)
        print(f"  the broker's log starts now {starts} (log ends {ends})", flush=True)

        read_args = {mode: (*args_of(mode, tiers[mode]), *MEASURING_PROPS, *REMOTE_PREFERRED_PROPS) for mode in MODES}
        for round_ in range(1, args.first_runs + 1):
            shown = []
            for mode in MODES:
                f = figures[mode]
                try:
                    with measured_proxy(broker.bootstrap, work / f"first-{mode.slug}", read_args[mode], f,
                                        where.proxy) as proxy:
                        time.sleep(1)
                        shown.append(attempt(f.first, mode.name, lambda p=proxy, m=mode:
                                             native.first_record_ms(p.bootstrap, m.topic)))
                        attempt(f.again, mode.name, lambda p=proxy, m=mode: native.first_record_ms(p.bootstrap, m.topic))
                    with measured_proxy(broker.bootstrap, work / f"first-{mode.slug}", read_args[mode], f,
                                        where.proxy) as proxy:
                        time.sleep(1)
                        attempt(f.first_byte, mode.name, lambda p=proxy, m=mode: first_byte_ms(p.bootstrap, m.topic))
                except Exception as e:  # noqa: BLE001 - a proxy that did not start: recorded
                    f.first.errors.append(f"round {round_}: {type(e).__name__}: {str(e)[:300]}")
                    shown.append(f"{mode.name} FAILED")
            print(f"  first record round {round_}/{args.first_runs}, fresh proxy, ms: {', '.join(shown)}; raw first "
                  f"byte: {', '.join(f'{figures[m].first_byte.values[-1]:.1f}' if figures[m].first_byte.values else '-' for m in MODES)}",
                  flush=True)

        for round_ in range(1, args.runs + 1):
            for read in READS:  # the modes back to back for each kind of read: a slow spell hits them alike
                label = read if read != "N consumers" else f"{args.readers} consumers"
                shown = []
                for mode in MODES:
                    f = figures[mode]
                    try:
                        with measured_proxy(broker.bootstrap, work / f"read-{mode.slug}", read_args[mode], f,
                                            where.proxy, f.read_rss[read]) as proxy:
                            shown.append(attempt(f.reads[read], mode.name, lambda p=proxy, m=mode, r=read: read_mb_per_s(
                                r, p.bootstrap, m.topic, records, args.readers)))
                        if read == "1 consumer" and (stats := tiered_read_stats(proxy)) is not None:
                            f.remote_mb.append(stats.remote_bytes / 1e6)
                    except Exception as e:  # noqa: BLE001 - a proxy that did not start: recorded
                        f.reads[read].errors.append(f"round {round_}: {type(e).__name__}: {str(e)[:300]}")
                        shown.append(f"{mode.name} FAILED")
                print(f"  read round {round_}/{args.runs}, {label}, MB/s: {', '.join(shown)}", flush=True)

        report(args, where, records, payload, figures, endpoint is not None, work,
               time.perf_counter() - bench_started)


def ratio_cell(mine: float | None, theirs: float | None, spec: str = ".2f") -> str:
    return "-" if mine is None or not theirs else f"{mine / theirs:{spec}}x"


def diff_cell(mine: float | None, theirs: float | None) -> str:
    return "-" if mine is None or theirs is None else f"{mine - theirs:+.1f} ms"


def verdict(ok: bool | None) -> str:
    return "no figure" if ok is None else ("meets" if ok else "**BELOW**")


def spread(values: list[float], spec: str = ".0f") -> str:
    if not values:
        return "-"
    return f"{statistics.median(values):{spec}}" + (f" [{min(values):{spec}}-{max(values):{spec}}]"
                                                   if len(values) > 1 else "")


def report(args: argparse.Namespace, where: Placement, records: int, payload: int, figures: dict[Mode, ModeFigures],
           s3: bool, work: Path, elapsed: float) -> None:
    p, a, z = (figures[m] for m in MODES)
    level = f"{DEFAULT_ZSTD_LEVEL} (default)" if args.zstd_level is None else args.zstd_level
    print(f"\ndata at rest, Kafka 4.4: {payload / 1e6:.0f} MB of JSON events per topic ({records:,} records, "
          f"{PARTITIONS} partitions, segment.bytes {args.segment_mb} MiB, produced uncompressed), remote tier "
          f"{'SeaweedFS S3' if s3 else 'local folder'}, zstd level {level}; tiering: {args.tier_runs} runs; reads: "
          f"{args.runs} runs, each on a fresh proxy, remote-preferred; first record and first byte: "
          f"{args.first_runs} fresh proxies per mode; medians [min-max]; {elapsed:.0f} s in all; CPUs: "
          f"{where.describe()}\n")
    rows: list[tuple[str, ...]] = []

    def speed_row(label: str, pick: Callable[[ModeFigures], Figures], goal: str) -> None:
        mp, ma, mz = (pick(f).median() for f in (p, a, z))
        if goal == "AES-GCM":
            judged = f"AES-GCM >= 0.8x: {verdict(None if mp is None or ma is None else ma >= 0.8 * mp)}"
        elif goal == "AES-GCM + zstd":
            judged = f"AES-GCM + zstd >= 0.8x: {verdict(None if mp is None or mz is None else mz >= 0.8 * mp)}"
        else:
            judged = ""
        rows.append((label, *(pick(f).cell() for f in (p, a, z)), ratio_cell(ma, mp), ratio_cell(mz, mp), judged))

    speed_row("remote read, 1 consumer, MB/s", lambda f: f.reads["1 consumer"], "AES-GCM")
    speed_row(f"remote read, {args.readers} consumers at once, MB/s", lambda f: f.reads["N consumers"], "AES-GCM")
    speed_row("remote read, raw Fetch loop, MB/s", lambda f: f.reads["raw Fetch loop"], "")
    for label, pick, goal in (("first record, fresh proxy, ms", lambda f: f.first, True),
                              ("first record again, same proxy, ms", lambda f: f.again, False),
                              ("first byte, raw Fetch, fresh proxy, ms", lambda f: f.first_byte, False)):
        mp, ma, mz = (pick(f).median() for f in (p, a, z))
        ok = None if mp is None or ma is None else abs(ma - mp) <= 2
        rows.append((label, *(pick(f).cell(".1f") for f in (p, a, z)), diff_cell(ma, mp), diff_cell(mz, mp),
                     f"AES-GCM within 2 ms: {verdict(ok)}" if goal else ""))
    speed_row("tiering, MB/s (logical)", lambda f: f.tiering, "AES-GCM + zstd")
    sp, sa, sz = (f.stored for f in (p, a, z))
    if sp and sa and sz:
        rows.append(("stored / logical, .log objects", f"{sp.log_ratio:.3f}", f"{sa.log_ratio:.3f}",
                     f"{sz.log_ratio:.3f}", "", "", f"AES-GCM + zstd <= 0.5: {verdict(sz.log_ratio <= 0.5)}"))
        rows.append(("stored MB, .log objects (logical MB)",
                     *(f"{s.log_bytes / 1e6:.1f} ({s.logical_log_bytes / 1e6:.1f})" for s in (sp, sa, sz)), "", "", ""))
        rows.append(("stored MB, every object of the topic", *(f"{s.topic_bytes / 1e6:.1f}" for s in (sp, sa, sz)),
                     ratio_cell(sa.topic_bytes, sp.topic_bytes, ".3f"), ratio_cell(sz.topic_bytes, sp.topic_bytes, ".3f"),
                     ""))
    rss_rows = [("proxy peak RSS MB, tiering", lambda f: f.tiering_rss)]
    rss_rows += [(f"proxy peak RSS MB, {r if r != 'N consumers' else f'{args.readers} consumers'}",
                  lambda f, r=r: f.read_rss[r]) for r in READS]
    for label, values in rss_rows:
        vp, va, vz = (values(f) for f in (p, a, z))
        rows.append((label, spread(vp), spread(va), spread(vz),
                     *(ratio_cell(statistics.median(v) if v else None, statistics.median(vp) if vp else None)
                       for v in (va, vz)), ""))
    print("| measure | plain | AES-GCM | AES-GCM + zstd | AES-GCM vs plain | AES-GCM + zstd vs plain | goal |")
    print("|---|---|---|---|---|---|---|")
    for row in rows:
        print("| " + " | ".join(row) + " |")

    print(f"\nremote MB a 1-consumer read took from the remote tier (median; the topic's record batches: "
          f"{(sp.logical_log_bytes if sp else 0) / 1e6:.1f} MB): "
          + ", ".join(f"{m.name} {statistics.median(f.remote_mb) if f.remote_mb else float('nan'):.1f}"
                      for m, f in figures.items()))
    for mode, f in figures.items():
        if f.not_available:
            print(f"  [{mode.name}] warning: {f.not_available} 'tiered storage not available' answers")
        for figs in [*f.reads.values(), f.first, f.again, f.first_byte, f.tiering]:
            for error in figs.errors:
                print(f"  [{mode.name}] failed {error}")
        logs = sorted(work.glob(f"*-{mode.slug}/proxy-*.log"))  # tier-, first-, read-{slug}
        errors, warnings = proxy_log_problems(logs)
        print(f"  [{mode.name}] its {len(logs)} proxies logged {sum(errors.values())} ERROR lines, "
              f"{sum(warnings.values())} WARNING lines")
        for level, seen in (("ERROR", errors), ("WARNING", warnings)):
            for message, count in sorted(seen.items(), key=lambda item: -item[1])[:4]:
                print(f"      {count} x {level} {message}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--mb", type=int, default=200, help="MB of JSON event values per topic (default 200)")
    parser.add_argument("--segment-mb", type=int, default=4, help="segment.bytes in MiB (default 4)")
    parser.add_argument("--runs", type=int, default=3, help="read rounds, each read on a fresh proxy (default 3)")
    parser.add_argument("--first-runs", type=int, default=9, help="fresh proxies per mode for the first record "
                        "(default 9)")
    parser.add_argument("--tier-runs", type=int, default=3, help="tierings of each topic's backlog, each by a new "
                        "proxy on a new data dir (default 3; the last one's is read)")
    parser.add_argument("--zstd-level", type=int, help="remote.log.storage.compression.zstd.level (default: the "
                        "proxy's, 3)")
    parser.add_argument("--readers", type=int, default=3, help="consumers of the concurrent read (default 3)")
    parser.add_argument("--s3", action="store_true", help="the remote tier in SeaweedFS's S3 gateway, a bucket per "
                        "mode, instead of local folders")
    parser.add_argument("--shared", action="store_true", help="let every process run on any CPU, instead of the "
                        "proxies on CPUs of their own and the broker and the clients on the others")
    parser.add_argument("--keep-work-dir", action="store_true", help="keep the broker's and proxies' folders")
    parser.add_argument("--read-one", nargs=3, metavar=("BOOTSTRAP", "TOPIC", "RECORDS"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.read_one:
        bootstrap, topic, expected = args.read_one
        read_one(bootstrap, topic, int(expected))
        return
    run_in_work_dir("bench-at-rest-", args.keep_work_dir, lambda work: run(args, work))


if __name__ == "__main__":
    main()
