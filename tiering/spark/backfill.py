"""Backfill a topic's whole history to Parquet with Spark and the ``tiered-kafka`` data source
(``tiered-proxy backfill``): remote segments are read by the executors straight from the remote
tier, the tail through the proxy. Progress (tasks done, rows/s) is printed while Spark works."""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TextIO


@dataclass
class BackfillResult:
    rows: int
    seconds: float
    tasks: int


def spark_session(master: str, app_name: str = "tiered-proxy-backfill", **conf: str):  # noqa: ANN201
    """A session whose executors run this interpreter, with the data source registered."""
    from pyspark.sql import SparkSession

    from tiering.spark.source import TieredKafkaDataSource

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    builder = SparkSession.builder.master(master).appName(app_name).config("spark.sql.session.timeZone", "UTC")
    for key, value in {"spark.ui.showConsoleProgress": "false", **conf}.items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    session.dataSource.register(TieredKafkaDataSource)
    return session


def _progress(spark, stop: threading.Event, out: TextIO, interval_s: float) -> None:  # noqa: ANN001
    tracker = spark.sparkContext.statusTracker()
    started = time.monotonic()
    while not stop.wait(interval_s):
        done = total = 0
        for stage_id in tracker.getActiveStageIds():
            info = tracker.getStageInfo(stage_id)
            if info is not None:
                done += info.numCompletedTasks
                total += info.numTasks
        if total:
            print(f"backfill: {done}/{total} tasks ({100 * done // total}%), {time.monotonic() - started:.0f}s",
                  file=out, flush=True)


def backfill(spark, options: Mapping[str, str], output: str, *, mode: str = "errorifexists",  # noqa: ANN001
             progress: TextIO | None = sys.stderr, interval_s: float = 2.0) -> BackfillResult:
    reader = spark.read.format("tiered-kafka")
    for key, value in options.items():
        reader = reader.option(key, value)
    df = reader.load()
    tasks = df.rdd.getNumPartitions()
    if progress is not None:
        print(f"backfill: {tasks} tasks (one per remote segment or split, plus each partition's tail)",
              file=progress, flush=True)
    stop = threading.Event()
    watcher = threading.Thread(target=_progress, args=(spark, stop, progress, interval_s), daemon=True) \
        if progress is not None else None
    started = time.monotonic()
    if watcher is not None:
        watcher.start()
    try:
        df.write.mode(mode).parquet(output)
    finally:
        stop.set()
        if watcher is not None:
            watcher.join(5)
    seconds = time.monotonic() - started
    rows = spark.read.parquet(output).count()
    if progress is not None:
        print(f"backfill: {rows} rows to {output} in {seconds:.1f}s ({rows / max(seconds, 1e-9):.0f} rows/s)",
              file=progress, flush=True)
    return BackfillResult(rows, seconds, tasks)
