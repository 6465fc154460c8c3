"""What the binary index files share: a whole number of fixed-size entries, and offsets stored
relative to the segment's base offset (int32)."""

from __future__ import annotations

from protocol.errors import ProtocolError

_INT32_MAX = 2**31 - 1
_INT64_MIN = -(2**63)
_INT64_MAX = 2**63 - 1


def _entry_count(data: bytes | memoryview, size: int, what: str) -> int:
    count, rest = divmod(len(data), size)
    if rest:
        raise ProtocolError(f"{what} of {len(data)} bytes is not a whole number of {size}-byte entries",
                            len(data) - rest)
    return count


def _relative(offset: int, base_offset: int) -> int:
    rel = offset - base_offset
    if not 0 <= rel <= _INT32_MAX:
        raise ValueError(f"offset {offset} is not within int32 range above base offset {base_offset}")
    return rel
