"""Rebuilding the segment index from the bucket alone (issue 37): how long, and how many requests,
on SeaweedFS's S3 gateway, side by side with the least an index-less rebuild would send.

    python -m tests.bench.bucket_index [--segments 10000] [--topics 10] [--partitions 10]
                                       [--keep-work-dir]

A bucket is filled the way a proxy fills it: ``--segments`` segments spread evenly over
``--topics`` topics of ``--partitions`` partitions, each recorded in an embedded metadata store
(COPY_SEGMENT_STARTED, then FINISHED, with two leader epochs and KIP-917 custom metadata) while
:class:`ManifestWriter` keeps the manifests in step, and each with a ``.log`` object of 1 KiB
under its real key (the indexes are left out: no rebuild reads a segment's objects, and listing
with a delimiter never enumerates them). Then, with a fresh client each:

- **manifests**: :func:`read_bucket`, as ``tiered-proxy segments --remote`` runs it: one LIST of
  the topics, one per topic, one GET per manifest, 16 at a time;
- **listing every object** (the baseline): a LIST of every key under the prefix, which an
  index-less rebuild needs at the least, and which still lacks each segment's end offset, epochs
  and state (that would take a GET per segment on top).

Printed: seconds, LIST and GET requests, GETs per 50 segments, the manifests' bytes, and what the
requests cost at S3 Standard's list prices (docs/object-stores.md). The rebuilt index is checked
against the store's own state. Every process is stopped at the end; the work folder in /tmp is
removed unless ``--keep-work-dir``.
"""

from __future__ import annotations

import argparse
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from tests.bench.process_hygiene import run_in_work_dir
from tests.integration.s3_server import DUMMY_CREDENTIALS, REGION, SeaweedFS, new_bucket
from tiering.metadata.journal_store import FileMetadataStore
from tiering.metadata.manifests import ManifestWriter, read_bucket
from tiering.model import (
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    RemoteLogSegmentState,
    TieringState,
    TopicIdPartition,
    TopicTieringState,
)
from tiering.storage.object_layout import LOG_SUFFIX, segment_object_key
from tiering.storage.s3 import S3Storage
from tiering.storage.segment_location import SegmentLocation

# S3 Standard, us-east-1, per 1,000 requests (docs/object-stores.md).
PRICE_PER_1000 = {"LIST": 0.005, "GET": 0.0004, "PUT": 0.005}
SEGMENT_RECORDS = 1000  # offsets per segment


def _storage(endpoint: str, bucket: str) -> S3Storage:
    return S3Storage(bucket, "tiered", endpoint_url=endpoint, region=REGION,
                     access_key_id=DUMMY_CREDENTIALS["aws_access_key_id"],
                     secret_access_key=DUMMY_CREDENTIALS["aws_secret_access_key"])


def fill(endpoint: str, bucket: str, work: Path, segments: int, topics: int, partitions: int) -> tuple[list, dict]:
    """The bucket and the store's state (records); and the PUTs sent, by kind of object."""
    storage = _storage(endpoint, bucket)
    ids = [uuid.uuid4() for _ in range(topics)]
    tps = [TopicIdPartition(ids[t], f"bench-{t}", p) for t in range(topics) for p in range(partitions)]
    with FileMetadataStore(work / "metadata") as store:
        writer = ManifestWriter(storage, store)
        writer.start()
        for tp in tps[::partitions]:
            store.put_topic_tiering_state(TopicTieringState(tp.topic, tp.topic_id, 1, TieringState.ENABLED,
                                                            configs=(("remote.storage.enable", "true"),)))

        def copy(i: int) -> None:
            tp = tps[i % len(tps)]
            start = (i // len(tps)) * SEGMENT_RECORDS
            segment = RemoteLogSegmentMetadata(RemoteLogSegmentId(tp, uuid.uuid4()), start, start + SEGMENT_RECORDS - 1,
                                               1_700_000_000_000 + i, 1, 2, 1024, ((0, start), (1, start + 500)))
            store.add_remote_log_segment_metadata(segment)
            storage.write_object(segment_object_key("", segment, LOG_SUFFIX), b"x" * 1024)
            store.update_remote_log_segment_metadata(RemoteLogSegmentMetadataUpdate(
                segment.segment_id, 1_700_000_000_000 + i, RemoteLogSegmentState.COPY_SEGMENT_FINISHED, 1,
                SegmentLocation("tiered", 1024).encode()))

        with ThreadPoolExecutor(16) as pool:
            list(pool.map(copy, range(segments)))
        writer.close()
        records = list(store.state_snapshot().snapshot_records())
    puts = storage.requests.snapshot()[0].get("PUT", 0)
    storage.close()
    return records, {"segment objects": segments, "manifests": puts - segments, "manifest writes": writer.counters.written}


def measure(endpoint: str, bucket: str, segments: int, records: list) -> None:
    storage = _storage(endpoint, bucket)
    started = time.monotonic()
    index = read_bucket(storage)
    manifests_s = time.monotonic() - started
    requests, _, read, _ = storage.requests.snapshot()
    storage.close()
    assert list(index.state.snapshot_records()) == records, "the bucket's index differs from the store's"

    baseline = _storage(endpoint, bucket)
    started = time.monotonic()
    keys = 0
    for page in baseline.client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix="tiered/"):
        keys += len(page.get("Contents") or ())
    listing_s = time.monotonic() - started
    listed = baseline.requests.snapshot()[0]
    baseline.close()

    def cost(counts: dict[str, int]) -> str:
        return f"${sum(PRICE_PER_1000.get(k, 0) * v / 1000 for k, v in counts.items()):.6f}"

    print(f"\n{segments:,} segments; {index.topics} topics, {index.partitions} partitions; {keys:,} objects in the bucket")
    print(f"{'rebuild':<26}{'seconds':>9}{'LIST':>8}{'GET':>8}{'GETs/50 segments':>18}{'request cost':>14}")
    gets = requests.get("GET", 0)
    print(f"{'manifests':<26}{manifests_s:>9.2f}{requests.get('LIST', 0):>8}{gets:>8}{gets * 50 / segments:>18.2f}"
          f"{cost(requests):>14}")
    print(f"{'listing every object':<26}{listing_s:>9.2f}{listed.get('LIST', 0):>8}{listed.get('GET', 0):>8}"
          f"{'(no index)':>18}{cost(listed):>14}")
    print(f"manifest bytes read: {read:,} ({read / segments:.0f} per segment)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--segments", type=int, default=10_000)
    parser.add_argument("--topics", type=int, default=10)
    parser.add_argument("--partitions", type=int, default=10, help="per topic")
    parser.add_argument("--keep-work-dir", action="store_true")
    args = parser.parse_args()

    def run(work: Path) -> None:
        with SeaweedFS(work / "seaweedfs") as seaweed:
            endpoint = seaweed.gateway().endpoint
            bucket = new_bucket(endpoint)
            started = time.monotonic()
            records, puts = fill(endpoint, bucket, work, args.segments, args.topics, args.partitions)
            print(f"filled in {time.monotonic() - started:.1f} s; PUTs: "
                  + ", ".join(f"{k} {v:,}" for k, v in puts.items()))
            measure(endpoint, bucket, args.segments, records)

    run_in_work_dir("bucket-index-", args.keep_work_dir, run)


if __name__ == "__main__":
    main()
