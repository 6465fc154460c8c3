"""Assembling the remote tier from configuration: storage, metadata store and manager.

Keys (Kafka-style properties; the CLI flags set the first three):

- ``proxy.data.dir``: local working directory (default ``/tmp/tiered-proxy``): spool files,
  the data-loss gap log, and the embedded metadata store and remote folder by default;
- ``remote.log.storage.uri``: ``file:///path`` (default ``file://{data dir}/remote``) or
  ``s3://bucket/prefix`` (see ``tiering.storage.uri``);
- ``remote.log.metadata.uri``: ``file:///path`` (default ``file://{data dir}/metadata``), the
  embedded journal store, or ``topic:`` / ``topic://NAME`` for the topic-based store on the
  upstream cluster (``__remote_log_metadata`` by default; ``remote.log.metadata.topic.num.partitions``
  and ``remote.log.metadata.topic.replication.factor`` as in Kafka; see ``tiering.metadata.uri``);
- everything :class:`tiering.config.TieringConfig` reads.
"""

from __future__ import annotations

import logging
import tempfile
import urllib.parse
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from tiering.archive import Archive
from tiering.client_security import ClientSecurity
from tiering.cluster_configs import ClusterConfigs
from tiering.config import STORAGE_URI_CONFIG, TieringConfig, require_uri
from tiering.copy.manager import RemoteLogManager
from tiering.metadata.manager import RemoteLogMetadataManager
from tiering.metadata.manifests import DEFAULT_MANIFEST_INTERVAL_MS, MANIFEST_INTERVAL_CONFIG, ManifestWriter
from tiering.metadata.remote_tier_record import check_remote_tier
from tiering.metadata.uri import metadata_from_uri
from tiering.storage.api import RemoteStorageError, RemoteStorageManager
from tiering.storage.at_rest import AtRestConfigError
from tiering.storage.key_maintenance import check_keys
from tiering.storage.local_folder import LocalFolderStorage
from tiering.storage.object_layout import ObjectStorage
from tiering.storage.uri import storage_from_uri
from tiering.topic_configs import REMOTE_STORAGE_COMPRESSION_TYPE

log = logging.getLogger(__name__)

DATA_DIR_CONFIG = "proxy.data.dir"
METADATA_URI_CONFIG = "remote.log.metadata.uri"
OWNERSHIP_CONFIG = "proxy.copier.ownership"  # group (default with a metadata topic), all or none
OWNERSHIPS = ("group", "all", "none")
GROUP_ID_CONFIG = "remote.log.manager.group.id"
GROUP_SESSION_TIMEOUT_CONFIG = "remote.log.manager.group.session.timeout.ms"
DEFAULT_DATA_DIR = "/tmp/tiered-proxy"


class SettingError(OSError):
    """What a setting names (the data dir, the remote folder, the metadata store) cannot be
    created, written or opened; the message names the setting, the path and the OS reason."""


# The flag that sets each key on the command line, so a message names what the operator typed.
_FLAGS = {DATA_DIR_CONFIG: "--data-dir", STORAGE_URI_CONFIG: "--remote", METADATA_URI_CONFIG: "--metadata"}


def _check_keys(storage: ObjectStorage) -> None:
    """The key ring against the bucket's (``tiering.storage.key_maintenance``); a store that does not
    answer now is no reason to stop the proxy, and is said."""
    try:
        check_keys(storage)
    except RemoteStorageError as e:
        log.warning("could not check the key ring against the remote tier (%s); checked again at the next start", e)
    except ValueError:
        storage.close()
        raise


def _setting_error(key: str, value: str, path: Path, action: str, error: OSError) -> SettingError:
    where = f": {error.filename}" if error.filename and Path(str(error.filename)) != path else ""
    return SettingError(f"{_FLAGS[key]} {value} ({key}): cannot {action}: {error.strerror or error}{where}")


def _metadata_error(metadata_uri: str, error: OSError) -> SettingError:
    directory = Path(urllib.parse.unquote(urllib.parse.urlsplit(metadata_uri).path))
    return _setting_error(METADATA_URI_CONFIG, metadata_uri, directory, "open the metadata store", error)


def _writable_dir(path: Path) -> None:
    path.mkdir(parents=True, exist_ok=True)
    # mkdir accepts an existing directory the proxy cannot write to: find out now, not at the first copy.
    try:
        with tempfile.TemporaryFile(dir=path):
            pass
    except OSError as e:
        raise OSError(e.errno, e.strerror, str(path)) from None


def open_locations(bootstrap_servers: str, props: Mapping[str, object], security: ClientSecurity,
                   ) -> tuple[Path, str, RemoteStorageManager, str, RemoteLogMetadataManager]:
    """The data dir, the remote tier and the metadata store the properties name, created or opened
    (data dir, storage URI, storage, metadata URI, store). A failure names its setting (flag and
    key), the path and the reason: a SettingError (exit 1), or a ValueError for a malformed URI."""
    data_dir = Path(str(props.get(DATA_DIR_CONFIG) or DEFAULT_DATA_DIR))
    try:
        _writable_dir(data_dir)
    except OSError as e:
        raise _setting_error(DATA_DIR_CONFIG, str(data_dir), data_dir, "create or write the directory", e) from None
    storage_uri = str(props.get(STORAGE_URI_CONFIG) or f"file://{data_dir.resolve()}/remote")
    metadata_uri = str(props.get(METADATA_URI_CONFIG) or f"file://{data_dir.resolve()}/metadata")
    require_uri(storage_uri, f"--remote ({STORAGE_URI_CONFIG})", "s3://BUCKET/PREFIX")
    require_uri(metadata_uri, f"--metadata ({METADATA_URI_CONFIG})", "topic://NAME")
    try:
        check_remote_tier(data_dir, storage_uri, metadata_uri)  # before either is opened: a refusal changes nothing
    except OSError as e:  # the store's directory is unusable (reading its record failed)
        raise _metadata_error(metadata_uri, e) from None
    try:
        storage = storage_from_uri(storage_uri, **dict(props))
        if isinstance(storage, LocalFolderStorage):
            _writable_dir(storage.root)
        if isinstance(storage, ObjectStorage):
            _check_keys(storage)
    except OSError as e:
        root = Path(urllib.parse.unquote(urllib.parse.urlsplit(storage_uri).path))
        raise _setting_error(STORAGE_URI_CONFIG, storage_uri, root, "create or write the folder", e) from None
    except AtRestConfigError:
        raise  # names its own keys
    except ValueError as e:
        raise ValueError(f"--remote ({STORAGE_URI_CONFIG}): {e}") from None
    try:
        metadata = metadata_from_uri(metadata_uri, bootstrap_servers, data_dir, props, security=security)
    except OSError as e:
        storage.close()
        raise _metadata_error(metadata_uri, e) from None
    except ValueError as e:
        storage.close()
        raise ValueError(f"--metadata ({METADATA_URI_CONFIG}): {e}") from None
    return data_dir, storage_uri, storage, metadata_uri, metadata


def _topic_config(metadata: RemoteLogMetadataManager, topic: str, key: str) -> str | None:
    state = metadata.topic_tiering_state(topic)
    return None if state is None else dict(state.configs).get(key)


@dataclass
class TieringService:
    storage: RemoteStorageManager
    metadata: RemoteLogMetadataManager
    manager: RemoteLogManager
    data_dir: Path
    cluster_configs: ClusterConfigs  # the broker keys in effect: properties under dynamic defaults
    storage_uri: str = ""
    metadata_uri: str = ""
    ownership: object | None = None  # GroupOwnership when instances share a metadata topic
    manifests: ManifestWriter | None = None  # the bucket's description of itself (our stores only)
    archive: Archive | None = None  # the archived topics (proxy.archived.topics) of the remote tier
    read_replica: Archive | None = None  # another cluster's remote tier, served read-only

    @property
    def archives(self) -> list[Archive]:
        return [a for a in (self.archive, self.read_replica) if a is not None]

    @classmethod
    def from_properties(cls, bootstrap_servers: str, props: Mapping[str, object]) -> TieringService | None:
        """The remote tier the properties describe, or None when tiering is switched off."""
        config = TieringConfig.from_properties(props)
        if not config.enabled:
            return None
        security = ClientSecurity.from_properties(props)
        data_dir, storage_uri, storage, metadata_uri, metadata = open_locations(bootstrap_servers, props, security)
        manager = RemoteLogManager(bootstrap_servers, storage, metadata, config, data_dir, security=security)
        cluster_configs = ClusterConfigs(props, metadata)
        manager.follow_config = cluster_configs.tiering
        ownership = None
        mode = str(props.get(OWNERSHIP_CONFIG, "group"))
        if mode not in OWNERSHIPS:
            metadata.close()
            raise ValueError(f"{OWNERSHIP_CONFIG}={mode}: expected one of {', '.join(OWNERSHIPS)}")
        if mode == "none":  # serves reads and admin; copies, expires and deletes nothing
            manager.owns = lambda tp: False
        elif hasattr(metadata, "partitions_count") and mode == "group":
            # A shared metadata topic: instances divide the copying by a consumer group.
            from tiering.copy.ownership import DEFAULT_GROUP_ID, GroupOwnership, owner_id

            ownership = GroupOwnership(
                bootstrap_servers, metadata.topic, metadata.partitions_count,  # type: ignore[attr-defined]
                group_id=str(props.get(GROUP_ID_CONFIG) or DEFAULT_GROUP_ID),
                session_timeout_ms=int(str(props.get(GROUP_SESSION_TIMEOUT_CONFIG, 10_000))),
                on_release=lambda released: (manager.release(released),
                                             metadata.release_claims(released)),  # type: ignore[attr-defined]
                on_acquire=lambda acquired: (metadata.claim(acquired, owner_id()),  # type: ignore[attr-defined]
                                             manager.wake()),
                security=security)
            manager.owns = ownership.owns
        manifests = archive = None
        if isinstance(storage, ObjectStorage):
            storage.at_rest.topic_compression = lambda topic: _topic_config(metadata, topic, REMOTE_STORAGE_COMPRESSION_TYPE)
            interval = int(str(props.get(MANIFEST_INTERVAL_CONFIG) or DEFAULT_MANIFEST_INTERVAL_MS))
            manifests = ManifestWriter(storage, metadata, interval_ms=interval)
            archive = Archive.from_properties(storage, props, lambda: manager.cluster_topics)
            if archive is not None:
                manager.keeps_remote = archive.named
        try:
            read_replica = Archive.read_replica(props, lambda: manager.cluster_topics)
        except (ValueError, OSError):
            metadata.close()
            storage.close()
            raise
        log.info("remote tier %s, metadata %s, data dir %s%s%s", storage_uri, metadata_uri, data_dir,
                 " (tiering every topic)" if config.tier_all_topics else "",
                 f"; at rest: {storage.at_rest.describe()}" if isinstance(storage, ObjectStorage) else "")
        return cls(storage, metadata, manager, data_dir, cluster_configs, storage_uri, metadata_uri, ownership,
                   manifests, archive, read_replica)

    def start(self) -> None:
        if self.manifests is not None:
            self.manifests.start()
        for archive in self.archives:
            archive.start()
        self.manager.start()

    def stop(self) -> None:
        if self.ownership is not None:
            self.ownership.close()  # type: ignore[attr-defined]
        self.manager.stop()
        for archive in self.archives:
            archive.close()
        if self.read_replica is not None:
            requests = self.read_replica.storage.requests.snapshot()[0]
            log.info("%s: requests %s", self.read_replica.what,
                     ", ".join(f"{kind} {requests.get(kind, 0)}" for kind in ("GET", "LIST", "PUT", "DELETE")))
            self.read_replica.close_storage()  # its own; this proxy's storage closes below
        if self.manifests is not None:
            self.manifests.close()  # what the copiers wrote last is described before the store closes
        self.metadata.close()
        requests, failures, read, written = self.storage.requests.snapshot()
        log.info("remote tier requests: %s; failed %d; bytes read %d, written %d",
                 ", ".join(f"{kind} {requests.get(kind, 0)}" for kind in ("GET", "PUT", "DELETE", "LIST")),
                 sum(failures.values()), read, written)
        self.storage.close()
