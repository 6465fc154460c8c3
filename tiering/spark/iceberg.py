"""Tiered topics as Apache Iceberg tables, kept in step with the remote tier by Spark
(``tiered-proxy iceberg``).

Each run appends to one Iceberg table per topic the records the remote tier gained since the last
run, read by the ``tiered-kafka`` source (one Spark task per remote segment, straight from the
remote tier), and deletes from it what the remote tier no longer holds:

- **Columns** are Spark's Kafka source's: ``key, value, topic, partition, offset, timestamp,
  timestampType, headers``. The table is partitioned by ``days(timestamp)``: people ask a topic's
  history for a time range ("yesterday's orders"), and a day keeps files few and large at any rate;
  a Kafka partition is how the data was written, not how it is asked for. Each task writes one
  segment's records in offset order, so a lookup by offset reads few files.
- **In step with the remote tier**: a run reads each partition from where the table ends to the
  highest tiered offset (ListOffsets -5 through the proxy), never the brokers' tail, so what it adds
  is what the remote tier holds.
- **Exactly once**: the append that adds the rows records, in the same Iceberg commit, the next
  offset of every partition (snapshot summary ``tiered-proxy.offsets``). A run starts from the
  newest snapshot that records them. A run killed at any point either committed (and the next
  starts after it) or did not (and the next reads the same range again): no duplicate, no gap.
- **read_committed** by default: aborted transactions never reach the table.
- **Deletes follow the topic**: rows below a partition's earliest offset through the proxy
  (ListOffsets -2: the remote log start after retention or DeleteRecords, the brokers' log start
  once KIP-950's ``delete`` policy removed the remote data) are deleted with Iceberg row-level
  deletes in the same run.

It runs on Spark 4.0 or 4.1 with Iceberg's Spark runtime (:data:`ICEBERG_RUNTIME`, downloaded
from Maven Central once into the cache, or a local jar): Iceberg has no runtime for Spark 4.2+
yet. Catalogs: Hadoop (a folder or bucket, no server), SQL (e.g. SQLite through JDBC) or REST.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TextIO

from tiering.spark.jars import runtime_jar, spark_module_jar
from tiering.spark.splits import OffsetPlanner
from tiering.spark.values import (
    DECODED_COLUMN,
    ERROR_COLUMN,
    ValueDecoding,
    column_ddl,
    dead_letter_table,
    table_schema,
    value_columns,
)

ICEBERG_RUNTIME = "org.apache.iceberg:iceberg-spark-runtime-4.1_2.13:1.12.0"
SPARK_FOR_RUNTIME = (4, 1)  # the newest Spark it is built for
SQLITE_JDBC = "org.xerial:sqlite-jdbc:3.54.1.0"  # a jdbc:sqlite: catalog's driver
OFFSETS_PROPERTY = "tiered-proxy.offsets"  # snapshot summary: {"topic": {"partition": next offset}}
# An append's summary, with decoding: where its range started (it ends at its offsets). That range's
# dead letters belong in the dead-letter table, up to its offsets once they are there.
DEAD_LETTERS_PROPERTY = "tiered-proxy.dead-letters-from"
LATEST_TIERED = -5  # ListOffsets: the highest offset in the remote tier (KIP-1005)
EARLIEST = -2  # ListOffsets through the proxy: the remote log start
CATALOG_TYPES = ("hadoop", "rest", "jdbc")
TABLE_COLUMNS = ("key BINARY, value BINARY, topic STRING, partition INT, offset BIGINT, timestamp TIMESTAMP, "
                 "timestampType INT, headers ARRAY<STRUCT<key: STRING, value: BINARY>>")

Offsets = dict[tuple[str, int], int]


@dataclass
class SyncResult:
    table: str
    rows_added: int
    rows_deleted: int
    before: Offsets  # next offset per partition the table held before the run
    after: Offsets  # ... and after it
    seconds: float
    dead_letters: int = 0  # rows added to the dead-letter table


def iceberg_session(  # noqa: ANN201 - pyspark's SparkSession
        master: str, catalog: str, warehouse: str, *, catalog_type: str = "hadoop", catalog_uri: str | None = None,
        runtime: str = ICEBERG_RUNTIME, avro: bool = False, conf: Mapping[str, str] | None = None):
    """A session with Iceberg's extensions, the ``tiered-kafka`` source and one Iceberg catalog
    named ``catalog``. ``runtime``: a Maven coordinate (fetched once) or a local jar; ``avro``: with Spark's Avro functions too."""
    import pyspark
    from pyspark.sql import SparkSession

    from tiering.spark.source import TieredKafkaDataSource

    major_minor = tuple(int(n) for n in pyspark.__version__.split(".")[:2])
    if runtime == ICEBERG_RUNTIME and not (4, 0) <= major_minor <= SPARK_FOR_RUNTIME:
        raise ValueError(f"tiered-proxy iceberg runs on Spark 4.0 or 4.1 (Iceberg's Spark runtime stops at 4.1), "
                         f"not pyspark {pyspark.__version__}: install 'tiered-proxy[iceberg]' in an environment of "
                         "its own (docs/spark.md#iceberg), or give --iceberg-runtime one built for this Spark")
    if catalog_type not in CATALOG_TYPES:
        raise ValueError(f"catalog type {catalog_type!r}: expected one of {', '.join(CATALOG_TYPES)}")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    jars = [_runtime(runtime)]
    if avro:
        jars.append(str(spark_module_jar("spark-avro_2.13", pyspark.__version__)))
    if catalog_type == "jdbc" and (catalog_uri or "").startswith("jdbc:sqlite:"):
        jars.append(str(runtime_jar(SQLITE_JDBC)))  # a catalog in one file, no server
    prefix = f"spark.sql.catalog.{catalog}"
    # Iceberg's JDBC catalog schema with views (V1): Spark asks a catalog for views when it looks a
    # table up, and the older schema refuses that.
    catalog_conf = {f"{prefix}.jdbc.schema-version": "V1"} if catalog_type == "jdbc" else {}
    settings = {
        "spark.jars": ",".join(jars),
        "spark.sql.extensions": "org.apache.iceberg.spark.extensions.IcebergSparkSessionExtensions",
        "spark.sql.session.timeZone": "UTC", "spark.ui.showConsoleProgress": "false",
        prefix: "org.apache.iceberg.spark.SparkCatalog", f"{prefix}.type": catalog_type,
        f"{prefix}.warehouse": warehouse,
        **({f"{prefix}.uri": catalog_uri} if catalog_uri else {}),
        **catalog_conf,
        **(conf or {}),
    }
    builder = SparkSession.builder.master(master).appName("tiered-proxy-iceberg")
    for key, value in settings.items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    session.dataSource.register(TieredKafkaDataSource)
    return session


def _runtime(runtime: str) -> str:
    if runtime.endswith(".jar"):
        return runtime
    try:
        return str(runtime_jar(runtime))
    except OSError as exc:
        raise OSError(f"Iceberg's Spark runtime: {exc} (or give --iceberg-runtime a local jar)") from None


def committed_summary(spark, table: str) -> dict[str, str]:  # noqa: ANN001
    """The summary of the newest snapshot that records the offsets ({} when the table has none
    yet), among the current snapshot and its ancestors: a table rolled back (Iceberg's
    rollback_to_snapshot) holds what its current snapshot says, whatever came after. Deletes commit
    snapshots without offsets: the newest that has them is the last append's."""
    rows = spark.sql(f"SELECT s.summary FROM {table}.snapshots s JOIN {table}.history h "
                     "ON s.snapshot_id = h.snapshot_id WHERE h.is_current_ancestor "
                     "ORDER BY h.made_current_at DESC").collect()
    return next(((row.summary or {}) for row in rows if OFFSETS_PROPERTY in (row.summary or {})), {})


def committed_offsets(spark, table: str) -> Offsets:  # noqa: ANN001
    """The next offset of every partition, as the newest snapshot that records them says."""
    return _offsets(committed_summary(spark, table).get(OFFSETS_PROPERTY, "{}"))


def _offsets(recorded: str) -> Offsets:
    return {(topic, int(p)): int(o) for topic, ps in json.loads(recorded).items() for p, o in ps.items()}


def _as_json(offsets: Offsets) -> str:
    out: dict[str, dict[str, int]] = {}
    for (topic, p), offset in sorted(offsets.items()):
        out.setdefault(topic, {})[str(p)] = offset
    return json.dumps(out, sort_keys=True)


def table_name(topic: str) -> str:
    """A topic's table name: Kafka's name characters that SQL identifiers lack become ``_``."""
    return "".join(c if c.isalnum() or c == "_" else "_" for c in topic)


def sync(spark, table: str, options: Mapping[str, str], *, decoding: ValueDecoding | None = None,  # noqa: ANN001
         progress: TextIO | None = sys.stderr) -> SyncResult:
    """One run for one topic (``options``: the ``tiered-kafka`` source's, ``subscribe`` one topic):
    append what the remote tier gained since the last run, delete what it lost. With ``decoding``
    the values become columns and what does not decode goes to the dead letters
    (:mod:`tiering.spark.values`)."""
    decoding = decoding or ValueDecoding()
    started = time.monotonic()
    planner = OffsetPlanner(options)
    partitions = planner.partitions()
    tiered_end = {tp: o + 1 for tp, o in planner.list_offsets(partitions, LATEST_TIERED).items()}
    remote_start = planner.list_offsets(partitions, EARLIEST)
    before = committed_offsets(spark, table) if spark.catalog.tableExists(table) else {}
    # A partition starts where the table ends; records gone from the remote tier meanwhile are gone.
    start = {tp: max(before.get(tp, 0), remote_start[tp]) for tp in partitions}
    end = {tp: max(tiered_end[tp], start[tp]) for tp in partitions}
    after = {**before, **end}
    added = sum(end[tp] - start[tp] for tp in partitions)
    if progress is not None:
        print(f"iceberg: {table}: {added} offsets to add over {len(partitions)} partitions", file=progress, flush=True)
    rows_added = dead_letters = 0

    def read(first: Offsets, last: Offsets):  # noqa: ANN202 - a DataFrame
        reader = spark.read.format("tiered-kafka").option("includeHeaders", "true")
        for key, value in options.items():
            reader = reader.option(key, value)
        return reader.option("startingOffsets", _as_json(first)).option("endingOffsets", _as_json(last)).load()

    if decoding.decodes and spark.catalog.tableExists(table):
        dead_letters += _unfinished_dead_letters(spark, table, options["subscribe"], decoding, read, remote_start)
    if added:
        if decoding.decodes:
            rows, dead = _append_decoded(spark, table, options["subscribe"], read(start, end), decoding, start, end,
                                         after)
            rows_added, dead_letters = rows, dead_letters + dead
        else:
            _create(spark, table)
            rows_added = _append(read(start, end), table, after)
    if not added:
        _create(spark, table)
    rows_deleted = _delete_below(spark, table, remote_start)
    if spark.catalog.tableExists(dead_letter_table(table)):
        rows_deleted += _delete_below(spark, dead_letter_table(table), remote_start)
    result = SyncResult(table, rows_added, rows_deleted, before, after, time.monotonic() - started, dead_letters)
    if progress is not None:
        dead = f", {dead_letters} to {dead_letter_table(table)}" if decoding.decodes else ""
        print(f"iceberg: {table}: {rows_added} rows added{dead}, {rows_deleted} deleted, {result.seconds:.1f}s",
              file=progress, flush=True)
    return result


def _create(spark, table: str, decoded=None, *, dead_letters: bool = False) -> None:  # noqa: ANN001
    """The table, if it is not there: Spark's Kafka columns, the decoded value's struct or the
    dead letters' reason. No shuffle before writing: each task reads one segment in offset order,
    and the fanout writer keeps a file open per day it meets, so files come out sorted by partition
    and offset. Any schema is accepted on write so that new value fields become new columns."""
    extra = f", {DECODED_COLUMN} {column_ddl(decoded)}" if decoded is not None else ""
    extra += f", {ERROR_COLUMN} STRING" if dead_letters else ""
    spark.sql(f"CREATE TABLE IF NOT EXISTS {table} ({TABLE_COLUMNS}{extra}) USING iceberg "
              "PARTITIONED BY (days(timestamp)) TBLPROPERTIES ('format-version'='2', "
              "'write.delete.mode'='merge-on-read', 'write.distribution-mode'='none', "
              "'write.spark.fanout.enabled'='true', 'write.spark.accept-any-schema'='true')")


def _append(df, table: str, after: Offsets, properties: Mapping[str, str] | None = None) -> int:  # noqa: ANN001
    """Append ``df`` recording ``after`` (and ``properties``) in the same commit; the rows it
    added. New fields of the decoded value become new columns (Iceberg's schema evolution)."""
    spark = df.sparkSession

    def newest():  # noqa: ANN202 - a Row or None
        found = spark.sql(f"SELECT snapshot_id, summary FROM {table}.snapshots ORDER BY committed_at DESC LIMIT 1")
        return next(iter(found.collect()), None)

    before = newest()
    writer = df.writeTo(table).option(f"snapshot-property.{OFFSETS_PROPERTY}", _as_json(after))
    for key, value in (properties or {}).items():
        writer = writer.option(f"snapshot-property.{key}", value)
    writer.option("merge-schema", "true").append()
    made = newest()
    if made is None or (before is not None and made.snapshot_id == before.snapshot_id):
        return 0  # nothing committed: an Iceberg that skips empty appends
    return int((made.summary or {}).get("added-records", 0))


def _append_decoded(spark, table: str, topic: str, df, decoding: ValueDecoding, start: Offsets,  # noqa: ANN001
                    end: Offsets, after: Offsets) -> tuple[int, int]:
    """Decode and append the rows that decode, counting on the way those that do not; then, only
    if there were any, read the range again for them (:func:`_dead_letter_pass`). The append
    records where its range started: a run killed before the dead letters were appended finishes
    them first (:func:`_unfinished_dead_letters`). Returns (rows, dead letters)."""
    from pyspark.sql import Observation
    from pyspark.sql import functions as F  # noqa: N812

    existing = table_schema(spark, table)
    schema, decoded = value_columns(spark, decoding, df, existing, topic)
    if existing is None and spark.catalog.tableExists(table):  # a table of bytes until now
        spark.sql(f"ALTER TABLE {table} SET TBLPROPERTIES ('write.spark.accept-any-schema'='true')")
    _create(spark, table, schema)
    _create(spark, dead_letter_table(table), dead_letters=True)
    counted = Observation("dead letters")
    observed = decoded.observe(counted, F.count(F.when(F.col(ERROR_COLUMN).isNotNull(), 1)).alias("dead"))
    rows = _append(observed.where(F.col(ERROR_COLUMN).isNull()).drop(ERROR_COLUMN), table, after,
                   {DEAD_LETTERS_PROPERTY: _as_json(start)})
    if counted.get["dead"]:
        return rows, _dead_letter_pass(spark, table, decoded, start, end, after)
    # None: the dead-letter table records that it has this range's (all none of them).
    _append(decoded.drop(DECODED_COLUMN).limit(0), dead_letter_table(table), after)
    return rows, 0


def _dead_letter_pass(spark, table: str, decoded, start: Offsets, end: Offsets,  # noqa: ANN001
                      after: Offsets) -> int:
    """Append to the dead-letter table the records of ``start``..``end`` that the table lacks
    (whatever decodes now: which did not is what the table says), past those the dead-letter
    table already has."""
    from pyspark.sql import functions as F  # noqa: N812

    dead_table = dead_letter_table(table)
    done = committed_offsets(spark, dead_table)
    in_range, fresh = F.lit(False), F.lit(False)
    for (name, p), first in start.items():
        partition = (F.col("topic") == name) & (F.col("partition") == p)
        in_range = in_range | (partition & (F.col("offset") >= first) & (F.col("offset") < end[(name, p)]))
        fresh = fresh | (partition & (F.col("offset") >= max(first, done.get((name, p), 0))))
    kept = spark.table(table).where(in_range).select("topic", "partition", "offset")
    dead = (decoded.where(fresh).join(kept, ["topic", "partition", "offset"], "left_anti").drop(DECODED_COLUMN)
            .withColumn(ERROR_COLUMN, F.coalesce(F.col(ERROR_COLUMN), F.lit("did not decode when it was added"))))
    return _append(dead.select(*spark.table(dead_table).columns), dead_table, after)  # the join moved columns


def _unfinished_dead_letters(spark, table: str, topic: str, decoding: ValueDecoding, read,  # noqa: ANN001
                             remote_start: Offsets) -> int:
    """The dead letters of the table's last append, if the run that made it was killed before it
    appended them; how many."""
    summary = committed_summary(spark, table)
    if DEAD_LETTERS_PROPERTY not in summary or not spark.catalog.tableExists(dead_letter_table(table)):
        return 0
    first, last = _offsets(summary[DEAD_LETTERS_PROPERTY]), _offsets(summary[OFFSETS_PROPERTY])
    done = committed_offsets(spark, dead_letter_table(table))
    if all(done.get(tp, 0) >= last.get(tp, 0) for tp in first):
        return 0
    first = {tp: max(o, remote_start.get(tp, 0)) for tp, o in first.items()}
    last = {tp: max(last.get(tp, 0), first[tp]) for tp in first}
    _, decoded = value_columns(spark, decoding, read(first, last), table_schema(spark, table), topic)
    return _dead_letter_pass(spark, table, decoded, first, last, _offsets(summary[OFFSETS_PROPERTY]))


def _delete_below(spark, table: str, remote_start: Offsets) -> int:  # noqa: ANN001
    """Delete the rows below each partition's remote log start; how many there were."""
    condition = " OR ".join(f"(topic = '{topic}' AND partition = {p} AND offset < {o})"
                            for (topic, p), o in sorted(remote_start.items()) if o > 0)
    if not condition:
        return 0
    doomed = spark.sql(f"SELECT count(*) AS n FROM {table} WHERE {condition}").collect()[0].n
    if doomed:
        spark.sql(f"DELETE FROM {table} WHERE {condition}")
    return doomed
