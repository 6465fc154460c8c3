"""The proxy's remote tier against Kafka's OWN tiered storage (issue 25, item 4), on Apache Kafka 4.4.

    python -m tests.bench.kafka_native [--mb 300] [--runs 3] [--segment-mb 4] [--readers 1] [--shared]
                                       [--keep-work-dir]

Two single-node Kafka 4.4 brokers (tests/kafka_cluster.py) and the same data, ``--mb`` MB of 1 KiB records
(values half random, half repeated; no compression) in 3 partitions of each of three topics, every topic
with ``segment.bytes`` = ``--segment-mb`` and no total retention:

- broker A, ``start_native_tiered``: Kafka's own tiered storage on (LocalTieredStorage, a local folder,
  like the proxy's default tier), ``remote.log.manager.task.interval.ms=100``;
  (a) ``bench-local``: an ordinary topic, the broker's local log only;
  (b) ``bench-native``: Kafka's native tiered storage (``remote.storage.enable=true``,
      ``local.retention.bytes=1``): once Kafka has tiered it, its own local retention deletes every
      tiered segment, so the bench waits until the broker's EARLIEST_LOCAL (ListOffsets -4) is at the
      active segment: everything below is read from LocalTieredStorage by the broker.
- broker B, ``start_single``: a plain Kafka 4.4 without tiered storage, behind ``tiered-proxy serve``
  (``log.segment.bytes`` = ``--segment-mb``, ``remote.log.manager.task.interval.ms=100``);
  (c) ``bench-proxy``: tiered by the proxy only (``remote.storage.enable=true``,
      ``local.retention.bytes=1`` set through the proxy, which keeps them: broker B could not tier
      it), the brokers' log start moved by the proxy's DeleteRecords; read through the proxy.

Why a second broker for (c): a proxy in front of broker A would leave (b) to Kafka (a topic the
brokers tier is theirs, docs/operating-tiering.md#who-tiers-a-topic), and a topic created through it
would be tiered by the proxy while broker A also has tiered storage on; broker B keeps the two kinds
of tiering on separate machines, each measured with nothing of the other in the way.

Where the processes run: the proxies on CPUs of their own, both brokers and every client on the
others (tests/cpu_sets.py), so that the reads of (a) and (b) and the reads of (c) give the clients
and brokers the same CPUs; ``--shared`` lets every process run anywhere.

What is measured, in this order:

1. Backlog tiering throughput, once each: (b) and (c) are created without tiering, the data is
   produced, then tiering is switched on with IncrementalAlterConfigs (at broker A for (b), through the
   proxy for (c)), and LATEST_TIERED (ListOffsets -5: at broker A; through the proxy, which answers its
   own highest tiered offset) is polled every 50 ms until all is tiered; the time is that of the poll
   that first saw the final offsets. All, for Kafka: every closed segment (LATEST_TIERED at the active
   segment, which Kafka never tiers); MB are those segments' bytes (its log directory). For the proxy,
   which rolls segments of its own at ``segment.bytes`` of what it fetched (they end elsewhere than the
   broker's, so its open segment may hold the broker's active segment start, or it may copy past it):
   less than one ``segment.bytes`` left untiered in every partition; MB are its finished remote
   segments (its metadata journal).
2. ``--runs`` rounds, round-robin over (a), (b), (c), of: the first-record latency (a new
   confluent-kafka consumer assigned at offset 0 of every partition, from its creation to its first
   record; for (c) on a fresh proxy process, cold caches, its first client: "cold"), then one
   confluent-kafka consumer reading every record from offset 0 (librdkafka's default fetch sizes,
   ``fetch.queue.backoff.ms=0`` as in tests/bench/backfill.py): MB/s of payload from the first poll to
   the last record, then the first-record latency once more ("after a read": a new consumer, the
   proxy or broker warm). With ``--readers N`` the whole read is N consumers at once, each in a thread,
   and their MB/s together is reported. Every proxy read is on a fresh proxy process
   (``remote.log.manager.task.interval.ms`` 60000: it copies nothing), so no read is served from an
   earlier read's chunk cache; broker A keeps its caches, as a broker does. The proxy's resident
   set is sampled every 20 ms over its round; the peak of each round is printed.
3. ``--runs`` rounds of Kafka's Java consumer with its defaults (``ConsumerPerformance`` through
   ``cluster.run_tool("consumer-perf")``, a new group, from the earliest offset): (b) straight at broker
   A vs (c) through a fresh proxy; its ``fetch.MB.sec`` (MiB/s of payload, group join excluded).

The table prints MB/s medians [min-max], first-record latencies, and ratios side by side: proxy remote /
Kafka native remote, proxy remote / broker local, the tiering throughput ratio, first-record latencies,
and the Java consumer's ratio. The default size runs in about 5 minutes on a 2-core machine; every wait
is bounded. Brokers and proxies are stopped at the end, also on an error or Ctrl-C; the working folder
in /tmp is removed unless ``--keep-work-dir``.
"""

from __future__ import annotations

import argparse
import contextlib
import random
import statistics
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, NewTopic

from protocol.apis import LIST_OFFSETS
from tests.bench.process_hygiene import run_in_work_dir
from tests.bench.wire_speed import rss_sampler
from tests.cpu_sets import Placement, pin_self, placement
from tests.kafka_cluster import KafkaCluster, start_native_tiered, start_single
from tests.proxy_process import ProxyProcess, start_proxy
from tiering.broker_client import BrokerClient
from tiering.metadata.journal_store import JOURNAL_NAME, read_journal
from tiering.metadata.state import MetadataState
from tiering.model import RemoteLogSegmentMetadata

PARTITIONS = 3
RECORD_BYTES = 1024
LOCAL, NATIVE, PROXY = "bench-local", "bench-native", "bench-proxy"
LATEST, EARLIEST, EARLIEST_LOCAL, LATEST_TIERED = -1, -2, -4, -5
TASK_INTERVAL_MS = 100
LABELS = {LOCAL: "(a) broker local, direct", NATIVE: "(b) Kafka native remote, direct",
          PROXY: "(c) proxy remote, through the proxy"}


# --- offsets and segments ------------------------------------------------------------------------


def list_offsets(bootstrap: str, topic: str, timestamp: int) -> dict[int, int]:
    """ListOffsets v9 (the first with EARLIEST_LOCAL and LATEST_TIERED) of every partition, each at
    its leader as ``bootstrap`` names it (a proxy's ports through a proxy)."""
    client = BrokerClient(bootstrap, timeout_s=15)
    try:
        info = client.metadata([topic])[topic]
        offsets = {}
        for p, part in sorted(info.partitions.items()):
            body = {"replica_id": -1, "isolation_level": 0, "timeout_ms": 10_000, "topics": [
                {"name": topic, "partitions": [{"partition_index": p, "current_leader_epoch": -1,
                                                "timestamp": timestamp}]}]}
            (answer,) = client.request(part.leader, LIST_OFFSETS, 9, body)["topics"][0]["partitions"]
            if answer["error_code"] != 0:
                raise RuntimeError(f"ListOffsets {timestamp} of {topic}-{p} at {bootstrap}: "
                                   f"error {answer['error_code']}")
            offsets[p] = answer["offset"]
        return offsets
    finally:
        client.close()


@dataclass(frozen=True)
class Layout:
    """A topic's segments on its broker: per partition the active segment's base offset, and the bytes
    of the closed segments below it (what tiering copies)."""

    active: dict[int, int]
    closed_bytes: int


def proxy_segments(data_dir: Path, topic: str) -> dict[int, list[RemoteLogSegmentMetadata]]:
    """The proxy's finished remote segments of ``topic`` per partition, oldest first, from its metadata
    journal (read-only, safe beside the running proxy). The proxy rolls segments of its own at
    ``segment.bytes`` of what it fetched, so they end elsewhere than the broker's."""
    state = MetadataState()
    for record in read_journal((data_dir / "metadata" / JOURNAL_NAME).read_bytes())[0]:
        state.apply(record)
    return {tp.partition: partition.finished() for tp, partition in state.partitions.items()
            if tp.topic == topic}


def proxy_tiered_bytes(data_dir: Path, topic: str, upto: dict[int, int]) -> int:
    """Bytes of the proxy's remote segments of ``topic`` up to ``upto`` (per partition)."""
    return sum(s.segment_size_bytes for p, segments in proxy_segments(data_dir, topic).items()
               for s in segments if s.end_offset <= upto[p])


def proxy_done(data_dir: Path, topic: str, ends: dict[int, int], log_end: dict[int, int],
               segment_bytes: int) -> bool:
    """Whether the proxy has tiered all it will: it rolls a segment once it holds ``segment_bytes``, so
    it is done when less than that is left untiered in every partition (estimated from the bytes per
    offset of its own segments; the records are all alike). Its segments end elsewhere than the
    broker's, so "up to the broker's active segment" would not do: its open segment may hold it."""
    if any(ends.get(p, -1) < 0 for p in range(PARTITIONS)):
        return False
    segments = proxy_segments(data_dir, topic)
    for p in range(PARTITIONS):
        mine = [s for s in segments.get(p, []) if s.end_offset <= ends[p]]
        if not mine:
            return False
        offsets = mine[-1].end_offset + 1 - mine[0].start_offset
        per_offset = sum(s.segment_size_bytes for s in mine) / offsets
        if (log_end[p] - ends[p] - 1) * per_offset >= segment_bytes:
            return False
    return True


def proxy_trim_target(data_dir: Path, topic: str, log_end: dict[int, int]) -> dict[int, int]:
    """Where the proxy's local retention with ``local.retention.bytes=1`` puts the brokers' log start:
    past every tiered segment, except the one that reaches the log end (Kafka's rule keeps the active
    segment; docs/operating-tiering.md, *Tiering*)."""
    target = {}
    for p, segments in proxy_segments(data_dir, topic).items():
        last = segments[-1]
        target[p] = last.start_offset if last.end_offset + 1 >= log_end[p] else last.end_offset + 1
    return target


def layout(cluster: KafkaCluster, topic: str) -> Layout:
    active, closed = {}, 0
    for p in range(PARTITIONS):
        files = (cluster.data_dir / f"{topic}-{p}").glob("*.log")
        logs = sorted((int(f.stem), f.stat().st_size) for f in files)
        active[p] = logs[-1][0]
        closed += sum(size for _, size in logs[:-1])
    return Layout(active, closed)


def wait_for(what: str, condition: Callable[[], bool], timeout: float, interval: float = 0.1) -> float:
    """Seconds until ``condition()`` held (polled every ``interval``); raises after ``timeout``."""
    started = time.perf_counter()
    while not condition():
        if time.perf_counter() - started > timeout:
            raise TimeoutError(f"{what}: not within {timeout:.0f} s")
        time.sleep(interval)
    return time.perf_counter() - started


# --- producing and tiering -----------------------------------------------------------------------


def create_topic(bootstrap: str, topic: str, segment_bytes: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    config = {"segment.bytes": str(segment_bytes), "retention.ms": "-1", "retention.bytes": "-1"}
    admin.create_topics([NewTopic(topic, PARTITIONS, 1, config=config)])[topic].result(30)
    wait_for(f"{topic} in the metadata", lambda: topic in BrokerClient(bootstrap).metadata([topic]), 30, 0.2)


def produce(targets: list[tuple[str, list[str]]], megabytes: int) -> tuple[int, float]:
    """The same records into every topic: ``(bootstrap, topics)`` per broker; returns (records
    per topic, seconds)."""
    producers = [(Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "batch.size": 1 << 20,
                            "queue.buffering.max.messages": 1_000_000, "enable.idempotence": False,
                            "compression.type": "none"}), topics) for bootstrap, topics in targets]
    rng = random.Random(25)
    half = RECORD_BYTES // 2
    pool = [rng.randbytes(half) + b"x" * (RECORD_BYTES - half) for _ in range(4096)]
    count = (megabytes * 1_000_000) // RECORD_BYTES
    started = time.perf_counter()
    for i in range(count):
        value = pool[i % len(pool)]
        for producer, topics in producers:
            for topic in topics:
                while True:
                    try:
                        producer.produce(topic, value=value, partition=i % PARTITIONS)
                        break
                    except BufferError:
                        producer.poll(0.05)
        if i % 20_000 == 0:
            for producer, _ in producers:
                producer.poll(0)
    for producer, _ in producers:
        if producer.flush(300) != 0:
            raise RuntimeError("records left undelivered")
    return count, time.perf_counter() - started


def enable_tiering(bootstrap: str, topic: str) -> None:
    """remote.storage.enable=true and local.retention.bytes=1 on ``topic`` (IncrementalAlterConfigs)."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    entries = [ConfigEntry(name, value, incremental_operation=AlterConfigOpType.SET)
               for name, value in (("remote.storage.enable", "true"), ("local.retention.bytes", "1"))]
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic, incremental_configs=entries)
    admin.incremental_alter_configs([resource])[resource].result(30)


@dataclass(frozen=True)
class Tiering:
    megabytes: float  # closed segments' bytes, / 1e6
    seconds: float  # from switching tiering on until every closed segment is tiered
    trimmed_s: float  # then until the broker's local log start reached the active segment
    remote_share: float  # records below the broker's local log start, of all

    @property
    def mb_per_s(self) -> float:
        return self.megabytes / self.seconds


def tier(topic: str, alter_at: str, tiered_at: str, local_at: str, local_spec: int,
         done: Callable[[dict[int, int]], bool], copied_bytes: Callable[[dict[int, int]], int],
         trim_target: Callable[[], dict[int, int]], records: int, timeout: float) -> Tiering:
    """Switch tiering of ``topic`` on (through ``alter_at``) and poll LATEST_TIERED at ``tiered_at``
    (every 50 ms) until ``done(offsets)``: the time is that of the first poll that saw the final
    offsets. Then wait until ``local_spec`` (EARLIEST_LOCAL, or EARLIEST at a broker without tiered
    storage) at ``local_at`` reaches ``trim_target()``. ``copied_bytes`` tells the bytes in the remote
    tier up to the final LATEST_TIERED offsets."""
    started = time.perf_counter()
    enable_tiering(alter_at, topic)
    ends: dict[int, int] = {}
    changed = [started]

    def tiered() -> bool:
        now = list_offsets(tiered_at, topic, LATEST_TIERED)
        if now != ends:
            ends.update(now)
            changed.append(time.perf_counter())
        return done(ends)

    wait_for(f"tiering of {topic} (LATEST_TIERED {ends})", tiered, timeout, 0.05)
    seconds = changed[-1] - started
    copied = copied_bytes(ends)
    local_start: dict[int, int] = {}
    target = trim_target()

    def trimmed() -> bool:
        local_start.update(list_offsets(local_at, topic, local_spec))
        return all(local_start[p] >= target[p] for p in range(PARTITIONS))

    try:
        trimmed_s = wait_for(f"local retention of {topic}", trimmed, 90, 0.1)
    except TimeoutError as e:
        print(f"  warning: {e}; local log start {local_start}, expected {target}")
        trimmed_s = float("nan")
    return Tiering(copied / 1e6, seconds, trimmed_s, sum(local_start.values()) / records)


# --- reading -------------------------------------------------------------------------------------


def consumer_config(bootstrap: str) -> dict[str, object]:
    return {"bootstrap.servers": bootstrap, "group.id": f"bench-{uuid.uuid4().hex[:8]}",
            "enable.auto.commit": False, "enable.partition.eof": False, "fetch.queue.backoff.ms": 0}


def first_record_ms(bootstrap: str, topic: str, timeout: float = 60) -> float:
    """From a new consumer's creation, assigned at offset 0 of every partition, to its first record."""
    started = time.perf_counter()
    consumer = Consumer(consumer_config(bootstrap))
    try:
        consumer.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
        while time.perf_counter() - started < timeout:
            msg = consumer.poll(0.05)
            if msg is not None and msg.error() is None:
                return (time.perf_counter() - started) * 1000
            if msg is not None and msg.error().code() != KafkaError._PARTITION_EOF:
                raise RuntimeError(msg.error())
    finally:
        consumer.close()
    raise TimeoutError(f"no record of {topic} at {bootstrap} within {timeout:.0f} s")


def drain(consumer: Consumer, expected: int, timeout: float) -> tuple[int, int]:
    """Consumes up to ``expected`` records within ``timeout`` seconds: (records, payload bytes).
    Never asks for more than is left: consume() would wait its whole timeout for a batch it
    cannot fill."""
    got = size = 0
    deadline = time.perf_counter() + timeout
    while got < expected and time.perf_counter() < deadline:
        for m in consumer.consume(min(10_000, expected - got), 0.5):
            if m.error() is not None:
                if m.error().code() != KafkaError._PARTITION_EOF:
                    raise RuntimeError(m.error())
                continue
            got += 1
            size += len(m.value())
    return got, size


def backfill_mb_per_s(bootstrap: str, topic: str, expected: int, timeout: float = 300) -> float:
    """One confluent-kafka consumer reads every record from offset 0: payload MB/s."""
    consumer = Consumer(consumer_config(bootstrap))
    consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(PARTITIONS)])
    started = time.perf_counter()
    try:
        got, size = drain(consumer, expected, timeout)
        seconds = time.perf_counter() - started
    finally:
        consumer.close()
    if got != expected:
        raise RuntimeError(f"read {got} of {expected} records of {topic} in {seconds:.0f} s")
    return size / seconds / 1e6


def together_mb_per_s(bootstrap: str, topic: str, expected: int, readers: int) -> float:
    """``readers`` consumers reading every record from offset 0 at once, each in a thread of its own:
    the MB/s of all of them over the time the slowest took."""
    if readers == 1:
        return backfill_mb_per_s(bootstrap, topic, expected)
    errors: list[BaseException] = []

    def read() -> None:
        try:
            backfill_mb_per_s(bootstrap, topic, expected)
        except BaseException as e:  # noqa: BLE001 - raised below
            errors.append(e)

    threads = [threading.Thread(target=read) for _ in range(readers)]
    started = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join(600)
    if errors:
        raise errors[0]
    return readers * expected * RECORD_BYTES / (time.perf_counter() - started) / 1e6


def java_fetch_mb_per_s(cluster: KafkaCluster, bootstrap: str, topic: str, expected: int) -> float:
    """Kafka's ConsumerPerformance (the Java consumer with its defaults, a new group, from the earliest
    offset) reads ``expected`` records: its fetch.MB.sec (MiB/s of payload, group join excluded)."""
    done = cluster.run_tool("consumer-perf", "--bootstrap-server", bootstrap, "--topic", topic,
                            "--num-records", expected, "--group", f"perf-{uuid.uuid4().hex[:8]}",
                            "--timeout", 30_000, timeout=300)
    lines = [line for line in done.stdout.splitlines() if line.strip()]
    if done.returncode != 0 or len(lines) < 2:
        raise RuntimeError(f"consumer-perf exited {done.returncode}: {done.stdout[-500:]} "
                           f"{done.stderr[-1500:]}")
    row = dict(zip([h.strip() for h in lines[0].split(",")], [v.strip() for v in lines[1].split(",")],
                   strict=False))
    if int(row["data.consumed.in.nMsg"]) != expected:
        raise RuntimeError(f"consumer-perf read {row['data.consumed.in.nMsg']} of {expected} records")
    return float(row["fetch.MB.sec"])


@dataclass
class Figures:
    values: list[float] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)

    def median(self) -> float | None:
        return statistics.median(self.values) if self.values else None

    def cell(self, spec: str = ".1f") -> str:
        if not self.values:
            return "FAILED"
        spread = f" [{min(self.values):{spec}}-{max(self.values):{spec}}]" if len(self.values) > 1 else ""
        return f"{self.median():{spec}}{spread}"


def attempt(figures: Figures, what: str, measure: Callable[[], float]) -> str:
    """Run one measurement into ``figures``; a failure is recorded, not raised (the others go on)."""
    try:
        value = measure()
    except Exception as e:  # noqa: BLE001 - the table says what failed
        figures.errors.append(f"{what}: {type(e).__name__}: {str(e)[:300]}")
        return f"{what} FAILED"
    figures.values.append(value)
    return f"{what} {value:.1f}"


def read_variant(bootstrap: str, topic: str, records: int, first: tuple[Figures, Figures],
                 speed: Figures, readers: int = 1) -> str:
    """The first-record latency of a new consumer, a whole read by ``readers`` others at once (their
    MB/s together), and the first-record latency of one more."""
    attempt(first[0], "first", lambda: first_record_ms(bootstrap, topic))
    shown = attempt(speed, topic, lambda: together_mb_per_s(bootstrap, topic, records, readers))
    attempt(first[1], "again", lambda: first_record_ms(bootstrap, topic))
    return shown


@contextlib.contextmanager
def fresh_proxy(bootstrap: str, work: Path, data_dir: Path, cpus: frozenset[int] | None) -> Iterator[ProxyProcess]:
    """A new proxy process on the tiered data, on ``cpus``: its copier's first round finds nothing to
    copy, and the next one is a minute away."""
    proxy = start_proxy(bootstrap, work, "--data-dir", str(data_dir),
                        "--set", "remote.log.manager.task.interval.ms=60000", cpus=cpus)
    try:
        yield proxy
    finally:
        proxy.stop()


# --- the run ---------------------------------------------------------------------------------------


def ratio(mine: float | None, theirs: float | None) -> str:
    return "-" if mine is None or not theirs else f"{mine / theirs:.2f}x"


def start_brokers(work: Path) -> tuple[KafkaCluster, KafkaCluster]:
    """Broker A (native tiered storage) and broker B (plain), started side by side."""
    started: dict[str, KafkaCluster] = {}
    errors: list[BaseException] = []

    def start(name: str, call: Callable[[], KafkaCluster]) -> None:
        try:
            started[name] = call()
        except BaseException as e:  # noqa: BLE001 - re-raised below
            errors.append(e)

    threads = [threading.Thread(target=start, args=("a", lambda: start_native_tiered(
                   work / "broker-a", properties={"remote.log.manager.task.interval.ms": TASK_INTERVAL_MS}))),
               threading.Thread(target=start, args=("b", lambda: start_single(work / "broker-b")))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(300)
    if errors or len(started) != 2:
        for cluster in started.values():
            cluster.stop()
        raise errors[0] if errors else TimeoutError("the brokers did not start within 300 s")
    return started["a"], started["b"]


def run(args: argparse.Namespace, work: Path) -> None:
    segment_bytes = args.segment_mb << 20
    bench_started = time.perf_counter()
    where = placement(not args.shared)
    pin_self(where)  # both brokers and every client inherit it
    broker_a, broker_b = start_brokers(work)
    tiering_proxy: ProxyProcess | None = None
    try:
        print(f"Kafka {broker_a.version}: broker A {broker_a.bootstrap} (its own tiered storage, "
              f"LocalTieredStorage), broker B {broker_b.bootstrap} (no tiered storage) behind tiered-proxy; "
              f"started in {time.perf_counter() - bench_started:.0f} s", flush=True)
        for topic in (LOCAL, NATIVE):
            create_topic(broker_a.bootstrap, topic, segment_bytes)
        create_topic(broker_b.bootstrap, PROXY, segment_bytes)
        records, produce_s = produce([(broker_a.bootstrap, [LOCAL, NATIVE]), (broker_b.bootstrap, [PROXY])],
                                     args.mb)
        print(f"produced {records} records of {RECORD_BYTES} B into each of {LOCAL}, {NATIVE} (broker A) and "
              f"{PROXY} (broker B) in {produce_s:.1f} s", flush=True)
        native_layout = layout(broker_a, NATIVE)

        at_a = broker_a.bootstrap
        timeout = 60 + args.mb / 2
        # Kafka tiers its closed segments, whole, and stops at the active one.
        native = tier(NATIVE, at_a, at_a, at_a, EARLIEST_LOCAL,
                      lambda ends: all(ends[p] + 1 >= native_layout.active[p] for p in range(PARTITIONS)),
                      lambda _: native_layout.closed_bytes, lambda: native_layout.active, records, timeout)
        print(f"Kafka native tiering: {native.megabytes:.1f} MB in {native.seconds:.1f} s; local log trimmed "
              f"{native.trimmed_s:.1f} s later", flush=True)
        data_dir = work / "proxy-data"
        tiering_proxy = start_proxy(broker_b.bootstrap, work / "proxy", "--data-dir", str(data_dir),
                                    "--set", f"log.segment.bytes={segment_bytes}",
                                    "--set", f"remote.log.manager.task.interval.ms={TASK_INTERVAL_MS}",
                                    cpus=where.proxy)
        via_proxy, at_b = tiering_proxy.bootstrap, broker_b.bootstrap
        log_end = list_offsets(at_b, PROXY, LATEST)
        ours = tier(PROXY, via_proxy, via_proxy, at_b, EARLIEST,
                    lambda ends: proxy_done(data_dir, PROXY, ends, log_end, segment_bytes),
                    lambda ends: proxy_tiered_bytes(data_dir, PROXY, ends),
                    lambda: proxy_trim_target(data_dir, PROXY, log_end), records, timeout)
        print(f"proxy tiering: {ours.megabytes:.1f} MB in {ours.seconds:.1f} s; broker log start moved "
              f"{ours.trimmed_s:.1f} s later", flush=True)
        # At broker B the key was refused or never sent: the proxy alone tiers (c).
        client_b = BrokerClient(at_b)
        try:
            own = client_b.topic_configs([PROXY])[PROXY].tiering_values()
        finally:
            client_b.close()
        tiering_proxy.stop()
        tiering_proxy = None
        earliest = {NATIVE: list_offsets(broker_a.bootstrap, NATIVE, EARLIEST)}
        with fresh_proxy(broker_b.bootstrap, work / "proxy", data_dir, where.proxy) as proxy:
            earliest[PROXY] = list_offsets(proxy.bootstrap, PROXY, EARLIEST)
        if any(earliest[t][p] != 0 for t in earliest for p in range(PARTITIONS)):
            raise RuntimeError(f"EARLIEST should be 0 everywhere: {earliest}")

        speed = {topic: Figures() for topic in LABELS}
        proxy_rss: list[float] = []  # peak resident set of each fresh proxy over its reads, MB
        first = {topic: (Figures(), Figures()) for topic in LABELS}
        for round_ in range(1, args.runs + 1):
            shown = []
            for topic in LABELS:
                if topic == PROXY:
                    with fresh_proxy(broker_b.bootstrap, work / "proxy", data_dir, where.proxy) as proxy, \
                            rss_sampler(proxy.process.pid, proxy_rss):
                        shown.append(read_variant(proxy.bootstrap, topic, records, first[topic],
                                                  speed[topic], args.readers))
                else:
                    shown.append(read_variant(broker_a.bootstrap, topic, records, first[topic], speed[topic],
                                              args.readers))
            print(f"  round {round_}/{args.runs} confluent-kafka MB/s: {', '.join(shown)}", flush=True)
        java = {NATIVE: Figures(), PROXY: Figures()}
        for round_ in range(1, args.runs + 1):
            shown = [attempt(java[NATIVE], NATIVE,
                             lambda: java_fetch_mb_per_s(broker_a, broker_a.bootstrap, NATIVE, records))]
            with fresh_proxy(broker_b.bootstrap, work / "proxy", data_dir, where.proxy) as proxy:
                shown.append(attempt(java[PROXY], PROXY,
                                     lambda: java_fetch_mb_per_s(broker_a, proxy.bootstrap, PROXY, records)))
            print(f"  round {round_}/{args.runs} Java consumer fetch MiB/s: {', '.join(shown)}", flush=True)

        report(args, where, records, native, ours, own, speed, first, java, time.perf_counter() - bench_started)
        print(f"\nproxy peak RSS over each round's reads of (c) (a fresh proxy each): "
              f"{', '.join(f'{mb:.0f}' for mb in proxy_rss)} MB")
    finally:
        if tiering_proxy is not None:
            tiering_proxy.stop()
        broker_a.stop()
        broker_b.stop()


def report(args: argparse.Namespace, where: Placement, records: int, native: Tiering, ours: Tiering, own_at_b: dict[str, str],
           speed: dict[str, Figures], first: dict[str, tuple[Figures, Figures]], java: dict[str, Figures],
           elapsed: float) -> None:
    mb = records * RECORD_BYTES / 1e6
    print(f"\nKafka 4.4 native tiered storage vs tiered-proxy: {mb:.0f} MB per topic ({records} records of "
          f"{RECORD_BYTES} B, {PARTITIONS} partitions, segment.bytes {args.segment_mb} MiB, no compression), "
          f"{args.runs} runs, {elapsed:.0f} s in all; CPUs: {where.describe()}")
    print(f"  (a) {LOCAL}   broker A, not tiered: the broker's local log")
    print(f"  (b) {NATIVE}  broker A, Kafka's own tiered storage (LocalTieredStorage): "
          f"{native.remote_share:.0%} of the records below the broker's EARLIEST_LOCAL")
    print(f"  (c) {PROXY}   broker B (plain Kafka, no tiered storage; the topic's own tiering keys at the "
          f"broker: {own_at_b or 'none'}) behind tiered-proxy, tiered by the proxy only (local folder): "
          f"{ours.remote_share:.0%} of the records below the broker's log start")
    print(f"\n{'backlog tiering (once each)':<40}{'MB':>8}{'seconds':>9}{'MB/s':>8}{'trim s':>8}")
    for name, t in (("(b) Kafka native (LocalTieredStorage)", native),
                    ("(c) tiered-proxy (local folder)", ours)):
        print(f"{name:<40}{t.megabytes:>8.1f}{t.seconds:>9.1f}{t.mb_per_s:>8.1f}{t.trimmed_s:>8.1f}")
    consumers = "confluent consumer" if args.readers == 1 else f"{args.readers} confluent, together"
    print(f"\n{'':<38}{consumers:>24}{'first record ms':>34}{'Java consumer':>22}")
    print(f"{'read from offset 0':<38}{'MB/s, median [min-max]':>24}{'cold':>16}{'after a read':>18}"
          f"{'fetch MiB/s':>22}")
    for topic, label in LABELS.items():
        java_cell = java[topic].cell() if topic in java else "-"
        cold, again = (f.cell(".0f") for f in first[topic])
        print(f"{label:<38}{speed[topic].cell():>24}{cold:>16}{again:>18}{java_cell:>22}")
    for figures in [*speed.values(), *(f for pair in first.values() for f in pair), *java.values()]:
        for error in figures.errors:
            print(f"    failed {error}")
    m = {topic: f.median() for topic, f in speed.items()}
    rows = [
        ("proxy remote / Kafka native remote, confluent consumer", ratio(m[PROXY], m[NATIVE]), ""),
        ("proxy remote / broker local, confluent consumer", ratio(m[PROXY], m[LOCAL]), ""),
        ("Kafka native remote / broker local, confluent consumer", ratio(m[NATIVE], m[LOCAL]), ""),
        ("tiering throughput, proxy / Kafka native", ratio(ours.mb_per_s, native.mb_per_s),
         f"{ours.mb_per_s:.1f} vs {native.mb_per_s:.1f} MB/s"),
    ]
    for i, name in enumerate(("cold", "after a read")):
        rows.append((f"first record ({name}), proxy remote / Kafka native remote",
                     ratio(first[PROXY][i].median(), first[NATIVE][i].median()),
                     f"{first[PROXY][i].cell('.0f')} vs {first[NATIVE][i].cell('.0f')} ms"))
    rows.append(("Java consumer, proxy remote / Kafka native remote", ratio(java[PROXY].median(),
                                                                            java[NATIVE].median()), ""))
    print("\nratios (of medians)")
    for text, value, detail in rows:
        print(f"  {text:<64}{value:>7}" + (f"   ({detail})" if detail else ""))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--mb", type=int, default=300, help="MB of 1 KiB records per topic (default 300)")
    parser.add_argument("--runs", type=int, default=3, help="reads per variant (default 3)")
    parser.add_argument("--segment-mb", type=int, default=4, help="segment.bytes in MiB (default 4; Kafka's "
                        "minimum is 1)")
    parser.add_argument("--readers", type=int, default=1, help="consumers reading each variant at once (default 1); "
                        "their MB/s together is reported")
    parser.add_argument("--shared", action="store_true", help="let every process run on any CPU, instead of the "
                        "proxies on CPUs of their own and the brokers and the clients on the others")
    parser.add_argument("--keep-work-dir", action="store_true", help="keep the brokers' and proxies' folders")
    args = parser.parse_args()
    run_in_work_dir("bench-kafka-native-", args.keep_work_dir, lambda work: run(args, work))


if __name__ == "__main__":
    main()
