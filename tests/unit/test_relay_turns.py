"""What pass-through relies on to run at the broker's speed (issue 26): a large answer relayed between
two plain TCP sockets arrives intact, takes turns of the event loop only to wait for a socket, and is
never read into user space. Counted, not timed: the relay of a 256 KiB buffer took a loop turn for every piece it read and
every piece it wrote, and ran at 0.53x of a direct read on Kafka 4.4 (tests/bench/wire_speed.py)."""

from __future__ import annotations

import os
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
        counter.task = trio.lowlevel.current_task()
        trio.lowlevel.add_instrument(counter)
        try:
            head = await source.frame_head()
            assert head is not None and head[0] == len(payload)
            await source.relay_frame(target, head[0], 256 * 1024)
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
def test_a_large_answer_takes_loop_turns_only_to_wait_and_no_user_space_copy(monkeypatch: pytest.MonkeyPatch) -> None:
    reads_into_user_space: list[str] = []
    for name in ("recv", "recv_into"):
        def counted(*args: object, _name: str = name, _original: object = getattr(framing._PlainSocket, name)) -> object:
            reads_into_user_space.append(_name)
            return _original(*args)  # type: ignore[operator]

        monkeypatch.setattr(framing._PlainSocket, name, counted)
    waits: list[str] = []
    for name in ("readable", "writable"):
        async def waited(self: framing._PlainSocket, _name: str = name, _original: object = getattr(framing._PlainSocket, name)) -> None:
            waits.append(_name)
            await _original(self)  # type: ignore[operator]

        monkeypatch.setattr(framing._PlainSocket, name, waited)
    payload = random.Random(26).randbytes(32 * MIB)
    got, steps, source = _relay(payload)
    assert got == struct.pack(">i", len(payload)) + payload
    assert source.bytes_in == len(got)
    # The head was peeked and the whole frame, size included, went socket -> pipe -> socket.
    assert reads_into_user_space == []
    # Turns of the loop: one per wait for a socket (how many depends on how fast this test's
    # threads write and read), otherwise one per MiB moved, and two to peek at the head. The
    # 256 KiB relay took one per piece read and one per piece written, blocked or not: at least
    # 256 for 32 MiB.
    assert steps - len(waits) <= 32 + 2, f"{steps} loop turns, {len(waits)} of them waits, to relay 32 MiB"


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


def _open_pipes() -> int:
    """Ends of kernel pipes this process has open."""
    count = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            count += os.readlink(f"/proc/self/fd/{fd}").startswith("pipe:")
        except OSError:
            continue  # the listing's own descriptor, gone already
    return count


@pytest.mark.skipif(not framing._SPLICE, reason="splice is Linux's; elsewhere the relay copies")
def test_answers_relayed_into_one_connection_share_one_pipe(monkeypatch: pytest.MonkeyPatch) -> None:
    """Counted: a pipe of its own per answer cost four system calls more each (pipe2, F_SETPIPE_SZ,
    two closes: 4 of some 42 per 1.5 MB answer under strace, issue 36). One pipe per target
    socket, closed with it; none left open after a relay that failed."""
    created: list[int] = []
    original = os.pipe2

    def counted(flags: int) -> tuple[int, int]:
        created.append(flags)
        return original(flags)

    monkeypatch.setattr(framing.os, "pipe2", counted)
    answers = [random.Random(i).randbytes(MIB + i * 1000) for i in range(5)]
    broker, proxy_upstream = _tcp_pair()
    proxy_client, client = _tcp_pair()
    received = bytearray()
    before = _open_pipes()

    def broker_writes() -> None:
        for payload in answers:
            broker.sendall(struct.pack(">i", len(payload)) + payload)
        broker.close()

    def client_reads() -> None:
        while chunk := client.recv(MIB):
            received.extend(chunk)

    async def main() -> int:
        source = FrameStream(trio.SocketStream(trio.socket.from_stdlib_socket(proxy_upstream)), 1 << 30)
        target = FrameStream(trio.SocketStream(trio.socket.from_stdlib_socket(proxy_client)), 1 << 30)
        try:
            for payload in answers:
                head = await source.frame_head()
                assert head is not None and head[0] == len(payload)
                await source.relay_frame(target, head[0], 256 * 1024)
            return _open_pipes()
        finally:
            await source.aclose()
            await target.aclose()

    threads = [threading.Thread(target=broker_writes), threading.Thread(target=client_reads)]
    for t in threads:
        t.start()
    try:
        during = trio.run(main)
    finally:
        for t in threads:
            t.join(30)
        client.close()
    assert bytes(received) == b"".join(struct.pack(">i", len(p)) + p for p in answers)
    assert len(created) == 1  # 5 answers, one pipe
    assert during - before == 2  # its two ends, kept between answers
    assert _open_pipes() == before  # closed with the connection

    created.clear()
    before = _open_pipes()
    with pytest.raises(FrameError):
        _relay(bytes(3 * MIB), close_after=MIB + 7)
    assert _open_pipes() == before  # the failed relay's pipe was closed, not kept


@pytest.mark.skipif(not framing._SPLICE, reason="splice is Linux's; elsewhere the relay copies")
def test_a_relay_sends_its_first_bytes_after_a_small_first_move(monkeypatch: pytest.MonkeyPatch) -> None:
    """Counted: the relay's first move from the broker's socket into the pipe asks for at most
    _FIRST_SPLICE_BYTES, and what it moved goes out to the client before anything more comes in.
    Moving a whole MiB in first put some 25 us more before a 3 MiB answer's first byte (pinned).
    The moves after it take what the pipe holds."""
    pipe_ends: set[int] = set()
    moves: list[tuple[str, int]] = []
    original_splice, original_pipe2 = os.splice, os.pipe2

    def pipe2(flags: int) -> tuple[int, int]:
        ends = original_pipe2(flags)
        pipe_ends.update(ends)
        return ends

    def splice(src: int, dst: int, count: int, *args: object, **kwargs: object) -> int:
        moved = original_splice(src, dst, count, *args, **kwargs)  # type: ignore[arg-type]
        moves.append(("in" if dst in pipe_ends else "out", count))  # the moves that did not block
        return moved

    monkeypatch.setattr(framing.os, "pipe2", pipe2)
    monkeypatch.setattr(framing.os, "splice", splice)
    payload = random.Random(36).randbytes(3 * MIB)
    got, _, _ = _relay(payload)
    assert got == struct.pack(">i", len(payload)) + payload
    assert moves[0] == ("in", framing._FIRST_SPLICE_BYTES)
    assert moves[1][0] == "out" and moves[1][1] <= framing._FIRST_SPLICE_BYTES
    assert max(count for kind, count in moves if kind == "in") > framing._FIRST_SPLICE_BYTES
