"""Multi-broker basics (issue 25) on a real three-broker Apache Kafka 4.4 cluster (``kafka_three``: three
combined broker+controller nodes, RF 3, min.insync.replicas 2) through ONE proxy:

- every broker is served on its own proxy port: Metadata through the proxy names the three brokers, each
  on the proxy port ``proxy.node_ports`` gives its node id, none on a real broker port; and the clients
  below never hold a connection to a real broker port;
- a tiered topic with three partitions whose leaders are on three different brokers (created through
  the proxy with an explicit replica assignment, RF 3) is tiered by the proxy's copier on every
  partition (each copier fetching from its own leader), and the proxy moves each leader's log start
  (DeleteRecords, ``local.retention.bytes``);
- confluent-kafka and kafka-python read it back through the proxy from the beginning (EARLIEST,
  answered with the remote log start) and get every record produced (acks=all) exactly once, with its
  partition, offset, key and value; the offsets below each broker's log start exist only in the remote
  tier, so they prove the remote reads on all three leaders.
"""

from __future__ import annotations

import random
import time
import uuid
from pathlib import Path

import pytest
from confluent_kafka import KafkaError, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from proxy.describe import PartitionRow, describe
from tests import reads_from_zero
from tests.kafka_cluster import KafkaCluster
from tests.proxy_process import ProxyProcess, RemotePortSampler, start_proxy
from tests.tiering_checks import leader_offsets
from tiering.broker_client import EARLIEST, BrokerClient

pytestmark = pytest.mark.integration

PARTITIONS = 3
SEGMENT_BYTES = 64 * 1024  # the proxy's segment size (Kafka 4.4 refuses a topic segment.bytes < 1 MiB)
LOCAL_RETENTION_BYTES = 64 * 1024
RECORDS = 4500  # ~1.8 MB: ~600 KB per partition, some nine remote segments each
# Partition p is led by broker p + 1: the preferred (first) replica leads a new partition.
ASSIGNMENT = [[1, 2, 3], [2, 3, 1], [3, 1, 2]]

Record = tuple[int, int, bytes, bytes]  # partition, offset, key, value


@pytest.fixture
def proxy_three(kafka_three: KafkaCluster, tmp_path: Path):
    """A proxy of its own in front of the three brokers (the session's shared proxies front one broker)."""
    running = start_proxy(kafka_three.bootstrap, tmp_path / "proxy",
                          "--set", f"log.segment.bytes={SEGMENT_BYTES}",
                          "--set", "remote.log.manager.task.interval.ms=100")
    try:
        yield running
    finally:
        running.stop()


def real_broker_ports(cluster: KafkaCluster) -> set[int]:
    return {port for node in cluster.nodes for port in node.ports.values()}


def check_metadata(proxy: ProxyProcess, cluster: KafkaCluster) -> None:
    client = BrokerClient(proxy.bootstrap)
    try:
        client.metadata([])
        brokers = dict(client.brokers)
    finally:
        client.close()
    assert sorted(brokers) == [1, 2, 3], brokers
    assert brokers == {node: ("127.0.0.1", port) for node, port in proxy.node_ports.items()}, (
        brokers, proxy.node_ports)
    assert not {port for _, port in brokers.values()} & real_broker_ports(cluster), brokers


def create_topic(proxy: ProxyProcess, topic: str) -> None:
    admin = AdminClient({"bootstrap.servers": proxy.bootstrap})
    config = {"remote.storage.enable": "true", "local.retention.bytes": str(LOCAL_RETENTION_BYTES),
              "retention.ms": "-1"}
    # (confluent-kafka refuses num_partitions -1 beside an assignment, its documented form.)
    new = NewTopic(topic, PARTITIONS, replica_assignment=ASSIGNMENT, config=config)
    admin.create_topics([new])[topic].result(30)
    deadline = time.monotonic() + 30
    leaders: dict[int, int] = {}
    while time.monotonic() < deadline:
        client = BrokerClient(proxy.bootstrap)
        try:
            info = client.metadata([topic]).get(topic)
        finally:
            client.close()
        leaders = {p: part.leader for p, part in info.partitions.items()} if info else {}
        if leaders == {0: 1, 1: 2, 2: 3}:
            return
        time.sleep(0.3)
    raise AssertionError(f"leaders of {topic} through the proxy: {leaders}, wanted one partition per broker")


def produce(proxy: ProxyProcess, topic: str) -> list[Record]:
    """RECORDS records round-robin over the partitions, acks=all, through the proxy; returns each as
    the broker acknowledged it (partition, offset, key, value)."""
    acked: list[Record] = []
    errors: list[KafkaError] = []

    def delivered(err: KafkaError | None, msg) -> None:
        if err is not None:
            errors.append(err)
        else:
            acked.append((msg.partition(), msg.offset(), msg.key(), msg.value()))

    producer = Producer({"bootstrap.servers": proxy.bootstrap, "acks": "all", "linger.ms": 5,
                         "batch.size": 16384, "compression.type": "lz4"})
    rng = random.Random(25)
    for i in range(RECORDS):
        value = f"v{i}-".encode() + rng.randbytes(400)
        producer.produce(topic, key=f"k{i}".encode(), value=value, partition=i % PARTITIONS,
                         on_delivery=delivered)
        if i % 500 == 0:
            producer.poll(0)
    assert producer.flush(60) == 0, "records left undelivered"
    assert not errors, errors[:5]
    assert len(acked) == RECORDS
    return sorted(acked)


def broker_log_starts(cluster: KafkaCluster, topic: str) -> dict[int, int]:
    """Each partition's log start as its leader (asked directly, no proxy) has it."""
    return leader_offsets(cluster.bootstrap, topic, EARLIEST)


def wait_tiered(proxy: ProxyProcess, cluster: KafkaCluster, topic: str, ends: dict[int, int],
                timeout: float = 45) -> list[PartitionRow]:
    """Until every partition has remote segments from offset 0 and the brokers' log start has moved
    past at least half of it (local retention keeps the newest 64 KiB and the segment reaching
    the log end)."""
    deadline = time.monotonic() + timeout
    rows: list[PartitionRow] = []
    starts: dict[int, int] = {}
    while time.monotonic() < deadline:
        rows = describe(proxy.bootstrap, topic)
        starts = broker_log_starts(cluster, topic)
        if len(rows) == PARTITIONS and all(
                r.rx == 0 and r.ry is not None and r.lx == starts[r.partition] > ends[r.partition] // 2
                and r.ry + 1 >= r.lx for r in rows):
            return rows
        time.sleep(0.5)
    raise AssertionError(f"not tiered within {timeout}s: describe {rows}, broker log starts {starts}, "
                         f"log ends {ends}; proxy log {proxy.log_path}:\n{proxy.log_text()[-3000:]}")


def read_confluent(proxy: ProxyProcess, topic: str, expected: int, timeout: float = 30) -> list[Record]:
    return reads_from_zero.read_confluent(proxy.bootstrap, topic, PARTITIONS, expected, timeout)


def read_kafka_python(proxy: ProxyProcess, topic: str, expected: int, timeout: float = 30) -> list[Record]:
    return reads_from_zero.read_kafka_python(proxy.bootstrap, topic, PARTITIONS, expected, timeout)


def check_read(name: str, got: list[Record], produced: list[Record]) -> None:
    offsets = [(p, o) for p, o, _, _ in got]
    duplicates = len(offsets) - len(set(offsets))
    assert duplicates == 0, f"{name}: {duplicates} records read twice"
    missing = sorted(set(produced) - set(got))
    extra = sorted(set(got) - set(produced))
    assert not missing and not extra, (f"{name}: {len(missing)} produced records not read (first "
                                       f"{[r[:2] for r in missing[:5]]}), {len(extra)} read that were "
                                       f"not produced (first {[r[:2] for r in extra[:5]]})")
    for p in range(PARTITIONS):  # in offset order within each partition
        mine = [o for q, o, _, _ in got if q == p]
        assert mine == sorted(mine), f"{name}: partition {p} out of order"


def test_three_brokers_each_on_a_proxy_port_tiered_and_read_from_zero(kafka_three: KafkaCluster,
                                                                       proxy_three: ProxyProcess) -> None:
    cluster, proxy = kafka_three, proxy_three
    check_metadata(proxy, cluster)
    topic = f"mb-{uuid.uuid4().hex[:8]}"
    real_ports = real_broker_ports(cluster)
    with RemotePortSampler() as sampler:
        create_topic(proxy, topic)
        produced = produce(proxy, topic)
    ends = {p: sum(1 for q, *_ in produced if q == p) for p in range(PARTITIONS)}
    assert all(sorted(o for q, o, _, _ in produced if q == p) == list(range(ends[p])) for p in ends)

    rows = wait_tiered(proxy, cluster, topic, ends)
    assert {r.partition: r.lz for r in rows} == ends, rows
    assert all(r.segments >= 3 and r.lost == 0 for r in rows), rows
    starts = broker_log_starts(cluster, topic)  # what the brokers no longer hold, on all three leaders
    below = sum(1 for p, o, _, _ in produced if o < starts[p])
    assert all(starts[p] > 0 for p in starts) and below > RECORDS // 2, (starts, below)

    with RemotePortSampler() as readers:
        by_confluent = read_confluent(proxy, topic, RECORDS)
        by_kafka_python = read_kafka_python(proxy, topic, RECORDS)
    check_read("confluent-kafka", by_confluent, produced)
    check_read("kafka-python", by_kafka_python, produced)

    # The clients only ever talked to the proxy: its ports, never a broker's.
    assert not (sampler.seen | readers.seen) & real_ports, (sampler.seen | readers.seen) & real_ports
    assert readers.seen & set(proxy.node_ports.values()) == set(proxy.node_ports.values()), readers.seen
    # Metadata still names the proxy ports after the reads (the proxy's refresh keeps them).
    check_metadata(proxy, cluster)
