"""The records of v2 batches as column buffers in Arrow's layouts, with no Python object per record.

:class:`RecordColumns` accumulates the rows of many batches (``add``: one whole batch, its records
with ``start <= offset < until``) and hands them out as plain buffers (``take``:
:class:`ColumnBuffers`); wrapping them into Arrow arrays is the caller's business
(:mod:`tiering.spark.rows`), so ``protocol`` stays free of pyarrow. Buffers, all native-endian:

- ``offsets``, ``timestamps``: int64 per row (timestamps in microseconds; with LOG_APPEND_TIME
  every record's is the batch's max_timestamp, as Kafka defines); ``timestamp_types``: int32 per
  row (0 CREATE_TIME, 1 LOG_APPEND_TIME);
- ``keys``, ``values``: :class:`BinaryColumn` (int32 offsets, data, LSB-first validity bitmap,
  None when nothing is null), a Kafka length of -1 being a null;
- ``headers`` (when asked for): int32 list offsets per row into the header keys (UTF-8, never
  null) and header values (binary, nullable).

The batch is checked as :func:`protocol.records.decode_records` checks it (truncation, CRC,
record count, codec, every record's varints and lengths) and a bad one raises the same
ProtocolError; it then adds no rows at all. A timestamp that does not fit a long in microseconds
(Arrow's and Spark's unit) is a ProtocolError too.

Header keys that are not valid UTF-8 (Arrow strings must be) have each invalid sequence replaced by
U+FFFD, as Kafka's Java client decodes them (``new String(bytes, UTF_8)``), so Spark's own Kafka
source shows the same keys; ``ColumnBuffers.replaced_header_keys`` counts them so callers can say
so. Header values stay raw bytes.

The walker is the C extension :mod:`protocol._record_columns` when the install compiled it
(:data:`COMPILED`), else :class:`_PyColumns`, which parses with :mod:`protocol.records` and fills
the same buffers byte for byte (and raises the same errors, messages included).
"""

from __future__ import annotations

from array import array
from itertools import accumulate
from typing import NamedTuple

import crc32c

from protocol.buffers import Buffer, _as_view
from protocol.compression import Compression, decompress
from protocol.errors import ProtocolError
from protocol.record_batch import (
    _ATTR_LOG_APPEND_TIME,
    _CRC_AT,
    _CRC_START,
    _RECORDS_COUNT_AT,
    HEADER_SIZE,
    MAGIC,
    BatchHeader,
    read_header,
)
from protocol.records import _parse_records

try:
    from protocol import _record_columns
except ImportError:  # built without a C compiler: the Python walker below
    _record_columns = None

COMPILED = _record_columns is not None

_INT64_MIN, _INT64_MAX = -(1 << 63), (1 << 63) - 1
_INT32_MAX = (1 << 31) - 1
_MICROS_MIN, _MICROS_MAX = -(_INT64_MAX // 1000), _INT64_MAX // 1000  # C's division truncates


class BinaryColumn(NamedTuple):
    length: int
    offsets: bytearray  # int32, length + 1
    data: bytearray
    validity: bytearray | None  # bit i set: entry i is not null; None when no entry is
    nulls: int


class HeaderColumns(NamedTuple):
    offsets: bytearray  # int32, rows + 1: row i's headers are entries offsets[i] .. offsets[i + 1] - 1
    keys: BinaryColumn
    values: BinaryColumn


class ColumnBuffers(NamedTuple):
    rows: int
    offsets: bytearray
    timestamps: bytearray
    timestamp_types: bytearray
    keys: BinaryColumn
    values: BinaryColumn
    headers: HeaderColumns | None
    replaced_header_keys: int


class RecordColumns:
    """Rows of many batches as column buffers; ``compiled`` picks the walker (default: the C one
    when built)."""

    def __init__(self, with_headers: bool, compiled: bool = COMPILED) -> None:
        if compiled and _record_columns is None:
            raise RuntimeError("protocol._record_columns is not built (reinstall with a C compiler)")
        self._walker = _record_columns.Columns(with_headers) if compiled else _PyColumns(with_headers)

    @property
    def rows(self) -> int:
        return self._walker.rows

    @property
    def nbytes(self) -> int:
        """Key, value and header bytes buffered."""
        return self._walker.nbytes

    def add(self, batch: Buffer, start: int, until: int, header: BatchHeader | None = None) -> None:
        """The records of one whole v2 batch (``header``: its header, if the caller has read it)
        with ``start <= offset < until``; ProtocolError, and no rows added, if the batch is bad."""
        view = _as_view(batch)
        if header is None:
            header = read_header(view)
        size = header.size
        if len(view) < size:
            raise ProtocolError(f"batch truncated: {len(view)} of {size} bytes", len(view))
        actual = crc32c.crc32c(view[_CRC_START:size])
        if actual != header.crc:
            raise ProtocolError(f"CRC mismatch: header says {header.crc:#010x}, bytes give {actual:#010x}", _CRC_AT)
        if header.records_count < 0:
            raise ProtocolError(f"negative record count {header.records_count}", _RECORDS_COUNT_AT)
        fields = (header.records_count, header.base_offset, header.base_timestamp, header.max_timestamp,
                  bool(header.attributes & _ATTR_LOG_APPEND_TIME),
                  min(max(start, _INT64_MIN), _INT64_MAX), min(max(until, _INT64_MIN), _INT64_MAX))
        codec = header.compression
        if codec == Compression.NONE:  # walked in place, so error offsets are batch offsets
            self._walker.add(view[:size], HEADER_SIZE, *fields)
            return
        data = decompress(codec, view[HEADER_SIZE:size])
        try:
            self._walker.add(data, 0, *fields)
        except ProtocolError as e:
            raise ProtocolError(f"in the decompressed {codec.name} records: {e}") from None

    def take(self) -> ColumnBuffers:
        """Every buffered row's buffers (each buffer then belongs to the caller); starts afresh."""
        rows, offsets, timestamps, types, keys, values, headers, replaced = self._walker.take()
        if headers is not None:
            headers = HeaderColumns(headers[0], BinaryColumn(*headers[1]), BinaryColumn(*headers[2]))
        return ColumnBuffers(rows, offsets, timestamps, types, BinaryColumn(*keys), BinaryColumn(*values), headers,
                             replaced)


class _PyColumns:
    """The C walker's twin: the records from :func:`protocol.records._parse_records` in lists,
    turned into the same buffers at :meth:`take` by whole-list operations."""

    def __init__(self, with_headers: bool) -> None:
        self.with_headers = with_headers
        self._reset()

    def _reset(self) -> None:
        self.rows = self.replaced = 0
        self._offsets: list[int] = []
        self._timestamps: list[int] = []
        self._types: list[int] = []
        self._keys: list[bytes | None] = []
        self._values: list[bytes | None] = []
        self._header_ends: list[int] = []  # per row: header entries so far, its own included
        self._hkeys: list[bytes] = []
        self._hvalues: list[bytes | None] = []
        self._sizes = [0, 0, 0, 0]  # data bytes of keys, values, header keys, header values

    @property
    def nbytes(self) -> int:
        return sum(self._sizes)

    def add(self, data: Buffer, pos: int, count: int, base_offset: int, base_timestamp: int, max_timestamp: int,
            log_append_time: bool, start: int, until: int) -> None:
        # _parse_records reads only these header fields.
        header = BatchHeader(base_offset, 0, 0, MAGIC, 0, _ATTR_LOG_APPEND_TIME if log_append_time else 0, 0,
                             base_timestamp, max_timestamp, -1, -1, -1, count)
        records = _parse_records(bytes(data), pos, header)
        lists = (self._offsets, self._timestamps, self._types, self._keys, self._values, self._header_ends,
                 self._hkeys, self._hvalues)
        before, replaced = [len(x) for x in lists], self.replaced
        ts_type = 1 if log_append_time else 0
        bad = None
        for index, record in enumerate(records):
            if not start <= record.offset < until:
                continue
            if bad is None and not _MICROS_MIN <= record.timestamp <= _MICROS_MAX:
                bad = index
            self._offsets.append(record.offset)
            self._timestamps.append(record.timestamp * 1000)
            self._types.append(ts_type)
            self._keys.append(record.key)
            self._values.append(record.value)
            if self.with_headers:
                for key, value in record.headers:
                    self._hkeys.append(self._utf8(key))
                    self._hvalues.append(value)
                self._header_ends.append(len(self._hkeys))
        sizes = [size + sum(map(len, filter(None, column[n:]))) for size, column, n in
                 zip(self._sizes, lists[3:5] + lists[6:], before[3:5] + before[6:], strict=True)]
        problem = None
        if bad is not None:
            problem = f"record {bad} timestamp does not fit a long in microseconds"
        elif max(sizes) > _INT32_MAX:
            problem = "more than 2 GiB of record data in one Arrow column; take() the rows sooner"
        elif len(self._hkeys) > _INT32_MAX:
            problem = "more than 2**31 headers in one Arrow column"
        if problem is not None:  # forget the batch's rows, as the C walker does
            for column, n in zip(lists, before, strict=True):
                del column[n:]
            self.replaced = replaced
            raise ProtocolError(problem)
        self._sizes = sizes
        self.rows = len(self._offsets)

    def _utf8(self, key: str) -> bytes:
        try:
            return key.encode()
        except UnicodeEncodeError:  # surrogate escapes: the key's bytes were not UTF-8
            self.replaced += 1
            return key.encode("utf-8", "surrogateescape").decode("utf-8", "replace").encode()

    def take(self) -> tuple:
        headers = None
        if self.with_headers:
            headers = (bytearray(array("i", [0, *self._header_ends])), _binary(self._hkeys), _binary(self._hvalues))
        out = (self.rows, bytearray(array("q", self._offsets)), bytearray(array("q", self._timestamps)),
               bytearray(array("i", self._types)), _binary(self._keys), _binary(self._values), headers, self.replaced)
        self._reset()
        return out


_BIT_CHARS = bytes.maketrans(b"\x00\x01", b"01")


def _binary(entries: list[bytes | None]) -> tuple[int, bytearray, bytearray, bytearray | None, int]:
    """(length, offsets, data, validity or None, nulls), as the C walker hands a column over."""
    n = len(entries)
    offsets = array("i", accumulate([0 if e is None else len(e) for e in entries], initial=0))
    nulls = entries.count(None)
    validity = None
    if nulls:
        # LSB-first bitmap: entry i is bit i of a little-endian integer, written here as binary
        # digits, most significant (the last entry) first.
        bits = int(bytes(e is not None for e in reversed(entries)).translate(_BIT_CHARS), 2)
        validity = bytearray(bits.to_bytes((n + 7) // 8, "little"))
    return n, bytearray(offsets), bytearray(b"".join(filter(None, entries))), validity, nulls
