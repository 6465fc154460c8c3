"""Record bytes kept as pieces of other buffers (e.g. cached chunks of a remote segment), so an
encoded message can carry them by reference: the codecs splice the pieces into their output
list instead of copying them into one ``bytes`` first, and the frame is joined once."""

from __future__ import annotations


class RecordParts(tuple):  # noqa: SLOT001 - a tuple of buffers, nothing more
    """A ``records`` field value made of pieces (each bytes-like, one byte per item)."""

    __slots__ = ()

    @property
    def nbytes(self) -> int:
        return sum(len(p) for p in self)

    def tobytes(self) -> bytes:
        return b"".join(self)
