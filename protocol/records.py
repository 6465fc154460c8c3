"""Kafka record batches (magic 2): header fields, CRC32C, slicing a byte range into batches without
copying or decompressing, and full record decoding/encoding with every compression codec.

Layout of a v2 batch (all integers big-endian)::

    baseOffset int64 | batchLength int32 | partitionLeaderEpoch int32 | magic int8 | crc uint32 |
    attributes int16 | lastOffsetDelta int32 | baseTimestamp int64 | maxTimestamp int64 |
    producerId int64 | producerEpoch int16 | baseSequence int32 | recordsCount int32 | records...

``batchLength`` counts everything after itself, so a batch occupies ``12 + batchLength`` bytes.
The CRC is CRC-32C over attributes to the end of the batch.

The header is read with one precompiled ``struct.Struct`` rather than ``construct``: the proxy
parses it for every batch it routes or tiers, and a single ``unpack_from`` is an order of
magnitude cheaper than a declarative parse.

Partial trailing data: a broker answering a Fetch may end the record set with the first bytes of
a batch cut by ``max_bytes``. The walkers (:func:`iter_batches`, :func:`iter_entries`) stop there
quietly; their ``consumed`` / ``remaining`` attributes say how much was whole, and
:func:`split_batches` returns the whole batches together with the consumed byte count.
"""

from __future__ import annotations

import enum
import gzip
import struct
from collections.abc import Sequence
from typing import NamedTuple, TypeAlias

import cramjam
import crc32c
import lz4.frame
import zstandard

from protocol.errors import ProtocolError

Buffer: TypeAlias = bytes | bytearray | memoryview

# baseOffset, batchLength, partitionLeaderEpoch, magic, crc, attributes, lastOffsetDelta,
# baseTimestamp, maxTimestamp, producerId, producerEpoch, baseSequence, recordsCount
_HEADER = struct.Struct(">qiibIhiqqqhii")
HEADER_SIZE = _HEADER.size  # 61
LOG_OVERHEAD = 12  # baseOffset + batchLength precede the bytes batchLength counts
MIN_BATCH_LENGTH = HEADER_SIZE - LOG_OVERHEAD  # 49: a v2 batch with no records
MAGIC = 2
_MAGIC_AT = 16  # same position in every message format, so old message sets are recognisable
_CRC_AT = 17
_CRC_START = 21  # attributes onwards is covered by the CRC
_RECORDS_COUNT_AT = 57

_OFFSET_AND_LENGTH = struct.Struct(">qi")
_I32 = struct.Struct(">i")
_CRC = struct.Struct(">I")
_CONTROL_KEY = struct.Struct(">hh")
_CONTROL_VALUE = struct.Struct(">hi")

# Smallest entry each magic allows after offset+size: v0 crc+magic+attributes+key len+value len,
# v1 adds a timestamp, v2 is the empty batch.
_MIN_ENTRY_LENGTH = (14, 22, MIN_BATCH_LENGTH)

_INT32_MIN, _INT32_MAX = -(1 << 31), (1 << 31) - 1
_INT64_MIN, _INT64_MAX = -(1 << 63), (1 << 63) - 1

_ATTR_CODEC = 0x07
_ATTR_LOG_APPEND_TIME = 0x08
_ATTR_TRANSACTIONAL = 0x10
_ATTR_CONTROL = 0x20
_ATTR_DELETE_HORIZON = 0x40


class Compression(enum.IntEnum):
    NONE = 0
    GZIP = 1
    SNAPPY = 2
    LZ4 = 3
    ZSTD = 4


_CODECS = tuple(Compression)


class TimestampType(enum.IntEnum):
    CREATE_TIME = 0
    LOG_APPEND_TIME = 1


class ControlType(enum.IntEnum):
    """Transaction markers; KRaft uses further types (2+) in its own metadata log."""

    ABORT = 0
    COMMIT = 1


class BatchHeader(NamedTuple):
    base_offset: int
    batch_length: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int  # Kafka's "firstTimestamp" (or the delete horizon, see has_delete_horizon)
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    records_count: int

    @property
    def size(self) -> int:
        """Bytes the whole batch occupies, framing included."""
        return LOG_OVERHEAD + self.batch_length

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        return self.base_offset + self.last_offset_delta + 1

    @property
    def compression(self) -> Compression:
        codec = self.attributes & _ATTR_CODEC
        if codec >= len(_CODECS):
            raise ProtocolError(f"unknown compression codec {codec} in batch attributes")
        return _CODECS[codec]

    @property
    def timestamp_type(self) -> TimestampType:
        return TimestampType.LOG_APPEND_TIME if self.attributes & _ATTR_LOG_APPEND_TIME else TimestampType.CREATE_TIME

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & _ATTR_TRANSACTIONAL)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & _ATTR_CONTROL)

    @property
    def has_delete_horizon(self) -> bool:
        return bool(self.attributes & _ATTR_DELETE_HORIZON)

    @property
    def delete_horizon(self) -> int | None:
        """The log cleaner's tombstone deadline (KIP-534), stored in the base timestamp field."""
        return self.base_timestamp if self.attributes & _ATTR_DELETE_HORIZON else None


class Record(NamedTuple):
    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes | None]]


class LogEntry(NamedTuple):
    """One length-framed entry of any message format.

    ``offset`` is what the framing carries: the base offset of a v2 batch, the message offset of
    a v0/v1 message (for a compressed v0/v1 wrapper, the offset of its last inner message).
    """

    offset: int
    magic: int
    data: memoryview


def _as_view(buf: Buffer) -> memoryview:
    view = buf if isinstance(buf, memoryview) else memoryview(buf)
    # Indexing must yield byte values whatever view the caller holds.
    return view if view.format == "B" and view.ndim == 1 else view.cast("B")


def read_header(buf: Buffer, pos: int = 0) -> BatchHeader:
    """The header of the v2 batch at ``pos``; ProtocolError unless it is a whole, plausible one.

    Only the header is checked: the batch body may be shorter than ``size`` here.
    """
    left = len(buf) - pos
    if left > _MAGIC_AT and buf[pos + _MAGIC_AT] != MAGIC:
        raise ProtocolError(f"batch has magic {buf[pos + _MAGIC_AT]}; only record batch v2 is supported", pos + _MAGIC_AT)
    if left < HEADER_SIZE:
        raise ProtocolError(f"batch header truncated: {max(left, 0)} of {HEADER_SIZE} bytes", pos)
    header = BatchHeader._make(_HEADER.unpack_from(buf, pos))
    if header.batch_length < MIN_BATCH_LENGTH:
        raise ProtocolError(f"batch length {header.batch_length} is below the {MIN_BATCH_LENGTH} of a v2 header", pos + 8)
    return header


# -- walking a byte range -----------------------------------------------------------------------


class _Walker:
    """Shared cursor state of the two walkers.

    After iteration ends, ``position`` is where the first incomplete entry starts (or ``end``),
    ``consumed`` the bytes of whole entries, ``remaining`` the bytes of a trailing partial one.
    After a ProtocolError, ``position`` is the start of the offending entry.
    """

    __slots__ = ("_view", "start", "end", "position")

    def __init__(self, buf: Buffer, start: int = 0, end: int | None = None) -> None:
        view = _as_view(buf)
        end = len(view) if end is None else end
        if not 0 <= start <= end <= len(view):
            raise ValueError(f"byte range {start}:{end} is outside a buffer of {len(view)} bytes")
        self._view = view
        self.start = start
        self.end = end
        self.position = start

    @property
    def consumed(self) -> int:
        return self.position - self.start

    @property
    def remaining(self) -> int:
        return self.end - self.position


class BatchIterator(_Walker):
    """Yields (header, zero-copy view) for each whole v2 batch; see :func:`iter_batches`."""

    __slots__ = ()

    def __iter__(self) -> BatchIterator:
        return self

    def __next__(self) -> tuple[BatchHeader, memoryview]:
        pos = self.position
        left = self.end - pos
        view = self._view
        if left >= HEADER_SIZE:
            fields = _HEADER.unpack_from(view, pos)
            if fields[3] != MAGIC:
                raise _bad_magic(fields[3], pos)
            if fields[1] < MIN_BATCH_LENGTH:
                raise ProtocolError(f"batch length {fields[1]} is below the {MIN_BATCH_LENGTH} of a v2 header", pos + 8)
            size = LOG_OVERHEAD + fields[1]
            if size <= left:
                self.position = pos + size
                return BatchHeader._make(fields), view[pos : pos + size]
        elif left >= LOG_OVERHEAD:
            # A partial header still shows its length, and maybe its magic: reject what cannot be
            # the start of a v2 batch rather than passing it off as a cut one.
            (length,) = _I32.unpack_from(view, pos + 8)
            if left > _MAGIC_AT and view[pos + _MAGIC_AT] != MAGIC:
                raise _bad_magic(view[pos + _MAGIC_AT], pos)
            if length < MIN_BATCH_LENGTH:
                raise ProtocolError(f"batch length {length} is below the {MIN_BATCH_LENGTH} of a v2 header", pos + 8)
        raise StopIteration


def _bad_magic(magic: int, pos: int) -> ProtocolError:
    hint = " (an old message set: walk it with iter_entries)" if magic < MAGIC else ""
    return ProtocolError(f"batch has magic {magic}; only record batch v2 is supported{hint}", pos + _MAGIC_AT)


class EntryIterator(_Walker):
    """Yields a :class:`LogEntry` for each whole entry of any magic; see :func:`iter_entries`."""

    __slots__ = ()

    def __iter__(self) -> EntryIterator:
        return self

    def __next__(self) -> LogEntry:
        pos = self.position
        left = self.end - pos
        if left < LOG_OVERHEAD:
            raise StopIteration
        view = self._view
        offset, length = _OFFSET_AND_LENGTH.unpack_from(view, pos)
        if left <= _MAGIC_AT:
            if length < _MIN_ENTRY_LENGTH[0]:
                raise ProtocolError(f"log entry length {length} is below any message format's minimum", pos + 8)
            raise StopIteration
        magic = view[pos + _MAGIC_AT]
        if magic > MAGIC:
            raise ProtocolError(f"log entry has unknown magic {magic}", pos + _MAGIC_AT)
        if length < _MIN_ENTRY_LENGTH[magic]:
            raise ProtocolError(f"log entry length {length} is below the magic {magic} minimum", pos + 8)
        size = LOG_OVERHEAD + length
        if size > left:
            raise StopIteration
        self.position = pos + size
        return LogEntry(offset, magic, view[pos : pos + size])


def iter_batches(buf: Buffer, start: int = 0, end: int | None = None) -> BatchIterator:
    """Each whole v2 batch in ``buf[start:end]`` as (header, memoryview slice of ``buf``).

    Nothing is copied, decompressed or CRC-checked. A trailing partial batch ends the iteration
    quietly; read ``consumed`` / ``remaining`` / ``position`` off the returned iterator afterwards.
    A batch length below 49 or a magic other than 2 raises ProtocolError (old message sets can be
    sliced with :func:`iter_entries` instead).
    """
    return BatchIterator(buf, start, end)


def iter_entries(buf: Buffer, start: int = 0, end: int | None = None) -> EntryIterator:
    """Each whole length-framed entry in ``buf[start:end]``, whatever its magic (0, 1 or 2).

    Every message format frames entries as offset int64 + size int32 with the magic at byte 16,
    so the proxy can slice record sets from old brokers it cannot decode. Same partial-tail and
    zero-copy behaviour as :func:`iter_batches`.
    """
    return EntryIterator(buf, start, end)


def split_batches(buf: Buffer, start: int = 0, end: int | None = None) -> tuple[list[tuple[BatchHeader, memoryview]], int]:
    """The whole v2 batches in ``buf[start:end]`` and how many bytes from ``start`` they cover;
    any bytes past that are a partial batch."""
    walker = BatchIterator(buf, start, end)
    batches = list(walker)
    return batches, walker.consumed


# -- CRC ----------------------------------------------------------------------------------------


def compute_crc(batch: Buffer) -> int:
    """CRC-32C of a whole batch's bytes from attributes to the end (``batch`` is exactly one batch)."""
    if len(batch) < _CRC_START:
        raise ProtocolError(f"batch of {len(batch)} bytes ends before its CRC-covered range")
    return crc32c.crc32c(_as_view(batch)[_CRC_START:])


def verify_crc(batch: Buffer) -> bool:
    """Whether the stored CRC matches the batch's bytes; ProtocolError if it is not a whole v2 batch.

    Bytes past the batch's own size are ignored, so a view that runs on into later data is fine.
    """
    view = _as_view(batch)
    header = read_header(view)
    if len(view) < header.size:
        raise ProtocolError(f"batch truncated: {len(view)} of {header.size} bytes", len(view))
    return header.crc == crc32c.crc32c(view[_CRC_START : header.size])


# -- varints ------------------------------------------------------------------------------------


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


# -- compression --------------------------------------------------------------------------------

# The Java producer writes snappy through snappy-java's stream format ("xerial"): this 8-byte
# magic, int32 version and int32 compatible version, then (int32 length, raw snappy block)*.
_XERIAL_MAGIC = b"\x82SNAPPY\x00"
_XERIAL_HEADER = _XERIAL_MAGIC + struct.pack(">ii", 1, 1)
_XERIAL_BLOCK = 32 * 1024  # snappy-java's default block size


def _snappy_decompress(data: bytes) -> bytes:
    if not data.startswith(_XERIAL_MAGIC):
        return bytes(cramjam.snappy.decompress_raw(data))  # librdkafka and others: one raw block
    if len(data) < len(_XERIAL_HEADER):
        raise ProtocolError(f"xerial snappy header truncated: {len(data)} of {len(_XERIAL_HEADER)} bytes")
    out = bytearray()
    pos = len(_XERIAL_HEADER)
    while pos < len(data):
        if len(data) - pos < 4:
            raise ProtocolError(f"xerial snappy block length truncated at byte {pos} of the stream")
        (n,) = _I32.unpack_from(data, pos)
        pos += 4
        if n < 0 or n > len(data) - pos:
            raise ProtocolError(f"xerial snappy block of {n} bytes at byte {pos - 4} of the stream, {len(data) - pos} left")
        out += cramjam.snappy.decompress_raw(data[pos : pos + n])
        pos += n
    return bytes(out)


def _zstd_decompress(data: bytes) -> bytes:
    # Frames may lack a content size (zstd-jni's stream writer omits it) and may be concatenated,
    # so decode frame by frame with a streaming object rather than one-shot decompress().
    dctx = zstandard.ZstdDecompressor()
    out = []
    rest = data
    while rest:
        obj = dctx.decompressobj()
        out.append(obj.decompress(rest))
        if not obj.eof:
            raise ProtocolError("zstd frame truncated")
        rest = obj.unused_data
    return b"".join(out)


def decompress(codec: Compression, data: Buffer) -> bytes:
    """The records section of a batch, uncompressed; ProtocolError on any codec failure."""
    if codec == Compression.NONE:
        return bytes(data)
    raw = bytes(data)
    try:
        if codec == Compression.GZIP:
            return gzip.decompress(raw)
        if codec == Compression.SNAPPY:
            return _snappy_decompress(raw)
        if codec == Compression.LZ4:
            return lz4.frame.decompress(raw)
        if codec == Compression.ZSTD:
            return _zstd_decompress(raw)
    except ProtocolError as e:
        raise ProtocolError(f"cannot decompress {codec.name} records: {e}") from None
    except Exception as e:  # each codec library raises its own types on bad input
        raise ProtocolError(f"cannot decompress {codec.name} records: {type(e).__name__}: {e}") from None
    raise ProtocolError(f"unknown compression codec {int(codec)}")


def compress(codec: Compression, data: bytes) -> bytes:
    """``data`` compressed as the Java producer would frame it (snappy in xerial blocks; LZ4 as a
    frame of independent blocks, which Kafka's LZ4 reader requires)."""
    if codec == Compression.NONE:
        return data
    if codec == Compression.GZIP:
        return gzip.compress(data)
    if codec == Compression.SNAPPY:
        out = bytearray(_XERIAL_HEADER)
        for i in range(0, len(data), _XERIAL_BLOCK):
            block = cramjam.snappy.compress_raw(data[i : i + _XERIAL_BLOCK])
            out += _I32.pack(len(block))
            out += block
        return bytes(out)
    if codec == Compression.LZ4:
        return lz4.frame.compress(data, block_linked=False, store_size=False)
    if codec == Compression.ZSTD:
        return zstandard.ZstdCompressor().compress(data)
    raise ValueError(f"unknown compression codec {codec}")


# -- records ------------------------------------------------------------------------------------


def decode_records(batch: Buffer, *, verify: bool = True) -> list[Record]:
    """Every record of one v2 batch, decompressed, with absolute offsets and timestamps.

    ``verify`` checks the CRC first (ProtocolError on mismatch). With LOG_APPEND_TIME every
    record's timestamp is the batch's max_timestamp, as Kafka defines. Header keys that are not
    valid UTF-8 decode with surrogate escapes rather than failing, so nothing is lost.
    """
    view = _as_view(batch)
    header = read_header(view)
    size = header.size
    if len(view) < size:
        raise ProtocolError(f"batch truncated: {len(view)} of {size} bytes", len(view))
    if verify:
        actual = crc32c.crc32c(view[_CRC_START:size])
        if actual != header.crc:
            raise ProtocolError(f"CRC mismatch: header says {header.crc:#010x}, bytes give {actual:#010x}", _CRC_AT)
    if header.records_count < 0:
        raise ProtocolError(f"negative record count {header.records_count}", _RECORDS_COUNT_AT)
    codec = header.compression
    if codec == Compression.NONE:
        # Parse in place (one copy for fast bytes indexing), so error offsets are batch offsets.
        return _parse_records(bytes(view[:size]), HEADER_SIZE, header)
    data = decompress(codec, view[HEADER_SIZE:size])
    try:
        return _parse_records(data, 0, header)
    except ProtocolError as e:
        raise ProtocolError(f"in the decompressed {codec.name} records: {e}") from None


def _parse_records(data: bytes, pos: int, header: BatchHeader) -> list[Record]:
    end = len(data)
    base_offset = header.base_offset
    base_ts = header.base_timestamp
    append_time = header.max_timestamp if header.attributes & _ATTR_LOG_APPEND_TIME else None
    records: list[Record] = []
    for index in range(header.records_count):
        length, pos = _read_zigzag(data, pos, 5, 32, f"record {index} length varint")
        rec_start = pos
        rec_end = pos + length
        if length <= 0 or rec_end > end:
            raise ProtocolError(f"record {index} claims {length} bytes, {end - pos} left", rec_start)
        pos += 1  # record attributes: unused by every version so far
        ts_delta, pos = _read_zigzag(data, pos, 10, 64, f"record {index} timestamp delta varlong")
        offset_delta, pos = _read_zigzag(data, pos, 5, 32, f"record {index} offset delta varint")
        key, pos = _read_nullable_bytes(data, pos, rec_end, index, "key")
        value, pos = _read_nullable_bytes(data, pos, rec_end, index, "value")
        count, pos = _read_zigzag(data, pos, 5, 32, f"record {index} header count varint")
        if count < 0 or 2 * count > rec_end - pos:  # every header takes at least two bytes
            raise ProtocolError(f"record {index} claims {count} headers in {rec_end - pos} bytes", pos)
        headers: list[tuple[str, bytes | None]] = []
        for _ in range(count):
            hkey, pos = _read_nullable_bytes(data, pos, rec_end, index, "header key")
            if hkey is None:
                raise ProtocolError(f"record {index} has a header with a null key", pos - 1)
            hvalue, pos = _read_nullable_bytes(data, pos, rec_end, index, "header value")
            headers.append((hkey.decode("utf-8", "surrogateescape"), hvalue))
        if pos != rec_end:
            raise ProtocolError(f"record {index} declares {length} bytes but its fields take {pos - rec_start}", rec_start)
        timestamp = base_ts + ts_delta if append_time is None else append_time
        records.append(Record(base_offset + offset_delta, timestamp, key, value, headers))
    if pos != end:
        raise ProtocolError(f"{end - pos} bytes follow the {header.records_count} records the header declares", pos)
    return records


def _read_nullable_bytes(data: bytes, pos: int, rec_end: int, index: int, what: str) -> tuple[bytes | None, int]:
    n, pos = _read_zigzag(data, pos, 5, 32, f"record {index} {what} length varint")
    if n < 0:
        return None, pos
    if n > rec_end - pos:
        raise ProtocolError(f"record {index} {what} of {n} bytes overruns its record ({rec_end - pos} left)", pos)
    return data[pos : pos + n], pos + n


def decode_control_record(record: Record) -> tuple[int, int]:
    """(version, type) from a control record's key; type 0 is ABORT, 1 COMMIT (see ControlType)."""
    key = record.key
    if key is None or len(key) < _CONTROL_KEY.size:
        raise ProtocolError(f"control record key is {'null' if key is None else f'{len(key)} bytes'}, needs 4")
    version, kind = _CONTROL_KEY.unpack_from(key)
    if version < 0:
        raise ProtocolError(f"control record key has negative version {version}")
    return version, kind


def make_control_record(offset: int, timestamp: int, control_type: int, coordinator_epoch: int = 0) -> Record:
    """A transaction marker record (version 0 key and value) for :func:`build_batch` with is_control."""
    return Record(offset, timestamp, _CONTROL_KEY.pack(0, control_type), _CONTROL_VALUE.pack(0, coordinator_epoch), [])


def _append_nullable(out: bytearray, data: bytes | None) -> None:
    if data is None:
        out += b"\x01"  # zigzag(-1)
    else:
        out += encode_varint(len(data))
        out += data


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
    timestamp_type: int = TimestampType.CREATE_TIME,
) -> bytes:
    """One v2 batch holding ``records``, CRC filled in.

    Offsets become deltas from ``base_offset`` and must increase; timestamps become deltas from
    the first record's. Out-of-range arguments raise ValueError (caller bugs, not bad input).
    """
    if not records:
        raise ValueError("a batch holds at least one record")
    codec = Compression(compression)
    ts_type = TimestampType(timestamp_type)
    base_ts = records[0].timestamp
    body = bytearray()
    previous = base_offset - 1
    for r in records:
        if r.offset <= previous:
            raise ValueError(f"record offset {r.offset} does not follow {previous}")
        previous = r.offset
        rec = bytearray(b"\x00")  # attributes
        rec += encode_varlong(r.timestamp - base_ts)
        rec += encode_varint(r.offset - base_offset)
        _append_nullable(rec, r.key)
        _append_nullable(rec, r.value)
        rec += encode_varint(len(r.headers))
        for hkey, hvalue in r.headers:
            _append_nullable(rec, hkey.encode("utf-8", "surrogateescape"))
            _append_nullable(rec, hvalue)
        body += encode_varint(len(rec))
        body += rec
    payload = compress(codec, bytes(body))
    attributes = (
        int(codec)
        | (_ATTR_LOG_APPEND_TIME if ts_type == TimestampType.LOG_APPEND_TIME else 0)
        | (_ATTR_TRANSACTIONAL if is_transactional else 0)
        | (_ATTR_CONTROL if is_control else 0)
    )
    try:
        header = _HEADER.pack(
            base_offset,
            MIN_BATCH_LENGTH + len(payload),
            partition_leader_epoch,
            MAGIC,
            0,  # CRC, filled in below once the covered bytes exist
            attributes,
            records[-1].offset - base_offset,
            base_ts,
            max(r.timestamp for r in records),
            producer_id,
            producer_epoch,
            base_sequence,
            len(records),
        )
    except struct.error as e:
        raise ValueError(f"batch header field out of range: {e}") from None
    batch = bytearray(header)
    batch += payload
    _CRC.pack_into(batch, _CRC_AT, crc32c.crc32c(memoryview(batch)[_CRC_START:]))
    return bytes(batch)
