"""Reading record batches back from the remote tier, for Fetch and ListOffsets.

``read(tp, offset, max_bytes)`` returns whole batches, as the broker served them, starting with
the batch that holds ``offset``: the segment comes from the metadata store, the byte position
from where an earlier read ended at that offset, else from the segment's offset index (then a
short forward scan over batch headers), and the bytes from ranged reads of the ``.log`` object.
A consumer reading on asks for the offset after its last read's, so it never waits for an offset
index: against an object store 80 ms away that was a GET in series for almost every segment
(tests/bench/s3_latency.py). At least one batch is returned whatever ``max_bytes``
says (as Kafka does), and a read that ends a segment inside its budget continues into the next.
The aborted transactions a ``read_committed`` reader needs come from the transaction indexes, as
Kafka's own remote reads find them: the remote tier's first, then the brokers' for a transaction
that began below the remote end and whose abort marker the remote tier does not hold yet
(``local_aborted``, asked once per remote end).
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from protocol.record_batch import HEADER_SIZE, read_header
from protocol.record_parts import RecordParts
from protocol.record_set import iter_batches
from protocol.records import decode_records
from protocol.remote_formats.offset_index import lookup_position
from protocol.remote_formats.time_index import lookup_offset_for_timestamp
from protocol.remote_formats.transaction_index import AbortedTxn, aborted_in_range, decode_transaction_index
from tiering.metadata.manager import RemoteLogMetadataManager
from tiering.model import IndexType, RemoteLogSegmentId, RemoteLogSegmentMetadata, TopicIdPartition
from tiering.read.chunk_cache import PREFETCH_MAX_CHUNKS, PREFETCH_THREADS, ChunkCache
from tiering.read.index_cache import IndexCache
from tiering.storage.api import RemoteStorageManager

# Bytes read past the indexed position in one go when looking for the batch holding an offset;
# index entries are index.interval.bytes (4 KiB by default) apart, so one read usually suffices.
_SCAN_CHUNK = 64 * 1024
# How long a partition's reads go without asking the brokers again after they could not say
# which transactions are open across the remote end.
_ASK_AGAIN_S = 1.0
# Where reads ended (segment, next offset -> byte position) remembered at once, least recently
# used dropped first: a few per reader in flight.
_MAX_ENDS = 4096


@dataclass
class RemoteRead:
    records: RecordParts  # views of the chunk cache's chunks (or one read), spliced into the answer
    next_offset: int  # the offset after the last returned batch
    aborted: list[tuple[int, int]]  # (producer id, first offset), as a Fetch answer lists them

    @property
    def size(self) -> int:
        return self.records.nbytes


# (partition, offset) -> the brokers' aborted transactions at ``offset`` (BrokerClient's
# ``aborted_transactions_at``), or None while they cannot say.
LocalAborted = Callable[[TopicIdPartition, int], "list[tuple[int, int]] | None"]


def earliest_offset(remote_start: int | None, broker_start: int | None) -> int | None:
    """What ListOffsets EARLIEST (-2) answers through the proxy: the remote tier's first offset where
    it is below the brokers' log start (or the brokers have none), else the brokers' log start."""
    if remote_start is not None and (broker_start is None or broker_start < 0 or remote_start < broker_start):
        return remote_start
    return broker_start


class RemoteReader:
    def __init__(self, rlmm: RemoteLogMetadataManager, rsm: RemoteStorageManager,
                 index_cache_bytes: int = 1 << 30, chunk_cache_bytes: int = 0, chunk_bytes: int = 1 << 20,
                 prefetch_threads: int = PREFETCH_THREADS, local_aborted: LocalAborted | None = None,
                 prefetch_max_chunks: int = PREFETCH_MAX_CHUNKS) -> None:
        self.rlmm = rlmm
        self.rsm = rsm
        self.local_aborted = local_aborted
        # partition -> (remote end, the aborted transactions open across it, when to ask again
        # or None once the brokers have answered)
        self._across_end: dict[TopicIdPartition, tuple[int, list[tuple[int, int]], float | None]] = {}
        self.indexes = IndexCache(index_cache_bytes)
        self._ends: OrderedDict[tuple[RemoteLogSegmentId, int], int] = OrderedDict()
        self._ends_lock = threading.Lock()
        self.chunks = ChunkCache(rsm, chunk_cache_bytes, chunk_bytes, prefetch_threads, self._next_segment,
                                 prefetch_max_chunks) \
            if chunk_cache_bytes > 0 else None

    @classmethod
    def from_properties(cls, rlmm: RemoteLogMetadataManager, rsm: RemoteStorageManager, props: Mapping[str, str],
                        local_aborted: LocalAborted | None = None) -> RemoteReader:
        """A reader with the caches and prefetching the ``remote.log.*`` keys of ``props`` size."""
        def setting(key: str, default: int) -> int:
            value = props.get(key)
            return int(value) if value not in (None, "") else default

        return cls(rlmm, rsm, setting("remote.log.index.file.cache.total.size.bytes", 1 << 30),
                   chunk_cache_bytes=setting("remote.log.chunk.cache.size.bytes", 120 << 20),
                   chunk_bytes=setting("remote.log.chunk.size.bytes", 1 << 20),
                   prefetch_threads=setting("remote.log.chunk.prefetch.threads", PREFETCH_THREADS),
                   local_aborted=local_aborted,
                   prefetch_max_chunks=setting("remote.log.chunk.prefetch.max.chunks", PREFETCH_MAX_CHUNKS))

    def close(self) -> None:
        if self.chunks is not None:
            self.chunks.close()

    def foreground(self) -> contextlib.AbstractContextManager[None]:
        """Hold fetching ahead off while reads a client waits for run (ChunkCache.foreground)."""
        return self.chunks.foreground() if self.chunks is not None else contextlib.nullcontext()

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

    def read(self, tp: TopicIdPartition, offset: int, max_bytes: int, *, read_committed: bool = False,
             deadline: float | None = None) -> RemoteRead | None:
        """Batches from the one holding ``offset``; None when no copied segment holds it.

        Past ``deadline`` (``time.monotonic()``) no further segment is started: what was read is
        the answer. Without that, a read spanning many small segments on a slow store could
        outlast the caller's wait every time, and the consumer would never move."""
        segment = self.rlmm.segment_for_offset(tp, offset)
        if segment is None:
            return None
        pieces: list[bytes | memoryview] = []
        size = 0
        first_offset = offset
        transactional = False  # whether any batch read is: only then can an aborted transaction matter
        while segment is not None:
            position = self._position(segment, offset)
            found = self._batches(segment, position, offset, max(max_bytes - size, 0), must_return_one=not pieces)
            if found is not None:
                batches, last, end, in_transaction = found
                transactional |= in_transaction
                pieces += batches
                size += sum(len(b) for b in batches)
                offset = last + 1
                if end < segment.segment_size_bytes:
                    self._ended(segment, offset, end)
            if offset <= segment.end_offset or size >= max_bytes:
                break  # the budget ended inside this segment
            if deadline is not None and pieces and time.monotonic() >= deadline:
                break
            segment = self.rlmm.segment_for_offset(tp, segment.end_offset + 1)
        # A read of no transactional batch needs no list of aborted transactions: a client drops
        # only transactional records by it. Asking the brokers (_across_remote_end) took 5-20 ms
        # of a fresh proxy's first answer, for one batch per partition fetched to learn nothing.
        aborted = self._aborted(tp, first_offset, offset) if read_committed and transactional else []
        return RemoteRead(RecordParts(pieces), offset, aborted)

    def _ended(self, segment: RemoteLogSegmentMetadata, next_offset: int, position: int) -> None:
        """A read of ``segment`` ended at byte ``position``, where ``next_offset``'s batch begins."""
        with self._ends_lock:
            self._ends[(segment.segment_id, next_offset)] = position
            self._ends.move_to_end((segment.segment_id, next_offset))
            if len(self._ends) > _MAX_ENDS:
                self._ends.popitem(last=False)

    def _position(self, segment: RemoteLogSegmentMetadata, offset: int) -> int:
        if offset <= segment.start_offset:
            return 0
        with self._ends_lock:
            ended = self._ends.get((segment.segment_id, offset))
        if ended is not None:
            return ended
        index = self.indexes.get(self.rsm, segment, IndexType.OFFSET)
        return lookup_position(index, segment.start_offset, offset).position

    def _batches(self, segment: RemoteLogSegmentMetadata, position: int, offset: int, budget: int,
                 *, must_return_one: bool) -> tuple[list[bytes | memoryview], int, int, bool] | None:
        """The whole batches from ``position`` (skipping those that end before ``offset``) that fit
        ``budget`` (at least one if ``must_return_one``), as pieces of the chunk cache's chunks
        (or of one read), the last offset in them, the byte position after them and whether any
        is transactional; None when there is none."""
        size = segment.segment_size_bytes
        while position < size:  # skip forward over batches that end before offset, headers only
            header = read_header(self._fetch(segment, position, min(position + HEADER_SIZE, size) - 1), 0)
            if header.last_offset >= offset:
                break
            position += header.size
        if position >= size:
            return None
        want = max(budget, header.size if must_return_one else 0)
        if want <= 0:
            return None
        end = min(position + want, size) - 1
        pieces: list[bytes | memoryview] = self.chunks.views(segment, position, end) if self.chunks is not None \
            else [self.rsm.fetch_log_segment(segment, position, end)]
        whole, last, transactional = _whole_batches(pieces)
        return (_prefix(pieces, whole), last, position + whole, transactional) if whole else None

    def _aborted(self, tp: TopicIdPartition, start: int, upper: int) -> list[tuple[int, int]]:
        """Aborted transactions overlapping [start, upper): their markers are at or after start,
        in later segments or (not copied yet) only on the brokers."""
        found: list[AbortedTxn] = []
        segments = self.rlmm.copied_segments(tp)
        for segment in segments:
            if segment.end_offset < start or segment.tx_index_empty:
                continue
            index = self.indexes.get(self.rsm, segment, IndexType.TRANSACTION)
            found += aborted_in_range(index, start, upper - 1)
        pairs = [(t.producer_id, t.first_offset) for t in found]
        if segments:
            pairs += [(pid, first) for pid, first in self._across_remote_end(tp, segments[-1].end_offset)
                      if first < upper and (pid, first) not in pairs]
        return pairs

    def _across_remote_end(self, tp: TopicIdPartition, remote_end: int) -> list[tuple[int, int]]:
        """Aborted transactions that began at or below ``remote_end`` and ended above it: the
        remote tier holds some of their records but not yet the abort marker, so no remote
        transaction index lists them. The brokers' does; asked once per remote end."""
        if self.local_aborted is None:
            return []
        known = self._across_end.get(tp)
        if known is not None and known[0] == remote_end and (known[2] is None or time.monotonic() < known[2]):
            return known[1]
        answer = self.local_aborted(tp, remote_end + 1)
        if answer is None:
            # The brokers cannot say yet (an open transaction begins right after the remote end)
            # or did not answer: the remote indexes alone for a while, not a broker call per read.
            self._across_end[tp] = (remote_end, [], time.monotonic() + _ASK_AGAIN_S)
            return []
        across = [(pid, first) for pid, first in answer if first <= remote_end]
        self._across_end[tp] = (remote_end, across, None)
        return across

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


def _whole_batches(pieces: list[bytes | memoryview]) -> tuple[int, int, bool]:
    """(bytes, last offset, whether any is transactional) of the whole batches at the start of the
    pieces' concatenation, reading only their headers (a header split between two pieces is
    joined: 61 bytes)."""
    total = sum(len(p) for p in pieces)
    position, last, transactional = 0, -1, False
    index, base = 0, 0  # the piece holding ``position`` and where it starts
    while total - position >= HEADER_SIZE:
        while position - base >= len(pieces[index]):
            base += len(pieces[index])
            index += 1
        relative = position - base
        piece = pieces[index]
        if relative + HEADER_SIZE <= len(piece):
            header = read_header(piece, relative)
        else:
            head = bytearray(piece[relative:])
            for following in pieces[index + 1:]:
                if len(head) >= HEADER_SIZE:
                    break
                head += following[:HEADER_SIZE - len(head)]
            header = read_header(head, 0)
        if position + header.size > total:
            break
        position += header.size
        last = header.last_offset
        transactional |= header.is_transactional
    return position, last, transactional


def _prefix(pieces: list[bytes | memoryview], length: int) -> list[bytes | memoryview]:
    """The first ``length`` bytes of the pieces' concatenation, as pieces (views, no copy)."""
    out: list[bytes | memoryview] = []
    for piece in pieces:
        if length <= 0:
            break
        out.append(piece if len(piece) <= length else memoryview(piece)[:length])
        length -= len(piece)
    return out
