"""The segment chunk cache over a real local-folder store: any byte range reads back exactly,
memory stays within its bound, and a forward reader finds the next chunk already fetched."""

from __future__ import annotations

import dataclasses
import random
import threading
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.unit.test_storage_local import segment_data, segment_metadata
from tiering.model import RemoteLogSegmentMetadata
from tiering.read.chunk_cache import ChunkCache
from tiering.storage.local_folder import LocalFolderStorage


class CountingStorage(LocalFolderStorage):
    """The real local store, counting the ranged reads that reach it."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.reads: list[tuple[int, int | None]] = []

    def fetch_log_segment(self, metadata, start_position, end_position=None):  # type: ignore[no-untyped-def]
        self.reads.append((start_position, end_position))
        return super().fetch_log_segment(metadata, start_position, end_position)


def _stored(tmp_path, size: int, start_offset: int = 100) -> tuple[CountingStorage, RemoteLogSegmentMetadata, bytes]:
    storage = CountingStorage(tmp_path / "remote")
    log = random.Random(size).randbytes(size)
    metadata = dataclasses.replace(segment_metadata(start_offset), segment_size_bytes=size)
    storage.copy_log_segment_data(metadata, segment_data(log=log))
    return storage, metadata, log


@settings(max_examples=150, deadline=None)
@given(st.integers(1, 5000), st.integers(0, 5200), st.integers(0, 5200), st.sampled_from([1, 7, 512, 4096]))
def test_any_range_reads_back_exactly(tmp_path_factory, size, a, b, chunk):
    storage, metadata, log = _stored(tmp_path_factory.mktemp("chunks"), size)
    cache = ChunkCache(storage, max_bytes=3 * chunk, chunk_bytes=chunk, prefetch_threads=0)
    start, end = min(a, b), max(a, b)
    assert cache.read(metadata, start, end) == log[start:end + 1]
    assert cache.read(metadata, start, end) == log[start:end + 1]  # again, from the cache where it fits
    assert sum(len(c) for c in cache._chunks.values()) <= 3 * chunk


def test_cached_chunks_are_not_read_twice_and_memory_is_bounded(tmp_path):
    storage, metadata, log = _stored(tmp_path, 10_000)
    cache = ChunkCache(storage, max_bytes=4096, chunk_bytes=1024, prefetch_threads=0)
    for position in range(0, 3000, 61):  # many small header-sized reads over three chunks
        assert cache.read(metadata, position, position + 60) == log[position:position + 61]
    assert len(storage.reads) == 3 and cache.misses == 3 and cache.hits > 40
    cache.read(metadata, 0, 9999)  # more than the bound: older chunks go first
    assert cache._size <= 4096


def test_forward_reader_finds_the_next_chunk_prefetched_across_segments(tmp_path):
    storage, first, log = _stored(tmp_path, 4096, start_offset=0)
    second = dataclasses.replace(segment_metadata(first.end_offset + 1), segment_size_bytes=2048)
    storage.copy_log_segment_data(second, segment_data(log=log[:2048]))
    cache = ChunkCache(storage, max_bytes=1 << 20, chunk_bytes=1024, prefetch_threads=1,
                       next_segment=lambda s: second if s is first else None)
    try:
        for position in range(0, 4096, 1024):
            assert cache.read(first, position, position + 1023) == log[position:position + 1024]
            upcoming = (first.segment_id, position // 1024 + 1) if position < 3072 else (second.segment_id, 0)
            deadline = time.monotonic() + 5
            while upcoming not in cache._chunks and time.monotonic() < deadline:
                time.sleep(0.01)
        assert cache.read(second, 0, 1023) == log[:1024]
        assert cache.misses == 1  # only the very first chunk waited for the store
        # Chunks 1-3 of the first segment and both of the second (the window grew to 8).
        assert cache.prefetches == 5 and cache.hit_ratio == pytest.approx(4 / 5)
    finally:
        cache.close()


def _settled(cache: ChunkCache) -> None:
    """Waits (bounded) until no prefetch is queued or loading."""
    deadline = time.monotonic() + 5
    while (cache._queued or cache._loading) and time.monotonic() < deadline:
        time.sleep(0.005)
    assert not cache._queued and not cache._loading


def test_the_window_grows_while_a_reader_goes_on_and_restarts_after_a_jump(tmp_path):
    storage, metadata, log = _stored(tmp_path, 64 * 1024)
    cache = ChunkCache(storage, max_bytes=1 << 20, chunk_bytes=1024, prefetch_threads=1, prefetch_max_chunks=8)
    try:
        fetched = []
        for chunk, window in [(0, 2), (1, 8), (2, 8), (3, 8), (40, 2), (41, 8)]:
            storage.reads.clear()
            assert cache.read(metadata, chunk * 1024 + 10, chunk * 1024 + 20) == log[chunk * 1024 + 10:chunk * 1024 + 21]
            _settled(cache)
            fetched.append(sorted(start // 1024 for start, _ in storage.reads))
            assert cache._streams[metadata.topic_id_partition].window == window
        # Each read fetches what its window covers and is not cached yet: two chunks after a
        # single read, never more than the window ahead of the reader.
        assert fetched == [[0, 1, 2], [3, 4, 5, 6, 7, 8, 9], [10], [11], [40, 41, 42], [43, 44, 45, 46, 47, 48, 49]]
    finally:
        cache.close()


def test_the_window_is_bounded_by_the_cache_and_the_remote_end(tmp_path):
    storage, metadata, _ = _stored(tmp_path, 6 * 1024)
    # An eighth of a 16-chunk cache: at most two chunks ahead, whatever the setting says.
    cache = ChunkCache(storage, max_bytes=16 * 1024, chunk_bytes=1024, prefetch_threads=2, prefetch_max_chunks=8,
                       next_segment=lambda s: None)
    try:
        assert cache.max_window == 2
        for chunk in range(6):
            cache.read(metadata, chunk * 1024, chunk * 1024 + 1)
            _settled(cache)
        # Nothing past the last chunk: no segment follows.
        assert sorted({start // 1024 for start, _ in storage.reads}) == list(range(6))
        assert len(storage.reads) == 6
    finally:
        cache.close()


class SlowStorage(CountingStorage):
    """A store 20 ms away, counting the ranged reads in flight at once."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)
        self.lock = threading.Lock()
        self.in_flight = self.most_in_flight = 0

    def fetch_log_segment(self, metadata, start_position, end_position=None):  # type: ignore[no-untyped-def]
        with self.lock:
            self.in_flight += 1
            self.most_in_flight = max(self.most_in_flight, self.in_flight)
        try:
            time.sleep(0.02)
            return super().fetch_log_segment(metadata, start_position, end_position)
        finally:
            with self.lock:
                self.in_flight -= 1


def test_a_forward_reader_keeps_several_reads_in_flight(tmp_path):
    """What hides an object store's latency (issue 28): counted, not timed."""
    log = random.Random(3).randbytes(48 * 1024)
    storage = SlowStorage(tmp_path / "remote")
    metadata = dataclasses.replace(segment_metadata(0), segment_size_bytes=len(log))
    storage.copy_log_segment_data(metadata, segment_data(log=log))
    cache = ChunkCache(storage, max_bytes=1 << 20, chunk_bytes=1024, prefetch_threads=6, prefetch_max_chunks=8)
    try:
        for position in range(0, len(log), 1024):
            assert cache.read(metadata, position, position + 1023) == log[position:position + 1024]
        assert storage.most_in_flight >= 4
        assert cache.misses <= 3  # the window ran ahead of the reader after its first reads
        assert len(storage.reads) == 48  # every chunk fetched once
    finally:
        cache.close()


def test_a_failed_read_is_not_cached_and_can_be_retried(tmp_path):
    storage, metadata, log = _stored(tmp_path, 2048)
    cache = ChunkCache(storage, max_bytes=1 << 20, chunk_bytes=1024, prefetch_threads=0)
    storage.close()
    with pytest.raises(Exception):  # noqa: B017, PT011 - whatever the closed store raises
        cache.read(metadata, 0, 10)
    assert not cache._loading and not cache._chunks
    reopened = CountingStorage(tmp_path / "remote")
    cache.rsm = reopened
    assert cache.read(metadata, 0, 10) == log[:11]


def _prefetching(tmp_path, monkeypatch, foreground_wait_s: float):  # type: ignore[no-untyped-def]
    """A cache over 8 chunks of 1 KiB with two prefetch threads that wait at most ``foreground_wait_s``."""
    monkeypatch.setattr("tiering.read.chunk_cache._FOREGROUND_WAIT_S", foreground_wait_s)
    storage, metadata, log = _stored(tmp_path, 8 * 1024)
    return storage, metadata, log, ChunkCache(storage, max_bytes=1 << 20, chunk_bytes=1024, prefetch_threads=2)


def test_fetching_ahead_waits_while_reads_a_client_waits_for_run(tmp_path, monkeypatch):
    """Counted, not timed: no chunk is fetched ahead inside ``foreground`` (its bound made long
    here), and those the read asked for follow once it is over. On one CPU they had held the
    interpreter from the thread that sends the answer (4-7 ms of a fresh proxy's first Fetch)."""
    storage, metadata, log, cache = _prefetching(tmp_path, monkeypatch, foreground_wait_s=30.0)
    try:
        with cache.foreground():
            assert cache.read(metadata, 0, 99) == log[:100]
            time.sleep(0.2)  # time enough for the two prefetch threads to have fetched
            assert storage.reads == [(0, 1023)] and cache.prefetches == 0
        deadline = time.monotonic() + 5
        while cache.prefetches < 2 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert sorted(start for start, _ in storage.reads) == [0, 1024, 2048]  # the window of two
    finally:
        cache.close()


def test_fetching_ahead_waits_for_reads_a_bounded_time(tmp_path, monkeypatch):
    """A proxy always reading holds fetching ahead off no longer than the bound each time."""
    _, metadata, log, cache = _prefetching(tmp_path, monkeypatch, foreground_wait_s=0.05)
    try:
        with cache.foreground():
            assert cache.read(metadata, 0, 99) == log[:100]
            deadline = time.monotonic() + 5
            while cache.prefetches < 2 and time.monotonic() < deadline:
                time.sleep(0.01)
            assert cache.prefetches == 2
    finally:
        cache.close()
