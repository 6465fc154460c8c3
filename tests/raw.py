"""A blocking raw Kafka protocol client built on our codecs, for tests that need exact frames."""

from __future__ import annotations

import socket
import struct
from typing import Any

from protocol.apis import api
from protocol.headers import RequestHeader, decode_response_header, encode_request_header


class RawClient:
    def __init__(self, bootstrap: str, timeout: float = 10) -> None:
        host, port = bootstrap.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=timeout)
        self.next_corr = 1
        self.sent: dict[int, tuple[int, int]] = {}
        self.last_frame = b""  # the last request sent, without its size

    def send_frame(self, payload: bytes) -> None:
        self.sock.sendall(struct.pack(">i", len(payload)) + payload)

    def send(self, api_key: int, version: int, body: dict[str, Any]) -> int:
        spec = api(api_key)
        corr = self.next_corr
        self.next_corr += 1
        header = encode_request_header(RequestHeader(api_key, version, corr, "raw-test"),
                                       spec.request_header_version(version))
        self.last_frame = header + spec.request_codec(version).encode(body)
        self.send_frame(self.last_frame)
        self.sent[corr] = (api_key, version)
        return corr

    def recv_frame(self) -> bytes | None:
        size = self._recv_exact(4)
        if size is None:
            return None
        (n,) = struct.unpack(">i", size)
        return self._recv_exact(n)

    def recv(self) -> tuple[int, dict[str, Any]]:
        frame = self.recv_frame()
        if frame is None:
            raise ConnectionError("proxy closed the connection")
        (corr,) = struct.unpack_from(">i", frame)
        api_key, version = self.sent.pop(corr)
        spec = api(api_key)
        _, pos = decode_response_header(memoryview(frame), spec.response_header_version(version))
        return corr, spec.response_codec(version).decode(frame[pos:])

    def request(self, api_key: int, version: int, body: dict[str, Any]) -> dict[str, Any]:
        corr = self.send(api_key, version, body)
        got, resp = self.recv()
        assert got == corr
        return resp

    def closed_by_peer(self, wait: float = 5) -> bool:
        self.sock.settimeout(wait)
        try:
            return self.sock.recv(1) == b""
        except (ConnectionResetError, BrokenPipeError):
            return True
        except TimeoutError:
            return False

    def _recv_exact(self, n: int) -> bytes | None:
        chunks = []
        while n:
            chunk = self.sock.recv(n)
            if not chunk:
                return None
            chunks.append(chunk)
            n -= len(chunk)
        return b"".join(chunks)

    def close(self) -> None:
        self.sock.close()
