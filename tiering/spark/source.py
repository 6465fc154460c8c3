"""A PySpark data source (Spark's Python Data Source API) that reads a topic's whole history: the
remote tier straight from storage, one Spark task per remote segment (large ones split at offset
index entries), and the tail past ``Ry`` through the proxy. Registered as ``tiered-kafka``.

    spark.dataSource.register(TieredKafkaDataSource)
    df = (spark.read.format("tiered-kafka")
          .option("kafka.bootstrap.servers", "proxy:19092")
          .option("subscribe", "orders")
          .option("remote.log.storage.uri", "s3://bucket/prefix?endpoint_url=...")
          .option("remote.log.metadata.uri", "topic://__remote_log_metadata")
          .load())

Columns as Spark's Kafka source (``key, value, topic, partition, offset, timestamp,
timestampType``, and ``headers`` with ``includeHeaders``). Options named as Spark's Kafka source
names them: ``subscribe``, ``subscribePattern``, ``assign``, ``startingOffsets``,
``endingOffsets``, ``startingTimestamp``, ``maxOffsetsPerTrigger``, ``maxRecordsPerPartition``,
``includeHeaders``, ``kafka.bootstrap.servers`` (the proxy), ``kafka.isolation.level``
(``read_uncommitted`` by default, as there). The remote tier: ``remote.log.storage.uri``,
``remote.log.metadata.uri`` (or ``manifests:``: the remote tier's own manifests, for archived
topics and read replicas) and any ``remote.log.storage.s3.*`` keys, as the proxy is configured;
``maxBytesPerPartition`` (128 MiB) splits larger segments.

A secured cluster: ``kafka.security.protocol``, ``kafka.sasl.mechanism``, ``kafka.sasl.jaas.config``
(or ``kafka.sasl.username``/``kafka.sasl.password``) and ``kafka.ssl.*``, as Spark's Kafka source
takes them. The remote tier has no ACLs of its own, so before planning the driver proves, with
these credentials, that the cluster lets the job read each topic (Metadata and ListOffsets
through the proxy, which the brokers authorize), and refuses the job otherwise.

Offsets are planned on the driver from real state: ListOffsets through the proxy (EARLIEST is the
remote log start) and the metadata store's segments. Executors decode the record batches (every
codec, control batches skipped, ``read_committed`` from the transaction indexes) into Arrow.
Planning is deterministic for a given offset range, so replayed micro-batches read the same rows.
"""

from __future__ import annotations

from pyspark.sql.datasource import DataSource, DataSourceReader, DataSourceStreamReader
from pyspark.sql.types import StructType

from tiering.spark.rows import spark_ddl
from tiering.spark.splits import SOURCE_NAME, TieredKafkaBatchReader


class TieredKafkaDataSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return SOURCE_NAME

    def schema(self) -> StructType | str:
        return spark_ddl(self.options.get("includeHeaders", "false").lower() == "true")

    def reader(self, schema: StructType) -> DataSourceReader:
        return TieredKafkaBatchReader(self.options)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        # Imported here: its read limits are Spark 4.2's; batch reads work on Spark 4.0 and 4.1 too
        # (Iceberg's Spark runtime stops at 4.1: tiering/spark/iceberg.py).
        from tiering.spark.stream import TieredKafkaStreamReader

        return TieredKafkaStreamReader(self.options)
