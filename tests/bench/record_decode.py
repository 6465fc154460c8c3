"""Kafka record batches into Arrow record batches, in one process: the Spark source's row building
(``batches_to_rows`` + ``RowBuilder.flush``) three ways, side by side in one run:

- baseline: the RowBuilder before the column walker (:class:`ListRowBuilder`, kept here as it was):
  ``decode_records`` makes a Record per record, Python lists collect the fields, ``pa.array``
  converts them;
- compiled: today's RowBuilder with the C walker (``protocol._record_columns``);
- python: today's RowBuilder with the pure-Python walker (what a machine without a C compiler gets).

For 1000-byte and 100-byte values (half random, half constant, as tests/bench/spark_backfill.py
produces them; decimal keys, no headers), uncompressed and LZ4, in batches of ``--batch-records``.
Prints records/s and value MB/s, best of ``--repeat`` runs, and each figure as a ratio of the
baseline. No assertions: tests/unit/test_kafka_rows.py checks that the builders agree.

    python -m tests.bench.record_decode [--megabytes 40] [--batch-records 1000] [--repeat 3]
"""

from __future__ import annotations

import argparse
import random
import time
from collections.abc import Callable

import pyarrow as pa

from protocol.compression import Compression
from protocol.record_batch import BatchHeader, TimestampType
from protocol.record_columns import COMPILED
from protocol.records import Record, build_batch, decode_records
from tiering.spark.rows import _HEADER_TYPE, RowBuilder, arrow_schema, batches_to_rows


class ListRowBuilder:
    """The RowBuilder as it was before protocol.record_columns (the baseline; same interface)."""

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


def record_set(megabytes: int, value_bytes: int, codec: Compression, per_batch: int) -> tuple[bytes, int]:
    """Batches of ``per_batch`` records, about ``megabytes`` of values in all; (bytes, records)."""
    rng = random.Random(7)
    half = value_bytes // 2
    count = (megabytes << 20) // value_bytes
    out = []
    for base in range(0, count, per_batch):
        records = [Record(o, 1_700_000_000_000 + o, str(o).encode(), rng.randbytes(half) + b"x" * (value_bytes - half),
                          []) for o in range(base, min(base + per_batch, count))]
        out.append(build_batch(records, base, codec))
    return b"".join(out), count


def read_all(data: bytes, make_builder: Callable[[], RowBuilder | ListRowBuilder]) -> tuple[float, int]:
    """Seconds to turn every record of ``data`` into Arrow record batches, and the rows made."""
    started = time.perf_counter()
    builder = make_builder()
    rows = sum(b.num_rows for b in batches_to_rows(data, builder, 0, 1 << 62, None))
    last = builder.flush()
    rows += 0 if last is None else last.num_rows
    return time.perf_counter() - started, rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--megabytes", type=int, default=40, help="values per case (default 40)")
    parser.add_argument("--batch-records", type=int, default=1000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    builders = {
        "baseline (decode_records + lists + pa.array)": lambda: ListRowBuilder("t", 0, False),
        "compiled walker (protocol._record_columns)": lambda: RowBuilder("t", 0, False, compiled=True),
        "pure-Python walker (the fallback)": lambda: RowBuilder("t", 0, False, compiled=False),
    }
    if not COMPILED:
        print("protocol._record_columns is not built: no compiled figures")
        del builders["compiled walker (protocol._record_columns)"]
    print(f"{'case':22} {'builder':46} {'records/s':>10} {'MB/s':>8} {'vs baseline':>11}")
    for value_bytes in (1000, 100):
        for codec in (Compression.NONE, Compression.LZ4):
            data, count = record_set(args.megabytes, value_bytes, codec, args.batch_records)
            case = f"{value_bytes} B values, {codec.name.lower()}"
            base = None
            for name, make in builders.items():
                seconds = min(read_all(data, make)[0] for _ in range(args.repeat))
                rate = count / seconds
                base = base or rate
                print(f"{case:22} {name:46} {rate:10.0f} {count * value_bytes / seconds / 1e6:8.1f} "
                      f"{rate / base:10.2f}x")


if __name__ == "__main__":
    main()
