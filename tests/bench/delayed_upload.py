"""Delayed upload (KIP-1241): what a topic whose consumers keep up saves when its data is copied to the
remote tier only once it leaves the local retention window, side by side with the same topic copied
at once, in one proxy and the same time window, on Apache Kafka 4.4 and SeaweedFS's S3 gateway.

    python -m tests.bench.delayed_upload [--seconds 90] [--mb-per-s 1] [--record-bytes 1024]
                                         [--local-retention-ms 30000] [--retention-ms 3600000]
                                         [--lag-ms MS] [--partitions 1] [--keep-work-dir]

One single-node Kafka 4.4 broker (tests/kafka_cluster.py), one SeaweedFS store with one S3 gateway
(tests/integration/s3_server.py) and one ``tiered-proxy serve`` in front of the broker with the
bucket as its remote tier (``remote.log.manager.task.interval.ms=500``, the proxy's own
``log.segment.bytes=1048576``: Kafka 4.4 refuses a topic ``segment.bytes`` below 1 MiB, and the proxy
builds its remote segments itself; ``proxy.metrics.listen`` on a free loopback port). Two topics are
created through the proxy with the same settings (``remote.storage.enable=true``,
``local.retention.ms`` = ``--local-retention-ms`` = L, ``retention.ms`` = ``--retention-ms``, well
above the run) except the lag:

- **A, at once**: ``remote.copy.lag.ms=0`` (Kafka's default: a closed segment is copied at once);
- **B, delayed**: ``remote.copy.lag.ms=-1`` (the local retention: L), or ``--lag-ms``.

For ``--seconds`` T, a confluent-kafka producer per topic sends ``--mb-per-s`` MB/s of
``--record-bytes`` records (an 8-byte sequence number, then random bytes: nothing to compress),
paced every 5 ms, through the proxy, and one confluent-kafka consumer per topic reads the tail
through the proxy as it is produced (its lag in records, acknowledged minus consumed, is sampled
every second; the age of each record when it was consumed is kept too). Every second, per topic:
the bytes and segments tiered (COPY_SEGMENT_FINISHED in the proxy's metadata journal,
``{data dir}/metadata/remote_log_metadata.journal``, read-only beside the running proxy) and the
store's requests by kind from the proxy's Prometheus endpoint: per topic from
``tiered_proxy_remote_topic_requests_total{topic,kind}`` when the proxy has it; otherwise the store's
``tiered_proxy_remote_storage_requests_total{tier,kind}`` is split between the topics as (objects per
segment, counted in the bucket at the end with boto3) x (segments of the topic), and the output says
so.

Printed: a line every 10 s, then a table, A against B and B/A: PUT and GET requests, bytes uploaded
by the end of the run, stored byte-seconds (the integral of the remote bytes over the run), and the
S3 Standard list price of each (PUT $0.005 and GET $0.0004 per 1,000, storage $0.023 per GB-month,
GB = 2^30 bytes, a month = 730 h); what the lag alone predicts over a run ((T - L) / T of the bytes,
((T - L) / T)^2 of the byte-seconds); the steady state the run implies (a topic whose readers keep up
stores about L / retention.ms less: what is inside the local retention window is not stored
twice); the consumers' largest lag; and a check that a new consumer from offset 0 through the proxy
reads every record of B exactly once at the end, the older ones from the remote tier (the lag held
data back and lost nothing). Nothing is asserted except that check, which ends the run with exit
code 1 when it fails.

About 3 minutes at the defaults on a 2-core machine. Every wait is bounded; the broker, SeaweedFS and
the proxy are loopback only and stopped by PID at the end, also on an error, Ctrl-C or SIGTERM
(tests/bench/process_hygiene.py); the work folder (in ``$TMPDIR``) is removed unless
``--keep-work-dir``.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import random
import re
import struct
import threading
import time
import urllib.request
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic

from tests.bench.kafka_native import EARLIEST, list_offsets, wait_for
from tests.bench.process_hygiene import run_in_work_dir
from tests.integration.s3_server import SeaweedFS, new_bucket, s3_client, s3_uri_args
from tests.kafka_cluster import start_single
from tests.proxy_process import ProxyProcess, free_port, start_proxy
from tiering.metadata.journal_store import JOURNAL_NAME, read_journal
from tiering.metadata.state import MetadataState

AT_ONCE, DELAYED = "upload-at-once", "upload-delayed"
PROXY_SEGMENT_BYTES = 1 << 20  # the proxy's log.segment.bytes
TASK_INTERVAL_MS = 500
PREFIX = "bench"
# S3 Standard, us-east-1 list prices
PUT_PER_1000, GET_PER_1000, STORAGE_GB_MONTH = 0.005, 0.0004, 0.023
GB = 1 << 30
MONTH_S = 730 * 3600
KINDS = ("PUT", "GET", "DELETE", "LIST")
SEGMENT_OBJECT = re.compile(r"\d{20}-[^/]+\.[a-z_-]+")


# --- the clients -------------------------------------------------------------------------------------


class PacedProducer(threading.Thread):
    """``bytes_per_s`` of ``record_bytes`` records into ``topic`` for ``seconds`` from ``start`` (a
    perf_counter time), round-robin over the partitions; each value starts with its sequence number."""

    def __init__(self, bootstrap: str, topic: str, partitions: int, bytes_per_s: float, record_bytes: int,
                 start: float, seconds: float) -> None:
        super().__init__(name=f"produce-{topic}", daemon=True)
        self.producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "compression.type": "none",
                                  "enable.idempotence": True, "queue.buffering.max.messages": 1_000_000})
        self.topic, self.partitions = topic, partitions
        self.per_s = bytes_per_s / record_bytes
        self.record_bytes = record_bytes
        self.start_at, self.seconds = start, seconds
        rng = random.Random(topic)
        self.pool = [rng.randbytes(record_bytes - 8) for _ in range(256)]
        self.sent = self.acked = self.failed = 0
        self.undelivered = -1

    def _delivered(self, error: KafkaError | None, _msg: object) -> None:
        if error is None:
            self.acked += 1
        else:
            self.failed += 1

    def run(self) -> None:
        end = self.start_at + self.seconds
        while (now := time.perf_counter()) < end:
            due = int((now - self.start_at) * self.per_s)
            while self.sent < due:
                try:
                    self.producer.produce(self.topic, struct.pack(">Q", self.sent) + self.pool[self.sent % 256],
                                          partition=self.sent % self.partitions, on_delivery=self._delivered)
                except BufferError:
                    break
                self.sent += 1
            self.producer.poll(0)
            time.sleep(0.005)
        self.undelivered = self.producer.flush(30)
        del self.producer  # destroyed now: no reconnecting to a proxy stopped later


class TailConsumer(threading.Thread):
    """Reads ``topic`` through the proxy from offset 0 as it is produced, until ``stop`` is set."""

    def __init__(self, bootstrap: str, topic: str, partitions: int) -> None:
        super().__init__(name=f"consume-{topic}", daemon=True)
        self.consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"tail-{uuid.uuid4().hex[:8]}",
                                  "enable.auto.commit": False, "enable.partition.eof": False,
                                  "fetch.wait.max.ms": 100})
        self.consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        self.stop = threading.Event()
        self.consumed = 0
        self.max_age_ms = 0.0  # the oldest a record was when it was consumed
        self.errors: list[str] = []

    def run(self) -> None:
        try:
            while not self.stop.is_set():
                for msg in self.consumer.consume(1000, 0.2):
                    if msg.error() is not None:
                        self.errors.append(str(msg.error()))
                        continue
                    self.consumed += 1
                    kind, stamp = msg.timestamp()
                    if kind != 0:
                        self.max_age_ms = max(self.max_age_ms, time.time() * 1000 - stamp)
        finally:
            self.consumer.close()


# --- what the proxy says -------------------------------------------------------------------------------


def journal_figures(data_dir: Path, topics: tuple[str, ...]) -> dict[str, tuple[int, int]]:
    """Per topic (bytes, segments) of its COPY_SEGMENT_FINISHED remote segments, from the journal."""
    out = {topic: (0, 0) for topic in topics}
    path = data_dir / "metadata" / JOURNAL_NAME
    if not path.exists():
        return out
    state = MetadataState()
    for record in read_journal(path.read_bytes())[0]:
        state.apply(record)
    for tp, partition in state.partitions.items():
        if tp.topic in out:
            done = partition.finished()
            size, count = out[tp.topic]
            out[tp.topic] = (size + sum(s.segment_size_bytes for s in done), count + len(done))
    return out


LINE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?\s+(\S+)")
LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


def scrape(port: int) -> list[tuple[str, dict[str, str], float]]:
    """Every sample of the proxy's Prometheus endpoint: (name, labels, value)."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as answer:
        text = answer.read().decode()
    samples = []
    for line in text.splitlines():
        if line.startswith("#") or not (m := LINE.match(line)):
            continue
        samples.append((m.group(1), dict(LABEL.findall(m.group(2) or "")), float(m.group(3))))
    return samples


def metrics_answer(port: int) -> bool:
    try:
        scrape(port)
        return True
    except OSError:
        return False


@dataclass
class Requests:
    """Requests by kind: the store's, and per topic when the proxy counts them so."""

    store: dict[str, int]
    per_topic: dict[str, dict[str, int]] | None  # None: no per-topic metric
    written: dict[str, int]  # per-topic bytes written, when counted

    @classmethod
    def read(cls, port: int, topics: tuple[str, ...]) -> Requests:
        store: dict[str, int] = {}
        per_topic: dict[str, dict[str, int]] = {}
        written: dict[str, int] = {}
        seen_topic_metric = False
        for name, labels, value in scrape(port):
            if name == "tiered_proxy_remote_storage_requests_total" and "kind" in labels:
                store[labels["kind"]] = store.get(labels["kind"], 0) + int(value)
            elif name == "tiered_proxy_remote_topic_requests_total":
                seen_topic_metric = True
                if labels.get("topic") in topics:
                    per_topic.setdefault(labels["topic"], {})[labels["kind"]] = int(value)
            elif name == "tiered_proxy_remote_topic_bytes_total" and labels.get("direction") == "written":
                if labels.get("topic") in topics:
                    written[labels["topic"]] = int(value)
        return cls(store, per_topic if seen_topic_metric else None, written)


@dataclass
class Sample:
    t: float  # seconds since production started
    tiered: dict[str, tuple[int, int]]  # topic -> (bytes, segments)
    requests: Requests
    lag: dict[str, int]  # topic -> acknowledged - consumed records


def bucket_objects(endpoint: str, bucket: str, topics: tuple[str, ...]) -> tuple[dict[str, int], int]:
    """Segment objects in the bucket per topic (``{prefix}/{topic}-{id}/{partition}/{offset}-{id}.{ext}``,
    or salted ``{salt}~{topic}~{id}``), and every other object (manifests)."""
    client = s3_client(endpoint)
    counts = dict.fromkeys(topics, 0)
    other = 0
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=f"{PREFIX}/"):
        for item in page.get("Contents", []):
            parts = item["Key"][len(PREFIX) + 1:].split("/")
            owner = None
            if len(parts) == 3 and SEGMENT_OBJECT.fullmatch(parts[2]):
                directory = parts[0]
                if "~" in directory:
                    owner = directory.split("~")[1]
                else:
                    owner = next((t for t in topics if directory.startswith(f"{t}-")), None)
            if owner in counts:
                counts[owner] += 1
            else:
                other += 1
    return counts, other


# --- the run -----------------------------------------------------------------------------------------


def create_topics(proxy: ProxyProcess, args: argparse.Namespace) -> dict[str, dict[str, str]]:
    common = {"remote.storage.enable": "true", "local.retention.ms": str(args.local_retention_ms),
              "retention.ms": str(args.retention_ms)}
    configs = {AT_ONCE: {**common, "remote.copy.lag.ms": "0"},
               DELAYED: {**common, "remote.copy.lag.ms": str(args.lag_ms if args.lag_ms is not None else -1)}}
    admin = AdminClient({"bootstrap.servers": proxy.bootstrap})
    futures = admin.create_topics([NewTopic(t, args.partitions, 1, config=c) for t, c in configs.items()])
    for future in futures.values():
        future.result(30)
    for topic in configs:
        wait_for(f"{topic} through the proxy", lambda t=topic: led(proxy.bootstrap, t, args.partitions), 30, 0.2)
    described = {}
    for topic in configs:
        resource = ConfigResource(ConfigResource.Type.TOPIC, topic)
        entries = admin.describe_configs([resource])[resource].result(30)
        described[topic] = {k: entries[k].value for k in ("remote.copy.lag.ms", "remote.copy.lag.bytes",
                                                          "local.retention.ms", "retention.ms") if k in entries}
    return described


def led(bootstrap: str, topic: str, partitions: int) -> bool:
    """Whether every partition of a new topic answers ListOffsets (its leader is known)."""
    try:
        return len(list_offsets(bootstrap, topic, EARLIEST)) == partitions
    except Exception:  # a leader not elected yet: asked again
        return False


def check_from_zero(bootstrap: str, topic: str, partitions: int, expected: int, timeout: float) -> tuple[bool, str]:
    """A new consumer assigned at offset 0 of every partition through the proxy: every sequence
    number below ``expected`` once, and offsets contiguous from 0 in every partition."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"zero-{uuid.uuid4().hex[:8]}",
                         "enable.auto.commit": False, "enable.partition.eof": False})
    seen: dict[int, int] = {}
    offsets: dict[int, list[int]] = {p: [] for p in range(partitions)}
    errors: list[str] = []
    got = 0
    try:
        consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        deadline = time.monotonic() + timeout
        settle = None
        while time.monotonic() < deadline:
            batch = consumer.consume(1000, 0.5)
            for msg in batch:
                if msg.error() is not None:
                    errors.append(str(msg.error()))
                    continue
                got += 1
                (number,) = struct.unpack(">Q", msg.value()[:8])
                seen[number] = seen.get(number, 0) + 1
                offsets[msg.partition()].append(msg.offset())
            if got >= expected and settle is None:
                settle = time.monotonic() + 1.5  # one more look: anything after them is a stray
            if settle is not None and time.monotonic() >= settle:
                break
    finally:
        consumer.close()
    missing = sum(1 for n in range(expected) if n not in seen)
    twice = sum(1 for c in seen.values() if c > 1)
    strays = sum(1 for n in seen if n >= expected)
    gaps = [p for p, o in offsets.items() if o != list(range(len(o)))]
    ok = got == expected and not missing and not twice and not strays and not gaps and not errors
    detail = (f"{got:,} records read of {expected:,}: {missing} missing, {twice} twice, {strays} strays, "
              f"partitions with offset gaps {gaps or 'none'}, errors {errors[:3] or 'none'}")
    return ok, detail


@dataclass
class Run:
    samples: list[Sample] = field(default_factory=list)
    producers: dict[str, PacedProducer] = field(default_factory=dict)
    consumers: dict[str, TailConsumer] = field(default_factory=dict)
    max_lag: dict[str, int] = field(default_factory=dict)


def run(args: argparse.Namespace, work: Path) -> None:
    topics = (AT_ONCE, DELAYED)
    metrics_port = free_port()
    with contextlib.ExitStack() as stack:
        broker = start_single(work / "broker")
        stack.callback(broker.stop)
        store = stack.enter_context(SeaweedFS(work / "seaweedfs"))
        endpoint = store.gateway().endpoint
        bucket = new_bucket(endpoint)
        data_dir = work / "data"
        proxy = start_proxy(broker.bootstrap, work / "proxy", "--data-dir", str(data_dir),
                            *s3_uri_args(bucket, PREFIX, endpoint),
                            "--set", f"proxy.metrics.listen=127.0.0.1:{metrics_port}",
                            "--set", f"remote.log.manager.task.interval.ms={TASK_INTERVAL_MS}",
                            "--set", f"log.segment.bytes={PROXY_SEGMENT_BYTES}")
        stack.callback(proxy.stop)
        wait_for("the proxy's metrics endpoint", lambda: metrics_answer(metrics_port), 30, 0.2)
        described = create_topics(proxy, args)
        print(f"Kafka {broker.version} at {broker.bootstrap}; SeaweedFS S3 {endpoint}, bucket {bucket}; proxy "
              f"{proxy.bootstrap} (PID {proxy.process.pid}), metrics on 127.0.0.1:{metrics_port}", flush=True)
        for topic in topics:
            print(f"  {topic}: {described[topic]}", flush=True)

        state = Run()
        start = time.perf_counter() + 0.5
        for topic in topics:
            state.consumers[topic] = TailConsumer(proxy.bootstrap, topic, args.partitions)
            state.producers[topic] = PacedProducer(proxy.bootstrap, topic, args.partitions, args.mb_per_s * 1e6,
                                                   args.record_bytes, start, args.seconds)
            state.max_lag[topic] = 0
        for thread in (*state.consumers.values(), *state.producers.values()):
            thread.start()
        try:
            sample_run(state, proxy, data_dir, metrics_port, topics, start, args.seconds)
        finally:
            for producer in state.producers.values():
                producer.join(60)
            wait_for_consumers(state)
        records = {t: p.acked for t, p in state.producers.items()}
        local_start = list_offsets(broker.bootstrap, DELAYED, EARLIEST)
        before = Requests.read(metrics_port, topics)
        ok, detail = check_from_zero(proxy.bootstrap, DELAYED, args.partitions, records[DELAYED], 180)
        after = Requests.read(metrics_port, topics)
        check_gets = after.store.get("GET", 0) - before.store.get("GET", 0)
        proxy.stop()
        objects, other = bucket_objects(endpoint, bucket, topics)
        final_tiered = journal_figures(data_dir, topics)
        logs = proxy.log_text()
        report(args, state, topics, objects, other, final_tiered, described)
        print(f"\nconsumer from offset 0 through the proxy, topic B ({DELAYED}), at the end: {detail}; the "
              f"broker's log start was {local_start} (records below it came from the remote tier, "
              f"{check_gets} GETs): {'every record once' if ok else '**FAILED**'}")
        problems = [line for line in logs.splitlines() if " ERROR " in line or "Traceback" in line]
        warnings = sum(1 for line in logs.splitlines() if " WARNING " in line)
        print(f"the proxy logged {len(problems)} ERROR/Traceback lines, {warnings} WARNING lines")
        for line in [*problems[:5], *[w for w in logs.splitlines() if " WARNING " in w][:3]]:
            print(f"    {line[:300]}")
        if not ok:
            raise SystemExit(1)


def sample_run(state: Run, proxy: ProxyProcess, data_dir: Path, metrics_port: int, topics: tuple[str, ...],
               start: float, seconds: float) -> None:
    """A sample every second from the start of production to its end (t = 0 .. seconds)."""
    for tick in range(int(seconds) + 1):
        while (wait := start + tick - time.perf_counter()) > 0:
            time.sleep(min(wait, 0.2))
        if proxy.process.poll() is not None:
            raise RuntimeError(f"the proxy exited with {proxy.process.returncode}; see {proxy.log_path}")
        lag = {t: max(0, state.producers[t].acked - state.consumers[t].consumed) for t in topics}
        for t in topics:
            state.max_lag[t] = max(state.max_lag[t], lag[t])
        sample = Sample(time.perf_counter() - start, journal_figures(data_dir, topics),
                        Requests.read(metrics_port, topics), lag)
        state.samples.append(sample)
        if tick % 10 == 0:
            shown = ", ".join(f"{t} {sample.tiered[t][0] / 1e6:.1f} MB in {sample.tiered[t][1]} segments "
                              f"(produced {state.producers[t].acked:,}, consumer lag {lag[t]})" for t in topics)
            puts = sample.requests.store.get("PUT", 0)
            print(f"  t={tick:3d} s: tiered {shown}; store PUTs {puts}", flush=True)


def wait_for_consumers(state: Run, timeout: float = 20) -> None:
    deadline = time.monotonic() + timeout
    for topic, consumer in state.consumers.items():
        while consumer.consumed < state.producers[topic].acked and time.monotonic() < deadline:
            time.sleep(0.1)
        consumer.stop.set()
    for consumer in state.consumers.values():
        consumer.join(10)


# --- the report --------------------------------------------------------------------------------------


def byte_seconds(samples: list[Sample], topic: str) -> float:
    """The integral of the topic's remote bytes over the samples (trapezoids)."""
    return sum((a.tiered[topic][0] + b.tiered[topic][0]) / 2 * (b.t - a.t) for a, b in itertools.pairwise(samples))


def ratio(b: float, a: float) -> str:
    return f"{b / a:.3f}" if a else "-"


def usd(value: float) -> str:
    return f"${value:.3g}"


def report(args: argparse.Namespace, state: Run, topics: tuple[str, ...], objects: dict[str, int], other: int,
           final_tiered: dict[str, tuple[int, int]], described: dict[str, dict[str, str]]) -> None:
    last = state.samples[-1]
    seconds = last.t
    lag_ms = args.local_retention_ms if args.lag_ms is None else args.lag_ms
    per_segment = {t: objects[t] / final_tiered[t][1] if final_tiered[t][1] else 0.0 for t in topics}
    segment_objects = sum(objects.values())
    segments_total = sum(final_tiered[t][1] for t in topics)
    mean_per_segment = segment_objects / segments_total if segments_total else 0.0
    per_topic = last.requests.per_topic
    if per_topic is not None:
        puts = {t: per_topic.get(t, {}).get("PUT", 0) for t in topics}
        gets = {t: per_topic.get(t, {}).get("GET", 0) for t in topics}
        source = "the proxy's per-topic metric tiered_proxy_remote_topic_requests_total{topic,kind}"
    else:
        puts = {t: round(mean_per_segment * last.tiered[t][1]) for t in topics}
        gets = dict.fromkeys(topics, 0)
        source = (f"no per-topic metric: the store's PUTs attributed as (objects per segment in the bucket, "
                  f"{mean_per_segment:.2f}) x (segments of the topic); GETs not attributable (the store's: "
                  f"{last.requests.store.get('GET', 0)})")
    uploaded = {t: last.tiered[t][0] for t in topics}
    stored = {t: byte_seconds(state.samples, t) for t in topics}
    a, b = topics
    rows: list[tuple[str, str, str, str]] = []

    def row(label: str, values: dict[str, float], spec: str = ",.0f") -> None:
        rows.append((label, f"{values[a]:{spec}}", f"{values[b]:{spec}}", ratio(values[b], values[a])))

    row("PUT requests", puts)
    row("GET requests", gets)
    row("segments tiered", {t: last.tiered[t][1] for t in topics})
    row("MB uploaded (segments' bytes)", {t: uploaded[t] / 1e6 for t in topics}, ".1f")
    if last.requests.written:
        row("MB written to the store (per-topic metric)", {t: last.requests.written.get(t, 0) / 1e6 for t in topics},
            ".1f")
    row("stored GB-seconds", {t: stored[t] / GB for t in topics}, ".2f")
    put_usd = {t: puts[t] / 1000 * PUT_PER_1000 for t in topics}
    get_usd = {t: gets[t] / 1000 * GET_PER_1000 for t in topics}
    storage_usd = {t: stored[t] / GB / MONTH_S * STORAGE_GB_MONTH for t in topics}
    for label, values in (("PUTs, S3 Standard $", put_usd), ("GETs, S3 Standard $", get_usd),
                          ("storage, S3 Standard $", storage_usd),
                          ("total $", {t: put_usd[t] + get_usd[t] + storage_usd[t] for t in topics})):
        rows.append((label, usd(values[a]), usd(values[b]), ratio(values[b], values[a])))
    rows.append(("consumer's largest lag, records (sampled every s)", f"{state.max_lag[a]:,}",
                 f"{state.max_lag[b]:,}", ""))
    rows.append(("oldest record when consumed, ms", f"{state.consumers[a].max_age_ms:.0f}",
                 f"{state.consumers[b].max_age_ms:.0f}", ""))

    produced = {t: state.producers[t].acked for t in topics}
    print(f"\ndelayed upload (KIP-1241), Kafka 4.4, SeaweedFS S3: {seconds:.0f} s at {args.mb_per_s:g} MB/s per topic of "
          f"{args.record_bytes} B records ({produced[a]:,} and {produced[b]:,} records acknowledged), "
          f"{args.partitions} partition(s), proxy segments {PROXY_SEGMENT_BYTES >> 20} MiB, local.retention.ms "
          f"{args.local_retention_ms}, retention.ms {args.retention_ms}; A = {a} (remote.copy.lag.ms=0), "
          f"B = {b} (remote.copy.lag.ms={described[b].get('remote.copy.lag.ms', '?')}, effective {lag_ms} ms)\n")
    print("| measure, by the end of the run | A: at once | B: delayed | B/A |")
    print("|---|---|---|---|")
    for cells in rows:
        print("| " + " | ".join(cells) + " |")
    print("\nproducers: " + ", ".join(f"{t} {p.sent:,} sent, {p.acked:,} acknowledged, {p.failed} failed"
                                      for t, p in state.producers.items())
          + "; consumers' errors: " + (", ".join(f"{t} {c.errors[:2]}" for t, c in state.consumers.items()
                                                if c.errors) or "none"))
    print(f"requests from {source}")
    print(f"objects per segment in the bucket: {', '.join(f'{t} {per_segment[t]:.2f}' for t in topics)} "
          f"({segment_objects} segment objects, {other} other objects: manifests); the store's requests in all: "
          + ", ".join(f"{k} {last.requests.store.get(k, 0)}" for k in KINDS))
    if per_topic is not None:
        print("cross-check, (objects per segment) x (segments): "
              + ", ".join(f"{t} {per_segment[t] * last.tiered[t][1]:.0f} PUTs" for t in topics))
    share = max(0.0, (seconds - lag_ms / 1000) / seconds)
    print(f"what the lag alone predicts over this run: B/A {share:.3f} of the bytes and PUTs ((T - L) / T), "
          f"{share * share:.3f} of the byte-seconds (((T - L) / T)^2); the PUTs per segment are the same, so in a "
          f"steady state B makes as many PUTs per MB as A, {lag_ms / 1000:.0f} s later")
    rate = args.mb_per_s * 1e6
    held_a, held_b = rate * args.retention_ms / 1000, rate * max(0, args.retention_ms - lag_ms) / 1000
    print(f"steady state, a topic whose readers keep up: the remote tier holds retention.ms of data for A "
          f"({held_a / GB:.2f} GB at {args.mb_per_s:g} MB/s), retention.ms - L for B ({held_b / GB:.2f} GB): "
          f"storage saved L / retention.ms = {lag_ms / args.retention_ms:.2%} "
          f"(${(held_a - held_b) / GB * STORAGE_GB_MONTH:.4f} a month at this rate)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=int, default=90, help="seconds of production (default 90)")
    parser.add_argument("--mb-per-s", type=float, default=1.0, help="MB/s produced into each topic (default 1)")
    parser.add_argument("--record-bytes", type=int, default=1024, help="record value size (default 1024)")
    parser.add_argument("--partitions", type=int, default=1, help="partitions per topic (default 1)")
    parser.add_argument("--local-retention-ms", type=int, default=30_000, help="local.retention.ms of both topics, "
                        "L (default 30000)")
    parser.add_argument("--retention-ms", type=int, default=3_600_000, help="retention.ms of both topics, well "
                        "above the run (default 3600000)")
    parser.add_argument("--lag-ms", type=int, help="topic B's remote.copy.lag.ms (default -1: the local retention)")
    parser.add_argument("--keep-work-dir", action="store_true", help="keep the broker's and the proxy's folders")
    args = parser.parse_args()
    if args.record_bytes < 16:
        parser.error("--record-bytes must be at least 16")
    run_in_work_dir("bench-delayed-upload-", args.keep_work_dir, lambda work: run(args, work))


if __name__ == "__main__":
    main()
