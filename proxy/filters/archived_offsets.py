"""Consumer groups' offsets in archived topics (``proxy/filters/archived_topics.py``): Kafka refuses
an offset for a topic it does not have, so OffsetCommit and OffsetFetch of their partitions are
taken out of the requests the broker gets and answered from the metadata store (apiKey 68
records), which every proxy of the cluster reads. A classic consumer group commits and resumes
there as on any topic. The group's generation is not checked for these commits (the broker checks
it for the others in the same request)."""

from __future__ import annotations

import logging
import time
from typing import Any

import trio

from protocol.apis import OFFSET_COMMIT, OFFSET_FETCH
from protocol.errors import ErrorCode
from proxy.archive_sources import ArchiveSource, Served, finder, served_topics
from proxy.chain import Answer, Filter, Message, RequestContext
from tiering.metadata.manager import RemoteLogMetadataManager
from tiering.model import ArchivedGroupOffset

log = logging.getLogger(__name__)


class ArchivedGroupOffsets(Filter):
    name = "archived-group-offsets"
    apis = frozenset({OFFSET_COMMIT, OFFSET_FETCH})

    def __init__(self, sources: list[ArchiveSource], offsets: RemoteLogMetadataManager) -> None:
        self.sources = sources
        self.offsets = offsets  # where they are kept

    async def on_request(self, ctx: RequestContext) -> Answer | None:
        topics = served_topics(self.sources)
        if not topics:
            return None
        if ctx.api.key == OFFSET_COMMIT:
            return await self._on_offset_commit(ctx, topics)
        self._on_offset_fetch(ctx, topics)
        return None

    async def _on_offset_commit(self, ctx: RequestContext, topics: dict[str, Served]) -> Answer | None:
        request = ctx.request.body
        field = "topic_id" if ctx.version >= 10 else "name"
        lookup = finder(topics, field)
        archived = [(t, served) for t in request["topics"] if (served := lookup(t[field])) is not None]
        if not archived:
            return None
        request["topics"] = [t for t in request["topics"] if lookup(t[field]) is None]
        ctx.request.changed()
        group, now = request["group_id"], int(time.time() * 1000)
        # Per topic: each partition's index and its offset to keep (None: no such partition).
        planned = [(t, [(p["partition_index"], ArchivedGroupOffset(
            group, tp, p["committed_offset"], p.get("committed_leader_epoch", -1), p.get("committed_metadata"), now)
            if (tp := served.topic.partitions.get(p["partition_index"])) else None) for p in t["partitions"]])
            for t, served in archived]
        code = await trio.to_thread.run_sync(
            self._commit, group, [offset for _, partitions in planned for _, offset in partitions if offset])
        answers = [{field: t[field], "partitions": [
            {"partition_index": index, "error_code": code if offset else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION}
            for index, offset in partitions]} for t, partitions in planned]
        if not request["topics"]:
            return ctx.answer({"throttle_time_ms": 0, "topics": answers})

        async def add(ctx: RequestContext, message: Message) -> None:
            message.body["topics"] += answers
            message.changed()

        ctx.on_response(add)
        return None

    def _commit(self, group: str, offsets: list[ArchivedGroupOffset]) -> ErrorCode:
        try:
            for offset in offsets:
                self.offsets.commit_archived_offset(offset)
        except Exception as e:  # noqa: BLE001 - answered as retriable: the client commits again
            log.warning("group %s: offsets of archived topics not recorded: %s", group, e)
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        return ErrorCode.NONE

    def _on_offset_fetch(self, ctx: RequestContext, topics: dict[str, Served]) -> None:
        version, request = ctx.version, ctx.request.body
        field = "topic_id" if version >= 10 else "name"
        lookup = finder(topics, field)
        names = {tp: served.name for served in topics.values() for tp in served.topic.partitions.values()}
        # (the group's entry in the request, the archived topics it names, or None for all of them)
        asked: list[tuple[str, list[tuple[dict[str, Any], Served]] | None]] = []
        for group in (request["groups"] if version >= 8 else [request]):
            if group["topics"] is None:
                asked.append((group["group_id"], None))
                continue
            named = [(t, served) for t in group["topics"] if (served := lookup(t[field])) is not None]
            if named:
                group["topics"] = [t for t in group["topics"] if lookup(t[field]) is None]
                ctx.request.changed()
                asked.append((group["group_id"], named))
        if not asked:
            return

        async def add(ctx: RequestContext, message: Message) -> None:
            response = message.body
            for group_id, named in asked:
                stored = self.offsets.archived_offsets(group_id)
                if named is None:  # every topic: the archived ones with offsets stored
                    by_topic: dict[str, list[dict[str, Any]]] = {}
                    for tp, offset in sorted(stored.items()):
                        if tp in names:
                            by_topic.setdefault(names[tp], []).append(_offset_answer(offset, tp.partition))
                    entries = [{field: topics[n].topic.topic_id.bytes if field == "topic_id" else n, "partitions": ps}
                               for n, ps in by_topic.items()]
                else:
                    entries = [{field: t[field], "partitions": [
                        _offset_answer(stored.get(served.topic.partitions.get(i)), i)  # type: ignore[arg-type]
                        for i in t["partition_indexes"]]} for t, served in named]
                if version >= 8:
                    group = next(g for g in response["groups"] if g["group_id"] == group_id)
                    group["topics"] += entries
                else:
                    response["topics"] += entries
            message.changed()

        ctx.on_response(add)


def _offset_answer(offset: ArchivedGroupOffset | None, partition: int) -> dict[str, Any]:
    return {"partition_index": partition, "committed_offset": offset.offset if offset else -1,
            "committed_leader_epoch": offset.leader_epoch if offset else -1,
            "metadata": (offset.metadata or "") if offset else "", "error_code": ErrorCode.NONE}
