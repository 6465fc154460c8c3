"""The time index (``.timeindex``): 12-byte entries (timestamp int64, relative offset int32), big
endian, mapping the segment's running maximum timestamp to the offset that first reached it; see
:mod:`protocol.remote_formats` for the look-up guarantee."""

from __future__ import annotations

import struct
from collections.abc import Iterable
from typing import NamedTuple

from construct import Int32sb, Int64sb, Struct

from protocol.errors import ProtocolError
from protocol.remote_formats.index_entries import _INT64_MAX, _INT64_MIN, _entry_count, _relative
from protocol.remote_formats.offset_index import OffsetPosition, lookup_position

TIME_INDEX_ENTRY = Struct("timestamp" / Int64sb, "relative_offset" / Int32sb)

_TIME_ENTRY = struct.Struct(">qi")
TIME_ENTRY_SIZE = _TIME_ENTRY.size  # 12


class TimestampOffset(NamedTuple):
    """A time index entry; ``offset`` is absolute."""

    timestamp: int
    offset: int


def encode_time_index(entries: Iterable[tuple[int, int]], base_offset: int) -> bytes:
    """Encode absolute (timestamp, offset) pairs; both must be non-decreasing."""
    out = bytearray()
    last_ts, last_rel = _INT64_MIN, -1
    for timestamp, offset in entries:
        rel = _relative(offset, base_offset)
        if not _INT64_MIN <= timestamp <= _INT64_MAX:
            raise ValueError(f"timestamp {timestamp} is not an int64")
        if timestamp < last_ts or rel < last_rel:
            raise ValueError(f"time index entries must not descend: ({timestamp}, {offset})")
        out += _TIME_ENTRY.pack(timestamp, rel)
        last_ts, last_rel = timestamp, rel
    return bytes(out)


def decode_time_index(data: bytes | memoryview, base_offset: int) -> list[TimestampOffset]:
    """Decode and validate a whole time index (lengths, non-decreasing timestamps and offsets,
    which is what Kafka's ``TimeIndex.maybeAppend`` enforces)."""
    _entry_count(data, TIME_ENTRY_SIZE, "time index")
    entries = []
    last_ts, last_rel = _INT64_MIN, -1
    for i, (timestamp, rel) in enumerate(_TIME_ENTRY.iter_unpack(data)):
        if rel < 0 or timestamp < last_ts or rel < last_rel:
            raise ProtocolError(f"time index entry {i} ({timestamp}, {rel}) descends", i * TIME_ENTRY_SIZE)
        entries.append(TimestampOffset(timestamp, base_offset + rel))
        last_ts, last_rel = timestamp, rel
    return entries


def lookup_offset_for_timestamp(
    index: bytes | memoryview, base_offset: int, timestamp: int, max_timestamp: int | None = None
) -> int | None:
    """The offset from which to scan for the first batch whose max timestamp >= ``timestamp``.

    Every batch that ends before the returned offset has a smaller max timestamp, so scanning
    forward from the batch containing it (its position is ``lookup_position(offset_index,
    base_offset, result).position``) finds the first match without skipping it. Like Kafka's
    ``TimeIndex.lookup``, this is the entry with the largest timestamp <= ``timestamp`` (the
    first of equal ones, which is the only safe one if a file repeats a timestamp), or
    ``base_offset`` when there is none. Returns None only when ``max_timestamp`` (the segment's
    largest timestamp, e.g. from its remote metadata) shows no record can match.
    """
    if max_timestamp is not None and timestamp > max_timestamp:
        return None
    view = memoryview(index)
    count = hi = _entry_count(view, TIME_ENTRY_SIZE, "time index")
    unpack = _TIME_ENTRY.unpack_from
    lo = 0
    # Find the first entry with entry timestamp >= timestamp (bisect_left).
    while lo < hi:
        mid = (lo + hi) // 2
        if unpack(view, mid * TIME_ENTRY_SIZE)[0] < timestamp:
            lo = mid + 1
        else:
            hi = mid
    if lo < count:
        ts, rel = unpack(view, lo * TIME_ENTRY_SIZE)
        if ts == timestamp:
            return base_offset + rel
    if lo == 0:
        return base_offset
    return base_offset + unpack(view, (lo - 1) * TIME_ENTRY_SIZE)[1]


def position_for_timestamp(
    time_index: bytes | memoryview,
    offset_index: bytes | memoryview,
    base_offset: int,
    timestamp: int,
    max_timestamp: int | None = None,
) -> OffsetPosition | None:
    """Both look-ups chained, as Kafka's ``LogSegment.findOffsetByTimestamp`` does: the byte
    position from which to scan for the first record with timestamp >= ``timestamp``."""
    offset = lookup_offset_for_timestamp(time_index, base_offset, timestamp, max_timestamp)
    if offset is None:
        return None
    return lookup_position(offset_index, base_offset, offset)
