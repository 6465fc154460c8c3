"""``construct`` building blocks for Kafka's flexible message encoding, as the KIP-405 metadata
records (:mod:`protocol.metadata_records`) use them.

Compact (length+1 uvarint) strings, bytes and arrays; tagged-field sections; 16-byte uuids; and
:class:`_AsTuple`, which maps a parsed struct (tagged fields included) to a NamedTuple and back.
Inside these constructs errors are :class:`_WireError` (a ``ConstructError``); the modules that
use them turn those into ProtocolError or ValueError at their boundary.
"""

from __future__ import annotations

import uuid
from typing import Any, NamedTuple

from construct import (
    Adapter,
    Bytes,
    Construct,
    ConstructError,
    Subconstruct,
    stream_read,
    stream_write,
)

_MAX_STRING_LENGTH = 0x7FFF  # Kafka's generated readers refuse longer string fields
_MAX_LENGTH = 2**31 - 1


class _WireError(ConstructError):
    """Raised inside our constructs; turned into ProtocolError at the module boundary."""


# --- primitive constructs for Kafka's flexible encoding ---------------------------------------


class _UVarInt(Construct):
    """Kafka's unsigned varint: base-128, least significant group first, at most 5 bytes."""

    def _parse(self, stream: Any, context: Any, path: str) -> int:
        value = 0
        for i in range(5):
            byte = stream_read(stream, 1, path)[0]
            value |= (byte & 0x7F) << (7 * i)
            if not byte & 0x80:
                if value > 0xFFFFFFFF:
                    raise _WireError(f"unsigned varint {value} exceeds 32 bits", path=path)
                return value
        raise _WireError("unsigned varint longer than 5 bytes", path=path)

    def _build(self, obj: int, stream: Any, context: Any, path: str) -> int:
        if not isinstance(obj, int) or not 0 <= obj <= 0xFFFFFFFF:
            raise _WireError(f"{obj!r} is not an unsigned 32-bit varint", path=path)
        out = bytearray()
        value = obj
        while value >= 0x80:
            out.append((value & 0x7F) | 0x80)
            value >>= 7
        out.append(value)
        stream_write(stream, bytes(out), len(out), path)
        return obj


UVarInt = _UVarInt()


class _CompactBytes(Construct):
    """Compact bytes or string: uvarint length+1 (0 = null), then the bytes."""

    def __init__(self, nullable: bool, text: bool) -> None:
        super().__init__()
        self.nullable = nullable
        self.text = text
        self.max_length = _MAX_STRING_LENGTH if text else _MAX_LENGTH

    def _parse(self, stream: Any, context: Any, path: str) -> bytes | str | None:
        encoded = UVarInt._parse(stream, context, path)
        if encoded == 0:
            if not self.nullable:
                raise _WireError("null in a non-nullable field", path=path)
            return None
        length = encoded - 1
        if length > self.max_length:
            raise _WireError(f"length {length} exceeds {self.max_length}", path=path)
        data = stream_read(stream, length, path)
        if not self.text:
            return data
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError:
            raise _WireError("string is not valid UTF-8", path=path) from None

    def _build(self, obj: bytes | str | None, stream: Any, context: Any, path: str) -> bytes | str | None:
        if obj is None:
            if not self.nullable:
                raise _WireError("null in a non-nullable field", path=path)
            UVarInt._build(0, stream, context, path)
            return obj
        if self.text:
            if not isinstance(obj, str):
                raise _WireError(f"{obj!r} is not a str", path=path)
            try:
                data = obj.encode("utf-8")
            except UnicodeEncodeError:
                raise _WireError("string cannot be encoded as UTF-8", path=path) from None
        else:
            if not isinstance(obj, bytes | bytearray | memoryview):
                raise _WireError(f"{type(obj).__name__} is not bytes", path=path)
            data = bytes(obj)
        if len(data) > self.max_length:
            raise _WireError(f"length {len(data)} exceeds {self.max_length}", path=path)
        UVarInt._build(len(data) + 1, stream, context, path)
        stream_write(stream, data, len(data), path)
        return obj


CompactString = _CompactBytes(nullable=False, text=True)
CompactNullableBytes = _CompactBytes(nullable=True, text=False)


class _CompactArray(Subconstruct):
    """Compact (non-nullable) array: uvarint count+1, then the elements; parsed as a tuple."""

    def _parse(self, stream: Any, context: Any, path: str) -> tuple:
        encoded = UVarInt._parse(stream, context, path)
        if encoded == 0:
            raise _WireError("null array in a non-nullable field", path=path)
        return tuple(self.subcon._parsereport(stream, context, f"{path} -> [{i}]") for i in range(encoded - 1))

    def _build(self, obj: Any, stream: Any, context: Any, path: str) -> Any:
        items = list(obj)
        UVarInt._build(len(items) + 1, stream, context, path)
        for i, item in enumerate(items):
            self.subcon._build(item, stream, context, f"{path} -> [{i}]")
        return obj


class _TaggedFields(Construct):
    """A tagged-field section: uvarint count, then (uvarint tag, uvarint size, data) with tags
    strictly ascending. Parsed as ``{tag: raw bytes}``; typed values are the adapters' job."""

    def _parse(self, stream: Any, context: Any, path: str) -> dict[int, bytes]:
        count = UVarInt._parse(stream, context, path)
        fields: dict[int, bytes] = {}
        previous = -1
        for _ in range(count):
            tag = UVarInt._parse(stream, context, path)
            if tag <= previous:
                raise _WireError(f"tagged field {tag} out of order after {previous}", path=path)
            size = UVarInt._parse(stream, context, path)
            fields[tag] = stream_read(stream, size, path)
            previous = tag
        return fields

    def _build(self, obj: dict[int, bytes], stream: Any, context: Any, path: str) -> dict[int, bytes]:
        UVarInt._build(len(obj), stream, context, path)
        for tag in sorted(obj):
            UVarInt._build(tag, stream, context, path)
            UVarInt._build(len(obj[tag]), stream, context, path)
            stream_write(stream, obj[tag], len(obj[tag]), path)
        return obj


TaggedFields = _TaggedFields()


class _UuidAdapter(Adapter):
    def _decode(self, obj: bytes, context: Any, path: str) -> uuid.UUID:
        return uuid.UUID(bytes=obj)

    def _encode(self, obj: uuid.UUID, context: Any, path: str) -> bytes:
        if not isinstance(obj, uuid.UUID):
            raise _WireError(f"{obj!r} is not a uuid.UUID", path=path)
        return obj.bytes


Uuid = _UuidAdapter(Bytes(16))


# --- structs as NamedTuples ------------------------------------------------------------------


class _BoolTag(NamedTuple):
    """A bool tagged field: one byte, written only when it differs from ``default``."""

    name: str
    default: bool = False

    def decode(self, raw: bytes, path: str) -> bool:
        if len(raw) != 1:
            raise _WireError(f"tagged field {self.name} has {len(raw)} bytes, expected 1", path=path)
        return raw[0] != 0

    def encode(self, value: bool) -> bytes | None:
        return None if bool(value) == self.default else b"\x01" if value else b"\x00"


class _AsTuple(Adapter):
    """Maps a parsed Struct (whose last member is its tagged-field section) to a NamedTuple,
    and back. ``tags`` maps tag numbers to the typed tagged fields this struct knows."""

    def __init__(self, subcon: Construct, cls: type, tags: dict[int, _BoolTag] | None = None) -> None:
        super().__init__(subcon)
        self.cls = cls
        self.tags = tags or {}

    def _decode(self, obj: Any, context: Any, path: str) -> Any:
        values = {name: obj[name] for name in self.cls._fields if name in obj}
        raw_tags = obj["tagged_fields"]
        for tag, field in self.tags.items():
            if tag in raw_tags:
                values[field.name] = field.decode(raw_tags[tag], path)
        return self.cls(**values)

    def _encode(self, obj: Any, context: Any, path: str) -> dict[str, Any]:
        if not isinstance(obj, tuple) or len(obj) != len(self.cls._fields):
            raise _WireError(f"{obj!r} is not a {self.cls.__name__}", path=path)
        values = dict(zip(self.cls._fields, obj, strict=True))
        tagged = {}
        for tag, field in self.tags.items():
            raw = field.encode(values.pop(field.name))
            if raw is not None:
                tagged[tag] = raw
        values["tagged_fields"] = tagged
        return values
