"""The object layout the local-folder and S3 stores share (:class:`ObjectStorage`), one object
per file of a segment::

    {prefix}/{topic}-{topicId}/{partition}/{startOffset:020d}-{segmentId}.{ext}

``ext`` is ``log`` for the record batches or an :class:`IndexType` value for an index. ``topicId`` and
``segmentId`` are printed the way Kafka prints UUIDs (:func:`kafka_uuid_str`). With an empty prefix the
key starts at the topic directory (no leading slash).

With ``remote.log.storage.key.prefix.salt.length=N`` (0, off, by default) new segments' keys begin,
after the prefix, with N hex digits of a hash of their topic-partition (:func:`key_salt`), so that an
object store that limits request rates per key prefix (S3: 3,500 writes and 5,500 reads a second)
spreads a cluster's partitions over up to 16^N prefixes instead of one per topic::

    {prefix}/{salt}~{topic}~{topicId}/{partition}/{startOffset:020d}-{segmentId}.{ext}

``~`` is in no topic name, so a salted directory is never taken for a topic's (the manifests'
readers look for ``{topic}-{topicId}``), and the partition directory under it keeps walks that go
directory, partition, object (``tiering.storage.key_maintenance``) finding the objects. The salt is
recorded in the segment's custom metadata (``segment_location``), never computed again by a
reader: segments copied before salting was turned on, or after it was turned off, are found
where they were written.

Copy order: the indexes are written first and the ``.log`` object last, so a ``.log`` object present
under its final name means the copy of that segment completed. Deletion removes the ``.log`` object
first for the same reason: a half-deleted segment never looks complete.

A segment stored sealed (compressed or encrypted at rest, ``tiering.storage.at_rest``) has one more
object, its envelope (``seal``), which describes the others: it is written last and deleted first,
so for such a segment the envelope is the mark of a complete copy. Its objects are written as they
are sealed, chunk by chunk, so a copy holds a part of the segment sealed, not all of it. Its
custom metadata says it is sealed (``segment_location``).
"""

from __future__ import annotations

import base64
import contextlib
import contextvars
import hashlib
import logging
import re
import threading
import uuid
from abc import abstractmethod
from collections import OrderedDict
from collections.abc import Iterable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor

from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from tiering.model import IndexType, LogSegmentData, RemoteLogSegmentId, RemoteLogSegmentMetadata
from tiering.storage.api import (
    CUSTOM_METADATA_MAX_BYTES_CONFIG,
    DEFAULT_CUSTOM_METADATA_MAX_BYTES,
    RemoteStorageManager,
)
from tiering.storage.at_rest import AtRest, AtRestConfigError, IntegrityError
from tiering.storage.sealed_format import ChunkTable, SegmentEnvelope, is_sealed_object
from tiering.storage.segment_location import SegmentLocation, is_sealed, location

log = logging.getLogger(__name__)

LOG_SUFFIX = "log"
SEAL_SUFFIX = "seal"
_ENVELOPES_CACHED = 4096  # opened envelopes (a few KiB each) of the segments read last
SALT_LENGTH_CONFIG = "remote.log.storage.key.prefix.salt.length"
MAX_SALT_LENGTH = 8  # hex digits: 4 billion prefixes, far more than any store needs
SALT_SEPARATOR = "~"  # in no Kafka topic name


class KeyLayoutConfigError(AtRestConfigError):
    """A setting of how objects are named in the bucket that cannot work; the message names the
    key (reported under it, as the at-rest settings are, not as a fault of the storage URI)."""


def salt_length_from_config(config: Mapping[str, object]) -> int:
    """``remote.log.storage.key.prefix.salt.length``: 0 (off, the default) to MAX_SALT_LENGTH."""
    value = config.get(SALT_LENGTH_CONFIG)
    if value is None or str(value).strip() == "":
        return 0
    try:
        length = int(str(value).strip())
    except ValueError:
        raise KeyLayoutConfigError(f"{SALT_LENGTH_CONFIG} must be an integer, got {value!r}") from None
    if not 0 <= length <= MAX_SALT_LENGTH:
        raise KeyLayoutConfigError(f"{SALT_LENGTH_CONFIG} must be 0 (off) to {MAX_SALT_LENGTH} hex digits, "
                                   f"got {length}")
    return length


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


def key_salt(metadata: RemoteLogSegmentMetadata, length: int) -> str:
    """``length`` hex digits of a hash of the segment's topic-partition ("" for 0): a partition's
    segments share a salt, so its objects stay in one directory."""
    if length <= 0:
        return ""
    tp = metadata.topic_id_partition
    return hashlib.sha256(f"{tp.topic}-{kafka_uuid_str(tp.topic_id)}/{tp.partition}".encode()).hexdigest()[:length]


_SALT_RE = re.compile(rf"[0-9a-f]{{1,{MAX_SALT_LENGTH}}}")


def segment_object_key(prefix: str, metadata: RemoteLogSegmentMetadata, suffix: str, salt: str = "") -> str:
    """The key of one object of a segment (see the module docstring for the layout)."""
    tp = metadata.topic_id_partition
    # Kafka already restricts topic names to this alphabet; checking keeps keys free of '/' and so
    # inside their partition directory whatever the metadata says.
    if not _TOPIC_RE.fullmatch(tp.topic):
        raise ValueError(f"topic name {tp.topic!r} is not a legal Kafka topic name")
    if tp.partition < 0:
        raise ValueError(f"negative partition {tp.partition}")
    if salt and not _SALT_RE.fullmatch(salt):
        raise ValueError(f"key salt {salt!r} is not 1-{MAX_SALT_LENGTH} lowercase hex digits")
    topic_id = kafka_uuid_str(tp.topic_id)
    directory = (f"{salt}{SALT_SEPARATOR}{tp.topic}{SALT_SEPARATOR}{topic_id}" if salt
                 else f"{tp.topic}-{topic_id}")
    key = f"{directory}/{tp.partition}/{metadata.start_offset:020d}-{kafka_uuid_str(metadata.segment_id.id)}.{suffix}"
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



def segment_context(metadata: RemoteLogSegmentMetadata) -> bytes:
    """What a sealed segment's data key and chunks are bound to: its id, as its object names print it."""
    return kafka_uuid_str(metadata.segment_id.id).encode()


class ObjectStorage(RemoteStorageManager):
    """The object layout shared by the local and S3 stores, over five object primitives."""

    def __init__(
        self, prefix: str = "", *, custom_metadata_max_bytes: int = DEFAULT_CUSTOM_METADATA_MAX_BYTES,
        at_rest: AtRest | None = None, salt_length: int = 0,
    ) -> None:
        super().__init__(custom_metadata_max_bytes=custom_metadata_max_bytes)
        self.prefix = normalize_prefix(prefix)
        self.at_rest = at_rest or AtRest()
        if not 0 <= salt_length <= MAX_SALT_LENGTH:
            raise KeyLayoutConfigError(f"{SALT_LENGTH_CONFIG} must be 0 (off) to {MAX_SALT_LENGTH}, got {salt_length}")
        self.salt_length = salt_length
        size = SegmentLocation.encoded_size(self.prefix, salt_length=salt_length)
        if salt_length and size > custom_metadata_max_bytes:
            # Fail at configuration time rather than on (and after) every copy.
            raise KeyLayoutConfigError(
                f"{SALT_LENGTH_CONFIG}={salt_length} with prefix {self.prefix!r} needs {size} bytes of custom "
                f"metadata, over the {custom_metadata_max_bytes} allowed by {CUSTOM_METADATA_MAX_BYTES_CONFIG}")
        self._envelopes: OrderedDict[RemoteLogSegmentId, tuple[SegmentEnvelope, AESGCM | None]] = OrderedDict()
        self._envelopes_lock = threading.Lock()
        self._reported: set[str] = set()  # objects whose integrity failure was logged
        self._envelope_reads = ThreadPoolExecutor(8, thread_name_prefix="envelope-read")  # threads made on use

    def object_key(self, metadata: RemoteLogSegmentMetadata, suffix: str) -> str:
        found = location(metadata.custom_metadata)
        return segment_object_key(self._prefix_for(metadata), metadata, suffix, found.salt if found else "")

    def segment_keys(self, metadata: RemoteLogSegmentMetadata) -> list[str]:
        """Every key a segment may occupy, the one that marks it complete first (the delete
        order): the ``.log`` in the clear, the envelope when sealed."""
        keys = [self.object_key(metadata, LOG_SUFFIX)] + [self.object_key(metadata, t.value) for t in IndexType]
        seal = self.object_key(metadata, SEAL_SUFFIX)
        return [seal, *keys] if is_sealed(metadata.custom_metadata) else [*keys, seal]

    def _prefix_for(self, metadata: RemoteLogSegmentMetadata) -> str:
        """The prefix a segment was stored under; the configured one unless a store records it."""
        return self.prefix

    def _custom_metadata(self, prefix: str, stored_bytes: int, logical_bytes: int | None,
                         salt: str = "") -> bytes | None:
        """What to return from a copy that wrote ``stored_bytes`` under ``prefix`` (and ``salt``),
        sealed from ``logical_bytes`` (None: in the clear). Nothing for a segment in the clear
        under unsalted keys (as before locations were recorded)."""
        if logical_bytes is None:
            return SegmentLocation(prefix, stored_bytes, salt=salt).encode() if salt else None
        return SegmentLocation(prefix, stored_bytes, True, logical_bytes, salt).encode()

    def _copy_log_segment_data(
        self, metadata: RemoteLogSegmentMetadata, data: LogSegmentData
    ) -> bytes | None:
        # A fresh copy always goes under the configured prefix and salting, whatever metadata the
        # caller holds.
        prefix = self.prefix
        salt = key_salt(metadata, self.salt_length)
        bodies: list[tuple[str, bytes | memoryview]] = [(t.value, body) for t, body in _index_bodies(data)]
        bodies.append((LOG_SUFFIX, data.log))  # last: marks completion (in the clear)
        topic = metadata.topic_id_partition.topic
        sealer = self.at_rest.sealer(segment_context(metadata), topic) if self.at_rest.seals(topic) else None
        attempted: list[str] = []
        stored = 0
        try:
            for name, body in bodies:
                key = segment_object_key(prefix, metadata, name, salt)
                attempted.append(key)
                if sealer is None:
                    self._put(key, body)
                    written = len(body)
                else:
                    written = self._put_chunks(key, sealer.seal(name, body))
                self.requests.moved(written=written)
                stored += written
            if sealer is not None:  # sealed: the envelope last marks completion
                attempted.append(segment_object_key(prefix, metadata, SEAL_SUFFIX, salt))
                envelope = sealer.envelope()
                self._put(attempted[-1], envelope)
                self.requests.moved(written=len(envelope))
                stored += len(envelope)
        except Exception:
            # Best effort, so a failed copy leaves nothing behind; the original error is what matters.
            try:
                self._delete_keys(attempted)
            except Exception:
                log.warning("could not clean up after failed copy of %s", metadata.segment_id, exc_info=True)
            raise
        return self._custom_metadata(prefix, stored, None if sealer is None else sealer.logical_bytes, salt)

    def _put_chunks(self, key: str, chunks: Iterable[bytes | memoryview]) -> int:
        """Writes one object from its pieces as they come (a store that can stream them holds
        less); returns its size."""
        body = b"".join(chunks)
        self._put(key, body)
        return len(body)

    def _fetch_log_segment(self, metadata: RemoteLogSegmentMetadata, start: int, end: int | None) -> bytes:
        key = self.object_key(metadata, LOG_SUFFIX)
        if not is_sealed(metadata.custom_metadata):
            data = self._get_range(key, start, end)
            self.requests.moved(read=len(data))
            return data
        with self._reporting(key):
            envelope, aead = self._envelope(metadata)
            table = self._table(envelope, LOG_SUFFIX, key)
            last_byte = table.logical_size - 1 if end is None else min(end, table.logical_size - 1)
            if start > last_byte:
                return b""
            first, last = start // table.chunk_size, last_byte // table.chunk_size
            stored = self._get_range(key, table.starts[first], table.starts[last + 1] - 1)
            self.requests.moved(read=len(stored))
            chunks = self.at_rest.open_range(segment_context(metadata), table, aead, first, last, stored, key)
        skip = start - first * table.chunk_size
        data = chunks[0] if len(chunks) == 1 else b"".join(chunks)
        return data if skip == 0 and len(data) == last_byte - start + 1 else data[skip:skip + last_byte - start + 1]

    def _fetch_index(self, metadata: RemoteLogSegmentMetadata, index_type: IndexType) -> bytes:
        key = self.object_key(metadata, index_type.value)
        if not is_sealed(metadata.custom_metadata):
            data = self._get(key)
            self.requests.moved(read=len(data))
            return data
        with self._reporting(key):
            # The envelope is read beside the index, not before it: a cold read (a fresh proxy's
            # first record) waits for one round trip to the store, as in the clear, not two.
            # In the caller's context: its GET counts for the caller's topic (tiering.storage.api).
            pending = None if self._has_envelope(metadata) else self._envelope_reads.submit(
                contextvars.copy_context().run, self._envelope, metadata)
            stored = self._get(key)
            self.requests.moved(read=len(stored))
            envelope, aead = self._envelope(metadata) if pending is None else pending.result()
            if index_type.value not in envelope.tables:
                raise IntegrityError(f"{key}: the segment's envelope describes no {index_type.value} object")
            table = envelope.tables[index_type.value]
            if not table.chunks:
                return b""
            return b"".join(self.at_rest.open_range(segment_context(metadata), table, aead, 0, len(table.chunks) - 1,
                                                    stored, key))

    def _envelope(self, metadata: RemoteLogSegmentMetadata) -> tuple[SegmentEnvelope, AESGCM | None]:
        """A sealed segment's envelope and opened data key, read once while it is among the last read."""
        with self._envelopes_lock:
            cached = self._envelopes.get(metadata.segment_id)
            if cached is not None:
                self._envelopes.move_to_end(metadata.segment_id)
                return cached
        key = self.object_key(metadata, SEAL_SUFFIX)
        blob = self._get(key)
        self.requests.moved(read=len(blob))
        envelope = self.at_rest.open_envelope(blob, key)
        opened = envelope, self.at_rest.data_key(envelope.key, segment_context(metadata), key)
        with self._envelopes_lock:
            self._envelopes[metadata.segment_id] = opened
            while len(self._envelopes) > _ENVELOPES_CACHED:
                self._envelopes.popitem(last=False)
        return opened

    def _has_envelope(self, metadata: RemoteLogSegmentMetadata) -> bool:
        with self._envelopes_lock:
            return metadata.segment_id in self._envelopes

    def forget_envelope(self, segment_id: RemoteLogSegmentId) -> None:
        with self._envelopes_lock:
            self._envelopes.pop(segment_id, None)

    def _table(self, envelope: SegmentEnvelope, name: str, key: str) -> ChunkTable:
        table = envelope.tables.get(name)
        if table is None:
            raise IntegrityError(f"{key}: the segment's envelope describes no {name} object")
        return table

    @contextlib.contextmanager
    def _reporting(self, key: str) -> Iterator[None]:
        """Logs an object's integrity failure (once per object; each is counted in ``at_rest``)."""
        try:
            yield
        except IntegrityError as exc:
            if key not in self._reported and len(self._reported) < 10_000:
                self._reported.add(key)
                log.error("refusing to serve a remote object: %s", exc)
            raise

    def _delete_log_segment_data(self, metadata: RemoteLogSegmentMetadata) -> None:
        self.forget_envelope(metadata.segment_id)
        keys = self.segment_keys(metadata)
        # The .log goes first and alone, so a crash mid-delete never leaves a complete-looking segment.
        self._delete_keys(keys[:1])
        self._delete_keys(keys[1:])

    def _close(self) -> None:
        self._envelope_reads.shutdown(wait=False, cancel_futures=True)

    # Whole objects outside the segment layout (the bucket's manifests, tiering.metadata.manifests),
    # by keys relative to the configured prefix.

    def key(self, relative: str) -> str:
        return f"{self.prefix}/{relative}" if self.prefix else relative

    def write_object(self, relative: str, body: bytes) -> None:
        """Writes one whole object, sealed as the store seals new objects."""
        self._check_open()
        if self.at_rest.keys is not None or self.at_rest.compression != "none":
            body = self.at_rest.seal_object(relative.encode(), body)
        self._put(self.key(relative), body)
        self.requests.moved(written=len(body))

    def read_object(self, relative: str) -> bytes:
        """One whole object, opened if sealed; RemoteResourceNotFoundError if absent."""
        self._check_open()
        key = self.key(relative)
        data = self._get(key)
        self.requests.moved(read=len(data))
        if is_sealed_object(data):
            with self._reporting(key):
                return self.at_rest.open_object(relative.encode(), data, key)
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
