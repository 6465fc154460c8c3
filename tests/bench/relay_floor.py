"""What a relay adds to a Kafka request on this machine, whatever it is written in: the proxy side by
side with socat, a C relay, and with the broker asked directly (issue 36).

    python -m tests.bench.relay_floor [--requests 3000] [--big-requests 300] [--mb 30]
                                      [--placements isolated,shared] [--no-c-relay]
                                      [--keep-work-dir]

One single-node Apache Kafka 4.4 broker holds ``--mb`` MB of 1 KiB records in 3 partitions. One
client on one connection sends one request at a time, in two shapes:

- **empty**: Fetch v12 of a partition at its log end, ``max_wait_ms`` 0: the per-request cost, from
  the request's first byte sent to the answer's last byte received;
- **3 MiB**: Fetch v12 of all 3 partitions from offset 0, 1 MiB each (librdkafka's default
  ``max.partition.fetch.bytes``): time to the answer's first byte and to its last.

through four paths: **direct**; **socat** (``socat TCP-LISTEN,fork,nodelay TCP,nodelay``, from
Debian's package; left out when not installed), a C relay with one read and one write per piece;
**c-relay** (tests/bench/splice_relay.c, built with the machine's C compiler: splice through a
pipe, a blocking thread per direction, the least a relay can do; ``--no-c-relay`` leaves it out);
and **proxy**, ``tiered-proxy serve`` with defaults. Relays on a partition's leader port need no
address rewriting, so socat carries these requests as the proxy does. Placements as in
tests/cpu_sets.py: **isolated**, the relays on the upper half of the CPUs and the broker and the
client on the lower; **shared**, anywhere. Medians and p99 in µs; "added" is over direct; "relay
CPU" is the proxy's (or the C relay's) CPU per request over the whole run of that shape.

Why: isolated, every hop through a relay is a wake-up of a process on another CPU. What that costs
on its own is what the c-relay adds (on this machine about nothing; socat adds its own copies), and
the proxy's own cost is what it adds beyond the c-relay.
"""

from __future__ import annotations

import argparse
import os
import shutil
import socket
import statistics
import struct
import subprocess
import time
from pathlib import Path

from protocol.apis import FETCH, api
from protocol.headers import RequestHeader, encode_request_header
from tests.bench import c_relay
from tests.bench import kafka_native as native
from tests.bench.backfill import raw_fetch_body
from tests.bench.librdkafka_load import percentiles
from tests.bench.process_hygiene import run_in_work_dir
from tests.bench.workers import process_cpu_seconds
from tests.cpu_sets import pin_tree, placement, placement_names
from tests.kafka_cluster import start_single
from tests.proxy_process import free_port, start_proxy

VERSION = 12


def fetch_request(topic: str, offsets: list[int], correlation_id: int) -> bytes:
    """A Fetch v12 of every partition from ``offsets``, librdkafka's sizes, answered at once."""
    spec = api(FETCH)
    body = {**raw_fetch_body(topic, offsets, [o + 1 for o in offsets]), "max_wait_ms": 0, "min_bytes": 0}
    frame = encode_request_header(RequestHeader(FETCH, VERSION, correlation_id, "relay-floor"),
                                  spec.request_header_version(VERSION)) + spec.request_codec(VERSION).encode(body)
    return struct.pack(">i", len(frame)) + frame


def round_trips(address: str, request: bytes, count: int) -> tuple[list[float], list[float], int]:
    """(µs to the answer's first byte, µs to its last, answer bytes) of ``count`` requests in turn."""
    host, port = address.rsplit(":", 1)
    sock = socket.create_connection((host, int(port)), timeout=30)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    buf = bytearray(8 << 20)
    view = memoryview(buf)
    first, last, size = [], [], 0
    try:
        for _ in range(count + count // 10):  # the first tenth warms up, not counted
            started = time.perf_counter()
            sock.sendall(request)
            have = sock.recv_into(view[:4])
            arrived = time.perf_counter()
            while have < 4:
                have += sock.recv_into(view[have:4])
            (size,) = struct.unpack_from(">i", buf, 0)
            have = 0
            while have < size:
                n = sock.recv_into(view[have:size])
                if not n:
                    raise ConnectionError(f"{address} closed inside an answer")
                have += n
            first.append((arrived - started) * 1e6)
            last.append((time.perf_counter() - started) * 1e6)
    finally:
        sock.close()
    skip = count // 10
    return first[skip:], last[skip:], size


def p99(values: list[float]) -> float:
    return percentiles(values)[1]


def run(args: argparse.Namespace, work: Path) -> None:
    broker = start_single(work / "broker")
    relays: dict[str, subprocess.Popen] = {}
    proxy = None
    try:
        topic = "floor"
        native.create_topic(broker.bootstrap, topic, 8 << 20)
        records, _ = native.produce([(broker.bootstrap, [topic])], args.mb)
        ends = native.list_offsets(broker.bootstrap, topic, native.LATEST)
        print(f"Kafka {broker.version}: {records:,} records of 1 KiB in {topic}", flush=True)
        proxy = start_proxy(broker.bootstrap, work / "proxy")
        (leader_port,) = proxy.node_ports.values()
        paths = {"direct": broker.bootstrap}
        socat = shutil.which("socat")
        if socat:
            port = free_port()
            relays["socat"] = subprocess.Popen([socat, f"TCP-LISTEN:{port},bind=127.0.0.1,reuseaddr,fork,nodelay",
                                                f"TCP:{broker.bootstrap},nodelay"])
            time.sleep(0.5)
            paths["socat"] = f"127.0.0.1:{port}"
        executable = c_relay.build(work) if args.c_relay else None
        if executable is not None:
            splice = c_relay.start(executable, free_port(), broker.bootstrap)
            relays["c-relay"] = splice.process
            time.sleep(0.5)
            paths["c-relay"] = splice.bootstrap
        paths["proxy"] = f"127.0.0.1:{leader_port}"
        shapes = {"empty": (fetch_request(topic, [ends[0]], 1), args.requests),
                  "3 MiB": (fetch_request(topic, [0] * native.PARTITIONS, 2), args.big_requests)}
        results: dict[tuple[str, str, str], tuple[list[float], list[float], int]] = {}
        # The relays whose CPU is one process's (socat forks a process per connection).
        relay_cpu = {"proxy": lambda: process_cpu_seconds(proxy.process.pid),
                     **({"c-relay": splice.cpu_seconds} if executable is not None else {})}
        cpu: dict[tuple[str, str, str], float] = {}  # µs of the relay's CPU per request
        everywhere = frozenset(os.sched_getaffinity(0))
        for name in args.placements:
            where = placement(name == "isolated")
            os.sched_setaffinity(0, where.others or everywhere)  # the client: this process
            assert broker.pid is not None
            pin_tree(broker.pid, where.others or everywhere)
            for relay in [proxy.process.pid, *(p.pid for p in relays.values())]:
                pin_tree(relay, where.proxy or everywhere)
            print(where.describe(), flush=True)
            for shape, (request, count) in shapes.items():
                for path, address in paths.items():
                    seconds = relay_cpu.get(path)
                    before = seconds() if seconds else 0.0
                    results[(name, shape, path)] = round_trips(address, request, count)
                    if seconds:
                        cpu[(name, shape, path)] = (seconds() - before) / (count + count // 10) * 1e6
    finally:
        for relay in relays.values():
            relay.terminate()
            relay.wait(10)
        if proxy is not None:
            proxy.stop()
        broker.stop()
    report(args, list(paths), results, cpu)


def report(args: argparse.Namespace, paths: list[str],
           results: dict[tuple[str, str, str], tuple[list[float], list[float], int]],
           cpu: dict[tuple[str, str, str], float]) -> None:
    print("\none request at a time on one connection; µs, median (p99); added: median over direct; "
          "relay CPU: the relay process's user and system CPU per request (clock ticks of 10 ms, so "
          "whole runs only)\n")
    print("| placement | request | path | answer bytes | first byte | added | last byte | added | relay CPU |")
    print("|---|---|---|---|---|---|---|---|---|")
    for name in args.placements:
        for shape in ("empty", "3 MiB"):
            direct_first, direct_last, _ = results[(name, shape, "direct")]
            for path in paths:
                first, last, size = results[(name, shape, path)]
                added = "" if path == "direct" else f"{statistics.median(first) - statistics.median(direct_first):+.0f}"
                added_last = "" if path == "direct" else f"{statistics.median(last) - statistics.median(direct_last):+.0f}"
                relay_cpu = f"{cpu[(name, shape, path)]:.0f}" if (name, shape, path) in cpu else ""
                print(f"| {name} | {shape} | {path} | {size:,} | {statistics.median(first):.0f} ({p99(first):.0f}) | "
                      f"{added} | {statistics.median(last):.0f} ({p99(last):.0f}) | {added_last} | {relay_cpu} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=3000, help="empty Fetches per path (default 3000)")
    parser.add_argument("--big-requests", type=int, default=300, help="3 MiB Fetches per path (default 300)")
    parser.add_argument("--mb", type=int, default=30, help="MB of records in the topic (default 30)")
    parser.add_argument("--placements", type=placement_names, default=["isolated", "shared"],
                        help="isolated, shared or both (default isolated,shared)")
    parser.add_argument("--no-c-relay", dest="c_relay", action="store_false",
                        help="leave out the C relay (tests/bench/splice_relay.c)")
    parser.add_argument("--keep-work-dir", action="store_true", help="keep the broker's and proxy's folders")
    args = parser.parse_args()
    run_in_work_dir("bench-relay-floor-", args.keep_work_dir, lambda work: run(args, work))


if __name__ == "__main__":
    main()
