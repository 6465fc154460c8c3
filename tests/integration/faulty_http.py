"""A fault-injecting HTTP relay for S3 tests: it forwards every request to the real S3 server
(SeaweedFS) unless told to answer 500s or to sit on each request for a while first. It can also
play a distant object store: each answer's first byte is held back by ``latency_s`` plus up to
``jitter_s`` (uniform), and its body is sent at no more than ``bytes_per_s`` per connection; and
one that throttles: above ``max_requests_per_s`` (a token bucket holding a second's worth) a
request is answered 503 SlowDown, as S3 answers past a prefix's request rate.

Run standalone (a process of its own, so it shares no interpreter lock with the measuring one):

    python -m tests.integration.faulty_http --upstream URL --port P [--latency-ms 80] [--jitter-ms 10] [--mbit-per-s N]
"""

from __future__ import annotations

import argparse
import collections
import http.client
import random
import signal
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit


def send_s3_error(handler: BaseHTTPRequestHandler, status: int, code: str, message: str) -> None:
    """Answer the request with an S3 error document, as S3 itself does."""
    payload = f"<Error><Code>{code}</Code><Message>{message}</Message></Error>".encode()
    handler.send_response(status)
    handler.send_header("Content-Type", "application/xml")
    handler.send_header("Content-Length", str(len(payload)))
    handler.end_headers()
    handler.wfile.write(payload)


class FaultyRelay:
    def __init__(self, upstream: str, port: int = 0, *, latency_s: float = 0.0, jitter_s: float = 0.0,
                 bytes_per_s: float | None = None) -> None:
        target = urlsplit(upstream)
        self.mode = "pass"  # pass, error (500 to everything) or slow (delay, then pass)
        self.delay_s = 2.0
        self.latency_s, self.jitter_s, self.bytes_per_s = latency_s, jitter_s, bytes_per_s
        self.max_requests_per_s: float | None = None  # set: throttle above it
        self.requests = 0
        self.faults = 0
        # (time.monotonic(), throttled) of the latest requests
        self.arrivals: collections.deque[tuple[float, bool]] = collections.deque(maxlen=100_000)
        self._lock = threading.Lock()
        self._tokens, self._filled_at = 0.0, time.monotonic()
        relay = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: object) -> None:  # quiet
                pass

            def _relay(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                relay.requests += 1
                if relay._throttled():
                    send_s3_error(self, 503, "SlowDown", "Please reduce your request rate.")
                    return
                if relay.mode == "error":
                    relay.faults += 1
                    send_s3_error(self, 500, "InternalError", "injected")
                    return
                if relay.mode == "slow":
                    relay.faults += 1
                    threading.Event().wait(relay.delay_s)
                held_until = time.monotonic() + relay.latency_s + random.uniform(0, relay.jitter_s)
                conn = http.client.HTTPConnection(target.hostname, target.port, timeout=60)
                try:
                    headers = {k: v for k, v in self.headers.items() if k.lower() != "connection"}
                    conn.request(self.command, self.path, body=body, headers=headers)
                    answer = conn.getresponse()
                    data = answer.read()
                except OSError:  # the S3 server is down: answer as S3 does when it cannot serve
                    send_s3_error(self, 503, "ServiceUnavailable", "upstream S3 server unreachable")
                    return
                finally:
                    conn.close()
                self.send_response(answer.status)
                for key, value in answer.getheaders():
                    if key.lower() not in ("content-length", "connection", "transfer-encoding", "date", "server"):
                        self.send_header(key, value)
                self.send_header("Content-Length", str(len(data)))
                time.sleep(max(0.0, held_until - time.monotonic()))  # the first byte's latency
                self.end_headers()
                if self.command != "HEAD":
                    self._send_body(data)

            def _send_body(self, data: bytes) -> None:
                if not relay.bytes_per_s:
                    self.wfile.write(data)
                    return
                started, view, piece = time.monotonic(), memoryview(data), 64 * 1024
                for at in range(0, len(view), piece):
                    self.wfile.write(view[at:at + piece])
                    time.sleep(max(0.0, started + (at + piece) / relay.bytes_per_s - time.monotonic()))

            do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = _relay

        self.server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def _throttled(self) -> bool:
        """Whether this request is over ``max_requests_per_s`` (noted in ``arrivals`` either way)."""
        with self._lock:
            now = time.monotonic()
            rate = self.max_requests_per_s
            throttled = False
            if rate is not None:
                self._tokens = min(rate, self._tokens + (now - self._filled_at) * rate)
                throttled = self._tokens < 1
                if not throttled:
                    self._tokens -= 1
            self._filled_at = now
            self.arrivals.append((now, throttled))
            return throttled

    def rate_since(self, since: float) -> tuple[float, float]:
        """Requests per second that arrived since ``since`` (time.monotonic()), and the throttled share."""
        with self._lock:
            recent = [throttled for at, throttled in self.arrivals if at >= since]
        seconds = max(time.monotonic() - since, 1e-9)
        return len(recent) / seconds, (sum(recent) / len(recent) if recent else 0.0)

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--upstream", required=True, help="the S3 endpoint to relay to (http://HOST:PORT)")
    parser.add_argument("--port", type=int, required=True, help="loopback port to listen on")
    parser.add_argument("--latency-ms", type=float, default=0.0, help="first-byte latency added to each answer")
    parser.add_argument("--jitter-ms", type=float, default=0.0, help="plus up to this much more, uniformly")
    parser.add_argument("--mbit-per-s", type=float, default=None, help="bandwidth cap per connection")
    args = parser.parse_args()
    relay = FaultyRelay(args.upstream, args.port, latency_s=args.latency_ms / 1000, jitter_s=args.jitter_ms / 1000,
                        bytes_per_s=args.mbit_per_s * 125_000 if args.mbit_per_s else None)
    signal.signal(signal.SIGTERM, lambda *_: relay.server.shutdown())
    print(f"relaying {relay.endpoint} -> {args.upstream}", flush=True)
    relay.thread.join()
    relay.server.server_close()


if __name__ == "__main__":
    main()
