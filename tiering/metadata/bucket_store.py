"""A read-only metadata store over a bucket's manifests (``tiering.metadata.manifests``): what
serves archived topics, whose cluster no longer has them (or never had: another cluster's
bucket). It answers every query of :class:`RemoteLogMetadataManager` from the last reading of the
manifests, read again every interval on a thread of its own; it refuses every write."""

from __future__ import annotations

import logging
import threading

from tiering.metadata.manager import RemoteLogMetadataManager
from tiering.metadata.manifests import read_bucket
from tiering.metadata.state import RemoteLogMetadata
from tiering.storage.object_layout import ObjectStorage

log = logging.getLogger(__name__)


class ReadOnlyStoreError(PermissionError):
    """A write to a store that only reads a bucket's manifests."""


class BucketIndexStore(RemoteLogMetadataManager):
    def __init__(self, storage: ObjectStorage, refresh_interval_s: float) -> None:
        super().__init__()
        self.storage = storage
        self.refresh_interval_s = refresh_interval_s
        self.refreshes = 0  # readings of the manifests, and those that failed (metrics)
        self.failures = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def refresh(self) -> None:
        """Read the manifests again; the new state replaces the old one whole."""
        index = read_bucket(self.storage)
        with self._lock:
            self._state = index.state
        self.refreshes += 1
        if index.undescribed:
            log.warning("remote tier %s: %d partition directories hold segments but no manifest (not served): %s",
                        self.storage.key(""), len(index.undescribed), ", ".join(index.undescribed[:5]))

    def start(self) -> None:
        """Read the manifests now (a failure is logged: the next interval tries again), then every interval."""
        self._try_refresh()
        self._thread = threading.Thread(target=self._run, name="bucket-index", daemon=True)
        self._thread.start()

    def _try_refresh(self) -> None:
        try:
            self.refresh()
        except Exception as e:  # the store keeps serving what it read last
            self.failures += 1
            log.warning("cannot read the manifests of remote tier %s (retried in %.0fs): %s",
                        self.storage.key("") or "/", self.refresh_interval_s, e)

    def _run(self) -> None:
        while not self._stop.wait(self.refresh_interval_s):
            self._try_refresh()

    def _persist(self, record: RemoteLogMetadata) -> None:
        raise ReadOnlyStoreError(f"the index of remote tier {self.storage.key('') or '/'} is read-only")

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(10)
