"""Remote record bytes reach the answer's frame with one copy: the chunk cache hands out views of
its chunks, the reader keeps them as pieces, and the codec splices the pieces into its output by
reference, so the frame's join is the only copy. Checked by buffer identity, so copies cannot
creep back unnoticed."""

from __future__ import annotations

import os
import random
import threading

from hypothesis import given, settings
from hypothesis import strategies as st

from protocol.apis import FETCH, api
from protocol.record_parts import RecordParts
from protocol.record_set import iter_batches
from protocol.records import Record, build_batch
from tests.unit.test_chunk_cache import _stored
from tiering.read.chunk_cache import PREFETCH_NICENESS, ChunkCache
from tiering.read.reader import _prefix, _whole_batches


def _log(batches: int, seed: int) -> bytes:
    rng = random.Random(seed)
    out, offset = [], 0
    for _ in range(batches):
        count = rng.randint(1, 5)
        transactional = rng.random() < 0.2
        out.append(build_batch([Record(offset + i, 1_700_000_000_000, None, rng.randbytes(rng.randint(0, 300)), [])
                                for i in range(count)], base_offset=offset, is_transactional=transactional,
                               producer_id=7 if transactional else -1, producer_epoch=0 if transactional else -1))
        offset += count
    return b"".join(out)


def _pieces(data: bytes, cuts: list[int]) -> list[memoryview]:
    points = sorted({0, len(data), *(c % (len(data) + 1) for c in cuts)})
    view = memoryview(data)
    return [view[a:b] for a, b in zip(points, points[1:], strict=False)]


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 12), st.integers(0, 1000), st.lists(st.integers(0, 1 << 16), max_size=8), st.integers(0, 400))
def test_whole_batches_over_pieces_match_a_contiguous_walk(batches: int, seed: int, cuts: list[int], cut_tail: int) -> None:
    data = _log(batches, seed)
    data = data[:max(len(data) - cut_tail, 0)]  # a read that ends inside a batch
    walked = list(iter_batches(data))
    expected = (sum(len(b) for _, b in walked), walked[-1][0].last_offset if walked else -1,
                any(h.is_transactional for h, _ in walked))
    pieces = _pieces(data, cuts)
    assert _whole_batches(pieces) == expected
    prefix = _prefix(pieces, expected[0])
    assert b"".join(prefix) == data[:expected[0]]
    assert all(p.obj is data for p in prefix)  # views of the same buffer: nothing copied


def test_chunk_views_are_the_cached_chunks_themselves(tmp_path) -> None:
    storage, metadata, log = _stored(tmp_path, 10_000)
    cache = ChunkCache(storage, max_bytes=1 << 20, chunk_bytes=1024, prefetch_threads=0)
    views = cache.views(metadata, 1000, 5000)
    assert b"".join(views) == log[1000:5001]
    chunks = {id(chunk) for chunk in cache._chunks.values()}
    assert len(views) == 5 and all(id(v.obj) in chunks for v in views)
    assert cache.read(metadata, 1100, 1200).obj is views[1].obj  # one chunk: a view, not a copy


def test_the_codec_splices_record_parts_by_reference() -> None:
    data = _log(6, 7)
    parts = RecordParts(_pieces(data, [100, 900]))
    codec = api(FETCH).response_codec(12)
    body = codec.default()
    body["responses"] = [{"topic": "t", "partitions": [{
        "partition_index": 0, "error_code": 0, "high_watermark": 10, "last_stable_offset": 10, "log_start_offset": 0,
        "aborted_transactions": None, "preferred_read_replica": -1, "records": parts}]}]
    pieces = codec.encode_parts(body)
    assert all(any(piece is part for piece in pieces) for part in parts)  # by reference, not copied
    joined = dict(body)
    joined["responses"] = [{**body["responses"][0], "partitions": [{**body["responses"][0]["partitions"][0],
                                                                    "records": data}]}]
    assert b"".join(pieces) == codec.encode(joined)  # the same bytes on the wire
    assert bytes(codec.decode(b"".join(pieces))["responses"][0]["partitions"][0]["records"]) == data


def test_prefetch_threads_yield_the_cpu_to_reads_a_client_waits_for(tmp_path) -> None:
    """The chunks fetched ahead are a guess: their threads run at a lower priority than the reads
    clients wait for (issue 36: a fresh proxy's first answer waited on eight prefetches)."""
    storage, _, _ = _stored(tmp_path, 10_000)
    cache = ChunkCache(storage, max_bytes=1 << 20, chunk_bytes=1024, prefetch_threads=2)
    try:
        threads = [t for t in threading.enumerate() if t.name.startswith("chunk-prefetch")]
        assert len(threads) >= 2
        mine = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())
        for thread in threads:
            assert os.getpriority(os.PRIO_PROCESS, thread.native_id) == max(mine, PREFETCH_NICENESS)
    finally:
        cache.close()
