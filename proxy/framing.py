"""Reading and writing Kafka's size-prefixed frames on trio sockets."""

from __future__ import annotations

import struct

import trio

_SIZE = struct.Struct(">i")
_RECV_CHUNK = 256 * 1024
# Pieces at least this large go to sendmsg by reference; smaller neighbours are joined first (one
# small copy) so a frame of many encoded fields is a handful of iovecs, never IOV_MAX.
_BY_REFERENCE = 16 * 1024
_MAX_IOVECS = 512

Frame = bytes | bytearray | memoryview | list  # a list: the frame's payload in pieces


class FrameError(Exception):
    """The peer sent a frame we refuse (bad size) or closed mid-frame."""


class FrameStream:
    """A TCP connection that carries Kafka frames (int32 size + payload).

    Reads go through ``recv_into`` so a large frame (a Fetch response of many MiB) is received
    straight into one buffer of its exact size instead of being concatenated from chunks.
    """

    def __init__(self, stream: trio.SocketStream | trio.SSLStream, max_frame_bytes: int) -> None:
        self.stream = stream
        # Plain TCP reads straight from the socket; TLS through the stream (which decrypts).
        self._sock = stream.socket if isinstance(stream, trio.SocketStream) else _StreamReader(stream)
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
        if size < 0 or size > self.max_frame_bytes:
            raise FrameError(f"frame size {size} outside 0..{self.max_frame_bytes} (socket.request.max.bytes)")
        return size

    async def peek(self, n: int) -> bytes | None:
        """The next ``n`` bytes (size prefix included), left unread; None if the peer closes first."""
        buf = self._buf
        while len(buf) < n:
            chunk = await self._sock.recv(_RECV_CHUNK)
            if not chunk:
                return None
            buf += chunk
        return bytes(buf[:n])

    async def relay_frame(self, to: FrameStream, chunk: bytearray) -> None:
        """Stream the next frame (its size read by ``next_frame_size``) to ``to`` as it arrives,
        through ``chunk``: the frame is never held whole. A peer that closes inside the frame
        raises FrameError."""
        size = await self.next_frame_size()
        if size is None:
            raise FrameError("connection closed before a frame")
        buf = self._buf
        total = 4 + size
        self.bytes_in += total
        to.bytes_out += total
        head = min(len(buf), total)
        await to.stream.send_all(bytes(buf[:head]))
        del buf[:head]
        left = total - head
        view = memoryview(chunk)
        while left:
            n = await self._sock.recv_into(view[:min(left, len(view))])
            if n == 0:
                raise FrameError(f"connection closed inside a frame ({total - left - 4} of {size} bytes)")
            await to.stream.send_all(view[:n])
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
        self.bytes_out += 4 + len(payload)
        if len(payload) < 64 * 1024:
            await self.stream.send_all(_SIZE.pack(len(payload)) + bytes(payload))
        else:
            await self.stream.send_all(_SIZE.pack(len(payload)))
            await self.stream.send_all(payload)

    async def _write_pieces(self, pieces: list) -> None:
        """A frame whose payload is given in pieces (record bytes as views of cached chunks):
        on plain TCP written with vectored sends, so the large pieces are never copied in user
        space; over TLS joined once (the TLS layer copies anyway)."""
        total = sum(len(p) for p in pieces)
        self.bytes_out += 4 + total
        buffers = _coalesce([_SIZE.pack(total), *pieces])
        if not isinstance(self.stream, trio.SocketStream) or len(buffers) > _MAX_IOVECS:
            await self.stream.send_all(b"".join(buffers))
            return
        sock = self.stream.socket
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
        await self.stream.send_all(data)

    async def aclose(self) -> None:
        with trio.CancelScope(shield=True):
            await self.stream.aclose()


class _StreamReader:
    """``recv``/``recv_into`` over a trio stream that has no socket of its own (TLS)."""

    def __init__(self, stream: trio.SSLStream) -> None:
        self.stream = stream

    async def recv(self, size: int) -> bytes:
        return bytes(await self.stream.receive_some(size))

    async def recv_into(self, view: memoryview) -> int:
        chunk = await self.stream.receive_some(len(view))
        view[:len(chunk)] = chunk
        return len(chunk)


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
