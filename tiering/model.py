"""The remote tier's vocabulary, as KIP-405 names it: partitions, segment ids, segment metadata and
their states. Plain immutable values; storage and metadata managers exchange these."""

from __future__ import annotations

import enum
import uuid
from dataclasses import dataclass, field, replace


@dataclass(frozen=True, order=True)
class TopicIdPartition:
    topic_id: uuid.UUID
    topic: str
    partition: int

    def __str__(self) -> str:
        return f"{self.topic}-{self.partition} ({self.topic_id})"


@dataclass(frozen=True, order=True)
class RemoteLogSegmentId:
    topic_id_partition: TopicIdPartition
    id: uuid.UUID

    @classmethod
    def generate(cls, tp: TopicIdPartition) -> RemoteLogSegmentId:
        return cls(tp, uuid.uuid4())


class RemoteLogSegmentState(enum.IntEnum):
    COPY_SEGMENT_STARTED = 0
    COPY_SEGMENT_FINISHED = 1
    DELETE_SEGMENT_STARTED = 2
    DELETE_SEGMENT_FINISHED = 3

    def can_move_to(self, target: RemoteLogSegmentState) -> bool:
        return target in _SEGMENT_TRANSITIONS[self]


_SEGMENT_TRANSITIONS = {
    RemoteLogSegmentState.COPY_SEGMENT_STARTED: {
        RemoteLogSegmentState.COPY_SEGMENT_FINISHED,
        RemoteLogSegmentState.DELETE_SEGMENT_STARTED,
    },
    RemoteLogSegmentState.COPY_SEGMENT_FINISHED: {RemoteLogSegmentState.DELETE_SEGMENT_STARTED},
    RemoteLogSegmentState.DELETE_SEGMENT_STARTED: {RemoteLogSegmentState.DELETE_SEGMENT_FINISHED},
    RemoteLogSegmentState.DELETE_SEGMENT_FINISHED: set(),
}


class RemotePartitionDeleteState(enum.IntEnum):
    DELETE_PARTITION_MARKED = 0
    DELETE_PARTITION_STARTED = 1
    DELETE_PARTITION_FINISHED = 2


class IndexType(enum.Enum):
    """The files that travel with a segment; values are the object-name extensions."""

    OFFSET = "index"
    TIMESTAMP = "timeindex"
    TRANSACTION = "txnindex"
    LEADER_EPOCH = "leader-epoch-checkpoint"
    PRODUCER_SNAPSHOT = "snapshot"


@dataclass(frozen=True)
class RemoteLogSegmentMetadata:
    """What the metadata store knows of one remote segment (KIP-405's RemoteLogSegmentMetadata).

    ``segment_leader_epochs`` maps each leader epoch in the segment to its first offset, in
    ascending order; ``custom_metadata`` is whatever the storage plugin returned from the copy
    (KIP-917), or None.
    """

    segment_id: RemoteLogSegmentId
    start_offset: int
    end_offset: int  # inclusive
    max_timestamp_ms: int
    broker_id: int
    event_timestamp_ms: int
    segment_size_bytes: int
    segment_leader_epochs: tuple[tuple[int, int], ...]
    state: RemoteLogSegmentState = RemoteLogSegmentState.COPY_SEGMENT_STARTED
    custom_metadata: bytes | None = None
    tx_index_empty: bool = True

    def __post_init__(self) -> None:
        if self.start_offset < 0 or self.end_offset < self.start_offset:
            raise ValueError(f"segment offsets {self.start_offset}..{self.end_offset} are not a range")
        if not self.segment_leader_epochs:
            raise ValueError("a segment has at least one leader epoch")
        epochs = [e for e, _ in self.segment_leader_epochs]
        offsets = [o for _, o in self.segment_leader_epochs]
        if epochs != sorted(epochs) or offsets != sorted(offsets):
            raise ValueError(f"leader epochs must ascend: {self.segment_leader_epochs}")

    @property
    def topic_id_partition(self) -> TopicIdPartition:
        return self.segment_id.topic_id_partition

    def with_update(self, update: RemoteLogSegmentMetadataUpdate) -> RemoteLogSegmentMetadata:
        return replace(
            self,
            state=update.state,
            event_timestamp_ms=update.event_timestamp_ms,
            broker_id=update.broker_id,
            custom_metadata=update.custom_metadata if update.custom_metadata is not None else self.custom_metadata,
        )


@dataclass(frozen=True)
class RemoteLogSegmentMetadataUpdate:
    segment_id: RemoteLogSegmentId
    event_timestamp_ms: int
    state: RemoteLogSegmentState
    broker_id: int
    custom_metadata: bytes | None = None


@dataclass(frozen=True)
class RemotePartitionDeleteMetadata:
    topic_id_partition: TopicIdPartition
    state: RemotePartitionDeleteState
    event_timestamp_ms: int
    broker_id: int


@dataclass(frozen=True)
class LogSegmentData:
    """A closed log range ready to copy: the record batches and their indexes, as bytes.

    ``log`` holds the batches exactly as the broker served them. Indexes are in the formats of
    ``protocol.remote_formats``.
    """

    log: bytes | memoryview
    offset_index: bytes
    time_index: bytes
    transaction_index: bytes | None
    leader_epoch_index: bytes
    producer_snapshot: bytes = b""
    extra: dict[str, bytes] = field(default_factory=dict)


class TieringState(enum.IntEnum):
    """KIP-950's per-topic tiered storage states."""

    ENABLED = 0
    DISABLING = 1
    DISABLED = 2


class DisablePolicy(enum.IntEnum):
    """``remote.log.disable.policy``: what happens to remote data when tiering is disabled."""

    RETAIN = 0
    DELETE = 1

    @property
    def config_value(self) -> str:
        return self.name.lower()


@dataclass(frozen=True)
class TopicTieringState:
    """A topic's tiering settings that brokers do not keep (``configs``: the tiering keys set on
    the topic) and its KIP-950 lifecycle. ``tiered_epoch`` grows with every enable and disable,
    fencing work started under an earlier one. ``topic_id`` is the broker's id, or one the proxy
    assigned for brokers without topic ids, so a topic recreated under the same name is new."""

    topic: str
    topic_id: uuid.UUID
    tiered_epoch: int = 0
    state: TieringState | None = None  # None: tiering never enabled
    disable_policy: DisablePolicy = DisablePolicy.RETAIN
    configs: tuple[tuple[str, str], ...] = ()
    deleted: bool = False
    event_timestamp_ms: int = 0

    @property
    def config_map(self) -> dict[str, str]:
        return dict(self.configs)

    @property
    def remote_readable(self) -> bool:
        """Whether remote data of this topic may be served (not after a delete-policy disable)."""
        if self.deleted:
            return False
        return not (self.state in (TieringState.DISABLING, TieringState.DISABLED)
                    and self.disable_policy == DisablePolicy.DELETE)

    @property
    def copying(self) -> bool:
        return not self.deleted and self.state == TieringState.ENABLED


@dataclass(frozen=True)
class RemoteLogDataLoss:
    """Offsets ``first_offset..last_offset`` of a partition that the brokers deleted before they
    were tiered: gone from both tiers, recorded so that every instance can report them."""

    topic_id_partition: TopicIdPartition
    first_offset: int
    last_offset: int
    event_timestamp_ms: int

    def __post_init__(self) -> None:
        if not 0 <= self.first_offset <= self.last_offset:
            raise ValueError(f"data-loss range {self.first_offset}..{self.last_offset} is not a range of offsets")


@dataclass(frozen=True)
class RemoteLogDivergence:
    """Offsets ``first_offset..last_offset`` that the remote tier held but the cluster's log
    replaced (an unclean leader election, or a cluster that lost its disks): cut from the remote
    tier at ``first_offset``, recorded so that every instance can report them."""

    topic_id_partition: TopicIdPartition
    first_offset: int
    last_offset: int
    remote_leader_epoch: int  # the remote tier's last leader epoch when the divergence was found
    leader_epoch: int  # the epoch the leader answered OffsetForLeaderEpoch with (-1: none)
    event_timestamp_ms: int

    def __post_init__(self) -> None:
        if not 0 <= self.first_offset <= self.last_offset:
            raise ValueError(f"divergence range {self.first_offset}..{self.last_offset} is not a range of offsets")


@dataclass(frozen=True)
class RemoteLogStartOffset:
    """A partition's remote log start after DeleteRecords: offsets below it are gone, even where
    a remote segment that straddles it still holds them."""

    topic_id_partition: TopicIdPartition
    log_start_offset: int
    event_timestamp_ms: int


@dataclass(frozen=True)
class ArchivedGroupOffset:
    """A consumer group's committed offset in a partition of an archived topic (the cluster does not
    know the topic, so it cannot hold the offset): the last commit wins."""

    group_id: str
    topic_id_partition: TopicIdPartition
    offset: int
    leader_epoch: int = -1
    metadata: str | None = None
    event_timestamp_ms: int = 0


@dataclass(frozen=True)
class ClusterTieringConfigs:
    """The cluster-wide dynamic defaults of the tiered-storage broker keys the proxy keeps, as
    ``kafka-configs.sh --entity-type brokers --entity-default --alter`` set them through it: every
    value in effect (each record replaces the last), over the proxy's properties."""

    configs: tuple[tuple[str, str], ...] = ()
    event_timestamp_ms: int = 0

    @property
    def config_map(self) -> dict[str, str]:
        return dict(self.configs)
