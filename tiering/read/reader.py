"""Reading record batches back from the remote tier, for Fetch and ListOffsets.

``read(tp, offset, max_bytes)`` returns whole batches, as the broker served them, starting with
the batch that holds ``offset``: the segment comes from the metadata store, the byte position
from the segment's offset index (then a short forward scan over batch headers), and the bytes
from ranged reads of the ``.log`` object. At least one batch is returned whatever ``max_bytes``
says (as Kafka does), and a read that ends a segment inside its budget continues into the next.
The aborted transactions a ``read_committed`` reader needs come from the transaction indexes.
"""

from __future__ import annotations

from dataclasses import dataclass

from protocol.record_batch import HEADER_SIZE, read_header
from protocol.record_set import iter_batches
from protocol.records import decode_records
from protocol.remote_formats.offset_index import lookup_position
from protocol.remote_formats.time_index import lookup_offset_for_timestamp
from protocol.remote_formats.transaction_index import AbortedTxn, aborted_in_range, decode_transaction_index
from tiering.metadata.manager import RemoteLogMetadataManager
from tiering.model import IndexType, RemoteLogSegmentMetadata, TopicIdPartition
from tiering.read.chunk_cache import ChunkCache
from tiering.read.index_cache import IndexCache
from tiering.storage.api import RemoteStorageManager

# Bytes read past the indexed position in one go when looking for the batch holding an offset;
# index entries are index.interval.bytes (4 KiB by default) apart, so one read usually suffices.
_SCAN_CHUNK = 64 * 1024


@dataclass
class RemoteRead:
    records: bytes
    next_offset: int  # the offset after the last returned batch
    aborted: list[AbortedTxn]


class RemoteReader:
    def __init__(self, rlmm: RemoteLogMetadataManager, rsm: RemoteStorageManager,
                 index_cache_bytes: int = 1 << 30, chunk_cache_bytes: int = 0, chunk_bytes: int = 1 << 20,
                 prefetch_threads: int = 2) -> None:
        self.rlmm = rlmm
        self.rsm = rsm
        self.indexes = IndexCache(index_cache_bytes)
        self.chunks = ChunkCache(rsm, chunk_cache_bytes, chunk_bytes, prefetch_threads, self._next_segment) \
            if chunk_cache_bytes > 0 else None

    def close(self) -> None:
        if self.chunks is not None:
            self.chunks.close()

    def _next_segment(self, segment: RemoteLogSegmentMetadata) -> RemoteLogSegmentMetadata | None:
        return self.rlmm.segment_for_offset(segment.topic_id_partition, segment.end_offset + 1)

    def _fetch(self, segment: RemoteLogSegmentMetadata, start: int, end: int) -> bytes:
        """Bytes ``start..end`` (inclusive) of the segment's log, through the chunk cache if any."""
        if self.chunks is not None:
            return self.chunks.read(segment, start, end)
        return self.rsm.fetch_log_segment(segment, start, end)

    def log_start(self, tp: TopicIdPartition) -> int | None:
        """``Rx``: the first offset the remote tier holds, or None."""
        segments = self.rlmm.copied_segments(tp)
        if not segments:
            return None
        start = max(segments[0].start_offset, self.rlmm.remote_log_start_offset(tp))
        return start if start <= segments[-1].end_offset else None

    def log_end(self, tp: TopicIdPartition) -> int | None:
        """``Ry``: the last offset the remote tier holds, or None."""
        segments = self.rlmm.copied_segments(tp)
        return segments[-1].end_offset if segments else None

    def leader_epoch_of(self, tp: TopicIdPartition, offset: int) -> int:
        """The leader epoch of the record at ``offset`` in the remote tier, -1 if not there."""
        segment = self.rlmm.segment_for_offset(tp, offset)
        if segment is None:
            return -1
        epoch = -1
        for e, start in segment.segment_leader_epochs:
            if start <= offset:
                epoch = e
        return epoch

    def end_offset_for_epoch(self, tp: TopicIdPartition, epoch: int) -> tuple[int, int] | None:
        """OffsetForLeaderEpoch over the remote tier: the largest tiered epoch <= ``epoch`` and the
        offset where the next epoch starts (or ``Ry + 1`` when no later epoch is tiered); None
        when every tiered epoch is newer."""
        history: list[tuple[int, int]] = []
        segments = self.rlmm.copied_segments(tp)
        for segment in segments:
            for e, start in segment.segment_leader_epochs:
                if not history or e > history[-1][0]:
                    history.append((e, start))
        found = None
        for i, (e, _) in enumerate(history):
            if e > epoch:
                break
            found = (e, history[i + 1][1] if i + 1 < len(history) else segments[-1].end_offset + 1)
        return found

    def max_timestamp(self, tp: TopicIdPartition) -> int | None:
        """The largest record timestamp in the remote tier, or None."""
        segments = self.rlmm.copied_segments(tp)
        return max(s.max_timestamp_ms for s in segments) if segments else None

    def read(self, tp: TopicIdPartition, offset: int, max_bytes: int, *, read_committed: bool = False) -> RemoteRead | None:
        """Batches from the one holding ``offset``; None when no copied segment holds it."""
        segment = self.rlmm.segment_for_offset(tp, offset)
        if segment is None:
            return None
        out = bytearray()
        first_offset = offset
        while segment is not None:
            position = self._position(segment, offset)
            budget = max(max_bytes - len(out), 0)
            chunk = self._batches(segment, position, offset, budget, must_return_one=not out)
            out += chunk
            if chunk:
                last = _last_offset(chunk)
                offset = last + 1
            if offset <= segment.end_offset or len(out) >= max_bytes:
                break  # the budget ended inside this segment
            segment = self.rlmm.segment_for_offset(tp, segment.end_offset + 1)
        aborted = self._aborted(tp, first_offset, offset) if read_committed and out else []
        return RemoteRead(bytes(out), offset, aborted)

    def _position(self, segment: RemoteLogSegmentMetadata, offset: int) -> int:
        if offset <= segment.start_offset:
            return 0
        index = self.indexes.get(self.rsm, segment, IndexType.OFFSET)
        return lookup_position(index, segment.start_offset, offset).position

    def _batches(self, segment: RemoteLogSegmentMetadata, position: int, offset: int, budget: int,
                 *, must_return_one: bool) -> bytes:
        """Whole batches from ``position`` (skipping those that end before ``offset``)."""
        size = segment.segment_size_bytes
        # Skip forward over batches that end before offset, reading headers only.
        while position < size:
            header_bytes = self._fetch(segment, position, min(position + HEADER_SIZE, size) - 1)
            header = read_header(header_bytes, 0)
            if header.last_offset >= offset:
                break
            position += header.size
        if position >= size:
            return b""
        want = max(budget, 0)
        if must_return_one:
            header = read_header(self._fetch(segment, position, position + HEADER_SIZE - 1), 0)
            want = max(want, header.size)
        if want <= 0:
            return b""
        data = self._fetch(segment, position, min(position + want, size) - 1)
        whole = 0
        for _, batch in iter_batches(data):
            whole += len(batch)
        return data[:whole]

    def _aborted(self, tp: TopicIdPartition, start: int, upper: int) -> list[AbortedTxn]:
        """Aborted transactions overlapping [start, upper): their markers are at or after start,
        possibly in later segments."""
        found: list[AbortedTxn] = []
        for segment in self.rlmm.copied_segments(tp):
            if segment.end_offset < start or segment.tx_index_empty:
                continue
            index = self.indexes.get(self.rsm, segment, IndexType.TRANSACTION)
            found += aborted_in_range(index, start, upper - 1)
        return found

    def aborted_before(self, tp: TopicIdPartition, offset: int) -> set[tuple[int, int]]:
        """(producer id, first offset) of the tiered aborted transactions whose abort marker is
        below ``offset``: a fetch from ``offset`` must not be told about them."""
        ended: set[tuple[int, int]] = set()
        for segment in self.rlmm.copied_segments(tp):
            if segment.start_offset >= offset:
                break
            if segment.tx_index_empty:
                continue
            index = self.indexes.get(self.rsm, segment, IndexType.TRANSACTION)
            ended.update((t.producer_id, t.first_offset) for t in decode_transaction_index(index) if t.last_offset < offset)
        return ended

    def offset_for_timestamp(self, tp: TopicIdPartition, timestamp: int) -> tuple[int, int] | None:
        """(offset, timestamp) of the first record with timestamp >= ``timestamp`` in the remote
        tier, or None when no remote record is that new."""
        floor = self.rlmm.remote_log_start_offset(tp)
        for segment in self.rlmm.copied_segments(tp):
            if segment.max_timestamp_ms < timestamp or segment.end_offset < floor:
                continue
            time_index = self.indexes.get(self.rsm, segment, IndexType.TIMESTAMP)
            start = lookup_offset_for_timestamp(time_index, segment.start_offset, timestamp)
            position = self._position(segment, start if start is not None else segment.start_offset)
            while position < segment.segment_size_bytes:  # bounded reads, not the whole segment
                data = self._fetch(segment, position, min(position + _SCAN_CHUNK,
                                                                          segment.segment_size_bytes) - 1)
                batches = list(iter_batches(data))
                if not batches:  # one batch larger than the chunk
                    size = read_header(data, 0).size
                    batches = list(iter_batches(self._fetch(segment, position, position + size - 1)))
                for header, batch in batches:
                    position += len(batch)
                    if header.max_timestamp < timestamp or header.is_control:
                        continue
                    for record in decode_records(batch):
                        if record.timestamp >= timestamp and record.offset >= floor:
                            return record.offset, record.timestamp
        return None


def _last_offset(batches: bytes) -> int:
    last = -1
    for header, _ in iter_batches(batches):
        last = header.last_offset
    return last

