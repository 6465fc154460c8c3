"""The header of one Kafka record batch (magic 2): its fixed fields, attribute bits and CRC32C.

Layout of a v2 batch (all integers big-endian)::

    baseOffset int64 | batchLength int32 | partitionLeaderEpoch int32 | magic int8 | crc uint32 |
    attributes int16 | lastOffsetDelta int32 | baseTimestamp int64 | maxTimestamp int64 |
    producerId int64 | producerEpoch int16 | baseSequence int32 | recordsCount int32 | records...

``batchLength`` counts everything after itself, so a batch occupies ``12 + batchLength`` bytes.
The CRC is CRC-32C over attributes to the end of the batch.

The header is read with one precompiled ``struct.Struct`` rather than ``construct``: the proxy
parses it for every batch it routes or tiers, and a single ``unpack_from`` is an order of
magnitude cheaper than a declarative parse.

Slicing a byte range into batches is :mod:`protocol.record_set`; the records inside a batch are
:mod:`protocol.records`.
"""

from __future__ import annotations

import enum
import struct
from typing import NamedTuple

import crc32c

from protocol.buffers import Buffer, _as_view
from protocol.compression import Compression
from protocol.errors import ProtocolError

# baseOffset, batchLength, partitionLeaderEpoch, magic, crc, attributes, lastOffsetDelta,
# baseTimestamp, maxTimestamp, producerId, producerEpoch, baseSequence, recordsCount
_HEADER = struct.Struct(">qiibIhiqqqhii")
HEADER_SIZE = _HEADER.size  # 61
LOG_OVERHEAD = 12  # baseOffset + batchLength precede the bytes batchLength counts
MIN_BATCH_LENGTH = HEADER_SIZE - LOG_OVERHEAD  # 49: a v2 batch with no records
MAGIC = 2
_MAGIC_AT = 16  # same position in every message format, so old message sets are recognisable
_CRC_AT = 17
_CRC_START = 21  # attributes onwards is covered by the CRC
_RECORDS_COUNT_AT = 57
_CRC = struct.Struct(">I")

_ATTR_CODEC = 0x07
_ATTR_LOG_APPEND_TIME = 0x08
_ATTR_TRANSACTIONAL = 0x10
_ATTR_CONTROL = 0x20
_ATTR_DELETE_HORIZON = 0x40


_CODECS = tuple(Compression)


class TimestampType(enum.IntEnum):
    CREATE_TIME = 0
    LOG_APPEND_TIME = 1


class BatchHeader(NamedTuple):
    base_offset: int
    batch_length: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int  # Kafka's "firstTimestamp" (or the delete horizon, see has_delete_horizon)
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    records_count: int

    @property
    def size(self) -> int:
        """Bytes the whole batch occupies, framing included."""
        return LOG_OVERHEAD + self.batch_length

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        return self.base_offset + self.last_offset_delta + 1

    @property
    def compression(self) -> Compression:
        codec = self.attributes & _ATTR_CODEC
        if codec >= len(_CODECS):
            raise ProtocolError(f"unknown compression codec {codec} in batch attributes")
        return _CODECS[codec]

    @property
    def timestamp_type(self) -> TimestampType:
        return TimestampType.LOG_APPEND_TIME if self.attributes & _ATTR_LOG_APPEND_TIME else TimestampType.CREATE_TIME

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & _ATTR_TRANSACTIONAL)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & _ATTR_CONTROL)

    @property
    def has_delete_horizon(self) -> bool:
        return bool(self.attributes & _ATTR_DELETE_HORIZON)

    @property
    def delete_horizon(self) -> int | None:
        """The log cleaner's tombstone deadline (KIP-534), stored in the base timestamp field."""
        return self.base_timestamp if self.attributes & _ATTR_DELETE_HORIZON else None


def read_header(buf: Buffer, pos: int = 0) -> BatchHeader:
    """The header of the v2 batch at ``pos``; ProtocolError unless it is a whole, plausible one.

    Only the header is checked: the batch body may be shorter than ``size`` here.
    """
    left = len(buf) - pos
    if left > _MAGIC_AT and buf[pos + _MAGIC_AT] != MAGIC:
        raise ProtocolError(f"batch has magic {buf[pos + _MAGIC_AT]}; only record batch v2 is supported", pos + _MAGIC_AT)
    if left < HEADER_SIZE:
        raise ProtocolError(f"batch header truncated: {max(left, 0)} of {HEADER_SIZE} bytes", pos)
    header = BatchHeader._make(_HEADER.unpack_from(buf, pos))
    if header.batch_length < MIN_BATCH_LENGTH:
        raise ProtocolError(f"batch length {header.batch_length} is below the {MIN_BATCH_LENGTH} of a v2 header", pos + 8)
    return header


# -- CRC ----------------------------------------------------------------------------------------


def compute_crc(batch: Buffer) -> int:
    """CRC-32C of a whole batch's bytes from attributes to the end (``batch`` is exactly one batch)."""
    if len(batch) < _CRC_START:
        raise ProtocolError(f"batch of {len(batch)} bytes ends before its CRC-covered range")
    return crc32c.crc32c(_as_view(batch)[_CRC_START:])


def verify_crc(batch: Buffer) -> bool:
    """Whether the stored CRC matches the batch's bytes; ProtocolError if it is not a whole v2 batch.

    Bytes past the batch's own size are ignored, so a view that runs on into later data is fine.
    """
    view = _as_view(batch)
    header = read_header(view)
    if len(view) < header.size:
        raise ProtocolError(f"batch truncated: {len(view)} of {header.size} bytes", len(view))
    return header.crc == crc32c.crc32c(view[_CRC_START : header.size])
