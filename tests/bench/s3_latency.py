"""Remote reads from an object store far away: the same backfill at several first-byte latencies,
side by side in one run, on Apache Kafka 4.4 (issue 28).

    python -m tests.bench.s3_latency [--megabytes 150] [--latencies-ms 0,20,80] [--jitter-ms 5]
                                     [--repeat 2] [--codec lz4] [--variants proxy,...]
                                     [--keep-work-dir]

A single-node Kafka 4.4 broker (tests/kafka_cluster.py), SeaweedFS's S3 gateway
(tests/integration/s3_server.py) and, in front of it, the relay of tests/integration/faulty_http.py
in a process of its own, which holds each answer's first byte back by the latency (plus up to
``--jitter-ms``, uniform). A topic of ``--megabytes`` MiB (3 partitions, 1 KB values compressed
by ``--codec``, 2 MiB segments, as tests/bench/backfill.py writes it) is written and tiered through a first proxy
(metadata topic, the relay at 0 ms), whose local retention moves the broker's log start past all
but a segment, so a read from offset 0 comes from the remote tier. Then, for each latency (the
relay started again on the same port with it), fresh proxies serve one confluent-kafka consumer
reading every record from offset 0, round-robin over the variants, ``--repeat`` times:

- **proxy**: the defaults (a fetch-ahead window of up to 15 chunks per partition, an eighth of the
  chunk cache; 16 prefetch threads);
- **one ahead**: ``remote.log.chunk.prefetch.max.chunks=1``, ``remote.log.chunk.prefetch.threads=2``:
  the chunk after each read fetched ahead, as the proxy did before the window (the "before");
- **sequential**: ``remote.log.chunk.prefetch.threads=0``: each chunk fetched when a read needs
  it, one after another per partition, as a plain remote storage plugin reads (the baseline).

Per variant and latency: MB/s of payload (median [min-max]) and its ratio to the same variant at
the lowest latency; the cold first record (one raw Fetch of partition 0 at offset 0, the first
request a fresh proxy serves: its metadata load, index and chunk reads included), median, ms; the
proxy's peak RSS (VmHWM), MB; and the GETs the proxy sent per GB of payload read (its shutdown
line), median. Every process is stopped at the end, also on an error or Ctrl-C; the working
folder in /tmp is removed unless ``--keep-work-dir``.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import statistics
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

from tests.bench.backfill import (
    MEASURING_PROPS,
    TIERING_PROPS,
    backfill,
    cpu_meter,
    first_byte_ms,
    log_ends,
    log_starts,
    peak_rss_mb,
    produce,
    running_proxy,
    stop_process,
)
from tests.bench.process_hygiene import run_in_work_dir
from tests.bench.workers import wait_tiered
from tests.integration.s3_server import SeaweedFS, new_bucket, s3_uri_args
from tests.kafka_cluster import restartable_ports, start_single
from tests.tiering_checks import wait_until
from tiering.broker_client import BrokerClient

TOPIC = "bench-s3-latency"
METADATA = "topic://bench-s3-latency-metadata"
VALUE_BYTES, SEGMENT_MB = 1000, 2
VARIANTS = {
    "proxy": (),
    "one ahead": ("--set", "remote.log.chunk.prefetch.max.chunks=1", "--set", "remote.log.chunk.prefetch.threads=2"),
    "sequential": ("--set", "remote.log.chunk.prefetch.threads=0"),
}
REQUESTS_LINE = re.compile(r"remote tier requests: GET (\d+), PUT (\d+), DELETE (\d+), LIST (\d+)")


@dataclass
class Reads:
    mb_per_s: list[float] = field(default_factory=list)
    first_ms: list[float] = field(default_factory=list)
    rss_mb: list[float] = field(default_factory=list)
    gets_per_gb: list[float] = field(default_factory=list)


class LatencyRelay:
    """The relay process in front of the S3 gateway, started again with each latency on one port."""

    def __init__(self, upstream: str, work: Path) -> None:
        self.upstream, self.work = upstream, work
        self.port = restartable_ports(1)[0]
        self.process: subprocess.Popen | None = None

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, latency_ms: float, jitter_ms: float) -> None:
        self.stop()
        with open(self.work / "relay.log", "ab") as log:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "tests.integration.faulty_http", "--upstream", self.upstream,
                 "--port", str(self.port), "--latency-ms", str(latency_ms), "--jitter-ms", str(jitter_ms)],
                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        assert wait_until(lambda: "relaying" in (self.work / "relay.log").read_text(), 30), "relay did not start"

    def stop(self) -> None:
        if self.process is not None:
            stop_process(self.process)
            self.process = None
            (self.work / "relay.log").unlink(missing_ok=True)


def read_once(bootstrap: str, broker_group: int, work: Path, args: tuple[str, ...], count: int, into: Reads) -> None:
    with running_proxy(bootstrap, work, args) as proxy:
        into.first_ms.append(first_byte_ms(proxy.bootstrap, TOPIC))
        read = backfill(proxy.bootstrap, TOPIC, count, cpu_meter(broker_group, proxy.process.pid))
        into.rss_mb.append(peak_rss_mb(proxy.process.pid))
    into.mb_per_s.append(read.mb_per_s)
    found = REQUESTS_LINE.search(proxy.log_text())
    if found is not None:
        into.gets_per_gb.append(int(found.group(1)) / (read.payload_bytes / 1e9))


def run(args: argparse.Namespace, work: Path) -> None:
    latencies = [float(x) for x in args.latencies_ms.split(",")]
    variants = {name: extra for name, extra in VARIANTS.items() if name in args.variants.split(",")}
    with contextlib.ExitStack() as stack:
        broker = start_single(work / "broker")
        stack.callback(broker.stop)
        client = BrokerClient(broker.bootstrap)
        stack.callback(client.close)
        store = stack.enter_context(SeaweedFS(work / "seaweedfs"))
        relay = LatencyRelay(store.gateway().endpoint, work)
        stack.callback(relay.stop)
        relay.start(0, 0)
        common = ("--metadata", METADATA, "--data-dir", str(work / "data"),
                  *s3_uri_args(new_bucket(relay.upstream), "bench", relay.endpoint))
        with running_proxy(broker.bootstrap, work / "tiering", (*common, *TIERING_PROPS)) as tiering:
            # Through the proxy: Kafka without its own tiered storage refuses remote.storage.enable.
            count = produce(tiering.bootstrap, [TOPIC], args.megabytes, VALUE_BYTES, SEGMENT_MB, args.codec,
                            tiered={TOPIC})
            assert wait_tiered(client, 600, TOPIC), "tiering did not finish"
        starts, ends = log_starts(client, 1, TOPIC), log_ends(client, 1, TOPIC)
        print(f"  tiered {TOPIC}: broker log start {starts} of log end {ends}", flush=True)
        results: dict[tuple[str, float], Reads] = {}
        for latency in latencies:
            relay.start(latency, args.jitter_ms if latency else 0)
            for round_ in range(1, args.repeat + 1):
                figures = []
                for name, extra in variants.items():
                    reads = results.setdefault((name, latency), Reads())
                    read_once(broker.bootstrap, broker.nodes[0].pid, work / "proxy", (*common, *MEASURING_PROPS, *extra),
                              count, reads)
                    figures.append(f"{name} {reads.mb_per_s[-1]:.1f} MB/s, first {reads.first_ms[-1]:.0f} ms")
                print(f"  +{latency:.0f} ms, round {round_}/{args.repeat}: " + "; ".join(figures), flush=True)
        print(f"\n{args.megabytes} MiB payload ({count} records, {VALUE_BYTES} B values, {args.codec}, "
              f"{SEGMENT_MB} MiB segments, 3 partitions) on Kafka {broker.release.version}; "
              f"{sum(starts) / sum(ends):.0%} of the records only in the remote tier; jitter up to "
              f"{args.jitter_ms:.0f} ms; {args.repeat} reads per cell, medians [min-max]; {os.cpu_count()} cores "
              f"shared by broker, SeaweedFS, relay, proxy and consumer")
        print(f"{'variant':<12}{'latency':>9}{'MB/s':>22}{'vs 0 ms':>9}{'1st record ms':>15}"
              f"{'peak RSS MB':>13}{'GETs/GB':>9}")
        for name in variants:
            base = statistics.median(results[(name, latencies[0])].mb_per_s)
            for latency in latencies:
                r = results[(name, latency)]
                mb = statistics.median(r.mb_per_s)
                spread = f"{mb:.1f} [{min(r.mb_per_s):.1f}-{max(r.mb_per_s):.1f}]"
                gets = f"{statistics.median(r.gets_per_gb):.0f}" if r.gets_per_gb else "-"
                print(f"{name:<12}{latency:>7.0f}ms{spread:>22}{mb / base:>9.2f}{statistics.median(r.first_ms):>15.0f}"
                      f"{max(r.rss_mb):>13.0f}{gets:>9}")
        for latency in latencies if "proxy" in variants and len(variants) > 1 else ():
            ours = statistics.median(results[("proxy", latency)].mb_per_s)
            others = ", ".join(f"{ours / statistics.median(results[(name, latency)].mb_per_s):.2f}x {name}"
                               for name in variants if name != "proxy")
            print(f"+{latency:.0f} ms: proxy {others}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--megabytes", type=int, default=150, help="payload of the tiered topic (MiB)")
    parser.add_argument("--latencies-ms", default="0,20,80", help="first-byte latencies, comma-separated")
    parser.add_argument("--jitter-ms", type=float, default=5, help="up to this much more per request")
    parser.add_argument("--repeat", type=int, default=2, help="reads per variant and latency")
    parser.add_argument("--variants", default=",".join(VARIANTS), help="which of them to run, comma-separated")
    parser.add_argument("--codec", default="lz4", help="the producer's compression.codec (none, lz4, zstd, ...)")
    parser.add_argument("--keep-work-dir", action="store_true", help="keep the /tmp folder (proxy logs)")
    args = parser.parse_args()
    unknown = set(args.variants.split(",")) - set(VARIANTS)
    if unknown:
        parser.error(f"unknown variants {sorted(unknown)}: choose from {', '.join(VARIANTS)}")
    run_in_work_dir("bench-s3-latency-", args.keep_work_dir, lambda work: run(args, work))


if __name__ == "__main__":
    main()
