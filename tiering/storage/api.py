"""Remote storage for tiered segments: KIP-405's RemoteStorageManager, with a local-folder and an S3
implementation.

The operations are synchronous and blocking; callers run them in worker threads. Both
implementations share one object layout, one object per file of a segment::

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
import dataclasses
import errno
import glob
import logging
import os
import re
import struct
import tempfile
import urllib.parse
import uuid
from abc import ABC, abstractmethod
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from types import TracebackType
from typing import Any

import boto3
import botocore.config
import botocore.exceptions

from tiering.model import IndexType, LogSegmentData, RemoteLogSegmentMetadata

log = logging.getLogger(__name__)

MiB = 1024 * 1024

# Kafka's broker config bounding what copy_log_segment_data may return (KIP-917).
CUSTOM_METADATA_MAX_BYTES_CONFIG = "remote.log.metadata.custom.metadata.max.bytes"
DEFAULT_CUSTOM_METADATA_MAX_BYTES = 128

# Our own keys, in the remote.log.storage.* namespace KIP-405 leaves to the storage plugin.
S3_ENDPOINT_URL_CONFIG = "remote.log.storage.s3.endpoint.url"
S3_REGION_CONFIG = "remote.log.storage.s3.region"
S3_MAX_ATTEMPTS_CONFIG = "remote.log.storage.s3.max.attempts"
S3_MULTIPART_THRESHOLD_CONFIG = "remote.log.storage.s3.multipart.threshold.bytes"
S3_PART_SIZE_CONFIG = "remote.log.storage.s3.multipart.part.size.bytes"
S3_ACCESS_KEY_ID_CONFIG = "remote.log.storage.s3.access.key.id"
S3_SECRET_ACCESS_KEY_CONFIG = "remote.log.storage.s3.secret.access.key"

LOG_SUFFIX = "log"


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


class RemoteStorageManager(ABC):
    """KIP-405's RemoteStorageManager, synchronous.

    The public methods validate arguments and enforce KIP-917; subclasses implement the ``_``
    methods. Copy and delete are idempotent: copying the same segment again overwrites its objects,
    and deleting a segment that is (partly or wholly) gone succeeds.
    """

    def __init__(self, *, custom_metadata_max_bytes: int = DEFAULT_CUSTOM_METADATA_MAX_BYTES) -> None:
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
        except Exception:
            # Best effort, so a failed copy leaves nothing behind; the original error is what matters.
            try:
                self._delete_keys(attempted)
            except Exception:
                log.warning("could not clean up after failed copy of %s", metadata.segment_id, exc_info=True)
            raise
        return self._custom_metadata(prefix, sum(len(body) for _, body in objects))

    def _fetch_log_segment(self, metadata: RemoteLogSegmentMetadata, start: int, end: int | None) -> bytes:
        return self._get_range(self.object_key(metadata, LOG_SUFFIX), start, end)

    def _fetch_index(self, metadata: RemoteLogSegmentMetadata, index_type: IndexType) -> bytes:
        return self._get(self.object_key(metadata, index_type.value))

    def _delete_log_segment_data(self, metadata: RemoteLogSegmentMetadata) -> None:
        keys = self.segment_keys(metadata)
        # The .log goes first and alone, so a crash mid-delete never leaves a complete-looking segment.
        self._delete_keys(keys[:1])
        self._delete_keys(keys[1:])

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


# ---------------------------------------------------------------------------------------------------
# Local folder


_RETRIABLE_ERRNOS = frozenset(
    {errno.EAGAIN, errno.EBUSY, errno.EINTR, errno.ENOSPC, errno.EDQUOT, errno.ETIMEDOUT, errno.ENOMEM}
)


@contextmanager
def _os_errors(what: str, key: str, *, reading: bool = True) -> Iterator[None]:
    try:
        yield
    except FileNotFoundError as e:
        if reading:
            raise RemoteResourceNotFoundError(f"{what}: {key} not found") from None
        # A missing directory while writing means the root vanished: not a missing segment.
        raise RemoteStorageError(f"{what} {key}: {e}") from e
    except OSError as e:
        raise RemoteStorageError(f"{what} {key}: {e}", retriable=e.errno in _RETRIABLE_ERRNOS) from e


def _fsync_dir(path: Path) -> None:
    # Makes renames and unlinks in the directory durable.
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class LocalFolderStorage(ObjectStorage):
    """Segments as files under ``root`` (``file:///path`` URIs): for tests, single-node setups, and
    shared file systems. Returns no custom metadata.

    Each object is written to a temporary file (``.<name>.<random>.tmp``) in its final directory,
    fsynced, then renamed into place with ``os.replace`` and the directory fsynced, so a crash never
    leaves a partial object under a final name (at worst a stray temporary file).
    """

    def __init__(
        self,
        root: Path | str,
        prefix: str = "",
        *,
        custom_metadata_max_bytes: int = DEFAULT_CUSTOM_METADATA_MAX_BYTES,
    ) -> None:
        super().__init__(prefix, custom_metadata_max_bytes=custom_metadata_max_bytes)
        self.root = Path(root)
        if not self.root.is_absolute():
            raise ValueError(f"local storage root must be an absolute path, got {str(root)!r}")
        self.root.mkdir(parents=True, exist_ok=True)

    def path_of(self, key: str) -> Path:
        return self.root / key

    def _put(self, key: str, body: bytes | memoryview) -> None:
        path = self.path_of(key)
        with _os_errors("write", key, reading=False):
            path.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
            try:
                try:
                    view = memoryview(body)
                    while view:
                        view = view[os.write(fd, view) :]
                    os.fsync(fd)
                finally:
                    os.close(fd)
                os.replace(tmp, path)
            except BaseException:
                with _suppress_os_errors():
                    os.unlink(tmp)
                raise
            # Every rename is made durable before the next object is written, so the .log (written
            # last) can never survive a crash that loses an index's rename.
            _fsync_dir(path.parent)

    def _get(self, key: str) -> bytes:
        with _os_errors("read", key):
            return self.path_of(key).read_bytes()

    def _get_range(self, key: str, start: int, end: int | None) -> bytes:
        with _os_errors("read", key):
            fd = os.open(self.path_of(key), os.O_RDONLY)
            try:
                size = os.fstat(fd).st_size
                stop = size if end is None else min(end + 1, size)
                chunks: list[bytes] = []
                position = start
                while position < stop:
                    chunk = os.pread(fd, stop - position, position)
                    if not chunk:  # truncated underneath us; return what exists
                        break
                    chunks.append(chunk)
                    position += len(chunk)
                return b"".join(chunks)
            finally:
                os.close(fd)

    def _delete_keys(self, keys: list[str]) -> None:
        directories: set[Path] = set()
        for key in keys:
            path = self.path_of(key)
            with _os_errors("delete", key, reading=False):
                # A write killed before its rename leaves a temporary file; it goes too.
                for stray in path.parent.glob(f".{glob.escape(path.name)}.*.tmp"):
                    stray.unlink(missing_ok=True)
                    directories.add(path.parent)
                try:
                    path.unlink()
                except FileNotFoundError:
                    continue
            directories.add(path.parent)
        for directory in directories:
            with _os_errors("sync", str(directory), reading=False):
                _fsync_dir(directory)


@contextmanager
def _suppress_os_errors() -> Iterator[None]:
    try:
        yield
    except OSError:
        pass


# ---------------------------------------------------------------------------------------------------
# S3


# KIP-917 blob of S3Storage, version 1, big-endian:
#   u8  version (1)
#   u64 total bytes stored for the segment (all objects, as written)
#   u16 length N of the key prefix, then N bytes of UTF-8 prefix (normalized; empty = bucket root)
_S3_CUSTOM_METADATA_V1 = struct.Struct(">BQH")
S3_CUSTOM_METADATA_VERSION = 1


@dataclasses.dataclass(frozen=True)
class S3SegmentLocation:
    """What S3Storage records about a copied segment in its custom metadata."""

    prefix: str
    stored_bytes: int

    def encode(self) -> bytes:
        prefix = self.prefix.encode("utf-8")
        return (
            _S3_CUSTOM_METADATA_V1.pack(S3_CUSTOM_METADATA_VERSION, self.stored_bytes, len(prefix)) + prefix
        )

    @classmethod
    def decode(cls, blob: bytes) -> S3SegmentLocation:
        if not blob or blob[0] != S3_CUSTOM_METADATA_VERSION:
            raise RemoteStorageError(
                f"unknown S3 custom metadata version in {blob[:1].hex() or 'empty blob'}"
            )
        if len(blob) < _S3_CUSTOM_METADATA_V1.size:
            raise RemoteStorageError(f"truncated S3 custom metadata ({len(blob)} bytes)")
        _, stored, length = _S3_CUSTOM_METADATA_V1.unpack_from(blob)
        if len(blob) != _S3_CUSTOM_METADATA_V1.size + length:
            raise RemoteStorageError(
                f"S3 custom metadata of {len(blob)} bytes does not match its prefix length"
            )
        return cls(blob[_S3_CUSTOM_METADATA_V1.size :].decode("utf-8"), stored)

    @staticmethod
    def encoded_size(prefix: str) -> int:
        return _S3_CUSTOM_METADATA_V1.size + len(prefix.encode("utf-8"))


# Error codes after which the same request may well succeed later. botocore has already retried
# them within max_attempts; whether to go on is the caller's call, hence the flag.
_RETRIABLE_S3_CODES = frozenset(
    {
        "SlowDown",
        "Throttling",
        "ThrottlingException",
        "RequestLimitExceeded",
        "TooManyRequestsException",
        "RequestTimeout",
        "InternalError",
        "ServiceUnavailable",
        "OperationAborted",
    }
)
_NOT_FOUND_S3_CODES = frozenset({"NoSuchKey", "404", "NotFound"})


def _is_retriable_client_error(error: botocore.exceptions.ClientError) -> bool:
    status = error.response.get("ResponseMetadata", {}).get("HTTPStatusCode") or 0
    return (
        error.response.get("Error", {}).get("Code") in _RETRIABLE_S3_CODES or status == 429 or status >= 500
    )


@contextmanager
def _s3_errors(what: str, bucket: str, key: str) -> Iterator[None]:
    where = f"s3://{bucket}/{key}"
    try:
        yield
    except botocore.exceptions.ClientError as e:
        code = e.response.get("Error", {}).get("Code")
        if code in _NOT_FOUND_S3_CODES:
            raise RemoteResourceNotFoundError(f"{what}: {where} not found") from None
        raise RemoteStorageError(f"{what} {where}: {e}", retriable=_is_retriable_client_error(e)) from e
    except (
        botocore.exceptions.ConnectionError,  # refused, DNS, connect timeout
        botocore.exceptions.HTTPClientError,  # read timeout, connection closed, body stream broken
        botocore.exceptions.IncompleteReadError,
    ) as e:
        raise RemoteStorageError(f"{what} {where}: {e}", retriable=True) from e
    except botocore.exceptions.BotoCoreError as e:  # credentials, parameter validation, ...
        raise RemoteStorageError(f"{what} {where}: {e}", retriable=False) from e


def make_s3_client(
    *,
    endpoint_url: str | None = None,
    region: str | None = None,
    max_attempts: int = 5,
    connect_timeout: float = 5.0,
    read_timeout: float = 30.0,
    access_key_id: str | None = None,
    secret_access_key: str | None = None,
) -> Any:
    """A boto3 S3 client with botocore's standard retry mode: up to ``max_attempts`` requests in all,
    with jittered exponential backoff (up to 1 s, 2 s, 4 s, ... capped at 20 s) on throttling, 5xx
    and connection errors. Credentials default to boto3's usual chain."""
    config = botocore.config.Config(
        # botocore's "max_attempts" counts retries only (N + 1 requests); "total_max_attempts"
        # counts the first request too, which is what our max_attempts means.
        retries={"mode": "standard", "total_max_attempts": max_attempts},
        connect_timeout=connect_timeout,
        read_timeout=read_timeout,
        # Custom endpoints (MinIO, moto, Ceph) rarely resolve bucket subdomains.
        s3={"addressing_style": "path"} if endpoint_url else None,
    )
    session = boto3.session.Session()
    return session.client(
        "s3",
        endpoint_url=endpoint_url,
        region_name=region,
        aws_access_key_id=access_key_id,
        aws_secret_access_key=secret_access_key,
        config=config,
    )


class S3Storage(ObjectStorage):
    """Segments as objects in an S3 bucket (``s3://bucket/prefix`` URIs).

    Objects above ``multipart_threshold`` bytes go up in ``part_size`` parts (aborted on failure);
    ``.log`` reads are ranged GETs. Each copy returns an :class:`S3SegmentLocation` blob as KIP-917
    custom metadata, and fetch and delete use the prefix recorded there, so changing the prefix
    configuration does not orphan segments copied before.
    """

    def __init__(
        self,
        bucket: str,
        prefix: str = "",
        *,
        endpoint_url: str | None = None,
        region: str | None = None,
        client: Any = None,
        multipart_threshold: int = 8 * MiB,
        part_size: int = 8 * MiB,
        max_attempts: int = 5,
        access_key_id: str | None = None,
        secret_access_key: str | None = None,
        custom_metadata_max_bytes: int = DEFAULT_CUSTOM_METADATA_MAX_BYTES,
    ) -> None:
        super().__init__(prefix, custom_metadata_max_bytes=custom_metadata_max_bytes)
        if not bucket:
            raise ValueError("an S3 bucket name is required")
        # S3 rejects parts under 5 MiB (except the last) and uploads over 10,000 parts.
        if part_size < 5 * MiB:
            raise ValueError(f"part_size must be at least 5 MiB, got {part_size}")
        if multipart_threshold < 1:
            raise ValueError(f"multipart_threshold must be positive, got {multipart_threshold}")
        if max_attempts < 1:
            raise ValueError(f"max_attempts must be >= 1, got {max_attempts}")
        size = S3SegmentLocation.encoded_size(self.prefix)
        if size > custom_metadata_max_bytes:
            # Fail at configuration time rather than on (and after) every copy.
            raise ValueError(
                f"prefix {self.prefix!r} needs {size} bytes of custom metadata, over the "
                f"{custom_metadata_max_bytes} allowed by {CUSTOM_METADATA_MAX_BYTES_CONFIG}"
            )
        self.bucket = bucket
        self.multipart_threshold = multipart_threshold
        self.part_size = part_size
        self._owns_client = client is None
        self._client = client or make_s3_client(
            endpoint_url=endpoint_url,
            region=region,
            max_attempts=max_attempts,
            access_key_id=access_key_id,
            secret_access_key=secret_access_key,
        )

    @property
    def client(self) -> Any:
        return self._client

    def _prefix_for(self, metadata: RemoteLogSegmentMetadata) -> str:
        if metadata.custom_metadata is None:
            return self.prefix  # copied by something that recorded nothing: assume the current layout
        return S3SegmentLocation.decode(metadata.custom_metadata).prefix

    def _custom_metadata(self, prefix: str, stored_bytes: int) -> bytes | None:
        return S3SegmentLocation(prefix, stored_bytes).encode()

    def _put(self, key: str, body: bytes | memoryview) -> None:
        if len(body) > self.multipart_threshold:
            self._put_multipart(key, memoryview(body))
            return
        with _s3_errors("put", self.bucket, key):
            self._client.put_object(Bucket=self.bucket, Key=key, Body=bytes(body))

    def _put_multipart(self, key: str, body: memoryview) -> None:
        with _s3_errors("create multipart upload", self.bucket, key):
            upload_id = self._client.create_multipart_upload(Bucket=self.bucket, Key=key)["UploadId"]
        try:
            parts = []
            for number, offset in enumerate(range(0, len(body), self.part_size), start=1):
                with _s3_errors(f"upload part {number}", self.bucket, key):
                    response = self._client.upload_part(
                        Bucket=self.bucket,
                        Key=key,
                        UploadId=upload_id,
                        PartNumber=number,
                        Body=bytes(body[offset : offset + self.part_size]),
                    )
                part = {"PartNumber": number, "ETag": response["ETag"]}
                # If botocore asked for per-part checksums (its default), S3 wants them listed again.
                part.update(
                    {k: v for k, v in response.items() if k.startswith("Checksum") and k != "ChecksumType"}
                )
                parts.append(part)
            with _s3_errors("complete multipart upload", self.bucket, key):
                self._client.complete_multipart_upload(
                    Bucket=self.bucket, Key=key, UploadId=upload_id, MultipartUpload={"Parts": parts}
                )
        except BaseException:
            # Unfinished uploads are billed until aborted.
            try:
                self._client.abort_multipart_upload(Bucket=self.bucket, Key=key, UploadId=upload_id)
            except Exception:
                log.warning("could not abort multipart upload %s of s3://%s/%s", upload_id, self.bucket, key)
            raise

    def _get(self, key: str) -> bytes:
        with _s3_errors("get", self.bucket, key):
            response = self._client.get_object(Bucket=self.bucket, Key=key)
            return response["Body"].read()

    def _get_range(self, key: str, start: int, end: int | None) -> bytes:
        wanted = f"bytes={start}-" if end is None else f"bytes={start}-{end}"
        with _s3_errors("get", self.bucket, key):
            try:
                response = self._client.get_object(Bucket=self.bucket, Key=key, Range=wanted)
            except botocore.exceptions.ClientError as e:
                if e.response.get("Error", {}).get("Code") == "InvalidRange":
                    return b""  # start at or past the end (or an empty object)
                raise
            body = response["Body"].read()
        if "ContentRange" not in response:
            # A store that ignores Range sends the whole object; cut the range out ourselves.
            return body[start : None if end is None else end + 1]
        return body

    def _delete_keys(self, keys: list[str]) -> None:
        # One request for up to 1000 keys; deleting an absent key counts as success in S3.
        for offset in range(0, len(keys), 1000):
            batch = keys[offset : offset + 1000]
            with _s3_errors("delete", self.bucket, batch[0]):
                response = self._client.delete_objects(
                    Bucket=self.bucket, Delete={"Objects": [{"Key": k} for k in batch], "Quiet": True}
                )
            errors = response.get("Errors") or []
            if errors:
                first = errors[0]
                raise RemoteStorageError(
                    f"delete s3://{self.bucket}/{first.get('Key')}: {first.get('Code')} {first.get('Message')}"
                    + (f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""),
                    retriable=any(err.get("Code") in _RETRIABLE_S3_CODES for err in errors),
                )

    def _close(self) -> None:
        if self._owns_client:
            self._client.close()


# ---------------------------------------------------------------------------------------------------
# URIs


_BUCKET_RE = re.compile(r"[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]")


def _int_config(config: Mapping[str, object], key: str, default: int) -> int:
    value = config.get(key)
    if value is None:
        return default
    try:
        return int(value)  # type: ignore[call-overload]
    except (TypeError, ValueError):
        raise ValueError(f"{key} must be an integer, got {value!r}") from None


def storage_from_uri(uri: str, **config: object) -> RemoteStorageManager:
    """A storage manager for ``uri``:

    - ``file:///absolute/path`` (``file://localhost/...`` and ``file:/...`` too): LocalFolderStorage.
    - ``s3://bucket/optional/prefix?endpoint_url=...&region=...``: S3Storage. The query parameters
      are optional and override the ``remote.log.storage.s3.*`` config keys.

    ``config`` holds Kafka-style properties (values may be strings), e.g.
    ``storage_from_uri(uri, **props)``; keys that do not concern storage are ignored.
    """
    parts = urllib.parse.urlsplit(uri)
    max_bytes = _int_config(config, CUSTOM_METADATA_MAX_BYTES_CONFIG, DEFAULT_CUSTOM_METADATA_MAX_BYTES)
    if parts.fragment:
        raise ValueError(f"storage URI {uri!r} must not have a fragment")
    if parts.scheme == "file":
        if parts.netloc not in ("", "localhost"):
            raise ValueError(f"file URI {uri!r} names a remote host; use file:///absolute/path")
        if parts.query:
            raise ValueError(f"file URI {uri!r} takes no query parameters")
        path = urllib.parse.unquote(parts.path)
        if not path.startswith("/"):
            raise ValueError(f"file URI {uri!r} needs an absolute path: file:///absolute/path")
        return LocalFolderStorage(Path(path), custom_metadata_max_bytes=max_bytes)
    if parts.scheme == "s3":
        bucket = parts.netloc
        if not _BUCKET_RE.fullmatch(bucket):
            raise ValueError(f"S3 URI {uri!r} needs a valid bucket name: s3://bucket/prefix")
        try:
            query = urllib.parse.parse_qs(
                parts.query, keep_blank_values=True, strict_parsing=bool(parts.query)
            )
        except ValueError:
            raise ValueError(f"S3 URI {uri!r} has a malformed query") from None
        unknown = set(query) - {"endpoint_url", "region"}
        if unknown:
            raise ValueError(
                f"S3 URI {uri!r} has unknown parameters {sorted(unknown)}; known: endpoint_url, region"
            )
        if any(len(values) > 1 for values in query.values()):
            raise ValueError(f"S3 URI {uri!r} repeats a parameter")
        endpoint = query.get("endpoint_url", [None])[0] or config.get(S3_ENDPOINT_URL_CONFIG) or None
        region = query.get("region", [None])[0] or config.get(S3_REGION_CONFIG) or None
        if endpoint is not None and urllib.parse.urlsplit(str(endpoint)).scheme not in ("http", "https"):
            raise ValueError(f"S3 endpoint {endpoint!r} must be an http:// or https:// URL")
        access_key = config.get(S3_ACCESS_KEY_ID_CONFIG)
        secret_key = config.get(S3_SECRET_ACCESS_KEY_CONFIG)
        if (access_key is None) != (secret_key is None):
            raise ValueError(
                f"set both or neither of {S3_ACCESS_KEY_ID_CONFIG} and {S3_SECRET_ACCESS_KEY_CONFIG}"
            )
        return S3Storage(
            bucket,
            urllib.parse.unquote(parts.path),
            endpoint_url=None if endpoint is None else str(endpoint),
            region=None if region is None else str(region),
            multipart_threshold=_int_config(config, S3_MULTIPART_THRESHOLD_CONFIG, 8 * MiB),
            part_size=_int_config(config, S3_PART_SIZE_CONFIG, 8 * MiB),
            max_attempts=_int_config(config, S3_MAX_ATTEMPTS_CONFIG, 5),
            access_key_id=None if access_key is None else str(access_key),
            secret_access_key=None if secret_key is None else str(secret_key),
            custom_metadata_max_bytes=max_bytes,
        )
    raise ValueError(f"unsupported storage URI {uri!r}: expected file:///absolute/path or s3://bucket/prefix")
