"""``tiered-proxy segments``: a topic's remote segments as the metadata store records them, in
every state, with the custom metadata the storage plugin returned (KIP-917) decoded where the
store is one of ours. Reads the embedded journal without writing to it (safe beside a running
proxy), or replays the metadata topic."""

from __future__ import annotations

from tiering.client_security import ClientSecurity
from tiering.metadata.view import load_metadata
from tiering.model import RemoteLogSegmentMetadata, TopicIdPartition
from tiering.storage.api import RemoteStorageError
from tiering.storage.s3_location import S3SegmentLocation


def custom_metadata_text(blob: bytes | None) -> str:
    if blob is None:
        return "-"
    try:
        location = S3SegmentLocation.decode(blob)
    except RemoteStorageError:
        return f"0x{blob.hex()}"
    return f"s3 prefix={location.prefix or '(none)'} stored_bytes={location.stored_bytes}"


def load_segments(metadata_uri: str, bootstrap: str | None,
                  security: ClientSecurity | None = None) -> dict[TopicIdPartition, list[RemoteLogSegmentMetadata]]:
    state = load_metadata(metadata_uri, bootstrap, security=security)
    return {tp: list(p.segments.values()) for tp, p in state.partitions.items()}


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
