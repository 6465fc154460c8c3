"""Kafka's variable-length integers.

* Zigzag varint / varlong (signed int32 / int64, at most 5 / 10 bytes): the lengths, deltas and
  counts inside a v2 record batch (:mod:`protocol.records`).
* Unsigned varint (LEB128, at most 5 bytes): compact lengths and tagged fields of the flexible
  message versions (:mod:`protocol.codegen`, :mod:`protocol.headers`).

Decoders take a buffer and a position and return (value, position after it), raising
ProtocolError on truncated or over-long input; encoders return the bytes.
"""

from __future__ import annotations

from protocol.buffers import Buffer
from protocol.errors import ProtocolError

_INT32_MIN, _INT32_MAX = -(1 << 31), (1 << 31) - 1
_INT64_MIN, _INT64_MAX = -(1 << 63), (1 << 63) - 1


# -- zigzag varints (record batches) ---------------------------------------------------------


def _read_zigzag(buf: Buffer, pos: int, max_bytes: int, bits: int, what: str) -> tuple[int, int]:
    end = len(buf)
    if pos >= end:
        raise ProtocolError(f"truncated {what}", pos)
    b = buf[pos]
    if b < 0x80:  # most varints in a batch are one byte
        return (b >> 1) ^ -(b & 1), pos + 1
    start = pos
    result = 0
    shift = 0
    while True:
        if pos >= end:
            raise ProtocolError(f"truncated {what}", start)
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            break
        shift += 7
        if shift >= 7 * max_bytes:
            raise ProtocolError(f"{what} longer than {max_bytes} bytes", start)
    if result >> bits:
        # The last allowed byte has spare bits; a value using them fits no Java int/long.
        raise ProtocolError(f"{what} does not fit {bits} bits", start)
    return (result >> 1) ^ -(result & 1), pos


def decode_varint(buf: Buffer, pos: int = 0) -> tuple[int, int]:
    """Kafka's zigzag varint (int32, at most 5 bytes) at ``pos``: (value, position after it)."""
    return _read_zigzag(buf, pos, 5, 32, "varint")


def decode_varlong(buf: Buffer, pos: int = 0) -> tuple[int, int]:
    """Kafka's zigzag varlong (int64, at most 10 bytes) at ``pos``: (value, position after it)."""
    return _read_zigzag(buf, pos, 10, 64, "varlong")


_SMALL_VARINTS = [bytes([i]) for i in range(0x80)]


def _unsigned_varint(n: int) -> bytes:
    if n < 0x80:
        return _SMALL_VARINTS[n]
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def encode_varint(value: int) -> bytes:
    """Kafka's zigzag varint of an int32; ValueError outside that range."""
    if not _INT32_MIN <= value <= _INT32_MAX:
        raise ValueError(f"{value} does not fit a varint (int32)")
    return _unsigned_varint((value << 1) ^ (value >> 31))


def encode_varlong(value: int) -> bytes:
    """Kafka's zigzag varlong of an int64; ValueError outside that range."""
    if not _INT64_MIN <= value <= _INT64_MAX:
        raise ValueError(f"{value} does not fit a varlong (int64)")
    return _unsigned_varint((value << 1) ^ (value >> 63))


# -- unsigned varints (flexible message versions) --------------------------------------------


def read_uvarint(buf: memoryview | bytes, pos: int) -> tuple[int, int]:
    """Unsigned LEB128 varint as Kafka uses for compact lengths and tags (at most 5 bytes)."""
    result = 0
    shift = 0
    end = len(buf)
    while True:
        if pos >= end:
            raise ProtocolError(f"truncated unsigned varint at byte {pos}")
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result, pos
        shift += 7
        if shift >= 35:
            raise ProtocolError(f"unsigned varint longer than 5 bytes at byte {pos}")


def uvarint_bytes(value: int) -> bytes:
    if value < 0x80:
        return _SMALL_UVARINTS[value]
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


_SMALL_UVARINTS = [bytes([i]) for i in range(0x80)]
