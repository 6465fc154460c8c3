"""Smoke tests of the real Apache Kafka clusters of tests/kafka_cluster.py, through real clients
(kafka-python and confluent-kafka) and no proxy: each shape does what the tests built on it rely on."""

from __future__ import annotations

import time
import uuid
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, Producer
from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import (
    ACL,
    ACLOperation,
    ACLPermissionType,
    ConfigResource,
    ConfigResourceType,
    NewTopic,
    OffsetSpec,
    ResourcePattern,
    ResourceType,
)

from tests.kafka_cluster import KAFKA_39, KafkaCluster, create_acls

pytestmark = pytest.mark.integration


def _name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def _confluent_config(cluster: KafkaCluster, listener: str | None = None, user: str = "admin",
                      password: str | None = None, mechanism: str = "SCRAM-SHA-512") -> dict[str, Any]:
    listener = listener or cluster.listeners[0]
    config: dict[str, Any] = {"bootstrap.servers": cluster.bootstraps[listener],
                              "security.protocol": listener}
    if listener.startswith("SASL"):
        config.update({"sasl.mechanism": mechanism, "sasl.username": user,
                       "sasl.password": cluster.users[user] if password is None else password})
    if "SSL" in listener:
        config["ssl.ca.location"] = str(cluster.certs.ca)
    if listener == "SSL":
        config.update({"ssl.certificate.location": str(cluster.certs.client_cert),
                       "ssl.key.location": str(cluster.certs.client_key)})
    return config


def _produce_kafka_python(cluster: KafkaCluster, topic: str, values: list[bytes], **kwargs: Any) -> None:
    producer = KafkaProducer(**(kwargs or cluster.admin_kwargs()), acks="all", linger_ms=5)
    try:
        for value in values:
            producer.send(topic, value)
        producer.flush(30)
    finally:
        producer.close(10)


def _produce_confluent(config: dict[str, Any], topic: str, values: list[bytes]) -> None:
    errors: list[KafkaError] = []

    def delivered(err: KafkaError | None, _msg: object) -> None:
        if err is not None:
            errors.append(err)

    producer = Producer({**config, "acks": "all", "linger.ms": 5})
    for value in values:
        producer.produce(topic, value, on_delivery=delivered)
    assert producer.flush(30) == 0, "records still undelivered after 30 s"
    assert not errors, errors


def _consume_confluent(config: dict[str, Any], topic: str, expected: int, timeout: float = 30) -> list[bytes]:
    """Read ``topic`` partition 0 from offset 0 until ``expected`` records (or the deadline)."""
    consumer = Consumer({**config, "group.id": _name("smoke"), "auto.offset.reset": "earliest",
                         "enable.auto.commit": False})
    values: list[bytes] = []
    try:
        from confluent_kafka import TopicPartition as CTopicPartition

        consumer.assign([CTopicPartition(topic, 0, 0)])
        deadline = time.monotonic() + timeout
        while len(values) < expected and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            assert msg.error() is None or msg.error().code() == KafkaError._PARTITION_EOF, msg.error()
            if msg.error() is None:
                values.append(msg.value())
    finally:
        consumer.close()
    return values


def _round_trip(cluster: KafkaCluster, replicas: int = 1) -> str:
    topic = _name("smoke")
    admin = KafkaAdminClient(**cluster.admin_kwargs())
    try:
        admin.create_topics([NewTopic(topic, 1, replicas)])
    finally:
        admin.close()
    values = [f"v{i}".encode() for i in range(200)]
    _produce_kafka_python(cluster, topic, values[:100])
    _produce_confluent(_confluent_config(cluster), topic, values[100:])
    assert _consume_confluent(_confluent_config(cluster), topic, len(values)) == values
    return topic


def test_single_produces_and_consumes(kafka: KafkaCluster) -> None:
    assert (kafka.kind, kafka.version, kafka.host) == ("kafka", "4.4.0", "127.0.0.1")
    assert kafka.bootstrap == f"127.0.0.1:{kafka.port}" and kafka.log_path.exists()
    topic = _round_trip(kafka)
    listed = kafka.run_tool("topics", "--bootstrap-server", kafka.bootstrap, "--list", timeout=60)
    assert listed.returncode == 0, listed.stderr
    assert topic in listed.stdout.split()


def test_kafka39_produces_and_consumes(kafka39: KafkaCluster) -> None:
    assert kafka39.version == KAFKA_39
    topic = _round_trip(kafka39)
    log = kafka39.log_path.read_text(errors="replace")
    assert f"Kafka version: {KAFKA_39}" in log
    # A tool whose class moved between 3.9 and 4.x (the table in tests/kafka_cluster.py picks it).
    read = kafka39.run_tool("console-consumer", "--bootstrap-server", kafka39.bootstrap, "--topic", topic,
                            "--from-beginning", "--max-messages", "3", "--timeout-ms", "20000", timeout=60)
    assert read.returncode == 0, read.stderr
    assert read.stdout.split() == ["v0", "v1", "v2"]


def _isr(admin: KafkaAdminClient, topic: str, size: int, timeout: float = 30) -> tuple[list[int], list[int]]:
    """(replicas, isr) of partition 0 once the ISR has ``size`` members (or at the deadline)."""
    deadline = time.monotonic() + timeout
    while True:
        (described,) = admin.describe_topics([topic])
        (partition,) = described["partitions"]
        if len(partition["isr_nodes"]) == size or time.monotonic() > deadline:
            return sorted(partition["replica_nodes"]), sorted(partition["isr_nodes"])
        time.sleep(0.3)


def test_three_replicates_to_three_in_sync(kafka_three: KafkaCluster) -> None:
    cluster = kafka_three
    assert [n.node_id for n in cluster.brokers] == [1, 2, 3]
    assert len(cluster.bootstraps["PLAINTEXT"].split(",")) == 3
    topic = _round_trip(cluster, replicas=3)
    admin = KafkaAdminClient(**cluster.admin_kwargs())
    try:
        assert {b["broker_id"] for b in admin.describe_cluster()["brokers"]} == {1, 2, 3}
        assert _isr(admin, topic, 3) == ([1, 2, 3], [1, 2, 3])
        broker = admin.describe_configs([ConfigResource(ConfigResourceType.BROKER, "1")], config_filter="all")
        assert broker["broker"]["1"]["min.insync.replicas"]["value"] == "2"
        assert broker["broker"]["1"]["default.replication.factor"]["value"] == "3"
    finally:
        admin.close()

    # One node down: two in sync, still min.insync.replicas, so acks=all writes go on; back up: three.
    cluster.stop_node(3)
    try:
        admin = KafkaAdminClient(**cluster.admin_kwargs())
        try:
            assert _isr(admin, topic, 2) == ([1, 2, 3], [1, 2])
            _produce_confluent(_confluent_config(cluster), topic, [b"while-3-is-down"])
        finally:
            admin.close()
    finally:
        cluster.start_node(3)
    admin = KafkaAdminClient(**cluster.admin_kwargs())
    try:
        assert _isr(admin, topic, 3) == ([1, 2, 3], [1, 2, 3])
    finally:
        admin.close()


def test_secure_scram_logins_and_acls(kafka_secure: KafkaCluster) -> None:
    cluster = kafka_secure
    assert set(cluster.bootstraps) == {"SASL_PLAINTEXT", "SASL_SSL", "SSL"}
    topic = _name("secure")
    admin = KafkaAdminClient(**cluster.admin_kwargs())
    try:
        admin.create_topics([NewTopic(topic, 1, 1)])
        on_topic = ResourcePattern(ResourceType.TOPIC, topic)
        acls = [ACL("User:alice", "*", operation, ACLPermissionType.ALLOW, on_topic)
                for operation in (ACLOperation.READ, ACLOperation.WRITE, ACLOperation.DESCRIBE)]
        acls.append(ACL("User:alice", "*", ACLOperation.READ, ACLPermissionType.ALLOW,
                        ResourcePattern(ResourceType.GROUP, "*")))
        acls.append(ACL("User:mallory", "*", ACLOperation.READ, ACLPermissionType.ALLOW,
                        ResourcePattern(ResourceType.GROUP, "*")))
        create_acls(admin, acls)
    finally:
        admin.close()

    # alice, SCRAM-SHA-512, on both SASL listeners: writes and reads the topic she has ACLs for.
    values = [f"alice-{i}".encode() for i in range(20)]
    _produce_confluent(_confluent_config(cluster, "SASL_PLAINTEXT", "alice"), topic, values[:10])
    _produce_confluent(_confluent_config(cluster, "SASL_SSL", "alice"), topic, values[10:])
    for listener in ("SASL_PLAINTEXT", "SASL_SSL"):
        read = _consume_confluent(_confluent_config(cluster, listener, "alice"), topic, 20)
        assert read == values, listener
    # SCRAM-SHA-256 works too, through kafka-python.
    consumer = KafkaConsumer(**cluster.admin_kwargs("SASL_SSL", "alice", "SCRAM-SHA-256"),
                             enable_auto_commit=False, consumer_timeout_ms=10_000)
    try:
        consumer.assign([TopicPartition(topic, 0)])
        consumer.seek(TopicPartition(topic, 0), 0)
        assert [m.value for _, m in zip(range(20), consumer, strict=False)] == values
    finally:
        consumer.close()

    # A wrong password fails with an authentication error (on each SASL listener).
    for listener in ("SASL_PLAINTEXT", "SASL_SSL"):
        errors: list[KafkaError] = []
        bad = Producer({**_confluent_config(cluster, listener, "alice", password="not-alices"),
                        "error_cb": errors.append})
        deadline = time.monotonic() + 20
        while not any(e.code() == KafkaError._AUTHENTICATION for e in errors) and time.monotonic() < deadline:
            bad.poll(0.2)
        assert any(e.code() == KafkaError._AUTHENTICATION for e in errors), (listener, errors)
        del bad

    # mallory authenticates (and may use any group) but has no ACL on the topic: her read is refused.
    mallory = Consumer({**_confluent_config(cluster, "SASL_PLAINTEXT", "mallory"),
                        "group.id": _name("mallory"), "enable.auto.commit": False})
    refused: list[KafkaError] = []
    try:
        mallory.subscribe([topic])
        deadline = time.monotonic() + 20
        while not refused and time.monotonic() < deadline:
            msg = mallory.poll(0.5)
            if msg is None:
                continue
            assert msg.error() is not None, "mallory read a record she has no ACL for"
            if msg.error().code() == KafkaError.TOPIC_AUTHORIZATION_FAILED:
                refused.append(msg.error())
    finally:
        mallory.close()
    assert refused, "mallory's read was never refused"

    # Kafka's own tools log in too, with the properties file the cluster writes (admin over SASL_SSL).
    listed = cluster.run_tool("topics", "--bootstrap-server", cluster.bootstraps["SASL_SSL"], "--list",
                              "--command-config", str(cluster.client_config_file("SASL_SSL")), timeout=60)
    assert listed.returncode == 0, listed.stderr
    assert topic in listed.stdout.split()

    # The SSL listener takes the client certificate (principal User:CN=test-client) and answers.
    ssl_admin = KafkaAdminClient(**cluster.admin_kwargs("SSL"))
    try:
        assert ssl_admin.describe_cluster()["brokers"]
    finally:
        ssl_admin.close()


def _earliest_local(admin: KafkaAdminClient, topic: str) -> tuple[int, int, int]:
    tp = TopicPartition(topic, 0)
    found = admin.list_partition_offsets({tp: OffsetSpec.EARLIEST_LOCAL})[tp].offset
    earliest = admin.list_partition_offsets({tp: OffsetSpec.EARLIEST})[tp].offset
    latest = admin.list_partition_offsets({tp: OffsetSpec.LATEST})[tp].offset
    return earliest, found, latest


def test_native_tiered_storage_moves_local_log_start(kafka_native_tiered: KafkaCluster) -> None:
    cluster = kafka_native_tiered
    topic = _name("tiered")
    # Kafka 4.x refuses segment.bytes under 1 MiB; its internal.segment.bytes (for tests) takes less.
    segment_key = "internal.segment.bytes" if cluster.release.major >= 4 else "segment.bytes"
    admin = KafkaAdminClient(**cluster.admin_kwargs())
    try:
        admin.create_topics([NewTopic(topic, 1, 1, topic_configs={
            "remote.storage.enable": "true", segment_key: "16384", "local.retention.bytes": "1",
            "retention.ms": "-1", "retention.bytes": "-1"})])
        values = [f"{i:06d}".encode() + b"x" * 1000 for i in range(400)]  # ~400 KB: some 25 segments
        _produce_kafka_python(cluster, topic, values)
        deadline = time.monotonic() + 60
        earliest, local_start, latest = _earliest_local(admin, topic)
        while local_start == 0 and time.monotonic() < deadline:
            time.sleep(0.5)
            earliest, local_start, latest = _earliest_local(admin, topic)
    finally:
        admin.close()
    assert latest == len(values)
    assert earliest == 0
    assert local_start > 0, f"the local log start never moved: is tiering on? see {cluster.log_path}"
    stored = list((cluster.remote_storage_dir / "kafka-tiered-storage").rglob("*.log"))
    assert stored, "LocalTieredStorage holds no segment"
    # A consumer from offset 0 still reads every record: the ones below local_start from remote storage.
    assert _consume_confluent(_confluent_config(cluster), topic, len(values), timeout=60) == values
