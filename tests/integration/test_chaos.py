"""Chaos on three brokers (issue 27, item 4): a real Apache Kafka 4.4 cluster of the test's own
(three combined broker+controller nodes, RF 3, min.insync.replicas 2, automatic leader rebalancing
off) behind one proxy that tiers a three-partition topic into small remote segments (64 KiB) and
moves the brokers' log starts with DeleteRecords (``local.retention.bytes``).

While an idempotent producer (confluent-kafka, ``enable.idempotence``, acks=all) writes numbered
records through the proxy without pause and a subscribed tail consumer (confluent-kafka) reads
them through the proxy, the cluster is disturbed, one step at a time, each step waited out until
every partition has a leader and all three replicas in sync again:

1. kill -9 of the current leader of partition 0, a few seconds down, started again;
2. the same for the leader of another partition (on another broker where there is one);
3. a controlled shutdown (SIGTERM) of the broker leading the most partitions, then a restart;
4. a partition reassignment (Admin API, kafka-python's AlterPartitionReassignments) that reorders
   partition 2's replicas, its current leader last (RF stays 3 on 3 brokers), so that its leader is
   no longer the preferred one; waited until the reassignment is no longer listed and the new order
   is in the metadata;
5. a preferred-leader election (confluent-kafka's ``elect_leaders``, PREFERRED) once the
   restarts have left leaders off their preferred replicas; waited until every partition is led
   by its first replica.

The producer stops a few seconds after the last step. Every record whose delivery report
succeeded is "acknowledged" (partition, offset, key, value); failed deliveries are counted, not
acknowledged. Then, once the proxy has tiered past half of every partition:

- confluent-kafka (assign, OFFSET_BEGINNING) and kafka-python (seek_to_beginning) read every
  partition from offset 0 through the proxy: every offset from 0 to the log end exactly once, in
  order, every acknowledged record at its offset with its key and value; an offset that is not an
  acknowledged record must be a record whose delivery report failed although the write landed
  (reported; none is expected) - there are no control records, the producer is not transactional;
- the offsets below each broker's log start (describe's Lx > 0 on every partition) were served from
  the remote tier only: their number is reported;
- the remote tier is whole: describe's Rx is 0 on every partition, the segments in the proxy's
  metadata journal are finished, contiguous from 0 to Ry, none overlapping or repeated, as many as
  describe counts, no data-loss range is recorded, and ``tiered_proxy_data_loss_gaps_total`` is 0;
- the tail consumer saw no offset twice and each partition in offset order (it may have missed
  none either: it is waited for until it reaches every log end);
- the proxy is still running and its log has no "internal error" and no "Traceback"; its WARNING
  and ERROR lines are counted by kind and printed.

The test prints a report (``-s`` shows it): timings of each step, acknowledged records per
partition, failed deliveries, records read from below the log start, leader changes seen (by a
sampler asking the brokers' metadata twice a second), warnings by kind.

Restarted brokers run with the JVM's client compiler only (``-XX:TieredStopAtLevel=1``): on two
busy cores a restart otherwise took 15-35 s.

Long version. The short one (all five steps, a few seconds apart, about two minutes on two cores)
runs in the suite. Like the soak (``tests/integration/test_soak.py`` runs a short soak in the suite;
the long one is ``python -m tests.load.soak``), the long chaos run is this module run as a
program, with more kill -9 rounds and more controlled shutdowns, and longer production::

    .venv/bin/python -m tests.integration.test_chaos [--kills 12] [--shutdowns 3] [--dwell 8] [--rate 300]

It does the same checks, prints the same report and exits non-zero if a check fails; the work
directory (cluster and proxy logs) is kept and printed.
"""

from __future__ import annotations

import argparse
import logging
import random
import re
import sys
import tempfile
import threading
import time
import urllib.request
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, ElectionType, KafkaError, Producer
from confluent_kafka import TopicPartition as CTopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kafka import KafkaAdminClient, TopicPartition
from prometheus_client.parser import text_string_to_metric_families

from proxy.describe import DescribeError, PartitionRow, describe
from tests import reads_from_zero
from tests.kafka_cluster import KafkaCluster, start_three
from tests.proxy_process import ProxyProcess, free_port, start_proxy
from tests.tiering_checks import leader_offsets
from tiering.broker_client import EARLIEST, LATEST, BrokerClientError
from tiering.metadata.view import load_metadata

pytestmark = pytest.mark.integration

PARTITIONS = 3
SEGMENT_BYTES = 64 * 1024  # the proxy's segment size: many remote segments per partition
LOCAL_RETENTION_BYTES = 64 * 1024
ASSIGNMENT = [[1, 2, 3], [2, 3, 1], [3, 1, 2]]  # partition p led by broker p + 1 at first
VALUE_BYTES = 300
BROKER_PROPERTIES = {
    # The preferred-leader election is the test's own step; Kafka's periodic one (every 300 s by
    # default) would otherwise be a step nobody scheduled.
    "auto.leader.rebalance.enable": False,
    "unclean.leader.election.enable": False,
}

Record = tuple[int, int, bytes, bytes]  # partition, offset, key, value
# librdkafka's own log lines (a refused connection to a killed broker, many a second) go to Python
# logging, not to stderr: pytest keeps them with a failing test's report.
RDKAFKA = {"logger": logging.getLogger("chaos.rdkafka")}


# --------------------------------------------------------------------------------------------------
# What happened


@dataclass
class Step:
    kind: str  # "kill -9", "controlled shutdown", "reassignment", "preferred election"
    detail: str
    seconds: float  # from the step's start until the cluster was whole again


@dataclass
class ChaosResult:
    started: float = field(default_factory=time.monotonic)
    timings: dict[str, float] = field(default_factory=dict)  # phase -> seconds
    steps: list[Step] = field(default_factory=list)
    acked: dict[int, dict[int, tuple[bytes, bytes]]] = field(
        default_factory=lambda: {p: {} for p in range(PARTITIONS)})  # partition -> offset -> (key, value)
    acked_twice: list[tuple[int, int]] = field(default_factory=list)  # (partition, offset) acknowledged twice
    # Acknowledged without an offset, partition -> key -> value: librdkafka's implicit acks (a
    # ProduceResponse lost with its broker, a later batch of the partition acknowledged, so the lost
    # one was written too; its delivery report succeeds with no offset). Placed by the first full
    # read from offset 0 (``place_unplaced``), checked like the others from then on.
    acked_unplaced: dict[int, dict[bytes, bytes]] = field(
        default_factory=lambda: {p: {} for p in range(PARTITIONS)})
    placed: int = 0  # of those, found in the log and placed
    failed: Counter[str] = field(default_factory=Counter)  # delivery errors by name
    failed_keys: dict[bytes, bytes] = field(default_factory=dict)  # key -> value of failed deliveries
    producer_fatal: list[str] = field(default_factory=list)
    producers: int = 0
    ends: dict[int, int] = field(default_factory=dict)  # the brokers' log ends at the end
    leader_changes: dict[int, list[int]] = field(default_factory=dict)  # partition -> leaders in turn
    off_preferred_before_election: int = 0
    rows: list[PartitionRow] = field(default_factory=list)
    below_log_start: dict[int, int] = field(default_factory=dict)  # acknowledged records below Lx
    remote_segments: dict[int, int] = field(default_factory=dict)
    tail_seen: int = 0
    tail_errors: Counter[str] = field(default_factory=Counter)
    tail_problems: list[str] = field(default_factory=list)
    read: dict[str, int] = field(default_factory=dict)  # reader -> records read from offset 0
    unacked_in_log: dict[str, int] = field(default_factory=dict)  # reader -> failed deliveries that landed
    metrics: dict[str, float] = field(default_factory=dict)
    log_lines: dict[str, Counter[str]] = field(default_factory=dict)  # level -> kind -> count
    copier_backoff: tuple[int, float] = (0, 0.0)  # the longest run of failed passes, and its last backoff
    problems: list[str] = field(default_factory=list)

    def phase(self, name: str, since: float) -> None:
        self.timings[name] = time.monotonic() - since

    def report(self) -> str:
        lines = [f"chaos: {time.monotonic() - self.started:.1f} s in all"]
        lines += [f"  {name}: {seconds:.1f} s" for name, seconds in self.timings.items()]
        lines.append("steps:")
        lines += [f"  {s.kind} {s.detail} ({s.seconds:.1f} s until whole again)" for s in self.steps]
        lines.append(f"acknowledged records per partition: "
                     f"{ {p: len(offsets) for p, offsets in self.acked.items()} } "
                     f"(total {sum(map(len, self.acked.values()))}, of which acknowledged without an offset "
                     f"by librdkafka's implicit acks and placed by the read-back: {self.placed}); "
                     f"log ends {self.ends}")
        lines.append(f"failed deliveries: {sum(self.failed.values())} {dict(self.failed)}; producers used "
                     f"{self.producers}; fatal errors: {self.producer_fatal or 'none'}")
        lines.append(f"leader changes seen: "
                     f"{ {p: len(leaders) - 1 for p, leaders in self.leader_changes.items()} } "
                     f"(leaders in turn: {self.leader_changes}); partitions off their preferred leader before "
                     f"the election: {self.off_preferred_before_election}")
        lines.append(f"acknowledged records below the brokers' log start (remote tier only): "
                     f"{self.below_log_start} (total {sum(self.below_log_start.values())})")
        lines.append("describe: " + "; ".join(f"p{r.partition} Rx={r.rx} Ry={r.ry} Lx={r.lx} Lz={r.lz} "
                                             f"segments={r.segments} lost={r.lost}" for r in self.rows))
        lines.append(f"remote segments in the metadata journal: {self.remote_segments}")
        lines.append(f"read from offset 0: {self.read}; failed deliveries found in the log: {self.unacked_in_log}")
        lines.append(f"tail consumer: {self.tail_seen} records, errors {dict(self.tail_errors)}, "
                     f"problems {self.tail_problems[:5] or 'none'}")
        lines.append(f"metrics: {self.metrics}")
        for level, kinds in self.log_lines.items():
            lines.append(f"proxy log {level} lines by kind ({sum(kinds.values())}):")
            lines += [f"  {count:5d}  {kind}" for kind, count in kinds.most_common()]
        lines.append(f"longest run of failed copier passes: {self.copier_backoff[0]} (then backed off "
                     f"{self.copier_backoff[1]:.1f} s)")
        lines.append(f"problems: {self.problems or 'none'}")
        return "\n".join(lines)


# --------------------------------------------------------------------------------------------------
# The cluster, as the brokers see it (never through the proxy)


@dataclass
class PartitionState:
    leader: int
    replicas: list[int]
    isr: list[int]


class ClusterView:
    """The topic's partitions, asked of the brokers themselves (confluent-kafka's Metadata)."""

    def __init__(self, cluster: KafkaCluster, topic: str) -> None:
        self.cluster = cluster
        self.topic = topic
        self.bootstrap = cluster.bootstraps[cluster.listeners[0]]
        self.admin = AdminClient({"bootstrap.servers": self.bootstrap, "socket.timeout.ms": 5000, **RDKAFKA})

    def partitions(self, timeout: float = 5) -> dict[int, PartitionState]:
        metadata = self.admin.list_topics(self.topic, timeout=timeout)
        found = metadata.topics.get(self.topic)
        if found is None or found.error is not None:
            return {}
        return {p: PartitionState(m.leader, list(m.replicas), list(m.isrs)) for p, m in found.partitions.items()}

    def brokers(self, timeout: float = 5) -> set[int]:
        return set(self.admin.list_topics(self.topic, timeout=timeout).brokers)

    def wait_whole(self, timeout: float = 60, why: str = "") -> dict[int, PartitionState]:
        """Until all three brokers are listed and every partition has a leader and three in-sync replicas."""
        deadline = time.monotonic() + timeout
        state: dict[int, PartitionState] = {}
        error: Exception | None = None
        while True:
            try:
                state = self.partitions()
                if (self.brokers() == {1, 2, 3} and len(state) == PARTITIONS
                        and all(s.leader >= 0 and sorted(s.isr) == [1, 2, 3] for s in state.values())):
                    return state
            except Exception as e:  # noqa: BLE001 - a metadata request during a failover
                error = e
            if time.monotonic() > deadline:
                raise AssertionError(f"cluster not whole {timeout:.0f} s after {why}: {state} (last error {error!r})\n"
                                     f"{self.cluster.describe()}")
            time.sleep(0.3)


class LeaderSampler:
    """Records each partition's leaders in turn, asking the brokers' metadata every ``interval`` s."""

    def __init__(self, cluster: KafkaCluster, topic: str, interval: float = 0.5) -> None:
        self.view = ClusterView(cluster, topic)
        self.interval = interval
        self.leaders: dict[int, list[int]] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="leader-sampler", daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                for p, state in self.view.partitions(timeout=2).items():
                    seen = self.leaders.setdefault(p, [])
                    if state.leader >= 0 and (not seen or seen[-1] != state.leader):
                        seen.append(state.leader)
            except Exception:  # noqa: BLE001, S110 - nobody answers for a moment: ask again
                pass
            self._stop.wait(self.interval)

    def __enter__(self) -> LeaderSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(10)


# --------------------------------------------------------------------------------------------------
# The producer and the tail consumer


class ContinuousProducer:
    """Numbered records round-robin over the partitions, ``rate`` a second, through the proxy, by an
    idempotent confluent-kafka producer with acks=all. A fatal error (the idempotent producer gives
    up) is recorded and a new producer takes over."""

    def __init__(self, bootstrap: str, topic: str, rate: int, result: ChaosResult, seed: int = 27) -> None:
        self.bootstrap = bootstrap
        self.topic = topic
        self.rate = rate
        self.result = result
        self.rng = random.Random(seed)
        self.sent = 0
        self.unflushed = 0
        self._lock = threading.Lock()
        self._fatal = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="chaos-producer", daemon=True)
        self.error: BaseException | None = None

    def _new_producer(self) -> Producer:
        self.result.producers += 1

        def on_error(err: KafkaError) -> None:
            if err.fatal():
                self.result.producer_fatal.append(f"{err.name()}: {err.str()}")
                self._fatal.set()

        return Producer({"bootstrap.servers": self.bootstrap, "enable.idempotence": True, "acks": "all",
                         "linger.ms": 5, "compression.type": "lz4", "message.timeout.ms": 60_000,
                         "error_cb": on_error, **RDKAFKA})

    def _delivered(self, err: KafkaError | None, msg: Any) -> None:
        with self._lock:
            if err is not None:
                self.result.failed[err.name()] += 1
                self.result.failed_keys[msg.key()] = msg.value()
                return
            if msg.offset() is None or msg.offset() < 0:
                self.result.acked_unplaced[msg.partition()][msg.key()] = msg.value()
                return
            offsets = self.result.acked[msg.partition()]
            if msg.offset() in offsets:
                self.result.acked_twice.append((msg.partition(), msg.offset()))
            offsets[msg.offset()] = (msg.key(), msg.value())

    def _run(self) -> None:
        try:
            producer = self._new_producer()
            started = time.monotonic()
            while not self._stop.is_set():
                if self._fatal.is_set():
                    producer.flush(30)  # fails what is left; the callbacks count it
                    producer = self._new_producer()
                    self._fatal.clear()
                due = int((time.monotonic() - started) * self.rate)
                while self.sent < due and not self._stop.is_set():
                    i = self.sent
                    value = f"v{i}-".encode() + self.rng.randbytes(VALUE_BYTES)
                    try:
                        producer.produce(self.topic, key=f"k{i}".encode(), value=value, partition=i % PARTITIONS,
                                         on_delivery=self._delivered)
                    except BufferError:
                        producer.poll(0.1)
                        continue
                    self.sent += 1
                producer.poll(0.02)
            self.unflushed = producer.flush(90)
        except BaseException as e:  # noqa: BLE001 - re-raised by stop()
            self.error = e

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(120)
        assert not self._thread.is_alive(), "the producer did not finish flushing in 120 s"
        if self.error is not None:
            raise self.error


class TailConsumer:
    """A subscribed confluent-kafka consumer through the proxy. Each (re)assignment resumes every
    partition right after the last offset it saw (from the beginning at first), and
    ``auto.offset.reset=error`` turns an out-of-range answer into an error instead of a silent jump,
    so any record it sees twice or out of order was served so by the proxy."""

    def __init__(self, bootstrap: str, topic: str, result: ChaosResult) -> None:
        self.topic = topic
        self.result = result
        self.last: dict[int, int] = {}  # partition -> last offset seen
        self.records: list[Record] = []
        self._stop = threading.Event()
        self.consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"chaos-tail-{uuid.uuid4().hex[:8]}",
                                  "enable.auto.commit": False, "auto.offset.reset": "error",
                                  "enable.partition.eof": False, "session.timeout.ms": 15_000, **RDKAFKA})
        self._thread = threading.Thread(target=self._run, name="chaos-tail", daemon=True)
        self.error: BaseException | None = None

    def _on_assign(self, consumer: Consumer, partitions: list[CTopicPartition]) -> None:
        for tp in partitions:
            tp.offset = self.last[tp.partition] + 1 if tp.partition in self.last else OFFSET_BEGINNING
        consumer.assign(partitions)

    def _run(self) -> None:
        try:
            self.consumer.subscribe([self.topic], on_assign=self._on_assign)
            while not self._stop.is_set():
                for msg in self.consumer.consume(500, 0.3):
                    error = msg.error()
                    if error is not None:
                        self.result.tail_errors[error.name()] += 1
                        if error.code() == KafkaError._AUTO_OFFSET_RESET:
                            self.result.tail_problems.append(f"offset out of range: {error.str()}")
                            p = msg.partition()
                            if p is not None and p >= 0:  # carry on after the last offset seen
                                self.consumer.seek(CTopicPartition(self.topic, p, self.last.get(p, -1) + 1))
                        continue
                    p, offset = msg.partition(), msg.offset()
                    if p in self.last and offset <= self.last[p]:
                        self.result.tail_problems.append(f"partition {p}: offset {offset} after {self.last[p]}")
                    self.last[p] = max(offset, self.last.get(p, -1))
                    self.records.append((p, offset, msg.key(), msg.value()))
        except BaseException as e:  # noqa: BLE001 - re-raised by stop()
            self.error = e
        finally:
            self.consumer.close()

    def start(self) -> None:
        self._thread.start()

    def caught_up(self, ends: dict[int, int]) -> bool:
        return all(self.last.get(p, -1) >= end - 1 for p, end in ends.items())

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(30)
        if self.error is not None:
            raise self.error


# --------------------------------------------------------------------------------------------------
# Disturbances


def off_preferred(state: dict[int, PartitionState]) -> list[int]:
    return [p for p, s in sorted(state.items()) if s.leader != s.replicas[0]]


def kill_leader(cluster: KafkaCluster, view: ClusterView, partition: int, down_s: float,
                avoid: set[int]) -> tuple[int, str]:
    """kill -9 the leader of ``partition`` (of another partition whose leader is not in ``avoid``, if
    that one's is), ``down_s`` seconds down, then started again."""
    state = view.partitions()
    candidates = [partition] + [p for p in sorted(state) if p != partition]
    chosen = next((p for p in candidates if state[p].leader not in avoid), partition)
    leader = state[chosen].leader
    cluster.stop_node(leader, graceful=False)
    time.sleep(down_s)
    began = time.monotonic()
    cluster.start_node(leader, timeout=90)
    return leader, (f"broker {leader} (leader of partition {chosen}), {down_s:.0f} s down, "
                    f"{time.monotonic() - began:.1f} s to start again")


def controlled_shutdown(cluster: KafkaCluster, view: ClusterView, down_s: float) -> str:
    """SIGTERM (controlled shutdown) to the broker leading the most partitions, then a restart."""
    leaders = Counter(s.leader for s in view.partitions().values())
    broker = max((1, 2, 3), key=lambda b: (leaders[b], -b))
    began = time.monotonic()
    cluster.stop_node(broker, timeout=30)
    stopped = time.monotonic() - began
    time.sleep(down_s)
    began = time.monotonic()
    cluster.start_node(broker, timeout=90)
    return (f"broker {broker} (leading {leaders[broker]} partition(s)), {stopped:.1f} s to stop, {down_s:.0f} s "
            f"down, {time.monotonic() - began:.1f} s to start again")


def reassign(cluster: KafkaCluster, view: ClusterView, topic: str, partition: int, timeout: float = 60) -> str:
    """Reorder ``partition``'s replicas with AlterPartitionReassignments, its current leader last (so
    that it is no longer the preferred one, whatever the restarts left); wait until it is done."""
    state = view.partitions()[partition]
    before = state.replicas
    target = [b for b in before if b != state.leader] + [state.leader]
    admin = KafkaAdminClient(bootstrap_servers=view.bootstrap.split(","), request_timeout_ms=30_000,
                             client_id="chaos-reassign")
    try:
        answer = admin.alter_partition_reassignments({TopicPartition(topic, partition): target}, timeout_ms=30_000)
        errors = {tp: e for tp, e in answer.items() if e is not None}
        assert not errors, f"reassignment refused: {errors}"
        deadline = time.monotonic() + timeout
        while True:
            ongoing = admin.list_partition_reassignments([TopicPartition(topic, partition)], timeout_ms=10_000)
            current = view.partitions()[partition].replicas
            if not ongoing and current == target:
                break
            assert time.monotonic() < deadline, f"reassignment to {target} not done in {timeout:.0f} s: " \
                                                f"ongoing {ongoing}, replicas {current}"
            time.sleep(0.5)
    finally:
        admin.close()
    return f"partition {partition} replicas {before} -> {target}"


def elect_preferred(view: ClusterView, topic: str, result: ChaosResult, timeout: float = 60) -> str:
    state = view.partitions()
    off = off_preferred(state)
    result.off_preferred_before_election = len(off)
    assert off, f"no leader off its preferred replica before the election: {state}"
    # (confluent-kafka 2.16 passes no keyword arguments on: request_timeout and operation_timeout are
    # refused with "function takes at most 4 arguments"; the defaults are the socket timeout, 60 s.)
    future = view.admin.elect_leaders(ElectionType.PREFERRED, [CTopicPartition(topic, p) for p in off])
    answers = future.result(timeout=70)
    refused = {tp.partition: str(e) for tp, e in answers.items() if e is not None}
    deadline = time.monotonic() + timeout
    while off_preferred(state := view.partitions()):
        assert time.monotonic() < deadline, f"preferred leaders not elected in {timeout:.0f} s: {state}, {refused}"
        time.sleep(0.5)
    return (f"partitions {off} back to their preferred leaders "
            f"{ {p: state[p].replicas[0] for p in off} }" + (f" (answers {refused})" if refused else ""))


def plan(kills: int, shutdowns: int) -> list[str]:
    """The order of the steps: kill -9 rounds first (on different partitions' leaders), the
    controlled shutdowns among them, then the reassignment and the election; a longer plan repeats
    kills and shutdowns before those last two."""
    steps: list[str] = []
    while kills or shutdowns:
        for _ in range(min(2, kills)):
            steps.append("kill")
            kills -= 1
        if shutdowns:
            steps.append("shutdown")
            shutdowns -= 1
    return steps + ["reassign", "elect"]


# --------------------------------------------------------------------------------------------------
# Checks


def create_topic(proxy: ProxyProcess, view: ClusterView, topic: str) -> None:
    admin = AdminClient({"bootstrap.servers": proxy.bootstrap, **RDKAFKA})
    config = {"remote.storage.enable": "true", "local.retention.bytes": str(LOCAL_RETENTION_BYTES),
              "retention.ms": "-1"}
    admin.create_topics([NewTopic(topic, PARTITIONS, replica_assignment=ASSIGNMENT, config=config)])[topic].result(30)
    view.wait_whole(30, "creating the topic")


def broker_offsets(cluster: KafkaCluster, topic: str, timestamp: int) -> dict[int, int]:
    return leader_offsets(cluster.bootstraps[cluster.listeners[0]], topic, timestamp)


def wait_tiered(proxy: ProxyProcess, cluster: KafkaCluster, topic: str, ends: dict[int, int],
                timeout: float = 90) -> list[PartitionRow]:
    """Until every partition is tiered from offset 0 and the brokers' log start has moved past half
    of it (local retention keeps the newest 64 KiB, the copier holds the newest open segment)."""
    deadline = time.monotonic() + timeout
    rows: list[PartitionRow] = []
    starts: dict[int, int] = {}
    error: Exception | None = None
    while time.monotonic() < deadline:
        try:
            rows = describe(proxy.bootstrap, topic)
            starts = broker_offsets(cluster, topic, EARLIEST)
        except (DescribeError, BrokerClientError, OSError) as e:
            error = e
        else:
            if len(rows) == PARTITIONS and all(
                    r.rx == 0 and r.ry is not None and r.lx == starts[r.partition] > ends[r.partition] // 2
                    and r.ry + 1 >= r.lx and r.lz == ends[r.partition] for r in rows):
                return rows
        time.sleep(0.5)
    raise AssertionError(f"not tiered within {timeout:.0f} s: describe {rows}, broker log starts {starts}, log ends "
                         f"{ends}, last error {error!r}; proxy log {proxy.log_path}:\n{proxy.log_text()[-3000:]}")


def read_confluent(proxy: ProxyProcess, topic: str, expected: int, timeout: float = 60) -> list[Record]:
    return reads_from_zero.read_confluent(proxy.bootstrap, topic, PARTITIONS, expected, timeout, **RDKAFKA)


def read_kafka_python(proxy: ProxyProcess, topic: str, expected: int, timeout: float = 60) -> list[Record]:
    return reads_from_zero.read_kafka_python(proxy.bootstrap, topic, PARTITIONS, expected, timeout)


def check_log(name: str, got: list[Record], result: ChaosResult, whole: bool = True) -> list[str]:
    """What is wrong with records read from a partition's start: an offset twice or out of order, an
    acknowledged record missing or different, an offset that is no acknowledged record and no failed
    delivery that landed anyway, a key twice. ``whole``: every offset from 0 to the log end."""
    problems: list[str] = []
    by_partition: dict[int, list[Record]] = {p: [] for p in range(PARTITIONS)}
    for record in got:
        by_partition[record[0]].append(record)
    unacked = 0
    for p, records in by_partition.items():
        offsets = [o for _, o, _, _ in records]
        if offsets != sorted(set(offsets)):
            twice = len(offsets) - len(set(offsets))
            problems.append(f"{name}: partition {p} read out of order or twice ({twice} offsets repeated)")
        if whole and sorted(set(offsets)) != list(range(result.ends[p])):
            missing = sorted(set(range(result.ends[p])) - set(offsets))
            problems.append(f"{name}: partition {p} offsets read are not 0..{result.ends[p] - 1}: "
                            f"{len(missing)} missing (first {missing[:5]}), {len(set(offsets))} distinct read")
        acked, unplaced = result.acked[p], result.acked_unplaced[p]
        wrong = [o for _, o, k, v in records if o in acked and acked[o] != (k, v)]
        if wrong:
            problems.append(f"{name}: partition {p}: {len(wrong)} offsets hold another record than was "
                            f"acknowledged there (first {wrong[:5]})")
        strays = [o for _, o, k, v in records
                  if o not in acked and unplaced.get(k) != v and result.failed_keys.get(k) != v]
        if strays:
            problems.append(f"{name}: partition {p}: {len(strays)} records neither acknowledged nor a failed "
                            f"delivery (first offsets {strays[:5]})")
        if whole:
            keys = {k for _, _, k, _ in records}
            lost = [k for k in unplaced if k not in keys]
            if lost:
                problems.append(f"{name}: partition {p}: {len(lost)} records acknowledged without an offset are "
                                f"not in the log (first {lost[:5]})")
        unacked += sum(1 for _, o, k, _ in records if o not in acked and k in result.failed_keys)
        if whole:
            absent = sorted(set(acked) - set(offsets))
            if absent:
                problems.append(f"{name}: partition {p}: {len(absent)} acknowledged records not read "
                                f"(first {absent[:5]})")
    if whole:
        result.unacked_in_log[name] = unacked
    # Each key at one offset only (idempotence: a retried batch is never written twice).
    twice = [k for k, n in Counter(k for k in {(p, o): k for p, o, k, _ in got}.values()).items() if n > 1]
    if twice:
        problems.append(f"{name}: {len(twice)} keys written twice (first {twice[:5]})")
    return problems


def place_unplaced(got: list[Record], result: ChaosResult) -> None:
    """Give the records acknowledged without an offset the offset a full read found them at (one
    not acknowledged to another record; check_log reported any that is missing)."""
    for p, offset, key, value in got:
        unplaced = result.acked_unplaced[p]
        if unplaced.get(key) == value and offset not in result.acked[p]:
            del unplaced[key]
            result.acked[p][offset] = (key, value)
            result.placed += 1


def check_remote_tier(data_dir: Path, topic: str, rows: list[PartitionRow], result: ChaosResult) -> None:
    """The metadata journal's finished segments: contiguous from 0 to Ry, as many as describe says."""
    state = load_metadata(f"file://{data_dir / 'metadata'}")
    ry = {r.partition: r.ry for r in rows}
    counted = {r.partition: r.segments for r in rows}
    for tp, partition_state in state.partitions.items():
        if tp.topic != topic:
            continue
        segments = partition_state.finished()
        result.remote_segments[tp.partition] = len(segments)
        expected = 0
        for s in segments:
            if s.start_offset != expected:
                result.problems.append(f"remote tier {tp.partition}: segment {s.start_offset}..{s.end_offset} "
                                       f"follows one ending at {expected - 1}")
            expected = s.end_offset + 1
        if segments and segments[-1].end_offset != ry.get(tp.partition):
            result.problems.append(f"remote tier {tp.partition}: last segment ends at {segments[-1].end_offset}, "
                                   f"describe's Ry is {ry.get(tp.partition)}")
        if len(segments) != counted.get(tp.partition):
            result.problems.append(f"remote tier {tp.partition}: {len(segments)} finished segments, describe counts "
                                   f"{counted.get(tp.partition)}")
        unfinished = [s for s in partition_state.segments.values() if s not in segments]
        if unfinished:  # left STARTED or being deleted: only fine while a copy is under way
            result.problems.append(f"remote tier {tp.partition}: segments not finished: "
                                   f"{[(s.start_offset, s.end_offset, s.state.name) for s in unfinished][:5]}")
        if partition_state.data_loss:
            result.problems.append(f"remote tier {tp.partition}: data loss recorded {partition_state.data_loss}")
        if partition_state.divergences:
            result.problems.append(f"remote tier {tp.partition}: divergences recorded "
                                   f"{partition_state.divergences[:3]}")
    if sorted(result.remote_segments) != list(range(PARTITIONS)):
        result.problems.append(f"remote tier: partitions in the journal {sorted(result.remote_segments)}")


def scrape(url: str) -> dict[str, float]:
    """Unlabelled samples by name, labelled ones summed over their labels."""
    with urllib.request.urlopen(url, timeout=10) as response:
        text = response.read().decode()
    found: Counter[str] = Counter()
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            found[sample.name] += sample.value
    return dict(found)


_KIND_PARTS = [(re.compile(r"\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b"), "ID"),
               (re.compile(r"\b\d+\.\d+\.\d+\.\d+:\d+\b"), "HOST:PORT"),
               (re.compile(r"\d+(\.\d+)?"), "N")]


def log_kinds(text: str, topic: str) -> dict[str, Counter[str]]:
    """WARNING and ERROR lines of the proxy's log by kind: logger and message, the topic, ids,
    addresses and numbers replaced, cut at 170 characters."""
    kinds: dict[str, Counter[str]] = {"WARNING": Counter(), "ERROR": Counter()}
    for line in text.splitlines():
        for level, counter in kinds.items():
            marker = f" {level} "
            if marker in line:
                kind = line.split(marker, 1)[1].replace(topic, "TOPIC")
                for pattern, replacement in _KIND_PARTS:
                    kind = pattern.sub(replacement, kind)
                counter[kind[:170]] += 1
    return kinds


# --------------------------------------------------------------------------------------------------
# The run


def run_chaos(work: Path, *, kills: int = 2, shutdowns: int = 1, dwell_s: float = 3.0, down_s: float = 4.0,
              rate: int = 200, warmup_s: float = 5.0, tail_s: float = 4.0, seed: int = 27,
              log: Callable[[str], None] = print) -> ChaosResult:
    """Start a cluster and a proxy in ``work``, run the plan, collect what the checks need; the
    problems found are in ``result.problems`` (empty: everything held)."""
    result = ChaosResult()
    since = time.monotonic()
    cluster = start_three(work / "kafka", properties=BROKER_PROPERTIES)
    result.phase("cluster start", since)
    # Restarted brokers: the client compiler only. A JVM starting beside two busy brokers, the proxy and
    # the clients on two cores spent 15-35 s compiling its way up; what it serves here needs no C2.
    cluster.add_jvm_options("-XX:TieredStopAtLevel=1")
    metrics_port = free_port()
    proxy: ProxyProcess | None = None
    try:
        since = time.monotonic()
        # All three brokers as the proxy's bootstrap (any one may be down when it looks for one).
        proxy = start_proxy(cluster.bootstraps[cluster.listeners[0]], work / "proxy",
                            "--set", f"log.segment.bytes={SEGMENT_BYTES}",
                            "--set", "remote.log.manager.task.interval.ms=100",
                            "--set", f"proxy.metrics.listen=127.0.0.1:{metrics_port}", node_ids=[1, 2, 3])
        data_dir = work / "proxy" / f"data-{proxy.port}"
        topic = f"chaos-{uuid.uuid4().hex[:8]}"
        view = ClusterView(cluster, topic)
        create_topic(proxy, view, topic)
        result.phase("proxy start and topic", since)
        log(f"chaos: cluster {cluster.base_dir}, proxy log {proxy.log_path}, topic {topic}")

        since = time.monotonic()
        producer = ContinuousProducer(proxy.bootstrap, topic, rate, result, seed)
        tail = TailConsumer(proxy.bootstrap, topic, result)
        rng = random.Random(seed)
        with LeaderSampler(cluster, topic) as sampler:
            producer.start()
            tail.start()
            time.sleep(warmup_s)
            killed: set[int] = set()
            partition = 0
            for kind in plan(kills, shutdowns):
                began = time.monotonic()
                if kind == "kill":
                    broker, detail = kill_leader(cluster, view, partition, down_s, killed)
                    killed.add(broker)
                    if len(killed) == 3:
                        killed.clear()
                    partition = (partition + 1) % PARTITIONS
                    name = "kill -9"
                elif kind == "shutdown":
                    detail, name = controlled_shutdown(cluster, view, down_s), "controlled shutdown"
                elif kind == "reassign":
                    detail, name = reassign(cluster, view, topic, PARTITIONS - 1), "reassignment"
                else:
                    detail, name = elect_preferred(view, topic, result), "preferred election"
                view.wait_whole(90, f"{name} {detail}")
                step = Step(name, detail, time.monotonic() - began)
                result.steps.append(step)
                log(f"chaos: {step.kind} {step.detail}: {step.seconds:.1f} s "
                    f"({sum(map(len, result.acked.values()))} acknowledged so far)")
                time.sleep(dwell_s * rng.uniform(0.8, 1.2))
            time.sleep(tail_s)
            producer.stop()
            result.phase("production under disturbances", since)
            result.leader_changes = {p: list(v) for p, v in sorted(sampler.leaders.items())}
        if producer.unflushed:
            result.problems.append(f"{producer.unflushed} records left undelivered after the flush")
        if result.acked_twice:
            result.problems.append(f"offsets acknowledged twice: {result.acked_twice[:5]}")
        result.ends = broker_offsets(cluster, topic, LATEST)

        since = time.monotonic()
        deadline = time.monotonic() + 60
        while not tail.caught_up(result.ends) and time.monotonic() < deadline:
            time.sleep(0.3)
        tail.stop()
        result.tail_seen = len(tail.records)
        result.phase("tail consumer catching up", since)
        result.problems += [f"tail: {p}" for p in result.tail_problems]
        result.problems += check_log("tail consumer", tail.records, result, whole=tail.caught_up(result.ends))
        if not tail.caught_up(result.ends):
            result.problems.append(f"tail consumer did not reach the log ends {result.ends} in 60 s: {tail.last}")

        since = time.monotonic()
        result.rows = wait_tiered(proxy, cluster, topic, result.ends)
        result.phase("waiting for tiering", since)
        check_remote_tier(data_dir, topic, result.rows, result)

        since = time.monotonic()
        total = sum(result.ends.values())
        for name, reader in (("confluent-kafka", read_confluent), ("kafka-python", read_kafka_python)):
            got = reader(proxy, topic, total)
            result.read[name] = len(got)
            result.problems += check_log(name, got, result)
            place_unplaced(got, result)
        result.phase("reading back from offset 0 (both clients)", since)
        starts = broker_offsets(cluster, topic, EARLIEST)
        result.below_log_start = {p: sum(1 for o in result.acked[p] if o < starts[p]) for p in range(PARTITIONS)}

        result.metrics = {k: v for k, v in scrape(f"http://127.0.0.1:{metrics_port}/metrics").items()
                          if (k.startswith("tiered_proxy_") and not k.startswith("tiered_proxy_request"))
                          or "remotefetch" in k or "remotecopyerrors" in k}
        if result.metrics.get("tiered_proxy_data_loss_gaps_total", -1) != 0:
            result.problems.append(f"tiered_proxy_data_loss_gaps_total is "
                                   f"{result.metrics.get('tiered_proxy_data_loss_gaps_total')}")
        if proxy.process.poll() is not None:
            result.problems.append(f"the proxy exited with {proxy.process.returncode}")
        text = proxy.log_text()
        result.log_lines = log_kinds(text, topic)
        attempts = [(int(a), float(s)) for a, s in re.findall(r"failed \(attempt (\d+), retry in ([\d.]+)s\)", text)]
        result.copier_backoff = max(attempts, default=(0, 0.0))
        for marker in ("internal error", "Traceback"):
            lines = [line for line in text.splitlines() if marker in line]
            if lines:
                result.problems.append(f"proxy log has {len(lines)} {marker!r} lines, the first: {lines[0][:600]}")
        return result
    finally:
        if proxy is not None:
            proxy.stop()
        cluster.stop()


def check(result: ChaosResult, kills: int, shutdowns: int) -> None:
    report = result.report()
    assert not result.problems, report
    kinds = Counter(s.kind for s in result.steps)
    assert kinds == {"kill -9": kills, "controlled shutdown": shutdowns, "reassignment": 1,
                     "preferred election": 1}, report
    acked = sum(map(len, result.acked.values()))
    assert all(len(offsets) > 0 for offsets in result.acked.values()), report
    # A broker's death may fail a delivery (the idempotent producer retries within its timeout, so
    # rarely); the acknowledged ones are the many.
    assert sum(result.failed.values()) <= acked // 20, report
    assert all(result.below_log_start[p] > 0 for p in range(PARTITIONS)), report
    assert all(r.lx > 0 and r.rx == 0 and r.lost == 0 for r in result.rows), report
    # Leaders moved: every kill and shutdown moved at least one partition's leader.
    assert sum(len(v) - 1 for v in result.leader_changes.values()) >= kills + shutdowns, report


def test_three_brokers_killed_restarted_reassigned_and_reelected_lose_and_duplicate_nothing(
        tmp_path: Path) -> None:
    result = run_chaos(tmp_path)
    print(result.report())
    check(result, kills=2, shutdowns=1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kills", type=int, default=12, help="kill -9 rounds (leaders of each partition in turn)")
    parser.add_argument("--shutdowns", type=int, default=3, help="controlled shutdowns")
    parser.add_argument("--dwell", type=float, default=8.0, help="seconds between steps")
    parser.add_argument("--down", type=float, default=6.0, help="seconds a stopped broker stays down")
    parser.add_argument("--rate", type=int, default=300, help="records produced per second")
    parser.add_argument("--seed", type=int, default=27)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="tiered-proxy-chaos-"))
    print(f"chaos: {args.kills} kill -9 rounds, {args.shutdowns} controlled shutdowns, a reassignment, an "
          f"election; {args.rate} records/s; work dir {work}", flush=True)
    result = run_chaos(work, kills=args.kills, shutdowns=args.shutdowns, dwell_s=args.dwell, down_s=args.down,
                       rate=args.rate, seed=args.seed, warmup_s=10, tail_s=8,
                       log=lambda line: print(line, flush=True))
    print(result.report())
    try:
        check(result, args.kills, args.shutdowns)
    except AssertionError:
        print(f"chaos: FAILED (work dir kept: {work})")
        sys.exit(1)
    print(f"chaos: passed (work dir kept: {work})")


if __name__ == "__main__":
    main()
