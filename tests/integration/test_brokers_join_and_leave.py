"""Brokers that leave and join a running cluster (issue 27, item 3), on the three-node Apache Kafka
4.4 cluster (``kafka_three``) through one proxy that refreshes its metadata every half second:

- the proxy starts in front of brokers 1 and 2 (broker 3 stopped and unregistered with Kafka's own
  ``kafka-cluster unregister``); broker 3 then registers, and the proxy serves it on the port the
  ``base + node id`` rule gives, without a restart; a tiered topic led by it is tiered from it and
  read back from offset 0 through the proxy;
- the broker, only stopped (fenced, still registered), keeps its proxy port: it may come back;
- removed from the cluster (unregistered), it loses its port: connections to it are refused and
  Metadata through the proxy names the other two.

The cluster is restored (all three brokers registered and unfenced) before the test ends, so the
worker's other tests on ``kafka_three`` find it as it was."""

from __future__ import annotations

import socket
import time
from pathlib import Path

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer
from confluent_kafka import TopicPartition as CTopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from proxy.describe import describe
from tests.delivery import CheckedProducer
from tests.kafka_cluster import KafkaCluster
from tests.proxy_process import free_port, start_proxy
from tests.tiering_checks import wait_until
from tiering.broker_client import BrokerClient

pytestmark = pytest.mark.integration

JOINING = 3
CLUSTER_TOOL = "org.apache.kafka.tools.ClusterTool"
RECORDS = 1500


def accepts(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=2):
            return True
    except OSError:
        return False


def brokers_through(bootstrap: str) -> list[int]:
    client = BrokerClient(bootstrap, timeout_s=10)
    try:
        client.metadata([])
        return sorted(client.brokers)
    finally:
        client.close()


def unregister(cluster: KafkaCluster, node_id: int) -> None:
    done = cluster.run_tool(CLUSTER_TOOL, "unregister", "--bootstrap-server", cluster.bootstrap, "--id", node_id,
                            timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr


def test_a_broker_that_joins_gets_its_port_and_one_removed_loses_it(kafka_three: KafkaCluster, tmp_path: Path,
                                                                     unique_name: str):
    cluster = kafka_three
    cluster.stop_node(JOINING)
    unregister(cluster, JOINING)  # the cluster the proxy starts in front of has brokers 1 and 2
    port = free_port()
    # Brokers 1 and 2 on the explicit map; broker 3, unknown at start, by the base + node id rule.
    proxy = start_proxy(cluster.bootstrap, tmp_path / "proxy", "--set", "proxy.metadata.refresh.ms=500",
                        "--set", f"proxy.broker.port.base={port - JOINING}",
                        "--set", "log.segment.bytes=32768", "--set", "remote.log.manager.task.interval.ms=100",
                        node_ids=[1, 2])
    try:
        assert brokers_through(proxy.bootstrap) == [1, 2]
        assert not accepts(port)

        cluster.start_node(JOINING)  # registers: a broker joining the running cluster
        assert wait_until(lambda: accepts(port) and brokers_through(proxy.bootstrap) == [1, 2, 3], 30), \
            proxy.log_text()[-2000:]
        assert f"broker node {JOINING} served on port {port}" in proxy.log_text()

        # A tiered topic led by the broker that joined: produced, tiered and read through the proxy.
        topic = f"joined-{unique_name}"
        admin = AdminClient({"bootstrap.servers": proxy.bootstrap})
        admin.create_topics([NewTopic(topic, 1, replica_assignment=[[JOINING, 1, 2]], config={
            "remote.storage.enable": "true", "local.retention.bytes": "32768", "retention.ms": "-1"})])[topic].result(30)
        # Idempotent, so retries keep the order: the new partition's leader may refuse the first
        # batches, and a plain producer's retry put record 76 at offset 0 once (CI).
        producer = CheckedProducer({"bootstrap.servers": proxy.bootstrap, "acks": "all", "linger.ms": 5,
                                    "batch.size": 16384, "enable.idempotence": True})
        values = [f"j{i}-".encode() + bytes(200) for i in range(RECORDS)]
        for value in values:
            producer.produce(topic, value=value, partition=0)
        producer.deliver_all(60)

        def moved() -> bool:
            rows = describe(proxy.bootstrap, topic)
            return bool(rows) and rows[0].ry is not None and rows[0].lx > 0

        assert wait_until(moved, 60), describe(proxy.bootstrap, topic)
        consumer = Consumer({"bootstrap.servers": proxy.bootstrap, "group.id": f"j-{unique_name}",
                             "enable.auto.commit": False})
        consumer.assign([CTopicPartition(topic, 0, OFFSET_BEGINNING)])
        got: list[tuple[int, bytes]] = []
        deadline = time.monotonic() + 60
        try:
            while len(got) < RECORDS and time.monotonic() < deadline:
                for message in consumer.consume(500, 0.5):
                    assert message.error() is None, message.error()
                    got.append((message.offset(), message.value()))
        finally:
            consumer.close()
        assert got == list(enumerate(values))  # offsets below the log start from the remote tier

        cluster.stop_node(JOINING)  # controlled shutdown: fenced, still registered
        time.sleep(2)  # four metadata refreshes
        assert accepts(port), "a stopped broker that is still registered lost its proxy port"
        unregister(cluster, JOINING)  # removed from the cluster
        assert wait_until(lambda: not accepts(port), 15), "the removed broker's port still answers"
        assert brokers_through(proxy.bootstrap) == [1, 2]
        assert f"broker node {JOINING} left the cluster: port {port} closed" in proxy.log_text()
    finally:
        proxy.stop()
        if not cluster.node(JOINING).running:
            cluster.start_node(JOINING)
        cluster.wait_ready(90)
