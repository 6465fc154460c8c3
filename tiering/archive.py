"""Archived topics: topics whose history the remote tier holds but the cluster does not have
(deleted, or the cluster replaced), served read-only from the bucket's own description of itself.

``proxy.archived.topics`` names them: a comma-separated list of topic names, or ``*`` for every
topic the bucket describes. A named topic is archived while the cluster has no topic of that name
(a live topic always wins a clash) and the bucket holds readable segments of it; its remote data
is then never deleted for having left the cluster (``proxy.deleted.topic.grace.ms`` does not
apply). The bucket's manifests are read again every ``proxy.archived.topics.refresh.interval.ms``.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from tiering.metadata.bucket_store import BucketIndexStore
from tiering.model import TopicIdPartition
from tiering.storage.object_layout import ObjectStorage

ARCHIVED_TOPICS_CONFIG = "proxy.archived.topics"
ARCHIVE_REFRESH_CONFIG = "proxy.archived.topics.refresh.interval.ms"
DEFAULT_ARCHIVE_REFRESH_MS = 30_000


@dataclass(frozen=True)
class ArchivedTopic:
    name: str
    topic_id: uuid.UUID
    partitions: dict[int, TopicIdPartition]


def archived_names(props: Mapping[str, object]) -> frozenset[str] | None:
    """The names ``proxy.archived.topics`` lists; None for ``*``; empty when unset."""
    text = str(props.get(ARCHIVED_TOPICS_CONFIG) or "").strip()
    if text == "*":
        return None
    names = frozenset(name.strip() for name in text.split(",") if name.strip())
    if "*" in names:
        raise ValueError(f"{ARCHIVED_TOPICS_CONFIG}: '*' stands alone (every topic), not in a list")
    return names


class Archive:
    """The archived topics of one bucket, given the names the cluster has now."""

    def __init__(self, storage: ObjectStorage, names: frozenset[str] | None, refresh_interval_ms: int,
                 cluster_topics: Callable[[], Mapping[str, uuid.UUID] | None]) -> None:
        if refresh_interval_ms < 1:
            raise ValueError(f"{ARCHIVE_REFRESH_CONFIG} must be positive, got {refresh_interval_ms}")
        self.names = names
        self.store = BucketIndexStore(storage, refresh_interval_ms / 1000)
        self._cluster_topics = cluster_topics
        self._made_from: tuple[object, object] | None = None
        self._topics: dict[str, ArchivedTopic] = {}

    @classmethod
    def from_properties(cls, storage: ObjectStorage, props: Mapping[str, object],
                        cluster_topics: Callable[[], Mapping[str, uuid.UUID] | None]) -> Archive | None:
        names = archived_names(props)
        if names is not None and not names:
            return None
        interval = int(str(props.get(ARCHIVE_REFRESH_CONFIG) or DEFAULT_ARCHIVE_REFRESH_MS))
        return cls(storage, names, interval, cluster_topics)

    def named(self, topic: str) -> bool:
        """Whether configuration names ``topic`` an archive (whatever the cluster has)."""
        return self.names is None or topic in self.names

    def topics(self) -> dict[str, ArchivedTopic]:
        """The archived topics now, by name. Asked on every request that may name one, so made
        again only when the bucket's index or the cluster's topics change (each is a new object)."""
        readable = self.store.readable_partitions()
        cluster = self._cluster_topics()
        if self._made_from is not None and self._made_from[0] is readable and self._made_from[1] is cluster:
            return self._topics
        topics: dict[str, ArchivedTopic] = {}
        if cluster is not None:  # until the cluster's topics are known, nothing is archived
            states = self.store.topic_tiering_states()
            for tp in readable:
                if not self.named(tp.topic) or tp.topic in cluster:
                    continue
                state = states.get(tp.topic)
                if state is not None and state.topic_id != tp.topic_id:
                    continue  # an earlier topic of the same name
                topic = topics.setdefault(tp.topic, ArchivedTopic(tp.topic, tp.topic_id, {}))
                if topic.topic_id == tp.topic_id:
                    topic.partitions[tp.partition] = tp
        kept = {name: t for name, t in topics.items() if any(map(self.store.copied_segments, t.partitions.values()))}
        for t in kept.values():  # a partition that never had a segment tiered has no manifest: empty
            for p in range(max(t.partitions) + 1):
                t.partitions.setdefault(p, TopicIdPartition(t.topic_id, t.name, p))
        self._topics = kept
        self._made_from = (readable, cluster)
        return self._topics

    def start(self) -> None:
        self.store.start()

    def close(self) -> None:
        self.store.close()
