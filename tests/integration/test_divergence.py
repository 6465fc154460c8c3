"""Leader-epoch lineage (KIP-405; issue 27, item 5): when a partition's log diverges, the proxy
cuts its remote tier back to where the cluster's history and the remote tier part, records the
divergence, and tiers the new lineage from there.

The divergence is made for real on a three-broker Apache Kafka 4.4 cluster of the test's own
(brokers 1-3 and a dedicated KRaft controller, node 100, so that stopping brokers never touches
the quorum), in front of which one proxy runs:

1. a tiered topic with one partition on brokers ``A`` (preferred leader) and ``B``,
   ``min.insync.replicas=1`` and ``unclean.leader.election.enable=true``, created through the
   proxy; broker 1, the proxy's bootstrap, holds no replica of it and is never stopped;
2. ``N1`` records are produced (acks=all: ``B`` has them too); ``B`` is killed (SIGKILL) and the ISR
   shrinks to ``[A]``; ``N2`` more records land on ``A`` alone; the proxy tiers past ``N1``, so its
   remote tier holds ``A``'s records at offsets ``N1..Ry``;
3. ``A`` is killed; the partition has no leader; ``B`` is started and, as nothing of the ISR is
   alive, the controller elects it leader uncleanly (Kafka 4.4's controller does so by itself when
   ``B`` unfences, the topic allowing it; the kafka-leader-election tool is the fallback). ``B``'s
   log ends at ``N1``: the ``N3`` records produced now take offsets ``N1..`` that ``A`` had written
   (and the proxy had tiered) under the old epoch. ``A`` comes back and truncates to ``B``'s lineage.

Kafka's side is checked first, directly against the brokers: the acknowledged offsets, ``B``'s log
end at its election, and a read of the whole partition showing ``B``'s records at ``N1..``.

Then what the proxy must do (the copier asks the new leader OffsetForLeaderEpoch for the remote
tier's last epoch before it copies on, as a follower does): ``describe`` shows ``Ry - N1 + 1``
offsets diverged (first ``N1``, last the remote end before the cut), the metrics count one divergence
and those offsets, the metadata records it, no remote segment keeps an offset ``>= N1`` of ``A``'s
epoch, and the remote tier grows again with the new lineage. The topic has no local retention
until then (``retention.ms=-1``), so the brokers keep their whole log for the Kafka-side read above;
then ``local.retention.bytes`` is set through the proxy, the proxy moves the brokers' log start past
the middle of ``B``'s records (DeleteRecords), and confluent-kafka and kafka-python read every offset
from 0 through the proxy exactly once, with the cluster's present history, byte for byte what the
brokers returned (key, value, headers, timestamp, leader epoch): the offsets below the brokers' log
start, ``N1..`` among them, come from the remote tier, so a remote tier that kept ``A``'s records
would be read back. The proxy-side expectations are all checked, and reported together.

(The proxy's default routing, broker-first, is used. With ``proxy.fetch.routing.policy=
remote-preferred`` kafka-python once stalled here at its second remote read: the proxy's
authorization probe carried the client's last fetched epoch, and the broker's diverging-epoch answer
to it was left in the remote answer; tests/integration/test_remote_preferred.py checks that now.)
"""

from __future__ import annotations

import random
import time
import urllib.request
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, Message, Producer
from confluent_kafka import TopicPartition as CTopicPartition
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewTopic,
    ResourceType,
)
from kafka import KafkaConsumer, TopicPartition
from prometheus_client.parser import text_string_to_metric_families

from protocol.apis import METADATA
from proxy.describe import DescribeError, PartitionRow, describe
from tests.kafka_cluster import KafkaCluster, start_three
from tests.proxy_process import ProxyProcess, free_port, start_proxy
from tiering.broker_client import EARLIEST, LATEST, BrokerClient, BrokerClientError
from tiering.metadata.state import epoch_ranges
from tiering.metadata.view import load_metadata

pytestmark = pytest.mark.integration

T = TypeVar("T")

BOOTSTRAP_BROKER = 1  # the proxy's and the checks' way into the cluster: never stopped
A, B = 2, 3  # the partition's replicas, A the preferred (first) one
N1, N2, N3 = 2000, 3000, 3500  # records of each phase, ~230 bytes each
VALUE_BYTES = 180
SEGMENT_BYTES = 64 * 1024  # the proxy's remote segment size (~280 records)
BROKER_PROPERTIES = {
    # A stays a follower when it comes back (it is the preferred leader).
    "auto.leader.rebalance.enable": False,
    # A drops a follower that stopped fetching from the ISR after 2 s (the controller fences a
    # killed broker after broker.session.timeout.ms, 4 s in tests/kafka_cluster.py, anyway).
    "replica.lag.time.max.ms": 2000,
    # Only the test topic may elect uncleanly (set on the topic), never Kafka's own topics.
    "unclean.leader.election.enable": False,
}
TOPIC_CONFIG = {
    "remote.storage.enable": "true",
    "retention.ms": "-1",  # no local retention (yet): the brokers keep their whole log
    "min.insync.replicas": "1",
    "unclean.leader.election.enable": "true",
}
LEADER_ELECTION_TOOL = "org.apache.kafka.tools.LeaderElectionCommand"
LOCAL_RETENTION_BYTES = 64 * 1024  # set once the Kafka side is checked
DIVERGENCE_WAIT_S = 60.0


@dataclass(frozen=True)
class Rec:
    """A record as a consumer returned it; ``headers`` as (name, value) pairs."""

    offset: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes], ...]
    timestamp: int
    leader_epoch: int | None

    @property
    def content(self) -> tuple[int, bytes | None, bytes | None]:
        return self.offset, self.key, self.value


Produced = tuple[int, bytes, bytes]  # offset, key, value as acknowledged


def wait_for(what: str, probe: Callable[[], T | None], timeout: float, interval: float = 0.3,
             describe_last: Callable[[], str] | None = None) -> T:
    """``probe()`` until it returns something other than None (bounded by ``timeout``)."""
    deadline = time.monotonic() + timeout
    attempts = 0
    while True:
        attempts += 1
        found = probe()
        if found is not None:
            return found
        if time.monotonic() >= deadline or attempts > 10_000:
            extra = f": {describe_last()}" if describe_last else ""
            raise AssertionError(f"{what}: not within {timeout:.0f}s{extra}")
        time.sleep(interval)


# --- the cluster, asked directly -----------------------------------------------------------------


@dataclass
class PartitionState:
    leader: int
    leader_epoch: int
    replicas: list[int]
    isr: list[int]


def partition_state(cluster: KafkaCluster, topic: str) -> PartitionState | None:
    """Partition 0 of ``topic`` as broker 1's metadata has it (None if it cannot say)."""
    client = BrokerClient(cluster.bootstrap, timeout_s=10)
    try:
        body = {"topics": [{"name": topic, "topic_id": bytes(16)}], "allow_auto_topic_creation": False,
                "include_cluster_authorized_operations": False, "include_topic_authorized_operations": False}
        answer = client.request(BOOTSTRAP_BROKER, METADATA, 12, body)
    except BrokerClientError:
        return None
    finally:
        client.close()
    for t in answer["topics"]:
        if t["name"] == topic and t["error_code"] == 0:
            for p in t["partitions"]:
                if p["partition_index"] == 0:
                    return PartitionState(p["leader_id"], p["leader_epoch"], list(p["replica_nodes"]),
                                          sorted(p["isr_nodes"]))
    return None


def wait_partition(cluster: KafkaCluster, topic: str, what: str, wanted: Callable[[PartitionState], bool],
                   timeout: float) -> PartitionState:
    last: list[PartitionState | None] = [None]

    def probe() -> PartitionState | None:
        last[0] = partition_state(cluster, topic)
        return last[0] if last[0] is not None and wanted(last[0]) else None

    return wait_for(f"{topic}-0 {what}", probe, timeout, describe_last=lambda: f"last seen {last[0]}")


def broker_offsets(cluster: KafkaCluster, topic: str, broker: int) -> tuple[int, int]:
    """(log start, log end) of partition 0 as ``broker`` (its leader) answers ListOffsets."""
    client = BrokerClient(cluster.bootstrap, timeout_s=10)
    try:
        error, start = client.list_offset(broker, topic, 0, EARLIEST)
        assert error == 0, f"ListOffsets EARLIEST to broker {broker}: error {error}"
        error, end = client.list_offset(broker, topic, 0, LATEST)
        assert error == 0, f"ListOffsets LATEST to broker {broker}: error {error}"
        return start, end
    finally:
        client.close()


# --- clients ---------------------------------------------------------------------------------------


def create_topic(proxy: ProxyProcess, topic: str) -> None:
    admin = AdminClient({"bootstrap.servers": proxy.bootstrap})
    # (confluent-kafka refuses num_partitions -1 beside an assignment, its documented form.)
    new = NewTopic(topic, 1, replica_assignment=[[A, B]], config=TOPIC_CONFIG)
    admin.create_topics([new])[topic].result(30)


def set_local_retention(proxy: ProxyProcess, topic: str, local_bytes: int) -> None:
    admin = AdminClient({"bootstrap.servers": proxy.bootstrap})
    entry = ConfigEntry("local.retention.bytes", str(local_bytes),
                        incremental_operation=AlterConfigOpType.SET)
    resource = ConfigResource(ResourceType.TOPIC, topic, incremental_configs=[entry])
    for future in admin.incremental_alter_configs([resource]).values():
        future.result(30)


def leader_through_proxy(proxy: ProxyProcess, topic: str) -> int | None:
    client = BrokerClient(proxy.bootstrap, timeout_s=10)
    try:
        info = client.metadata([topic]).get(topic)
    except BrokerClientError:
        return None
    finally:
        client.close()
    return info.partitions[0].leader if info and 0 in info.partitions else None


def produce(bootstrap: str, topic: str, phase: str, count: int, first_offset: int) -> list[Produced]:
    """``count`` records of ~230 bytes to partition 0 through ``bootstrap``; returns them as
    acknowledged, and checks they took ``first_offset..first_offset+count-1``.

    Idempotent, so acks=all; with an ISR of one replica that is acknowledged by the leader alone,
    as acks=1 would be, and no retry can write a record twice."""
    acked: list[Produced] = []
    errors: list[KafkaError] = []

    def delivered(err: KafkaError | None, msg: Message) -> None:
        if err is not None:
            errors.append(err)
        else:
            acked.append((msg.offset(), msg.key(), msg.value()))

    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True,
                         "linger.ms": 5, "batch.size": 16384, "message.timeout.ms": 60_000})
    rng = random.Random(f"divergence-{phase}")
    for i in range(count):
        value = f"{phase}-{i}-".encode() + rng.randbytes(VALUE_BYTES)
        producer.produce(topic, key=f"{phase}-{i}".encode(), value=value, partition=0,
                         headers=[("phase", phase.encode())], on_delivery=delivered)
        if i % 500 == 0:
            producer.poll(0)
    assert producer.flush(90) == 0, f"{phase}: records left undelivered"
    assert not errors, f"{phase}: {errors[:5]}"
    acked.sort()
    assert [o for o, _, _ in acked] == list(range(first_offset, first_offset + count)), (
        f"{phase}: acknowledged offsets {acked[0][0] if acked else None}..{acked[-1][0] if acked else None} "
        f"({len(acked)} records), wanted {first_offset}..{first_offset + count - 1}")
    return acked


def read_confluent(bootstrap: str, topic: str, expected: int, timeout: float = 45) -> list[Rec]:
    """Partition 0 from its beginning (ListOffsets EARLIEST) until ``expected`` records, then one
    more look for strays."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"div-{uuid.uuid4().hex[:8]}",
                         "enable.auto.commit": False, "enable.partition.eof": False,
                         "auto.offset.reset": "earliest"})
    got: list[Rec] = []

    def take(messages: list[Message]) -> None:
        for msg in messages:
            assert msg.error() is None, msg.error()
            got.append(Rec(msg.offset(), msg.key(), msg.value(), tuple(msg.headers() or ()),
                           msg.timestamp()[1], msg.leader_epoch()))

    try:
        consumer.assign([CTopicPartition(topic, 0, OFFSET_BEGINNING)])
        deadline = time.monotonic() + timeout
        while len(got) < expected and time.monotonic() < deadline:
            take(consumer.consume(1000, 0.5))
        take(consumer.consume(1000, 1.0))
    finally:
        consumer.close()
    return got


def read_kafka_python(bootstrap: str, topic: str, expected: int, timeout: float = 45) -> list[Rec]:
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, group_id=None,
                             consumer_timeout_ms=2000)
    got: list[Rec] = []
    try:
        tp = TopicPartition(topic, 0)
        consumer.assign([tp])
        consumer.seek_to_beginning(tp)  # ListOffsets EARLIEST
        deadline = time.monotonic() + timeout
        while len(got) < expected and time.monotonic() < deadline:
            for records in consumer.poll(timeout_ms=500, max_records=2000).values():
                got.extend(Rec(r.offset, r.key, r.value, tuple(r.headers or ()), r.timestamp, r.leader_epoch)
                           for r in records)
        for records in consumer.poll(timeout_ms=1000).values():
            got.extend(Rec(r.offset, r.key, r.value, tuple(r.headers or ()), r.timestamp, r.leader_epoch)
                       for r in records)
    finally:
        consumer.close()
    return got


def history_problems(name: str, got: list[Rec], history: list[Produced]) -> list[str]:
    """Why ``got`` is not exactly ``history`` (every offset once, in order, same key and value)."""
    offsets = [r.offset for r in got]
    problems = []
    if offsets != sorted(offsets):
        problems.append(f"{name}: offsets out of order")
    if len(offsets) != len(set(offsets)):
        problems.append(f"{name}: {len(offsets) - len(set(offsets))} offsets read more than once")
    wanted = {o: (k, v) for o, k, v in history}
    seen = {r.offset: (r.key, r.value) for r in got}
    missing = sorted(set(wanted) - set(seen))
    extra = sorted(set(seen) - set(wanted))
    wrong = sorted(o for o in set(seen) & set(wanted) if seen[o] != wanted[o])
    if missing:
        problems.append(f"{name}: {len(missing)} offsets not read (first {missing[:5]})")
    if extra:
        problems.append(f"{name}: {len(extra)} offsets read that the cluster does not hold "
                        f"(first {extra[:5]})")
    if wrong:
        keys = [(o, seen[o][0]) for o in wrong[:3]]
        problems.append(f"{name}: {len(wrong)} offsets hold other records than the cluster's history, "
                        f"{wrong[0]}..{wrong[-1]} (first offsets and the keys read: {keys})")
    return problems


def byte_problems(name: str, got: list[Rec], direct: dict[int, Rec]) -> list[str]:
    """Records that differ from the brokers' own (key, value, headers, timestamp, leader epoch)."""
    differing = [r.offset for r in got if r.offset in direct and r != direct[r.offset]]
    if not differing:
        return []
    first = next(r for r in got if r.offset == differing[0])
    return [f"{name}: {len(differing)} records differ from the brokers' ({differing[0]}..{differing[-1]}); "
            f"first read {brief(first)}, the brokers have {brief(direct[differing[0]])}"]


def brief(record: Rec) -> str:
    value = record.value[:12] if record.value is not None else None
    return (f"offset {record.offset} key {record.key!r} value {value!r}... headers {record.headers} "
            f"timestamp {record.timestamp} leader epoch {record.leader_epoch}")


# --- the proxy -----------------------------------------------------------------------------------


def row_of(proxy: ProxyProcess, topic: str) -> PartitionRow | None:
    """describe's row for partition 0, None while the proxy cannot describe it (no leader)."""
    try:
        rows = describe(proxy.bootstrap, topic)
    except (DescribeError, BrokerClientError):
        return None
    return rows[0] if rows else None


def scrape(url: str) -> dict[str, float]:
    """Each sample name's value, summed over its labels (the proxy fronts one topic here)."""
    with urllib.request.urlopen(url, timeout=10) as response:
        text = response.read().decode()
    values: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            values[sample.name] = values.get(sample.name, 0.0) + sample.value
    return values


def remote_segments(data_dir: Path, topic: str) -> tuple[list[Any], list[Any]]:
    """(finished segments, divergences) of partition 0 as the proxy's metadata journal has them."""
    state = load_metadata(f"file://{data_dir / 'metadata'}")
    for tp, partition in state.partitions.items():
        if tp.topic == topic and tp.partition == 0:
            return partition.finished(), list(getattr(partition, "divergences", []))
    return [], []


@dataclass
class Scenario:
    topic: str
    first: list[Produced]
    second: list[Produced]
    third: list[Produced]
    ry_before: int  # the highest remote end seen before A was stopped
    epoch_a: int  # A's leader epoch while it wrote the second phase
    epoch_b: int  # B's after the unclean election
    b_log_end: int  # B's log end when it became leader
    election: str  # how B became leader
    direct: dict[int, Rec]  # the whole partition, read from the brokers after A came back

    @property
    def history(self) -> list[Produced]:
        return self.first + self.third


@pytest.fixture
def cluster(tmp_path: Path):
    running = start_three(tmp_path / "kafka", properties=BROKER_PROPERTIES, dedicated_controller=True)
    try:
        yield running
    finally:
        running.stop()


@pytest.fixture
def metrics_port() -> int:
    return free_port()


@pytest.fixture
def proxy(cluster: KafkaCluster, tmp_path: Path, metrics_port: int):
    running = start_proxy(cluster.bootstrap, tmp_path / "proxy",
                          "--set", f"log.segment.bytes={SEGMENT_BYTES}",
                          "--set", "remote.log.manager.task.interval.ms=100",
                          # A copier that failed while no leader was alive tries again within 2 s.
                          "--set", "proxy.copier.backoff.max.ms=2000",
                          "--set", f"proxy.metrics.listen=127.0.0.1:{metrics_port}")
    try:
        yield running
    finally:
        running.stop()


def make_divergence(cluster: KafkaCluster, proxy: ProxyProcess, timings: dict[str, float],
                    started: float) -> Scenario:
    """Steps 1-6 of the module docstring; asserts Kafka's side of each."""
    topic = f"div-{uuid.uuid4().hex[:8]}"
    create_topic(proxy, topic)
    wait_partition(cluster, topic, f"led by {A} with ISR [{A}, {B}]",
                   lambda s: s.leader == A and s.isr == sorted([A, B]) and s.replicas == [A, B], 30)
    wait_for(f"{topic}-0 led by {A} through the proxy",
             lambda: leader_through_proxy(proxy, topic) == A or None, 30)

    first = produce(proxy.bootstrap, topic, "first", N1, 0)
    assert broker_offsets(cluster, topic, A) == (0, N1)
    timings["first phase"] = time.monotonic() - started

    # B goes away: A alone holds what comes next.
    cluster.stop_node(B, graceful=False)
    wait_partition(cluster, topic, f"ISR shrunk to [{A}]", lambda s: s.leader == A and s.isr == [A], 30)
    second = produce(proxy.bootstrap, topic, "second", N2, N1)
    epoch_a = wait_partition(cluster, topic, f"led by {A}", lambda s: s.leader == A, 10).leader_epoch
    assert broker_offsets(cluster, topic, A) == (0, N1 + N2)

    # The proxy tiers A's records past N1; wait until its remote end stands still (the copier
    # rolled every full segment; the rest stays in its open one).
    seen: list[int] = []

    def settled() -> int | None:
        row = row_of(proxy, topic)
        if row is None or row.ry is None:
            return None
        seen.append(row.ry)
        recent = seen[-6:]  # ~2 s at 0.4 s
        return row.ry if row.ry >= N1 + N2 // 2 and len(recent) == 6 and len(set(recent)) == 1 else None

    wait_for("the proxy tiering A's records past N1", settled, 60, 0.4,
             lambda: f"remote ends seen {seen[-5:]}; proxy log {proxy.log_path}")
    ry_before = max(seen)
    assert ry_before >= N1, (ry_before, N1)
    timings["second phase, tiered"] = time.monotonic() - started

    # A goes away too: no replica of the ISR is alive.
    cluster.stop_node(A, graceful=False)
    wait_partition(cluster, topic, "without a leader", lambda s: s.leader == -1, 30)
    cluster.start_node(B)
    election = "automatic (controller, topic unclean.leader.election.enable=true)"
    try:
        state = wait_partition(cluster, topic, f"led by {B}", lambda s: s.leader == B, 20)
    except AssertionError:
        election = "kafka-leader-election --election-type unclean"
        done = cluster.run_tool(LEADER_ELECTION_TOOL, "--bootstrap-server", cluster.bootstrap,
                                "--election-type", "unclean", "--topic", topic, "--partition", "0",
                                timeout=60)
        assert done.returncode == 0, done.stdout + done.stderr
        state = wait_partition(cluster, topic, f"led by {B} after an unclean election",
                               lambda s: s.leader == B, 20)
    epoch_b = state.leader_epoch
    assert state.isr == [B] and epoch_b > epoch_a, (state, epoch_a)
    # B's log ends where it stopped following: at N1 (its high watermark reaches it as sole ISR).
    b_offsets: list[tuple[int, int]] = []

    def b_caught_up() -> int | None:
        b_offsets.append(broker_offsets(cluster, topic, B))
        return b_offsets[-1][1] if b_offsets[-1][1] >= N1 else None

    b_log_end = wait_for(f"{B}'s high watermark at its log end", b_caught_up, 20,
                         describe_last=lambda: str(b_offsets[-1:]))
    assert b_offsets[-1] == (0, N1), (
        f"broker {B} (log start, log end) at its election: {b_offsets[-1]}, wanted (0, {N1})")
    timings["unclean election"] = time.monotonic() - started

    wait_for(f"{topic}-0 led by {B} through the proxy",
             lambda: leader_through_proxy(proxy, topic) == B or None, 30)
    third = produce(proxy.bootstrap, topic, "third", N3, N1)  # at N1.., where A had written
    cluster.start_node(A)
    wait_partition(cluster, topic, f"led by {B} with A back in the ISR",
                   lambda s: s.leader == B and s.isr == sorted([A, B]), 60)
    timings["third phase, A back"] = time.monotonic() - started

    # The brokers' own history: B's records at N1.., not A's.
    direct_list = read_confluent(cluster.bootstraps["PLAINTEXT"], topic, N1 + N3)
    direct = {r.offset: r for r in direct_list}
    assert [r.offset for r in direct_list] == list(range(N1 + N3)), (
        f"direct read: {len(direct_list)} records, offsets {direct_list[:1]}..{direct_list[-1:]}")
    assert [r.content for r in direct_list] == first + third
    assert direct[N1].value == third[0][2] and direct[N1].value != second[0][2]
    assert direct[N1].headers == (("phase", b"third"),)
    assert {r.leader_epoch for r in direct_list[N1:]} == {epoch_b}, {r.leader_epoch for r in direct_list[N1:]}
    assert all(r.leader_epoch is not None and r.leader_epoch <= epoch_a for r in direct_list[:N1])
    timings["kafka side checked"] = time.monotonic() - started
    return Scenario(topic, first, second, third, ry_before, epoch_a, epoch_b, b_log_end, election, direct)


def test_unclean_election_diverges_and_the_remote_tier_follows(cluster: KafkaCluster, proxy: ProxyProcess,
                                                              metrics_port: int, tmp_path: Path) -> None:
    timings: dict[str, float] = {}
    t0 = time.monotonic()
    s = make_divergence(cluster, proxy, timings, t0)
    diverged = s.ry_before - N1 + 1
    print(f"\nkafka side: N1={N1} N2={N2} N3={N3}; remote end before the election {s.ry_before}; "
          f"A's epoch {s.epoch_a}, B's {s.epoch_b}; B's log end at its election {s.b_log_end}; "
          f"election: {s.election}; expecting {diverged} offsets diverged ({N1}..{s.ry_before})")

    failures: list[str] = []
    seen_rows: list[PartitionRow] = []

    # describe: the divergence, once found.
    def divergence_found() -> PartitionRow | None:
        row = row_of(proxy, s.topic)
        if row is not None:
            seen_rows.append(row)
        return row if row is not None and (getattr(row, "diverged", None) or 0) >= 1 else None

    try:
        row = wait_for("describe showing the divergence", divergence_found, DIVERGENCE_WAIT_S, 0.5,
                       lambda: f"last rows {seen_rows[-1:]}")
        if getattr(row, "diverged", None) != diverged:
            failures.append(f"describe: diverged {getattr(row, 'diverged', None)}, wanted {diverged} "
                            f"({N1}..{s.ry_before}); row {row}")
    except AssertionError as e:
        failures.append(f"describe: no divergence within {DIVERGENCE_WAIT_S:.0f}s ({e})")
    timings["divergence wait"] = time.monotonic() - t0

    metrics = scrape(f"http://127.0.0.1:{metrics_port}/metrics")
    divergences = metrics.get("tiered_proxy_log_divergences_total")
    offsets = metrics.get("tiered_proxy_diverged_offsets_total")
    if divergences is None or divergences < 1:
        failures.append(f"metrics: tiered_proxy_log_divergences_total {divergences}, wanted >= 1")
    if offsets != diverged:
        failures.append(f"metrics: tiered_proxy_diverged_offsets_total {offsets}, wanted {diverged}")

    # The new lineage tiered again past the middle of the third phase.
    grown: PartitionRow | None = None
    try:
        grown = wait_for("the remote tier growing with B's records", lambda: (
            r if (r := row_of(proxy, s.topic)) is not None and r.ry is not None and r.ry >= N1 + N3 // 2
            else None), 60, 0.5, lambda: f"last rows {seen_rows[-1:]}")
        if not (grown.rx == 0 and grown.ry is not None and grown.ry < grown.lz == N1 + N3):
            failures.append(f"describe after the new lineage was tiered: {grown}, "
                            f"wanted Rx 0, Ry < Lz = {N1 + N3}")
    except AssertionError as e:
        failures.append(str(e))
    timings["new lineage tiered"] = time.monotonic() - t0

    # The remote tier is one run of offsets from 0 to Ry, cut at N1 (the segment straddling it
    # rewritten to end at N1 - 1); no segment holds an offset >= N1 of A's epoch; the metadata
    # records the divergence.
    segments, recorded = remote_segments(tmp_path / "proxy" / f"data-{proxy.port}", s.topic)
    ranges = [(seg.start_offset, seg.end_offset) for seg in segments]
    starts = [start for start, _ in ranges]
    follows = [0] + [end + 1 for _, end in ranges[:-1]]
    if starts != follows or (grown is not None and ranges and ranges[-1][1] != grown.ry):
        failures.append(f"remote tier: segments {ranges} are not one run of offsets from 0 to Ry "
                        f"{grown.ry if grown else None}")
    if not any(end == N1 - 1 for _, end in ranges):
        failures.append(f"remote tier: no segment ends at {N1 - 1}, where the remote tier was to be cut: "
                        f"{ranges}")
    stale = [(seg.start_offset, seg.end_offset, epoch, first, last) for seg in segments
             for epoch, first, last in epoch_ranges(seg) if last >= N1 and epoch <= s.epoch_a]
    if stale:
        failures.append(f"remote tier: {len(stale)} segment ranges at offsets >= {N1} of A's epoch "
                        f"{s.epoch_a} or older (segment start, end, epoch, range first, last): {stale[:4]}")
    wanted_record = (N1, s.ry_before)
    if [(d.first_offset, d.last_offset) for d in recorded] != [wanted_record]:
        failures.append(f"remote metadata: divergences {recorded}, wanted one of offsets {wanted_record}")

    # Local retention: the brokers' log start moves past the middle of B's records, so that the
    # reads below take N1.. from the remote tier.
    set_local_retention(proxy, s.topic, LOCAL_RETENTION_BYTES)
    moved: PartitionRow | None = None
    try:
        moved = wait_for("the brokers' log start moving past the middle of B's records", lambda: (
            r if (r := row_of(proxy, s.topic)) is not None and r.lx >= N1 + N3 // 2 else None),
            60, 0.5, lambda: f"last row {row_of(proxy, s.topic)}")
    except AssertionError as e:
        failures.append(str(e))
    timings["local retention"] = time.monotonic() - t0

    # Reads through the proxy from offset 0: the cluster's present history, byte for byte.
    for name, reader in (("confluent-kafka", read_confluent), ("kafka-python", read_kafka_python)):
        got = reader(proxy.bootstrap, s.topic, N1 + N3)
        failures += history_problems(name, got, s.history)
        failures += byte_problems(name, got, s.direct)
        old_epoch = [r.offset for r in got
                     if r.offset >= N1 and (r.leader_epoch is None or r.leader_epoch <= s.epoch_a)]
        if old_epoch:
            failures.append(f"{name}: {len(old_epoch)} records at offsets >= {N1} carry A's epoch "
                            f"{s.epoch_a} or older ({old_epoch[0]}..{old_epoch[-1]})")
    timings["reads"] = time.monotonic() - t0

    last_row = row_of(proxy, s.topic)
    print(f"proxy side: describe {last_row} (when the log start had moved: {moved}); divergences metric "
          f"{divergences}, diverged offsets metric {offsets}; remote segments {ranges}; "
          f"timings {({k: round(v, 1) for k, v in timings.items()})}")
    assert not failures, "proxy-side expectations not met:\n- " + "\n- ".join(failures)
