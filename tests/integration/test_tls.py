"""TLS between clients and the proxy (listeners=SSL://, a PEM key store), for kafka-python,
aiokafka and confluent-kafka: produce and consume through every listener (bootstrap and the
per-broker port), mutual TLS, and a plaintext client refused without harming others."""

from __future__ import annotations

import asyncio
import ssl
import time

import pytest

from tests.certs import make_certificates
from tests.delivery import CheckedProducer
from tests.proxy_process import start_proxy
from tests.raw import RawClient

MESSAGES = 500


@pytest.fixture(scope="module")
def tls_proxy(noida, tmp_path_factory):
    work = tmp_path_factory.mktemp("tls")
    certs = make_certificates(work / "certs")
    proxy = start_proxy(noida.bootstrap, work / "proxy", "--set", f"ssl.keystore.location={certs.server}",
                        "--set", "ssl.client.auth=requested", "--set", f"ssl.truststore.location={certs.ca}",
                        scheme="SSL://")
    yield proxy, certs
    proxy.stop()


def _round_trip(client: str, bootstrap: str, topic: str, certs) -> list[bytes]:  # noqa: ANN001
    values = [f"{client}-{i}".encode() for i in range(MESSAGES)]
    if client == "confluent":
        from confluent_kafka import Consumer

        tls = {"bootstrap.servers": bootstrap, "security.protocol": "SSL", "ssl.ca.location": str(certs.ca),
               "ssl.certificate.location": str(certs.client_cert), "ssl.key.location": str(certs.client_key)}
        producer = CheckedProducer(tls)
        for v in values:
            producer.produce(topic, v, partition=0)
        producer.deliver_all(30)
        consumer = Consumer({**tls, "group.id": f"tls-{time.time()}", "auto.offset.reset": "earliest"})
        consumer.subscribe([topic])
        got: list[bytes] = []
        deadline = time.monotonic() + 60
        while len(got) < MESSAGES and time.monotonic() < deadline:
            got += [m.value() for m in consumer.consume(1000, 1.0) if m.error() is None]
        consumer.close()
        return got
    if client == "kafka-python":
        from kafka import KafkaConsumer, KafkaProducer

        tls = {"bootstrap_servers": bootstrap, "security_protocol": "SSL", "ssl_cafile": str(certs.ca)}
        producer = KafkaProducer(**tls)
        for v in values:
            producer.send(topic, v, partition=0)
        producer.flush(30)
        producer.close()
        consumer = KafkaConsumer(topic, **tls, auto_offset_reset="earliest")
        got = []
        deadline = time.monotonic() + 60
        while len(got) < MESSAGES and time.monotonic() < deadline:
            for records in consumer.poll(timeout_ms=1000).values():
                got += [r.value for r in records]
        consumer.close()
        return got

    async def aio() -> list[bytes]:
        from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

        context = ssl.create_default_context(cafile=str(certs.ca))
        producer = AIOKafkaProducer(bootstrap_servers=bootstrap, security_protocol="SSL", ssl_context=context)
        await producer.start()
        try:
            for v in values:
                await producer.send(topic, v, partition=0)
            await producer.flush()
        finally:
            await producer.stop()
        consumer = AIOKafkaConsumer(topic, bootstrap_servers=bootstrap, security_protocol="SSL", ssl_context=context,
                                    auto_offset_reset="earliest")
        await consumer.start()
        got: list[bytes] = []
        try:
            deadline = time.monotonic() + 60
            while len(got) < MESSAGES and time.monotonic() < deadline:
                for records in (await consumer.getmany(timeout_ms=1000)).values():
                    got += [r.value for r in records]
        finally:
            await consumer.stop()
        return got

    return asyncio.run(aio())


@pytest.mark.parametrize("client", ["kafka-python", "aiokafka", "confluent"])
def test_clients_round_trip_over_tls(tls_proxy, client, unique_name):
    proxy, certs = tls_proxy
    topic = f"tls-{unique_name}"
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": proxy.bootstrap, "security.protocol": "SSL",
                         "ssl.ca.location": str(certs.ca)})
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)
    assert _round_trip(client, proxy.bootstrap, topic, certs) == [f"{client}-{i}".encode() for i in range(MESSAGES)]


def test_a_plaintext_client_is_refused_and_others_carry_on(tls_proxy):
    proxy, certs = tls_proxy
    context = ssl.create_default_context(cafile=str(certs.ca))
    import socket

    with socket.create_connection(("127.0.0.1", proxy.port)) as tls_sock, \
            context.wrap_socket(tls_sock, server_hostname="127.0.0.1") as secure:
        plain = RawClient(proxy.bootstrap)
        with pytest.raises((ConnectionError, OSError)):
            plain.request(18, 0, {})  # plaintext bytes are not a TLS handshake: closed
        plain.sock.close()
        # The TLS connection opened before is unaffected.
        secure.sendall(bytes.fromhex("0000000e00120000000000010004746c7331"))  # ApiVersions v0, client id "tls1"
        size = int.from_bytes(secure.recv(4), "big")
        assert size > 0
    assert proxy.process.poll() is None


def test_tls_toward_the_brokers(tmp_path, unique_name):
    """Tansu behind a TLS listener (a relay, advertised in Metadata): the proxy's client traffic,
    its copier and its metadata topic all reach the broker over TLS; plaintext clients of the
    proxy do not notice."""
    from proxy.embedded_broker import free_port as free_broker_port
    from proxy.embedded_broker import start_broker
    from tests.tiering_checks import wait_until
    from tests.tls_relay import TlsRelay

    certs = make_certificates(tmp_path / "certs")
    tls_port = free_broker_port()
    broker = start_broker("tansu", tmp_path / "tansu", advertised_port=tls_port)
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(str(certs.server))
    relay = TlsRelay(tls_port, ("127.0.0.1", broker.port), context)
    metadata = f"topic://rlmm-{unique_name}"
    proxy = start_proxy(f"127.0.0.1:{tls_port}", tmp_path / "proxy", "--metadata", metadata,
                        "--set", "upstream.security.protocol=SSL",
                        "--set", f"upstream.ssl.truststore.location={certs.ca}",
                        "--set", "remote.log.metadata.topic.num.partitions=3",
                        "--set", "remote.log.manager.task.interval.ms=200", node_ids=[111])
    try:
        from confluent_kafka.admin import AdminClient, NewTopic

        topic = f"upstream-tls-{unique_name}"
        admin = AdminClient({"bootstrap.servers": proxy.bootstrap})
        admin.create_topics([NewTopic(topic, 1, 1, config={"remote.storage.enable": "true", "segment.bytes": "16384",
                                                         "segment.ms": "1000"})])[topic].result(30)
        from confluent_kafka import Consumer

        producer = CheckedProducer({"bootstrap.servers": proxy.bootstrap})
        for i in range(3000):
            producer.produce(topic, f"m{i}".encode() + bytes(100), partition=0)
        producer.deliver_all(30)
        # Tansu answered this new group's first JoinGroup only after 23 s with librdkafka's
        # default 45 s session; with 6 s, at once.
        consumer = Consumer({"bootstrap.servers": proxy.bootstrap, "group.id": f"g-{unique_name}",
                             "auto.offset.reset": "earliest", "session.timeout.ms": 6000})
        consumer.subscribe([topic])
        got = 0
        deadline = time.monotonic() + 60
        while got < 3000 and time.monotonic() < deadline:
            got += sum(1 for m in consumer.consume(1000, 1.0) if m.error() is None)
        consumer.close()
        assert got == 3000
        # The copier and the metadata topic went over TLS too: segments are recorded.
        assert wait_until(lambda: _tiered(metadata, proxy.bootstrap, topic), 60)  # read through the proxy
        assert relay.connections >= 3  # proxy client traffic, copier, metadata producer/consumer
    finally:
        proxy.stop()
        relay.close()
        broker.stop()


def _tiered(metadata: str, bootstrap: str, topic: str) -> bool:
    from tiering.metadata.view import load_metadata

    state = load_metadata(metadata, bootstrap, {"remote.log.metadata.topic.num.partitions": 3})
    return any(tp.topic == topic and state.finished(tp) for tp in state.partitions)
