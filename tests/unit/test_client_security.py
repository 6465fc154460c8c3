"""Our clients' TLS/SASL settings (Kafka's names) and the SASL exchange, driven against an
independent SCRAM server implementation (scramp) standing in for the broker's side."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import scramp
from hypothesis import given
from hypothesis import strategies as st

from protocol.apis import SASL_AUTHENTICATE, SASL_HANDSHAKE, api
from protocol.errors import ErrorCode
from tiering.client_security import (
    SPARK_PREFIX,
    ClientSecurity,
    SaslAuthenticationError,
    SaslCredentials,
    SecurityConfigError,
    parse_jaas,
    sasl_exchange,
    secret_values,
)

PLAIN_MODULE = "org.apache.kafka.common.security.plain.PlainLoginModule"
SCRAM_MODULE = "org.apache.kafka.common.security.scram.ScramLoginModule"
SASL_VERSIONS = {SASL_HANDSHAKE: (0, 1), SASL_AUTHENTICATE: (0, 2)}


def _jaas(module: str, username: str, password: str) -> str:
    quote = lambda s: s.replace("\\", "\\\\").replace('"', '\\"')  # noqa: E731
    return f'{module} required username="{quote(username)}" password="{quote(password)}";'


# -- settings ---------------------------------------------------------------------------------------

def test_plaintext_by_default() -> None:
    security = ClientSecurity.from_properties({})
    assert (security.protocol, security.ssl_context, security.sasl) == ("PLAINTEXT", None, None)
    assert security.kafka_python_config() == {"security_protocol": "PLAINTEXT"}


def test_scram_from_jaas() -> None:
    security = ClientSecurity.from_properties({
        "upstream.security.protocol": "sasl_plaintext", "upstream.sasl.mechanism": "SCRAM-SHA-512",
        "upstream.sasl.jaas.config": _jaas(SCRAM_MODULE, "tiered-proxy", "s3cr3t")})
    assert security.sasl == SaslCredentials("SCRAM-SHA-512", "tiered-proxy", "s3cr3t")
    assert security.kafka_python_config() == {
        "security_protocol": "SASL_PLAINTEXT", "sasl_mechanism": "SCRAM-SHA-512",
        "sasl_plain_username": "tiered-proxy", "sasl_plain_password": "s3cr3t"}
    assert "s3cr3t" not in repr(security) and "s3cr3t" not in security.describe()


def test_librdkafka_style_username_password_and_sasl_ssl() -> None:
    security = ClientSecurity.from_properties({
        "upstream.security.protocol": "SASL_SSL", "upstream.sasl.mechanism": "PLAIN",
        "upstream.sasl.username": "u", "upstream.sasl.password": "p"})
    assert security.ssl_context is not None
    assert security.sasl == SaslCredentials("PLAIN", "u", "p")
    assert security.kafka_python_config()["ssl_context"] is security.ssl_context


def test_spark_and_command_config_prefixes() -> None:
    options = {"kafka.security.protocol": "SASL_PLAINTEXT", "kafka.sasl.mechanism": "SCRAM-SHA-256",
               "kafka.sasl.jaas.config": _jaas(SCRAM_MODULE, "job", "pw")}
    assert ClientSecurity.from_properties(options, prefix=SPARK_PREFIX).sasl == SaslCredentials("SCRAM-SHA-256", "job", "pw")
    unprefixed = {k.removeprefix(SPARK_PREFIX): v for k, v in options.items()}
    assert ClientSecurity.from_properties(unprefixed, prefix="").sasl == SaslCredentials("SCRAM-SHA-256", "job", "pw")


@pytest.mark.parametrize(("props", "message"), [
    ({"upstream.security.protocol": "SASL_TLS"}, r"upstream.security.protocol=SASL_TLS: choose one of PLAINTEXT, SSL"),
    ({"upstream.security.protocol": "SASL_PLAINTEXT"}, r"GSSAPI \(Kafka's default when it is not set\) is not supported"),
    ({"upstream.security.protocol": "SASL_PLAINTEXT", "upstream.sasl.mechanism": "OAUTHBEARER"},
     r"OAUTHBEARER is not supported: set one of PLAIN, SCRAM-SHA-256, SCRAM-SHA-512"),
    ({"upstream.security.protocol": "SASL_PLAINTEXT", "upstream.sasl.mechanism": "PLAIN"},
     r"set upstream.sasl.jaas.config, or upstream.sasl.username and upstream.sasl.password"),
    ({"upstream.security.protocol": "SASL_PLAINTEXT", "upstream.sasl.mechanism": "PLAIN",
      "upstream.sasl.jaas.config": _jaas(SCRAM_MODULE, "u", "hunter2")},
     r"upstream.sasl.mechanism=PLAIN needs org.apache.kafka.common.security.plain.PlainLoginModule"),
    ({"upstream.security.protocol": "SASL_PLAINTEXT", "upstream.sasl.mechanism": "PLAIN",
      "upstream.sasl.jaas.config": _jaas(PLAIN_MODULE, "u", "hunter2"), "upstream.sasl.password": "hunter2"},
     r"set the credentials once"),
    ({"upstream.security.protocol": "SASL_PLAINTEXT", "upstream.sasl.mechanism": "PLAIN",
      "upstream.sasl.jaas.config": f'{PLAIN_MODULE} required password="hunter2";'},
     r'needs username="…" and password="…"'),
    ({"upstream.security.protocol": "SASL_PLAINTEXT", "upstream.sasl.mechanism": "PLAIN",
      "upstream.sasl.jaas.config": 'username="u" password="hunter2"'}, r"expected '<LoginModule> required"),
])
def test_bad_settings_name_the_key_and_never_the_password(props: dict[str, str], message: str) -> None:
    with pytest.raises(SecurityConfigError, match=message) as failure:
        ClientSecurity.from_properties(props)
    assert "hunter2" not in str(failure.value)


def test_jaas_with_escapes_and_extra_options() -> None:
    module, options = parse_jaas(f'{SCRAM_MODULE}  required\n username="a\\"b"  password="x\\\\y;z" tokenauth=false ;')
    assert module == SCRAM_MODULE
    assert options == {"username": 'a"b', "password": "x\\y;z", "tokenauth": "false"}


@given(st.text(st.characters(blacklist_categories=("Cs", "Cc")), min_size=1),
       st.text(st.characters(blacklist_categories=("Cs", "Cc"))))
def test_jaas_round_trips_any_credentials(username: str, password: str) -> None:
    assert parse_jaas(_jaas(PLAIN_MODULE, username, password)) == (PLAIN_MODULE, {"username": username, "password": password})


def test_secret_values_cover_password_keys_and_the_jaas_line() -> None:
    jaas = _jaas(SCRAM_MODULE, "user", "pw1")
    assert set(secret_values({"upstream.sasl.jaas.config": jaas, "upstream.ssl.key.password": "pw2"})) == {jaas, "pw1", "pw2"}
    assert secret_values({"sasl.password": "pw3"}, prefix="") == ["pw3"]


# -- the exchange, against scramp's SCRAM server ------------------------------------------------

class ScramServer:
    """The broker's side of SaslHandshake/SaslAuthenticate for one connection, on scramp."""

    def __init__(self, users: dict[str, str], mechanism: str, lifetime_ms: int = 0) -> None:
        self.mechanism = mechanism
        self.lifetime_ms = lifetime_ms
        scram = scramp.ScramMechanism(mechanism)
        self.auth = {u: scram.make_auth_info(p, iteration_count=4096) for u, p in users.items()}
        self.server = scram.make_server(self._lookup)
        self.step = 0

    def _lookup(self, username: str) -> tuple[bytes, bytes, bytes, int]:
        if username not in self.auth:
            raise scramp.ScramException("unknown-user")
        return self.auth[username]

    def answer(self, api_key: int, version: int, body: dict[str, Any]) -> dict[str, Any]:
        # What goes over the wire must encode at the version asked.
        api(api_key).request_codec(version).encode(body)
        if api_key == SASL_HANDSHAKE:
            ok = body["mechanism"] == self.mechanism
            return {"error_code": ErrorCode.NONE if ok else ErrorCode.UNSUPPORTED_SASL_MECHANISM,
                    "mechanisms": [self.mechanism]}
        message = bytes(body["auth_bytes"]).decode()
        try:
            if self.step == 0:
                self.server.set_client_first(message)
                out = self.server.get_server_first()
            else:
                self.server.set_client_final(message)
                out = self.server.get_server_final()
        except scramp.ScramException as e:
            return {"error_code": ErrorCode.SASL_AUTHENTICATION_FAILED, "error_message": f"Authentication failed: {e}",
                    "auth_bytes": b"", "session_lifetime_ms": 0}
        self.step += 1
        return {"error_code": 0, "error_message": None, "auth_bytes": out.encode(),
                "session_lifetime_ms": self.lifetime_ms}


def _run(credentials: SaslCredentials, answer: Callable[[int, int, dict[str, Any]], dict[str, Any]],
         versions: dict[int, tuple[int, int]] = SASL_VERSIONS) -> int:
    steps = sasl_exchange(credentials, "broker-1:9092", versions)
    response: dict[str, Any] | None = None
    try:
        while True:
            response = answer(*steps.send(response))  # type: ignore[arg-type]
    except StopIteration as done:
        return done.value


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_scram_login_with_the_right_password(mechanism: str) -> None:
    server = ScramServer({"proxy": "right"}, mechanism, lifetime_ms=60_000)
    assert _run(SaslCredentials(mechanism, "proxy", "right"), server.answer) == 60_000
    assert server.step == 2


@pytest.mark.parametrize(("user", "password"), [("proxy", "wrong"), ("nobody", "wrong")])
def test_scram_refusal_names_user_and_broker_never_the_password(user: str, password: str) -> None:
    server = ScramServer({"proxy": "right"}, "SCRAM-SHA-512")
    with pytest.raises(SaslAuthenticationError, match=rf"broker broker-1:9092 refused SASL SCRAM-SHA-512 as '{user}'") as e:
        _run(SaslCredentials("SCRAM-SHA-512", user, password), server.answer)
    assert password not in str(e.value)


def test_scram_server_final_error_is_a_refusal() -> None:
    """Tansu 0.6 answers every SCRAM login with error 0 and ``e=unknown-user`` (measured)."""
    server = ScramServer({"proxy": "right"}, "SCRAM-SHA-512")

    def tansu_like(api_key: int, version: int, body: dict[str, Any]) -> dict[str, Any]:
        out = server.answer(api_key, version, body)
        if api_key == SASL_AUTHENTICATE and server.step == 2:
            out["auth_bytes"] = b"e=unknown-user"
        return out

    with pytest.raises(SaslAuthenticationError, match=r"refused SASL SCRAM-SHA-512 as 'proxy': unknown-user"):
        _run(SaslCredentials("SCRAM-SHA-512", "proxy", "right"), tansu_like)


def test_a_forged_server_signature_is_refused() -> None:
    server = ScramServer({"proxy": "right"}, "SCRAM-SHA-256")

    def forged(api_key: int, version: int, body: dict[str, Any]) -> dict[str, Any]:
        out = server.answer(api_key, version, body)
        if api_key == SASL_AUTHENTICATE and server.step == 2:
            out["auth_bytes"] = b"v=" + b"A" * 44
        return out

    with pytest.raises(SaslAuthenticationError, match=r"failed: Server sent wrong signature"):
        _run(SaslCredentials("SCRAM-SHA-256", "proxy", "right"), forged)


def test_plain_login_sends_rfc4616_credentials() -> None:
    seen: list[bytes] = []

    def broker(api_key: int, version: int, body: dict[str, Any]) -> dict[str, Any]:
        if api_key == SASL_HANDSHAKE:
            return {"error_code": 0, "mechanisms": ["PLAIN"]}
        seen.append(bytes(body["auth_bytes"]))
        return {"error_code": 0, "error_message": None, "auth_bytes": b"", "session_lifetime_ms": 0}

    assert _run(SaslCredentials("PLAIN", "u", "p"), broker) == 0
    assert seen == [b"u\0u\0p"]


def test_unsupported_mechanism_lists_what_the_broker_offers() -> None:
    server = ScramServer({}, "SCRAM-SHA-512")
    with pytest.raises(SaslAuthenticationError, match=r"does not accept SASL PLAIN \(UNSUPPORTED_SASL_MECHANISM\); "
                                                      r"it offers SCRAM-SHA-512"):
        _run(SaslCredentials("PLAIN", "u", "p"), server.answer)


def test_a_broker_without_sasl_is_named() -> None:
    with pytest.raises(SaslAuthenticationError, match=r"does not offer SASL"):
        _run(SaslCredentials("PLAIN", "u", "p"), lambda *a: {}, versions={})
