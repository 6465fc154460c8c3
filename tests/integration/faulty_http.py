"""A fault-injecting HTTP relay for S3 tests: it forwards every request to the real S3 server
(SeaweedFS) unless told to answer 500s or to sit on each request for a while first. It can also
play a distant object store: each answer's first byte is held back by ``latency_s`` plus up to
``jitter_s`` (uniform), and its body is sent at no more than ``bytes_per_s`` per connection.

Run standalone (a process of its own, so it shares no interpreter lock with the measuring one):

    python -m tests.integration.faulty_http --upstream URL --port P [--latency-ms 80] [--jitter-ms 10] [--mbit-per-s N]
"""

from __future__ import annotations

import argparse
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
        self.requests = 0
        self.faults = 0
        relay = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: object) -> None:  # quiet
                pass

            def _relay(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                relay.requests += 1
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
