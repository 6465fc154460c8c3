"""The copier rolls its segments by ``segment.ms`` as Kafka rolls a log: when the next batch is
``segment.ms`` newer (record time) than the open segment's first, also in the middle of a backlog
or under steady production. It rolled by time only once it had caught up, so under production
segments rolled by size alone (issue 27). Its own noida-db: the session's proxies would tier it too."""

from __future__ import annotations

import time

from confluent_kafka import Producer

from tests.delivery import CheckedProducer
from tests.integration.test_tiering import FAST, tier_until_caught_up
from tests.tiering_checks import check_contiguous, create_tiered_topic, partitions_of
from tiering.broker_client import BrokerClient
from tiering.copy.manager import RemoteLogManager
from tiering.metadata.journal_store import FileMetadataStore
from tiering.storage.local_folder import LocalFolderStorage

SEGMENT_MS = 1000
BURSTS = 4
PER_BURST = 300


def test_segments_roll_by_record_time_in_the_middle_of_a_backlog(own_noida, tmp_path, unique_name):
    create_tiered_topic(own_noida.bootstrap, unique_name, partitions=1,
                        **{"segment.bytes": str(64 << 20), "segment.ms": str(SEGMENT_MS)})
    producer = CheckedProducer({"bootstrap.servers": own_noida.bootstrap, "linger.ms": 5})
    # Bursts 2 * segment.ms apart in record time, an hour ago: a backlog the copier meets whole.
    start_ms = int(time.time() * 1000) - 3_600_000
    for burst in range(BURSTS):
        for i in range(PER_BURST):
            producer.produce(unique_name, value=b"v" * 100, partition=0,
                             timestamp=start_ms + burst * 2 * SEGMENT_MS + i)
        producer.deliver_all(30)
    client = BrokerClient(own_noida.bootstrap)
    try:
        (tp,) = partitions_of(client, unique_name)
        with FileMetadataStore(tmp_path / "metadata") as rlmm:
            manager = RemoteLogManager(own_noida.bootstrap, LocalFolderStorage(tmp_path / "remote"), rlmm, FAST,
                                       tmp_path / "data", owns=lambda t: t.topic == unique_name)
            try:
                tier_until_caught_up(manager, client, unique_name, timeout=30)
            finally:
                manager.stop()
            segments = check_contiguous(rlmm, tp)
    finally:
        client.close()
    # One segment per burst, each starting at its burst's first offset.
    assert [s.start_offset for s in segments] == [burst * PER_BURST for burst in range(BURSTS)], \
        [(s.start_offset, s.end_offset, s.max_timestamp_ms - start_ms) for s in segments]


def test_a_pass_ends_once_caught_up_under_steady_production(kafka, tmp_path, unique_name):
    """A copier pass under steady production fetched on, a little per long-polled Fetch, until its
    256 MiB budget: at a few MB/s a pass (and the round, and a revoke waiting for the round) took
    tens of seconds (issue 27, 39 s measured). It ends once it has what the brokers had."""
    import threading

    from tests.tiering_checks import create_topic, mark_tiered

    create_topic(kafka.bootstrap, unique_name, 1)
    stop = threading.Event()

    def produce_steadily() -> None:
        producer = Producer({"bootstrap.servers": kafka.bootstrap, "linger.ms": 1})
        deadline = time.monotonic() + 30
        while not stop.is_set() and time.monotonic() < deadline:  # ~1 MB/s: 10 records of 1 KiB every 10 ms
            for _ in range(10):
                producer.produce(unique_name, value=b"v" * 1024, partition=0)
            producer.poll(0)
            stop.wait(0.01)
        producer.flush(30)

    writer = threading.Thread(target=produce_steadily)
    writer.start()
    client = BrokerClient(kafka.bootstrap)
    try:
        with FileMetadataStore(tmp_path / "metadata") as rlmm:
            mark_tiered(rlmm, kafka.bootstrap, unique_name, **{"segment.bytes": str(256 << 10)})
            manager = RemoteLogManager(kafka.bootstrap, LocalFolderStorage(tmp_path / "remote"), rlmm, FAST,
                                       tmp_path / "data", owns=lambda t: t.topic == unique_name)
            try:
                time.sleep(2)  # a backlog to copy first
                started = time.monotonic()
                manager.run_once()
                took = time.monotonic() - started
                still_producing = writer.is_alive() and not stop.is_set()
            finally:
                manager.stop()
            (tp,) = partitions_of(client, unique_name)
            copied = check_contiguous(rlmm, tp)
    finally:
        stop.set()
        writer.join(60)
        client.close()
    assert still_producing
    assert copied and copied[-1].end_offset > 0
    # The old pass ran until the producer stopped (after 30 s here); this one ends when caught up.
    assert took < 10, f"a pass took {took:.1f} s under steady production"
