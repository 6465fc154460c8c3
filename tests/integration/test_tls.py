"""TLS between clients and the proxy (listeners=SSL://, a PEM key store), for kafka-python,
aiokafka and confluent-kafka: produce and consume through every listener (bootstrap and the
per-broker port), mutual TLS, and a plaintext client refused without harming others."""

from __future__ import annotations

import asyncio
import ssl
import time

import pytest

from tests.certs import make_certificates
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
        from confluent_kafka import Consumer, Producer

        tls = {"bootstrap.servers": bootstrap, "security.protocol": "SSL", "ssl.ca.location": str(certs.ca),
               "ssl.certificate.location": str(certs.client_cert), "ssl.key.location": str(certs.client_key)}
        producer = Producer(tls)
        for v in values:
            producer.produce(topic, v, partition=0)
        assert producer.flush(30) == 0
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
        consumer = KafkaConsumer(topic, **tls, auto_offset_reset="earliest", consumer_timeout_ms=20_000)
        got = [m.value for m in consumer]
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
