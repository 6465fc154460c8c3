"""A data dir belongs to one remote tier: ``tiered-proxy serve`` over a data dir whose metadata store
describes another remote tier refuses to start, with one message, and changes nothing."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

from tests.admin_clients import Admin
from tests.proxy_process import start_proxy
from tests.tiering_checks import wait_until
from tiering.metadata.view import load_metadata


def _files(directory: Path) -> dict[str, bytes]:
    return {str(p.relative_to(directory)): p.read_bytes() for p in sorted(directory.rglob("*")) if p.is_file()}


def test_serve_refuses_a_data_dir_of_another_remote_tier(noida, tmp_path, unique_name):
    data = (tmp_path / "data").resolve()
    remote = f"file://{data}/remote"
    topic = f"record-{unique_name}"
    proxy = start_proxy(noida.bootstrap, tmp_path / "first", "--data-dir", str(data), "--remote", remote)
    try:
        admin = Admin("confluent", proxy.bootstrap)
        admin.create_topic(topic, 1, {"remote.storage.enable": "true"})  # a record in the journal
        admin.close()
        assert wait_until(lambda: topic in load_metadata(f"file://{data}/metadata").topics, 30)
    finally:
        assert proxy.stop() == 0
    before = _files(data / "metadata")
    assert "remote_tier.properties" in before

    started = time.monotonic()
    refused = subprocess.run(
        [sys.executable, "-m", "proxy.cli", "serve", "--bootstrap-servers", noida.bootstrap,
         "--listen", "127.0.0.1:0", "--data-dir", str(data), "--remote", "s3://b/p/"],
        capture_output=True, text=True, timeout=30)
    assert refused.returncode == 2, refused.stderr
    assert time.monotonic() - started < 10
    assert refused.stderr.splitlines()[-1] == (
        f"tiered-proxy: configuration error: the metadata store file://{data}/metadata describes remote tier "
        f"{remote}, not s3://b/p (remote.log.storage.uri / --remote); use the --remote it was created with, "
        "or another --data-dir / --metadata for a new remote tier")
    assert _files(data / "metadata") == before

    # With the --remote it was created with (spelled with a trailing slash) it starts, store intact.
    again = start_proxy(noida.bootstrap, tmp_path / "again", "--data-dir", str(data), "--remote", remote + "/")
    try:
        assert topic in load_metadata(f"file://{data}/metadata").topics
    finally:
        assert again.stop() == 0
