"""The index files that travel with each remote segment, in Kafka's own on-disk formats.

A remote segment is uploaded with the indexes a broker keeps beside a local ``.log`` file, so
that a fetch from the remote tier can seek instead of scanning the whole object:

* offset index (``.index``): 8-byte entries (relative offset int32, position int32), big endian;
* time index (``.timeindex``): 12-byte entries (timestamp int64, relative offset int32);
* transaction index (``.txnindex``): 34-byte aborted-transaction entries;
* leader-epoch checkpoint: text, ``0`` / entry count / ``epoch startOffset`` lines.

Each binary layout is declared once with ``construct`` (``OFFSET_INDEX_ENTRY`` and friends).
Those declarations are the specification; the transaction index, which is tiny and read
rarely, is encoded and decoded through them directly. Offset and time indexes can hold a
quarter of a million entries per segment and are consulted on every remote fetch, so their
codecs and look-ups use ``struct`` and binary search over the raw bytes (no full decode),
and the tests check that the fast paths agree with the declarations byte for byte.

Indexing semantics (mirroring Kafka's ``LogSegment``):

* An index entry is added for a batch when more than ``interval_bytes`` of log have been
  written since the previous entry, counting the bytes *before* that batch, so the first
  batch of a segment is never indexed and a lookup that finds no entry starts at position 0.
* The offset index maps a batch's **last** offset to the batch's start position, as Kafka
  does. ``lookup_position(target)`` returns the entry with the largest offset <= target.
  Because the key is the batch's last offset, every batch before that position ends before
  target, so the returned position is at or before the batch containing target: scanning
  forward from it always reaches target, and never misses it.
* The time index maps the segment's running maximum timestamp to the last offset of the batch
  that first reached it; an entry is added at each index point only when the maximum grew,
  and once more when the segment is finished (Kafka does this when it rolls a segment).
  Hence all batches before that batch have smaller timestamps, and
  ``lookup_offset_for_timestamp(ts)`` (largest entry with timestamp <= ts) gives an offset
  from which a forward scan never skips the first batch whose max timestamp >= ts.

Every decoder raises ``ProtocolError`` (and nothing else) for malformed bytes; encoders and
builders raise ``ValueError`` for values the format cannot hold.
"""

from __future__ import annotations

import re
import struct
from collections.abc import Iterable, Sequence
from typing import NamedTuple

from construct import Const, ConstructError, GreedyRange, Int16sb, Int32sb, Int64sb, Struct

from protocol.errors import ProtocolError

DEFAULT_INDEX_INTERVAL_BYTES = 4096  # Kafka's index.interval.bytes default

_INT32_MAX = 2**31 - 1
_INT64_MIN = -(2**63)
_INT64_MAX = 2**63 - 1

# --- declarative layouts (the specification) --------------------------------------------------

OFFSET_INDEX_ENTRY = Struct("relative_offset" / Int32sb, "position" / Int32sb)
TIME_INDEX_ENTRY = Struct("timestamp" / Int64sb, "relative_offset" / Int32sb)
ABORTED_TXN_ENTRY = Struct(
    "version" / Const(0, Int16sb),
    "producer_id" / Int64sb,
    "first_offset" / Int64sb,
    "last_offset" / Int64sb,
    "last_stable_offset" / Int64sb,
)
TRANSACTION_INDEX = GreedyRange(ABORTED_TXN_ENTRY)

# --- fast equivalents for the hot paths -------------------------------------------------------

_OFFSET_ENTRY = struct.Struct(">ii")
_TIME_ENTRY = struct.Struct(">qi")
_TXN_ENTRY = struct.Struct(">hqqqq")
OFFSET_ENTRY_SIZE = _OFFSET_ENTRY.size  # 8
TIME_ENTRY_SIZE = _TIME_ENTRY.size  # 12
TXN_ENTRY_SIZE = _TXN_ENTRY.size  # 34
_TXN_VERSION = 0

_NO_TIMESTAMP = -1  # Kafka's RecordBatch.NO_TIMESTAMP; the time index never holds it


class OffsetPosition(NamedTuple):
    """An offset index entry: ``offset`` is absolute, ``position`` a byte offset in the segment."""

    offset: int
    position: int


class TimestampOffset(NamedTuple):
    """A time index entry; ``offset`` is absolute."""

    timestamp: int
    offset: int


class AbortedTxn(NamedTuple):
    """A transaction index entry: an aborted transaction of ``producer_id`` spanning
    ``first_offset``..``last_offset`` (the abort marker), inclusive."""

    producer_id: int
    first_offset: int
    last_offset: int
    last_stable_offset: int


class EpochEntry(NamedTuple):
    epoch: int
    start_offset: int


# --- offset index -----------------------------------------------------------------------------


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


# --- time index -------------------------------------------------------------------------------


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


# --- builders ---------------------------------------------------------------------------------


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


# --- transaction index ------------------------------------------------------------------------


def _check_txn(txn: AbortedTxn, previous_last: int) -> str | None:
    if txn.first_offset < 0 or txn.first_offset > txn.last_offset:
        return f"aborted transaction spans {txn.first_offset}..{txn.last_offset}"
    # Kafka's TransactionIndex.append refuses a last offset that does not grow.
    if txn.last_offset <= previous_last:
        return f"aborted transaction last offset {txn.last_offset} does not follow {previous_last}"
    return None


def encode_transaction_index(txns: Iterable[tuple[int, int, int, int]]) -> bytes:
    """Encode aborted transactions (in ascending last-offset order)."""
    items = [AbortedTxn(*t) for t in txns]
    previous = -1
    for txn in items:
        problem = _check_txn(txn, previous)
        if problem:
            raise ValueError(problem)
        previous = txn.last_offset
    try:
        return TRANSACTION_INDEX.build([dict(t._asdict(), version=_TXN_VERSION) for t in items])
    except ConstructError as exc:
        raise ValueError(f"aborted transaction does not fit the format: {exc}") from None


def decode_transaction_index(data: bytes | memoryview) -> list[AbortedTxn]:
    """Decode and validate a transaction index through its declaration (small, read rarely)."""
    count = _entry_count(data, TXN_ENTRY_SIZE, "transaction index")
    entries: list[AbortedTxn] = []
    previous = -1
    for i in range(count):
        at = i * TXN_ENTRY_SIZE
        try:
            parsed = ABORTED_TXN_ENTRY.parse(bytes(data[at : at + TXN_ENTRY_SIZE]))
        except ConstructError:
            raise ProtocolError(f"transaction index entry {i} has an unknown version", at) from None
        txn = AbortedTxn(parsed.producer_id, parsed.first_offset, parsed.last_offset, parsed.last_stable_offset)
        problem = _check_txn(txn, previous)
        if problem:
            raise ProtocolError(f"transaction index entry {i}: {problem}", at)
        entries.append(txn)
        previous = txn.last_offset
    return entries


def aborted_in_range(index: bytes | memoryview, start_offset: int, end_offset: int) -> list[AbortedTxn]:
    """The aborted transactions overlapping ``start_offset``..``end_offset`` (both inclusive).

    A read_committed fetch of [fetch offset, upper bound) passes ``end_offset = upper - 1``
    (Kafka's ``collectAbortedTxns`` compares ``first_offset < upper``). Entries ascend by last
    offset but not necessarily by first offset, so this is one full, struct-based pass; it also
    validates every entry as ``decode_transaction_index`` does.
    """
    _entry_count(index, TXN_ENTRY_SIZE, "transaction index")
    found = []
    previous = -1
    for i, (version, pid, first, last, lso) in enumerate(_TXN_ENTRY.iter_unpack(index)):
        if version != _TXN_VERSION:
            raise ProtocolError(f"transaction index entry {i} has version {version}", i * TXN_ENTRY_SIZE)
        txn = AbortedTxn(pid, first, last, lso)
        problem = _check_txn(txn, previous)
        if problem:
            raise ProtocolError(f"transaction index entry {i}: {problem}", i * TXN_ENTRY_SIZE)
        previous = last
        if last >= start_offset and first <= end_offset:
            found.append(txn)
    return found


# --- leader-epoch checkpoint ------------------------------------------------------------------

_CHECKPOINT_VERSION = 0
_NUMBER = re.compile(r"[0-9]{1,19}")
_ENTRY_LINE = re.compile(r"([0-9]{1,10})[ \t]+([0-9]{1,19})")


def encode_leader_epoch_checkpoint(entries: Iterable[tuple[int, int]]) -> bytes:
    """Kafka's checkpoint text: version, count, then ``epoch startOffset`` lines, each ending
    in a newline. Epochs must strictly ascend and start offsets must not descend."""
    items = [EpochEntry(*e) for e in entries]
    _check_epochs(items, ValueError)
    lines = [str(_CHECKPOINT_VERSION), str(len(items))]
    lines += [f"{e.epoch} {e.start_offset}" for e in items]
    return ("\n".join(lines) + "\n").encode("ascii")


def _check_epochs(items: Sequence[EpochEntry], error: type[ValueError]) -> None:
    previous: EpochEntry | None = None
    for e in items:
        if not 0 <= e.epoch <= _INT32_MAX or not 0 <= e.start_offset <= _INT64_MAX:
            raise error(f"leader epoch entry {tuple(e)} is out of range")
        if previous is not None and (e.epoch <= previous.epoch or e.start_offset < previous.start_offset):
            raise error(f"leader epoch entry {tuple(e)} does not follow {tuple(previous)}")
        previous = e


def decode_leader_epoch_checkpoint(data: bytes | memoryview) -> list[EpochEntry]:
    """Parse a leader-epoch checkpoint strictly: ASCII, version 0, a count matching the entry
    lines, no blank or extra lines (a final newline is optional, ``\\r\\n`` is accepted, as by
    Kafka's line reader), epochs ascending."""
    try:
        text = bytes(data).decode("ascii")
    except UnicodeDecodeError as exc:
        raise ProtocolError("leader epoch checkpoint is not ASCII text", exc.start) from None
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()  # the newline that ends the last line
    lines = [line[:-1] if line.endswith("\r") else line for line in lines]
    if len(lines) < 2:
        raise ProtocolError("leader epoch checkpoint lacks its version and count lines")
    if lines[0] != str(_CHECKPOINT_VERSION):
        raise ProtocolError(f"leader epoch checkpoint has version {lines[0]!r}, expected 0")
    if not _NUMBER.fullmatch(lines[1]):
        raise ProtocolError(f"leader epoch checkpoint count {lines[1]!r} is not a number")
    count = int(lines[1])
    if count != len(lines) - 2:
        raise ProtocolError(f"leader epoch checkpoint announces {count} entries but holds {len(lines) - 2}")
    items = []
    for n, line in enumerate(lines[2:], start=3):
        match = _ENTRY_LINE.fullmatch(line)
        if not match:
            raise ProtocolError(f"leader epoch checkpoint line {n} is malformed: {line[:40]!r}")
        items.append(EpochEntry(int(match[1]), int(match[2])))
    _check_epochs(items, ProtocolError)
    return items
