"""Delayed upload (KIP-1241, Kafka 4.4's ``remote.copy.lag.ms`` and ``remote.copy.lag.bytes``)
through the proxy, set with the ordinary admin tools, in front of Apache Kafka 4.4 and 3.9 (which
has no such keys: the proxy keeps them).

A topic with a long time lag is not copied while its data is young, and local retention does not
trim what is held back; a size lag copies all but the newest N bytes; a lag of 0 copies at once.
Whatever the lag, a consumer reads every record from offset 0 through the proxy."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from proxy.describe import describe
from tests.admin_clients import Admin, AdminError
from tests.kafka_cluster import KafkaCluster
from tests.proxy_process import ProxyProcess, start_proxy
from tests.reads_from_zero import read_confluent
from tests.tiering_checks import leader_offsets, produce_numbered, wait_until
from tiering.broker_client import EARLIEST

pytestmark = pytest.mark.integration

EARLIEST_PENDING_UPLOAD = -6
SEGMENT_BYTES = 64 * 1024  # the proxy's segments (its log.segment.bytes)
RECORDS = 3000  # ~1.3 MB of 400-byte values: about 20 segments
INVALID_CONFIG = 40
DYNAMIC_TOPIC_CONFIG = 1  # DescribeConfigs' ConfigSource


@pytest.fixture(params=["4.4", "3.9"])
def broker(request: pytest.FixtureRequest) -> KafkaCluster:
    return request.getfixturevalue("kafka" if request.param == "4.4" else "kafka39")


@pytest.fixture
def proxy(broker: KafkaCluster, tmp_path: Path) -> Iterator[ProxyProcess]:
    started = start_proxy(broker.bootstrap, tmp_path, "--data-dir", str(tmp_path / "data"),
                          "--set", "remote.log.manager.task.interval.ms=200",
                          "--set", f"log.segment.bytes={SEGMENT_BYTES}")
    yield started
    started.stop()


def _row(proxy: ProxyProcess, topic: str):  # noqa: ANN202 - proxy.describe.PartitionRow
    (row,) = describe(proxy.bootstrap, topic)
    return row


def _settled(proxy: ProxyProcess, topic: str, seconds: float = 3) -> None:
    """Some 15 rounds of the remote log manager (at 200 ms) go by."""
    time.sleep(seconds)
    assert "Traceback" not in proxy.log_text(), proxy.log_text()[-3000:]


def test_delayed_upload_follows_the_lag_set_through_the_admin_tools(broker: KafkaCluster, proxy: ProxyProcess,
                                                                   unique_name: str) -> None:
    topic = f"lag-{unique_name}"
    admin = Admin("confluent", proxy.bootstrap)
    try:
        admin.create_topic(topic, 1, {"remote.storage.enable": "true", "local.retention.ms": "3600000",
                                      "remote.copy.lag.ms": "3600000"})
        produce_numbered(proxy.bootstrap, topic, 0, RECORDS, 1, value_bytes=400)
        end = leader_offsets(broker.bootstrap, topic, -1)[0]
        _settled(proxy, topic)

        # 1. An hour's lag (and no size lag: -1 takes local.retention.bytes, unlimited): nothing is copied.
        row = _row(proxy, topic)
        assert (row.ry, row.segments) == (None, 0), row
        assert leader_offsets(broker.bootstrap, topic, EARLIEST) == {0: 0}
        assert leader_offsets(proxy.bootstrap, topic, EARLIEST_PENDING_UPLOAD) == {0: 0}
        described = admin.describe(topic)["remote.copy.lag.ms"]
        assert described.value == "3600000" and described.source == DYNAMIC_TOPIC_CONFIG, described
        assert admin.describe(topic)["remote.copy.lag.bytes"].value == "-1"

        # 2. A size lag as well: all but the newest 4 segments' worth become eligible. Local retention
        # would keep 2 segments' worth, but never trims what is not copied yet.
        admin.set_configs(topic, {"local.retention.bytes": str(4 * SEGMENT_BYTES),
                                  "remote.copy.lag.bytes": str(4 * SEGMENT_BYTES)})
        assert wait_until(lambda: _row(proxy, topic).ry is not None, 30), proxy.log_text()[-3000:]
        _settled(proxy, topic)
        row = _row(proxy, topic)
        per_offset = row.remote_bytes / (row.ry + 1 - row.rx)
        behind = (end - row.ry - 1) * per_offset  # bytes of the log past Ry
        # Held back: at least the lag (less the broker counting bytes below its log start), at most
        # the lag plus a segment still open in the copier and one batch.
        assert 3 * SEGMENT_BYTES <= behind <= 6 * SEGMENT_BYTES, (row, end)
        log_start = leader_offsets(broker.bootstrap, topic, EARLIEST)[0]
        assert 0 < log_start <= row.ry + 1, (log_start, row)
        assert leader_offsets(proxy.bootstrap, topic, EARLIEST_PENDING_UPLOAD) == {0: row.ry + 1}

        # 3. No lag: copied up to what the copier holds open, as without KIP-1241.
        admin.set_configs(topic, {"remote.copy.lag.ms": "0"})
        held = row.ry
        assert wait_until(lambda: (_row(proxy, topic).ry or 0) > held + 200, 30), (_row(proxy, topic), held)
    finally:
        admin.close()
    got = read_confluent(proxy.bootstrap, topic, 1, RECORDS, 90)
    assert sorted(offset for _, offset, _, _ in got) == list(range(RECORDS))


def test_a_lag_longer_than_local_retention_is_refused_as_kafka_refuses_it(proxy: ProxyProcess,
                                                                         unique_name: str) -> None:
    topic = f"lag-refused-{unique_name}"
    admin = Admin("confluent", proxy.bootstrap)
    try:
        admin.create_topic(topic, 1, {"remote.storage.enable": "true", "local.retention.ms": "60000"})
        with pytest.raises(AdminError) as refused:
            admin.set_configs(topic, {"remote.copy.lag.ms": "120000"})
        assert refused.value.code == INVALID_CONFIG
        assert refused.value.message == ("Invalid value 120000 for configuration remote.copy.lag.ms: Value must not "
                                         "exceed local.retention.ms (effective value: 60000)"), refused.value.message
        with pytest.raises(AdminError) as refused:
            admin.set_configs(topic, {"remote.copy.lag.bytes": "-2"})
        assert refused.value.code == INVALID_CONFIG
        admin.set_configs(topic, {"remote.copy.lag.ms": "60000", "remote.copy.lag.bytes": "-1"})
        assert admin.describe(topic)["remote.copy.lag.ms"].value == "60000"
    finally:
        admin.close()
