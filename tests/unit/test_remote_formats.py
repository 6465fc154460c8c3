"""Remote segment index formats and metadata-topic records: hypothesis round-trips, agreement of the
struct fast paths with the construct declarations, look-up correctness, and malformed input."""

from __future__ import annotations

import uuid

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from protocol import metadata_records as mr
from protocol import remote_formats as rf
from protocol.errors import ProtocolError
from tiering.metadata import codec
from tiering.model import (
    ArchivedGroupOffset,
    ClusterTieringConfigs,
    DisablePolicy,
    RemoteLogDataLoss,
    RemoteLogDivergence,
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    RemoteLogSegmentState,
    RemoteLogStartOffset,
    RemotePartitionDeleteMetadata,
    RemotePartitionDeleteState,
    TieringState,
    TopicIdPartition,
    TopicTieringState,
)

INT32 = 2**31 - 1
FAST = settings(max_examples=200, deadline=None)

# A segment as a list of batches: (last offset delta from the previous batch, size, max timestamp).
batches_st = st.lists(st.tuples(st.integers(1, 50), st.integers(61, 9000), st.integers(0, 2**40)), min_size=1, max_size=80)


def build(base: int, batches: list[tuple[int, int, int]], interval: int):
    builder = rf.SegmentIndexBuilder(base, interval)
    layout = []  # (first offset, last offset, position, max timestamp)
    last = base - 1
    for delta, size, ts in batches:
        first, last = last + 1, last + delta
        layout.append((first, last, builder.add(last, size, ts), ts))
    return builder, layout


@FAST
@given(st.integers(0, 2**40), batches_st, st.integers(0, 20_000))
def test_offset_index_finds_a_position_at_or_before_the_batch(base, batches, interval):
    builder, layout = build(base, batches, interval)
    index = builder.offset_index()
    entries = rf.decode_offset_index(index, base)
    assert rf.encode_offset_index(entries, base) == index
    declared = rf.OFFSET_INDEX_ENTRY[len(entries)].parse(index)
    assert [(base + e.relative_offset, e.position) for e in declared] == [tuple(e) for e in entries]
    positions = {first: pos for first, _, pos, _ in layout}
    for first, last, position, _ in layout:
        for target in {first, last}:
            found = rf.lookup_position(index, base, target)
            assert found.position <= position and found.position in set(positions.values()) | {0}
    if interval == 0:
        assert len(entries) == len(layout) - 1  # every batch but the first


@FAST
@given(st.integers(0, 2**40), batches_st, st.integers(0, 20_000), st.integers(0, 2**40 + 10))
def test_time_lookup_never_skips_the_first_batch_reaching_a_timestamp(base, batches, interval, timestamp):
    builder, layout = build(base, batches, interval)
    found = rf.position_for_timestamp(builder.time_index(), builder.offset_index(), base, timestamp)
    matching = [pos for _, _, pos, ts in layout if ts >= timestamp]
    if not matching:
        return
    assert found is not None and found.position <= matching[0]


@FAST
@given(st.lists(st.tuples(st.integers(0, INT32), st.integers(0, INT32)), max_size=50), st.integers(0, 2**40))
def test_offset_index_fast_path_agrees_with_the_declaration(pairs, base):
    rels = sorted({r for r, _ in pairs})
    positions = sorted({p for _, p in pairs})[: len(rels)]
    rels = rels[: len(positions)]
    entries = [(base + r, p) for r, p in zip(rels, positions, strict=True)]
    data = rf.encode_offset_index(entries, base)
    declared = b"".join(rf.OFFSET_INDEX_ENTRY.build({"relative_offset": r, "position": p})
                        for r, p in zip(rels, positions, strict=True))
    assert data == declared


txn_st = st.lists(st.tuples(st.integers(-(2**63), 2**63 - 1), st.integers(0, 2**40), st.integers(0, 2**20),
                            st.integers(0, 2**40)), max_size=30)


@FAST
@given(txn_st)
def test_transaction_index_round_trip_and_range_query(raw):
    txns, last = [], -1
    for pid, first, span, lso in raw:
        first = max(first, 0)
        end = max(first + span, last + 1)
        txns.append(rf.AbortedTxn(pid, first, end, lso))
        last = end
    data = rf.encode_transaction_index(txns)
    assert len(data) == 34 * len(txns)
    assert rf.decode_transaction_index(data) == txns
    declared = rf.TRANSACTION_INDEX.parse(data)
    assert [rf.AbortedTxn(e.producer_id, e.first_offset, e.last_offset, e.last_stable_offset) for e in declared] == txns
    if txns:
        lo, hi = txns[0].first_offset, txns[-1].last_offset
        assert rf.aborted_in_range(data, lo, hi) == [t for t in txns if t.last_offset >= lo and t.first_offset <= hi]


@FAST
@given(st.lists(st.tuples(st.integers(0, 1000), st.integers(0, 2**40)), max_size=20))
def test_leader_epoch_checkpoint_round_trip(raw):
    entries, epoch, offset = [], -1, 0
    for step, grow in raw:
        epoch += step + 1
        offset += grow
        entries.append(rf.EpochEntry(epoch, offset))
    assert rf.decode_leader_epoch_checkpoint(rf.encode_leader_epoch_checkpoint(entries)) == entries


DECODERS = [
    lambda b: rf.decode_offset_index(b, 0),
    lambda b: rf.decode_time_index(b, 0),
    rf.decode_transaction_index,
    lambda b: rf.aborted_in_range(b, 0, 100),
    rf.decode_leader_epoch_checkpoint,
    mr.decode_record,
    codec.deserialize,
]


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=300), st.sampled_from(range(len(DECODERS))))
def test_decoders_raise_only_protocol_error(data, which):
    try:
        DECODERS[which](data)
    except ProtocolError:
        pass


# --- metadata records ----------------------------------------------------------------------------

uuids = st.builds(uuid.UUID, int=st.integers(0, 2**128 - 1))
tps = st.builds(TopicIdPartition, uuids, st.from_regex(r"[a-zA-Z0-9._-]{1,40}", fullmatch=True), st.integers(0, 10_000))


@st.composite
def segment_metadata(draw):
    tp = draw(tps)
    start = draw(st.integers(0, 2**50))
    end = start + draw(st.integers(0, 2**20))
    epochs = sorted(set(draw(st.lists(st.integers(0, 2**31 - 1), min_size=1, max_size=5))))
    offsets = sorted(draw(st.lists(st.integers(start, end), min_size=len(epochs), max_size=len(epochs))))
    return RemoteLogSegmentMetadata(
        RemoteLogSegmentId(tp, draw(uuids)), start, end, draw(st.integers(-1, 2**45)), draw(st.integers(-1, 100)),
        draw(st.integers(0, 2**45)), draw(st.integers(0, INT32)), tuple(zip(epochs, offsets, strict=True)),
        draw(st.sampled_from(list(RemoteLogSegmentState))), draw(st.none() | st.binary(max_size=128)),
        draw(st.booleans()))


records_st = st.one_of(
    segment_metadata(),
    st.builds(RemoteLogSegmentMetadataUpdate, st.builds(RemoteLogSegmentId, tps, uuids), st.integers(0, 2**45),
              st.sampled_from(list(RemoteLogSegmentState)), st.integers(-1, 100), st.none() | st.binary(max_size=128)),
    st.builds(RemotePartitionDeleteMetadata, tps, st.sampled_from(list(RemotePartitionDeleteState)),
              st.integers(0, 2**45), st.integers(-1, 100)),
    # This proxy's own records: a topic's tiering configs and KIP-950 state, a partition's log start.
    st.builds(TopicTieringState, st.from_regex(r"[a-zA-Z0-9._-]{1,40}", fullmatch=True), uuids,
              st.integers(0, 2**31 - 1), st.none() | st.sampled_from(list(TieringState)),
              st.sampled_from(list(DisablePolicy)),
              st.lists(st.tuples(st.text(max_size=30), st.text(max_size=30)), max_size=5).map(tuple),
              st.booleans(), st.integers(0, 2**45)),
    st.builds(RemoteLogStartOffset, tps, st.integers(0, 2**62), st.integers(0, 2**45)),
    # ... and a range the brokers deleted before it was tiered.
    st.builds(lambda tp, a, b, ts: RemoteLogDataLoss(tp, min(a, b), max(a, b), ts), tps,
              st.integers(0, 2**62), st.integers(0, 2**62), st.integers(0, 2**45)),
    # ... and a range the remote tier held but the cluster's log replaced.
    st.builds(lambda tp, a, b, remote_epoch, epoch, ts: RemoteLogDivergence(tp, min(a, b), max(a, b), remote_epoch,
                                                                             epoch, ts),
              tps, st.integers(0, 2**62), st.integers(0, 2**62), st.integers(0, INT32), st.integers(-1, INT32),
              st.integers(0, 2**45)),
    # ... and a consumer group's offset in an archived topic.
    st.builds(ArchivedGroupOffset, st.text(max_size=40), tps, st.integers(-1, 2**62), st.integers(-1, INT32),
              st.none() | st.text(max_size=40), st.integers(0, 2**45)),
    # ... and the cluster-wide dynamic defaults of the broker keys the proxy keeps (names unique).
    st.builds(ClusterTieringConfigs,
              st.dictionaries(st.text(max_size=40), st.text(max_size=30), max_size=6).map(lambda d: tuple(d.items())),
              st.integers(0, 2**45)),
)


@FAST
@given(records_st)
def test_metadata_records_round_trip(record):
    data = codec.serialize(record)
    assert data[0] == 1  # frame version
    assert codec.deserialize(data) == record


@FAST
@given(records_st, st.data())
def test_damaged_metadata_records_raise_only_protocol_error(record, data):
    raw = bytearray(codec.serialize(record))
    cut = data.draw(st.integers(0, len(raw) - 1))
    for damaged in (bytes(raw[:cut]), bytes(raw[:cut]) + bytes([raw[cut] ^ 0xFF]) + bytes(raw[cut + 1:])):
        try:
            codec.deserialize(damaged)
        except ProtocolError:
            pass


def test_every_record_kind_has_its_own_api_key():
    assert set(mr._API_KEYS.values()) == set(mr._BODIES) == {
        mr.SEGMENT_METADATA_API_KEY, mr.SEGMENT_METADATA_UPDATE_API_KEY, mr.PARTITION_DELETE_METADATA_API_KEY,
        mr.TOPIC_TIERING_STATE_API_KEY, mr.REMOTE_LOG_START_OFFSET_API_KEY, mr.REMOTE_LOG_DATA_LOSS_API_KEY,
        mr.REMOTE_LOG_DIVERGENCE_API_KEY, mr.ARCHIVED_GROUP_OFFSET_API_KEY, mr.CLUSTER_TIERING_CONFIGS_API_KEY}
    assert mr.REMOTE_LOG_DIVERGENCE_API_KEY == 67 and mr.ARCHIVED_GROUP_OFFSET_API_KEY == 68
    assert mr.CLUSTER_TIERING_CONFIGS_API_KEY == 69
    assert len(set(mr._API_KEYS.values())) == len(mr._API_KEYS)


_ENTRY = mr.TopicIdPartitionEntry("t", uuid.UUID(int=3), 1)


@pytest.mark.parametrize("record", [
    mr.RemoteLogDataLossRecord(_ENTRY, 10, 9, 0),
    mr.RemoteLogDataLossRecord(_ENTRY, -1, 9, 0),
    mr.RemoteLogDivergenceRecord(_ENTRY, 10, 9, 4, 5, 0),
    mr.RemoteLogDivergenceRecord(_ENTRY, -1, 9, 4, 5, 0),
])
def test_a_range_that_is_not_one_is_refused(record):
    """Written by hand past the encoder's check: the decoder refuses it with ProtocolError, and
    the encoder refuses to write it."""
    api_key = mr._API_KEYS[type(record)]
    raw = (mr.FRAME_HEADER.build({"frame_version": 1, "api_key": api_key, "version": 0})
           + mr._BODIES[api_key].build(record))
    with pytest.raises(ProtocolError, match="is not a range of offsets"):
        codec.deserialize(raw)
    with pytest.raises(ValueError, match="is not a range of offsets"):
        mr.encode_record(record)


def test_divergence_record_bytes_by_hand():
    """apiKey 67, version 0: the TopicIdPartition struct, first and last offset (int64), the remote
    tier's and the leader's epoch (int32), event time (int64), no tags."""
    topic_id = uuid.UUID("00112233-4455-6677-8899-aabbccddeeff")
    record = RemoteLogDivergence(TopicIdPartition(topic_id, "ab", 3), 100, 149, 4, -1, 5)
    expected = (bytes([1, 67, 0]) + bytes([3]) + b"ab" + topic_id.bytes + (3).to_bytes(4, "big") + b"\0"
                + (100).to_bytes(8, "big") + (149).to_bytes(8, "big") + (4).to_bytes(4, "big")
                + (-1).to_bytes(4, "big", signed=True) + (5).to_bytes(8, "big") + b"\0")
    assert codec.serialize(record) == expected
    assert codec.deserialize(expected) == record


def test_partition_delete_record_bytes_by_hand():
    """Kafka's RemotePartitionDeleteMetadataRecord v0, flexible: the frame, the TopicIdPartition
    struct (compact string name, uuid, int32, no tags), broker id, event time, state, no tags."""
    topic_id = uuid.UUID("00112233-4455-6677-8899-aabbccddeeff")
    record = RemotePartitionDeleteMetadata(TopicIdPartition(topic_id, "ab", 3),
                                           RemotePartitionDeleteState.DELETE_PARTITION_STARTED, 5, 7)
    expected = (bytes([1, 2, 0]) + bytes([3]) + b"ab" + topic_id.bytes + (3).to_bytes(4, "big") + b"\0"
                + (7).to_bytes(4, "big") + (5).to_bytes(8, "big") + bytes([1]) + b"\0")
    assert codec.serialize(record) == expected
    assert codec.deserialize(expected) == record


@pytest.mark.parametrize(("data", "expected"), [
    (b"21", -973932308), (b"foobar", -790332482), (b"a-little-bit-long-string", -985981536),
    (b"a-little-bit-longer-string", -1486304829), (b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8", -58897971),
    (b"abc", 479470107),
])
def test_murmur2_known_values(data, expected):
    assert mr.murmur2(data) == expected


def test_metadata_partition_is_stable_and_in_range():
    tp = TopicIdPartition(uuid.UUID(int=12345), "t", 2)
    assert 0 <= codec.metadata_partition(tp) < 50
    assert codec.metadata_partition(tp) == codec.metadata_partition(TopicIdPartition(tp.topic_id, "renamed", 2))
