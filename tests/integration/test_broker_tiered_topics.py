"""Topics the brokers tier themselves are theirs (tiering/topic_owner.py), on Apache Kafka 4.4 and
3.9 with Kafka's own tiered storage (LocalTieredStorage): the proxy in front, with default settings
and with ``--tier-all-topics``, never copies, trims or serves them, and a topic changes hands in
either direction without losing a record or serving one twice.

Every read counts records by offset and content: directly at the broker, through the proxy, and
(hand-over to the brokers) with the ``tiered-kafka`` Spark source."""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from proxy.describe import describe
from tests.admin_clients import Admin, AdminError
from tests.kafka_cluster import KafkaCluster
from tests.proxy_process import ProxyProcess, start_proxy
from tests.reads_from_zero import read_confluent
from tests.tiering_checks import create_topic, leader_offsets, message_number, produce_numbered, wait_until
from tiering.broker_client import EARLIEST, LATEST
from tiering.metadata.view import load_metadata

EARLIEST_LOCAL, LATEST_TIERED, EARLIEST_PENDING_UPLOAD = -4, -5, -6
PARTITIONS = 2
SEGMENT_BYTES = str(32 * 1024)
INVALID_CONFIG = 40
# Topic configs that make Kafka tier a topic itself and keep one segment locally.
BROKER_TIERED = {"remote.storage.enable": "true", "segment.bytes": SEGMENT_BYTES, "local.retention.bytes": "1",
                 "retention.ms": "-1", "retention.bytes": "-1"}


@pytest.fixture(params=["4.4", "3.9"])
def native(request: pytest.FixtureRequest) -> KafkaCluster:
    """One Kafka node with its own tiered storage on, per version."""
    return request.getfixturevalue("kafka_native_tiered" if request.param == "4.4" else "kafka39_native_tiered")


def _proxy(cluster: KafkaCluster, work: Path, *extra: str) -> ProxyProcess:
    return start_proxy(cluster.bootstrap, work, "--data-dir", str(work / "data"),
                       "--set", "remote.log.manager.task.interval.ms=200", *extra)


@pytest.fixture
def stopping() -> Iterator[list[ProxyProcess]]:
    """Proxies a test started, stopped at its end whatever happened."""
    started: list[ProxyProcess] = []
    yield started
    for proxy in started:
        proxy.stop()


def _produce(bootstrap: str, topic: str, start: int, count: int) -> None:
    """Idempotent, so that numbers rise within a partition: a plain producer's retry of a batch the
    new topic's leader refused at first put records 0..77 after later ones (seen once in CI)."""
    produce_numbered(bootstrap, topic, start, count, PARTITIONS, value_bytes=400,
                     client={"enable.idempotence": "true"})


def _read(bootstrap: str, topic: str, expected: int) -> dict[int, list[int]]:
    """partition -> the offsets a confluent consumer read from EARLIEST, each record checked to be
    the one produced at that offset's place (numbers rise by PARTITIONS within a partition)."""
    got: dict[int, list[int]] = {}
    numbers: dict[int, list[int]] = {}
    for partition, offset, _key, value in read_confluent(bootstrap, topic, PARTITIONS, expected, 90):
        got.setdefault(partition, []).append(offset)
        numbers.setdefault(partition, []).append(message_number(value))
    for partition, found in numbers.items():
        offsets = got[partition]
        assert found == sorted(found) and all(n % PARTITIONS == partition for n in found), (
            f"{bootstrap} {topic}-{partition}: read out of order, offsets {offsets[:3]}.. of {len(offsets)} "
            f"({len(offsets) - len(set(offsets))} repeated), message numbers {found[:3]}..")
    return got


def _exactly_once(got: dict[int, list[int]], starts: dict[int, int], ends: dict[int, int]) -> None:
    for p in range(PARTITIONS):
        offsets = got.get(p, [])
        assert offsets == list(range(starts[p], ends[p])), (
            f"partition {p}: read {len(offsets)} offsets ({offsets[:1]}..{offsets[-1:]}), expected "
            f"{starts[p]}..{ends[p] - 1}; duplicates: {len(offsets) - len(set(offsets))}")


def _kafka_tiered(cluster: KafkaCluster, topic: str, past: dict[int, int] | None = None) -> dict[int, int]:
    """Wait until Kafka's own local log start (EARLIEST_LOCAL) of every partition is above ``past``
    (0 by default): Kafka tiered and deleted local segments itself."""
    past = past or dict.fromkeys(range(PARTITIONS), 0)
    assert wait_until(lambda: all(o > past[p] for p, o in leader_offsets(cluster.bootstrap, topic,
                                                                          EARLIEST_LOCAL).items()), 90), (
        f"Kafka did not tier {topic}: local log start {leader_offsets(cluster.bootstrap, topic, EARLIEST_LOCAL)}")
    return leader_offsets(cluster.bootstrap, topic, EARLIEST_LOCAL)


def _proxy_objects(data_dir: Path, topic: str) -> list[Path]:
    remote = data_dir / "remote"
    return [p for p in remote.rglob("*") if p.is_file() and topic in str(p.relative_to(remote))] \
        if remote.exists() else []


def _rounds_logged(proxy: ProxyProcess, text: str, timeout: float = 30) -> None:
    assert wait_until(lambda: text in proxy.log_text(), timeout), proxy.log_text()[-3000:]
    time.sleep(3)  # some 15 more rounds of the remote log manager at 200 ms


@pytest.mark.parametrize("tier_all", [False, True], ids=["default", "tier-all-topics"])
def test_a_topic_the_brokers_tier_is_theirs(native: KafkaCluster, tier_all: bool, unique_name: str,
                                            tmp_path: Path, stopping: list[ProxyProcess]) -> None:
    topic = f"native-{unique_name}"
    create_topic(native.bootstrap, topic, PARTITIONS, **BROKER_TIERED)
    _produce(native.bootstrap, topic, 0, 3000)
    local_start = _kafka_tiered(native, topic)
    ends = leader_offsets(native.bootstrap, topic, LATEST)

    proxy = _proxy(native, tmp_path, *(["--tier-all-topics"] if tier_all else []))
    stopping.append(proxy)
    time.sleep(6)  # some 30 rounds of the remote log manager at 200 ms

    # Kafka's own remote log start stayed where Kafka put it; direct readers read everything.
    zero = dict.fromkeys(range(PARTITIONS), 0)
    assert leader_offsets(native.bootstrap, topic, EARLIEST) == zero
    _exactly_once(_read(native.bootstrap, topic, 3000), zero, ends)
    # Through the proxy too, each record once, the old ones from Kafka's own remote storage.
    _exactly_once(_read(proxy.bootstrap, topic, 3000), zero, ends)
    # The proxy holds nothing of the topic and recorded nothing for it.
    assert _proxy_objects(tmp_path / "data", topic) == []
    assert topic not in load_metadata(f"file://{tmp_path / 'data' / 'metadata'}").topics
    # ListOffsets through the proxy are the broker's own: -4 its local log start, -5 its remote end.
    assert leader_offsets(proxy.bootstrap, topic, EARLIEST_LOCAL) == \
        leader_offsets(native.bootstrap, topic, EARLIEST_LOCAL)
    assert leader_offsets(proxy.bootstrap, topic, LATEST_TIERED) == \
        leader_offsets(native.bootstrap, topic, LATEST_TIERED)
    # -6 (KIP-1023) is the broker's too; a broker before ListOffsets v11 (3.9) is asked its -5.
    pending = leader_offsets(native.bootstrap, topic, EARLIEST_PENDING_UPLOAD) if native.version >= "4.4" else \
        {p: o + 1 for p, o in leader_offsets(native.bootstrap, topic, LATEST_TIERED).items()}
    assert leader_offsets(proxy.bootstrap, topic, EARLIEST_PENDING_UPLOAD) == pending
    assert all(o > 0 for o in pending.values()), pending
    assert proxy.log_text().count(f"topic {topic} is tiered by the brokers") == 1, proxy.log_text()[-3000:]
    rows = describe(proxy.bootstrap, topic)
    assert [(r.tiered_by, r.state) for r in rows] == [("brokers", "-")] * PARTITIONS
    assert all(r.rx == 0 and r.ry is not None and r.lx >= local_start[r.partition] for r in rows), rows

    # Through the proxy, remote.storage.enable=true would make the proxy tier it too: refused.
    admin = Admin("confluent", proxy.bootstrap)
    try:
        with pytest.raises(AdminError) as refused:
            admin.set_configs(topic, {"remote.storage.enable": "true"})
    finally:
        admin.close()
    assert refused.value.code == INVALID_CONFIG
    assert "tiered by the brokers" in refused.value.message


@pytest.fixture(scope="module")
def spark():
    pyspark_sql = pytest.importorskip("pyspark.sql")
    from tiering.spark.source import TieredKafkaDataSource

    os.environ["PYSPARK_PYTHON"] = sys.executable  # executors run this venv's interpreter
    session = (pyspark_sql.SparkSession.builder.master("local[2]").appName("broker-tiered-topics")
               .config("spark.ui.enabled", "false").getOrCreate())
    session.dataSource.register(TieredKafkaDataSource)
    yield session
    session.stop()


def _read_spark(spark, proxy: ProxyProcess, data_dir: Path, topic: str) -> dict[int, list[int]]:  # noqa: ANN001
    """partition -> offsets the tiered-kafka source read: the proxy's tier straight from storage,
    the rest through the proxy."""
    rows = (spark.read.format("tiered-kafka").option("kafka.bootstrap.servers", proxy.bootstrap)
            .option("subscribe", topic).option("remote.log.storage.uri", f"file://{data_dir / 'remote'}")
            .option("remote.log.metadata.uri", f"file://{data_dir / 'metadata'}").load()
            .select("partition", "offset", "value").collect())
    got: dict[int, list[int]] = {}
    for row in sorted(rows, key=lambda r: (r.partition, r.offset)):
        assert message_number(bytes(row.value)) % PARTITIONS == row.partition
        got.setdefault(row.partition, []).append(row.offset)
    return got


def test_a_topic_handed_from_the_proxy_to_the_brokers(native: KafkaCluster, unique_name: str, tmp_path: Path,
                                                       stopping: list[ProxyProcess], spark) -> None:  # noqa: ANN001
    topic = f"to-brokers-{unique_name}"
    proxy = _proxy(native, tmp_path)
    stopping.append(proxy)
    create_topic(proxy.bootstrap, topic, PARTITIONS, **{"remote.storage.enable": "true", "segment.bytes": SEGMENT_BYTES,
                                                        "local.retention.bytes": str(64 * 1024), "retention.ms": "-1"})
    _produce(proxy.bootstrap, topic, 0, 2000)
    assert wait_until(lambda: all(o > 0 for o in leader_offsets(native.bootstrap, topic, EARLIEST).values()), 60), \
        proxy.log_text()[-3000:]

    # The operator turns Kafka's own tiering on for the topic, at the brokers.
    direct = Admin("confluent", native.bootstrap)
    try:
        direct.set_configs(topic, {"remote.storage.enable": "true", "local.retention.bytes": "1"})
    finally:
        direct.close()
    _rounds_logged(proxy, f"topic {topic} is tiered by the brokers")
    handed = leader_offsets(native.bootstrap, topic, EARLIEST)  # the brokers' log start at the hand-over
    _produce(proxy.bootstrap, topic, 2000, 2000)
    _kafka_tiered(native, topic, past=handed)  # Kafka tiers the topic itself, from there on

    # The proxy never moved the brokers' log start again; every record is read once, the oldest
    # from the proxy's tier, the rest from the brokers (their own remote storage, then local log).
    assert leader_offsets(native.bootstrap, topic, EARLIEST) == handed
    ends = leader_offsets(native.bootstrap, topic, LATEST)
    zero = dict.fromkeys(range(PARTITIONS), 0)
    assert leader_offsets(proxy.bootstrap, topic, EARLIEST) == zero
    _exactly_once(_read(proxy.bootstrap, topic, 4000), zero, ends)
    _exactly_once(_read(native.bootstrap, topic, sum(ends[p] - handed[p] for p in ends)), handed, ends)
    _exactly_once(_read_spark(spark, proxy, tmp_path / "data", topic), zero, ends)
    assert proxy.log_text().count(f"topic {topic} is tiered by the brokers") == 1
    assert all(r.tiered_by == "brokers" for r in describe(proxy.bootstrap, topic))


def _proxy_remote_ends(data_dir: Path, topic: str) -> dict[int, int]:
    state = load_metadata(f"file://{data_dir / 'metadata'}")
    return {tp.partition: (state.finished(tp)[-1].end_offset if state.finished(tp) else -1)
            for tp in state.partitions if tp.topic == topic}


def test_a_topic_handed_from_the_brokers_to_the_proxy(native: KafkaCluster, unique_name: str, tmp_path: Path,
                                                       stopping: list[ProxyProcess]) -> None:
    topic = f"to-proxy-{unique_name}"
    create_topic(native.bootstrap, topic, PARTITIONS, **BROKER_TIERED)
    _produce(native.bootstrap, topic, 0, 2000)
    _kafka_tiered(native, topic)
    proxy = _proxy(native, tmp_path)
    stopping.append(proxy)
    _rounds_logged(proxy, f"topic {topic} is tiered by the brokers")
    direct = Admin("confluent", native.bootstrap)
    via_proxy = Admin("confluent", proxy.bootstrap)
    try:
        # 1. The brokers stop copying (KIP-950) and keep serving their remote data; Kafka wants
        #    their local retention equal to the total then (nothing more leaves their disks).
        direct.set_configs(topic, {"remote.log.copy.disable": "true", "local.retention.bytes": "-1",
                                   "local.retention.ms": "-1"})
        assert wait_until(lambda: direct.describe(topic)["remote.log.copy.disable"].value == "true", 30)
        # 2. The proxy takes the topic: it copies the whole log through the brokers, never moving
        #    their log start while they hold remote data.
        via_proxy.set_configs(topic, {"remote.storage.enable": "true", "local.retention.bytes": str(64 * 1024)})
        local_start = leader_offsets(native.bootstrap, topic, EARLIEST_LOCAL)
        assert wait_until(lambda: all(_proxy_remote_ends(tmp_path / "data", topic).get(p, -1) + 1 >= local_start[p]
                                      for p in range(PARTITIONS)), 60), proxy.log_text()[-3000:]
        assert leader_offsets(native.bootstrap, topic, EARLIEST) == dict.fromkeys(range(PARTITIONS), 0)
        # Copying again at the brokers now would make both tier it: refused through the proxy.
        with pytest.raises(AdminError) as refused:
            via_proxy.set_configs(topic, {"remote.log.copy.disable": "false"})
        assert refused.value.code == INVALID_CONFIG and "copy it too" in refused.value.message
        # 3. The brokers let go of the topic and delete their remote data (KIP-950).
        direct.set_configs(topic, {"remote.storage.enable": "false", "remote.log.delete.on.disable": "true"})
    finally:
        direct.close()
        via_proxy.close()
    _rounds_logged(proxy, f"topic {topic}: the brokers no longer hold remote data of it")
    ends = leader_offsets(native.bootstrap, topic, LATEST)
    zero = dict.fromkeys(range(PARTITIONS), 0)
    assert leader_offsets(proxy.bootstrap, topic, EARLIEST) == zero
    _exactly_once(_read(proxy.bootstrap, topic, 2000), zero, ends)

    # The proxy's topic now: it tiers what comes next and moves the brokers' log start itself.
    before = leader_offsets(native.bootstrap, topic, EARLIEST)
    _produce(proxy.bootstrap, topic, 2000, 1000)
    assert wait_until(lambda: all(o > before[p] for p, o in leader_offsets(native.bootstrap, topic,
                                                                           EARLIEST).items()), 60), \
        proxy.log_text()[-3000:]
    ends = leader_offsets(native.bootstrap, topic, LATEST)
    _exactly_once(_read(proxy.bootstrap, topic, 3000), zero, ends)
    assert all(r.tiered_by == "proxy" for r in describe(proxy.bootstrap, topic))
