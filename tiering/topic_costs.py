"""Each topic's last hour of remote-tier cost in a running proxy (:class:`TopicCosts`), from the
store's request counters (``tiering.storage.api.StorageRequests``: requests and bytes per topic,
per minute) and the metadata store's copied segments (their stored bytes, as
``tiering.status.segments_stored_bytes`` counts them), priced by ``tiering.cost``. The status page,
the metrics and the remote log dir ``tiered-proxy describe`` reads all take it from here, so they
agree."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Mapping

from tiering.cost import TAG_TOPIC_COST, Prices, TopicCost, encode_topic_cost, topic_cost
from tiering.metadata.manager import RemoteLogMetadataManager
from tiering.model import RemoteLogSegmentMetadata, TopicIdPartition
from tiering.storage.api import StorageRequests
from tiering.storage.segment_location import stored_bytes

TABLE_TTL_S = 1.0  # one DescribeLogDirs answer (a tag per topic) computes the table once


def stored_bytes_by_topic(partitions: Iterable[TopicIdPartition],
                          copied: Callable[[TopicIdPartition], list[RemoteLogSegmentMetadata]]) -> dict[str, int]:
    """Topic name -> the bytes its copied segments take in the remote tier, over every partition
    the store knows (a topic's earlier incarnations, and partitions being deleted, included: they
    are billed until their objects are gone); topics holding nothing are left out."""
    out: dict[str, int] = {}
    for tp in partitions:
        held = sum(stored_bytes(s.custom_metadata, s.segment_size_bytes) for s in copied(tp))
        if held:
            out[tp.topic] = out.get(tp.topic, 0) + held
    return out


class TopicCosts:
    """The last hour of every topic that sent requests in it or holds data, priced."""

    def __init__(self, requests: StorageRequests, metadata: RemoteLogMetadataManager, prices: Prices) -> None:
        self.requests = requests
        self.metadata = metadata
        self.prices = prices
        self._lock = threading.Lock()
        self._cached: tuple[float, dict[str, TopicCost], float] | None = None

    @classmethod
    def from_config(cls, requests: StorageRequests, metadata: RemoteLogMetadataManager,
                    config: Mapping[str, object]) -> TopicCosts:
        """Priced at the configuration's ``remote.log.storage.price.*`` (CostConfigError: a
        configuration error naming the key)."""
        return cls(requests, metadata, Prices.from_config(config))

    def _current(self) -> tuple[dict[str, TopicCost], float]:
        with self._lock:
            now = time.monotonic()
            if self._cached is None or now - self._cached[0] >= TABLE_TTL_S:
                counts, window_s = self.requests.recent()
                held = stored_bytes_by_topic(self.metadata.partitions(), self.metadata.copied_segments)
                topics = [*counts, *sorted(t for t in held if t not in counts)]
                self._cached = (now, {t: topic_cost(t, counts.get(t, {}), held.get(t, 0), window_s, self.prices)
                                      for t in topics}, window_s)
            return self._cached[1], self._cached[2]

    def table(self) -> list[TopicCost]:
        """Topics in the order they first made a request, then those that only hold data, by name."""
        return list(self._current()[0].values())

    def window_s(self) -> float:
        """The seconds the last hour's counts cover (less while the process is younger)."""
        return self._current()[1]

    def tags(self, topic: str) -> dict[int, bytes]:
        """The topic's last hour as a tagged field of its entry in the remote log dir (zero for a
        topic that neither sent requests nor holds data)."""
        table, window_s = self._current()
        found = table.get(topic) or topic_cost(topic, {}, 0, window_s, self.prices)
        return {TAG_TOPIC_COST: encode_topic_cost(found)}
