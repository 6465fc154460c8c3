"""Archived topics: topics whose history the remote tier holds but the cluster does not have
(deleted, or the cluster replaced), served read-only from the bucket's own description of itself.

``proxy.archived.topics`` names them: a comma-separated list of topic names, or ``*`` for every
topic the bucket describes. A named topic is archived while the cluster has no topic of that name
(a live topic always wins a clash) and the bucket holds readable segments of it; its remote data
is then never deleted for having left the cluster (``proxy.deleted.topic.grace.ms`` does not
apply). The bucket's manifests are read again every ``proxy.archived.topics.refresh.interval.ms``.

A **read replica** is the same thing over another cluster's remote tier, given read-only:
``proxy.read.replica.remote.log.storage.uri`` (and its ``remote.log.storage.*`` keys under the
same prefix) names it, ``proxy.read.replica.topics`` the topics to serve, as ``NAME`` or
``NAME:LOCAL_NAME`` (``*``: every topic, under its own name), read again every
``proxy.read.replica.refresh.interval.ms``. Nothing is ever written there: the index is read
from the manifests, the segments by ranged GETs.
"""

from __future__ import annotations

import logging
import urllib.parse
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from tiering.config import require_uri
from tiering.metadata.bucket_store import BucketIndexStore
from tiering.metadata.remote_tier_record import canonical_storage_uri
from tiering.model import TopicIdPartition
from tiering.storage.api import RemoteStorageError
from tiering.storage.key_maintenance import check_keys
from tiering.storage.object_layout import ObjectStorage
from tiering.storage.uri import (
    S3_ACCESS_KEY_ID_CONFIG,
    S3_ENDPOINT_URL_CONFIG,
    S3_MAX_ATTEMPTS_CONFIG,
    S3_REGION_CONFIG,
    S3_RETRY_MODE_CONFIG,
    S3_SECRET_ACCESS_KEY_CONFIG,
    storage_from_uri,
)

log = logging.getLogger(__name__)

ARCHIVED_TOPICS_CONFIG = "proxy.archived.topics"
ARCHIVE_REFRESH_CONFIG = "proxy.archived.topics.refresh.interval.ms"
DEFAULT_ARCHIVE_REFRESH_MS = 30_000
READ_REPLICA_STORAGE_CONFIG = "proxy.read.replica.remote.log.storage.uri"
READ_REPLICA_TOPICS_CONFIG = "proxy.read.replica.topics"
READ_REPLICA_REFRESH_CONFIG = "proxy.read.replica.refresh.interval.ms"
DEFAULT_READ_REPLICA_REFRESH_MS = 10_000
# The storage keys a read replica takes, each as the remote tier's own key it stands for.
ENCRYPTION_PREFIX = "remote.log.storage.encryption."
READ_REPLICA_STORAGE_KEYS = {
    "proxy.read.replica.remote.log.storage.s3.endpoint.url": S3_ENDPOINT_URL_CONFIG,
    "proxy.read.replica.remote.log.storage.s3.region": S3_REGION_CONFIG,
    "proxy.read.replica.remote.log.storage.s3.access.key.id": S3_ACCESS_KEY_ID_CONFIG,
    "proxy.read.replica.remote.log.storage.s3.secret.access.key": S3_SECRET_ACCESS_KEY_CONFIG,
    "proxy.read.replica.remote.log.storage.s3.max.attempts": S3_MAX_ATTEMPTS_CONFIG,
    "proxy.read.replica.remote.log.storage.s3.retry.mode": S3_RETRY_MODE_CONFIG,
}


@dataclass(frozen=True)
class ArchivedTopic:
    name: str  # as clients see it
    topic_id: uuid.UUID
    partitions: dict[int, TopicIdPartition]  # as the bucket names them (its topic name may differ)


def archived_names(props: Mapping[str, object]) -> frozenset[str] | None:
    """The names ``proxy.archived.topics`` lists; None for ``*``; empty when unset."""
    text = str(props.get(ARCHIVED_TOPICS_CONFIG) or "").strip()
    if text == "*":
        return None
    names = frozenset(name.strip() for name in text.split(",") if name.strip())
    if "*" in names:
        raise ValueError(f"{ARCHIVED_TOPICS_CONFIG}: '*' stands alone (every topic), not in a list")
    return names


def read_replica_topics(props: Mapping[str, object]) -> tuple[frozenset[str] | None, dict[str, str]]:
    """(the bucket's topics ``proxy.read.replica.topics`` lists, None for ``*``; their local names)."""
    text = str(props.get(READ_REPLICA_TOPICS_CONFIG) or "").strip()
    if text == "*":
        return None, {}
    names: dict[str, str] = {}
    for entry in filter(None, (e.strip() for e in text.split(","))):
        source, _, local = entry.partition(":")
        if not source or source == "*" or (local == "" and ":" in entry):
            raise ValueError(f"{READ_REPLICA_TOPICS_CONFIG}: {entry!r} is not NAME or NAME:LOCAL_NAME")
        names[source] = local or source
    if len(set(names.values())) < len(names):
        raise ValueError(f"{READ_REPLICA_TOPICS_CONFIG}: two topics get the same local name")
    if not names:
        raise ValueError(f"{READ_REPLICA_TOPICS_CONFIG} names no topic (NAME[:LOCAL_NAME],... or *)")
    return frozenset(names), names


class Archive:
    """The archived topics of one bucket, given the names the cluster has now: this proxy's own
    remote tier (whose data it keeps), or a read replica's (another cluster's, only read)."""

    def __init__(self, storage: ObjectStorage, names: frozenset[str] | None, refresh_interval_ms: int,
                 cluster_topics: Callable[[], Mapping[str, uuid.UUID] | None], *,
                 local_names: Mapping[str, str] | None = None, replica_of: str = "",
                 setting: str = ARCHIVE_REFRESH_CONFIG) -> None:
        if refresh_interval_ms < 1:
            raise ValueError(f"{setting} must be positive, got {refresh_interval_ms}")
        self.names = names
        self.local_names = dict(local_names or {})
        self.keeps_data = local_names is None  # this proxy's own bucket (a read replica's is another's)
        self.replica_of = replica_of  # the read replica's remote tier, without credentials; "" for this proxy's
        self.what = f"read replica of {replica_of}" if replica_of else "archived topics"
        self.storage = storage
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

    @classmethod
    def read_replica(cls, props: Mapping[str, object],
                     cluster_topics: Callable[[], Mapping[str, uuid.UUID] | None]) -> Archive | None:
        """The read replica ``proxy.read.replica.*`` describes, or None."""
        uri = str(props.get(READ_REPLICA_STORAGE_CONFIG) or "")
        if not uri:
            return None
        parts = require_uri(uri, READ_REPLICA_STORAGE_CONFIG, "s3://BUCKET/PREFIX")
        if parts.scheme == "file" and not Path(urllib.parse.unquote(parts.path)).is_dir():
            raise ValueError(f"{READ_REPLICA_STORAGE_CONFIG}: no such folder {parts.path}")
        names, local_names = read_replica_topics(props)
        own_keys = {own: props[key] for key, own in READ_REPLICA_STORAGE_KEYS.items() if props.get(key) not in (None, "")}
        # The replica's sealed objects open with this proxy's key ring (which holds the other cluster's keys).
        own_keys.update({key: value for key, value in props.items() if key.startswith(ENCRYPTION_PREFIX)})
        storage = storage_from_uri(uri, **own_keys)
        if not isinstance(storage, ObjectStorage):
            storage.close()
            raise ValueError(f"{READ_REPLICA_STORAGE_CONFIG}: this storage keeps no manifests")
        try:
            check_keys(storage, writes=False)
        except ValueError as e:
            storage.close()
            raise ValueError(f"{READ_REPLICA_STORAGE_CONFIG}: {e}") from None
        except RemoteStorageError as e:  # checked when read instead
            log.warning("could not check the key ring against the read replica's remote tier: %s", e)
        interval = int(str(props.get(READ_REPLICA_REFRESH_CONFIG) or DEFAULT_READ_REPLICA_REFRESH_MS))
        return cls(storage, names, interval, cluster_topics, local_names=local_names,
                   replica_of=canonical_storage_uri(uri), setting=READ_REPLICA_REFRESH_CONFIG)

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
                name = self.local_names.get(tp.topic, tp.topic)
                if not self.named(tp.topic) or name in cluster:
                    continue
                state = states.get(tp.topic)
                if state is not None and state.topic_id != tp.topic_id:
                    continue  # an earlier topic of the same name
                topic = topics.setdefault(name, ArchivedTopic(name, tp.topic_id, {}))
                if topic.topic_id == tp.topic_id:
                    topic.partitions[tp.partition] = tp
        kept = {name: t for name, t in topics.items() if any(map(self.store.copied_segments, t.partitions.values()))}
        for t in kept.values():  # a partition that never had a segment tiered has no manifest: empty
            source = next(iter(t.partitions.values())).topic
            for p in range(max(t.partitions) + 1):
                t.partitions.setdefault(p, TopicIdPartition(t.topic_id, source, p))
        self._topics = kept
        self._made_from = (readable, cluster)
        return self._topics

    def start(self) -> None:
        self.store.start()

    def close(self) -> None:
        self.store.close()

    def close_storage(self) -> None:
        """For a read replica, whose storage is its own."""
        self.storage.close()
