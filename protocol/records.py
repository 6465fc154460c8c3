"""The records inside a v2 batch: decoding them all (decompressed, with absolute offsets and
timestamps) and building a batch from records, CRC filled in.

Each record in the (possibly compressed) records section is, in Kafka's zigzag varints
(:mod:`protocol.varint`)::

    length varint | attributes int8 | timestampDelta varlong | offsetDelta varint |
    keyLength varint | key | valueLength varint | value | headerCount varint |
    (headerKeyLength varint | headerKey | headerValueLength varint | headerValue)*

with -1 as the length of a null key, value or header value. The batch header around them is
:mod:`protocol.record_batch`; transaction markers are :mod:`protocol.control_records`.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from typing import NamedTuple

import crc32c

from protocol import record_batch
from protocol.buffers import Buffer, _as_view
from protocol.compression import Compression, compress, decompress
from protocol.errors import ProtocolError
from protocol.record_batch import (
    _ATTR_CONTROL,
    _ATTR_LOG_APPEND_TIME,
    _ATTR_TRANSACTIONAL,
    _CRC_AT,
    _CRC_START,
    _RECORDS_COUNT_AT,
    HEADER_SIZE,
    MAGIC,
    MIN_BATCH_LENGTH,
    BatchHeader,
    TimestampType,
    read_header,
)
from protocol.varint import _read_zigzag, encode_varint, encode_varlong

# Bound by assignment, not by import: CPython compiles `name.method(...)` into a method call (no
# bound method built per call) only for names the module does not import, and these are called
# once per batch built.
_HEADER = record_batch._HEADER
_CRC = record_batch._CRC


class Record(NamedTuple):
    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes | None]]


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
