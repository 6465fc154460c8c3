"""The offset index (``.index``): 8-byte entries (relative offset int32, position int32), big
endian, mapping a batch's last offset to its byte position in the segment; see
:mod:`protocol.remote_formats` for the look-up guarantee."""

from __future__ import annotations

import struct
from collections.abc import Iterable
from typing import NamedTuple

from construct import Int32sb, Struct

from protocol.errors import ProtocolError
from protocol.remote_formats.index_entries import _INT32_MAX, _entry_count, _relative

OFFSET_INDEX_ENTRY = Struct("relative_offset" / Int32sb, "position" / Int32sb)

_OFFSET_ENTRY = struct.Struct(">ii")
OFFSET_ENTRY_SIZE = _OFFSET_ENTRY.size  # 8


class OffsetPosition(NamedTuple):
    """An offset index entry: ``offset`` is absolute, ``position`` a byte offset in the segment."""

    offset: int
    position: int


def encode_offset_index(entries: Iterable[tuple[int, int]], base_offset: int) -> bytes:
    """Encode absolute (offset, position) pairs; offsets and positions must strictly ascend."""
    out = bytearray()
    last_rel = last_pos = -1
    for offset, position in entries:
        rel = _relative(offset, base_offset)
        if rel <= last_rel or position <= last_pos or position > _INT32_MAX:
            raise ValueError(f"offset index entries must strictly ascend: ({offset}, {position})")
        out += _OFFSET_ENTRY.pack(rel, position)
        last_rel, last_pos = rel, position
    return bytes(out)


def decode_offset_index(data: bytes | memoryview, base_offset: int) -> list[OffsetPosition]:
    """Decode and validate a whole offset index (lengths, strictly ascending entries)."""
    _entry_count(data, OFFSET_ENTRY_SIZE, "offset index")
    entries = []
    last_rel = last_pos = -1
    for i, (rel, position) in enumerate(_OFFSET_ENTRY.iter_unpack(data)):
        if rel <= last_rel or position <= last_pos:
            # Negative values land here too: the sentinels start at -1.
            raise ProtocolError(f"offset index entry {i} ({rel}, {position}) does not ascend",
                                i * OFFSET_ENTRY_SIZE)
        entries.append(OffsetPosition(base_offset + rel, position))
        last_rel, last_pos = rel, position
    return entries


def lookup_position(index: bytes | memoryview, base_offset: int, target_offset: int) -> OffsetPosition:
    """The entry with the largest offset <= ``target_offset``, or ``(base_offset, 0)`` if none.

    Scan the segment forward from the returned position to reach ``target_offset``. Binary
    search over the raw bytes: O(log n) and no decode, so it suits a per-fetch hot path; only
    the length is validated here (validate once with ``decode_offset_index`` when trusting
    nothing).
    """
    view = memoryview(index)
    hi = _entry_count(view, OFFSET_ENTRY_SIZE, "offset index")
    target_rel = target_offset - base_offset
    if target_rel < 0:
        return OffsetPosition(base_offset, 0)
    unpack = _OFFSET_ENTRY.unpack_from
    lo = 0
    # Invariant: entries [0, lo) have rel <= target; entries [hi, n) have rel > target.
    while lo < hi:
        mid = (lo + hi) // 2
        if unpack(view, mid * OFFSET_ENTRY_SIZE)[0] <= target_rel:
            lo = mid + 1
        else:
            hi = mid
    if lo == 0:
        return OffsetPosition(base_offset, 0)
    rel, position = unpack(view, (lo - 1) * OFFSET_ENTRY_SIZE)
    return OffsetPosition(base_offset + rel, position)
