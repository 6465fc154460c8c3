"""A record set (consecutive length-framed batches, as a Fetch response or a segment file holds
them) sliced into whole batches without copying, decompressing or CRC-checking them.

:func:`iter_batches` walks v2 batches, yielding each header with a zero-copy view;
:func:`iter_entries` frames entries of any message format (magic 0, 1 or 2), so record sets from
old brokers can be sliced too.


Partial trailing data: a broker answering a Fetch may end the record set with the first bytes of
a batch cut by ``max_bytes``. The walkers (:func:`iter_batches`, :func:`iter_entries`) stop there
quietly; their ``consumed`` / ``remaining`` attributes say how much was whole, and
:func:`split_batches` returns the whole batches together with the consumed byte count.
"""

from __future__ import annotations

import struct
from typing import NamedTuple

from protocol import record_batch
from protocol.buffers import Buffer, _as_view
from protocol.errors import ProtocolError
from protocol.record_batch import _MAGIC_AT, HEADER_SIZE, LOG_OVERHEAD, MAGIC, MIN_BATCH_LENGTH

# Bound by assignment, not by import: CPython compiles `name.method(...)` into a method call (no
# bound method built per call) only for names the module does not import, and these are called
# on the hot path.
_HEADER = record_batch._HEADER
BatchHeader = record_batch.BatchHeader

_OFFSET_AND_LENGTH = struct.Struct(">qi")
_I32 = struct.Struct(">i")

# Smallest entry each magic allows after offset+size: v0 crc+magic+attributes+key len+value len,
# v1 adds a timestamp, v2 is the empty batch.
_MIN_ENTRY_LENGTH = (14, 22, MIN_BATCH_LENGTH)


class LogEntry(NamedTuple):
    """One length-framed entry of any message format.

    ``offset`` is what the framing carries: the base offset of a v2 batch, the message offset of
    a v0/v1 message (for a compressed v0/v1 wrapper, the offset of its last inner message).
    """

    offset: int
    magic: int
    data: memoryview


class _Walker:
    """Shared cursor state of the two walkers.

    After iteration ends, ``position`` is where the first incomplete entry starts (or ``end``),
    ``consumed`` the bytes of whole entries, ``remaining`` the bytes of a trailing partial one.
    After a ProtocolError, ``position`` is the start of the offending entry.
    """

    __slots__ = ("_view", "start", "end", "position")

    def __init__(self, buf: Buffer, start: int = 0, end: int | None = None) -> None:
        view = _as_view(buf)
        end = len(view) if end is None else end
        if not 0 <= start <= end <= len(view):
            raise ValueError(f"byte range {start}:{end} is outside a buffer of {len(view)} bytes")
        self._view = view
        self.start = start
        self.end = end
        self.position = start

    @property
    def consumed(self) -> int:
        return self.position - self.start

    @property
    def remaining(self) -> int:
        return self.end - self.position


class BatchIterator(_Walker):
    """Yields (header, zero-copy view) for each whole v2 batch; see :func:`iter_batches`."""

    __slots__ = ()

    def __iter__(self) -> BatchIterator:
        return self

    def __next__(self) -> tuple[BatchHeader, memoryview]:
        pos = self.position
        left = self.end - pos
        view = self._view
        if left >= HEADER_SIZE:
            fields = _HEADER.unpack_from(view, pos)
            if fields[3] != MAGIC:
                raise _bad_magic(fields[3], pos)
            if fields[1] < MIN_BATCH_LENGTH:
                raise ProtocolError(f"batch length {fields[1]} is below the {MIN_BATCH_LENGTH} of a v2 header", pos + 8)
            size = LOG_OVERHEAD + fields[1]
            if size <= left:
                self.position = pos + size
                return BatchHeader._make(fields), view[pos : pos + size]
        elif left >= LOG_OVERHEAD:
            # A partial header still shows its length, and maybe its magic: reject what cannot be
            # the start of a v2 batch rather than passing it off as a cut one.
            (length,) = _I32.unpack_from(view, pos + 8)
            if left > _MAGIC_AT and view[pos + _MAGIC_AT] != MAGIC:
                raise _bad_magic(view[pos + _MAGIC_AT], pos)
            if length < MIN_BATCH_LENGTH:
                raise ProtocolError(f"batch length {length} is below the {MIN_BATCH_LENGTH} of a v2 header", pos + 8)
        raise StopIteration


def _bad_magic(magic: int, pos: int) -> ProtocolError:
    hint = " (an old message set: walk it with iter_entries)" if magic < MAGIC else ""
    return ProtocolError(f"batch has magic {magic}; only record batch v2 is supported{hint}", pos + _MAGIC_AT)


class EntryIterator(_Walker):
    """Yields a :class:`LogEntry` for each whole entry of any magic; see :func:`iter_entries`."""

    __slots__ = ()

    def __iter__(self) -> EntryIterator:
        return self

    def __next__(self) -> LogEntry:
        pos = self.position
        left = self.end - pos
        if left < LOG_OVERHEAD:
            raise StopIteration
        view = self._view
        offset, length = _OFFSET_AND_LENGTH.unpack_from(view, pos)
        if left <= _MAGIC_AT:
            if length < _MIN_ENTRY_LENGTH[0]:
                raise ProtocolError(f"log entry length {length} is below any message format's minimum", pos + 8)
            raise StopIteration
        magic = view[pos + _MAGIC_AT]
        if magic > MAGIC:
            raise ProtocolError(f"log entry has unknown magic {magic}", pos + _MAGIC_AT)
        if length < _MIN_ENTRY_LENGTH[magic]:
            raise ProtocolError(f"log entry length {length} is below the magic {magic} minimum", pos + 8)
        size = LOG_OVERHEAD + length
        if size > left:
            raise StopIteration
        self.position = pos + size
        return LogEntry(offset, magic, view[pos : pos + size])


def iter_batches(buf: Buffer, start: int = 0, end: int | None = None) -> BatchIterator:
    """Each whole v2 batch in ``buf[start:end]`` as (header, memoryview slice of ``buf``).

    Nothing is copied, decompressed or CRC-checked. A trailing partial batch ends the iteration
    quietly; read ``consumed`` / ``remaining`` / ``position`` off the returned iterator afterwards.
    A batch length below 49 or a magic other than 2 raises ProtocolError (old message sets can be
    sliced with :func:`iter_entries` instead).
    """
    return BatchIterator(buf, start, end)


def iter_entries(buf: Buffer, start: int = 0, end: int | None = None) -> EntryIterator:
    """Each whole length-framed entry in ``buf[start:end]``, whatever its magic (0, 1 or 2).

    Every message format frames entries as offset int64 + size int32 with the magic at byte 16,
    so the proxy can slice record sets from old brokers it cannot decode. Same partial-tail and
    zero-copy behaviour as :func:`iter_batches`.
    """
    return EntryIterator(buf, start, end)


def split_batches(buf: Buffer, start: int = 0, end: int | None = None) -> tuple[list[tuple[BatchHeader, memoryview]], int]:
    """The whole v2 batches in ``buf[start:end]`` and how many bytes from ``start`` they cover;
    any bytes past that are a partial batch."""
    walker = BatchIterator(buf, start, end)
    batches = list(walker)
    return batches, walker.consumed
