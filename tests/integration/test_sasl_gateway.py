"""Self-check of tests/sasl_gateway.py: against the gateway in front of a real noida-db (no proxy),
kafka-python, confluent-kafka and aiokafka log in with PLAIN and SCRAM as they would to a Kafka
broker's SASL_PLAINTEXT listener, are refused a topic they have no ACL for, and (librdkafka and
kafka-python) re-authenticate when the session lifetime runs out; raw requests check the exact
answers."""

from __future__ import annotations

import asyncio
import time
import uuid

import pytest
import scramp

from protocol.apis import (
    API_VERSIONS,
    FETCH,
    LIST_OFFSETS,
    METADATA,
    PRODUCE,
    SASL_AUTHENTICATE,
    SASL_HANDSHAKE,
)
from tests.raw import RawClient
from tests.sasl_gateway import SaslGateway, User

TOPIC = "alice-topic"
RECORDS = 5
USERS = {"alice": User("alice-secret"), "bob": User("bob-secret", topics={"bob-only"})}
MECHANISMS = ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"]


def _kafka_python(user: str, password: str, mechanism: str) -> dict:
    return {"security_protocol": "SASL_PLAINTEXT", "sasl_mechanism": mechanism,
            "sasl_plain_username": user, "sasl_plain_password": password}


def _confluent(bootstrap: str, user: str, password: str, mechanism: str = "SCRAM-SHA-512") -> dict:
    return {"bootstrap.servers": bootstrap, "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": mechanism,
            "sasl.username": user, "sasl.password": password}


@pytest.fixture(scope="module")
def gateway(own_noida):
    with SaslGateway((own_noida.host, own_noida.port), USERS) as gw:
        from kafka.admin import KafkaAdminClient, NewTopic

        admin = KafkaAdminClient(bootstrap_servers=gw.bootstrap, request_timeout_ms=10_000,
                                 **_kafka_python("alice", "alice-secret", "SCRAM-SHA-256"))
        admin.create_topics([NewTopic(TOPIC, 1, 1), NewTopic("bob-only", 1, 1)])
        admin.close()
        yield gw


@pytest.fixture(scope="module")
def produced(gateway) -> list[bytes]:
    from kafka import KafkaProducer

    values = [f"v{i}".encode() for i in range(RECORDS)]
    producer = KafkaProducer(bootstrap_servers=gateway.bootstrap, **_kafka_python("alice", "alice-secret", "PLAIN"))
    for v in values:
        producer.send(TOPIC, v, partition=0)
    producer.flush(10)
    producer.close()
    return values


def _kafka_python_read(bootstrap: str, mechanism: str, topic: str, expected: int) -> list[bytes]:
    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=None, auto_offset_reset="earliest",
                             **_kafka_python("alice", "alice-secret", mechanism))
    tp = TopicPartition(topic, 0)
    consumer.assign([tp])
    consumer.seek_to_beginning(tp)
    got: list[bytes] = []
    deadline = time.monotonic() + 15
    while len(got) < expected and time.monotonic() < deadline:
        for msgs in consumer.poll(500).values():
            got += [m.value for m in msgs]
    consumer.close()
    return got


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_kafka_python_produces_and_consumes(gateway, mechanism):
    from kafka import KafkaProducer

    topic = f"kp-{mechanism.lower()}-{uuid.uuid4().hex[:6]}"
    before = gateway.authenticated["alice"]
    producer = KafkaProducer(bootstrap_servers=gateway.bootstrap, **_kafka_python("alice", "alice-secret", mechanism))
    values = [f"{mechanism}-{i}".encode() for i in range(RECORDS)]
    for v in values:
        producer.send(topic, v, partition=0)  # auto-created by noida-db
    producer.flush(10)
    producer.close()
    assert _kafka_python_read(gateway.bootstrap, mechanism, topic, RECORDS) == values
    assert gateway.authenticated["alice"] >= before + 2


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-512"])
def test_kafka_python_wrong_password_fails(gateway, mechanism):
    from kafka import KafkaProducer
    from kafka.errors import KafkaError

    failed = gateway.failed
    start = time.monotonic()
    # kafka-python keeps retrying the bootstrap and reports the failure as KafkaTimeoutError.
    with pytest.raises(KafkaError):
        KafkaProducer(bootstrap_servers=gateway.bootstrap, bootstrap_timeout_ms=3000,
                      **_kafka_python("alice", "wrong", mechanism))
    assert time.monotonic() - start < 15
    assert gateway.failed > failed


def test_confluent_consumes_with_scram_512(gateway, produced):
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    consumer = Consumer({**_confluent(gateway.bootstrap, "alice", "alice-secret"),
                         "group.id": f"c-{uuid.uuid4().hex[:6]}", "enable.auto.commit": False})
    consumer.assign([TopicPartition(TOPIC, 0, OFFSET_BEGINNING)])
    got: list[bytes] = []
    deadline = time.monotonic() + 15
    while len(got) < RECORDS and time.monotonic() < deadline:
        for m in consumer.consume(100, 0.5):
            assert m.error() is None, m.error()
            got.append(m.value())
    consumer.close()
    assert got == produced


def test_confluent_wrong_password_reports_authentication_error(gateway):
    from confluent_kafka import Consumer, KafkaError

    failed = gateway.failed
    errors: list = []
    consumer = Consumer({**_confluent(gateway.bootstrap, "alice", "wrong"), "group.id": "never",
                         "error_cb": errors.append, "log_level": 0})
    consumer.subscribe([TOPIC])
    deadline = time.monotonic() + 15
    while not errors and time.monotonic() < deadline:
        consumer.poll(0.2)
    consumer.close()
    assert errors and errors[0].code() == KafkaError._AUTHENTICATION
    assert "invalid credentials with SASL mechanism SCRAM-SHA-512" in errors[0].str()
    assert gateway.failed > failed


def test_aiokafka_consumes_with_scram_512(gateway, produced):
    from aiokafka import AIOKafkaConsumer, TopicPartition

    async def consume() -> list[bytes]:
        consumer = AIOKafkaConsumer(bootstrap_servers=gateway.bootstrap, security_protocol="SASL_PLAINTEXT",
                                    sasl_mechanism="SCRAM-SHA-512", sasl_plain_username="alice",
                                    sasl_plain_password="alice-secret", enable_auto_commit=False)
        await consumer.start()
        try:
            tp = TopicPartition(TOPIC, 0)
            consumer.assign([tp])
            await consumer.seek_to_beginning(tp)
            got: list[bytes] = []
            deadline = time.monotonic() + 15
            while len(got) < RECORDS and time.monotonic() < deadline:
                for msgs in (await consumer.getmany(timeout_ms=500)).values():
                    got += [m.value for m in msgs]
            return got
        finally:
            await consumer.stop()

    assert asyncio.run(asyncio.wait_for(consume(), 30)) == produced


def test_aiokafka_wrong_password_fails(gateway):
    from aiokafka import AIOKafkaConsumer
    from aiokafka.errors import KafkaConnectionError

    async def start() -> None:
        consumer = AIOKafkaConsumer(bootstrap_servers=gateway.bootstrap, security_protocol="SASL_PLAINTEXT",
                                    sasl_mechanism="SCRAM-SHA-512", sasl_plain_username="alice",
                                    sasl_plain_password="wrong")
        try:
            await consumer.start()
        finally:
            await consumer.stop()

    failed = gateway.failed
    with pytest.raises(KafkaConnectionError):  # aiokafka: "Unable to bootstrap from ..."
        asyncio.run(asyncio.wait_for(start(), 15))
    assert gateway.failed > failed


def test_bob_is_refused_alice_topic(gateway, produced):
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition
    from kafka.errors import TopicAuthorizationFailedError

    denied = gateway.denied["bob"]
    bob = _kafka_python("bob", "bob-secret", "SCRAM-SHA-512")
    # kafka-python's consumer does not raise from poll() for a topic Metadata refuses (it never
    # learns a leader, so it never fetches): looking up where to start reading raises.
    consumer = KafkaConsumer(bootstrap_servers=gateway.bootstrap, group_id=None, request_timeout_ms=5000, **bob)
    tp = TopicPartition(TOPIC, 0)
    consumer.assign([tp])
    consumer.seek_to_beginning(tp)
    with pytest.raises(TopicAuthorizationFailedError):
        consumer.position(tp, timeout_ms=5000)
    consumer.close()
    producer = KafkaProducer(bootstrap_servers=gateway.bootstrap, max_block_ms=5000, **bob)
    with pytest.raises(TopicAuthorizationFailedError):
        producer.send(TOPIC, b"not allowed").get(10)
    producer.close()
    assert gateway.denied["bob"] > denied


def test_bob_is_refused_alice_topic_confluent(gateway, produced):
    from confluent_kafka import Consumer, KafkaError

    denied = gateway.denied["bob"]
    consumer = Consumer({**_confluent(gateway.bootstrap, "bob", "bob-secret"), "group.id": f"bob-{uuid.uuid4().hex[:6]}",
                         "auto.offset.reset": "earliest"})
    consumer.subscribe([TOPIC])
    errors = []
    deadline = time.monotonic() + 15
    while not errors and time.monotonic() < deadline:
        errors += [m.error() for m in consumer.consume(10, 0.5) if m.error() is not None]
    consumer.close()
    assert errors and errors[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    assert gateway.denied["bob"] > denied


def test_bob_reads_his_own_topic(gateway):
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition

    bob = _kafka_python("bob", "bob-secret", "SCRAM-SHA-256")
    producer = KafkaProducer(bootstrap_servers=gateway.bootstrap, **bob)
    producer.send("bob-only", b"mine", partition=0).get(10)
    producer.close()
    consumer = KafkaConsumer(bootstrap_servers=gateway.bootstrap, group_id=None, auto_offset_reset="earliest", **bob)
    consumer.assign([TopicPartition("bob-only", 0)])
    got: list[bytes] = []
    deadline = time.monotonic() + 15
    while not got and time.monotonic() < deadline:
        for msgs in consumer.poll(500).values():
            got += [m.value for m in msgs]
    consumer.close()
    assert got == [b"mine"]


def _consume_for(client: str, bootstrap: str, seconds: float) -> list[bytes]:
    """Reads TOPIC from the start with SCRAM-SHA-512 as alice, polling for ``seconds``."""
    got: list[bytes] = []
    start = time.monotonic()
    if client == "confluent":
        from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

        consumer = Consumer({**_confluent(bootstrap, "alice", "alice-secret"),
                             "group.id": f"re-{uuid.uuid4().hex[:6]}", "enable.auto.commit": False})
        consumer.assign([TopicPartition(TOPIC, 0, OFFSET_BEGINNING)])
        while time.monotonic() - start < seconds:
            for m in consumer.consume(100, 0.5):
                assert m.error() is None, m.error()
                got.append(m.value())
        consumer.close()
    elif client == "kafka-python":
        from kafka import KafkaConsumer, TopicPartition

        consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=None, auto_offset_reset="earliest",
                                 **_kafka_python("alice", "alice-secret", "SCRAM-SHA-512"))
        consumer.assign([TopicPartition(TOPIC, 0)])
        while time.monotonic() - start < seconds:
            for msgs in consumer.poll(500).values():
                got += [m.value for m in msgs]
        consumer.close()
    else:
        from aiokafka import AIOKafkaConsumer, TopicPartition

        async def consume() -> None:
            consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, security_protocol="SASL_PLAINTEXT",
                                        sasl_mechanism="SCRAM-SHA-512", sasl_plain_username="alice",
                                        sasl_plain_password="alice-secret", auto_offset_reset="earliest",
                                        enable_auto_commit=False)
            await consumer.start()
            try:
                consumer.assign([TopicPartition(TOPIC, 0)])
                while time.monotonic() - start < seconds:
                    for msgs in (await consumer.getmany(timeout_ms=500)).values():
                        got.extend(m.value for m in msgs)
            finally:
                await consumer.stop()

        asyncio.run(asyncio.wait_for(consume(), seconds + 15))
    return got


# confluent-kafka re-authenticating through the proxy: tests/integration/test_sasl.py
@pytest.mark.parametrize("client", ["kafka-python", "aiokafka"])
def test_session_lifetime(own_noida, produced, client):
    """With a 2 s session, librdkafka and kafka-python re-authenticate (KIP-368) and keep their
    connections; aiokafka does not implement KIP-368, so the gateway closes its expired
    connections, as Kafka would, and aiokafka reconnects."""
    with SaslGateway((own_noida.host, own_noida.port), USERS, session_lifetime_ms=2000) as gw:
        assert _consume_for(client, gw.bootstrap, 5) == produced
        assert gw.failed == 0
        if client == "aiokafka":
            assert gw.closed_expired > 0 and not gw.reauthenticated
        else:
            assert gw.reauthenticated["alice"] > 0
            assert gw.closed_expired == 0


# -- raw requests: the exact answers --------------------------------------------------------------


def _login(client: RawClient, user: str, password: str, mechanism: str = "PLAIN") -> dict:
    """A SaslHandshake v1 + SaslAuthenticate v2 exchange; the last SaslAuthenticate answer."""
    assert client.request(SASL_HANDSHAKE, 1, {"mechanism": mechanism})["error_code"] == 0
    if mechanism == "PLAIN":
        return client.request(SASL_AUTHENTICATE, 2, {"auth_bytes": f"\0{user}\0{password}".encode()})
    scram = scramp.ScramClient([mechanism], user, password)
    first = client.request(SASL_AUTHENTICATE, 2, {"auth_bytes": scram.get_client_first().encode()})
    if first["error_code"] != 0:
        return first
    scram.set_server_first(bytes(first["auth_bytes"]).decode())
    final = client.request(SASL_AUTHENTICATE, 2, {"auth_bytes": scram.get_client_final().encode()})
    if final["error_code"] == 0:
        scram.set_server_final(bytes(final["auth_bytes"]).decode())  # the server proved it knows the key
    return final


def test_api_versions_advertise_sasl_and_cap_fetch(gateway):
    client = RawClient(gateway.bootstrap)
    versions = {k["api_key"]: (k["min_version"], k["max_version"])
                for k in client.request(API_VERSIONS, 3, {"client_software_name": "raw",
                                                          "client_software_version": "1"})["api_keys"]}
    assert versions[SASL_HANDSHAKE] == (1, 1)
    assert versions[SASL_AUTHENTICATE] == (0, 2)
    assert versions[FETCH][1] == 12
    client.close()


def test_requests_before_authentication_close_the_connection(gateway):
    failed = gateway.failed
    client = RawClient(gateway.bootstrap)
    client.send(METADATA, 12, {"topics": None, "allow_auto_topic_creation": False,
                               "include_topic_authorized_operations": False})
    assert client.closed_by_peer()
    client = RawClient(gateway.bootstrap)
    answer = client.request(SASL_HANDSHAKE, 1, {"mechanism": "GSSAPI"})
    assert answer == {"error_code": 33, "mechanisms": MECHANISMS}
    assert client.closed_by_peer()
    assert gateway.failed == failed + 2


@pytest.mark.parametrize(("mechanism", "user", "message"), [
    ("PLAIN", "alice", "Authentication failed: Invalid username or password"),
    ("PLAIN", "mallory", "Authentication failed: Invalid username or password"),
    ("SCRAM-SHA-256", "alice", "Authentication failed during authentication due to invalid credentials with SASL "
                               "mechanism SCRAM-SHA-256"),
    ("SCRAM-SHA-512", "mallory", "Authentication failed during authentication due to invalid credentials with SASL "
                                 "mechanism SCRAM-SHA-512"),
])
def test_failed_authentication_answers_like_kafka(gateway, mechanism, user, message):
    client = RawClient(gateway.bootstrap)
    answer = _login(client, user, "wrong", mechanism)
    assert (answer["error_code"], answer["error_message"]) == (58, message)
    assert client.closed_by_peer()


def test_topic_acls_on_raw_requests(gateway, produced):
    client = RawClient(gateway.bootstrap)
    assert _login(client, "bob", "bob-secret", "SCRAM-SHA-256")["error_code"] == 0
    denied = gateway.denied["bob"]
    every = client.request(METADATA, 12, {"topics": None, "allow_auto_topic_creation": False,
                                          "include_topic_authorized_operations": False})
    assert [t["name"] for t in every["topics"]] == ["bob-only"]
    assert every["brokers"][0]["host"] == "127.0.0.1" and every["brokers"][0]["port"] == gateway.port
    named = client.request(METADATA, 12, {"topics": [{"topic_id": bytes(16), "name": n} for n in (TOPIC, "bob-only")],
                                          "allow_auto_topic_creation": False,
                                          "include_topic_authorized_operations": False})
    assert {t["name"]: (t["error_code"], len(t["partitions"])) for t in named["topics"]} == {
        TOPIC: (29, 0), "bob-only": (0, 1)}
    partition = {"partition_index": 0, "current_leader_epoch": -1, "timestamp": -1, "max_num_offsets": 1}
    offsets = client.request(LIST_OFFSETS, 7, {"replica_id": -1, "isolation_level": 0, "timeout_ms": 0, "topics": [
        {"name": TOPIC, "partitions": [partition]}, {"name": "bob-only", "partitions": [partition]}]})
    assert {t["name"]: t["partitions"][0]["error_code"] for t in offsets["topics"]} == {TOPIC: 29, "bob-only": 0}
    fetch = client.request(FETCH, 12, {
        "replica_id": -1, "max_wait_ms": 100, "min_bytes": 1, "max_bytes": 1 << 20, "isolation_level": 0,
        "session_id": 0, "session_epoch": -1, "forgotten_topics_data": [], "rack_id": "", "cluster_id": None,
        "topics": [{"topic": TOPIC, "partitions": [{"partition": 0, "current_leader_epoch": -1, "fetch_offset": 0,
                                                   "last_fetched_epoch": -1, "log_start_offset": -1,
                                                   "partition_max_bytes": 1 << 20}]}]})
    [part] = fetch["responses"][0]["partitions"]
    assert (part["error_code"], part["high_watermark"], bytes(part["records"] or b"")) == (29, -1, b"")
    produce = {"transactional_id": None, "acks": 1, "timeout_ms": 1000,
               "topic_data": [{"name": TOPIC, "partition_data": [{"index": 0, "records": None}]}]}
    answer = client.request(PRODUCE, 9, produce)
    assert answer["responses"][0]["partition_responses"][0]["error_code"] == 29
    client.send(PRODUCE, 9, {**produce, "acks": 0})  # acks=0: refused without an answer
    assert not client.closed_by_peer(0.5)
    assert gateway.denied["bob"] == denied + 5
    client.close()


def test_reauthentication_rules(own_noida):
    with SaslGateway((own_noida.host, own_noida.port), USERS, session_lifetime_ms=1500) as gw:
        client = RawClient(gw.bootstrap)
        assert _login(client, "alice", "alice-secret", "SCRAM-SHA-512")["session_lifetime_ms"] == 1500
        time.sleep(1.1)
        assert _login(client, "alice", "alice-secret", "SCRAM-SHA-512")["error_code"] == 0
        assert gw.reauthenticated["alice"] == 1
        time.sleep(1.6)  # expired: any request but SaslHandshake closes the connection
        client.send(METADATA, 12, {"topics": [], "allow_auto_topic_creation": False,
                                   "include_topic_authorized_operations": False})
        assert client.closed_by_peer()
        assert gw.closed_expired == 1
        # Re-authentication must keep the principal.
        client = RawClient(gw.bootstrap)
        assert _login(client, "alice", "alice-secret")["error_code"] == 0
        answer = _login(client, "bob", "bob-secret")
        assert (answer["error_code"], answer["error_message"]) == (
            58, "Cannot change principals during re-authentication from User.alice: User.bob")
        assert client.closed_by_peer()
    # Without a session lifetime Kafka does not re-authenticate: the handshake is refused, the
    # connection stays.
    with SaslGateway((own_noida.host, own_noida.port), USERS) as gw:
        client = RawClient(gw.bootstrap)
        assert _login(client, "alice", "alice-secret")["session_lifetime_ms"] == 0
        assert client.request(SASL_HANDSHAKE, 1, {"mechanism": "PLAIN"})["error_code"] == 34
        assert client.request(METADATA, 12, {"topics": [], "allow_auto_topic_creation": False,
                                             "include_topic_authorized_operations": False})["brokers"]
        client.close()
