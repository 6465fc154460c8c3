"""The bucket's manifests (tiering/metadata/manifests.py): the codec round-trips and refuses every
damaged object; the writer describes exactly the store's state, one PUT per manifest per interval,
and retries a failed PUT; the reader finds partitions that hold segments but no manifest."""

from __future__ import annotations

import tempfile
import uuid
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tiering.metadata.journal_store import FileMetadataStore
from tiering.metadata.manifests import (
    ManifestError,
    ManifestWriter,
    decode_manifest,
    encode_manifest,
    partition_manifest_key,
    read_bucket,
)
from tiering.metadata.state import MetadataState
from tiering.model import (
    DisablePolicy,
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    RemoteLogSegmentState,
    RemotePartitionDeleteMetadata,
    RemotePartitionDeleteState,
    TieringState,
    TopicIdPartition,
    TopicTieringState,
)
from tiering.storage.local_folder import LocalFolderStorage

S = RemoteLogSegmentState
TOPIC_IDS = {"orders": uuid.UUID(int=1), "pay-ments": uuid.UUID(int=2)}


def _segment(tp: TopicIdPartition, start: int, length: int) -> RemoteLogSegmentMetadata:
    return RemoteLogSegmentMetadata(RemoteLogSegmentId(tp, uuid.uuid4()), start, start + length - 1, 1_000 + start,
                                    1, 2, 100 * length, ((0, start),))


# One partition's history: segments, each taken to some state, then maybe a partition delete.
_partition_history = st.tuples(
    st.sampled_from(sorted(TOPIC_IDS)), st.integers(0, 3),
    st.lists(st.sampled_from([S.COPY_SEGMENT_STARTED, S.COPY_SEGMENT_FINISHED, S.DELETE_SEGMENT_STARTED,
                              S.DELETE_SEGMENT_FINISHED]), max_size=6),
    st.integers(0, 3), st.booleans())


def _write_history(store: FileMetadataStore, histories: list) -> None:
    for topic, partition, states, deletes, disable in histories:
        tp = TopicIdPartition(TOPIC_IDS[topic], topic, partition)
        if store.partition_delete_state(tp) is not None:
            continue
        start = sum(s.end_offset + 1 - s.start_offset for s in store.list_remote_log_segments(tp)) * 10
        for i, final in enumerate(states):
            segment = _segment(tp, start + 10 * i, 10)
            store.add_remote_log_segment_metadata(segment)
            path = [S.COPY_SEGMENT_FINISHED, S.DELETE_SEGMENT_STARTED, S.DELETE_SEGMENT_FINISHED]
            for state in path[:path.index(final) + 1] if final != S.COPY_SEGMENT_STARTED else []:
                store.update_remote_log_segment_metadata(
                    RemoteLogSegmentMetadataUpdate(segment.segment_id, 5, state, 1, b"kip-917"))
        for state in list(RemotePartitionDeleteState)[:deletes]:
            store.put_remote_partition_delete_metadata(RemotePartitionDeleteMetadata(tp, state, 6, 1))
        current = store.topic_tiering_state(topic)
        epoch = current.tiered_epoch + 1 if current is not None else 1
        store.put_topic_tiering_state(TopicTieringState(
            topic, TOPIC_IDS[topic], epoch, TieringState.DISABLED if disable else TieringState.ENABLED,
            DisablePolicy.DELETE if disable else DisablePolicy.RETAIN,
            (("remote.storage.enable", str(not disable).lower()), ("local.retention.ms", str(partition))), False, 7))


def _described(state: MetadataState) -> list:
    """What the bucket describes of a store's state: the partitions with segments left, and the
    topics neither deleted nor disabled with the delete policy."""
    described = MetadataState()
    for topic in state.topics.values():
        if not (topic.deleted or (topic.state == TieringState.DISABLED and topic.disable_policy == DisablePolicy.DELETE)):
            described.apply(topic)
    for tp, partition in state.partitions.items():
        if partition.segments:
            for record in state.partition_records(tp):
                described.apply(record)
    return list(described.snapshot_records())


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(_partition_history, min_size=1, max_size=8))
def test_the_bucket_rebuilds_exactly_what_the_store_holds(histories):
    with tempfile.TemporaryDirectory() as scratch:
        root = Path(scratch)
        storage = LocalFolderStorage(root / "remote")
        with FileMetadataStore(root / "metadata") as store:
            writer = ManifestWriter(storage, store, interval_ms=60_000)
            writer.start()
            _write_history(store, histories)
            writer.close()
            expected = _described(store.state_snapshot())
        rebuilt = read_bucket(LocalFolderStorage(root / "remote"))
        assert list(rebuilt.state.snapshot_records()) == expected
        assert rebuilt.undescribed == []
        assert writer.counters.failed == 0


@settings(max_examples=50)
@given(st.lists(st.integers(0, 10_000), max_size=20), st.integers(-1, 2**62))
def test_codec_round_trips(starts, written_ms):
    tp = TopicIdPartition(uuid.uuid4(), "t", 0)
    records = [_segment(tp, start, 5) for start in starts]
    assert decode_manifest(encode_manifest(records, written_ms)) == (written_ms, records)


@settings(max_examples=200)
@given(st.data())
def test_every_damaged_manifest_is_refused(data):
    tp = TopicIdPartition(uuid.uuid4(), "t", 0)
    body = encode_manifest([_segment(tp, 0, 5), _segment(tp, 5, 5)], 123)
    damage = data.draw(st.sampled_from(["flip", "truncate", "append"]))
    if damage == "flip":
        position = data.draw(st.integers(0, len(body) - 1))
        bit = data.draw(st.integers(0, 7))
        damaged = body[:position] + bytes([body[position] ^ (1 << bit)]) + body[position + 1:]
    elif damage == "truncate":
        damaged = body[:data.draw(st.integers(0, len(body) - 1))]
    else:
        damaged = body + data.draw(st.binary(min_size=1, max_size=8))
    with pytest.raises(ManifestError):
        decode_manifest(damaged, "k")


@given(st.binary(max_size=200))
def test_arbitrary_bytes_are_refused_with_a_manifest_error(data):
    with pytest.raises(ManifestError):
        decode_manifest(data, "k")


def test_many_writes_in_one_interval_cost_at_most_two_puts(tmp_path):
    storage = LocalFolderStorage(tmp_path / "remote")
    tp = TopicIdPartition(uuid.uuid4(), "orders", 0)
    with FileMetadataStore(tmp_path / "metadata") as store:
        writer = ManifestWriter(storage, store, interval_ms=60_000)
        writer.start()
        for i in range(50):
            segment = _segment(tp, 10 * i, 10)
            store.add_remote_log_segment_metadata(segment)
            store.update_remote_log_segment_metadata(
                RemoteLogSegmentMetadataUpdate(segment.segment_id, 5, S.COPY_SEGMENT_FINISHED, 1, None))
        writer.close()
    # The first write wakes the writer at once; the other 99 wait for the interval, cut short by close.
    assert 1 <= storage.requests.snapshot()[0]["PUT"] <= 2
    assert len(read_bucket(storage).state.finished(tp)) == 50


class _FailingOnce(LocalFolderStorage):
    failures = 0

    def _put(self, key: str, body: bytes | memoryview) -> None:
        if key.endswith(".manifest") and not self.failures:
            self.failures += 1
            raise OSError("disk on fire")
        super()._put(key, body)


def test_a_failed_put_stays_due_and_is_written_next(tmp_path):
    storage = _FailingOnce(tmp_path / "remote")
    tp = TopicIdPartition(uuid.uuid4(), "orders", 0)
    with FileMetadataStore(tmp_path / "metadata") as store:
        writer = ManifestWriter(storage, store, interval_ms=60_000)
        store.add_remote_log_segment_metadata(_segment(tp, 0, 10))
        writer.flush()
        assert writer.counters.failed == 1
        writer.flush()
        assert writer.counters.written == 1
    assert len(read_bucket(storage).state.partitions[tp].segments) == 1


def test_start_describes_what_the_store_held_before(tmp_path):
    """A bucket tiered before manifests: the first proxy over its store describes it at start."""
    tp = TopicIdPartition(uuid.uuid4(), "orders", 3)
    with FileMetadataStore(tmp_path / "metadata") as store:
        store.add_remote_log_segment_metadata(_segment(tp, 0, 10))
    storage = LocalFolderStorage(tmp_path / "remote")
    assert read_bucket(storage).state.partitions == {}
    with FileMetadataStore(tmp_path / "metadata") as store:
        writer = ManifestWriter(storage, store, interval_ms=60_000)
        writer.start()
        writer.close()
    assert list(read_bucket(storage).state.partitions) == [tp]


def test_segments_without_a_manifest_are_reported_and_empty_directories_are_not(tmp_path):
    storage = LocalFolderStorage(tmp_path / "remote")
    tp = TopicIdPartition(uuid.uuid4(), "orders", 0)
    segment = _segment(tp, 0, 10)
    directory = partition_manifest_key(tp).rsplit("/", 1)[0]
    (tmp_path / "remote" / directory).mkdir(parents=True)
    (tmp_path / "remote" / directory.replace("/0", "/1")).mkdir()
    storage.write_object(f"{directory}/{segment.start_offset:020d}-x.log", b"records")
    index = read_bucket(storage)
    assert index.undescribed == [directory]
    assert index.partitions == 2


def test_a_corrupt_manifest_is_an_error_not_a_guess(tmp_path):
    storage = LocalFolderStorage(tmp_path / "remote")
    tp = TopicIdPartition(uuid.uuid4(), "orders", 0)
    storage.write_object(partition_manifest_key(tp), encode_manifest([_segment(tp, 0, 10)], 1)[:-1])
    with pytest.raises(ManifestError, match="partition.manifest"):
        read_bucket(storage)
