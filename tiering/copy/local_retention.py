"""Local retention as Kafka applies it (``UnifiedLog.deleteRetentionMsBreachedSegments`` and
``deleteRetentionSizeBreachedSegments`` with ``local.retention.*``), over what the proxy sees of a
broker's log: its copied remote segments (byte for byte the brokers' batches) and the open one."""

from __future__ import annotations

from collections.abc import Sequence

from tiering.model import RemoteLogSegmentMetadata


def local_retention_target(segments: Sequence[RemoteLogSegmentMetadata], log_start: int, log_end: int,
                           open_bytes: int, local_retention_ms: int, local_retention_bytes: int,
                           now_ms: int) -> int:
    """The brokers' new log start: the end + 1 of the last segment local retention deletes, or
    ``log_start`` when none goes.

    ``segments`` are the copied segments by start offset, so the result never passes ``Ry + 1``.
    The local bytes are those of the segments from ``log_start`` on plus ``open_bytes`` (fetched,
    not tiered yet); anything past that is left out, which only errs toward keeping more.
    Oldest first, a segment goes if its newest record is older than ``local_retention_ms`` or if
    what stays without it is still at least ``local_retention_bytes``; the first one that does not
    go stops the walk. The segment reaching ``log_end`` (Kafka's active segment) never goes.
    A limit below zero is off.
    """
    local = [s for s in segments if s.end_offset >= log_start]
    staying = sum(s.segment_size_bytes for s in local) + open_bytes
    cutoff = now_ms - local_retention_ms
    target = log_start
    for segment in local:
        if segment.end_offset + 1 >= log_end:
            break  # nothing newer on the brokers: this is their active segment
        too_old = local_retention_ms >= 0 and segment.max_timestamp_ms < cutoff
        too_big = local_retention_bytes >= 0 and staying - segment.segment_size_bytes >= local_retention_bytes
        if not (too_old or too_big):
            break
        target = segment.end_offset + 1
        staying -= segment.segment_size_bytes
    return target
