"""A frame written in pieces (vectored sends, partial sends resumed) arrives as the same bytes."""

from __future__ import annotations

import random

import trio
import trio.testing
from hypothesis import given, settings
from hypothesis import strategies as st

from proxy.framing import FrameStream, _coalesce


async def _round_trip(pieces: list) -> bytes:
    left, right = trio.socket.socketpair()
    writer = FrameStream(trio.SocketStream(left), 1 << 30)
    reader = FrameStream(trio.SocketStream(right), 1 << 30)
    got: list[bytes] = []
    async with trio.open_nursery() as nursery:
        async def read() -> None:
            frame = await reader.read_frame()
            assert frame is not None
            got.append(bytes(frame))

        nursery.start_soon(read)
        await writer.write_frame(pieces)
    await writer.stream.aclose()
    await reader.stream.aclose()
    assert writer.bytes_out == 4 + sum(len(p) for p in pieces)
    return got[0]


@settings(max_examples=40, deadline=None)
@given(st.lists(st.integers(0, 3 << 20), min_size=1, max_size=12), st.integers(0, 1000))
def test_pieces_arrive_as_one_frame(sizes: list[int], seed: int) -> None:
    rng = random.Random(seed)
    blob = rng.randbytes(max(sizes) + 1)
    pieces = [memoryview(blob)[: s] if i % 2 else bytes(blob[: s % 5000]) for i, s in enumerate(sizes)]
    assert trio.run(_round_trip, pieces) == b"".join(pieces)


def test_small_pieces_are_joined_and_large_ones_kept_by_reference() -> None:
    large = memoryview(bytes(20_000))
    out = _coalesce([b"\x00\x00\x00\x01", b"ab", b"", large, b"c", b"d"])
    assert out[0] == b"\x00\x00\x00\x01ab" and out[1] is large and out[2] == b"cd" and len(out) == 3
