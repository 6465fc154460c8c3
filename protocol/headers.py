"""Request and response headers (v0-v2) and the 4-byte size framing of Kafka's TCP protocol.

Headers are hand-written rather than schema-driven: every frame passes through them, and the
proxy needs only their first fields to route a request it otherwise forwards as opaque bytes.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

from protocol.errors import ProtocolError
from protocol.varint import read_uvarint, uvarint_bytes

_KEY_VERSION_CORR = struct.Struct(">hhi")
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
SIZE = struct.Struct(">i")


@dataclass
class RequestHeader:
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    tagged: dict[int, bytes] = field(default_factory=dict)


def peek_request(frame: bytes | memoryview) -> tuple[int, int, int]:
    """api_key, api_version and correlation_id of a request frame, without parsing the rest."""
    if len(frame) < 8:
        raise ProtocolError(f"request of {len(frame)} bytes is shorter than a header")
    return _KEY_VERSION_CORR.unpack_from(frame, 0)


def decode_request_header(frame: memoryview, header_version: int) -> tuple[RequestHeader, int]:
    """The header and the offset at which the request body starts."""
    api_key, api_version, corr = peek_request(frame)
    pos = 8
    client_id: str | None = None
    if header_version >= 1:
        if len(frame) < pos + 2:
            raise ProtocolError("truncated client id length")
        (n,) = _I16.unpack_from(frame, pos)
        pos += 2
        if n >= 0:
            if pos + n > len(frame):
                raise ProtocolError(f"client id claims {n} bytes, {len(frame) - pos} left")
            try:
                client_id = str(frame[pos : pos + n], "utf-8")
            except UnicodeDecodeError as e:
                raise ProtocolError(f"client id is not UTF-8: {e}") from None
            pos += n
    tagged: dict[int, bytes] = {}
    if header_version >= 2:
        pos = _read_tags(frame, pos, tagged)
    return RequestHeader(api_key, api_version, corr, client_id, tagged), pos


def encode_request_header(h: RequestHeader, header_version: int) -> bytes:
    parts = [_KEY_VERSION_CORR.pack(h.api_key, h.api_version, h.correlation_id)]
    if header_version >= 1:
        if h.client_id is None:
            parts.append(_I16.pack(-1))
        else:
            raw = h.client_id.encode()
            parts.append(_I16.pack(len(raw)))
            parts.append(raw)
    if header_version >= 2:
        parts.append(_encode_tags(h.tagged))
    return b"".join(parts)


def decode_response_header(frame: memoryview, header_version: int) -> tuple[int, int]:
    """correlation_id and the offset at which the response body starts."""
    if len(frame) < 4:
        raise ProtocolError(f"response of {len(frame)} bytes is shorter than a header")
    (corr,) = _I32.unpack_from(frame, 0)
    pos = 4
    if header_version >= 1:
        pos = _read_tags(frame, pos, {})
    return corr, pos


def encode_response_header(correlation_id: int, header_version: int) -> bytes:
    if header_version >= 1:
        return _I32.pack(correlation_id) + b"\x00"
    return _I32.pack(correlation_id)


def _read_tags(frame: memoryview, pos: int, into: dict[int, bytes]) -> int:
    count, pos = read_uvarint(frame, pos)
    for _ in range(count):
        tag, pos = read_uvarint(frame, pos)
        size, pos = read_uvarint(frame, pos)
        if pos + size > len(frame):
            raise ProtocolError(f"header tag {tag} claims {size} bytes, {len(frame) - pos} left")
        into[tag] = bytes(frame[pos : pos + size])
        pos += size
    return pos


def _encode_tags(tags: dict[int, bytes]) -> bytes:
    parts = [uvarint_bytes(len(tags))]
    for tag in sorted(tags):
        parts += [uvarint_bytes(tag), uvarint_bytes(len(tags[tag])), tags[tag]]
    return b"".join(parts)
