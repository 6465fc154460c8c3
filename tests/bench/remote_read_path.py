"""The proxy's remote read path in one process, no broker: read a partition's remote segments
front to back through the chunk cache (``RemoteReader.read``, 1 MiB per call as a consumer's
partition budget), build each Fetch answer as the proxy does and write it to a local socket
(a thread drains the other end). Printed beside a baseline measured in the same run: the same
number of bytes written from one ready buffer (no user-space copy at all, only the kernel's).

Runs against whichever tree it is started from, so two trees (before and after a change) can be
compared on the same machine:

    python -m tests.bench.remote_read_path [--megabytes 256] [--segment-mb 16] [--batch-kb 64]
"""

from __future__ import annotations

import argparse
import dataclasses
import random
import socket
import statistics
import tempfile
import threading
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


def _vectored_writer(sock: socket.socket):  # noqa: ANN202 - whichever the tree has
    try:
        from proxy.framing import _coalesce
    except ImportError:  # a tree before vectored writes: join, then write
        return None

    def write(pieces: list) -> None:
        views = [memoryview(b).cast("B") for b in _coalesce(pieces)]
        while views:
            sent = sock.sendmsg(views)
            while views and sent >= len(views[0]):
                sent -= len(views[0])
                views.pop(0)
            if sent:
                views[0] = views[0][sent:]

    return write


def serve_all(reader: RemoteReader, records: int, sock: socket.socket) -> int:
    """Every offset once, as 1 MiB Fetch answers written to ``sock``; bytes written."""
    codec = api(FETCH).response_codec(VERSION)
    head = b"\x00\x00\x00\x07\x00"  # a response header v1 (correlation id, no tags)
    encode = getattr(codec, "encode_parts", None)
    vectored = _vectored_writer(sock)
    offset = served = 0
    while offset < records:
        read = reader.read(TP, offset, READ_BYTES)
        assert read is not None
        body = {"throttle_time_ms": 0, "error_code": 0, "session_id": 0, "responses": [{"topic": "bench", "partitions": [{
            "partition_index": 0, "error_code": 0, "high_watermark": records, "last_stable_offset": records,
            "log_start_offset": 0, "aborted_transactions": None, "preferred_read_replica": -1,
            "records": read.records}]}]}
        if vectored is not None and encode is not None:
            pieces = [head, *encode(body)]
            vectored(pieces)
            served += sum(len(p) for p in pieces)
        else:
            frame = b"".join([head, *encode(body)]) if encode is not None else head + codec.encode(body)
            sock.sendall(frame)
            served += len(frame)
        offset = read.next_offset
    return served


def _drain(sock: socket.socket) -> None:
    buffer = bytearray(4 << 20)
    while sock.recv_into(buffer):
        pass


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
        sender, receiver = socket.socketpair()
        drain = threading.Thread(target=_drain, args=(receiver,), daemon=True)
        drain.start()
        serve_all(reader, records, sender)  # warm the chunk and index caches
        path, copy = [], []
        blob = memoryview(Path(storage.root).rglob("*.log").__next__().read_bytes())[:READ_BYTES]
        for _ in range(args.repeats):
            started = time.perf_counter()
            served = serve_all(reader, records, sender)
            path.append(served / (time.perf_counter() - started) / 1e6)
            started = time.perf_counter()
            written = 0
            while written < served:  # the baseline: as many bytes from a ready buffer
                sender.sendall(blob)
                written += len(blob)
            copy.append(written / (time.perf_counter() - started) / 1e6)
        sender.close()
        drain.join(10)
        receiver.close()
        reader.close()
    p, c = statistics.median(path), statistics.median(copy)
    print(f"{args.megabytes} MiB in {args.segment_mb} MiB segments, {args.batch_kb} x 1 KiB records per batch, "
          f"1 MiB per read, chunk cache warm; median of {args.repeats}")
    print(f"{'socket writes of a ready buffer':<34}{c:>10.0f} MB/s")
    print(f"{'remote read + Fetch answer sent':<34}{p:>10.0f} MB/s{p / c:>8.2f}x")


if __name__ == "__main__":
    main()
