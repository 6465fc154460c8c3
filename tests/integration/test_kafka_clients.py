"""Kafka's own clients and kcat through the proxy in front of Apache Kafka 4.4 (issue 25): Kafka's Java
console consumer and producer, kcat, KIP-848 consumer groups (librdkafka and the Java consumer), share
groups (KIP-932) and Kafka's topic admin tools operating tiering per topic (KIP-950).

One tiered topic is built once for the module: created through the proxy with
``remote.storage.enable=true`` and ``local.retention.bytes`` (a Kafka 4.4 broker without tiered storage
of its own refuses the key; the proxy keeps it), 30k records produced through the proxy, and then the
proxy's copier tiers it and moves the broker's log start past more than half of every partition
with DeleteRecords. Every check compares what a client read with what was produced (partition, offset,
key, value as the producer's delivery reports gave them), and the broker's own answers are read
directly from it.
"""

from __future__ import annotations

import hashlib
import re
import shutil
import subprocess
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from proxy.describe import PartitionRow, describe
from proxy.segments import load_segments
from tests.kafka_cluster import KafkaCluster
from tests.proxy_process import ProxyProcess, start_proxy
from tests.tiering_checks import leader_offsets, wait_until

pytestmark = pytest.mark.integration

PARTITIONS = 3
TOTAL = 30_000  # records in the tiered topic, 10k per partition, ~1.3 MB per partition
SEGMENT_BYTES = 256 * 1024  # the proxy's copier segments (Kafka 4.4 refuses topic segment.bytes < 1 MiB)
LOCAL_RETENTION_BYTES = SEGMENT_BYTES
PROXY_ARGS = ("--set", f"log.segment.bytes={SEGMENT_BYTES}", "--set", "remote.log.manager.task.interval.ms=100")
# Kafka's answer to remote.storage.enable on a broker whose own tiered storage is off.
KAFKA_REFUSAL = ("Tiered Storage functionality is disabled in the broker. "
                 "Topic cannot be configured with remote log storage.")
DYNAMIC_TOPIC_CONFIG = "DYNAMIC_TOPIC_CONFIG"

Key = tuple[int, int]  # (partition, offset)
Records = dict[Key, tuple[bytes, bytes]]  # -> (key, value)


def _name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def value_of(i: int) -> bytes:
    """~110 printable bytes that compress poorly, so local.retention.bytes acts after a few segments."""
    digest = hashlib.sha256(str(i).encode()).hexdigest()
    return f"v{i:06d}-{digest}{digest[:40]}".encode()


# -- producing and reading --------------------------------------------------------------------------


def produce(bootstrap: str, topic: str, rows: list[tuple[int, bytes, bytes]]) -> Records:
    """Produce ``(partition, key, value)`` rows with confluent-kafka; returns where each one landed."""
    from confluent_kafka import Producer

    landed: Records = {}
    errors: list[str] = []

    def report(err: Any, msg: Any) -> None:
        if err is not None:
            errors.append(str(err))
        else:
            landed[(msg.partition(), msg.offset())] = (msg.key(), msg.value())

    # Batches of at most 16 KiB, so the copier's segments follow log.segment.bytes.
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "batch.size": 16384,
                         "compression.type": "none", "queue.buffering.max.messages": 200_000})
    for partition, key, value in rows:
        while True:
            try:
                producer.produce(topic, value, key=key, partition=partition, on_delivery=report)
                break
            except BufferError:
                producer.poll(0.05)
    assert producer.flush(60) == 0, "records still undelivered after 60 s"
    assert not errors and len(landed) == len(rows), (errors[:3], len(landed), len(rows))
    return landed


def numbered(start: int, count: int, partitions: int) -> list[tuple[int, bytes, bytes]]:
    return [(i % partitions, f"k{i}".encode(), value_of(i)) for i in range(start, start + count)]


def list_offsets(bootstrap: str, topic: str, partitions: int, spec: str) -> dict[int, int]:
    """ListOffsets through kafka-python's admin client; ``spec`` names an ``OffsetSpec``."""
    from kafka import KafkaAdminClient, TopicPartition
    from kafka.admin import OffsetSpec

    admin = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=20_000)
    try:
        tps = [TopicPartition(topic, p) for p in range(partitions)]
        found = admin.list_partition_offsets({tp: getattr(OffsetSpec, spec) for tp in tps})
    finally:
        admin.close()
    return {tp.partition: found[tp].offset for tp in tps}


def describe_topic_configs(bootstrap: str, topic: str) -> dict[str, dict[str, Any]]:
    from kafka import KafkaAdminClient
    from kafka.admin import ConfigResource, ConfigResourceType

    admin = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=20_000)
    try:
        answer = admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, topic)], config_filter="all")
    finally:
        admin.close()
    return answer["topic"][topic]


def create_topic(bootstrap: str, topic: str, partitions: int, configs: dict[str, str] | None = None) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, partitions, 1, config=configs or {})])[topic].result(30)


def read_all(bootstrap: str, topic: str, partitions: int, expected: int, timeout: float = 30) -> Records:
    """Every record of ``topic`` from offset 0 (or, if that is gone, the earliest), by assignment."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": _name("direct"), "enable.auto.commit": False,
                         "auto.offset.reset": "earliest"})
    got: Records = {}
    try:
        consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        deadline = time.monotonic() + timeout
        while len(got) < expected and time.monotonic() < deadline:
            for msg in consumer.consume(1000, 0.5):
                assert msg.error() is None, msg.error()
                got[(msg.partition(), msg.offset())] = (msg.key(), msg.value())
    finally:
        consumer.close()
    return got


# What Kafka's console consumers print with these formatter properties: partition, offset, key, value.
PRINT = ("--formatter-property", "print.partition=true", "--formatter-property", "print.offset=true",
         "--formatter-property", "print.key=true")
CONSOLE_LINE = re.compile(r"^Partition:(\d+)\tOffset:(\d+)\t([^\t]*)\t(.*)$")


def parse_console(stdout: str) -> list[tuple[Key, tuple[bytes, bytes]]]:
    """The records a console consumer printed, in order; lines of anything else are left out."""
    rows = []
    for line in stdout.splitlines():
        match = CONSOLE_LINE.match(line)
        if match:
            rows.append(((int(match[1]), int(match[2])), (match[3].encode(), match[4].encode())))
    return rows


def exactly_once(rows: list[tuple[Key, tuple[bytes, bytes]]], expected: Records) -> str | None:
    """None when ``rows`` hold every expected record once and nothing else; else what differs."""
    seen: Records = {}
    duplicates = []
    for key, record in rows:
        if key in seen:
            duplicates.append(key)
        seen[key] = record
    missing = sorted(set(expected) - set(seen))
    extra = sorted(set(seen) - set(expected))
    wrong = sorted(k for k in set(seen) & set(expected) if seen[k] != expected[k])
    if not (duplicates or missing or extra or wrong):
        return None
    return (f"{len(rows)} read, {len(expected)} expected: {len(duplicates)} duplicates {duplicates[:5]}, "
            f"{len(missing)} missing {missing[:5]}, {len(extra)} unexpected {extra[:5]}, "
            f"{len(wrong)} with other key/value {[(k, seen[k], expected[k]) for k in wrong[:2]]}")


def tool_output(done: subprocess.CompletedProcess) -> str:
    return f"exit {done.returncode}\nstdout (end): {done.stdout[-1500:]}\nstderr (end): {done.stderr[-3000:]}"


def in_thread(fn: Callable[[], Any]) -> Callable[[], Any]:
    """Start ``fn`` in a thread; the returned callable joins it and returns its result (or raises)."""
    out: dict[str, Any] = {}

    def run() -> None:
        try:
            out["result"] = fn()
        except BaseException as exc:  # noqa: BLE001 - handed to the joining test
            out["error"] = exc

    thread = threading.Thread(target=run, daemon=True)
    thread.start()

    def join(timeout: float = 180) -> Any:
        thread.join(timeout)
        assert not thread.is_alive(), f"{fn} still running after {timeout} s"
        if "error" in out:
            raise out["error"]
        return out["result"]

    return join


# -- the module's proxy and tiered topic ------------------------------------------------------------


@dataclass
class Tiered:
    proxy: ProxyProcess
    topic: str
    records: Records
    ends: dict[int, int]  # log end offset per partition
    log_start: dict[int, int]  # the broker's own log start per partition, once tiered

    def proxy_log(self) -> str:
        return f"proxy log: {self.proxy.log_path}\n{self.proxy.log_text()[-3000:]}"


@pytest.fixture(scope="module")
def proxy(kafka: KafkaCluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ProxyProcess]:
    running = start_proxy(kafka.bootstrap, tmp_path_factory.mktemp("kafka-clients-proxy"), *PROXY_ARGS)
    yield running
    running.stop()


def proxy_data_dir(proxy: ProxyProcess) -> Path:
    return proxy.log_path.parent / f"data-{proxy.port}"


@pytest.fixture(scope="module")
def tiered(kafka: KafkaCluster, proxy: ProxyProcess) -> Tiered:
    topic = _name("history")
    create_topic(proxy.bootstrap, topic, PARTITIONS, {"remote.storage.enable": "true",
                                                       "local.retention.bytes": str(LOCAL_RETENTION_BYTES)})
    records = produce(proxy.bootstrap, topic, numbered(0, TOTAL, PARTITIONS))
    ends = {p: 1 + max(o for q, o in records if q == p) for p in range(PARTITIONS)}
    assert ends == {p: TOTAL // PARTITIONS for p in range(PARTITIONS)}
    state: dict[str, dict[int, int]] = {}

    def trimmed() -> bool:
        state["broker"] = list_offsets(kafka.bootstrap, topic, PARTITIONS, "EARLIEST")
        return all(state["broker"][p] > ends[p] // 2 for p in range(PARTITIONS))

    assert wait_until(trimmed, 60, interval=0.5), (
        f"the broker's log start of {topic} is {state.get('broker')} of {ends} after 60 s\n"
        f"{proxy.log_text()[-3000:]}")
    # Through the proxy: EARLIEST_LOCAL (-4) is the broker's log start, EARLIEST (-2) the remote tier's 0.
    assert list_offsets(proxy.bootstrap, topic, PARTITIONS, "EARLIEST_LOCAL") == state["broker"]
    assert list_offsets(proxy.bootstrap, topic, PARTITIONS, "EARLIEST") == dict.fromkeys(range(PARTITIONS), 0)
    assert list_offsets(proxy.bootstrap, topic, PARTITIONS, "LATEST") == ends
    return Tiered(proxy, topic, records, ends, state["broker"])


# -- 1. Kafka's console consumer and producer -------------------------------------------------------


def test_java_console_consumer_reads_the_whole_history_through_the_proxy(kafka: KafkaCluster, tiered: Tiered):
    done = kafka.run_tool("console-consumer", "--bootstrap-server", tiered.proxy.bootstrap, "--topic", tiered.topic,
                          "--from-beginning", "--max-messages", TOTAL, "--timeout-ms", 30_000, *PRINT, timeout=120)
    assert done.returncode == 0, tool_output(done)
    rows = parse_console(done.stdout)
    problem = exactly_once(rows, tiered.records)
    assert problem is None, f"{problem}\n{tool_output(done)}\n{tiered.proxy_log()}"
    # More than half of them only the remote tier holds.
    assert sum(1 for (p, o), _ in rows if o < tiered.log_start[p]) == sum(tiered.log_start.values()) > TOTAL // 2


def _get_offsets(kafka: KafkaCluster, bootstrap: str, topic: str, time_spec: int) -> dict[int, int]:
    """partition -> offset as Kafka's kafka-get-offsets.sh (GetOffsetShell, through Java's AdminClient
    and its OffsetSpec) prints them for ``--time time_spec``."""
    done = kafka.run_tool("get-offsets", "--bootstrap-server", bootstrap, "--topic", topic, "--time", time_spec,
                          timeout=60)
    assert done.returncode == 0, tool_output(done)
    found = {}
    for line in done.stdout.split():
        name, partition, offset = line.rsplit(":", 2)
        assert name == topic, done.stdout
        found[int(partition)] = int(offset) if offset else -1
    return found


def test_kafka_get_offsets_answers_every_tiered_spec_through_the_proxy(kafka: KafkaCluster, tiered: Tiered):
    """kafka-get-offsets.sh --time -2, -4, -5 and -6 (EARLIEST_PENDING_UPLOAD, KIP-1023: OffsetSpec.
    earliestPendingUpload(), ListOffsets v11) through the proxy: the remote log start, the brokers'
    log start, the last tiered offset and the first offset not tiered yet."""
    bootstrap = tiered.proxy.bootstrap
    assert _get_offsets(kafka, bootstrap, tiered.topic, -2) == dict.fromkeys(range(PARTITIONS), 0)
    seen: dict[int, dict[int, int]] = {}

    def settled() -> bool:  # the copier may tier a segment between two questions: asked until still
        for spec in (-5, -6, -4):
            seen[spec] = _get_offsets(kafka, bootstrap, tiered.topic, spec)
        return seen[-5] == _get_offsets(kafka, bootstrap, tiered.topic, -5)

    assert wait_until(settled, 60, interval=1), seen
    local_start = list_offsets(kafka.bootstrap, tiered.topic, PARTITIONS, "EARLIEST")
    assert seen[-4] == local_start
    assert all(seen[-5][p] >= local_start[p] - 1 for p in range(PARTITIONS)), (seen, local_start)
    assert seen[-6] == {p: seen[-5][p] + 1 for p in range(PARTITIONS)}, seen
    remote_ends = {row.partition: row.ry for row in describe(bootstrap, tiered.topic)}
    assert all(seen[-5][p] <= remote_ends[p] for p in range(PARTITIONS)), (seen, remote_ends)
    # A topic nobody tiers has nothing pending upload: -1, as Kafka answers for it (the tool prints no
    # line for an offset of -1).
    plain = _name("plain")
    create_topic(bootstrap, plain, 1)
    produce(bootstrap, plain, numbered(0, 10, 1))
    assert _get_offsets(kafka, bootstrap, plain, -6) == _get_offsets(kafka, kafka.bootstrap, plain, -6) == {}
    assert leader_offsets(bootstrap, plain, -6) == leader_offsets(kafka.bootstrap, plain, -6) == {0: -1}


TIERED_STORAGE_TOPIC_KEYS = ("remote.storage.enable", "local.retention.ms", "local.retention.bytes",
                             "remote.log.disable.policy", "remote.storage.compression.type", "remote.copy.lag.ms",
                             "remote.copy.lag.bytes")


def _described_topic_configs(kafka: KafkaCluster, bootstrap: str, topic: str) -> dict[str, str]:
    """key -> the line kafka-configs.sh --describe --all prints for it (``key=value sensitive=... synonyms=...``)."""
    done = kafka.run_tool("configs", "--bootstrap-server", bootstrap, "--entity-type", "topics", "--entity-name", topic,
                          "--describe", "--all", timeout=60)
    assert done.returncode == 0, tool_output(done)
    return {line.strip().split("=", 1)[0]: line.strip() for line in done.stdout.splitlines() if "=" in line
            and not line.startswith("All configs")}


def test_kafka_configs_describes_and_alters_every_tiered_storage_topic_key(kafka: KafkaCluster, tiered: Tiered):
    """kafka-configs.sh (Kafka 4.4) through the proxy: --describe --all lists every tiered-storage key
    the proxy keeps, with its value and source, and --alter sets KIP-1241's delayed upload."""
    bootstrap = tiered.proxy.bootstrap
    shown = _described_topic_configs(kafka, bootstrap, tiered.topic)
    assert set(TIERED_STORAGE_TOPIC_KEYS) <= shown.keys(), sorted(shown)
    assert shown["remote.storage.enable"].startswith("remote.storage.enable=true "), shown["remote.storage.enable"]
    assert "DYNAMIC_TOPIC_CONFIG" in shown["local.retention.bytes"]
    assert shown["remote.copy.lag.ms"].startswith("remote.copy.lag.ms=0 "), shown["remote.copy.lag.ms"]
    assert "DEFAULT_CONFIG:log.remote.copy.lag.ms=0" in shown["remote.copy.lag.ms"]
    done = kafka.run_tool("configs", "--bootstrap-server", bootstrap, "--entity-type", "topics", "--entity-name",
                          tiered.topic, "--alter", "--add-config", "remote.copy.lag.bytes=1", timeout=60)
    assert done.returncode == 0, tool_output(done)
    try:
        shown = _described_topic_configs(kafka, bootstrap, tiered.topic)
        assert shown["remote.copy.lag.bytes"].startswith("remote.copy.lag.bytes=1 ")
        assert "DYNAMIC_TOPIC_CONFIG:remote.copy.lag.bytes=1" in shown["remote.copy.lag.bytes"]
        # Kafka's own check, with Kafka's words, whatever the brokers know of the key.
        refused = kafka.run_tool("configs", "--bootstrap-server", bootstrap, "--entity-type", "topics", "--entity-name",
                                 tiered.topic, "--alter", "--add-config", f"remote.copy.lag.bytes={LOCAL_RETENTION_BYTES + 1}",
                                 timeout=60)
        assert refused.returncode != 0
        assert "Value must not exceed local.retention.bytes" in refused.stdout + refused.stderr, tool_output(refused)
    finally:
        kafka.run_tool("configs", "--bootstrap-server", bootstrap, "--entity-type", "topics", "--entity-name",
                       tiered.topic, "--alter", "--delete-config", "remote.copy.lag.bytes", timeout=60)
    assert "remote.copy.lag.bytes=-1 " in _described_topic_configs(kafka, bootstrap, tiered.topic)["remote.copy.lag.bytes"]


def test_kafka_configs_shows_the_proxys_tiered_storage_broker_keys_and_refuses_to_alter_fixed_ones(
        kafka: KafkaCluster, proxy: ProxyProcess):
    """kafka-configs.sh --entity-type brokers through the proxy: the tiered-storage keys the proxy
    owns show its values (the broker's say its own tiered storage is off); altering one Kafka does
    not change dynamically is refused with where to set it, and the broker's own value stays as it
    was (the dynamic ones: tests/integration/test_cluster_dynamic_configs.py)."""
    def described(bootstrap: str) -> dict[str, str]:
        done = kafka.run_tool("configs", "--bootstrap-server", bootstrap, "--entity-type", "brokers", "--entity-name",
                              "1", "--describe", "--all", timeout=60)
        assert done.returncode == 0, tool_output(done)
        return {line.strip().split("=", 1)[0]: line.strip() for line in done.stdout.splitlines()
                if "=" in line and not line.startswith("All configs")}

    via_proxy, direct = described(proxy.bootstrap), described(kafka.bootstrap)
    assert direct["remote.log.storage.system.enable"].startswith("remote.log.storage.system.enable=false ")
    assert via_proxy["remote.log.storage.system.enable"].startswith("remote.log.storage.system.enable=true ")
    assert "STATIC_BROKER_CONFIG:remote.log.manager.task.interval.ms=100" in \
        via_proxy["remote.log.manager.task.interval.ms"]
    for key in ("log.remote.copy.lag.ms", "remote.log.manager.copy.max.bytes.per.second",
                "remote.log.manager.fetch.max.bytes.per.second", "log.local.retention.bytes"):
        assert key in via_proxy and "DEFAULT_CONFIG" in via_proxy[key], via_proxy.get(key)
    assert via_proxy["log.cleaner.threads"] == direct["log.cleaner.threads"]  # the rest is the broker's
    refused = kafka.run_tool("configs", "--bootstrap-server", proxy.bootstrap, "--entity-type", "brokers",
                             "--entity-default", "--alter", "--add-config",
                             "remote.log.manager.copy.quota.window.num=5", timeout=60)
    assert refused.returncode != 0
    assert "Cannot update these configs dynamically" in refused.stdout + refused.stderr, tool_output(refused)
    assert "kept by the tiered-storage proxy" in refused.stdout + refused.stderr, tool_output(refused)
    assert "remote.log.manager.copy.quota.window.num=11 " in \
        described(kafka.bootstrap)["remote.log.manager.copy.quota.window.num"]


def test_kafka_log_dirs_shows_the_remote_tier_through_the_proxy(kafka: KafkaCluster, tiered: Tiered):
    """kafka-log-dirs.sh (Kafka 4.4) through the proxy: beside the brokers' own log dirs, one for the
    remote tier, with each partition's remote bytes as describe shows them."""
    import json

    done = kafka.run_tool("log-dirs", "--bootstrap-server", tiered.proxy.bootstrap, "--describe", "--topic-list",
                          tiered.topic, timeout=60)
    assert done.returncode == 0, tool_output(done)
    report = json.loads(next(line for line in done.stdout.splitlines() if line.startswith("{")))
    dirs = [d for broker in report["brokers"] for d in broker["logDirs"]]
    remote = [d for d in dirs if d["logDir"].startswith("remote:")]
    local = [d for d in dirs if not d["logDir"].startswith("remote:")]
    assert len(remote) == 1 and local, [d["logDir"] for d in dirs]
    sizes = {p["partition"]: p["size"] for p in remote[0]["partitions"]}
    expected = {f"{tiered.topic}-{row.partition}": row.remote_bytes for row in describe(tiered.proxy.bootstrap, tiered.topic)}
    assert sizes.keys() == expected.keys() and all(sizes[k] > 0 for k in sizes), (sizes, expected)
    # Both read the same metadata; the copier may add a segment in between.
    assert all(abs(sizes[k] - expected[k]) <= 2 * SEGMENT_BYTES for k in sizes), (sizes, expected)


def test_java_console_producer_writes_through_the_proxy(kafka: KafkaCluster, proxy: ProxyProcess):
    topic = _name("console-produced")
    create_topic(proxy.bootstrap, topic, 2)
    lines = [(f"key{i}", f"value-{i}-{value_of(i)[:20].decode()}") for i in range(400)]
    done = kafka.run_tool("console-producer", "--bootstrap-server", proxy.bootstrap, "--topic", topic,
                          "--reader-property", "parse.key=true", "--command-property", "acks=all",
                          input="".join(f"{k}\t{v}\n" for k, v in lines), timeout=90)
    assert done.returncode == 0, tool_output(done)
    got = read_all(kafka.bootstrap, topic, 2, len(lines))  # from the broker, not the proxy
    assert sorted(got.values()) == sorted((k.encode(), v.encode()) for k, v in lines)
    assert len(got) == len(lines)
    for partition in range(2):
        # In each partition the records follow the input's order (the producer sends them in order).
        numbers = [int(got[key][0][3:]) for key in sorted(k for k in got if k[0] == partition)]
        assert numbers == sorted(numbers), partition
    assert {p for p, _ in got} == {0, 1}  # keys spread over both partitions (Kafka's default partitioner)


# -- 2. kcat --------------------------------------------------------------------------------------------


def test_kcat_reads_the_whole_history_through_the_proxy(tiered: Tiered):
    kcat = shutil.which("kcat")
    assert kcat, "kcat is not installed (Debian/Ubuntu: apt-get install kcat; CI installs it in .ci/run)"
    done = subprocess.run([kcat, "-b", tiered.proxy.bootstrap, "-C", "-t", tiered.topic, "-o", "beginning", "-e",
                           "-q", "-f", "Partition:%p\tOffset:%o\t%k\t%s\n"],
                          capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
    assert done.returncode == 0, tool_output(done)
    problem = exactly_once(parse_console(done.stdout), tiered.records)
    assert problem is None, f"{problem}\n{tool_output(done)}\n{tiered.proxy_log()}"


# -- 3. KIP-848 consumer groups ---------------------------------------------------------------------------


def read_with_kip848_librdkafka(bootstrap: str, topic: str, group: str, expected: int,
                                timeout: float = 60) -> tuple[list[tuple[Key, tuple[bytes, bytes]]], list[Any] | str]:
    """Subscribe with ``group.protocol=consumer`` from earliest, read ``expected`` records, commit them;
    returns the records and the committed offsets (or why the commit failed)."""
    from confluent_kafka import Consumer, KafkaException

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "group.protocol": "consumer",
                         "auto.offset.reset": "earliest", "enable.auto.commit": False})
    rows: list[tuple[Key, tuple[bytes, bytes]]] = []
    try:
        consumer.subscribe([topic])
        deadline = time.monotonic() + timeout
        while len(rows) < expected and time.monotonic() < deadline:
            for msg in consumer.consume(1000, 0.5):
                assert msg.error() is None, msg.error()
                rows.append(((msg.partition(), msg.offset()), (msg.key(), msg.value())))
        # Anything more would be a record read twice (or one nobody produced).
        for msg in consumer.consume(1000, 1.0):
            rows.append(((msg.partition(), msg.offset()), (msg.key(), msg.value())))
        try:
            committed: list[Any] | str = consumer.commit(asynchronous=False)
        except KafkaException as exc:
            committed = f"commit failed: {exc}"
    finally:
        consumer.close()
    return rows, committed


def group_offsets(bootstrap: str, group: str) -> dict[tuple[str, int], int]:
    """The group's committed offsets (OffsetFetch through kafka-python's admin client)."""
    from kafka import KafkaAdminClient

    admin = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=20_000)
    try:
        found = admin.list_group_offsets(group)[group]
    finally:
        admin.close()
    return {(tp.topic, tp.partition): meta.offset for tp, meta in found.items()}


def group_types(bootstrap: str, groups: list[str]) -> dict[str, str]:
    """ConsumerGroupDescribe/DescribeGroups through confluent-kafka: each group's type."""
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap})
    return {group: future.result(30).type.name for group, future in admin.describe_consumer_groups(groups).items()}


def test_kip848_consumer_groups_read_the_tiered_topic_once_and_commit(kafka: KafkaCluster, tiered: Tiered):
    bootstrap = tiered.proxy.bootstrap
    java_group, rdkafka_group = _name("java-848"), _name("rdkafka-848")
    java = in_thread(lambda: kafka.run_tool(
        "console-consumer", "--bootstrap-server", bootstrap, "--topic", tiered.topic, "--from-beginning",
        "--group", java_group, "--command-property", "group.protocol=consumer",
        "--max-messages", TOTAL, "--timeout-ms", 30_000, *PRINT, timeout=150))
    rows, committed = read_with_kip848_librdkafka(bootstrap, tiered.topic, rdkafka_group, TOTAL)
    problem = exactly_once(rows, tiered.records)
    assert problem is None, f"librdkafka, group.protocol=consumer: {problem}\n{tiered.proxy_log()}"
    assert not isinstance(committed, str), committed
    assert sorted((tp.partition, tp.offset) for tp in committed) == sorted(tiered.ends.items())

    done = java()
    assert done.returncode == 0, tool_output(done)
    problem = exactly_once(parse_console(done.stdout), tiered.records)
    assert problem is None, f"Java console consumer, group.protocol=consumer: {problem}\n{tiered.proxy_log()}"

    # Both groups are KIP-848 groups at the broker's coordinator, and committed the log end offsets
    # (the Java console consumer commits what it consumed when it closes).
    assert group_types(bootstrap, [java_group, rdkafka_group]) == {java_group: "CONSUMER", rdkafka_group: "CONSUMER"}
    expected = {(tiered.topic, p): end for p, end in tiered.ends.items()}
    for group in (rdkafka_group, java_group):
        assert group_offsets(bootstrap, group) == expected, group
        assert group_offsets(kafka.bootstrap, group) == expected, group  # as the broker itself answers


# -- 4. share groups (KIP-932) ------------------------------------------------------------------------


# How long a console share consumer waits for a record before it gives up: joining a share group
# takes a few heartbeats (5 s apart by default), more on a loaded machine. With --max-messages at
# the count expected, a passing run never waits this long.
IDLE_MS = 30_000


def set_share_group_earliest(kafka: KafkaCluster, bootstrap: str, group: str, tool: bool) -> str | None:
    """``share.auto.offset.reset=earliest`` on a share group, through ``bootstrap``: an
    IncrementalAlterConfigs of the GROUP resource, sent by Kafka's configs tool or by kafka-python.
    Returns None, or what went wrong."""
    if tool:
        done = kafka.run_tool("configs", "--bootstrap-server", bootstrap, "--alter", "--entity-type", "groups",
                              "--entity-name", group, "--add-config", "share.auto.offset.reset=earliest", timeout=60)
        ok = done.returncode == 0 and f"Completed updating config for group {group}." in done.stdout
        return None if ok else tool_output(done)
    from kafka import KafkaAdminClient
    from kafka.admin import ConfigResource, ConfigResourceType

    admin = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=20_000)
    try:
        resource = ConfigResource(ConfigResourceType.GROUP, group, configs={"share.auto.offset.reset": "earliest"})
        answer = admin.alter_configs([resource], incremental=True)
        described = admin.describe_configs([ConfigResource(ConfigResourceType.GROUP, group)])
    finally:
        admin.close()
    value = described.get("group", {}).get(group, {}).get("share.auto.offset.reset", {}).get("value")
    ok = answer == {"group": {group: "OK"}} and value == "earliest"
    return None if ok else f"IncrementalAlterConfigs answered {answer}; DescribeConfigs {described}"


def share_consume(kafka: KafkaCluster, bootstrap: str, topic: str, max_messages: int,
                  tool: bool) -> tuple[str | None, subprocess.CompletedProcess | None]:
    """A new share group reading ``topic`` from earliest with Kafka's console share consumer, through
    ``bootstrap``: (what went wrong setting the group's config, or None; what the consumer printed)."""
    group = _name("share")
    problem = set_share_group_earliest(kafka, bootstrap, group, tool)
    if problem is not None:
        return problem, None
    read = kafka.run_tool("console-share-consumer", "--bootstrap-server", bootstrap, "--topic", topic,
                          "--group", group, "--max-messages", max_messages, "--timeout-ms", IDLE_MS, *PRINT,
                          timeout=120)
    return None, read


def test_share_groups_read_what_the_brokers_hold(kafka: KafkaCluster, proxy: ProxyProcess, tiered: Tiered):
    plain = _name("share-plain")
    create_topic(proxy.bootstrap, plain, 2)
    plain_records = produce(proxy.bootstrap, plain, numbered(0, 300, 2))
    start = list_offsets(kafka.bootstrap, tiered.topic, PARTITIONS, "EARLIEST")
    assert all(start[p] > 0 for p in start)  # there are records below the brokers' log start
    held = sum(tiered.ends[p] - start[p] for p in start)
    # Both at once: a share consumer spends most of its time waiting for heartbeats.
    on_plain = in_thread(lambda: share_consume(kafka, proxy.bootstrap, plain, 300, tool=True))
    problem, read = share_consume(kafka, proxy.bootstrap, tiered.topic, held, tool=False)
    after = list_offsets(kafka.bootstrap, tiered.topic, PARTITIONS, "EARLIEST")

    # An untiered topic: every record, once.
    plain_problem, plain_read = on_plain()
    assert plain_problem is None and plain_read is not None, plain_problem
    assert plain_read.returncode == 0, tool_output(plain_read)
    mismatch = exactly_once(parse_console(plain_read.stdout), plain_records)
    assert mismatch is None, f"share consumer, untiered topic: {mismatch}\n{tool_output(plain_read)}"

    # The tiered topic: what the broker holds, from its log start, and never a record below it
    # (docs/compatibility.md, Kafka 4 clients: the proxy serves no remote records under share-group acquisition).
    assert problem is None and read is not None, problem
    assert read.returncode == 0, tool_output(read)
    rows = parse_console(read.stdout)
    below = [(p, o) for (p, o), _ in rows if o < start[p]]
    assert not below, f"share consumer got {len(below)} records below the brokers' log start {start}: {below[:5]}"
    got = dict(rows)
    assert len(got) == len(rows), "a share consumer got a record twice"
    assert all(tiered.records.get(key) == record for key, record in got.items()), "records other than produced"
    still_held = {(p, o) for p in after for o in range(after[p], tiered.ends[p])}
    assert still_held <= set(got), (f"{len(still_held - set(got))} records the broker holds were not delivered; "
                                    f"log start {start} -> {after}\n{tool_output(read)}")


# -- 5. topic admin with Kafka's own tools (KIP-950, KIP-917) --------------------------------------------


def config_lines(stdout: str) -> dict[str, str]:
    """``key=value`` of the lines ``kafka-configs.sh --describe`` prints under ``Dynamic configs ...``."""
    found = {}
    for line in stdout.splitlines():
        match = re.match(r"^\s+([\w.]+)=(\S*) sensitive=", line)
        if match:
            found[match[1]] = match[2]
    return found


def describe_row(bootstrap: str, topic: str) -> PartitionRow:
    """What ``tiered-proxy describe --topic`` prints (its own function), for a one-partition topic."""
    (row,) = describe(bootstrap, topic)
    return row


def segment_states(proxy: ProxyProcess, topic: str) -> list[tuple[int, int, str, bytes | None]]:
    """What ``tiered-proxy segments --metadata file://DATA_DIR/metadata`` lists for ``topic`` (its own
    function): (start, end, state, KIP-917 custom metadata) of every remote segment, in offset order."""
    found = load_segments(f"file://{proxy_data_dir(proxy) / 'metadata'}", None)
    return sorted((s.start_offset, s.end_offset, s.state.name, s.custom_metadata)
                  for tp, segments in found.items() if tp.topic == topic for s in segments)


def test_kafka_topic_tools_operate_tiering_through_the_proxy(kafka: KafkaCluster, proxy: ProxyProcess):
    topic = _name("admin")
    create = ("--create", "--topic", topic, "--partitions", 1, "--replication-factor", 1,
              "--config", "remote.storage.enable=true", "--config", f"local.retention.bytes={LOCAL_RETENTION_BYTES}")
    # Kafka itself refuses the key: its own tiered storage is off.
    direct = kafka.run_tool("topics", "--bootstrap-server", kafka.bootstrap, *create, timeout=60)
    assert direct.returncode != 0 and KAFKA_REFUSAL in direct.stdout + direct.stderr, tool_output(direct)
    # The same command through the proxy: created, the tiering keys kept by the proxy.
    created = kafka.run_tool("topics", "--bootstrap-server", proxy.bootstrap, *create, timeout=60)
    assert created.returncode == 0 and f"Created topic {topic}." in created.stdout, tool_output(created)
    at_broker = describe_topic_configs(kafka.bootstrap, topic)
    assert at_broker["remote.storage.enable"]["config_source"] != DYNAMIC_TOPIC_CONFIG, at_broker["remote.storage.enable"]

    altered = kafka.run_tool("configs", "--bootstrap-server", proxy.bootstrap, "--alter", "--entity-type", "topics",
                             "--entity-name", topic, "--add-config", "local.retention.ms=3600000", timeout=60)
    assert altered.returncode == 0 and "Completed updating config" in altered.stdout, tool_output(altered)
    records = produce(proxy.bootstrap, topic, numbered(0, 8000, 1))
    described = kafka.run_tool("configs", "--bootstrap-server", proxy.bootstrap, "--describe",
                               "--entity-type", "topics", "--entity-name", topic, timeout=60)
    assert described.returncode == 0, tool_output(described)
    shown = config_lines(described.stdout)
    assert {k: shown.get(k) for k in ("remote.storage.enable", "local.retention.bytes", "local.retention.ms")} == {
        "remote.storage.enable": "true", "local.retention.bytes": str(LOCAL_RETENTION_BYTES),
        "local.retention.ms": "3600000"}, described.stdout

    # Tiered, and the broker's log start moved. Settled: nothing changed for 1 s (10 copier intervals)
    # once the producer was done, so what follows sees one state.
    seen: list[tuple[int, list[tuple[int, int, str, bytes | None]]]] = []

    def settled() -> bool:
        seen.append((list_offsets(kafka.bootstrap, topic, 1, "EARLIEST")[0], segment_states(proxy, topic)))
        return len(seen) > 1 and seen[-1][0] > 0 and seen[-1] == seen[-2]

    assert wait_until(settled, 60, interval=1.0), f"{seen[-3:]}\n{proxy.log_text()[-3000:]}"
    log_start, segments = seen[-1]
    # The proxy still serves offset 0, from the remote tier.
    assert list_offsets(proxy.bootstrap, topic, 1, "EARLIEST") == {0: 0}
    row = describe_row(proxy.bootstrap, topic)
    assert (row.rx, row.ry, row.lx, row.segments, row.state, row.tiered_by) == (
        0, segments[-1][1], log_start, len(segments), "ENABLED retain 1", "proxy"), (row, segments)
    # Segments tile the log from 0 past the log start, all finished; the local folder store returns no
    # KIP-917 custom metadata (the S3 store does).
    assert [(start, state, custom) for start, _, state, custom in segments] == (
        [(0, "COPY_SEGMENT_FINISHED", None)] + [(end + 1, "COPY_SEGMENT_FINISHED", None)
                                                 for _, end, _, _ in segments[:-1]]), segments
    assert segments[-1][1] + 1 >= log_start, segments
    objects = sorted((proxy_data_dir(proxy) / "remote").glob(f"{topic}-*/**/*.log"))
    assert len(objects) == len(segments), objects

    # KIP-950: disable with the delete policy through Kafka's configs tool.
    disabled = kafka.run_tool("configs", "--bootstrap-server", proxy.bootstrap, "--alter", "--entity-type", "topics",
                              "--entity-name", topic, "--add-config",
                              "remote.log.disable.policy=delete,remote.storage.enable=false", timeout=60)
    assert disabled.returncode == 0 and "Completed updating config" in disabled.stdout, tool_output(disabled)
    configs = describe_topic_configs(proxy.bootstrap, topic)
    assert {k: (configs[k]["value"], configs[k]["config_source"]) for k in
            ("remote.storage.enable", "remote.log.disable.policy")} == {
        "remote.storage.enable": ("false", DYNAMIC_TOPIC_CONFIG),
        "remote.log.disable.policy": ("delete", DYNAMIC_TOPIC_CONFIG)}
    # The remote data is unreadable at once: EARLIEST is the broker's log start ...
    assert list_offsets(proxy.bootstrap, topic, 1, "EARLIEST") == {0: log_start}
    assert list_offsets(kafka.bootstrap, topic, 1, "EARLIEST") == {0: log_start}
    # describe counts the segments of partitions a copier still follows: until the remote log
    # manager's next round stops it (a race of some 100 ms the test lost now and then).
    rows = []

    def copier_stopped() -> bool:
        rows.append(describe_row(proxy.bootstrap, topic))
        return rows[-1].segments == 0

    assert wait_until(copier_stopped, 10), rows[-1]
    row = rows[-1]
    assert (row.rx, row.ry, row.segments, row.remote_bytes, row.lx) == (None, None, 0, 0, log_start), row
    # ... and a consumer from offset 0 reads from there, every record the broker holds.
    kept = {k: v for k, v in records.items() if k[1] >= log_start}
    assert read_all(proxy.bootstrap, topic, 1, len(kept), timeout=30) == kept
    # The remote segments are deleted in the background (KIP-405's DELETE_SEGMENT_STARTED -> FINISHED,
    # after which the store forgets them).
    remote = proxy_data_dir(proxy) / "remote"
    assert wait_until(lambda: segment_states(proxy, topic) == [], 30), (
        f"{segment_states(proxy, topic)}\n{proxy.log_text()[-3000:]}")
    assert not list(remote.glob(f"{topic}-*/**/*.log")), "remote segment objects left behind"
    # describe still shows the KIP-950 state of a topic disabled with the delete policy.
    assert wait_until(lambda: describe_row(proxy.bootstrap, topic).state.startswith("DISABLED delete"), 30), \
        describe_row(proxy.bootstrap, topic)
    # Tiering stopped: the proxy moves the broker's log start no more.
    produce(proxy.bootstrap, topic, numbered(8000, 4000, 1))
    time.sleep(1.5)  # 15 copier intervals
    assert list_offsets(kafka.bootstrap, topic, 1, "EARLIEST") == {0: log_start}
