"""What remote reads ask the brokers: the log ends a Fetch answer served from the remote tier carries
(its high watermark and last stable offset), and the aborted transactions that span the remote end
(for read_committed reads).

The questions share a few clients, connected to every broker when the proxy starts, and ask each
partition's leader as the last Metadata named it (the remote log manager's rounds pass theirs on);
a question to a leader that has moved or failed since asks Metadata once and is asked again. The
log ends of a Fetch's partitions are one ListOffsets of each kind per leader. Before, each reader
thread made a client of its own on its first question, paying its connections, its login and a
Metadata per partition. With this and the chunk cache's threads started up front, a fresh proxy's
first record from the remote tier went from 69 to 46 ms (tests/bench/first_record.py, issue 26).
"""

from __future__ import annotations

import contextlib
import logging
import queue
import threading
from collections.abc import Callable, Iterator, Mapping
from typing import TypeVar

from protocol.errors import ErrorCode
from tiering.broker_client import LATEST, BrokerClient, BrokerClientError, TopicInfo
from tiering.client_security import ClientSecurity
from tiering.model import TopicIdPartition

log = logging.getLogger(__name__)
T = TypeVar("T")

# Clients connected at start: as many as one Fetch of three partitions asks with at once (a
# read_committed first read of each partition asks for aborted transactions, and the answer's log
# ends are asked alongside). More are made when more ask at once, and kept.
WARM_CLIENTS = 4


class BrokerQuestions:
    def __init__(self, bootstrap_servers: str, security: ClientSecurity) -> None:
        self.bootstrap_servers = bootstrap_servers
        self.security = security
        self._idle: queue.SimpleQueue[BrokerClient] = queue.SimpleQueue()
        self._clients: list[BrokerClient] = []
        self._lock = threading.Lock()
        self._closed = threading.Event()
        # (topic, partition) -> leader; replaced whole, so readers on other threads see a complete map
        self._leaders: dict[tuple[str, int], int] = {}

    def start(self) -> None:
        """Connect the first clients, on a thread of their own: brokers that do not answer yet hold
        up nothing else."""
        threading.Thread(target=self.warm, name="remote-read-questions", daemon=True).start()

    def warm(self) -> None:
        for _ in range(WARM_CLIENTS):
            if self._closed.is_set():
                return
            client = self._new_client()
            try:
                client.connect_all()
            except (BrokerClientError, OSError) as exc:
                log.debug("cannot connect to the brokers ahead of remote reads: %s", exc)
                return  # a question connects when it is asked
            self._idle.put(client)

    def close(self) -> None:
        self._closed.set()
        with self._lock:
            for client in self._clients:
                client.close()

    def learn_leaders(self, topics: Mapping[str, TopicInfo]) -> None:
        """The leaders of a Metadata answer of every topic (a remote log manager round's)."""
        self._leaders = {(t.name, p.partition): p.leader for t in topics.values() for p in t.partitions.values()}

    # --- the questions ---------------------------------------------------------------------------

    def log_ends(self, tps: list[TopicIdPartition]) -> dict[TopicIdPartition, tuple[int, int]]:
        """Each partition's high watermark and last stable offset as its leader says now (ListOffsets
        LATEST, read_uncommitted and read_committed, one request of each per leader), for Fetch
        answers served from the remote tier: the brokers' OFFSET_OUT_OF_RANGE they replace carries
        -1 for both. Partitions the brokers cannot say for now are left out."""
        ends: dict[TopicIdPartition, tuple[int, int]] = {}
        with self._client() as client:
            for fresh in (False, True):  # a leader that moved or failed since: asked again
                try:
                    self._ask_log_ends(client, [tp for tp in tps if tp not in ends], fresh, ends)
                except (BrokerClientError, OSError, KeyError) as exc:
                    if fresh:
                        log.warning("%s: cannot ask the brokers for the log end of a remote read's answer: %s",
                                    tps[0], exc)
                if len(ends) == len(tps):
                    break
        return ends

    def aborted_transactions_at(self, tp: TopicIdPartition, offset: int) -> list[tuple[int, int]] | None:
        """The brokers' aborted transactions at ``offset`` (BrokerClient's ``aborted_transactions_at``),
        for the remote reader's threads; None also when the brokers cannot be asked now."""
        return self._ask_leader(tp, "which transactions ended above the remote tier",
                                lambda client, leader: client.aborted_transactions_at(leader, tp.topic, tp.partition,
                                                                                      offset))

    # --- how they are asked ----------------------------------------------------------------------

    def _new_client(self) -> BrokerClient:
        client = BrokerClient(self.bootstrap_servers, security=self.security)
        with self._lock:
            self._clients.append(client)
        return client

    @contextlib.contextmanager
    def _client(self) -> Iterator[BrokerClient]:
        try:
            client = self._idle.get_nowait()
        except queue.Empty:
            client = self._new_client()
        try:
            yield client
        finally:
            self._idle.put(client)

    def _leader(self, client: BrokerClient, topic: str, partition: int, fresh: bool) -> int:
        """The partition's leader: from the last Metadata seen, or (``fresh``, or unknown) asked now."""
        if fresh or (topic, partition) not in self._leaders:
            self._learn_leaders(client, topic)
        return self._leaders[(topic, partition)]

    def _learn_leaders(self, client: BrokerClient, topic: str) -> None:
        info = client.metadata([topic])[topic]
        self._leaders = {**self._leaders, **{(topic, p.partition): p.leader for p in info.partitions.values()}}

    def _ask_log_ends(self, client: BrokerClient, tps: list[TopicIdPartition], fresh: bool,
                      ends: dict[TopicIdPartition, tuple[int, int]]) -> None:
        if fresh:
            for topic in dict.fromkeys(tp.topic for tp in tps):  # each topic's leaders, once
                self._learn_leaders(client, topic)
        by_leader: dict[int, list[TopicIdPartition]] = {}
        for tp in tps:
            by_leader.setdefault(self._leader(client, tp.topic, tp.partition, fresh=False), []).append(tp)
        for leader, led in by_leader.items():
            keys = [(tp.topic, tp.partition) for tp in led]
            latest = client.list_offsets(leader, keys, LATEST)
            stable = client.list_offsets(leader, keys, LATEST, read_committed=True)
            for tp, key in zip(led, keys, strict=True):
                (hw_error, high_watermark), (lso_error, last_stable) = latest[key], stable[key]
                if hw_error == lso_error == ErrorCode.NONE:
                    ends[tp] = (high_watermark, last_stable)

    def _ask_leader(self, tp: TopicIdPartition, what: str, call: Callable[[BrokerClient, int], T]) -> T | None:
        """``call(client, leader)`` with a shared client and the partition's leader (the last one
        seen, asked again once if that fails); None, logged, when the brokers cannot be asked."""
        try:
            with self._client() as client:
                try:
                    return call(client, self._leader(client, tp.topic, tp.partition, fresh=False))
                except BrokerClientError:
                    return call(client, self._leader(client, tp.topic, tp.partition, fresh=True))
        except (BrokerClientError, OSError, KeyError) as exc:
            log.warning("%s: cannot ask the brokers %s: %s", tp, what, exc)
            return None
