"""The ``tiered-kafka`` source's planning and reading (tiering/spark/source.py is the source
itself): options, offsets through the proxy, splits from the metadata store (one per remote
segment, large ones split at offset index entries, and each partition's tail through the proxy),
the batch reader, and how an executor reads a split into Arrow rows."""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field

from pyspark.sql.datasource import DataSourceReader, InputPartition

from protocol.errors import ErrorCode
from protocol.record_set import iter_batches
from protocol.remote_formats.offset_index import decode_offset_index
from protocol.remote_formats.transaction_index import decode_transaction_index
from tiering.broker_client import EARLIEST, LATEST, BrokerClient
from tiering.client_security import KEYS as CLIENT_SECURITY_KEYS
from tiering.client_security import SPARK_PREFIX, ClientSecurity
from tiering.metadata.manifests import MANIFESTS_URI, read_bucket
from tiering.metadata.state import MetadataState
from tiering.metadata.view import load_metadata
from tiering.model import IndexType, RemoteLogSegmentMetadata
from tiering.spark.rows import NO_END, AbortedTransactions, RowBuilder, batches_to_rows
from tiering.storage.api import RemoteResourceNotFoundError
from tiering.storage.uri import storage_from_uri

log = logging.getLogger(__name__)

SOURCE_NAME = "tiered-kafka"
DEFAULT_MAX_BYTES_PER_PARTITION = 128 << 20
TAIL_FETCH_BYTES = 8 << 20


@dataclass(frozen=True)
class RemoteSplit(InputPartition):
    """Bytes ``byte_start..byte_end-1`` of one remote segment (whole batches), rows in ``start..until-1``."""

    topic: str
    partition: int
    segment: RemoteLogSegmentMetadata
    byte_start: int
    byte_end: int | None
    start: int
    until: int
    aborted: tuple[tuple[int, int, int], ...] = ()


@dataclass(frozen=True)
class TailSplit(InputPartition):
    """Offsets ``start..until-1`` of a partition, read through the proxy."""

    topic: str
    partition: int
    start: int
    until: int


@dataclass
class Options:
    bootstrap: str
    storage_uri: str | None
    metadata_uri: str | None
    storage_props: dict[str, str] = field(default_factory=dict)
    include_headers: bool = False
    read_committed: bool = False
    max_bytes_per_partition: int = DEFAULT_MAX_BYTES_PER_PARTITION
    max_records_per_partition: int | None = None
    # The job's own Kafka client settings (Spark's names: kafka.security.protocol,
    # kafka.sasl.jaas.config, ...), kept as text: an SSL context does not travel to executors.
    client_settings: dict[str, str] = field(default_factory=dict)

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> Options:
        options = CaseInsensitiveOptions(options)
        bootstrap = options.get("kafka.bootstrap.servers")
        if not bootstrap:
            raise ValueError("option kafka.bootstrap.servers (the proxy) is required")
        isolation = options.get("kafka.isolation.level", "read_uncommitted")
        if isolation not in ("read_uncommitted", "read_committed"):
            raise ValueError(f"kafka.isolation.level must be read_uncommitted or read_committed, not {isolation!r}")
        records = options.get("maxRecordsPerPartition")
        return cls(
            bootstrap=bootstrap,
            storage_uri=options.get("remote.log.storage.uri"),
            metadata_uri=options.get("remote.log.metadata.uri"),
            storage_props={k: v for k, v in options.items() if k.startswith("remote.log.storage.")},
            include_headers=options.get("includeHeaders", "false").lower() == "true",
            read_committed=isolation == "read_committed",
            max_bytes_per_partition=int(options.get("maxBytesPerPartition", DEFAULT_MAX_BYTES_PER_PARTITION)),
            max_records_per_partition=int(records) if records else None,
            client_settings={k: v for k, v in options.items() if k.startswith(SPARK_PREFIX)
                             and k[len(SPARK_PREFIX):] in CLIENT_SECURITY_KEYS},
        ).checked()

    def checked(self) -> Options:
        self.security()  # settings that cannot work fail here, on the driver
        return self

    def security(self) -> ClientSecurity:
        return ClientSecurity.from_properties(self.client_settings, prefix=SPARK_PREFIX)


class CaseInsensitiveOptions(dict):
    """Spark treats option names case-insensitively (and may hand them over lowercased)."""

    def __init__(self, options: Mapping[str, str]) -> None:
        super().__init__((k.lower(), v) for k, v in options.items())

    def get(self, key: str, default: str | None = None) -> str | None:  # type: ignore[override]
        return super().get(key.lower(), default)

    def __getitem__(self, key: str) -> str:
        return super().__getitem__(key.lower())

    def __contains__(self, key: object) -> bool:
        return isinstance(key, str) and super().__contains__(key.lower())


Offsets = dict[str, dict[str, int]]  # topic -> partition (as text, JSON keys) -> offset


def _partitions_of(client: BrokerClient, options: Mapping[str, str]) -> list[tuple[str, int]]:
    chosen = [k for k in ("subscribe", "subscribePattern", "assign") if options.get(k)]
    if len(chosen) != 1:
        raise ValueError("set exactly one of subscribe, subscribePattern, assign")
    if chosen[0] == "assign":
        assigned = json.loads(options["assign"])
        return sorted((t, int(p)) for t, ps in assigned.items() for p in ps)
    topics = client.metadata(None)
    if chosen[0] == "subscribe":
        names = [t.strip() for t in options["subscribe"].split(",") if t.strip()]
        missing = [n for n in names if n not in topics]
        if missing:
            raise ValueError(f"topics not found: {', '.join(missing)}")
    else:
        pattern = re.compile(options["subscribePattern"])
        names = [n for n in topics if pattern.fullmatch(n) and not topics[n].internal]
    return sorted((n, p) for n in names for p in topics[n].partitions)


class TopicAuthorizationError(PermissionError):
    """The cluster does not let the job's principal read a topic: nothing of it is planned."""


def _refuse_if_unauthorized(topic: str, error: int | None) -> None:
    # The remote tier holds no ACLs: the planner reads nothing before the brokers, asked through
    # the proxy with the job's own credentials, have let this principal read the topic.
    if error == ErrorCode.TOPIC_AUTHORIZATION_FAILED:
        raise TopicAuthorizationError(f"not authorized to read topic {topic} (TOPIC_AUTHORIZATION_FAILED from the "
                                      "cluster for the credentials in the kafka.* options): nothing is read")


class OffsetPlanner:
    """Driver-side planning: offsets through the proxy, splits from the metadata store."""

    def __init__(self, options: Mapping[str, str]) -> None:
        self.raw = CaseInsensitiveOptions(options)
        self.options = Options.parse(options)

    def client(self) -> BrokerClient:
        return BrokerClient(self.options.bootstrap, security=self.options.security())

    def partitions(self) -> list[tuple[str, int]]:
        client = self.client()
        try:
            return _partitions_of(client, self.raw)
        finally:
            client.close()

    def list_offsets(self, partitions: list[tuple[str, int]], timestamp: int) -> dict[tuple[str, int], int]:
        client = self.client()
        try:
            leaders = {t: info for t, info in client.metadata(sorted({t for t, _ in partitions})).items()}
            out = {}
            for topic, p in partitions:
                _refuse_if_unauthorized(topic, client.topic_errors.get(topic))
                if topic not in leaders:
                    raise RuntimeError(f"topic {topic}: not in the cluster's metadata")
                error, offset = client.list_offset(leaders[topic].partitions[p].leader, topic, p, timestamp,
                                                   read_committed=self.options.read_committed)
                _refuse_if_unauthorized(topic, error)
                if error != 0:
                    raise RuntimeError(f"ListOffsets {timestamp} for {topic}-{p} failed with error {error}")
                out[(topic, p)] = offset
            return out
        finally:
            client.close()

    def resolve(self, spec: str | None, partitions: list[tuple[str, int]], default: str,
                timestamp: str | None = None) -> dict[tuple[str, int], int]:
        """``earliest``/``latest``/JSON offsets (-2 earliest, -1 latest), or a timestamp."""
        earliest = self.list_offsets(partitions, EARLIEST)
        latest = self.list_offsets(partitions, LATEST)
        if timestamp is not None:
            found = self.list_offsets(partitions, int(timestamp))
            return {tp: found[tp] if found[tp] >= 0 else latest[tp] for tp in partitions}
        spec = spec or default
        if spec in ("earliest", "latest"):
            return dict(earliest if spec == "earliest" else latest)
        given = json.loads(spec)
        out = {}
        for topic, p in partitions:
            value = int(given.get(topic, {}).get(str(p), -2 if default == "earliest" else -1))
            out[(topic, p)] = earliest[(topic, p)] if value == -2 else latest[(topic, p)] if value == -1 else value
        return out

    def plan(self, ranges: dict[tuple[str, int], tuple[int, int]]) -> list[InputPartition]:
        """Splits for ``start..until-1`` of each partition: remote segments, then the tail."""
        state = self._metadata()
        readable = {(tp.topic, tp.partition): tp for tp in state.readable_partitions()} if state else {}
        rsm = storage_from_uri(self.options.storage_uri, **self.options.storage_props) \
            if self.options.storage_uri and readable else None
        splits: list[InputPartition] = []
        client: BrokerClient | None = None  # for read_committed: one for every partition
        try:
            for (topic, p), (start, until) in sorted(ranges.items()):
                if start >= until:
                    continue
                tail_from = start
                tp = readable.get((topic, p))
                if tp is not None and rsm is not None:
                    assert state is not None
                    floor = state.partitions[tp].log_start_offset
                    segments = [s for s in state.finished(tp) if s.end_offset >= max(start, floor) and s.start_offset < until]
                    aborted = self._aborted(rsm, segments) if self.options.read_committed else []
                    if self.options.read_committed and segments:
                        client = client or self.client()
                        aborted += _across_remote_end(client, topic, p, state.finished(tp)[-1].end_offset)
                    for segment in segments:
                        lo, hi = max(start, floor, segment.start_offset), min(until, segment.end_offset + 1)
                        overlapping = tuple(a for a in aborted if a[1] <= segment.end_offset and a[2] >= segment.start_offset)
                        splits += [RemoteSplit(topic, p, segment, b0, b1, lo, hi, overlapping)
                                   for b0, b1 in self._byte_ranges(rsm, segment)]
                        tail_from = max(tail_from, hi)
                if tail_from < until:
                    splits.append(TailSplit(topic, p, tail_from, until))
        finally:
            if rsm is not None:
                rsm.close()
            if client is not None:
                client.close()
        return splits

    def _metadata(self) -> MetadataState | None:
        if not self.options.metadata_uri:
            return None
        if self.options.metadata_uri == MANIFESTS_URI:  # the remote tier's own description (archives)
            storage = storage_from_uri(self.options.storage_uri, **self.options.storage_props)
            try:
                return read_bucket(storage).state
            finally:
                storage.close()
        return load_metadata(self.options.metadata_uri, self.options.bootstrap, self.raw, self.options.security())

    @staticmethod
    def _aborted(rsm, segments: list[RemoteLogSegmentMetadata]) -> list[tuple[int, int, int]]:  # noqa: ANN001
        out = []
        for segment in segments:
            if segment.tx_index_empty:
                continue
            try:
                index = rsm.fetch_index(segment, IndexType.TRANSACTION)
            except RemoteResourceNotFoundError:
                continue
            out += [(t.producer_id, t.first_offset, t.last_offset) for t in decode_transaction_index(index)]
        return out

    def _byte_ranges(self, rsm, segment: RemoteLogSegmentMetadata) -> list[tuple[int, int | None]]:  # noqa: ANN001
        limit_bytes = self.options.max_bytes_per_partition
        limit_records = self.options.max_records_per_partition
        records = segment.end_offset - segment.start_offset + 1
        if segment.segment_size_bytes <= limit_bytes and (limit_records is None or records <= limit_records):
            return [(0, None)]
        entries = decode_offset_index(rsm.fetch_index(segment, IndexType.OFFSET), segment.start_offset)
        cuts = [0]
        first_offset = segment.start_offset
        for entry in entries:
            too_big = entry.position - cuts[-1] >= limit_bytes
            too_many = limit_records is not None and entry.offset - first_offset >= limit_records
            if entry.position > cuts[-1] and (too_big or too_many):
                cuts.append(entry.position)
                first_offset = entry.offset
        return [(a, b) for a, b in zip(cuts, [*cuts[1:], None], strict=True)]


def _across_remote_end(client: BrokerClient, topic: str, partition: int, remote_end: int) -> list[tuple[int, int, int]]:
    """Aborted transactions that began at or below the remote end and ended above it: the remote
    tier holds some of their records but not the marker yet, so only the brokers' transaction
    indexes list them."""
    leader = client.metadata([topic])[topic].partitions[partition].leader
    answer = client.aborted_transactions_at(leader, topic, partition, remote_end + 1)
    if answer is None:  # an open transaction begins right after the remote end
        log.warning("%s-%d: a transaction is open right after the remote end (%d); the brokers cannot "
                    "say yet which transactions that began below it were aborted", topic, partition, remote_end)
        return []
    return [(pid, first, NO_END) for pid, first in answer if first <= remote_end]


def read_split(options: Options, split: InputPartition) -> Iterator:
    """Arrow record batches of one split (runs on an executor)."""
    builder = RowBuilder(split.topic, split.partition, options.include_headers)  # type: ignore[attr-defined]
    if isinstance(split, RemoteSplit):
        rsm = storage_from_uri(options.storage_uri, **options.storage_props)
        try:
            end = None if split.byte_end is None else split.byte_end - 1
            data = rsm.fetch_log_segment(split.segment, split.byte_start, end)
        finally:
            rsm.close()
        aborted = AbortedTransactions(split.aborted) if options.read_committed else None
        yield from batches_to_rows(data, builder, split.start, split.until, aborted)
    elif isinstance(split, TailSplit):
        yield from _read_tail(options, split, builder)
    last = builder.flush()
    if last is not None:
        yield last


def _read_tail(options: Options, split: TailSplit, builder: RowBuilder) -> Iterator:
    client = BrokerClient(options.bootstrap, security=options.security())
    try:
        offset, empty_answers = split.start, 0
        leader = client.metadata([split.topic])[split.topic].partitions[split.partition].leader
        while offset < split.until:
            answer = client.fetch(leader, split.topic, split.partition, offset, max_bytes=TAIL_FETCH_BYTES,
                                  read_committed=options.read_committed, max_wait_ms=500)
            if answer.error_code != 0:
                raise RuntimeError(f"fetch {split.topic}-{split.partition} at {offset}: error {answer.error_code}")
            aborted = AbortedTransactions([(pid, first, NO_END) for pid, first in answer.aborted_transactions]) \
                if options.read_committed else None
            yield from batches_to_rows(answer.records, builder, offset, split.until, aborted)
            last = max((header.last_offset for header, _ in iter_batches(answer.records)), default=offset - 1)
            if last >= offset:
                offset, empty_answers = last + 1, 0
                continue
            # Nothing at this offset: past the last stable offset (the planned end is not
            # readable yet) or offsets only aborted records or markers used.
            bound = answer.last_stable_offset if options.read_committed else answer.high_watermark
            empty_answers += 1
            if bound <= offset or empty_answers > 20:
                raise RuntimeError(f"{split.topic}-{split.partition}: nothing readable at {offset} "
                                   f"(planned up to {split.until}, broker bound {bound})")
    finally:
        client.close()


class TieredKafkaBatchReader(DataSourceReader):
    def __init__(self, options: Mapping[str, str]) -> None:
        self.raw = CaseInsensitiveOptions(options)
        self.options = Options.parse(options)

    def partitions(self) -> list[InputPartition]:
        planner = OffsetPlanner(self.raw)
        partitions = planner.partitions()
        starts = planner.resolve(self.raw.get("startingOffsets"), partitions, "earliest",
                                 self.raw.get("startingTimestamp"))
        ends = planner.resolve(self.raw.get("endingOffsets"), partitions, "latest")
        return planner.plan({tp: (starts[tp], ends[tp]) for tp in partitions})

    def read(self, partition: InputPartition) -> Iterator:
        return read_split(self.options, partition)
