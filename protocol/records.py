"""Kafka record batches (magic 2): header fields, CRC32C, slicing a byte range into batches, and full
record decoding/encoding with every compression codec.

The batch header is read with one precompiled ``struct.Struct`` rather than ``construct``: it is
parsed for every batch the proxy routes or the copier indexes, and a single ``unpack_from`` is
an order of magnitude cheaper than a declarative parse.
"""

from __future__ import annotations

import enum
import gzip
import struct
from collections.abc import Iterator, Sequence
from typing import NamedTuple

import crc32c

from protocol.errors import ProtocolError

# baseOffset, batchLength, partitionLeaderEpoch, magic, crc, attributes, lastOffsetDelta,
# baseTimestamp, maxTimestamp, producerId, producerEpoch, baseSequence, recordsCount
_HEADER = struct.Struct(">qiibIhiqqqhii")
HEADER_SIZE = _HEADER.size  # 61
LOG_OVERHEAD = 12  # baseOffset + batchLength precede what batchLength counts
_CRC_START = 21  # attributes onwards is covered by the CRC
_MIN_BATCH_LENGTH = HEADER_SIZE - LOG_OVERHEAD
_OFFSET_AND_LENGTH = struct.Struct(">qi")


class Compression(enum.IntEnum):
    NONE = 0
    GZIP = 1
    SNAPPY = 2
    LZ4 = 3
    ZSTD = 4


class BatchHeader(NamedTuple):
    base_offset: int
    batch_length: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    records_count: int

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def size(self) -> int:
        return LOG_OVERHEAD + self.batch_length

    @property
    def compression(self) -> Compression:
        return Compression(self.attributes & 0x07)

    @property
    def timestamp_type(self) -> int:
        return (self.attributes >> 3) & 1  # 0 create time, 1 log append time

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & 0x10)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & 0x20)

    @property
    def has_delete_horizon(self) -> bool:
        return bool(self.attributes & 0x40)


class Record(NamedTuple):
    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes | None]]


def read_header(buf: bytes | memoryview, pos: int = 0) -> BatchHeader:
    """The header of the batch at ``pos``; ProtocolError if it is not a whole v2 header."""
    if len(buf) - pos < HEADER_SIZE:
        raise ProtocolError(f"batch header at byte {pos} truncated ({len(buf) - pos} of {HEADER_SIZE} bytes)")
    header = BatchHeader(*_HEADER.unpack_from(buf, pos))
    if header.magic != 2:
        raise ProtocolError(f"batch at byte {pos} has magic {header.magic}; only record batch v2 is supported")
    if header.batch_length < _MIN_BATCH_LENGTH:
        raise ProtocolError(f"batch at byte {pos} has length {header.batch_length}, below a v2 header")
    return header


def iter_entries(buf: bytes | memoryview, start: int = 0, end: int | None = None) -> Iterator[tuple[int, memoryview]]:
    """(base offset, bytes) of each whole log entry in ``buf[start:end]``, for any magic.

    Every message format frames entries as offset int64 + size int32, so the proxy can slice
    even old message sets. A trailing partial entry (brokers send one when a fetch limit cuts a
    batch) ends the iteration quietly.
    """
    view = memoryview(buf)
    end = len(view) if end is None else end
    pos = start
    while end - pos >= LOG_OVERHEAD:
        offset, length = _OFFSET_AND_LENGTH.unpack_from(view, pos)
        if length < 0:
            raise ProtocolError(f"log entry at byte {pos} has negative length {length}")
        size = LOG_OVERHEAD + length
        if pos + size > end:
            return
        yield offset, view[pos : pos + size]
        pos += size


def iter_batches(buf: bytes | memoryview, start: int = 0, end: int | None = None) -> Iterator[tuple[BatchHeader, memoryview]]:
    """Each whole v2 batch in ``buf[start:end]`` with its header, as zero-copy slices, without
    decompressing. A trailing partial batch ends the iteration; ``consumed_bytes`` says where."""
    view = memoryview(buf)
    end = len(view) if end is None else end
    pos = start
    while end - pos >= LOG_OVERHEAD:
        if end - pos < HEADER_SIZE:
            return
        header = read_header(view, pos)
        if pos + header.size > end:
            return
        yield header, view[pos : pos + header.size]
        pos += header.size


def consumed_bytes(buf: bytes | memoryview, start: int = 0, end: int | None = None) -> int:
    """How many bytes from ``start`` the whole batches cover (the rest is a partial batch)."""
    return sum(h.size for h, _ in iter_batches(buf, start, end))


def compute_crc(batch: bytes | memoryview) -> int:
    return crc32c.crc32c(memoryview(batch)[_CRC_START:])


def verify_crc(batch: bytes | memoryview) -> bool:
    header = read_header(batch)
    return header.crc == compute_crc(memoryview(batch)[: header.size])


# -- varints ------------------------------------------------------------------------------------


def decode_varint(buf: bytes | memoryview, pos: int, max_bytes: int = 10) -> tuple[int, int]:
    """A zigzag signed varint (Kafka's varint: at most 5 bytes, varlong: at most 10)."""
    result = 0
    shift = 0
    for _ in range(max_bytes):
        if pos >= len(buf):
            raise ProtocolError(f"truncated varint at byte {pos}")
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return (result >> 1) ^ -(result & 1), pos
        shift += 7
    raise ProtocolError(f"varint longer than {max_bytes} bytes at byte {pos}")


def encode_varint(value: int) -> bytes:
    zigzag = (value << 1) ^ (value >> 63)
    zigzag &= (1 << 64) - 1
    out = bytearray()
    while zigzag >= 0x80:
        out.append((zigzag & 0x7F) | 0x80)
        zigzag >>= 7
    out.append(zigzag)
    return bytes(out)


# -- compression --------------------------------------------------------------------------------

_XERIAL_MAGIC = b"\x82SNAPPY\x00"


def decompress(codec: Compression, data: bytes | memoryview) -> bytes:
    try:
        if codec == Compression.NONE:
            return bytes(data)
        if codec == Compression.GZIP:
            return gzip.decompress(data)
        if codec == Compression.SNAPPY:
            import cramjam

            raw = bytes(data)
            if raw.startswith(_XERIAL_MAGIC):
                # The Java producer's xerial framing: 16-byte header, then (int32 size, block)*.
                out = bytearray()
                pos = 16
                while pos < len(raw):
                    (n,) = struct.unpack_from(">i", raw, pos)
                    pos += 4
                    out += bytes(cramjam.snappy.decompress_raw(raw[pos : pos + n]))
                    pos += n
                return bytes(out)
            return bytes(cramjam.snappy.decompress_raw(raw))
        if codec == Compression.LZ4:
            import lz4.frame

            return lz4.frame.decompress(bytes(data))
        if codec == Compression.ZSTD:
            import zstandard

            return zstandard.ZstdDecompressor().decompressobj().decompress(bytes(data))
    except ProtocolError:
        raise
    except Exception as e:  # noqa: BLE001 - each codec library raises its own types on bad input
        raise ProtocolError(f"cannot decompress {codec.name} records: {e}") from None
    raise ProtocolError(f"unknown compression codec {int(codec)}")


def compress(codec: Compression, data: bytes) -> bytes:
    if codec == Compression.NONE:
        return data
    if codec == Compression.GZIP:
        return gzip.compress(data)
    if codec == Compression.SNAPPY:
        import cramjam

        return bytes(cramjam.snappy.compress_raw(data))
    if codec == Compression.LZ4:
        import lz4.frame

        return lz4.frame.compress(data)
    if codec == Compression.ZSTD:
        import zstandard

        return zstandard.ZstdCompressor().compress(data)
    raise ValueError(f"unknown compression codec {codec}")


# -- records ------------------------------------------------------------------------------------


def decode_records(batch: bytes | memoryview) -> list[Record]:
    """Every record of one batch, decompressed, with absolute offsets and timestamps."""
    view = memoryview(batch)
    header = read_header(view)
    if len(view) < header.size:
        raise ProtocolError(f"batch truncated: {len(view)} of {header.size} bytes")
    body = decompress(header.compression, view[HEADER_SIZE : header.size])
    records: list[Record] = []
    pos = 0
    try:
        for _ in range(header.records_count):
            length, pos = decode_varint(body, pos, 5)
            end = pos + length
            if length < 0 or end > len(body):
                raise ProtocolError(f"record of {length} bytes overruns its batch")
            pos += 1  # record attributes, unused
            ts_delta, pos = decode_varint(body, pos, 10)
            off_delta, pos = decode_varint(body, pos, 5)
            key, pos = _read_varbytes(body, pos, end)
            value, pos = _read_varbytes(body, pos, end)
            count, pos = decode_varint(body, pos, 5)
            if count < 0 or count > end - pos:
                raise ProtocolError(f"record claims {count} headers")
            headers = []
            for _ in range(count):
                hkey, pos = _read_varbytes(body, pos, end)
                hvalue, pos = _read_varbytes(body, pos, end)
                if hkey is None:
                    raise ProtocolError("record header with a null key")
                headers.append((hkey.decode("utf-8"), hvalue))
            if pos != end:
                raise ProtocolError(f"record has {end - pos} unread bytes")
            records.append(Record(header.base_offset + off_delta, header.base_timestamp + ts_delta, key, value, headers))
    except UnicodeDecodeError as e:
        raise ProtocolError(f"record header key is not UTF-8: {e}") from None
    return records


def _read_varbytes(buf: bytes, pos: int, end: int) -> tuple[bytes | None, int]:
    n, pos = decode_varint(buf, pos, 5)
    if n < 0:
        return None, pos
    if pos + n > end:
        raise ProtocolError(f"field of {n} bytes overruns its record")
    return buf[pos : pos + n], pos + n


CONTROL_ABORT = 0
CONTROL_COMMIT = 1


def decode_control_record(record: Record) -> tuple[int, int]:
    """(version, type) of a control record's key; type 0 is ABORT, 1 is COMMIT."""
    if record.key is None or len(record.key) < 4:
        raise ProtocolError("control record key shorter than 4 bytes")
    version, kind = struct.unpack_from(">hh", record.key)
    return version, kind


def build_batch(
    records: Sequence[Record],
    base_offset: int = 0,
    compression: Compression = Compression.NONE,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
    is_transactional: bool = False,
    is_control: bool = False,
    partition_leader_epoch: int = -1,
    timestamp_type: int = 0,
) -> bytes:
    """One v2 batch holding ``records`` (their offsets and timestamps become deltas)."""
    if not records:
        raise ValueError("a batch holds at least one record")
    base_ts = records[0].timestamp
    body = bytearray()
    for r in records:
        rec = bytearray(b"\x00")
        rec += encode_varint(r.timestamp - base_ts)
        rec += encode_varint(r.offset - base_offset)
        for field in (r.key, r.value):
            rec += encode_varint(-1) if field is None else encode_varint(len(field)) + field
        rec += encode_varint(len(r.headers))
        for hkey, hvalue in r.headers:
            raw = hkey.encode()
            rec += encode_varint(len(raw)) + raw
            rec += encode_varint(-1) if hvalue is None else encode_varint(len(hvalue)) + hvalue
        body += encode_varint(len(rec)) + rec
    payload = compress(compression, bytes(body))
    attributes = int(compression) | (timestamp_type << 3) | (0x10 if is_transactional else 0) | (0x20 if is_control else 0)
    header = _HEADER.pack(
        base_offset,
        HEADER_SIZE - LOG_OVERHEAD + len(payload),
        partition_leader_epoch,
        2,
        0,
        attributes,
        records[-1].offset - base_offset,
        base_ts,
        max(r.timestamp for r in records),
        producer_id,
        producer_epoch,
        base_sequence,
        len(records),
    )
    batch = bytearray(header + payload)
    struct.pack_into(">I", batch, 17, compute_crc(batch))
    return bytes(batch)
