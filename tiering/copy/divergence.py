"""Finding where a partition's remote tier stopped being the cluster's history, and cutting it back
there (KIP-405's leader-epoch lineage; the rule itself is :mod:`tiering.copy.lineage`).

The copier asks before it copies on under a leader epoch it has not checked (and once for every
remote epoch after a start). A cut records the divergence in the metadata store, rewrites the
segment that straddles the cut up to it (a remote segment is never changed in place: a new one
holds its batches below the cut), and deletes the segments beyond. Each step is safe to repeat
after a crash anywhere in between: the same divergence is found again, its record is kept once,
and a rewrite already made (a finished segment with the same start that ends below the cut) is
not made again.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from pathlib import Path

from protocol.errors import ErrorCode
from protocol.record_set import iter_batches
from protocol.remote_formats.transaction_index import decode_transaction_index
from tiering.broker_client import (
    LEADER_MOVED,
    BrokerClient,
    BrokerClientError,
    LeaderMovedError,
    UnsupportedApiError,
)
from tiering.copy.lineage import UNDEFINED_EPOCH, LineageUnknown, lineage_of, remote_divergence
from tiering.copy.segment import SegmentBuilder
from tiering.metadata.manager import RemoteLogMetadataManager
from tiering.model import IndexType, RemoteLogDivergence, RemoteLogSegmentMetadata, TopicIdPartition
from tiering.storage.api import RemoteStorageManager

log = logging.getLogger(__name__)

# Bytes of a remote segment read at a time when one is rewritten up to a divergence.
_REWRITE_CHUNK_BYTES = 8 << 20


def find_divergence(client: BrokerClient, tp: TopicIdPartition, leader: int, leader_epoch: int,
                    segments: list[RemoteLogSegmentMetadata], *,
                    every_epoch: bool) -> tuple[int, int, int] | None:
    """``(cut, remote tier's last epoch, the leader's epoch answered)`` when the leader's log
    moved on below the remote end, else None. Brokers without leader epochs (noida-db) have
    nothing to compare: None. LeaderMovedError when the broker no longer leads at
    ``leader_epoch``; BrokerClientError when the leader cannot place the remote epochs yet."""
    segment_epochs = [s.segment_leader_epochs for s in segments]
    lineage = lineage_of(segment_epochs)
    if not lineage:
        return None
    answered: list[int] = []

    def end_offset_for(epoch: int) -> tuple[int, int]:
        error, epoch_found, end = client.end_offset_for_epoch(leader, tp.topic, tp.partition, epoch, leader_epoch)
        if error in LEADER_MOVED:
            raise LeaderMovedError(f"OffsetForLeaderEpoch: {ErrorCode.from_code(error).name}")
        if error != ErrorCode.NONE:
            raise BrokerClientError(f"OffsetForLeaderEpoch {tp} epoch {epoch}: {ErrorCode.from_code(error).name}")
        answered.append(epoch_found)
        return epoch_found, end

    try:
        cut = remote_divergence(segment_epochs, max(s.end_offset for s in segments), end_offset_for,
                                every_epoch=every_epoch)
    except UnsupportedApiError:
        return None
    except LineageUnknown as exc:
        raise BrokerClientError(f"cannot place the remote tier of {tp} in the leader's history yet: {exc}") from None
    return None if cut is None else (cut, lineage[-1][0], min(answered, default=UNDEFINED_EPOCH))


class RemoteTierCutter:
    """Cuts one partition's remote tier back at a divergence; ``upload`` records and copies a
    finished segment builder (the copier's), ``delete`` removes a segment."""

    def __init__(self, tp: TopicIdPartition, rlmm: RemoteLogMetadataManager, rsm: RemoteStorageManager,
                 spool_dir: Path, upload: Callable[[SegmentBuilder], None],
                 delete: Callable[[RemoteLogSegmentMetadata], None]) -> None:
        self.tp, self.rlmm, self.rsm, self.spool_dir = tp, rlmm, rsm, spool_dir
        self.upload, self.delete = upload, delete

    def cut(self, cut: int, segments: list[RemoteLogSegmentMetadata], remote_epoch: int, leader_epoch: int,
            index_interval_bytes: int) -> int:
        """Remove every offset from ``cut`` on; returns how many offsets were cut."""
        remote_end = max(s.end_offset for s in segments)
        log.error("DIVERGENCE: %s offsets %d..%d in the remote tier are not the cluster's history (the leader's "
                  "log left remote leader epoch %d at %d: an unclean election, or lost disks); cutting the remote "
                  "tier back to end at %d", self.tp, cut, remote_end, remote_epoch, cut, cut - 1)
        self.rlmm.put_remote_log_divergence(RemoteLogDivergence(
            self.tp, cut, remote_end, remote_epoch, leader_epoch, int(time.time() * 1000)))
        straddling = next((s for s in segments if s.start_offset < cut <= s.end_offset), None)
        if straddling is not None and not any(
                s.start_offset == straddling.start_offset and s.end_offset < cut for s in segments):
            before = [s for s in segments if s.end_offset < straddling.start_offset]
            self.rewrite_up_to(straddling, cut, before, index_interval_bytes)
        for segment in segments:
            if segment.end_offset >= cut:
                self.delete(segment)
        return remote_end - cut + 1

    def rewrite_up_to(self, segment: RemoteLogSegmentMetadata, cut: int, before: list[RemoteLogSegmentMetadata],
                      index_interval_bytes: int) -> None:
        """Upload ``segment``'s batches below ``cut`` as a new segment (read a chunk at a time)."""
        builder = SegmentBuilder(self.spool_dir, index_interval_bytes,
                                 lineage_of(s.segment_leader_epochs for s in before))
        try:
            position, carry = 0, b""
            while True:
                chunk = self.rsm.fetch_log_segment(segment, position, position + _REWRITE_CHUNK_BYTES - 1)
                data = carry + chunk
                walker = iter_batches(data)
                past_cut = False
                for header, batch in walker:
                    if header.last_offset >= cut:
                        past_cut = True
                        break
                    builder.add(header, batch)
                carry = bytes(data[walker.consumed:])
                position += len(chunk)
                if past_cut or not chunk:
                    break
            if builder.empty:
                builder.discard()
                return
            if not segment.tx_index_empty:
                for txn in decode_transaction_index(self.rsm.fetch_index(segment, IndexType.TRANSACTION)):
                    if txn.last_offset < cut:
                        builder.add_aborted(txn.producer_id, txn.first_offset, txn.last_offset)
            log.info("%s: rewriting remote segment %d..%d up to %d", self.tp, segment.start_offset,
                     segment.end_offset, builder.end_offset)
            self.upload(builder)
        except BaseException:
            builder.discard()  # a storage failure leaves it: the whole cut is tried again
            raise
