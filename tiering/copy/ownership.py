"""Which proxy instance copies which partitions, when several share a cluster: a Kafka consumer
group over the metadata topic's partitions. The instance assigned metadata partition M copies
(and is the single metadata writer for) the user partitions whose records go to M.

The group member never reads records: its partitions are paused as soon as they are assigned,
and polling only keeps the membership alive. Rebalances are eager (kafka-python revokes
everything before the new assignment), and the revocation callback returns only once the remote
log manager has finished the passes in flight for the revoked partitions. An instance that dies
loses its partitions after ``session.timeout.ms``; the next owner cleans up any copy it left half
done. An instance that only stalled (a long pause, a frozen VM) learns of its loss late, when it
runs again, and may be mid-copy then: each new owner first claims the metadata partition with a
higher owner epoch, and the stalled one's later writes are fenced by it
(``tiering.metadata.topic_store``).
"""

from __future__ import annotations

import logging
import os
import socket
import threading
from collections.abc import Callable

from kafka import KafkaConsumer
from kafka.consumer.subscription_state import ConsumerRebalanceListener

from tiering.client_security import ClientSecurity
from tiering.metadata.codec import metadata_partition
from tiering.model import TopicIdPartition

log = logging.getLogger(__name__)

DEFAULT_GROUP_ID = "tiered-proxy-remote-log-manager"


def owner_id() -> str:
    """Who claims a metadata partition, for the log lines of every instance that replays it."""
    return f"{socket.gethostname()}:{os.getpid()}"


class GroupOwnership:
    def __init__(self, bootstrap_servers: str, metadata_topic: str, partitions: int, *,
                 group_id: str = DEFAULT_GROUP_ID, session_timeout_ms: int = 10_000,
                 on_release: Callable[[set[int]], None] = lambda released: None,
                 on_acquire: Callable[[set[int]], None] = lambda acquired: None,
                 security: ClientSecurity | None = None) -> None:
        self.topic = metadata_topic
        self.partitions = partitions
        self.owned: set[int] = set()
        self._lock = threading.Lock()
        self._on_release = on_release
        self._on_acquire = on_acquire
        self._consumer = KafkaConsumer(
            bootstrap_servers=bootstrap_servers, group_id=group_id, enable_auto_commit=False,
            session_timeout_ms=session_timeout_ms, heartbeat_interval_ms=max(session_timeout_ms // 5, 500),
            max_poll_interval_ms=max(300_000, session_timeout_ms * 3), client_id=f"{group_id}-member",
            **(security or ClientSecurity()).kafka_python_config())
        self._consumer.subscribe([metadata_topic], listener=_Listener(self))
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="remote-log-manager-group", daemon=True)
        self._thread.start()

    def owns(self, tp: TopicIdPartition) -> bool:
        with self._lock:
            return metadata_partition(tp, self.partitions) in self.owned

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self._consumer.poll(timeout_ms=500)
            except Exception:  # the membership must outlive broker hiccups
                log.exception("remote log manager group: poll failed")
                self._stop.wait(1)

    def _revoked(self, revoked: set[int]) -> None:
        with self._lock:
            released = self.owned & revoked
            self.owned -= revoked
        if released:
            self._on_release(released)  # returns once no pass for these partitions is running
            log.info("remote log manager: released metadata partitions %s", sorted(released))

    def _assigned(self, assigned: set[int]) -> None:
        self._consumer.pause(*self._consumer.assignment())
        with self._lock:
            acquired = assigned - self.owned
        if acquired:
            # The claim (a new owner epoch, tiering/metadata/topic_store.py) comes before the
            # first write: until it is read back these partitions are not owned here.
            try:
                self._on_acquire(acquired)
            except Exception:
                log.exception("remote log manager: could not claim metadata partitions %s; not copying them",
                              sorted(acquired))
                return
            log.info("remote log manager: now copying for metadata partitions %s", sorted(acquired))
        with self._lock:
            self.owned |= assigned

    def close(self) -> None:
        self._stop.set()
        self._thread.join(5)
        self._consumer.close(autocommit=False)


class _Listener(ConsumerRebalanceListener):
    def __init__(self, ownership: GroupOwnership) -> None:
        self.ownership = ownership

    def on_partitions_revoked(self, revoked) -> None:  # noqa: ANN001 - kafka-python's TopicPartitions
        self.ownership._revoked({tp.partition for tp in revoked})

    def on_partitions_assigned(self, assigned) -> None:  # noqa: ANN001
        self.ownership._assigned({tp.partition for tp in assigned})
