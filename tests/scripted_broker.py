"""A Kafka 4 broker's answers from a script, for the APIs no broker we can install offers.

Neither noida-db nor Tansu 0.6 has KIP-848's ConsumerGroupHeartbeat or any KIP-932 share-group API
(tests/UPSTREAMS.md), so the proxy's handling of them is tested against this: a loopback server
that speaks the Kafka wire protocol through our codecs, answers ApiVersions with a recorded Kafka
release's ranges, Metadata with its script's brokers (all on its one port) unless the script answers it, and every other
request with what the test's answer function returns for the decoded request. It keeps each
request frame it received, so a test can compare bytes. It is no broker: it checks nothing and
stores nothing, which is why the tests that use it say which paths only it proves.
"""

from __future__ import annotations

import socket
import struct
import threading
from collections.abc import Callable, Mapping
from typing import Any

from kafka.protocol.broker_version_data import BROKER_API_VERSIONS

from protocol.apis import API_VERSIONS, METADATA, all_apis, api
from protocol.headers import decode_request_header, encode_response_header, peek_request

# Kafka 4.2's version ranges as kafka-python records them, for the APIs we have schemas of.
KAFKA_4_2 = {key: versions for key, versions in BROKER_API_VERSIONS[(4, 2)].items() if key in all_apis()}
# (api version, decoded request body) -> response body
AnswerFunction = Callable[[int, dict[str, Any]], dict[str, Any]]


class ScriptedBroker:
    def __init__(self, api_versions: Mapping[int, tuple[int, int]], answers: Mapping[int, AnswerFunction],
                 node_ids: tuple[int, ...] = (1,)) -> None:
        self.api_versions = dict(api_versions)
        self.answers = dict(answers)
        self.node_ids = node_ids
        self.received: list[tuple[int, int, bytes]] = []  # (api key, version, whole request frame)
        self.connections = 0  # accepted so far
        self._listener = socket.create_server(("127.0.0.1", 0))
        self._listener.settimeout(0.2)
        self.port = self._listener.getsockname()[1]
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._accept, daemon=True)]
        self._threads[0].start()

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def close(self) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(5)
        self._listener.close()

    def requests_of(self, api_key: int) -> list[tuple[int, bytes]]:
        return [(version, frame) for key, version, frame in self.received if key == api_key]

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self._listener.accept()
            except TimeoutError:
                continue
            thread = threading.Thread(target=self._serve, args=(conn,), daemon=True)
            self._threads.append(thread)
            self.connections += 1
            thread.start()

    def _serve(self, conn: socket.socket) -> None:
        conn.settimeout(0.2)
        buffer = b""
        with conn:
            while not self._stop.is_set():
                try:
                    chunk = conn.recv(1 << 16)
                except TimeoutError:
                    continue
                except OSError:
                    return
                if not chunk:
                    return
                buffer += chunk
                while len(buffer) >= 4 and len(buffer) >= 4 + struct.unpack_from(">i", buffer)[0]:
                    size = struct.unpack_from(">i", buffer)[0]
                    frame, buffer = buffer[4:4 + size], buffer[4 + size:]
                    answer = self._answer(frame)
                    if answer is None:
                        return  # a request it has no script for: closed, as Kafka closes on what it cannot answer
                    conn.sendall(answer)

    def _answer(self, frame: bytes) -> bytes | None:
        api_key, version, corr = peek_request(frame)
        spec = api(api_key)
        self.received.append((api_key, version, frame))
        _, body_at = decode_request_header(memoryview(frame), spec.request_header_version(version))
        request = spec.request_codec(version).decode(frame[body_at:])
        if api_key == API_VERSIONS:
            body = {"error_code": 0, "throttle_time_ms": 0, "api_keys": [
                {"api_key": key, "min_version": low, "max_version": high}
                for key, (low, high) in sorted(self.api_versions.items())]}
        elif api_key == METADATA and METADATA not in self.answers:
            body = {"throttle_time_ms": 0, "cluster_id": "scripted-kafka-4", "controller_id": self.node_ids[0],
                    "brokers": [{"node_id": n, "host": "127.0.0.1", "port": self.port, "rack": None}
                                for n in self.node_ids],
                    "topics": [], "cluster_authorized_operations": -2147483648}
        elif api_key in self.answers:
            body = self.answers[api_key](version, request)
        else:
            return None
        payload = encode_response_header(corr, spec.response_header_version(version)) + \
            spec.response_codec(version).encode(body)
        return struct.pack(">i", len(payload)) + payload
