"""The remote tier describes itself: after a proxy tiered topics on Apache Kafka and was killed
with -9, ``tiered-proxy segments --remote`` lists, from the bucket alone (data dir wiped, no
cluster named), every segment the metadata store held, and the bucket's manifests rebuild the
topics' configs and KIP-950 states too. On the local-folder tier and on S3 (SeaweedFS)."""

from __future__ import annotations

import shutil
import signal
import subprocess
import sys
import time

import pytest

from tests.admin_clients import Admin
from tests.integration.s3_server import DUMMY_CREDENTIALS, REGION, new_bucket
from tests.proxy_process import start_proxy
from tests.tiering_checks import create_tiered_topic, produce_numbered, wait_until
from tiering.broker_client import BrokerClient
from tiering.metadata.journal_store import JOURNAL_NAME, read_journal
from tiering.metadata.manifests import read_bucket
from tiering.metadata.state import MetadataState
from tiering.model import TieringState
from tiering.storage.uri import storage_from_uri

S3_KEYS = {"remote.log.storage.s3.access.key.id": DUMMY_CREDENTIALS["aws_access_key_id"],
           "remote.log.storage.s3.secret.access.key": DUMMY_CREDENTIALS["aws_secret_access_key"]}


def _journal_state(data_dir) -> MetadataState:
    state = MetadataState()
    path = data_dir / "metadata" / JOURNAL_NAME
    for record in read_journal(path.read_bytes())[0] if path.exists() else ():
        state.apply(record)
    return state


def _segments_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "proxy.cli", "segments", *args],
                          capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("tier", ["local", "s3"])
def test_the_bucket_alone_lists_every_segment_after_kill_9(kafka, tmp_path, unique_name, tier, s3_endpoint):
    data_dir = tmp_path / "data"
    if tier == "s3":
        remote = f"s3://{new_bucket(s3_endpoint)}/tiered?endpoint_url={s3_endpoint}&region={REGION}"
        settings = [arg for key, value in S3_KEYS.items() for arg in ("--set", f"{key}={value}")]
    else:
        remote, settings = f"file://{tmp_path}/remote", []
    proxy = start_proxy(kafka.bootstrap, tmp_path / "proxy", "--data-dir", str(data_dir), "--remote", remote,
                        "--set", "remote.log.manager.task.interval.ms=200", "--set", "proxy.manifest.interval.ms=300",
                        *settings)
    kept, disabled = f"{unique_name}-kept", f"{unique_name}-disabled"
    try:
        create_tiered_topic(proxy.bootstrap, kept, partitions=2, **{"local.retention.ms": "600000"})
        create_tiered_topic(proxy.bootstrap, disabled, partitions=1)
        produce_numbered(proxy.bootstrap, kept, 0, 6000, 2)
        produce_numbered(proxy.bootstrap, disabled, 0, 3000, 1)
        client = BrokerClient(kafka.bootstrap)

        def tiered(topic: str, at_least: int) -> bool:
            state = _journal_state(data_dir)
            return sum(len(p.finished()) for tp, p in state.partitions.items() if tp.topic == topic) >= at_least

        assert wait_until(lambda: tiered(kept, 4) and tiered(disabled, 2), 90), proxy.log_path.read_text()[-3000:]
        Admin("confluent", proxy.bootstrap).set_configs(
            disabled, {"remote.storage.enable": "false", "remote.log.disable.policy": "retain"})
        client.close()
        expected = _journal_state(data_dir)
        assert expected.topics[disabled].state in (TieringState.DISABLING, TieringState.DISABLED)

        storage = storage_from_uri(remote, **S3_KEYS)
        journal = data_dir / "metadata" / JOURNAL_NAME
        last = {"size": -1, "since": time.monotonic()}
        try:
            def settled_and_described() -> bool:
                """The copiers have copied everything (no write for 2 s) and the bucket says so."""
                size = journal.stat().st_size
                if size != last["size"]:
                    last.update(size=size, since=time.monotonic())
                    return False
                now = _journal_state(data_dir)
                return (time.monotonic() - last["since"] > 2
                        and list(read_bucket(storage).state.snapshot_records()) == list(now.snapshot_records()))

            assert wait_until(settled_and_described, 60), proxy.log_path.read_text()[-3000:]
            before = _segments_cli("--metadata", f"file://{data_dir}/metadata")
            expected = _journal_state(data_dir)
            proxy.stop(signal.SIGKILL)
        finally:
            storage.close()
    finally:
        proxy.stop()
    assert before.returncode == 0, before.stderr

    shutil.rmtree(data_dir)
    config = tmp_path / "s3.properties"
    config.write_text("".join(f"{key}={value}\n" for key, value in S3_KEYS.items()))
    after = _segments_cli("--remote", remote, "--command-config", str(config))
    assert after.returncode == 0, after.stderr
    assert after.stdout == before.stdout
    assert after.stdout.count("COPY_SEGMENT_FINISHED") >= 6
    assert "read from the remote tier alone: 2 topics, 3 partitions" in after.stderr, after.stderr

    storage = storage_from_uri(remote, **S3_KEYS)
    try:
        rebuilt = read_bucket(storage)
        listed, fetched = storage.requests.snapshot()[0].get("LIST"), storage.requests.snapshot()[0].get("GET")
    finally:
        storage.close()
    assert rebuilt.state.topics == expected.topics  # configs, tiered epochs, KIP-950 states
    assert rebuilt.state.topics[kept].config_map["local.retention.ms"] == "600000"
    assert list(rebuilt.state.snapshot_records()) == list(expected.snapshot_records())
    # One LIST for the topics and one per topic; one GET per manifest (2 topics, 3 partitions).
    assert (listed, fetched) == (3, 5)
