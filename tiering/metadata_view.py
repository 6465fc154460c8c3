"""A read-only copy of a remote log metadata store, for tools and Spark's driver: the embedded
journal is read without being opened for writing (safe beside a running proxy); the metadata
topic is replayed into a scratch directory."""

from __future__ import annotations

import tempfile
import urllib.parse
from collections.abc import Mapping
from pathlib import Path

from tiering.metadata import MetadataState
from tiering.metadata_file import JOURNAL_NAME, read_journal


def load_metadata(metadata_uri: str, bootstrap_servers: str | None = None,
                  props: Mapping[str, object] | None = None) -> MetadataState:
    parts = urllib.parse.urlsplit(metadata_uri)
    if parts.scheme == "file":
        state = MetadataState()
        path = Path(urllib.parse.unquote(parts.path)) / JOURNAL_NAME
        for record in read_journal(path.read_bytes())[0]:
            state.apply(record)
        return state
    if not bootstrap_servers:
        raise ValueError(f"metadata URI {metadata_uri!r}: a topic store needs bootstrap servers (cluster or proxy)")
    from tiering.service import metadata_from_uri

    with tempfile.TemporaryDirectory(prefix="tiered-metadata-") as scratch:
        store = metadata_from_uri(metadata_uri, bootstrap_servers, Path(scratch), props or {})
        try:
            return store.state_snapshot()
        finally:
            store.close()
