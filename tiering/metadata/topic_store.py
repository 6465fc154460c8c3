"""The topic-based remote log metadata store: KIP-405's ``__remote_log_metadata`` topic.

Records (``tiering.metadata.codec``, Kafka's own framing) go to the metadata partition the user
partition hashes to (Kafka's partitioner rule), with a null key; the topic has 50 partitions and
``retention.ms=-1`` by default. Every instance consumes all metadata partitions on a background
thread and applies each record through the one replay path (:meth:`MetadataState.apply`). A write
is acknowledged by the brokers (acks=all), then waited for until this instance's consumer has
applied it, so a caller reads its own writes and every record is applied once, in log order.

**Fencing.** When several instances share the topic, the one that owns a metadata partition
(``tiering.copy.ownership``) first writes a *claim* there: a record with the key
``tiered-proxy.owner.claim``, a null value and a ``tiered-proxy.owner.epoch`` header one above
the highest epoch the partition holds. Each of its writes to that partition then carries its
epoch in the same header. Replaying a partition in
order, every instance ignores a write whose epoch is below the partition's highest claim, and a
claim that does not raise it. An owner that stalled past its group session and resumes still
believes it owns the partition, but its writes land after the new owner's claim: its own read-back
finds them ignored and raises :class:`FencedError`, so it stops and removes what it uploaded.
Writes without the header (topic configs from any instance's admin requests) are not fenced.

Per metadata partition a snapshot file (the journal format of ``tiering.metadata.journal_store``: the live
records of the user partitions that hash there, plus the next offset to read) is written
atomically every ``snapshot_interval_s`` and on close; a restart loads the snapshots and reads
only what came after them; the snapshot keeps the partition's highest claimed epoch too.
"""

from __future__ import annotations

import collections
import json
import logging
import os
import threading
import time
import uuid
from pathlib import Path

from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import KafkaAdminClient, NewTopic
from kafka.errors import TopicAlreadyExistsError, TopicAuthorizationFailedError

from protocol.errors import ProtocolError
from tiering.client_security import ClientSecurity
from tiering.metadata.codec import deserialize, metadata_partition, serialize
from tiering.metadata.journal_store import frame, fsync_dir, read_journal
from tiering.metadata.manager import FencedError, RemoteLogMetadataManager
from tiering.metadata.state import RemoteLogMetadata
from tiering.model import (
    ClusterTieringConfigs,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    TopicIdPartition,
    TopicTieringState,
)

log = logging.getLogger(__name__)
_IDLE_POLL_S = 0.05  # between polls that found nothing new
OWNER_EPOCH_HEADER = "tiered-proxy.owner.epoch"
OWNER_HEADER = "tiered-proxy.owner"
CLAIM_KEY = b"tiered-proxy.owner.claim"
_CLAIM_ATTEMPTS = 5
CLUSTER_RECORDS = TopicIdPartition(uuid.UUID(int=0), "", 0)  # where records of no topic sit
_CREATED_TOPIC_VISIBLE_S = 10.0  # the most a new metadata topic may take to show its partitions


def _header(headers: list[tuple[str, bytes]] | None, name: str) -> bytes | None:
    return next((value for key, value in headers or () if key == name), None)


def _user_partition(record: RemoteLogMetadata) -> TopicIdPartition:
    if isinstance(record, RemoteLogSegmentMetadata):
        return record.topic_id_partition
    if isinstance(record, RemoteLogSegmentMetadataUpdate):
        return record.segment_id.topic_id_partition
    if isinstance(record, TopicTieringState):
        return TopicIdPartition(record.topic_id, record.topic, 0)  # a topic's records sit with its partition 0
    if isinstance(record, ClusterTieringConfigs):
        return CLUSTER_RECORDS  # the cluster's own, in one place
    return record.topic_id_partition


class TopicMetadataStore(RemoteLogMetadataManager):
    def __init__(self, bootstrap_servers: str, snapshot_dir: str | os.PathLike[str], *,
                 topic: str = "__remote_log_metadata", partitions: int = 50, replication_factor: int = 1,
                 ready_timeout_s: float = 30.0, write_timeout_s: float = 30.0,
                 snapshot_interval_s: float = 30.0, security: ClientSecurity | None = None) -> None:
        super().__init__()
        self.topic = topic
        self.partitions_count = partitions
        self.snapshot_dir = Path(snapshot_dir)
        self.snapshot_dir.mkdir(parents=True, exist_ok=True)
        self.write_timeout_s = write_timeout_s
        self.snapshot_interval_s = snapshot_interval_s
        self.records_replayed = 0
        self._applied = threading.Condition(self._lock)
        self._positions: dict[int, int] = {}  # metadata partition -> next offset to apply
        self._owner_epochs: dict[int, int] = {}  # metadata partition -> highest claimed epoch in its log
        self._my_epochs: dict[int, int] = {}  # metadata partitions this instance claimed, and the epoch
        # (partition, offset) of records replay ignored (fenced writes, stale claims), recent ones:
        # a writer waiting for its read-back looks its record up here.
        self._ignored: collections.deque[tuple[int, int]] = collections.deque(maxlen=10_000)
        self.records_fenced = 0
        # kafka-python takes TLS and SASL as keyword arguments.
        self._tls = (security or ClientSecurity()).kafka_python_config()
        self._ensure_topic(bootstrap_servers, replication_factor)
        self._load_snapshots()
        # Made on the first write: a store opened only to read (``describe``, ``segments``, Spark)
        # then needs no write rights (kafka-python's producer asks for an idempotent producer id).
        self._bootstrap_servers = bootstrap_servers
        self._producer: KafkaProducer | None = None
        self._consumer = KafkaConsumer(bootstrap_servers=bootstrap_servers, enable_auto_commit=False,
                                       group_id=None, auto_offset_reset="earliest", **self._tls)
        assigned = [TopicPartition(topic, p) for p in range(partitions)]
        self._consumer.assign(assigned)
        begin = self._consumer.beginning_offsets(assigned)
        self._ready_at = self._consumer.end_offsets(assigned)
        for tp in assigned:
            saved = self._positions.get(tp.partition, 0)
            if not begin[tp] <= saved <= self._ready_at[tp]:
                log.warning("snapshot of %s-%d at %d is outside %d..%d (topic recreated?): replaying it all",
                            topic, tp.partition, saved, begin[tp], self._ready_at[tp])
                self._reset_partition(tp.partition)
                saved = begin[tp]
            self._positions[tp.partition] = saved
            self._consumer.seek(tp, saved)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._consume, name=f"rlmm-{topic}", daemon=True)
        self._thread.start()
        if not self.wait_until_ready(ready_timeout_s):
            log.warning("metadata topic %s not caught up after %.0fs; reads may be stale", topic, ready_timeout_s)

    # --- setup ---------------------------------------------------------------------------------

    def _ensure_topic(self, bootstrap_servers: str, replication_factor: int) -> None:
        admin = KafkaAdminClient(bootstrap_servers=bootstrap_servers, client_id="tiered-proxy-rlmm", **self._tls)
        try:
            refused: TopicAuthorizationFailedError | None = None
            try:
                admin.create_topics([NewTopic(self.topic, self.partitions_count, replication_factor,
                                              topic_configs={"retention.ms": "-1", "cleanup.policy": "delete"})])
            except TopicAlreadyExistsError:
                pass
            except TopicAuthorizationFailedError as e:
                # Kafka refuses CreateTopics to a principal without CREATE even for a topic that
                # exists: a reader (the tools, Spark's driver) or a proxy whose operator created the
                # topic for it uses the topic as it is.
                refused = e
            described = admin.describe_topics([self.topic])
            # Kafka answers CreateTopics before the broker asked names the new topic's partitions
            # (seen on Kafka 4.4 in CI: 0 partitions right after creation).
            deadline = time.monotonic() + _CREATED_TOPIC_VISIBLE_S
            while refused is None and not described[0]["partitions"] and time.monotonic() < deadline:
                time.sleep(0.1)
                described = admin.describe_topics([self.topic])
            if refused is not None and (described[0].get("error_code") or not described[0]["partitions"]):
                raise refused
            count = len(described[0]["partitions"])
            if count != self.partitions_count:
                raise ValueError(f"metadata topic {self.topic} has {count} partitions; configured "
                                 f"remote.log.metadata.topic.num.partitions is {self.partitions_count}")
        finally:
            admin.close()

    def _snapshot_path(self, partition: int) -> Path:
        return self.snapshot_dir / f"{self.topic}-{partition}.snapshot"

    def _load_snapshots(self) -> None:
        for path in sorted(self.snapshot_dir.glob(f"{self.topic}-*.snapshot")):
            partition = int(path.stem.rsplit("-", 1)[1])
            data = path.read_bytes()
            head, _, body = data.partition(b"\n")
            try:
                saved = json.loads(head)
                position = saved["next_offset"]
            except (ValueError, KeyError):
                log.warning("snapshot %s unreadable; replaying that partition", path)
                continue
            records, _ = read_journal(body)
            for record in records:
                self._state.apply(record)
            self._positions[partition] = position
            self._owner_epochs[partition] = int(saved.get("owner_epoch", 0))

    def _reset_partition(self, partition: int) -> None:
        with self._lock:
            def here(tp: TopicIdPartition) -> bool:
                return metadata_partition(tp, self.partitions_count) == partition

            for tp in [tp for tp in self._state.partitions if here(tp)]:
                del self._state.partitions[tp]
            for name in [n for n, t in self._state.topics.items() if here(TopicIdPartition(t.topic_id, n, 0))]:
                del self._state.topics[name]
            if here(CLUSTER_RECORDS):
                self._state.cluster_configs = None
            self._owner_epochs.pop(partition, None)

    # --- the consumer thread -------------------------------------------------------------------

    def _consume(self) -> None:
        last_snapshot = time.monotonic()
        while not self._stop.is_set():
            try:
                batches = self._consumer.poll(timeout_ms=0, max_records=1000)
            except Exception:  # the thread must outlive broker hiccups
                log.exception("metadata topic %s: poll failed", self.topic)
                self._stop.wait(1)
                continue
            if not batches:
                # Not a blocking poll: a broker that answers an empty Fetch at once (noida-db
                # ignores max_wait_ms) would have the consumer spin through its timeout, and
                # did: most of a core per idle proxy. The fetch stays in flight meanwhile.
                self._stop.wait(_IDLE_POLL_S)
            with self._applied:
                for tp, messages in batches.items():
                    for message in messages:
                        self._replay(tp.partition, message.offset, message.key, message.value, message.headers)
                        self._positions[tp.partition] = message.offset + 1
                self._applied.notify_all()
            if time.monotonic() - last_snapshot >= self.snapshot_interval_s:
                self.write_snapshots()
                last_snapshot = time.monotonic()

    def _replay(self, partition: int, offset: int, key: bytes | None, value: bytes | None,
                headers: list[tuple[str, bytes]]) -> None:
        """Apply one record of a metadata partition, in log order, unless it is fenced."""
        raw_epoch = _header(headers, OWNER_EPOCH_HEADER)
        try:
            epoch = int(raw_epoch) if raw_epoch is not None else None
        except ValueError:
            log.error("metadata topic %s-%d offset %d: owner epoch %r unreadable, record skipped",
                      self.topic, partition, offset, raw_epoch)
            return
        highest = self._owner_epochs.get(partition, 0)
        if key == CLAIM_KEY:
            if epoch is not None and epoch > highest:
                self._owner_epochs[partition] = epoch
                log.info("metadata partition %d: owner epoch %d (%s)", partition, epoch,
                         (_header(headers, OWNER_HEADER) or b"?").decode(errors="replace"))
            else:
                self._ignored.append((partition, offset))
            return
        if epoch is not None and epoch < highest:
            self._ignored.append((partition, offset))
            self.records_fenced += 1
            log.warning("metadata topic %s-%d offset %d: write of owner epoch %d fenced by epoch %d, ignored",
                        self.topic, partition, offset, epoch, highest)
            return
        if value is None:
            log.error("metadata topic %s-%d offset %d: a null record that is no claim, skipped",
                      self.topic, partition, offset)
            return
        try:
            self._state.apply(deserialize(value))
            self.records_replayed += 1
        except ProtocolError as exc:
            log.error("metadata topic %s-%d offset %d unreadable, skipped: %s", self.topic, partition, offset, exc)

    def wait_until_ready(self, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        with self._applied:
            while not self._caught_up():
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                self._applied.wait(remaining)
        return True

    def _caught_up(self, partition: int | None = None) -> bool:
        items = self._ready_at.items() if partition is None else [
            (tp, end) for tp, end in self._ready_at.items() if tp.partition == partition]
        return all(self._positions.get(tp.partition, 0) >= end for tp, end in items)

    def is_ready(self, tp: TopicIdPartition) -> bool:
        with self._lock:
            return self._caught_up(metadata_partition(tp, self.partitions_count))

    # --- writes --------------------------------------------------------------------------------

    def claim(self, partitions: set[int], owner: str) -> None:
        """Become the owner of these metadata partitions: a claim one epoch above the highest
        each holds, read back (so everything before it is applied here, and a claim that lost a
        race is retried higher)."""
        for partition in sorted(partitions):
            with self._lock:
                for _ in range(_CLAIM_ATTEMPTS):
                    epoch = self._owner_epochs.get(partition, 0) + 1
                    offset = self._send_and_read_back(partition, CLAIM_KEY, None, [
                        (OWNER_EPOCH_HEADER, str(epoch).encode()), (OWNER_HEADER, owner.encode())])
                    if (partition, offset) not in self._ignored:
                        self._my_epochs[partition] = epoch
                        break
                else:
                    raise FencedError(f"metadata partition {partition}: no claim held in {_CLAIM_ATTEMPTS} attempts")

    def release_claims(self, partitions: set[int]) -> None:
        with self._lock:
            for partition in partitions:
                self._my_epochs.pop(partition, None)

    def owner_epoch(self, partition: int) -> int:
        """The highest epoch claimed in this metadata partition's log so far."""
        with self._lock:
            return self._owner_epochs.get(partition, 0)

    def _persist(self, record: RemoteLogMetadata) -> None:
        partition = metadata_partition(_user_partition(record), self.partitions_count)
        epoch = self._my_epochs.get(partition)
        headers = [(OWNER_EPOCH_HEADER, str(epoch).encode())] if epoch is not None else []
        offset = self._send_and_read_back(partition, None, serialize(record), headers)
        if (partition, offset) in self._ignored:
            # The stale epoch stays until the group revokes the partition (release_claims), so
            # every further write of this instance there is fenced too.
            raise FencedError(f"{self.topic}-{partition}: this instance's owner epoch {epoch} was fenced by "
                              f"epoch {self._owner_epochs.get(partition, 0)}; the write at offset {offset} is ignored")

    def _send_and_read_back(self, partition: int, key: bytes | None, value: bytes | None,
                            headers: list[tuple[str, bytes]]) -> int:
        """Produce one record to ``partition``, wait until this instance's consumer has replayed
        it, and return its offset. Called with the lock held."""
        if self._producer is None:
            self._producer = KafkaProducer(bootstrap_servers=self._bootstrap_servers, acks="all", linger_ms=0,
                                           max_block_ms=int(self.write_timeout_s * 1000), **self._tls)
        future = self._producer.send(self.topic, key=key, value=value, partition=partition, headers=headers)
        # Wait for the ack without holding the lock: the consumer thread needs it to apply.
        self._lock.release()
        try:
            offset = future.get(timeout=self.write_timeout_s).offset
        finally:
            self._lock.acquire()
        deadline = time.monotonic() + self.write_timeout_s
        while self._positions.get(partition, 0) <= offset:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError(f"metadata record at {self.topic}-{partition}@{offset} written "
                                   f"but not read back within {self.write_timeout_s:.0f}s")
            self._applied.wait(remaining)
        return offset

    # --- snapshots and close -------------------------------------------------------------------

    def write_snapshots(self) -> None:
        with self._lock:
            by_partition: dict[int, list[RemoteLogMetadata]] = {p: [] for p in range(self.partitions_count)}
            for record in self._state.snapshot_records():
                by_partition[metadata_partition(_user_partition(record), self.partitions_count)].append(record)
            positions = dict(self._positions)
            epochs = dict(self._owner_epochs)
        for partition, records in by_partition.items():
            path = self._snapshot_path(partition)
            temporary = path.with_suffix(".tmp")
            with open(temporary, "wb") as f:
                f.write(json.dumps({"next_offset": positions.get(partition, 0),
                                    "owner_epoch": epochs.get(partition, 0)}).encode() + b"\n")
                for record in records:
                    f.write(frame(serialize(record)))
                f.flush()
                os.fsync(f.fileno())
            os.replace(temporary, path)
        fsync_dir(self.snapshot_dir)

    def close(self) -> None:
        if self._stop.is_set():
            return
        self._stop.set()
        self._thread.join(10)
        self.write_snapshots()
        if self._producer is not None:
            self._producer.close(5)
        self._consumer.close()
