"""The ``tiered-kafka`` source's streaming reader (Spark 4.2+: read limits and
``Trigger.AvailableNow``): micro-batches planned from offsets alone, as the batch reader plans
(tiering/spark/splits.py), with ``maxOffsetsPerTrigger`` shared over the partitions' backlogs as
Spark's Kafka source shares it."""

from __future__ import annotations

from collections.abc import Iterator, Mapping

from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)

from tiering.broker_client import EARLIEST, LATEST
from tiering.spark.splits import CaseInsensitiveOptions, OffsetPlanner, Offsets, Options, read_split


def _to_json(offsets: dict[tuple[str, int], int]) -> Offsets:
    out: Offsets = {}
    for (topic, p), offset in sorted(offsets.items()):
        out.setdefault(topic, {})[str(p)] = offset
    return out


def _from_json(offsets: Offsets) -> dict[tuple[str, int], int]:
    return {(topic, int(p)): offset for topic, ps in offsets.items() for p, offset in ps.items()}


class TieredKafkaStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    def __init__(self, options: Mapping[str, str]) -> None:
        self.raw = CaseInsensitiveOptions(options)
        self.options = Options.parse(options)
        limit = options.get("maxOffsetsPerTrigger")
        self.max_offsets = int(limit) if limit else None
        self.target: dict[tuple[str, int], int] | None = None  # Trigger.AvailableNow's end

    def prepareForTriggerAvailableNow(self) -> None:
        planner = OffsetPlanner(self.raw)
        self.target = planner.list_offsets(planner.partitions(), LATEST)

    def initialOffset(self) -> dict:
        planner = OffsetPlanner(self.raw)
        partitions = planner.partitions()
        return _to_json(planner.resolve(self.raw.get("startingOffsets"), partitions, "latest",
                                        self.raw.get("startingTimestamp")))

    def getDefaultReadLimit(self) -> ReadLimit:
        return ReadMaxRows(self.max_offsets) if self.max_offsets else ReadAllAvailable()

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        planner = OffsetPlanner(self.raw)
        partitions = planner.partitions()
        latest = planner.list_offsets(partitions, LATEST)
        if self.target is not None:  # AvailableNow: nothing past what existed when the query began
            partitions = [tp for tp in partitions if tp in self.target]
            latest = {tp: min(latest[tp], self.target[tp]) for tp in partitions}
        begin = _from_json(start)
        earliest = None
        for tp in partitions:
            if tp not in begin:  # a partition added since the query started: from its beginning
                earliest = earliest or planner.list_offsets(partitions, EARLIEST)
                begin[tp] = earliest[tp]
        end = {tp: max(latest[tp], begin[tp]) for tp in partitions}
        if isinstance(limit, ReadMaxRows):
            end = _rate_limit(begin, end, limit.max_rows)
        return _to_json(end)

    def reportLatestOffset(self) -> dict | None:
        planner = OffsetPlanner(self.raw)
        return _to_json(planner.list_offsets(planner.partitions(), LATEST))

    def partitions(self, start: dict, end: dict) -> list[InputPartition]:
        begin, until = _from_json(start), _from_json(end)
        ranges = {tp: (begin.get(tp, until[tp]), until[tp]) for tp in until}
        return OffsetPlanner(self.raw).plan(ranges)

    def read(self, partition: InputPartition) -> Iterator:
        return read_split(self.options, partition)

    def commit(self, end: dict) -> None:
        pass  # nothing to release: every micro-batch is planned from the offsets alone


def _rate_limit(begin: dict[tuple[str, int], int], end: dict[tuple[str, int], int],
                max_offsets: int) -> dict[tuple[str, int], int]:
    """At most ``max_offsets`` offsets in all, shared in proportion to each partition's backlog
    (as Spark's Kafka source shares maxOffsetsPerTrigger)."""
    lag = {tp: end[tp] - begin[tp] for tp in end}
    total = sum(lag.values())
    if total <= max_offsets:
        return end
    share = {tp: lag[tp] * max_offsets // total for tp in end}
    left = max_offsets - sum(share.values())
    for tp in sorted(end, key=lambda t: lag[t] - share[t], reverse=True):
        if left <= 0:
            break
        if share[tp] < lag[tp]:
            share[tp] += 1
            left -= 1
    return {tp: begin[tp] + share[tp] for tp in end}
