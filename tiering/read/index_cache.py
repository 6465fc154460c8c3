"""The segment indexes the remote reader has fetched (:class:`IndexCache`), kept least recently
used first out within a byte budget."""

from __future__ import annotations

import threading
from collections import OrderedDict

from tiering.model import IndexType, RemoteLogSegmentMetadata
from tiering.storage.api import RemoteResourceNotFoundError, RemoteStorageManager


class IndexCache:
    """Segment indexes, least recently used first out, bounded in bytes
    (``remote.log.index.file.cache.total.size.bytes``)."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self._entries: OrderedDict[tuple[object, IndexType], bytes] = OrderedDict()
        self._size = 0
        self._lock = threading.Lock()
        self.hits = self.misses = 0

    def get(self, rsm: RemoteStorageManager, segment: RemoteLogSegmentMetadata, kind: IndexType) -> bytes:
        key = (segment.segment_id, kind)
        with self._lock:
            data = self._entries.get(key)
            if data is not None:
                self._entries.move_to_end(key)
                self.hits += 1
                return data
            self.misses += 1
        try:
            data = rsm.fetch_index(segment, kind)
        except RemoteResourceNotFoundError:
            if kind != IndexType.TRANSACTION:
                raise
            data = b""  # an empty transaction index is not stored
        with self._lock:
            if key not in self._entries and len(data) <= self.max_bytes:
                self._entries[key] = data
                self._size += len(data)
                while self._size > self.max_bytes:
                    _, old = self._entries.popitem(last=False)
                    self._size -= len(old)
        return data
