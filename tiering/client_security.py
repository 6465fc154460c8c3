"""How our own Kafka clients reach the brokers: TLS and SASL, with Kafka's client config names.

The proxy reads them under the ``upstream.`` prefix, for its core's own connections (metadata
refresh) and every tiering client (copier, metadata topic, ownership group, topic admin). The
command-line tools read them unprefixed from ``--command-config`` (as Kafka's tools do), and the
Spark source from ``kafka.``-prefixed options (as Spark's Kafka source does). Client connections
through the proxy never use them: each client authenticates as itself.

    upstream.security.protocol=SASL_SSL        # PLAINTEXT (default), SSL, SASL_PLAINTEXT, SASL_SSL
    upstream.sasl.mechanism=SCRAM-SHA-512      # PLAIN, SCRAM-SHA-256, SCRAM-SHA-512
    upstream.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required \\
        username="tiered-proxy" password="${env:PROXY_PASSWORD}";
    # or, as librdkafka users write them:
    upstream.sasl.username=tiered-proxy
    upstream.sasl.password=${file:/etc/tiered-proxy/secrets.properties:password}
    upstream.ssl.truststore.location=/etc/tiered-proxy/cluster-ca.pem
    upstream.ssl.keystore.location=/etc/tiered-proxy/proxy-client.pem   # key + chain, for mutual TLS
    upstream.ssl.key.password=...
    upstream.ssl.endpoint.identification.algorithm=https    # "" turns host name checks off

The SCRAM and PLAIN exchanges are kafka-python's (``kafka.net.sasl``); this module only drives
them over SaslHandshake/SaslAuthenticate, so our sync and async clients share one sequence.
Passwords are kept out of ``repr`` and out of every error message.
"""

from __future__ import annotations

import logging
import re
import ssl
from collections.abc import Generator, Mapping
from dataclasses import dataclass, field
from typing import Any

from kafka.net.sasl import get_sasl_mechanism

from protocol.apis import SASL_AUTHENTICATE, SASL_HANDSHAKE
from protocol.errors import ErrorCode

log = logging.getLogger(__name__)

UPSTREAM_PREFIX = "upstream."  # the proxy's properties
SPARK_PREFIX = "kafka."  # Spark's Kafka source options
# Kafka's client config names (each read after one of the prefixes above).
SECURITY_PROTOCOL = "security.protocol"
SASL_MECHANISM = "sasl.mechanism"
SASL_JAAS = "sasl.jaas.config"
SASL_USERNAME = "sasl.username"
SASL_PASSWORD = "sasl.password"
SSL_TRUSTSTORE = "ssl.truststore.location"
SSL_KEYSTORE = "ssl.keystore.location"
SSL_KEY_PASSWORD = "ssl.key.password"
SSL_ENDPOINT_IDENTIFICATION = "ssl.endpoint.identification.algorithm"
KEYS = (SECURITY_PROTOCOL, SASL_MECHANISM, SASL_JAAS, SASL_USERNAME, SASL_PASSWORD, SSL_TRUSTSTORE, SSL_KEYSTORE,
        SSL_KEY_PASSWORD, SSL_ENDPOINT_IDENTIFICATION)

SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
SASL_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
_LOGIN_MODULES = {  # the JAAS login module Kafka expects for each mechanism
    "PLAIN": "org.apache.kafka.common.security.plain.PlainLoginModule",
    "SCRAM-SHA-256": "org.apache.kafka.common.security.scram.ScramLoginModule",
    "SCRAM-SHA-512": "org.apache.kafka.common.security.scram.ScramLoginModule",
}
# SaslAuthenticate v1+ carries the session lifetime (KIP-368); v2 is the flexible form.
_HANDSHAKE_VERSION = 1
_AUTHENTICATE_MAX_VERSION = 2


class SecurityConfigError(ValueError):
    """The upstream security settings are incomplete or contradictory (never quotes a secret)."""


class SaslAuthenticationError(Exception):
    """A broker refused the proxy's own credentials, or the exchange went wrong."""


@dataclass(frozen=True)
class SaslCredentials:
    mechanism: str
    username: str
    password: str = field(repr=False)

    def exchange(self) -> Any:
        """kafka-python's client side of this mechanism (auth_bytes / receive / is_done)."""
        return get_sasl_mechanism(self.mechanism)(
            sasl_mechanism=self.mechanism, sasl_plain_username=self.username, sasl_plain_password=self.password)


@dataclass(frozen=True)
class ClientSecurity:
    protocol: str = "PLAINTEXT"
    ssl_context: ssl.SSLContext | None = None
    sasl: SaslCredentials | None = None

    @classmethod
    def from_properties(cls, props: Mapping[str, object], prefix: str = UPSTREAM_PREFIX) -> ClientSecurity:
        """From Kafka client settings named ``prefix + name`` (e.g. ``upstream.sasl.mechanism``)."""
        settings = _Settings(props, prefix)
        protocol = settings.get(SECURITY_PROTOCOL, "PLAINTEXT").strip().upper()
        if protocol not in SECURITY_PROTOCOLS:
            raise SecurityConfigError(f"{settings.name(SECURITY_PROTOCOL)}={protocol}: choose one of "
                                      f"{', '.join(SECURITY_PROTOCOLS)}")
        context = _ssl_context(settings) if protocol in ("SSL", "SASL_SSL") else None
        sasl = _sasl_credentials(settings) if protocol.startswith("SASL_") else None
        if sasl is None and any(settings.get(k) for k in (SASL_JAAS, SASL_USERNAME, SASL_PASSWORD)):
            log.warning("SASL credentials are set but %s=%s: they are not used", settings.name(SECURITY_PROTOCOL),
                        protocol)
        return cls(protocol, context, sasl)

    def kafka_python_config(self) -> dict[str, Any]:
        """The same settings as kafka-python (and aiokafka) name them."""
        config: dict[str, Any] = {"security_protocol": self.protocol}
        if self.ssl_context is not None:
            config["ssl_context"] = self.ssl_context
        if self.sasl is not None:
            config.update(sasl_mechanism=self.sasl.mechanism, sasl_plain_username=self.sasl.username,
                          sasl_plain_password=self.sasl.password)
        return config

    def describe(self) -> str:
        """For log lines: protocol, mechanism and user, never the password."""
        if self.sasl is None:
            return self.protocol
        return f"{self.protocol} {self.sasl.mechanism} as {self.sasl.username!r}"


class _Settings:
    """Kafka client settings read under one prefix; errors name the full key."""

    def __init__(self, props: Mapping[str, object], prefix: str) -> None:
        self.props = props
        self.prefix = prefix

    def name(self, key: str) -> str:
        return self.prefix + key

    def get(self, key: str, default: str = "") -> str:
        value = self.props.get(self.prefix + key)
        return default if value is None else str(value)


def secret_values(props: Mapping[str, object], prefix: str = UPSTREAM_PREFIX) -> list[str]:
    """Values that must never be printed: passwords, and the password inside a JAAS line."""
    settings = _Settings(props, prefix)
    values = [settings.get(SASL_PASSWORD), settings.get(SSL_KEY_PASSWORD)]
    jaas = settings.get(SASL_JAAS)
    if jaas:
        values.append(jaas)
        try:
            values.extend(v for k, v in parse_jaas(jaas, settings.name(SASL_JAAS))[1].items() if k != "username")
        except SecurityConfigError:
            pass
    return [v for v in values if v]


_JAAS = re.compile(r"\s*(?P<module>[\w.$]+)\s+(?P<flag>required|requisite|sufficient|optional)(?P<options>.*?);?\s*$",
                   re.DOTALL)
_JAAS_OPTION = re.compile(r'\s*(?P<key>[\w.\-]+)\s*=\s*(?:"(?P<quoted>(?:[^"\\]|\\.)*)"|(?P<bare>[^\s;"]+))')


def parse_jaas(text: str, key: str = SASL_JAAS) -> tuple[str, dict[str, str]]:
    """A Kafka ``sasl.jaas.config`` line: its login module and options (``key="value"``)."""
    match = _JAAS.match(text)
    if match is None:
        raise SecurityConfigError(f"{key}: expected '<LoginModule> required username=\"…\" "
                                  "password=\"…\";'")
    options: dict[str, str] = {}
    rest = match["options"].strip().rstrip(";")
    pos = 0
    while pos < len(rest):
        option = _JAAS_OPTION.match(rest, pos)
        if option is None:
            raise SecurityConfigError(f"{key}: cannot read the options after the login module "
                                      f"(at character {pos + 1} of them); write key=\"value\" pairs")
        quoted = option["quoted"]
        options[option["key"]] = re.sub(r"\\(.)", r"\1", quoted) if quoted is not None else option["bare"]
        pos = option.end()
        while pos < len(rest) and rest[pos].isspace():
            pos += 1
    return match["module"], options


def _sasl_credentials(settings: _Settings) -> SaslCredentials:
    mechanism = settings.get(SASL_MECHANISM, "GSSAPI").strip().upper()
    if mechanism not in SASL_MECHANISMS:
        default = " (Kafka's default when it is not set)" if mechanism == "GSSAPI" else ""
        raise SecurityConfigError(f"{settings.name(SASL_MECHANISM)}={mechanism}{default} is not supported: "
                                  f"set one of {', '.join(SASL_MECHANISMS)}")
    jaas = settings.get(SASL_JAAS)
    username: str | None = settings.get(SASL_USERNAME) or None
    password: str | None = settings.get(SASL_PASSWORD) or None
    if jaas and (username or password):
        raise SecurityConfigError(f"set the credentials once: {settings.name(SASL_JAAS)} or "
                                  f"{settings.name(SASL_USERNAME)}/{settings.name(SASL_PASSWORD)}, not both")
    if jaas:
        module, options = parse_jaas(jaas, settings.name(SASL_JAAS))
        expected = _LOGIN_MODULES[mechanism]
        if module != expected:
            raise SecurityConfigError(f"{settings.name(SASL_JAAS)}: {settings.name(SASL_MECHANISM)}={mechanism} "
                                      f"needs {expected}, not {module}")
        username, password = options.get("username"), options.get("password")
        if not username or password is None:
            raise SecurityConfigError(f"{settings.name(SASL_JAAS)}: the {module.rsplit('.', 1)[-1]} line needs "
                                      'username="…" and password="…"')
    if not username or password is None:
        raise SecurityConfigError(f"{settings.name(SECURITY_PROTOCOL)}=SASL_…: set {settings.name(SASL_JAAS)}, or "
                                  f"{settings.name(SASL_USERNAME)} and {settings.name(SASL_PASSWORD)}")
    return SaslCredentials(mechanism, username, password)


def _ssl_context(settings: _Settings) -> ssl.SSLContext:
    truststore = settings.get(SSL_TRUSTSTORE)
    context = ssl.create_default_context(cafile=truststore or None)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    keystore = settings.get(SSL_KEYSTORE)
    if keystore:
        context.load_cert_chain(keystore, password=settings.get(SSL_KEY_PASSWORD) or None)
    if settings.get(SSL_ENDPOINT_IDENTIFICATION, "https").lower() != "https":
        context.check_hostname = False
    return context


# -- the exchange ---------------------------------------------------------------------------------

Request = tuple[int, int, dict[str, Any]]  # (API key, version, body)


def sasl_exchange(credentials: SaslCredentials, broker: str,
                  versions: Mapping[int, tuple[int, int]]) -> Generator[Request, dict[str, Any], int]:
    """The SaslHandshake + SaslAuthenticate requests that authenticate one connection, as a
    generator: send it each decoded answer; it returns the session lifetime in ms (0: none).
    Raises SaslAuthenticationError naming ``broker`` and the user, never the password."""
    who = f"{credentials.mechanism} as {credentials.username!r}"
    handshake = versions.get(SASL_HANDSHAKE)
    authenticate = versions.get(SASL_AUTHENTICATE)
    if handshake is None or handshake[1] < _HANDSHAKE_VERSION or authenticate is None:
        raise SaslAuthenticationError(f"broker {broker} does not offer SASL (SaslHandshake v1 and "
                                      "SaslAuthenticate): is upstream.security.protocol right?")
    answer = yield SASL_HANDSHAKE, _HANDSHAKE_VERSION, {"mechanism": credentials.mechanism}
    if answer["error_code"] != ErrorCode.NONE:
        offered = ", ".join(answer.get("mechanisms") or []) or "none"
        raise SaslAuthenticationError(f"broker {broker} does not accept SASL {credentials.mechanism} "
                                      f"({_error_name(answer['error_code'])}); it offers {offered}")
    version = min(authenticate[1], _AUTHENTICATE_MAX_VERSION)
    mechanism = credentials.exchange()
    lifetime_ms = 0
    while not mechanism.is_done():
        answer = yield SASL_AUTHENTICATE, version, {"auth_bytes": mechanism.auth_bytes()}
        if answer["error_code"] != ErrorCode.NONE:
            raise SaslAuthenticationError(f"broker {broker} refused SASL {who}: {answer.get('error_message') or ''} "
                                          f"({_error_name(answer['error_code'])})".replace(":  (", ": ("))
        server_bytes = bytes(answer.get("auth_bytes") or b"")
        if server_bytes.startswith(b"e="):  # a SCRAM server-final error (RFC 5802)
            raise SaslAuthenticationError(f"broker {broker} refused SASL {who}: {server_bytes[2:].decode(errors='replace')}")
        try:
            mechanism.receive(server_bytes)
        except (ValueError, KeyError) as exc:
            raise SaslAuthenticationError(f"SASL {who} with broker {broker} failed: {exc}") from None
        lifetime_ms = int(answer.get("session_lifetime_ms") or 0)
    if not mechanism.is_authenticated():
        raise SaslAuthenticationError(f"broker {broker} did not confirm SASL {who}")
    return lifetime_ms


def _error_name(code: int) -> str:
    try:
        return ErrorCode(code).name
    except ValueError:
        return f"error {code}"
