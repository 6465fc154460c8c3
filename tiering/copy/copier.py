"""The copier of one tiered partition: broker log -> remote segments, plus expiry and local retention.

One pass (:meth:`PartitionCopier.run_once`) does, in order:

1. clean up orphans: segments left in COPY_SEGMENT_STARTED by a copy that died (this copier is
   the partition's single writer, so between passes nothing of ours is in flight);
2. copy: fetch raw batches from ``Ry + 1`` up to the last stable offset, append them to the open
   segment, roll it at ``segment.bytes`` (or ``segment.ms`` once caught up), and for each rolled
   segment record COPY_SEGMENT_STARTED, copy, record COPY_SEGMENT_FINISHED with the storage's
   custom metadata;
3. expire remote segments, oldest first, by the topic's remote retention;
4. local retention: move the brokers' log start forward with DeleteRecords by Kafka's rule (see
   :mod:`tiering.copy.local_retention`), never past ``Ry + 1`` nor to the log end.

If the brokers' log start has passed the copier's position, the offsets in between are lost:
logged as an error, counted, recorded in the gap log; copying goes on from the log start. An
answer that skips offsets below the log start is believed only when repeated (:mod:`.offset_jumps`).

The fetches are ``read_uncommitted``, bounded by the last stable offset the response reports:
that returns every batch below it, aborted ones included, as a broker's own segment holds them.
(A ``read_committed`` fetch should too, but noida-db leaves aborted batches out of it, and Tansu
sends no aborted-transaction list.) The transaction index is built from the log itself: a
producer's first transactional batch after its previous marker opens a transaction, an ABORT
marker closes it as aborted. Storage failures that may pass (S3 down, throttled) back the
partition off exponentially; the open segment is kept, so nothing is fetched twice."""

from __future__ import annotations

import logging
import time
import uuid
from pathlib import Path

from protocol.control_records import ControlType, decode_control_record
from protocol.errors import ErrorCode
from protocol.record_batch import BatchHeader
from protocol.record_set import iter_batches
from protocol.records import decode_records
from tiering.broker_client import (
    EARLIEST,
    LEADER_MOVED,
    BrokerClient,
    BrokerClientError,
    LeaderMovedError,
    UnsupportedApiError,
)
from tiering.config import TopicTiering
from tiering.copy.copy_lag import upload_horizon
from tiering.copy.divergence import RemoteTierCutter, find_divergence
from tiering.copy.gap_log import GapLog
from tiering.copy.lineage import lineage_of
from tiering.copy.local_retention import local_retention_target
from tiering.copy.metrics import TieringMetrics
from tiering.copy.offset_jumps import OffsetJumps
from tiering.copy.remote_expiry import expired_segments
from tiering.copy.segment import SegmentBuilder
from tiering.metadata.manager import FencedError, RemoteLogMetadataManager
from tiering.metadata.state import InvalidStateTransitionError
from tiering.model import (
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    RemoteLogSegmentState,
    TopicIdPartition,
)
from tiering.quota import ByteRateQuota, QuotaWaitEnded
from tiering.storage.api import RemoteResourceNotFoundError, RemoteStorageError, RemoteStorageManager

log = logging.getLogger(__name__)

# Bytes fetched per pass and partition before yielding the worker to other partitions.
PASS_BYTE_BUDGET = 256 << 20
_DELETE_RECORDS_ATTEMPTS = 5  # DeleteRecords failures in a row (each a pass apart) that turn local retention off


def now_ms() -> int:
    return int(time.time() * 1000)


def delete_remote_segment(rlmm: RemoteLogMetadataManager, rsm: RemoteStorageManager,
                          metadata: RemoteLogSegmentMetadata, broker_id: int) -> None:
    """DELETE_SEGMENT_STARTED (unless it already is), delete the objects, DELETE_SEGMENT_FINISHED.
    Safe to repeat after a crash at any step: storage deletes are idempotent."""
    if metadata.state != RemoteLogSegmentState.DELETE_SEGMENT_STARTED:
        rlmm.update_remote_log_segment_metadata(RemoteLogSegmentMetadataUpdate(
            metadata.segment_id, now_ms(), RemoteLogSegmentState.DELETE_SEGMENT_STARTED, broker_id))
    rsm.delete_log_segment_data(metadata)
    rlmm.update_remote_log_segment_metadata(RemoteLogSegmentMetadataUpdate(
        metadata.segment_id, now_ms(), RemoteLogSegmentState.DELETE_SEGMENT_FINISHED, broker_id))


class PartitionCopier:
    """Copies one partition; :meth:`run_once` is called by the manager, never concurrently."""

    def __init__(self, tp: TopicIdPartition, leader: int, settings: TopicTiering, *, rlmm: RemoteLogMetadataManager,
                 rsm: RemoteStorageManager, spool_dir: Path, metrics: TieringMetrics, gaps: GapLog,
                 fetch_max_bytes: int, backoff_max_ms: int, broker_id: int = -1, leader_epoch: int = -1,
                 copy_quota: ByteRateQuota | None = None) -> None:
        self.tp = tp
        self.leader = leader
        # The leader's epoch as the metadata names it (-1: the brokers name none). Fetches carry
        # it, so a leader of another epoch refuses them instead of serving its own log.
        self.leader_epoch = leader_epoch
        # The leader epoch under which the remote tier was last found to be the cluster's history
        # (None: not yet in this process, when every remote epoch is checked once).
        self.lineage_epoch: int | None = None
        self.lineage_checked = False
        self.settings = settings
        self.rlmm = rlmm
        self.rsm = rsm
        self.spool_dir = spool_dir
        self.metrics = metrics
        self.gaps = gaps
        self.fetch_max_bytes = fetch_max_bytes
        self.backoff_max_ms = backoff_max_ms
        self.broker_id = broker_id
        self.open: SegmentBuilder | None = None
        self.next_offset: int | None = None  # next offset to fetch; None until the first pass
        # producer id -> first offset of its open transaction, as seen in the log
        self.open_transactions: dict[int, int] = {}
        # Whether the transactions that began below next_offset and are aborted above it are in
        # open_transactions (learnt from the brokers whenever next_offset jumps: start, data loss).
        self.transactions_seeded = False
        self.failures = 0
        self.backoff_until = 0.0
        self.log_start = -1  # the brokers' log start (Lx), as last seen
        self.last_stable = -1  # Ly, as last seen
        self.high_watermark = -1  # the brokers' log end, as last seen
        self.delete_records_unsupported = False
        self.delete_records_failures = 0  # in a row; a leader killed mid-request is one
        self.stopped = False
        # Set from another thread when this partition is being handed over: the pass ends at the
        # next fetch (a pass could otherwise fetch on for 256 MiB under steady production).
        self.interrupted = False
        # The topic's tiered epoch while it is ENABLED; None: expire only (KIP-950 retain).
        self.tiered_epoch: int | None = 0
        self.may_move_log_start = True  # False while the brokers hold remote data of the topic
        self.jumps = OffsetJumps(tp)
        self.copy_quota = copy_quota  # KIP-956: shared by every copier of the process

    # --- the pass ------------------------------------------------------------------------------

    def due(self) -> bool:
        return not self.stopped and time.monotonic() >= self.backoff_until

    def run_once(self, client: BrokerClient) -> None:
        try:
            self._clean_orphans()
            if self.tiered_epoch is None:
                self._expire_remote()
                self.failures = 0
                return
            if not self.lineage_checked or self.lineage_epoch != self.leader_epoch:
                self._check_lineage(client)
            if self.next_offset is None:
                self._start_position(client)
            if self.open is not None and self.open.size >= self.settings.segment_bytes:
                self._roll()  # a roll that failed last time
            self._copy(client)
            self._expire_remote()
            self._local_retention(client)
            self.failures = 0
        except QuotaWaitEnded:
            pass  # the open segment is copied on a later pass, once the quota allows
        except LeaderMovedError as exc:
            # Not a failure: the next round's metadata names the new leader (no backoff to grow).
            self.lineage_checked = False
            log.info("%s: %s; following the new leader after the next metadata refresh", self.tp, exc)
        except FencedError as exc:
            # Another instance owns this partition's metadata now (this one stalled past its
            # group session): it copies from here; this copier writes nothing more.
            self.stopped = True
            self.metrics.add(self.tp.topic, fenced=1)
            log.warning("%s: fenced by a newer owner, stopped copying it: %s", self.tp, exc)
        except (RemoteStorageError, BrokerClientError, OSError) as exc:
            self.failures += 1
            self.metrics.add(self.tp.topic, copy_errors=1, copy_requests=1)
            delay_ms = min(self.backoff_max_ms, 500 * 2 ** min(self.failures - 1, 16))
            self.backoff_until = time.monotonic() + delay_ms / 1000
            log.warning("tiering %s failed (attempt %d, retry in %.1fs): %s", self.tp, self.failures, delay_ms / 1000, exc)

    def close(self) -> None:
        self.stopped = True
        if self.open is not None:
            self.open.discard()
            self.open = None

    # --- positions -------------------------------------------------------------------------------

    def remote_end(self) -> int | None:
        """``Ry``: the highest copied offset, or None."""
        segments = self.rlmm.copied_segments(self.tp)
        return max(s.end_offset for s in segments) if segments else None

    def _start_position(self, client: BrokerClient) -> None:
        self.transactions_seeded = False
        ry = self.remote_end()
        if ry is not None:
            self.next_offset = ry + 1
            return
        error, offset = client.list_offset(self.leader, self.tp.topic, self.tp.partition, EARLIEST)
        if error != ErrorCode.NONE:
            raise BrokerClientError(f"ListOffsets EARLIEST for {self.tp}: {ErrorCode.from_code(error).name}")
        self.next_offset = offset  # nothing tiered yet: start at the brokers' log start

    def _epoch_history(self) -> list[tuple[int, int]]:
        return lineage_of(segment.segment_leader_epochs for segment in self.rlmm.copied_segments(self.tp))

    def follow(self, leader: int, leader_epoch: int) -> None:
        """The partition's leader as the latest metadata names it."""
        if (leader, leader_epoch) == (self.leader, self.leader_epoch):
            return
        log.info("%s: leader %d (epoch %d) -> %d (epoch %d)", self.tp, self.leader, self.leader_epoch, leader,
                 leader_epoch)
        self.metrics.add(self.tp.topic, leader_changes=1)
        self.leader, self.leader_epoch = leader, leader_epoch
        # The failures were the old leader's (refused while it died): the new one is tried now.
        self.failures = 0
        self.backoff_until = 0.0

    # --- lineage (KIP-405) ---------------------------------------------------------------------

    def _check_lineage(self, client: BrokerClient) -> None:
        """Before copying on under a leader epoch not seen yet: is the remote tier still the
        cluster's history? If the leader's log diverged (an unclean election), the remote tier is
        cut back where it did (:mod:`tiering.copy.divergence`). What the open segment holds came
        from the previous leader: it is fetched again from the new one."""
        if self.open is not None:
            self.open.discard()
            self.open = None
            self.next_offset = None
        segments = self.rlmm.copied_segments(self.tp)
        found = find_divergence(client, self.tp, self.leader, self.leader_epoch, segments,
                                every_epoch=not self.lineage_checked)
        if found is not None:
            cut, remote_epoch, leader_epoch = found
            cutter = RemoteTierCutter(self.tp, self.rlmm, self.rsm, self.spool_dir, self._upload, self._delete_segment)
            offsets = cutter.cut(cut, segments, remote_epoch, leader_epoch, self.settings.index_interval_bytes)
            self.metrics.add(self.tp.topic, divergences=1, diverged_offsets=offsets)
            self.next_offset = None
            self.open_transactions.clear()
            self.transactions_seeded = False
        self.lineage_checked = True
        self.lineage_epoch = self.leader_epoch

    # --- copying ---------------------------------------------------------------------------------

    def _copy(self, client: BrokerClient) -> None:
        assert self.next_offset is not None
        fetched = 0
        horizon = upload_horizon(self.settings, now_ms())  # KIP-1241; None: copy at once
        while fetched < PASS_BYTE_BUDGET and not self.stopped and not self.interrupted:
            if not self.transactions_seeded and not self._seed_transactions(client):
                break  # an open transaction begins at next_offset: nothing is stable to copy yet
            # No wait at the log end: 100 ms each made a round of 5,000 idle partitions take 53 s.
            answer = client.fetch(self.leader, self.tp.topic, self.tp.partition, self.next_offset,
                                  max_bytes=self.fetch_max_bytes, read_committed=False, max_wait_ms=1,
                                  current_leader_epoch=self.leader_epoch)
            if answer.error_code == ErrorCode.OFFSET_OUT_OF_RANGE:
                self._out_of_range(client)
                continue
            if answer.error_code in LEADER_MOVED:
                raise LeaderMovedError(f"fetch at {self.next_offset}: {ErrorCode.from_code(answer.error_code).name}")
            if answer.error_code != ErrorCode.NONE:
                raise BrokerClientError(f"fetch {self.tp} at {self.next_offset}: {ErrorCode.from_code(answer.error_code).name}")
            self.log_start = answer.log_start_offset
            self.high_watermark = answer.high_watermark
            self.last_stable = answer.last_stable_offset if answer.last_stable_offset >= 0 else answer.high_watermark
            progressed = False
            batches = [(h, b) for h, b in iter_batches(answer.records) if h.last_offset >= self.next_offset]
            if horizon is not None and batches:
                horizon.fetched(sum(len(b) for _, b in batches), self.next_offset, batches[-1][0].next_offset,
                                self.high_watermark)
            for header, batch in batches:
                if header.base_offset >= self.last_stable:
                    break  # past the last stable offset: not closed yet
                if header.base_offset > self.next_offset and not self.jumps.believe(self.next_offset, header.base_offset):
                    break  # skipped offsets: believed once the next pass is answered the same
                if horizon is not None and not horizon.admits(header, len(batch)):
                    break  # not old enough, nor far enough behind, to copy yet
                self._append(header, batch)
                fetched += len(batch)
                progressed = True
            if not progressed or self.next_offset >= self.last_stable or (horizon is not None and horizon.held):
                # Caught up with what the brokers had: under steady production each fetch brings
                # a little more, and a pass that fetched on until its byte budget held the round
                # (and a revoke waiting for it) for tens of seconds (issue 27).
                break
        caught_up = self.next_offset >= self.last_stable or (horizon is not None and horizon.held)
        if self.open is not None and not self.open.empty and caught_up:
            started = self.open.first_batch_timestamp
            if started >= 0 and now_ms() - started >= self.settings.segment_ms:
                self._roll()

    def _seed_transactions(self, client: BrokerClient) -> bool:
        """Learn the aborted transactions that began below next_offset and end above it (their
        marker then indexes them as this copier's own do); False while the brokers cannot say."""
        assert self.next_offset is not None
        aborted = client.aborted_transactions_at(self.leader, self.tp.topic, self.tp.partition, self.next_offset)
        if aborted is None:
            return False
        for producer_id, first in aborted:
            if first < self.next_offset:
                self.open_transactions.setdefault(producer_id, first)
        self.transactions_seeded = True
        return True

    def _append(self, header: BatchHeader, batch: memoryview) -> None:
        if self.open is not None and not self.open.empty and self._time_to_roll(header):
            self._roll()
        if self.open is None:
            self.open = SegmentBuilder(self.spool_dir, self.settings.index_interval_bytes, self._epoch_history())
        self.open.add(header, batch)
        if header.is_transactional:
            if not header.is_control:
                self.open_transactions.setdefault(header.producer_id, header.base_offset)
            elif header.producer_id in self.open_transactions:
                first = self.open_transactions.pop(header.producer_id)
                for record in decode_records(batch):
                    if decode_control_record(record)[1] == ControlType.ABORT:
                        self.open.add_aborted(header.producer_id, first, header.base_offset)
        self.next_offset = header.last_offset + 1
        if self.open.size >= self.settings.segment_bytes:
            self._roll()

    def _time_to_roll(self, header: BatchHeader) -> bool:
        """Kafka's time-based roll: the next batch is ``segment.ms`` newer than the open segment's
        first. Record time, not the clock, so a backlog of old records rolls as the brokers rolled
        it; without it a copier under steady production rolled by size alone (issue 27)."""
        assert self.open is not None
        first = self.open.first_batch_timestamp
        return first >= 0 and header.max_timestamp >= 0 and header.max_timestamp - first >= self.settings.segment_ms

    def _roll(self) -> None:
        """Copy the open segment and record it; on failure the segment stays open for a retry."""
        builder = self.open
        assert builder is not None and not builder.empty
        try:
            self._upload(builder)
        except FencedError:
            self.open = None
            raise
        self.open = None

    def _upload(self, builder: SegmentBuilder) -> None:
        """Record, copy and finish one segment; the builder is discarded unless the storage
        failed (then it is kept for a retry)."""
        if self.copy_quota is not None and not self.copy_quota.wait(lambda: self.stopped or self.interrupted):
            raise QuotaWaitEnded(f"{self.tp}: stopped while the copy quota held the next segment")
        segment_id = RemoteLogSegmentId(self.tp, uuid.uuid4())
        with builder.finish() as (data, facts):
            metadata = RemoteLogSegmentMetadata(
                segment_id=segment_id, start_offset=facts.start_offset, end_offset=facts.end_offset,
                max_timestamp_ms=facts.max_timestamp_ms, broker_id=self.broker_id, event_timestamp_ms=now_ms(),
                segment_size_bytes=facts.size_bytes, segment_leader_epochs=facts.leader_epochs,
                tx_index_empty=facts.tx_index_empty)
            self.rlmm.add_remote_log_segment_metadata(metadata)  # fenced here: nothing uploaded yet
            try:
                custom = self.rsm.copy_log_segment_data(metadata, data)
            except RemoteStorageError:
                self._abandon(metadata)
                raise
        if not self._epoch_current():
            # Disabled (or re-enabled) while this copy ran: the copy belongs to an older epoch.
            log.info("%s: tiering changed during the copy of %d..%d; dropping it", self.tp, facts.start_offset,
                     facts.end_offset)
            self._abandon(metadata)
            builder.discard()
            self.stopped = True
            return
        try:
            self.rlmm.update_remote_log_segment_metadata(RemoteLogSegmentMetadataUpdate(
                segment_id, now_ms(), RemoteLogSegmentState.COPY_SEGMENT_FINISHED, self.broker_id, custom))
        except (FencedError, RemoteResourceNotFoundError, InvalidStateTransitionError) as exc:
            # Fenced: every instance ignores this write. Not found, or no longer STARTED: a new
            # owner's orphan sweep took the record while this instance stalled. Either way
            # nothing will ever reference the upload: remove it (its keys are this attempt's
            # alone, so no live segment is touched), and stop, the partition is someone else's.
            self._remove_upload(metadata)
            builder.discard()
            if isinstance(exc, FencedError):
                raise
            raise FencedError(f"segment {segment_id.id} was taken over during its copy: {exc}") from exc
        self.metrics.add(self.tp.topic, copied_segments=1, copied_bytes=facts.size_bytes, copy_requests=1)
        if self.copy_quota is not None:
            self.copy_quota.record(facts.size_bytes)
        log.info("tiered %s offsets %d..%d (%d bytes)", self.tp, facts.start_offset, facts.end_offset, facts.size_bytes)
        builder.discard()

    def _epoch_current(self) -> bool:
        state = self.rlmm.topic_tiering_state(self.tp.topic)
        if state is None:
            return True  # a partition tiered without lifecycle records (tests driving a copier)
        return state.copying and state.topic_id == self.tp.topic_id and state.tiered_epoch == self.tiered_epoch

    def _abandon(self, metadata: RemoteLogSegmentMetadata) -> None:
        """A failed copy: try to remove what it left; if that fails too, the orphan sweep will."""
        try:
            self._delete_segment(metadata)
        except RemoteStorageError as exc:
            log.warning("could not clean up failed copy of %s segment %s yet: %s", self.tp, metadata.segment_id.id, exc)
        except FencedError:
            self._remove_upload(metadata)
            raise

    def _remove_upload(self, metadata: RemoteLogSegmentMetadata) -> None:
        """Delete a fenced copy's objects, writing no metadata (a fenced writer's is ignored)."""
        try:
            self.rsm.delete_log_segment_data(metadata)
            log.info("%s: removed fenced copy %d..%d (segment %s)", self.tp, metadata.start_offset,
                     metadata.end_offset, metadata.segment_id.id)
        except RemoteStorageError as exc:
            log.error("%s: could not remove fenced copy %s: %s; its objects stay orphaned", self.tp,
                      metadata.segment_id.id, exc)

    def _out_of_range(self, client: BrokerClient) -> None:
        error, log_start = client.list_offset(self.leader, self.tp.topic, self.tp.partition, EARLIEST)
        if error != ErrorCode.NONE:
            raise BrokerClientError(f"ListOffsets EARLIEST for {self.tp}: {ErrorCode.from_code(error).name}")
        assert self.next_offset is not None
        if log_start <= self.next_offset:
            raise BrokerClientError(f"{self.tp}: offset {self.next_offset} out of range but log start is {log_start}")
        first, last = self.next_offset, log_start - 1
        log.error("DATA LOSS: %s offsets %d..%d were deleted by the brokers before they were tiered", self.tp, first, last)
        self.metrics.add(self.tp.topic, data_loss_gaps=1, data_loss_offsets=last - first + 1)
        self.gaps.record(self.tp, first, last)
        # In the metadata store too, so that every instance's describe shows it.
        self.rlmm.put_remote_log_data_loss(self.tp, first, last, now_ms())
        if self.open is not None and not self.open.empty:
            self._roll()  # what was fetched before the gap is still good
        self.next_offset = log_start
        self.open_transactions.clear()
        self.transactions_seeded = False

    def _delete_segment(self, metadata: RemoteLogSegmentMetadata) -> None:
        delete_remote_segment(self.rlmm, self.rsm, metadata, self.broker_id)

    def _clean_orphans(self) -> None:
        for segment in self.rlmm.list_remote_log_segments(self.tp):
            if segment.state in (RemoteLogSegmentState.COPY_SEGMENT_STARTED, RemoteLogSegmentState.DELETE_SEGMENT_STARTED):
                log.info("cleaning up %s segment %s left in %s", self.tp, segment.segment_id.id, segment.state.name)
                self._delete_segment(segment)
                self.metrics.add(orphans_cleaned=1)

    def _expire_remote(self) -> None:
        if self.tiered_epoch is None:  # KIP-950 retain: the topic-wide retention, from Rx
            limit_ms, limit_bytes = self.settings.retention_ms, self.settings.retention_bytes
        else:
            limit_ms, limit_bytes = self.settings.remote_expiry_ms, self.settings.remote_expiry_bytes
        expired = expired_segments(self.rlmm.copied_segments(self.tp), self.rlmm.remote_log_start_offset(self.tp),
                                   limit_ms, limit_bytes, self.open.size if self.open is not None else 0,
                                   self.open is None and self.tiered_epoch is not None, now_ms())
        for segment, why in expired:
            self._delete_segment(segment)
            self.metrics.add(self.tp.topic, deleted_segments=1, deleted_bytes=segment.segment_size_bytes)
            log.info("deleted %s remote segment %d..%d: %s", self.tp, segment.start_offset, segment.end_offset, why)

    def _local_retention_off(self, why: str) -> None:
        self.delete_records_unsupported = True
        self.metrics.add(self.tp.topic, local_retention_off=1)
        log.error("brokers cannot move %s's log start: %s; local retention is off for it until the proxy restarts",
                  self.tp, why)

    def _local_retention(self, client: BrokerClient) -> None:
        s = self.settings
        if not s.proxy_manages_local_retention or self.delete_records_unsupported or not self.may_move_log_start:
            return
        target = local_retention_target(
            self.rlmm.copied_segments(self.tp), self.log_start, self.high_watermark,
            self.open.size if self.open is not None else 0, s.local_retention_ms, s.local_retention_bytes, now_ms())
        if target <= self.log_start:
            return
        try:
            error, low_watermark = client.delete_records(self.leader, self.tp.topic, self.tp.partition, target)
        except UnsupportedApiError as exc:
            self._local_retention_off(f"the brokers do not offer DeleteRecords ({exc})")
            return
        except BrokerClientError as exc:
            # A leader killed mid-request looks like this too: the next pass asks the leader the
            # metadata names then. Only a broker that fails it every time (Tansu advertises
            # DeleteRecords and drops the connection on it) has local retention turned off.
            self.delete_records_failures += 1
            self.metrics.add(self.tp.topic, delete_records_failures=1)
            if self.delete_records_failures >= _DELETE_RECORDS_ATTEMPTS:
                self._local_retention_off(f"DeleteRecords failed {self.delete_records_failures} times in a row, "
                                          f"the last: {exc}")
            else:
                log.warning("DeleteRecords %s to %d failed (%s); tried again on the next pass (%d of %d before local "
                            "retention is turned off)", self.tp, target, exc, self.delete_records_failures,
                            _DELETE_RECORDS_ATTEMPTS)
            return
        self.delete_records_failures = 0
        if error != ErrorCode.NONE:
            log.warning("DeleteRecords %s to %d: %s", self.tp, target, ErrorCode.from_code(error).name)
            return
        log.info("local retention moved %s log start %d -> %d", self.tp, self.log_start, low_watermark)
        self.log_start = low_watermark
        self.metrics.add(self.tp.topic, local_log_start_moves=1)
