"""Record batches to Spark rows: read_committed against a model of transactional logs, every
column, and the data source's offset arithmetic (maxOffsetsPerTrigger shares, option names)."""

from __future__ import annotations

import datetime

import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from protocol.compression import Compression
from protocol.control_records import ControlType, make_control_record
from protocol.records import Record, build_batch
from tiering.spark.rows import NO_END, AbortedTransactions, RowBuilder, arrow_schema, batches_to_rows
from tiering.spark.source import CaseInsensitiveOptions, _rate_limit


@st.composite
def transactional_logs(draw):
    """A log of plain batches and transactions of three producers (interleaved, most ending in a
    COMMIT or ABORT marker); returns (bytes, committed offsets, every data offset, aborted txns,
    end offset, offsets of transactions left open)."""
    log = bytearray()
    offset = 0
    committed: list[int] = []
    everything: list[int] = []
    aborted: list[tuple[int, int, int]] = []
    open_txns: dict[int, tuple[int, list[int]]] = {}
    for _ in range(draw(st.integers(1, 25))):
        kind = draw(st.sampled_from(["plain", "txn", "end"]))
        producer = draw(st.sampled_from([11, 22, 33]))
        if kind == "end" and producer in open_txns:
            first, offsets = open_txns.pop(producer)
            abort = draw(st.booleans())
            control = ControlType.ABORT if abort else ControlType.COMMIT
            log += build_batch([make_control_record(offset, 1000 + offset, control)], offset, producer_id=producer,
                               producer_epoch=0, is_transactional=True, is_control=True)
            if abort:
                aborted.append((producer, first, offset))
            else:
                committed += offsets
            offset += 1
            continue
        count = draw(st.integers(1, 4))
        records = [Record(offset + i, 1000 + offset + i, f"k{offset + i}".encode(), f"v{offset + i}".encode(),
                          [("h", str(offset + i).encode())]) for i in range(count)]
        codec = draw(st.sampled_from(list(Compression)))
        offsets = list(range(offset, offset + count))
        everything += offsets
        if kind == "txn":
            log += build_batch(records, offset, codec, producer_id=producer, producer_epoch=0, base_sequence=0,
                               is_transactional=True)
            first, pending = open_txns.get(producer, (offset, []))
            open_txns[producer] = (first, pending + offsets)
        else:
            log += build_batch(records, offset, codec)
            committed += offsets
        offset += count
    still_open = {o for _, offsets in open_txns.values() for o in offsets}  # above the LSO in Kafka
    return bytes(log), sorted(committed), everything, aborted, offset, still_open


def _offsets(batches: list[pa.RecordBatch]) -> list[int]:
    return [o for b in batches for o in b.column("offset").to_pylist()]


def _read(raw: bytes, start: int, until: int, aborted: AbortedTransactions | None) -> list[pa.RecordBatch]:
    builder = RowBuilder("t", 3, include_headers=True, rows_per_batch=7)
    out = list(batches_to_rows(raw, builder, start, until, aborted))
    last = builder.flush()
    return out + ([last] if last is not None else [])


@settings(max_examples=200, deadline=None)
@given(transactional_logs(), st.data())
def test_read_committed_matches_the_model(log, data):
    raw, committed, everything, aborted, end, open_offsets = log
    start = data.draw(st.integers(0, end))
    until = data.draw(st.integers(start, end))
    # A transaction index gives every entry (with its end); the reader drops those that ended before.
    rows = _read(raw, start, until, AbortedTransactions(aborted))
    visible = [o for o in committed if start <= o < until]
    assert [o for o in _offsets(rows) if o not in open_offsets] == [o for o in visible if o not in open_offsets]
    # A Fetch answer gives only the transactions overlapping the read, without their ends.
    overlapping = [(p, f, NO_END) for p, f, last in aborted if last >= start]
    rows = _read(raw, start, until, AbortedTransactions(overlapping))
    assert [o for o in _offsets(rows) if o not in open_offsets] == [o for o in visible if o not in open_offsets]
    # read_uncommitted: every data record, no markers.
    rows = _read(raw, start, until, None)
    assert _offsets(rows) == [o for o in everything if start <= o < until]


def test_every_column():
    raw = build_batch([Record(5, 1_700_000_000_123, b"k", b"v", [("a", b"1"), ("b", None)]),
                       Record(6, 1_700_000_000_124, None, None, [])], 5, Compression.ZSTD)
    builder = RowBuilder("orders", 2, include_headers=True)
    batches = list(batches_to_rows(raw, builder, 0, 100, None))
    last = builder.flush()
    table = pa.Table.from_batches([*batches, last], schema=arrow_schema(True)).to_pylist()
    stamp = datetime.datetime(2023, 11, 14, 22, 13, 20, 123000, tzinfo=datetime.UTC)
    assert table[0] == {"key": b"k", "value": b"v", "topic": "orders", "partition": 2, "offset": 5,
                        "timestamp": stamp, "timestampType": 0,
                        "headers": [{"key": "a", "value": b"1"}, {"key": "b", "value": None}]}
    assert table[1]["key"] is None and table[1]["value"] is None and table[1]["headers"] == []


@given(st.dictionaries(st.integers(0, 20), st.tuples(st.integers(0, 10**6), st.integers(0, 10**5)), min_size=1),
       st.integers(1, 10**6))
def test_rate_limit_shares(lags, limit):
    begin = {("t", p): b for p, (b, _) in lags.items()}
    end = {("t", p): b + lag for p, (b, lag) in lags.items()}
    limited = _rate_limit(begin, end, limit)
    assert all(begin[tp] <= limited[tp] <= end[tp] for tp in end)
    total = sum(end[tp] - begin[tp] for tp in end)
    taken = sum(limited[tp] - begin[tp] for tp in end)
    assert taken == min(total, limit)


def test_options_are_case_insensitive():
    options = CaseInsensitiveOptions({"startingoffsets": "earliest", "kafka.bootstrap.servers": "p:1"})
    assert options.get("startingOffsets") == "earliest" and "StartingOffsets" in options
    assert options["Kafka.Bootstrap.Servers"] == "p:1" and options.get("endingOffsets") is None
