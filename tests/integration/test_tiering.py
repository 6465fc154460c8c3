"""The copier against real brokers and real stores: everything below the last stable offset ends up
in remote segments that equal the brokers' log byte for byte, with correct indexes; restarts,
kill -9 and an S3 outage lose nothing and leave nothing behind; local retention and data loss."""

from __future__ import annotations

import os
import signal
import time
import uuid
from pathlib import Path

import pytest

from tests.integration.s3_server import DUMMY_CREDENTIALS, REGION, new_bucket
from tests.proxy_process import start_proxy
from tests.tiering_checks import (
    check_contiguous,
    check_segment,
    create_tiered_topic,
    create_topic,
    direct_log,
    mark_tiered,
    partitions_of,
    produce_mixed,
    remote_end,
    wait_until,
)
from tiering.broker_client import EARLIEST, BrokerClient
from tiering.config import TieringConfig
from tiering.copy.manager import RemoteLogManager
from tiering.metadata.journal_store import JOURNAL_NAME, FileMetadataStore, read_journal
from tiering.metadata.manifests import read_bucket
from tiering.model import LogSegmentData, RemoteLogSegmentId, RemoteLogSegmentMetadata, RemoteLogSegmentState
from tiering.storage.api import RemoteStorageManager
from tiering.storage.local_folder import LocalFolderStorage
from tiering.storage.s3 import S3Storage
from tiering.storage.segment_location import is_sealed

FAST = TieringConfig(task_interval_ms=200, copy_backoff_max_ms=1000)


def s3_storage(endpoint: str, bucket: str, **kwargs: object) -> S3Storage:
    return S3Storage(bucket, "tiered", endpoint_url=endpoint, region=REGION,
                     access_key_id=DUMMY_CREDENTIALS["aws_access_key_id"],
                     secret_access_key=DUMMY_CREDENTIALS["aws_secret_access_key"], **kwargs)


@pytest.fixture(params=["local", "s3"])
def storage(request, tmp_path, s3_endpoint) -> RemoteStorageManager:
    if request.param == "local":
        store: RemoteStorageManager = LocalFolderStorage(tmp_path / "remote")
    else:
        store = s3_storage(s3_endpoint, new_bucket(s3_endpoint), max_attempts=2)
    yield store
    store.close()


def tier_until_caught_up(manager: RemoteLogManager, client: BrokerClient, topic: str, timeout: float = 120) -> None:
    tps = partitions_of(client, topic)

    def caught_up() -> bool:
        return all(remote_end(manager.rlmm, tp) + 1 >= direct_log_end(client, tp) for tp in tps)

    assert wait_until(caught_up, timeout, step=manager.run_once), manager.metrics.snapshot()


def direct_log_end(client: BrokerClient, tp) -> int:
    leader = client.metadata([tp.topic])[tp.topic].partitions[tp.partition].leader
    return client.fetch(leader, tp.topic, tp.partition, 0, max_bytes=1).last_stable_offset


def test_copier_tiers_everything_below_the_last_stable_offset(upstream, storage, tmp_path, unique_name):
    create_topic(upstream.bootstrap, unique_name, **{"segment.bytes": str(128 * 1024), "segment.ms": "1500"})
    workload = produce_mixed(upstream.bootstrap, unique_name, 200_000)
    client = BrokerClient(upstream.bootstrap)
    with FileMetadataStore(tmp_path / "metadata") as rlmm:
        mark_tiered(rlmm, upstream.bootstrap, unique_name)
        manager = RemoteLogManager(upstream.bootstrap, storage, rlmm, FAST, tmp_path / "data")
        try:
            tier_until_caught_up(manager, client, unique_name)
        finally:
            manager.stop()
        aborted_seen = 0
        for tp in partitions_of(client, unique_name):
            segments = check_contiguous(rlmm, tp)
            remote = b"".join(check_segment(storage, s) for s in segments)
            direct, last_stable = direct_log(client, tp)
            assert segments[-1].end_offset + 1 == last_stable
            assert remote == direct  # byte for byte, CRCs and all
            assert len(segments) >= 5  # rolled by segment.bytes, not one blob
            aborted_seen += sum(not s.tx_index_empty for s in segments)
        assert manager.metrics.data_loss_gaps == 0 and manager.metrics.copy_errors == 0
    # Each aborted transaction wrote to every partition, and each segment that holds an abort
    # marker has a transaction index (checked entry by entry in check_segment).
    assert workload.aborted_transactions == 3 and aborted_seen >= 3


def test_restart_resumes_after_the_highest_tiered_offset(noida, tmp_path, unique_name):
    create_tiered_topic(noida.bootstrap, unique_name, partitions=1)
    produce_mixed(noida.bootstrap, unique_name, 20_000, transactions=2, transaction_size=500)
    client = BrokerClient(noida.bootstrap)
    storage = LocalFolderStorage(tmp_path / "remote")
    with FileMetadataStore(tmp_path / "metadata") as rlmm:
        manager = RemoteLogManager(noida.bootstrap, storage, rlmm, FAST, tmp_path / "data")
        tier_until_caught_up(manager, client, unique_name)
        manager.stop()
        (tp,) = partitions_of(client, unique_name)
        first_end = remote_end(rlmm, tp)
    produce_mixed(noida.bootstrap, unique_name, 20_000, transactions=2, transaction_size=500)
    with FileMetadataStore(tmp_path / "metadata") as rlmm:
        assert remote_end(rlmm, tp) == first_end
        manager = RemoteLogManager(noida.bootstrap, storage, rlmm, FAST, tmp_path / "data")
        tier_until_caught_up(manager, client, unique_name)
        manager.stop()
        segments = check_contiguous(rlmm, tp)
        assert any(s.start_offset == first_end + 1 for s in segments)
        assert b"".join(storage.fetch_log_segment(s, 0) for s in segments) == direct_log(client, tp)[0]


def _plant_orphan(data_dir: Path, tp, start_offset: int) -> RemoteLogSegmentMetadata:
    """What a copy killed between COPY_SEGMENT_STARTED and FINISHED leaves: metadata and objects."""
    orphan = RemoteLogSegmentMetadata(RemoteLogSegmentId(tp, uuid.uuid4()), start_offset, start_offset + 9,
                                      int(time.time() * 1000), -1, int(time.time() * 1000), 100, ((0, start_offset),))
    with FileMetadataStore(data_dir / "metadata") as rlmm:
        rlmm.add_remote_log_segment_metadata(orphan)
    LocalFolderStorage(data_dir / "remote").copy_log_segment_data(
        orphan, LogSegmentData(b"\0" * 100, b"", b"", None, b"0\n1\n0 %d\n" % start_offset))
    return orphan


def remote_files(data_dir: Path, topic: str) -> set[str]:
    """Segment files under the topic's directories (the proxy also tiers other tests' topics; the
    manifests that describe them are checked apart)."""
    return {p.name for d in (data_dir / "remote").glob(f"{topic}-*") for p in d.rglob("*")
            if p.is_file() and not p.name.endswith(".manifest")}


def expected_files(storage: LocalFolderStorage, segments: list[RemoteLogSegmentMetadata]) -> set[str]:
    return {Path(key).name for s in segments for key in storage.segment_keys(s)
            if not (s.tx_index_empty and key.endswith(".txnindex"))  # an empty txn index is not stored
            and not (key.endswith(".seal") and not is_sealed(s.custom_metadata))}  # nor an envelope in the clear


def test_kill_9_during_copies_then_restart(upstream, tmp_path, unique_name):
    """The proxy tiers 32 KiB segments continuously; kill -9 it mid-stream, plant an orphan as a
    killed copy leaves it, restart: contiguous, no overlap, no orphan metadata or objects."""
    data_dir = tmp_path / "data"
    args = ("--data-dir", str(data_dir), "--set", "remote.log.manager.task.interval.ms=100")
    proxy = start_proxy(upstream.bootstrap, tmp_path / "proxy", *args)
    create_tiered_topic(proxy.bootstrap, unique_name, partitions=2, **{"segment.bytes": str(32 * 1024)})
    produce_mixed(upstream.bootstrap, unique_name, 60_000, transactions=2, transaction_size=500)
    journal = data_dir / "metadata" / JOURNAL_NAME
    client = BrokerClient(upstream.bootstrap)
    tps = partitions_of(client, unique_name)

    def copies_of_this_topic() -> int:
        # The proxy also tiers other tests' topics on the same broker: count only ours.
        records = read_journal(journal.read_bytes())[0] if journal.exists() else []
        return sum(1 for r in records if getattr(r, "topic_id_partition", None) in tps)

    try:
        assert wait_until(lambda: copies_of_this_topic() >= 3, 60)
    finally:
        os.kill(proxy.process.pid, signal.SIGKILL)
        proxy.process.wait(10)
    with FileMetadataStore(data_dir / "metadata") as rlmm:
        states = [s.state for tp in tps for s in rlmm.list_remote_log_segments(tp)]
        ends = {tp: remote_end(rlmm, tp) for tp in tps}
    assert states, "the proxy tiered nothing before it was killed"
    orphan = _plant_orphan(data_dir, tps[0], ends[tps[0]] + 1)
    produce_mixed(upstream.bootstrap, unique_name, 10_000, transactions=1, transaction_size=500)

    proxy = start_proxy(upstream.bootstrap, tmp_path / "proxy", *args)
    try:
        def caught_up() -> bool:
            with open(journal, "rb") as f:
                records, _ = read_journal(f.read())
            return len(records) > 0 and all(_tiered_to(records, tp) + 1 >= direct_log_end(client, tp) for tp in tps)

        assert wait_until(caught_up, 120), proxy.log_path.read_text()[-3000:]
    finally:
        proxy.stop()
    storage = LocalFolderStorage(data_dir / "remote")
    with FileMetadataStore(data_dir / "metadata") as rlmm:
        assert rlmm._state.segment(orphan.segment_id) is None  # cleaned: DELETE_SEGMENT_FINISHED
        every = []
        for tp in tps:
            segments = check_contiguous(rlmm, tp)
            assert b"".join(storage.fetch_log_segment(s, 0) for s in segments) == direct_log(client, tp)[0]
            every += segments
        # The bucket describes the same segments, kill -9 and restart notwithstanding.
        described = read_bucket(storage).state
        assert all(described.finished(tp) == rlmm.copied_segments(tp) for tp in tps)
    actual, expected = remote_files(data_dir, unique_name), expected_files(storage, every)
    assert actual == expected, (sorted(actual - expected)[:10], sorted(expected - actual)[:10])


def _tiered_to(records: list, tp) -> int:
    """Highest end offset of a FINISHED segment of ``tp`` in a journal read from outside."""
    from tiering.metadata.state import MetadataState

    state = MetadataState()
    for record in records:
        state.apply(record)
    finished = state.finished(tp)
    return finished[-1].end_offset if finished else -1


def test_s3_outage_backs_off_and_catches_up_without_touching_clients(noida, tmp_path, unique_name, seaweedfs):
    server = seaweedfs.gateway()  # its own, so stopping it leaves the session's alone
    bucket = new_bucket(server.endpoint)
    data_dir = tmp_path / "data"
    create_tiered_topic(noida.bootstrap, unique_name, partitions=2, **{"segment.bytes": str(64 * 1024)})
    produce_mixed(noida.bootstrap, unique_name, 20_000, transactions=1, transaction_size=200)
    proxy = start_proxy(
        noida.bootstrap, tmp_path / "proxy", "--data-dir", str(data_dir),
        "--remote", f"s3://{bucket}/tiered?endpoint_url={server.endpoint}&region={REGION}",
        "--set", f"remote.log.storage.s3.access.key.id={DUMMY_CREDENTIALS['aws_access_key_id']}",
        "--set", f"remote.log.storage.s3.secret.access.key={DUMMY_CREDENTIALS['aws_secret_access_key']}",
        "--set", "remote.log.manager.task.interval.ms=100", "--set", "proxy.copier.backoff.max.ms=2000")
    client = BrokerClient(noida.bootstrap)
    tps = partitions_of(client, unique_name)
    journal = data_dir / "metadata" / JOURNAL_NAME

    def tiered_to_end() -> bool:
        records, _ = read_journal(journal.read_bytes()) if journal.exists() else ([], 0)
        return all(_tiered_to(records, tp) + 1 >= direct_log_end(client, tp) for tp in tps)

    try:
        assert wait_until(tiered_to_end, 60)
        server.stop()
        # Clients keep producing and consuming through the proxy while the remote tier is down.
        from tests.clients import Rec, consume_all, produce

        records = [Rec(i % 2, f"k{i}".encode(), f"during-outage-{i}".encode() * 20) for i in range(20_000)]
        started = time.monotonic()
        produce("confluent", proxy.bootstrap, unique_name, records, compression="none")
        got = consume_all("confluent", proxy.bootstrap, unique_name, 2, expected=40_000, timeout=60)
        values = [value for part in got.values() for _, _, value in part]
        assert sum(1 for v in values if v.startswith(b"during-outage-")) == len(records)
        client_seconds = time.monotonic() - started
        assert wait_until(lambda: proxy.log_path.read_text().count("tiering") > 0
                          and "retry in" in proxy.log_path.read_text(), 30)
        server.start()  # same port, same objects
        assert wait_until(tiered_to_end, 90), proxy.log_path.read_text()[-3000:]
    finally:
        proxy.stop()
        server.stop()
    storage = s3_storage(server.endpoint, bucket)
    server.start()
    try:
        with FileMetadataStore(data_dir / "metadata") as rlmm:
            for tp in tps:
                segments = check_contiguous(rlmm, tp)
                assert b"".join(storage.fetch_log_segment(s, 0) for s in segments) == direct_log(client, tp)[0]
    finally:
        storage.close()
        server.stop()
    assert client_seconds < 60


def test_local_retention_moves_log_start_only_past_tiered_offsets(noida, tmp_path, unique_name):
    create_tiered_topic(noida.bootstrap, unique_name, partitions=1,
                        **{"segment.bytes": str(64 * 1024), "local.retention.bytes": str(200 * 1024)})
    client = BrokerClient(noida.bootstrap)
    (tp,) = partitions_of(client, unique_name)
    leader = client.metadata([unique_name])[unique_name].partitions[0].leader
    storage = LocalFolderStorage(tmp_path / "remote")
    starts = []
    with FileMetadataStore(tmp_path / "metadata") as rlmm:
        manager = RemoteLogManager(noida.bootstrap, storage, rlmm, FAST, tmp_path / "data")
        try:
            for _ in range(3):
                produce_mixed(noida.bootstrap, unique_name, 10_000, transactions=1, transaction_size=100)
                moves = manager.metrics.local_log_start_moves
                # Rounds until this batch's retention has acted (at least 5; a loaded machine needs more).
                for round_number in range(40):
                    manager.run_once()
                    log_start = client.list_offset(leader, unique_name, 0, EARLIEST)[1]
                    ry = remote_end(rlmm, tp)
                    assert log_start <= ry + 1  # never past what is safely tiered
                    starts.append(log_start)
                    if round_number >= 4 and manager.metrics.local_log_start_moves > moves:
                        break
        finally:
            manager.stop()
        segments = check_contiguous(rlmm, tp)
    assert starts[-1] > 0 and starts == sorted(starts)
    assert starts[-1] in {s.end_offset + 1 for s in segments}  # moved to a segment boundary
    kept = sum(s.segment_size_bytes for s in segments if s.start_offset >= starts[-1])
    assert kept <= 200 * 1024 + 64 * 1024 + 16 * 1024
    assert manager.metrics.local_log_start_moves >= 2


def test_log_start_passing_the_copier_is_recorded_as_data_loss(noida, tmp_path, unique_name):
    create_tiered_topic(noida.bootstrap, unique_name, partitions=1, **{"segment.bytes": str(16 * 1024)})
    client = BrokerClient(noida.bootstrap)
    (tp,) = partitions_of(client, unique_name)
    leader = client.metadata([unique_name])[unique_name].partitions[0].leader
    storage = LocalFolderStorage(tmp_path / "remote")
    with FileMetadataStore(tmp_path / "metadata") as rlmm:
        manager = RemoteLogManager(noida.bootstrap, storage, rlmm, FAST, tmp_path / "data")
        try:
            produce_mixed(noida.bootstrap, unique_name, 2_000, transactions=0)
            tier_until_caught_up(manager, client, unique_name)
            ry = remote_end(rlmm, tp)
            produce_mixed(noida.bootstrap, unique_name, 2_000, transactions=0)
            # The brokers drop data the copier has not read yet.
            assert client.delete_records(leader, unique_name, 0, ry + 501) == (0, ry + 501)
            tier_until_caught_up(manager, client, unique_name)
        finally:
            manager.stop()
        gaps = manager.gaps.entries()
        assert [(g["first_offset"], g["last_offset"]) for g in gaps] == [(ry + 1, ry + 500)]
        assert manager.metrics.data_loss_gaps == 1 and manager.metrics.data_loss_offsets == 500
        assert rlmm.data_loss(tp) == [(ry + 1, ry + 500)]  # in the store, for every instance
        segments = sorted(rlmm.copied_segments(tp), key=lambda s: s.start_offset)
        after = [s for s in segments if s.start_offset > ry]
        # Copying resumed at the batch holding the new log start (batches are never split).
        assert ry < after[0].start_offset <= ry + 501 <= after[0].end_offset
    assert RemoteLogSegmentState.COPY_SEGMENT_FINISHED in {s.state for s in segments}
    # describe, asked of a proxy on the same remote tier, shows the loss per partition.
    import subprocess
    import sys

    from tests.proxy_process import start_proxy

    proxy = start_proxy(noida.bootstrap, tmp_path / "proxy", "--remote", f"file://{tmp_path / 'remote'}",
                        "--metadata", f"file://{tmp_path / 'metadata'}", "--data-dir", str(tmp_path / "proxy-data"))
    try:
        out = subprocess.run([sys.executable, "-m", "proxy.cli", "describe", "--bootstrap-servers", proxy.bootstrap,
                              "--topic", unique_name], capture_output=True, text=True, timeout=60, check=True).stdout
    finally:
        proxy.stop()
    header, row = out.splitlines()
    assert row.split()[header.split().index("LOST")] == "500", out


def test_remote_retention_by_bytes_expires_oldest_first(noida, tmp_path, unique_name):
    """Brokers manage local retention; remote.log.retention.bytes bounds the remote tier."""
    create_tiered_topic(noida.bootstrap, unique_name, partitions=1, **{"segment.bytes": str(16 * 1024)})
    produce_mixed(noida.bootstrap, unique_name, 30_000, transactions=0)
    client = BrokerClient(noida.bootstrap)
    (tp,) = partitions_of(client, unique_name)
    storage = LocalFolderStorage(tmp_path / "remote")
    limit = 64 * 1024
    config = TieringConfig(task_interval_ms=200, remote_retention_bytes=limit)
    with FileMetadataStore(tmp_path / "metadata") as rlmm:
        manager = RemoteLogManager(noida.bootstrap, storage, rlmm, config, tmp_path / "data")
        try:
            tier_until_caught_up(manager, client, unique_name)
            manager.run_once()
        finally:
            manager.stop()
        segments = check_contiguous(rlmm, tp, start=rlmm.copied_segments(tp)[0].start_offset)
        assert segments[0].start_offset > 0  # Rx moved
        total = sum(s.segment_size_bytes for s in segments)
        # As Kafka does: the oldest goes while the rest still holds at least the limit.
        assert total - segments[0].segment_size_bytes < limit, [(s.start_offset, s.segment_size_bytes) for s in segments]
        assert manager.metrics.deleted_segments >= 3
        assert segments[-1].end_offset + 1 == direct_log_end(client, tp)
    assert remote_files(tmp_path, unique_name) == expected_files(storage, segments)


def test_total_retention_by_time_expires_remote_segments(tansu, tmp_path, unique_name):
    """Proxy-managed mode (local.retention.ms set): remote segments expire by retention.ms. Tansu
    never applies retention itself, so what goes is the proxy's doing."""
    create_tiered_topic(tansu.bootstrap, unique_name, partitions=1,
                        **{"segment.bytes": str(16 * 1024), "retention.ms": "4000", "local.retention.ms": "60000"})
    produce_mixed(tansu.bootstrap, unique_name, 12_000, transactions=0)
    client = BrokerClient(tansu.bootstrap)
    (tp,) = partitions_of(client, unique_name)
    storage = LocalFolderStorage(tmp_path / "remote")
    with FileMetadataStore(tmp_path / "metadata") as rlmm:
        manager = RemoteLogManager(tansu.bootstrap, storage, rlmm, FAST, tmp_path / "data")
        try:
            tier_until_caught_up(manager, client, unique_name)
            before = len(rlmm.copied_segments(tp))
            assert before >= 4
            assert wait_until(lambda: len(rlmm.copied_segments(tp)) == 1, 30, step=manager.run_once)
        finally:
            manager.stop()
        (last,) = rlmm.copied_segments(tp)  # the newest stays, so the copier's position is known
        assert last.end_offset + 1 == direct_log_end(client, tp)
        assert manager.metrics.deleted_segments == before - 1
    assert remote_files(tmp_path, unique_name) == expected_files(storage, [last])
