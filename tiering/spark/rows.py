"""Kafka record batches as rows with the columns of Spark's Kafka source, in Arrow record batches.

Columns: ``key binary, value binary, topic string, partition int, offset long, timestamp
timestamp, timestampType int`` and, when asked, ``headers array<struct<key string, value
binary>>`` (a header key that is not UTF-8 reads with U+FFFD: :mod:`protocol.record_columns`).
Control batches never become rows; with ``read_committed``, records of aborted transactions are
dropped the way Kafka's consumer drops them (an aborted transaction of producer P, known by its
first offset, hides P's transactional batches from there until P's ABORT marker).
"""

from __future__ import annotations

import heapq
import logging
from collections.abc import Iterable, Iterator

import pyarrow as pa

from protocol.control_records import ControlType, decode_control_record
from protocol.record_batch import BatchHeader
from protocol.record_columns import COMPILED, BinaryColumn, RecordColumns
from protocol.record_set import iter_batches
from protocol.records import decode_records

log = logging.getLogger(__name__)

BASE_DDL = "key binary, value binary, topic string, partition int, offset long, timestamp timestamp, timestampType int"
HEADERS_DDL = "headers array<struct<key: string, value: binary>>"
_HEADER_TYPE = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))
_TIMESTAMP = pa.timestamp("us", tz="UTC")


def spark_ddl(include_headers: bool) -> str:
    return f"{BASE_DDL}, {HEADERS_DDL}" if include_headers else BASE_DDL


def arrow_schema(include_headers: bool) -> pa.Schema:
    fields = [("key", pa.binary()), ("value", pa.binary()), ("topic", pa.string()), ("partition", pa.int32()),
              ("offset", pa.int64()), ("timestamp", _TIMESTAMP), ("timestampType", pa.int32())]
    if include_headers:
        fields.append(("headers", _HEADER_TYPE))
    return pa.schema(fields)


NO_END = 1 << 62
MAX_BATCH_BYTES = 64 << 20


class AbortedTransactions:
    """Kafka consumer's read_committed filter over a run of batches in offset order.

    ``aborted``: (producer id, first offset, last offset), the last offset being the ABORT marker's
    (from a transaction index) or unknown (``NO_END``, from a Fetch answer). A transaction that
    ended before the first batch read is ignored, so callers may pass a superset."""

    def __init__(self, aborted: Iterable[tuple[int, int, int]]) -> None:
        self._pending = [(first, last, producer) for producer, first, last in aborted]
        heapq.heapify(self._pending)
        self._active: set[int] = set()

    def skip(self, header: BatchHeader, batch: memoryview) -> bool:
        """Whether the batch's records are hidden (control batches always are)."""
        while self._pending and self._pending[0][0] <= header.last_offset:
            _, last, producer = heapq.heappop(self._pending)
            if last >= header.base_offset:
                self._active.add(producer)
        if header.is_control:
            if header.producer_id in self._active:
                records = decode_records(batch)
                if records and decode_control_record(records[0])[1] == ControlType.ABORT:
                    self._active.discard(header.producer_id)
            return True
        return header.is_transactional and header.producer_id in self._active


class RowBuilder:
    """Accumulates rows of one partition and hands them out as Arrow record batches.

    The records go straight into column buffers (:mod:`protocol.record_columns`, a C walker when
    built), which become Arrow arrays without a copy; the batch is handed out once it holds
    ``rows_per_batch`` rows or ``MAX_BATCH_BYTES`` of keys, values and headers (so a few huge
    records cannot pile up gigabytes, nor outgrow Arrow's int32 offsets)."""

    def __init__(self, topic: str, partition: int, include_headers: bool, rows_per_batch: int = 8192,
                 compiled: bool = COMPILED) -> None:
        self.topic = topic
        self.partition = partition
        self.include_headers = include_headers
        self.rows_per_batch = rows_per_batch
        self.schema = arrow_schema(include_headers)
        self.rows = 0
        self.replaced_header_keys = 0
        self._columns = RecordColumns(include_headers, compiled)  # compiled=False: the Python walker

    def add_batch(self, header: BatchHeader, batch: memoryview, start: int, until: int) -> None:
        """The batch's records with ``start <= offset < until``."""
        self._columns.add(batch, start, until, header)

    @property
    def full(self) -> bool:
        return self._columns.rows >= self.rows_per_batch or self._columns.nbytes >= MAX_BATCH_BYTES

    def flush(self) -> pa.RecordBatch | None:
        if self._columns.rows == 0:
            return None
        buffers = self._columns.take()
        n = buffers.rows
        if buffers.replaced_header_keys and not self.replaced_header_keys:  # once per builder: a hint, not a flood
            log.warning("%s-%d: %d header key(s) are not valid UTF-8; each invalid sequence reads as U+FFFD, as "
                        "Kafka's Java client decodes them", self.topic, self.partition, buffers.replaced_header_keys)
        self.replaced_header_keys += buffers.replaced_header_keys
        columns = [
            _binary(pa.binary(), buffers.keys), _binary(pa.binary(), buffers.values),
            pa.repeat(pa.scalar(self.topic, pa.string()), n), pa.repeat(pa.scalar(self.partition, pa.int32()), n),
            _fixed(pa.int64(), n, buffers.offsets), _fixed(_TIMESTAMP, n, buffers.timestamps),
            _fixed(pa.int32(), n, buffers.timestamp_types),
        ]
        if buffers.headers is not None:
            headers = buffers.headers
            pairs = pa.Array.from_buffers(_HEADER_TYPE.value_type, headers.keys.length, [None], null_count=0,
                                          children=[_binary(pa.string(), headers.keys),
                                                    _binary(pa.binary(), headers.values)])
            columns.append(pa.Array.from_buffers(_HEADER_TYPE, n, [None, pa.py_buffer(headers.offsets)], null_count=0,
                                                 children=[pairs]))
        self.rows += n
        return pa.RecordBatch.from_arrays(columns, schema=self.schema)


def _fixed(type_: pa.DataType, n: int, data: bytearray) -> pa.Array:
    return pa.Array.from_buffers(type_, n, [None, pa.py_buffer(data)], null_count=0)


def _binary(type_: pa.DataType, column: BinaryColumn) -> pa.Array:
    validity = None if column.validity is None else pa.py_buffer(column.validity)
    return pa.Array.from_buffers(type_, column.length, [validity, pa.py_buffer(column.offsets),
                                                        pa.py_buffer(column.data)], null_count=column.nulls)


def batches_to_rows(data: bytes | memoryview, builder: RowBuilder, start: int, until: int,
                    aborted: AbortedTransactions | None) -> Iterator[pa.RecordBatch]:
    """Rows of the records in ``data`` (whole batches in offset order) within ``start..until-1``.
    Every batch goes through the read_committed filter, also those before ``start``, so it sees
    the markers."""
    for header, batch in iter_batches(data):
        if header.base_offset >= until:
            break
        if aborted is not None and aborted.skip(header, batch):
            continue
        if header.is_control or header.last_offset < start:
            continue
        builder.add_batch(header, batch, start, until)
        if builder.full:
            out = builder.flush()
            if out is not None:
                yield out
