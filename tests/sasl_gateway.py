"""A stand-in for the authentication and authorization layer of a Kafka broker, in front of a real
broker that has neither (noida-db).

Clients speak Kafka's SASL to the gateway exactly as to an Apache Kafka broker's SASL_PLAINTEXT
listener (SaslHandshake v1 + SaslAuthenticate, PLAIN and SCRAM-SHA-256/512, KIP-368
re-authentication with a session lifetime); once authenticated, their requests are relayed to the
broker over a connection of their own, with per-principal topic ACLs applied to Metadata, Produce,
Fetch, ListOffsets and OffsetForLeaderEpoch, and broker addresses rewritten to the gateway's own.

Like a Kafka broker, the gateway handles one request per connection at a time: the next request
is read only after the previous one has been answered.
"""

from __future__ import annotations

import collections
import hmac
import socket
import struct
import threading
import time
from dataclasses import dataclass
from types import TracebackType
from typing import Any, NoReturn

import scramp

from protocol.apis import (
    API_VERSIONS,
    DESCRIBE_CLUSTER,
    FETCH,
    FIND_COORDINATOR,
    LIST_OFFSETS,
    METADATA,
    OFFSET_FOR_LEADER_EPOCH,
    PRODUCE,
    SASL_AUTHENTICATE,
    SASL_HANDSHAKE,
    api,
)
from protocol.errors import ProtocolError
from protocol.headers import (
    RequestHeader,
    decode_request_header,
    decode_response_header,
    encode_request_header,
    encode_response_header,
    peek_request,
)
from protocol.message_schema import Field, load_schema

Message = dict[str, Any]

UNSUPPORTED_SASL_MECHANISM = 33
ILLEGAL_SASL_STATE = 34
TOPIC_AUTHORIZATION_FAILED = 29
SASL_AUTHENTICATION_FAILED = 58

SCRAM = ("SCRAM-SHA-256", "SCRAM-SHA-512")
MAX_FETCH_VERSION = 12  # the last Fetch that names topics (noida-db's topic ids are all zero)
_MIN_REAUTH_INTERVAL = 1.0  # Kafka refuses a re-authentication within 1 s of the previous one
_SIZE = struct.Struct(">i")


@dataclass
class User:
    password: str
    topics: set[str] | None = None  # topics this principal may read/write/describe; None = all

    def __repr__(self) -> str:  # never show the password
        return f"User(topics={self.topics!r})"

    def may(self, topic: str | None) -> bool:
        return self.topics is None or topic in self.topics


@dataclass(frozen=True)
class _TopicApi:
    """Where the topics and partitions sit in one API's request and response."""

    request_topics: str
    request_name: str
    request_partitions: str
    request_index: str
    response_topics: str
    response_name: str
    response_partitions: str
    response_index: str
    refused: tuple[tuple[str, Any], ...] = ()  # what a refused partition carries besides its error


_TOPIC_APIS = {
    PRODUCE: _TopicApi("topic_data", "name", "partition_data", "index",
                       "responses", "name", "partition_responses", "index", (("base_offset", -1),)),
    FETCH: _TopicApi("topics", "topic", "partitions", "partition",
                     "responses", "topic", "partitions", "partition_index",
                     (("high_watermark", -1), ("records", b""))),
    LIST_OFFSETS: _TopicApi("topics", "name", "partitions", "partition_index",
                            "topics", "name", "partitions", "partition_index"),
    OFFSET_FOR_LEADER_EPOCH: _TopicApi("topics", "topic", "partitions", "partition",
                                       "topics", "topic", "partitions", "partition"),
}


def _defaults(fields: list[Field]) -> Message:
    return {f.name: [] if f.is_array else _defaults(f.fields) if f.fields else f.default for f in fields}


def _sub_fields(fields: list[Field], *path: str) -> list[Field]:
    for name in path:
        fields = next(f for f in fields if f.name == name).fields
    return fields


class _Closed(Exception):
    """The connection ends here (as Kafka closes it: after any answer already sent)."""


class SaslGateway:
    """Listens on 127.0.0.1 (a port the kernel picks; ``bootstrap``) and relays each client
    connection, once authenticated, over a connection of its own to ``broker``.

    Counters, for tests: ``authenticated`` (per user, re-authentications included),
    ``reauthenticated`` (per user), ``failed`` (authentications refused, or broken off by a request
    Kafka does not allow at that point), ``denied`` (per user: each topic refused in a Metadata,
    Produce, Fetch, ListOffsets or OffsetForLeaderEpoch request that named it; leaving a topic out
    of an all-topics Metadata answer is not counted) and ``closed_expired`` (connections closed
    because a request came after the session expired).
    """

    def __init__(self, broker: tuple[str, int], users: dict[str, User], *,
                 mechanisms: tuple[str, ...] = ("PLAIN", *SCRAM),
                 session_lifetime_ms: int = 0, scram_iterations: int = 4096) -> None:
        unknown = set(mechanisms) - {"PLAIN", *SCRAM}
        if unknown:
            raise ValueError(f"unsupported SASL mechanisms {sorted(unknown)}")
        self.broker = broker
        self.users = users
        self.mechanisms = tuple(mechanisms)
        self.session_lifetime_ms = session_lifetime_ms
        # SCRAM credentials as a broker stores them (salt, stored key, server key, iterations).
        self._scram: dict[str, scramp.ScramMechanism] = {m: scramp.ScramMechanism(m) for m in SCRAM
                                                           if m in mechanisms}
        self._credentials: dict[tuple[str, str], tuple[bytes, bytes, bytes, int]] = {
            (m, name): mech.make_auth_info(user.password, iteration_count=scram_iterations)
            for m, mech in self._scram.items() for name, user in users.items()
        }
        self.authenticated: collections.Counter[str] = collections.Counter()
        self.reauthenticated: collections.Counter[str] = collections.Counter()
        self.failed = 0
        self.denied: collections.Counter[str] = collections.Counter()
        self.closed_expired = 0
        self._lock = threading.Lock()
        self._sockets: set[socket.socket] = set()
        self._stop = threading.Event()
        self._listener = socket.create_server(("127.0.0.1", 0))
        self._listener.settimeout(0.2)
        self.port: int = self._listener.getsockname()[1]
        self.bootstrap = f"127.0.0.1:{self.port}"
        self._thread = threading.Thread(target=self._accept, name=f"sasl-gateway-{self.port}", daemon=True)
        self._thread.start()

    def __enter__(self) -> SaslGateway:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    def close(self) -> None:
        self._stop.set()
        self._thread.join(5)
        self._listener.close()
        with self._lock:
            sockets = list(self._sockets)
        for s in sockets:
            _shut(s)

    # -- bookkeeping, under the lock ----------------------------------------------------------

    def _count(self, counter: str, user: str | None = None, n: int = 1) -> None:
        with self._lock:
            if user is None:
                setattr(self, counter, getattr(self, counter) + n)
            else:
                getattr(self, counter)[user] += n

    def _track(self, s: socket.socket, add: bool) -> None:
        with self._lock:
            if not add:
                self._sockets.discard(s)
            elif not self._stop.is_set():
                self._sockets.add(s)
            else:  # a connection accepted just before close()
                _shut(s)

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                client, _ = self._listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            client.settimeout(None)
            threading.Thread(target=_Connection(self, client).run, daemon=True).start()


def _shut(s: socket.socket) -> None:
    try:
        s.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    s.close()


def _recv_frame(s: socket.socket) -> bytes | None:
    head = _recv_exact(s, 4)
    if head is None:
        return None
    (n,) = _SIZE.unpack(head)
    if n < 0:
        return None
    return _recv_exact(s, n)


def _recv_exact(s: socket.socket, n: int) -> bytes | None:
    chunks = []
    while n:
        try:
            chunk = s.recv(min(n, 1 << 20))
        except OSError:
            return None
        if not chunk:
            return None
        chunks.append(chunk)
        n -= len(chunk)
    return b"".join(chunks)


# Connection states
_HANDSHAKE = "handshake"  # expecting ApiVersions (first authentication only) or SaslHandshake
_AUTHENTICATE = "authenticate"  # expecting SaslAuthenticate
_READY = "ready"  # authenticated


class _Connection:
    def __init__(self, gateway: SaslGateway, client: socket.socket) -> None:
        self.gw = gateway
        self.client = client
        self.upstream: socket.socket | None = None
        self.state = _HANDSHAKE
        self.user: str | None = None  # the authenticated principal
        self.mechanism: str | None = None  # of the exchange under way, or of the last one
        self.previous_mechanism: str | None = None  # set while re-authenticating
        self.bad_mechanism = False  # re-authentication asked for another mechanism
        self.scram: Any = None  # scramp.ScramServer of the exchange under way
        self.scram_started = False  # its client-first message has been read
        self.scram_user: str | None = None  # the user name its client-first message gave
        self.expires: float | None = None  # monotonic time the session expires
        self.last_reauth_start: float | None = None

    @property
    def reauthenticating(self) -> bool:
        return self.previous_mechanism is not None

    def run(self) -> None:
        self.gw._track(self.client, True)
        try:
            self.upstream = socket.create_connection(self.gw.broker, timeout=30)
            self.upstream.settimeout(None)
            self.gw._track(self.upstream, True)
            while not self.gw._stop.is_set():
                frame = _recv_frame(self.client)
                if frame is None:
                    return
                self._handle(frame)
        except (_Closed, OSError, ProtocolError, ValueError, KeyError):
            return
        finally:
            for s in (self.client, self.upstream):
                if s is not None:
                    self.gw._track(s, False)
                    _shut(s)

    # -- plumbing -----------------------------------------------------------------------------

    def _send(self, payload: bytes) -> None:
        self.client.sendall(_SIZE.pack(len(payload)) + payload)

    def _answer(self, key: int, version: int, corr: int, body: Message) -> None:
        spec = api(key)
        self._send(encode_response_header(corr, spec.response_header_version(version))
                   + spec.response_codec(version).encode(body))

    def _forward(self, frame: bytes, expect_answer: bool = True) -> bytes | None:
        assert self.upstream is not None
        self.upstream.sendall(_SIZE.pack(len(frame)) + frame)
        if not expect_answer:
            return None
        answer = _recv_frame(self.upstream)
        if answer is None:
            raise _Closed("broker closed the connection")
        return answer

    @staticmethod
    def _decode_request(frame: bytes) -> tuple[RequestHeader, Message]:
        key, version, _ = peek_request(frame)
        spec = api(key)
        header, pos = decode_request_header(memoryview(frame), spec.request_header_version(version))
        return header, spec.request_codec(version).decode(memoryview(frame)[pos:])

    @staticmethod
    def _encode_request(header: RequestHeader, body: Message) -> bytes:
        spec = api(header.api_key)
        return (encode_request_header(header, spec.request_header_version(header.api_version))
                + spec.request_codec(header.api_version).encode(body))

    @staticmethod
    def _decode_response(key: int, version: int, frame: bytes) -> Message:
        spec = api(key)
        _, pos = decode_response_header(memoryview(frame), spec.response_header_version(version))
        return spec.response_codec(version).decode(memoryview(frame)[pos:])

    def _fail(self, reason: str, answer: tuple[int, int, int, Message] | None = None) -> NoReturn:
        """Counts a failed authentication, sends ``answer`` (key, version, correlation id, body) if
        any, and closes the connection."""
        self.gw._count("failed")  # before the client can see the answer
        if answer is not None:
            self._answer(*answer)
        raise _Closed(reason)

    # -- requests -----------------------------------------------------------------------------

    def _handle(self, frame: bytes) -> None:
        key, version, corr = peek_request(frame)
        if self.state == _READY:
            now = time.monotonic()
            if key == SASL_HANDSHAKE and self._may_reauthenticate(now):
                # KIP-368: a SaslHandshake on an authenticated connection starts a re-authentication.
                self.previous_mechanism = self.mechanism
                self.last_reauth_start = now
                self.state = _HANDSHAKE
            elif self.expires is not None and now >= self.expires:
                self.gw._count("closed_expired")
                raise _Closed("session expired")
            elif key == SASL_HANDSHAKE:
                # What Kafka's request handler answers when re-authentication is not possible.
                self._answer(key, version, corr, {"error_code": ILLEGAL_SASL_STATE, "mechanisms": []})
                return
            elif key == SASL_AUTHENTICATE:
                body = api(key).response_codec(version).default()
                body.update(error_code=ILLEGAL_SASL_STATE,
                            error_message="SaslAuthenticate request received after successful authentication")
                self._answer(key, version, corr, body)
                return
            else:
                self._relay(key, version, frame)
                return
        if self.state == _HANDSHAKE:
            if key == API_VERSIONS and not self.reauthenticating:
                self._api_versions(version, frame)
            elif key == SASL_HANDSHAKE and version >= 1:
                self._handshake(version, corr, frame)
            else:  # Kafka: "Unexpected Kafka request of type ... during SASL handshake", closed
                self._fail(f"api {key} v{version} during SASL handshake")
        elif key == SASL_AUTHENTICATE:
            self._authenticate(version, corr, frame)
        else:
            self._fail(f"api {key} during SASL authentication")

    def _may_reauthenticate(self, now: float) -> bool:
        # Kafka re-authenticates only a session that expires, and at most once a second.
        if self.expires is None:
            return False
        return self.last_reauth_start is None or now - self.last_reauth_start >= _MIN_REAUTH_INTERVAL

    def _api_versions(self, version: int, frame: bytes) -> None:
        answer = self._forward(frame)
        assert answer is not None
        try:
            body = self._decode_response(API_VERSIONS, version, answer)
        except ProtocolError:
            body = None
        if body is None or body["error_code"] != 0:  # e.g. UNSUPPORTED_VERSION, in v0 form
            self._send(answer)
            return
        keys = [k for k in body["api_keys"] if k["api_key"] not in (SASL_HANDSHAKE, SASL_AUTHENTICATE)]
        for k in keys:
            if k["api_key"] == FETCH:
                k["max_version"] = min(k["max_version"], MAX_FETCH_VERSION)
        keys.append({"api_key": SASL_HANDSHAKE, "min_version": 1, "max_version": 1})
        keys.append({"api_key": SASL_AUTHENTICATE, "min_version": 0, "max_version": 2})
        body["api_keys"] = sorted(keys, key=lambda k: k["api_key"])
        (corr,) = _SIZE.unpack_from(answer)
        self._answer(API_VERSIONS, version, corr, body)

    def _handshake(self, version: int, corr: int, frame: bytes) -> None:
        _, request = self._decode_request(frame)
        mechanism = request["mechanism"]
        mechanisms = list(self.gw.mechanisms)
        if mechanism not in mechanisms:
            self._fail("unsupported mechanism", (SASL_HANDSHAKE, version, corr,
                                                 {"error_code": UNSUPPORTED_SASL_MECHANISM, "mechanisms": mechanisms}))
        self._answer(SASL_HANDSHAKE, version, corr, {"error_code": 0, "mechanisms": mechanisms})
        # Kafka answers a re-authentication's handshake for another mechanism as usual and fails
        # its SaslAuthenticate.
        self.bad_mechanism = self.reauthenticating and mechanism != self.previous_mechanism
        self.mechanism = mechanism
        self.scram = None
        self.scram_started = False
        self.scram_user = None
        if mechanism in SCRAM:
            self.scram = self.gw._scram[mechanism].make_server(self._scram_credentials)
        self.state = _AUTHENTICATE

    def _scram_credentials(self, username: str) -> tuple[bytes, bytes, bytes, int] | None:
        assert self.mechanism is not None
        self.scram_user = username
        return self.gw._credentials.get((self.mechanism, username))

    def _authenticate(self, version: int, corr: int, frame: bytes) -> None:
        _, request = self._decode_request(frame)
        response = api(SASL_AUTHENTICATE).response_codec(version).default()
        what = "re-authentication" if self.reauthenticating else "authentication"
        generic = (f"Authentication failed during {what} due to invalid credentials with SASL mechanism "
                   f"{self.mechanism}")
        if self.bad_mechanism:  # Kafka closes without an answer
            self._fail("re-authentication changed the mechanism")
        user: str | None = None
        token = b""
        message: str | None = None
        if self.mechanism == "PLAIN":
            user, message = self._plain(bytes(request["auth_bytes"]))
            if message is None and user is None:
                message = generic
        else:
            done, token = self._scram_step(bytes(request["auth_bytes"]))
            if token is None:
                message = generic
            elif not done:  # server-first sent; the client's final message comes next
                response.update(auth_bytes=token)
                self._answer(SASL_AUTHENTICATE, version, corr, response)
                return
            else:
                user = self.scram_user
        if message is None and self.reauthenticating and user != self.user:
            message = (f"Cannot change principals during re-authentication from User.{self.user}: "
                       f"User.{user}")
        if message is not None:
            response.update(error_code=SASL_AUTHENTICATION_FAILED, error_message=message)
            self._fail("authentication failed", (SASL_AUTHENTICATE, version, corr, response))
        assert user is not None
        lifetime = self.gw.session_lifetime_ms
        self.expires = time.monotonic() + lifetime / 1000 if lifetime > 0 else None
        response.update(auth_bytes=token, session_lifetime_ms=lifetime)
        self.gw._count("authenticated", user)  # counted before the client can see the answer
        if self.reauthenticating:
            self.gw._count("reauthenticated", user)
        self._answer(SASL_AUTHENTICATE, version, corr, response)
        self.user = user
        self.previous_mechanism = None
        self.scram = None
        self.state = _READY

    def _plain(self, token: bytes) -> tuple[str | None, str | None]:
        """RFC 4616 as Kafka's PlainSaslServer checks it: (user, None) or (None, error message)."""
        parts = token.split(b"\0")
        if len(parts) != 3:
            return None, None  # malformed: Kafka answers with its generic message
        try:
            authzid, user, password = (p.decode() for p in parts)
        except UnicodeDecodeError:
            return None, None
        if not user:
            return None, "Authentication failed: username not specified"
        if not password:
            return None, "Authentication failed: password not specified"
        known = self.gw.users.get(user)
        if known is None or not hmac.compare_digest(known.password.encode(), password.encode()):
            return None, "Authentication failed: Invalid username or password"
        if authzid and authzid != user:
            return None, "Authentication failed: Client requested an authorization id that is different from username"
        return user, None

    def _scram_step(self, token: bytes) -> tuple[bool, bytes | None]:
        """One SCRAM message: (exchange complete, the server's answer or None on failure)."""
        try:
            text = token.decode()
            if not self.scram_started:
                self.scram_started = True
                self.scram.set_client_first(text)
                return False, self.scram.get_server_first().encode()
            self.scram.set_client_final(text)
            return True, self.scram.get_server_final().encode()
        except (scramp.ScramException, UnicodeDecodeError, ValueError):
            return False, None

    # -- relaying -----------------------------------------------------------------------------

    def _relay(self, key: int, version: int, frame: bytes) -> None:
        if key == METADATA:
            self._metadata(frame)
        elif key in _TOPIC_APIS and self._topic_api(key, version, frame):
            return
        elif key == FIND_COORDINATOR or key == DESCRIBE_CLUSTER:
            self._rewrite_addresses(key, version, frame)
        else:
            acks0 = False
            if key == PRODUCE:
                acks0 = self._decode_request(frame)[1]["acks"] == 0
            answer = self._forward(frame, expect_answer=not acks0)
            if answer is not None:
                self._send(answer)

    def _metadata(self, frame: bytes) -> None:
        header, request = self._decode_request(frame)
        version = header.api_version
        user = self.gw.users[self.user or ""]
        # Null asks for every topic, and so does an empty list before v1.
        named = request["topics"] is not None and (bool(request["topics"]) or version >= 1)
        names = {t["name"] for t in request["topics"]} if named else set()
        refused = sorted(n for n in names if not user.may(n))
        if refused:
            self.gw._count("denied", self.user, len(refused))
            allowed = [t for t in request["topics"] if user.may(t["name"])]
            if allowed or version >= 1:
                # Kafka neither describes nor auto-creates a topic the principal may not see.
                request["topics"] = allowed
                frame = self._encode_request(header, request)
        answer = self._forward(frame)
        assert answer is not None
        body = self._decode_response(METADATA, version, answer)
        for broker in body["brokers"]:
            broker.update(host="127.0.0.1", port=self.gw.port)
        topics = [t for t in body["topics"] if user.may(t["name"])]
        if named and None not in names:
            # Only what was asked for: noida-db answers an empty list with every topic, Kafka with none.
            topics = [t for t in topics if t["name"] in names]
        for name in refused:
            topic = _defaults(_sub_fields(load_schema("MetadataResponse").fields, "topics"))
            topic.update(error_code=TOPIC_AUTHORIZATION_FAILED, name=name, partitions=[])
            topics.append(topic)
        body["topics"] = topics
        self._answer(METADATA, version, header.correlation_id, body)

    def _topic_api(self, key: int, version: int, frame: bytes) -> bool:
        """Refuses the partitions of topics the principal may not use; False: relay unchanged."""
        where = _TOPIC_APIS[key]
        user = self.gw.users[self.user or ""]
        header, request = self._decode_request(frame)
        topics = request[where.request_topics]
        refused = [t for t in topics if not user.may(t[where.request_name])]
        if not refused:
            return False
        self.gw._count("denied", self.user, len(refused))
        allowed = [t for t in topics if user.may(t[where.request_name])]
        acks0 = key == PRODUCE and request["acks"] == 0
        spec = api(key)
        # Fetch sessions: an incremental fetch is forwarded even when empty, so the broker's
        # session epoch stays in step with the client's.
        incremental = key == FETCH and request.get("session_id", 0) != 0
        if allowed or incremental:
            request[where.request_topics] = allowed
            answer = self._forward(self._encode_request(header, request), expect_answer=not acks0)
            if answer is None:
                return True
            body = self._decode_response(key, version, answer)
        else:
            if acks0:
                return True
            body = spec.response_codec(version).default()
        fields = load_schema(spec.response.name).fields
        topic_fields = _sub_fields(fields, where.response_topics)
        partition_fields = _sub_fields(topic_fields, where.response_partitions)
        for t in refused:
            topic = _defaults(topic_fields)
            topic[where.response_name] = t[where.request_name]
            parts = []
            for p in t[where.request_partitions]:
                part = _defaults(partition_fields)
                part.update(where.refused)
                part.update({where.response_index: p[where.request_index],
                             "error_code": TOPIC_AUTHORIZATION_FAILED})
                parts.append(part)
            topic[where.response_partitions] = parts
            body[where.response_topics].append(topic)
        self._answer(key, version, header.correlation_id, body)
        return True

    def _rewrite_addresses(self, key: int, version: int, frame: bytes) -> None:
        answer = self._forward(frame)
        assert answer is not None
        (corr,) = _SIZE.unpack_from(answer)
        body = self._decode_response(key, version, answer)
        here = {"host": "127.0.0.1", "port": self.gw.port}
        if key == DESCRIBE_CLUSTER:
            for broker in body["brokers"]:
                broker.update(here)
        elif version >= 4:
            for c in body["coordinators"]:
                if c["error_code"] == 0:
                    c.update(here)
        elif body["error_code"] == 0:
            body.update(here)
        self._answer(key, version, corr, body)
