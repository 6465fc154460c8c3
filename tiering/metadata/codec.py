"""Adapters between ``tiering.model`` values and the metadata-topic records of
``protocol.metadata_records``, so the metadata manager can speak in model objects while the
byte layout stays in ``protocol`` (which must not import ``tiering``)."""

from __future__ import annotations

from protocol import metadata_records as mr
from protocol.errors import ProtocolError
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

RemoteLogMetadata = (RemoteLogSegmentMetadata | RemoteLogSegmentMetadataUpdate | RemotePartitionDeleteMetadata
                     | TopicTieringState | RemoteLogStartOffset | RemoteLogDataLoss | RemoteLogDivergence
                     | ArchivedGroupOffset | ClusterTieringConfigs)


def _tp_entry(tp: TopicIdPartition) -> mr.TopicIdPartitionEntry:
    return mr.TopicIdPartitionEntry(tp.topic, tp.topic_id, tp.partition)


def _tp(entry: mr.TopicIdPartitionEntry) -> TopicIdPartition:
    return TopicIdPartition(entry.id, entry.name, entry.partition)


def _segment_id_entry(segment_id: RemoteLogSegmentId) -> mr.RemoteLogSegmentIdEntry:
    return mr.RemoteLogSegmentIdEntry(_tp_entry(segment_id.topic_id_partition), segment_id.id)


def _segment_id(entry: mr.RemoteLogSegmentIdEntry) -> RemoteLogSegmentId:
    return RemoteLogSegmentId(_tp(entry.topic_id_partition), entry.id)


def to_record(metadata: RemoteLogMetadata) -> mr.MetadataRecord:
    """The protocol record for a model value."""
    if isinstance(metadata, RemoteLogSegmentMetadata):
        return mr.RemoteLogSegmentMetadataRecord(
            remote_log_segment_id=_segment_id_entry(metadata.segment_id),
            start_offset=metadata.start_offset,
            end_offset=metadata.end_offset,
            broker_id=metadata.broker_id,
            max_timestamp_ms=metadata.max_timestamp_ms,
            event_timestamp_ms=metadata.event_timestamp_ms,
            segment_leader_epochs=tuple(
                mr.SegmentLeaderEpochEntry(epoch, offset) for epoch, offset in metadata.segment_leader_epochs
            ),
            segment_size_in_bytes=metadata.segment_size_bytes,
            custom_metadata=metadata.custom_metadata,
            remote_log_segment_state=int(metadata.state),
            txn_index_empty=metadata.tx_index_empty,
        )
    if isinstance(metadata, RemoteLogSegmentMetadataUpdate):
        return mr.RemoteLogSegmentMetadataUpdateRecord(
            remote_log_segment_id=_segment_id_entry(metadata.segment_id),
            broker_id=metadata.broker_id,
            event_timestamp_ms=metadata.event_timestamp_ms,
            custom_metadata=metadata.custom_metadata,
            remote_log_segment_state=int(metadata.state),
        )
    if isinstance(metadata, RemotePartitionDeleteMetadata):
        return mr.RemotePartitionDeleteMetadataRecord(
            topic_id_partition=_tp_entry(metadata.topic_id_partition),
            broker_id=metadata.broker_id,
            event_timestamp_ms=metadata.event_timestamp_ms,
            remote_partition_delete_state=int(metadata.state),
        )
    if isinstance(metadata, TopicTieringState):
        return mr.TopicTieringStateRecord(
            topic_name=metadata.topic,
            topic_id=metadata.topic_id,
            deleted=metadata.deleted,
            tiered_epoch=metadata.tiered_epoch,
            tiering_state=-1 if metadata.state is None else int(metadata.state),
            disable_policy=int(metadata.disable_policy),
            configs=tuple(mr.TopicConfigEntry(k, v) for k, v in metadata.configs),
            event_timestamp_ms=metadata.event_timestamp_ms,
        )
    if isinstance(metadata, RemoteLogStartOffset):
        return mr.RemoteLogStartOffsetRecord(
            topic_id_partition=_tp_entry(metadata.topic_id_partition),
            log_start_offset=metadata.log_start_offset,
            event_timestamp_ms=metadata.event_timestamp_ms,
        )
    if isinstance(metadata, RemoteLogDataLoss):
        return mr.RemoteLogDataLossRecord(
            topic_id_partition=_tp_entry(metadata.topic_id_partition),
            first_offset=metadata.first_offset,
            last_offset=metadata.last_offset,
            event_timestamp_ms=metadata.event_timestamp_ms,
        )
    if isinstance(metadata, RemoteLogDivergence):
        return mr.RemoteLogDivergenceRecord(
            topic_id_partition=_tp_entry(metadata.topic_id_partition),
            first_offset=metadata.first_offset,
            last_offset=metadata.last_offset,
            remote_leader_epoch=metadata.remote_leader_epoch,
            leader_epoch=metadata.leader_epoch,
            event_timestamp_ms=metadata.event_timestamp_ms,
        )
    if isinstance(metadata, ArchivedGroupOffset):
        return mr.ArchivedGroupOffsetRecord(
            group_id=metadata.group_id,
            topic_id_partition=_tp_entry(metadata.topic_id_partition),
            committed_offset=metadata.offset,
            committed_leader_epoch=metadata.leader_epoch,
            committed_metadata=metadata.metadata.encode() if metadata.metadata is not None else None,
            event_timestamp_ms=metadata.event_timestamp_ms,
        )
    if isinstance(metadata, ClusterTieringConfigs):
        return mr.ClusterTieringConfigsRecord(tuple(mr.TopicConfigEntry(k, v) for k, v in metadata.configs),
                                              metadata.event_timestamp_ms)
    raise TypeError(f"not remote log metadata: {type(metadata).__name__}")


def from_record(record: mr.MetadataRecord) -> RemoteLogMetadata:
    """The model value for a protocol record. A record that decodes but breaks the model's
    rules (say, an empty leader-epoch list) raises ProtocolError, as bad bytes do."""
    try:
        if isinstance(record, mr.RemoteLogSegmentMetadataRecord):
            return RemoteLogSegmentMetadata(
                segment_id=_segment_id(record.remote_log_segment_id),
                start_offset=record.start_offset,
                end_offset=record.end_offset,
                max_timestamp_ms=record.max_timestamp_ms,
                broker_id=record.broker_id,
                event_timestamp_ms=record.event_timestamp_ms,
                segment_size_bytes=record.segment_size_in_bytes,
                segment_leader_epochs=tuple((e.leader_epoch, e.offset) for e in record.segment_leader_epochs),
                state=RemoteLogSegmentState(record.remote_log_segment_state),
                custom_metadata=record.custom_metadata,
                tx_index_empty=record.txn_index_empty,
            )
        if isinstance(record, mr.RemoteLogSegmentMetadataUpdateRecord):
            return RemoteLogSegmentMetadataUpdate(
                segment_id=_segment_id(record.remote_log_segment_id),
                event_timestamp_ms=record.event_timestamp_ms,
                state=RemoteLogSegmentState(record.remote_log_segment_state),
                broker_id=record.broker_id,
                custom_metadata=record.custom_metadata,
            )
        if isinstance(record, mr.RemotePartitionDeleteMetadataRecord):
            return RemotePartitionDeleteMetadata(
                topic_id_partition=_tp(record.topic_id_partition),
                state=RemotePartitionDeleteState(record.remote_partition_delete_state),
                event_timestamp_ms=record.event_timestamp_ms,
                broker_id=record.broker_id,
            )
        if isinstance(record, mr.TopicTieringStateRecord):
            return TopicTieringState(
                topic=record.topic_name,
                topic_id=record.topic_id,
                tiered_epoch=record.tiered_epoch,
                state=None if record.tiering_state < 0 else TieringState(record.tiering_state),
                disable_policy=DisablePolicy(record.disable_policy),
                configs=tuple((c.name, c.value) for c in record.configs),
                deleted=record.deleted,
                event_timestamp_ms=record.event_timestamp_ms,
            )
        if isinstance(record, mr.RemoteLogStartOffsetRecord):
            return RemoteLogStartOffset(
                topic_id_partition=_tp(record.topic_id_partition),
                log_start_offset=record.log_start_offset,
                event_timestamp_ms=record.event_timestamp_ms,
            )
        if isinstance(record, mr.RemoteLogDataLossRecord):
            return RemoteLogDataLoss(
                topic_id_partition=_tp(record.topic_id_partition),
                first_offset=record.first_offset,
                last_offset=record.last_offset,
                event_timestamp_ms=record.event_timestamp_ms,
            )
        if isinstance(record, mr.RemoteLogDivergenceRecord):
            return RemoteLogDivergence(
                topic_id_partition=_tp(record.topic_id_partition),
                first_offset=record.first_offset,
                last_offset=record.last_offset,
                remote_leader_epoch=record.remote_leader_epoch,
                leader_epoch=record.leader_epoch,
                event_timestamp_ms=record.event_timestamp_ms,
            )
        if isinstance(record, mr.ArchivedGroupOffsetRecord):
            return ArchivedGroupOffset(
                group_id=record.group_id,
                topic_id_partition=_tp(record.topic_id_partition),
                offset=record.committed_offset,
                leader_epoch=record.committed_leader_epoch,
                metadata=record.committed_metadata.decode() if record.committed_metadata is not None else None,
                event_timestamp_ms=record.event_timestamp_ms,
            )
        if isinstance(record, mr.ClusterTieringConfigsRecord):
            return ClusterTieringConfigs(tuple((c.name, c.value) for c in record.configs), record.event_timestamp_ms)
    except ProtocolError:
        raise
    except UnicodeDecodeError:
        raise ProtocolError("ArchivedGroupOffsetRecord metadata is not UTF-8") from None
    except ValueError as exc:
        raise ProtocolError(f"{type(record).__name__} is not valid metadata: {exc}") from None
    raise TypeError(f"not a remote log metadata record: {type(record).__name__}")


def serialize(metadata: RemoteLogMetadata) -> bytes:
    """The metadata-topic record value for a model value."""
    return mr.encode_record(to_record(metadata))


def deserialize(data: bytes | memoryview) -> RemoteLogMetadata:
    """A model value from a metadata-topic record value; ProtocolError for anything malformed."""
    return from_record(mr.decode_record(data))


def metadata_partition(tp: TopicIdPartition, partitions: int = mr.DEFAULT_METADATA_PARTITIONS) -> int:
    """The metadata-topic partition that holds ``tp``'s records (Kafka's partitioner rule)."""
    return mr.metadata_partition_for(tp.topic_id, tp.partition, partitions)
