"""Records of v2 batches as column buffers: the C walker, the pure-Python walker and
``decode_records`` agree on every field of random batches (every codec, nulls, headers,
LOG_APPEND_TIME, start/until); malformed record bytes raise the same ProtocolError from both
walkers whenever ``decode_records`` raises, and a failed batch adds no rows; header keys that are
not UTF-8 read as U+FFFD; the C walker is built and used in this environment."""

from __future__ import annotations

import struct
from array import array

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from protocol.compression import Compression, compress
from protocol.errors import ProtocolError
from protocol.record_batch import _ATTR_LOG_APPEND_TIME, HEADER_SIZE, TimestampType, compute_crc, read_header
from protocol.record_columns import COMPILED, BinaryColumn, ColumnBuffers, RecordColumns
from protocol.records import Record, build_batch, decode_records
from protocol.varint import encode_varint, encode_varlong

CODECS = list(Compression)
FAST = settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])

maybe_bytes = st.none() | st.binary(max_size=30)
# Keys of any bytes, UTF-8 or not: build_batch writes a key's surrogate escapes back as the raw bytes.
header_key = st.text(max_size=6) | st.binary(max_size=6).map(lambda b: b.decode("utf-8", "surrogateescape"))


def records_spec(keys: st.SearchStrategy[str] = header_key) -> st.SearchStrategy[list]:
    return st.lists(st.tuples(maybe_bytes, maybe_bytes, st.lists(st.tuples(keys, maybe_bytes), max_size=3),
                              st.integers(-(10**6), 10**6), st.integers(1, 3)), min_size=1, max_size=12)


@st.composite
def batches(draw, codecs=CODECS, keys: st.SearchStrategy[str] = header_key) -> bytes:
    """One valid batch: random records, gaps between offsets, any codec and timestamp type."""
    base = draw(st.integers(0, 2**40))
    base_ts = draw(st.integers(0, 2**42))
    records, offset = [], base
    for i, (key, value, headers, dt, gap) in enumerate(draw(records_spec(keys))):
        offset = base if i == 0 else offset + gap
        records.append(Record(offset, base_ts + (0 if i == 0 else dt), key, value, headers))
    ts_type = draw(st.sampled_from(list(TimestampType)))
    return build_batch(records, base, draw(st.sampled_from(codecs)), timestamp_type=ts_type)


def rows_of(buffers: ColumnBuffers) -> list[tuple]:
    """The rows the buffers hold, after checking their sizes: (offset, timestamp us, type, key,
    value, [(header key bytes, header value)])."""
    n = buffers.rows
    offsets, stamps, types = (array(code, bytes(b)) for code, b in
                              (("q", buffers.offsets), ("q", buffers.timestamps), ("i", buffers.timestamp_types)))
    assert len(offsets) == len(stamps) == len(types) == n
    keys, values = entries(buffers.keys), entries(buffers.values)
    assert len(keys) == len(values) == n
    headers: list[list] = [[] for _ in range(n)]
    if buffers.headers is not None:
        starts = array("i", bytes(buffers.headers.offsets))
        assert len(starts) == n + 1 and starts[0] == 0 and buffers.headers.keys.nulls == 0
        hkeys, hvalues = entries(buffers.headers.keys), entries(buffers.headers.values)
        assert len(hkeys) == len(hvalues) == starts[-1]
        headers = [list(zip(hkeys[a:b], hvalues[a:b], strict=True)) for a, b in zip(starts, starts[1:], strict=False)]
    return list(zip(offsets, stamps, types, keys, values, headers, strict=True))


def entries(column: BinaryColumn) -> list[bytes | None]:
    ends = array("i", bytes(column.offsets))
    assert len(ends) == column.length + 1 and ends[0] == 0 and ends[-1] == len(column.data)
    if column.validity is None:
        assert column.nulls == 0
        valid = [True] * column.length
    else:
        assert len(column.validity) == (column.length + 7) // 8
        valid = [bool(column.validity[i // 8] >> (i % 8) & 1) for i in range(column.length)]
        assert column.length - sum(valid) == column.nulls
        if column.length % 8:  # Arrow ignores the padding bits; both walkers clear them
            assert column.validity[-1] >> (column.length % 8) == 0
    out = [bytes(column.data[a:b]) if ok else None for a, b, ok in zip(ends, ends[1:], valid, strict=False)]
    assert all(a == b for a, b, ok in zip(ends, ends[1:], valid, strict=False) if not ok)  # nulls take no bytes
    return out


def expected_rows(batch: bytes, start: int, until: int, with_headers: bool = True) -> list[tuple]:
    header = read_header(batch)
    ts_type = 1 if header.attributes & _ATTR_LOG_APPEND_TIME else 0
    return [(r.offset, r.timestamp * 1000, ts_type, r.key, r.value,
             [(utf8(k), v) for k, v in r.headers] if with_headers else [])
            for r in decode_records(batch) if start <= r.offset < until]


def utf8(key: str) -> bytes:
    """A header key as Arrow gets it: its bytes, each invalid UTF-8 sequence as U+FFFD."""
    return key.encode("utf-8", "surrogateescape").decode("utf-8", "replace").encode()


def both(with_headers: bool = True) -> tuple[RecordColumns, RecordColumns]:
    """The C and the Python walker; two Python ones where the C one is not built (the test below
    fails then, the others still check the Python walker)."""
    return RecordColumns(with_headers, compiled=COMPILED), RecordColumns(with_headers, compiled=False)


def add_both(pair: tuple[RecordColumns, RecordColumns], batch: bytes, start: int, until: int) -> str | None:
    """Adds to both walkers; the error message if they raise (the same one, or the test fails)."""
    messages = []
    for columns in pair:
        try:
            columns.add(batch, start, until)
            messages.append(None)
        except ProtocolError as e:
            messages.append(str(e))
    assert messages[0] == messages[1]
    return messages[0]


def take_both(pair: tuple[RecordColumns, RecordColumns]) -> ColumnBuffers:
    compiled, python = (columns.take() for columns in pair)
    assert compiled == python  # byte for byte, bitmaps' padding included
    return compiled


def test_the_compiled_walker_is_built_and_used():
    # CI runs this in an environment installed with `pip install -e .`: a silently failed build
    # (the extension is optional) would otherwise only show as a slower data source.
    assert COMPILED, "protocol._record_columns did not build; see the pip install output"
    from protocol import _record_columns

    assert isinstance(RecordColumns(True)._walker, _record_columns.Columns)


@FAST
@given(st.lists(st.tuples(batches(), st.data()), min_size=1, max_size=4), st.booleans(), st.integers(0, 3))
def test_both_walkers_agree_with_decode_records(drawn, with_headers, take_after):
    pair = both(with_headers)
    want: list[tuple] = []
    for i, (batch, data) in enumerate(drawn):
        header = read_header(batch)
        start = data.draw(st.integers(header.base_offset - 1, header.last_offset + 1), "start")
        until = data.draw(st.integers(start, header.last_offset + 2), "until")
        assert add_both(pair, batch, start, until) is None
        want += expected_rows(batch, start, until, with_headers)
        assert pair[0].rows == pair[1].rows == len(want)
        assert pair[0].nbytes == pair[1].nbytes
        if i == take_after:  # a take() in the middle starts afresh
            assert rows_of(take_both(pair)) == want
            want = []
    buffers = take_both(pair)
    assert rows_of(buffers) == want
    assert (buffers.headers is None) == (not with_headers)


def rebuild(batch: bytes, body: bytes, count: int | None = None) -> bytes:
    """``batch`` with another uncompressed records section (compressed with the batch's codec)."""
    return with_payload(batch, compress(read_header(batch).compression, body), count)


def with_payload(batch: bytes, payload: bytes, count: int | None = None, attributes: int | None = None) -> bytes:
    """``batch`` with another records section as stored, record count and attributes; batch
    length and CRC made to fit."""
    h = read_header(batch)
    head = struct.pack(">qiibIhiqqqhii", h.base_offset, HEADER_SIZE - 12 + len(payload), h.partition_leader_epoch, 2,
                       0, h.attributes if attributes is None else attributes, h.last_offset_delta, h.base_timestamp,
                       h.max_timestamp, -1, -1, -1, h.records_count if count is None else count)
    out = bytearray(head + payload)
    struct.pack_into(">I", out, 17, compute_crc(out))
    return bytes(out)


def body_of(batch: bytes) -> bytes:
    plain = build_batch(decode_records(batch), read_header(batch).base_offset)
    return plain[HEADER_SIZE:]


def timestamp_out_of_range(batch: bytes, start: int, until: int) -> bool:
    limit = (2**63 - 1) // 1000
    return any(not -limit <= r.timestamp <= limit for r in decode_records(batch) if start <= r.offset < until)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(batches(), st.data())
def test_malformed_records_raise_in_both_walkers_whenever_decode_records_does(batch, data):
    body = bytearray(body_of(batch))
    count = read_header(batch).records_count
    kind = data.draw(st.sampled_from(["truncate", "flip", "overwrite", "insert", "append", "count"]), "kind")
    if kind == "truncate":
        del body[data.draw(st.integers(0, len(body) - 1)):]
    elif kind == "flip":
        for _ in range(data.draw(st.integers(1, 3))):
            body[data.draw(st.integers(0, len(body) - 1))] ^= 1 << data.draw(st.integers(0, 7))
    elif kind == "overwrite":
        at = data.draw(st.integers(0, len(body) - 1))
        patch = data.draw(st.binary(min_size=1, max_size=11))  # up to a too-long varlong
        body[at : at + len(patch)] = patch
    elif kind == "insert":
        at = data.draw(st.integers(0, len(body)))
        body[at:at] = data.draw(st.binary(min_size=1, max_size=4))
    elif kind == "append":
        body += data.draw(st.binary(min_size=1, max_size=4))
    else:
        count = data.draw(st.integers(0, count + 2).filter(lambda c: c != count))
    bad = rebuild(batch, bytes(body), count)
    start, until = data.draw(st.sampled_from([(0, 2**62), (read_header(bad).base_offset + 1, 2**62)]), "range")
    try:
        want: list[tuple] | None = expected_rows(bad, start, until)
    except ProtocolError:
        want = None
    pair = both()
    before = build_batch([Record(0, 0, None, b"v", [])])
    assert add_both(pair, before, 0, 1) is None  # a row from before, which must survive a failed add
    message = add_both(pair, bad, start, until)
    # Rows after it take the places of the failed batch's rows (and bits) if it had any.
    after = data.draw(st.integers(0, 9), "rows after")
    if after:
        assert add_both(pair, build_batch([Record(i, 0, None, None, [("h", None)]) for i in range(after)]), 0, 9) is None
    if want is None:
        assert message is not None, "decode_records raised, the walkers did not"
    elif message is not None:  # only a timestamp past Arrow's range fails where decode_records does not
        assert "timestamp does not fit a long in microseconds" in message
        assert timestamp_out_of_range(bad, start, until)
    rows = rows_of(take_both(pair))
    assert rows[0] == (0, 0, 0, None, b"v", [])
    assert rows[1 : len(rows) - after] == ([] if message is not None else want)
    assert rows[len(rows) - after :] == [(i, 0, 0, None, None, [(b"h", None)]) for i in range(after)]


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from([0, 1, 2, 3, 4, 0x7E, 0x7F, 0x80, 0xFF]) | st.integers(0, 255), max_size=60),
       st.integers(0, 4), st.sampled_from([0, _ATTR_LOG_APPEND_TIME]))
def test_random_record_sections_raise_or_decode_alike(body, count, attributes):
    batch = with_payload(build_batch([Record(0, 0, b"k", b"v", [])]), bytes(body), count, attributes)
    try:
        want: list[tuple] | None = expected_rows(batch, -(2**63), 2**63 - 1)
    except ProtocolError:
        want = None
    pair = both()
    message = add_both(pair, batch, -(2**63), 2**63 - 1)
    if want is None:
        assert message is not None, "decode_records raised, the walkers did not"
    elif message is not None:  # a random timestamp delta may be past microseconds in a long
        assert "timestamp does not fit a long in microseconds" in message
    assert rows_of(take_both(pair)) == (want if message is None else [])


def record(body: bytes) -> bytes:
    return encode_varint(len(body)) + body


def simple(key: bytes = b"k", headers: bytes = b"\x00") -> bytes:
    """One record's fields after its length: attributes, deltas, key, value (b"v"), headers."""
    return b"\x00\x00\x00" + encode_varint(len(key)) + key + b"\x02v" + headers


VARLONG_TOO_LONG = b"\x00" + b"\xff" * 10 + b"\x01"


@pytest.mark.parametrize(("body", "count", "fragment"), [
    (encode_varint(-3) + simple(), 1, "record 0 claims -3 bytes"),
    (encode_varint(0) + simple(), 1, "record 0 claims 0 bytes"),
    (encode_varint(40) + simple(), 1, "record 0 claims 40 bytes"),
    (encode_varint(len(simple()) + 1) + simple() + b"\x00", 1, "but its fields take"),
    (record(simple()) + b"\x00\x00", 1, "2 bytes follow the 1 records"),
    (record(simple()), 2, "truncated record 1 length varint"),
    (record(simple(headers=encode_varint(2) + b"\x02a\x00")), 1, "claims 2 headers in 3 bytes"),
    (record(simple(headers=encode_varint(-1))), 1, "claims -1 headers"),
    (record(simple(headers=b"\x02\x01\x02" + b"ab")), 1, "record 0 has a header with a null key"),
    (record(simple(headers=b"\x02\x02a" + encode_varint(9) + b"x")), 1, "header value of 9 bytes overruns"),
    (record(b"\x00" + encode_varlong(1) + b"\x00" + encode_varint(50) + b"k\x02v\x00"), 1, "key of 50 bytes overruns"),
    (record(VARLONG_TOO_LONG), 1, "timestamp delta varlong longer than 10 bytes"),
    (record(b"\x00\x00" + b"\xff\xff\xff\xff\x7f" + b"\x00\x00\x00"), 1, "offset delta varint does not fit 32 bits"),
    (record(b"\x00" + b"\xff" * 9 + b"\x02" + b"\x00\x00\x00\x00"), 1, "timestamp delta varlong does not fit 64 bits"),
    (record(b"\x00\x00\x00" + b"\x80\x80\x80\x80\x80\x01" + b"\x00\x00"), 1, "key length varint longer than 5 bytes"),
])
@pytest.mark.parametrize("codec", [Compression.NONE, Compression.ZSTD])
def test_each_malformation_raises_what_decode_records_raises(body, count, fragment, codec):
    batch = rebuild(build_batch([Record(0, 0, b"k", b"v", [])], 0, codec), body, count)
    with pytest.raises(ProtocolError) as expected:
        decode_records(batch)
    pair = both()
    assert add_both(pair, batch, 0, 10) == str(expected.value)
    assert fragment in str(expected.value)
    assert take_both(pair).rows == 0


def test_batch_level_checks_are_those_of_decode_records():
    batch = build_batch([Record(0, 0, b"k", b"v", [])], 0, Compression.LZ4)
    crc_broken = bytearray(batch)
    crc_broken[-1] ^= 1
    cases = {
        "batch truncated": batch[:-1],
        "CRC mismatch": bytes(crc_broken),
        "negative record count": with_payload(batch, batch[HEADER_SIZE:], count=-1),
        "unknown compression codec 6": with_payload(batch, batch[HEADER_SIZE:], attributes=6),
        "cannot decompress LZ4 records": with_payload(batch, b"\x00" * 8),
    }
    for fragment, broken in cases.items():
        with pytest.raises(ProtocolError) as expected:
            decode_records(broken)
        assert fragment in str(expected.value)
        assert add_both(both(), broken, 0, 10) == str(expected.value)


# Bytes at the edges of UTF-8's ranges (lead bytes, the narrowed second-byte ranges after E0, ED,
# F0 and F4, bytes never valid), so overlongs, surrogates and truncations come up often.
EDGES = [0x00, 0x41, 0x7F, 0x80, 0x8F, 0x90, 0x9F, 0xA0, 0xBF, 0xC0, 0xC1, 0xC2, 0xDF, 0xE0, 0xE1, 0xEC, 0xED,
         0xEE, 0xEF, 0xF0, 0xF1, 0xF3, 0xF4, 0xF5, 0xFF]
raw_key = st.binary(max_size=12) | st.lists(st.sampled_from(EDGES), max_size=12).map(bytes)


# Each rule of UTF-8 at its boundary, valid and not, and truncated sequences.
UTF8_EDGES = [b"\xed\x9f\xbf", b"\xed\xa0\x80", b"\xf4\x8f\xbf\xbf", b"\xf4\x90\x80\x80", b"\xe0\xa0\x80",
              b"\xe0\x9f\xbf", b"\xf0\x90\x80\x80", b"\xf0\x8f\xbf\xbf", b"\xc2\x80", b"\xc1\xbf", b"\xe1\x80",
              b"\xf1\x80\x80", b"\xf3", b"\xf5\x80\x80\x80", b"\xff", b"\x80", b"a\xdf"]


@settings(max_examples=200, deadline=None)
@given(st.lists(raw_key, min_size=1, max_size=6), st.sampled_from([0, 1, 64, 95]))
@example(UTF8_EDGES, 64)  # a 64-byte value's length varint starts with a continuation byte
@example(UTF8_EDGES, 1)
def test_header_keys_that_are_not_utf8_read_as_replacement_characters(raw_keys, value_size):
    headers = [(k.decode("utf-8", "surrogateescape"), b"v" * value_size) for k in raw_keys]
    batch = build_batch([Record(0, 0, None, None, headers)])
    pair = both()
    assert add_both(pair, batch, 0, 1) is None
    buffers = take_both(pair)
    keys = [key for key, _ in rows_of(buffers)[0][5]]
    assert keys == [k.decode("utf-8", "replace").encode() for k in raw_keys]
    for key in keys:
        key.decode("utf-8")  # valid, as an Arrow string must be
    assert buffers.replaced_header_keys == sum(1 for k in raw_keys if k != k.decode("utf-8", "replace").encode())


LIMIT = (2**63 - 1) // 1000  # the last millisecond whose microseconds fit a long


@pytest.mark.parametrize(("base_ts", "delta", "bad_record"), [
    (LIMIT, 0, None), (-LIMIT, 0, None), (LIMIT + 1, 0, 0), (LIMIT, 1, 1), (-LIMIT, -1, 1),
    (2**63 - 5, 10, 0),  # record 1's timestamp overflows a long too
    (-(2**63), -1, 0),
])
def test_a_timestamp_past_microseconds_in_a_long_is_an_error_unless_filtered_out(base_ts, delta, bad_record):
    body = record(b"\x00" + encode_varlong(0) + b"\x00\x02a\x02x\x00") + \
        record(b"\x00" + encode_varlong(delta) + b"\x02\x02b\x02y\x00")
    batch = bytearray(rebuild(build_batch([Record(0, 0, b"a", b"x", []), Record(1, 0, b"b", b"y", [])]), body))
    struct.pack_into(">q", batch, 27, base_ts)  # the base timestamp, under the CRC
    struct.pack_into(">I", batch, 17, compute_crc(batch))
    batch = bytes(batch)
    assert len(decode_records(batch)) == 2  # valid for Kafka: a timestamp is any long
    pair = both()
    message = add_both(pair, batch, 0, 10)
    if bad_record is None:
        assert message is None
    else:
        assert message == f"record {bad_record} timestamp does not fit a long in microseconds"
        assert add_both(pair, batch, 0, bad_record) is None  # the bad one filtered out: no error
    assert len(rows_of(take_both(pair))) == (2 if bad_record is None else bad_record)


@pytest.mark.parametrize(("base", "delta"), [(2**63 - 10, 2**31 - 1), (-(2**63) + 5, -10)])
def test_offsets_past_a_long_are_filtered_out_like_python_ints(base, delta):
    body = record(b"\x00\x00" + encode_varint(delta) + b"\x02k\x02v\x00")
    batch = bytearray(rebuild(build_batch([Record(0, 0, b"k", b"v", [])]), body))
    struct.pack_into(">q", batch, 0, base)  # the base offset: outside the CRC
    pair = both()
    assert add_both(pair, bytes(batch), -(2**63), 2**63 - 1) is None  # a wrapped offset would be in range
    assert take_both(pair).rows == 0


@pytest.mark.skipif(not COMPILED, reason="protocol._record_columns is not built")
def test_a_walker_refuses_a_position_outside_its_buffer():
    from protocol import _record_columns

    columns = _record_columns.Columns(False)
    with pytest.raises(ValueError, match="out of range"):
        columns.add(b"abc", 4, 0, 0, 0, 0, False, 0, 1)
    assert columns.take()[0] == 0
