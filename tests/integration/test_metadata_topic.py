"""The topic-based metadata store against real brokers: writes, reads by another instance, restart
from snapshots, and records landing on the partition Kafka's partitioner picks."""

from __future__ import annotations

import time
import uuid

import pytest
from kafka import KafkaConsumer, TopicPartition

from tests.tiering_checks import wait_until
from tiering.metadata.codec import deserialize, metadata_partition
from tiering.metadata.topic_store import TopicMetadataStore
from tiering.model import (
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    RemoteLogSegmentState,
    TopicIdPartition,
)

PARTITIONS = 5
S = RemoteLogSegmentState


def segment(tp: TopicIdPartition, start: int) -> RemoteLogSegmentMetadata:
    return RemoteLogSegmentMetadata(RemoteLogSegmentId(tp, uuid.uuid4()), start, start + 9, 1, 1, 1, 100, ((0, start),))


def copy(store: TopicMetadataStore, m: RemoteLogSegmentMetadata) -> None:
    store.add_remote_log_segment_metadata(m)
    store.update_remote_log_segment_metadata(
        RemoteLogSegmentMetadataUpdate(m.segment_id, 2, S.COPY_SEGMENT_FINISHED, 1, b"meta"))


@pytest.fixture
def names(unique_name, tmp_path):
    return f"{unique_name}-rlmm", tmp_path


def open_store(upstream, topic: str, snapshots) -> TopicMetadataStore:
    return TopicMetadataStore(upstream.bootstrap, snapshots, topic=topic, partitions=PARTITIONS, ready_timeout_s=30)


def test_write_read_restart_and_partitioning(upstream, names):
    topic, tmp = names
    tps = [TopicIdPartition(uuid.uuid4(), "orders", p) for p in range(4)]
    store = open_store(upstream, topic, tmp / "a")
    try:
        written = [segment(tp, 10 * i) for tp in tps for i in range(3)]
        for m in written:
            copy(store, m)
        with pytest.raises(ValueError):  # the state machine holds here too, and nothing is written
            store.update_remote_log_segment_metadata(
                RemoteLogSegmentMetadataUpdate(written[0].segment_id, 3, S.COPY_SEGMENT_FINISHED, 1))
        assert [s.start_offset for s in store.copied_segments(tps[0])] == [0, 10, 20]
        assert store.remote_log_segment_metadata(tps[1], 0, 15).segment_id == written[4].segment_id
        # A second instance sees the same state.
        other = open_store(upstream, topic, tmp / "b")
        try:
            assert {tp: other.copied_segments(tp) for tp in tps} == {tp: store.copied_segments(tp) for tp in tps}
            assert other.records_replayed == 2 * len(written)
        finally:
            other.close()
        expected = {tp: store.copied_segments(tp) for tp in tps}
    finally:
        store.close()

    reopened = open_store(upstream, topic, tmp / "a")  # from its snapshots: nothing replayed
    try:
        assert {tp: reopened.copied_segments(tp) for tp in tps} == expected
        assert reopened.records_replayed == 0
        assert all(reopened.is_ready(tp) for tp in tps)
    finally:
        reopened.close()
    fresh = open_store(upstream, topic, tmp / "c")  # no snapshots: the whole topic
    try:
        assert {tp: fresh.copied_segments(tp) for tp in tps} == expected
        assert fresh.records_replayed == 2 * len(written)
    finally:
        fresh.close()

    consumer = KafkaConsumer(bootstrap_servers=upstream.bootstrap, group_id=None, enable_auto_commit=False,
                             auto_offset_reset="earliest")
    try:
        consumer.assign([TopicPartition(topic, p) for p in range(PARTITIONS)])
        seen = 0
        deadline = time.monotonic() + 20
        while seen < 2 * len(written) and time.monotonic() < deadline:
            for tp, messages in consumer.poll(timeout_ms=500).items():
                for message in messages:
                    assert message.key is None
                    record = deserialize(message.value)
                    owner = record.topic_id_partition if hasattr(record, "topic_id_partition") \
                        else record.segment_id.topic_id_partition
                    assert metadata_partition(owner, PARTITIONS) == tp.partition
                    seen += 1
        assert seen == 2 * len(written)
    finally:
        consumer.close()


def test_the_copier_on_the_topic_store(upstream, names):
    """The remote log manager with the topic-based store instead of the journal."""
    from tests.tiering_checks import (
        check_contiguous,
        create_topic,
        mark_tiered,
        partitions_of,
        produce_mixed,
        remote_end,
    )
    from tiering.broker_client import BrokerClient
    from tiering.config import TieringConfig
    from tiering.copy.manager import RemoteLogManager
    from tiering.storage.local_folder import LocalFolderStorage

    topic, tmp = names
    user_topic = f"{topic}-data"
    create_topic(upstream.bootstrap, user_topic, partitions=2, **{"segment.bytes": str(128 * 1024), "segment.ms": "1500"})
    produce_mixed(upstream.bootstrap, user_topic, 20_000, transactions=3, transaction_size=300)
    client = BrokerClient(upstream.bootstrap)
    tps = partitions_of(client, user_topic)
    storage = LocalFolderStorage(tmp / "remote")
    store = open_store(upstream, topic, tmp / "snapshots")
    mark_tiered(store, upstream.bootstrap, user_topic)  # as an admin client through the proxy would
    manager = RemoteLogManager(upstream.bootstrap, storage, store, TieringConfig(task_interval_ms=200), tmp / "data")
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            manager.run_once()
            leader = client.metadata([user_topic])[user_topic].partitions[0].leader
            if all(remote_end(store, tp) + 1 >= client.fetch(leader, user_topic, tp.partition, 0,
                                                              max_bytes=1).last_stable_offset for tp in tps):
                break
            time.sleep(0.3)
        for tp in tps:
            check_contiguous(store, tp)
    finally:
        manager.stop()
        store.close()


def test_topic_tiering_state_and_log_start_through_the_topic(upstream, names):
    """The proxy's own records (a topic's tiering configs and KIP-950 state, a partition's log
    start after DeleteRecords) travel through the metadata topic like KIP-405's: another
    instance sees them, and a restart from snapshots keeps them."""
    from tiering.model import DisablePolicy, TieringState, TopicTieringState

    topic, tmp = names
    tp = TopicIdPartition(uuid.uuid4(), "payments", 3)
    state = TopicTieringState("payments", tp.topic_id, 2, TieringState.DISABLING, DisablePolicy.DELETE,
                              (("remote.log.disable.policy", "delete"), ("remote.storage.enable", "false")))
    store = open_store(upstream, topic, tmp / "a")
    try:
        copy(store, segment(tp, 0))
        store.put_topic_tiering_state(state)
        store.put_remote_log_start_offset(tp, 5, 1)
        other = open_store(upstream, topic, tmp / "b")
        try:
            assert other.topic_tiering_state("payments") == state
            assert other.remote_log_start_offset(tp) == 5
            assert other.readable_partitions() == []  # disabled with the delete policy
        finally:
            other.close()
        store.write_snapshots()
    finally:
        store.close()
    reopened = open_store(upstream, topic, tmp / "a")
    try:
        assert reopened.records_replayed == 0
        assert reopened.topic_tiering_state("payments") == state
        assert reopened.remote_log_start_offset(tp) == 5
    finally:
        reopened.close()


def test_a_newer_owner_fences_the_old_ones_writes(upstream, names):
    """Issue 17's fencing at the store: owner A claims a metadata partition and starts a segment;
    B claims it after A stalled; A's next write is ignored by every instance (A gets FencedError),
    also by one that replays the log from scratch or from a snapshot, while B's writes stand."""
    from tiering.metadata.manager import FencedError

    topic, tmp = names
    tp = TopicIdPartition(uuid.uuid4(), "fenced", 0)
    partition = metadata_partition(tp, PARTITIONS)
    a = open_store(upstream, topic, tmp / "a")
    b = open_store(upstream, topic, tmp / "b")
    try:
        a.claim({partition}, "a")
        started = segment(tp, 0)
        a.add_remote_log_segment_metadata(started)  # before B's claim: stands
        b.claim({partition}, "b")
        assert b.owner_epoch(partition) == 2
        with pytest.raises(FencedError):
            a.update_remote_log_segment_metadata(
                RemoteLogSegmentMetadataUpdate(started.segment_id, 2, S.COPY_SEGMENT_FINISHED, 1, None))
        with pytest.raises(FencedError):  # and every later write of A's to that partition
            a.add_remote_log_segment_metadata(segment(tp, 10))
        copy(b, segment(tp, 10))  # the new owner's writes stand
        b.update_remote_log_segment_metadata(
            RemoteLogSegmentMetadataUpdate(started.segment_id, 3, S.DELETE_SEGMENT_STARTED, 1, None))
        b.write_snapshots()
        want = [(0, S.DELETE_SEGMENT_STARTED), (10, S.COPY_SEGMENT_FINISHED)]
        for store in (a, b):  # (A reads B's last writes in its own time)
            assert wait_until(lambda store=store: [(s.start_offset, s.state) for s in
                                                   store.list_remote_log_segments(tp)] == want, 10)
    finally:
        a.close()
        b.close()
    # A fresh replay and a restart from B's snapshot ignore A's fenced writes alike, and keep the
    # epoch: a write of A's epoch after the snapshot is still ignored.
    for snapshots in (tmp / "fresh", tmp / "b"):
        store = open_store(upstream, topic, snapshots)
        try:
            assert [(s.start_offset, s.state) for s in store.list_remote_log_segments(tp)] == [
                (0, S.DELETE_SEGMENT_STARTED), (10, S.COPY_SEGMENT_FINISHED)]
            assert store.owner_epoch(partition) == 2 and store.records_fenced == (2 if snapshots.name == "fresh" else 0)
        finally:
            store.close()
