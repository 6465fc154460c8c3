"""A read-only copy of a remote log metadata store, for tools and Spark's driver: the embedded
journal is read without being opened for writing (safe beside a running proxy); the metadata
topic is replayed into a scratch directory. Neither is created when missing: a read-only
command says the store is not there instead of leaving an empty one behind."""

from __future__ import annotations

import tempfile
import urllib.parse
from collections.abc import Mapping
from pathlib import Path

from tiering.client_security import ClientSecurity
from tiering.config import DEFAULT_METADATA_TOPIC, require_uri
from tiering.metadata.journal_store import JOURNAL_NAME, read_journal
from tiering.metadata.state import MetadataState
from tiering.metadata.uri import METADATA_PARTITIONS_CONFIG, metadata_from_uri


class StoreNotFoundError(FileNotFoundError):
    """The metadata store a URI names does not exist (no directory, no journal, no topic)."""


def load_metadata(metadata_uri: str, bootstrap_servers: str | None = None,
                  props: Mapping[str, object] | None = None, security: ClientSecurity | None = None) -> MetadataState:
    parts = require_uri(metadata_uri, "--metadata", "topic://NAME")
    if parts.scheme == "file":
        if parts.netloc not in ("", "localhost") or not parts.path.startswith("/"):
            raise ValueError(f"--metadata {metadata_uri!r}: use file:///ABSOLUTE/PATH")
        return _load_journal(metadata_uri, Path(urllib.parse.unquote(parts.path)))
    if parts.scheme != "topic":
        raise ValueError(f"--metadata {metadata_uri!r}: expected file:///ABSOLUTE/PATH or topic://NAME")
    if not bootstrap_servers:
        raise ValueError(f"metadata URI {metadata_uri!r}: a topic store needs bootstrap servers (cluster or proxy)")
    topic = parts.netloc or parts.path.strip("/") or DEFAULT_METADATA_TOPIC
    # Opening a topic store creates the topic when it is missing: look first.
    partitions = _topic_partitions(bootstrap_servers, topic, security)
    if partitions is None:
        raise StoreNotFoundError(f"metadata store {metadata_uri}: topic {topic} does not exist on {bootstrap_servers} "
                                 "(nothing has been tiered through it)")
    # The topic's own partition count, so a tool needs no copy of the proxy's config.
    props = {METADATA_PARTITIONS_CONFIG: str(partitions), **(props or {})}
    with tempfile.TemporaryDirectory(prefix="tiered-metadata-") as scratch:
        store = metadata_from_uri(metadata_uri, bootstrap_servers, Path(scratch), props, security=security)
        try:
            return store.state_snapshot()
        finally:
            store.close()


def _load_journal(metadata_uri: str, directory: Path) -> MetadataState:
    if not directory.is_dir():
        raise StoreNotFoundError(f"metadata store {metadata_uri}: no such directory {directory}")
    path = directory / JOURNAL_NAME
    if not path.is_file():
        raise StoreNotFoundError(f"metadata store {metadata_uri}: {directory} holds no journal ({JOURNAL_NAME}); "
                                 "the proxy's store is file://DATA_DIR/metadata")
    try:
        data = path.read_bytes()
    except OSError as e:
        raise OSError(f"metadata store {metadata_uri}: cannot read {path}: {e.strerror or e}") from None
    state = MetadataState()
    for record in read_journal(data)[0]:
        state.apply(record)
    return state


def _topic_partitions(bootstrap_servers: str, topic: str, security: ClientSecurity | None) -> int | None:
    """How many partitions ``topic`` has, or None if it does not exist."""
    from tiering.broker_client import BrokerClient

    client = BrokerClient(bootstrap_servers, security=security)
    try:
        info = client.metadata([topic]).get(topic)
    finally:
        client.close()
    return None if info is None else len(info.partitions)
