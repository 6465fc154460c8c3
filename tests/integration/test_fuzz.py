"""Malformed requests against a live proxy (with tiering, so every request hook is active): for
every API the proxy offers, hypothesis sends truncated, bit-flipped and random bodies behind a
valid header, and lying frame lengths. Each such connection gets an answer or is closed; the
proxy stays up, and a connection opened before the fuzzing keeps being served."""

from __future__ import annotations

import socket
import struct

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from protocol.apis import API_VERSIONS, METADATA, api
from protocol.headers import RequestHeader, encode_request_header
from tests.proxy_process import start_proxy
from tests.raw import RawClient


@pytest.fixture(scope="module")
def fuzz_target(own_noida, tmp_path_factory):
    # A broker of its own: noida-db dies on some malformed requests (a truncated compact array),
    # which the proxy must therefore never forward.
    proxy = start_proxy(own_noida.bootstrap, tmp_path_factory.mktemp("fuzz"), "--log-format", "json")
    control = RawClient(proxy.bootstrap)
    offered = control.request(API_VERSIONS, 3, {"client_software_name": "fuzz", "client_software_version": "1"})
    apis = sorted((k["api_key"], k["min_version"], k["max_version"]) for k in offered["api_keys"])
    yield proxy, control, apis
    control.sock.close()
    proxy.stop()


def _valid_body(api_key: int, version: int) -> bytes:
    spec = api(api_key)
    return spec.request_codec(version).encode(spec.request_codec(version).default())


def _send_and_settle(port: int, payload: bytes) -> None:
    """Send one frame; wait for an answer or the close (never for ever)."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        try:
            sock.sendall(payload)
            sock.shutdown(socket.SHUT_WR)  # no more requests: the proxy answers or closes
            while sock.recv(65536):
                pass
        except (ConnectionResetError, BrokenPipeError, TimeoutError):
            pass


@st.composite
def malformed_requests(draw, apis):  # noqa: ANN001, ANN201
    api_key, low, high = draw(st.sampled_from(apis))
    version = draw(st.integers(low, high))
    spec = api(api_key)
    header = encode_request_header(RequestHeader(api_key, version, draw(st.integers(0, 2**31 - 1)), "fuzz"),
                                   spec.request_header_version(version))
    body = _valid_body(api_key, version)
    how = draw(st.sampled_from(["truncate", "flip", "random", "append", "frame-length"]))
    if how == "truncate" and body:
        body = body[:draw(st.integers(0, len(body) - 1))]
    elif how == "flip" and body:
        at = draw(st.integers(0, len(body) - 1))
        body = body[:at] + bytes([body[at] ^ draw(st.integers(1, 255))]) + body[at + 1:]
    elif how == "random":
        body = draw(st.binary(max_size=200))
    elif how == "append":
        body += draw(st.binary(min_size=1, max_size=50))
    frame = header + body
    length = len(frame)
    if how == "frame-length":
        length = draw(st.sampled_from([-1, 0, 3, len(frame) + 1, 2**31 - 1]))
    return api_key, struct.pack(">i", length) + frame


def test_malformed_requests_close_only_their_own_connection(fuzz_target):
    proxy, control, apis = fuzz_target
    seen: set[int] = set()

    @settings(max_examples=400, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
    @given(malformed_requests(apis))
    def run(request: tuple[int, bytes]) -> None:
        api_key, payload = request
        seen.add(api_key)
        _send_and_settle(proxy.port, payload)
        assert proxy.process.poll() is None, "the proxy died"

    run()
    assert len(seen) >= len(apis) // 2  # the draw covered the APIs broadly
    # The connection opened before all this is still served.
    assert control.request(METADATA, 4, {"topics": [], "allow_auto_topic_creation": False})["brokers"]
    # One JSON object per line (--log-format json), one line per closed connection.
    import json

    records = [json.loads(line) for line in proxy.log_text().splitlines() if line.strip()]
    malformed = [r for r in records if "malformed request" in r["message"]]
    assert malformed and all(r["level"] == "WARNING" and r["logger"] == "proxy.connection" for r in malformed)
    assert "cannot connect to broker" not in proxy.log_text()  # nothing malformed reached the broker
