"""The byte formats of objects stored sealed (compressed, encrypted, or both): no keys, no I/O.

A sealed object is its plain bytes cut into chunks of ``chunk_size`` logical bytes, each stored
compressed or raw, then encrypted or not; a chunk table says where each stored chunk starts, so
a ranged read of logical bytes maps to one ranged read of stored bytes.

- A segment's objects (``.log`` and its indexes) keep their tables, and the segment's wrapped data
  key, in one small envelope object beside them (``{start}-{segmentId}.seal``,
  :data:`SEGMENT_ENVELOPE`). One GET tells a reader everything about the segment, and a key
  rotation rewrites only that object, never the segment.
- A whole object that is always read whole (a manifest, :data:`SEALED_OBJECT`) carries its own
  header: the same table and wrapped key, then the chunks.

Both end their header with a CRC-32C of it. An encrypted chunk's AES-GCM tag authenticates the
chunk together with its place (object name, index, count, the object's logical size, codec); a
chunk that is not encrypted has only its CRC-32C, which the table keeps for every chunk.
"""

from __future__ import annotations

import dataclasses
import io
import itertools

import crc32c
from construct import (
    Bytes,
    Const,
    ConstructError,
    GreedyBytes,
    Int8ub,
    Int16ub,
    Int32ub,
    Int64ub,
    PascalString,
    Prefixed,
    PrefixedArray,
    Struct,
)

CODEC_RAW, CODEC_ZSTD = 0, 1
CODEC_NAMES = {CODEC_RAW: "raw", CODEC_ZSTD: "zstd"}
NONCE_PREFIX_BYTES = 8  # + a 4-byte chunk index: AES-GCM's 12-byte nonce

_CHUNK = Struct("stored_size" / Int32ub, "crc32c" / Int32ub, "codec" / Int8ub)
_TABLE = Struct(
    "name" / PascalString(Int8ub, "ascii"),
    "logical_size" / Int64ub,
    "chunk_size" / Int32ub,
    "nonce_prefix" / Bytes(NONCE_PREFIX_BYTES),
    "chunks" / PrefixedArray(Int32ub, _CHUNK),
)
_KEY = Struct(
    "key_id" / PascalString(Int16ub, "utf8"),  # "" = not encrypted
    "wrapped_key" / Prefixed(Int16ub, GreedyBytes),
)
SEGMENT_ENVELOPE = Struct(
    "magic" / Const(b"TPSE"),
    "version" / Const(1, Int8ub),
    "key" / _KEY,
    "objects" / PrefixedArray(Int8ub, _TABLE),
)
SEALED_OBJECT = Struct(
    "magic" / Const(b"TPSO"),
    "version" / Const(1, Int8ub),
    "key" / _KEY,
    "table" / _TABLE,
)
SEALED_OBJECT_MAGIC = b"TPSO"
_CRC = Int32ub


class SealedFormatError(ValueError):
    """Bytes that are not a well-formed sealed object or envelope."""


@dataclasses.dataclass(frozen=True)
class Chunk:
    stored_size: int
    crc32c: int
    codec: int


@dataclasses.dataclass(frozen=True)
class ChunkTable:
    """Where one object's chunks are: logical chunk ``i`` covers bytes ``i * chunk_size`` on, and is
    stored at ``starts[i]`` for ``chunks[i].stored_size`` bytes."""

    name: str
    logical_size: int
    chunk_size: int
    nonce_prefix: bytes
    chunks: tuple[Chunk, ...]
    starts: tuple[int, ...] = dataclasses.field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.chunk_size <= 0:
            raise SealedFormatError(f"{self.name}: chunk size {self.chunk_size}")
        expected = -(-self.logical_size // self.chunk_size)
        if len(self.chunks) != expected:
            raise SealedFormatError(f"{self.name}: {len(self.chunks)} chunks for {self.logical_size} bytes "
                                    f"in chunks of {self.chunk_size} (expected {expected})")
        if any(c.codec not in CODEC_NAMES for c in self.chunks):
            raise SealedFormatError(f"{self.name}: unknown chunk codec")
        object.__setattr__(self, "starts", tuple(itertools.accumulate((c.stored_size for c in self.chunks), initial=0)))

    @property
    def stored_size(self) -> int:
        return self.starts[-1]

    def logical_length(self, index: int) -> int:
        return min(self.chunk_size, self.logical_size - index * self.chunk_size)

    def chunks_for(self, start: int, end: int) -> range:
        """The chunks holding logical bytes ``start..end`` (inclusive, within the object)."""
        return range(start // self.chunk_size, end // self.chunk_size + 1)

    def to_dict(self) -> dict[str, object]:
        return {"name": self.name, "logical_size": self.logical_size, "chunk_size": self.chunk_size,
                "nonce_prefix": self.nonce_prefix,
                "chunks": [dataclasses.asdict(c) for c in self.chunks]}

    @classmethod
    def from_dict(cls, parsed: dict) -> ChunkTable:  # type: ignore[type-arg]
        return cls(parsed["name"], parsed["logical_size"], parsed["chunk_size"], bytes(parsed["nonce_prefix"]),
                   tuple(Chunk(c["stored_size"], c["crc32c"], c["codec"]) for c in parsed["chunks"]))


@dataclasses.dataclass(frozen=True)
class WrappedKey:
    """A data key wrapped by the key-encryption key ``key_id`` ("" and b"": nothing encrypted)."""

    key_id: str
    wrapped: bytes

    @property
    def encrypted(self) -> bool:
        return bool(self.key_id)


@dataclasses.dataclass(frozen=True)
class SegmentEnvelope:
    key: WrappedKey
    tables: dict[str, ChunkTable]

    def encode(self) -> bytes:
        body = SEGMENT_ENVELOPE.build({
            "key": {"key_id": self.key.key_id, "wrapped_key": self.key.wrapped},
            "objects": [t.to_dict() for t in self.tables.values()]})
        return body + _CRC.build(crc32c.crc32c(body))

    @classmethod
    def decode(cls, blob: bytes, where: str) -> SegmentEnvelope:
        parsed, end = _parse_with_crc(SEGMENT_ENVELOPE, blob, where)
        if end != len(blob):
            raise SealedFormatError(f"{where}: {len(blob) - end} bytes after the envelope")
        try:
            tables = [ChunkTable.from_dict(t) for t in parsed.objects]
        except SealedFormatError as exc:
            raise SealedFormatError(f"{where}: {exc}") from None
        return cls(WrappedKey(parsed.key.key_id, bytes(parsed.key.wrapped_key)), {t.name: t for t in tables})

    def with_key(self, key: WrappedKey) -> SegmentEnvelope:
        return dataclasses.replace(self, key=key)


def encode_sealed_object(key: WrappedKey, table: ChunkTable, chunks: list[bytes]) -> bytes:
    header = SEALED_OBJECT.build({"key": {"key_id": key.key_id, "wrapped_key": key.wrapped},
                                  "table": table.to_dict()})
    return b"".join([header, _CRC.build(crc32c.crc32c(header)), *chunks])


def decode_sealed_object(blob: bytes, where: str) -> tuple[WrappedKey, ChunkTable, memoryview]:
    """The key, the table and the stored chunks of a sealed whole object."""
    parsed, end = _parse_with_crc(SEALED_OBJECT, blob, where)
    try:
        table = ChunkTable.from_dict(parsed.table)
    except SealedFormatError as exc:
        raise SealedFormatError(f"{where}: {exc}") from None
    body = memoryview(blob)[end:]
    if len(body) != table.stored_size:
        raise SealedFormatError(f"{where}: {len(body)} bytes of chunks, the table says {table.stored_size}")
    return WrappedKey(parsed.key.key_id, bytes(parsed.key.wrapped_key)), table, body


def is_sealed_object(blob: bytes) -> bool:
    return blob[:4] == SEALED_OBJECT_MAGIC


def _parse_with_crc(struct: Struct, blob: bytes, where: str):  # type: ignore[no-untyped-def]
    stream = io.BytesIO(blob)
    try:
        parsed = struct.parse_stream(stream)
    except (ConstructError, UnicodeDecodeError, OverflowError) as exc:
        raise SealedFormatError(f"{where}: not a sealed header ({exc})") from None
    end = stream.tell()
    if len(blob) < end + _CRC.sizeof() or _CRC.parse(blob[end:end + _CRC.sizeof()]) != crc32c.crc32c(blob[:end]):
        raise SealedFormatError(f"{where}: header checksum does not match")
    return parsed, end + _CRC.sizeof()
