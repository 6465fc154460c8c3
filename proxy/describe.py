"""``tiered-proxy describe``: each partition's two tiers, asked of a running proxy over the Kafka
protocol, as any client could: ListOffsets EARLIEST (-2, ``Rx`` once anything is tiered),
EARLIEST_LOCAL (-4, ``Lx``), LATEST_TIERED (-5, ``Ry``) and LATEST (-1, ``Lz``); DescribeLogDirs
for the remote tier's log dir (remote bytes, tiering lag, and in tagged fields the segment count
and the KIP-950 state)."""

from __future__ import annotations

import struct
from dataclasses import dataclass

from protocol.apis import LIST_OFFSETS
from proxy.topic_admin import DESCRIBE_LOG_DIRS, TAG_SEGMENT_COUNT, TAG_TIERING_STATE
from tiering.broker_client import BrokerClient

LIST_OFFSETS_VERSION = 9  # the first with LATEST_TIERED; the proxy offers it whatever the broker
EARLIEST, LATEST, EARLIEST_LOCAL, LATEST_TIERED = -2, -1, -4, -5


@dataclass
class PartitionRow:
    topic: str
    partition: int
    rx: int | None  # None: nothing tiered
    ry: int | None
    lx: int
    lz: int
    segments: int
    remote_bytes: int
    lag: int
    state: str


def describe(bootstrap: str, topic: str | None = None) -> list[PartitionRow]:
    client = BrokerClient(bootstrap)
    try:
        topics = client.metadata([topic] if topic else None)
        remote = _remote_log_dir(client)
        rows = []
        for name, info in sorted(topics.items()):
            if info.internal or name.startswith("__"):
                continue
            by_leader: dict[int, list[int]] = {}
            for p in info.partitions.values():
                by_leader.setdefault(p.leader, []).append(p.partition)
            offsets: dict[tuple[int, int], int] = {}
            for leader, partitions in by_leader.items():
                for timestamp in (EARLIEST, LATEST, EARLIEST_LOCAL, LATEST_TIERED):
                    body = {"replica_id": -1, "isolation_level": 0, "timeout_ms": 10_000, "topics": [
                        {"name": name, "partitions": [{"partition_index": p, "current_leader_epoch": -1,
                                                       "timestamp": timestamp} for p in partitions]}]}
                    answer = client.request(leader, LIST_OFFSETS, LIST_OFFSETS_VERSION, body)
                    for t in answer["topics"]:
                        for p in t["partitions"]:
                            offsets[(p["partition_index"], timestamp)] = p["offset"] if p["error_code"] == 0 else -1
            state = remote.get((name, None), ("-", 0, 0, 0))[0]
            for p in sorted(info.partitions):
                _, segments, size, lag = remote.get((name, p), (state, 0, 0, 0))
                ry = offsets.get((p, LATEST_TIERED), -1)
                rows.append(PartitionRow(name, p, offsets.get((p, EARLIEST)) if ry >= 0 else None,
                                         ry if ry >= 0 else None, offsets.get((p, EARLIEST_LOCAL), -1),
                                         offsets.get((p, LATEST), -1), segments, size, lag, state))
        return rows
    finally:
        client.close()


def _remote_log_dir(client: BrokerClient) -> dict[tuple[str, int | None], tuple[str, int, int, int]]:
    """(topic, partition) -> (state, segments, bytes, lag); (topic, None) -> the topic's state."""
    client.metadata([])
    node = min(client.brokers)
    versions = client.supported(node, DESCRIBE_LOG_DIRS)
    if versions is None:
        return {}
    version = min(versions[1], 4)
    answer = client.request(node, DESCRIBE_LOG_DIRS, version, {"topics": None})
    found: dict[tuple[str, int | None], tuple[str, int, int, int]] = {}
    for result in answer["results"]:
        if not result["log_dir"].startswith("remote:"):
            continue
        for t in result["topics"]:
            raw_state = (t.get("_unknown_tags") or {}).get(TAG_TIERING_STATE)
            state = raw_state.decode() if raw_state else "-"
            found[(t["name"], None)] = (state, 0, 0, 0)
            for p in t["partitions"]:
                raw_count = (p.get("_unknown_tags") or {}).get(TAG_SEGMENT_COUNT)
                count = struct.unpack(">i", raw_count)[0] if raw_count else 0
                found[(t["name"], p["partition_index"])] = (state, count, p["partition_size"], p["offset_lag"])
    return found


def format_rows(rows: list[PartitionRow]) -> str:
    header = ("TOPIC", "PARTITION", "Rx", "Ry", "Lx", "Lz", "SEGMENTS", "REMOTE-BYTES", "LAG", "TIERING")
    lines = [header] + [(r.topic, str(r.partition), "-" if r.rx is None else str(r.rx), "-" if r.ry is None else str(r.ry),
                         str(r.lx), str(r.lz), str(r.segments), str(r.remote_bytes), str(r.lag), r.state) for r in rows]
    widths = [max(len(line[i]) for line in lines) for i in range(len(header))]
    return "\n".join("  ".join(cell.ljust(w) for cell, w in zip(line, widths, strict=True)).rstrip() for line in lines)
