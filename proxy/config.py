"""Proxy configuration: Kafka-style ``.properties`` files, Kafka config names, CLI overrides."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path


class ConfigError(ValueError):
    """A configuration value is missing or malformed; the message names the key."""


def parse_properties(text: str) -> dict[str, str]:
    """Java ``.properties`` as Kafka uses them: ``key=value`` or ``key: value``, # and ! comments,
    backslash line continuations."""
    props: dict[str, str] = {}
    pending = ""
    for raw in text.splitlines():
        line = pending + raw.strip() if pending else raw.strip()
        pending = ""
        if not line or line[0] in "#!":
            continue
        if line.endswith("\\") and not line.endswith("\\\\"):
            pending = line[:-1]
            continue
        sep = min((i for i in (line.find("="), line.find(":")) if i >= 0), default=-1)
        if sep < 0:
            props[line] = ""
        else:
            props[line[:sep].strip()] = line[sep + 1 :].strip()
    if pending:
        props[pending] = ""
    return props


def check_port(port: int, key: str, *, lowest: int = 0, given: str | None = None) -> int:
    """``port`` if a TCP port can be it. Checked here, at parse time, because a socket would take
    70000 silently as 70000 % 65536."""
    if not lowest <= port <= 65535:
        raise ConfigError(f"{key}: port {port} is out of range {lowest}-65535" + (f" ({given})" if given else ""))
    return port


def parse_host_port(text: str, key: str, *, lowest: int = 0) -> tuple[str, int]:
    """``HOST:PORT`` (or ``SCHEME://HOST:PORT``); port 0 asks for any free port unless ``lowest``
    says otherwise."""
    text = text.strip()
    if "://" in text:
        text = text.split("://", 1)[1]
    host, sep, port = text.rpartition(":")
    if not sep or not port.lstrip("-").isdigit():
        raise ConfigError(f"{key}: expected HOST:PORT, got {text!r}")
    return host.strip("[]") or "0.0.0.0", check_port(int(port), key, lowest=lowest, given=text)


@dataclass
class ProxyConfig:
    # Upstream brokers the proxy bootstraps from.
    bootstrap_servers: list[tuple[str, int]]
    # Where clients connect first.
    listen_host: str = "127.0.0.1"
    listen_port: int = 19092
    # Host written into Metadata/FindCoordinator/... answers; defaults to the listen host.
    advertised_host: str | None = None
    # Port-per-broker: node N is served on broker_port_base + N - broker_node_id_min, unless
    # broker_port_map names its port. Identical config gives identical ports on every instance.
    broker_port_base: int | None = None
    broker_node_id_min: int = 0
    broker_port_map: dict[int, int] = field(default_factory=dict)
    socket_request_max_bytes: int = 100 * 1024 * 1024
    # Largest response accepted from a broker (a Fetch answer can legitimately exceed the
    # request limit; some brokers ignore fetch byte limits altogether).
    upstream_response_max_bytes: int = 1024 * 1024 * 1024
    max_in_flight_requests: int = 1000
    # Bytes of broker answers held for clients (all connections together): an answer waits to be
    # read from its broker until it fits, so slow clients push back on the brokers, not on memory.
    response_buffer_max_bytes: int = 32 * 1024 * 1024
    metadata_refresh_ms: int = 30_000
    upstream_connect_timeout_ms: int = 10_000
    metrics_listen: tuple[str, int] | None = None  # the Prometheus endpoint; None: off
    workers: int = 1  # proxies sharing the listening ports (proxy/workers.py)
    worker_index: int | None = None  # this process's place among them; None: not a worker
    validate_requests: bool = True  # parse every forwarded request before a broker sees it
    listener_tls: bool = False  # listeners=SSL://...: clients speak TLS (see proxy/tls.py)
    extra: dict[str, str] = field(default_factory=dict)

    @property
    def advertised(self) -> str:
        if self.advertised_host:
            return self.advertised_host
        return "127.0.0.1" if self.listen_host in ("0.0.0.0", "", "::") else self.listen_host

    def port_for_node(self, node_id: int) -> int:
        if node_id in self.broker_port_map:
            return self.broker_port_map[node_id]
        base = self.broker_port_base if self.broker_port_base is not None else self.listen_port + 1
        port = base + node_id - self.broker_node_id_min
        if not 0 < port < 65536:
            raise ConfigError(
                f"broker node {node_id} maps to port {port}, out of range 1-65535; set proxy.broker.port.base, "
                "proxy.broker.node.id.min or proxy.broker.port.map"
            )
        return port

    @property
    def bootstrap(self) -> str:
        """``bootstrap.servers`` as Kafka writes it."""
        return ",".join(f"{h}:{p}" for h, p in self.bootstrap_servers)

    @classmethod
    def from_properties(cls, props: dict[str, str]) -> ProxyConfig:
        props = dict(props)

        def take(key: str) -> str | None:
            return props.pop(key, None)

        def take_int(key: str, default: int) -> int:
            value = take(key)
            if value is None or value == "":
                return default
            try:
                return int(value)
            except ValueError:
                raise ConfigError(f"{key}: expected an integer, got {value!r}") from None

        def take_port(key: str) -> int | None:
            value = take(key)
            if value is None or value.strip() == "":
                return None
            try:
                port = int(value)
            except ValueError:
                raise ConfigError(f"{key}: expected a port number, got {value!r}") from None
            return check_port(port, key, lowest=1)

        def take_bool(key: str, default: bool) -> bool:
            value = (take(key) or "").strip().lower()
            if value not in ("", "true", "false"):
                raise ConfigError(f"{key}: expected true or false, got {value!r}")
            return default if value == "" else value == "true"

        servers = take("bootstrap.servers")
        if not servers:
            raise ConfigError("bootstrap.servers: the upstream brokers are required (HOST:PORT[,HOST:PORT...])")
        bootstrap = [parse_host_port(s, "bootstrap.servers", lowest=1) for s in servers.split(",") if s.strip()]
        listen = (take("listeners") or "127.0.0.1:19092").split(",")[0].strip()
        scheme = listen.split("://", 1)[0].upper() if "://" in listen else "PLAINTEXT"
        if scheme not in ("PLAINTEXT", "SSL"):
            raise ConfigError(f"listeners: {scheme}:// is not supported (PLAINTEXT:// or SSL://; SASL passes "
                              "through to the brokers over either)")
        listen_host, listen_port = parse_host_port(listen, "listeners")
        port_map: dict[int, int] = {}
        raw_map = take("proxy.broker.port.map")
        if raw_map:
            for item in raw_map.split(","):
                node, _, port = item.partition(":")
                try:
                    port_map[int(node)] = int(port)
                except ValueError:
                    raise ConfigError(f"proxy.broker.port.map: expected NODE:PORT[,NODE:PORT...], got {raw_map!r}") from None
                check_port(port_map[int(node)], "proxy.broker.port.map", lowest=1, given=item.strip())
        base = take_port("proxy.broker.port.base")
        metrics = take("proxy.metrics.listen")
        cfg = cls(
            bootstrap_servers=bootstrap,
            listen_host=listen_host,
            listen_port=listen_port,
            advertised_host=take("proxy.advertised.host"),
            broker_port_base=base,
            broker_node_id_min=take_int("proxy.broker.node.id.min", 0),
            broker_port_map=port_map,
            socket_request_max_bytes=take_int("socket.request.max.bytes", 100 * 1024 * 1024),
            upstream_response_max_bytes=take_int("proxy.upstream.response.max.bytes", 1024 * 1024 * 1024),
            max_in_flight_requests=take_int("proxy.max.in.flight.requests", 1000),
            response_buffer_max_bytes=take_int("proxy.response.buffer.max.bytes", 32 * 1024 * 1024),
            metadata_refresh_ms=take_int("proxy.metadata.refresh.ms", 30_000),
            upstream_connect_timeout_ms=take_int("proxy.upstream.connect.timeout.ms", 10_000),
            metrics_listen=parse_host_port(metrics, "proxy.metrics.listen") if metrics else None,
            workers=take_int("proxy.workers", 1),
            worker_index=take_int("proxy.worker.index", -1),
            validate_requests=(take("proxy.request.validation") or "true").strip().lower() != "false",
            listener_tls=scheme == "SSL",
        )
        # proxy.config.strict is acted on before parsing (proxy/command_line_config.py); its value
        # is checked here, with the others.
        take_bool("proxy.config.strict", False)
        if cfg.workers < 1:
            raise ConfigError(f"proxy.workers: at least 1, got {cfg.workers}")
        if cfg.worker_index is not None and cfg.worker_index < 0:
            cfg.worker_index = None
        cfg.extra = props  # keys later layers (tiering) read
        return cfg


_REFERENCE = re.compile(r"\$\{(env|file):([^}]*)\}")


def resolve_references(props: Mapping[str, str]) -> dict[str, str]:
    """Kafka's config-provider references in values, so secrets stay out of the file:
    ``${env:NAME}`` (an environment variable) and ``${file:PATH:KEY}`` (a key of another
    .properties file, as Kafka's FileConfigProvider reads it). An unresolvable reference is an
    error naming the key and the reference, never a value."""

    def resolve(key: str, value: str) -> str:
        def one(match: re.Match[str]) -> str:
            provider, ref = match[1], match[2]
            if provider == "env":
                if ref not in os.environ:
                    raise ConfigError(f"{key}: environment variable {ref} (from ${{env:{ref}}}) is not set")
                return os.environ[ref]
            path, sep, name = ref.rpartition(":")
            if not sep or not path:
                raise ConfigError(f"{key}: write ${{file:PATH:KEY}} (got ${{file:{ref}}})")
            values = load_properties(Path(path))
            if name not in values:
                raise ConfigError(f"{key}: {path} has no key {name!r} (from ${{file:{ref}}})")
            return values[name]

        return _REFERENCE.sub(one, value)

    return {key: resolve(key, value) for key, value in props.items()}


def load_properties(path: Path) -> dict[str, str]:
    try:
        return parse_properties(path.read_text())
    except OSError as e:
        raise ConfigError(f"cannot read config file {path}: {e.strerror}") from None
