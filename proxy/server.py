"""The proxy core's server: a bootstrap listener plus one listener per upstream broker, the
upstream view of the cluster, ApiVersions negotiation, and the filter chain it hands requests to
(``proxy/chain.py``). It knows no feature: the chain and the services (e.g. the tiering service)
are given to it, built from configuration by ``proxy/filters``."""

from __future__ import annotations

import collections
import logging
import socket
import time
from typing import Protocol

import trio

from protocol.apis import (
    API_VERSIONS,
    DESCRIBE_CLUSTER,
    FETCH,
    FIND_COORDINATOR,
    INIT_PRODUCER_ID,
    LIST_OFFSETS,
    METADATA,
    OFFSET_COMMIT,
    OFFSET_FETCH,
    OFFSET_FOR_LEADER_EPOCH,
    PRODUCE,
    SASL_HANDSHAKE,
    all_apis,
    build_codecs,
)
from protocol.schema_model import Versions
from proxy.byte_budget import ByteBudget
from proxy.chain import BrokerSeen, CoreMetrics, Filter, RequestObserver
from proxy.config import ProxyConfig
from proxy.connection import ClientConnection
from proxy.framing import FrameStream
from proxy.tls import server_context
from proxy.upstream import (
    BrokerVersions,
    ClusterView,
    InternalClient,
    UpstreamError,
    authenticate,
    open_upstream,
    probe_api_versions,
)
from tiering.broker_client import PREFERRED_VERSIONS
from tiering.client_security import ClientSecurity

log = logging.getLogger(__name__)

# What consumers and producers send first: their codecs are built before clients are served, at
# the newest versions (each codec costs milliseconds of CPU at every start), and at the older ones
# librdkafka 2.x sends (FindCoordinator v2; its Fetch v16 is among the newest). Other versions are
# built on first use.
_FIRST_REQUESTS = frozenset({API_VERSIONS, METADATA, FIND_COORDINATOR, OFFSET_FETCH, OFFSET_COMMIT, LIST_OFFSETS,
                             OFFSET_FOR_LEADER_EPOCH, FETCH, INIT_PRODUCER_ID, PRODUCE})
_FIRST_VERSIONS = 3
_LIBRDKAFKA_VERSIONS = {FIND_COORDINATOR: 2}


def _newest_versions(valid: Versions) -> range:
    return range(max(valid.low, valid.high - _FIRST_VERSIONS + 1), valid.high + 1)


class Service(Protocol):
    """Work that runs beside the proxy for its whole life (the tiering service)."""

    def start(self) -> None: ...

    def stop(self) -> None: ...


def negotiate_versions(broker: dict[int, tuple[int, int]], caps: dict[int, int],
                       overrides: dict[int, tuple[int, int]],
                       read: frozenset[int] = frozenset()) -> dict[int, tuple[int, int]]:
    """The API versions clients may use. An API the proxy only relays (not in ``read``, the APIs
    some filter decodes) is offered at every version the broker offers, whether or not the proxy
    has its schema: the broker is the judge of its own requests. An API a filter reads is offered
    at the versions both the broker and the schemas have, below the chain's caps (never a version
    the broker removed, KIP-896). ``overrides``: APIs the chain translates or answers itself,
    offered at those versions whatever the broker has (and at the broker's older ones).
    ApiVersions is answered by the proxy, at the versions it can write."""
    allowed: dict[int, tuple[int, int]] = {}
    apis = all_apis()
    for key, (lo_b, hi_b) in broker.items():
        spec = apis.get(key)
        lo, hi = lo_b, min(hi_b, caps.get(key, hi_b))
        if spec is not None and (key in read or key == API_VERSIONS):
            lo, hi = max(spec.min_version, lo), min(spec.max_version, hi)
        if key == SASL_HANDSHAKE:
            # v0 is followed by raw, unframed SASL tokens the proxy could not relay as
            # requests; every current client uses v1 (and Kafka 4 removed v0).
            lo = max(lo, 1)
        if lo <= hi:
            allowed[key] = (lo, hi)
    for key, (lo, hi) in overrides.items():
        # Answered or translated by the chain at these versions; older ones the broker still
        # offers pass through to it.
        allowed[key] = (min(lo, allowed.get(key, (lo, hi))[0]), hi)
    return dict(sorted(allowed.items()))


class Proxy:
    def __init__(self, config: ProxyConfig, chain: list[Filter] | None = None,
                 services: list[Service] | None = None) -> None:
        self.config = config
        self.chain = list(chain or [])
        self.services = list(services or [])
        self.cluster = ClusterView()
        self.metrics = CoreMetrics()
        self.response_budget = ByteBudget(config.response_buffer_max_bytes, "proxy.response.buffer.max.bytes")
        self.metrics.budgets.append(self.response_budget)
        self.listen_ports: dict[int | None, int] = {}  # node id (None: bootstrap) -> bound port
        self._listener_scopes: dict[int, trio.CancelScope] = {}  # a broker's port closes with its scope
        self._listener_lock = trio.Lock()
        self._nursery: trio.Nursery | None = None
        # Set once the filter chain has started: a client accepted before waits for it.
        self._ready = trio.Event()
        self._observers: list[RequestObserver] = []
        # API key -> the filters that declare it, in chain order.
        self.filters_for: dict[int, tuple[Filter, ...]] = collections.defaultdict(tuple)
        for f in self.chain:
            for key in f.apis & all_apis().keys():
                self.filters_for[key] += (f,)
        # APIs some filter must decode (the rest are relayed at whatever version the broker takes).
        self.read_apis = frozenset(key for f in self.chain if f.decodes for key in f.apis & all_apis().keys())
        # Versions the chain answers itself, and caps below what the broker offers.
        self.version_overrides: dict[int, tuple[int, int]] = {}
        self.version_caps: dict[int, int] = {}
        for f in self.chain:
            self.version_overrides.update(f.version_overrides)
            for key, cap in f.version_caps.items():
                self.version_caps[key] = min(cap, self.version_caps.get(key, cap))
        self.tls = server_context(config.extra) if config.listener_tls else None
        # TLS toward the brokers for every upstream connection; SASL only for the proxy's own.
        self.security = ClientSecurity.from_properties(config.extra)
        self.upstream_tls = self.security.ssl_context

    def find(self, kind: type[Filter]) -> Filter | None:
        """The chain's filter of this kind, if configured (for entry points that report on it)."""
        return next((f for f in self.chain if isinstance(f, kind)), None)

    # -- lifecycle -----------------------------------------------------------------------------

    async def run(self, *, task_status: trio.TaskStatus[Proxy] = trio.TASK_STATUS_IGNORED) -> None:
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            codecs_built = trio.Event()
            nursery.start_soon(self._build_first_codecs, codecs_built)
            await self._start_listener(None, self.config.listen_port)
            try:
                await self.refresh_metadata()
            except UpstreamError as e:
                log.warning("no upstream broker answered at start (%s); will keep trying", e)
            await self.ensure_listeners()
            nursery.start_soon(self._metadata_refresher)
            nursery.start_soon(self._stop_on_exit)
            for service in self.services:
                service.start()
            for f in self.chain:
                f.start(self)
            await codecs_built.wait()
            self._ready.set()
            log.info(
                "proxy listening on %s:%d for upstream %s",
                self.config.listen_host,
                self.listen_ports[None],
                ",".join(f"{h}:{p}" for h, p in self.config.bootstrap_servers),
            )
            task_status.started(self)

    async def _build_first_codecs(self, done: trio.Event) -> None:
        """Builds, while the proxy starts, the codecs of the requests clients send first (the
        newest versions of each, which clients take) and of the proxy's own broker calls. Codecs
        are generated code: built during a first client's first Fetch they were a quarter of its
        time to the first record from the remote tier (issue 26)."""
        versions = [*PREFERRED_VERSIONS.items(), *_LIBRDKAFKA_VERSIONS.items(),
                    *((key, v) for key in _FIRST_REQUESTS for v in _newest_versions(all_apis()[key].request.valid))]
        started = time.perf_counter()
        built = await trio.to_thread.run_sync(build_codecs, versions)
        log.debug("built %d codecs in %.0f ms", built, (time.perf_counter() - started) * 1000)
        done.set()

    async def _stop_on_exit(self) -> None:
        try:
            await trio.sleep_forever()
        finally:
            with trio.CancelScope(shield=True):
                for f in reversed(self.chain):
                    f.close()
                for service in reversed(self.services):
                    await trio.to_thread.run_sync(service.stop)

    def stop(self) -> None:
        if self._nursery is not None:
            self._nursery.cancel_scope.cancel()

    @property
    def bootstrap_address(self) -> str:
        return f"{self.config.advertised}:{self.listen_ports[None]}"

    def on_request_done(self, observer: RequestObserver) -> None:
        self._observers.append(observer)

    def request_done(self, api_key: int, outcome: str, seconds: float) -> None:
        self.metrics.outcomes[(api_key, outcome)] += 1
        for observer in self._observers:
            observer(api_key, outcome, seconds)

    # -- listeners -----------------------------------------------------------------------------

    async def _start_listener(self, node_id: int | None, port: int) -> None:
        assert self._nursery is not None
        try:
            listeners = await (_open_shared_listeners(port, self.config.listen_host) if self.config.workers > 1
                               else trio.open_tcp_listeners(port, host=self.config.listen_host))
        except OSError as e:
            # Name the setting the port came from, so the operator knows what to change.
            what = ("the bootstrap listener (listeners, --listen)" if node_id is None else
                    f"broker node {node_id} (proxy.broker.port.map or proxy.broker.port.base)")
            raise OSError(f"cannot listen on {self.config.listen_host}:{port} for {what}: {e.strerror or e}") from None
        self.listen_ports[node_id] = listeners[0].socket.getsockname()[1]

        async def handle(stream: trio.SocketStream) -> None:
            await self._ready.wait()  # a client that came early (after a restart, all at once)
            client: trio.SocketStream | trio.SSLStream = stream
            if self.tls is not None:
                client = trio.SSLStream(stream, self.tls, server_side=True, https_compatible=True)
            await ClientConnection(self, client, node_id).serve()

        scope = trio.CancelScope()

        async def serve() -> None:
            try:
                with scope:
                    await trio.serve_listeners(handle, listeners)
            finally:
                for listener in listeners:
                    await listener.aclose()

        self._nursery.start_soon(serve)
        if node_id is not None:
            self._listener_scopes[node_id] = scope
            log.info("broker node %d served on port %d", node_id, self.listen_ports[node_id])

    async def ensure_listeners(self) -> None:
        async with self._listener_lock:
            for node_id in list(self.cluster.brokers):
                if node_id not in self.listen_ports:
                    try:
                        await self._start_listener(node_id, self.config.port_for_node(node_id))
                    except OSError as e:
                        if self._ready.is_set():  # at start the operator must know at once
                            log.error("%s; clients cannot reach broker %d through the proxy", e, node_id)
                        else:
                            raise

    async def _close_listeners_of_removed(self, registered: set[int]) -> None:
        """A broker that left the cluster (unregistered, not just stopped: a stopped broker is
        still registered, fenced) loses its port, and the connections on it end."""
        async with self._listener_lock:
            for node_id in [n for n in self._listener_scopes if n not in registered]:
                self._listener_scopes.pop(node_id).cancel()
                port = self.listen_ports.pop(node_id)
                self.cluster.brokers.pop(node_id, None)
                log.info("broker node %d left the cluster: port %d closed", node_id, port)

    def brokers_seen(self) -> list[BrokerSeen]:
        """Every broker the proxy knows, for the status page (called from its HTTP thread: the
        dicts are copied first, as the event loop may change them meanwhile)."""
        brokers, ports, contacts = dict(self.cluster.brokers), dict(self.listen_ports), dict(self.cluster.contacts)
        live = self.cluster.live
        seen = []
        for node_id, broker in sorted(brokers.items()):
            ok, when = contacts.get((broker.host, broker.port), (None, None))
            seen.append(BrokerSeen(node_id, ports.get(node_id), None if live is None else node_id in live, ok, when))
        return seen

    def advertise(self, node_id: int, host: str, port: int, rack: str | None) -> tuple[str, int]:
        """Learn a broker's real address; give the address clients should use instead."""
        self.cluster.learn(node_id, host, port, rack)
        return self.config.advertised, self.config.port_for_node(node_id)

    # -- upstream ------------------------------------------------------------------------------

    async def connect_upstream(self, node_id: int | None, *, own: bool = False) -> tuple[FrameStream, BrokerVersions]:
        """A new connection to a broker (None: any bootstrap server) and what it supports. A
        client's connection is left for the client to authenticate; the proxy's ``own`` logs in
        with the proxy's credentials."""
        timeout = self.config.upstream_connect_timeout_ms / 1000
        if node_id is None:
            candidates = list(self.config.bootstrap_servers)
        else:
            broker = self.cluster.brokers.get(node_id)
            if broker is None:
                await self.refresh_metadata()
                broker = self.cluster.brokers.get(node_id)
            if broker is None:
                raise UpstreamError(f"broker node {node_id} is not in the cluster's metadata")
            candidates = [(broker.host, broker.port)]
        errors = []
        for host, port in candidates:
            try:
                conn = await open_upstream(host, port, timeout, self.config.upstream_response_max_bytes,
                                           self.upstream_tls)
            except UpstreamError as e:
                errors.append(str(e))
                self.cluster.contacted(host, port, False)
                continue
            self.cluster.contacted(host, port, True)
            versions = self.cluster.versions.get((host, port))
            if versions is None:
                try:
                    versions = await probe_api_versions(InternalClient(conn))
                except Exception:
                    await conn.aclose()
                    raise
                self.cluster.versions[(host, port)] = versions
            if own and self.security.sasl is not None:
                try:
                    await authenticate(InternalClient(conn), self.security.sasl, f"{host}:{port}", versions)
                except Exception:
                    await conn.aclose()
                    raise
            return conn, versions
        raise UpstreamError("; ".join(errors))

    def negotiate(self, versions: BrokerVersions) -> dict[int, tuple[int, int]]:
        """The API versions clients may use: what both the proxy and this broker handle."""
        return negotiate_versions(versions.ranges, self.version_caps, self.version_overrides, self.read_apis)

    async def refresh_metadata(self) -> None:
        conn, versions = await self.connect_upstream(None, own=True)
        try:
            allowed = self.negotiate(versions)
            if METADATA not in allowed:
                raise UpstreamError("broker does not support Metadata")
            version = min(allowed[METADATA][1], 12)
            client = InternalClient(conn)
            resp = await client.request(METADATA, version, {"topics": [], "allow_auto_topic_creation": False})
            for b in resp["brokers"]:
                self.cluster.learn(b["node_id"], b["host"], b["port"], b.get("rack"))
            self.cluster.live = frozenset(b["node_id"] for b in resp["brokers"])
            registered = await _registered_brokers(client, versions)
        finally:
            await conn.aclose()
        if registered is not None:
            await self._close_listeners_of_removed(registered)
        await self.ensure_listeners()

    async def _metadata_refresher(self) -> None:
        while True:
            await trio.sleep(self.config.metadata_refresh_ms / 1000)
            try:
                await self.refresh_metadata()
            except (UpstreamError, OSError) as e:
                log.warning("metadata refresh failed: %s", e)


async def _registered_brokers(client: InternalClient, versions: BrokerVersions) -> set[int] | None:
    """Every broker registered with the cluster, fenced ones too (DescribeCluster v2, Kafka 4.0+);
    None where the brokers cannot say (Metadata names only the live ones: a broker restarting
    must keep its port)."""
    offered = versions.ranges.get(DESCRIBE_CLUSTER)
    if offered is None or offered[1] < 2:
        return None
    try:
        resp = await client.request(DESCRIBE_CLUSTER, 2, {"include_cluster_authorized_operations": False,
                                                          "endpoint_type": 1, "include_fenced_brokers": True})
    except UpstreamError as e:
        log.warning("DescribeCluster for the registered brokers failed: %s", e)
        return None
    if resp["error_code"] != 0:
        return None
    return {b["broker_id"] for b in resp["brokers"]}


async def _open_shared_listeners(port: int, host: str) -> list[trio.SocketListener]:
    """Listeners every worker binds alike (SO_REUSEPORT): the kernel spreads new connections over
    the workers. A port taken by a process that did not ask to share it still fails to bind."""
    infos = await trio.socket.getaddrinfo(host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    listeners: list[trio.SocketListener] = []
    try:
        for family, kind, proto, _, address in infos:
            sock = trio.socket.socket(family, kind, proto)
            try:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
                if family == socket.AF_INET6:
                    sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
                await sock.bind(address)
                sock.listen(socket.SOMAXCONN)
            except OSError:
                sock.close()
                raise
            listeners.append(trio.SocketListener(sock))
    except OSError:
        for listener in listeners:
            listener.socket.close()
        raise
    return listeners
