"""The records of KIP-405's remote log metadata topic (``__remote_log_metadata``), byte for byte.

Source of truth for the bytes: Apache Kafka's schema files in ``storage/src/main/resources/
message/`` (``RemoteLogSegmentMetadataRecord.json`` apiKey 0, ``RemoteLogSegmentMetadataUpdate
Record.json`` apiKey 1, ``RemotePartitionDeleteMetadataRecord.json`` apiKey 2; version 0,
``flexibleVersions: "0+"``) and the framing of Kafka's ``AbstractApiMessageSerde``. The KIP's
page shows an earlier, non-flexible draft of the same schemas and a framing of just type and
version; the implementation that shipped (and which real brokers write) differs, so we follow
it. A record value is::

    frame_version  uvarint, always 1
    api_key        uvarint, 0/1/2 (Kafka's), 64..69 (this proxy's own, below)
    version        uvarint, 0 (1 is accepted when reading: it only adds tagged fields)
    body           the message in Kafka's flexible encoding: compact (length+1 uvarint)
                   strings, bytes and arrays; every struct, nested ones included, ends with a
                   tagged-field section (uvarint count, then uvarint tag, uvarint size, data)

The segment record carries KIP-917's ``CustomMetadata`` (nullable bytes) as a regular field and
``TxnIndexEmpty`` as tagged field 0 (written only when true, the schema's default being false).
Unknown tagged fields are skipped when reading, as Kafka does. Records go to the metadata
partition given by ``metadata_partition_for`` with a null key.

The layout is declared with ``construct`` (the flexible-encoding building blocks are in
:mod:`protocol.flexible_constructs`); speed does not matter here (a handful of records per
segment copied). Decoders raise ``ProtocolError`` only; encoders raise ``ValueError`` for values
that do not fit the schema.
"""

from __future__ import annotations

import io
import uuid
from typing import NamedTuple

from construct import Construct, ConstructError, Flag, Int8sb, Int32sb, Int64sb, Struct

from protocol.errors import ProtocolError
from protocol.flexible_constructs import (
    CompactNullableBytes,
    CompactString,
    TaggedFields,
    Uuid,
    UVarInt,
    _AsTuple,
    _BoolTag,
    _CompactArray,
)

FRAME_VERSION = 1  # AbstractApiMessageSerde's DEFAULT_FRAME_VERSION
WRITE_VERSION = 0
MAX_READ_VERSION = 1
DEFAULT_METADATA_PARTITIONS = 50  # remote.log.metadata.topic.num.partitions default

SEGMENT_METADATA_API_KEY = 0
SEGMENT_METADATA_UPDATE_API_KEY = 1
PARTITION_DELETE_METADATA_API_KEY = 2
# This proxy's own records, in the same framing (Kafka defines no records for them; only proxies
# read the metadata topic): a topic's tiering configs and KIP-950 state, and a partition's remote
# log start after DeleteRecords, a range the brokers deleted before it was tiered, and a range the
# remote tier held but the cluster's log replaced (cut back from the remote tier); and a consumer
# group's committed offset in an archived topic, which the cluster cannot hold; and the cluster-wide
# dynamic defaults of the tiered-storage broker keys the proxy keeps (kafka-configs --entity-default).
TOPIC_TIERING_STATE_API_KEY = 64
REMOTE_LOG_START_OFFSET_API_KEY = 65
REMOTE_LOG_DATA_LOSS_API_KEY = 66
REMOTE_LOG_DIVERGENCE_API_KEY = 67
ARCHIVED_GROUP_OFFSET_API_KEY = 68
CLUSTER_TIERING_CONFIGS_API_KEY = 69
TIERING_STATES = range(-1, 3)  # none, ENABLED, DISABLING, DISABLED
DISABLE_POLICIES = range(0, 2)  # retain, delete

# State ids as RemoteLogSegmentState.id() / RemotePartitionDeleteState.id() define them.
SEGMENT_STATES = range(0, 4)  # COPY_SEGMENT_STARTED .. DELETE_SEGMENT_FINISHED
PARTITION_DELETE_STATES = range(0, 3)  # DELETE_PARTITION_MARKED .. DELETE_PARTITION_FINISHED


# --- the records as plain values --------------------------------------------------------------


class TopicIdPartitionEntry(NamedTuple):
    name: str
    id: uuid.UUID
    partition: int


class RemoteLogSegmentIdEntry(NamedTuple):
    topic_id_partition: TopicIdPartitionEntry
    id: uuid.UUID


class SegmentLeaderEpochEntry(NamedTuple):
    leader_epoch: int
    offset: int  # first offset of that epoch within the segment


class RemoteLogSegmentMetadataRecord(NamedTuple):
    remote_log_segment_id: RemoteLogSegmentIdEntry
    start_offset: int
    end_offset: int
    broker_id: int
    max_timestamp_ms: int
    event_timestamp_ms: int
    segment_leader_epochs: tuple[SegmentLeaderEpochEntry, ...]
    segment_size_in_bytes: int
    custom_metadata: bytes | None
    remote_log_segment_state: int
    txn_index_empty: bool = False  # tagged field 0; records written before it existed read False


class RemoteLogSegmentMetadataUpdateRecord(NamedTuple):
    remote_log_segment_id: RemoteLogSegmentIdEntry
    broker_id: int
    event_timestamp_ms: int
    custom_metadata: bytes | None
    remote_log_segment_state: int


class RemotePartitionDeleteMetadataRecord(NamedTuple):
    topic_id_partition: TopicIdPartitionEntry
    broker_id: int
    event_timestamp_ms: int
    remote_partition_delete_state: int


class TopicConfigEntry(NamedTuple):
    name: str
    value: str


class TopicTieringStateRecord(NamedTuple):
    topic_name: str
    topic_id: uuid.UUID  # the broker's id, or one the proxy assigned where the broker has none
    deleted: bool
    tiered_epoch: int
    tiering_state: int  # TIERING_STATES
    disable_policy: int  # the policy of the latest disablement (DISABLE_POLICIES)
    configs: tuple[TopicConfigEntry, ...]
    event_timestamp_ms: int


class RemoteLogStartOffsetRecord(NamedTuple):
    topic_id_partition: TopicIdPartitionEntry
    log_start_offset: int
    event_timestamp_ms: int


class RemoteLogDataLossRecord(NamedTuple):
    topic_id_partition: TopicIdPartitionEntry
    first_offset: int
    last_offset: int
    event_timestamp_ms: int


class RemoteLogDivergenceRecord(NamedTuple):
    topic_id_partition: TopicIdPartitionEntry
    first_offset: int
    last_offset: int
    remote_leader_epoch: int  # the remote tier's last leader epoch when the divergence was found
    leader_epoch: int  # the epoch the leader answered OffsetForLeaderEpoch with (-1: none)
    event_timestamp_ms: int


class ArchivedGroupOffsetRecord(NamedTuple):
    group_id: str
    topic_id_partition: TopicIdPartitionEntry
    committed_offset: int
    committed_leader_epoch: int
    committed_metadata: bytes | None  # the client's metadata string, UTF-8
    event_timestamp_ms: int


class ClusterTieringConfigsRecord(NamedTuple):
    configs: tuple[TopicConfigEntry, ...]  # every dynamic default in effect (the record replaces the last)
    event_timestamp_ms: int


MetadataRecord = (RemoteLogSegmentMetadataRecord | RemoteLogSegmentMetadataUpdateRecord
                  | RemotePartitionDeleteMetadataRecord | TopicTieringStateRecord | RemoteLogStartOffsetRecord
                  | RemoteLogDataLossRecord | RemoteLogDivergenceRecord | ArchivedGroupOffsetRecord
                  | ClusterTieringConfigsRecord)


# --- the schemas, declared (field order is the wire order) ------------------------------------

TOPIC_ID_PARTITION_ENTRY = _AsTuple(
    Struct("name" / CompactString, "id" / Uuid, "partition" / Int32sb, "tagged_fields" / TaggedFields),
    TopicIdPartitionEntry,
)
REMOTE_LOG_SEGMENT_ID_ENTRY = _AsTuple(
    Struct("topic_id_partition" / TOPIC_ID_PARTITION_ENTRY, "id" / Uuid, "tagged_fields" / TaggedFields),
    RemoteLogSegmentIdEntry,
)
SEGMENT_LEADER_EPOCH_ENTRY = _AsTuple(
    Struct("leader_epoch" / Int32sb, "offset" / Int64sb, "tagged_fields" / TaggedFields),
    SegmentLeaderEpochEntry,
)
REMOTE_LOG_SEGMENT_METADATA_RECORD = _AsTuple(
    Struct(
        "remote_log_segment_id" / REMOTE_LOG_SEGMENT_ID_ENTRY,
        "start_offset" / Int64sb,
        "end_offset" / Int64sb,
        "broker_id" / Int32sb,
        "max_timestamp_ms" / Int64sb,
        "event_timestamp_ms" / Int64sb,
        "segment_leader_epochs" / _CompactArray(SEGMENT_LEADER_EPOCH_ENTRY),
        "segment_size_in_bytes" / Int32sb,
        "custom_metadata" / CompactNullableBytes,
        "remote_log_segment_state" / Int8sb,
        "tagged_fields" / TaggedFields,
    ),
    RemoteLogSegmentMetadataRecord,
    tags={0: _BoolTag("txn_index_empty")},
)
REMOTE_LOG_SEGMENT_METADATA_UPDATE_RECORD = _AsTuple(
    Struct(
        "remote_log_segment_id" / REMOTE_LOG_SEGMENT_ID_ENTRY,
        "broker_id" / Int32sb,
        "event_timestamp_ms" / Int64sb,
        "custom_metadata" / CompactNullableBytes,
        "remote_log_segment_state" / Int8sb,
        "tagged_fields" / TaggedFields,
    ),
    RemoteLogSegmentMetadataUpdateRecord,
)
REMOTE_PARTITION_DELETE_METADATA_RECORD = _AsTuple(
    Struct(
        "topic_id_partition" / TOPIC_ID_PARTITION_ENTRY,
        "broker_id" / Int32sb,
        "event_timestamp_ms" / Int64sb,
        "remote_partition_delete_state" / Int8sb,
        "tagged_fields" / TaggedFields,
    ),
    RemotePartitionDeleteMetadataRecord,
)
TOPIC_CONFIG_ENTRY = _AsTuple(
    Struct("name" / CompactString, "value" / CompactString, "tagged_fields" / TaggedFields),
    TopicConfigEntry,
)
TOPIC_TIERING_STATE_RECORD = _AsTuple(
    Struct(
        "topic_name" / CompactString,
        "topic_id" / Uuid,
        "deleted" / Flag,
        "tiered_epoch" / Int32sb,
        "tiering_state" / Int8sb,
        "disable_policy" / Int8sb,
        "configs" / _CompactArray(TOPIC_CONFIG_ENTRY),
        "event_timestamp_ms" / Int64sb,
        "tagged_fields" / TaggedFields,
    ),
    TopicTieringStateRecord,
)
REMOTE_LOG_START_OFFSET_RECORD = _AsTuple(
    Struct(
        "topic_id_partition" / TOPIC_ID_PARTITION_ENTRY,
        "log_start_offset" / Int64sb,
        "event_timestamp_ms" / Int64sb,
        "tagged_fields" / TaggedFields,
    ),
    RemoteLogStartOffsetRecord,
)
REMOTE_LOG_DATA_LOSS_RECORD = _AsTuple(
    Struct(
        "topic_id_partition" / TOPIC_ID_PARTITION_ENTRY,
        "first_offset" / Int64sb,
        "last_offset" / Int64sb,
        "event_timestamp_ms" / Int64sb,
        "tagged_fields" / TaggedFields,
    ),
    RemoteLogDataLossRecord,
)
REMOTE_LOG_DIVERGENCE_RECORD = _AsTuple(
    Struct(
        "topic_id_partition" / TOPIC_ID_PARTITION_ENTRY,
        "first_offset" / Int64sb,
        "last_offset" / Int64sb,
        "remote_leader_epoch" / Int32sb,
        "leader_epoch" / Int32sb,
        "event_timestamp_ms" / Int64sb,
        "tagged_fields" / TaggedFields,
    ),
    RemoteLogDivergenceRecord,
)
ARCHIVED_GROUP_OFFSET_RECORD = _AsTuple(
    Struct(
        "group_id" / CompactString,
        "topic_id_partition" / TOPIC_ID_PARTITION_ENTRY,
        "committed_offset" / Int64sb,
        "committed_leader_epoch" / Int32sb,
        "committed_metadata" / CompactNullableBytes,
        "event_timestamp_ms" / Int64sb,
        "tagged_fields" / TaggedFields,
    ),
    ArchivedGroupOffsetRecord,
)
CLUSTER_TIERING_CONFIGS_RECORD = _AsTuple(
    Struct(
        "configs" / _CompactArray(TOPIC_CONFIG_ENTRY),
        "event_timestamp_ms" / Int64sb,
        "tagged_fields" / TaggedFields,
    ),
    ClusterTieringConfigsRecord,
)
FRAME_HEADER = Struct("frame_version" / UVarInt, "api_key" / UVarInt, "version" / UVarInt)

_BODIES: dict[int, Construct] = {
    SEGMENT_METADATA_API_KEY: REMOTE_LOG_SEGMENT_METADATA_RECORD,
    SEGMENT_METADATA_UPDATE_API_KEY: REMOTE_LOG_SEGMENT_METADATA_UPDATE_RECORD,
    PARTITION_DELETE_METADATA_API_KEY: REMOTE_PARTITION_DELETE_METADATA_RECORD,
    TOPIC_TIERING_STATE_API_KEY: TOPIC_TIERING_STATE_RECORD,
    REMOTE_LOG_START_OFFSET_API_KEY: REMOTE_LOG_START_OFFSET_RECORD,
    REMOTE_LOG_DATA_LOSS_API_KEY: REMOTE_LOG_DATA_LOSS_RECORD,
    REMOTE_LOG_DIVERGENCE_API_KEY: REMOTE_LOG_DIVERGENCE_RECORD,
    ARCHIVED_GROUP_OFFSET_API_KEY: ARCHIVED_GROUP_OFFSET_RECORD,
    CLUSTER_TIERING_CONFIGS_API_KEY: CLUSTER_TIERING_CONFIGS_RECORD,
}
_API_KEYS: dict[type, int] = {
    RemoteLogSegmentMetadataRecord: SEGMENT_METADATA_API_KEY,
    RemoteLogSegmentMetadataUpdateRecord: SEGMENT_METADATA_UPDATE_API_KEY,
    RemotePartitionDeleteMetadataRecord: PARTITION_DELETE_METADATA_API_KEY,
    TopicTieringStateRecord: TOPIC_TIERING_STATE_API_KEY,
    RemoteLogStartOffsetRecord: REMOTE_LOG_START_OFFSET_API_KEY,
    RemoteLogDataLossRecord: REMOTE_LOG_DATA_LOSS_API_KEY,
    RemoteLogDivergenceRecord: REMOTE_LOG_DIVERGENCE_API_KEY,
    ArchivedGroupOffsetRecord: ARCHIVED_GROUP_OFFSET_API_KEY,
    ClusterTieringConfigsRecord: CLUSTER_TIERING_CONFIGS_API_KEY,
}


# --- encode / decode --------------------------------------------------------------------------


def encode_record(record: MetadataRecord) -> bytes:
    """The metadata-topic record value for ``record`` (framed, version 0)."""
    api_key = _API_KEYS.get(type(record))
    if api_key is None:
        raise ValueError(f"not a remote log metadata record: {type(record).__name__}")
    problem = _state_problem(record)
    if problem:
        raise ValueError(problem)
    stream = io.BytesIO()
    try:
        FRAME_HEADER.build_stream(
            {"frame_version": FRAME_VERSION, "api_key": api_key, "version": WRITE_VERSION}, stream
        )
        _BODIES[api_key].build_stream(record, stream)
    except ConstructError as exc:
        raise ValueError(f"{type(record).__name__} does not fit its schema: {exc}") from None
    return stream.getvalue()


def encode_segment_metadata(record: RemoteLogSegmentMetadataRecord) -> bytes:
    return encode_record(record)


def encode_segment_metadata_update(record: RemoteLogSegmentMetadataUpdateRecord) -> bytes:
    return encode_record(record)


def encode_partition_delete_metadata(record: RemotePartitionDeleteMetadataRecord) -> bytes:
    return encode_record(record)


def decode_record(data: bytes | memoryview) -> MetadataRecord:
    """Decode one metadata-topic record value into one of the record tuples."""
    raw = bytes(data)
    stream = io.BytesIO(raw)
    try:
        header = FRAME_HEADER.parse_stream(stream)
    except ConstructError as exc:
        raise ProtocolError(f"remote log metadata frame header: {_reason(exc)}", stream.tell()) from None
    if header.frame_version != FRAME_VERSION:
        raise ProtocolError(f"unknown remote log metadata frame version {header.frame_version}", 0)
    body = _BODIES.get(header.api_key)
    if body is None:
        raise ProtocolError(f"unknown remote log metadata apiKey {header.api_key}", 1)
    if header.version > MAX_READ_VERSION:
        raise ProtocolError(f"unsupported version {header.version} of remote log metadata apiKey {header.api_key}")
    start = stream.tell()
    try:
        record = body.parse_stream(stream)
    except ConstructError as exc:
        raise ProtocolError(f"remote log metadata apiKey {header.api_key}: {_reason(exc)}", stream.tell()) from None
    if stream.tell() != len(raw):
        raise ProtocolError(f"{len(raw) - stream.tell()} bytes of garbage after the record", stream.tell())
    problem = _state_problem(record)
    if problem:
        raise ProtocolError(problem, start)
    return record


def _reason(exc: ConstructError) -> str:
    return str(exc).splitlines()[0] if str(exc) else type(exc).__name__


def _state_problem(record: MetadataRecord) -> str | None:
    """States are int8 on the wire but only the ids Kafka's enums define mean anything."""
    if isinstance(record, RemoteLogStartOffsetRecord):
        return None if record.log_start_offset >= 0 else f"negative log start offset {record.log_start_offset}"
    if isinstance(record, RemoteLogDataLossRecord):
        if 0 <= record.first_offset <= record.last_offset:
            return None
        return f"data-loss range {record.first_offset}..{record.last_offset} is not a range of offsets"
    if isinstance(record, RemoteLogDivergenceRecord):
        if 0 <= record.first_offset <= record.last_offset:
            return None
        return f"divergence range {record.first_offset}..{record.last_offset} is not a range of offsets"
    if isinstance(record, ArchivedGroupOffsetRecord):
        return None if record.committed_offset >= -1 else f"committed offset {record.committed_offset}"
    if isinstance(record, ClusterTieringConfigsRecord):
        names = [c.name for c in record.configs]
        return None if len(set(names)) == len(names) else "ClusterTieringConfigsRecord names a config twice"
    if isinstance(record, TopicTieringStateRecord):
        if record.disable_policy not in DISABLE_POLICIES:
            return f"TopicTieringStateRecord has unknown disable policy {record.disable_policy}"
        state, valid = record.tiering_state, TIERING_STATES
    elif isinstance(record, RemotePartitionDeleteMetadataRecord):
        state, valid = record.remote_partition_delete_state, PARTITION_DELETE_STATES
    else:
        state, valid = record.remote_log_segment_state, SEGMENT_STATES
    return None if state in valid else f"{type(record).__name__} has unknown state {state}"


# --- metadata topic partitioning --------------------------------------------------------------


def murmur2(data: bytes) -> int:
    """Kafka's ``Utils.murmur2`` (32-bit MurmurHash2, seed 0x9747b28c), as a signed int32."""
    m, r = 0x5BD1E995, 24
    length = len(data)
    h = (0x9747B28C ^ length) & 0xFFFFFFFF
    full = length & ~3
    for i in range(0, full, 4):
        k = int.from_bytes(data[i : i + 4], "little")
        k = (k * m) & 0xFFFFFFFF
        k ^= k >> r
        k = (k * m) & 0xFFFFFFFF
        h = ((h * m) & 0xFFFFFFFF) ^ k
    tail = length & 3
    if tail == 3:
        h ^= data[full + 2] << 16
    if tail >= 2:
        h ^= data[full + 1] << 8
    if tail >= 1:
        h ^= data[full]
        h = (h * m) & 0xFFFFFFFF
    h ^= h >> 13
    h = (h * m) & 0xFFFFFFFF
    h ^= h >> 15
    return h - (1 << 32) if h & 0x80000000 else h


def _java_long_hash(value: int) -> int:
    """``Long.hashCode``: the two 32-bit halves XORed (as unsigned 32 bits)."""
    value &= 0xFFFFFFFFFFFFFFFF
    return (value ^ (value >> 32)) & 0xFFFFFFFF


def metadata_partition_for(topic_id: uuid.UUID, partition: int, partitions: int = DEFAULT_METADATA_PARTITIONS) -> int:
    """The ``__remote_log_metadata`` partition holding a user partition's records.

    Mirrors Kafka's ``RemoteLogMetadataTopicPartitioner``: ``Objects.hash(topicId least
    significant bits, topicId most significant bits, partition)`` (Java's 31-multiplier hash
    over the boxed values, in 32-bit arithmetic), written as 4 big-endian bytes, hashed with
    murmur2, made positive with ``& 0x7fffffff`` and taken modulo the partition count. The
    topic name plays no part, so a renamed or recreated-with-same-id topic maps the same way.
    """
    if partitions <= 0:
        raise ValueError(f"the metadata topic needs at least one partition, not {partitions}")
    msb, lsb = topic_id.int >> 64, topic_id.int & 0xFFFFFFFFFFFFFFFF
    h = 1
    for element in (_java_long_hash(lsb), _java_long_hash(msb), partition & 0xFFFFFFFF):
        h = (31 * h + element) & 0xFFFFFFFF
    return (murmur2(h.to_bytes(4, "big")) & 0x7FFFFFFF) % partitions
