"""The remote log manager: finds the tiered partitions and runs their copiers on a bounded pool.

Every ``remote.log.manager.task.interval.ms`` one round: read the cluster's topics (Metadata,
DescribeConfigs), keep one :class:`PartitionCopier` per partition of each topic with
``remote.storage.enable=true`` (or every topic under ``proxy.tier.all.topics``), and run the due
copiers on ``remote.log.manager.thread.pool.size`` worker threads. A round waits for its passes,
so a copier never runs twice at once. The manager runs on its own thread, apart from the proxy's
event loop: client traffic never waits for it.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor, wait
from pathlib import Path

from tiering.broker_client import BrokerClient, BrokerClientError, TopicInfo
from tiering.config import TieringConfig, TopicTiering
from tiering.copier import GapLog, PartitionCopier, TieringMetrics
from tiering.metadata import RemoteLogMetadataManager
from tiering.model import TopicIdPartition
from tiering.storage import RemoteStorageManager

log = logging.getLogger(__name__)


class RemoteLogManager:
    def __init__(self, bootstrap_servers: str, rsm: RemoteStorageManager, rlmm: RemoteLogMetadataManager,
                 config: TieringConfig, data_dir: Path, *, broker_id: int = -1,
                 owns: Callable[[TopicIdPartition], bool] = lambda tp: True) -> None:
        self.bootstrap_servers = bootstrap_servers
        self.rsm = rsm
        self.rlmm = rlmm
        self.config = config
        self.data_dir = Path(data_dir)
        self.broker_id = broker_id
        self.owns = owns
        self.metrics = TieringMetrics()
        self.gaps = GapLog(self.data_dir / "data-loss-gaps.jsonl")
        self.copiers: dict[TopicIdPartition, PartitionCopier] = {}
        self.rounds = 0
        self._local = threading.local()
        self._clients: list[BrokerClient] = []
        self._clients_lock = threading.Lock()
        self._control = BrokerClient(bootstrap_servers)
        self._pool = ThreadPoolExecutor(config.thread_pool_size, thread_name_prefix="rlm-copier")
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._warned: set[str] = set()

    # --- lifecycle -------------------------------------------------------------------------------

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name="remote-log-manager", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 30.0) -> None:
        self._stop.set()
        for copier in list(self.copiers.values()):
            copier.stopped = True  # passes in flight end after their current fetch or copy
        if self._thread is not None:
            self._thread.join(timeout)
        self._pool.shutdown(wait=True, cancel_futures=True)
        for copier in self.copiers.values():
            copier.close()
        with self._clients_lock:
            for client in self._clients:
                client.close()
        self._control.close()

    def _loop(self) -> None:
        interval = self.config.task_interval_ms / 1000
        while not self._stop.is_set():
            started = time.monotonic()
            try:
                self.run_once()
            except Exception:  # the loop must survive anything one round throws
                log.exception("remote log manager round failed")
            self._stop.wait(max(0.0, interval - (time.monotonic() - started)))

    # --- one round -------------------------------------------------------------------------------

    def run_once(self) -> None:
        self._refresh()
        due = [c for c in self.copiers.values() if c.due()]
        futures = [self._pool.submit(self._run_copier, c) for c in due]
        wait(futures)
        for f in futures:
            if f.exception() is not None:
                log.error("copier crashed: %r", f.exception(), exc_info=f.exception())
        self.rounds += 1

    def _client(self) -> BrokerClient:
        client = getattr(self._local, "client", None)
        if client is None:
            client = self._local.client = BrokerClient(self.bootstrap_servers)
            with self._clients_lock:
                self._clients.append(client)
        return client

    def _run_copier(self, copier: PartitionCopier) -> None:
        if not self._stop.is_set():
            copier.run_once(self._client())

    def _refresh(self) -> None:
        try:
            topics = self._control.metadata()
            candidates = [t for t in topics.values() if not t.internal and not t.name.startswith("__")]
            configs = self._control.topic_configs([t.name for t in candidates])
        except BrokerClientError as exc:
            log.warning("cannot read cluster metadata for tiering: %s", exc)
            return
        wanted: dict[TopicIdPartition, tuple[TopicInfo, int, TopicTiering]] = {}
        for topic in candidates:
            settings = TopicTiering.resolve(self.config, configs.get(topic.name, {}))
            if not settings.remote_storage_enable:
                continue
            if settings.compacted:
                self._warn_once(f"compacted:{topic.name}", "topic %s is compacted: not tiered", topic.name)
                continue
            for p in topic.partitions.values():
                tp = TopicIdPartition(topic.topic_id, topic.name, p.partition)
                if self.owns(tp):
                    wanted[tp] = (topic, p.leader, settings)
        for tp in [tp for tp in self.copiers if tp not in wanted]:
            self.copiers.pop(tp).close()
            self.rlmm.on_stop_partitions([tp])
        new = []
        for tp, (_, leader, settings) in wanted.items():
            copier = self.copiers.get(tp)
            if copier is None:
                self.copiers[tp] = PartitionCopier(
                    tp, leader, settings, rlmm=self.rlmm, rsm=self.rsm, spool_dir=self.data_dir / "spool",
                    metrics=self.metrics, gaps=self.gaps, fetch_max_bytes=self.config.copier_fetch_max_bytes,
                    backoff_max_ms=self.config.copy_backoff_max_ms, broker_id=self.broker_id)
                new.append(tp)
            else:
                copier.leader, copier.settings = leader, settings
        if new:
            self.rlmm.on_partition_leadership_changes(new, [])
            log.info("tiering %d new partition(s): %s", len(new), ", ".join(f"{tp.topic}-{tp.partition}" for tp in new))

    def _warn_once(self, key: str, message: str, *args: object) -> None:
        if key not in self._warned:
            self._warned.add(key)
            log.warning(message, *args)

    # --- what others ask -------------------------------------------------------------------------

    def lag(self) -> dict[TopicIdPartition, int]:
        """Offsets below the last stable offset not yet in a copied segment, per partition."""
        result = {}
        for tp, copier in self.copiers.items():
            ry = copier.remote_end()
            result[tp] = max(0, copier.last_stable - (ry + 1 if ry is not None else max(copier.log_start, 0)))
        return result
