from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from protocol.errors import ProtocolError
from protocol.records import (
    Compression,
    Record,
    build_batch,
    consumed_bytes,
    decode_records,
    decode_varint,
    encode_varint,
    iter_batches,
    iter_entries,
    read_header,
    verify_crc,
)

maybe_bytes = st.none() | st.binary(max_size=40)
records_st = st.lists(
    st.tuples(maybe_bytes, maybe_bytes, st.lists(st.tuples(st.text(max_size=8), maybe_bytes), max_size=3),
              st.integers(0, 10**6)),
    min_size=1, max_size=12,
)


def as_records(raw: list, base_offset: int, base_ts: int = 1_700_000_000_000) -> list[Record]:
    return [Record(base_offset + i, base_ts + dt, k, v, h) for i, (k, v, h, dt) in enumerate(raw)]


@settings(max_examples=60, deadline=None)
@given(records_st, st.sampled_from(list(Compression)), st.integers(0, 2**40))
def test_build_then_decode_round_trips(raw, codec, base):
    records = as_records(raw, base)
    batch = build_batch(records, base_offset=base, compression=codec, partition_leader_epoch=7)
    header = read_header(batch)
    assert header.size == len(batch) and header.compression == codec
    assert header.last_offset == records[-1].offset and header.partition_leader_epoch == 7
    assert verify_crc(batch)
    assert decode_records(batch) == records


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(records_st, min_size=1, max_size=5), st.data())
def test_iterating_a_byte_range_yields_each_whole_batch(raws, data):
    batches, offset = [], 0
    for raw in raws:
        batches.append(build_batch(as_records(raw, offset), base_offset=offset))
        offset += len(raw)
    buf = b"".join(batches)
    assert [bytes(v) for _, v in iter_batches(buf)] == batches
    assert [bytes(v) for _, v in iter_entries(buf)] == batches
    cut = data.draw(st.integers(0, len(buf)))
    whole = [bytes(v) for _, v in iter_batches(buf[:cut])]
    assert whole == batches[: len(whole)]
    assert consumed_bytes(buf[:cut]) == sum(map(len, whole))
    assert cut - consumed_bytes(buf[:cut]) < len(batches[len(whole)]) if len(whole) < len(batches) else True


@settings(max_examples=40, deadline=None)
@given(records_st, st.data())
def test_any_flipped_byte_under_the_crc_is_detected(raw, data):
    batch = bytearray(build_batch(as_records(raw, 0)))
    i = data.draw(st.integers(21, len(batch) - 1))
    batch[i] ^= 0xFF
    assert not verify_crc(batch)


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=200))
def test_garbage_raises_only_protocol_error(data):
    for fn in (decode_records, lambda b: list(iter_batches(b)), lambda b: list(iter_entries(b)), verify_crc):
        try:
            fn(data)
        except ProtocolError:
            pass


@settings(max_examples=100, deadline=None)
@given(records_st, st.data())
def test_corrupted_body_raises_only_protocol_error(raw, data):
    batch = bytearray(build_batch(as_records(raw, 0), compression=data.draw(st.sampled_from(list(Compression)))))
    for _ in range(data.draw(st.integers(1, 4))):
        batch[data.draw(st.integers(61, len(batch) - 1))] = data.draw(st.integers(0, 255))
    try:
        decode_records(batch)
    except ProtocolError:
        pass


@given(st.integers(-(2**63), 2**63 - 1))
def test_varint_round_trip(n):
    assert decode_varint(encode_varint(n), 0) == (n, len(encode_varint(n)))


def test_overlong_and_truncated_varints_are_protocol_errors():
    with pytest.raises(ProtocolError, match="longer"):
        decode_varint(b"\xff" * 6 + b"\x01", 0, 5)
    with pytest.raises(ProtocolError, match="truncated"):
        decode_varint(b"\x80", 0)


@pytest.mark.parametrize("codec", ["gzip", "snappy", "lz4", "zstd", None])
def test_reads_what_kafka_python_writes_and_vice_versa(codec):
    from kafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder

    codec_ids = {None: 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}
    builder = DefaultRecordBatchBuilder(magic=2, compression_type=codec_ids[codec], is_transactional=False,
                                        producer_id=-1, producer_epoch=-1, base_sequence=-1, batch_size=1 << 20)
    for i in range(50):
        builder.append(i, timestamp=1000 + i, key=None if i % 3 else b"k%d" % i, value=b"v" * i,
                       headers=[("h", b"x")] if i % 2 else [])
    theirs = bytes(builder.build())
    ours = decode_records(theirs)
    assert verify_crc(theirs)
    assert [(r.offset, r.timestamp, r.key, r.value, r.headers) for r in ours] == [
        (i, 1000 + i, None if i % 3 else b"k%d" % i, b"v" * i, [("h", b"x")] if i % 2 else []) for i in range(50)
    ]
    mine = build_batch(ours, compression=Compression(codec_ids[codec]))
    read_back = list(DefaultRecordBatch(mine))
    assert [(r.offset, r.key, r.value) for r in read_back] == [(r.offset, r.key, r.value) for r in ours]
