"""Record batches to Spark rows: read_committed against a model of transactional logs, every
column, the column walkers (C and Python) against the list-based builder they replaced, header
keys that are not UTF-8, malformed batches, and the data source's offset arithmetic
(maxOffsetsPerTrigger shares, option names)."""

from __future__ import annotations

import datetime
import logging

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from protocol.compression import Compression
from protocol.control_records import ControlType, make_control_record
from protocol.errors import ProtocolError
from protocol.record_batch import read_header
from protocol.record_columns import COMPILED
from protocol.records import Record, build_batch
from tests.bench.record_decode import ListRowBuilder
from tests.unit.test_record_columns import batches as random_batches
from tiering.spark import rows as rows_module
from tiering.spark.rows import NO_END, AbortedTransactions, RowBuilder, arrow_schema, batches_to_rows
from tiering.spark.splits import CaseInsensitiveOptions
from tiering.spark.stream import _rate_limit

# The C walker when built (test_record_columns.py fails when it is not), and the Python one.
WALKERS = [pytest.param(True, marks=pytest.mark.skipif(not COMPILED, reason="protocol._record_columns is not built")),
           False]


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


def _build(builder, batches: list[bytes], start: int, until: int) -> pa.Table:
    out = [b for raw in batches for b in batches_to_rows(raw, builder, start, until, None)]
    last = builder.flush()
    table = pa.Table.from_batches([*out, *([last] if last is not None else [])], schema=builder.schema)
    for batch in table.to_batches():
        batch.validate(full=True)  # offsets, bitmaps and UTF-8 as Arrow checks them
    return table


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(random_batches(keys=st.text(max_size=6)), min_size=1, max_size=3), st.booleans(), st.integers(1, 9),
       st.data())
def test_the_column_walkers_build_what_the_list_builder_built(batches, headers, rows_per_batch, data):
    first, last = read_header(batches[0]).base_offset, max(read_header(b).last_offset for b in batches)
    start = data.draw(st.integers(first - 1, last + 1))
    until = data.draw(st.integers(start, last + 2))
    batches.sort(key=lambda b: read_header(b).base_offset)
    want = _build(ListRowBuilder("t", 4, headers, rows_per_batch), batches, start, until)
    for compiled in {COMPILED, False}:
        got = _build(RowBuilder("t", 4, headers, rows_per_batch, compiled=compiled), batches, start, until)
        assert got.equals(want), (compiled, got.to_pylist(), want.to_pylist())


@pytest.mark.parametrize("compiled", WALKERS)
def test_header_keys_that_are_not_utf8_read_with_replacement_characters(compiled, caplog):
    bad_key = b"bad\xff\xc3".decode("utf-8", "surrogateescape")  # how decode_records gives it
    raw = build_batch([Record(0, 0, None, b"v", [("ok", b"1"), (bad_key, None)])], 0)
    builder = RowBuilder("t", 1, True, rows_per_batch=1, compiled=compiled)
    with caplog.at_level(logging.WARNING, logger="tiering.spark.rows"):
        table = _build(builder, [raw, build_batch([Record(1, 0, None, b"w", [("\udcfe", b"")])], 1)], 0, 10)
    assert table.column("headers").to_pylist() == [[{"key": "ok", "value": b"1"}, {"key": "bad\ufffd\ufffd", "value": None}],
                                                   [{"key": "\ufffd", "value": b""}]]
    assert builder.replaced_header_keys == 2
    assert [r.getMessage() for r in caplog.records] == [
        "t-1: 1 header key(s) are not valid UTF-8; each invalid sequence reads as U+FFFD, as Kafka's Java client "
        "decodes them"]  # once per builder, at the first Arrow batch that has one


def test_a_batch_is_handed_out_once_it_holds_max_batch_bytes(monkeypatch):
    monkeypatch.setattr(rows_module, "MAX_BATCH_BYTES", 2500)
    raw = build_batch([Record(i, 0, None, bytes(1000), []) for i in range(10)])
    builder = RowBuilder("t", 0, False)
    sizes = [b.num_rows for b in batches_to_rows(raw, builder, 0, 100, None)]
    assert sizes == [10] and builder.flush() is None  # checked between Kafka batches
    raws = [build_batch([Record(i, 0, None, bytes(1000), [])], i) for i in range(10)]
    sizes = [b.num_rows for b in batches_to_rows(b"".join(raws), builder, 0, 100, None)]
    assert sizes == [3, 3, 3] and builder.flush().num_rows == 1


@pytest.mark.parametrize("compiled", WALKERS)
def test_a_malformed_batch_is_a_protocol_error_and_adds_no_rows(compiled):
    good = build_batch([Record(0, 0, b"k", b"v", [])], 0)
    bad = bytearray(build_batch([Record(1, 0, b"k", b"v", [])], 1))
    bad[-1] ^= 0xFF  # the last record's header count; the CRC no longer matches
    builder = RowBuilder("t", 0, False, compiled=compiled)
    with pytest.raises(ProtocolError, match="CRC mismatch"):
        list(batches_to_rows(good + bytes(bad), builder, 0, 10, None))
    assert builder.flush().column("offset").to_pylist() == [0]


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
