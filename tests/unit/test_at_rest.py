"""Segments and objects sealed at rest (zstd, AES-256-GCM per chunk) through the local-folder store:
every range reads back exact, every altered or truncated byte is refused, keys are checked, and
plain and sealed segments live side by side."""

from __future__ import annotations

import dataclasses
import json
import tempfile
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from protocol.compression import Compression
from protocol.records import Record, build_batch
from tests.http_kms import HttpKmsServer
from tiering.metadata.manifests import decode_manifest, encode_manifest, partition_manifest_key, read_bucket
from tiering.model import (
    IndexType,
    LogSegmentData,
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentState,
    TopicIdPartition,
    TopicTieringState,
)
from tiering.storage.api import RemoteResourceNotFoundError, RemoteStorageError
from tiering.storage.at_rest import IntegrityError, mostly_compressed
from tiering.storage.key_ring import KeyEncryptionKeys, key_block, read_key_ring
from tiering.storage.local_folder import LocalFolderStorage
from tiering.storage.segment_location import SegmentLocation, is_sealed
from tiering.storage.uri import storage_from_uri

TP = TopicIdPartition(uuid.UUID(int=7), "orders", 0)


def ring(folder: Path, *ids: str, name: str = "ring.pem") -> Path:
    path = folder / name
    path.write_text("".join(key_block(i) for i in ids))
    return path


def sealed_store(root: Path, ring_file: Path | None, key_id: str = "k1", compression: str = "zstd",
                 chunk: int = 1 << 20) -> LocalFolderStorage:
    props: dict[str, object] = {"remote.log.storage.compression.type": compression, "remote.log.chunk.size.bytes": chunk}
    if ring_file is not None:
        props |= {"remote.log.storage.encryption.key.ring.file": str(ring_file),
                  "remote.log.storage.encryption.key.id": key_id}
    store = storage_from_uri(f"file://{root}", **props)
    assert isinstance(store, LocalFolderStorage)
    return store


def json_log(records: int) -> bytes:
    """A .log of uncompressed batches of JSON-like values."""
    batches = []
    for base in range(0, records, 50):
        values = [Record(o, 1_700_000_000_000 + o, None,
                         json.dumps({"order": o, "customer": f"c-{o * 7919 % 1000}", "amount": o % 977,
                                     "status": ["new", "paid", "shipped"][o % 3]}).encode(), [])
                  for o in range(base, min(base + 50, records))]
        batches.append(build_batch(values, base_offset=base))
    return b"".join(batches)


def copy(store: LocalFolderStorage, log: bytes, *, txn: bytes | None = None, topic: TopicIdPartition = TP,
         ) -> RemoteLogSegmentMetadata:
    metadata = RemoteLogSegmentMetadata(RemoteLogSegmentId(topic, uuid.uuid4()), 0, 99, 0, 0, 0, len(log), ((0, 0),))
    data = LogSegmentData(log, b"\x00\x00\x00\x01" * 40, b"\x00" * 120, txn, b"0\n1\n0 0\n", b"\x00\x01producer-state")
    custom = store.copy_log_segment_data(metadata, data)
    return dataclasses.replace(metadata, custom_metadata=custom)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(body=st.binary(max_size=3000), chunk=st.integers(1, 700), compress=st.booleans(), encrypt=st.booleans(),
       ranges=st.lists(st.tuples(st.integers(0, 3100), st.integers(0, 3100) | st.none()), max_size=8))
def test_every_range_reads_back_exactly(body: bytes, chunk: int, compress: bool, encrypt: bool,
                                        ranges: list[tuple[int, int | None]]) -> None:
    with tempfile.TemporaryDirectory() as folder:
        root = Path(folder)
        store = sealed_store(root / "remote", ring(root, "k1") if encrypt else None,
                             compression="zstd" if compress else "none", chunk=chunk)
        if not (compress or encrypt):
            return  # in the clear: the store's own tests
        metadata = copy(store, body)
        assert is_sealed(metadata.custom_metadata)
        assert store.fetch_log_segment(metadata, 0) == body
        for start, end in ranges:
            if end is not None and end < start:
                start, end = end, start
            assert store.fetch_log_segment(metadata, start, end) == (body[start:] if end is None else body[start:end + 1])
        assert store.fetch_index(metadata, IndexType.OFFSET) == b"\x00\x00\x00\x01" * 40
        assert store.fetch_index(metadata, IndexType.PRODUCER_SNAPSHOT) == b"\x00\x01producer-state"


def test_no_plaintext_reaches_the_folder(tmp_path: Path) -> None:
    store = sealed_store(tmp_path / "remote", ring(tmp_path, "k1"))
    log = json_log(400)
    copy(store, log, txn=b"\x00\x00" + b"txn-entry" * 4)
    store.write_object("orders-x/0/partition.manifest", b"manifest naming customer c-123")
    for path in (tmp_path / "remote").rglob("*"):
        if path.is_file():
            raw = path.read_bytes()
            for needle in (b"customer", b"c-123", b"shipped", b"txn-entry", b"producer-state", b"0 0"):
                assert needle not in raw, f"{needle!r} in {path.name}"


def test_compression_halves_json_and_skips_compressed_batches(tmp_path: Path) -> None:
    store = sealed_store(tmp_path / "remote", None)
    log = json_log(2000)
    location = SegmentLocation.decode(copy(store, log).custom_metadata or b"")
    assert location.sealed and location.stored_bytes < 0.5 * location.logical_bytes
    compressed = b"".join(build_batch([Record(o, 0, None, b"v" * 100, [])], base_offset=o, compression=Compression.ZSTD)
                          for o in range(20))
    assert mostly_compressed(compressed) and not mostly_compressed(log) and not mostly_compressed(b"")


def _flip_each(path: Path, read: Callable[[LocalFolderStorage], object],
               store_factory: Callable[[], LocalFolderStorage],
               refusal: type[Exception] = IntegrityError) -> int:
    """Flips every byte of ``path`` in turn, then cuts it short; each read through a fresh store
    must refuse."""
    original = path.read_bytes()
    refused = 0
    try:
        for i in range(len(original)):
            altered = bytearray(original)
            altered[i] ^= 0x41
            path.write_bytes(altered)
            with pytest.raises(refusal):
                read(store_factory())
            refused += 1
        for cut in range(0, len(original), max(1, len(original) // 50)):
            path.write_bytes(original[:cut])
            with pytest.raises(refusal):
                read(store_factory())
    finally:
        path.write_bytes(original)
    return refused


@pytest.mark.parametrize("encrypt", [True, False], ids=["encrypted", "compressed"])
def test_every_altered_or_cut_byte_is_refused(tmp_path: Path, encrypt: bool) -> None:
    ring_file = ring(tmp_path, "k1") if encrypt else None

    def factory() -> LocalFolderStorage:
        return sealed_store(tmp_path / "remote", ring_file, chunk=256)

    log = json_log(12)
    metadata = copy(factory(), log)
    files = {p.suffix: p for p in (tmp_path / "remote").rglob("*") if p.is_file()}
    _flip_each(files[".log"], lambda s: s.fetch_log_segment(metadata, 0), factory)
    _flip_each(files[".index"], lambda s: s.fetch_index(metadata, IndexType.OFFSET), factory)
    _flip_each(files[".seal"], lambda s: s.fetch_log_segment(metadata, 300, 310), factory)
    # A whole object read whole: an altered magic makes it look like an object in the clear, which
    # its reader (here the manifest's own format) refuses in turn.
    key = "t/0/partition.manifest"
    factory().write_object(key, encode_manifest([TopicTieringState("t", uuid.UUID(int=1))], 1))
    _flip_each(tmp_path / "remote" / key, lambda s: decode_manifest(s.read_object(key), key), factory,
               RemoteStorageError)
    assert factory().fetch_log_segment(metadata, 0) == log  # restored, reads again


def test_keys_that_do_not_open_are_refused(tmp_path: Path) -> None:
    store = sealed_store(tmp_path / "remote", ring(tmp_path, "k1"))
    metadata = copy(store, json_log(50))
    other = sealed_store(tmp_path / "remote", ring(tmp_path, "k1", name="other.pem"))  # same id, other bytes
    with pytest.raises(IntegrityError, match="did not wrap"):
        other.fetch_log_segment(metadata, 0)
    clear = sealed_store(tmp_path / "remote", None, compression="none")
    with pytest.raises(IntegrityError, match="no key ring"):
        clear.fetch_log_segment(metadata, 0)
    assert other.at_rest.integrity_failures == 1


def test_plain_and_sealed_segments_side_by_side(tmp_path: Path) -> None:
    plain = sealed_store(tmp_path / "remote", None, compression="none")
    old_log, new_log = json_log(100), json_log(300)
    old = copy(plain, old_log)
    assert old.custom_metadata is None
    sealed = sealed_store(tmp_path / "remote", ring(tmp_path, "k1"))
    new = copy(sealed, new_log)
    assert sealed.fetch_log_segment(old, 10, 500) == old_log[10:501]
    assert sealed.fetch_log_segment(new, 10, 500) == new_log[10:501]
    with pytest.raises(RemoteResourceNotFoundError):
        sealed.fetch_index(new, IndexType.TRANSACTION)  # never stored, as in the clear
    sealed.delete_log_segment_data(new)
    sealed.delete_log_segment_data(old)
    assert not [p for p in (tmp_path / "remote").rglob("*") if p.is_file()]


def test_a_topic_setting_chooses_compression(tmp_path: Path) -> None:
    store = sealed_store(tmp_path / "remote", None, compression="none")
    store.at_rest.topic_compression = lambda topic: "zstd" if topic == "orders" else None
    assert is_sealed(copy(store, json_log(200)).custom_metadata)
    assert copy(store, json_log(200), topic=TopicIdPartition(uuid.uuid4(), "clicks", 0)).custom_metadata is None


@pytest.mark.parametrize("text, error", [
    ("", "holds no"),
    ("-----BEGIN TIERED STORAGE KEY-----\n\nAAAA\n-----END TIERED STORAGE KEY-----\n", "needs a Key-Id"),
    ("-----BEGIN TIERED STORAGE KEY-----\nKey-Id: a\n\n!!!\n-----END TIERED STORAGE KEY-----\n", "not base64"),
    ("-----BEGIN TIERED STORAGE KEY-----\nKey-Id: a\n\nAAAA\n-----END TIERED STORAGE KEY-----\n", "has 3 bytes"),
    (key_block("a", bytes(32)) + key_block("a", bytes(32)), "appears twice"),
], ids=["empty", "no id", "not base64", "short", "twice"])
def test_a_bad_key_ring_is_refused_naming_what(tmp_path: Path, text: str, error: str) -> None:
    path = tmp_path / "ring.pem"
    path.write_text(text)
    with pytest.raises(ValueError, match=error):
        read_key_ring(path)


def test_configuration_that_cannot_encrypt_is_refused(tmp_path: Path) -> None:
    path = ring(tmp_path, "k1")
    with pytest.raises(ValueError, match="no such key"):
        sealed_store(tmp_path / "r", path, key_id="k2")
    with pytest.raises(ValueError, match="does not exist"):
        sealed_store(tmp_path / "r", tmp_path / "missing.pem")
    with pytest.raises(ValueError, match="needs remote.log.storage.encryption.key.ring.file"):
        storage_from_uri(f"file://{tmp_path}/r", **{"remote.log.storage.encryption.key.id": "k1"})
    with pytest.raises(ValueError, match="expected one of none, zstd"):
        storage_from_uri(f"file://{tmp_path}/r", **{"remote.log.storage.compression.type": "gzip"})


def test_a_kms_of_another_kind_plugs_in(tmp_path: Path) -> None:
    """The KMS plug point, proven with a second implementation: keys held by an HTTP service
    (tests/http_kms.py) that wraps with AES key wrap (RFC 3394) instead of AES-GCM."""
    with HttpKmsServer({"kms-a": b"\x11" * 32}) as kms:
        props = {"remote.log.storage.encryption.kms.class": "tests.http_kms:HttpKms",
                 "remote.log.storage.encryption.key.id": "kms-a", "test.kms.url": kms.url}
        store = storage_from_uri(f"file://{tmp_path}/remote", **props)
        assert isinstance(store.at_rest.keys, KeyEncryptionKeys)
        log = json_log(100)
        metadata = copy(store, log)  # type: ignore[arg-type]
        assert storage_from_uri(f"file://{tmp_path}/remote", **props).fetch_log_segment(metadata, 0) == log
        assert kms.requests == {"wrap": 1, "unwrap": 1}


@given(prefix=st.text(max_size=30), stored=st.integers(0, 2**63 - 1), logical=st.integers(0, 2**63 - 1),
       sealed=st.booleans())
def test_segment_location_round_trips(prefix: str, stored: int, logical: int, sealed: bool) -> None:
    location = SegmentLocation(prefix, stored, sealed, logical if sealed else -1)
    assert SegmentLocation.decode(location.encode()) == location
    assert is_sealed(location.encode()) == sealed


def test_the_bucket_index_reads_sealed_manifests(tmp_path: Path) -> None:
    """Archived topics, read replicas, ``segments --remote`` and the Spark source's ``manifests:``
    read the bucket's own description, sealed like the rest, with the ring."""
    store = sealed_store(tmp_path / "remote", ring(tmp_path, "k1"))
    segment = copy(store, json_log(100))
    finished = dataclasses.replace(segment, state=RemoteLogSegmentState.COPY_SEGMENT_FINISHED)
    store.write_object(partition_manifest_key(TP), encode_manifest([finished], 1))
    assert b"orders" not in (tmp_path / "remote" / partition_manifest_key(TP)).read_bytes()
    index = read_bucket(sealed_store(tmp_path / "remote", tmp_path / "ring.pem"))
    assert index.state.partitions[TP].finished() == [finished]
    with pytest.raises(IntegrityError, match="no key ring"):
        read_bucket(sealed_store(tmp_path / "remote", None, compression="none"))
