"""KIP-405's RemoteLogMetadataManager: the interface both stores implement.

A store persists the records of segments (metadata and updates), partitions (delete metadata,
remote log starts, data-loss ranges, divergences), topics (tiering states), archived groups'
offsets and the cluster's dynamic tiering defaults (``tiering.metadata.codec`` turns them into
bytes), and answers queries from a :class:`tiering.metadata.state.MetadataState` rebuilt from those
records. The public write methods validate a record against the current state first (the segment
state machine of the javadoc, partition delete states), then persist it, then apply it, so an
invalid call raises and leaves nothing behind.

Methods are synchronous and thread-safe: the copier runs on worker threads and the proxy's
reader calls in from its own threads.
"""

from __future__ import annotations

import bisect
import logging
import threading
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Iterator

from tiering.metadata.state import MetadataState, RemoteLogMetadata, epoch_ranges
from tiering.model import (
    ArchivedGroupOffset,
    ClusterTieringConfigs,
    RemoteLogDataLoss,
    RemoteLogDivergence,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    RemoteLogStartOffset,
    RemotePartitionDeleteMetadata,
    RemotePartitionDeleteState,
    TopicIdPartition,
    TopicTieringState,
)

log = logging.getLogger(__name__)


class FencedError(Exception):
    """A metadata write from an owner that a newer owner of its metadata partition has fenced:
    the record is in the log but every instance ignores it. The writer must stop working on that
    metadata partition's user partitions and remove what it uploaded for the write."""


class RemoteLogMetadataManager(ABC):
    """KIP-405's RemoteLogMetadataManager (see the javadoc in the project seeds).

    Subclasses implement :meth:`_persist` (make a validated record durable, or raise) and may
    override :meth:`is_ready` and the leadership callbacks.
    """

    def __init__(self) -> None:
        self._lock = threading.RLock()
        self._state = MetadataState()
        self._leaders: set[TopicIdPartition] = set()
        self._followers: set[TopicIdPartition] = set()
        self._write_listeners: list[Callable[[RemoteLogMetadata], None]] = []

    def add_write_listener(self, listener: Callable[[RemoteLogMetadata], None]) -> None:
        """Call ``listener`` with every record this instance writes, once it is applied (outside
        the store's lock; a listener that raises is logged, the write stands)."""
        self._write_listeners.append(listener)

    @abstractmethod
    def _persist(self, record: RemoteLogMetadata) -> None:
        """Make ``record`` durable, then apply it to ``self._state`` (under ``self._lock``)."""

    def close(self) -> None:  # noqa: B027 - stores with nothing to release need not override
        """Release files, producers and consumers."""

    def __enter__(self) -> RemoteLogMetadataManager:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- writes ----------------------------------------------------------------------------

    def _write(self, record: RemoteLogMetadata) -> None:
        with self._lock:
            self._state.check(record)
            self._persist(record)
        for listener in self._write_listeners:
            try:
                listener(record)
            except Exception:
                log.exception("metadata write listener %r failed on %s", listener, type(record).__name__)

    def add_remote_log_segment_metadata(self, metadata: RemoteLogSegmentMetadata) -> None:
        """Record a segment whose copy is starting (state COPY_SEGMENT_STARTED)."""
        self._write(metadata)

    def update_remote_log_segment_metadata(self, update: RemoteLogSegmentMetadataUpdate) -> None:
        """Move a segment along COPY_SEGMENT_STARTED -> COPY_SEGMENT_FINISHED ->
        DELETE_SEGMENT_STARTED -> DELETE_SEGMENT_FINISHED (STARTED may go straight to
        DELETE_SEGMENT_STARTED); anything else raises InvalidStateTransitionError."""
        self._write(update)

    def put_remote_partition_delete_metadata(self, metadata: RemotePartitionDeleteMetadata) -> None:
        """Move a partition along DELETE_PARTITION_MARKED -> STARTED -> FINISHED."""
        self._write(metadata)

    def put_topic_tiering_state(self, state: TopicTieringState) -> None:
        """Record a topic's tiering configs and KIP-950 state (this proxy's extension)."""
        self._write(state)

    def put_remote_log_start_offset(self, tp: TopicIdPartition, offset: int, event_timestamp_ms: int) -> None:
        """Raise ``tp``'s remote log start (DeleteRecords); it never moves back."""
        self._write(RemoteLogStartOffset(tp, offset, event_timestamp_ms))

    def put_remote_log_data_loss(self, tp: TopicIdPartition, first: int, last: int, event_timestamp_ms: int) -> None:
        """Record offsets ``first..last`` of ``tp`` as deleted by the brokers before they were tiered."""
        self._write(RemoteLogDataLoss(tp, first, last, event_timestamp_ms))

    def commit_archived_offset(self, offset: ArchivedGroupOffset) -> None:
        """Record a consumer group's offset in an archived topic's partition (the last one wins)."""
        self._write(offset)

    def put_cluster_tiering_configs(self, configs: ClusterTieringConfigs) -> None:
        """Record the cluster-wide dynamic defaults of the broker keys the proxy keeps (the last wins)."""
        self._write(configs)

    def cluster_tiering_configs(self) -> ClusterTieringConfigs | None:
        # No lock: one read of an immutable value, and the remote reads ask at every Fetch.
        return self._state.cluster_configs

    def archived_offsets(self, group_id: str) -> dict[TopicIdPartition, ArchivedGroupOffset]:
        """The group's committed offsets in archived topics, by partition."""
        with self._lock:
            return {tp: o for (group, tp), o in self._state.group_offsets.items() if group == group_id}

    def data_loss(self, tp: TopicIdPartition) -> list[tuple[int, int]]:
        """The ranges of ``tp`` the brokers deleted before they were tiered, oldest first."""
        with self._lock:
            state = self._state.partitions.get(tp)
            return list(state.data_loss) if state is not None else []

    def put_remote_log_divergence(self, divergence: RemoteLogDivergence) -> None:
        """Record a range the remote tier held but the cluster's log replaced (cut back from the
        remote tier); the same range and epochs recorded again are kept once."""
        self._write(divergence)

    def divergences(self, tp: TopicIdPartition) -> list[RemoteLogDivergence]:
        """The ranges of ``tp`` cut back because the cluster's log replaced them, oldest first."""
        with self._lock:
            state = self._state.partitions.get(tp)
            return list(state.divergences) if state is not None else []

    # --- reads -----------------------------------------------------------------------------

    def topic_tiering_state(self, topic: str) -> TopicTieringState | None:
        with self._lock:
            return self._state.topics.get(topic)

    def topic_tiering_states(self) -> dict[str, TopicTieringState]:
        with self._lock:
            return dict(self._state.topics)

    def remote_log_start_offset(self, tp: TopicIdPartition) -> int:
        """The floor DeleteRecords set for ``tp`` (0 when none)."""
        with self._lock:
            state = self._state.partitions.get(tp)
            return state.log_start_offset if state is not None else 0

    def remote_log_segment_metadata(
        self, tp: TopicIdPartition, epoch_for_offset: int, offset: int
    ) -> RemoteLogSegmentMetadata | None:
        """The copied segment holding ``offset`` written under leader epoch ``epoch_for_offset``."""
        with self._lock:
            for segment in self._segments_with_epoch(tp, epoch_for_offset, finished_only=True):
                for epoch, first, last in epoch_ranges(segment):
                    if epoch == epoch_for_offset and first <= offset <= last:
                        return segment
            return None

    def segment_for_offset(self, tp: TopicIdPartition, offset: int) -> RemoteLogSegmentMetadata | None:
        """The copied segment holding ``offset``, whatever its epoch (what a consumer read needs)."""
        with self._lock:
            state = self._state.partitions.get(tp)
            if state is None or offset < state.log_start_offset:
                return None
            finished = state.finished()
            i = bisect.bisect_right([s.start_offset for s in finished], offset) - 1
            if i >= 0 and finished[i].end_offset >= offset:
                return finished[i]
            return None

    def highest_offset_for_epoch(self, tp: TopicIdPartition, leader_epoch: int) -> int | None:
        """The highest offset copied under ``leader_epoch``, or None."""
        with self._lock:
            highest = None
            for segment in self._segments_with_epoch(tp, leader_epoch, finished_only=True):
                for epoch, _, last in epoch_ranges(segment):
                    if epoch == leader_epoch:
                        highest = last if highest is None else max(highest, last)
            return highest

    def list_remote_log_segments(
        self, tp: TopicIdPartition, leader_epoch: int | None = None
    ) -> Iterator[RemoteLogSegmentMetadata]:
        """Every segment of ``tp`` in any state, or only those holding ``leader_epoch``; sorted
        by start offset. The result is a snapshot: later writes do not change it."""
        with self._lock:
            if leader_epoch is None:
                state = self._state.partitions.get(tp)
                segments = list(state.segments.values()) if state is not None else []
            else:
                segments = self._segments_with_epoch(tp, leader_epoch, finished_only=False)
        return iter(sorted(segments, key=lambda s: s.start_offset))

    def remote_log_size(self, tp: TopicIdPartition, leader_epoch: int) -> int:
        """Bytes of all remote segments holding ``leader_epoch``."""
        with self._lock:
            return sum(s.segment_size_bytes for s in self._segments_with_epoch(tp, leader_epoch, finished_only=False))

    def next_segment_with_txn_index(
        self, tp: TopicIdPartition, epoch: int, offset: int
    ) -> RemoteLogSegmentMetadata | None:
        """The first copied segment of ``epoch`` ending at or after ``offset`` whose transaction
        index is not empty."""
        with self._lock:
            for segment in sorted(
                self._segments_with_epoch(tp, epoch, finished_only=True), key=lambda s: s.start_offset
            ):
                if segment.end_offset >= offset and not segment.tx_index_empty:
                    return segment
            return None

    def partition_delete_state(self, tp: TopicIdPartition) -> RemotePartitionDeleteState | None:
        with self._lock:
            state = self._state.partitions.get(tp)
            return state.delete_state if state is not None else None

    def copied_segments(self, tp: TopicIdPartition) -> list[RemoteLogSegmentMetadata]:
        """COPY_SEGMENT_FINISHED segments of ``tp`` by start offset: what readers may serve."""
        with self._lock:
            return list(self._state.finished(tp))

    def partitions(self) -> list[TopicIdPartition]:
        with self._lock:
            return sorted(self._state.partitions)

    def partition_records(self, tp: TopicIdPartition) -> list[RemoteLogMetadata]:
        """Records that rebuild ``tp``'s state (what the bucket's manifest of ``tp`` holds)."""
        with self._lock:
            return list(self._state.partition_records(tp))

    def readable_partitions(self) -> list[TopicIdPartition]:
        """Partitions whose remote data clients may read (see :meth:`MetadataState.readable_partitions`)."""
        with self._lock:
            return self._state.readable_partitions()

    def state_snapshot(self) -> MetadataState:
        """A copy of everything the store knows, for readers that plan work from it (Spark)."""
        with self._lock:
            copy = MetadataState()
            for record in self._state.snapshot_records():
                copy.apply(record)
            return copy

    def is_ready(self, tp: TopicIdPartition) -> bool:
        """True when the store has caught up on ``tp``'s metadata."""
        return True

    # --- leadership ------------------------------------------------------------------------

    def on_partition_leadership_changes(
        self, leader_partitions: Iterable[TopicIdPartition], follower_partitions: Iterable[TopicIdPartition]
    ) -> None:
        """This instance now copies (leads) ``leader_partitions`` and only reads the others."""
        with self._lock:
            leaders, followers = set(leader_partitions), set(follower_partitions)
            self._leaders = (self._leaders - followers) | leaders
            self._followers = (self._followers - leaders) | followers

    def on_stop_partitions(self, partitions: Iterable[TopicIdPartition]) -> None:
        """This instance no longer handles ``partitions`` (moved away or deleted)."""
        with self._lock:
            stopped = set(partitions)
            self._leaders -= stopped
            self._followers -= stopped

    @property
    def leader_partitions(self) -> set[TopicIdPartition]:
        with self._lock:
            return set(self._leaders)

    def _segments_with_epoch(
        self, tp: TopicIdPartition, leader_epoch: int, *, finished_only: bool
    ) -> list[RemoteLogSegmentMetadata]:
        state = self._state.partitions.get(tp)
        if state is None:
            return []
        segments = state.finished() if finished_only else state.segments.values()
        return [s for s in segments if any(epoch == leader_epoch for epoch, _ in s.segment_leader_epochs)]
