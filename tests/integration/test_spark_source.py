"""The ``tiered-kafka`` PySpark data source on ``local[2]`` against the tiered history (noida-db,
log start moved past more than half of each partition): the remote part read straight from the
remote tier, the tail through the proxy, every column equal to what consumers read."""

from __future__ import annotations

import datetime
import json
import os
import sys
import time
from pathlib import Path

import pytest

from tests.clients import Record
from tests.history import PARTITIONS

pyspark_sql = pytest.importorskip("pyspark.sql")
EPOCH = datetime.datetime(1970, 1, 1)


@pytest.fixture(scope="module")
def spark():
    from tiering.spark.source import TieredKafkaDataSource

    os.environ["PYSPARK_PYTHON"] = sys.executable  # executors run this venv's interpreter
    session = (pyspark_sql.SparkSession.builder.master("local[2]").appName("tiered-kafka-tests")
               .config("spark.ui.enabled", "false").config("spark.sql.session.timeZone", "UTC")
               .config("spark.sql.shuffle.partitions", "4").getOrCreate())
    session.dataSource.register(TieredKafkaDataSource)
    yield session
    session.stop()


def source_options(history, **extra: str) -> dict[str, str]:
    return {"kafka.bootstrap.servers": history.proxy.bootstrap, "subscribe": history.topic,
            "remote.log.storage.uri": f"file://{history.data_dir / 'remote'}",
            "remote.log.metadata.uri": f"file://{history.data_dir / 'metadata'}", "includeHeaders": "true", **extra}


def by_partition(rows) -> dict[int, list[Record]]:  # noqa: ANN001
    out: dict[int, list[Record]] = {}
    for row in rows:
        assert row.timestampType == 0
        millis = (row.timestamp - EPOCH) // datetime.timedelta(milliseconds=1)
        headers = tuple((h.key, h.value) for h in row.headers)
        out.setdefault(row.partition, []).append(Record(row.offset, millis, row.key, row.value, headers))
    for records in out.values():
        records.sort(key=lambda r: r.offset)
    return out


def load(spark, history, **extra: str):  # noqa: ANN001, ANN201
    reader = spark.read.format("tiered-kafka")
    for key, value in source_options(history, **extra).items():
        reader = reader.option(key, value)
    return reader.load()


def test_batch_read_committed_equals_the_whole_history(spark, history):
    df = load(spark, history, **{"kafka.isolation.level": "read_committed"})
    # One task per remote segment (plus one per partition's tail): remote data is read in parallel.
    segments = sum(len(s) for s in _segments(history).values())
    assert df.rdd.getNumPartitions() >= segments > PARTITIONS
    assert by_partition(df.collect()) == history.committed


def test_batch_read_uncommitted_equals_the_whole_history_with_aborted_records(spark, history):
    # history.everything: a read_uncommitted consumer's read from the broker before the proxy
    # moved its log start (tests/integration/test_tiered_reads.py checks consumers through the proxy).
    # Which records, by offset: the committed read above checks every column of the same rows.
    rows = load(spark, history).select("partition", "offset").collect()
    got: dict[int, list[int]] = {}
    for row in rows:
        got.setdefault(row.partition, []).append(row.offset)
    assert {p: sorted(offsets) for p, offsets in got.items()} == {
        p: [r.offset for r in records] for p, records in history.everything.items()}


def test_starting_and_ending_offsets_select_ranges(spark, history):
    starts = {"0": 1000, "1": -2, "2": len(history.everything[2]) - 500}
    ends = {"0": 2500, "1": history.log_starts[1] + 10, "2": -1}
    df = load(spark, history, startingOffsets=json.dumps({history.topic: starts}),
              endingOffsets=json.dumps({history.topic: ends}))
    got = by_partition(df.collect())
    for p in range(PARTITIONS):
        low = starts[str(p)] if starts[str(p)] >= 0 else 0
        high = ends[str(p)] if ends[str(p)] >= 0 else 1 << 62
        assert got.get(p, []) == [r for r in history.everything[p] if low <= r.offset < high], p


def test_starting_timestamp_lands_in_the_remote_range(spark, history):
    middle = history.everything[0][len(history.everything[0]) // 4]  # below the broker's log start
    assert middle.offset < history.log_starts[0]
    got = by_partition(load(spark, history, startingTimestamp=str(middle.timestamp)).collect())
    for p in range(PARTITIONS):
        first = min((r.offset for r in history.everything[p] if r.timestamp >= middle.timestamp), default=None)
        want = [r for r in history.everything[p] if first is not None and r.offset >= first]
        assert got.get(p, []) == want, p


def test_streaming_with_max_offsets_resumes_from_its_checkpoint(spark, history, tmp_path):
    out, checkpoint = tmp_path / "out", tmp_path / "checkpoint"
    limit = 40_000

    def start(trigger: dict):  # noqa: ANN202
        reader = spark.readStream.format("tiered-kafka")
        options = source_options(history, startingOffsets="earliest", maxOffsetsPerTrigger=str(limit),
                                 **{"kafka.isolation.level": "read_committed"})
        for key, value in options.items():
            reader = reader.option(key, value)
        return (reader.load().writeStream.format("parquet").option("path", str(out))
                .option("checkpointLocation", str(checkpoint)).trigger(**trigger).start())

    first = start({"processingTime": "1 second"})
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline and len([p for p in first.recentProgress if p["numInputRows"] > 0]) < 2:
        time.sleep(0.5)
    first.stop()
    batches_before = len(list((checkpoint / "commits").iterdir()))
    assert batches_before >= 2
    second = start({"availableNow": True})  # restart from the checkpoint, read up to the end, stop
    assert second.awaitTermination(300)
    progress = [p for p in first.recentProgress + second.recentProgress if p["numInputRows"] > 0]
    assert all(p["numInputRows"] <= limit for p in progress)
    total = sum(len(v) for v in history.committed.values())
    assert len(list((checkpoint / "commits").iterdir())) >= total // limit
    assert by_partition(spark.read.parquet(str(out)).collect()) == history.committed


def _segments(history) -> dict[int, list]:  # noqa: ANN001
    from tiering.metadata.view import load_metadata

    state = load_metadata(f"file://{Path(history.data_dir) / 'metadata'}")
    return {tp.partition: state.finished(tp) for tp in state.readable_partitions() if tp.topic == history.topic}


def test_backfill_command_writes_the_history_to_parquet(spark, history, tmp_path):
    import subprocess

    out = tmp_path / "parquet"
    # Around the broker's log start: remote part and tail both, in a bounded time.
    start = {p: history.log_starts[p] - 2000 for p in range(PARTITIONS)}
    end = {p: history.log_starts[p] + 2000 for p in range(PARTITIONS)}
    done = subprocess.run(
        [sys.executable, "-m", "proxy.cli", "backfill", "--bootstrap-servers", history.proxy.bootstrap,
         "--topic", history.topic, "--output", str(out), "--master", "local[2]",
         "--remote", f"file://{history.data_dir / 'remote'}", "--metadata", f"file://{history.data_dir / 'metadata'}",
         "--option", "startingOffsets=" + json.dumps({history.topic: {str(p): start[p] for p in range(PARTITIONS)}}),
         "--option", "endingOffsets=" + json.dumps({history.topic: {str(p): end[p] for p in range(PARTITIONS)}})],
        capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "tasks (one per remote segment" in done.stderr and " rows to " in done.stderr
    assert by_partition(spark.read.parquet(str(out)).collect()) == {
        p: [r for r in records if start[p] <= r.offset < end[p]] for p, records in history.committed.items()}


SPARK_KAFKA_JARS = "TIERED_PROXY_SPARK_KAFKA_JARS"  # a folder of connector jars to use instead


def test_sparks_own_kafka_source_reads_the_whole_history_through_the_proxy(history, tmp_path):
    """Spark's own JVM Kafka source (the connector jars from Maven Central, tests/maven_jars.py)
    reads the topic from ``earliest`` through the proxy, batch and streaming."""
    import subprocess

    import pyspark

    from tests.maven_jars import spark_kafka_connector

    jars = os.environ.get(SPARK_KAFKA_JARS) or str(spark_kafka_connector(pyspark.__version__))
    job = Path(__file__).parent.parent / "spark_kafka_job.py"
    done = subprocess.run([sys.executable, str(job), jars, history.proxy.bootstrap,
                           history.topic, str(tmp_path)], capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    want = sorted([p, r.offset] for p, records in history.everything.items() for r in records)
    assert result["batch"] == want  # offset 0 onwards: the remote part too
    assert result["stream"] == want


def test_split_segments_read_the_same_rows(spark, history):
    """maxRecordsPerPartition splits segments at offset index entries: more tasks, same rows."""
    ends = json.dumps({history.topic: {"0": 12_000, "1": 12_000, "2": 12_000}})
    whole = load(spark, history, endingOffsets=ends)
    split = load(spark, history, maxRecordsPerPartition="2000", endingOffsets=ends)
    assert split.rdd.getNumPartitions() > whole.rdd.getNumPartitions()
    assert by_partition(split.collect()) == by_partition(whole.collect())


def test_assign_and_subscribe_pattern_choose_partitions(spark, history):
    ends = json.dumps({history.topic: {"0": 20_000, "1": 20_000, "2": 20_000}})
    options = {k: v for k, v in source_options(history, endingOffsets=ends).items() if k != "subscribe"}
    assigned = spark.read.format("tiered-kafka").options(**options, assign=json.dumps({history.topic: [1]})).load()
    got = by_partition(assigned.collect())
    assert list(got) == [1] and got[1] == [r for r in history.everything[1] if r.offset < 20_000]
    pattern = spark.read.format("tiered-kafka").options(**options, subscribePattern="history-.*").load()
    assert {r.partition for r in pattern.select("partition").distinct().collect()} == set(range(PARTITIONS))
    assert pattern.count() == sum(len([r for r in v if r.offset < 20_000]) for v in history.everything.values())
