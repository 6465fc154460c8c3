"""Archived topics (``tiering/archive.py``): history the cluster no longer has, served read-only
from the remote tier.

- **Metadata** lists them (leaders spread over the brokers' own node ids, so clients reach the
  proxy's ports), and their names never reach the broker: a Metadata asking for one would
  otherwise create it where ``auto.create.topics.enable`` is on.
- **Fetch**: their partitions are taken out of the request the broker gets (when nothing is left
  it gets an empty Fetch, which it answers at once, keeping the fetch sessions' bookkeeping in one
  place) and answered from the remote tier, within the request's ``max_bytes`` and the remote fetch
  buffer. Past the end (``Ry + 1``) a partition answers no records; a request of archived
  partitions alone then waits its ``max_wait_ms``, as a broker holds a fetch with nothing new.
- **ListOffsets** (-1, -4 and -6 are ``Ry + 1``: there is no local log; -2 ``Rx``; -5 ``Ry``; -3 and
  timestamps from the remote time indexes) and **OffsetForLeaderEpoch** come from the remote tier.
- **Produce** to them is refused with TOPIC_AUTHORIZATION_FAILED, which clients do not retry, and
  a message saying why; config changes with UNKNOWN_TOPIC_OR_PARTITION (as Kafka answers for a
  topic it does not have) and the same message; the rest of each request goes on. DeleteRecords
  goes to the brokers, which answer UNKNOWN_TOPIC_OR_PARTITION (its answer has no message).
- Their consumer groups' offsets: ``proxy/filters/archived_offsets.py``.
- **DescribeLogDirs**: the remote tier's log dir lists them with their remote sizes and segment
  counts, in the state ``ARCHIVED`` (or ``READ-REPLICA``), so ``tiered-proxy describe`` and
  ``kafka-log-dirs.sh`` show them.

Each source (this proxy's own bucket; a read replica's: ``proxy/archive_sources.py``) has its
reader; where two serve the same name, the first wins.
"""

from __future__ import annotations

import logging
from typing import Any

import trio

from protocol.apis import (
    ALTER_CONFIGS,
    DESCRIBE_LOG_DIRS,
    FETCH,
    INCREMENTAL_ALTER_CONFIGS,
    LIST_OFFSETS,
    METADATA,
    OFFSET_FOR_LEADER_EPOCH,
    PRODUCE,
)
from protocol.errors import ErrorCode
from protocol.remote_log_dir import (
    REMOTE_LOG_DIR_PREFIX,
    TAG_TIERED_BY,
    TAG_TIERING_STATE,
)
from proxy.archive_sources import ArchiveSource, Served, finder, served_topics
from proxy.chain import Answer, Filter, Message, RequestContext
from proxy.partition_reads import THROTTLED, PartitionKey, ReadEntry, ReadResult
from proxy.topic_counters import TopicCounters
from tiering.model import TopicIdPartition
from tiering.status import segment_tags

log = logging.getLogger(__name__)

_EARLIEST, _LATEST, _MAX_TIMESTAMP, _EARLIEST_LOCAL, _LATEST_TIERED, _EARLIEST_PENDING_UPLOAD = -2, -1, -3, -4, -5, -6
_LONGEST_IDLE_WAIT_S = 30.0
_TOPIC_RESOURCE = 2  # ConfigResource type TOPIC  # a client's max_wait_ms above this is not honoured in full


class ArchivedTopics(Filter):
    name = "archived-topics"
    apis = frozenset({METADATA, FETCH, LIST_OFFSETS, OFFSET_FOR_LEADER_EPOCH, PRODUCE, DESCRIBE_LOG_DIRS,
                      ALTER_CONFIGS, INCREMENTAL_ALTER_CONFIGS})

    def __init__(self, sources: list[ArchiveSource], not_available_code: ErrorCode, by_topic: TopicCounters) -> None:
        self.sources = sources
        self.not_available_code = not_available_code
        self.by_topic = by_topic  # the tiered reads' per-topic counters: archives' reads are remote reads too
        self.fetches = 0  # archived partitions answered with records
        self.fetch_bytes = 0
        self.not_available = 0
        self.produce_refused = 0

    async def on_request(self, ctx: RequestContext) -> Answer | None:
        topics = served_topics(self.sources)
        if not topics:
            return None
        key = ctx.api.key
        if key == METADATA:
            self._on_metadata(ctx, topics)
        elif key == FETCH:
            self._on_fetch(ctx, topics)
        elif key == LIST_OFFSETS:
            self._on_list_offsets(ctx, topics)
        elif key == OFFSET_FOR_LEADER_EPOCH:
            self._on_offset_for_leader_epoch(ctx, topics)
        elif key == DESCRIBE_LOG_DIRS:
            self._on_describe_log_dirs(ctx, topics)
        elif key in (ALTER_CONFIGS, INCREMENTAL_ALTER_CONFIGS):
            return self._on_alter_configs(ctx, topics)
        else:
            return self._on_produce(ctx, topics)
        return None

    def close(self) -> None:
        log.info("archived topics: partitions read %d, bytes %d, tiered storage not available %d, produce refused %d",
                 self.fetches, self.fetch_bytes, self.not_available, self.produce_refused)
        for source in self.sources:
            source.reader.close()

    # --- Metadata --------------------------------------------------------------------------------

    def _on_metadata(self, ctx: RequestContext, topics: dict[str, Served]) -> None:
        if ctx.version < 1:
            return  # v0's empty list means every topic: it cannot ask for none
        request = ctx.request.body
        if request["topics"] is None:
            listed = list(topics.values())
        else:
            by_id = {t.topic.topic_id.bytes: t for t in topics.values()}
            listed, kept = [], []
            for t in request["topics"]:
                found = topics.get(t["name"]) if t.get("name") else by_id.get(t.get("topic_id"))
                if found is None:
                    kept.append(t)
                else:
                    listed.append(found)
            if not listed:
                return
            request["topics"] = kept
            ctx.request.changed()

        async def add(ctx: RequestContext, message: Message) -> None:
            response = message.body
            nodes = sorted(b["node_id"] for b in response["brokers"])
            present = {t["name"] for t in response["topics"]}
            if not nodes:
                return
            response["topics"] += [_metadata_topic(t, nodes) for t in listed if t.name not in present]
            message.changed()

        ctx.on_response(add)

    # --- Fetch -----------------------------------------------------------------------------------

    def _on_fetch(self, ctx: RequestContext, topics: dict[str, Served]) -> None:
        version, request = ctx.version, ctx.request.body
        replica = request["replica_state"]["replica_id"] if version >= 15 else request.get("replica_id", -1)
        if version < 4 or replica >= 0:
            return  # message formats v0-v1 (not held remotely), or replication
        topic_field = "topic_id" if version >= 13 else "topic"
        lookup = finder(topics, topic_field)
        wanted: dict[PartitionKey, tuple[TopicIdPartition | None, int, int, ArchiveSource]] = {}
        names: dict[str | bytes, str] = {}  # as the request names a topic -> as clients know it
        kept = []
        for t in request["topics"]:
            served = lookup(t[topic_field])
            if served is None:
                kept.append(t)
                continue
            names[t[topic_field]] = served.name
            for p in t["partitions"]:
                wanted[(t[topic_field], p["partition"])] = (
                    served.topic.partitions.get(p["partition"]), p["fetch_offset"], p["partition_max_bytes"],
                    served.source)
        if not wanted:
            return
        request["topics"] = kept
        readable = {key for key, (tp, offset, _, source) in wanted.items()
                    if tp is not None and _holds(_ends(source, tp), offset)}
        idle_wait_s = min(request["max_wait_ms"], _LONGEST_IDLE_WAIT_S * 1000) / 1000 \
            if not kept and request.get("min_bytes", 1) > 0 and not readable else 0.0
        if readable:
            request["min_bytes"] = 0  # the archive's records are there now: the broker must not hold them
        ctx.request.changed()
        budget = request.get("max_bytes", 0x7FFFFFFF)
        read_committed = request.get("isolation_level", 0) == 1

        async def answer(ctx: RequestContext, message: Message) -> None:
            response = message.body
            if response.get("error_code", 0) != ErrorCode.NONE:
                return
            used = sum(len(p["records"]) for t in response["responses"] for p in t["partitions"]
                       if p.get("records") is not None)
            results: dict[PartitionKey, ReadResult] = {}
            holdings = []
            for source in dict.fromkeys(entry[3] for entry in wanted.values()):
                entries: list[ReadEntry] = [(key, tp, offset, limit) for key, (tp, offset, limit, s) in wanted.items()
                                            if key in readable and s is source and tp is not None]
                if entries:
                    read, holding = await source.reads.read(ctx.held, entries, budget - used, read_committed, ())
                    results.update(read)
                    holdings.append(holding)
            room, kept_bytes = budget - used, 0
            by_topic: dict[str | bytes, list[dict[str, Any]]] = {}
            for key, (tp, offset, _, source) in wanted.items():
                p, size = self._fetch_partition(key, tp, source, offset, results.get(key), read_committed)
                if size and not (size <= room or (kept_bytes == 0 and used == 0)):
                    p["records"], p["aborted_transactions"] = b"", [] if read_committed else None
                    size = 0
                if size:
                    self.fetches, self.fetch_bytes = self.fetches + 1, self.fetch_bytes + size
                    self.by_topic.add(names[key[0]], requests=1, bytes=size)
                elif p["error_code"] == self.not_available_code and tp is not None:
                    self.by_topic.add(names[key[0]], requests=1, errors=1)
                room, kept_bytes = room - size, kept_bytes + size
                by_topic.setdefault(key[0], []).append(p)
            for holding in holdings:  # hold what the answer keeps; the rest goes back
                holding.resize(min(holding.nbytes, kept_bytes))
                kept_bytes -= holding.nbytes
            for topic_key, partitions in by_topic.items():
                entry = next((t for t in response["responses"] if t[topic_field] == topic_key), None)
                if entry is None:
                    response["responses"].append({topic_field: topic_key, "partitions": partitions})
                else:
                    entry["partitions"] += partitions
            message.changed()
            if idle_wait_s:
                await trio.sleep(idle_wait_s)  # nothing new in an archive: the client's wait, as a broker's

        ctx.on_response(answer)

    def _fetch_partition(self, key: PartitionKey, tp: TopicIdPartition | None, source: ArchiveSource, offset: int,
                         result: ReadResult | None, read_committed: bool) -> tuple[dict[str, Any], int]:
        """One partition's answer, and the bytes of records in it."""
        p: dict[str, Any] = {"partition_index": key[1], "error_code": ErrorCode.NONE, "high_watermark": -1,
                             "last_stable_offset": -1, "log_start_offset": -1, "preferred_read_replica": -1,
                             "aborted_transactions": [] if read_committed else None, "records": b""}
        if tp is None:
            p["error_code"] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            return p, 0
        rx, ry = _ends(source, tp)
        end = ry + 1 if ry is not None else 0
        p["high_watermark"] = p["last_stable_offset"] = end
        p["log_start_offset"] = rx if rx is not None else end
        if offset == end:
            return p, 0  # caught up: nothing more until the archive grows (a read replica's does)
        if result is THROTTLED:
            return p, 0  # over the remote fetch quota: no records, no error (KIP-956)
        if not _holds((rx, ry), offset) or result is None:
            p["error_code"] = ErrorCode.OFFSET_OUT_OF_RANGE
            return p, 0
        if isinstance(result, BaseException):
            self.not_available += 1
            log.warning("TIERED_STORAGE_NOT_AVAILABLE: reading archived %s at %d: %s", tp, offset, result)
            p["error_code"] = self.not_available_code
            return p, 0
        p["records"] = result.records
        if read_committed:
            p["aborted_transactions"] = [{"producer_id": pid, "first_offset": first} for pid, first in result.aborted]
        return p, result.size

    # --- ListOffsets and OffsetForLeaderEpoch ----------------------------------------------------

    def _on_list_offsets(self, ctx: RequestContext, topics: dict[str, Served]) -> None:
        if ctx.version < 1:
            return
        request = ctx.request.body
        asked = [t for t in request["topics"] if t["name"] in topics]
        if not asked:
            return
        request["topics"] = [t for t in request["topics"] if t["name"] not in topics]
        ctx.request.changed()

        async def answer(ctx: RequestContext, message: Message) -> None:
            for t in asked:
                served = topics[t["name"]]
                message.body["topics"].append({"name": t["name"], "partitions": [
                    await _list_offset(served.source, served.topic.partitions.get(p["partition_index"]), p)
                    for p in t["partitions"]]})
            message.changed()

        ctx.on_response(answer)

    def _on_offset_for_leader_epoch(self, ctx: RequestContext, topics: dict[str, Served]) -> None:
        request = ctx.request.body
        if request.get("replica_id", -1) >= 0:
            return
        asked = [t for t in request["topics"] if t["topic"] in topics]
        if not asked:
            return
        request["topics"] = [t for t in request["topics"] if t["topic"] not in topics]
        ctx.request.changed()

        async def answer(ctx: RequestContext, message: Message) -> None:
            for t in asked:
                served, partitions = topics[t["topic"]], []
                for p in t["partitions"]:
                    tp = served.topic.partitions.get(p["partition"])
                    found = served.source.reader.end_offset_for_epoch(tp, p["leader_epoch"]) if tp is not None else None
                    epoch, end = found if found is not None else (-1, -1)
                    partitions.append({"partition": p["partition"], "leader_epoch": epoch, "end_offset": end,
                                       "error_code": ErrorCode.NONE if tp is not None
                                       else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION})
                message.body["topics"].append({"topic": t["topic"], "partitions": partitions})
            message.changed()

        ctx.on_response(answer)

    # --- DescribeLogDirs -------------------------------------------------------------------------

    def _on_describe_log_dirs(self, ctx: RequestContext, topics: dict[str, Served]) -> None:
        asked = ctx.request.body["topics"]
        wanted = None if asked is None else {t["topic"]: set(t["partitions"]) for t in asked if t["topic"] in topics}
        if wanted == {}:
            return

        async def add(ctx: RequestContext, message: Message) -> None:
            remote = next((r for r in message.body["results"] if r["log_dir"].startswith(REMOTE_LOG_DIR_PREFIX)), None)
            if remote is None or remote["error_code"] != ErrorCode.NONE:
                return
            names = set(topics) if wanted is None else set(wanted)
            remote["topics"] = [t for t in remote["topics"] if t["name"] not in names]
            for name in sorted(names):
                remote["topics"].append(_log_dir_topic(topics[name], None if wanted is None else wanted[name],
                                                       ctx.version))
            message.changed()

        ctx.on_response(add)

    # --- Config changes --------------------------------------------------------------------------

    def _on_alter_configs(self, ctx: RequestContext, topics: dict[str, Served]) -> Answer | None:
        request = ctx.request.body
        refused = [r for r in request["resources"]
                   if r["resource_type"] == _TOPIC_RESOURCE and r["resource_name"] in topics]
        if not refused:
            return None
        request["resources"] = [r for r in request["resources"] if all(r is not x for x in refused)]
        ctx.request.changed()
        answers = [{"error_code": ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "resource_type": r["resource_type"],
                    "resource_name": r["resource_name"], "error_message": _read_only(topics[r["resource_name"]])}
                   for r in refused]
        if not request["resources"]:
            return ctx.answer({"throttle_time_ms": 0, "responses": answers})

        async def add(ctx: RequestContext, message: Message) -> None:
            message.body["responses"] += answers
            message.changed()

        ctx.on_response(add)
        return None

    # --- Produce ---------------------------------------------------------------------------------

    def _on_produce(self, ctx: RequestContext, topics: dict[str, Served]) -> Answer | None:
        version, request = ctx.version, ctx.request.body
        topic_field = "topic_id" if version >= 13 else "name"
        lookup = finder(topics, topic_field)
        refused = [(t, served) for t in request["topic_data"] if (served := lookup(t[topic_field])) is not None]
        if not refused:
            return None
        request["topic_data"] = [t for t in request["topic_data"] if lookup(t[topic_field]) is None]
        ctx.request.changed()
        self.produce_refused += sum(len(t["partition_data"]) for t, _ in refused)
        answers = [{topic_field: t[topic_field], "partition_responses": [
            {"index": p["index"], "error_code": ErrorCode.TOPIC_AUTHORIZATION_FAILED, "base_offset": -1,
             "log_append_time_ms": -1, "log_start_offset": -1, "record_errors": [],
             "error_message": _read_only(served)}
            for p in t["partition_data"]]} for t, served in refused]
        if not request["topic_data"] and request["acks"] != 0:
            return ctx.answer({"responses": answers, "throttle_time_ms": 0})

        async def add(ctx: RequestContext, message: Message) -> None:
            message.body["responses"] += answers
            message.changed()

        if request["acks"] != 0:
            ctx.on_response(add)
        return None


def _log_dir_topic(served: Served, partitions: set[int] | None, version: int) -> dict[str, Any]:
    """An archived topic in the remote tier's log dir (as RemoteLogDirs lists tiered ones)."""
    entries = []
    for p, tp in sorted(served.topic.partitions.items()):
        if partitions is not None and p not in partitions:
            continue
        segments = served.source.archive.store.copied_segments(tp)
        entry: dict[str, Any] = {"partition_index": p, "partition_size": sum(s.segment_size_bytes for s in segments),
                                 "offset_lag": 0, "is_future_key": False}
        if version >= 2:
            entry["_unknown_tags"] = segment_tags(segments)
        entries.append(entry)
    topic: dict[str, Any] = {"name": served.name, "partitions": entries}
    if version >= 2:
        state = "ARCHIVED" if served.source.archive.keeps_data else "READ-REPLICA"
        topic["_unknown_tags"] = {TAG_TIERED_BY: b"proxy", TAG_TIERING_STATE: state.encode()}
    return topic


def _read_only(served: Served) -> str:
    return (f"topic {served.name} is archived: the proxy serves its history from the remote tier, read-only "
            f"({served.source.archive.what})")


def _ends(source: ArchiveSource, tp: TopicIdPartition) -> tuple[int | None, int | None]:
    return source.reader.log_start(tp), source.reader.log_end(tp)


def _metadata_topic(served: Served, nodes: list[int]) -> dict[str, Any]:
    reader, partitions = served.source.reader, []
    for p, tp in sorted(served.topic.partitions.items()):
        leader = nodes[p % len(nodes)]
        ry = reader.log_end(tp)
        partitions.append({"error_code": ErrorCode.NONE, "partition_index": p, "leader_id": leader,
                           "leader_epoch": max(reader.leader_epoch_of(tp, ry), 0) if ry is not None else 0,
                           "replica_nodes": [leader], "isr_nodes": [leader], "offline_replicas": []})
    return {"error_code": ErrorCode.NONE, "name": served.name, "topic_id": served.topic.topic_id.bytes,
            "is_internal": False, "partitions": partitions, "topic_authorized_operations": -2147483648}


async def _list_offset(source: ArchiveSource, tp: TopicIdPartition | None, asked: dict[str, Any]) -> dict[str, Any]:
    p: dict[str, Any] = {"partition_index": asked["partition_index"], "error_code": ErrorCode.NONE,
                         "timestamp": -1, "offset": -1, "leader_epoch": -1, "old_style_offsets": []}
    if tp is None:
        p["error_code"] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        return p
    reader = source.reader
    rx, ry = _ends(source, tp)
    end = ry + 1 if ry is not None else 0
    timestamp = asked["timestamp"]
    found: tuple[int, int] | None = None
    if timestamp in (_LATEST, _EARLIEST_LOCAL, _EARLIEST_PENDING_UPLOAD):
        found = (end, -1)  # no local log: it would start where the remote tier ends, and nothing pends
    elif timestamp == _EARLIEST:
        found = (rx if rx is not None else end, -1)
    elif timestamp == _LATEST_TIERED:
        found = (ry, -1) if ry is not None else None
    elif timestamp == _MAX_TIMESTAMP or timestamp >= 0:
        wanted = reader.max_timestamp(tp) if timestamp == _MAX_TIMESTAMP else timestamp
        if wanted is not None:
            found = await trio.to_thread.run_sync(reader.offset_for_timestamp, tp, wanted,
                                                  limiter=source.reads.limiter)
    if found is not None:
        p["offset"], p["timestamp"] = found
        at = found[0] if found[0] < end else ry
        p["leader_epoch"] = reader.leader_epoch_of(tp, at) if at is not None else -1
    return p


def _holds(ends: tuple[int | None, int | None], offset: int) -> bool:
    rx, ry = ends
    return rx is not None and ry is not None and rx <= offset <= ry
