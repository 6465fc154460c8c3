"""``tiered-proxy segments``: a topic's remote segments as the metadata store records them, in
every state, with the custom metadata the storage plugin returned (KIP-917) decoded where the
store is one of ours. Reads the embedded journal without writing to it (safe beside a running
proxy), or replays the metadata topic."""

from __future__ import annotations

import tempfile
import urllib.parse
from pathlib import Path

from tiering.metadata import MetadataState
from tiering.metadata_file import JOURNAL_NAME, read_journal
from tiering.model import RemoteLogSegmentMetadata, TopicIdPartition
from tiering.storage import RemoteStorageError, S3SegmentLocation


def custom_metadata_text(blob: bytes | None) -> str:
    if blob is None:
        return "-"
    try:
        location = S3SegmentLocation.decode(blob)
    except RemoteStorageError:
        return f"0x{blob.hex()}"
    return f"s3 prefix={location.prefix or '(none)'} stored_bytes={location.stored_bytes}"


def load_segments(metadata_uri: str, bootstrap: str | None) -> dict[TopicIdPartition, list[RemoteLogSegmentMetadata]]:
    parts = urllib.parse.urlsplit(metadata_uri)
    if parts.scheme == "file":
        state = MetadataState()
        path = Path(urllib.parse.unquote(parts.path)) / JOURNAL_NAME
        for record in read_journal(path.read_bytes())[0]:
            state.apply(record)
        return {tp: list(p.segments.values()) for tp, p in state.partitions.items()}
    if not bootstrap:
        raise ValueError("a topic:// metadata store needs --bootstrap-servers (the cluster or the proxy)")
    from tiering.service import metadata_from_uri

    with tempfile.TemporaryDirectory() as scratch:
        store = metadata_from_uri(metadata_uri, bootstrap, Path(scratch), {})
        try:
            return {tp: list(store.list_remote_log_segments(tp)) for tp in store.partitions()}
        finally:
            store.close()


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
