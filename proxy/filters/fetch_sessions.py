"""KIP-227 incremental fetch sessions, terminated at the proxy.

Clients open fetch sessions with the proxy exactly as they would with a broker. The proxy keeps
each session's partitions (with the fetch offsets the client last sent) and what it last told
the client about each partition, sends the broker a sessionless full fetch of every partition in
the session, and answers an incremental request with only the partitions that changed. Seeing
every partition's fetch offset on every request is what lets the proxy route each one to the
broker or to the remote tier.

Session ids belong to the broker port the client talks to (a session opened with node 1 means
nothing to node 2), as on a broker. Epochs follow the broker's rules: 0 opens a session, -1 ends
one (and fetches without a session), anything else must be the session's next epoch.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from protocol.apis import FETCH
from protocol.errors import ErrorCode
from proxy.chain import Answer, Filter, Message, RequestContext

log = logging.getLogger(__name__)

INITIAL_EPOCH = 0
FINAL_EPOCH = -1
NO_SESSION = 0
_MAX_EPOCH = 0x7FFFFFFF

# A partition inside a session: (topic name, or topic id bytes from Fetch v13, partition).
PartitionKey = tuple[str | bytes, int]
Scope = int | None  # the broker node id of the client's listener; None for the bootstrap port


def next_epoch(epoch: int) -> int:
    return 1 if epoch >= _MAX_EPOCH else epoch + 1


class FetchSessionError(Exception):
    """A request the proxy answers itself with a top-level error, as a broker would."""

    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.code = code


@dataclass
class CachedPartition:
    request: dict[str, Any]  # the partition's entry as the client last sent it
    # What the client was last told; an incremental answer includes the partition when any changes.
    high_watermark: int | None = None
    last_stable_offset: int | None = None
    log_start_offset: int | None = None


@dataclass
class FetchSession:
    id: int
    epoch: int  # the epoch the next incremental request must carry
    partitions: dict[PartitionKey, CachedPartition] = field(default_factory=dict)
    last_used: float = 0.0


@dataclass
class FetchContext:
    """How one Fetch request is served: the full partition list to fetch upstream, and how to
    shape the answer."""

    session: FetchSession | None
    incremental: bool
    partitions: list[tuple[PartitionKey, dict[str, Any]]]

    @property
    def response_session_id(self) -> int:
        return self.session.id if self.session is not None else NO_SESSION

    def shape_response(self, response: dict[str, Any], topic_field: str) -> None:
        """Set the session id, remember what the client is told, and (incremental) drop the
        partitions that did not change."""
        response["session_id"] = self.response_session_id
        if self.session is None:
            return
        cached = self.session.partitions
        kept_topics = []
        for topic in response["responses"]:
            kept = []
            for p in topic["partitions"]:
                entry = cached.get((topic[topic_field], p["partition_index"]))
                if entry is None:
                    kept.append(p)
                    continue
                changed = _remember(entry, p)
                if changed or not self.incremental:
                    kept.append(p)
            if kept:
                topic["partitions"] = kept
                kept_topics.append(topic)
        response["responses"] = kept_topics


def _remember(entry: CachedPartition, p: dict[str, Any]) -> bool:
    """Record what the client is told about a partition; True when it must be told (Kafka's
    rule: records, an error, a moved high watermark, last stable offset or log start, a
    preferred replica, a diverging epoch)."""
    changed = False
    for name in ("high_watermark", "last_stable_offset", "log_start_offset"):
        value = p.get(name)
        if value is not None and value != getattr(entry, name):
            setattr(entry, name, value)
            changed = True
    records = p.get("records")
    if records is not None and len(records) > 0:
        changed = True
    if p.get("error_code", 0) != ErrorCode.NONE:
        changed = True
    if p.get("preferred_read_replica", -1) >= 0:
        changed = True
    diverging = p.get("diverging_epoch")
    if diverging is not None and diverging.get("epoch", -1) >= 0:
        changed = True
    return changed


class FetchSessionCache:
    """Sessions of every client, bounded like a broker's (``max.incremental.fetch.session.cache.slots``;
    a full cache evicts the least recently used session idle for ``min.incremental.fetch.session.eviction.ms``,
    else the client is told to fetch without a session)."""

    def __init__(self, max_slots: int = 1000, min_eviction_ms: int = 120_000,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.max_slots = max_slots
        self.min_eviction_s = min_eviction_ms / 1000
        self.clock = clock
        self._sessions: dict[tuple[Scope, int], FetchSession] = {}
        self._random = random.Random()

    def __len__(self) -> int:
        return len(self._sessions)

    def get(self, scope: Scope, session_id: int) -> FetchSession | None:
        return self._sessions.get((scope, session_id))

    def context(self, scope: Scope, request: dict[str, Any], topic_field: str) -> FetchContext:
        """Apply a Fetch request (v7+) to the session cache; raises FetchSessionError for an
        unknown session or a wrong epoch."""
        session_id, epoch = request["session_id"], request["session_epoch"]
        sent = [((t[topic_field], p["partition"]), p) for t in request["topics"] for p in t["partitions"]]
        if epoch in (INITIAL_EPOCH, FINAL_EPOCH):
            if session_id != NO_SESSION:
                self._sessions.pop((scope, session_id), None)
            if epoch == FINAL_EPOCH:
                return FetchContext(None, False, sent)
            session = self._new_session(scope)
            if session is not None:
                for key, p in sent:
                    session.partitions[key] = CachedPartition(p)
            return FetchContext(session, False, sent)
        session = self._sessions.get((scope, session_id))
        if session is None:
            raise FetchSessionError(ErrorCode.FETCH_SESSION_ID_NOT_FOUND,
                                    f"fetch session {session_id} is not known")
        if epoch != session.epoch:
            raise FetchSessionError(ErrorCode.INVALID_FETCH_SESSION_EPOCH,
                                    f"fetch session {session_id} expected epoch {session.epoch}, got {epoch}")
        session.epoch = next_epoch(epoch)
        session.last_used = self.clock()
        for key, p in sent:
            entry = session.partitions.get(key)
            if entry is None:
                session.partitions[key] = CachedPartition(p)
            else:
                entry.request = p
        for t in request.get("forgotten_topics_data") or []:
            for partition in t["partitions"]:
                session.partitions.pop((t[topic_field], partition), None)
        return FetchContext(session, True, [(k, v.request) for k, v in session.partitions.items()])

    def _new_session(self, scope: Scope) -> FetchSession | None:
        now = self.clock()
        if len(self._sessions) >= self.max_slots:
            oldest_key = min(self._sessions, key=lambda k: self._sessions[k].last_used)
            if now - self._sessions[oldest_key].last_used < self.min_eviction_s:
                return None  # full of active sessions: this client fetches without one
            del self._sessions[oldest_key]
        while True:
            session_id = self._random.randint(1, _MAX_EPOCH)
            if (scope, session_id) not in self._sessions:
                break
        session = FetchSession(session_id, next_epoch(INITIAL_EPOCH), last_used=now)
        self._sessions[(scope, session_id)] = session
        return session


def upstream_topics(partitions: list[tuple[PartitionKey, dict[str, Any]]], topic_field: str) -> list[dict[str, Any]]:
    """A full fetch's topic list, topics in first-seen order, partitions in session order."""
    topics: dict[str | bytes, list[dict[str, Any]]] = {}
    for (topic, _), p in partitions:
        topics.setdefault(topic, []).append(p)
    return [{topic_field: topic, "partitions": ps} for topic, ps in topics.items()]


def _int(props: Mapping[str, str], key: str, default: int) -> int:
    value = props.get(key)
    return int(value) if value not in (None, "") else default


class FetchSessions(Filter):
    """Ends clients' fetch sessions at the proxy: a session's Fetch goes upstream as a sessionless
    full fetch of every partition in the session (the filters after this one see every fetch
    offset), and the answer is cut back to what the session's client must be told."""

    name = "fetch-sessions"
    apis = frozenset({FETCH})

    def __init__(self, props: Mapping[str, str]) -> None:
        self.sessions = FetchSessionCache(_int(props, "max.incremental.fetch.session.cache.slots", 1000),
                                          _int(props, "min.incremental.fetch.session.eviction.ms", 120_000))

    async def on_request(self, ctx: RequestContext) -> Answer | None:
        version, request = ctx.version, ctx.request.body
        if version < 7 or (request["session_id"] == NO_SESSION and request["session_epoch"] == FINAL_EPOCH):
            return None  # no session
        replica = request["replica_state"]["replica_id"] if version >= 15 else request.get("replica_id", -1)
        if replica >= 0:
            return None  # replication traffic keeps the brokers' own sessions
        topic_field = "topic_id" if version >= 13 else "topic"
        try:
            context = self.sessions.context(ctx.node_id, request, topic_field)
        except FetchSessionError as e:
            log.info("client %s: %s: %s", ctx.peer, e.code.name, e)
            body = ctx.api.response_codec(version).default()
            body["error_code"] = e.code
            return ctx.answer(body)
        request["session_id"], request["session_epoch"] = NO_SESSION, FINAL_EPOCH
        request["forgotten_topics_data"] = []
        request["topics"] = upstream_topics(context.partitions, topic_field)
        ctx.request.changed()

        async def shape(ctx: RequestContext, response: Message) -> None:
            if response.body.get("error_code", 0) != ErrorCode.NONE:
                return  # session id 0: the client starts over, as after a broker error
            context.shape_response(response.body, topic_field)
            response.changed()

        ctx.on_response(shape)
        return None
