"""The metadata store a URI names (:func:`metadata_from_uri`): ``file:///path`` for the embedded
journal store, ``topic:`` or ``topic://NAME`` for the topic-based store on the upstream cluster,
and the ``remote.log.metadata.topic.*`` keys the topic store reads (as in Kafka)."""

from __future__ import annotations

import urllib.parse
from collections.abc import Mapping
from pathlib import Path

from tiering.client_security import ClientSecurity
from tiering.config import DEFAULT_METADATA_TOPIC
from tiering.metadata.journal_store import FileMetadataStore
from tiering.metadata.manager import RemoteLogMetadataManager

METADATA_PARTITIONS_CONFIG = "remote.log.metadata.topic.num.partitions"
METADATA_REPLICATION_CONFIG = "remote.log.metadata.topic.replication.factor"


def metadata_from_uri(uri: str, bootstrap_servers: str, data_dir: Path, props: Mapping[str, object],
                      security: ClientSecurity | None = None) -> RemoteLogMetadataManager:
    parts = urllib.parse.urlsplit(uri)
    if parts.scheme == "file":
        if parts.netloc not in ("", "localhost") or not parts.path.startswith("/"):
            raise ValueError(f"metadata URI {uri!r}: use file:///absolute/path")
        return FileMetadataStore(Path(urllib.parse.unquote(parts.path)))
    if parts.scheme == "topic":
        from tiering.metadata.topic_store import TopicMetadataStore

        topic = parts.netloc or parts.path.strip("/") or DEFAULT_METADATA_TOPIC
        return TopicMetadataStore(
            bootstrap_servers, data_dir / "metadata-snapshots", topic=topic,
            partitions=int(str(props.get(METADATA_PARTITIONS_CONFIG, 50))),
            replication_factor=int(str(props.get(METADATA_REPLICATION_CONFIG, 1))),
            security=security,
        )
    raise ValueError(f"metadata URI {uri!r}: expected file:///path or topic://NAME")
