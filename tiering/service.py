"""Assembling the remote tier from configuration: storage, metadata store and manager.

Keys (Kafka-style properties; the CLI flags set the first three):

- ``proxy.data.dir``: local working directory (default ``/tmp/tiered-proxy``): spool files,
  the data-loss gap log, and the embedded metadata store and remote folder by default;
- ``remote.log.storage.uri``: ``file:///path`` (default ``file://{data dir}/remote``) or
  ``s3://bucket/prefix`` (see ``tiering.storage``);
- ``remote.log.metadata.uri``: ``file:///path`` (default ``file://{data dir}/metadata``), the
  embedded journal store, or ``topic:`` / ``topic://NAME`` for the topic-based store on the
  upstream cluster (``__remote_log_metadata`` by default; ``remote.log.metadata.topic.num.partitions``
  and ``remote.log.metadata.topic.replication.factor`` as in Kafka);
- everything :class:`tiering.config.TieringConfig` reads.
"""

from __future__ import annotations

import logging
import ssl
import urllib.parse
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from tiering.broker_tls import upstream_ssl_context
from tiering.config import TieringConfig
from tiering.manager import RemoteLogManager
from tiering.metadata import RemoteLogMetadataManager
from tiering.metadata_file import FileMetadataStore
from tiering.storage import RemoteStorageManager, storage_from_uri

log = logging.getLogger(__name__)

DATA_DIR_CONFIG = "proxy.data.dir"
STORAGE_URI_CONFIG = "remote.log.storage.uri"
METADATA_URI_CONFIG = "remote.log.metadata.uri"
METADATA_PARTITIONS_CONFIG = "remote.log.metadata.topic.num.partitions"
METADATA_REPLICATION_CONFIG = "remote.log.metadata.topic.replication.factor"
OWNERSHIP_CONFIG = "proxy.copier.ownership"  # group (default with a metadata topic) or all
GROUP_ID_CONFIG = "remote.log.manager.group.id"
GROUP_SESSION_TIMEOUT_CONFIG = "remote.log.manager.group.session.timeout.ms"
DEFAULT_DATA_DIR = "/tmp/tiered-proxy"
DEFAULT_METADATA_TOPIC = "__remote_log_metadata"


def metadata_from_uri(uri: str, bootstrap_servers: str, data_dir: Path, props: Mapping[str, object],
                      ssl_context: ssl.SSLContext | None = None) -> RemoteLogMetadataManager:
    parts = urllib.parse.urlsplit(uri)
    if parts.scheme == "file":
        if parts.netloc not in ("", "localhost") or not parts.path.startswith("/"):
            raise ValueError(f"metadata URI {uri!r}: use file:///absolute/path")
        return FileMetadataStore(Path(urllib.parse.unquote(parts.path)))
    if parts.scheme == "topic":
        from tiering.metadata_topic import TopicMetadataStore

        topic = parts.netloc or parts.path.strip("/") or DEFAULT_METADATA_TOPIC
        return TopicMetadataStore(
            bootstrap_servers, data_dir / "metadata-snapshots", topic=topic,
            partitions=int(str(props.get(METADATA_PARTITIONS_CONFIG, 50))),
            replication_factor=int(str(props.get(METADATA_REPLICATION_CONFIG, 1))),
            ssl_context=ssl_context,
        )
    raise ValueError(f"metadata URI {uri!r}: expected file:///path or topic://NAME")


@dataclass
class TieringService:
    storage: RemoteStorageManager
    metadata: RemoteLogMetadataManager
    manager: RemoteLogManager
    data_dir: Path
    storage_uri: str = ""
    metadata_uri: str = ""
    ownership: object | None = None  # GroupOwnership when instances share a metadata topic

    @classmethod
    def from_properties(cls, bootstrap_servers: str, props: Mapping[str, object]) -> TieringService | None:
        """The remote tier the properties describe, or None when tiering is switched off."""
        config = TieringConfig.from_properties(props)
        if not config.enabled:
            return None
        data_dir = Path(str(props.get(DATA_DIR_CONFIG) or DEFAULT_DATA_DIR))
        data_dir.mkdir(parents=True, exist_ok=True)
        storage_uri = str(props.get(STORAGE_URI_CONFIG) or f"file://{data_dir.resolve()}/remote")
        metadata_uri = str(props.get(METADATA_URI_CONFIG) or f"file://{data_dir.resolve()}/metadata")
        storage = storage_from_uri(storage_uri, **dict(props))
        tls = upstream_ssl_context(props)
        metadata = metadata_from_uri(metadata_uri, bootstrap_servers, data_dir, props, ssl_context=tls)
        manager = RemoteLogManager(bootstrap_servers, storage, metadata, config, data_dir, ssl_context=tls)
        ownership = None
        if hasattr(metadata, "partitions_count") and str(props.get(OWNERSHIP_CONFIG, "group")) == "group":
            # A shared metadata topic: instances divide the copying by a consumer group.
            from tiering.ownership import DEFAULT_GROUP_ID, GroupOwnership

            ownership = GroupOwnership(
                bootstrap_servers, metadata.topic, metadata.partitions_count,  # type: ignore[attr-defined]
                group_id=str(props.get(GROUP_ID_CONFIG) or DEFAULT_GROUP_ID),
                session_timeout_ms=int(str(props.get(GROUP_SESSION_TIMEOUT_CONFIG, 10_000))),
                on_release=manager.release, on_acquire=lambda _: manager.wake(), ssl_context=tls)
            manager.owns = ownership.owns
        log.info("remote tier %s, metadata %s, data dir %s%s", storage_uri, metadata_uri, data_dir,
                 " (tiering every topic)" if config.tier_all_topics else "")
        return cls(storage, metadata, manager, data_dir, storage_uri, metadata_uri, ownership)

    def start(self) -> None:
        self.manager.start()

    def stop(self) -> None:
        if self.ownership is not None:
            self.ownership.close()  # type: ignore[attr-defined]
        self.manager.stop()
        self.metadata.close()
        self.storage.close()
