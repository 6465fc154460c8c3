"""Reading and writing Kafka's size-prefixed frames on trio sockets."""

from __future__ import annotations

import contextlib
import fcntl
import os
import socket
import struct
import weakref
from collections.abc import Awaitable, Callable
from typing import TypeVar

import trio

_SIZE = struct.Struct(">i")
_HEAD = struct.Struct(">ii")  # a frame's size and the first field of its payload
_RECV_CHUNK = 256 * 1024
# Pieces at least this large go to sendmsg by reference; smaller neighbours are joined first (one
# small copy) so a frame of many encoded fields is a handful of iovecs, never IOV_MAX.
_BY_REFERENCE = 16 * 1024
_MAX_IOVECS = 512
# Relays between plain sockets go through a kernel pipe (splice is Linux's; elsewhere the relay
# copies through a buffer) of _PIPE_BYTES, Linux's default pipe-max-size.
_SPLICE = hasattr(os, "splice")
_SPLICE_FLAGS = getattr(os, "SPLICE_F_MOVE", 0) | getattr(os, "SPLICE_F_NONBLOCK", 0)
_F_SETPIPE_SZ = getattr(fcntl, "F_SETPIPE_SZ", 1031)
_PIPE_BYTES = 1 << 20
# A plain socket's calls that did not block between two turns of the event loop (_PlainSocket),
# and the bytes a relay moves without blocking between two turns (splice).
_CALLS_PER_TURN = 16
_BYTES_PER_TURN = 1 << 20
# A relay's first move into its pipe: the first bytes go out to the client after it. A whole MiB
# first put them out 58-60 us after the relay began, 64 KiB 35-36 us (pinned, 3 MiB answers).
_FIRST_SPLICE_BYTES = 64 * 1024

Frame = bytes | bytearray | memoryview | list  # a list: the frame's payload in pieces
T = TypeVar("T")


class FrameError(Exception):
    """The peer sent a frame we refuse (bad size) or closed mid-frame."""


class FrameStream:
    """A TCP connection that carries Kafka frames (int32 size + payload).

    Reads go through ``recv_into`` so a large frame (a Fetch response of many MiB) is received
    straight into one buffer of its exact size instead of being concatenated from chunks.
    """

    def __init__(self, stream: trio.SocketStream | trio.SSLStream, max_frame_bytes: int) -> None:
        self.stream = stream
        # Plain TCP calls the socket directly; TLS goes through the stream (which en- and decrypts).
        self._sock: _PlainSocket | _TlsStream = (
            _PlainSocket(stream.socket) if isinstance(stream, trio.SocketStream) else _TlsStream(stream))
        self._buf = bytearray()
        self.max_frame_bytes = max_frame_bytes
        self.bytes_in = 0
        self.bytes_out = 0

    async def next_frame_size(self) -> int | None:
        """The payload size of the next frame (read from its header, the payload left unread),
        or None when the peer closed cleanly between frames."""
        buf = self._buf
        while len(buf) < 4:
            chunk = await self._sock.recv(_RECV_CHUNK)
            if not chunk:
                if buf:
                    raise FrameError(f"connection closed inside a frame header ({len(buf)} of 4 bytes)")
                return None
            buf += chunk
        (size,) = _SIZE.unpack_from(buf, 0)
        self._check_size(size)
        return size

    def _check_size(self, size: int) -> None:
        if size < 0 or size > self.max_frame_bytes:
            raise FrameError(f"frame size {size} outside 0..{self.max_frame_bytes} (socket.request.max.bytes)")

    async def frame_head(self) -> tuple[int, int] | None:
        """(payload size, the payload's first four bytes as an int: an answer's correlation id) of
        the next frame, or None when the peer closed cleanly between frames. On a plain socket
        with nothing buffered the bytes are peeked, left in the socket, so that a relay can splice
        the whole frame: reading ahead put the first 256 KiB of every relayed answer through user
        space twice (strace, issue 26)."""
        if not self._buf and isinstance(self._sock, _PlainSocket):
            head = await self._sock.peek(8)
            if len(head) == 8:
                size, first = _HEAD.unpack(head)
                self._check_size(size)
                return size, first
        size = await self.next_frame_size()
        if size is None:
            return None
        if size < 4:
            return size, -1  # no room for a correlation id: the reader of the frame says so
        buf = self._buf
        while len(buf) < 8:
            chunk = await self._sock.recv(_RECV_CHUNK)
            if not chunk:
                raise FrameError(f"connection closed inside a frame ({len(buf) - 4} of {size} bytes)")
            buf += chunk
        return size, _HEAD.unpack_from(buf, 0)[1]

    async def relay_frame(self, to: FrameStream, size: int, chunk_bytes: int) -> None:
        """Stream the next frame (``size`` as ``frame_head`` said) to ``to`` as it arrives: the
        frame is never held whole. Between two plain TCP sockets it goes through a kernel pipe
        (``splice``), never through user space; otherwise through a buffer of ``chunk_bytes``. A
        peer that closes inside the frame raises FrameError."""
        buf = self._buf
        total = 4 + size
        self.bytes_in += total
        to.bytes_out += total
        head = min(len(buf), total)  # what was read ahead (nothing, when frame_head peeked)
        if head:
            await to._sock.send_all(bytes(buf[:head]))
            del buf[:head]
        left = total - head
        if not left:
            return
        if _SPLICE and isinstance(self._sock, _PlainSocket) and isinstance(to._sock, _PlainSocket):
            moved = await splice(self._sock, to._sock, left)
            if moved < left:
                raise FrameError(f"connection closed inside a frame ({total - left + moved - 4} of {size} bytes)")
            return
        view = memoryview(bytearray(min(left, chunk_bytes)))
        while left:
            n = await self._sock.recv_into(view[:min(left, len(view))])
            if n == 0:
                raise FrameError(f"connection closed inside a frame ({total - left - 4} of {size} bytes)")
            await to._sock.send_all(view[:n])
            left -= n

    async def read_frame(self) -> bytearray | bytes | None:
        """The next frame's payload, or None when the peer closed cleanly between frames."""
        size = await self.next_frame_size()
        if size is None:
            return None
        buf = self._buf
        total = 4 + size
        self.bytes_in += total
        if len(buf) >= total:
            frame = bytes(buf[4:total])
            del buf[:total]
            return frame
        frame = bytearray(size)
        have = len(buf) - 4
        frame[:have] = buf[4:]
        buf.clear()
        view = memoryview(frame)
        while have < size:
            n = await self._sock.recv_into(view[have:])
            if n == 0:
                raise FrameError(f"connection closed inside a frame ({have} of {size} bytes)")
            have += n
        return frame

    async def write_frame(self, payload: Frame) -> None:
        if isinstance(payload, list):
            await self._write_pieces(payload)
            return
        if len(payload) >= 64 * 1024:
            # Size and payload in one vectored send: a send of the 4-byte size alone went out as a
            # packet of its own (TCP_NODELAY) ahead of every large request.
            await self._write_pieces([payload])
            return
        self.bytes_out += 4 + len(payload)
        await self._sock.send_all(_SIZE.pack(len(payload)) + bytes(payload))

    async def _write_pieces(self, pieces: list) -> None:
        """A frame whose payload is given in pieces (record bytes as views of cached chunks):
        on plain TCP written with vectored sends, so the large pieces are never copied in user
        space; over TLS joined once (the TLS layer copies anyway)."""
        total = sum(len(p) for p in pieces)
        self.bytes_out += 4 + total
        buffers = _coalesce([_SIZE.pack(total), *pieces])
        sock = self._sock
        if not isinstance(sock, _PlainSocket) or len(buffers) > _MAX_IOVECS:
            await sock.send_all(b"".join(buffers))
            return
        views = [memoryview(b).cast("B") for b in buffers]
        while views:
            sent = await sock.sendmsg(views)
            while views and sent >= len(views[0]):
                sent -= len(views[0])
                views.pop(0)
            if sent:
                views[0] = views[0][sent:]

    async def write_raw(self, data: bytes | bytearray | memoryview) -> None:
        """Send bytes that already carry their size prefix."""
        self.bytes_out += len(data)
        await self._sock.send_all(data)

    async def aclose(self) -> None:
        if isinstance(self._sock, _PlainSocket):
            self._sock.close_pipe()
        with trio.CancelScope(shield=True):
            await self.stream.aclose()


async def splice(source: _PlainSocket, target: _PlainSocket, count: int) -> int:
    """Moves ``count`` bytes from ``source`` to ``target`` through a kernel pipe (Linux ``splice``):
    no copy into user space, and the event loop is entered only when a socket would block or after
    each MiB moved (the relay of a 256 KiB buffer took a loop turn per piece read and per piece
    written, issue 26).
    Returns the bytes moved: fewer than ``count`` only when ``source`` closed first."""
    src, dst = source.fileno(), target.fileno()
    pipe_out, pipe_in = target.take_pipe()
    in_pipe, done = 0, False
    try:
        left, since_turn = count, 0
        piece = min(count, _FIRST_SPLICE_BYTES)
        while left or in_pipe:
            progress = False
            if left:
                try:
                    n = os.splice(src, pipe_in, piece, flags=_SPLICE_FLAGS)
                except BlockingIOError:
                    pass
                else:
                    if n == 0:  # the source closed
                        break
                    left -= n
                    in_pipe += n
                    piece = left
                    progress = True
            if in_pipe:
                try:
                    n = os.splice(pipe_out, dst, in_pipe, flags=_SPLICE_FLAGS)
                except BlockingIOError:
                    pass
                else:
                    in_pipe -= n
                    since_turn += n
                    progress = True
            if progress:
                if since_turn >= _BYTES_PER_TURN:  # let other connections run
                    since_turn = 0
                    await trio.lowlevel.checkpoint()
            elif in_pipe:  # what is in the pipe cannot go out: the target is full
                since_turn = 0
                await target.writable()
            else:  # the pipe is empty, so the source had nothing
                since_turn = 0
                await source.readable()
        while in_pipe:  # the source closed: what it sent before still goes out
            try:
                in_pipe -= os.splice(pipe_out, dst, in_pipe, flags=_SPLICE_FLAGS)
            except BlockingIOError:
                await target.writable()
        done = True
        return count - left
    finally:
        # Empty, it serves the target's next relay (a pipe of its own per relay cost four system
        # calls more per answer); one that may hold bytes is closed.
        target.keep_pipe((pipe_out, pipe_in), empty=done and in_pipe == 0)


class _Pipe:
    """Both ends of a kernel pipe, closed once: by ``close`` or when nothing refers to it."""

    def __init__(self, ends: tuple[int, int]) -> None:
        self.ends = ends
        self._finalizer = weakref.finalize(self, _close_fds, ends)

    def close(self) -> None:
        self._finalizer()

    def detach(self) -> tuple[int, int]:
        """The ends, no longer closed by this object (a relay uses them, then keeps or closes them)."""
        self._finalizer.detach()
        return self.ends


def _close_fds(fds: tuple[int, ...]) -> None:
    for fd in fds:
        with contextlib.suppress(OSError):
            os.close(fd)


class _PlainSocket:
    """A TCP socket called directly: each call tries the system call first and enters the event loop
    only when it would block, where trio's socket methods take a turn of the loop on every call
    (a Fetch relayed through the proxy took several; issue 26). A turn is still taken every
    ``_CALLS_PER_TURN`` calls that did not block, so a busy connection lets the others run."""

    __slots__ = ("socket", "_calls", "_pipe")

    def __init__(self, sock: trio.socket.SocketType) -> None:
        self.socket = sock
        self._calls = 0
        self._pipe: _Pipe | None = None  # the kernel pipe relays into this socket go through

    def take_pipe(self) -> tuple[int, int]:
        """The pipe a relay into this socket uses: (read end, write end), empty."""
        pipe, self._pipe = self._pipe, None
        if pipe is not None:
            return pipe.detach()
        pipe_out, pipe_in = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        with contextlib.suppress(OSError):  # a smaller pipe (the user's pipe quota) still works
            fcntl.fcntl(pipe_in, _F_SETPIPE_SZ, _PIPE_BYTES)
        return pipe_out, pipe_in

    def keep_pipe(self, ends: tuple[int, int], *, empty: bool) -> None:
        """A relay is done with its pipe: kept for the next one if empty and none is kept yet."""
        if empty and self._pipe is None:
            self._pipe = _Pipe(ends)
        else:
            _Pipe(ends).close()

    def close_pipe(self) -> None:
        pipe, self._pipe = self._pipe, None
        if pipe is not None:
            pipe.close()

    def fileno(self) -> int:
        fd = self.socket.fileno()
        if fd < 0:  # closed: its number may already belong to another socket
            raise trio.ClosedResourceError("socket was closed")
        return fd

    async def ran(self) -> None:
        """After a call that did not block: a turn of the event loop now and then."""
        self._calls += 1
        if self._calls >= _CALLS_PER_TURN:
            self._calls = 0
            await trio.lowlevel.checkpoint()

    async def readable(self) -> None:
        self._calls = 0
        await trio.lowlevel.wait_readable(self.socket)

    async def writable(self) -> None:
        self._calls = 0
        await trio.lowlevel.wait_writable(self.socket)

    async def _call(self, call: Callable[[], T], wait: Callable[[], Awaitable[None]]) -> T:
        """``call()`` now, or once ``wait()`` says the socket is ready."""
        while True:
            try:
                result = call()
            except BlockingIOError:
                await wait()
                continue
            await self.ran()
            return result

    async def recv(self, size: int) -> bytes:
        return await self._call(lambda: os.read(self.fileno(), size), self.readable)

    async def peek(self, size: int) -> bytes:
        """Up to ``size`` bytes that have arrived, left in the socket (waits for the first); b"" when
        the peer closed."""
        return await self.socket.recv(size, socket.MSG_PEEK)

    async def recv_into(self, view: memoryview) -> int:
        return await self._call(lambda: os.readv(self.fileno(), [view]), self.readable)

    async def sendmsg(self, buffers: list[memoryview]) -> int:
        return await self._call(lambda: os.writev(self.fileno(), buffers), self.writable)

    async def send_all(self, data: bytes | bytearray | memoryview) -> None:
        view = memoryview(data).cast("B")
        while view:
            try:
                n = os.write(self.fileno(), view)
            except BlockingIOError:
                await self.writable()
                continue
            view = view[n:]
        await self.ran()


class _TlsStream:
    """The same calls over a TLS stream (trio's, which en- and decrypts)."""

    def __init__(self, stream: trio.SSLStream) -> None:
        self.stream = stream

    async def recv(self, size: int) -> bytes:
        return bytes(await self.stream.receive_some(size))

    async def recv_into(self, view: memoryview) -> int:
        chunk = await self.stream.receive_some(len(view))
        view[:len(chunk)] = chunk
        return len(chunk)

    async def send_all(self, data: bytes | bytearray | memoryview) -> None:
        await self.stream.send_all(data)


def frame_size_prefix(payload_len: int) -> bytes:
    return _SIZE.pack(payload_len)


def _coalesce(pieces: list) -> list:
    """Small neighbouring pieces joined; pieces of at least _BY_REFERENCE kept as they are."""
    out: list = []
    small: list = []
    for piece in pieces:
        if len(piece) >= _BY_REFERENCE:
            if small:
                out.append(b"".join(small))
                small = []
            out.append(piece)
        elif len(piece):
            small.append(piece)
    if small:
        out.append(b"".join(small))
    return out
