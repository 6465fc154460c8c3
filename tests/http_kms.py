"""A key-management service of our own for the tests: the second implementation of
``tiering.storage.key_ring.KeyEncryptionKeys`` that proves the KMS plug point
(``remote.log.storage.encryption.kms.class=tests.http_kms:HttpKms``).

The keys live in an HTTP service (:class:`HttpKmsServer`, loopback only), as they do in a real KMS:
the proxy never sees them, it sends data keys to be wrapped and unwrapped. Unlike the key ring it
wraps with AES key wrap (RFC 3394) under a key derived for each context (HMAC-SHA256), so the plug
point is shown to carry a scheme other than the ring's AES-GCM.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import threading
import urllib.error
import urllib.request
from collections.abc import Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from cryptography.hazmat.primitives.keywrap import InvalidUnwrap, aes_key_unwrap, aes_key_wrap

from tiering.storage.key_ring import ACTIVE_KEY_ID_CONFIG, KeyEncryptionKeys, KeyUnavailableError

URL_CONFIG = "test.kms.url"


class HttpKmsServer:
    """Holds master keys by id; POST /wrap and /unwrap take and give base64 in JSON."""

    def __init__(self, keys: Mapping[str, bytes]) -> None:
        self.keys = dict(keys)
        self.requests: dict[str, int] = {}
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                action = self.path.strip("/")
                server.requests[action] = server.requests.get(action, 0) + 1
                status, answer = server.answer(action, body)
                data = json.dumps(answer).encode()
                self.send_response(status)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: Any) -> None:
                pass

        self._http = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self._http.server_address[1]}"
        self._thread = threading.Thread(target=self._http.serve_forever, daemon=True)

    def answer(self, action: str, body: dict[str, str]) -> tuple[int, dict[str, Any]]:
        if action == "keys":
            return 200, {"keys": sorted(self.keys)}
        master = self.keys.get(body["key_id"])
        if master is None:
            return 404, {"error": f"no key {body['key_id']}"}
        kek = hmac.new(master, base64.b64decode(body["context"]), hashlib.sha256).digest()
        data = base64.b64decode(body["data"])
        if action == "wrap":
            return 200, {"data": base64.b64encode(aes_key_wrap(kek, data)).decode()}
        try:
            return 200, {"data": base64.b64encode(aes_key_unwrap(kek, data)).decode()}
        except InvalidUnwrap:
            return 400, {"error": "does not unwrap under this key and context"}

    def __enter__(self) -> HttpKmsServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._http.shutdown()
        self._http.server_close()


class HttpKms(KeyEncryptionKeys):
    """The proxy's side: asks the service at ``test.kms.url``."""

    def __init__(self, config: Mapping[str, object]) -> None:
        self.url = str(config[URL_CONFIG])
        self.active_key_id = str(config[ACTIVE_KEY_ID_CONFIG])

    def _ask(self, action: str, body: dict[str, str]) -> dict[str, Any]:
        request = urllib.request.Request(f"{self.url}/{action}", json.dumps(body).encode(), method="POST")
        try:
            with urllib.request.urlopen(request, timeout=5) as answer:
                return json.loads(answer.read())
        except urllib.error.HTTPError as e:
            raise KeyUnavailableError(f"KMS {self.url}: {json.loads(e.read())['error']}") from None

    def key_ids(self) -> list[str]:
        return list(self._ask("keys", {})["keys"])

    def wrap(self, data_key: bytes, context: bytes) -> bytes:
        return base64.b64decode(self._ask("wrap", {"key_id": self.active_key_id, "context": _b64(context),
                                                   "data": _b64(data_key)})["data"])

    def unwrap(self, key_id: str, wrapped: bytes, context: bytes) -> bytes:
        return base64.b64decode(self._ask("unwrap", {"key_id": key_id, "context": _b64(context),
                                                     "data": _b64(wrapped)})["data"])


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()
