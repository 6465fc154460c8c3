"""Keys salted with a hash of the topic-partition (``remote.log.storage.key.prefix.salt.length``,
tiering/storage/object_layout.py): the salt is recorded in the segment's custom metadata (version
3 of segment_location), so segments are found where they were written whether salting was on or
off then and is on or off now; and the readers that walk the bucket (key rotation's walk, the
manifests' reader, the read-only store over them) still find, or rightly skip, salted segments.
The same over S3: tests/integration/test_cost_per_topic.py."""

from __future__ import annotations

import dataclasses
import uuid
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.unit.test_at_rest import copy, json_log, ring, sealed_store
from tests.unit.test_storage_local import segment_data
from tiering.metadata.bucket_store import BucketIndexStore
from tiering.metadata.journal_store import FileMetadataStore
from tiering.metadata.manifests import ManifestWriter, read_bucket
from tiering.model import (
    IndexType,
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    RemoteLogSegmentState,
    TopicIdPartition,
)
from tiering.storage.api import RemoteResourceNotFoundError, RemoteStorageError
from tiering.storage.key_maintenance import key_usage, sealed_objects
from tiering.storage.local_folder import LocalFolderStorage
from tiering.storage.object_layout import (
    SALT_LENGTH_CONFIG,
    KeyLayoutConfigError,
    kafka_uuid_str,
    key_salt,
    salt_length_from_config,
)
from tiering.storage.segment_location import SegmentLocation, is_sealed, location, stored_bytes

TOPIC = TopicIdPartition(uuid.UUID(int=7), "orders", 2)


def _metadata(tp: TopicIdPartition = TOPIC, start: int = 0) -> RemoteLogSegmentMetadata:
    return RemoteLogSegmentMetadata(RemoteLogSegmentId.generate(tp), start, start + 9, 0, 1, 0, 0, ((0, start),))


def _copied(store: LocalFolderStorage, tp: TopicIdPartition = TOPIC, start: int = 0) -> RemoteLogSegmentMetadata:
    metadata = _metadata(tp, start)
    return dataclasses.replace(metadata, custom_metadata=store.copy_log_segment_data(metadata, segment_data()))


@given(st.text(max_size=40), st.integers(0, 2**63 - 1), st.booleans(), st.integers(0, 2**63 - 1),
       st.text("0123456789abcdef", max_size=8))
def test_a_location_round_trips_and_only_a_salted_one_is_version_3(prefix: str, stored: int, sealed: bool,
                                                                    logical: int, salt: str) -> None:
    where = SegmentLocation(prefix, stored, sealed, logical if sealed else -1, salt)
    blob = where.encode()
    assert SegmentLocation.decode(blob) == where == location(blob)
    assert blob[0] == (3 if salt else 2 if sealed else 1)
    assert len(blob) == SegmentLocation.encoded_size(prefix, sealed, len(salt))
    assert (is_sealed(blob), stored_bytes(blob, -1)) == (sealed, stored)


@pytest.mark.parametrize("blob", [SegmentLocation("p", 1, salt="ab").encode()[:-1],
                                  SegmentLocation("p", 1, salt="ab").encode() + b"x",
                                  SegmentLocation("p", 1, salt="ab").encode()[:22]])
def test_a_damaged_salted_location_is_refused(blob: bytes) -> None:
    with pytest.raises(RemoteStorageError, match="does not match its prefix and salt lengths|truncated"):
        SegmentLocation.decode(blob)
    assert location(blob) is None


def test_salted_keys_begin_with_the_partitions_hash(tmp_path: Path) -> None:
    store = LocalFolderStorage(tmp_path / "remote", salt_length=3)
    first, second = _copied(store), _copied(store, start=10)
    other = _copied(store, TopicIdPartition(TOPIC.topic_id, "orders", 0))
    salt = key_salt(first, 3)
    assert len(salt) == 3 and salt == key_salt(second, 3) != key_salt(other, 3)
    assert SegmentLocation.decode(first.custom_metadata or b"") == SegmentLocation(
        "", stored_bytes(first.custom_metadata, 0), salt=salt)
    directory = tmp_path / "remote" / f"{salt}~orders~{kafka_uuid_str(TOPIC.topic_id)}" / "2"
    assert {p.name for p in directory.iterdir()} == {
        f"{s.start_offset:020d}-{kafka_uuid_str(s.segment_id.id)}.{ext}"
        for s in (first, second) for ext in ("log", *(t.value for t in IndexType))}
    assert not (tmp_path / "remote" / f"orders-{kafka_uuid_str(TOPIC.topic_id)}").exists()


def test_segments_are_found_where_they_were_written_as_salting_goes_on_and_off(tmp_path: Path) -> None:
    root = tmp_path / "remote"
    data = segment_data()
    before = _copied(LocalFolderStorage(root))  # salting off
    assert before.custom_metadata is None  # in the clear, unsalted: recorded nothing, as before salting
    salted = _copied(LocalFolderStorage(root, salt_length=4), start=10)
    after = _copied(LocalFolderStorage(root), start=20)  # off again
    for store in (LocalFolderStorage(root), LocalFolderStorage(root, salt_length=4), LocalFolderStorage(root, salt_length=1)):
        for segment in (before, salted, after):
            assert store.fetch_log_segment(segment, 0) == data.log
            assert store.fetch_index(segment, IndexType.TRANSACTION) == data.transaction_index
    store = LocalFolderStorage(root, salt_length=2)
    for segment in (before, salted, after):
        store.delete_log_segment_data(segment)
        with pytest.raises(RemoteResourceNotFoundError):
            store.fetch_log_segment(segment, 0)
    assert [p for p in root.rglob("*") if p.is_file()] == []


def test_the_salt_setting_is_checked_by_key() -> None:
    assert salt_length_from_config({}) == 0
    assert salt_length_from_config({SALT_LENGTH_CONFIG: "2"}) == 2
    for bad, message in (("9", "must be 0 \\(off\\) to 8 hex digits, got 9"), ("-1", "must be 0"),
                         ("two", "must be an integer, got 'two'")):
        with pytest.raises(KeyLayoutConfigError, match=f"^{SALT_LENGTH_CONFIG} {message}"):
            salt_length_from_config({SALT_LENGTH_CONFIG: bad})


def test_a_prefix_too_long_for_the_salted_location_is_refused_at_once(tmp_path: Path) -> None:
    LocalFolderStorage(tmp_path, "p" * 100, salt_length=0, custom_metadata_max_bytes=120)
    with pytest.raises(KeyLayoutConfigError, match="needs 129 bytes of custom metadata, over the 120 allowed"):
        LocalFolderStorage(tmp_path, "p" * 100, salt_length=8, custom_metadata_max_bytes=120)


def test_key_rotation_finds_salted_envelopes(tmp_path: Path) -> None:
    remote = tmp_path / "remote"
    ring_file = ring(tmp_path, "k1")
    plain = copy(sealed_store(remote, ring_file), json_log(100))
    salted_store = sealed_store(remote, ring_file)
    salted_store.salt_length = 2
    salted = copy(salted_store, json_log(200))
    assert location(salted.custom_metadata) is not None and location(salted.custom_metadata).salt  # type: ignore[union-attr]
    assert is_sealed(salted.custom_metadata)
    found = sorted(sealed_objects(salted_store))
    assert len(found) == 2 and any(name.startswith(f"{key_salt(salted, 2)}~") for name in found), found
    assert len(key_usage(salted_store).uses["k1"]) == 2
    assert salted_store.fetch_log_segment(salted, 0) == json_log(200)
    assert salted_store.fetch_log_segment(plain, 0) == json_log(100)


def test_the_manifests_describe_salted_segments_and_their_directories_are_no_topics(tmp_path: Path) -> None:
    storage = LocalFolderStorage(tmp_path / "remote", salt_length=2)
    with FileMetadataStore(tmp_path / "metadata") as store:
        writer = ManifestWriter(storage, store, interval_ms=60_000)
        for start in (0, 10):
            segment = _metadata(start=start)
            store.add_remote_log_segment_metadata(segment)
            custom = storage.copy_log_segment_data(segment, segment_data())
            store.update_remote_log_segment_metadata(RemoteLogSegmentMetadataUpdate(
                segment.segment_id, 5, RemoteLogSegmentState.COPY_SEGMENT_FINISHED, 1, custom))
        writer.flush()
        writer.close()
    index = read_bucket(storage)
    # One topic (the salted directory beside it is not one), nothing undescribed.
    assert (index.topics, index.partitions, index.undescribed) == (1, 1, [])
    reader = BucketIndexStore(LocalFolderStorage(tmp_path / "remote"), 60)  # another proxy, salting off
    reader.refresh()
    segments = reader.copied_segments(TOPIC)
    assert len(segments) == 2
    assert all(reader.storage.fetch_log_segment(s, 0) == segment_data().log for s in segments)
