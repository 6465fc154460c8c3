"""Local retention on a real noida-db: the copier moves the broker's log start exactly where Kafka's
rule puts it (local.retention.bytes keeps at least the newest N bytes; local.retention.ms drops the
segments whose newest record is older), never to the log end. Its own broker: the session's shared
proxies would trim these topics too."""

from __future__ import annotations

import time
from pathlib import Path

from tests.delivery import CheckedProducer
from tests.integration.test_tiering import FAST, direct_log_end, tier_until_caught_up
from tests.tiering_checks import check_contiguous, create_tiered_topic, partitions_of
from tiering.broker_client import EARLIEST, BrokerClient
from tiering.copy.manager import RemoteLogManager
from tiering.metadata.journal_store import FileMetadataStore
from tiering.model import RemoteLogSegmentMetadata
from tiering.storage.local_folder import LocalFolderStorage

SEGMENT_BYTES = 16 * 1024


def produce(bootstrap: str, topic: str, count: int) -> None:
    """``count`` messages of ~200 random bytes in small batches, so 16 KiB segments roll often
    (a copier never splits a batch)."""
    import random

    producer = CheckedProducer({"bootstrap.servers": bootstrap, "linger.ms": 1, "batch.size": 2048})
    for i in range(count):
        producer.produce(topic, key=f"k{i}".encode(), value=random.randbytes(200), partition=0)
    producer.deliver_all(30)


def manager_for(bootstrap: str, topic: str, rlmm: FileMetadataStore, tmp_path: Path) -> RemoteLogManager:
    # Only this test's topic: the module's broker still holds the other tests' tiered topics.
    return RemoteLogManager(bootstrap, LocalFolderStorage(tmp_path / "remote"), rlmm, FAST, tmp_path / "data",
                            owns=lambda tp: tp.topic == topic)


def broker_log_start(client: BrokerClient, topic: str) -> int:
    leader = client.metadata([topic])[topic].partitions[0].leader
    error, offset = client.list_offset(leader, topic, 0, EARLIEST)
    assert error == 0, error
    return offset


def kept_bytes(segments: list[RemoteLogSegmentMetadata], log_start: int) -> int:
    return sum(s.segment_size_bytes for s in segments if s.end_offset >= log_start)


def describe(segments: list[RemoteLogSegmentMetadata]) -> list[tuple[int, int, int, int]]:
    return [(s.start_offset, s.end_offset, s.segment_size_bytes, s.max_timestamp_ms) for s in segments]


def test_local_retention_bytes_keeps_at_least_the_newest_n_bytes(own_noida, tmp_path, unique_name):
    limit = 40_000  # 2.4 segments: neither a segment boundary nor a multiple of one
    create_tiered_topic(own_noida.bootstrap, unique_name, partitions=1,
                        **{"segment.bytes": str(SEGMENT_BYTES), "local.retention.bytes": str(limit)})
    produce(own_noida.bootstrap, unique_name, 1500)
    client = BrokerClient(own_noida.bootstrap)
    (tp,) = partitions_of(client, unique_name)
    with FileMetadataStore(tmp_path / "metadata") as rlmm:
        manager = manager_for(own_noida.bootstrap, unique_name, rlmm, tmp_path)
        try:
            tier_until_caught_up(manager, client, unique_name, timeout=20)
            for _ in range(3):
                manager.run_once()
        finally:
            manager.stop()
        segments = check_contiguous(rlmm, tp)  # remote keeps everything: no total retention here
        log_end = direct_log_end(client, tp)
        log_start = broker_log_start(client, unique_name)
    assert len(segments) >= 8 and segments[-1].end_offset + 1 == log_end, describe(segments)
    # Independently: the shortest run of newest segments holding >= limit bytes, and never less
    # than the segment reaching the log end.
    first, held = len(segments), 0
    while first > 0 and held < limit:
        first -= 1
        held += segments[first].segment_size_bytes
    first = min(first, len(segments) - 1)
    expected = segments[first].start_offset
    assert expected > 0
    assert log_start == expected, (log_start, limit, describe(segments))
    kept = kept_bytes(segments, log_start)
    assert kept >= limit
    assert kept - segments[first].segment_size_bytes < limit  # one segment more would go below it
    assert manager.metrics.local_log_start_moves >= 1


def test_local_retention_ms_drops_segments_by_their_newest_record(own_noida, tmp_path, unique_name):
    retention_ms = 6000
    create_tiered_topic(own_noida.bootstrap, unique_name, partitions=1,
                        **{"segment.bytes": str(SEGMENT_BYTES), "local.retention.ms": str(retention_ms)})
    client = BrokerClient(own_noida.bootstrap)
    (tp,) = partitions_of(client, unique_name)
    with FileMetadataStore(tmp_path / "metadata") as rlmm:
        manager = manager_for(own_noida.bootstrap, unique_name, rlmm, tmp_path)
        try:
            produce(own_noida.bootstrap, unique_name, 400)
            tier_until_caught_up(manager, client, unique_name, timeout=20)
            first_batch = check_contiguous(rlmm, tp)
            second_start = direct_log_end(client, tp)
            assert len(first_batch) >= 3 and first_batch[-1].end_offset + 1 == second_start
            newest = max(s.max_timestamp_ms for s in first_batch)
            time.sleep(max(0.0, (newest + retention_ms + 300) / 1000 - time.time()))
            for _ in range(2):
                manager.run_once()
            # All of it is old, but nothing newer than the last segment is on the broker: that stays.
            assert broker_log_start(client, unique_name) == first_batch[-1].start_offset
            produce(own_noida.bootstrap, unique_name, 300)
            tier_until_caught_up(manager, client, unique_name, timeout=20)
            before = time.time() * 1000
            for _ in range(3):
                manager.run_once()
            after = time.time() * 1000
        finally:
            manager.stop()
        segments = check_contiguous(rlmm, tp)
        log_start = broker_log_start(client, unique_name)
    assert len(segments) > len(first_batch), describe(segments)

    def first_within(now: float) -> int:
        fresh = [s for s in segments[:-1] if s.max_timestamp_ms >= now - retention_ms]
        return (fresh or segments[-1:])[0].start_offset

    # The last pass ran between `before` and `after`; no segment crossed the cutoff meanwhile.
    assert first_within(before) == first_within(after), describe(segments)
    assert log_start == first_within(after) == second_start, (log_start, describe(segments))


def test_a_broker_lost_during_delete_records_does_not_turn_local_retention_off(tmp_path, unique_name, caplog):
    """Issue 27: any connection error on a DeleteRecords (a leader killed mid-request) turned local
    retention off for the partition for the rest of the process, so the brokers' disks filled, and
    the log blamed a possible SASL requirement. Here the broker is stopped under the copier's open
    connection while it sends one; once the broker is back, the log start moves on."""
    from dataclasses import replace

    from proxy.embedded_broker import start_broker

    broker = start_broker("noida", tmp_path / "broker")
    client: BrokerClient | None = None
    try:
        create_tiered_topic(broker.bootstrap, unique_name, partitions=1,
                            **{"segment.bytes": str(SEGMENT_BYTES), "local.retention.bytes": "40000"})
        produce(broker.bootstrap, unique_name, 1500)
        client = BrokerClient(broker.bootstrap)
        (tp,) = partitions_of(client, unique_name)
        with FileMetadataStore(tmp_path / "metadata") as rlmm:
            manager = manager_for(broker.bootstrap, unique_name, rlmm, tmp_path)
            try:
                tier_until_caught_up(manager, client, unique_name, timeout=20)
                manager.run_once()
                before = broker_log_start(client, unique_name)
                assert before > 0
                copier = manager.copiers[tp]
                # A smaller local retention, so that there is something to delete: asked of a broker
                # that is gone (the connection fails as a killed leader's does).
                copier.settings = replace(copier.settings, local_retention_bytes=SEGMENT_BYTES)
                broker.stop()
                with caplog.at_level("WARNING", logger="tiering.copy.copier"):
                    copier._local_retention(client)
                assert not copier.delete_records_unsupported
                assert manager.metrics.delete_records_failures == 1
                assert "DeleteRecords" in caplog.text and "tried again on the next pass" in caplog.text
                assert "SASL" not in caplog.text, caplog.text
                broker = start_broker("noida", tmp_path / "broker", port=broker.port)
                client.close()
                client = BrokerClient(broker.bootstrap)
                copier._local_retention(client)
                after = broker_log_start(client, unique_name)
            finally:
                manager.stop()
        assert after > before, (before, after)
        assert manager.metrics.local_retention_off == 0
    finally:
        if client is not None:
            client.close()
        broker.stop()
