"""One client connection: framing, routing, and responses in request order.

Three tasks share a connection: the request loop reads client frames and either answers them
locally or forwards them upstream; the upstream loop reads broker responses, rewrites the ones
that need it and fills the request's slot; the response loop writes slots to the client strictly
in request order. A slow answer therefore delays later answers on its own connection only.

A large answer that no filter needs to see (``_RELAY_MIN_BYTES`` or more) is relayed instead:
when its turn comes, the response loop streams it from the broker's socket to the client's as it
arrives (between plain sockets through a kernel pipe, proxy/framing.py), and the upstream loop reads
on once it has gone through. So the client's first byte does not wait for the broker's last, and the
answer is never held whole.
"""

from __future__ import annotations

import collections
import logging
import struct
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

import trio

from protocol.apis import API_VERSIONS, PRODUCE, Api, all_apis
from protocol.errors import ErrorCode, ProtocolError
from protocol.headers import decode_request_header, encode_response_header, peek_request
from protocol.varint import read_uvarint
from proxy.byte_budget import ByteBudget
from proxy.chain import Answer, CoreMetrics, Filter, Message, RequestContext
from proxy.config import ProxyConfig
from proxy.framing import FrameError, FrameStream
from proxy.response_order import Relay, ResponseOrder, Slot
from proxy.upstream import BrokerVersions, UpstreamError

log = logging.getLogger(__name__)

_I16 = struct.Struct(">h")
# Answers at least this large that no filter needs are relayed as they arrive (module docstring):
# holding a multi-MiB Fetch answer whole before sending it added its transfer time to every
# Fetch (tests/bench/backfill.py, raw pass-through reads). Smaller ones cost little to hold.
_RELAY_MIN_BYTES = 512 * 1024
_RELAY_CHUNK = 256 * 1024


class Server(Protocol):
    """What a connection needs of the server that accepted it."""

    config: ProxyConfig
    metrics: CoreMetrics
    filters_for: Mapping[int, tuple[Filter, ...]]  # API key -> its filters, in chain order
    response_budget: ByteBudget  # broker answers held for clients, all connections together

    async def connect_upstream(self, node_id: int | None) -> tuple[FrameStream, BrokerVersions]: ...

    def negotiate(self, versions: BrokerVersions) -> dict[int, tuple[int, int]]: ...

    def request_done(self, api_key: int, outcome: str, seconds: float) -> None: ...


@dataclass
class Pending:
    correlation_id: int
    slot: Slot | None  # None: acks=0 produce, whose broker response (if any) is dropped
    ctx: RequestContext | None  # with response hooks: the filters that asked to see the answer


def produce_acks(body: memoryview, version: int, flexible: bool) -> int:
    """The acks field of a Produce request, read without decoding the records (v3+ have a
    transactional id before it)."""
    pos = 0
    if version >= 3 and flexible:
        n, pos = read_uvarint(body, pos)
        pos += max(n - 1, 0)
    elif version >= 3:
        if len(body) < 2:
            raise ProtocolError("truncated Produce request")
        (n,) = _I16.unpack_from(body, 0)
        pos = 2 + max(n, 0)
    if len(body) < pos + 2:
        raise ProtocolError("truncated Produce request")
    return _I16.unpack_from(body, pos)[0]


class ClientConnection:
    def __init__(self, proxy: Server, stream: trio.SocketStream | trio.SSLStream, node_id: int | None) -> None:
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
        self._order = ResponseOrder(proxy.config.max_in_flight_requests)
        self._nursery: trio.Nursery | None = None
        self._drained = trio.Event()
        self._unsent: set[Slot] = set()  # slots not yet written: what they hold goes back at close

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
            for slot in self._unsent:
                slot.release()
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
                self._order.close()
                with trio.move_on_after(30):
                    await self._drained.wait()
                return
            self.proxy.metrics.bytes_in += len(frame) + 4
            await self._handle(frame)

    async def _response_loop(self) -> None:
        metrics = self.proxy.metrics
        while (slot := await self._order.next()) is not None:
            if isinstance(slot.payload, Relay):
                await self._relay(slot.payload)
                metrics.bytes_out += slot.payload.size + 4
            elif slot.payload is not None:
                await self.client.write_frame(slot.payload)
                metrics.bytes_out += _size(slot.payload) + 4
            slot.release()
            self._unsent.discard(slot)
            self.proxy.request_done(slot.api_key, slot.outcome, time.perf_counter() - slot.started)
        self._drained.set()

    async def _relay(self, relay: Relay) -> None:
        try:
            await relay.source.relay_frame(self.client, relay.size, _RELAY_CHUNK)
        except FrameError as e:
            raise UpstreamError(f"broker {self._target()}: {e}") from e
        finally:
            relay.done.set()

    async def _handle(self, frame: bytes | bytearray) -> None:
        view = memoryview(frame)
        api_key, version, corr = peek_request(view)
        while (slot := self._order.add(api_key, version)) is None:
            await self._order.room()  # max.in.flight requests unanswered: read no more until one is
        self._unsent.add(slot)
        spec = all_apis().get(api_key)
        await self._ensure_upstream()
        low_high = self.allowed.get(api_key)
        if spec is None:
            if low_high is None:  # as Kafka does: a key nobody knows closes the connection
                raise ProtocolError(f"unknown API key {api_key} (correlation id {corr})")
            # A key the broker offers and the proxy does not know: the broker's to judge.
            self._pending.append(Pending(corr, slot, None))
            await self.upstream.write_frame(view)  # type: ignore[union-attr]
            return
        if log.isEnabledFor(logging.DEBUG):  # which versions clients speak: tests/api_matrix.py
            log.debug("client %s sent %s v%d", self.peer, spec.name, version)
        if api_key == API_VERSIONS:
            slot.outcome = "local"
            slot.resolve(self._answer_api_versions(spec, version, corr))
            return
        if low_high is None or not low_high[0] <= version <= low_high[1]:
            slot.outcome = "unsupported"
            slot.resolve(self._unsupported_version(spec, version, corr, low_high))
            return
        # A version without a schema is one only relaying filters see (negotiate_versions): relayed.
        filters = self.proxy.filters_for.get(api_key, ()) if spec.has_schema(version) else ()
        out: bytes | bytearray | memoryview = view  # what goes upstream
        hooked: RequestContext | None = None  # when filters asked to see the answer
        body_at = -1
        if filters:
            header, body_at = decode_request_header(view, spec.request_header_version(version))
            codec = spec.request_codec(version)
            assert self.versions is not None
            ctx = RequestContext(spec, version, corr, header,
                                 Message(view, body_at, codec.read_request, codec.encode_parts),
                                 self.node_id, self.peer, self.versions.ranges, held=slot.held,
                                 start_soon=self._nursery.start_soon if self._nursery is not None else None)
            for f in filters:
                answer = await f.on_request(ctx)
                if isinstance(answer, Answer):
                    slot.outcome = "local"
                    slot.resolve(answer.frame)
                    return
            if ctx.request.is_changed or ctx.response_hooks or ctx.translated:
                slot.outcome = "rewritten"
            out = ctx.upstream_frame()
            hooked = ctx if ctx.response_hooks or ctx.translated else None
        if api_key == PRODUCE:
            if body_at < 0:
                body_at = decode_request_header(view, spec.request_header_version(version))[1]
            if produce_acks(view[body_at:], version, spec.request.is_flexible(version)) == 0:
                slot.outcome = "no_response"
                slot.resolve(None)
                self._pending.append(Pending(corr, None, None))
                await self.upstream.write_frame(out)  # type: ignore[union-attr]
                return
        self._pending.append(Pending(corr, slot, hooked))
        await self.upstream.write_frame(out)  # type: ignore[union-attr]

    @staticmethod
    async def _respond_through(ctx: RequestContext, frame: memoryview) -> bytes | memoryview | list[Any]:
        """The broker's answer through the hooks of the filters that asked, last filter first."""
        response = ctx.response_message(frame)
        for hook in reversed(ctx.response_hooks):
            await hook(ctx, response)
        # Pieces: remote record bytes go to the socket by reference (proxy/framing.py).
        return response.to_pieces() if response.is_changed else frame

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
        budget = self.proxy.response_budget
        while True:
            # Room for the answer first: while there is none it stays in the broker's socket. A
            # connection holding no answer always gets one, so a client that stops reading can
            # hold up its own answers but never another client's.
            head = await self.upstream.frame_head()
            size = head[0] if head is not None else 0
            relayed = self._relayable(head)
            if relayed is not None:
                # Only the relay's buffer is held; the rest of the answer waits in the socket.
                chunk = min(size, _RELAY_CHUNK)
                holding = await budget.acquire(chunk) if self._holds_answers() else budget.take(chunk)
                relay = Relay(self.upstream, size)
                relayed.held.append(holding)
                relayed.outcome = "relayed"
                relayed.resolve(relay)
                await relay.done.wait()
                continue
            holding = await budget.acquire(size) if self._holds_answers() else budget.take(size)
            try:
                frame, entry = await self._next_answer()
            except BaseException:
                holding.release()
                raise
            if entry.slot is None:
                holding.release()
                continue  # acks=0: the client expects nothing
            entry.slot.held.append(holding)
            if entry.ctx is not None:
                entry.slot.resolve(await self._respond_through(entry.ctx, memoryview(frame)))
            else:
                entry.slot.resolve(frame)

    def _relayable(self, head: tuple[int, int] | None) -> Slot | None:
        """The slot of the broker's next answer (its size and correlation id) if it is to be
        relayed (large, and no filter asked to see it), its entry taken off the pending queue;
        else None, the queue untouched."""
        if head is None or head[0] < _RELAY_MIN_BYTES:
            return None  # small, or closed: _next_answer says so
        corr = head[1]
        pending = self._pending
        at = 0  # acks=0 produces the broker may never answer come first, as in _next_answer
        while at < len(pending) and pending[at].correlation_id != corr and pending[at].slot is None:
            at += 1
        if at == len(pending) or pending[at].correlation_id != corr:
            return None  # out of order or unknown: _next_answer says so
        entry = pending[at]
        if entry.slot is None or entry.ctx is not None:
            return None
        for _ in range(at + 1):
            pending.popleft()
        return entry.slot

    def _holds_answers(self) -> bool:
        return any(slot.held for slot in self._unsent)

    async def _next_answer(self) -> tuple[bytes | bytearray, Pending]:
        """The broker's next answer and the request it answers."""
        assert self.upstream is not None
        pending = self._pending
        frame = await self.upstream.read_frame()
        if frame is None:
            if pending and any(p.slot is not None for p in pending):
                raise UpstreamError(f"broker {self._target()} closed the connection with requests in flight")
            raise UpstreamError(f"broker {self._target()} closed the connection")
        if len(frame) < 4:
            raise UpstreamError("broker sent a response shorter than its header")
        (corr,) = struct.unpack_from(">i", frame, 0)
        while pending and pending[0].correlation_id != corr:
            skipped = pending.popleft()
            if skipped.slot is not None:
                raise UpstreamError(
                    f"broker answered correlation id {corr} before {skipped.correlation_id}"
                )
        if not pending:
            raise UpstreamError(f"broker sent a response with unknown correlation id {corr}")
        return frame, pending.popleft()


def _size(payload: bytes | bytearray | memoryview | list[Any]) -> int:
    return sum(len(p) for p in payload) if isinstance(payload, list) else len(payload)


def _leaf_exceptions(error: BaseException) -> list[BaseException]:
    if isinstance(error, BaseExceptionGroup):
        return [leaf for sub in error.exceptions for leaf in _leaf_exceptions(sub)]
    return [error]
