"""The remote tier's log dir in DescribeLogDirs: the per-partition tagged fields the proxy's
RemoteLogDirs filter packs from the metadata store (segments, offsets lost, offsets diverged) survive
the wire and ``describe`` reads them back into its rows and table."""

from __future__ import annotations

import uuid
from pathlib import Path
from types import SimpleNamespace

from protocol.apis import DESCRIBE_LOG_DIRS, LIST_OFFSETS
from protocol.message_codec import codec
from protocol.remote_log_dir import TAG_DATA_LOSS, TAG_DIVERGENCE, TAG_SEGMENT_COUNT, TAG_STORED_BYTES
from proxy.describe import PartitionRow, _remote_log_dir, format_rows
from proxy.filters.remote_log_dirs import RemoteLogDirs
from tests.unit.test_describe_errors import _Answers
from tiering.cost import Prices
from tiering.metadata.journal_store import FileMetadataStore
from tiering.model import (
    RemoteLogDivergence,
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    RemoteLogSegmentState,
    TopicIdPartition,
)
from tiering.storage.api import StorageRequests
from tiering.topic_costs import TopicCosts
from tiering.topic_owner import TieredBy

TOPIC_ID = uuid.UUID(int=11)
HEALTHY, TROUBLED = TopicIdPartition(TOPIC_ID, "t", 0), TopicIdPartition(TOPIC_ID, "t", 1)


def _copied(store: FileMetadataStore, tp: TopicIdPartition, start: int, end: int) -> None:
    segment = RemoteLogSegmentMetadata(RemoteLogSegmentId(tp, uuid.uuid4()), start, end, 0, 1, 0, 100,
                                       ((0, start),))
    store.add_remote_log_segment_metadata(segment)
    store.update_remote_log_segment_metadata(RemoteLogSegmentMetadataUpdate(
        segment.segment_id, 1, RemoteLogSegmentState.COPY_SEGMENT_FINISHED, 1))


def _admin(store: FileMetadataStore) -> RemoteLogDirs:
    """A RemoteLogDirs filter with only what answering DescribeLogDirs reads (no broker client)."""
    admin = object.__new__(RemoteLogDirs)
    manager = SimpleNamespace(lag=dict, brokers_hold=frozenset(), tiered_by=lambda _: TieredBy.PROXY)
    admin.tiering = SimpleNamespace(metadata=store, manager=manager, storage_uri="file:///r")  # type: ignore[assignment]
    admin.costs = TopicCosts(StorageRequests(), store, Prices())
    return admin


def test_offsets_lost_and_diverged_reach_describe(tmp_path: Path) -> None:
    with FileMetadataStore(tmp_path) as store:
        for tp in (HEALTHY, TROUBLED):
            _copied(store, tp, 0, 99)
        store.put_remote_log_data_loss(TROUBLED, 100, 104, 1)
        store.put_remote_log_divergence(RemoteLogDivergence(TROUBLED, 60, 99, 3, 2, 1))
        store.put_remote_log_divergence(RemoteLogDivergence(TROUBLED, 40, 49, 5, 4, 2))
        log_dir = _admin(store)._remote_log_dir(None, 4)
    partitions = {p["partition_index"]: p["_unknown_tags"] for p in log_dir["topics"][0]["partitions"]}
    assert set(partitions[0]) == {TAG_SEGMENT_COUNT, TAG_STORED_BYTES}  # nothing lost or diverged: no tags for them
    assert set(partitions[1]) == {TAG_SEGMENT_COUNT, TAG_STORED_BYTES, TAG_DATA_LOSS, TAG_DIVERGENCE}

    response = codec("DescribeLogDirsResponse", 4)
    wire = response.encode({"throttle_time_ms": 0, "error_code": 0, "results": [log_dir]})
    client = _Answers({DESCRIBE_LOG_DIRS: response.decode(wire)}, {LIST_OFFSETS: (1, 10), DESCRIBE_LOG_DIRS: (1, 4)})
    found = _remote_log_dir(client, 1, "proxy:1")  # type: ignore[arg-type]
    # Stored: the data of segments in the clear in a local folder (no custom metadata recorded).
    assert found[("t", 0)] == ("-", 1, 100, 0, 0, 0, "proxy", 100)
    assert found[("t", 1)] == ("-", 1, 100, 0, 5, 50, "proxy", 100)  # 5 offsets lost; 40 + 10 cut back

    table = format_rows([PartitionRow("t", 1, 0, 99, 0, 150, 1, 100, 0, "-", 5, 50, "proxy")]).splitlines()
    header, row = table[0].split(), table[1].split()
    assert header[-4:] == ["LOST", "DIVERGED", "TIERED-BY", "TIERING"]
    assert row[header.index("TIERED-BY")] == "proxy"
    assert (row[header.index("LOST")], row[header.index("DIVERGED")]) == ("5", "50")
