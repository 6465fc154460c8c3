"""The remote log metadata every store keeps in memory (:class:`MetadataState`): the records so
far applied in order, the segment and partition-delete state machines they must follow
(:meth:`MetadataState.check`), and the queries readers ask of it.

Replay (a store reading its own journal, or another instance's records from the metadata topic)
goes through :meth:`MetadataState.apply`, which trusts that the writer validated. Not
thread-safe by itself: ``tiering.metadata.manager.RemoteLogMetadataManager`` holds a lock around it.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import dataclass, field

from tiering.model import (
    ArchivedGroupOffset,
    ClusterTieringConfigs,
    RemoteLogDataLoss,
    RemoteLogDivergence,
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    RemoteLogSegmentState,
    RemoteLogStartOffset,
    RemotePartitionDeleteMetadata,
    RemotePartitionDeleteState,
    TopicIdPartition,
    TopicTieringState,
)
from tiering.storage.api import RemoteResourceNotFoundError

log = logging.getLogger(__name__)

RemoteLogMetadata = (RemoteLogSegmentMetadata | RemoteLogSegmentMetadataUpdate | RemotePartitionDeleteMetadata
                     | TopicTieringState | RemoteLogStartOffset | RemoteLogDataLoss | RemoteLogDivergence
                     | ArchivedGroupOffset | ClusterTieringConfigs)

_FINISHED = RemoteLogSegmentState.COPY_SEGMENT_FINISHED

_PARTITION_DELETE_TRANSITIONS: dict[RemotePartitionDeleteState | None, set[RemotePartitionDeleteState]] = {
    None: {RemotePartitionDeleteState.DELETE_PARTITION_MARKED},
    # A remover that restarts repeats STARTED; marking twice is harmless.
    RemotePartitionDeleteState.DELETE_PARTITION_MARKED: {
        RemotePartitionDeleteState.DELETE_PARTITION_MARKED,
        RemotePartitionDeleteState.DELETE_PARTITION_STARTED,
    },
    RemotePartitionDeleteState.DELETE_PARTITION_STARTED: {
        RemotePartitionDeleteState.DELETE_PARTITION_STARTED,
        RemotePartitionDeleteState.DELETE_PARTITION_FINISHED,
    },
    RemotePartitionDeleteState.DELETE_PARTITION_FINISHED: set(),
}


class InvalidStateTransitionError(ValueError):
    """A segment or partition-delete update that the state machine does not allow."""


def _divergence_key(record: RemoteLogDivergence) -> tuple[TopicIdPartition, int, int, int, int]:
    """What makes two divergence records the same fact (their timestamps aside)."""
    return (record.topic_id_partition, record.first_offset, record.last_offset, record.remote_leader_epoch,
            record.leader_epoch)


def epoch_ranges(segment: RemoteLogSegmentMetadata) -> list[tuple[int, int, int]]:
    """``(epoch, first offset, last offset)`` for each leader epoch inside a segment."""
    epochs = segment.segment_leader_epochs
    ranges = []
    for i, (epoch, start) in enumerate(epochs):
        end = epochs[i + 1][1] - 1 if i + 1 < len(epochs) else segment.end_offset
        ranges.append((epoch, start, end))
    return ranges


@dataclass
class PartitionState:
    """Everything known about one partition's remote log."""

    segments: dict[RemoteLogSegmentId, RemoteLogSegmentMetadata] = field(default_factory=dict)
    delete_state: RemotePartitionDeleteState | None = None
    log_start_offset: int = 0  # raised by DeleteRecords; offsets below it are gone
    # (first, last) offset ranges the brokers deleted before they were tiered, in order
    data_loss: list[tuple[int, int]] = field(default_factory=list)
    # ranges the remote tier held but the cluster's log replaced (cut back), in order; each kept
    # once whatever its timestamp
    divergences: list[RemoteLogDivergence] = field(default_factory=list)
    # Finished segments ordered by start offset, rebuilt lazily after a change.
    _finished: list[RemoteLogSegmentMetadata] | None = None

    def finished(self) -> list[RemoteLogSegmentMetadata]:
        if self._finished is None:
            self._finished = sorted(
                (s for s in self.segments.values() if s.state == _FINISHED), key=lambda s: s.start_offset
            )
        return self._finished

    def changed(self) -> None:
        self._finished = None


class MetadataState:
    """The remote log metadata of every partition, as the records so far describe it.

    Not thread-safe by itself; :class:`RemoteLogMetadataManager` holds a lock around it.
    """

    def __init__(self) -> None:
        self.partitions: dict[TopicIdPartition, PartitionState] = {}
        self.topics: dict[str, TopicTieringState] = {}  # by topic name; deleted ones kept
        # Consumer groups' offsets in archived topics (never in a bucket's manifests: the cluster's own)
        self.group_offsets: dict[tuple[str, TopicIdPartition], ArchivedGroupOffset] = {}
        self.cluster_configs: ClusterTieringConfigs | None = None  # none set dynamically yet
        self._readable: list[TopicIdPartition] | None = None  # until the next apply

    def partition(self, tp: TopicIdPartition) -> PartitionState:
        state = self.partitions.get(tp)
        if state is None:
            state = self.partitions[tp] = PartitionState()
        return state

    # --- validation (public write path) ---------------------------------------------------

    def check(self, record: RemoteLogMetadata) -> None:
        """Raise if ``record`` may not be written now; otherwise return."""
        if isinstance(record, RemoteLogSegmentMetadata):
            if record.state != RemoteLogSegmentState.COPY_SEGMENT_STARTED:
                raise ValueError(f"new segment metadata must be COPY_SEGMENT_STARTED, not {record.state.name}")
            state = self.partitions.get(record.topic_id_partition)
            if state is not None and state.delete_state is not None:
                raise ValueError(f"{record.topic_id_partition} is being deleted ({state.delete_state.name})")
            if state is not None and record.segment_id in state.segments:
                raise ValueError(f"segment {record.segment_id.id} already exists")
        elif isinstance(record, RemoteLogSegmentMetadataUpdate):
            if record.state == RemoteLogSegmentState.COPY_SEGMENT_STARTED:
                raise ValueError("an update cannot move a segment to COPY_SEGMENT_STARTED")
            current = self.segment(record.segment_id)
            if current is None:
                raise RemoteResourceNotFoundError(f"no remote segment {record.segment_id.id} to update")
            if not current.state.can_move_to(record.state):
                raise InvalidStateTransitionError(
                    f"segment {record.segment_id.id}: {current.state.name} -> {record.state.name} is not allowed"
                )
        elif isinstance(record, RemotePartitionDeleteMetadata):
            state = self.partitions.get(record.topic_id_partition)
            current = state.delete_state if state is not None else None
            if record.state not in _PARTITION_DELETE_TRANSITIONS[current]:
                source = current.name if current is not None else "no delete state"
                raise InvalidStateTransitionError(
                    f"{record.topic_id_partition}: {source} -> {record.state.name} is not allowed"
                )
        elif isinstance(record, TopicTieringState):
            current = self.topics.get(record.topic)
            if current is not None and current.topic_id == record.topic_id and record.tiered_epoch < current.tiered_epoch:
                raise InvalidStateTransitionError(
                    f"topic {record.topic}: tiered epoch {record.tiered_epoch} is older than {current.tiered_epoch}")
        elif isinstance(record, RemoteLogDataLoss | RemoteLogDivergence | ArchivedGroupOffset | ClusterTieringConfigs):
            pass  # a fact observed (a range, repeats applied once), or a commit (the last one wins)
        elif isinstance(record, RemoteLogStartOffset):
            state = self.partitions.get(record.topic_id_partition)
            if state is not None and record.log_start_offset < state.log_start_offset:
                raise InvalidStateTransitionError(
                    f"{record.topic_id_partition}: log start cannot move back from {state.log_start_offset} "
                    f"to {record.log_start_offset}")
        else:
            raise TypeError(f"not remote log metadata: {type(record).__name__}")

    # --- applying records (write path after persisting, and replay) ------------------------

    def apply(self, record: RemoteLogMetadata) -> None:
        """Apply a persisted record. Lenient: replay must not stop on one odd record."""
        self._readable = None
        if isinstance(record, RemoteLogSegmentMetadata):
            state = self.partition(record.topic_id_partition)
            state.segments[record.segment_id] = record
            state.changed()
        elif isinstance(record, RemoteLogSegmentMetadataUpdate):
            state = self.partition(record.segment_id.topic_id_partition)
            current = state.segments.get(record.segment_id)
            if current is None:
                log.warning("metadata update for unknown segment %s ignored", record.segment_id.id)
                return
            if record.state == RemoteLogSegmentState.DELETE_SEGMENT_FINISHED:
                del state.segments[record.segment_id]
            else:
                state.segments[record.segment_id] = current.with_update(record)
            state.changed()
        elif isinstance(record, RemotePartitionDeleteMetadata):
            state = self.partition(record.topic_id_partition)
            state.delete_state = record.state
            if record.state == RemotePartitionDeleteState.DELETE_PARTITION_FINISHED:
                state.segments.clear()
                state.changed()
        elif isinstance(record, TopicTieringState):
            self.topics[record.topic] = record
        elif isinstance(record, RemoteLogStartOffset):
            state = self.partition(record.topic_id_partition)
            state.log_start_offset = max(state.log_start_offset, record.log_start_offset)
        elif isinstance(record, RemoteLogDataLoss):
            state = self.partition(record.topic_id_partition)
            gap = (record.first_offset, record.last_offset)
            if gap not in state.data_loss:
                state.data_loss.append(gap)
        elif isinstance(record, ArchivedGroupOffset):
            self.group_offsets[(record.group_id, record.topic_id_partition)] = record
        elif isinstance(record, ClusterTieringConfigs):
            self.cluster_configs = record
        elif isinstance(record, RemoteLogDivergence):
            state = self.partition(record.topic_id_partition)
            key = _divergence_key(record)
            if all(_divergence_key(d) != key for d in state.divergences):
                state.divergences.append(record)

    def snapshot_records(self) -> Iterator[RemoteLogMetadata]:
        """Records that rebuild this state when applied in order (for compaction/snapshots)."""
        for _, topic in sorted(self.topics.items()):
            yield topic
        for tp in sorted(self.partitions):
            yield from self.partition_records(tp)
        for _, offset in sorted(self.group_offsets.items()):
            yield offset
        if self.cluster_configs is not None:
            yield self.cluster_configs

    def partition_records(self, tp: TopicIdPartition) -> Iterator[RemoteLogMetadata]:
        """Records that rebuild ``tp``'s state when applied in order (none if it has none)."""
        state = self.partitions.get(tp)
        if state is None:
            return
        yield from sorted(state.segments.values(), key=lambda s: (s.start_offset, s.segment_id.id))
        if state.delete_state is not None:
            yield RemotePartitionDeleteMetadata(tp, state.delete_state, 0, -1)
        if state.log_start_offset > 0:
            yield RemoteLogStartOffset(tp, state.log_start_offset, 0)
        for first, last in state.data_loss:
            yield RemoteLogDataLoss(tp, first, last, 0)
        yield from state.divergences

    # --- queries ---------------------------------------------------------------------------

    def segment(self, segment_id: RemoteLogSegmentId) -> RemoteLogSegmentMetadata | None:
        state = self.partitions.get(segment_id.topic_id_partition)
        return state.segments.get(segment_id) if state is not None else None

    def finished(self, tp: TopicIdPartition) -> list[RemoteLogSegmentMetadata]:
        state = self.partitions.get(tp)
        return state.finished() if state is not None else []

    def readable_partitions(self) -> list[TopicIdPartition]:
        """Partitions whose remote data clients may read: not being deleted, of the topic's
        current incarnation (its id), and not disabled with the ``delete`` policy. Asked on every
        Fetch, so kept until the next record is applied: the same list, which callers must not
        change (the proxy's Fetch filter keys its lookups by it)."""
        if self._readable is None:
            self._readable = self._find_readable()
        return self._readable

    def _find_readable(self) -> list[TopicIdPartition]:
        readable = []
        for tp, state in self.partitions.items():
            if state.delete_state is not None:
                continue
            topic = self.topics.get(tp.topic)
            if topic is not None and (topic.topic_id != tp.topic_id or not topic.remote_readable):
                continue
            readable.append(tp)
        return sorted(readable)

    def size_of_live_records(self) -> int:
        return len(self.topics) + len(self.group_offsets) + sum(
            len(s.segments) + (s.delete_state is not None) + (s.log_start_offset > 0) + len(s.data_loss)
            + len(s.divergences)
            for s in self.partitions.values())
