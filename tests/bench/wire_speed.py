"""Pass-through at wire speed (issue 26): the same Apache Kafka 4.4 broker read and written directly
and through ``tiered-proxy serve``, side by side in one run.

    python -m tests.bench.wire_speed [--mb 300] [--runs 5] [--shared] [--baseline DIR] [--profile FILE]
                                     [--keep-work-dir]

One single-node Kafka 4.4 broker (tests/kafka_cluster.py) holds ``--mb`` MB of 1 KiB records (values
half random, half repeated; no compression) in 3 partitions of an ordinary, untiered topic, so every
byte read through the proxy takes its pass-through path. One proxy process, default settings, serves
the whole run. Measured, ``--runs`` times round-robin (direct, proxy), medians [min-max]:

- **consumer**: one confluent-kafka consumer reading every record from offset 0 (librdkafka's default
  fetch sizes, ``fetch.queue.backoff.ms=0`` as in tests/bench/backfill.py): MB/s of payload from its
  assignment to the last record.
- **raw Fetch loop**: one Fetch v12 in flight at a time for every partition not yet at its high
  watermark (librdkafka's default ``fetch.max.bytes`` 50 MiB and 1 MiB per partition), nothing decoded
  but the batch headers: MB/s of record bytes, and per answer the time from sending the request to
  its first byte and from its first byte to its last (median, in ms) -- where the proxy adds its time.
- **produce**: a confluent-kafka producer (acks=all, ``linger.ms=5``, 1 KiB records) as fast as it
  can for ``--produce-s`` seconds, MB/s; then at half of the direct rate (paced in 10 ms steps) for
  the same time, each record's delivery latency (produce() to delivery report), p50 and p99 in ms.

By default the proxy (every thread) runs on CPUs of its own and the broker and the clients on the
others, in the direct runs too (tests/cpu_sets.py: one core each on two): the ratio then
measures the proxy. ``--shared`` lets every process run anywhere, as before: on two cores that
ratio measures the machine. The table's heading says which.

The proxy's resident set is sampled every 20 ms during each read; the table gives the peak over the
run (and VmHWM, the kernel's peak since start). With ``--profile`` py-spy samples the proxy during
the proxy reads and its top frames are printed (py-spy must be installed: ``pip install py-spy``).
The default size runs in about 4 minutes on a 2-core machine; every wait is bounded. The broker and
the proxy are stopped at the end, also on an error or Ctrl-C; the working folder in /tmp is removed
unless ``--keep-work-dir``.
"""

from __future__ import annotations

import argparse
import collections
import os
import random
import shutil
import signal
import socket
import statistics
import struct
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from protocol.apis import FETCH, api
from protocol.headers import RequestHeader, decode_response_header, encode_request_header
from protocol.record_set import iter_batches
from tests.bench.backfill import RAW_MAX_BYTES, raw_fetch_body
from tests.bench.process_hygiene import run_in_work_dir
from tests.cpu_sets import pin_self, placement
from tests.kafka_cluster import start_single
from tests.proxy_process import ProxyProcess, start_proxy

PARTITIONS = 3
RECORD_BYTES = 1024


# --- data ------------------------------------------------------------------------------------------


def create_topic(bootstrap: str, topic: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})  # must outlive its futures
    for future in admin.create_topics([NewTopic(topic, PARTITIONS, 1)]).values():
        future.result(30)


def values(count: int) -> Iterator[bytes]:
    """1 KiB values, half random and half repeated (so compression, where a client asks, has work)."""
    rng = random.Random(26)
    pool = [rng.randbytes(RECORD_BYTES // 2) + bytes(RECORD_BYTES // 2) for _ in range(64)]
    for i in range(count):
        yield pool[i % len(pool)]


def fill(bootstrap: str, topic: str, records: int) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "batch.size": 1 << 20,
                         "queue.buffering.max.kbytes": 256 << 10})
    failed: list[KafkaError] = []

    def delivered(error: KafkaError | None, _msg: object) -> None:
        if error is not None:
            failed.append(error)

    for i, value in enumerate(values(records)):
        while True:
            try:
                producer.produce(topic, value, partition=i % PARTITIONS, on_delivery=delivered)
                break
            except BufferError:
                producer.poll(0.05)
    left = producer.flush(300)
    if left or failed:
        raise RuntimeError(f"filling {topic}: {left} undelivered, {len(failed)} failed ({failed[:1]})")


# --- the proxy's memory ----------------------------------------------------------------------------


def cpu_seconds(pid: int) -> float:
    """User and system CPU the process has used so far (/proc/PID/stat)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def rss_mb(pid: int, key: str = "VmRSS:") -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(key):
            return int(line.split()[1]) * 1024 / 1e6
    return float("nan")


@contextmanager
def rss_sampler(pid: int | None, peaks: list[float]) -> Iterator[None]:
    """Appends to ``peaks`` the highest resident set of ``pid`` seen every 20 ms while inside."""
    if pid is None:
        yield
        return
    stop = threading.Event()
    peak = [0.0]

    def sample() -> None:
        while not stop.wait(0.02):
            try:
                peak[0] = max(peak[0], rss_mb(pid))
            except OSError:
                return

    thread = threading.Thread(target=sample, daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(5)
        peaks.append(peak[0])


# --- reads -----------------------------------------------------------------------------------------


def consumer_mb_per_s(bootstrap: str, topic: str, records: int, timeout: float = 300) -> float:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"bench-{uuid.uuid4().hex[:8]}",
                         "enable.auto.commit": False, "fetch.queue.backoff.ms": 0})
    consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(PARTITIONS)])
    got = size = 0
    started = time.perf_counter()  # from the assignment: librdkafka fetches ahead of the first poll
    deadline = time.monotonic() + timeout
    try:
        while got < records:
            if time.monotonic() > deadline:
                raise TimeoutError(f"consumer read {got} of {records} records of {topic} in {timeout:.0f} s")
            for message in consumer.consume(10_000, 1.0):
                if message.error() is not None:
                    continue
                got += 1
                size += len(message.value())
        return size / (time.perf_counter() - started) / 1e6
    finally:
        consumer.close()


@dataclass
class RawRead:
    mb_per_s: float
    first_byte_ms: list[float]  # request sent -> the answer's first byte
    transfer_ms: list[float]  # the answer's first byte -> its last
    record_bytes: int = 0  # read in all
    end_offsets: list[int] = field(default_factory=list)  # where the last pass ended, per partition


def raw_fetch_loop(bootstrap: str, topic: str, passes: int, timeout: float = 300) -> RawRead:
    """One Fetch v12 in flight; answers read with recv_into into one buffer; only batch headers read.
    The topic is read ``passes`` times from offset 0 on one connection (one pass is too short to time)."""
    host, port = bootstrap.rsplit(":", 1)
    sock = socket.create_connection((host, int(port)), timeout=30)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    spec = api(FETCH)
    codec = spec.response_codec(12)
    offsets, high = [0] * PARTITIONS, [1] * PARTITIONS
    size, first_byte, transfer = 0, [], []
    passes_left = passes
    buf = bytearray(RAW_MAX_BYTES + (1 << 20))
    view = memoryview(buf)
    corr = 0
    started = time.perf_counter()
    try:
        while True:
            if all(o >= h for o, h in zip(offsets, high, strict=True)):
                passes_left -= 1
                if not passes_left:
                    break
                offsets = [0] * PARTITIONS
            if time.perf_counter() - started > timeout:
                raise TimeoutError(f"raw read of {topic} stuck at {offsets} of {high}")
            corr += 1
            header = encode_request_header(RequestHeader(FETCH, 12, corr, "wire-speed"), spec.request_header_version(12))
            body = spec.request_codec(12).encode(raw_fetch_body(topic, offsets, high))
            sent = time.perf_counter()
            sock.sendall(struct.pack(">i", len(header) + len(body)) + header + body)
            have = sock.recv_into(view[:4], 4)
            arrived = time.perf_counter()
            while have < 4:
                have += sock.recv_into(view[have:4], 4 - have)
            (length,) = struct.unpack_from(">i", buf, 0)
            have = 0
            while have < length:
                n = sock.recv_into(view[have:length], length - have)
                if n == 0:
                    raise ConnectionError("closed inside an answer")
                have += n
            done = time.perf_counter()
            first_byte.append((arrived - sent) * 1000)
            transfer.append((done - arrived) * 1000)
            frame = view[:length]
            _, at = decode_response_header(frame, spec.response_header_version(12))
            answer = codec.decode(frame[at:])
            for part in answer["responses"][0]["partitions"]:
                if part["error_code"] != 0:
                    raise RuntimeError(f"raw read of {topic}: error {part['error_code']}")
                records = part["records"] or b""
                size += len(records)
                high[part["partition_index"]] = part["high_watermark"]
                for batch, _ in iter_batches(records):
                    offsets[part["partition_index"]] = batch.last_offset + 1
        return RawRead(size / (time.perf_counter() - started) / 1e6, first_byte, transfer, size, offsets)
    finally:
        sock.close()


# --- produce ---------------------------------------------------------------------------------------


@dataclass
class Produced:
    mb_per_s: float
    latencies_ms: list[float] = field(default_factory=list)
    megabytes: float = 0.0  # acknowledged

    def percentile(self, q: float) -> float:
        ordered = sorted(self.latencies_ms)
        return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


def produce_for(bootstrap: str, topic: str, seconds: float, rate_mb_per_s: float | None) -> Produced:
    """Writes 1 KiB records for ``seconds`` (acks=all, linger 5 ms), as fast as the client can or paced at
    ``rate_mb_per_s``; MB/s acknowledged and each record's delivery latency."""
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5,
                         "queue.buffering.max.kbytes": 64 << 10})
    latencies: list[float] = []
    failed: list[KafkaError] = []
    acked = [0]

    def delivered(error: KafkaError | None, message: object, sent: float) -> None:
        if error is not None:
            failed.append(error)
            return
        latencies.append((time.perf_counter() - sent) * 1000)
        acked[0] += 1

    value = next(values(1))
    started = time.perf_counter()
    written = 0
    step_records = None if rate_mb_per_s is None else max(1, int(rate_mb_per_s * 1e6 * 0.01 / RECORD_BYTES))
    while (now := time.perf_counter()) - started < seconds:
        if step_records is not None:
            due = int((now - started) / 0.01) * step_records
            if written >= due:
                producer.poll(0.001)
                continue
        try:
            sent = time.perf_counter()
            producer.produce(topic, value, partition=written % PARTITIONS,
                             on_delivery=lambda e, m, sent=sent: delivered(e, m, sent))
            written += 1
        except BufferError:
            producer.poll(0.01)
        if written % 256 == 0:
            producer.poll(0)
    left = producer.flush(120)
    elapsed = time.perf_counter() - started
    if left or failed:
        raise RuntimeError(f"produce to {topic}: {left} undelivered, {len(failed)} failed ({failed[:1]})")
    return Produced(acked[0] * RECORD_BYTES / elapsed / 1e6, latencies, acked[0] * RECORD_BYTES / 1e6)


# --- report ----------------------------------------------------------------------------------------


def cell(values_: list[float], spec: str = ".0f") -> str:
    if not values_:
        return "-"
    return f"{statistics.median(values_):{spec}} [{min(values_):{spec}}-{max(values_):{spec}}]"


def ratio(mine: list[float], theirs: list[float]) -> str:
    if not mine or not theirs:
        return "-"
    return f"{statistics.median(mine) / statistics.median(theirs):.2f}x"


def print_profile(path: Path, top: int = 18) -> None:
    """Share of samples in which each function is on the stack (inclusive), highest first."""
    inclusive: collections.Counter[str] = collections.Counter()
    total = 0
    for line in path.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if not count.isdigit():
            continue
        total += int(count)
        for frame in set(stack.split(";")):
            inclusive[frame] += int(count)
    print(f"\nproxy profile during its reads ({total} samples, inclusive share):")
    for frame, n in inclusive.most_common(top):
        print(f"  {100 * n / max(total, 1):5.1f}%  {frame}")


@contextmanager
def profiled(pid: int, out: Path | None) -> Iterator[None]:
    if out is None or not pid:
        yield
        return
    spy = subprocess.Popen([shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy")), "record", "-p", str(pid), "-o", str(out), "-f", "raw", "-r", "250",
                            "--nonblocking", "--idle"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    time.sleep(0.5)
    try:
        yield
    finally:
        spy.send_signal(signal.SIGINT)
        try:
            spy.wait(30)
        except subprocess.TimeoutExpired:
            spy.kill()


def run(args: argparse.Namespace, work: Path) -> None:
    records = args.mb * 1_000_000 // RECORD_BYTES
    where = placement(not args.shared)
    pin_self(where)  # the broker and the clients inherit it
    broker = start_single(work / "broker")
    proxies: dict[str, ProxyProcess] = {}
    try:
        topic = f"wire-{uuid.uuid4().hex[:6]}"
        create_topic(broker.bootstrap, topic)
        began = time.perf_counter()
        fill(broker.bootstrap, topic, records)
        print(f"wrote {records:,} records of {RECORD_BYTES} B to {topic} in {time.perf_counter() - began:.0f} s "
              f"(Kafka {broker.release.version}, single node)", flush=True)
        proxies["proxy"] = start_proxy(broker.bootstrap, work / "proxy", cpus=where.proxy)
        if args.baseline:
            proxies["baseline"] = start_proxy(broker.bootstrap, work / "baseline", source=Path(args.baseline),
                                              cpus=where.proxy)
        paths = {"direct": broker.bootstrap, **{name: p.bootstrap for name, p in proxies.items()}}
        consumer: dict[str, list[float]] = {name: [] for name in paths}
        raw: dict[str, list[RawRead]] = {name: [] for name in paths}
        peaks: dict[str, list[float]] = {name: [] for name in proxies}
        profile = Path(args.profile) if args.profile else None
        for bootstrap in paths.values():  # warm-up, not counted: the broker's JIT, the proxy's codecs
            raw_fetch_loop(bootstrap, topic, 1)
        for run_no in range(1, args.runs + 1):
            for name, bootstrap in paths.items():
                pid = proxies[name].process.pid if name in proxies else None
                spy = profile if name == "proxy" and run_no == 1 else None
                with profiled(pid or 0, spy), rss_sampler(pid, peaks.get(name, [])):
                    consumer[name].append(consumer_mb_per_s(bootstrap, topic, records))
                    raw[name].append(raw_fetch_loop(bootstrap, topic, args.raw_passes))
                print(f"  run {run_no} {name:>8}: consumer {consumer[name][-1]:.0f} MB/s, "
                      f"raw loop {raw[name][-1].mb_per_s:.0f} MB/s", flush=True)
        produced: dict[str, list[Produced]] = {name: [] for name in paths}
        paced: dict[str, list[Produced]] = {name: [] for name in paths}
        target = f"{topic}-produce"
        create_topic(broker.bootstrap, target)
        produce_cpu: dict[str, list[float]] = {name: [] for name in proxies}  # proxy CPU ms per MB
        for _ in range(max(1, args.runs // 2)):
            for name, bootstrap in paths.items():
                pid = proxies[name].process.pid if name in proxies else None
                before = cpu_seconds(pid) if pid else 0.0
                produced[name].append(produce_for(bootstrap, target, args.produce_s, None))
                if pid:
                    megabytes = produced[name][-1].megabytes
                    produce_cpu[name].append((cpu_seconds(pid) - before) * 1000 / max(megabytes, 1e-9))
        half = statistics.median(p.mb_per_s for p in produced["direct"]) / 2
        for _ in range(max(1, args.runs // 2)):
            for name, bootstrap in paths.items():
                paced[name].append(produce_for(bootstrap, target, args.produce_s, half))
        hwm = {name: rss_mb(p.process.pid, "VmHWM:") for name, p in proxies.items()}
    finally:
        for p in proxies.values():
            p.stop()
        broker.stop()

    names = list(paths)
    print(f"\nKafka {broker.release.version}, {args.mb} MB of 1 KiB records, {PARTITIONS} partitions, untiered "
          f"(pass-through); {args.runs} runs each, medians [min-max]; ratios are to direct"
          + (f"; baseline: the proxy of {args.baseline}" if args.baseline else "") + f"\nCPUs: {where.describe()}\n")
    print("| measure | " + " | ".join(names) + " | " + " | ".join(f"{n} / direct" for n in names[1:]) + " |")
    print("|---" * (2 * len(names)) + "|")

    def row(label: str, figures: dict[str, list[float]], spec: str = ".0f") -> None:
        print(f"| {label} | " + " | ".join(cell(figures[n], spec) for n in names) + " | "
              + " | ".join(ratio(figures[n], figures["direct"]) for n in names[1:]) + " |")

    row("consumer MB/s", consumer)
    row("raw Fetch loop MB/s", {n: [r.mb_per_s for r in raw[n]] for n in names})
    row("raw loop: request to first byte, ms", {n: [statistics.median(r.first_byte_ms) for r in raw[n]] for n in names},
        ".2f")
    row("raw loop: first to last byte, ms", {n: [statistics.median(r.transfer_ms) for r in raw[n]] for n in names},
        ".2f")
    row("produce MB/s (acks=all)", {n: [p.mb_per_s for p in produced[n]] for n in names})
    for q, label in ((0.5, "p50"), (0.99, "p99")):
        figures = {n: [p.percentile(q) for p in paced[n]] for n in names}
        added = "; ".join(f"{n} +{statistics.median(figures[n]) - statistics.median(figures['direct']):.2f} ms"
                          for n in names[1:])
        row(f"produce latency {label} at {half:.0f} MB/s, ms ({added})", figures, ".2f")
    for name in proxies:
        print(f"\n{name}: CPU per MB produced {cell(produce_cpu[name], '.2f')} ms (the second hop's cost, "
              "kernel TCP included)")
    for name in proxies:
        print(f"\n{name}: peak RSS during reads {max(peaks[name]):.0f} MB "
              f"(per run: {', '.join(f'{x:.0f}' for x in peaks[name])}); VmHWM at the end {hwm[name]:.0f} MB")
    if profile is not None and profile.exists():
        print_profile(profile)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--mb", type=int, default=300, help="MB of 1 KiB records to read (default 300)")
    parser.add_argument("--runs", type=int, default=5, help="reads per path (default 5); produce runs half as many")
    parser.add_argument("--raw-passes", type=int, default=5, help="times the raw loop reads the topic per run (default 5)")
    parser.add_argument("--produce-s", type=float, default=10, help="seconds per produce measurement (default 10)")
    parser.add_argument("--profile", metavar="FILE", help="py-spy the proxy during its first reads into FILE")
    parser.add_argument("--baseline", metavar="DIR", help="also run the proxy of this checkout (e.g. `git worktree "
                        "add /tmp/before <commit>`) in the same run, as a third path")
    parser.add_argument("--shared", action="store_true", help="let every process run on any CPU, instead of the "
                        "proxy on CPUs of its own and the broker and the clients on the others")
    parser.add_argument("--keep-work-dir", action="store_true", help="keep the broker's and proxy's folders")
    args = parser.parse_args()
    run_in_work_dir("bench-wire-speed-", args.keep_work_dir, lambda work: run(args, work))


if __name__ == "__main__":
    main()
