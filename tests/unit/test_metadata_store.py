"""The RemoteLogMetadataManager contract on the embedded journal store: the javadoc's state machine,
queries by epoch and offset, partition deletes, and crash safety (torn writes, kill -9)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
import uuid
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tiering.metadata.journal_store import JOURNAL_NAME, FileMetadataStore, read_journal
from tiering.metadata.state import InvalidStateTransitionError, MetadataState
from tiering.model import (
    RemoteLogDivergence,
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    RemoteLogSegmentState,
    RemotePartitionDeleteMetadata,
    RemotePartitionDeleteState,
    TopicIdPartition,
)
from tiering.storage.api import RemoteResourceNotFoundError

S = RemoteLogSegmentState
TP = TopicIdPartition(uuid.UUID(int=7), "orders", 0)


def segment(start: int, end: int, epochs: tuple[tuple[int, int], ...] | None = None, *, txn: bool = False,
            tp: TopicIdPartition = TP) -> RemoteLogSegmentMetadata:
    return RemoteLogSegmentMetadata(RemoteLogSegmentId(tp, uuid.uuid4()), start, end, 1000 + end, 1, 1, 10 * (end - start + 1),
                                    epochs or ((0, start),), tx_index_empty=not txn)


def update(m: RemoteLogSegmentMetadata, state: RemoteLogSegmentState) -> RemoteLogSegmentMetadataUpdate:
    return RemoteLogSegmentMetadataUpdate(m.segment_id, 5, state, 1, b"where" if state == S.COPY_SEGMENT_FINISHED else None)


def copied(store: FileMetadataStore, m: RemoteLogSegmentMetadata) -> None:
    store.add_remote_log_segment_metadata(m)
    store.update_remote_log_segment_metadata(update(m, S.COPY_SEGMENT_FINISHED))


@pytest.fixture
def store(tmp_path: Path) -> FileMetadataStore:
    with FileMetadataStore(tmp_path) as s:
        yield s


def test_add_must_start_in_copy_segment_started(store):
    m = segment(0, 9)
    with pytest.raises(ValueError):
        store.add_remote_log_segment_metadata(RemoteLogSegmentMetadata(**{**m.__dict__, "state": S.COPY_SEGMENT_FINISHED}))
    store.add_remote_log_segment_metadata(m)
    with pytest.raises(ValueError):
        store.add_remote_log_segment_metadata(m)  # the same id twice


@pytest.mark.parametrize("path", [
    [S.COPY_SEGMENT_FINISHED, S.DELETE_SEGMENT_STARTED, S.DELETE_SEGMENT_FINISHED],
    [S.DELETE_SEGMENT_STARTED, S.DELETE_SEGMENT_FINISHED],
])
def test_valid_paths_through_the_state_machine(store, path):
    m = segment(0, 9)
    store.add_remote_log_segment_metadata(m)
    for state in path:
        store.update_remote_log_segment_metadata(update(m, state))
    assert list(store.list_remote_log_segments(TP)) == []  # DELETE_SEGMENT_FINISHED forgets it


@given(st.lists(st.sampled_from(list(S)), min_size=1, max_size=6))
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_every_invalid_transition_raises_and_writes_nothing(tmp_path_factory, states):
    with FileMetadataStore(tmp_path_factory.mktemp("rlmm")) as s:
        m = segment(0, 9)
        s.add_remote_log_segment_metadata(m)
        current = S.COPY_SEGMENT_STARTED
        for state in states:
            before = s.path.stat().st_size
            if state == S.COPY_SEGMENT_STARTED or not current.can_move_to(state):
                with pytest.raises(ValueError):
                    s.update_remote_log_segment_metadata(update(m, state))
                assert s.path.stat().st_size == before
            else:
                s.update_remote_log_segment_metadata(update(m, state))
                current = state
                if state == S.DELETE_SEGMENT_FINISHED:
                    break


def test_update_of_an_unknown_segment_is_resource_not_found(store):
    with pytest.raises(RemoteResourceNotFoundError):
        store.update_remote_log_segment_metadata(update(segment(0, 9), S.COPY_SEGMENT_FINISHED))


def test_queries_by_epoch_and_offset(store):
    a = segment(0, 99, ((0, 0), (1, 50)))
    b = segment(100, 199, ((1, 100), (3, 150)), txn=True)
    c = segment(200, 299, ((3, 200),))
    for m in (a, b):
        copied(store, m)
    store.add_remote_log_segment_metadata(c)  # still copying: invisible to readers
    assert store.remote_log_segment_metadata(TP, 0, 49).segment_id == a.segment_id
    assert store.remote_log_segment_metadata(TP, 0, 50) is None  # offset 50 was written under epoch 1
    assert store.remote_log_segment_metadata(TP, 1, 50).segment_id == a.segment_id
    assert store.remote_log_segment_metadata(TP, 1, 120).segment_id == b.segment_id
    assert store.remote_log_segment_metadata(TP, 3, 250) is None
    assert store.highest_offset_for_epoch(TP, 0) == 49
    assert store.highest_offset_for_epoch(TP, 1) == 149
    assert store.highest_offset_for_epoch(TP, 3) == 199
    assert store.highest_offset_for_epoch(TP, 2) is None
    assert [m.start_offset for m in store.list_remote_log_segments(TP)] == [0, 100, 200]
    assert [m.start_offset for m in store.list_remote_log_segments(TP, 3)] == [100, 200]
    assert store.remote_log_size(TP, 1) == a.segment_size_bytes + b.segment_size_bytes
    assert store.next_segment_with_txn_index(TP, 1, 0).segment_id == b.segment_id
    assert store.next_segment_with_txn_index(TP, 0, 0) is None
    assert store.segment_for_offset(TP, 150).segment_id == b.segment_id
    assert store.segment_for_offset(TP, 250) is None
    assert store.copied_segments(TP)[1].custom_metadata == b"where"


def test_partition_delete_states(store):
    copied(store, segment(0, 9))
    mark = RemotePartitionDeleteMetadata(TP, RemotePartitionDeleteState.DELETE_PARTITION_MARKED, 1, 1)
    with pytest.raises(InvalidStateTransitionError):
        store.put_remote_partition_delete_metadata(
            RemotePartitionDeleteMetadata(TP, RemotePartitionDeleteState.DELETE_PARTITION_STARTED, 1, 1))
    store.put_remote_partition_delete_metadata(mark)
    with pytest.raises(ValueError):
        store.add_remote_log_segment_metadata(segment(10, 19))  # no new copies into a deleted partition
    for state in (RemotePartitionDeleteState.DELETE_PARTITION_STARTED, RemotePartitionDeleteState.DELETE_PARTITION_FINISHED):
        store.put_remote_partition_delete_metadata(RemotePartitionDeleteMetadata(TP, state, 2, 1))
    assert store.partition_delete_state(TP) == RemotePartitionDeleteState.DELETE_PARTITION_FINISHED
    assert list(store.list_remote_log_segments(TP)) == []


def test_leadership_callbacks(store):
    other = TopicIdPartition(TP.topic_id, TP.topic, 1)
    store.on_partition_leadership_changes({TP, other}, set())
    store.on_partition_leadership_changes(set(), {other})
    assert store.leader_partitions == {TP}
    store.on_stop_partitions({TP})
    assert store.leader_partitions == set()
    assert store.is_ready(TP)


def test_reopen_restores_state_and_compaction_keeps_it(tmp_path):
    with FileMetadataStore(tmp_path, compact_slack=5) as s:
        kept = [segment(i * 10, i * 10 + 9) for i in range(4)]
        for m in kept:
            copied(s, m)
        gone = segment(40, 49)
        copied(s, gone)
        s.update_remote_log_segment_metadata(update(gone, S.DELETE_SEGMENT_STARTED))
        s.update_remote_log_segment_metadata(update(gone, S.DELETE_SEGMENT_FINISHED))
        before = list(s.list_remote_log_segments(TP))
    entries, _ = read_journal((tmp_path / JOURNAL_NAME).read_bytes())
    assert len(entries) < 13  # compacted at least once (13 records were written)
    with FileMetadataStore(tmp_path) as s:
        assert list(s.list_remote_log_segments(TP)) == before


def test_a_divergence_is_kept_once_and_survives_reopen_and_compaction(tmp_path):
    first = RemoteLogDivergence(TP, 100, 149, 4, 3, 1000)
    other_epoch = replace(first, leader_epoch=5, event_timestamp_ms=1001)
    with FileMetadataStore(tmp_path) as s:
        s.put_remote_log_divergence(first)
        s.put_remote_log_divergence(replace(first, event_timestamp_ms=2000))  # the same fact, found again
        s.put_remote_log_divergence(other_epoch)
        s.put_remote_log_data_loss(TP, 0, 9, 1)  # its sibling record stays apart
        assert s.divergences(TP) == [first, other_epoch]
        assert s.data_loss(TP) == [(0, 9)]
        assert s.divergences(TopicIdPartition(TP.topic_id, TP.topic, 1)) == []
    with FileMetadataStore(tmp_path) as s:  # replayed from the journal
        assert s.divergences(TP) == [first, other_epoch]
        s.compact()
    entries, _ = read_journal((tmp_path / JOURNAL_NAME).read_bytes())
    assert len(entries) == 3  # two divergences and the data loss
    with FileMetadataStore(tmp_path) as s:
        assert s.divergences(TP) == [first, other_epoch]  # timestamps kept through the snapshot
        assert s.data_loss(TP) == [(0, 9)]


_DIVERGENCES = st.lists(st.builds(
    lambda partition, first, length, remote_epoch, epoch, ts: RemoteLogDivergence(
        TopicIdPartition(TP.topic_id, TP.topic, partition), first, first + length, remote_epoch, epoch, ts),
    st.integers(0, 1), st.integers(0, 3), st.integers(0, 2), st.integers(0, 1), st.integers(-1, 1),
    st.integers(0, 5)), max_size=30)


@settings(max_examples=200, deadline=None)
@given(_DIVERGENCES)
def test_divergences_apply_once_and_snapshot_records_rebuild_them(records):
    state = MetadataState()
    for record in records:
        state.check(record)  # any range may be written
        state.apply(record)
    for tp, partition in state.partitions.items():
        facts = [replace(d, event_timestamp_ms=0) for d in partition.divergences]
        assert len(set(facts)) == len(facts)  # one per fact, whatever the timestamps
        firsts: dict[RemoteLogDivergence, RemoteLogDivergence] = {}
        for record in records:
            if record.topic_id_partition == tp:
                firsts.setdefault(replace(record, event_timestamp_ms=0), record)
        assert partition.divergences == list(firsts.values())  # the first of each, in order
    rebuilt = MetadataState()
    for record in state.snapshot_records():
        rebuilt.apply(record)
    assert {tp: p.divergences for tp, p in rebuilt.partitions.items()} == \
        {tp: p.divergences for tp, p in state.partitions.items()}
    assert rebuilt.size_of_live_records() == state.size_of_live_records() == sum(
        len(p.divergences) for p in state.partitions.values())


def test_a_torn_write_is_cut_off(tmp_path):
    with FileMetadataStore(tmp_path) as s:
        first, second = segment(0, 9), segment(10, 19)
        copied(s, first)
        copied(s, second)
    journal = tmp_path / JOURNAL_NAME
    data = journal.read_bytes()
    for cut in (1, 5, 9, 20):
        journal.write_bytes(data[:-cut])
        with FileMetadataStore(tmp_path) as s:
            # The last entry (second's FINISHED update) is gone whole; the rest is intact.
            states = {m.segment_id: m.state for m in s.list_remote_log_segments(TP)}
            assert states == {first.segment_id: S.COPY_SEGMENT_FINISHED, second.segment_id: S.COPY_SEGMENT_STARTED}
        assert journal.stat().st_size < len(data)
        journal.write_bytes(data)


def test_a_corrupt_byte_stops_replay_there(tmp_path):
    with FileMetadataStore(tmp_path) as s:
        first, second = segment(0, 9), segment(10, 19)
        copied(s, first)
        copied(s, second)
    journal = tmp_path / JOURNAL_NAME
    data = bytearray(journal.read_bytes())
    data[-3] ^= 0xFF
    journal.write_bytes(bytes(data))
    with FileMetadataStore(tmp_path) as s:
        assert [m.state for m in s.list_remote_log_segments(TP)] == [S.COPY_SEGMENT_FINISHED, S.COPY_SEGMENT_STARTED]


WRITER = textwrap.dedent("""
    import sys, uuid
    from tiering.metadata.journal_store import FileMetadataStore
    from tiering.model import *
    tp = TopicIdPartition(uuid.UUID(int=7), "orders", 0)
    store = FileMetadataStore(sys.argv[1], compact_slack=50)
    for i in range(100000):
        m = RemoteLogSegmentMetadata(RemoteLogSegmentId(tp, uuid.uuid4()), i * 10, i * 10 + 9, 1, 1, 1, 10, ((0, i * 10),))
        store.add_remote_log_segment_metadata(m)
        store.update_remote_log_segment_metadata(RemoteLogSegmentMetadataUpdate(
            m.segment_id, 1, RemoteLogSegmentState.COPY_SEGMENT_FINISHED, 1))
        print(i, flush=True)
""")


@pytest.mark.parametrize("delay", [0.3, 0.7, 1.1])
def test_survives_kill_9_while_writing(tmp_path, delay):
    """A writer appending (and compacting every 50 records) is killed at a random moment: what it
    reported as written is there, and the journal replays to a consistent, contiguous state."""
    root = Path(__file__).resolve().parents[2]
    process = subprocess.Popen([sys.executable, "-c", WRITER, str(tmp_path)], stdout=subprocess.PIPE,
                               cwd=root, env={**os.environ, "PYTHONPATH": str(root)})
    time.sleep(delay + 1.0)  # interpreter start-up, then writing
    os.kill(process.pid, signal.SIGKILL)
    reported = process.stdout.read().split()
    process.wait(10)
    assert reported, "the writer wrote nothing before the kill"
    acknowledged = int(reported[-1])
    with FileMetadataStore(tmp_path) as s:
        segments = list(s.list_remote_log_segments(TP))
        finished = [m for m in segments if m.state == S.COPY_SEGMENT_FINISHED]
        assert len(finished) >= acknowledged + 1
        assert [m.start_offset for m in finished] == [10 * i for i in range(len(finished))]
        assert len(segments) - len(finished) <= 1  # at most the one in flight
