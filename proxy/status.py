"""What the status page shows, gathered from the state the proxy keeps anyway (rendered by
``proxy/status_page.py``).

The page is built on the metrics listener's HTTP thread, never on the proxy's event loop: it reads
counters and copies of dicts the loop and the tiering threads update (each read is atomic, or
under the owner's lock), and any broker offsets the process does not hold are asked from that
thread with a short timeout (``tiering.status.BrokerOffsets``).

Recent activity comes from :class:`ActivityRing`: a thread that every ``bucket_s`` seconds
records the totals of a few counters (remote reads, copies, errors, remote store requests) into a
ring of fixed length, so the page can draw the last minutes without the request path doing
anything. Each process (each worker) keeps its own.
"""

from __future__ import annotations

import collections
import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from proxy.chain import Core
from proxy.status_page import ArchiveRow, Bucket, BudgetState, StatusSnapshot, TierRequests
from tiering.cost import OTHER, TopicCost, TopicLabels
from tiering.read.reader import RemoteReader
from tiering.service import TieringService
from tiering.status import BrokerOffsets, tiers_view
from tiering.topic_costs import TopicCosts

log = logging.getLogger(__name__)

BUCKET_S = 10.0
WINDOW_S = 600.0


class RemoteReadCounters(Protocol):
    """What the tiered-reads filter counts (handed over by the chain builder)."""

    not_available: int
    read_beside_broker: int  # partitions served by reads started as their Fetch arrived
    log_end_questions: int  # ListOffsets asked for remote answers' log ends

    @property
    def by_topic(self) -> Any: ...  # .snapshot() -> {topic: {"requests"|"bytes"|"errors": n}}

    def pool_state(self) -> tuple[int, int, int]: ...


@dataclass(frozen=True)
class Sample:
    at: float  # time.time()
    totals: Mapping[str, int]


class ActivityRing:
    """Counter totals every ``bucket_s`` seconds, the newest ``window_s / bucket_s + 1`` kept."""

    def __init__(self, read: Callable[[], dict[str, int]], bucket_s: float = BUCKET_S,
                 window_s: float = WINDOW_S) -> None:
        self.read = read
        self.bucket_s = bucket_s
        self.window_s = window_s
        self._samples: collections.deque[Sample] = collections.deque(maxlen=int(round(window_s / bucket_s)) + 1)
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def sample(self) -> None:
        try:
            totals = self.read()
        except Exception:  # a counter source that failed once must not end the ring
            log.exception("status page: reading the activity counters failed")
            return
        with self._lock:
            self._samples.append(Sample(time.time(), totals))

    def start(self) -> None:
        self.sample()
        self._thread = threading.Thread(target=self._run, name="status-activity", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self.bucket_s):
            self.sample()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(5)

    def buckets(self) -> list[Bucket]:
        """The increases between consecutive samples, oldest first, and a last, partial bucket
        from the newest sample to now (so the page shows activity before the first full interval)."""
        with self._lock:
            samples = list(self._samples)
        if not samples:
            return []
        now = Sample(time.time(), self.read())
        out = []
        for before, after in zip(samples, [*samples[1:], now], strict=True):
            values = {key: after.totals.get(key, 0) - before.totals.get(key, 0) for key in after.totals}
            out.append(Bucket(before.at, max(after.at - before.at, 1e-6), values, partial=after is now))
        return out


def _sum_key(counts: Mapping[str, Mapping[str, int]], key: str) -> int:
    return sum(c.get(key, 0) for c in counts.values())


def cost_rows(table: list[TopicCost], labels: TopicLabels) -> list[TopicCost]:
    """The topics' last hour with the topics past the label cap summed under ``other`` (as the
    metrics sum them), the costliest first, ``other`` last."""
    rows: dict[str, TopicCost] = {}
    for c in table:
        label = labels.label(c.topic)
        if label != OTHER or label not in rows:
            rows[label] = c if label == c.topic else TopicCost(OTHER, dict(c.counts), c.stored_bytes, c.window_s,
                                                               c.hour, c.currency)
            continue
        was = rows[label]
        counts = {k: was.counts.get(k, 0) + c.counts.get(k, 0) for k in {*was.counts, *c.counts}}
        rows[label] = TopicCost(OTHER, counts, was.stored_bytes + c.stored_bytes, c.window_s, was.hour + c.hour,
                                c.currency)
    return sorted(rows.values(), key=lambda c: (c.topic == OTHER, -c.hour.total, c.topic))


class StatusSource:
    """Gathers a :class:`StatusSnapshot` from the core, the tiering service and the read counters."""

    def __init__(self, core: Core, tiering: TieringService | None, reads: RemoteReadCounters | None,
                 reader: RemoteReader | None, bucket_s: float = BUCKET_S, window_s: float = WINDOW_S,
                 costs: TopicCosts | None = None, labels: TopicLabels | None = None) -> None:
        self.core = core
        self.tiering = tiering
        self.reads = reads
        self.reader = reader
        self.costs = costs  # each topic's last hour of remote-tier cost (the metrics' too)
        self.labels = labels or TopicLabels()
        self.ring = ActivityRing(self.totals, bucket_s, window_s)
        self.brokers = BrokerOffsets(core.config.bootstrap, tiering.manager.security) \
            if tiering is not None else None

    def start(self) -> None:
        self.ring.start()

    def close(self) -> None:
        self.ring.stop()
        if self.brokers is not None:
            self.brokers.close()

    def totals(self) -> dict[str, int]:
        """The counters the recent-activity ring samples, summed over topics."""
        out: dict[str, int] = {}
        if self.reads is not None:
            fetch = self.reads.by_topic.snapshot()
            out["read_bytes"] = _sum_key(fetch, "bytes")
            out["read_requests"] = _sum_key(fetch, "requests")
            out["read_errors"] = _sum_key(fetch, "errors")
        if self.tiering is not None:
            copy = self.tiering.manager.metrics.snapshot()
            out["copy_bytes"] = copy["copied_bytes"]
            out["copy_segments"] = copy["copied_segments"]
            out["copy_errors"] = copy["copy_errors"]
            requests, failures, _, _ = self.tiering.storage.requests.snapshot()
            for kind, count in requests.items():
                out[f"store_requests:{kind}"] = count
            for kind, count in failures.items():
                out[f"store_failures:{kind}"] = count
            out["store_requests"] = sum(requests.values())
            out["store_failures"] = sum(failures.values())
        out["errors"] = out.get("read_errors", 0) + out.get("copy_errors", 0) + out.get("store_failures", 0)
        return out

    def snapshot(self) -> StatusSnapshot:
        config = self.core.config
        budgets = [BudgetState(b.name, b.used, b.peak, b.limit, b.waits) for b in list(self.core.metrics.budgets)]
        view = tiers_view(self.tiering, self.reader, self.brokers) \
            if self.tiering is not None and self.reader is not None else None
        tier = None
        if self.tiering is not None:
            requests, failures, read, written = self.tiering.storage.requests.snapshot()
            tier = TierRequests(self.tiering.storage_uri.split("?", 1)[0], requests, failures, read, written)
        return StatusSnapshot(
            generated_at=time.time(), bootstrap=self.core.bootstrap_address, workers=config.workers,
            worker_index=config.worker_index, brokers=self.core.brokers_seen(), tiering=view is not None,
            partitions=view.partitions if view is not None else [], topics=view.topics if view is not None else {},
            owners=view.owners if view is not None else {},
            tier=tier, activity=self.ring.buckets(), bucket_seconds=self.ring.bucket_s,
            window_seconds=self.ring.window_s, budgets=budgets, archives=self._archives(),
            costs=cost_rows(self.costs.table(), self.labels) if self.costs is not None else (),
            prices=self.costs.prices if self.costs is not None else None,
            cost_window_s=self.costs.window_s() if self.costs is not None else 0.0)

    def _archives(self) -> list[ArchiveRow]:
        rows = []
        for archive in self.tiering.archives if self.tiering is not None else []:
            source = "this remote tier" if archive.keeps_data else archive.what
            for name, topic in sorted(archive.topics().items()):
                segments = [archive.store.copied_segments(tp) for tp in topic.partitions.values()]
                rows.append(ArchiveRow(name, source, len(topic.partitions), sum(map(len, segments)),
                                       sum(s.segment_size_bytes for ss in segments for s in ss),
                                       sum(ss[-1].end_offset + 1 - ss[0].start_offset for ss in segments if ss)))
        return rows
