"""Each tiered partition's two tiers as this process knows them, for the proxy's status page.

The numbers are those ``tiered-proxy describe`` reads over the wire, taken from in-process state
instead: ``Rx`` and ``Ry`` as the proxy answers ListOffsets EARLIEST (-2) and LATEST_TIERED (-5)
(the remote reader over the metadata store), the segment count, remote bytes, copy lag, lost and
diverged offsets and the KIP-950 state as the proxy's remote log dir in DescribeLogDirs reports
them, and the brokers' ``Lx`` and ``Lz`` as this process's copier of the partition last saw them
(every ``remote.log.manager.task.interval.ms``). Partitions no copier here follows (another
instance or worker copies them, or tiering is off for the topic) have their ``Lx`` and ``Lz``
asked of the brokers by :class:`BrokerOffsets`, from the caller's thread, never the proxy's
event loop.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass, field

from protocol.errors import ErrorCode
from protocol.remote_log_dir import SEGMENT_COUNT, STORED_BYTES, TAG_SEGMENT_COUNT, TAG_STORED_BYTES
from tiering.broker_client import EARLIEST, LATEST, BrokerClient, BrokerClientError
from tiering.client_security import ClientSecurity
from tiering.model import RemoteLogSegmentMetadata, TieringState, TopicIdPartition
from tiering.read.reader import RemoteReader, earliest_offset
from tiering.service import TieringService
from tiering.storage.segment_location import stored_bytes

log = logging.getLogger(__name__)

# Where Lx and Lz came from.
FROM_COPIER = "copier"
FROM_BROKERS = "brokers"
UNKNOWN = ""


@dataclass(frozen=True)
class PartitionTiers:
    topic: str
    partition: int
    rx: int | None  # as ListOffsets EARLIEST answers it through the proxy (describe's Rx); None: nothing tiered
    ry: int | None  # the last tiered offset (LATEST_TIERED); None: nothing tiered
    lx: int | None  # the brokers' log start; None: not known here now
    lz: int | None  # the brokers' log end (high watermark); None: not known here now
    # The first offset the remote tier holds. EARLIEST answers the brokers' log start where that is
    # lower (remote retention ran ahead of the brokers'), so Rx can be below it; the bar draws this.
    remote_start: int | None
    segments: int
    remote_bytes: int  # the segments' data, as Kafka counts a remote log's size
    lag: int  # offsets below the last stable offset not yet copied (describe's LAG)
    state: str  # the topic's KIP-950 state as describe prints it ("ENABLED retain 1"), "-" if none
    lost: tuple[tuple[int, int], ...] = ()  # ranges the brokers deleted before they were tiered
    diverged: tuple[tuple[int, int], ...] = ()  # ranges cut back because the cluster's log replaced them
    copied_here: bool = False  # a copier of this process follows the partition
    offsets_from: str = UNKNOWN  # FROM_COPIER, FROM_BROKERS or UNKNOWN: where lx and lz came from
    tiered_by: str = "none"  # "brokers", "proxy" or "none" (see owner_text)
    stored_bytes: int = 0  # what the segments take in the remote tier (compressed, encrypted, indexes)

    @property
    def lost_offsets(self) -> int:
        return sum(last - first + 1 for first, last in self.lost)

    @property
    def diverged_offsets(self) -> int:
        return sum(last - first + 1 for first, last in self.diverged)


@dataclass(frozen=True)
class TiersView:
    partitions: list[PartitionTiers]
    # Every topic the remote log dir lists with its KIP-950 state (topics being disabled, or
    # disabled with the delete policy, or tiered by the brokers, may have no partitions here).
    topics: dict[str, str] = field(default_factory=dict)
    owners: dict[str, str] = field(default_factory=dict)  # topic -> who tiers it (owner_text)


def segments_stored_bytes(segments: Iterable[RemoteLogSegmentMetadata]) -> int:
    return sum(stored_bytes(s.custom_metadata, s.segment_size_bytes) for s in segments)


def segment_tags(segments: list[RemoteLogSegmentMetadata]) -> dict[int, bytes]:
    """A partition's segment count and stored bytes, as tagged fields of the remote log dir."""
    return {TAG_SEGMENT_COUNT: SEGMENT_COUNT.pack(len(segments)),
            TAG_STORED_BYTES: STORED_BYTES.pack(segments_stored_bytes(segments))}


def state_text(service: TieringService, topic: str) -> str:
    """The topic's KIP-950 state exactly as DescribeLogDirs tags it and describe prints it
    ("ENABLED retain 1"), "-" where the proxy has no record of the topic."""
    state = service.metadata.topic_tiering_state(topic)
    if state is None or state.deleted:
        return "-"
    return (f"{state.state.name if state.state is not None else 'NONE'} {state.disable_policy.config_value} "
            f"{state.tiered_epoch}")


def owner_text(service: TieringService, topic: str) -> str:
    """Who tiers the topic, as DescribeLogDirs tags it and describe prints it (TIERED-BY)."""
    return service.manager.tiered_by(topic).value


def listed(service: TieringService, lag: dict[TopicIdPartition, int]) -> tuple[list[TopicIdPartition], set[str]]:
    """The partitions and topics the remote log dir lists (as DescribeLogDirs does): readable
    partitions, partitions a copier follows, and topics being disabled or disabled or tiered by
    the brokers (which may have no partitions here)."""
    partitions = {(tp.topic, tp.partition): tp for tp in service.metadata.readable_partitions()}
    for tp in lag:
        partitions.setdefault((tp.topic, tp.partition), tp)
    topics = {topic for topic, _ in partitions} | service.manager.brokers_hold
    for name, state in service.metadata.topic_tiering_states().items():
        if not state.deleted and state.state in (TieringState.DISABLING, TieringState.DISABLED):
            topics.add(name)
    return sorted(partitions.values(), key=lambda tp: (tp.topic, tp.partition)), topics


def tiers_view(service: TieringService, reader: RemoteReader, brokers: BrokerOffsets | None = None) -> TiersView:
    """Every listed partition's tiers. ``brokers``: asked for the Lx and Lz of partitions no copier
    here follows (from the calling thread); None leaves them unknown."""
    metadata = service.metadata
    copiers = dict(service.manager.copiers)  # the manager's thread adds and removes copiers
    lag = service.manager.lag()
    partitions, topics = listed(service, lag)
    readable = {(tp.topic, tp.partition) for tp in metadata.readable_partitions()}
    ends: dict[TopicIdPartition, tuple[int, int]] = {}
    for tp in partitions:
        copier = copiers.get(tp)
        # A copier that is not copying (KIP-950 retain: it only expires) fetches nothing, so what it
        # saw last may be old.
        if copier is not None and copier.tiered_epoch is not None and copier.high_watermark >= 0 \
                and copier.log_start >= 0:
            ends[tp] = (copier.log_start, copier.high_watermark)
    asked = brokers.offsets([(tp.topic, tp.partition) for tp in partitions if tp not in ends]) if brokers else {}
    states = {topic: state_text(service, topic) for topic in topics}
    owners = {topic: owner_text(service, topic) for topic in topics}
    rows = []
    for tp in partitions:
        segments = metadata.copied_segments(tp)
        is_readable = (tp.topic, tp.partition) in readable
        # ListOffsets answers only for readable partitions, through the remote reader.
        ry = reader.log_end(tp) if is_readable else None
        remote_start = reader.log_start(tp) if is_readable else None
        if tp in ends:
            (lx, lz), source = ends[tp], FROM_COPIER
        elif (tp.topic, tp.partition) in asked:
            (lx, lz), source = asked[(tp.topic, tp.partition)], FROM_BROKERS
        else:
            lx = lz = None
            source = UNKNOWN
        rx = None if ry is None else earliest_offset(remote_start, lx)
        rows.append(PartitionTiers(
            tp.topic, tp.partition, rx, ry, lx, lz, remote_start, len(segments),
            sum(s.segment_size_bytes for s in segments), lag.get(tp, 0), states[tp.topic],
            tuple(metadata.data_loss(tp)),
            tuple((d.first_offset, d.last_offset) for d in metadata.divergences(tp)),
            tp in copiers, source, owners[tp.topic], segments_stored_bytes(segments)))
    return TiersView(rows, states, owners)


class BrokerOffsets:
    """The brokers' log start and end of partitions, asked with ListOffsets EARLIEST and LATEST from
    the calling thread with a short timeout; answers are kept ``ttl_s`` seconds, and after a
    failure nothing is asked for ``ttl_s`` either, so a page refreshing every few seconds costs
    the brokers a few requests, and a cluster that does not answer slows the page only once in a
    while. One caller at a time (the client is not thread-safe)."""

    def __init__(self, bootstrap: str, security: ClientSecurity | None = None, *, timeout_s: float = 2.0,
                 ttl_s: float = 5.0, budget_s: float = 3.0) -> None:
        self.bootstrap = bootstrap
        self.security = security
        self.timeout_s = timeout_s
        self.ttl_s = ttl_s
        self.budget_s = budget_s  # the most one call spends asking
        self._lock = threading.Lock()
        self._client: BrokerClient | None = None
        self._known: dict[tuple[str, int], tuple[float, int, int]] = {}
        self._failed_at = float("-inf")

    def offsets(self, wanted: Iterable[tuple[str, int]]) -> dict[tuple[str, int], tuple[int, int]]:
        wanted = list(wanted)
        if not wanted:
            return {}
        with self._lock:
            now = time.monotonic()
            stale = [key for key in wanted if now - self._known.get(key, (float("-inf"), 0, 0))[0] >= self.ttl_s]
            if stale and now - self._failed_at >= self.ttl_s:
                self._ask(stale, now + self.budget_s)
            return {key: self._known[key][1:] for key in wanted if key in self._known}

    def _ask(self, keys: list[tuple[str, int]], deadline: float) -> None:
        try:
            if self._client is None:
                self._client = BrokerClient(self.bootstrap, timeout_s=self.timeout_s, security=self.security)
            topics = self._client.metadata(sorted({topic for topic, _ in keys}))
            by_leader: dict[int, list[tuple[str, int]]] = {}
            for topic, partition in keys:
                info = topics.get(topic)
                if info is not None and partition in info.partitions:
                    by_leader.setdefault(info.partitions[partition].leader, []).append((topic, partition))
            for leader, led in by_leader.items():
                if time.monotonic() >= deadline:
                    break  # the rest stay unknown on this page
                starts = self._client.list_offsets(leader, led, EARLIEST)
                ends = self._client.list_offsets(leader, led, LATEST)
                for key in led:
                    (start_error, start), (end_error, end) = starts[key], ends[key]
                    if start_error == end_error == ErrorCode.NONE:
                        self._known[key] = (time.monotonic(), start, end)
        except (BrokerClientError, OSError, KeyError) as exc:
            log.debug("status page: cannot ask the brokers for log offsets: %s", exc)
            self._failed_at = time.monotonic()
            self.close_client()

    def close_client(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None

    def close(self) -> None:
        with self._lock:
            self.close_client()
