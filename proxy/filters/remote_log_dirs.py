"""The remote tier as a log dir: the proxy's part of DescribeLogDirs (KIP-1187's remote sizes).

Beside the brokers' own log dirs, the answer gains one for the remote tier (``remote:`` + storage
URI): per partition its remote bytes and tiering lag, and in tagged fields only our ``describe``
reads, segment counts, data-loss and divergence ranges, KIP-950 states, who tiers each topic and
each topic's last hour of cost. Where the brokers offer no DescribeLogDirs version the client
speaks, the proxy answers with the remote tier's dir alone.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from protocol.apis import DESCRIBE_LOG_DIRS
from protocol.errors import ErrorCode
from protocol.remote_log_dir import (
    DATA_LOSS,
    DIVERGENCE,
    REMOTE_LOG_DIR_PREFIX,
    TAG_DATA_LOSS,
    TAG_DIVERGENCE,
    TAG_TIERED_BY,
    TAG_TIERING_STATE,
)
from proxy.chain import Answer, Filter, Message, RequestContext
from tiering.model import TopicIdPartition
from tiering.service import TieringService
from tiering.status import listed, owner_text, segment_tags, state_text
from tiering.topic_costs import TopicCosts


class RemoteLogDirs(Filter):
    name = "remote-log-dirs"
    apis = frozenset({DESCRIBE_LOG_DIRS})
    version_overrides = {DESCRIBE_LOG_DIRS: (1, 4)}  # answered even where the broker has none

    def __init__(self, tiering: TieringService, props: Mapping[str, str]) -> None:
        self.tiering = tiering
        self.costs = TopicCosts.from_config(tiering.storage.requests, tiering.metadata, props)

    async def on_request(self, ctx: RequestContext) -> Answer | None:
        request = ctx.request.body
        wanted = None if request["topics"] is None else {
            (t["topic"], p) for t in request["topics"] for p in t["partitions"]}
        version = ctx.version
        low, high = ctx.broker_versions.get(DESCRIBE_LOG_DIRS, (0, -1))
        if not low <= version <= high:  # the broker cannot answer: the remote tier's dir alone
            body = {"throttle_time_ms": 0, "error_code": 0, "results": [self._remote_log_dir(wanted, version)]}
            return ctx.answer(body)

        async def rewrite(ctx: RequestContext, message: Message) -> None:
            response = message.body
            if response.get("error_code", ErrorCode.NONE) != ErrorCode.NONE:
                return  # the broker refused (e.g. CLUSTER_AUTHORIZATION_FAILED): so does the remote tier
            response["results"].append(self._remote_log_dir(wanted, version))
            message.changed()

        ctx.on_response(rewrite)
        return None

    def _remote_log_dir(self, wanted: set[tuple[str, int]] | None, version: int) -> dict[str, Any]:
        metadata = self.tiering.metadata
        lag = self.tiering.manager.lag()
        partitions_listed, topics_listed = listed(self.tiering, lag)
        wanted_topics = None if wanted is None else {topic for topic, _ in wanted}
        # Topics being disabled, disabled, or tiered by the brokers may have no partitions here:
        # listed with none, so that their state still shows.
        by_topic: dict[str, list[TopicIdPartition]] = {
            name: [] for name in topics_listed if wanted_topics is None or name in wanted_topics}
        for tp in partitions_listed:
            if wanted is None or (tp.topic, tp.partition) in wanted:
                by_topic.setdefault(tp.topic, []).append(tp)
        topics = []
        total = 0
        for name, tps in sorted(by_topic.items()):
            partitions = []
            for tp in sorted(tps, key=lambda t: t.partition):
                segments = metadata.copied_segments(tp)
                size = sum(s.segment_size_bytes for s in segments)
                total += size
                entry: dict[str, Any] = {"partition_index": tp.partition, "partition_size": size,
                                         "offset_lag": lag.get(tp, 0), "is_future_key": False}
                if version >= 2:
                    entry["_unknown_tags"] = segment_tags(segments)
                    lost = metadata.data_loss(tp)
                    if lost:
                        entry["_unknown_tags"][TAG_DATA_LOSS] = DATA_LOSS.pack(
                            sum(last - first + 1 for first, last in lost), len(lost))
                    diverged = metadata.divergences(tp)
                    if diverged:
                        entry["_unknown_tags"][TAG_DIVERGENCE] = DIVERGENCE.pack(
                            sum(d.last_offset - d.first_offset + 1 for d in diverged), len(diverged))
                partitions.append(entry)
            topic: dict[str, Any] = {"name": name, "partitions": partitions}
            if version >= 2:
                text = state_text(self.tiering, name)
                topic["_unknown_tags"] = {TAG_TIERED_BY: owner_text(self.tiering, name).encode()}
                topic["_unknown_tags"].update(self.costs.tags(name))  # its last hour of cost
                if text != "-":
                    topic["_unknown_tags"][TAG_TIERING_STATE] = text.encode()
            topics.append(topic)
        return {"error_code": 0, "log_dir": f"{REMOTE_LOG_DIR_PREFIX}{self.tiering.storage_uri}", "topics": topics,
                "total_bytes": total, "usable_bytes": -1, "is_cordoned": False}

