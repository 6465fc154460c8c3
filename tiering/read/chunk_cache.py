"""Remote ``.log`` objects read in fixed, aligned chunks, kept in a cache bounded in bytes, with
the next chunk fetched ahead for readers moving forward.

A consumer backfilling a partition asks for the bytes after the ones it just got. Reading whole
chunks (``remote.log.chunk.size.bytes``) turns its many small ranged reads into few large ones,
and prefetching the chunk after the one a read ended in (crossing into the next segment at the end
of one) hides the remote tier's first-byte latency from the next fetch. Memory is bounded by
``remote.log.chunk.cache.size.bytes`` plus the chunks being fetched at one moment (at most one
per reader thread plus ``remote.log.chunk.prefetch.threads``).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor

from tiering.model import RemoteLogSegmentId, RemoteLogSegmentMetadata
from tiering.storage.api import RemoteStorageManager

ChunkKey = tuple[RemoteLogSegmentId, int]


class ChunkCache:
    def __init__(self, rsm: RemoteStorageManager, max_bytes: int, chunk_bytes: int = 1 << 20,
                 prefetch_threads: int = 2,
                 next_segment: Callable[[RemoteLogSegmentMetadata], RemoteLogSegmentMetadata | None] | None = None
                 ) -> None:
        if chunk_bytes <= 0:
            raise ValueError("remote.log.chunk.size.bytes must be positive")
        self.rsm = rsm
        self.max_bytes = max_bytes
        self.chunk_bytes = chunk_bytes
        self.next_segment = next_segment
        self._chunks: OrderedDict[ChunkKey, bytes] = OrderedDict()
        self._size = 0
        self._loading: dict[ChunkKey, Future[bytes]] = {}
        self._lock = threading.Lock()
        self._prefetcher = ThreadPoolExecutor(prefetch_threads, thread_name_prefix="chunk-prefetch") \
            if prefetch_threads > 0 else None
        self.hits = self.misses = self.prefetches = 0

    def close(self) -> None:
        if self._prefetcher is not None:
            self._prefetcher.shutdown(wait=False, cancel_futures=True)

    @property
    def hit_ratio(self) -> float:
        total = self.hits + self.misses
        return self.hits / total if total else 0.0

    def read(self, segment: RemoteLogSegmentMetadata, start: int, end: int) -> bytes | memoryview:
        """Bytes ``start..end`` (inclusive, clamped to the object) of the segment's ``.log``: a view
        of the cached chunk when one chunk holds them, joined otherwise."""
        pieces = self.views(segment, start, end)
        if not pieces:
            return b""
        return pieces[0] if len(pieces) == 1 else b"".join(pieces)

    def views(self, segment: RemoteLogSegmentMetadata, start: int, end: int) -> list[memoryview]:
        """Bytes ``start..end`` (inclusive, clamped) as views of the cached chunks, copying nothing.
        A view keeps its chunk alive after eviction until the response holding it is sent."""
        end = min(end, segment.segment_size_bytes - 1)
        if start > end:
            return []
        first, last = start // self.chunk_bytes, end // self.chunk_bytes
        pieces = []
        for index in range(first, last + 1):
            base = index * self.chunk_bytes
            chunk = memoryview(self._chunk(segment, index, prefetched=False))
            pieces.append(chunk[max(start - base, 0):min(end - base + 1, len(chunk))])
        self._prefetch_after(segment, last)
        return pieces

    def _chunk(self, segment: RemoteLogSegmentMetadata, index: int, *, prefetched: bool) -> bytes:
        key = (segment.segment_id, index)
        with self._lock:
            data = self._chunks.get(key)
            if data is not None:
                self._chunks.move_to_end(key)
                if not prefetched:
                    self.hits += 1
                return data
            loading = self._loading.get(key)
            owner = loading is None
            if owner:
                loading = self._loading[key] = Future()
                if prefetched:
                    self.prefetches += 1
            if not prefetched:
                # A chunk a prefetch is already fetching counts as a hit: its latency is hidden.
                if owner:
                    self.misses += 1
                else:
                    self.hits += 1
        assert loading is not None
        if not owner:
            return loading.result()
        try:
            start = index * self.chunk_bytes
            data = self.rsm.fetch_log_segment(segment, start, min(start + self.chunk_bytes, segment.segment_size_bytes) - 1)
        except BaseException as exc:
            with self._lock:
                del self._loading[key]
            loading.set_exception(exc)
            raise
        with self._lock:
            del self._loading[key]
            if len(data) <= self.max_bytes:
                self._chunks[key] = data
                self._size += len(data)
                while self._size > self.max_bytes:
                    _, old = self._chunks.popitem(last=False)
                    self._size -= len(old)
        loading.set_result(data)
        return data

    def _prefetch_after(self, segment: RemoteLogSegmentMetadata, index: int) -> None:
        if self._prefetcher is None:
            return
        if (index + 1) * self.chunk_bytes < segment.segment_size_bytes:
            target: RemoteLogSegmentMetadata | None = segment
            index += 1
        else:
            target = self.next_segment(segment) if self.next_segment is not None else None
            index = 0
        if target is None:
            return
        key = (target.segment_id, index)
        with self._lock:
            if key in self._chunks or key in self._loading:
                return
        self._prefetcher.submit(self._prefetch, target, index)

    def _prefetch(self, segment: RemoteLogSegmentMetadata, index: int) -> None:
        try:
            self._chunk(segment, index, prefetched=True)
        except Exception:  # noqa: BLE001 - a failed prefetch is retried by the read that needs it
            pass
