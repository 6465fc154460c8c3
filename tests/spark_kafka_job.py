"""Spark's own JVM Kafka source (``format("kafka")``) reading a topic through the proxy, batch and
streaming, from ``startingOffsets=earliest``; run as a subprocess by
``tests/integration/test_spark_source.py`` (a Spark session's jars are fixed at start).

Usage: python tests/spark_kafka_job.py JARS_DIR BOOTSTRAP TOPIC WORK_DIR; prints one JSON line."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path


def main() -> None:
    jars, bootstrap, topic, work = sys.argv[1], sys.argv[2], sys.argv[3], Path(sys.argv[4])
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    jar_list = ",".join(str(p) for p in sorted(Path(jars).glob("*.jar")))
    spark = (SparkSession.builder.master("local[2]").config("spark.jars", jar_list)
             .config("spark.ui.enabled", "false").getOrCreate())
    try:
        batch = (spark.read.format("kafka").option("kafka.bootstrap.servers", bootstrap).option("subscribe", topic)
                 .option("startingOffsets", "earliest").load())
        rows = batch.select("partition", "offset").collect()
        query = (spark.readStream.format("kafka").option("kafka.bootstrap.servers", bootstrap)
                 .option("subscribe", topic).option("startingOffsets", "earliest")
                 .option("maxOffsetsPerTrigger", "50000").load()
                 .select("partition", "offset").writeStream.format("parquet")
                 .option("path", str(work / "stream")).option("checkpointLocation", str(work / "checkpoint"))
                 .trigger(availableNow=True).start())
        query.awaitTermination()
        streamed = spark.read.parquet(str(work / "stream")).collect()
        print(json.dumps({"batch": sorted([r.partition, r.offset] for r in rows),
                          "stream": sorted([r.partition, r.offset] for r in streamed)}))
    finally:
        spark.stop()


if __name__ == "__main__":
    main()
