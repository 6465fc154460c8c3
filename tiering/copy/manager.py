"""The remote log manager: finds the tiered partitions and runs their copiers on a bounded pool.

Every ``remote.log.manager.task.interval.ms`` one round: read the cluster's topics (Metadata,
DescribeConfigs), keep a :class:`PartitionCopier` per partition of each topic with
``remote.storage.enable=true`` set on it (through the proxy, or at a broker that knows the key but
has no tiered storage; a broker's default never counts, see ``BrokerTopicConfigs``), or of every
non-compacted topic under ``proxy.tier.all.topics``, and run the due copiers on
``remote.log.manager.thread.pool.size`` threads. Topics the brokers tier themselves are theirs
(``tiering.topic_owner``): never copied, trimmed or expired here. A round waits for its passes, so
a copier never runs twice at once. The manager has its own thread: client traffic never waits.
"""

from __future__ import annotations

import functools
import logging
import threading
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor, wait
from dataclasses import replace
from pathlib import Path

from tiering.broker_client import BrokerClient, BrokerClientError, TopicInfo
from tiering.client_security import ClientSecurity
from tiering.config import TieringConfig, TopicTiering
from tiering.copy.copier import PartitionCopier, delete_remote_segment, now_ms
from tiering.copy.gap_log import GapLog
from tiering.copy.metrics import TieringMetrics
from tiering.metadata.codec import metadata_partition
from tiering.metadata.manager import RemoteLogMetadataManager
from tiering.model import (
    DisablePolicy,
    RemotePartitionDeleteMetadata,
    RemotePartitionDeleteState,
    TieringState,
    TopicIdPartition,
    TopicTieringState,
)
from tiering.quota import ByteRateQuota
from tiering.read.broker_questions import BrokerQuestions
from tiering.storage.api import RemoteStorageError, RemoteStorageManager
from tiering.topic_configs import TIERING_KEYS, BrokerTopicConfigs, TopicConfigError, is_enabled, transition
from tiering.topic_owner import BrokerTiering, TieredBy, set_on_topic, tiered_by

log = logging.getLogger(__name__)

PROGRESS_INTERVAL_S = 5.0  # long deletes log how far they are


class RemoteLogManager:
    def __init__(self, bootstrap_servers: str, rsm: RemoteStorageManager, rlmm: RemoteLogMetadataManager,
                 config: TieringConfig, data_dir: Path, *, broker_id: int = -1,
                 owns: Callable[[TopicIdPartition], bool] = lambda tp: True,
                 security: ClientSecurity | None = None) -> None:
        self.bootstrap_servers = bootstrap_servers
        self.rsm = rsm
        self.rlmm = rlmm
        self.config = config
        self.data_dir = Path(data_dir)
        self.broker_id = broker_id
        self.owns = owns
        self.security = security or ClientSecurity()  # TLS and SASL toward the brokers
        self.metrics = TieringMetrics()
        self.copy_quota = ByteRateQuota(config.copy_max_bytes_per_second, config.copy_quota_window_num,
                                        config.copy_quota_window_size_seconds)  # KIP-956, across every copier
        self.follow_config: Callable[[], TieringConfig] = lambda: self.config  # the settings in effect
        self.gaps = GapLog(self.data_dir / "data-loss-gaps.jsonl")
        self.copiers: dict[TopicIdPartition, PartitionCopier] = {}
        self.rounds, self.last_round_s = 0, 0.0  # rounds finished; seconds the last one took
        self.cluster_rounds = 0  # of those, rounds that read the cluster's metadata
        self._local = threading.local()
        self._clients: list[BrokerClient] = []
        self._clients_lock = threading.Lock()
        self._control = BrokerClient(bootstrap_servers, security=self.security)
        # The remote reads' questions to the brokers; learns the leaders from each round's Metadata.
        self.questions = BrokerQuestions(bootstrap_servers, self.security)
        self._pool = ThreadPoolExecutor(config.thread_pool_size, thread_name_prefix="rlm-copier")
        self._stop, self._wake = threading.Event(), threading.Event()
        self._thread: threading.Thread | None = None
        self._warned: set[str] = set()
        self._missing: dict[str, float] = {}  # topic with remote data -> when listings stopped showing it
        self._lifecycle_tasks: list[Callable[[], None]] = []
        self._ids_lock = threading.Lock()
        # The cluster's topics as last read (a new dict each round), and archives' names (kept).
        self.cluster_topics: dict[str, uuid.UUID] | None = None
        self.keeps_remote: Callable[[str], bool] = lambda name: False
        self._busy, self._busy_lock = 0, threading.Lock()
        self._round_lock = threading.Lock()  # a round, or a release of partitions, at a time
        # Who tiers each topic the last round described, and the topics the brokers tier or still
        # hold remote data of (replaced whole each round: other threads read them).
        self.owners: dict[str, TieredBy] = {}
        self.brokers_hold: frozenset[str] = frozenset()
        self._system_enabled: bool | None = None  # the brokers' remote.log.storage.system.enable

    # --- lifecycle -------------------------------------------------------------------------------

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name="remote-log-manager", daemon=True)
        self._thread.start()
        self.questions.start()

    def stop(self, timeout: float = 30.0) -> None:
        self._stop.set()
        self._wake.set()
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
        self.questions.close()

    def _loop(self) -> None:
        interval = self.config.task_interval_ms / 1000
        while not self._stop.is_set():
            started = time.monotonic()
            try:
                self.run_once()
            except Exception:  # the loop must survive anything one round throws
                log.exception("remote log manager round failed")
            self._wake.wait(max(0.0, interval - (time.monotonic() - started)))
            self._wake.clear()

    def wake(self) -> None:
        """Start the next round now (a topic's tiering changed)."""
        self._wake.set()

    # --- one round -------------------------------------------------------------------------------

    def run_once(self) -> None:
        with self._round_lock:
            config = self.follow_config()
            if config is not self.config:  # the cluster's dynamic defaults changed (KIP-956's rate too)
                self.config, self.copy_quota.bound = config, config.copy_max_bytes_per_second
            self._run_round()

    def release(self, metadata_partitions: set[int]) -> None:
        """Stop copying the partitions that belong to these metadata partitions (another instance
        takes them over); returns once no pass for them is running."""
        partitions = getattr(self.rlmm, "partitions_count", None)

        def released(tp: TopicIdPartition) -> bool:
            return partitions is not None and metadata_partition(tp, partitions) in metadata_partitions

        # Passes under way end at their next fetch: a revoke waited for whole passes (39 s under
        # steady production), past the group's session (issue 27).
        for tp in filter(released, list(self.copiers)):
            self.copiers[tp].interrupted = True
        with self._round_lock:
            self._stop_copiers(released)

    def _run_round(self) -> None:
        started = time.monotonic()
        self._lifecycle_tasks = []
        refreshed = self._refresh()
        due = [c for c in self.copiers.values() if c.due()]
        # Disablements and partition deletes share the pool with the copiers (never the same
        # partition: _refresh took those copiers away), so slow deletes hold up no other topic.
        futures = [self._pool.submit(task) for task in self._lifecycle_tasks] + [
            self._pool.submit(self._run_copier, c) for c in due]
        wait(futures)
        for f in futures:
            if f.exception() is not None:
                log.error("tiering task crashed: %r", f.exception(), exc_info=f.exception())
        self.rounds, self.last_round_s = self.rounds + 1, time.monotonic() - started
        if refreshed and not self.cluster_rounds:  # it checks every partition's lineage: long on a wide cluster
            log.info("first tiering round done: %d partitions in %.1f s", len(due), self.last_round_s)
        self.cluster_rounds += refreshed

    def _client(self) -> BrokerClient:
        """The copier thread's own client."""
        if getattr(self._local, "client", None) is None:
            self._local.client = BrokerClient(self.bootstrap_servers, security=self.security)
            with self._clients_lock:
                self._clients.append(self._local.client)
        return self._local.client  # type: ignore[no-any-return]

    def _run_copier(self, copier: PartitionCopier) -> None:
        if not self._stop.is_set():
            with self._busy_lock:
                self._busy += 1
            try:
                copier.run_once(self._client())
            finally:
                with self._busy_lock:
                    self._busy -= 1

    def pool_state(self) -> tuple[int, int]:
        """(copier threads busy, threads)."""
        return self._busy, self.config.thread_pool_size

    def _refresh(self) -> bool:
        """Copiers for what the cluster's metadata says now; False when it could not be read."""
        try:
            topics = self._control.metadata()
            candidates = [t for t in topics.values() if not t.internal and not t.name.startswith("__")]
            configs = self._control.topic_configs([t.name for t in candidates])
        except BrokerClientError as exc:
            log.warning("cannot read cluster metadata for tiering: %s", exc)
            return False
        self.questions.learn_leaders(topics)
        self.cluster_topics = {name: t.topic_id for name, t in topics.items()}
        self._notice_vanished_topics(topics)
        # Asked only where a topic sets remote.storage.enable=true at the brokers; the last answer
        # stands while they cannot say (a broker restarting must not turn topics over).
        if any(map(set_on_topic, configs.values())):
            answer = self._control.tiered_storage_enabled()
            self._system_enabled = answer if answer is not None else self._system_enabled
        system = self._system_enabled
        wanted: dict[TopicIdPartition, tuple[int, int, TopicTiering, TopicTieringState, BrokerTiering]] = {}
        undescribed: set[str] = set()
        owners = {name: owner for name, owner in self.owners.items() if name in topics}
        brokers_hold = set()
        for topic in candidates:
            broker = configs.get(topic.name)
            if broker is None:
                # No decision without the topic's configs (it may be compacted, or the brokers'):
                # copiers already running keep going, nothing new starts until it is described again.
                undescribed.add(topic.name)
                if topic.name in self.brokers_hold:
                    brokers_hold.add(topic.name)
                self._warn_once(f"undescribed:{topic.name}", "the broker did not describe the configs of topic %s; "
                                "its tiering waits for them", topic.name)
                continue
            brokers = BrokerTiering.of(broker, system)
            if brokers.holds:
                brokers_hold.add(topic.name)
                state = self._own_state(topic)  # never made for the brokers' topics, nor moved by them
            else:
                state = self._topic_state(topic, broker)
            self._note_owner(topic.name, tiered_by(brokers, state is not None and state.copying), owners, state)
            if state is None or state.state is None:
                continue
            if state.state == TieringState.DISABLING:
                self._stop_copiers(lambda tp, name=topic.name: tp.topic == name)
                if self.owns(TopicIdPartition(state.topic_id, topic.name, 0)):  # one instance finishes it
                    self._lifecycle_tasks.append(functools.partial(self._disable, state, topic))
                continue
            if state.state == TieringState.DISABLED and state.disable_policy == DisablePolicy.DELETE:
                continue  # nothing left to copy or expire
            # The tiering keys come from the topic's state alone (the proxy's record, or what
            # _topic_state took from the broker); the rest as the broker has them for the topic.
            others = {k: v for k, v in broker.applicable().items() if k not in TIERING_KEYS}
            settings = TopicTiering.resolve(self.config, {**others, **state.config_map})
            if settings.compacted:
                self._warn_once(f"compacted:{topic.name}", "topic %s is compacted: not tiered", topic.name)
                continue
            for p in topic.partitions.values():
                tp = TopicIdPartition(state.topic_id, topic.name, p.partition)
                if self.owns(tp):
                    wanted[tp] = (p.leader, p.leader_epoch, settings, state, brokers)
        for name in self.brokers_hold - brokers_hold:
            if owners.get(name) == TieredBy.PROXY:
                log.info("topic %s: the brokers no longer hold remote data of it; its hand-over to the proxy is "
                         "complete (the proxy moves their log start from now on)", name)
        self.owners = owners
        self.brokers_hold = frozenset(brokers_hold)
        self._remove_deleted_partitions()
        for tp in [tp for tp in self.copiers if tp not in wanted and tp.topic not in undescribed]:
            self.copiers.pop(tp).close()
            self.rlmm.on_stop_partitions([tp])
        new = []
        for tp, (leader, leader_epoch, settings, state, brokers) in wanted.items():
            copier = self.copiers.get(tp)
            if copier is None:
                copier = self.copiers[tp] = PartitionCopier(
                    tp, leader, settings, rlmm=self.rlmm, rsm=self.rsm, spool_dir=self.data_dir / "spool",
                    metrics=self.metrics, gaps=self.gaps, fetch_max_bytes=self.config.copier_fetch_max_bytes,
                    backoff_max_ms=self.config.copy_backoff_max_ms, broker_id=self.broker_id, leader_epoch=leader_epoch,
                    copy_quota=self.copy_quota)
                new.append(tp)
            copier.follow(leader, leader_epoch)
            copier.settings = settings
            # Copies run only while ENABLED under the epoch they started in (KIP-950's fence) and
            # the brokers do not copy the topic themselves; otherwise the copier only expires the
            # proxy's own remote data by total retention (KIP-950 retain, or a topic handed to the
            # brokers). The brokers' log start is theirs while they hold remote data of the topic.
            copier.tiered_epoch = state.tiered_epoch if state.copying and not brokers.copying else None
            copier.may_move_log_start = not brokers.holds
        if new:
            self.rlmm.on_partition_leadership_changes(new, [])
            log.info("tiering %d new partition(s): %s", len(new), ", ".join(f"{tp.topic}-{tp.partition}" for tp in new))
        return True

    # --- per-topic lifecycle (KIP-950, deletes) --------------------------------------------------

    def resolve_topic_id(self, name: str, broker_topic_id: uuid.UUID, *, new_incarnation: bool = False) -> uuid.UUID:
        """The id the remote tier files ``name`` under: the broker's when it has topic ids.
        Brokers without them (noida-db) report zeros: the first incarnation of a name keeps the
        zero id, and one created after the proxy saw the name deleted gets an id the proxy
        assigns, so a recreated topic never sees its predecessor's remote data."""
        if broker_topic_id.int != 0:
            return broker_topic_id
        with self._ids_lock:
            state = self.rlmm.topic_tiering_state(name)
            if state is not None and not state.deleted and not new_incarnation:
                return state.topic_id
            seen_before = state is not None or any(tp.topic == name for tp in self.rlmm.partitions())
            return uuid.uuid4() if seen_before else broker_topic_id

    def _own_state(self, topic: TopicInfo) -> TopicTieringState | None:
        """The proxy's record of this incarnation of the topic (set through the proxy), if any."""
        state = self.rlmm.topic_tiering_state(topic.name)
        if state is None or state.deleted or (topic.topic_id.int != 0 and state.topic_id != topic.topic_id):
            return None
        return state

    def _note_owner(self, name: str, owner: TieredBy, owners: dict[str, TieredBy],
                    state: TopicTieringState | None) -> None:
        """Record who tiers ``name`` now, and say so once when it changes hands (or when the proxy
        first meets a topic the brokers tier)."""
        before = owners.get(name)
        owners[name] = owner
        if owner == before or (before is None and owner != TieredBy.BROKERS):
            return
        if owner == TieredBy.BROKERS:
            held = " (its own older copy, below the brokers' log start, stays readable through the proxy)" \
                if state is not None else ""
            log.warning("topic %s is tiered by the brokers (remote.storage.enable=true is the topic's own config "
                        "there): the proxy does not copy it, move its log start or expire it%s", name, held)
        elif owner == TieredBy.PROXY:
            log.info("topic %s is tiered by the proxy now (was: %s); while the brokers hold remote data of it, "
                     "the proxy copies it through them and leaves their log start alone", name, before.value)
        else:
            log.info("topic %s is tiered by nobody now (was: %s)", name, before.value)

    def tiered_by(self, topic: str) -> TieredBy:
        """Who tiered ``topic`` at the last round that described it (NONE for a topic none has)."""
        return self.owners.get(topic, TieredBy.NONE)

    def _topic_state(self, topic: TopicInfo, broker_configs: BrokerTopicConfigs) -> TopicTieringState | None:
        """The topic's lifecycle state, moved on where its effective configs call for it (tiering
        switched on or off at the broker, ``proxy.tier.all.topics``)."""
        own = self._own_state(topic)
        if own is not None:
            values = own.config_map  # set through the proxy: the proxy's record is the truth
        else:  # set on the topic at a broker that knows the keys (never its defaults), or all topics
            values = broker_configs.tiering_values()
        state = self.rlmm.topic_tiering_state(topic.name)
        if (state is None or state.deleted) and not is_enabled(values, self.config):
            return None
        topic_id = self.resolve_topic_id(topic.name, topic.topic_id)
        current = self.rlmm.topic_tiering_state(topic.name)
        try:
            moved = transition(current, topic.name, topic_id, values, self.config, now_ms(), enable_named=False)
        except TopicConfigError:
            return current
        if current is None or (moved.state, moved.tiered_epoch, moved.topic_id) != (
                current.state, current.tiered_epoch, current.topic_id):
            self.rlmm.put_topic_tiering_state(moved)
            log.info("topic %s: tiering %s (tiered epoch %d)", topic.name,
                     moved.state.name if moved.state is not None else "off", moved.tiered_epoch)
        return moved

    def _disable(self, state: TopicTieringState, topic: TopicInfo) -> None:
        """Finish a DISABLING topic (its copiers are stopped): with ``delete`` remove every
        remote segment (readers stopped serving them when DISABLING began); then DISABLED. A
        restart in the middle resumes here."""
        if state.disable_policy == DisablePolicy.DELETE:
            for p in topic.partitions:
                tp = TopicIdPartition(state.topic_id, topic.name, p)
                try:
                    self._delete_all_segments(tp)
                except RemoteStorageError as exc:
                    log.warning("disabling %s: remote deletes failed, will retry: %s", topic.name, exc)
                    return
        self.rlmm.put_topic_tiering_state(replace(state, state=TieringState.DISABLED, event_timestamp_ms=now_ms()))
        log.info("topic %s: tiered storage DISABLED (policy %s, tiered epoch %d)", topic.name,
                 state.disable_policy.config_value, state.tiered_epoch)

    def _delete_all_segments(self, tp: TopicIdPartition) -> int:
        deleted = 0
        segments = list(self.rlmm.list_remote_log_segments(tp))
        last_report = time.monotonic()
        for segment in segments:
            if time.monotonic() - last_report >= PROGRESS_INTERVAL_S:
                log.info("deleting %s from the remote tier: %d/%d segments", tp, deleted, len(segments))
                last_report = time.monotonic()
            delete_remote_segment(self.rlmm, self.rsm, segment, self.broker_id)
            deleted += 1
            self.metrics.add(tp.topic, deleted_segments=1, deleted_bytes=segment.segment_size_bytes)
        return deleted

    def mark_topic_deleted(self, name: str, topic_id: uuid.UUID | None = None) -> list[TopicIdPartition]:
        """A topic is gone: its partitions become DELETE_PARTITION_MARKED (unreadable at once) and
        the next rounds delete their remote data. ``topic_id`` None: every incarnation of ``name``."""
        with self._ids_lock:
            marked = []
            for tp in self.rlmm.partitions():
                if tp.topic != name or (topic_id is not None and tp.topic_id != topic_id):
                    continue
                if self.rlmm.partition_delete_state(tp) is None:
                    self.rlmm.put_remote_partition_delete_metadata(RemotePartitionDeleteMetadata(
                        tp, RemotePartitionDeleteState.DELETE_PARTITION_MARKED, now_ms(), self.broker_id))
                    marked.append(tp)
            state = self.rlmm.topic_tiering_state(name)
            if state is not None and not state.deleted and (topic_id is None or state.topic_id == topic_id):
                self.rlmm.put_topic_tiering_state(replace(state, deleted=True, event_timestamp_ms=now_ms()))
        if marked:
            log.info("topic %s deleted: %d remote partition(s) marked for deletion", name, len(marked))
        return marked

    def _notice_vanished_topics(self, topics: dict[str, TopicInfo]) -> None:
        """Topics deleted behind the proxy's back: a topic with remote data that has been missing
        from every listing for ``proxy.deleted.topic.grace.ms`` (a listing can miss a topic that
        is only between leaders), or whose name now has a new id, is deleted from the remote tier."""
        live: dict[str, set[uuid.UUID]] = {}
        for tp in self.rlmm.partitions():
            if self.rlmm.partition_delete_state(tp) is None:
                live.setdefault(tp.topic, set()).add(tp.topic_id)
        now = time.monotonic()
        missing: dict[str, float] = {}
        for name, ids in live.items():
            if not any(self.owns(TopicIdPartition(i, name, 0)) for i in ids):
                continue  # the instance owning the topic's partition 0 decides
            info = topics.get(name)
            if info is None:
                since = missing[name] = self._missing.get(name, now)
                kept_ms = self.config.deleted_topic_retention_ms  # -1: for ever; an archive's: for ever too
                if now - since >= max(self.config.deleted_topic_grace_ms, kept_ms) / 1000 and name in self._missing \
                        and kept_ms >= 0 and not self.keeps_remote(name):
                    log.warning("topic %s has been gone from the cluster for %.0fs: deleting its remote data",
                                name, now - since)
                    self.mark_topic_deleted(name)
                    del missing[name]
                continue
            current = self.rlmm.topic_tiering_state(name)
            current_id = info.topic_id if info.topic_id.int != 0 else (current.topic_id if current else None)
            for stale in ids - {current_id}:
                if current_id is not None and info.topic_id.int != 0:
                    log.warning("topic %s has a new id %s: deleting the remote data of %s", name, current_id, stale)
                    self.mark_topic_deleted(name, stale)
        self._missing = missing

    def _stop_copiers(self, which: Callable[[TopicIdPartition], bool]) -> None:
        for tp in [tp for tp in self.copiers if which(tp)]:
            self.copiers.pop(tp).close()
            self.rlmm.on_stop_partitions([tp])

    def _remove_deleted_partitions(self) -> None:
        for tp in self.rlmm.partitions():
            state = self.rlmm.partition_delete_state(tp)
            if state in (RemotePartitionDeleteState.DELETE_PARTITION_MARKED,
                         RemotePartitionDeleteState.DELETE_PARTITION_STARTED):
                self._stop_copiers(lambda t, tp=tp: t == tp)
                if self.owns(tp):
                    self._lifecycle_tasks.append(functools.partial(self._delete_partition, tp, state))

    def _delete_partition(self, tp: TopicIdPartition, state: RemotePartitionDeleteState) -> None:
        """DELETE_PARTITION_STARTED -> every segment deleted -> FINISHED; repeated after a restart."""
        try:
            if state == RemotePartitionDeleteState.DELETE_PARTITION_MARKED:
                self.rlmm.put_remote_partition_delete_metadata(RemotePartitionDeleteMetadata(
                    tp, RemotePartitionDeleteState.DELETE_PARTITION_STARTED, now_ms(), self.broker_id))
            count = self._delete_all_segments(tp)
            self.rlmm.put_remote_partition_delete_metadata(RemotePartitionDeleteMetadata(
                tp, RemotePartitionDeleteState.DELETE_PARTITION_FINISHED, now_ms(), self.broker_id))
            log.info("deleted partition %s from the remote tier (%d segment(s))", tp, count)
        except RemoteStorageError as exc:
            log.warning("deleting partition %s from the remote tier failed, will retry: %s", tp, exc)

    def _warn_once(self, key: str, message: str, *args: object) -> None:
        if key not in self._warned:
            self._warned.add(key)
            log.warning(message, *args)

    # --- what others ask -------------------------------------------------------------------------

    def topic_sizes(self) -> dict[str, tuple[int, int, int]]:
        """Per tiered topic: (copy lag in bytes, in segments, remote log size in bytes). The lag
        in bytes is estimated from the offsets not yet copied and the remote segments' bytes per
        offset (the copier reads the log as a stream; it does not see the brokers' segments)."""
        out: dict[str, list[int]] = {}
        for tp, copier in list(self.copiers.items()):
            segments = self.rlmm.copied_segments(tp)
            size = sum(s.segment_size_bytes for s in segments)
            offsets = sum(s.end_offset - s.start_offset + 1 for s in segments)
            ry = segments[-1].end_offset if segments else None
            lag_offsets = max(0, copier.last_stable - (ry + 1 if ry is not None else max(copier.log_start, 0)))
            lag_bytes = lag_offsets * size // offsets if offsets else 0
            lag_segments = -(-lag_bytes // copier.settings.segment_bytes) if lag_bytes else 0
            totals = out.setdefault(tp.topic, [0, 0, 0])
            for i, value in enumerate((lag_bytes, lag_segments, size)):
                totals[i] += value
        return {topic: (a, b, c) for topic, (a, b, c) in out.items()}

    def lag(self) -> dict[TopicIdPartition, int]:
        """Offsets below the last stable offset not yet in a copied segment, per partition."""
        result = {}  # over a copy: other threads call this while the manager adds and removes copiers
        for tp, copier in list(self.copiers.items()):
            ry = copier.remote_end()
            result[tp] = max(0, copier.last_stable - (ry + 1 if ry is not None else max(copier.log_start, 0)))
        return result
