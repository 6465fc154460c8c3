"""Fetch across both tiers (ListOffsets and OffsetForLeaderEpoch: ``proxy/filters/tiered_offsets.py``).

Fetch: the request goes to the broker (which also checks the client may read the partition);
for a partition the broker answers OFFSET_OUT_OF_RANGE at an offset ``o`` with ``Rx <= o <= Ry``
and ``o`` below the broker's log start, the answer is replaced by batches from the remote tier,
and every tiered partition's ``LogStartOffset`` becomes ``Rx``. Remote reads of one request run in
parallel on worker threads (at most ``remote.log.reader.threads`` at once across the proxy) and
wait at most ``remote.fetch.max.wait.ms`` (a read starts no new segment after half of it, so a
slow store still yields the batches read so far). A read that fails or does not finish in time is
logged and counted as TIERED_STORAGE_NOT_AVAILABLE and answers that partition with
KAFKA_STORAGE_ERROR (56): kafka-python, aiokafka and confluent-kafka all retry it at the same
position (tests/integration/test_remote_outage.py). UNKNOWN_SERVER_ERROR (-1), what Kafka itself
sends, was tried the same way: kafka-python raises it to the application, which then stops
consuming. ``proxy.tiered.storage.not.available.error.code`` overrides the choice.

Where the offset is below the brokers' log start as the copier last saw it (it only moves up), or
that is not known yet (a proxy just started), the remote read starts as the request goes to the
broker, whose answer then decides whether its records are served (proxy/partition_reads.py): a
refused client costs the proxy the read, never its records. The first case is asked as below.

Remote record bytes in answers not yet written to their clients are bounded by
``proxy.remote.fetch.buffer.max.bytes``: a Fetch takes room for all its remote reads at once,
waits for it at most half of ``remote.fetch.max.wait.ms`` (then goes ahead with one chunk's worth
beyond the buffer), and reads no more than the room it got, at least one batch per partition.

With ``proxy.fetch.routing.policy=remote-preferred`` every fetch offset the remote tier holds
(``Rx <= o <= Ry``) is served from it, keeping cold reads off the brokers' disks; the broker is
still asked for the partition (at an offset no log has) so that it authorizes the read.

Fetch sessions (KIP-227) end at the proxy, in the filter before this one
(``proxy/filters/fetch_sessions.py``): by the time a Fetch gets here it is a sessionless full
fetch, so this filter sees every partition's fetch offset on every request. Clients may use Fetch
up to v18: topic names up to v12, topic ids from v13 (looked up among the tiered partitions' ids,
which come from the brokers' Metadata).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

import trio

from protocol.apis import FETCH
from protocol.errors import ErrorCode
from proxy.byte_budget import ByteBudget
from proxy.chain import Answer, Core, Filter, Message, RequestContext
from proxy.partition_reads import THROTTLED, EarlyReads, FetchReads, PartitionKey, ReadEntry
from proxy.topic_counters import TopicCounters
from tiering.cluster_configs import (
    FETCH_MAX_BYTES_PER_SECOND,
    INDEX_CACHE_BYTES,
    READ_KEYS,
    READER_THREADS,
    check_read_settings,
    setting,
)
from tiering.metadata.manager import RemoteLogMetadataManager
from tiering.model import TopicIdPartition
from tiering.quota import UNLIMITED, ByteRateQuota
from tiering.read.reader import RemoteReader
from tiering.service import TieringService
from tiering.storage.api import RemoteStorageError, RemoteStorageManager

log = logging.getLogger(__name__)

# v13+ name topics by id; v16 adds NodeEndpoints, which the address-rewriting filter re-addresses
# in every Fetch answer (its hook runs on the answers this filter rewrites too); v17-18 add tagged
# request fields for replicas only.
FETCH_MAX_VERSION = 18
# A fetch offset beyond any log: the broker answers OFFSET_OUT_OF_RANGE after its authorization check.
_NO_SUCH_OFFSET = 1 << 62
# The longest a broker may hold a Fetch the remote tier answers anyway (its min_bytes becomes 0):
# the remote records meet the client's min_bytes, so waiting for more broker data only delays them.
# Not 0: Tansu answers a 0 ms wait with no partitions at all (tests/UPSTREAMS.md).
_PREFERRED_BROKER_WAIT_MS = 1
# The wire code for "tiered storage not available"; see the module docstring.
TIERED_STORAGE_NOT_AVAILABLE_CODE = ErrorCode.KAFKA_STORAGE_ERROR


def _int(props: Mapping[str, str], key: str, default: int) -> int:
    value = props.get(key)
    return int(value) if value not in (None, "") else default


class TieredReads(Filter):
    name = "tiered-reads"
    apis = frozenset({FETCH})
    version_caps = {FETCH: FETCH_MAX_VERSION}

    def __init__(self, tiering: TieringService, props: Mapping[str, str]) -> None:
        self.tiering = tiering
        self.props = props
        self.reader = RemoteReader.from_properties(tiering.metadata, tiering.storage, props,
                                                   tiering.manager.questions.aborted_transactions_at)
        self.limiter = trio.CapacityLimiter(_int(props, "remote.log.reader.threads", 10))
        # Remote record bytes in answers not yet written: views that may outlive their chunk's
        # place in the cache, so they are bounded apart from it.
        self.buffer = ByteBudget(_int(props, "proxy.remote.fetch.buffer.max.bytes", 16 << 20),
                                 "proxy.remote.fetch.buffer.max.bytes")
        self.max_wait_s = _int(props, "remote.fetch.max.wait.ms", 500) / 1000
        # KIP-956: remote fetch bytes per second across the proxy, archived topics' reads included.
        quota = {key: _int(props, key, default) for key, default in (
            ("remote.log.manager.fetch.max.bytes.per.second", UNLIMITED),
            ("remote.log.manager.fetch.quota.window.num", 11),
            ("remote.log.manager.fetch.quota.window.size.seconds", 1))}
        for key, value in quota.items():
            if value < 1:
                raise ValueError(f"{key} must be at least 1, got {value}")
        self.fetch_quota = ByteRateQuota(*quota.values())
        self.reads = FetchReads(self.reader, self.limiter, self.buffer, self.max_wait_s,
                                tiering.manager.questions.log_ends, self.fetch_quota)
        # The cluster's dynamic defaults of these keys, followed at each Fetch (the readers and
        # reads of archived topics too).
        self._followed: object = None
        self._readers, self._all_reads = [self.reader], [self.reads]
        self.remote_fetches = 0
        self.remote_fetch_bytes = 0
        self.not_available = 0
        self.past_max_bytes = 0  # partitions read but answered empty: the request's max_bytes was reached
        self.read_beside_broker = 0  # partitions served by reads started as their Fetch arrived
        self.by_topic = TopicCounters()  # remote fetch requests, bytes, errors per topic
        self._keyed_from: list[TopicIdPartition] | None = None  # _tiered_by's lookups, and what from
        self._keyed: dict[str, dict[PartitionKey, TopicIdPartition]] = {}
        policy = props.get("proxy.fetch.routing.policy", "broker-first")
        if policy not in ("broker-first", "remote-preferred"):
            raise ValueError(f"proxy.fetch.routing.policy must be broker-first or remote-preferred, not {policy!r}")
        self.remote_preferred = policy == "remote-preferred"
        self.not_available_code = ErrorCode(_int(props, "proxy.tiered.storage.not.available.error.code",
                                                 TIERED_STORAGE_NOT_AVAILABLE_CODE))

    async def on_request(self, ctx: RequestContext) -> Answer | None:
        self.on_fetch(ctx)
        return None

    def start(self, core: Core) -> None:
        core.metrics.budgets.append(self.buffer)

    def archive_reads(self, store: RemoteLogMetadataManager, storage: RemoteStorageManager) -> tuple[RemoteReader, FetchReads]:
        """Reads of archived topics' segments: a reader of its own over ``store`` and ``storage``, sharing
        this filter's threads, remote fetch buffer and wait (they have no log ends to ask of brokers)."""
        reader = RemoteReader.from_properties(store, storage, self.props)
        reads = FetchReads(reader, self.limiter, self.buffer, self.max_wait_s, lambda tps: {}, self.fetch_quota)
        self._readers.append(reader)
        self._all_reads.append(reads)
        return reader, reads

    def follow_cluster_configs(self) -> None:
        """Take the cluster-wide dynamic defaults of the remote reads' keys, when they changed."""
        record = self.tiering.cluster_configs.record()
        if record is self._followed:
            return
        self._followed = record
        props = self.tiering.cluster_configs.effective()
        try:
            check_read_settings(props)
        except ValueError as exc:  # checked when altered: only a newer proxy's record can be refused
            log.error("cluster-wide remote read settings not taken: %s", exc)
            return
        self.max_wait_s = setting(props, "remote.fetch.max.wait.ms", READ_KEYS["remote.fetch.max.wait.ms"]) / 1000
        for reads in self._all_reads:
            reads.max_wait_s = self.max_wait_s
        self.fetch_quota.bound = setting(props, FETCH_MAX_BYTES_PER_SECOND, READ_KEYS[FETCH_MAX_BYTES_PER_SECOND])
        self.limiter.total_tokens = setting(props, READER_THREADS, READ_KEYS[READER_THREADS])
        for reader in self._readers:
            reader.indexes.max_bytes = setting(props, INDEX_CACHE_BYTES, READ_KEYS[INDEX_CACHE_BYTES])

    @property
    def log_end_questions(self) -> int:
        return self.reads.log_end_questions

    def pool_state(self) -> tuple[int, int, int]:
        """(remote reads waiting for a thread, threads busy, threads) of the reader pool."""
        stats = self.limiter.statistics()
        return stats.tasks_waiting, stats.borrowed_tokens, stats.total_tokens

    def stats(self) -> str:
        chunks = self.reader.chunks
        cache = (f", chunk cache hits {chunks.hits} misses {chunks.misses} (hit ratio {chunks.hit_ratio:.3f}), "
                 f"prefetched {chunks.prefetches}") if chunks is not None else ""
        return (f"remote fetches {self.remote_fetches}, remote fetch bytes {self.remote_fetch_bytes}, "
                f"tiered storage not available {self.not_available}, answered empty past max_bytes "
                f"{self.past_max_bytes}, read beside the broker {self.read_beside_broker}, log-end questions "
                f"{self.reads.log_end_questions}{cache}, remote fetch buffer peak "
                f"{self.buffer.peak} bytes, waits {self.buffer.waits}, went ahead without room {self.reads.room_timeouts}")

    def close(self) -> None:
        log.info("tiered reads: %s", self.stats())
        self.reader.close()

    def tiered_by(self, topic_field: str) -> dict[PartitionKey, TopicIdPartition]:
        """Tiered partitions keyed as a Fetch of this version names them: by topic name, or
        (v13+) by topic id. Zero topic ids (noida-db) name no topic: such fetches pass through.
        Built once per change of the metadata (whose readable list stays the same object until
        then), not on every Fetch: thousands of tiered partitions made it milliseconds each."""
        readable = self.tiering.metadata.readable_partitions()
        if readable is not self._keyed_from:
            self._keyed_from = readable
            self._keyed = {
                "topic": {(tp.topic, tp.partition): tp for tp in readable},
                "topic_id": {(tp.topic_id.bytes, tp.partition): tp for tp in readable if tp.topic_id.int != 0},
            }
        return self._keyed[topic_field]

    # --- Fetch -----------------------------------------------------------------------------------

    def on_fetch(self, ctx: RequestContext) -> None:
        self.follow_cluster_configs()
        version, request = ctx.version, ctx.request.body
        if version < 4:
            # Clients this old read message formats v0-v1 only, which the broker converts its own
            # log to; the remote tier holds format v2 batches and the proxy does not convert them.
            return
        replica = request["replica_state"]["replica_id"] if version >= 15 else request.get("replica_id", -1)
        if replica >= 0:
            return  # replication traffic is the brokers' business
        topic_field = "topic_id" if version >= 13 else "topic"
        tiered = self.tiered_by(topic_field)
        manager = self.tiering.manager
        wanted: dict[PartitionKey, tuple[TopicIdPartition, int, int]] = {}
        # The remote tier's to serve, read as the request goes on, and the offset the broker is
        # asked at instead (its answer authorizes the read and carries the partition's log ends).
        preferred: dict[PartitionKey, int] = {}
        maybe: set[PartitionKey] = set()  # asked as they are, read beside too
        for t in request["topics"]:
            for p in t["partitions"]:
                key = (t[topic_field], p["partition"])
                tp = tiered.get(key)
                if tp is None:
                    continue
                offset = p["fetch_offset"]
                wanted[key] = (tp, offset, p["partition_max_bytes"])
                if tp.topic in manager.brokers_hold or not self._remote_holds(tp, offset):
                    continue  # a topic the brokers tier is theirs from their log start
                # Every offset the remote tier holds (remote-preferred), or one below the brokers'
                # log start as the copier last saw it (it only moves up): the broker would only
                # answer OFFSET_OUT_OF_RANGE.
                copier = manager.copiers.get(tp)
                log_start, high_watermark = (copier.log_start, copier.high_watermark) if copier else (-1, -1)
                if self.remote_preferred or offset < log_start:
                    preferred[key] = high_watermark if high_watermark >= max(offset, 0) else _NO_SUCH_OFFSET
                elif copier and log_start < 0:
                    maybe.add(key)  # not seen yet: read in case the broker answers OFFSET_OUT_OF_RANGE
        if not wanted:
            return  # no tiered partition: the broker's answer stands
        if preferred:
            # Asked at the log end the copier saw, for a byte: the broker checks the client may
            # read them and answers their log ends from (almost) nothing on its disks; where that
            # end is unknown, at an offset no log has (its -1s: the log ends are asked beside).
            # No last fetched epoch (v12+): the broker would answer a diverging epoch below the
            # probe, and the client drop the remote records and fetch them again, forever.
            # (Copies: the partition entries may be a fetch session's own.)
            for t in request["topics"]:
                t["partitions"] = [
                    {**p, "fetch_offset": preferred[key], "last_fetched_epoch": -1, "partition_max_bytes": 1}
                    if (key := (t[topic_field], p["partition"])) in preferred else p for p in t["partitions"]]
            # A broker answering OFFSET_OUT_OF_RANGE does so at once; one asked at its log end
            # would hold the request for more data (Kafka 4.4: 3-7 ms for a 1 ms wait, pinned), or
            # (Tansu) for its whole max_wait_ms.
            request["max_wait_ms"] = min(request["max_wait_ms"], _PREFERRED_BROKER_WAIT_MS)
            request["min_bytes"] = 0
            ctx.request.changed()
        budget = request.get("max_bytes", 0x7FFFFFFF)
        read_committed = request.get("isolation_level", 0) == 1
        early = None
        if (preferred or maybe) and ctx.start_soon is not None:
            # Read while the broker is asked (a fresh proxy's first record waited for one, then the other).
            early = self.reads.start(ctx.start_soon, ctx.held, [(key, *wanted[key]) for key in [*preferred, *maybe]],
                                     budget, read_committed, [wanted[key][0] for key in maybe] +
                                     [wanted[key][0] for key, probe in preferred.items() if probe == _NO_SUCH_OFFSET])

        async def rewrite(ctx: RequestContext, response: Message) -> None:
            await self._rewrite_fetch(ctx, response, wanted, budget, read_committed, preferred, topic_field, early)

        ctx.on_response(rewrite)

    def _remote_holds(self, tp: TopicIdPartition, offset: int) -> bool:
        rx, ry = self.reader.log_start(tp), self.reader.log_end(tp)
        return rx is not None and ry is not None and rx <= offset <= ry

    async def _rewrite_fetch(self, ctx: RequestContext, message: Message,
                             wanted: dict[PartitionKey, tuple[TopicIdPartition, int, int]], budget: int,
                             read_committed: bool, preferred: dict[PartitionKey, int], topic_field: str,
                             early: EarlyReads | None) -> None:
        if early is not None:
            await early.done.wait()  # first: what it holds must be in ctx.held before the answer goes
            if early.error is not None:
                raise early.error
        version = ctx.version
        response = message.body
        if response.get("error_code", 0) != ErrorCode.NONE:
            return  # a top-level error: the whole answer stands
        changed = False
        to_read: list[tuple[dict[str, Any], PartitionKey, TopicIdPartition, int, int]] = []
        to_clean: list[tuple[TopicIdPartition, int, dict[str, Any]]] = []
        used = 0
        for topic in response["responses"]:
            for p in topic["partitions"]:
                key = (topic[topic_field], p["partition_index"])
                if key not in preferred:  # a probe's byte goes
                    used += len(p["records"]) if p.get("records") is not None else 0
                entry = wanted.get(key)
                if entry is None:
                    continue
                tp, offset, partition_max = entry
                rx, ry = self.reader.log_start(tp), self.reader.log_end(tp)
                served = rx is not None and ry is not None and rx <= offset <= ry
                log_start = p.get("log_start_offset", -1)
                if key in preferred:
                    # Asked at the log end (no error), or at an offset no log has (OFFSET_OUT_OF_RANGE;
                    # Tansu: no error, no records). Any other answer (not authorized, not leader)
                    # stands, but never what the broker had at the probe: that offset is not the
                    # client's, whose own left the remote tier meanwhile (Kafka's answer follows).
                    if p["error_code"] in (ErrorCode.NONE, ErrorCode.OFFSET_OUT_OF_RANGE) and served:
                        to_read.append((p, key, tp, offset, partition_max))
                    elif p["error_code"] == ErrorCode.NONE:
                        p["error_code"], p["records"] = ErrorCode.OFFSET_OUT_OF_RANGE, b""
                        changed = True
                elif served and p["error_code"] == ErrorCode.OFFSET_OUT_OF_RANGE and (log_start < 0 or offset < log_start):
                    to_read.append((p, key, tp, offset, partition_max))
                elif rx is not None and read_committed and p["error_code"] == ErrorCode.NONE \
                        and p.get("aborted_transactions"):
                    to_clean.append((tp, offset, p))
                if rx is None:
                    continue
                if version >= 5 and p["error_code"] in (ErrorCode.NONE, ErrorCode.OFFSET_OUT_OF_RANGE) \
                        and log_start > rx:
                    p["log_start_offset"] = rx
                    changed = True
        if to_clean:
            try:
                changed |= await trio.to_thread.run_sync(
                    lambda: any([self._drop_ended_transactions(*entry) for entry in to_clean]), limiter=self.limiter)
            except RemoteStorageError as exc:
                log.warning("TIERED_STORAGE_NOT_AVAILABLE: transaction indexes of %s: %s", to_clean[0][0], exc)
        results = dict(early.results) if early is not None else {}
        holdings = [early.holding] if early is not None and early.holding is not None else []
        late: list[ReadEntry] = [(key, tp, offset, partition_max) for _, key, tp, offset, partition_max in to_read if key not in results]
        if late:
            late_results, holding = await self.reads.read(ctx.held, late, budget - used, read_committed)
            results.update(late_results)
            holdings.append(holding)
        # The log ends of partitions whose broker answer had none (probed at an offset no log has,
        # or whose log end moved back since the copier saw it) and whose last answer is stale.
        unknown = self.reads.stale(tp for p, _, tp, _, _ in to_read if p.get("high_watermark", -1) < 0)
        if unknown:
            await self.reads.ask_log_ends(unknown)
        # A read returns at least one batch, maybe more than its share. Past max_bytes the rest
        # answer empty, as Kafka's do (5,000 batches of 20 KB: 104 MB for 50 MiB asked).
        room, kept = budget - used, 0
        for p, key, tp, offset, _ in to_read:
            changed = True
            result = results[key]
            if early is not None and key in early.results:
                self.read_beside_broker += 1
            if isinstance(result, BaseException):
                self.not_available += 1
                self.by_topic.add(tp.topic, requests=1, errors=1)
                log.warning("TIERED_STORAGE_NOT_AVAILABLE: reading %s at %d: %s", tp, offset, result)
                # Empty, not null: librdkafka rejects a null record set ("invalid MessageSetSize -1").
                p["error_code"], p["records"] = self.not_available_code, b""
                continue
            if result is THROTTLED:  # over the remote fetch quota: no records, no error (KIP-956)
                p["error_code"], p["records"] = ErrorCode.NONE, b""
                self._fill_log_ends(p, tp, version)
                continue
            if result is None:  # deleted since: OFFSET_OUT_OF_RANGE, the broker's or in place of its probe's
                p["error_code"], p["records"] = ErrorCode.OFFSET_OUT_OF_RANGE, b""
                continue
            fits = result.size <= room or (kept == 0 and used == 0)
            p["error_code"], p["records"] = ErrorCode.NONE, result.records if fits else b""
            self._fill_log_ends(p, tp, version)
            if version >= 4:
                p["aborted_transactions"] = [{"producer_id": pid, "first_offset": first} for pid, first in
                                             (result.aborted if fits else [])] if read_committed else None
            if not fits:
                self.past_max_bytes += 1
                continue
            room, kept = room - result.size, kept + result.size
            self.remote_fetches += 1
            self.remote_fetch_bytes += result.size
            self.by_topic.add(tp.topic, requests=1, bytes=result.size)
        for holding in holdings:  # hold what the answer keeps; reads it does not serve go back
            holding.resize(min(holding.nbytes, kept))
            kept -= holding.nbytes
        if changed:
            message.changed()

    def _fill_log_ends(self, p: dict[str, Any], tp: TopicIdPartition, version: int) -> None:
        """A remote answer's high watermark, last stable offset and log start (the remote log
        start) where the brokers' OFFSET_OUT_OF_RANGE left -1: clients take them for lag and for
        the end of the partition (kcat -e, enable.partition.eof)."""
        ends = self.reads.log_ends(tp)
        if ends is not None:
            p["high_watermark"] = max(p.get("high_watermark", -1), ends[0])
            if version >= 4:
                p["last_stable_offset"] = max(p.get("last_stable_offset", -1), ends[1])
        rx = self.reader.log_start(tp)
        if version >= 5 and rx is not None and p.get("log_start_offset", -1) < 0:
            p["log_start_offset"] = rx

    def _drop_ended_transactions(self, tp: TopicIdPartition, offset: int, p: dict[str, Any]) -> bool:
        """Remove from a broker's answer the aborted transactions that ended before the fetch
        offset. Kafka never lists them, but noida-db lists every aborted transaction of the
        partition, and a consumer then skips the committed transactions of the same producer
        that follow. The remote transaction indexes say which ones ended; True if any was dropped."""
        ended = self.reader.aborted_before(tp, offset)
        kept = [t for t in p["aborted_transactions"] if (t["producer_id"], t["first_offset"]) not in ended]
        if len(kept) == len(p["aborted_transactions"]):
            return False
        p["aborted_transactions"] = kept
        return True
