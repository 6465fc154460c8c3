"""Key-encryption keys against the bucket: the start-up check, and rotation with ``tiered-proxy keys``
(rewrap without rewriting a segment, removal refused while a key is needed)."""

from __future__ import annotations

from pathlib import Path

import pytest

from proxy.cli import main
from tests.unit.test_at_rest import copy, json_log, ring, sealed_store
from tiering.model import IndexType
from tiering.storage.key_maintenance import check_keys
from tiering.storage.key_ring import key_block, read_key_ring


def test_the_start_up_check_refuses_another_ring(tmp_path: Path) -> None:
    remote = tmp_path / "remote"
    store = sealed_store(remote, ring(tmp_path, "k1"))
    check_keys(store)  # first time: writes the key's check object, reads it back
    assert (remote / "_keys" / "k1.check").is_file()
    check_keys(sealed_store(remote, tmp_path / "ring.pem"))  # the same ring again
    with pytest.raises(ValueError, match="k1 .* is not the key k1 this remote tier was encrypted with"):
        check_keys(sealed_store(remote, ring(tmp_path, "k1", name="impostor.pem")))
    with pytest.raises(ValueError, match="holds data encrypted under keys k1; configure the key ring"):
        check_keys(sealed_store(remote, None, compression="none"))


def test_rotation_rewraps_every_data_key_and_then_lets_the_old_key_go(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    remote = tmp_path / "remote"
    ring_file = ring(tmp_path, "k1")
    old = sealed_store(remote, ring_file)
    logs = [json_log(100 * (i + 1)) for i in range(3)]
    segments = [copy(old, log) for log in logs]
    old.write_object("orders-x/0/partition.manifest", b"TPMF a manifest")
    data_before = {p: p.read_bytes() for p in remote.rglob("*.log")}

    with ring_file.open("a") as f:
        f.write(key_block("k2"))
    config = tmp_path / "proxy.properties"
    config.write_text(f"remote.log.storage.uri=file://{remote}\n"
                      f"remote.log.storage.encryption.key.ring.file={ring_file}\n"
                      "remote.log.storage.encryption.key.id=k2\n")
    keys = ["keys"]

    assert main([*keys, "remove", "--config", str(config), "--key-id", "k1"]) == 1
    refusal = capsys.readouterr().err
    assert "refusing to remove k1: 4 segments and manifests still need it" in refusal
    assert f"needs k1: {segments[0].segment_id.id}" not in refusal  # named by object key, not by uuid
    assert refusal.count("needs k1: orders-") == 4

    assert main([*keys, "rewrap", "--config", str(config)]) == 0
    assert "every data key is under k2 (4 re-wrapped now)" in capsys.readouterr().out
    assert {p: p.read_bytes() for p in remote.rglob("*.log")} == data_before  # no segment rewritten
    assert main([*keys, "rewrap", "--config", str(config)]) == 0
    assert "(0 re-wrapped now)" in capsys.readouterr().out  # resumable: what is done is skipped

    assert main([*keys, "list", "--config", str(config)]) == 0
    listing = capsys.readouterr().out.splitlines()
    assert listing == ["k1\tin ring\t0 segments\t0 manifests", "k2\tactive\t3 segments\t1 manifests"]
    assert main([*keys, "remove", "--config", str(config), "--key-id", "k1"]) == 0
    assert set(read_key_ring(ring_file)) == {"k2"}
    with pytest.raises(SystemExit):
        main([*keys, "remove", "--config", str(config)])  # --key-id is required

    only_new = sealed_store(remote, ring_file, key_id="k2")
    for segment, log in zip(segments, logs, strict=True):
        assert only_new.fetch_log_segment(segment, 0) == log
        assert only_new.fetch_index(segment, IndexType.OFFSET)
    assert only_new.read_object("orders-x/0/partition.manifest") == b"TPMF a manifest"


def test_the_active_key_cannot_be_removed(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    ring_file = ring(tmp_path, "k1")
    config = tmp_path / "proxy.properties"
    config.write_text(f"remote.log.storage.uri=file://{tmp_path}/remote\n"
                      f"remote.log.storage.encryption.key.ring.file={ring_file}\n"
                      "remote.log.storage.encryption.key.id=k1\n")
    assert main(["keys", "remove", "--config", str(config), "--key-id", "k1"]) == 2
    assert "k1 is the active key" in capsys.readouterr().err
    assert main(["keys", "generate", "--key-id", "next"]) == 0
    assert capsys.readouterr().out.startswith("-----BEGIN TIERED STORAGE KEY-----\nKey-Id: next\n\n")


def test_a_read_replica_checks_the_ring_and_writes_nothing(tmp_path: Path) -> None:
    """A read replica's bucket (another cluster's, read-only) is checked against this proxy's ring,
    and gets no check object of this proxy's active key."""
    remote = tmp_path / "remote"
    check_keys(sealed_store(remote, ring(tmp_path, "theirs"), key_id="theirs"))  # the other cluster's proxy
    mine = ring(tmp_path, "mine", name="mine.pem")
    with mine.open("a") as f:
        f.write((tmp_path / "ring.pem").read_text())  # their key added to this proxy's ring
    check_keys(sealed_store(remote, mine, key_id="mine"), writes=False)
    assert sorted(p.name for p in (remote / "_keys").iterdir()) == ["theirs.check"]
    with pytest.raises(ValueError, match="holds data encrypted under keys theirs"):
        check_keys(sealed_store(remote, None, compression="none"), writes=False)
    with pytest.raises(ValueError, match="is not the key theirs"):
        check_keys(sealed_store(remote, ring(tmp_path, "mine", "theirs", name="wrong.pem"), key_id="mine"),
                   writes=False)
