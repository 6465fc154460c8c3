"""Where the copier records data-loss gaps: offsets the brokers deleted before they were tiered."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

from tiering.model import TopicIdPartition


class GapLog:
    """Where data-loss gaps are recorded: one JSON object per line, appended and fsynced."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()

    def record(self, tp: TopicIdPartition, first: int, last: int) -> None:
        entry = {"topic": tp.topic, "topic_id": str(tp.topic_id), "partition": tp.partition,
                 "first_offset": first, "last_offset": last, "detected_ms": int(time.time() * 1000)}
        with self._lock:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with open(self.path, "a", encoding="utf-8") as f:
                f.write(json.dumps(entry) + "\n")
                f.flush()

    def entries(self) -> list[dict]:
        if not self.path.exists():
            return []
        return [json.loads(line) for line in self.path.read_text(encoding="utf-8").splitlines() if line.strip()]
