"""The tiered-storage broker keys the proxy keeps, altered while it runs as Kafka's are:
``kafka-configs.sh --entity-type brokers --entity-default --alter`` through the proxy, in front of
Apache Kafka 4.4 and 3.9.

A cluster-wide delayed upload (KIP-1241's ``log.remote.copy.lag.ms``) set that way holds back the
copier of a topic that sets no lag of its own, shows in the brokers' and the topic's DescribeConfigs
with Kafka's sources, survives a restart of the proxy, and once deleted lets the copier catch up.
Keys Kafka does not change dynamically, a key on one broker, and a bad value are refused with what
to do; the brokers never see the proxy's keys, and the rest of a request reaches them. Kafka 3.9's
``kafka-configs.sh`` alters brokers with the old AlterConfigs (the resource's whole set, as it
described it), 4.4's with IncrementalAlterConfigs: both are run."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest

from proxy.describe import describe
from tests.admin_clients import Admin
from tests.kafka_cluster import KafkaCluster
from tests.proxy_process import ProxyProcess, start_proxy
from tests.reads_from_zero import read_confluent
from tests.tiering_checks import leader_offsets, produce_numbered, wait_until

pytestmark = pytest.mark.integration

SEGMENT_BYTES = 64 * 1024
RECORDS = 1500  # 400-byte values: about 10 of the proxy's segments
LAG = "3600000"
# A broker key of the brokers' own, set to its default (harmless to the shared test cluster).
THEIRS = "log.cleaner.max.compaction.lag.ms"


@pytest.fixture(params=["4.4", "3.9"])
def broker(request: pytest.FixtureRequest) -> KafkaCluster:
    return request.getfixturevalue("kafka" if request.param == "4.4" else "kafka39")


def _serve(broker: KafkaCluster, tmp_path: Path) -> ProxyProcess:
    return start_proxy(broker.bootstrap, tmp_path, "--data-dir", str(tmp_path / "data"),
                       "--set", "remote.log.manager.task.interval.ms=200", "--set", f"log.segment.bytes={SEGMENT_BYTES}",
                       "--set", "remote.log.manager.fetch.max.bytes.per.second=50000000")


def _configs(broker: KafkaCluster, bootstrap: str, *args: str) -> subprocess.CompletedProcess:
    return broker.run_tool("configs", "--bootstrap-server", bootstrap, *args, timeout=60)


def _output(done: subprocess.CompletedProcess) -> str:
    return f"exit {done.returncode}\n{done.stdout}\n{done.stderr}"


def _described(broker: KafkaCluster, bootstrap: str, *entity: str) -> dict[str, str]:
    """key -> the line ``kafka-configs.sh --describe`` prints for it."""
    done = _configs(broker, bootstrap, *entity, "--describe", *(["--all"] if "--entity-default" not in entity else []))
    assert done.returncode == 0, _output(done)
    return {line.strip().split("=", 1)[0]: line.strip() for line in done.stdout.splitlines()
            if "=" in line and line.startswith("  ")}


def _ry(proxy: ProxyProcess, topic: str) -> int:
    (row,) = describe(proxy.bootstrap, topic)
    return -1 if row.ry is None else row.ry


def test_cluster_wide_delayed_upload_set_through_the_admin_tools(broker: KafkaCluster, tmp_path: Path,
                                                                 unique_name: str) -> None:
    topic = f"cluster-lag-{unique_name}"
    default = ("--entity-type", "brokers", "--entity-default")
    proxy = _serve(broker, tmp_path)
    try:
        admin = Admin("confluent", proxy.bootstrap)
        try:
            admin.create_topic(topic, 1, {"remote.storage.enable": "true", "local.retention.ms": LAG})
        finally:
            admin.close()
        produce_numbered(proxy.bootstrap, topic, 0, RECORDS, 1, value_bytes=400)
        assert wait_until(lambda: _ry(proxy, topic) > RECORDS // 2, 30), proxy.log_text()[-3000:]

        # 1. The cluster-wide lag, and a key of the brokers' own in the same request.
        done = _configs(broker, proxy.bootstrap, *default, "--alter", "--add-config",
                        f"log.remote.copy.lag.ms={LAG},{THEIRS}=9223372036854775807")
        assert done.returncode == 0, _output(done)
        try:
            via_proxy, direct = _described(broker, proxy.bootstrap, *default), _described(broker, broker.bootstrap, *default)
            assert via_proxy["log.remote.copy.lag.ms"].startswith(f"log.remote.copy.lag.ms={LAG} "), via_proxy
            assert f"DYNAMIC_DEFAULT_BROKER_CONFIG:log.remote.copy.lag.ms={LAG}" in via_proxy["log.remote.copy.lag.ms"]
            assert "log.remote.copy.lag.ms" not in direct and THEIRS in direct, direct  # theirs reached them, ours not
            node = _described(broker, proxy.bootstrap, "--entity-type", "brokers", "--entity-name",
                              str(broker.brokers[0].node_id))
            assert f"DYNAMIC_DEFAULT_BROKER_CONFIG:log.remote.copy.lag.ms={LAG}" in node["log.remote.copy.lag.ms"]
            assert "STATIC_BROKER_CONFIG:remote.log.manager.fetch.max.bytes.per.second=50000000" in \
                node["remote.log.manager.fetch.max.bytes.per.second"]
            on_topic = _described(broker, proxy.bootstrap, "--entity-type", "topics", "--entity-name", topic)
            assert on_topic["remote.copy.lag.ms"].startswith(f"remote.copy.lag.ms={LAG} "), on_topic["remote.copy.lag.ms"]
            assert f"DYNAMIC_DEFAULT_BROKER_CONFIG:log.remote.copy.lag.ms={LAG}" in on_topic["remote.copy.lag.ms"]

            # 2. The copier follows it: what is produced now is young and stays on the brokers.
            time.sleep(1)  # some rounds: the copier may finish the segment it held open
            held = _ry(proxy, topic)
            produce_numbered(proxy.bootstrap, topic, RECORDS, RECORDS, 1, value_bytes=400)
            time.sleep(3)
            assert _ry(proxy, topic) == held, (held, _ry(proxy, topic))
            assert leader_offsets(proxy.bootstrap, topic, -6) == {0: held + 1}  # earliest pending upload

            # 3. Refused, with what to do; nothing reaches the brokers.
            for args, words in [
                (("--add-config", "remote.log.manager.thread.pool.size=2"), "Cannot update these configs dynamically"),
                (("--add-config", "remote.log.reader.threads=0"), "remote.log.reader.threads must be at least 1"),
                (("--add-config", "log.local.retention.ms=soon"), "log.local.retention.ms must be an integer"),
            ]:
                refused = _configs(broker, proxy.bootstrap, *default, "--alter", *args)
                assert refused.returncode != 0 and words in _output(refused), _output(refused)
            refused = _configs(broker, proxy.bootstrap, "--entity-type", "brokers", "--entity-name",
                               str(broker.brokers[0].node_id), "--alter", "--add-config", "log.remote.copy.lag.ms=5")
            assert refused.returncode != 0 and "cluster-wide defaults (--entity-default)" in _output(refused)
            assert "remote.log.reader.threads" not in _described(broker, proxy.bootstrap, *default)

            # 4. Kept across a restart of the proxy.
            proxy.stop()
            proxy = _serve(broker, tmp_path)
            assert f"log.remote.copy.lag.ms={LAG} " in _described(broker, proxy.bootstrap, *default)["log.remote.copy.lag.ms"]
            time.sleep(2)
            assert _ry(proxy, topic) == held
        finally:
            done = _configs(broker, proxy.bootstrap, *default, "--alter", "--delete-config",
                            f"log.remote.copy.lag.ms,{THEIRS}")
        assert done.returncode == 0, _output(done)

        # 5. Deleted: the copier catches up.
        assert "log.remote.copy.lag.ms" not in _described(broker, proxy.bootstrap, *default)
        assert THEIRS not in _described(broker, broker.bootstrap, *default)
        assert wait_until(lambda: _ry(proxy, topic) > held + RECORDS // 2, 30), (held, _ry(proxy, topic))
        got = read_confluent(proxy.bootstrap, topic, 1, 2 * RECORDS, 90)
        assert sorted(offset for _, offset, _, _ in got) == list(range(2 * RECORDS))
        assert "Traceback" not in proxy.log_text(), proxy.log_text()[-3000:]
    finally:
        proxy.stop()
