"""ListOffsets and OffsetForLeaderEpoch across both tiers.

ListOffsets is offered v1-v11 whatever the broker supports; a request is asked of the broker at
the nearest version it offers, and the proxy answers what that version cannot:

- EARLIEST (-2): ``Rx`` when anything is tiered below the broker's log start;
- EARLIEST_LOCAL (-4): the broker's log start ``Lx`` (the broker is asked EARLIEST);
- LATEST_TIERED (-5): ``Ry``, or -1 when nothing is tiered (the broker is asked LATEST);
- EARLIEST_PENDING_UPLOAD (-6, KIP-1023): the first offset the remote tier does not hold yet,
  ``max(Ry + 1, Lx)``, or ``Lx`` when nothing is tiered, as Kafka's ``UnifiedLog`` answers it; -1
  for a topic nobody tiers (the broker is asked EARLIEST);
- MAX_TIMESTAMP (-3) and timestamps: the remote time indexes first.

A topic the brokers tier themselves (``tiering.topic_owner``) gets their own -4, -5 and -6 where
their version takes them. Before ListOffsets v11 a broker cannot say -6: for such a topic it is
asked LATEST_TIERED (v9+), and ``Ry + 1`` is answered.

OffsetForLeaderEpoch: where the broker no longer knows an epoch (its log start passed it), the
remote segments' leader-epoch data answers.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import trio

from protocol.apis import LIST_OFFSETS, OFFSET_FOR_LEADER_EPOCH
from protocol.errors import ErrorCode
from proxy.chain import Answer, Filter, Message, RequestContext
from proxy.partition_reads import PartitionKey
from tiering.model import TopicIdPartition
from tiering.read.reader import RemoteReader, earliest_offset
from tiering.service import TieringService
from tiering.topic_owner import TieredBy

# ListOffsets' special timestamps.
LATEST = -1
EARLIEST = -2
MAX_TIMESTAMP = -3
EARLIEST_LOCAL = -4  # the brokers' log start, Lx
LATEST_TIERED = -5  # the last tiered offset, Ry
EARLIEST_PENDING_UPLOAD = -6  # the first offset not tiered yet (KIP-1023)
LIST_OFFSETS_MAX_VERSION = 11  # offered whatever the broker supports: the proxy answers -4, -5 and -6
# What a broker answers itself from each version on, for a topic it tiers.
_BROKER_ANSWERS_FROM = {EARLIEST_LOCAL: 8, LATEST_TIERED: 9, EARLIEST_PENDING_UPLOAD: 11}
# What the broker is asked instead of a special timestamp the proxy answers.
_ASKED_INSTEAD = {EARLIEST_LOCAL: EARLIEST, LATEST_TIERED: LATEST, EARLIEST_PENDING_UPLOAD: EARLIEST}


def list_offsets_upstream_version(version: int, broker: tuple[int, int]) -> int:
    """The version a ListOffsets at ``version`` asks the broker at: the nearest the broker offers
    (translated both ways; decoding fills the fields a version lacks with their defaults)."""
    low, high = broker
    return max(low, min(version, high))


def earliest_pending_upload(ry: int | None, broker_log_start: int) -> int:
    """KIP-1023's -6 for a partition the proxy tiers: the first offset past ``Ry``, or the brokers'
    log start if that is further (offsets below it will never be uploaded); with nothing tiered,
    the log start."""
    return broker_log_start if ry is None else max(ry + 1, broker_log_start)


class TieredOffsets(Filter):
    name = "tiered-offsets"
    apis = frozenset({LIST_OFFSETS, OFFSET_FOR_LEADER_EPOCH})
    version_overrides = {LIST_OFFSETS: (1, LIST_OFFSETS_MAX_VERSION)}

    def __init__(self, tiering: TieringService, reader: RemoteReader, limiter: trio.CapacityLimiter,
                 tiered_by: Callable[[str], dict[PartitionKey, TopicIdPartition]]) -> None:
        self.tiering = tiering
        self.reader = reader
        self.limiter = limiter  # the remote reader's threads, shared with Fetch
        self.tiered_by = tiered_by

    async def on_request(self, ctx: RequestContext) -> Answer | None:
        if ctx.api.key == LIST_OFFSETS:
            self.on_list_offsets(ctx)
        else:
            self.on_offset_for_leader_epoch(ctx)
        return None

    # --- ListOffsets -----------------------------------------------------------------------------

    def on_list_offsets(self, ctx: RequestContext) -> None:
        version = ctx.version
        if version < 1:
            return
        request = ctx.request.body
        upstream_version = list_offsets_upstream_version(version, ctx.broker_versions.get(LIST_OFFSETS, (0, 0)))
        tiered = self.tiered_by("topic")
        brokers_hold = self.tiering.manager.brokers_hold
        asked: dict[tuple[str, int], int] = {}
        brokers_ry: set[tuple[str, int]] = set()  # -6 asked as the brokers' own -5
        translated = False
        for t in request["topics"]:
            for p in t["partitions"]:
                key, timestamp = (t["name"], p["partition_index"]), p["timestamp"]
                if t["name"] in brokers_hold and timestamp in _BROKER_ANSWERS_FROM:
                    if upstream_version >= _BROKER_ANSWERS_FROM[timestamp]:
                        continue  # the broker tiers it and can say
                    if timestamp == EARLIEST_PENDING_UPLOAD and upstream_version >= 9:
                        asked[key], p["timestamp"], translated = timestamp, LATEST_TIERED, True
                        brokers_ry.add(key)
                        continue  # its Ry, plus one
                if key in tiered or timestamp in _ASKED_INSTEAD:
                    asked[key] = timestamp
                if timestamp in _ASKED_INSTEAD:  # the broker is asked what it can answer
                    p["timestamp"], translated = _ASKED_INSTEAD[timestamp], True
        if not asked and upstream_version == version:
            return
        if upstream_version != version:
            ctx.send_as(upstream_version)
        if translated:
            ctx.request.changed()
        if not asked:
            return

        async def rewrite(ctx: RequestContext, response: Message) -> None:
            changed = False
            for t in response.body["topics"]:
                for p in t["partitions"]:
                    key = (t["name"], p["partition_index"])
                    if key not in asked or p["error_code"] != ErrorCode.NONE:
                        continue
                    if key in brokers_ry:
                        changed |= self._brokers_pending_upload(p)
                    else:
                        changed |= await self._answer_offset(t["name"], tiered.get(key), asked[key], p)
            if changed:
                response.changed()

        ctx.on_response(rewrite)

    @staticmethod
    def _brokers_pending_upload(p: dict[str, Any]) -> bool:
        """-6 of a topic the brokers tier, asked as LATEST_TIERED of a broker before v11."""
        if p["offset"] >= 0:
            p["offset"] += 1
        else:  # nothing tiered, or the leader does not know yet: Kafka's answer is -1 too
            p["leader_epoch"] = -1
        p["timestamp"] = -1
        return True

    async def _answer_offset(self, topic: str, tp: TopicIdPartition | None, timestamp: int, p: dict[str, Any]) -> bool:
        """Fill one partition's ListOffsets answer from both tiers; True if it changed. The broker
        was asked EARLIEST for EARLIEST_LOCAL and EARLIEST_PENDING_UPLOAD, LATEST for LATEST_TIERED."""
        if timestamp == EARLIEST_LOCAL:
            return True  # the broker's log start is Lx
        if timestamp == EARLIEST_PENDING_UPLOAD:
            if self.tiering.manager.tiered_by(topic) != TieredBy.PROXY:
                p["offset"], p["timestamp"], p["leader_epoch"] = -1, -1, -1  # not tiered (now): nothing pends
                return True
            ry = self.reader.log_end(tp) if tp is not None else None
            offset = earliest_pending_upload(ry, p["offset"])
            if offset != p["offset"] and tp is not None and ry is not None:
                epoch = self.reader.leader_epoch_of(tp, ry)
                p["offset"], p["leader_epoch"] = offset, epoch if epoch is not None else -1
            p["timestamp"] = -1
            return True
        if timestamp == LATEST_TIERED:
            ry = self.reader.log_end(tp) if tp is not None else None
            p["offset"], p["timestamp"] = (ry, -1) if ry is not None else (-1, -1)
            p["leader_epoch"] = self.reader.leader_epoch_of(tp, ry) if tp is not None and ry is not None else -1
            return True
        if tp is None:
            return False
        if timestamp == EARLIEST:
            rx = self.reader.log_start(tp)
            if rx is None or earliest_offset(rx, p["offset"]) == p["offset"]:
                return False  # the brokers' log start stands
            p["offset"], p["timestamp"], p["leader_epoch"] = rx, -1, self.reader.leader_epoch_of(tp, rx)
            return True
        if timestamp == MAX_TIMESTAMP:
            remote_max = self.reader.max_timestamp(tp)
            if remote_max is None or remote_max < p["timestamp"]:
                return False
            timestamp = remote_max  # the first record carrying it, which is in the remote tier
        elif timestamp < 0:
            return False
        found = await trio.to_thread.run_sync(self.reader.offset_for_timestamp, tp, timestamp, limiter=self.limiter)
        if found is None or not (p["offset"] < 0 or found[0] < p["offset"]):
            return False
        p["offset"], p["timestamp"] = found
        p["leader_epoch"] = self.reader.leader_epoch_of(tp, found[0])
        return True

    # --- OffsetForLeaderEpoch --------------------------------------------------------------------

    def on_offset_for_leader_epoch(self, ctx: RequestContext) -> None:
        """Clients validate their position with the leader epoch of the last record they read. A
        broker whose log start has passed an epoch no longer knows it (it answers an undefined
        end offset); the remote tier's leader-epoch data answers instead."""
        request = ctx.request.body
        if request.get("replica_id", -1) >= 0:
            return
        tiered = self.tiered_by("topic")
        asked = {(t["topic"], p["partition"]): p["leader_epoch"]
                 for t in request["topics"] for p in t["partitions"] if (t["topic"], p["partition"]) in tiered}
        if not asked:
            return

        async def rewrite(ctx: RequestContext, response: Message) -> None:
            for t in response.body["topics"]:
                for p in t["partitions"]:
                    key = (t["topic"], p["partition"])
                    if key not in asked or p["error_code"] != ErrorCode.NONE or p["end_offset"] >= 0:
                        continue
                    found = self.reader.end_offset_for_epoch(tiered[key], asked[key])
                    if found is not None:
                        p["leader_epoch"], p["end_offset"] = found
                        response.changed()

        ctx.on_response(rewrite)
