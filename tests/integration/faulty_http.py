"""A fault-injecting HTTP relay for S3 tests: it forwards every request to the real S3 server
(SeaweedFS) unless told to answer 500s or to sit on each request for a while first."""

from __future__ import annotations

import http.client
import threading
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
    def __init__(self, upstream: str) -> None:
        target = urlsplit(upstream)
        self.mode = "pass"  # pass, error (500 to everything) or slow (delay, then pass)
        self.delay_s = 2.0
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
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(data)

            do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = _relay

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
