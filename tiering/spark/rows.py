"""Kafka record batches as rows with the columns of Spark's Kafka source, in Arrow record batches.

Columns: ``key binary, value binary, topic string, partition int, offset long, timestamp
timestamp, timestampType int`` and, when asked, ``headers array<struct<key string, value
binary>>``. Control batches never become rows; with ``read_committed``, records of aborted
transactions are dropped the way Kafka's consumer drops them (an aborted transaction of producer
P, known by its first offset, hides P's transactional batches from there until P's ABORT marker).
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Iterator

import pyarrow as pa

from protocol.control_records import ControlType, decode_control_record
from protocol.record_batch import BatchHeader, TimestampType
from protocol.record_set import iter_batches
from protocol.records import decode_records

BASE_DDL = "key binary, value binary, topic string, partition int, offset long, timestamp timestamp, timestampType int"
HEADERS_DDL = "headers array<struct<key: string, value: binary>>"
_HEADER_TYPE = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))


def spark_ddl(include_headers: bool) -> str:
    return f"{BASE_DDL}, {HEADERS_DDL}" if include_headers else BASE_DDL


def arrow_schema(include_headers: bool) -> pa.Schema:
    fields = [("key", pa.binary()), ("value", pa.binary()), ("topic", pa.string()), ("partition", pa.int32()),
              ("offset", pa.int64()), ("timestamp", pa.timestamp("us", tz="UTC")), ("timestampType", pa.int32())]
    if include_headers:
        fields.append(("headers", _HEADER_TYPE))
    return pa.schema(fields)


NO_END = 1 << 62


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
    """Accumulates rows of one partition and hands them out as Arrow record batches."""

    def __init__(self, topic: str, partition: int, include_headers: bool, rows_per_batch: int = 8192) -> None:
        self.topic = topic
        self.partition = partition
        self.include_headers = include_headers
        self.rows_per_batch = rows_per_batch
        self.schema = arrow_schema(include_headers)
        self.rows = 0
        self._reset()

    def _reset(self) -> None:
        self._keys: list[bytes | None] = []
        self._values: list[bytes | None] = []
        self._offsets: list[int] = []
        self._timestamps: list[int] = []
        self._types: list[int] = []
        self._headers: list[list[dict[str, object]]] = []

    def add_batch(self, header: BatchHeader, batch: memoryview, start: int, until: int) -> None:
        """The batch's records with ``start <= offset < until``."""
        timestamp_type = 1 if header.timestamp_type == TimestampType.LOG_APPEND_TIME else 0
        for record in decode_records(batch):
            if start <= record.offset < until:
                self._keys.append(record.key)
                self._values.append(record.value)
                self._offsets.append(record.offset)
                self._timestamps.append(record.timestamp * 1000)
                self._types.append(timestamp_type)
                if self.include_headers:
                    self._headers.append([{"key": k, "value": v} for k, v in record.headers])

    @property
    def full(self) -> bool:
        return len(self._offsets) >= self.rows_per_batch

    def flush(self) -> pa.RecordBatch | None:
        n = len(self._offsets)
        if n == 0:
            return None
        columns = [
            pa.array(self._keys, pa.binary()), pa.array(self._values, pa.binary()),
            pa.array([self.topic] * n, pa.string()), pa.array([self.partition] * n, pa.int32()),
            pa.array(self._offsets, pa.int64()), pa.array(self._timestamps, pa.timestamp("us", tz="UTC")),
            pa.array(self._types, pa.int32()),
        ]
        if self.include_headers:
            columns.append(pa.array(self._headers, _HEADER_TYPE))
        self.rows += n
        self._reset()
        return pa.RecordBatch.from_arrays(columns, schema=self.schema)


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
