"""Reading an archived topic against reading the same history as a live tiered topic, side by
side in one run (issue 37's goal: at least 0.9x).

    python -m tests.bench.archived_reads [--megabytes 100] [--runs 3] [--keep-work-dir]

One Apache Kafka 4.4 broker (tests/kafka_cluster.py) and a proxy over a local-folder remote tier.
Two topics get the same records (``--megabytes`` MiB of 1 KB values, lz4, 3 partitions, 2 MiB
segments, one segment of local retention, as tests/bench/backfill.py writes them) and are tiered to
their ends (``segment.ms`` 1 s). Then ``archived`` is deleted at the broker: the proxy keeps its
remote data and serves it as an archive (``proxy.archived.topics``). Each run reads each topic from
offset 0 with one confluent-kafka consumer through a fresh proxy (cold caches), alternating:

- **live**: the remote tier below the broker's log start, the broker's last segment above it;
- **archived**: all of it from the remote tier, through the archive's own reader.

Printed: MB/s of payload per read, medians and the ratio archived / live. Every process is
stopped at the end; the work folder in /tmp is removed unless ``--keep-work-dir``.
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource

from tests.bench.backfill import (
    MEASURING_PROPS,
    PARTITIONS,
    TIERING_PROPS,
    backfill,
    cpu_meter,
    produce,
    running_proxy,
)
from tests.bench.process_hygiene import run_in_work_dir
from tests.kafka_cluster import start_single
from tests.tiering_checks import wait_until
from tiering.broker_client import BrokerClient
from tiering.metadata.journal_store import JOURNAL_NAME, read_journal
from tiering.metadata.state import MetadataState

LIVE, ARCHIVED = "live", "archived"


def tiered_ends(data_dir: Path) -> dict[tuple[str, int], int]:
    state = MetadataState()
    path = data_dir / "metadata" / JOURNAL_NAME
    for record in read_journal(path.read_bytes())[0] if path.exists() else ():
        state.apply(record)
    return {(tp.topic, tp.partition): p.finished()[-1].end_offset for tp, p in state.partitions.items() if p.finished()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--megabytes", type=int, default=100)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--keep-work-dir", action="store_true")
    args = parser.parse_args()

    def run(work: Path) -> None:
        broker = start_single(work / "broker")
        data = work / "data"
        common = ("--data-dir", str(data), "--set", f"proxy.archived.topics={ARCHIVED}",
                  "--set", "proxy.archived.topics.refresh.interval.ms=1000")
        try:
            client = BrokerClient(broker.bootstrap)
            with running_proxy(broker.bootstrap, work / "tiering", common + TIERING_PROPS) as proxy:
                started = time.monotonic()
                count = produce(proxy.bootstrap, [LIVE, ARCHIVED], args.megabytes, 1000, 2, "lz4", {LIVE, ARCHIVED})
                admin = AdminClient({"bootstrap.servers": proxy.bootstrap})
                resources = [ConfigResource("TOPIC", t, incremental_configs=[ConfigEntry(
                    "segment.ms", "1000", incremental_operation=AlterConfigOpType.SET)]) for t in (LIVE, ARCHIVED)]
                for future in admin.incremental_alter_configs(resources).values():
                    future.result(30)
                leader = client.metadata([LIVE])[LIVE].partitions[0].leader
                ends = {(t, p): client.list_offset(leader, t, p, -1)[1] for t in (LIVE, ARCHIVED) for p in range(PARTITIONS)}
                assert min(ends.values()) > 0, ends
                assert wait_until(lambda: all(tiered_ends(data).get(k, -1) + 1 >= end for k, end in ends.items()), 600)
                print(f"{count} records in each topic, produced and tiered in {time.monotonic() - started:.0f} s",
                      flush=True)
            admin = AdminClient({"bootstrap.servers": broker.bootstrap})
            admin.delete_topics([ARCHIVED])[ARCHIVED].result(30)
            assert wait_until(lambda: ARCHIVED not in client.metadata([ARCHIVED]), 30)
            speeds: dict[str, list[float]] = {LIVE: [], ARCHIVED: []}
            for r in range(args.runs):
                for topic in (LIVE, ARCHIVED):
                    with running_proxy(broker.bootstrap, work / f"read-{r}-{topic}", common + MEASURING_PROPS) as p:
                        assert wait_until(lambda p=p, t=topic: t in BrokerClient(p.bootstrap).metadata([t]), 30)
                        read = backfill(p.bootstrap, topic, count, cpu_meter(broker.pid or 0, p.process.pid))
                    speeds[topic].append(read.mb_per_s)
                    print(f"run {r + 1}: {topic:<9} {read.mb_per_s:7.1f} MB/s", flush=True)
            live, archived = statistics.median(speeds[LIVE]), statistics.median(speeds[ARCHIVED])
            print(f"\n{args.megabytes} MiB per topic, {args.runs} runs, medians [min-max]:")
            for topic in (LIVE, ARCHIVED):
                print(f"  {topic:<9} {statistics.median(speeds[topic]):7.1f} MB/s "
                      f"[{min(speeds[topic]):.1f}-{max(speeds[topic]):.1f}]")
            print(f"  archived / live: {archived / live:.2f}x (goal: at least 0.9x)")
        finally:
            broker.stop()

    run_in_work_dir("archived-reads-", args.keep_work_dir, run)


if __name__ == "__main__":
    main()
