"""librdkafka's own load tool, and a load shaped like the OpenMessaging Benchmark's, directly and
through the proxy, with the proxy on CPUs of its own and shared (issue 36).

    python -m tests.bench.librdkafka_load [--rdkafka-performance PATH] [--records 800000] [--runs 5]
                                          [--topics 10,100] [--rate 5000] [--seconds 20]
                                          [--placements isolated,shared] [--keep-work-dir]

One single-node Apache Kafka 4.4 broker (tests/kafka_cluster.py) and one ``tiered-proxy serve`` in
front of it, with default settings. Every measure alternates direct and through the proxy, in each
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
   The proxy's CPU time per MB of each produce and consume through it is printed too.
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

from tests.bench.process_hygiene import run_in_work_dir
from tests.bench.workers import proxy_cpu_seconds
from tests.cpu_sets import Placement, pin_tree, placement
from tests.kafka_cluster import KafkaCluster, start_single
from tests.proxy_process import ProxyProcess, start_proxy

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
    """Measures of one kind, direct and through the proxy."""

    direct: list[float] = field(default_factory=list)
    proxy: list[float] = field(default_factory=list)
    proxy_cpu_ms_per_mb: list[float] = field(default_factory=list)

    def ratio(self) -> str:
        if not self.direct or not self.proxy:
            return "-"
        return f"{statistics.median(self.proxy) / statistics.median(self.direct):.2f}x"


def cell(values: list[float], spec: str = ".0f") -> str:
    if not values:
        return "-"
    return f"{statistics.median(values):{spec}} [{min(values):{spec}}-{max(values):{spec}}]"


def percentiles(values: list[float]) -> tuple[float, float, float]:
    ordered = sorted(values)
    if not ordered:
        return float("nan"), float("nan"), float("nan")

    def at(q: float) -> float:
        return ordered[min(len(ordered) - 1, int(len(ordered) * q))]

    return at(0.5), at(0.99), at(0.999)


# --- placement -------------------------------------------------------------------------------------


def place(where: Placement, broker: KafkaCluster, proxy: ProxyProcess) -> frozenset[int]:
    """Moves the broker and the proxy (every thread) where ``where`` says; the CPUs for clients."""
    everywhere = frozenset(os.sched_getaffinity(0))
    clients = where.others or everywhere
    assert broker.pid is not None
    pin_tree(broker.pid, clients)
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
    produce_rate: list[float] = field(default_factory=list)  # direct msg/s
    latency: dict[float, tuple[list[float], list[float]]] = field(default_factory=dict)  # load -> (direct, proxy)


def measured_by_proxy(proxy: ProxyProcess, figures: Figures, megabytes: float, measure: Callable[[], float]) -> float:
    before = proxy_cpu_seconds(proxy)
    value = measure()
    figures.proxy_cpu_ms_per_mb.append((proxy_cpu_seconds(proxy) - before) * 1000 / megabytes)
    return value


def tool_run(tool: Path, cpus: frozenset[int], broker: KafkaCluster, proxy: ProxyProcess, args: argparse.Namespace,
             work: Path) -> ToolRun:
    topic = f"perf-{uuid.uuid4().hex[:6]}"
    create_topics(broker.bootstrap, [topic], PARTITIONS)
    paths = {"direct": broker.bootstrap, "proxy": proxy.bootstrap}
    run = ToolRun()
    megabytes = args.records * RECORD_BYTES / 1e6
    for bootstrap in paths.values():  # not counted: the broker's JIT, the connections' first turns
        produce(tool, cpus, bootstrap, topic, args.records // 4)
        consume(tool, cpus, bootstrap, topic, args.records // 4)
    for _ in range(args.runs):
        for name, bootstrap in paths.items():
            def produced(bootstrap: str = bootstrap) -> float:
                mb_s, msg_s = produce(tool, cpus, bootstrap, topic, args.records)
                if bootstrap == broker.bootstrap:
                    run.produce_rate.append(msg_s)
                return mb_s

            if name == "proxy":
                run.produce.proxy.append(measured_by_proxy(proxy, run.produce, megabytes, produced))
            else:
                run.produce.direct.append(produced())
    for _ in range(args.runs):
        for name, bootstrap in paths.items():
            def consumed(bootstrap: str = bootstrap) -> float:
                return consume(tool, cpus, bootstrap, topic, args.records)

            if name == "proxy":
                run.consume.proxy.append(measured_by_proxy(proxy, run.consume, megabytes, consumed))
            else:
                run.consume.direct.append(consumed())
    top = statistics.median(run.produce_rate)
    for load in LOADS:
        rate = max(100, int(top * load))
        records = max(2000, rate * args.latency_seconds)
        got: tuple[list[float], list[float]] = ([], [])
        for side, bootstrap in zip(got, paths.values(), strict=True):
            file = work / f"latency-{uuid.uuid4().hex[:6]}.txt"
            produce(tool, cpus, bootstrap, topic, records, rate, file)
            side.extend(delivery_ms(file))
        run.latency[load] = got
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
    broker = start_single(work / "broker", heap=BROKER_HEAP)
    proxy = start_proxy(broker.bootstrap, work / "proxy")
    tool_runs: dict[str, ToolRun] = {}
    loads: dict[tuple[str, int], tuple[list[float], list[float]]] = {}
    placements = {name: placement(name == "isolated") for name in args.placements}
    try:
        print(f"Kafka {broker.version}, single node, and tiered-proxy (defaults); rdkafka_performance: "
              f"{tool or 'none (give --rdkafka-performance PATH for part 1)'}", flush=True)
        topic_sets = {}
        for count in args.topics:
            topic_sets[count] = [f"load{count}-{i}-{uuid.uuid4().hex[:4]}" for i in range(count)]
            create_topics(broker.bootstrap, topic_sets[count], 1)
        for name, where in placements.items():
            cpus = place(where, broker, proxy)
            print(f"\n{name}: {where.describe()}", flush=True)
            if tool is not None:
                tool_runs[name] = tool_run(tool, cpus, broker, proxy, args, work)
                r = tool_runs[name]
                print(f"  rdkafka_performance produce MB/s direct {cell(r.produce.direct)}, proxy {cell(r.produce.proxy)}; "
                      f"consume direct {cell(r.consume.direct)}, proxy {cell(r.consume.proxy)}", flush=True)
            for count, topics in topic_sets.items():
                for bootstrap in (broker.bootstrap, proxy.bootstrap):
                    shaped_load(bootstrap, topics, args.rate, WARM_UP_SECONDS, cpus)
                got = (shaped_load(broker.bootstrap, topics, args.rate, args.seconds, cpus),
                       shaped_load(proxy.bootstrap, topics, args.rate, args.seconds, cpus))
                loads[(name, count)] = got
                print(f"  {count} topics: end-to-end p99 direct {percentiles(got[0])[1]:.1f} ms, "
                      f"proxy {percentiles(got[1])[1]:.1f} ms", flush=True)
    finally:
        proxy.stop()
        broker.stop()
    report(args, placements, tool_runs, loads)


def _latency_row(label: str, direct: list[float], proxy: list[float]) -> str:
    d, p = percentiles(direct), percentiles(proxy)
    added = " / ".join(f"{b - a:+.2f}" for a, b in zip(d, p, strict=True))
    return (f"| {label} | {' / '.join(f'{v:.2f}' for v in d)} | {' / '.join(f'{v:.2f}' for v in p)} | {added} |")


def report(args: argparse.Namespace, placements: dict[str, Placement], tool_runs: dict[str, ToolRun],
           loads: dict[tuple[str, int], tuple[list[float], list[float]]]) -> None:
    print(f"\n{args.runs} runs each, alternating direct and proxy; medians [min-max]")
    for name, where in placements.items():
        print(f"\n### {name}: {where.describe()}\n")
        r = tool_runs.get(name)
        if r is not None:
            print(f"rdkafka_performance, {args.records:,} records of {RECORD_BYTES} B, {PARTITIONS} partitions\n")
            print("| measure | direct | through the proxy | ratio | proxy CPU ms per MB |")
            print("|---|---|---|---|---|")
            for label, f in (("produce MB/s (acks=all, linger 5 ms)", r.produce),
                             ("consume MB/s (from the beginning)", r.consume)):
                print(f"| {label} | {cell(f.direct)} | {cell(f.proxy)} | {f.ratio()} | "
                      f"{cell(f.proxy_cpu_ms_per_mb, '.2f')} |")
            top = statistics.median(r.produce_rate)
            print(f"\ndelivery latency, ms, p50 / p99 / p99.9 (direct produce: {top:,.0f} msg/s)\n")
            print("| load | direct | through the proxy | added |")
            print("|---|---|---|---|")
            for load, (direct, proxied) in r.latency.items():
                print(_latency_row(f"{load:.0%} ({int(top * load):,} msg/s)", direct, proxied))
        print(f"\nshaped load (confluent-kafka): {args.rate:,} records/s of {RECORD_BYTES} B for {args.seconds:.0f} s, "
              "end-to-end latency, ms, p50 / p99 / p99.9\n")
        print("| topics | direct | through the proxy | added |")
        print("|---|---|---|---|")
        for count in args.topics:
            direct, proxied = loads[(name, count)]
            print(_latency_row(str(count), direct, proxied))


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
    parser.add_argument("--rate", type=int, default=5000, help="records/s of the shaped load (default 5000)")
    parser.add_argument("--seconds", type=float, default=20, help="seconds of each shaped load (default 20)")
    parser.add_argument("--placements", type=lambda s: s.split(","), default=["isolated", "shared"],
                        help="isolated, shared or both (default isolated,shared)")
    parser.add_argument("--keep-work-dir", action="store_true", help="keep the broker's and proxy's folders")
    args = parser.parse_args()
    if set(args.placements) - {"isolated", "shared"}:
        parser.error("--placements takes isolated and/or shared")
    run_in_work_dir("bench-librdkafka-load-", args.keep_work_dir, lambda work: run(args, work))


if __name__ == "__main__":
    main()
