"""Remote ``.log`` objects read in fixed, aligned chunks, kept in a cache bounded in bytes, with
the chunks after a reader's position fetched ahead while it moves forward.

A consumer backfilling a partition asks for the bytes after the ones it just got. Reading whole
chunks (``remote.log.chunk.size.bytes``) turns its many small ranged reads into few large ones.
Fetching ahead hides the remote tier's first-byte latency: a reader that reads on where its last
read ended gets a window of chunks fetched ahead (crossing into the next segments), which starts
at two chunks and grows fourfold with each such read up to ``remote.log.chunk.prefetch.max.chunks``,
as Linux's readahead grows its window. A reader that jumps starts again at two. So a reader that
goes on gets many ranged GETs in flight at once (an object store 80 ms away serves a 1 MiB chunk
at about 12 MB/s per GET), and one that reads a little costs two chunks more. (A window doubling
from one chunk needs four reads to reach eight: with 1 MiB fetches, the first 7 MiB of every
partition's backfill.) ``remote.log.chunk.prefetch.threads``
bounds the GETs in flight for all readers together, and a window never holds more than an eighth
of the cache, so chunks fetched ahead are not evicted before they are read. While reads a client
waits for run (``foreground``), fetching ahead waits for them, a bounded time: it must not take
the interpreter from the thread that sends their answer.

Memory is bounded by ``remote.log.chunk.cache.size.bytes`` plus the chunks being fetched at one
moment (at most one per reader thread plus one per prefetch thread).
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor

from tiering.model import RemoteLogSegmentId, RemoteLogSegmentMetadata, TopicIdPartition
from tiering.storage.api import RemoteStorageManager

ChunkKey = tuple[RemoteLogSegmentId, int]
# The defaults of remote.log.chunk.prefetch.threads and .max.chunks: at 80 ms per GET, 16 GETs of
# 1 MiB in flight keep one consumer of 3 partitions at 0.94x its speed at 0 ms (8 and 8: 0.66x).
PREFETCH_THREADS, PREFETCH_MAX_CHUNKS = 16, 16
# Readers whose windows are remembered (one per partition read), least recently read dropped first.
_MAX_STREAMS = 4096
# The longest a prefetch waits for the reads a client waits for to be over (``foreground``). On a
# proxy with one CPU, a fresh proxy's first answer was read in 2-3 ms, and then waited 4-7 ms for
# the thread that sends it: the prefetches those reads had started held the interpreter between
# them, even at nice 10 and a 0.5 ms switch interval.
_FOREGROUND_WAIT_S = 0.01


class _Stream:
    """Where a partition's last read ended (segment, chunk) and its fetch-ahead window, in chunks."""

    __slots__ = ("segment_id", "last", "window")

    def __init__(self, segment_id: RemoteLogSegmentId, last: int, window: int) -> None:
        self.segment_id, self.last, self.window = segment_id, last, window


class ChunkCache:
    def __init__(self, rsm: RemoteStorageManager, max_bytes: int, chunk_bytes: int = 1 << 20,
                 prefetch_threads: int = PREFETCH_THREADS,
                 next_segment: Callable[[RemoteLogSegmentMetadata], RemoteLogSegmentMetadata | None] | None = None,
                 prefetch_max_chunks: int = PREFETCH_MAX_CHUNKS) -> None:
        if chunk_bytes <= 0:
            raise ValueError("remote.log.chunk.size.bytes must be positive")
        if prefetch_threads < 0:
            raise ValueError("remote.log.chunk.prefetch.threads must be 0 (no fetching ahead) or more")
        if prefetch_max_chunks < 1:
            raise ValueError("remote.log.chunk.prefetch.max.chunks must be at least 1")
        self.max_window = max(1, min(prefetch_max_chunks, max_bytes // chunk_bytes // 8))
        self.first_window = min(2, self.max_window)
        self._streams: OrderedDict[TopicIdPartition, _Stream] = OrderedDict()
        self.rsm = rsm
        self.max_bytes = max_bytes
        self.chunk_bytes = chunk_bytes
        self.next_segment = next_segment
        self._chunks: OrderedDict[ChunkKey, bytes] = OrderedDict()
        self._size = 0
        self._loading: dict[ChunkKey, Future[bytes]] = {}
        self._queued: set[ChunkKey] = set()  # prefetches submitted, not started
        self._lock = threading.Lock()
        self._foreground = 0  # reads a client waits for, running now (``foreground``)
        self._quiet = threading.Condition()
        self._prefetcher = ThreadPoolExecutor(prefetch_threads, thread_name_prefix="chunk-prefetch",
                                              initializer=_yield_to_readers) if prefetch_threads > 0 else None
        self.hits = self.misses = self.prefetches = 0
        if self._prefetcher is not None:
            # Every thread started now: started by a first read's prefetches they took 20 ms of its
            # time to its first record (issue 26). Each waits until all are up, so none is reused.
            started = threading.Barrier(prefetch_threads)
            for _ in range(prefetch_threads):
                self._prefetcher.submit(_wait_quietly, started)

    @contextlib.contextmanager
    def foreground(self) -> Iterator[None]:
        """Reads a client waits for run inside: prefetches wait until they are over (at most
        _FOREGROUND_WAIT_S), so that what they read reaches the client first."""
        with self._quiet:
            self._foreground += 1
        try:
            yield
        finally:
            with self._quiet:
                self._foreground -= 1
                if not self._foreground:
                    self._quiet.notify_all()

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
        self._prefetch_after(segment, first, last)
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

    def _window(self, segment: RemoteLogSegmentMetadata, first: int, last: int) -> int:
        """The partition's fetch-ahead window after a read of chunks ``first..last``: four times
        larger if the read went on where the last one ended (in the same chunk, the next, or at
        the start of another segment), else back to the first window."""
        tp = segment.topic_id_partition
        with self._lock:
            stream = self._streams.get(tp)
            if stream is None:
                stream = self._streams[tp] = _Stream(segment.segment_id, last, self.first_window)
                if len(self._streams) > _MAX_STREAMS:
                    self._streams.popitem(last=False)
                return stream.window
            self._streams.move_to_end(tp)
            same = stream.segment_id == segment.segment_id
            onward = stream.last <= first <= stream.last + 1 if same else first == 0
            stream.window = min(stream.window * 4, self.max_window) if onward else self.first_window
            stream.segment_id, stream.last = segment.segment_id, last
            return stream.window

    def _prefetch_after(self, segment: RemoteLogSegmentMetadata, first: int, last: int) -> None:
        """Fetches the window's chunks after chunk ``last`` that are neither cached nor loading."""
        if self._prefetcher is None:
            return
        target: RemoteLogSegmentMetadata | None = segment
        index = last
        for _ in range(self._window(segment, first, last)):
            assert target is not None
            if (index + 1) * self.chunk_bytes < target.segment_size_bytes:
                index += 1
            else:
                target = self.next_segment(target) if self.next_segment is not None else None
                index = 0
                if target is None:
                    return  # the remote tier ends here
            key = (target.segment_id, index)
            with self._lock:
                if key in self._chunks or key in self._loading or key in self._queued:
                    continue
                self._queued.add(key)
            self._prefetcher.submit(self._prefetch, target, index)

    def _prefetch(self, segment: RemoteLogSegmentMetadata, index: int) -> None:
        key = (segment.segment_id, index)
        with self._quiet:
            self._quiet.wait_for(lambda: not self._foreground, _FOREGROUND_WAIT_S)
        with self._lock:
            self._queued.discard(key)
            if key in self._chunks or key in self._loading:
                return  # a reader got there first: no thread waits for another's GET
        try:
            self._chunk(segment, index, prefetched=True)
        except Exception:  # noqa: BLE001 - a failed prefetch is retried by the read that needs it
            pass


# Nice value of the prefetch threads: what they fetch is a guess, and the reads a client waits for
# come first. Without it, on a proxy with one CPU, a fresh proxy's first answer of three partitions
# took 12-19 ms of reads, eight prefetches of the first two reads' next chunks running beside them.
PREFETCH_NICENESS = 10


def _yield_to_readers() -> None:
    """Runs once in each prefetch thread: Linux schedules a thread's own priority (by its id)."""
    with contextlib.suppress(OSError, AttributeError):
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), PREFETCH_NICENESS)


def _wait_quietly(barrier: threading.Barrier) -> None:
    with contextlib.suppress(threading.BrokenBarrierError):
        barrier.wait(5)
