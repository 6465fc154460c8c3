"""One client connection: framing, routing, and responses in request order.

Three tasks share a connection: the request loop reads client frames and either answers them
locally or forwards them upstream; the upstream loop reads broker responses, rewrites the ones
that need it and fills the request's slot; the response loop writes slots to the client strictly
in request order. A slow answer therefore delays later answers on its own connection only.
"""

from __future__ import annotations

import collections
import logging
import struct
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import trio

from protocol.apis import API_VERSIONS, PRODUCE, Api, all_apis
from protocol.errors import ErrorCode, ProtocolError
from protocol.headers import (
    RequestHeader,
    decode_request_header,
    decode_response_header,
    encode_response_header,
    peek_request,
)
from protocol.schema import read_uvarint
from proxy.addressing import REWRITERS
from proxy.framing import FrameError, FrameStream
from proxy.upstream import BrokerVersions, UpstreamError

if TYPE_CHECKING:
    from proxy.server import Proxy

log = logging.getLogger(__name__)

_I16 = struct.Struct(">h")


class Slot:
    """The place of one request's response in the connection's response order."""

    __slots__ = ("done", "payload", "api_key", "version", "started", "outcome")

    def __init__(self, api_key: int, version: int) -> None:
        self.done = trio.Event()
        self.payload: bytes | bytearray | None = None  # None: nothing goes back to the client
        self.api_key = api_key
        self.version = version
        self.started = time.perf_counter()
        # forwarded (as is), rewritten (the proxy changed request or answer), local (answered by
        # the proxy), unsupported (UNSUPPORTED_VERSION), no_response (acks=0)
        self.outcome = "forwarded"

    def resolve(self, payload: bytes | bytearray | None) -> None:
        self.payload = payload
        self.done.set()


ResponseHook = Callable[[memoryview, int], Awaitable[bytes | bytearray | memoryview]]


@dataclass
class Request:
    """A client request, decoded once (and so checked against its schema) for the request hooks
    and validation alike. ``message`` is the hook's to change; ``frame`` is what arrived."""

    frame: memoryview
    header: RequestHeader
    body_at: int
    message: dict[str, Any]


@dataclass
class Forward:
    """A request hook's decision: send ``frame`` upstream and rewrite the answer with ``hook``."""

    frame: bytes | memoryview
    hook: ResponseHook


@dataclass
class Pending:
    correlation_id: int
    slot: Slot | None  # None: acks=0 produce, whose broker response (if any) is dropped
    hook: ResponseHook | None


def produce_acks(body: memoryview, flexible: bool) -> int:
    """The acks field of a Produce request (v3+), read without decoding the records."""
    pos = 0
    if flexible:
        n, pos = read_uvarint(body, pos)
        pos += max(n - 1, 0)
    else:
        if len(body) < 2:
            raise ProtocolError("truncated Produce request")
        (n,) = _I16.unpack_from(body, 0)
        pos = 2 + max(n, 0)
    if len(body) < pos + 2:
        raise ProtocolError("truncated Produce request")
    return _I16.unpack_from(body, pos)[0]


class ClientConnection:
    def __init__(self, proxy: Proxy, stream: trio.SocketStream | trio.SSLStream, node_id: int | None) -> None:
        self.proxy = proxy
        self.client = FrameStream(stream, proxy.config.socket_request_max_bytes)
        self.node_id = node_id  # None: the bootstrap listener
        raw = stream if isinstance(stream, trio.SocketStream) else stream.transport_stream
        try:
            host, port = raw.socket.getpeername()[:2]  # type: ignore[attr-defined]
            self.peer = f"{host}:{port}"
        except OSError:
            self.peer = "?"
        self.upstream: FrameStream | None = None
        self.versions: BrokerVersions | None = None
        self.allowed: dict[int, tuple[int, int]] = {}
        self._pending: collections.deque[Pending] = collections.deque()
        send, receive = trio.open_memory_channel[Slot](proxy.config.max_in_flight_requests)
        self._slots_in = send
        self._slots_out = receive
        self._nursery: trio.Nursery | None = None
        self._drained = trio.Event()

    async def serve(self) -> None:
        metrics = self.proxy.metrics
        metrics.connections_open += 1
        metrics.connections_total += 1
        try:
            async with trio.open_nursery() as nursery:
                self._nursery = nursery
                nursery.start_soon(self._response_loop)
                await self._request_loop()
                nursery.cancel_scope.cancel()
        except BaseExceptionGroup as group:
            self._report(group)
        except Exception as e:  # noqa: BLE001 - one connection's failure must never reach the listener
            self._report(e)
        finally:
            metrics.connections_open -= 1
            await self.client.aclose()
            if self.upstream is not None:
                await self.upstream.aclose()

    def _report(self, error: BaseException) -> None:
        """One log line for why this connection closed; other connections are not affected."""
        leaves = _leaf_exceptions(error)
        metrics = self.proxy.metrics
        for e in leaves:
            if isinstance(e, (FrameError, ProtocolError)):
                metrics.protocol_errors += 1
                log.warning("closing client %s: malformed request: %s", self.peer, e)
                return
            if isinstance(e, UpstreamError):
                metrics.upstream_errors += 1
                log.warning("closing client %s: upstream: %s", self.peer, e)
                return
        for e in leaves:
            if not isinstance(e, (trio.BrokenResourceError, trio.ClosedResourceError, ConnectionError,
                                  trio.Cancelled)):
                log.error("closing client %s: internal error", self.peer, exc_info=e)
                return
        if any(isinstance(e, trio.Cancelled) for e in leaves):
            raise error

    # -- client side ---------------------------------------------------------------------------

    async def _request_loop(self) -> None:
        while True:
            frame = await self.client.read_frame()
            if frame is None:
                # Let answers already on their way reach the client before closing.
                await self._slots_in.aclose()
                with trio.move_on_after(30):
                    await self._drained.wait()
                return
            self.proxy.metrics.bytes_in += len(frame) + 4
            await self._handle(frame)

    async def _response_loop(self) -> None:
        metrics = self.proxy.metrics
        prometheus = self.proxy.prometheus
        async for slot in self._slots_out:
            await slot.done.wait()
            if slot.payload is not None:
                await self.client.write_frame(slot.payload)
                metrics.bytes_out += len(slot.payload) + 4
            metrics.outcomes[(slot.api_key, slot.outcome)] += 1
            if prometheus is not None:
                prometheus.observe(slot.api_key, time.perf_counter() - slot.started)
        self._drained.set()

    async def _handle(self, frame: bytes | bytearray) -> None:
        view = memoryview(frame)
        api_key, version, corr = peek_request(view)
        self.proxy.metrics.count_request(api_key)
        slot = Slot(api_key, version)
        await self._slots_in.send(slot)
        spec = all_apis().get(api_key)
        if spec is None:
            raise ProtocolError(f"unknown API key {api_key} (correlation id {corr})")
        if api_key == API_VERSIONS:
            await self._ensure_upstream()
            slot.outcome = "local"
            slot.resolve(self._answer_api_versions(spec, version, corr))
            return
        await self._ensure_upstream()
        low_high = self.allowed.get(api_key)
        if low_high is None or not low_high[0] <= version <= low_high[1]:
            slot.outcome = "unsupported"
            slot.resolve(self._unsupported_version(spec, version, corr, low_high))
            return
        header, body_at = decode_request_header(view, spec.request_header_version(version))
        hook = self.proxy.request_hook(api_key)
        if hook is not None or self.proxy.config.validate_requests:
            # Every request must parse against Kafka's schema before a broker sees it: some
            # brokers (noida-db) crash on a truncated array. Raises ProtocolError: this
            # connection closes with one log line. Record sets stay undecoded (zero-copy).
            request = Request(view, header, body_at, spec.request_codec(version).decode(view[body_at:]))
        if hook is not None:
            answer = await hook(self, spec, version, corr, request)
            if isinstance(answer, Forward):
                slot.outcome = "rewritten"
                self._pending.append(Pending(corr, slot, answer.hook))
                await self.upstream.write_frame(answer.frame)  # type: ignore[union-attr]
                return
            if answer is not None:
                slot.outcome = "local"
                slot.resolve(answer)
                return
        if api_key == PRODUCE:
            if produce_acks(view[body_at:], spec.request.is_flexible(version)) == 0:
                slot.outcome = "no_response"
                slot.resolve(None)
                self._pending.append(Pending(corr, None, None))
                await self.upstream.write_frame(view)  # type: ignore[union-attr]
                return
        self._pending.append(Pending(corr, slot, self._response_rewriter(spec, version)))
        await self.upstream.write_frame(view)  # type: ignore[union-attr]

    def _response_rewriter(self, spec: Api, version: int) -> ResponseHook | None:
        entry = REWRITERS.get(spec.key)
        if entry is None or version < entry[0]:
            return None
        rewrite = entry[1]
        codec = spec.response_codec(version)
        header_version = spec.response_header_version(version)

        async def hook(frame: memoryview, _corr: int) -> bytes | memoryview:
            _, pos = decode_response_header(frame, header_version)
            msg = codec.decode(frame[pos:])
            if not rewrite(msg, version, self.proxy.advertise):
                return frame
            await self.proxy.ensure_listeners()
            return bytes(frame[:pos]) + codec.encode(msg)

        return hook

    def _answer_api_versions(self, spec: Api, version: int, corr: int) -> bytes:
        assert self.versions is not None
        known = version in spec.response.valid
        out_version = version if known else 0
        broker = self.versions.response
        body: dict[str, Any] = {
            "error_code": ErrorCode.NONE if known else ErrorCode.UNSUPPORTED_VERSION,
            "api_keys": [
                {"api_key": k, "min_version": lo, "max_version": hi} for k, (lo, hi) in sorted(self.allowed.items())
            ],
            "throttle_time_ms": 0,
        }
        for key in ("supported_features", "finalized_features_epoch", "finalized_features", "zk_migration_ready"):
            if key in broker:
                body[key] = broker[key]
        header = encode_response_header(corr, spec.response_header_version(out_version))
        return header + spec.response_codec(out_version).encode(body)

    def _unsupported_version(self, spec: Api, version: int, corr: int, allowed: tuple[int, int] | None) -> bytes:
        log.warning(
            "client %s sent %s v%d, which the proxy and broker %s do not both support (%s); answering UNSUPPORTED_VERSION",
            self.peer, spec.name, version, self._target(), f"v{allowed[0]}-{allowed[1]}" if allowed else "not at all",
        )
        if version not in spec.response.valid:
            raise ProtocolError(f"{spec.name} v{version} is beyond every version the proxy can answer")
        codec = spec.response_codec(version)
        body = codec.default()
        if "error_code" in body:
            body["error_code"] = ErrorCode.UNSUPPORTED_VERSION
        return encode_response_header(corr, spec.response_header_version(version)) + codec.encode(body)

    # -- upstream side -------------------------------------------------------------------------

    def _target(self) -> str:
        return "bootstrap" if self.node_id is None else f"node {self.node_id}"

    async def _ensure_upstream(self) -> None:
        if self.upstream is not None:
            return
        conn, versions = await self.proxy.connect_upstream(self.node_id)
        self.upstream = conn
        self.versions = versions
        self.allowed = self.proxy.negotiate(versions)
        assert self._nursery is not None
        self._nursery.start_soon(self._upstream_loop)

    async def _upstream_loop(self) -> None:
        assert self.upstream is not None
        pending = self._pending
        while True:
            frame = await self.upstream.read_frame()
            if frame is None:
                if pending and any(p.slot is not None for p in pending):
                    raise UpstreamError(f"broker {self._target()} closed the connection with requests in flight")
                raise UpstreamError(f"broker {self._target()} closed the connection")
            view = memoryview(frame)
            if len(view) < 4:
                raise UpstreamError("broker sent a response shorter than its header")
            (corr,) = struct.unpack_from(">i", view, 0)
            while pending and pending[0].correlation_id != corr:
                skipped = pending.popleft()
                if skipped.slot is not None:
                    raise UpstreamError(
                        f"broker answered correlation id {corr} before {skipped.correlation_id}"
                    )
            if not pending:
                raise UpstreamError(f"broker sent a response with unknown correlation id {corr}")
            entry = pending.popleft()
            if entry.slot is None:
                continue  # acks=0: the client expects nothing
            if entry.hook is not None:
                entry.slot.resolve(await entry.hook(view, corr))
            else:
                entry.slot.resolve(frame)


def _leaf_exceptions(error: BaseException) -> list[BaseException]:
    if isinstance(error, BaseExceptionGroup):
        return [leaf for sub in error.exceptions for leaf in _leaf_exceptions(sub)]
    return [error]
