"""The remote tier describes itself: manifests of the metadata store kept in the bucket, beside
the segments they describe. Given only the remote tier's URI, :func:`read_bucket` rebuilds the
complete segment index, with no cluster, no metadata topic and no data dir.

Layout, under the storage prefix (segments are in ``tiering.storage.object_layout``)::

    {topic}-{topicId}/topic.manifest                  the topic's configs and KIP-950 state
    {topic}-{topicId}/{partition}/partition.manifest  the records of the partition's state

A manifest holds the records that rebuild its part of the state (the bytes the metadata topic and
the journal hold, ``tiering.metadata.codec``), each framed as the journal frames it (length,
CRC-32C, payload), after a header (magic ``TPMF``, version, write time, record count) and before
a CRC-32C of all of it. A truncated, padded or altered object is refused, never half read.

A writer (:class:`ManifestWriter`) rewrites a whole manifest (one PUT) from its store's state
after writing records of it: at most once per interval per manifest, and once at start for every
partition the store has caught up on (so a bucket tiered before manifests existed gets them). It
deletes a partition's manifest once no segment of it is left, and a topic's once the topic is
deleted or disabled with the delete policy: nothing of them is left to serve. The
store's state after a write includes every earlier record of the partition, so the last writer's
manifest is complete up to its write. A reader sends one LIST for the topic directories, one per
topic for its partitions (each per 1,000 names), and one GET per manifest: never one per segment.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import crc32c
from construct import (
    Array,
    Checksum,
    Const,
    ConstructError,
    Int8ub,
    Int32ub,
    Int64sb,
    RawCopy,
    Struct,
    Terminated,
    this,
)

from protocol.errors import ProtocolError
from tiering.metadata.codec import deserialize, serialize
from tiering.metadata.journal_store import JOURNAL_ENTRY
from tiering.metadata.manager import RemoteLogMetadataManager
from tiering.metadata.state import MetadataState, RemoteLogMetadata
from tiering.model import (
    ArchivedGroupOffset,
    ClusterTieringConfigs,
    DisablePolicy,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    TieringState,
    TopicIdPartition,
    TopicTieringState,
)
from tiering.storage.api import RemoteResourceNotFoundError, RemoteStorageError, RemoteStorageManager
from tiering.storage.object_layout import ObjectStorage, kafka_uuid_str

log = logging.getLogger(__name__)

TOPIC_MANIFEST = "topic.manifest"
PARTITION_MANIFEST = "partition.manifest"
MANIFEST_INTERVAL_CONFIG = "proxy.manifest.interval.ms"
MANIFESTS_URI = "manifests:"  # a metadata URI that names the remote tier's own manifests (readers only)
DEFAULT_MANIFEST_INTERVAL_MS = 1000
_READ_THREADS = 16
_KAFKA_UUID_CHARS = 22  # 16 bytes in unpadded base64

MANIFEST = Struct(
    "body" / RawCopy(Struct(
        "magic" / Const(b"TPMF"),
        "version" / Const(1, Int8ub),
        "written_ms" / Int64sb,
        "count" / Int32ub,
        "entries" / Array(this.count, JOURNAL_ENTRY),
    )),
    "crc" / Checksum(Int32ub, crc32c.crc32c, this.body.data),  # of everything before it
    Terminated,
)


class ManifestError(RemoteStorageError):
    """A manifest object that is not one: truncated, padded, or failing a CRC."""


def topic_directory(topic: str, topic_id: uuid.UUID) -> str:
    return f"{topic}-{kafka_uuid_str(topic_id)}"


def partition_manifest_key(tp: TopicIdPartition) -> str:
    return f"{topic_directory(tp.topic, tp.topic_id)}/{tp.partition}/{PARTITION_MANIFEST}"


def topic_manifest_key(state: TopicTieringState) -> str:
    return f"{topic_directory(state.topic, state.topic_id)}/{TOPIC_MANIFEST}"


def encode_manifest(records: Iterable[RemoteLogMetadata], written_ms: int) -> bytes:
    entries = []
    for record in records:
        payload = serialize(record)
        entries.append({"length": len(payload), "crc": crc32c.crc32c(payload), "payload": payload})
    return MANIFEST.build({"body": {"value": {"written_ms": written_ms, "count": len(entries), "entries": entries}}})


def decode_manifest(data: bytes, key: str = "manifest") -> tuple[int, list[RemoteLogMetadata]]:
    """(write time, records) of a manifest; ManifestError if it is not a whole, intact one."""
    try:
        parsed = MANIFEST.parse(data)
    except ConstructError as e:
        raise ManifestError(f"{key}: not a whole manifest ({len(data)} bytes): {e}") from None
    body = parsed.body.value
    records = []
    for number, entry in enumerate(body.entries):
        if crc32c.crc32c(entry.payload) != entry.crc:
            raise ManifestError(f"{key}: record {number} fails its CRC")
        try:
            records.append(deserialize(entry.payload))
        except ProtocolError as e:
            raise ManifestError(f"{key}: record {number} unreadable: {e}") from None
    return body.written_ms, records


@dataclass
class ManifestCounters:
    written: int = 0
    failed: int = 0


class ManifestWriter:
    """Keeps the bucket's manifests in step with what ``metadata`` writes (see the module doc)."""

    def __init__(self, storage: ObjectStorage, metadata: RemoteLogMetadataManager, *,
                 interval_ms: int = DEFAULT_MANIFEST_INTERVAL_MS, threads: int = 8) -> None:
        if interval_ms < 1:
            raise ValueError(f"{MANIFEST_INTERVAL_CONFIG} must be positive, got {interval_ms}")
        self.storage = storage
        self.metadata = metadata
        self.interval_s = interval_ms / 1000
        self.counters = ManifestCounters()
        self._threads = threads
        self._lock = threading.Lock()
        self._partitions: set[TopicIdPartition] = set()
        self._topics: set[str] = set()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        metadata.add_write_listener(self.written)

    def written(self, record: RemoteLogMetadata) -> None:
        """The store wrote ``record``: its manifest is due."""
        if isinstance(record, ArchivedGroupOffset | ClusterTieringConfigs):
            return  # the cluster's own, not the bucket's
        with self._lock:
            if isinstance(record, TopicTieringState):
                self._topics.add(record.topic)
            elif isinstance(record, RemoteLogSegmentMetadataUpdate):
                self._partitions.add(record.segment_id.topic_id_partition)
            else:
                self._partitions.add(record.topic_id_partition)
        self._wake.set()

    def start(self) -> None:
        """Describe everything the store has caught up on, then follow its writes."""
        with self._lock:
            self._partitions.update(tp for tp in self.metadata.partitions() if self.metadata.is_ready(tp))
            self._topics.update(self.metadata.topic_tiering_states())
        self._thread = threading.Thread(target=self._run, name="manifest-writer", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            self._wake.wait()
            self._wake.clear()
            self.flush()
            # Writes that come in meanwhile wait for the next turn: one PUT per manifest per interval.
            self._stop.wait(self.interval_s)

    def flush(self) -> None:
        """Write every manifest due now; one that fails stays due."""
        with self._lock:
            partitions, self._partitions = self._partitions, set()
            topics, self._topics = self._topics, set()
        if not partitions and not topics:
            return
        states = self.metadata.topic_tiering_states()
        # (key, the records to write or None to delete the manifest, how to make it due again)
        jobs: list[tuple[str, Callable[[], list[RemoteLogMetadata] | None], Callable[[], None]]] = []
        for tp in partitions:
            jobs.append((partition_manifest_key(tp), lambda tp=tp: self._partition_records(tp),
                         lambda tp=tp: self._due(partition=tp)))
        for name in topics:
            state = states.get(name)
            if state is not None:
                # Nothing of a deleted topic, or one disabled with the delete policy, is left to describe.
                gone = state.deleted or (state.state == TieringState.DISABLED and state.disable_policy == DisablePolicy.DELETE)
                jobs.append((topic_manifest_key(state), lambda state=state, gone=gone: None if gone else [state],
                             lambda n=name: self._due(topic=n)))
        with ThreadPoolExecutor(self._threads, thread_name_prefix="manifest") as pool:
            for key, records, again in jobs:
                pool.submit(self._write, key, records, again)

    def _partition_records(self, tp: TopicIdPartition) -> list[RemoteLogMetadata] | None:
        """What ``tp``'s manifest holds; None once no segment of it is left (deleted, expired,
        disabled with the delete policy): nothing of it remains to serve."""
        records = self.metadata.partition_records(tp)
        return records if any(isinstance(r, RemoteLogSegmentMetadata) for r in records) else None

    def _write(self, key: str, records: Callable[[], list[RemoteLogMetadata] | None],
               again: Callable[[], None]) -> None:
        try:
            body = records()
            if body is None:
                self.storage.delete_object(key)
            else:
                self.storage.write_object(key, encode_manifest(body, int(time.time() * 1000)))
            self.counters.written += 1
        except Exception as e:
            self.counters.failed += 1
            log.warning("manifest %s not written (retried in %.1fs): %s", key, self.interval_s, e)
            again()

    def _due(self, *, partition: TopicIdPartition | None = None, topic: str | None = None) -> None:
        with self._lock:
            if partition is not None:
                self._partitions.add(partition)
            if topic is not None:
                self._topics.add(topic)
        self._wake.set()

    def close(self) -> None:
        """Write what is due, then stop."""
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(30)
        self.flush()


@dataclass
class BucketIndex:
    """What :func:`read_bucket` found: the state, and the partition directories that hold segments
    but no manifest (tiered by a version before manifests, and not described since)."""

    state: MetadataState
    topics: int = 0
    partitions: int = 0
    undescribed: list[str] = field(default_factory=list)


def _topic_id_of(directory: str) -> str | None:
    """The Kafka-printed topic id at the end of a topic directory's name, if it has one."""
    if len(directory) > _KAFKA_UUID_CHARS + 1 and directory[-_KAFKA_UUID_CHARS - 1] == "-":
        return directory[-_KAFKA_UUID_CHARS:]
    return None


def read_bucket(storage: RemoteStorageManager, *, threads: int = _READ_THREADS) -> BucketIndex:
    """The segment index the bucket's manifests describe. Raises ManifestError for a corrupt
    manifest (never serves a guess), ValueError for a storage that keeps none (not one of ours)."""
    if not isinstance(storage, ObjectStorage):
        raise ValueError(f"{type(storage).__name__} keeps no manifests")
    _, top = storage.list_directory("")
    topic_dirs = [d for d in top if _topic_id_of(d) is not None]
    index = BucketIndex(MetadataState(), topics=len(topic_dirs))
    with ThreadPoolExecutor(threads, thread_name_prefix="manifest-read") as pool:
        listings = list(pool.map(storage.list_directory, topic_dirs))
        keys = []
        for directory, (names, partitions) in zip(topic_dirs, listings, strict=True):
            if TOPIC_MANIFEST in names:
                keys.append(f"{directory}/{TOPIC_MANIFEST}")
            for partition in partitions:
                if partition.isdigit():
                    keys.append(f"{directory}/{partition}/{PARTITION_MANIFEST}")
                    index.partitions += 1
        bodies = list(pool.map(lambda key: (key, _read_optional(storage, key)), keys))
        bare = [key.rsplit("/", 1)[0] for key, body in bodies if body is None and key.endswith(PARTITION_MANIFEST)]
        # A directory without a manifest matters only if segments are in it (a local folder keeps
        # the empty directories of deleted ones).
        for directory, (names, _) in zip(bare, pool.map(storage.list_directory, bare), strict=True):
            if any(name.endswith(".log") for name in names):
                index.undescribed.append(directory)
    topic_states: list[TopicTieringState] = []
    for key, body in bodies:
        if body is None:
            continue
        for record in decode_manifest(body, key)[1]:
            if isinstance(record, TopicTieringState):
                topic_states.append(record)
            else:
                index.state.apply(record)
    # A name reused by a new topic has a directory per id: the latest state is the name's.
    for state in sorted(topic_states, key=lambda s: s.event_timestamp_ms):
        index.state.apply(state)
    return index


def _read_optional(storage: ObjectStorage, key: str) -> bytes | None:
    try:
        return storage.read_object(key)
    except RemoteResourceNotFoundError:
        return None
