"""The proxy's remote read path in one process, no network and no broker: read a partition's
remote segments front to back through the chunk cache (``RemoteReader.read``, 1 MiB per call as
a consumer's partition budget) and build each Fetch answer's frame as the proxy does (re-encode
the body, join it with the header). Printed beside a baseline measured in the same run: one
plain copy of the same bytes (the least any path that hands a joined frame to the socket does).

Runs against whichever tree it is started from, so two trees (before and after a change) can be
compared on the same machine:

    python -m tests.bench.remote_read_path [--megabytes 256] [--segment-mb 16] [--batch-kb 64]
"""

from __future__ import annotations

import argparse
import dataclasses
import random
import statistics
import tempfile
import time
import uuid
from pathlib import Path

from protocol.apis import FETCH, api
from protocol.records import Record, build_batch
from protocol.remote_formats.offset_index import encode_offset_index
from tests.unit.test_metadata_store import copied
from tests.unit.test_storage_local import segment_data
from tiering.metadata.journal_store import FileMetadataStore
from tiering.model import RemoteLogSegmentId, RemoteLogSegmentMetadata, TopicIdPartition
from tiering.read.reader import RemoteReader
from tiering.storage.local_folder import LocalFolderStorage

TP = TopicIdPartition(uuid.UUID(int=42), "bench", 0)
READ_BYTES = 1 << 20
VERSION = 12


def build_segments(store: FileMetadataStore, storage: LocalFolderStorage, megabytes: int, segment_mb: int,
                   batch_kb: int) -> tuple[int, int]:
    """Segments of incompressible 1 KiB records in batches of ``batch_kb``; (records, bytes)."""
    rng = random.Random(1)
    offset = total = 0
    per_batch = max(batch_kb, 1)
    while total < megabytes << 20:
        start, log, index, position = offset, [], [], 0
        while position < segment_mb << 20:
            batch = build_batch([Record(offset + i, 1_700_000_000_000, None, rng.randbytes(1000), [])
                                 for i in range(per_batch)], base_offset=offset)
            index.append((offset, position))
            log.append(batch)
            position += len(batch)
            offset += per_batch
        data = b"".join(log)
        metadata = RemoteLogSegmentMetadata(RemoteLogSegmentId(TP, uuid.uuid4()), start, offset - 1, 0, 1, 1, len(data),
                                            ((0, start),))
        storage.copy_log_segment_data(metadata, dataclasses.replace(
            segment_data(log=data), offset_index=encode_offset_index(index, start), transaction_index=None))
        copied(store, metadata)
        total += len(data)
    return offset, total


def serve_all(reader: RemoteReader, records: int) -> int:
    """Every offset once, as 1 MiB Fetch answers; bytes of records framed."""
    codec = api(FETCH).response_codec(VERSION)
    head = b"\x00\x00\x00\x07\x00"  # a response header v1 (correlation id, no tags)
    encode = getattr(codec, "encode_parts", None)
    offset = served = 0
    while offset < records:
        read = reader.read(TP, offset, READ_BYTES)
        assert read is not None
        body = {"throttle_time_ms": 0, "error_code": 0, "session_id": 0, "responses": [{"topic": "bench", "partitions": [{
            "partition_index": 0, "error_code": 0, "high_watermark": records, "last_stable_offset": records,
            "log_start_offset": 0, "aborted_transactions": None, "preferred_read_replica": -1,
            "records": read.records}]}]}
        frame = b"".join([head, *encode(body)]) if encode is not None else head + codec.encode(body)
        served += len(frame)
        offset = read.next_offset
    return served


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--megabytes", type=int, default=256)
    parser.add_argument("--segment-mb", type=int, default=16)
    parser.add_argument("--batch-kb", type=int, default=64, help="records (of 1 KiB) per batch")
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-read-path-"))
    with FileMetadataStore(work / "metadata") as store:
        storage = LocalFolderStorage(work / "remote")
        records, size = build_segments(store, storage, args.megabytes, args.segment_mb, args.batch_kb)
        # Cache every chunk: the figure is the path's own cost, not the disk's.
        reader = RemoteReader(store, storage, chunk_cache_bytes=2 * size, prefetch_threads=0)
        serve_all(reader, records)  # warm the chunk and index caches
        path, copy = [], []
        blob = Path(storage.root).rglob("*.log").__next__().read_bytes()
        for _ in range(args.repeats):
            started = time.perf_counter()
            served = serve_all(reader, records)
            path.append(served / (time.perf_counter() - started) / 1e6)
            started = time.perf_counter()
            copied_bytes = 0
            while copied_bytes < served:  # the baseline: one copy of as many bytes
                copied_bytes += len(b"".join([b"", blob]))
            copy.append(copied_bytes / (time.perf_counter() - started) / 1e6)
        reader.close()
    p, c = statistics.median(path), statistics.median(copy)
    print(f"{args.megabytes} MiB in {args.segment_mb} MiB segments, {args.batch_kb} x 1 KiB records per batch, "
          f"1 MiB per read, chunk cache warm; median of {args.repeats}")
    print(f"{'one plain copy (baseline)':<34}{c:>10.0f} MB/s")
    print(f"{'remote read + Fetch frame':<34}{p:>10.0f} MB/s{p / c:>8.2f}x")


if __name__ == "__main__":
    main()
