"""RemoteStorageManager: the contract every implementation passes (StorageContract, reused by the S3
tests), run here against LocalFolderStorage, plus local-only behaviour and URI parsing."""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tiering.model import (
    IndexType,
    LogSegmentData,
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    TopicIdPartition,
)
from tiering.storage.api import CustomMetadataTooLargeError, RemoteResourceNotFoundError, RemoteStorageError
from tiering.storage.local_folder import LocalFolderStorage
from tiering.storage.object_layout import ObjectStorage, kafka_uuid_str, normalize_prefix
from tiering.storage.uri import storage_from_uri

TP = TopicIdPartition(uuid.UUID("6ba7b810-9dad-11d1-80b4-00c04fd430c8"), "orders.v1", 3)


def segment_metadata(start_offset: int = 100, custom: bytes | None = None) -> RemoteLogSegmentMetadata:
    return RemoteLogSegmentMetadata(
        segment_id=RemoteLogSegmentId.generate(TP),
        start_offset=start_offset,
        end_offset=start_offset + 9,
        max_timestamp_ms=1_700_000_000_000,
        broker_id=1,
        event_timestamp_ms=1_700_000_000_001,
        segment_size_bytes=0,
        segment_leader_epochs=((0, start_offset),),
        custom_metadata=custom,
    )


def segment_data(log: bytes = b"", txn: bytes | None = b"txn-entries", tag: bytes = b"") -> LogSegmentData:
    # Every file has distinct content, so a mix-up of keys shows as a wrong value.
    return LogSegmentData(
        log=log or bytes(range(256)) * 4 + tag,
        offset_index=b"offset-index" + tag,
        time_index=b"time-index" + tag,
        transaction_index=txn,
        leader_epoch_index=b"0\n1\n0 100\n" + tag,
        producer_snapshot=b"snapshot" + tag,
    )


def expected_index(data: LogSegmentData, index_type: IndexType) -> bytes | None:
    return {
        IndexType.OFFSET: data.offset_index,
        IndexType.TIMESTAMP: data.time_index,
        IndexType.TRANSACTION: data.transaction_index,
        IndexType.LEADER_EPOCH: data.leader_epoch_index,
        IndexType.PRODUCER_SNAPSHOT: data.producer_snapshot,
    }[index_type]


class StorageContract:
    """Behaviour shared by every implementation. Subclasses provide the fixtures:

    - ``make_storage(prefix)``: a new store over one shared backing store per test;
    - ``list_keys()``: every object (and stray temporary file) in that backing store;
    - ``oversized_storage``: a store over the same backing store whose copies produce custom
      metadata over its limit.
    """

    @pytest.fixture
    def storage(self, make_storage: Callable[..., ObjectStorage]) -> ObjectStorage:
        return make_storage(prefix="tiered/v1")

    def test_copy_then_fetch_every_file(self, storage):
        metadata, data = segment_metadata(), segment_data()
        storage.copy_log_segment_data(metadata, data)
        assert storage.fetch_log_segment(metadata, 0) == data.log
        for index_type in IndexType:
            assert storage.fetch_index(metadata, index_type) == expected_index(data, index_type)

    @pytest.mark.parametrize("prefix", ["", "tiered/v1"])
    def test_object_keys_follow_the_layout(self, make_storage, list_keys, prefix):
        storage = make_storage(prefix=prefix)
        metadata = segment_metadata(start_offset=42)
        storage.copy_log_segment_data(metadata, segment_data())
        base = f"orders.v1-{kafka_uuid_str(TP.topic_id)}/3/{42:020d}-{kafka_uuid_str(metadata.segment_id.id)}"
        base = f"{prefix}/{base}" if prefix else base
        suffixes = ["log", "index", "timeindex", "txnindex", "leader-epoch-checkpoint", "snapshot"]
        assert list_keys() == {f"{base}.{s}" for s in suffixes}

    @pytest.mark.parametrize(
        ("start", "end"),
        [
            (0, 0),
            (0, None),
            (0, "last"),
            (1, "last"),
            ("last", "last"),
            ("last", None),
            (10, 10),
            (10, 500),
            (100, "past"),  # end past the object: clamped
            ("size", None),  # start at the end: nothing
            ("past", "past"),
        ],
    )
    def test_log_ranges_are_inclusive_slices(self, storage, start, end):
        metadata, data = segment_metadata(), segment_data()
        storage.copy_log_segment_data(metadata, data)
        size = len(data.log)
        named = {"last": size - 1, "size": size, "past": size + 1000}
        s = named.get(start, start)
        e = named.get(end, end)
        expected = data.log[s:] if e is None else data.log[s : e + 1]
        assert storage.fetch_log_segment(metadata, s, e) == expected

    def test_invalid_ranges_are_rejected(self, storage):
        metadata = segment_metadata()
        storage.copy_log_segment_data(metadata, segment_data())
        with pytest.raises(ValueError):
            storage.fetch_log_segment(metadata, -1)
        with pytest.raises(ValueError):
            storage.fetch_log_segment(metadata, 5, 4)

    def test_empty_log_reads_empty(self, storage):
        metadata = segment_metadata()
        data = LogSegmentData(b"", b"", b"", None, b"")
        storage.copy_log_segment_data(metadata, data)
        assert storage.fetch_log_segment(metadata, 0) == b""
        assert storage.fetch_log_segment(metadata, 0, 10) == b""
        assert storage.fetch_index(metadata, IndexType.OFFSET) == b""

    def test_copy_again_overwrites(self, storage, list_keys):
        metadata = segment_metadata()
        storage.copy_log_segment_data(metadata, segment_data(tag=b"first"))
        keys = list_keys()
        second = segment_data(tag=b"second")
        storage.copy_log_segment_data(metadata, second)
        assert list_keys() == keys
        assert storage.fetch_log_segment(metadata, 0) == second.log
        for index_type in IndexType:
            assert storage.fetch_index(metadata, index_type) == expected_index(second, index_type)

    def test_delete_is_idempotent_and_fetch_after_delete_is_not_found(self, storage, list_keys):
        metadata = segment_metadata()
        other = segment_metadata(start_offset=200)
        storage.copy_log_segment_data(metadata, segment_data())
        storage.copy_log_segment_data(other, segment_data())
        storage.delete_log_segment_data(metadata)
        storage.delete_log_segment_data(metadata)
        with pytest.raises(RemoteResourceNotFoundError) as info:
            storage.fetch_log_segment(metadata, 0)
        assert info.value.retriable is False
        for index_type in IndexType:
            with pytest.raises(RemoteResourceNotFoundError):
                storage.fetch_index(metadata, index_type)
        # Only the deleted segment's objects went.
        assert list_keys() and all(kafka_uuid_str(other.segment_id.id) in k for k in list_keys())

    # Requests a delete of one segment takes: the store's own (one per file, or one per batch).
    deletes_per_segment: int

    def test_requests_and_bytes_are_counted(self, storage):
        metadata, data = segment_metadata(), segment_data()
        storage.copy_log_segment_data(metadata, data)
        written = [len(body) for body in (data.log, data.offset_index, data.time_index, data.transaction_index,
                                          data.leader_epoch_index, data.producer_snapshot)]
        requests, failures, read, stored = storage.requests.snapshot()
        assert (requests, failures, read, stored) == ({"PUT": len(written)}, {}, 0, sum(written))
        assert storage.fetch_log_segment(metadata, 10, 109) == data.log[10:110]
        assert storage.fetch_index(metadata, IndexType.OFFSET) == data.offset_index
        storage.delete_log_segment_data(metadata)
        with pytest.raises(RemoteResourceNotFoundError):  # an answer, not a failure
            storage.fetch_index(metadata, IndexType.TIMESTAMP)
        requests, failures, read, stored = storage.requests.snapshot()
        assert requests == {"PUT": len(written), "GET": 3, "DELETE": self.deletes_per_segment}
        assert (failures, read, stored) == ({}, 100 + len(data.offset_index), sum(written))

    def test_delete_of_a_never_copied_segment_succeeds(self, storage):
        storage.delete_log_segment_data(segment_metadata())

    @pytest.mark.parametrize("txn", [None, b""])
    def test_empty_transaction_index_is_not_stored(self, storage, list_keys, txn):
        metadata, data = segment_metadata(), segment_data(txn=txn)
        storage.copy_log_segment_data(metadata, data)
        assert not any(k.endswith(".txnindex") for k in list_keys())
        with pytest.raises(RemoteResourceNotFoundError):
            storage.fetch_index(metadata, IndexType.TRANSACTION)
        assert storage.fetch_index(metadata, IndexType.OFFSET) == data.offset_index

    def test_oversized_custom_metadata_fails_the_copy_and_leaves_nothing(self, oversized_storage, list_keys):
        with pytest.raises(CustomMetadataTooLargeError) as info:
            oversized_storage.copy_log_segment_data(segment_metadata(), segment_data())
        assert info.value.retriable is False
        assert list_keys() == set()

    def test_log_is_written_last(self, storage, monkeypatch):
        written: list[str] = []
        put = storage._put

        def recording_put(key, body):
            written.append(key)
            put(key, body)

        monkeypatch.setattr(storage, "_put", recording_put)
        storage.copy_log_segment_data(segment_metadata(), segment_data())
        assert len(written) == 6
        assert written[-1].endswith(".log") and not any(k.endswith(".log") for k in written[:-1])

    def test_failed_copy_leaves_nothing_behind(self, storage, list_keys, monkeypatch):
        put = storage._put
        calls = 0

        def failing_put(key, body):
            nonlocal calls
            calls += 1
            if calls == 3:
                raise RemoteStorageError("injected", retriable=True)
            put(key, body)

        monkeypatch.setattr(storage, "_put", failing_put)
        with pytest.raises(RemoteStorageError, match="injected"):
            storage.copy_log_segment_data(segment_metadata(), segment_data())
        assert list_keys() == set()

    def test_closed_storage_refuses_work(self, make_storage):
        storage = make_storage(prefix="")
        with storage:
            pass
        with pytest.raises(RemoteStorageError, match="closed"):
            storage.fetch_log_segment(segment_metadata(), 0)
        storage.close()  # closing twice is fine

    def test_fetch_equals_the_slice(self, storage):
        # The property runs inside the test, so the one store serves every example, and the
        # contract can run under several subclasses without upsetting hypothesis.
        @settings(max_examples=25, deadline=None)
        @given(log=st.binary(min_size=0, max_size=3000), draws=st.data())
        def check(log: bytes, draws: st.DataObject) -> None:
            metadata = segment_metadata()
            storage.copy_log_segment_data(metadata, LogSegmentData(log, b"", b"", None, b""))
            try:
                for _ in range(draws.draw(st.integers(1, 6), label="ranges")):
                    start = draws.draw(st.integers(0, len(log) + 5), label="start")
                    end = draws.draw(st.none() | st.integers(start, len(log) + 5), label="end")
                    expected = log[start:] if end is None else log[start : end + 1]
                    assert storage.fetch_log_segment(metadata, start, end) == expected
            finally:
                storage.delete_log_segment_data(metadata)

        check()


class _BloatedLocalStorage(LocalFolderStorage):
    """Local storage returns no custom metadata; this one returns too much, to exercise the
    base class's KIP-917 check."""

    def _copy_log_segment_data(self, metadata, data):
        super()._copy_log_segment_data(metadata, data)
        return b"\x00" * (self.custom_metadata_max_bytes + 1)


class TestLocalFolderStorage(StorageContract):
    deletes_per_segment = 2 + len(IndexType)  # a file each, present or not, and the envelope of a sealed segment
    @pytest.fixture
    def root(self, tmp_path: Path) -> Path:
        return tmp_path / "remote"

    @pytest.fixture
    def make_storage(self, root):
        return lambda prefix="": LocalFolderStorage(root, prefix)

    @pytest.fixture
    def list_keys(self, root):
        return lambda: {p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file()}

    @pytest.fixture
    def oversized_storage(self, root):
        return _BloatedLocalStorage(root, "tiered/v1")

    def test_returns_no_custom_metadata(self, storage):
        assert storage.copy_log_segment_data(segment_metadata(), segment_data()) is None

    def test_crash_while_writing_leaves_no_partial_object(self, storage, list_keys, monkeypatch):
        real_fsync = os.fsync
        calls = 0

        def failing_fsync(fd):
            # Fail the 5th object's data fsync (objects are fsynced, then their directory).
            nonlocal calls
            calls += 1
            if calls == 9:
                raise OSError(28, "No space left on device")
            real_fsync(fd)

        monkeypatch.setattr(os, "fsync", failing_fsync)
        with pytest.raises(RemoteStorageError) as info:
            storage.copy_log_segment_data(segment_metadata(), segment_data())
        assert info.value.retriable is True  # ENOSPC may clear
        assert list_keys() == set()  # neither objects nor temporary files

    def test_missing_root_is_created(self, tmp_path):
        LocalFolderStorage(tmp_path / "a" / "b")
        assert (tmp_path / "a" / "b").is_dir()

    def test_relative_root_is_rejected(self):
        with pytest.raises(ValueError, match="absolute"):
            LocalFolderStorage(Path("relative/dir"))


def test_kafka_uuid_str_matches_kafka():
    # Kafka's Uuid.ZERO_UUID and Uuid.METADATA_TOPIC_ID (Uuid(0, 1)) as Kafka prints them.
    assert kafka_uuid_str(uuid.UUID(int=0)) == "AAAAAAAAAAAAAAAAAAAAAA"
    assert kafka_uuid_str(uuid.UUID(int=1)) == "AAAAAAAAAAAAAAAAAAAAAQ"
    # URL-safe alphabet: all ones would be '/'-laden in standard base64.
    assert kafka_uuid_str(uuid.UUID(int=(1 << 128) - 1)) == "_____________________w"


@pytest.mark.parametrize(("raw", "normal"), [("", ""), ("/", ""), ("a/b/", "a/b"), ("/a", "a")])
def test_prefix_normalization(raw, normal):
    assert normalize_prefix(raw) == normal


@pytest.mark.parametrize("bad", ["a//b", "../x", "a/./b", "a/.."])
def test_bad_prefixes_are_rejected(bad):
    with pytest.raises(ValueError):
        normalize_prefix(bad)


def test_illegal_topic_names_cannot_escape_the_layout(tmp_path):
    bad = TopicIdPartition(uuid.uuid4(), "../../etc", 0)
    metadata = RemoteLogSegmentMetadata(RemoteLogSegmentId.generate(bad), 0, 0, 0, 0, 0, 0, ((0, 0),))
    with pytest.raises(ValueError, match="topic"):
        LocalFolderStorage(tmp_path).copy_log_segment_data(metadata, segment_data())


def test_extra_files_are_refused(tmp_path):
    data = LogSegmentData(b"x", b"", b"", None, b"", extra={"other": b"y"})
    with pytest.raises(ValueError, match="extra"):
        LocalFolderStorage(tmp_path).copy_log_segment_data(segment_metadata(), data)


@pytest.mark.parametrize("form", ["file://{path}", "file://localhost{path}", "file:{path}"])
def test_file_uris(tmp_path, form):
    storage = storage_from_uri(
        form.format(path=tmp_path / "r"), **{"remote.log.metadata.custom.metadata.max.bytes": "64"}
    )
    assert isinstance(storage, LocalFolderStorage)
    assert storage.root == tmp_path / "r" and storage.prefix == ""
    assert storage.custom_metadata_max_bytes == 64


def test_file_uri_is_percent_decoded(tmp_path):
    storage = storage_from_uri(f"file://{tmp_path}/with%20space")
    assert isinstance(storage, LocalFolderStorage) and storage.root == tmp_path / "with space"


@pytest.mark.parametrize(
    "uri",
    [
        "file:relative/path",
        "file://otherhost/tmp/x",
        "file:///tmp/x?prefix=a",
        "file:///tmp/x#frag",
        "http://example.com/x",
        "/tmp/plain/path",
        "",
    ],
)
def test_bad_file_and_unknown_uris(uri):
    with pytest.raises(ValueError):
        storage_from_uri(uri)


def test_non_integer_config_is_a_clear_error(tmp_path):
    with pytest.raises(ValueError, match="max.bytes"):
        storage_from_uri(f"file://{tmp_path}", **{"remote.log.metadata.custom.metadata.max.bytes": "lots"})
