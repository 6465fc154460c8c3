"""``tiered-proxy iceberg`` (tiering/spark/iceberg.py): a tiered topic kept as an Apache Iceberg table
by Spark 4.1 with Iceberg's Spark runtime from Maven Central, in front of Apache Kafka 4.4.

The table is read back by readers nobody here wrote (pyiceberg, and Spark SQL through Iceberg's
runtime) and compared, row by row, with a read_committed read of the topic from offset 0 through
the proxy: no aborted record, every tiered record once. A run with nothing new adds nothing; a run
killed at a random point and run again leaves no duplicate and no gap (five times); DeleteRecords
through the proxy, and tiering disabled with KIP-950's delete policy, take the rows the topic no
longer has out of the table in the next run."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import time
import zlib
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path

import pytest

from tests.admin_clients import Admin
from tests.iceberg_spark import iceberg_command, spark_sql
from tests.kafka_cluster import KafkaCluster
from tests.proxy_process import ProxyProcess, start_proxy
from tests.schema_registry import SchemaRegistryProcess
from tests.tiering_checks import leader_offsets, produce_mixed, produce_numbered, wait_until

pytestmark = pytest.mark.integration

PARTITIONS = 2
SEGMENT_BYTES = 32 * 1024
LATEST_TIERED = -5
JOB_TIMEOUT_S = 300
Row = tuple[int, int, bytes | None, bytes | None]  # partition, offset, key, value


@pytest.fixture
def proxy(kafka: KafkaCluster, tmp_path: Path) -> Iterator[ProxyProcess]:
    started = start_proxy(kafka.bootstrap, tmp_path, "--data-dir", str(tmp_path / "data"),
                          "--set", "remote.log.manager.task.interval.ms=200", "--set", f"log.segment.bytes={SEGMENT_BYTES}")
    yield started
    started.stop()


def _job_args(proxy: ProxyProcess, tmp_path: Path, topic: str) -> list[str]:
    return ["--bootstrap-servers", proxy.bootstrap, "--topic", topic, "--remote", f"file://{tmp_path}/data/remote",
            "--metadata", f"file://{tmp_path}/data/metadata", "--warehouse", f"file://{tmp_path}/warehouse",
            "--master", "local[2]"]


def _run(args: list[str]) -> str:
    command, env = iceberg_command(*args)
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=JOB_TIMEOUT_S,
                          stdin=subprocess.DEVNULL)
    assert done.returncode == 0, done.stderr[-4000:]
    return "\n".join(line for line in done.stderr.splitlines() if line.startswith("iceberg: "))


def _killed_run(args: list[str], after_s: float) -> None:
    """A run killed (SIGKILL, Spark's JVM too) ``after_s`` seconds in, whatever it was doing."""
    command, env = iceberg_command(*args)
    job = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                           stdin=subprocess.DEVNULL, start_new_session=True)
    try:
        job.wait(after_s)
    except subprocess.TimeoutExpired:
        os.killpg(job.pid, signal.SIGKILL)
        job.wait(30)


def _static_table(warehouse: Path, name: str, namespace: str = "kafka"):  # noqa: ANN202 - pyiceberg's
    """The table as pyiceberg reads it: its newest committed metadata (a Hadoop table commits by
    renaming the next vN.metadata.json into place)."""
    from pyiceberg.table import StaticTable

    return StaticTable.from_metadata(_metadata_file(warehouse, name, namespace))


def _metadata_file(warehouse: Path, name: str, namespace: str) -> str:
    """The table's current metadata file, as its catalog says: a SQLite catalog (``catalog.db`` in
    the warehouse, Iceberg's JdbcCatalog tables) or, for a Hadoop catalog, the highest
    ``vN.metadata.json`` (it commits by renaming the next one into place)."""
    import sqlite3

    catalog = warehouse / "catalog.db"
    if catalog.exists():
        with closing(sqlite3.connect(catalog)) as db:
            ((location,),) = db.execute("SELECT metadata_location FROM iceberg_tables WHERE table_namespace = ? "
                                        "AND table_name = ?", (namespace, name)).fetchall()
        return location.removeprefix("file:")
    folder = warehouse / namespace / name / "metadata"
    return str(max(folder.glob("v*.metadata.json"), key=lambda p: int(p.name[1:].split(".")[0])))


def _table_rows(warehouse: Path, name: str, namespace: str = "kafka", extra: tuple[str, ...] = ()) -> list[tuple]:
    columns = ("partition", "offset", "key", "value", *extra)
    rows = _static_table(warehouse, name, namespace).scan(selected_fields=columns).to_arrow()
    return list(zip(*(rows[c].to_pylist() for c in columns), strict=True))


def _committed_read(bootstrap: str, topic: str, ends: dict[int, int]) -> list[Row]:
    """Every record below ``ends`` read from offset 0 through the proxy, read_committed."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"ice-{os.urandom(4).hex()}",
                         "enable.auto.commit": False, "isolation.level": "read_committed"})
    consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in ends])
    got: list[Row] = []
    deadline = time.monotonic() + 120
    try:
        while time.monotonic() < deadline:
            for message in consumer.consume(1000, 0.5):
                assert message.error() is None, message.error()
                if message.offset() < ends[message.partition()]:
                    got.append((message.partition(), message.offset(), message.key(), message.value()))
            positions = consumer.position([TopicPartition(topic, p) for p in ends])
            if all(tp.offset >= ends[tp.partition] for tp in positions):
                return got
        raise AssertionError(f"read {len(got)} records through the proxy, not up to {ends} in 120 s")
    finally:
        consumer.close()


def _duckdb_rows(warehouse: Path, name: str, namespace: str = "kafka") -> list[tuple]:
    """The table as DuckDB's Iceberg extension (from PyPI, duckdb-extension-iceberg) reads it."""
    import duckdb
    from duckdb_extensions import import_extension

    newest = _metadata_file(warehouse, name, namespace)
    connection = duckdb.connect()
    try:
        for extension in ("avro", "iceberg"):  # Iceberg's manifests are Avro files
            import_extension(extension, con=connection)
        connection.sql("LOAD iceberg")
        return connection.sql(f'SELECT "partition", "offset", "key", "value" FROM iceberg_scan(\'{newest}\')').fetchall()
    finally:
        connection.close()


def _table_ends(warehouse: Path, name: str, namespace: str = "kafka") -> dict[int, int]:
    """The next offset per partition the table's newest append recorded, among its current
    snapshot and that snapshot's ancestors."""
    table = _static_table(warehouse, name, namespace)
    snapshot = table.current_snapshot()
    while snapshot is not None:
        recorded = snapshot.summary.additional_properties.get("tiered-proxy.offsets") if snapshot.summary else None
        if recorded is not None:
            return {int(p): o for p, o in next(iter(json.loads(recorded).values())).items()}
        snapshot = table.snapshot_by_id(snapshot.parent_snapshot_id) if snapshot.parent_snapshot_id else None
    return {}


def _tiered_ends(bootstrap: str, topic: str) -> dict[int, int]:
    return {p: o + 1 for p, o in leader_offsets(bootstrap, topic, LATEST_TIERED).items()}


def _same_as_the_topic(proxy: ProxyProcess, warehouse: Path, topic: str) -> list[Row]:
    rows = _table_rows(warehouse, topic.replace("-", "_"))
    keys = [(p, o) for p, o, _, _ in rows]
    assert len(keys) == len(set(keys)), "a record twice in the table"
    expected = _committed_read(proxy.bootstrap, topic, _table_ends(warehouse, topic.replace("-", "_")))
    assert sorted(rows) == sorted(expected)
    return rows


# Some 14 Spark starts: about 3 minutes alone, over 5 beside the other worker's tests (CI hit 300 s).
@pytest.mark.timeout(900)
def test_a_tiered_topic_kept_as_an_iceberg_table_exactly_once(kafka: KafkaCluster, proxy: ProxyProcess,
                                                              tmp_path: Path, unique_name: str) -> None:
    topic = f"ice-{unique_name}"
    name = topic.replace("-", "_")
    warehouse = tmp_path / "warehouse"
    admin = Admin("confluent", proxy.bootstrap)
    try:
        admin.create_topic(topic, PARTITIONS, {"remote.storage.enable": "true", "local.retention.bytes": str(SEGMENT_BYTES)})
        produce_numbered(proxy.bootstrap, topic, 0, 3000, PARTITIONS, value_bytes=200)  # incompressible: segments close
        workload = produce_mixed(proxy.bootstrap, topic, 1000, transactions=3, transaction_size=30)
        assert workload.aborted_messages == 30
        produce_numbered(proxy.bootstrap, topic, 3000, 1000, PARTITIONS, value_bytes=200)  # the transactions tiered too
        args = _job_args(proxy, tmp_path, topic)
        assert wait_until(lambda: min(_tiered_ends(proxy.bootstrap, topic).values()) > 2000, 60), \
            (_tiered_ends(proxy.bootstrap, topic), leader_offsets(proxy.bootstrap, topic, -1))

        # 1. The first run: everything tiered, read_committed.
        said = _run(args)
        assert " rows added" in said, said
        rows = _same_as_the_topic(proxy, warehouse, topic)
        values = {value for _, _, _, value in rows}
        assert b"tx0-0" in values and b"tx2-0" not in values  # committed in, aborted out (read_committed)
        assert len(rows) > 4000

        # 2. Nothing new: nothing added.
        held = _table_ends(warehouse, name)
        if _tiered_ends(proxy.bootstrap, topic) == held:
            assert ": 0 offsets to add" in _run(args)

        # 3. Killed at a random point and run again, five times, the topic growing in between.
        rng = random.Random(unique_name)
        for round_ in range(5):
            before = _table_ends(warehouse, name)
            produce_numbered(proxy.bootstrap, topic, 10_000 * (round_ + 1), 400, PARTITIONS, value_bytes=200)
            assert wait_until(lambda b=before: any(o > b[p] for p, o in _tiered_ends(proxy.bootstrap, topic).items()), 60)
            _killed_run(args, rng.uniform(0.5, 10.0))
            _run(args)
            _same_as_the_topic(proxy, warehouse, topic)
            assert any(o > before[p] for p, o in _table_ends(warehouse, name).items()), round_

        # 4. DeleteRecords through the proxy: the next run deletes those rows too.
        admin.delete_records(topic, {0: 500})
        said = _run(args)
        rows = _same_as_the_topic(proxy, warehouse, topic)
        assert min(o for p, o, _, _ in rows if p == 0) >= 500, said
        assert any(p == 1 and o < 500 for p, o, _, _ in rows)

        # 5. KIP-950: tiering disabled with the delete policy. The remote data goes, and with it the
        # rows below the brokers' log start.
        admin.set_configs(topic, {"remote.log.disable.policy": "delete", "remote.storage.enable": "false"})
        broker_start = leader_offsets(kafka.bootstrap, topic, -2)
        assert wait_until(lambda: leader_offsets(proxy.bootstrap, topic, -2) == broker_start, 60)
        assert min(broker_start.values()) > 0, broker_start  # local retention had trimmed the brokers' log
        said = _run(args)
        rows = _same_as_the_topic(proxy, warehouse, topic)
        assert all(o >= broker_start[p] for p, o, _, _ in rows), said

        # 6. Spark SQL, through Iceberg's runtime, and DuckDB's Iceberg extension read what pyiceberg
        # read (row for row the topic): the same count, offsets and value checksums.
        ((count, distinct, offsets, crcs),) = spark_sql(
            f"file://{warehouse}", "SELECT count(*), count(DISTINCT partition, offset), sum(offset), "
            f"sum(crc32(value)) FROM tiered.kafka.{name}")
        assert (count, distinct, offsets, crcs) == (len(rows), len(rows), sum(o for _, o, _, _ in rows),
                                                    sum(zlib.crc32(v) for *_, v in rows if v is not None))
        assert sorted(_duckdb_rows(warehouse, name)) == sorted(rows)
    finally:
        admin.close()


def _produce_keyed(bootstrap: str, topic: str, values: Iterator[tuple[int, bytes | None]]) -> None:
    """Each ``(i, value)`` keyed by ``i``, into partition ``i % PARTITIONS``."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for i, value in values:
        producer.produce(topic, value=value, key=str(i).encode(), partition=i % PARTITIONS)
        if i % 500 == 0:
            producer.flush(30)
    assert producer.flush(30) == 0


def _json_values(start: int, count: int, *, amount: bool) -> Iterator[tuple[int, bytes | None]]:
    """Records ``start..start+count-1`` as JSON objects ``{"id", "name", "pad"}`` (and ``amount``
    when asked), among them some that cannot decode: every 50th is not JSON, every 70th past the
    first 300 has a string ``id``, and every 97th is a tombstone (null value)."""
    for i in range(start, start + count):
        record: dict[str, object] = {"id": i, "name": f"n-{i}", "pad": os.urandom(60).hex()}
        if amount:
            record["amount"] = i / 4
        value: bytes | None = json.dumps(record).encode()
        if i % 50 == 0:
            value = b"not json {" + str(i).encode()
        elif i % 70 == 0 and i >= 300:
            value = json.dumps({**record, "id": f"x{i}"}).encode()
        elif i % 97 == 0:
            value = None
        yield i, value


def _produce_json(bootstrap: str, topic: str, start: int, count: int, *, amount: bool) -> None:
    _produce_keyed(bootstrap, topic, _json_values(start, count, amount=amount))


def _json_tables(warehouse: Path, name: str, namespace: str = "kafka") -> tuple[list[tuple], list[tuple]]:
    rows = _table_rows(warehouse, name, namespace, ("decoded_value",))
    dead = _table_rows(warehouse, f"{name}_dead_letters", namespace, ("decode_error",))
    return rows, dead


def _check_json_tables(proxy: ProxyProcess, warehouse: Path, topic: str, namespace: str = "kafka") -> tuple[list, list]:
    """Rows and dead letters together are the topic exactly once; every row's decoded value is its
    JSON, every dead letter's value is one that does not decode."""
    name = topic.replace("-", "_")
    rows, dead = _json_tables(warehouse, name, namespace)
    together = [r[:4] for r in rows] + [d[:4] for d in dead]
    assert len({(p, o) for p, o, _, _ in together}) == len(together), "a record twice in the tables"
    ends = _table_ends(warehouse, name, namespace)
    assert sorted(together) == sorted(_committed_read(proxy.bootstrap, topic, ends))
    for _, _, key, value, decoded in rows:
        if value is None:
            assert decoded is None
            continue
        record = json.loads(value)
        assert decoded["id"] == record["id"] and decoded["name"] == record["name"], (key, value, decoded)
        assert decoded.get("amount") == record.get("amount")
    for _, _, _, value, error in dead:
        assert value.startswith(b"not json") or isinstance(json.loads(value)["id"], str), value
        assert error and "not a JSON object" in error
    return rows, dead


@pytest.mark.timeout(600)
def test_json_values_become_columns_and_what_does_not_decode_a_dead_letter(
        kafka: KafkaCluster, proxy: ProxyProcess, tmp_path: Path, unique_name: str) -> None:
    topic = f"icejson-{unique_name}"
    name = topic.replace("-", "_")
    warehouse = tmp_path / "warehouse"
    admin = Admin("confluent", proxy.bootstrap)
    try:
        admin.create_topic(topic, PARTITIONS, {"remote.storage.enable": "true", "local.retention.bytes": str(SEGMENT_BYTES)})
        _produce_json(proxy.bootstrap, topic, 0, 2000, amount=False)
        assert wait_until(lambda: min(_tiered_ends(proxy.bootstrap, topic).values()) > 500, 60)
        args = [*_job_args(proxy, tmp_path, topic), "--value-format", "json", "--json-sample-records", "200"]

        # 1. Inferred from the first 200 values (all ids numbers): later string ids are dead letters.
        said = _run(args)
        assert f"to tiered.kafka.{name}_dead_letters" in said, said
        rows, dead = _check_json_tables(proxy, warehouse, topic)
        assert rows and dead and any(value is None for _, _, _, value, _ in rows)
        assert {f.name for f in _static_table(warehouse, name).schema().find_field("decoded_value").field_type.fields} \
            == {"id", "name", "pad"}

        # 2. A new field: a new column of the struct (Iceberg schema evolution); old rows read it as
        # null. (Runs killed at random points: the first test; between the two tables: step 3.)
        before = _table_ends(warehouse, name)
        _produce_json(proxy.bootstrap, topic, 2000, 1500, amount=True)
        assert wait_until(lambda: all(o > before[p] for p, o in _tiered_ends(proxy.bootstrap, topic).items()), 60)
        _run(args)
        rows, dead = _check_json_tables(proxy, warehouse, topic)
        amounts = [d["amount"] for _, o, _, v, d in rows if d is not None and json.loads(v).get("amount") is not None]
        assert amounts and all(a is not None for a in amounts)

        # 3. A run killed after it appended the rows but before the dead letters (the dead-letter
        # table rolled back to before them, with Iceberg's own procedure): the next run, with
        # nothing new to add, adds them.
        before = _table_ends(warehouse, name)
        _produce_json(proxy.bootstrap, topic, 3500, 600, amount=True)
        assert wait_until(lambda: all(o > before[p] for p, o in _tiered_ends(proxy.bootstrap, topic).items()), 60)
        _run(args)
        rows, dead = _check_json_tables(proxy, warehouse, topic)
        dead_table = _static_table(warehouse, f"{name}_dead_letters")
        previous = sorted(dead_table.snapshots(), key=lambda s: s.timestamp_ms)[-2].snapshot_id
        spark_sql(f"file://{warehouse}", f"CALL tiered.system.rollback_to_snapshot('kafka.{name}_dead_letters', "
                  f"{previous})")
        missing = len(dead) - len(_json_tables(warehouse, name)[1])
        assert missing > 0
        said = _run(args)
        assert ": 0 offsets to add" in said and f", {missing} to tiered.kafka.{name}_dead_letters" in said, said
        assert sorted(_check_json_tables(proxy, warehouse, topic)[1]) == sorted(dead)
        amounts = [d["amount"] for _, o, _, v, d in rows if d is not None and json.loads(v).get("amount") is not None]

        # 4. A declared schema, into a SQL catalog on SQLite (no server): the same split.
        declared_at = tmp_path / "declared"
        declared_at.mkdir()
        declared = [*_job_args(proxy, tmp_path, topic), "--warehouse", f"file://{declared_at}", "--catalog-type", "jdbc",
                    "--catalog-uri", f"jdbc:sqlite:{declared_at}/catalog.db", "--value-format", "json",
                    "--value-schema", "id BIGINT, name STRING, amount DOUBLE"]
        _run(declared)
        d_rows, d_dead = _check_json_tables(proxy, declared_at, topic)
        assert {(p, o) for p, o, *_ in d_dead} == {(p, o) for p, o, *_ in dead}

        # 5. Spark SQL reads the struct's columns.
        ((count, total),) = spark_sql(f"file://{warehouse}", "SELECT count(*), sum(decoded_value.amount) "
                                      f"FROM tiered.kafka.{name}")
        assert count == len(rows) and total == pytest.approx(sum(amounts))
    finally:
        admin.close()


ORDER_V1 = {"type": "record", "name": "Order", "namespace": "shop",
            "fields": [{"name": "id", "type": "long"}, {"name": "name", "type": "string"}]}
ORDER_V2 = {**ORDER_V1, "fields": [*ORDER_V1["fields"], {"name": "amount", "type": "double", "default": 0.0}]}


def _produce_avro(bootstrap: str, registry_url: str, topic: str, start: int, count: int, schema: dict) -> None:
    """Records ``start..start+count-1`` serialized by Confluent's own Avro serializer (which
    registers ``schema`` under ``<topic>-value``), keyed by their number; among them every 40th
    is text without the wire-format header, every 45th names a schema id the registry lacks,
    every 55th is cut short, every 97th is a tombstone."""
    from confluent_kafka.schema_registry import SchemaRegistryClient, topic_subject_name_strategy
    from confluent_kafka.schema_registry.avro import AvroSerializer
    from confluent_kafka.serialization import MessageField, SerializationContext

    # TopicNameStrategy, named: the client's default asks Confluent's own "associations" endpoint
    # for every record first, and a request without a timeout can wait for ever on a slow answer.
    client = SchemaRegistryClient({"url": registry_url, "timeout": 30})
    serializer = AvroSerializer(client, json.dumps(schema), conf={"subject.name.strategy": topic_subject_name_strategy})
    context = SerializationContext(topic, MessageField.VALUE)

    def values() -> Iterator[tuple[int, bytes | None]]:
        for i in range(start, start + count):
            value: bytes | None = serializer({"id": i, "name": f"n-{i}-{os.urandom(40).hex()}", "amount": i / 4},
                                             context)
            if i % 40 == 0:
                value = f"plain text {i}".encode()
            elif i % 45 == 0:
                value = b"\x00\x00\x0f\x42\x3f" + value[5:]  # schema id 999999
            elif i % 55 == 0:
                value = value[:6]
            elif i % 97 == 0:
                value = None
            yield i, value

    _produce_keyed(bootstrap, topic, values())


@pytest.fixture
def schema_registry(tmp_path: Path) -> Iterator[SchemaRegistryProcess]:
    registry = SchemaRegistryProcess(tmp_path / "apicurio.log")
    yield registry
    registry.stop()


@pytest.mark.timeout(600)
def test_avro_values_decode_by_the_registry_and_a_new_version_adds_a_column(
        kafka: KafkaCluster, proxy: ProxyProcess, schema_registry: SchemaRegistryProcess, tmp_path: Path,
        unique_name: str) -> None:
    topic = f"iceavro-{unique_name}"
    name = topic.replace("-", "_")
    warehouse = tmp_path / "warehouse"
    admin = Admin("confluent", proxy.bootstrap)
    args = [*_job_args(proxy, tmp_path, topic), "--value-format", "avro", "--schema-registry-url", schema_registry.url]
    reasons = {40: "not in Confluent's wire format", 45: "schema id 999999 is not a version of subject",
               55: "does not decode as Avro with schema id"}

    def check(versions_with_amount_from: int) -> list[tuple]:
        rows, dead = _json_tables(warehouse, name)
        together = [r[:4] for r in rows] + [d[:4] for d in dead]
        assert len({(p, o) for p, o, _, _ in together}) == len(together), "a record twice in the tables"
        assert sorted(together) == sorted(_committed_read(proxy.bootstrap, topic, _table_ends(warehouse, name)))
        for _, _, key, value, decoded in rows:
            i = int(key)
            assert not any(i % k == 0 for k in reasons), (i, decoded)
            if value is None:
                assert i % 97 == 0 and decoded is None
                continue
            assert decoded["id"] == i and decoded["name"].startswith(f"n-{i}-"), decoded
            # Version 1's records read before version 2 existed have no amount; read after, its default.
            assert decoded.get("amount") in ((i / 4,) if i >= versions_with_amount_from else (None, 0.0)), decoded
        for _, _, key, _, error in dead:
            kind = next(k for k in reasons if int(key) % k == 0)
            assert reasons[kind] in error, (key, error)
        assert {int(k) % 40 == 0 for _, _, k, _, _ in dead} == {True, False}
        return rows

    try:
        admin.create_topic(topic, PARTITIONS, {"remote.storage.enable": "true", "local.retention.bytes": str(SEGMENT_BYTES)})
        _produce_avro(proxy.bootstrap, schema_registry.url, topic, 0, 1500, ORDER_V1)
        assert wait_until(lambda: min(_tiered_ends(proxy.bootstrap, topic).values()) > 300, 60)
        said = _run(args)
        assert f"to tiered.kafka.{name}_dead_letters" in said, said
        check(versions_with_amount_from=10**9)

        # Version 2 adds a field with a default: the table gains the column; older rows read null.
        before = _table_ends(warehouse, name)
        _produce_avro(proxy.bootstrap, schema_registry.url, topic, 1500, 1500, ORDER_V2)
        assert wait_until(lambda: all(o > before[p] for p, o in _tiered_ends(proxy.bootstrap, topic).items()), 60)
        _run(args)
        rows = check(versions_with_amount_from=1500)
        assert any(d is not None and d["amount"] is not None for *_, d in rows)
    finally:
        admin.close()


@pytest.mark.timeout(600)
def test_an_archived_topic_becomes_a_table_from_the_bucket(kafka: KafkaCluster, tmp_path: Path,
                                                          unique_name: str) -> None:
    """A topic deleted through the proxy and kept as an archive (proxy.archived.topics,
    proxy.deleted.topic.retention.ms=-1): the job plans from the remote tier's own manifests
    (``--metadata manifests:``), as for a read replica of another cluster's bucket, and the table
    is every record the archive serves through the proxy."""
    from tiering.broker_client import BrokerClient

    topic = f"icearch-{unique_name}"
    name = topic.replace("-", "_")
    warehouse = tmp_path / "warehouse"
    proxy = start_proxy(kafka.bootstrap, tmp_path, "--data-dir", str(tmp_path / "data"),
                        "--set", "remote.log.manager.task.interval.ms=200", "--set", f"log.segment.bytes={SEGMENT_BYTES}",
                        "--set", "proxy.manifest.interval.ms=300", "--set", "proxy.archived.topics.refresh.interval.ms=500",
                        "--set", f"proxy.archived.topics={topic}", "--set", "proxy.deleted.topic.retention.ms=-1")
    admin = Admin("confluent", proxy.bootstrap)
    brokers = BrokerClient(kafka.bootstrap)
    try:
        admin.create_topic(topic, PARTITIONS, {"remote.storage.enable": "true", "local.retention.bytes": str(SEGMENT_BYTES)})
        produce_numbered(proxy.bootstrap, topic, 0, 2000, PARTITIONS, value_bytes=200)
        assert wait_until(lambda: min(_tiered_ends(proxy.bootstrap, topic).values()) > 600, 60)
        tiered = _tiered_ends(proxy.bootstrap, topic)
        admin.delete_topic(topic)
        assert wait_until(lambda: topic not in brokers.metadata([topic]), 30)
        # Served from the archive (once the proxy's archive index has it): its end is what was tiered.

        def served_ends() -> dict[int, int] | None:
            try:
                return _tiered_ends(proxy.bootstrap, topic)
            except KeyError:  # not in the proxy's Metadata yet
                return None

        assert wait_until(lambda: served_ends() == tiered, 30), (served_ends(), tiered)

        args = ["--bootstrap-servers", proxy.bootstrap, "--topic", topic, "--remote", f"file://{tmp_path}/data/remote",
                "--metadata", "manifests:", "--warehouse", f"file://{warehouse}", "--master", "local[2]"]
        said = _run(args)
        assert f"{sum(tiered.values())} offsets to add" in said, said
        rows = _table_rows(warehouse, name)
        assert sorted(r[:4] for r in rows) == sorted(_committed_read(proxy.bootstrap, topic, tiered))
        assert ": 0 offsets to add" in _run(args)  # an archive does not grow
    finally:
        admin.close()
        brokers.close()
        proxy.stop()
