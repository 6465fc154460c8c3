"""A small blocking Kafka client for the tiering tasks, built on our own message codecs.

The copier needs what no client library gives: record batches exactly as the broker serves them
(bytes, CRCs intact, with the aborted-transaction list and the last stable offset), plus a few
admin calls (Metadata with topic ids, ListOffsets, DescribeConfigs, DeleteRecords). One
connection per broker, one request at a time per connection; a client is used by one thread.
"""

from __future__ import annotations

import itertools
import logging
import socket
import ssl
import struct
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

from protocol.apis import (
    API_VERSIONS,
    DELETE_RECORDS,
    DESCRIBE_CONFIGS,
    FETCH,
    LIST_OFFSETS,
    METADATA,
    OFFSET_FOR_LEADER_EPOCH,
    api,
)
from protocol.errors import ErrorCode
from protocol.headers import RequestHeader, decode_response_header, encode_request_header
from tiering.client_security import ClientSecurity, SaslAuthenticationError, sasl_exchange
from tiering.topic_configs import BrokerTopicConfigs
from tiering.topic_owner import SYSTEM_ENABLE

log = logging.getLogger(__name__)

CLIENT_ID = "tiered-proxy-tiering"
# The newest version of each API this client speaks: Fetch v12 still names topics (v13+ only by
# id, and noida-db reports zero ids), Metadata v10+ carries topic ids, ListOffsets v8 and v9 take
# EARLIEST_LOCAL (-4) and LATEST_TIERED (-5).
PREFERRED_VERSIONS = {FETCH: 12, LIST_OFFSETS: 9, METADATA: 12, DESCRIBE_CONFIGS: 4, DELETE_RECORDS: 2}
_TOPIC_RESOURCE = 2
_BROKER_RESOURCE = 4
_LENGTH = struct.Struct(">i")

EARLIEST = -2
LATEST = -1
EARLIEST_PENDING_UPLOAD = -6  # KIP-1023, ListOffsets v11


class BrokerClientError(Exception):
    """A broker could not be reached, closed the connection, or answered nonsense."""


class LeaderMovedError(BrokerClientError):
    """The broker asked no longer leads the partition (or not at the leader epoch asked)."""


# The answers that say so: the next metadata names the leader to ask.
LEADER_MOVED = frozenset({ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.LEADER_NOT_AVAILABLE,
                          ErrorCode.FENCED_LEADER_EPOCH, ErrorCode.UNKNOWN_LEADER_EPOCH})


class StaleConnectionError(BrokerClientError):
    """A connection that had served requests was closed by the broker (it restarted, or closed an
    idle connection): the request may be sent again on a new one."""


class UnsupportedApiError(BrokerClientError):
    """The broker does not offer an API (or no version this client speaks) in its ApiVersions."""


class AuthenticationRequiredError(BrokerClientError):
    """A broker answered ApiVersions, then closed the connection on a request this client sent
    without logging in: what a SASL listener does to a client with no SASL settings."""


class _PeerClosed(Exception):
    """The broker closed the connection before a whole answer arrived."""


@dataclass
class PartitionInfo:
    partition: int
    leader: int
    leader_epoch: int


@dataclass
class TopicInfo:
    name: str
    topic_id: uuid.UUID  # all zeros when the broker has no topic ids (noida-db)
    partitions: dict[int, PartitionInfo] = field(default_factory=dict)
    internal: bool = False


@dataclass
class FetchedPartition:
    error_code: int
    high_watermark: int
    last_stable_offset: int
    log_start_offset: int
    aborted_transactions: list[tuple[int, int]]  # (producer id, first offset)
    records: memoryview


class _Connection:
    _correlation = itertools.count(1)

    def __init__(self, host: str, port: int, timeout_s: float, max_response_bytes: int,
                 security: ClientSecurity | None = None) -> None:
        self.address = f"{host}:{port}"
        self.max_response_bytes = max_response_bytes
        security = security or ClientSecurity()
        context = security.ssl_context
        try:
            sock = socket.create_connection((host, port), timeout=timeout_s)
            self.sock = context.wrap_socket(sock, server_hostname=host) if context is not None else sock
        except (OSError, ssl.SSLError) as exc:
            raise BrokerClientError(f"cannot connect to broker {self.address}: {exc}") from None
        self.sock.settimeout(timeout_s)
        self.authenticating = security.sasl is not None  # a close then is not for want of SASL
        self.versions: dict[int, tuple[int, int]] = {}
        self.answered = 0  # requests answered after ApiVersions
        response = self.request(API_VERSIONS, 0, {})
        self.versions = {k["api_key"]: (k["min_version"], k["max_version"]) for k in response["api_keys"]}
        self.expires_at = float("inf")  # when the broker ends the SASL session (KIP-368)
        if security.sasl is not None:
            self._authenticate(security)

    def _authenticate(self, security: ClientSecurity) -> None:
        assert security.sasl is not None
        steps = sasl_exchange(security.sasl, self.address, self.versions)
        answer: dict[str, Any] | None = None
        try:
            while True:
                api_key, version, body = steps.send(answer)  # type: ignore[arg-type]
                answer = self.request(api_key, version, body)
        except StopIteration as done:
            lifetime_ms = done.value
        except SaslAuthenticationError as exc:
            self.close()
            raise BrokerClientError(str(exc)) from None
        if lifetime_ms > 0:
            # Reconnect (and so re-authenticate) well before the broker would close the session.
            self.expires_at = time.monotonic() + lifetime_ms * 0.85 / 1000

    @property
    def usable(self) -> bool:
        return self.sock.fileno() >= 0 and time.monotonic() < self.expires_at

    def version(self, api_key: int) -> int:
        low, high = self.versions.get(api_key, (0, -1))
        chosen = min(high, PREFERRED_VERSIONS.get(api_key, high))
        if chosen < low:
            raise UnsupportedApiError(f"broker {self.address} does not support {api(api_key).name}")
        return chosen

    def request(self, api_key: int, version: int, body: dict[str, Any]) -> dict[str, Any]:
        spec = api(api_key)
        corr = next(self._correlation) & 0x7FFFFFFF
        header = encode_request_header(RequestHeader(api_key, version, corr, CLIENT_ID),
                                       spec.request_header_version(version))
        payload = header + spec.request_codec(version).encode(body)
        try:
            self.sock.sendall(_LENGTH.pack(len(payload)) + payload)
            (size,) = _LENGTH.unpack(self._read_exactly(4))
            if not 0 <= size <= self.max_response_bytes:
                raise BrokerClientError(f"broker {self.address} sent a {size}-byte frame")
            frame = memoryview(self._read_exactly(size))
        except _PeerClosed:
            self.close()
            if self.answered:
                raise StaleConnectionError(f"broker {self.address} closed the connection during {spec.name}") from None
            if self.versions and not self.authenticating:
                # What a SASL listener does to a client that did not log in; a close after
                # answers (a broker stopped or killed) is not for want of SASL.
                raise AuthenticationRequiredError(
                    f"broker {self.address} answered ApiVersions, then closed the connection on {spec.name} (if the "
                    "cluster requires SASL: this client has no SASL settings)") from None
            raise BrokerClientError(f"broker {self.address} closed the connection during {spec.name}") from None
        except OSError as exc:
            self.close()
            if self.answered and isinstance(exc, (ConnectionResetError, BrokenPipeError)):
                raise StaleConnectionError(f"{spec.name} to {self.address} failed: {exc}") from None
            raise BrokerClientError(f"{spec.name} to {self.address} failed: {exc}") from None
        got, pos = decode_response_header(frame, spec.response_header_version(version))
        if got != corr:
            self.close()
            raise BrokerClientError(f"broker {self.address} answered correlation id {got}, expected {corr}")
        if self.versions:
            self.answered += 1
        return spec.response_codec(version).decode(frame[pos:])

    def _read_exactly(self, n: int) -> bytearray:
        buf = bytearray(n)
        view = memoryview(buf)
        got = 0
        while got < n:
            chunk = self.sock.recv_into(view[got:])
            if chunk == 0:
                raise _PeerClosed
            got += chunk
        return buf

    def close(self) -> None:
        try:
            self.sock.close()
        except OSError:
            pass


class BrokerClient:
    """Blocking requests to the brokers of one cluster (not thread-safe: one per thread)."""

    def __init__(self, bootstrap_servers: str, *, timeout_s: float = 30.0,
                 max_response_bytes: int = 1 << 30, security: ClientSecurity | None = None) -> None:
        self.security = security or ClientSecurity()
        self.bootstrap = [_split(a) for a in bootstrap_servers.split(",") if a.strip()]
        if not self.bootstrap:
            raise ValueError("no bootstrap servers")
        self.timeout_s = timeout_s
        self.max_response_bytes = max_response_bytes
        self.brokers: dict[int, tuple[str, int]] = {}
        self.topic_errors: dict[str, int] = {}  # topics the last Metadata answered with an error
        self._connections: dict[tuple[str, int], _Connection] = {}

    def close(self) -> None:
        """Closes the connections. Stopping threads call it on clients another thread may be
        using (BrokerQuestions' warm-up), which may add one meanwhile: each is taken out before it
        is closed, so that one is closed too (iterating the dict said "dictionary changed size
        during iteration" when a proxy stopped during its first round)."""
        while self._connections:
            _, conn = self._connections.popitem()
            conn.close()

    def _connection(self, address: tuple[str, int]) -> _Connection:
        conn = self._connections.get(address)
        if conn is None or not conn.usable:
            if conn is not None:
                conn.close()
            conn = self._connections[address] = _Connection(*address, self.timeout_s, self.max_response_bytes,
                                                            self.security)
        return conn

    def _call(self, address: tuple[str, int], api_key: int, body: dict[str, Any]) -> tuple[dict[str, Any], int]:
        """One request; a connection the broker closed since its last answer (a broker restarted
        while this one sat in the pool) is replaced once. Every request this client sends may be
        repeated: reads, and DeleteRecords to a fixed offset."""
        for attempt in range(2):
            conn = self._connection(address)
            version = conn.version(api_key)
            try:
                return conn.request(api_key, version, body), version
            except StaleConnectionError:
                self._connections.pop(address, None)
                if attempt:
                    raise
            except BrokerClientError:
                self._connections.pop(address, None)
                raise
        raise AssertionError("unreachable")

    def _any_broker(self, api_key: int, body: dict[str, Any]) -> tuple[dict[str, Any], int]:
        errors: list[BrokerClientError] = []
        for address in [*self.brokers.values(), *self.bootstrap]:
            try:
                return self._call(address, api_key, body)
            except BrokerClientError as exc:
                errors.append(exc)
        kind = AuthenticationRequiredError if all(isinstance(e, AuthenticationRequiredError) for e in errors) \
            else BrokerClientError
        raise kind("; ".join(map(str, errors)))

    def _node(self, node_id: int) -> tuple[str, int]:
        if node_id not in self.brokers:
            self.metadata([])
        if node_id not in self.brokers:
            raise BrokerClientError(f"broker {node_id} is not in the cluster metadata")
        return self.brokers[node_id]

    # --- requests ----------------------------------------------------------------------------

    def request(self, node_id: int | None, api_key: int, version: int, body: dict[str, Any]) -> dict[str, Any]:
        """One request at a chosen version, to a node (None: any broker); for tools."""
        address = self._node(node_id) if node_id is not None else (list(self.brokers.values()) or self.bootstrap)[0]
        conn = self._connection(address)
        try:
            return conn.request(api_key, version, body)
        except BrokerClientError:
            self._connections.pop(address, None)
            raise

    def connect_all(self) -> None:
        """Learn the brokers and open a connection to each (ApiVersions and, with SASL, the login
        done), so a later request pays neither; a broker that cannot be reached now is skipped."""
        self.metadata([])
        for address in self.brokers.values():
            try:
                self._connection(address)
            except BrokerClientError as exc:
                log.debug("cannot connect to broker %s:%d ahead of use: %s", *address, exc)

    def supported(self, node_id: int, api_key: int) -> tuple[int, int] | None:
        """The (min, max) versions of an API the node offers, or None."""
        return self._connection(self._node(node_id)).versions.get(api_key)

    def metadata(self, topics: list[str] | None = None) -> dict[str, TopicInfo]:
        """Brokers (remembered) and topics: all of them when ``topics`` is None."""
        body = {"topics": None if topics is None else [{"name": t, "topic_id": bytes(16)} for t in topics],
                "allow_auto_topic_creation": False, "include_cluster_authorized_operations": False,
                "include_topic_authorized_operations": False}
        response, _ = self._any_broker(METADATA, body)
        self.brokers = {b["node_id"]: (b["host"], b["port"]) for b in response["brokers"]}
        result = {}
        self.topic_errors = {t["name"]: t["error_code"] for t in response["topics"]
                             if t["error_code"] != ErrorCode.NONE and t["name"] is not None}
        for t in response["topics"]:
            if t["error_code"] != ErrorCode.NONE or t["name"] is None:
                continue
            raw_id = t.get("topic_id")
            topic_id = uuid.UUID(bytes=bytes(raw_id)) if raw_id else uuid.UUID(int=0)
            info = TopicInfo(t["name"], topic_id, internal=bool(t.get("is_internal")))
            for p in t["partitions"]:
                info.partitions[p["partition_index"]] = PartitionInfo(
                    p["partition_index"], p["leader_id"], p.get("leader_epoch", -1))
            result[info.name] = info
        return result

    def fetch(self, leader: int, topic: str, partition: int, offset: int, *, max_bytes: int,
              read_committed: bool = True, max_wait_ms: int = 100,
              current_leader_epoch: int = -1) -> FetchedPartition:
        """One partition's raw record batches from ``offset`` (whole and maybe a cut last one).

        ``max_wait_ms`` must stay above zero: Tansu answers a zero-wait fetch with no partitions.
        ``current_leader_epoch`` (KIP-320): a leader of another epoch answers FENCED_LEADER_EPOCH
        or UNKNOWN_LEADER_EPOCH instead of records; -1 reads whatever the broker leads."""
        body = {
            "replica_id": -1, "max_wait_ms": max_wait_ms, "min_bytes": 1, "max_bytes": max_bytes,
            "isolation_level": 1 if read_committed else 0, "session_id": 0, "session_epoch": -1,
            "topics": [{"topic": topic, "topic_id": None, "partitions": [{
                "partition": partition, "current_leader_epoch": current_leader_epoch, "fetch_offset": offset,
                "last_fetched_epoch": -1, "log_start_offset": -1, "partition_max_bytes": max_bytes}]}],
            "forgotten_topics_data": [], "rack_id": "",
        }
        response, _ = self._call(self._node(leader), FETCH, body)
        if response.get("error_code", 0) != ErrorCode.NONE:
            return FetchedPartition(response["error_code"], -1, -1, -1, [], memoryview(b""))
        for t in response["responses"]:
            for p in t["partitions"]:
                if p["partition_index"] == partition:
                    aborted = [(a["producer_id"], a["first_offset"]) for a in p.get("aborted_transactions") or []]
                    records = p.get("records")
                    return FetchedPartition(
                        p["error_code"], p["high_watermark"], p.get("last_stable_offset", -1),
                        p.get("log_start_offset", -1), aborted,
                        memoryview(records) if records is not None else memoryview(b""))
        raise BrokerClientError(f"fetch answer from broker {leader} lacks {topic}-{partition}")

    def aborted_transactions_at(self, leader: int, topic: str, partition: int,
                                offset: int) -> list[tuple[int, int]] | None:
        """(producer id, first offset) of the aborted transactions a read_committed Fetch at
        ``offset`` is told about, among them every aborted transaction that began below ``offset``
        and ended at or after it (Kafka finds them in its own transaction indexes). None when the
        broker cannot say yet: an open transaction begins at ``offset`` (nothing is stable there,
        and Kafka then answers with an empty list). Empty when the broker holds nothing at
        ``offset`` (past its end, or below its log start)."""
        answer = self.fetch(leader, topic, partition, offset, max_bytes=1, read_committed=True, max_wait_ms=1)
        if answer.error_code == ErrorCode.OFFSET_OUT_OF_RANGE:
            return []
        if answer.error_code != ErrorCode.NONE:
            raise BrokerClientError(f"read_committed fetch of {topic}-{partition} at {offset}: "
                                    f"{ErrorCode.from_code(answer.error_code).name}")
        stable = answer.last_stable_offset if answer.last_stable_offset >= 0 else answer.high_watermark
        if offset >= answer.high_watermark:
            return []  # nothing at or after offset: no transaction can end there
        return answer.aborted_transactions if stable > offset else None

    def list_offsets(self, leader: int, partitions: list[tuple[str, int]], timestamp: int,
                     read_committed: bool = False) -> dict[tuple[str, int], tuple[int, int]]:
        """(error code, offset) per (topic, partition) for EARLIEST (-2), LATEST (-1) or a timestamp,
        in one request to ``leader``."""
        by_topic: dict[str, list[int]] = {}
        for topic, partition in partitions:
            by_topic.setdefault(topic, []).append(partition)
        body = {"replica_id": -1, "isolation_level": 1 if read_committed else 0, "timeout_ms": 0,
                "topics": [{"name": topic, "partitions": [
                    {"partition_index": p, "current_leader_epoch": -1, "timestamp": timestamp, "max_num_offsets": 1}
                    for p in numbers]} for topic, numbers in by_topic.items()]}
        response, _ = self._call(self._node(leader), LIST_OFFSETS, body)
        return {(t["name"], p["partition_index"]): (p["error_code"], p.get("offset", -1))
                for t in response["topics"] for p in t["partitions"]}

    def list_offset(self, leader: int, topic: str, partition: int, timestamp: int,
                    read_committed: bool = False) -> tuple[int, int]:
        """(error code, offset) for EARLIEST (-2), LATEST (-1) or a timestamp; EARLIEST_PENDING_UPLOAD
        (-6) is asked at ListOffsets v11, the first that takes it."""
        body = {"replica_id": -1, "isolation_level": 1 if read_committed else 0, "timeout_ms": 0,
                "topics": [{"name": topic, "partitions": [{"partition_index": partition, "current_leader_epoch": -1,
                                                           "timestamp": timestamp, "max_num_offsets": 1}]}]}
        if timestamp == EARLIEST_PENDING_UPLOAD:
            response = self.request(leader, LIST_OFFSETS, 11, body)
        else:
            response, _ = self._call(self._node(leader), LIST_OFFSETS, body)
        p = response["topics"][0]["partitions"][0]
        return p["error_code"], p.get("offset", -1)

    def end_offset_for_epoch(self, leader: int, topic: str, partition: int, leader_epoch: int,
                             current_leader_epoch: int = -1) -> tuple[int, int, int]:
        """OffsetForLeaderEpoch as a consumer asks it: (error code, the leader's largest epoch at
        or below ``leader_epoch``, the offset where that epoch ends in the leader's log)."""
        body = {"replica_id": -1, "topics": [{"topic": topic, "partitions": [{
            "partition": partition, "current_leader_epoch": current_leader_epoch, "leader_epoch": leader_epoch}]}]}
        response, _ = self._call(self._node(leader), OFFSET_FOR_LEADER_EPOCH, body)
        for t in response["topics"]:
            for p in t["partitions"]:
                if p["partition"] == partition:
                    return p["error_code"], p.get("leader_epoch", -1), p["end_offset"]
        raise BrokerClientError(f"OffsetForLeaderEpoch answer from broker {leader} lacks {topic}-{partition}")

    def topic_configs(self, topics: list[str]) -> dict[str, BrokerTopicConfigs]:
        """Each topic's configs as the broker describes them, split into the topic's own settings
        and the rest (see :class:`BrokerTopicConfigs`); topics the broker could not describe are
        missing."""
        if not topics:
            return {}
        # configuration_keys stays null: Tansu drops the connection when keys are named, and the
        # rule needs the whole listing anyway.
        body = {"resources": [{"resource_type": _TOPIC_RESOURCE, "resource_name": t, "configuration_keys": None}
                              for t in topics], "include_synonyms": False, "include_documentation": False}
        response, _ = self._any_broker(DESCRIBE_CONFIGS, body)
        result = {}
        for r in response["results"]:
            if r["error_code"] == ErrorCode.NONE:
                result[r["resource_name"]] = BrokerTopicConfigs.from_described(r["configs"])
        return result

    def tiered_storage_enabled(self) -> bool | None:
        """A broker's ``remote.log.storage.system.enable``: as it describes it, False where it
        describes its configs without the key (no tiered storage of its own: noida-db, Tansu),
        None where it would not say (refused, or no broker answered)."""
        try:
            if not self.brokers:
                self.metadata([])
            node = min(self.brokers) if self.brokers else None
            if node is None:
                return None
            body = {"resources": [{"resource_type": _BROKER_RESOURCE, "resource_name": str(node),
                                   "configuration_keys": None}],  # null: Tansu drops named keys
                    "include_synonyms": False, "include_documentation": False}
            response, _ = self._call(self._node(node), DESCRIBE_CONFIGS, body)
        except BrokerClientError as exc:
            log.debug("cannot describe the brokers' configs: %s", exc)
            return None
        for r in response["results"]:
            if r["error_code"] != ErrorCode.NONE:
                return None
            for c in r["configs"]:
                if c["name"] == SYSTEM_ENABLE:
                    return str(c.get("value")).strip().lower() == "true"
        return False

    def delete_records(self, leader: int, topic: str, partition: int, offset: int,
                       timeout_ms: int = 10_000) -> tuple[int, int]:
        """Move the log start of one partition to ``offset``; (error code, new low watermark)."""
        body = {"timeout_ms": timeout_ms,
                "topics": [{"name": topic, "partitions": [{"partition_index": partition, "offset": offset}]}]}
        response, _ = self._call(self._node(leader), DELETE_RECORDS, body)
        p = response["topics"][0]["partitions"][0]
        return p["error_code"], p["low_watermark"]


def _split(address: str) -> tuple[str, int]:
    host, _, port = address.strip().rpartition(":")
    return host.strip("[]"), int(port)
