"""The byte buffers the parsers of protocol/ accept, and the one view they index.

Parsers take ``bytes``, ``bytearray`` or ``memoryview`` (:data:`Buffer`) and slice it without
copying through :func:`_as_view`, whose indexing yields byte values whatever view the caller
holds.
"""

from __future__ import annotations

from typing import TypeAlias

Buffer: TypeAlias = bytes | bytearray | memoryview


def _as_view(buf: Buffer) -> memoryview:
    view = buf if isinstance(buf, memoryview) else memoryview(buf)
    # Indexing must yield byte values whatever view the caller holds.
    return view if view.format == "B" and view.ndim == 1 else view.cast("B")
