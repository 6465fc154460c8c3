"""The filter chain: the one way a feature takes part in the proxy's traffic.

The idea is Kroxylicious's (a chain of filters between client and broker, each seeing the
requests and responses of the APIs it declares); the code is ours. The core (listeners, framing,
connections, upstream connections, ordering, ApiVersions) knows no feature: it hands each request
to the filters that declare its API, in chain order, and each may

- let it pass, possibly rewritten (change ``ctx.request.body`` and call ``ctx.request.changed()``),
- answer it locally (return an :class:`Answer`; later filters and the broker never see it),
- and/or ask to see the broker's answer (``ctx.on_response(hook)``); hooks run in reverse chain
  order on one decoded response, which the core encodes once at the end if any hook changed it.

Requests and responses are decoded only when a filter reads ``body``, at most once each; APIs no
filter declares travel as opaque frames. Filters import this module and the core's config, never
each other and never the server.
"""

from __future__ import annotations

import collections
import dataclasses
import struct
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from protocol.apis import Api
from protocol.headers import (
    RequestHeader,
    decode_response_header,
    encode_request_header,
    encode_response_header,
)
from proxy.byte_budget import ByteBudget, Holding
from proxy.config import ProxyConfig

_API_VERSION = struct.Struct(">h")


class Message:
    """A request or response on its way through the chain: the frame as it arrived, its body
    decoded on first use, and re-encoded (once) only if a filter changed it."""

    __slots__ = ("frame", "body_at", "_decode", "_encode", "_body", "_changed", "_head")

    def __init__(self, frame: memoryview, body_at: int, decode: Callable[[memoryview], dict[str, Any]],
                 encode: Callable[[dict[str, Any]], list[Any]], head: bytes | None = None) -> None:
        """``encode`` gives the body as pieces (``Codec.encode_parts``), joined once with the
        header. ``head``: a header to send instead of the frame's own (a message translated to
        another version), which also means the body is always re-encoded."""
        self.frame = frame
        self.body_at = body_at
        self._decode = decode
        self._encode = encode
        self._body: dict[str, Any] | None = None
        self._changed = head is not None
        self._head = head

    @property
    def body(self) -> dict[str, Any]:
        if self._body is None:
            self._body = self._decode(self.frame[self.body_at:])
        return self._body

    @property
    def is_decoded(self) -> bool:
        """Whether ``body`` was asked for already (a filter that can avoid decoding looks here)."""
        return self._body is not None

    def changed(self) -> None:
        """Say that ``body`` was modified: the frame is re-encoded before it goes on."""
        self._changed = True

    @property
    def is_changed(self) -> bool:
        return self._changed

    def to_frame(self) -> bytes | memoryview:
        if not self._changed:
            return self.frame
        return b"".join(self.to_pieces())

    def to_pieces(self) -> list[Any]:
        """The re-encoded frame as pieces (header, encoded fields, record bytes by reference), for
        a vectored write; the unchanged frame as its one piece."""
        if not self._changed:
            return [self.frame]
        head = self._head if self._head is not None else self.frame[:self.body_at]
        return [head, *self._encode(self.body)]


ResponseHook = Callable[["RequestContext", Message], Awaitable[None]]


@dataclass
class Answer:
    """A filter's local answer to a request: the whole response frame."""

    frame: bytes


@dataclass
class RequestContext:
    """One client request as the filters see it."""

    api: Api
    version: int
    correlation_id: int
    header: RequestHeader
    request: Message
    node_id: int | None  # the broker node whose port the client used; None: the bootstrap port
    peer: str  # the client's address, for log lines
    broker_versions: dict[int, tuple[int, int]]  # API key -> versions the broker itself offers
    response_hooks: list[ResponseHook] = field(default_factory=list)
    upstream_version: int = -1  # the version the broker is asked at; -1: the client's
    # The version the request header names to the broker, its body and the answer's the same bytes
    # as at the client's version (relabel_as); -1: the client's.
    relabelled: int = -1
    # Bytes held for the answer (ByteBudget holdings); released once the client has it.
    held: list[Holding] = field(default_factory=list)
    # Starts work beside the request that a response hook then awaits (the connection's nursery:
    # it ends with the connection). The work must catch its own errors. None: not offered.
    start_soon: Callable[[Callable[[], Awaitable[None]]], None] | None = None

    def on_response(self, hook: ResponseHook) -> None:
        """See (and possibly change) the broker's answer to this request."""
        self.response_hooks.append(hook)

    def send_as(self, version: int) -> None:
        """Ask the broker at ``version`` instead of the client's (the proxy translates both ways;
        the body's fields must suit both versions)."""
        self.upstream_version = version

    def relabel_as(self, version: int) -> None:
        """Ask the broker at ``version``, whose requests and answers are the same bytes as at the
        client's (``Api.same_bytes``): only the request header's version field changes, and the
        answer goes back as it is, so it can be relayed untouched. The caller vouches that the
        broker means the same by both versions."""
        if not self.api.same_bytes(self.version, version):
            raise ValueError(f"{self.api.name} v{self.version} and v{version} are not the same bytes")
        self.relabelled = version

    @property
    def translated(self) -> bool:
        return self.upstream_version not in (-1, self.version)

    def upstream_frame(self) -> bytes | bytearray | memoryview:
        """The request as it goes to the broker."""
        if not self.translated:
            frame = self.request.to_frame()
            if self.relabelled < 0:
                return frame
            relabelled = bytearray(frame)
            _API_VERSION.pack_into(relabelled, 2, self.relabelled)  # after the int16 api_key
            return relabelled
        version = self.upstream_version
        header = dataclasses.replace(self.header, api_version=version)
        return encode_request_header(header, self.api.request_header_version(version)) + \
            self.api.request_codec(version).encode(self.request.body)

    def response_message(self, frame: memoryview) -> Message:
        """The broker's answer, decoded at the version it was asked at and, if translated,
        re-encoded at the client's."""
        asked = self.upstream_version if self.translated else self.version
        _, body_at = decode_response_header(frame, self.api.response_header_version(asked))
        decode = self.api.response_codec(asked).decode
        encode = self.api.response_codec(self.version).encode_parts
        head = (encode_response_header(self.correlation_id, self.api.response_header_version(self.version))
                if self.translated else None)
        return Message(frame, body_at, decode, encode, head)

    def answer(self, body: dict[str, Any], version: int | None = None) -> Answer:
        """A local answer with this request's correlation id (at ``version``, default the request's)."""
        version = self.version if version is None else version
        return Answer(encode_response_header(self.correlation_id, self.api.response_header_version(version))
                      + self.api.response_codec(version).encode(body))


@dataclass
class CoreMetrics:
    """What the core counts itself (filters keep their own counters)."""

    connections_open: int = 0
    connections_total: int = 0
    protocol_errors: int = 0
    upstream_errors: int = 0
    outcomes: collections.Counter[tuple[int, str]] = field(default_factory=collections.Counter)  # (api, outcome)
    bytes_in: int = 0
    bytes_out: int = 0
    budgets: list[ByteBudget] = field(default_factory=list)  # bytes held, by setting (filters add theirs)


@dataclass(frozen=True)
class BrokerSeen:
    """One broker as the proxy knows it (no real address: clients never learn those)."""

    node_id: int
    port: int | None  # the proxy's listener for it; None: none open (its port could not be bound)
    in_metadata: bool | None  # named by the latest Metadata the proxy asked for; None: none yet
    reachable: bool | None  # the proxy's last connection to it succeeded; None: none tried yet
    since: float | None  # when that connection was tried (time.time())


class Core(Protocol):
    """What filters may ask of the proxy core."""

    config: ProxyConfig
    metrics: CoreMetrics

    @property
    def bootstrap_address(self) -> str: ...

    def advertise(self, node_id: int, host: str, port: int, rack: str | None) -> tuple[str, int]:
        """Learn a broker's real address; the address clients should use for it instead."""
        ...

    async def ensure_listeners(self) -> None:
        """Open a listener for every broker learnt so far."""
        ...

    def on_request_done(self, observer: RequestObserver) -> None:
        """Call ``observer`` for every request once its response is written (or dropped)."""
        ...

    def brokers_seen(self) -> list[BrokerSeen]:
        """The brokers the proxy knows, their ports and state; safe to call from any thread."""
        ...


# (api key, outcome, seconds from arrival to response written). Outcomes: forwarded (as is),
# relayed (forwarded as it arrived), rewritten (a filter changed the request or answer), local
# (answered by the proxy), unsupported (UNSUPPORTED_VERSION), no_response (acks=0).
RequestObserver = Callable[[int, str, float], None]


class Filter:
    """A feature in the chain. Subclasses set ``apis`` (the API keys whose requests they see; the
    empty set: none) and override what they need."""

    name = "filter"
    apis: frozenset[int] = frozenset()
    # API key -> (lowest, highest) version the filter answers whatever the broker supports.
    version_overrides: dict[int, tuple[int, int]] = {}
    # API key -> highest version clients may use (below what the broker offers).
    version_caps: dict[int, int] = {}
    # Whether the filter must decode its APIs' messages: then they are offered only at versions
    # the proxy has a schema for. A filter that only checks what it can read says False.
    decodes = True

    async def on_request(self, ctx: RequestContext) -> Answer | None:
        return None

    def start(self, core: Core) -> None:
        """Called once the core's listeners are up."""

    def close(self) -> None:
        """Called when the proxy stops."""


ALL_APIS: frozenset[int] = frozenset(range(0, 1 << 15))  # every API key there can be
