"""Counters every copier of a process adds to, read by the proxy's Prometheus metrics."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field


@dataclass
class TieringMetrics:
    """Counters shared by all copiers (read by the proxy's metrics)."""

    copied_segments: int = 0
    copied_bytes: int = 0
    copy_errors: int = 0
    deleted_segments: int = 0
    deleted_bytes: int = 0
    orphans_cleaned: int = 0
    data_loss_gaps: int = 0
    data_loss_offsets: int = 0
    local_log_start_moves: int = 0
    delete_records_failures: int = 0  # DeleteRecords that failed on the connection
    local_retention_off: int = 0  # partitions whose brokers cannot move their log start
    copy_requests: int = 0
    fenced: int = 0  # passes stopped because a newer owner fenced this instance's writes
    leader_changes: int = 0  # leader epochs a copier followed (its lineage checked again)
    divergences: int = 0  # remote ranges cut back because the cluster's log replaced them
    diverged_offsets: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    _by_topic: dict[str, dict[str, int]] = field(default_factory=dict, repr=False)

    def add(self, topic: str | None = None, **deltas: int) -> None:
        with self._lock:
            per_topic = self._by_topic.setdefault(topic, {}) if topic is not None else None
            for name, delta in deltas.items():
                setattr(self, name, getattr(self, name) + delta)
                if per_topic is not None:
                    per_topic[name] = per_topic.get(name, 0) + delta

    def snapshot(self) -> dict[str, int]:
        with self._lock:
            return {k: v for k, v in vars(self).items() if not k.startswith("_")}

    def by_topic(self) -> dict[str, dict[str, int]]:
        with self._lock:
            return {topic: dict(counts) for topic, counts in self._by_topic.items()}
