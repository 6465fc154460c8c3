"""Per-topic counters that worker threads and the event loop add to, read by the metrics."""

from __future__ import annotations

import collections
import threading


class TopicCounters:
    """Per-topic counters, thread-safe (worker threads and the proxy's event loop add to them)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counts: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)

    def add(self, topic: str, **deltas: int) -> None:
        with self._lock:
            counter = self._counts[topic]
            for name, delta in deltas.items():
                counter[name] += delta

    def snapshot(self) -> dict[str, dict[str, int]]:
        with self._lock:
            return {topic: dict(counter) for topic, counter in self._counts.items()}
