"""Fetch and ListOffsets across both tiers.

Fetch: the request goes to the broker (which also checks the client may read the partition);
for a partition the broker answers OFFSET_OUT_OF_RANGE at an offset ``o`` with ``Rx <= o <= Ry``
and ``o`` below the broker's log start, the answer is replaced by batches from the remote tier,
and every tiered partition's ``LogStartOffset`` becomes ``Rx``. Remote reads of one request run in
parallel on worker threads (at most ``remote.log.reader.threads`` at once across the proxy) and
wait at most ``remote.fetch.max.wait.ms``; a read that does not finish in time answers that
partition with no records (the client fetches again), a failed one with KAFKA_STORAGE_ERROR,
logged and counted as TIERED_STORAGE_NOT_AVAILABLE.

Fetch sessions (KIP-227) end at the proxy (``proxy/fetch_sessions.py``): clients keep their
sessions with the proxy, and the broker is sent sessionless full fetches, so the proxy knows
every partition's fetch offset on every request. Clients may use Fetch up to v12 (topics by
name).

ListOffsets: EARLIEST (-2) answers ``Rx`` when anything is tiered; a timestamp is looked up in
the remote time indexes first.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import trio

from protocol.apis import FETCH, LIST_OFFSETS, Api
from protocol.errors import ErrorCode
from protocol.headers import decode_request_header, decode_response_header, encode_response_header
from proxy.connection import ClientConnection, Forward
from proxy.fetch_sessions import (
    FINAL_EPOCH,
    NO_SESSION,
    FetchContext,
    FetchSessionCache,
    FetchSessionError,
    upstream_topics,
)
from tiering.model import TopicIdPartition
from tiering.reader import RemoteRead, RemoteReader
from tiering.service import TieringService
from tiering.storage import RemoteStorageError

if TYPE_CHECKING:
    from proxy.server import Proxy

log = logging.getLogger(__name__)

EARLIEST = -2
FETCH_MAX_VERSION = 12  # topic names; v13+ name topics by id
TIERED_STORAGE_NOT_AVAILABLE_CODE = ErrorCode.KAFKA_STORAGE_ERROR


def _int(props: Mapping[str, str], key: str, default: int) -> int:
    value = props.get(key)
    return int(value) if value not in (None, "") else default


class TieredReads:
    def __init__(self, proxy: Proxy, tiering: TieringService, props: Mapping[str, str]) -> None:
        self.tiering = tiering
        self.reader = RemoteReader(tiering.metadata, tiering.storage,
                                   _int(props, "remote.log.index.file.cache.total.size.bytes", 1 << 30))
        self.limiter = trio.CapacityLimiter(_int(props, "remote.log.reader.threads", 10))
        self.max_wait_s = _int(props, "remote.fetch.max.wait.ms", 500) / 1000
        self.remote_fetches = 0
        self.remote_fetch_bytes = 0
        self.not_available = 0
        self.sessions = FetchSessionCache(_int(props, "max.incremental.fetch.session.cache.slots", 1000),
                                          _int(props, "min.incremental.fetch.session.eviction.ms", 120_000))
        proxy.register_hook(FETCH, self.on_fetch)
        proxy.register_hook(LIST_OFFSETS, self.on_list_offsets)
        proxy.version_caps[FETCH] = FETCH_MAX_VERSION

    def _tiered(self) -> dict[tuple[str, int], TopicIdPartition]:
        return {(tp.topic, tp.partition): tp for tp in self.tiering.metadata.partitions()}

    # --- Fetch -----------------------------------------------------------------------------------

    async def on_fetch(self, conn: ClientConnection, spec: Api, version: int, corr: int,
                       view: memoryview) -> bytes | Forward | None:
        header, pos = decode_request_header(view, spec.request_header_version(version))
        request = spec.request_codec(version).decode(view[pos:])
        if request.get("replica_id", -1) >= 0:
            return None  # replication traffic is the brokers' business
        tiered = self._tiered()
        context: FetchContext | None = None
        partitions = [((t["topic"], p["partition"]), p) for t in request["topics"] for p in t["partitions"]]
        if version >= 7 and (request["session_id"] != NO_SESSION or request["session_epoch"] != FINAL_EPOCH):
            try:
                context = self.sessions.context(conn.node_id, request, "topic")
            except FetchSessionError as e:
                log.info("client %s: %s: %s", conn.peer, e.code.name, e)
                return self._fetch_error(spec, version, corr, e.code)
            partitions = context.partitions
        wanted: dict[tuple[str, int], tuple[TopicIdPartition, int, int]] = {}
        for (topic, partition), p in partitions:
            tp = tiered.get((str(topic), partition))
            if tp is not None:
                wanted[(tp.topic, partition)] = (tp, p["fetch_offset"], p["partition_max_bytes"])
        if context is None and not wanted:
            return None  # a sessionless fetch of untiered partitions passes through untouched
        frame: bytes | memoryview = view
        if context is not None:
            # Upstream, every request is a sessionless full fetch of the whole session.
            request["session_id"], request["session_epoch"] = NO_SESSION, FINAL_EPOCH
            request["forgotten_topics_data"] = []
            request["topics"] = upstream_topics(partitions, "topic")
            frame = bytes(view[:pos]) + spec.request_codec(version).encode(request)
        budget = request.get("max_bytes", 0x7FFFFFFF)
        read_committed = request.get("isolation_level", 0) == 1

        async def rewrite(response_frame: memoryview, _corr: int) -> bytes | memoryview:
            return await self._rewrite_fetch(spec, version, response_frame, wanted, budget, read_committed,
                                             context)

        return Forward(frame, rewrite)

    @staticmethod
    def _fetch_error(spec: Api, version: int, corr: int, code: ErrorCode) -> bytes:
        codec = spec.response_codec(version)
        body = codec.default()
        body["error_code"] = code
        return encode_response_header(corr, spec.response_header_version(version)) + codec.encode(body)

    async def _rewrite_fetch(self, spec: Api, version: int, frame: memoryview,
                             wanted: dict[tuple[str, int], tuple[TopicIdPartition, int, int]], budget: int,
                             read_committed: bool, context: FetchContext | None) -> bytes | memoryview:
        _, pos = decode_response_header(frame, spec.response_header_version(version))
        codec = spec.response_codec(version)
        response = codec.decode(frame[pos:])
        if response.get("error_code", 0) != ErrorCode.NONE:
            return frame  # session id 0: a client in a session starts over, as after a broker error
        changed = context is not None
        to_read: list[tuple[dict[str, Any], TopicIdPartition, int, int]] = []
        used = 0
        for topic in response["responses"]:
            for p in topic["partitions"]:
                used += len(p["records"]) if p.get("records") is not None else 0
                entry = wanted.get((topic["topic"], p["partition_index"]))
                if entry is None:
                    continue
                tp, offset, partition_max = entry
                rx, ry = self.reader.log_start(tp), self.reader.log_end(tp)
                if rx is None or ry is None:
                    continue
                log_start = p.get("log_start_offset", -1)
                if (p["error_code"] == ErrorCode.OFFSET_OUT_OF_RANGE and rx <= offset <= ry
                        and (log_start < 0 or offset < log_start)):
                    to_read.append((p, tp, offset, partition_max))
                if version >= 5 and p["error_code"] in (ErrorCode.NONE, ErrorCode.OFFSET_OUT_OF_RANGE) \
                        and log_start > rx:
                    p["log_start_offset"] = rx
                    changed = True
        if to_read:
            share = max((budget - used) // len(to_read), 0)
            results: dict[int, RemoteRead | BaseException | None] = {}

            async def read_one(i: int, tp: TopicIdPartition, offset: int, limit: int) -> None:
                try:
                    results[i] = await trio.to_thread.run_sync(
                        lambda: self.reader.read(tp, offset, limit, read_committed=read_committed),
                        limiter=self.limiter, abandon_on_cancel=True)
                except RemoteStorageError as exc:
                    results[i] = exc

            with trio.move_on_after(self.max_wait_s):
                async with trio.open_nursery() as nursery:
                    for i, (_, tp, offset, partition_max) in enumerate(to_read):
                        nursery.start_soon(read_one, i, tp, offset, min(partition_max, share))
            for i, (p, tp, offset, _) in enumerate(to_read):
                result = results.get(i)
                changed = True
                if isinstance(result, BaseException):
                    self.not_available += 1
                    log.warning("TIERED_STORAGE_NOT_AVAILABLE: reading %s at %d: %s", tp, offset, result)
                    p["error_code"], p["records"] = TIERED_STORAGE_NOT_AVAILABLE_CODE, None
                    continue
                p["error_code"] = ErrorCode.NONE
                p["records"] = result.records if result is not None else b""
                if version >= 4:
                    p["aborted_transactions"] = [
                        {"producer_id": t.producer_id, "first_offset": t.first_offset} for t in result.aborted
                    ] if result is not None and read_committed else ([] if read_committed else None)
                if result is None:
                    log.info("remote read of %s at %d did not finish in %.1fs", tp, offset, self.max_wait_s)
                else:
                    self.remote_fetches += 1
                    self.remote_fetch_bytes += len(result.records)
        if not changed:
            return frame
        if context is not None:
            context.shape_response(response, "topic")
        return bytes(frame[:pos]) + codec.encode(response)

    # --- ListOffsets -----------------------------------------------------------------------------

    async def on_list_offsets(self, conn: ClientConnection, spec: Api, version: int, corr: int,
                              view: memoryview) -> bytes | Forward | None:
        if version < 1:
            return None
        _, pos = decode_request_header(view, spec.request_header_version(version))
        request = spec.request_codec(version).decode(view[pos:])
        tiered = self._tiered()
        asked = {(t["name"], p["partition_index"]): p["timestamp"]
                 for t in request["topics"] for p in t["partitions"] if (t["name"], p["partition_index"]) in tiered}
        if not asked:
            return None

        async def rewrite(frame: memoryview, _corr: int) -> bytes | memoryview:
            _, rpos = decode_response_header(frame, spec.response_header_version(version))
            codec = spec.response_codec(version)
            response = codec.decode(frame[rpos:])
            changed = False
            for t in response["topics"]:
                for p in t["partitions"]:
                    key = (t["name"], p["partition_index"])
                    if key not in asked or p["error_code"] != ErrorCode.NONE:
                        continue
                    tp, timestamp = tiered[key], asked[key]
                    if timestamp == EARLIEST:
                        rx = self.reader.log_start(tp)
                        if rx is not None and (p["offset"] < 0 or rx < p["offset"]):
                            p["offset"], p["timestamp"] = rx, -1
                            changed = True
                    elif timestamp >= 0:
                        found = await trio.to_thread.run_sync(self.reader.offset_for_timestamp, tp, timestamp,
                                                              limiter=self.limiter)
                        if found is not None and (p["offset"] < 0 or found[0] < p["offset"]):
                            p["offset"], p["timestamp"] = found
                            changed = True
            return bytes(frame[:rpos]) + codec.encode(response) if changed else frame

        return Forward(view, rewrite)


