"""Remote retention as Kafka applies it (``RemoteLogManager``'s expiration task), over the copied
segments of one partition: what falls below the log start DeleteRecords set, then what total (or
remote) retention by time and size lets go. No I/O: the copier deletes what this names."""

from __future__ import annotations

from collections.abc import Sequence

from tiering.model import RemoteLogSegmentMetadata


def expired_segments(segments: Sequence[RemoteLogSegmentMetadata], floor: int, limit_ms: int, limit_bytes: int,
                     staged_bytes: int, keep_newest: bool, now_ms: int) -> list[tuple[RemoteLogSegmentMetadata, str]]:
    """(segment, why) for each copied segment to delete, oldest first.

    ``segments`` by start offset; ``floor`` the remote log start (a segment wholly below it goes);
    then, oldest first, a segment goes if its newest record is older than ``limit_ms`` or if what
    stays without it (``staged_bytes``, fetched and not tiered yet, included) is still at least
    ``limit_bytes``; the first that does not go stops the walk. ``keep_newest``: the newest segment
    stays (nothing newer is staged, and it keeps ``Ry`` known). A limit below zero is off.
    """
    expired: list[tuple[RemoteLogSegmentMetadata, str]] = []
    remaining = list(segments)
    while remaining and remaining[0].end_offset < floor:
        expired.append((remaining.pop(0), f"below log start {floor}"))
    if limit_ms < 0 and limit_bytes < 0:
        return expired
    total = sum(s.segment_size_bytes for s in remaining) + staged_bytes
    cutoff = now_ms - limit_ms
    for segment in remaining[:-1] if keep_newest else remaining:
        too_old = limit_ms >= 0 and segment.max_timestamp_ms < cutoff
        too_big = limit_bytes >= 0 and total - segment.segment_size_bytes >= limit_bytes
        if not (too_old or too_big):
            break
        expired.append((segment, "expired"))
        total -= segment.segment_size_bytes
    return expired
