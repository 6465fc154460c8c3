"""Backfill from offset 0: straight from the broker, through the proxy, and from the remote tier.

    python -m tests.bench.backfill [--broker noida|tansu] [--megabytes 100] [--repeat 3]
                                   [--value-bytes 1000] [--segment-mb 2] [--codec lz4] [--skip-s3]
                                   [--keep-work-dir]

One run on an embedded broker (``--broker``, noida-db by default). Two topics with identical
content (3 partitions, keys ``0..n``, values half random and half repeated, produced with
``--codec``) are written: ``bench-direct`` is never tiered; ``bench-tiered`` is tiered by a proxy.

- On noida-db the proxy then moves the broker's log start to the end of what it tiered (local
  retention: one segment), so reading it from offset 0 through the proxy comes from the remote
  tier. The bench waits until the broker's log start has moved and then stopped moving, so no
  copying is left for the measurement proxies, and prints how much of each partition the broker
  dropped: with small ``--megabytes`` the local retention (one segment) and the active segment
  are a large share, which the remote variants read from the broker.
- Tansu never moves its log start (tests/UPSTREAMS.md): it keeps everything, so broker-first
  reads the whole tiered topic from the broker (pass-through of a tiered topic, through the
  Fetch rewrite) and only remote-preferred reads the remote tier. The bench waits until the
  tiering proxy has copied nothing new for 5 s. Tansu honours Fetch byte limits, which noida-db
  does not (below), so its direct read is the steadier baseline.

For each remote tier (the local folder; then SeaweedFS's S3 gateway over HTTP, with a third topic
``bench-tiered-s3`` of the same content tiered to it; ``--skip-s3`` leaves S3 out) the same
confluent-kafka consumer (librdkafka's default fetch sizes) reads every record from offset 0 in
four ways:

1. direct from the broker (the baseline): topic ``bench-direct``, straight at the broker;
2. pass-through: topic ``bench-direct`` through the proxy; the topic is not tiered, so the
   proxy only forwards (goal: >= 0.95x of 1);
3. remote, broker-first: topic ``bench-tiered`` through a proxy with the default routing
   (``proxy.fetch.routing.policy=broker-first``): the broker answers OFFSET_OUT_OF_RANGE below
   its log start and the proxy serves those offsets from the remote tier (goal: >= 0.8x of 1);
4. remote, remote-preferred: the same through a proxy started with
   ``--set proxy.fetch.routing.policy=remote-preferred``: every offset the remote tier holds is
   served from it, the broker only authorizes (goal: never below 3).

This 2-core machine is shared by broker, proxy and client (and whatever else runs), so every
read is done ``--repeat`` times, round-robin over the four variants (1, 2, 3, 4, 1, 2, 3, 4, ...),
so that a slow spell of the machine hits all variants alike. After each consumer read, a raw
Fetch loop reads the same topic from offset 0 the same way (on a fresh proxy of its own): one
Fetch in flight, librdkafka's default sizes, no record decoded. The consumer's per-record work
bounds its figure on these 2 cores; the raw loop's shows what the proxy itself adds to serving
the Fetches. Every proxy read runs on a fresh
proxy process: caches cold, tiering metadata loaded from its store. (Reusing one proxy across
repeats would read the later repeats from its chunk cache, which holds 120 MiB by default: more
than the whole tiered topic at the default size, so that would measure the cache, not the remote
tier.) The proxies run with ``remote.log.manager.task.interval.ms=60000``: one tiering round at
start, which finds nothing to copy.

Round by round, the bench prints each read's MB/s as it goes; at the end the parameters, one
table per tier and a summary. A tier's table heads with the share of the tiered topic's records
that only the remote tier has (below the broker's log start; the rest, the local retention and
the active segment, is read from the broker by variants 3 and 4 too). Its columns, per variant:

- MB/s, [min-max]: payload (key + value bytes) per second read by the consumer, from its first
  poll to its last record: the median over the repeats, and the slowest and fastest repeat;
- vs direct: the variant's median MB/s over the median MB/s of variant 1 (read in the same
  rounds); vs b-first: remote-preferred's median MB/s over broker-first's;
- raw MB/s, vs direct, vs b-first: the same for the raw Fetch loop, in record bytes as stored
  (compressed) per second;
- 1st byte ms: one raw Fetch of partition 0 at offset 0 (1 MiB max) on a new connection, median
  over the repeats. For the proxy variants it is the first request the fresh proxy serves
  ("cold": empty caches, its first connection to the broker, its first remote read); for direct,
  a new connection to the broker, which is warm. (The backfill that follows on the same proxy
  may hit the chunk this Fetch loaded: a hit or two in the hit ratio.) It is the time to the
  whole answer: where noida-db answers (direct, pass-through) that is the whole partition, since
  it ignores the 1 MiB limit (see fetches), so there it grows with ``--megabytes``; the remote
  tier answers 1 MiB.
- CPU s/GB (proxy, broker, client): user + system CPU seconds (/proc) from the consumer's first
  poll to its last record per GB of payload, median over the repeats; less noisy than MB/s where
  all processes share the cores.
  proxy: the proxy process; broker: noida-db's process group; client: this process (the
  consumer, librdkafka's threads included; SeaweedFS runs in processes of its own, not
  counted);
- fetches: Fetch requests the consumer sent (librdkafka's statistics, taken just after the last
  record), median. Read it with noida-db's Fetch in mind: it ignores the byte limits (it answers a
  whole partition from the fetch offset: the first answer of a direct or pass-through read holds
  nearly the whole topic) and ``max_wait_ms`` (at the log end it answers empty at once). So such
  a read is one or two large answers, then the consumer drains its queue in Python while
  librdkafka, whenever a partition's queue is under its thresholds, sends empty Fetches in a
  tight loop: from 1 to tens of thousands, depending on timing, burning broker and client CPU
  (the CPU columns) on the 2 shared cores. The remote tier honours ``partition_max_bytes``, so
  the remote variants take more, smaller answers. MB/s on noida-db is thus largely the client's
  per-record speed; a real Kafka broker would not behave so.
- RSS MB: the proxy's peak resident memory (VmHWM over the process's whole life, read just before
  it stops); the max over the variant's proxies;
- remote MB: record bytes the proxy served from the remote tier (its shutdown line ``tiered
  reads: ...``; the first-byte Fetch included), median; 0.0 for pass-through shows the proxy only forwarded;
- chunk hits, prefetch: the proxy's segment chunk cache hit ratio, hits / (hits + misses) summed
  over the variant's proxies, and the chunks prefetched per backfill (median); "-" where nothing
  came from the remote tier. "tiered storage not available" answers, if any, and failed reads
  (a read that fails is recorded and the others go on) are printed under the variant's row.

The summary lists each goal, for the consumer and for the raw loop: the ratio of medians (3
decimals), the goal and a verdict: "meets",
or "BELOW by x%", with ", within the min-max spread" when the variant's fastest read reached the
goal against the reference's slowest, i.e. the noise of the run can explain the miss.

At the default size a run takes about a minute with ``--skip-s3``, a few with S3. Broker,
proxies and SeaweedFS are stopped at the end, also on an error, Ctrl-C or SIGTERM (any child process
left, e.g. a proxy whose start was interrupted, is stopped by PID); the working folder in /tmp is
removed unless ``--keep-work-dir`` (the proxies' logs are in it).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import re
import statistics
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from protocol.apis import FETCH
from protocol.record_set import iter_batches
from proxy.embedded_broker import start_broker
from tests.bench.process_hygiene import run_in_work_dir
from tests.integration.s3_server import SeaweedFS, new_bucket, s3_uri_args
from tests.proxy_process import ProxyProcess, start_proxy
from tests.raw import RawClient
from tests.tiering_checks import wait_until
from tiering.broker_client import EARLIEST, LATEST, BrokerClient

PARTITIONS = 3
DIRECT_TOPIC = "bench-direct"
TIERED_TOPIC = "bench-tiered"
CODECS = ("none", "gzip", "snappy", "lz4", "zstd")
BROKER_NAMES = {"noida": "noida-db", "tansu": "Tansu"}
TIERING_PROPS = ("--set", "remote.log.manager.task.interval.ms=200")  # the proxy that tiers the topic
MEASURING_PROPS = ("--set", "remote.log.manager.task.interval.ms=60000")  # proxies that are measured
REMOTE_PREFERRED_PROPS = ("--set", "proxy.fetch.routing.policy=remote-preferred")
# Goals of the issue: a variant's median MB/s over its reference's (label of the reference, ratio).
DIRECT = "direct from the broker"
PASS_THROUGH = "pass-through (untiered topic)"
BROKER_FIRST = "remote, broker-first"
REMOTE_PREFERRED = "remote, remote-preferred"
GOALS: dict[str, list[tuple[str, float]]] = {
    PASS_THROUGH: [(DIRECT, 0.95)],
    BROKER_FIRST: [(DIRECT, 0.8)],
    REMOTE_PREFERRED: [(DIRECT, 0.8), (BROKER_FIRST, 1.0)],
}


# --- producing and tiering ---------------------------------------------------------------------


def produce(bootstrap: str, topics: list[str], megabytes: int, value_bytes: int, segment_mb: int,
            codec: str, tiered: set[str]) -> int:
    """Creates the topics (those in ``tiered`` with remote storage and one segment of local
    retention) and writes the same records to each; returns the record count per topic."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for topic in topics:
        config = {"segment.bytes": str(segment_mb << 20)}
        if topic in tiered:
            config |= {"remote.storage.enable": "true", "local.retention.bytes": str(segment_mb << 20)}
        admin.create_topics([NewTopic(topic, PARTITIONS, 1, config=config)])[topic].result(30)
    time.sleep(1)
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "batch.size": 1 << 20,
                         "compression.type": codec, "queue.buffering.max.messages": 1_000_000,
                         "enable.idempotence": False})
    count = (megabytes << 20) // value_bytes
    rng = random.Random(7)  # the same values in every topic, in every run
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
    assert producer.flush(300) == 0, "records left undelivered"
    return count


def log_starts(client: BrokerClient, leader: int, topic: str) -> list[int]:
    return [client.list_offset(leader, topic, p, EARLIEST)[1] for p in range(PARTITIONS)]


def log_ends(client: BrokerClient, leader: int, topic: str) -> list[int]:
    return [client.list_offset(leader, topic, p, LATEST)[1] for p in range(PARTITIONS)]


def wait_until_tiered(client: BrokerClient, leader: int, topic: str, timeout: float = 300,
                      settle_s: float = 5) -> None:
    """Waits until the broker's log start has moved in every partition and then not moved for
    ``settle_s`` (the tiering proxy runs a round every 200 ms): the tiering is done, the broker
    keeps only its local retention (one segment) and the active segment."""
    seen: list[tuple[float, list[int]]] = []

    def settled() -> bool:
        starts = log_starts(client, leader, topic)
        now = time.monotonic()
        seen.append((now, starts))
        return min(starts) > 0 and any(now - t >= settle_s for t, s in seen if s == starts)

    assert wait_until(settled, timeout, interval=0.5), f"tiering of {topic} did not finish: {seen[-1][1]}"


# --- what is measured --------------------------------------------------------------------------


@dataclass(frozen=True)
class CpuSeconds:
    """User + system CPU seconds of the client (this process: the consumer with librdkafka's
    threads), the broker's process group and the proxy, if any."""

    client: float
    broker: float
    proxy: float | None

    def __sub__(self, earlier: CpuSeconds) -> CpuSeconds:
        proxy = None if self.proxy is None or earlier.proxy is None else self.proxy - earlier.proxy
        return CpuSeconds(self.client - earlier.client, self.broker - earlier.broker, proxy)


@dataclass(frozen=True)
class Backfill:
    """One consumer read of a whole topic from offset 0."""

    seconds: float
    records: int
    payload_bytes: int
    cpu: CpuSeconds  # spent from the first poll to the last record
    fetch_requests: int | None  # Fetch requests the consumer sent, None if librdkafka did not say

    @property
    def mb_per_s(self) -> float:
        return self.payload_bytes / self.seconds / 1e6

    def cpu_s_per_gb(self) -> CpuSeconds:
        """The CPU seconds of the read per GB of payload read."""
        gb = self.payload_bytes / 1e9
        proxy = None if self.cpu.proxy is None else self.cpu.proxy / gb
        return CpuSeconds(self.cpu.client / gb, self.cpu.broker / gb, proxy)


STATS_INTERVAL_MS = 250


def fetch_requests_sent(consumer: Consumer, statistics_json: list[str], wait_s: float = 2) -> int | None:
    """Fetch requests the consumer has sent to the brokers, from the next librdkafka statistics
    (emitted every ``STATS_INTERVAL_MS``, handed over by a poll); None if none comes in time."""
    statistics_json.clear()
    deadline = time.monotonic() + wait_s
    while not statistics_json and time.monotonic() < deadline:
        consumer.poll(0.05)
    if not statistics_json:
        return None
    brokers = json.loads(statistics_json[-1])["brokers"].values()
    return sum(b["req"].get("Fetch", 0) for b in brokers if b["nodeid"] >= 0)


def backfill(bootstrap: str, topic: str, expected: int, cpu_now: Callable[[], CpuSeconds],
             timeout: float = 600) -> Backfill:
    """Time (and CPU, by ``cpu_now``) for a confluent-kafka consumer to read ``expected`` records
    from offset 0."""
    statistics_json: list[str] = []
    # librdkafka's default fetch sizes (1 MiB per partition, 50 MiB per Fetch), as most consumers
    # run. But no fetch.queue.backoff.ms: when fetching runs ahead of this Python loop by more
    # than queued.min.messages, librdkafka pauses the partition's fetching for that long (1 s by
    # default), whoever serves it. Whether a read hit such pauses split every variant's figures
    # into two modes (about 145 and 290 MB/s on Tansu) from run to run.
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"bench-{uuid.uuid4().hex[:8]}",
                         "enable.auto.commit": False, "enable.partition.eof": False,
                         "fetch.queue.backoff.ms": 0,
                         # noida-db ignores the byte limits: room for its whole-partition answers.
                         "receive.message.max.bytes": 1 << 30,
                         "statistics.interval.ms": STATS_INTERVAL_MS, "stats_cb": statistics_json.append})
    consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(PARTITIONS)])
    got = size = 0
    cpu_before = cpu_now()
    started = time.perf_counter()
    deadline = started + timeout
    try:
        while got < expected and time.perf_counter() < deadline:
            # Never ask for more than is left: consume() waits its whole timeout for a batch it
            # cannot fill, which would add up to 0.5 s to every read.
            for m in consumer.consume(min(10_000, expected - got), 0.5):
                if m.error() is not None:
                    if m.error().code() != KafkaError._PARTITION_EOF:
                        raise RuntimeError(m.error())
                    continue
                got += 1
                size += len(m.value()) + len(m.key() or b"")
        seconds = time.perf_counter() - started
        cpu = cpu_now() - cpu_before
        fetches = fetch_requests_sent(consumer, statistics_json)
    finally:
        consumer.close()
    if got != expected:
        raise RuntimeError(f"read {got} of {expected} records of {topic} in {seconds:.0f} s")
    return Backfill(seconds, got, size, cpu, fetches)


def first_byte_ms(bootstrap: str, topic: str) -> float:
    """Milliseconds for one Fetch at offset 0 of partition 0 on a new connection."""
    client = RawClient(bootstrap)
    try:
        started = time.perf_counter()
        answer = client.request(FETCH, 12, {
            "replica_id": -1, "max_wait_ms": 100, "min_bytes": 1, "max_bytes": 1 << 20, "isolation_level": 0,
            "session_id": 0, "session_epoch": -1, "rack_id": "", "forgotten_topics_data": [],
            "topics": [{"topic": topic, "partitions": [{
                "partition": 0, "fetch_offset": 0, "current_leader_epoch": -1, "last_fetched_epoch": -1,
                "log_start_offset": -1, "partition_max_bytes": 1 << 20}]}]})
        elapsed = (time.perf_counter() - started) * 1000
    finally:
        client.close()
    (topic_answer,) = answer["responses"]
    (partition,) = topic_answer["partitions"]
    assert partition["error_code"] == 0 and len(partition["records"]) > 0, partition["error_code"]
    return elapsed


RAW_MAX_BYTES, RAW_PARTITION_MAX_BYTES = 50 << 20, 1 << 20  # librdkafka's defaults


def raw_fetch_body(topic: str, offsets: list[int], high: list[int]) -> dict[str, object]:
    """A Fetch v12 body for every partition of ``topic`` below its high watermark, with librdkafka's
    default sizes (the raw loops of this bench and tests/bench/wire_speed.py)."""
    return {"replica_id": -1, "max_wait_ms": 500, "min_bytes": 1, "max_bytes": RAW_MAX_BYTES,
            "isolation_level": 0, "session_id": 0, "session_epoch": -1, "rack_id": "",
            "forgotten_topics_data": [], "topics": [{"topic": topic, "partitions": [{
                "partition": p, "fetch_offset": offsets[p], "current_leader_epoch": -1,
                "last_fetched_epoch": -1, "log_start_offset": -1, "partition_max_bytes": RAW_PARTITION_MAX_BYTES}
                for p in range(len(offsets)) if offsets[p] < high[p]]}]}


def raw_backfill(bootstrap: str, topic: str, timeout: float = 600) -> float:
    """MB/s of record bytes (as stored, compressed) that a Fetch loop reads from offset 0 to every
    partition's high watermark: one Fetch in flight, librdkafka's default sizes, nothing decoded
    but batch headers. It measures what answers the Fetches, not a client's per-record work."""
    client = RawClient(bootstrap, timeout=30)
    offsets, high = [0] * PARTITIONS, [1] * PARTITIONS
    size = 0
    started = time.perf_counter()
    try:
        while any(o < h for o, h in zip(offsets, high, strict=True)):
            assert time.perf_counter() - started < timeout, f"raw read of {topic} stuck at {offsets} of {high}"
            answer = client.request(FETCH, 12, raw_fetch_body(topic, offsets, high))
            for part in answer["responses"][0]["partitions"]:
                assert part["error_code"] == 0, f"raw read of {topic}: error {part['error_code']}"
                records = part["records"] or b""
                size += len(records)
                high[part["partition_index"]] = part["high_watermark"]
                for header, _ in iter_batches(records):
                    offsets[part["partition_index"]] = header.last_offset + 1
        return size / (time.perf_counter() - started) / 1e6
    finally:
        client.close()


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process so far (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def process_group_cpu_seconds(pgid: int) -> float:
    """User + system CPU time so far of the live processes of a process group (the broker's)."""
    total = 0
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:  # gone meanwhile
            continue
        if int(fields[2]) == pgid:
            total += int(fields[11]) + int(fields[12])
    return total / os.sysconf("SC_CLK_TCK")


def peak_rss_mb(pid: int) -> float:
    """The process's peak resident set size over its life so far (VmHWM, Linux /proc), in MB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024 / 1e6
    return float("nan")


@dataclass(frozen=True)
class TieredReadStats:
    """The counters of the proxy's shutdown line ``tiered reads: ...``."""

    remote_fetches: int
    remote_bytes: int
    not_available: int
    chunk_hits: int
    chunk_misses: int
    prefetched: int


STATS_LINE = re.compile(r"tiered reads: remote fetches (\d+), remote fetch bytes (\d+), "
                        r"tiered storage not available (\d+)"
                        r"(?:, chunk cache hits (\d+) misses (\d+) \(hit ratio [\d.]+\), prefetched (\d+))?")


def tiered_read_stats(proxy: ProxyProcess) -> TieredReadStats | None:
    """The stopped proxy's tiered-read counters, None if its log has no shutdown line."""
    match = STATS_LINE.search(proxy.log_text())
    if match is None:
        return None
    return TieredReadStats(*(int(g or 0) for g in match.groups()))


def cpu_meter(broker_group: int, proxy_pid: int | None) -> Callable[[], CpuSeconds]:
    """A function that tells the CPU seconds so far of this process, the broker's process group
    and the proxy process (if any)."""
    def now() -> CpuSeconds:
        proxy = cpu_seconds(proxy_pid) if proxy_pid is not None else None
        return CpuSeconds(time.process_time(), process_group_cpu_seconds(broker_group), proxy)

    return now


@dataclass(frozen=True)
class Read:
    """One repeat of one variant: the first byte, the backfill and what the proxy reported."""

    first_byte_ms: float
    backfill: Backfill
    raw_mb_per_s: float  # raw_backfill's, on a proxy of its own
    proxy_peak_rss_mb: float | None = None
    stats: TieredReadStats | None = None


# --- the variants ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Tier:
    name: str
    slug: str
    topic: str  # the tiered copy of the data this tier serves
    remote_args: tuple[str, ...]  # how the proxy names the tier (the local folder: its data dir's default)


@dataclass
class Variant:
    label: str
    topic: str
    proxy_args: tuple[str, ...] | None  # None: the consumer reads straight from the broker
    reads: list[Read] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)

    def speeds(self, measure: str) -> list[float]:
        """MB/s of each read: the consumer's backfill (``consumer``) or the raw Fetch loop's (``raw``)."""
        return [r.backfill.mb_per_s if measure == "consumer" else r.raw_mb_per_s for r in self.reads]

    def median_mb_per_s(self, measure: str = "consumer") -> float | None:
        return statistics.median(self.speeds(measure)) if self.reads else None


@contextlib.contextmanager
def running_proxy(bootstrap: str, work_dir: Path, args: tuple[str, ...]) -> Iterator[ProxyProcess]:
    proxy = start_proxy(bootstrap, work_dir, *args)
    try:
        yield proxy
    finally:
        proxy.stop()


def read_from_broker(bootstrap: str, broker_group: int, topic: str, count: int) -> Read:
    """First byte on a new connection to the broker and a backfill straight from it."""
    first_byte = first_byte_ms(bootstrap, topic)
    read = backfill(bootstrap, topic, count, cpu_meter(broker_group, None))
    return Read(first_byte, read, raw_backfill(bootstrap, topic))


def read_through_fresh_proxy(bootstrap: str, broker_group: int, work_dir: Path, args: tuple[str, ...],
                             topic: str, count: int) -> Read:
    """Cold first byte and backfill on a new proxy process, and the proxy's peak RSS; then the raw
    read on another new proxy."""
    with running_proxy(bootstrap, work_dir, args) as proxy:
        cold = first_byte_ms(proxy.bootstrap, topic)
        read = backfill(proxy.bootstrap, topic, count, cpu_meter(broker_group, proxy.process.pid))
        rss = peak_rss_mb(proxy.process.pid)
    with running_proxy(bootstrap, work_dir, args) as raw_proxy:
        raw = raw_backfill(raw_proxy.bootstrap, topic)
    return Read(cold, read, raw, rss, tiered_read_stats(proxy))


def measure_tier(bootstrap: str, broker_group: int, work: Path, tier: Tier, count: int,
                 repeat: int) -> list[Variant]:
    """The four variants' reads, ``repeat`` rounds of each in turn; a failed read is recorded."""
    proxy_args = ("--data-dir", str(work / f"data-{tier.slug}"), *tier.remote_args, *MEASURING_PROPS)
    variants = [Variant(DIRECT, DIRECT_TOPIC, None),
                Variant(PASS_THROUGH, DIRECT_TOPIC, proxy_args),
                Variant(BROKER_FIRST, tier.topic, proxy_args),
                Variant(REMOTE_PREFERRED, tier.topic, (*proxy_args, *REMOTE_PREFERRED_PROPS))]
    for round_ in range(1, repeat + 1):
        figures = []
        for v in variants:
            try:
                if v.proxy_args is None:
                    read = read_from_broker(bootstrap, broker_group, v.topic, count)
                else:
                    read = read_through_fresh_proxy(bootstrap, broker_group, work / f"proxy-{tier.slug}",
                                                    v.proxy_args, v.topic, count)
            except Exception as e:  # keep measuring the others; the table says what failed
                v.errors.append(f"round {round_}: {type(e).__name__}: {e}")
                figures.append(f"{v.label} FAILED")
                continue
            v.reads.append(read)
            figures.append(f"{v.label} {read.backfill.mb_per_s:.1f} (raw {read.raw_mb_per_s:.1f})")
        print(f"  [{tier.name}] round {round_}/{repeat} MB/s: " + ", ".join(figures), flush=True)
    return variants


def tiered_ends(proxy: ProxyProcess, topic: str) -> list[int]:
    """Per partition, the offset after the last one the proxy's log says it tiered (0: none)."""
    ends = [0] * PARTITIONS
    for p, last in re.findall(rf"tiered {re.escape(topic)}-(\d+) \(.*?\) offsets \d+\.\.(\d+)", proxy.log_text()):
        ends[int(p)] = max(ends[int(p)], int(last) + 1)
    return ends


def wait_until_copied(proxy: ProxyProcess, topic: str, timeout: float = 300, settle_s: float = 5) -> list[int]:
    """For a broker that never drops tiered data (Tansu): waits until the tiering proxy has copied
    something of every partition and then copied nothing new for ``settle_s`` (all closed
    segments are copied; the open one, under ``segment.bytes``, stays only on the broker);
    returns the tiered ends."""
    seen: list[tuple[float, list[int]]] = []

    def settled() -> bool:
        ends, now = tiered_ends(proxy, topic), time.monotonic()
        seen.append((now, ends))
        return min(ends) > 0 and any(now - t >= settle_s for t, e in seen if e == ends)

    assert wait_until(settled, timeout, interval=0.5), f"tiering of {topic} did not finish: {seen[-1][1]}"
    return seen[-1][1]


def tier_the_topic(bootstrap: str, work: Path, tier: Tier, client: BrokerClient, leader: int,
                   broker_drops: bool) -> float:
    """Runs a proxy that tiers ``tier.topic`` until it is done: on a broker that drops what was
    tiered (``broker_drops``: noida-db), until the broker's log start has settled; else until the
    copying has. Returns the share of the records the remote-preferred variant reads from the
    remote tier: below the broker's log start, or (``broker_drops`` false) below the tiered end."""
    args = ("--data-dir", str(work / f"data-{tier.slug}"), *tier.remote_args, *TIERING_PROPS)
    started = time.monotonic()
    with running_proxy(bootstrap, work / f"proxy-{tier.slug}", args) as proxy:
        if broker_drops:
            wait_until_tiered(client, leader, tier.topic)
        else:
            tiered = wait_until_copied(proxy, tier.topic)
    starts, ends = log_starts(client, leader, tier.topic), log_ends(client, leader, tier.topic)
    took = f"  [{tier.name}] tiered {tier.topic} in {time.monotonic() - started:.0f} s; "
    if broker_drops:
        print(f"{took}broker log start {starts} of log end {ends}", flush=True)
        return sum(starts) / sum(ends)
    print(f"{took}remote tier holds offsets below {tiered} of log end {ends}; the broker keeps "
          f"its whole log (log start {starts})", flush=True)
    return sum(tiered) / sum(ends)


# --- the report --------------------------------------------------------------------------------


def fmt(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def ratio(variants: list[Variant], label: str, reference: str, measure: str = "consumer") -> float | None:
    by_label = {v.label: v.median_mb_per_s(measure) for v in variants}
    mine, theirs = by_label[label], by_label[reference]
    return None if mine is None or not theirs else mine / theirs


def median_or_none(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


# The per-tier table: (header, width) of each column (negative: left-aligned), then the cells.
COLUMNS = [("variant", -31), ("MB/s", 7), ("[min-max]", 14), ("vs direct", 10), ("vs b-first", 11),
           ("raw MB/s", 9), ("vs direct", 10), ("vs b-first", 11),
           ("1st byte ms", 12), ("proxy", 6), ("broker", 7), ("client", 7), ("fetches", 8), ("RSS MB", 7),
           ("remote MB", 10), ("chunk hits", 11), ("prefetch", 9)]


def variant_cells(v: Variant, variants: list[Variant]) -> list[str]:
    """The table's cells of one variant that has at least one read."""
    speeds = [r.backfill.mb_per_s for r in v.reads]
    stats = [r.stats for r in v.reads if r.stats is not None]
    hits, misses = sum(s.chunk_hits for s in stats), sum(s.chunk_misses for s in stats)
    remote_read = hits + misses > 0
    rss = [r.proxy_peak_rss_mb for r in v.reads if r.proxy_peak_rss_mb is not None]
    cpu = [r.backfill.cpu_s_per_gb() for r in v.reads]
    proxy_cpu = [c.proxy for c in cpu if c.proxy is not None]
    fetches = [r.backfill.fetch_requests for r in v.reads if r.backfill.fetch_requests is not None]
    return [
        v.label,
        f"{statistics.median(speeds):.1f}",
        f"[{min(speeds):.1f}-{max(speeds):.1f}]",
        fmt(ratio(variants, v.label, DIRECT), ".2f"),
        fmt(ratio(variants, v.label, BROKER_FIRST) if v.label == REMOTE_PREFERRED else None, ".2f"),
        f"{statistics.median(v.speeds('raw')):.1f}",
        fmt(ratio(variants, v.label, DIRECT, "raw"), ".2f"),
        fmt(ratio(variants, v.label, BROKER_FIRST, "raw") if v.label == REMOTE_PREFERRED else None, ".2f"),
        f"{statistics.median(r.first_byte_ms for r in v.reads):.1f}",
        fmt(median_or_none(proxy_cpu), ".1f"),
        f"{statistics.median(c.broker for c in cpu):.1f}",
        f"{statistics.median(c.client for c in cpu):.1f}",
        fmt(median_or_none(fetches), ".0f"),
        fmt(max(rss) if rss else None, ".0f"),
        fmt(median_or_none([s.remote_bytes / 1e6 for s in stats]), ".1f"),
        fmt(hits / (hits + misses) if remote_read else None, ".3f"),
        fmt(median_or_none([s.prefetched for s in stats]) if remote_read else None, ".0f"),
    ]


def table_row(cells: list[str]) -> str:
    return "".join(format(cell, f"<{-width}" if width < 0 else f">{width}")
                   for cell, (_, width) in zip(cells, COLUMNS, strict=True))


def print_tier_table(tier: Tier, remote_share: float, variants: list[Variant], repeat: int,
                     broker_drops: bool) -> None:
    where = ("only in the remote tier" if broker_drops else
             "in the remote tier (and on the broker, which keeps its whole log: broker-first reads it all "
             "from the broker)")
    print(f"\n{tier.name} tier: {tier.topic}, {remote_share:.0%} of its records {where}; "
          f"{repeat} reads per variant, round-robin, every proxy read on a fresh, cold proxy")
    headers = [header for header, _ in COLUMNS]
    cpu_at = sum(abs(width) for _, width in COLUMNS[:headers.index("proxy")])
    print(f"{'':<{cpu_at}}{'CPU s/GB, median':^20}")
    print(table_row(headers))
    for v in variants:
        if not v.reads:
            print(f"{v.label:<31} FAILED in every round")
        else:
            print(table_row(variant_cells(v, variants)))
        stats = [r.stats for r in v.reads if r.stats is not None]
        if v.proxy_args is not None and len(stats) < len(v.reads):
            print(f"    warning: {len(v.reads) - len(stats)} proxies logged no 'tiered reads' line")
        if not_available := sum(s.not_available for s in stats):
            print(f"    warning: {not_available} 'tiered storage not available' answers")
        for error in v.errors:
            print(f"    failed {error}")


def verdict(variants: list[Variant], label: str, reference: str, goal: float, measure: str) -> str:
    """Whether the median ratio meets the goal; if not, by how much, and whether the best read of
    the variant still reached the goal against the worst of the reference (noise can explain it)."""
    r = ratio(variants, label, reference, measure)
    if r is None:
        return "no figure"
    if r >= goal:
        return "meets"
    mine = next(v for v in variants if v.label == label).speeds(measure)
    theirs = next(v for v in variants if v.label == reference).speeds(measure)
    spread = ", within the min-max spread" if max(mine) >= goal * min(theirs) else ""
    return f"BELOW by {1 - r / goal:.1%}{spread}"


def print_summary(results: list[tuple[Tier, float, list[Variant]]]) -> None:
    print("\nsummary: median MB/s of a variant / median MB/s of its reference (reads of the same rounds)")
    print(f"{'tier':<16}{'variant':<31}{'reference':<24}{'measure':<10}{'ratio':>7}{'goal':>8}  verdict")
    for tier, _, variants in results:
        for label, goals in GOALS.items():
            for reference, goal in goals:
                for measure in ("consumer", "raw"):
                    r = ratio(variants, label, reference, measure)
                    print(f"{tier.name:<16}{label:<31}{reference:<24}{measure:<10}{fmt(r, '.3f'):>7}"
                          f"{'>= ' + str(goal):>8}  {verdict(variants, label, reference, goal, measure)}")


# --- main --------------------------------------------------------------------------------------


def s3_tier(stack: contextlib.ExitStack, work: Path) -> Tier:
    """Starts SeaweedFS and its S3 gateway (processes of their own, stopped with ``stack``) and
    names a new bucket of it as a tier."""
    store = stack.enter_context(SeaweedFS(work / "seaweedfs"))
    endpoint = store.gateway().endpoint
    return Tier("SeaweedFS S3", "s3", f"{TIERED_TOPIC}-s3", s3_uri_args(new_bucket(endpoint), "bench", endpoint))


def stop_process(process: subprocess.Popen, timeout: float = 10) -> None:
    process.terminate()
    try:
        process.wait(timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def run(args: argparse.Namespace, work: Path) -> None:
    with contextlib.ExitStack() as stack:
        broker = start_broker(args.broker, work / "broker")
        stack.callback(broker.stop)  # the whole process group (noida-db's server outlives its CLI)
        bootstrap = broker.bootstrap
        client = BrokerClient(bootstrap)
        stack.callback(client.close)
        tiers = [Tier("local folder", "local", TIERED_TOPIC, ())]  # the data dir's default remote folder
        if not args.skip_s3:
            tiers.append(s3_tier(stack, work))
        data = (args.megabytes, args.value_bytes, args.segment_mb, args.codec)
        started = time.monotonic()
        count = produce(bootstrap, [DIRECT_TOPIC, TIERED_TOPIC], *data, tiered={TIERED_TOPIC})
        print(f"produced {count} records to {DIRECT_TOPIC} and {TIERED_TOPIC} "
              f"in {time.monotonic() - started:.0f} s", flush=True)
        leader = client.metadata([TIERED_TOPIC])[TIERED_TOPIC].partitions[0].leader
        broker_drops = args.broker == "noida"  # Tansu keeps its whole log (tests/UPSTREAMS.md)
        results: list[tuple[Tier, float, list[Variant]]] = []  # tier, remote share, its variants
        for tier in tiers:
            if tier.topic != TIERED_TOPIC:
                # A tiered copy of the data for this tier: a new topic, same content.
                produce(bootstrap, [tier.topic], *data, tiered={tier.topic})
            remote_share = tier_the_topic(bootstrap, work, tier, client, leader, broker_drops)
            variants = measure_tier(bootstrap, broker.pid, work, tier, count, args.repeat)
            results.append((tier, remote_share, variants))

        print(f"\nparameters: {args.megabytes} MiB payload per topic = {count} records of "
              f"{args.value_bytes} B values (+ keys), {PARTITIONS} partitions, segment.bytes "
              f"{args.segment_mb} MiB, codec {args.codec}, {args.repeat} reads per variant; embedded "
              f"{BROKER_NAMES[args.broker]} on this machine ({os.cpu_count()} cores shared by broker, proxy "
              f"and consumer)")
        for tier, remote_share, variants in results:
            print_tier_table(tier, remote_share, variants, args.repeat, broker_drops)
        print_summary(results)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--broker", choices=tuple(BROKER_NAMES), default="noida",
                        help="the embedded broker (tansu honours Fetch byte limits, noida-db does not)")
    parser.add_argument("--megabytes", type=int, default=100, help="payload per topic (MiB)")
    parser.add_argument("--value-bytes", type=int, default=1000, help="bytes per record value")
    parser.add_argument("--segment-mb", type=int, default=2, help="topic segment.bytes in MiB")
    parser.add_argument("--codec", choices=CODECS, default="lz4", help="producer compression.type")
    parser.add_argument("--repeat", "--repeats", type=int, default=3,
                        help="reads per variant, round-robin (median and range reported)")
    parser.add_argument("--skip-s3", action="store_true", help="measure the local-folder tier only")
    parser.add_argument("--keep-work-dir", action="store_true", help="keep the /tmp folder (proxy logs)")
    args = parser.parse_args()
    run_in_work_dir("bench-backfill-", args.keep_work_dir, lambda work: run(args, work))


if __name__ == "__main__":
    main()
