"""Archived topics on Apache Kafka 4.4: a tiered topic deleted from the cluster behind the proxy's
back stays readable through the proxy, every record once from offset 0, read-only; and after
everything but the bucket is lost (cluster, data dir, metadata store), a fresh proxy in front of
a fresh cluster serves it again from the bucket's manifests alone."""

from __future__ import annotations

import shutil
import time

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient

from protocol.apis import LIST_OFFSETS, OFFSET_FOR_LEADER_EPOCH, PRODUCE
from proxy.describe import describe
from tests.clients import consume_records, read_to_end
from tests.integration.s3_server import DUMMY_CREDENTIALS, new_bucket, s3_uri_args
from tests.kafka_cluster import DEFAULT_VERSION, KAFKA_39, start_single
from tests.proxy_process import ProxyProcess, start_proxy
from tests.raw import RawClient
from tests.tiering_checks import (
    create_tiered_topic,
    create_topic,
    message_number,
    produce_numbered,
    wait_until,
)
from tiering.broker_client import BrokerClient
from tiering.metadata.journal_store import JOURNAL_NAME, read_journal
from tiering.metadata.manifests import read_bucket
from tiering.metadata.state import MetadataState
from tiering.storage.uri import storage_from_uri

RECORDS, PARTITIONS = 4000, 2
S3_KEYS = {"remote.log.storage.s3.access.key.id": DUMMY_CREDENTIALS["aws_access_key_id"],
           "remote.log.storage.s3.secret.access.key": DUMMY_CREDENTIALS["aws_secret_access_key"]}
FAST = ("--set", "remote.log.manager.task.interval.ms=200", "--set", "proxy.manifest.interval.ms=300",
        "--set", "proxy.archived.topics.refresh.interval.ms=500")


def _tiered_to_end(data_dir, topic: str, client: BrokerClient) -> bool:
    state = MetadataState()
    path = data_dir / "metadata" / JOURNAL_NAME
    for record in read_journal(path.read_bytes())[0] if path.exists() else ():
        state.apply(record)
    ends = {tp.partition: p.finished()[-1].end_offset for tp, p in state.partitions.items()
            if tp.topic == topic and p.finished()}
    info = client.metadata([topic]).get(topic)
    return info is not None and len(ends) == PARTITIONS and all(
        ends[p] + 1 >= client.list_offset(info.partitions[p].leader, topic, p, -1)[1] for p in range(PARTITIONS))


def _listed(proxy: ProxyProcess, topic: str) -> bool:
    try:
        return topic in BrokerClient(proxy.bootstrap).metadata([topic])
    except Exception:
        return False


def _read_every_record_once(proxy: ProxyProcess, topic: str) -> None:
    got = read_to_end(proxy.bootstrap, topic, PARTITIONS, timeout=120)
    numbers = sorted(message_number(r.value) for records in got.values() for r in records)
    assert numbers == list(range(RECORDS))
    for p, records in got.items():
        assert [r.offset for r in records] == list(range(len(records))), p


def _list_offset(proxy: ProxyProcess, topic: str, timestamp: int) -> int:
    return _list_offset_and_time(proxy, topic, timestamp)[0]


def _list_offset_and_time(proxy: ProxyProcess, topic: str, timestamp: int) -> tuple[int, int]:
    raw = RawClient(proxy.bootstrap)
    try:
        body = raw.request(LIST_OFFSETS, 9, {"replica_id": -1, "topics": [{"name": topic, "partitions": [
            {"partition_index": 0, "current_leader_epoch": -1, "timestamp": timestamp}]}]})
    finally:
        raw.close()
    [answer] = [p for t in body["topics"] if t["name"] == topic for p in t["partitions"]]
    assert answer["error_code"] == 0, answer
    return answer["offset"], answer["timestamp"]


def _changes_are_refused(proxy: ProxyProcess, topic: str) -> None:
    """Config changes and DeleteRecords reach the brokers, which do not have the topic; the archive
    is untouched (its log start stays 0)."""
    from confluent_kafka import KafkaException, TopicPartition
    from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource

    admin = AdminClient({"bootstrap.servers": proxy.bootstrap})
    resource = ConfigResource("TOPIC", topic, incremental_configs=[
        ConfigEntry("remote.storage.enable", "false", incremental_operation=AlterConfigOpType.SET)])
    with pytest.raises(KafkaException, match=f"topic {topic} is archived"):
        admin.incremental_alter_configs([resource])[resource].result(30)
    deleted = admin.delete_records([TopicPartition(topic, 0, 100)])
    with pytest.raises(KafkaException, match="UNKNOWN_TOPIC_OR_PART"):
        list(deleted.values())[0].result(30)
    assert _list_offset(proxy, topic, -2) == 0


def _classic_group_commits_and_resumes(proxy: ProxyProcess, topic: str) -> None:
    """A classic-protocol group (kafka-python) reads part of the archive, commits, and its next
    member resumes there; the committed offsets show to the admin tools too."""
    from kafka import KafkaConsumer
    from kafka.structs import TopicPartition

    group = f"{topic}-readers"
    settings = {"bootstrap_servers": proxy.bootstrap, "group_id": group, "enable_auto_commit": False,
                "auto_offset_reset": "earliest", "consumer_timeout_ms": 5000}
    first = KafkaConsumer(topic, **settings)
    seen: list[int] = []
    deadline = time.monotonic() + 60
    while len(seen) < 1000 and time.monotonic() < deadline:
        for records in first.poll(timeout_ms=500, max_records=500).values():
            seen += [r.offset for r in records]
    first.commit()
    committed = {p: first.committed(TopicPartition(topic, p)) for p in range(PARTITIONS)}
    first.close()
    assert sum(committed.values()) == len(seen) >= 1000, (committed, len(seen))

    admin = AdminClient({"bootstrap.servers": proxy.bootstrap})
    from confluent_kafka import ConsumerGroupTopicPartitions
    listed = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)])[group].result(30)
    assert {tp.partition: tp.offset for tp in listed.topic_partitions if tp.topic == topic} == committed

    second = KafkaConsumer(topic, **settings)
    rest: dict[int, list[int]] = {p: [] for p in range(PARTITIONS)}
    while sum(map(len, rest.values())) < RECORDS - len(seen) and time.monotonic() < deadline + 60:
        for tp, records in second.poll(timeout_ms=500, max_records=500).items():
            rest[tp.partition] += [r.offset for r in records]
    second.close()
    for p in range(PARTITIONS):
        assert rest[p] == list(range(committed[p], RECORDS // PARTITIONS)), p


def _kip848_group_gets_no_partitions(proxy: ProxyProcess, topic: str) -> None:
    """A KIP-848 group's assignment is the broker's, and the broker does not know the topic: a
    member subscribed to it and to a live topic is assigned the live one's partitions and nothing
    of the archive (docs/when-the-cluster-is-gone.md)."""
    from confluent_kafka import Consumer

    live = f"{topic}-live"
    create_topic(proxy.bootstrap, live, partitions=2)
    consumer = Consumer({"bootstrap.servers": proxy.bootstrap, "group.id": f"{topic}-848",
                         "group.protocol": "consumer", "auto.offset.reset": "earliest"})
    consumer.subscribe([topic, live])
    assigned: set[tuple[str, int]] = set()
    deadline = time.monotonic() + 30
    while len(assigned) < 2 and time.monotonic() < deadline:
        consumer.poll(0.5)
        assigned = {(tp.topic, tp.partition) for tp in consumer.assignment()}
    time.sleep(2)  # a later assignment would add the archive's partitions now, if ever
    consumer.poll(0.5)
    assigned = {(tp.topic, tp.partition) for tp in consumer.assignment()}
    consumer.close()
    assert assigned == {(live, 0), (live, 1)}, assigned


def _remote(tier: str, tmp_path, s3_endpoint: str) -> tuple[str, ...]:
    if tier == "s3":
        return s3_uri_args(new_bucket(s3_endpoint), "archive", s3_endpoint)
    return ("--remote", f"file://{tmp_path}/remote")


@pytest.mark.parametrize(("tier", "cluster"), [("local", "kafka"), ("s3", "kafka"), ("local", "kafka39")])
def test_a_deleted_topic_is_served_read_only_then_recovered_from_the_bucket_alone(tmp_path, unique_name, tier, cluster,
                                                                                  s3_endpoint, request):
    """On Kafka 4.4 with each tier; the core on 3.9 too."""
    kafka = request.getfixturevalue(cluster)
    topic = unique_name
    remote = _remote(tier, tmp_path, s3_endpoint)
    data_dir = tmp_path / "data"
    proxy = start_proxy(kafka.bootstrap, tmp_path / "proxy", "--data-dir", str(data_dir), *remote, *FAST,
                        "--set", f"proxy.archived.topics={topic}")
    client = BrokerClient(kafka.bootstrap)
    try:
        create_tiered_topic(proxy.bootstrap, topic, partitions=PARTITIONS)
        produce_numbered(proxy.bootstrap, topic, 0, RECORDS, PARTITIONS)
        assert wait_until(lambda: _tiered_to_end(data_dir, topic, client), 90), proxy.log_path.read_text()[-3000:]
        time.sleep(1)  # the manifests follow the last write within proxy.manifest.interval.ms

        # Timestamps as the live topic answers them (-3: the newest record; its time; the oldest).
        newest = _list_offset_and_time(proxy, topic, -3)
        by_time = {t: _list_offset_and_time(proxy, topic, t) for t in (0, newest[1])}
        # Deleted at the broker, behind the proxy's back: the proxy keeps its remote data and lists it.
        admin = AdminClient({"bootstrap.servers": kafka.bootstrap})
        admin.delete_topics([topic])[topic].result(30)
        assert wait_until(lambda: topic not in client.metadata([topic]) and _listed(proxy, topic), 30)
        assert topic not in client.metadata(None), "asking the proxy for the archive must not recreate it"
        _read_every_record_once(proxy, topic)
        offsets = {t: _list_offset(proxy, topic, t) for t in (-2, -1, -4, -5)}
        assert _list_offset_and_time(proxy, topic, -3) == newest  # from the remote time indexes now
        raw = RawClient(proxy.bootstrap)  # a client validating its position after a leader change
        try:
            epochs = raw.request(OFFSET_FOR_LEADER_EPOCH, 4, {"replica_id": -1, "topics": [{"topic": topic, "partitions": [
                {"partition": 0, "current_leader_epoch": -1, "leader_epoch": 0}]}]})
        finally:
            raw.close()
        [epoch] = epochs["topics"][0]["partitions"]
        assert (epoch["error_code"], epoch["leader_epoch"], epoch["end_offset"]) == (0, 0, RECORDS // PARTITIONS), epoch
        assert {t: _list_offset_and_time(proxy, topic, t) for t in by_time} == by_time
        assert offsets[-2] == 0 and offsets[-1] == offsets[-4] == offsets[-5] + 1 == RECORDS // PARTITIONS

        producer = Producer({"bootstrap.servers": proxy.bootstrap, "message.timeout.ms": 10_000})
        errors: list[object] = []
        producer.produce(topic, b"nope", partition=0, on_delivery=lambda e, m: errors.append(e))
        producer.flush(15)
        del producer  # its threads end now, before the proxy does
        assert len(errors) == 1 and errors[0] is not None and errors[0].code() == 29, errors  # not retried
        raw = RawClient(proxy.bootstrap)  # the message librdkafka does not show
        try:
            answer = raw.request(PRODUCE, 9, {"acks": -1, "timeout_ms": 1000, "topic_data": [
                {"name": topic, "partition_data": [{"index": 1, "records": None}]}]})
        finally:
            raw.close()
        [refused] = answer["responses"][0]["partition_responses"]
        assert refused["error_code"] == 29 and f"topic {topic} is archived" in refused["error_message"], refused
        assert "has been gone from the cluster" not in proxy.log_path.read_text()
        rows = describe(proxy.bootstrap, topic)  # tiered-proxy describe
        per_partition = RECORDS // PARTITIONS
        assert [(r.rx, r.ry, r.lx, r.lz, r.state) for r in rows] == [(0, per_partition - 1, per_partition,
                                                                     per_partition, "ARCHIVED")] * PARTITIONS
        assert all(r.segments > 0 and r.remote_bytes > 0 for r in rows)
        if tier == "local" and cluster == "kafka":
            _changes_are_refused(proxy, topic)
            _classic_group_commits_and_resumes(proxy, topic)
            _kip848_group_gets_no_partitions(proxy, topic)
    finally:
        proxy.stop()
        client.close()

    # Everything but the bucket is lost: the cluster, the data dir and its metadata store.
    shutil.rmtree(data_dir)
    fresh = start_single(tmp_path / "fresh-kafka", version=KAFKA_39 if cluster == "kafka39" else DEFAULT_VERSION)
    try:
        again = start_proxy(fresh.bootstrap, tmp_path / "again", "--data-dir", str(tmp_path / "new-data"), *remote,
                            *FAST, "--set", "proxy.archived.topics=*")
        try:
            assert wait_until(lambda: _listed(again, topic), 30), again.log_path.read_text()[-3000:]
            _read_every_record_once(again, topic)
        finally:
            again.stop()
    finally:
        fresh.stop()



@pytest.mark.parametrize("tier", ["local", "s3"])
def test_a_topic_deleted_through_the_proxy_is_kept_and_every_reader_reads_it(kafka, tmp_path, unique_name, tier,
                                                                             s3_endpoint):
    """Drill 1: with proxy.deleted.topic.retention.ms=-1, DeleteTopics through the proxy keeps the
    remote data; librdkafka (confluent-kafka), kafka-python, kcat and the Spark source (its segment
    plan from the remote tier's manifests) each read every record once from offset 0."""
    import os
    import shutil
    import subprocess
    import sys

    topic = unique_name
    data_dir = tmp_path / "data"
    remote = _remote(tier, tmp_path, s3_endpoint)
    storage_keys = S3_KEYS if tier == "s3" else {}
    proxy = start_proxy(kafka.bootstrap, tmp_path / "proxy", "--data-dir", str(data_dir), *remote, *FAST,
                        "--set", f"proxy.archived.topics={topic}", "--set", "proxy.deleted.topic.retention.ms=-1")
    client = BrokerClient(kafka.bootstrap)
    try:
        create_tiered_topic(proxy.bootstrap, topic, partitions=PARTITIONS)
        produce_numbered(proxy.bootstrap, topic, 0, RECORDS, PARTITIONS)
        assert wait_until(lambda: _tiered_to_end(data_dir, topic, client), 90), proxy.log_path.read_text()[-3000:]
        admin = AdminClient({"bootstrap.servers": proxy.bootstrap})
        admin.delete_topics([topic])[topic].result(30)  # through the proxy
        assert wait_until(lambda: topic not in client.metadata([topic]) and _listed(proxy, topic), 30)

        _read_every_record_once(proxy, topic)  # librdkafka
        got = consume_records("kafka-python", proxy.bootstrap, topic, PARTITIONS, RECORDS, timeout=120)
        assert sorted(message_number(r.value) for rs in got.values() for r in rs) == list(range(RECORDS))
        kcat = shutil.which("kcat")
        assert kcat, "kcat is not installed (CI installs it in .ci/run)"
        done = subprocess.run([kcat, "-b", proxy.bootstrap, "-C", "-t", topic, "-o", "beginning", "-e", "-q",
                               "-f", "%p %o %k\n"], capture_output=True, timeout=120, stdin=subprocess.DEVNULL)
        assert done.returncode == 0, done.stderr[-2000:]
        keys = [line.split(b" ")[2] for line in done.stdout.splitlines()]  # k{i}: values hold random bytes
        assert sorted(int(key[1:]) for key in keys) == list(range(RECORDS))

        from pyspark.sql import SparkSession

        from tiering.spark.source import TieredKafkaDataSource

        os.environ["PYSPARK_PYTHON"] = sys.executable
        spark = (SparkSession.builder.master("local[2]").appName("archived").config("spark.ui.enabled", "false")
                 .getOrCreate())
        try:
            spark.dataSource.register(TieredKafkaDataSource)
            frame = (spark.read.format("tiered-kafka").option("kafka.bootstrap.servers", proxy.bootstrap)
                     .option("subscribe", topic).option("remote.log.storage.uri", remote[1])
                     .option("remote.log.metadata.uri", "manifests:").options(**storage_keys).load())
            tasks = frame.rdd.getNumPartitions()
            rows = frame.select("partition", "offset", "value").collect()
        finally:
            spark.stop()
        # One task per remote segment, planned from the manifests (no tail: the archive ends at Ry).
        described = read_bucket(storage_from_uri(remote[1], **storage_keys)).state
        assert tasks == sum(len(described.finished(tp)) for tp in described.partitions if tp.topic == topic) > 2
        assert sorted(message_number(bytes(r.value)) for r in rows) == list(range(RECORDS))
        assert len({(r.partition, r.offset) for r in rows}) == RECORDS
        assert "marked for deletion" not in proxy.log_path.read_text()
    finally:
        proxy.stop()
        client.close()
