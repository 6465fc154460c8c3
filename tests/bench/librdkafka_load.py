"""librdkafka's own load tool, and a load shaped like the OpenMessaging Benchmark's, directly and
through the proxy, with the proxy on CPUs of its own and shared (issue 36).

    python -m tests.bench.librdkafka_load [--rdkafka-performance PATH] [--records 800000] [--runs 5]
                                          [--topics 10,100] [--rate 2000] [--seconds 20]
                                          [--placements isolated,shared] [--baseline DIR] [--no-c-relay]
                                          [--keep-work-dir]

One single-node Apache Kafka 4.4 broker (tests/kafka_cluster.py) and one ``tiered-proxy serve`` in
front of it, with default settings (``--baseline DIR``: a second, of that checkout, e.g. made with
``git worktree add``), and, where the machine has a C compiler, the **c-relay**: the least a relay
can do (tests/bench/splice_relay.c, splice through a pipe, a blocking thread per direction), placed
as the proxy is. It is the floor: what the second hop alone costs on this machine, so the proxy's
own cost is what it adds beyond the c-relay. Every measure alternates direct and through the relays, in each
placement: **isolated**, the proxy and all its threads on the upper half of the CPUs and the broker
and every client on the lower half (tests/cpu_sets.py; direct runs get the same CPUs for broker
and clients), and **shared**, every process anywhere.

1. With ``rdkafka_performance`` (``--rdkafka-performance PATH`` or ``$RDKAFKA_PERFORMANCE``: built
   from librdkafka's source, docs/benchmarks.md says how; neither PyPI nor Debian ships it), on a
   3-partition topic of 1 KiB records, ``--runs`` times each:
   - **produce** ``--records`` records, acks=all, linger.ms=5: MB/s;
   - **consume** ``--records`` records from the beginning of every partition: MB/s;
   - **delivery latency** at 25%, 50% and 90% of the direct produce's median msg/s (``-r``, ``-l``):
     p50, p99 and p99.9 of every record's delivery, the first 5% (connecting) left out.
   The CPU time per MB of each relay, the proxy's and the c-relay's, is printed too.
2. Always, an OpenMessaging-Benchmark-like load on confluent-kafka (librdkafka, in processes of
   their own): for each ``--topics`` count, that many 1-partition topics, one producer writing
   ``--rate`` 1 KiB records per second round-robin over them (acks=all, linger.ms=1) and one
   consumer assigned every topic at its end, at once, for ``--seconds``. Each record carries its
   send time: **end-to-end latency** (send to receipt) p50, p99, p99.9 over all but the first
   second. rdkafka_performance cannot do this: it produces to one topic per process.

Every wait is bounded; the broker and the proxy are stopped at the end, also on an error or Ctrl-C.
"""

from __future__ import annotations

import argparse
import contextlib
import multiprocessing as mp
import os
import queue
import re
import statistics
import struct
import subprocess
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from confluent_kafka.admin import AdminClient, NewTopic

from tests.bench import c_relay
from tests.bench.process_hygiene import run_in_work_dir
from tests.bench.wire_speed import cell
from tests.bench.workers import proxy_cpu_seconds
from tests.cpu_sets import Placement, pin_tree, placement, placement_names
from tests.kafka_cluster import KafkaCluster, free_ports, start_single
from tests.proxy_process import ProxyProcess, start_proxy

Relay = ProxyProcess | c_relay.CRelay  # what stands between the clients and the broker

RECORD_BYTES = 1024
PARTITIONS = 3
BROKER_HEAP = "1g"  # Kafka's own default; the suite's 384m paused a loaded broker for GC
WARM_UP_SECONDS = 5  # an unmeasured shaped load per path first: a fresh JVM answered 1 s late at first
LOADS = (0.25, 0.5, 0.9)  # of the direct produce's msg/s, for delivery latency
_CONSUMED = re.compile(r"consumed in (\d+)ms: \d+ msgs/s \(([\d.]+) MB/s\)")
_PRODUCED = re.compile(r"(\d+) delivered .* in (\d+)ms: (\d+) msgs/s and ([\d.]+) MB/s")
_STAMP = struct.Struct(">q")  # a record's send time, CLOCK_MONOTONIC ns (one clock for every process)


@dataclass
class Figures:
    """Measures of one kind by path (direct, proxy, baseline, c-relay), and the relays' CPU per MB."""

    by_path: dict[str, list[float]] = field(default_factory=dict)
    cpu_ms_per_mb: dict[str, list[float]] = field(default_factory=dict)

    def add(self, path: str, value: float) -> None:
        self.by_path.setdefault(path, []).append(value)

    def ratio(self, path: str) -> str:
        mine, direct = self.by_path.get(path), self.by_path.get("direct")
        return f"{statistics.median(mine) / statistics.median(direct):.2f}x" if mine and direct else "-"


def percentiles(values: list[float]) -> tuple[float, float, float]:
    ordered = sorted(values)
    if not ordered:
        return float("nan"), float("nan"), float("nan")

    def at(q: float) -> float:
        return ordered[min(len(ordered) - 1, int(len(ordered) * q))]

    return at(0.5), at(0.99), at(0.999)


# --- placement -------------------------------------------------------------------------------------


def place(where: Placement, broker: KafkaCluster, proxies: dict[str, Relay]) -> frozenset[int]:
    """Moves the broker and the relays (every thread) where ``where`` says; the CPUs for clients."""
    everywhere = frozenset(os.sched_getaffinity(0))
    clients = where.others or everywhere
    assert broker.pid is not None
    pin_tree(broker.pid, clients)
    for proxy in proxies.values():
        pin_tree(proxy.process.pid, where.proxy or everywhere)
    return clients


def _on(cpus: frozenset[int]) -> Callable[[], None]:
    return lambda: os.sched_setaffinity(0, cpus)


# --- rdkafka_performance ---------------------------------------------------------------------------


def rdkafka_performance(tool: Path, cpus: frozenset[int], *args: str, timeout: float = 300) -> str:
    done = subprocess.run([str(tool), *args, "-q"], capture_output=True, text=True, timeout=timeout,
                          preexec_fn=_on(cpus), check=False)
    if done.returncode != 0:
        raise RuntimeError(f"rdkafka_performance {' '.join(args)} exited {done.returncode}: {done.stderr[-2000:]}")
    return done.stdout + done.stderr


def consume(tool: Path, cpus: frozenset[int], bootstrap: str, topic: str, records: int) -> float:
    """MB/s of reading ``records`` from the beginning of every partition."""
    parts = [a for p in range(PARTITIONS) for a in ("-p", str(p))]
    out = rdkafka_performance(tool, cpus, "-C", "-t", topic, *parts, "-o", "beginning", "-b", bootstrap,
                              "-c", str(records), "-X", "enable.partition.eof=false")
    found = _CONSUMED.search(out)
    if found is None:
        raise RuntimeError(f"rdkafka_performance consumed nothing it reported:\n{out[-2000:]}")
    return float(found.group(2))


def produce(tool: Path, cpus: frozenset[int], bootstrap: str, topic: str, records: int,
            rate: int = 0, latencies: Path | None = None) -> tuple[float, float]:
    """(MB/s, msg/s) of producing ``records`` (acks=all, linger.ms=5); at ``rate`` msg/s when given,
    with every delivery's latency in µs written to ``latencies``."""
    extra = ["-r", str(rate)] if rate else []
    if latencies is not None:
        extra += ["-l", "-A", str(latencies)]
    out = rdkafka_performance(tool, cpus, "-P", "-t", topic, "-b", bootstrap, "-s", str(RECORD_BYTES),
                              "-c", str(records), "-a", "-1", "-X", "linger.ms=5", *extra)
    found = _PRODUCED.findall(out)
    if not found or int(found[-1][0]) != records:
        raise RuntimeError(f"rdkafka_performance delivered {found[-1][0] if found else 0} of {records}:\n{out[-2000:]}")
    return float(found[-1][3]), float(found[-1][2])


def delivery_ms(path: Path) -> list[float]:
    """Delivery latencies in ms from rdkafka_performance's ``-A`` file, the first 5% left out."""
    values = [int(line) / 1000 for line in path.read_text().split()]
    return values[len(values) // 20:]


@dataclass
class ToolRun:
    produce: Figures = field(default_factory=Figures)
    consume: Figures = field(default_factory=Figures)
    latency: dict[float, dict[str, list[float]]] = field(default_factory=dict)  # load -> path -> ms

    @property
    def top_rate(self) -> float:
        """The direct produce's median msg/s."""
        return statistics.median(self.produce.by_path["direct msg/s"])


def cpu_seconds(relay: Relay) -> float:
    return relay.cpu_seconds() if isinstance(relay, c_relay.CRelay) else proxy_cpu_seconds(relay)


def measured(relay: Relay | None, figures: Figures, path: str, megabytes: float,
             measure: Callable[[], float]) -> None:
    """``measure()`` added to ``figures``, with the relay's CPU time per MB when there is one."""
    before = cpu_seconds(relay) if relay else 0.0
    figures.add(path, measure())
    if relay is not None:
        figures.cpu_ms_per_mb.setdefault(path, []).append((cpu_seconds(relay) - before) * 1000 / megabytes)


def tool_run(tool: Path, cpus: frozenset[int], broker: KafkaCluster, proxies: dict[str, Relay],
             args: argparse.Namespace, work: Path) -> ToolRun:
    topic = f"perf-{uuid.uuid4().hex[:6]}"
    create_topics(broker.bootstrap, [topic], PARTITIONS)
    paths = {"direct": broker.bootstrap, **{name: p.bootstrap for name, p in proxies.items()}}
    run = ToolRun()
    megabytes = args.records * RECORD_BYTES / 1e6
    for bootstrap in paths.values():  # not counted: the broker's JIT, the connections' first turns
        produce(tool, cpus, bootstrap, topic, args.records // 4)
        consume(tool, cpus, bootstrap, topic, args.records // 4)
    for _ in range(args.runs):
        for path, bootstrap in paths.items():
            def produced(path: str = path, bootstrap: str = bootstrap) -> float:
                mb_s, msg_s = produce(tool, cpus, bootstrap, topic, args.records)
                if path == "direct":
                    run.produce.add("direct msg/s", msg_s)
                return mb_s

            measured(proxies.get(path), run.produce, path, megabytes, produced)
    for _ in range(args.runs):
        for path, bootstrap in paths.items():
            measured(proxies.get(path), run.consume, path, megabytes,
                     lambda bootstrap=bootstrap: consume(tool, cpus, bootstrap, topic, args.records))
    for load in LOADS:
        rate = max(100, int(run.top_rate * load))
        records = max(2000, rate * args.latency_seconds)
        run.latency[load] = {}
        for path, bootstrap in paths.items():
            file = work / f"latency-{uuid.uuid4().hex[:6]}.txt"
            produce(tool, cpus, bootstrap, topic, records, rate, file)
            run.latency[load][path] = delivery_ms(file)
    return run


# --- the shaped load on confluent-kafka ------------------------------------------------------------


def create_topics(bootstrap: str, topics: list[str], partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(t, partitions, 1) for t in topics]).values():
        future.result(60)


def _producer(bootstrap: str, topics: list[str], rate: int, seconds: float, cpus: frozenset[int],
              go: mp.Event, done: mp.Event, out: mp.Queue) -> None:
    from confluent_kafka import Producer

    os.sched_setaffinity(0, cpus)
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 1,
                         "queue.buffering.max.messages": 1_000_000})
    padding = os.urandom(RECORD_BYTES - _STAMP.size)
    failed = [0]

    def delivered(err: object, _msg: object) -> None:
        failed[0] += err is not None

    go.wait(60)
    started = time.monotonic()
    sent = 0
    while (elapsed := time.monotonic() - started) < seconds:
        due = int(elapsed * rate)
        while sent < due:
            producer.produce(topics[sent % len(topics)], _STAMP.pack(time.monotonic_ns()) + padding,
                             on_delivery=delivered)
            sent += 1
        producer.poll(0.001)
    left = producer.flush(30)
    done.set()
    out.put(("producer", sent, failed[0] + left))


def _consumer(bootstrap: str, topics: list[str], seconds: float, cpus: frozenset[int], ready: mp.Event,
              done: mp.Event, out: mp.Queue) -> None:
    from confluent_kafka import Consumer, TopicPartition

    os.sched_setaffinity(0, cpus)
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"load-{uuid.uuid4().hex[:8]}",
                         "enable.auto.commit": False, "fetch.wait.max.ms": 100})
    ends = [_log_end(consumer, TopicPartition(t, 0)) for t in topics]
    consumer.assign([TopicPartition(t, 0, end) for t, end in zip(topics, ends, strict=True)])
    consumer.poll(0.5)
    ready.set()
    latencies: list[float] = []
    warm = time.monotonic_ns() + 1_000_000_000
    deadline = time.monotonic() + seconds + 60
    last = time.monotonic()
    while time.monotonic() < deadline and not (done.is_set() and time.monotonic() - last > 2):
        message = consumer.poll(0.05)  # at once when a record is there (consume() waits for its count)
        if message is not None and message.error() is None:
            last = time.monotonic()
            (sent,) = _STAMP.unpack_from(message.value(), 0)
            if sent >= warm:
                latencies.append((time.monotonic_ns() - sent) / 1e6)
    consumer.close()
    out.put(("consumer", latencies, 0))


def _log_end(consumer: object, tp: object) -> int:
    """The partition's log end, once its leader can say (a new topic's may not yet)."""
    from confluent_kafka import KafkaException

    deadline = time.monotonic() + 30
    while True:
        try:
            return consumer.get_watermark_offsets(tp, 10)[1]  # type: ignore[attr-defined]
        except KafkaException:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def shaped_load(bootstrap: str, topics: list[str], rate: int, seconds: float, cpus: frozenset[int]) -> list[float]:
    """End-to-end latencies (ms) of ``rate`` records/s over ``topics`` for ``seconds``."""
    ready, done, out = mp.Event(), mp.Event(), mp.Queue()
    consumer = mp.Process(target=_consumer, args=(bootstrap, topics, seconds, cpus, ready, done, out))
    producer = mp.Process(target=_producer, args=(bootstrap, topics, rate, seconds, cpus, ready, done, out))
    consumer.start()
    producer.start()
    results: dict[str, tuple[object, int]] = {}
    deadline = time.monotonic() + seconds + 120
    try:
        while len(results) < 2:
            if time.monotonic() > deadline or any(p.exitcode not in (None, 0) for p in (producer, consumer)):
                raise RuntimeError(f"load over {len(topics)} topics: a client failed or hung (exit codes "
                                   f"{producer.exitcode}, {consumer.exitcode})")
            with contextlib.suppress(queue.Empty):
                kind, value, failed = out.get(timeout=1)
                results[kind] = (value, failed)
    finally:
        for p in (producer, consumer):
            p.join(30)
            if p.is_alive():
                p.kill()
    sent, failed = results["producer"]
    latencies: list[float] = results["consumer"][0]  # type: ignore[assignment]
    if failed or not latencies:
        raise RuntimeError(f"load over {len(topics)} topics: {failed} of {sent} records undelivered, "
                           f"{len(latencies)} timed")
    return latencies


# --- the run -----------------------------------------------------------------------------------------


def run(args: argparse.Namespace, work: Path) -> None:
    tool = Path(args.rdkafka_performance) if args.rdkafka_performance else None
    if tool is not None and not os.access(tool, os.X_OK):
        raise SystemExit(f"--rdkafka-performance {tool}: not an executable file")
    relay = c_relay.build(work) if args.c_relay else None
    relay_port = free_ports(1)[0] if relay else None
    broker = start_single(work / "broker", heap=BROKER_HEAP, relayed_port=relay_port)
    proxies: dict[str, Relay] = {"proxy": start_proxy(broker.bootstrap, work / "proxy")}
    if args.baseline:
        proxies["baseline"] = start_proxy(broker.bootstrap, work / "baseline", source=Path(args.baseline))
    if relay is not None and relay_port is not None:
        proxies["c-relay"] = c_relay.start(relay, relay_port, broker.bootstraps["RELAYED"])
    tool_runs: dict[str, ToolRun] = {}
    loads: dict[tuple[str, int], dict[str, list[float]]] = {}
    placements = {name: placement(name == "isolated") for name in args.placements}
    try:
        print(f"Kafka {broker.version}, single node, and tiered-proxy (defaults); rdkafka_performance: "
              f"{tool or 'none (give --rdkafka-performance PATH for part 1)'}", flush=True)
        topic_sets = {}
        for count in args.topics:
            topic_sets[count] = [f"load{count}-{i}-{uuid.uuid4().hex[:4]}" for i in range(count)]
            create_topics(broker.bootstrap, topic_sets[count], 1)
        paths = {"direct": broker.bootstrap, **{name: p.bootstrap for name, p in proxies.items()}}
        for name, where in placements.items():
            cpus = place(where, broker, proxies)
            print(f"\n{where.describe()}", flush=True)
            if tool is not None:
                tool_runs[name] = r = tool_run(tool, cpus, broker, proxies, args, work)
                print("  rdkafka_performance MB/s: " + ", ".join(
                      f"{kind} {path} {cell(f.by_path[path])}" for kind, f in (("produce", r.produce),
                                                                          ("consume", r.consume)) for path in paths),
                      flush=True)
            for count, topics in topic_sets.items():
                for bootstrap in paths.values():
                    shaped_load(bootstrap, topics, args.rate, WARM_UP_SECONDS, cpus)
                loads[(name, count)] = got = {path: shaped_load(bootstrap, topics, args.rate, args.seconds, cpus)
                                              for path, bootstrap in paths.items()}
                print(f"  {count} topics: end-to-end p99 ms " + ", ".join(
                      f"{path} {percentiles(got[path])[1]:.1f}" for path in paths), flush=True)
    finally:
        for proxy in proxies.values():
            proxy.stop()
        broker.stop()
    report(args, placements, list(paths), tool_runs, loads)


def _latency_row(label: str, by_path: dict[str, list[float]], paths: list[str]) -> str:
    direct = percentiles(by_path["direct"])
    cells = []
    for path in paths:
        mine = percentiles(by_path[path])
        cells.append(" / ".join(f"{v:.2f}" for v in mine))
        if path != "direct":
            cells.append(" / ".join(f"{b - a:+.2f}" for a, b in zip(direct, mine, strict=True)))
    return f"| {label} | " + " | ".join(cells) + " |"


def _latency_head(first: str, paths: list[str]) -> str:
    heads = [first]
    for path in paths:
        heads += [path] if path == "direct" else [path, f"{path} added"]
    return "| " + " | ".join(heads) + " |\n" + "|---" * len(heads) + "|"


def report(args: argparse.Namespace, placements: dict[str, Placement], paths: list[str],
           tool_runs: dict[str, ToolRun], loads: dict[tuple[str, int], dict[str, list[float]]]) -> None:
    print(f"\n{args.runs} runs each, alternating {', '.join(paths)}; medians [min-max]")
    proxies = [p for p in paths if p != "direct"]
    for name, where in placements.items():
        print(f"\n### {where.describe()}\n")
        r = tool_runs.get(name)
        if r is not None:
            print(f"rdkafka_performance, {args.records:,} records of {RECORD_BYTES} B, {PARTITIONS} partitions\n")
            print("| measure | " + " | ".join(paths) + " | " + " | ".join(f"{p} ratio | {p} CPU ms/MB" for p in proxies)
                  + " |")
            print("|---" * (1 + len(paths) + 2 * len(proxies)) + "|")
            for label, f in (("produce MB/s (acks=all, linger 5 ms)", r.produce),
                             ("consume MB/s (from the beginning)", r.consume)):
                print(f"| {label} | " + " | ".join(cell(f.by_path[p]) for p in paths) + " | "
                      + " | ".join(f"{f.ratio(p)} | {cell(f.cpu_ms_per_mb.get(p, []), '.2f')}" for p in proxies) + " |")
            print(f"\ndelivery latency, ms, p50 / p99 / p99.9 (direct produce: {r.top_rate:,.0f} msg/s)\n")
            print(_latency_head("load", paths))
            for load, by_path in r.latency.items():
                print(_latency_row(f"{load:.0%} ({int(r.top_rate * load):,} msg/s)", by_path, paths))
        print(f"\nshaped load (confluent-kafka): {args.rate:,} records/s of {RECORD_BYTES} B for {args.seconds:.0f} s, "
              "end-to-end latency, ms, p50 / p99 / p99.9\n")
        print(_latency_head("topics", paths))
        for count in args.topics:
            print(_latency_row(str(count), loads[(name, count)], paths))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rdkafka-performance", metavar="PATH", default=os.environ.get("RDKAFKA_PERFORMANCE"),
                        help="librdkafka's examples/rdkafka_performance, built from its source "
                             "(default $RDKAFKA_PERFORMANCE; without one, part 1 is left out)")
    parser.add_argument("--records", type=int, default=800_000, help="records per produce and consume (default 800000)")
    parser.add_argument("--runs", type=int, default=5, help="runs per measure and path (default 5)")
    parser.add_argument("--latency-seconds", type=int, default=5, help="seconds of each delivery-latency run (default 5)")
    parser.add_argument("--topics", type=lambda s: [int(n) for n in s.split(",")], default=[10, 100],
                        help="topic counts of the shaped load (default 10,100)")
    # 5,000/s of Python clients filled the one CPU they share with the broker when isolated (a
    # direct p50 of 383 ms): the load measured the clients, not the path.
    parser.add_argument("--rate", type=int, default=2000, help="records/s of the shaped load (default 2000)")
    parser.add_argument("--seconds", type=float, default=20, help="seconds of each shaped load (default 20)")
    parser.add_argument("--placements", type=placement_names, default=["isolated", "shared"],
                        help="isolated, shared or both (default isolated,shared)")
    parser.add_argument("--baseline", metavar="DIR", help="also run the proxy of this checkout, alternating")
    parser.add_argument("--no-c-relay", dest="c_relay", action="store_false",
                        help="leave out the C relay (tests/bench/splice_relay.c), the floor beside the proxy")
    parser.add_argument("--keep-work-dir", action="store_true", help="keep the broker's and proxy's folders")
    args = parser.parse_args()
    run_in_work_dir("bench-librdkafka-load-", args.keep_work_dir, lambda work: run(args, work))


if __name__ == "__main__":
    main()
