"""Connections from the proxy to upstream brokers, and what the proxy learns from them."""

from __future__ import annotations

import itertools
import logging
import ssl
import time
from dataclasses import dataclass, field
from typing import Any

import trio

from protocol.apis import API_VERSIONS, METADATA, api
from protocol.errors import ErrorCode, ProtocolError
from protocol.headers import RequestHeader, decode_response_header, encode_request_header
from proxy.framing import FrameStream
from tiering.client_security import SaslAuthenticationError, SaslCredentials, sasl_exchange

log = logging.getLogger(__name__)

PROXY_CLIENT_ID = "tiered-proxy"
# ApiVersions v3 carries the broker's features; older brokers answer it with v0 and an error.
_PROBE_API_VERSIONS = 3


class UpstreamError(Exception):
    """An upstream broker could not be reached or answered something unusable."""


@dataclass
class BrokerVersions:
    """What one upstream broker said in ApiVersions."""

    ranges: dict[int, tuple[int, int]]
    response: dict[str, Any]  # decoded at ``version``, kept for features and tagged fields
    version: int


async def open_upstream(host: str, port: int, timeout_s: float, max_frame_bytes: int,
                        ssl_context: ssl.SSLContext | None = None) -> FrameStream:
    stream: trio.SocketStream | trio.SSLStream | None = None
    with trio.move_on_after(timeout_s) as scope:
        try:
            stream = await trio.open_tcp_stream(host, port)
            if ssl_context is not None:
                stream = trio.SSLStream(stream, ssl_context, server_hostname=host, https_compatible=True)
                await stream.do_handshake()
        except (OSError, trio.BrokenResourceError) as e:
            if stream is not None:
                await stream.aclose()
            cause = e.__cause__ if isinstance(e, trio.BrokenResourceError) and e.__cause__ else e
            raise UpstreamError(f"cannot connect to broker {host}:{port}: {getattr(cause, 'strerror', None) or cause}") from None
    if scope.cancelled_caught:
        if stream is not None:
            await stream.aclose()
        raise UpstreamError(f"connecting to broker {host}:{port} timed out after {timeout_s:.1f}s")
    assert stream is not None
    return FrameStream(stream, max_frame_bytes)


class InternalClient:
    """The proxy's own request/response exchange on one upstream connection (one at a time)."""

    _correlation = itertools.count(1 << 30)

    def __init__(self, conn: FrameStream) -> None:
        self.conn = conn

    async def request(self, api_key: int, version: int, body: dict[str, Any]) -> dict[str, Any]:
        spec = api(api_key)
        corr = next(self._correlation) & 0x7FFFFFFF
        header = encode_request_header(
            RequestHeader(api_key, version, corr, PROXY_CLIENT_ID), spec.request_header_version(version)
        )
        await self.conn.write_frame(header + spec.request_codec(version).encode(body))
        frame = await self.conn.read_frame()
        if frame is None:
            raise UpstreamError(f"broker closed the connection instead of answering {spec.name} v{version}")
        view = memoryview(frame)
        got, pos = decode_response_header(view, spec.response_header_version(version))
        if got != corr:
            raise UpstreamError(f"broker answered correlation id {got}, expected {corr}")
        return spec.response_codec(version).decode(view[pos:])


async def probe_api_versions(client: InternalClient) -> BrokerVersions:
    version = _PROBE_API_VERSIONS
    for _ in range(2):
        try:
            resp = await client.request(API_VERSIONS, version, {"client_software_name": PROXY_CLIENT_ID,
                                                                 "client_software_version": "0.1.0"})
        except ProtocolError:
            resp = None
        if resp is not None and resp["error_code"] == ErrorCode.NONE:
            ranges = {k["api_key"]: (k["min_version"], k["max_version"]) for k in resp["api_keys"]}
            return BrokerVersions(ranges, resp, version)
        if resp is not None and resp["error_code"] == ErrorCode.UNSUPPORTED_VERSION:
            for k in resp["api_keys"]:
                if k["api_key"] == API_VERSIONS:
                    version = min(version, k["max_version"])
            continue
        version = 0
    raise UpstreamError("broker did not answer ApiVersions")


async def authenticate(client: InternalClient, credentials: SaslCredentials, broker: str,
                       versions: BrokerVersions) -> None:
    """The proxy's own SASL login on one of its own upstream connections (never a client's)."""
    steps = sasl_exchange(credentials, broker, versions.ranges)
    answer: dict[str, Any] | None = None
    try:
        while True:
            api_key, version, body = steps.send(answer)  # type: ignore[arg-type]
            answer = await client.request(api_key, version, body)
    except StopIteration:
        return  # the proxy's own connections are short-lived: no re-authentication needed
    except SaslAuthenticationError as e:
        raise UpstreamError(str(e)) from None


@dataclass
class UpstreamBroker:
    node_id: int
    host: str
    port: int
    rack: str | None = None


@dataclass
class ClusterView:
    """The brokers the proxy knows about, from the Metadata it has fetched or relayed."""

    brokers: dict[int, UpstreamBroker] = field(default_factory=dict)
    versions: dict[tuple[str, int], BrokerVersions] = field(default_factory=dict)
    # (host, port) -> (whether the proxy's last connection attempt succeeded, its wall-clock time)
    contacts: dict[tuple[str, int], tuple[bool, float]] = field(default_factory=dict)
    live: frozenset[int] | None = None  # node ids in the last Metadata; None: none fetched yet

    def contacted(self, host: str, port: int, ok: bool) -> None:
        """Record the outcome of a connection attempt to a broker (the status page shows it)."""
        self.contacts[(host, port)] = (ok, time.time())

    def learn(self, node_id: int, host: str, port: int, rack: str | None = None) -> bool:
        """Record a broker; True when it is new or moved."""
        old = self.brokers.get(node_id)
        if old is not None and (old.host, old.port) == (host, port):
            return False
        self.brokers[node_id] = UpstreamBroker(node_id, host, port, rack)
        return True


async def fetch_metadata(client: InternalClient, version: int = 9) -> dict[str, Any]:
    """Cluster metadata with no topics (brokers, controller, cluster id)."""
    return await client.request(METADATA, version, {"topics": [], "allow_auto_topic_creation": False})
