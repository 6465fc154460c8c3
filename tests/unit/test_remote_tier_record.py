"""A metadata store belongs to one remote tier: ``serve`` records the (canonical, credential-free)
storage URI with the store and refuses to start over it with another one."""

from __future__ import annotations

import logging
import uuid
from pathlib import Path

import pytest

from tiering.metadata.journal_store import JOURNAL_NAME, FileMetadataStore
from tiering.metadata.remote_tier_record import (
    REMOTE_TIER_RECORD,
    RemoteTierMismatchError,
    canonical_storage_uri,
    check_remote_tier,
)
from tiering.metadata.view import load_metadata
from tiering.model import TieringState, TopicTieringState
from tiering.service import TieringService


@pytest.mark.parametrize("given, canonical", [
    ("file:///data/remote", "file:///data/remote"),
    ("file:///data/remote/", "file:///data/remote"),
    ("file://localhost/data/remote", "file:///data/remote"),
    ("file:/data/./x/../remote//", "file:///data/remote"),
    ("FILE:///data/remote", "file:///data/remote"),
    ("s3://bucket/prefix/", "s3://bucket/prefix"),
    ("s3://bucket", "s3://bucket"),
    ("s3://bucket/", "s3://bucket"),
    ("s3://bucket/p?region=eu-west-1&endpoint_url=http://minio:9000",
     "s3://bucket/p?endpoint_url=http://minio:9000&region=eu-west-1"),
    ("s3://bucket/p/?endpoint_url=http://minio:9000&region=eu-west-1",
     "s3://bucket/p?endpoint_url=http://minio:9000&region=eu-west-1"),
    # Credentials never reach the record: user info, in the URI or a nested endpoint, and
    # secret-looking parameters.
    ("s3://AKIAXYZ:s3cr3t@bucket/p", "s3://bucket/p"),
    ("s3://bucket/p?endpoint_url=http://user:s3cr3t@minio:9000", "s3://bucket/p?endpoint_url=http://minio:9000"),
    ("s3://bucket/p?secret_access_key=s3cr3t&session_token=t&region=r", "s3://bucket/p?region=r"),
])
def test_canonical_storage_uri(given, canonical):
    assert canonical_storage_uri(given) == canonical
    assert "s3cr3t" not in canonical_storage_uri(given)


def _record(directory: Path) -> str:
    return (directory / REMOTE_TIER_RECORD).read_text()


def _store_with_data(directory: Path) -> bytes:
    store = FileMetadataStore(directory)
    store.put_topic_tiering_state(TopicTieringState("t", uuid.uuid4(), 1, TieringState.ENABLED))
    store.close()
    return (directory / JOURNAL_NAME).read_bytes()


def test_a_new_store_records_its_remote_tier(tmp_path, caplog):
    caplog.set_level(logging.INFO, "tiering.metadata.remote_tier_record")
    metadata = tmp_path / "metadata"
    check_remote_tier(tmp_path, f"file://{tmp_path}/remote/", f"file://{metadata}")
    assert f"remote.log.storage.uri=file://{tmp_path}/remote\n" in _record(metadata)
    assert "recorded in" in caplog.text and "adopting" not in caplog.text
    assert not list(metadata.glob("*.tmp"))
    FileMetadataStore(metadata).close()  # the store opens beside its record
    # The same tier, spelled another way, is the same tier.
    check_remote_tier(tmp_path, f"file://localhost{tmp_path}/remote", f"file://{metadata}/")


def test_a_store_from_an_older_version_adopts_the_current_tier(tmp_path, caplog):
    caplog.set_level(logging.INFO, "tiering.metadata.remote_tier_record")
    metadata = tmp_path / "metadata"
    journal = _store_with_data(metadata)
    check_remote_tier(tmp_path, "s3://bucket/p?region=r", f"file://{metadata}")
    assert "remote.log.storage.uri=s3://bucket/p?region=r\n" in _record(metadata)
    assert "adopting s3://bucket/p?region=r" in caplog.text
    assert (metadata / JOURNAL_NAME).read_bytes() == journal
    assert FileMetadataStore(metadata).topic_tiering_state("t") is not None


def test_another_remote_tier_is_refused_and_nothing_changes(tmp_path):
    metadata = tmp_path / "metadata"
    journal = _store_with_data(metadata)
    check_remote_tier(tmp_path, f"file://{tmp_path}/remote", f"file://{metadata}")
    record = _record(metadata)
    with pytest.raises(RemoteTierMismatchError) as refused:
        check_remote_tier(tmp_path, "s3://b/p/", f"file://{metadata}")
    assert isinstance(refused.value, ValueError)  # the CLI's configuration error, exit 2
    assert str(refused.value) == (
        f"the metadata store file://{metadata} describes remote tier file://{tmp_path}/remote, not s3://b/p "
        "(remote.log.storage.uri / --remote); use the --remote it was created with, or another "
        "--data-dir / --metadata for a new remote tier")
    assert _record(metadata) == record and (metadata / JOURNAL_NAME).read_bytes() == journal


def test_the_message_never_shows_credentials(tmp_path):
    metadata = tmp_path / "metadata"
    check_remote_tier(tmp_path, "s3://a/p?endpoint_url=http://u:s3cr3t@h:9000", f"file://{metadata}")
    with pytest.raises(RemoteTierMismatchError) as refused:
        check_remote_tier(tmp_path, "s3://key:s3cr3t@b/p", f"file://{metadata}")
    assert "s3cr3t" not in str(refused.value) and "s3cr3t" not in _record(metadata)
    assert "describes remote tier s3://a/p?endpoint_url=http://h:9000, not s3://b/p " in str(refused.value)


def test_a_topic_store_records_its_tier_beside_its_snapshots(tmp_path):
    snapshots = tmp_path / "metadata-snapshots"
    check_remote_tier(tmp_path, "s3://b/one", "topic://rlmm")
    assert "remote.log.storage.uri=s3://b/one\n" in (snapshots / f"rlmm.{REMOTE_TIER_RECORD}").read_text()
    check_remote_tier(tmp_path, "s3://b/two", "topic://other")  # another store, another record
    with pytest.raises(RemoteTierMismatchError) as refused:
        check_remote_tier(tmp_path, "s3://b/two", "topic://rlmm")
    assert str(refused.value).startswith(
        f"the metadata store topic://rlmm (snapshots in {snapshots}) describes remote tier s3://b/one, not s3://b/two ")
    check_remote_tier(tmp_path, "s3://b/x", "topic:")  # the default topic
    assert (snapshots / f"__remote_log_metadata.{REMOTE_TIER_RECORD}").exists()


def test_read_only_readers_write_no_record(tmp_path):
    metadata = tmp_path / "metadata"
    _store_with_data(metadata)
    assert load_metadata(f"file://{metadata}").topics["t"].state == TieringState.ENABLED
    assert not (metadata / REMOTE_TIER_RECORD).exists()


def test_serve_refuses_a_data_dir_of_another_remote_tier(tmp_path):
    """Through TieringService.from_properties, as ``serve`` builds it: the default data dir's
    store is recorded with the default remote folder; another --remote over it is refused."""
    props = {"proxy.data.dir": str(tmp_path / "data")}
    service = TieringService.from_properties("127.0.0.1:1", props)
    assert service is not None
    service.stop()
    remote = f"file://{(tmp_path / 'data').resolve()}/remote"
    assert f"remote.log.storage.uri={remote}\n" in _record(tmp_path / "data" / "metadata")
    with pytest.raises(RemoteTierMismatchError, match=f"describes remote tier {remote}, not file://{tmp_path}/other"):
        TieringService.from_properties("127.0.0.1:1", {**props, "remote.log.storage.uri": f"file://{tmp_path}/other"})
    assert not (tmp_path / "other").exists()  # refused before the remote tier was touched
    again = TieringService.from_properties("127.0.0.1:1", {**props, "remote.log.storage.uri": remote + "/"})
    assert again is not None
    again.stop()
