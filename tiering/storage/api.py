"""KIP-405's RemoteStorageManager, and the errors every remote store raises.

The operations are synchronous and blocking; callers run them in worker threads. The public
methods validate their arguments and enforce KIP-917's bound on custom metadata; a store
implements the ``_`` methods (``tiering.storage.object_layout.ObjectStorage`` does, for the
local-folder and the S3 store).
"""

from __future__ import annotations

import dataclasses
import logging
import threading
from abc import ABC, abstractmethod
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



class StorageRequests:
    """Requests a remote tier was sent, by kind (``GET``, ``PUT``, ``DELETE``, ``LIST``: the classes
    object stores bill by), every attempt counted (a retried request is billed twice), those that
    failed (a server error, throttling, or no answer), and the bytes read and written."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._requests: dict[str, int] = {}
        self._failures: dict[str, int] = {}
        self.bytes_read = 0
        self.bytes_written = 0

    def sent(self, kind: str) -> None:
        with self._lock:
            self._requests[kind] = self._requests.get(kind, 0) + 1

    def failed(self, kind: str) -> None:
        with self._lock:
            self._failures[kind] = self._failures.get(kind, 0) + 1

    def moved(self, *, read: int = 0, written: int = 0) -> None:
        with self._lock:
            self.bytes_read += read
            self.bytes_written += written

    def snapshot(self) -> tuple[dict[str, int], dict[str, int], int, int]:
        """(requests by kind, failures by kind, bytes read, bytes written)."""
        with self._lock:
            return dict(self._requests), dict(self._failures), self.bytes_read, self.bytes_written


class RemoteStorageManager(ABC):
    """KIP-405's RemoteStorageManager, synchronous.

    The public methods validate arguments and enforce KIP-917; subclasses implement the ``_``
    methods. Copy and delete are idempotent: copying the same segment again overwrites its objects,
    and deleting a segment that is (partly or wholly) gone succeeds.
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
        return self._fetch_log_segment(metadata, start_position, end_position)

    def fetch_index(self, metadata: RemoteLogSegmentMetadata, index_type: IndexType) -> bytes:
        """The whole index of the given type; RemoteResourceNotFoundError if it was not stored (an
        empty transaction index is never stored)."""
        self._check_open()
        return self._fetch_index(metadata, index_type)

    def delete_log_segment_data(self, metadata: RemoteLogSegmentMetadata) -> None:
        """Deletes every object of the segment; succeeds if some or all are already gone."""
        self._check_open()
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
