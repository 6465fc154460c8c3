"""What pass-through relies on to run at the broker's speed (issue 26): a large answer relayed between
two plain TCP sockets arrives intact, takes few turns of the event loop, and is never read into user
space. Counted, not timed: the relay of a 256 KiB buffer took a loop turn for every piece it read and
every piece it wrote, and ran at 0.53x of a direct read on Kafka 4.4 (tests/bench/wire_speed.py)."""

from __future__ import annotations

import random
import socket
import struct
import threading

import pytest
import trio
from hypothesis import given, settings
from hypothesis import strategies as st

from proxy import framing
from proxy.framing import FrameError, FrameStream

MIB = 1 << 20


def _tcp_pair() -> tuple[socket.socket, socket.socket]:
    with socket.create_server(("127.0.0.1", 0)) as server:
        outer = socket.create_connection(server.getsockname())
        inner, _ = server.accept()
    return outer, inner


class _StepCounter(trio.abc.Instrument):
    """Turns of the event loop taken by one task."""

    def __init__(self) -> None:
        self.task: trio.lowlevel.Task | None = None
        self.steps = 0

    def before_task_step(self, task: trio.lowlevel.Task) -> None:
        if task is self.task:
            self.steps += 1


def _relay(payload: bytes, close_after: int | None = None) -> tuple[bytes, int, FrameStream]:
    """Relays one frame of ``payload`` from a broker-side socket to a client-side one, the broker
    writing it and the client reading it from threads as fast as they can; the bytes the client got
    and the relay task's loop turns. ``close_after``: the broker closes after that many bytes."""
    broker, proxy_upstream = _tcp_pair()
    proxy_client, client = _tcp_pair()
    frame = struct.pack(">i", len(payload)) + payload
    received = bytearray()

    def broker_writes() -> None:
        broker.sendall(frame if close_after is None else frame[:close_after])
        broker.close()

    def client_reads() -> None:
        while chunk := client.recv(MIB):
            received.extend(chunk)

    counter = _StepCounter()

    async def main() -> FrameStream:
        source = FrameStream(trio.SocketStream(trio.socket.from_stdlib_socket(proxy_upstream)), 1 << 30)
        target = FrameStream(trio.SocketStream(trio.socket.from_stdlib_socket(proxy_client)), 1 << 30)
        assert await source.next_frame_size() == len(payload)
        counter.task = trio.lowlevel.current_task()
        trio.lowlevel.add_instrument(counter)
        try:
            await source.relay_frame(target, bytearray(256 * 1024))
        finally:
            trio.lowlevel.remove_instrument(counter)
            await source.aclose()
            await target.aclose()
        return source

    writer = threading.Thread(target=broker_writes)
    reader = threading.Thread(target=client_reads)
    writer.start()
    reader.start()
    try:
        source = trio.run(main)
    finally:
        writer.join(30)
        reader.join(30)
        client.close()
    return bytes(received), counter.steps, source


@pytest.mark.skipif(not framing._SPLICE, reason="splice is Linux's; elsewhere the relay copies")
def test_a_large_answer_takes_few_loop_turns_and_no_user_space_copy(monkeypatch: pytest.MonkeyPatch) -> None:
    reads_into_user_space: list[int] = []
    original = framing._PlainSocket.recv_into

    async def counted(self: framing._PlainSocket, view: memoryview) -> int:
        reads_into_user_space.append(len(view))
        return await original(self, view)

    monkeypatch.setattr(framing._PlainSocket, "recv_into", counted)
    payload = random.Random(26).randbytes(32 * MIB)
    got, steps, source = _relay(payload)
    assert got == struct.pack(">i", len(payload)) + payload
    assert source.bytes_in == len(got)
    assert reads_into_user_space == []  # the body went socket -> pipe -> socket
    # A turn whenever a socket would block, and one every _CALLS_PER_TURN calls that did not: 21-28
    # turns for 16 MiB on an idle machine, up to 61 with the CPU busy. The 256 KiB relay takes at
    # least 2 per piece (read, write): 256 here, 134 for 16 MiB on the idle machine.
    assert steps <= 6 * 32, f"{steps} loop turns to relay 32 MiB"


def test_a_broker_closing_inside_an_answer_is_a_frame_error() -> None:
    payload = bytes(3 * MIB)
    with pytest.raises(FrameError, match="closed inside a frame"):
        _relay(payload, close_after=MIB + 7)


@settings(max_examples=25, deadline=None)
@given(st.integers(0, 5 * MIB), st.integers(0, 1000))
def test_relayed_answers_arrive_intact(size: int, seed: int) -> None:
    payload = random.Random(seed).randbytes(size)
    got, _, _ = _relay(payload)
    assert got == struct.pack(">i", size) + payload
