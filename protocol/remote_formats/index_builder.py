"""Offset and time indexes built batch by batch as the copier feeds a segment in log order, with
Kafka's ``LogSegment`` rules for where entries go (see :mod:`protocol.remote_formats`)."""

from __future__ import annotations

from protocol.remote_formats import offset_index, time_index
from protocol.remote_formats.index_entries import _INT32_MAX, _INT64_MAX, _INT64_MIN, _relative

# Bound by assignment, not by import: CPython compiles `name.method(...)` into a method call (no
# bound method built per call) only for names the module does not import, and these are called
# once per index entry.
_OFFSET_ENTRY = offset_index._OFFSET_ENTRY
_TIME_ENTRY = time_index._TIME_ENTRY

DEFAULT_INDEX_INTERVAL_BYTES = 4096  # Kafka's index.interval.bytes default

_NO_TIMESTAMP = -1  # Kafka's RecordBatch.NO_TIMESTAMP; the time index never holds it


class _IntervalTracker:
    """Decides, batch by batch, where an index entry goes (Kafka's bytesSinceLastIndexEntry)."""

    def __init__(self, base_offset: int, interval_bytes: int) -> None:
        if interval_bytes < 0:
            raise ValueError(f"interval_bytes must not be negative: {interval_bytes}")
        self.base_offset = base_offset
        self.interval_bytes = interval_bytes
        self.position = 0  # bytes of log fed so far = the next batch's position
        self.last_offset = base_offset - 1
        self._since_last_entry = 0

    def advance(self, last_offset: int, size: int) -> tuple[int, bool]:
        """Account for one batch; returns its position and whether it gets an index entry."""
        _relative(last_offset, self.base_offset)
        if last_offset <= self.last_offset:
            raise ValueError(f"batch last offset {last_offset} does not follow {self.last_offset}")
        if size <= 0 or self.position + size > _INT32_MAX:
            raise ValueError(f"batch size {size} at position {self.position} does not fit a segment")
        position = self.position
        # Kafka tests the bytes written before this batch, then counts this batch.
        indexed = self._since_last_entry > self.interval_bytes
        if indexed:
            self._since_last_entry = 0
        self._since_last_entry += size
        self.position += size
        self.last_offset = last_offset
        return position, indexed


class OffsetIndexBuilder:
    """Builds a segment's offset index as the copier feeds batches in log order.

    ``add(last_offset, size)`` takes each batch's last offset and its size in bytes (batches
    are contiguous from position 0, so positions are implied) and returns the batch's position.
    """

    def __init__(self, base_offset: int, interval_bytes: int = DEFAULT_INDEX_INTERVAL_BYTES) -> None:
        self._tracker = _IntervalTracker(base_offset, interval_bytes)
        self._out = bytearray()

    @property
    def size_bytes(self) -> int:
        """Bytes of log fed so far."""
        return self._tracker.position

    def add(self, last_offset: int, size: int) -> int:
        position, indexed = self._tracker.advance(last_offset, size)
        if indexed:
            self._out += _OFFSET_ENTRY.pack(last_offset - self._tracker.base_offset, position)
        return position

    def to_bytes(self) -> bytes:
        return bytes(self._out)


class TimeIndexBuilder:
    """Builds a segment's time index; ``add`` also takes the batch's max timestamp.

    ``to_bytes`` appends the closing entry Kafka writes when a segment is rolled, so the last
    entry of a finished index carries the segment's max timestamp.
    """

    def __init__(self, base_offset: int, interval_bytes: int = DEFAULT_INDEX_INTERVAL_BYTES) -> None:
        self._tracker = _IntervalTracker(base_offset, interval_bytes)
        self._out = bytearray()
        self._last_entry_ts = _NO_TIMESTAMP
        self.max_timestamp = _NO_TIMESTAMP
        self.offset_of_max_timestamp = base_offset - 1

    def add(self, last_offset: int, size: int, max_timestamp: int) -> int:
        if not _INT64_MIN <= max_timestamp <= _INT64_MAX:
            raise ValueError(f"timestamp {max_timestamp} is not an int64")
        position, indexed = self._tracker.advance(last_offset, size)
        # Strictly greater: the recorded offset is the first batch to reach the maximum, which
        # is what makes a scan from it safe.
        if max_timestamp > self.max_timestamp:
            self.max_timestamp = max_timestamp
            self.offset_of_max_timestamp = last_offset
        if indexed:
            self._maybe_append()
        return position

    def _maybe_append(self) -> None:
        if self.max_timestamp > self._last_entry_ts:
            rel = self.offset_of_max_timestamp - self._tracker.base_offset
            self._out += _TIME_ENTRY.pack(self.max_timestamp, rel)
            self._last_entry_ts = self.max_timestamp

    def to_bytes(self) -> bytes:
        if self.max_timestamp > self._last_entry_ts:
            rel = self.offset_of_max_timestamp - self._tracker.base_offset
            return bytes(self._out) + _TIME_ENTRY.pack(self.max_timestamp, rel)
        return bytes(self._out)


class SegmentIndexBuilder:
    """Offset and time index together, fed once per batch, as a broker builds them."""

    def __init__(self, base_offset: int, interval_bytes: int = DEFAULT_INDEX_INTERVAL_BYTES) -> None:
        self.offsets = OffsetIndexBuilder(base_offset, interval_bytes)
        self.times = TimeIndexBuilder(base_offset, interval_bytes)

    def add(self, last_offset: int, size: int, max_timestamp: int) -> int:
        """Feed one batch; returns its position in the segment."""
        self.times.add(last_offset, size, max_timestamp)  # validates first, so both stay in step
        return self.offsets.add(last_offset, size)

    def offset_index(self) -> bytes:
        return self.offsets.to_bytes()

    def time_index(self) -> bytes:
        return self.times.to_bytes()
