"""Record batch v2: round trips through every codec, CRC coverage, slicing byte ranges with partial
tails, malformed input rejected with ProtocolError only, and cross-checks with kafka-python."""

from __future__ import annotations

import struct

import cramjam
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from protocol.compression import Compression, compress, decompress
from protocol.control_records import ControlType, decode_control_record, make_control_record
from protocol.errors import ProtocolError
from protocol.record_batch import (
    HEADER_SIZE,
    BatchHeader,
    TimestampType,
    compute_crc,
    read_header,
    verify_crc,
)
from protocol.record_set import iter_batches, iter_entries, split_batches
from protocol.records import Record, build_batch, decode_records
from protocol.varint import decode_varint, decode_varlong, encode_varint, encode_varlong

CODECS = list(Compression)
FAST = settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])

maybe_bytes = st.none() | st.binary(max_size=40)
header_key = st.text(st.characters(codec="utf-8"), max_size=8)
# (key, value, headers, timestamp delta from the first record, offset gap to the previous record)
raw_records = st.lists(
    st.tuples(maybe_bytes, maybe_bytes, st.lists(st.tuples(header_key, maybe_bytes), max_size=3),
              st.integers(-(10**9), 10**9), st.integers(1, 3)),
    min_size=1, max_size=12,
)


def as_records(raw: list, base_offset: int, base_ts: int = 1_700_000_000_000) -> list[Record]:
    out, offset = [], base_offset - 1
    for i, (k, v, h, dt, gap) in enumerate(raw):
        offset = base_offset if i == 0 else offset + gap  # gaps, as compaction leaves them
        out.append(Record(offset, base_ts + (0 if i == 0 else dt), k, v, h))
    return out


def assemble(body: bytes, count: int, codec: Compression = Compression.NONE, *, raw_snappy: bool = False,
             base_offset: int = 0, base_ts: int = 0) -> bytes:
    """A batch around an arbitrary uncompressed records section, with a correct CRC."""
    payload = bytes(cramjam.snappy.compress_raw(body)) if raw_snappy else compress(codec, body)
    head = struct.pack(">qiibIhiqqqhii", base_offset, HEADER_SIZE - 12 + len(payload), -1, 2, 0, int(codec),
                       max(count - 1, 0), base_ts, base_ts, -1, -1, -1, count)
    batch = bytearray(head + payload)
    struct.pack_into(">I", batch, 17, compute_crc(batch))
    return bytes(batch)


def only_protocol_errors(fn, *args, **kwargs):
    """Run ``fn``; a ProtocolError is fine, any other exception fails the test by propagating."""
    try:
        return fn(*args, **kwargs)
    except ProtocolError:
        return None


# -- round trips --------------------------------------------------------------------------------


@FAST
@given(raw_records, st.sampled_from(CODECS), st.integers(0, 2**40), st.booleans(), st.integers(-1, 2**31 - 1))
def test_build_then_decode_round_trips(raw, codec, base, transactional, epoch):
    records = as_records(raw, base)
    batch = build_batch(records, base_offset=base, compression=codec, partition_leader_epoch=epoch,
                        producer_id=42 if transactional else -1, producer_epoch=3 if transactional else -1,
                        base_sequence=7 if transactional else -1, is_transactional=transactional)
    header = read_header(batch)
    assert header.size == len(batch) == 12 + header.batch_length
    assert header.compression == codec and header.magic == 2
    assert header.base_offset == base and header.last_offset == records[-1].offset
    assert header.next_offset == records[-1].offset + 1
    assert header.records_count == len(records) and header.partition_leader_epoch == epoch
    assert header.base_timestamp == records[0].timestamp
    assert header.max_timestamp == max(r.timestamp for r in records)
    assert header.is_transactional == transactional and not header.is_control and not header.has_delete_horizon
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == ((42, 3, 7) if transactional else (-1, -1, -1))
    assert header.timestamp_type == TimestampType.CREATE_TIME
    assert header.crc == compute_crc(batch) and verify_crc(batch)
    assert decode_records(batch) == records
    ((h, view),) = list(iter_batches(batch))
    assert h == header and bytes(view) == batch


@FAST
@given(raw_records)
def test_log_append_time_gives_every_record_the_max_timestamp(raw):
    records = as_records(raw, 0)
    batch = build_batch(records, timestamp_type=TimestampType.LOG_APPEND_TIME)
    header = read_header(batch)
    assert header.timestamp_type == TimestampType.LOG_APPEND_TIME
    assert decode_records(batch) == [r._replace(timestamp=header.max_timestamp) for r in records]


@pytest.mark.parametrize("codec", CODECS)
def test_large_batches_span_many_codec_blocks(codec):
    # Past snappy's 32 KiB xerial blocks and LZ4's 64 KiB frame blocks.
    records = [Record(i, 1000 + i, b"key-%d" % i, bytes(range(256)) * 4 + b"%d" % i, [("i", b"%d" % i)]) for i in range(300)]
    batch = build_batch(records, compression=codec)
    assert decode_records(batch) == records


def test_non_utf8_header_keys_survive_decode_and_rebuild():
    body = bytearray(build_batch([Record(0, 5, None, b"v", [("ab", b"x")])])[HEADER_SIZE:])
    at = body.index(b"ab")
    body[at : at + 2] = b"\xff\xfe"
    records = decode_records(assemble(bytes(body), 1, base_ts=5))
    assert records[0].headers[0][0].encode("utf-8", "surrogateescape") == b"\xff\xfe"
    assert build_batch(records)[HEADER_SIZE:] == bytes(body)


# -- CRC ----------------------------------------------------------------------------------------


@FAST
@given(raw_records, st.sampled_from(CODECS), st.data())
def test_any_flipped_byte_under_the_crc_is_detected(raw, codec, data):
    batch = bytearray(build_batch(as_records(raw, 0), compression=codec))
    i = data.draw(st.integers(17, len(batch) - 1), label="index")  # the CRC field itself or what it covers
    batch[i] ^= data.draw(st.integers(1, 255), label="xor")
    assert not verify_crc(batch)
    with pytest.raises(ProtocolError, match="CRC mismatch"):
        decode_records(batch)


@FAST
@given(raw_records, st.integers(-(2**63), 2**63 - 1), st.integers(-(2**31), 2**31 - 1))
def test_base_offset_and_leader_epoch_are_outside_the_crc(raw, new_base, new_epoch):
    # Brokers assign offsets and stamp leader epochs without recomputing the CRC: ours must agree.
    batch = bytearray(build_batch(as_records(raw, 0)))
    struct.pack_into(">q", batch, 0, new_base)
    struct.pack_into(">i", batch, 12, new_epoch)
    assert verify_crc(batch)
    header = read_header(batch)
    assert header.base_offset == new_base and header.partition_leader_epoch == new_epoch


def test_crc_checks_only_the_batch_and_rejects_truncation():
    batch = build_batch([Record(0, 1, b"k", b"v", [])])
    assert verify_crc(batch + b"trailing data of a later batch")
    with pytest.raises(ProtocolError, match="truncated"):
        verify_crc(batch[:-1])


# -- walking byte ranges ------------------------------------------------------------------------


def _batches(raws: list, codec: Compression = Compression.NONE) -> list[bytes]:
    out, offset = [], 0
    for raw in raws:
        records = as_records(raw, offset)
        out.append(build_batch(records, base_offset=offset, compression=codec))
        offset = records[-1].offset + 1
    return out


@FAST
@given(st.lists(raw_records, min_size=1, max_size=5), st.sampled_from(CODECS), st.data())
def test_iterating_a_byte_range_yields_each_whole_batch_and_stops_at_a_partial_one(raws, codec, data):
    batches = _batches(raws, codec)
    buf = b"".join(batches)
    walker = iter_batches(buf)
    got = list(walker)
    assert [bytes(v) for _, v in got] == batches
    assert all(v.obj is buf for _, v in got), "views must slice the caller's buffer, not copies"
    assert [h.base_offset for h, _ in got] == [read_header(b).base_offset for b in batches]
    assert walker.consumed == len(buf) and walker.remaining == 0
    assert [bytes(e.data) for e in iter_entries(buf)] == batches

    cut = data.draw(st.integers(0, len(buf)), label="cut")
    whole, consumed = split_batches(buf[:cut])
    n = len(whole)
    assert [bytes(v) for _, v in whole] == batches[:n]
    assert consumed == sum(map(len, batches[:n]))
    assert n == len(batches) or cut - consumed < len(batches[n]), "a whole batch was left unread"
    walker = iter_batches(buf[:cut])
    assert len(list(walker)) == n and walker.position == consumed and walker.remaining == cut - consumed
    entries = iter_entries(buf[:cut])
    assert len(list(entries)) == n and entries.consumed == consumed


@FAST
@given(st.lists(raw_records, min_size=1, max_size=3), st.binary(max_size=30), st.binary(max_size=30))
def test_a_sub_range_of_a_larger_buffer_is_walked_in_place(raws, prefix, suffix):
    batches = _batches(raws)
    buf = bytearray(prefix + b"".join(batches) + suffix)
    start, end = len(prefix), len(buf) - len(suffix)
    walker = iter_batches(memoryview(buf), start, end)
    views = [v for _, v in walker]
    assert [bytes(v) for v in views] == batches
    assert walker.position == end and walker.consumed == end - start
    buf[start + 20] ^= 1  # writes through: the views alias the buffer
    assert bytes(views[0]) != batches[0]


def test_walker_rejects_a_range_outside_the_buffer():
    with pytest.raises(ValueError):
        iter_batches(b"x" * 10, 0, 11)
    with pytest.raises(ValueError):
        iter_batches(b"x" * 10, 6, 5)


def test_old_message_sets_are_sliced_by_entries_but_not_decoded():
    from kafka.record.legacy_records import LegacyRecordBatchBuilder

    sets = []
    for magic, codec in ((0, 0), (1, 0), (1, 1)):
        builder = LegacyRecordBatchBuilder(magic=magic, compression_type=codec, batch_size=1 << 20)
        for i in range(3):
            builder.append(10 * magic + i, timestamp=1000 + i, key=b"k", value=b"v%d" % i)
        sets.append(bytes(builder.build()))
    v2 = build_batch([Record(50, 1, None, b"x", [])], base_offset=50)
    buf = b"".join(sets) + v2
    entries = list(iter_entries(buf))
    assert [e.magic for e in entries] == [0, 0, 0, 1, 1, 1, 1, 2]  # the gzip wrapper is one entry
    assert b"".join(bytes(e.data) for e in entries) == buf
    assert entries[0].offset == 0 and entries[-1].offset == 50
    with pytest.raises(ProtocolError, match="magic 0.*iter_entries") as info:
        list(iter_batches(buf))
    assert info.value.offset == 16
    with pytest.raises(ProtocolError, match="magic 1"):
        decode_records(sets[1])
    with pytest.raises(ProtocolError, match="magic 1"):
        read_header(sets[1])


def test_unknown_magic_and_short_lengths_are_protocol_errors():
    batch = bytearray(build_batch([Record(0, 1, None, b"x", [])]))
    bad = bytearray(batch)
    bad[16] = 3
    with pytest.raises(ProtocolError, match="unknown magic 3"):
        list(iter_entries(bad))
    with pytest.raises(ProtocolError, match="magic 3"):
        list(iter_batches(bad))
    short = bytearray(batch)
    struct.pack_into(">i", short, 8, 48)
    with pytest.raises(ProtocolError, match="below") as info:
        list(iter_batches(short))
    assert info.value.offset == 8 and "(at byte 8)" in str(info.value)
    # Seen in a cut header too: 14 bytes show the length but not the magic.
    with pytest.raises(ProtocolError, match="below"):
        list(iter_batches(bytes(short[:14])))
    with pytest.raises(ProtocolError, match="below"):
        list(iter_entries(struct.pack(">qi", 0, 5) + b"\0" * 3))


# -- malformed input ----------------------------------------------------------------------------


def _all_decoders(data: bytes) -> None:
    only_protocol_errors(decode_records, data)
    only_protocol_errors(decode_records, data, verify=False)
    only_protocol_errors(verify_crc, data)
    only_protocol_errors(read_header, data)
    only_protocol_errors(lambda: list(iter_batches(data)))
    only_protocol_errors(lambda: list(iter_entries(data)))
    only_protocol_errors(split_batches, data)
    only_protocol_errors(decode_varint, data)
    only_protocol_errors(decode_varlong, data)
    for codec in CODECS:
        only_protocol_errors(decompress, codec, data)


@settings(max_examples=500, deadline=None)
@given(st.binary(max_size=200))
def test_random_bytes_raise_only_protocol_error(data):
    _all_decoders(data)


@settings(max_examples=300, deadline=None)
@given(st.binary(min_size=HEADER_SIZE - 12, max_size=120), st.sampled_from(range(8)), st.booleans())
def test_random_bodies_behind_a_plausible_header_raise_only_protocol_error(body, codec_bits, fix_crc):
    # Random bytes rarely get past the magic and length checks; start from a valid header.
    head = bytearray(struct.pack(">qiibIhiqqqhii", 0, len(body), -1, 2, 0, codec_bits, 0, 0, 0, -1, -1, -1, 1))
    batch = head + body[HEADER_SIZE - 12 :]
    if fix_crc:
        struct.pack_into(">I", batch, 17, compute_crc(batch))
    _all_decoders(bytes(batch))


@FAST
@given(raw_records, st.sampled_from(CODECS), st.data())
def test_every_truncation_is_a_protocol_error(raw, codec, data):
    batch = build_batch(as_records(raw, 0), compression=codec)
    cut = data.draw(st.integers(0, len(batch) - 1), label="cut")
    with pytest.raises(ProtocolError):
        decode_records(batch[:cut])
    with pytest.raises(ProtocolError):
        verify_crc(batch[:cut])
    assert split_batches(batch[:cut]) == ([], 0)


@FAST
@given(raw_records, st.integers(-(2**31), 2**31 - 1), st.booleans())
def test_corrupted_length_fields_raise_only_protocol_error(raw, length, fix_crc):
    batches = _batches([raw, raw])
    buf = bytearray(b"".join(batches))
    struct.pack_into(">i", buf, 8, length)
    if fix_crc and 12 + length >= 21:
        end = min(len(buf), 12 + length)
        struct.pack_into(">I", buf, 17, compute_crc(buf[:end]))
    _all_decoders(bytes(buf))
    got = only_protocol_errors(split_batches, bytes(buf))
    if got is not None:
        whole, consumed = got
        assert consumed <= len(buf) and sum(len(v) for _, v in whole) == consumed


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(raw_records, st.sampled_from(CODECS), st.data())
def test_corrupted_records_behind_a_valid_crc_raise_only_protocol_error(raw, codec, data):
    # The CRC is recomputed after corrupting the *uncompressed* records, so the record parser itself
    # (not the CRC or the codec) must reject the damage.
    records = as_records(raw, 0)
    body = bytearray(build_batch(records)[HEADER_SIZE:])
    for _ in range(data.draw(st.integers(1, 4), label="n")):
        body[data.draw(st.integers(0, len(body) - 1), label="at")] = data.draw(st.integers(0, 255), label="byte")
    count = data.draw(st.sampled_from([len(records), len(records) + 1, max(len(records) - 1, 0), -1]), label="count")
    only_protocol_errors(decode_records, assemble(bytes(body), count, codec, base_ts=records[0].timestamp))


@FAST
@given(raw_records, st.sampled_from(CODECS[1:]), st.data())
def test_corrupted_compressed_payloads_raise_only_protocol_error(raw, codec, data):
    batch = bytearray(build_batch(as_records(raw, 0), compression=codec))
    for _ in range(data.draw(st.integers(1, 4), label="n")):
        batch[data.draw(st.integers(HEADER_SIZE, len(batch) - 1), label="at")] = data.draw(st.integers(0, 255))
    struct.pack_into(">I", batch, 17, compute_crc(batch))
    only_protocol_errors(decode_records, bytes(batch))


def _one_record_body(length_varint: bytes) -> bytes:
    # attributes 0, timestamp delta 0, offset delta 0, null key, 1-byte value "v", no headers
    return length_varint + b"\x00\x00\x00\x01\x02v\x00"


@pytest.mark.parametrize(
    ("body", "match"),
    [
        (_one_record_body(b"\xff\xff\xff\xff\xff\x01"), "record 0 length varint longer than 5 bytes"),
        (_one_record_body(b"\xff\xff\xff\xff\x7f"), "record 0 length varint does not fit 32 bits"),
        (b"\x80\x80", "truncated record 0 length varint"),
        (b"\x0e\x00" + b"\xff" * 10 + b"\x01", "timestamp delta varlong longer than 10 bytes"),
        (b"\x0e\x00\x00\x00\x01\x08v\x00", "value of 4 bytes overruns its record"),
        (b"\x0e\x00\x00\x00\x01\x02v\x02", "claims 1 headers"),
        (b"\x12\x00\x00\x00\x01\x02v\x02\x01\x01", "header with a null key"),
        (b"\x10\x00\x00\x00\x01\x02v\x00\x00", "declares 8 bytes but its fields take 7"),
        (_one_record_body(b"\x0e") + b"\x00", "1 bytes follow the 1 records"),
        (b"\x20\x00", "record 0 claims 16 bytes, 1 left"),
    ],
)
def test_malformed_records_name_the_fault(body, match):
    with pytest.raises(ProtocolError, match=match):
        decode_records(assemble(body, 1))
    with pytest.raises(ProtocolError, match=f"decompressed ZSTD records: .*{match}"):
        decode_records(assemble(body, 1, Compression.ZSTD))


def test_uncompressed_record_errors_carry_the_batch_offset():
    with pytest.raises(ProtocolError) as info:
        decode_records(assemble(b"\x0e\x00\x00\x00\x01\x08v\x00", 1))
    assert info.value.offset == HEADER_SIZE + 6  # just past the value's length varint


def test_header_fields_out_of_range_are_protocol_errors():
    batch = bytearray(build_batch([Record(0, 1, None, b"x", [])]))
    batch[22] |= 0x07  # compression codec 7 does not exist
    struct.pack_into(">I", batch, 17, compute_crc(batch))
    with pytest.raises(ProtocolError, match="codec 7"):
        read_header(batch).compression  # noqa: B018 - the property raises
    with pytest.raises(ProtocolError, match="codec 7"):
        decode_records(batch)
    batch = bytearray(build_batch([Record(0, 1, None, b"x", [])]))
    struct.pack_into(">i", batch, 57, -2)
    struct.pack_into(">I", batch, 17, compute_crc(batch))
    with pytest.raises(ProtocolError, match="negative record count"):
        decode_records(batch)


def test_codec_failures_are_protocol_errors():
    for codec in CODECS[1:]:
        good = compress(codec, b"hello world" * 100)
        with pytest.raises(ProtocolError, match=f"cannot decompress {codec.name}"):
            decompress(codec, good[: len(good) // 2])
    xerial = compress(Compression.SNAPPY, b"abc")
    with pytest.raises(ProtocolError, match="xerial snappy block of 1000 bytes"):
        decompress(Compression.SNAPPY, xerial[:16] + struct.pack(">i", 1000) + b"x")


# -- varints ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "encoded"),
    [(0, b"\x00"), (-1, b"\x01"), (1, b"\x02"), (63, b"\x7e"), (-64, b"\x7f"), (64, b"\x80\x01"),
     (2**31 - 1, b"\xfe\xff\xff\xff\x0f"), (-(2**31), b"\xff\xff\xff\xff\x0f")],
)
def test_varint_known_encodings(value, encoded):
    assert encode_varint(value) == encoded == encode_varlong(value)
    assert decode_varint(encoded) == (value, len(encoded))
    assert decode_varlong(b"pad" + encoded, 3) == (value, 3 + len(encoded))


@given(st.integers(-(2**31), 2**31 - 1), st.integers(-(2**63), 2**63 - 1))
def test_varint_and_varlong_round_trip(n32, n64):
    assert decode_varint(encode_varint(n32)) == (n32, len(encode_varint(n32)))
    assert decode_varlong(encode_varlong(n64)) == (n64, len(encode_varlong(n64)))
    assert len(encode_varint(n32)) <= 5 and len(encode_varlong(n64)) <= 10


def test_varint_limits():
    with pytest.raises(ValueError):
        encode_varint(2**31)
    with pytest.raises(ValueError):
        encode_varlong(-(2**63) - 1)
    with pytest.raises(ProtocolError, match="varint longer than 5 bytes"):
        decode_varint(b"\xff" * 5 + b"\x01")
    with pytest.raises(ProtocolError, match="varint does not fit 32 bits"):
        decode_varint(b"\xff\xff\xff\xff\x1f")
    with pytest.raises(ProtocolError, match="varlong longer than 10 bytes"):
        decode_varlong(b"\xff" * 10 + b"\x01")
    with pytest.raises(ProtocolError, match="varlong does not fit 64 bits"):
        decode_varlong(b"\xff" * 9 + b"\x03")
    assert decode_varlong(b"\xff" * 9 + b"\x01") == (-(2**63), 10)
    with pytest.raises(ProtocolError, match="truncated varint") as info:
        decode_varint(b"\x00\x80\x80", 1)
    assert info.value.offset == 1


# -- control records ----------------------------------------------------------------------------


@pytest.mark.parametrize("kind", list(ControlType))
def test_control_batches(kind):
    marker = make_control_record(9, 1234, kind, coordinator_epoch=5)
    batch = build_batch([marker], base_offset=9, producer_id=77, producer_epoch=1, is_transactional=True, is_control=True)
    header = read_header(batch)
    assert header.is_control and header.is_transactional
    (record,) = decode_records(batch)
    assert decode_control_record(record) == (0, kind)
    assert struct.unpack(">hi", record.value) == (0, 5)

    from kafka.record.default_records import ControlRecord, DefaultRecordBatch

    (theirs,) = list(DefaultRecordBatch(batch))
    assert isinstance(theirs, ControlRecord) and theirs.type == kind and theirs.offset == 9


def test_bad_control_keys():
    with pytest.raises(ProtocolError, match="null"):
        decode_control_record(Record(0, 0, None, None, []))
    with pytest.raises(ProtocolError, match="3 bytes"):
        decode_control_record(Record(0, 0, b"\0\0\0", None, []))
    with pytest.raises(ProtocolError, match="negative version"):
        decode_control_record(Record(0, 0, b"\xff\xff\0\0", None, []))


def test_header_flags():
    h = BatchHeader(0, 49, -1, 2, 0, 0x40 | 0x08 | 0x03, 0, 111, 222, -1, -1, -1, 0)
    assert h.has_delete_horizon and h.delete_horizon == 111
    assert h.timestamp_type == TimestampType.LOG_APPEND_TIME and h.compression == Compression.LZ4
    assert not h.is_control and not h.is_transactional


def test_builder_rejects_caller_bugs():
    with pytest.raises(ValueError, match="at least one"):
        build_batch([])
    with pytest.raises(ValueError, match="does not follow"):
        build_batch([Record(1, 0, None, None, []), Record(1, 0, None, None, [])])
    with pytest.raises(ValueError, match="does not follow"):
        build_batch([Record(4, 0, None, None, [])], base_offset=5)
    with pytest.raises(ValueError, match="out of range"):
        build_batch([Record(0, 0, None, None, [])], producer_epoch=2**15)


# -- other encoders -----------------------------------------------------------------------------


@pytest.mark.parametrize("body_records", [1, 40])
def test_raw_snappy_as_librdkafka_writes_it(body_records):
    records = [Record(i, 100 + i, b"k", b"value %d" % i, []) for i in range(body_records)]
    body = build_batch(records, base_offset=0)[HEADER_SIZE:]
    batch = assemble(body, body_records, Compression.SNAPPY, raw_snappy=True, base_ts=100)
    assert not batch[HEADER_SIZE:].startswith(b"\x82SNAPPY")
    assert decode_records(batch) == records


def test_multi_frame_zstd():
    import zstandard

    records = [Record(i, 100, None, b"v%d" % i, []) for i in range(10)]
    body = build_batch(records)[HEADER_SIZE:]
    cctx = zstandard.ZstdCompressor()
    payload = cctx.compress(body[:7]) + cctx.compress(body[7:])
    head = bytearray(build_batch(records, compression=Compression.ZSTD)[:HEADER_SIZE])
    struct.pack_into(">i", head, 8, HEADER_SIZE - 12 + len(payload))
    batch = head + payload
    struct.pack_into(">I", batch, 17, compute_crc(batch))
    assert decode_records(batch) == records


@pytest.mark.parametrize("codec", CODECS)
def test_reads_what_kafka_python_writes_and_vice_versa(codec):
    from kafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder

    builder = DefaultRecordBatchBuilder(magic=2, compression_type=int(codec), is_transactional=True,
                                        producer_id=1234, producer_epoch=5, base_sequence=77, batch_size=1 << 22)
    expected = []
    for i in range(200):
        key = None if i % 3 else b"k%d" % i
        value = None if i == 7 else b"v" * (i * 13 % 500)
        headers = [("h", b"x"), ("empty", None)] if i % 2 else []
        builder.append(i, timestamp=1_700_000_000_000 + i * (-1) ** i, key=key, value=value, headers=headers)
        expected.append(Record(i, 1_700_000_000_000 + i * (-1) ** i, key, value, headers))
    theirs = bytes(builder.build())
    header = read_header(theirs)
    assert header.compression == codec and header.is_transactional
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (1234, 5, 77)
    assert verify_crc(theirs)
    assert decode_records(theirs) == expected

    ours = build_batch(expected, compression=codec, producer_id=1234, producer_epoch=5, base_sequence=77,
                       is_transactional=True)
    batch = DefaultRecordBatch(ours)
    assert batch.validate_crc()
    assert (batch.compression_type, batch.producer_id, batch.base_sequence, batch.is_transactional) == (int(codec), 1234, 77, True)
    read_back = [Record(r.offset, r.timestamp, r.key, r.value, list(r.headers)) for r in batch]
    assert read_back == expected
