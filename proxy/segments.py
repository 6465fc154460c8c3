"""``tiered-proxy segments``: a topic's remote segments as the metadata store records them, in
every state, with the custom metadata the storage plugin returned (KIP-917) decoded where the
store is one of ours. Reads the embedded journal without writing to it (safe beside a running
proxy), replays the metadata topic, or reads the remote tier's own manifests (``--remote``: the
bucket alone, no cluster and no store)."""

from __future__ import annotations

import time
import urllib.parse
from collections.abc import Mapping
from pathlib import Path

from tiering.client_security import ClientSecurity
from tiering.config import require_uri
from tiering.metadata.manifests import read_bucket
from tiering.metadata.view import StoreNotFoundError, load_metadata
from tiering.model import RemoteLogSegmentMetadata, TopicIdPartition
from tiering.storage.api import RemoteStorageError
from tiering.storage.segment_location import SegmentLocation
from tiering.storage.uri import storage_from_uri


def custom_metadata_text(blob: bytes | None) -> str:
    if blob is None:
        return "-"
    try:
        location = SegmentLocation.decode(blob)
    except RemoteStorageError:
        return f"0x{blob.hex()}"
    text = f"prefix={location.prefix or '(none)'} stored_bytes={location.stored_bytes}"
    return f"{text} sealed logical_bytes={location.logical}" if location.sealed else text


def load_segments(metadata_uri: str, bootstrap: str | None,
                  security: ClientSecurity | None = None) -> dict[TopicIdPartition, list[RemoteLogSegmentMetadata]]:
    state = load_metadata(metadata_uri, bootstrap, security=security)
    return {tp: list(p.segments.values()) for tp, p in state.partitions.items()}


def load_bucket_segments(remote_uri: str, props: Mapping[str, object]
                         ) -> tuple[dict[TopicIdPartition, list[RemoteLogSegmentMetadata]], str]:
    """The segments the remote tier's manifests describe, and a line saying what reading them cost."""
    parts = require_uri(remote_uri, "--remote", "s3://BUCKET/PREFIX")
    if parts.scheme == "file" and not Path(urllib.parse.unquote(parts.path)).is_dir():
        raise StoreNotFoundError(f"remote tier {remote_uri}: no such folder")  # opening it would create it
    storage = storage_from_uri(remote_uri, **dict(props))
    try:
        started = time.monotonic()
        index = read_bucket(storage)
        requests = storage.requests.snapshot()[0]
        elapsed = time.monotonic() - started
    finally:
        storage.close()
    segments = {tp: list(p.segments.values()) for tp, p in index.state.partitions.items()}
    count = sum(map(len, segments.values()))
    summary = (f"read from the remote tier alone: {_plural(index.topics, 'topic')}, "
               f"{_plural(index.partitions, 'partition')}, {_plural(count, 'segment')} "
               f"({requests.get('LIST', 0)} LIST and {requests.get('GET', 0)} GET requests, {elapsed:.2f} s)")
    for name, topic in sorted(index.state.topics.items()):
        configs = " ".join(f"{k}={v}" for k, v in topic.configs) or "(none)"
        lifecycle = "deleted" if topic.deleted else (topic.state.name if topic.state is not None else "never tiered")
        summary += (f"\ntopic {name} ({topic.topic_id}): {lifecycle}, tiered epoch {topic.tiered_epoch}, "
                    f"disable policy {topic.disable_policy.config_value}; configs {configs}")
    if index.undescribed:
        summary += (f"\n{len(index.undescribed)} partition directories hold segments but no manifest (tiered by a "
                    f"version before manifests; a proxy started over their metadata store writes them): "
                    + ", ".join(index.undescribed[:5]) + (" ..." if len(index.undescribed) > 5 else ""))
    return segments, summary


def _plural(count: int, noun: str) -> str:
    return f"{count} {noun}" + ("" if count == 1 else "s")


def format_segments(segments: dict[TopicIdPartition, list[RemoteLogSegmentMetadata]], topic: str | None) -> str:
    lines = ["TOPIC\tPARTITION\tTOPIC-ID\tSTART\tEND\tBYTES\tSTATE\tSEGMENT-ID\tCUSTOM-METADATA"]
    for tp, items in sorted(segments.items()):
        if topic is not None and tp.topic != topic:
            continue
        for s in sorted(items, key=lambda s: s.start_offset):
            lines.append("\t".join(map(str, (tp.topic, tp.partition, tp.topic_id, s.start_offset, s.end_offset,
                                             s.segment_size_bytes, s.state.name, s.segment_id.id,
                                             custom_metadata_text(s.custom_metadata)))))
    return "\n".join(lines)
