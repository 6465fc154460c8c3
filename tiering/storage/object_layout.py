"""The object layout the local-folder and S3 stores share (:class:`ObjectStorage`), one object
per file of a segment::

    {prefix}/{topic}-{topicId}/{partition}/{startOffset:020d}-{segmentId}.{ext}

``ext`` is ``log`` for the record batches or an :class:`IndexType` value for an index. ``topicId`` and
``segmentId`` are printed the way Kafka prints UUIDs (:func:`kafka_uuid_str`). With an empty prefix the
key starts at the topic directory (no leading slash).

Copy order: the indexes are written first and the ``.log`` object last, so a ``.log`` object present
under its final name means the copy of that segment completed. Deletion removes the ``.log`` object
first for the same reason: a half-deleted segment never looks complete.
"""

from __future__ import annotations

import base64
import logging
import re
import uuid
from abc import abstractmethod

from tiering.model import IndexType, LogSegmentData, RemoteLogSegmentMetadata
from tiering.storage.api import DEFAULT_CUSTOM_METADATA_MAX_BYTES, RemoteStorageManager

log = logging.getLogger(__name__)

LOG_SUFFIX = "log"


def kafka_uuid_str(value: uuid.UUID) -> str:
    """A UUID as Kafka prints it (``Uuid.toString``): URL-safe base64 of its 16 bytes, no padding."""
    return base64.urlsafe_b64encode(value.bytes).rstrip(b"=").decode("ascii")


_TOPIC_RE = re.compile(r"[A-Za-z0-9._-]{1,249}")


def normalize_prefix(prefix: str) -> str:
    """Strips slashes at either end; rejects empty, ``.`` and ``..`` components so a prefix can never
    climb out of the local root or create ambiguous keys."""
    prefix = prefix.strip("/")
    if prefix and any(part in ("", ".", "..") for part in prefix.split("/")):
        raise ValueError(f"invalid storage prefix {prefix!r}")
    return prefix


def segment_object_key(prefix: str, metadata: RemoteLogSegmentMetadata, suffix: str) -> str:
    """The key of one object of a segment (see the module docstring for the layout)."""
    tp = metadata.topic_id_partition
    # Kafka already restricts topic names to this alphabet; checking keeps keys free of '/' and so
    # inside their partition directory whatever the metadata says.
    if not _TOPIC_RE.fullmatch(tp.topic):
        raise ValueError(f"topic name {tp.topic!r} is not a legal Kafka topic name")
    if tp.partition < 0:
        raise ValueError(f"negative partition {tp.partition}")
    key = (
        f"{tp.topic}-{kafka_uuid_str(tp.topic_id)}/{tp.partition}/"
        f"{metadata.start_offset:020d}-{kafka_uuid_str(metadata.segment_id.id)}.{suffix}"
    )
    return f"{prefix}/{key}" if prefix else key


def _index_bodies(data: LogSegmentData) -> list[tuple[IndexType, bytes]]:
    """The indexes to write, in write order. An absent or empty transaction index is not stored,
    so fetching it later raises RemoteResourceNotFoundError (as KIP-405 describes for missing
    indexes)."""
    if data.extra:
        # There is no way to fetch such files back, so storing them would be dead weight; and
        # dropping them silently could hide a caller's mistake.
        raise ValueError(f"extra segment files are not supported: {sorted(data.extra)}")
    bodies = [
        (IndexType.OFFSET, data.offset_index),
        (IndexType.TIMESTAMP, data.time_index),
        (IndexType.LEADER_EPOCH, data.leader_epoch_index),
        (IndexType.PRODUCER_SNAPSHOT, data.producer_snapshot),
    ]
    if data.transaction_index:
        bodies.append((IndexType.TRANSACTION, data.transaction_index))
    return bodies



class ObjectStorage(RemoteStorageManager):
    """The object layout shared by the local and S3 stores, over four object primitives."""

    def __init__(
        self, prefix: str = "", *, custom_metadata_max_bytes: int = DEFAULT_CUSTOM_METADATA_MAX_BYTES
    ) -> None:
        super().__init__(custom_metadata_max_bytes=custom_metadata_max_bytes)
        self.prefix = normalize_prefix(prefix)

    def object_key(self, metadata: RemoteLogSegmentMetadata, suffix: str) -> str:
        return segment_object_key(self._prefix_for(metadata), metadata, suffix)

    def segment_keys(self, metadata: RemoteLogSegmentMetadata) -> list[str]:
        """Every key a segment may occupy, ``.log`` first (the delete order)."""
        return [self.object_key(metadata, LOG_SUFFIX)] + [
            self.object_key(metadata, t.value) for t in IndexType
        ]

    def _prefix_for(self, metadata: RemoteLogSegmentMetadata) -> str:
        """The prefix a segment was stored under; the configured one unless a store records it."""
        return self.prefix

    def _custom_metadata(self, prefix: str, stored_bytes: int) -> bytes | None:
        """What to return from a copy that wrote ``stored_bytes`` under ``prefix``."""
        return None

    def _copy_log_segment_data(
        self, metadata: RemoteLogSegmentMetadata, data: LogSegmentData
    ) -> bytes | None:
        # A fresh copy always goes under the configured prefix, whatever metadata the caller holds.
        prefix = self.prefix
        objects: list[tuple[str, bytes | memoryview]] = [
            (segment_object_key(prefix, metadata, t.value), body) for t, body in _index_bodies(data)
        ]
        objects.append((segment_object_key(prefix, metadata, LOG_SUFFIX), data.log))  # last: marks completion
        attempted: list[str] = []
        try:
            for key, body in objects:
                attempted.append(key)
                self._put(key, body)
                self.requests.moved(written=len(body))
        except Exception:
            # Best effort, so a failed copy leaves nothing behind; the original error is what matters.
            try:
                self._delete_keys(attempted)
            except Exception:
                log.warning("could not clean up after failed copy of %s", metadata.segment_id, exc_info=True)
            raise
        return self._custom_metadata(prefix, sum(len(body) for _, body in objects))

    def _fetch_log_segment(self, metadata: RemoteLogSegmentMetadata, start: int, end: int | None) -> bytes:
        data = self._get_range(self.object_key(metadata, LOG_SUFFIX), start, end)
        self.requests.moved(read=len(data))
        return data

    def _fetch_index(self, metadata: RemoteLogSegmentMetadata, index_type: IndexType) -> bytes:
        data = self._get(self.object_key(metadata, index_type.value))
        self.requests.moved(read=len(data))
        return data

    def _delete_log_segment_data(self, metadata: RemoteLogSegmentMetadata) -> None:
        keys = self.segment_keys(metadata)
        # The .log goes first and alone, so a crash mid-delete never leaves a complete-looking segment.
        self._delete_keys(keys[:1])
        self._delete_keys(keys[1:])

    # Whole objects outside the segment layout (the bucket's manifests, tiering.metadata.manifests),
    # by keys relative to the configured prefix.

    def key(self, relative: str) -> str:
        return f"{self.prefix}/{relative}" if self.prefix else relative

    def write_object(self, relative: str, body: bytes) -> None:
        self._check_open()
        self._put(self.key(relative), body)
        self.requests.moved(written=len(body))

    def read_object(self, relative: str) -> bytes:
        """One whole object; RemoteResourceNotFoundError if absent."""
        self._check_open()
        data = self._get(self.key(relative))
        self.requests.moved(read=len(data))
        return data

    def delete_object(self, relative: str) -> None:
        """Deletes one object; an absent one is fine."""
        self._check_open()
        self._delete_keys([self.key(relative)])

    def list_directory(self, relative: str) -> tuple[list[str], list[str]]:
        """The object names and the subdirectory names directly under ``relative`` ("" for the
        top), each without the directory part."""
        self._check_open()
        directory = self.key(relative).rstrip("/")
        start = f"{directory}/" if directory else ""
        keys, directories = self._list(start)
        return ([k[len(start):] for k in keys],
                [d[len(start):].rstrip("/") for d in directories])

    # The five primitives count the requests they send in ``self.requests`` (bytes are counted above).

    @abstractmethod
    def _put(self, key: str, body: bytes | memoryview) -> None:
        """Writes one whole object, replacing any previous one; never leaves a partial object."""

    @abstractmethod
    def _get(self, key: str) -> bytes:
        """One whole object; RemoteResourceNotFoundError if absent."""

    @abstractmethod
    def _get_range(self, key: str, start: int, end: int | None) -> bytes:
        """Bytes ``start..end`` (inclusive, clamped; None = to the end) of an object; ``b""`` if
        ``start`` is at or past its end; RemoteResourceNotFoundError if absent."""

    @abstractmethod
    def _delete_keys(self, keys: list[str]) -> None:
        """Deletes the objects; absent ones are fine."""

    @abstractmethod
    def _list(self, start: str) -> tuple[list[str], list[str]]:
        """The keys of the objects directly under ``start`` (empty, or ending in ``/``) and the
        prefixes of its subdirectories (each ending in ``/``), both in full; empty if none."""
