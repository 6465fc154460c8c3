"""KIP-405's RemoteStorageManager, and the errors every remote store raises.

The operations are synchronous and blocking; callers run them in worker threads. The public
methods validate their arguments and enforce KIP-917's bound on custom metadata; a store
implements the ``_`` methods (``tiering.storage.object_layout.ObjectStorage`` does, for the
local-folder and the S3 store).
"""

from __future__ import annotations

import collections
import contextvars
import dataclasses
import logging
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import TracebackType

from tiering.model import IndexType, LogSegmentData, RemoteLogSegmentMetadata

log = logging.getLogger(__name__)

# Kafka's broker config bounding what copy_log_segment_data may return (KIP-917).
CUSTOM_METADATA_MAX_BYTES_CONFIG = "remote.log.metadata.custom.metadata.max.bytes"
DEFAULT_CUSTOM_METADATA_MAX_BYTES = 128


class RemoteStorageError(Exception):
    """A storage operation failed. ``retriable`` says whether trying the same call again may succeed
    (throttling, server errors, lost connections) or not (bad configuration, missing bucket)."""

    def __init__(self, message: str, *, retriable: bool = False) -> None:
        super().__init__(message)
        self.retriable = retriable


class RemoteResourceNotFoundError(RemoteStorageError):
    """The segment object or index asked for does not exist (never written, or deleted)."""

    def __init__(self, message: str) -> None:
        super().__init__(message, retriable=False)


class CustomMetadataTooLargeError(RemoteStorageError):
    """The custom metadata produced by a copy exceeds ``remote.log.metadata.custom.metadata.max.bytes``;
    the copied objects have been deleted again."""

    def __init__(self, message: str) -> None:
        super().__init__(message, retriable=False)



# The topic the calling thread's storage requests are for: set by RemoteStorageManager's public
# methods around their work, read where requests are counted (the local folder's file operations,
# botocore's event hooks), which run on the calling thread. A thread the work is handed to gets it
# by running in a copy of the caller's context (contextvars.copy_context().run).
_topic: contextvars.ContextVar[str | None] = contextvars.ContextVar("remote_storage_topic", default=None)

BYTES_READ = "bytes_read"
BYTES_WRITTEN = "bytes_written"
KINDS = ("GET", "PUT", "DELETE", "LIST")  # the request classes object stores bill by
MINUTE_S = 60
RECENT_MINUTES = 60  # the per-minute ring: the last hour


@contextmanager
def topic_requests(topic: str | None) -> Iterator[None]:
    """Counts the storage requests the calling thread makes meanwhile for ``topic``."""
    token = _topic.set(topic)
    try:
        yield
    finally:
        _topic.reset(token)


def current_topic() -> str | None:
    """The topic the calling thread's storage requests count for now (None: no topic)."""
    return _topic.get()


class StorageRequests:
    """Requests a remote tier was sent, by kind (``GET``, ``PUT``, ``DELETE``, ``LIST``: the classes
    object stores bill by), every attempt counted (a retried request is billed twice), those that
    failed (a server error, throttling, or no answer), and the bytes read and written.

    Besides the totals, each request and byte moved is counted for the topic the calling thread
    works for (:func:`topic_requests`; requests for no topic, such as manifests, key checks and
    listings of the bucket, count in the totals only): since start (:meth:`by_topic`) and per
    minute over the last hour (:meth:`recent`), a ring of minutes holding only the topics active in
    each minute."""

    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self._lock = threading.Lock()
        self._requests: dict[str, int] = {}
        self._failures: dict[str, int] = {}
        self.bytes_read = 0
        self.bytes_written = 0
        self._clock = clock
        self.started = clock()
        self._by_topic: dict[str, dict[str, int]] = {}  # in the order topics first made a request
        self._minutes: collections.deque[tuple[int, dict[str, dict[str, int]]]] = collections.deque(
            maxlen=RECENT_MINUTES)

    def _count_topic(self, topic: str, key: str, n: int) -> None:
        """Under the lock."""
        counts = self._by_topic.get(topic)
        if counts is None:
            counts = self._by_topic[topic] = {}
        counts[key] = counts.get(key, 0) + n
        minute = int(self._clock() // MINUTE_S)
        if not self._minutes or self._minutes[-1][0] != minute:
            self._minutes.append((minute, {}))
        bucket = self._minutes[-1][1].get(topic)
        if bucket is None:
            bucket = self._minutes[-1][1][topic] = {}
        bucket[key] = bucket.get(key, 0) + n

    def sent(self, kind: str) -> None:
        topic = _topic.get()
        with self._lock:
            self._requests[kind] = self._requests.get(kind, 0) + 1
            if topic is not None:
                self._count_topic(topic, kind, 1)

    def failed(self, kind: str) -> None:
        with self._lock:
            self._failures[kind] = self._failures.get(kind, 0) + 1

    def moved(self, *, read: int = 0, written: int = 0) -> None:
        topic = _topic.get()
        with self._lock:
            self.bytes_read += read
            self.bytes_written += written
            if topic is not None:
                if read:
                    self._count_topic(topic, BYTES_READ, read)
                if written:
                    self._count_topic(topic, BYTES_WRITTEN, written)

    def snapshot(self) -> tuple[dict[str, int], dict[str, int], int, int]:
        """(requests by kind, failures by kind, bytes read, bytes written)."""
        with self._lock:
            return dict(self._requests), dict(self._failures), self.bytes_read, self.bytes_written

    def by_topic(self) -> dict[str, dict[str, int]]:
        """Topic -> requests by kind and ``bytes_read``, ``bytes_written``, since start; topics in
        the order they first made a request."""
        with self._lock:
            return {topic: dict(counts) for topic, counts in self._by_topic.items()}

    def recent(self, seconds: float = RECENT_MINUTES * MINUTE_S) -> tuple[dict[str, dict[str, int]], float]:
        """The counts of :meth:`by_topic` over the whole minutes of the last ``seconds`` (at most an
        hour), the current minute included, and the seconds they cover: less than ``seconds`` while
        the process is younger."""
        minutes = max(1, min(int(seconds // MINUTE_S), RECENT_MINUTES))
        with self._lock:
            now = self._clock()
            first = int(now // MINUTE_S) - minutes + 1
            out: dict[str, dict[str, int]] = {}
            for minute, topics in self._minutes:
                if minute < first:
                    continue
                for topic, counts in topics.items():
                    into = out.setdefault(topic, {})
                    for key, n in counts.items():
                        into[key] = into.get(key, 0) + n
            covered = now - max(self.started, first * MINUTE_S)
        return out, max(covered, 0.0)


class RemoteStorageManager(ABC):
    """KIP-405's RemoteStorageManager, synchronous.

    The public methods validate arguments and enforce KIP-917, and count the requests they make
    for the segment's topic (``requests``); subclasses implement the ``_`` methods. Copy and delete
    are idempotent: copying the same segment again overwrites its objects, and deleting a segment
    that is (partly or wholly) gone succeeds.
    """

    def __init__(self, *, custom_metadata_max_bytes: int = DEFAULT_CUSTOM_METADATA_MAX_BYTES) -> None:
        self.requests = StorageRequests()
        if custom_metadata_max_bytes < 0:
            raise ValueError(f"custom_metadata_max_bytes must be >= 0, got {custom_metadata_max_bytes}")
        self.custom_metadata_max_bytes = custom_metadata_max_bytes
        self._closed = False

    def copy_log_segment_data(self, metadata: RemoteLogSegmentMetadata, data: LogSegmentData) -> bytes | None:
        """Stores the segment and its indexes; returns the custom metadata to record with the segment
        (KIP-917), or None.

        Raises CustomMetadataTooLargeError when that metadata is longer than
        ``custom_metadata_max_bytes``, after deleting what was written: Kafka fails such a copy and
        deletes the segment, and doing it here means no caller can forget to.
        """
        self._check_open()
        with topic_requests(metadata.topic_id_partition.topic):
            return self._copy_checked(metadata, data)

    def _copy_checked(self, metadata: RemoteLogSegmentMetadata, data: LogSegmentData) -> bytes | None:
        custom = self._copy_log_segment_data(metadata, data)
        if custom is not None and len(custom) > self.custom_metadata_max_bytes:
            try:
                # The oversized metadata is still the best description of where the objects went.
                self._delete_log_segment_data(dataclasses.replace(metadata, custom_metadata=custom))
            except RemoteStorageError:
                log.exception(
                    "could not delete segment %s after oversized custom metadata", metadata.segment_id
                )
                raise CustomMetadataTooLargeError(
                    f"custom metadata of {len(custom)} bytes exceeds the limit of "
                    f"{self.custom_metadata_max_bytes} ({CUSTOM_METADATA_MAX_BYTES_CONFIG}), "
                    "and deleting the copied segment failed"
                ) from None
            raise CustomMetadataTooLargeError(
                f"custom metadata of {len(custom)} bytes exceeds the limit of "
                f"{self.custom_metadata_max_bytes} ({CUSTOM_METADATA_MAX_BYTES_CONFIG}); segment deleted"
            )
        return custom

    def fetch_log_segment(
        self, metadata: RemoteLogSegmentMetadata, start_position: int, end_position: int | None = None
    ) -> bytes:
        """Bytes ``start_position..end_position`` of the segment's ``.log`` object.

        Both positions are inclusive, as in KIP-405's ``fetchLogSegment(metadata, startPosition,
        endPosition)``; ``end_position=None`` reads to the end of the object, and an end past the
        object is clamped to it (KIP-405: "the smaller of endPosition and the end of the ... object").
        A start at or past the end of the object yields ``b""``.
        """
        self._check_open()
        if start_position < 0:
            raise ValueError(f"start_position must be >= 0, got {start_position}")
        if end_position is not None and end_position < start_position:
            raise ValueError(f"end_position {end_position} is before start_position {start_position}")
        with topic_requests(metadata.topic_id_partition.topic):
            return self._fetch_log_segment(metadata, start_position, end_position)

    def fetch_index(self, metadata: RemoteLogSegmentMetadata, index_type: IndexType) -> bytes:
        """The whole index of the given type; RemoteResourceNotFoundError if it was not stored (an
        empty transaction index is never stored)."""
        self._check_open()
        with topic_requests(metadata.topic_id_partition.topic):
            return self._fetch_index(metadata, index_type)

    def delete_log_segment_data(self, metadata: RemoteLogSegmentMetadata) -> None:
        """Deletes every object of the segment; succeeds if some or all are already gone."""
        self._check_open()
        with topic_requests(metadata.topic_id_partition.topic):
            self._delete_log_segment_data(metadata)

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self._close()

    def __enter__(self) -> RemoteStorageManager:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def _check_open(self) -> None:
        if self._closed:
            raise RemoteStorageError(f"{type(self).__name__} is closed")

    @abstractmethod
    def _copy_log_segment_data(
        self, metadata: RemoteLogSegmentMetadata, data: LogSegmentData
    ) -> bytes | None: ...

    @abstractmethod
    def _fetch_log_segment(
        self, metadata: RemoteLogSegmentMetadata, start: int, end: int | None
    ) -> bytes: ...

    @abstractmethod
    def _fetch_index(self, metadata: RemoteLogSegmentMetadata, index_type: IndexType) -> bytes: ...

    @abstractmethod
    def _delete_log_segment_data(self, metadata: RemoteLogSegmentMetadata) -> None: ...

    def _close(self) -> None:  # noqa: B027 - optional hook, most stores hold nothing to release
        pass
