"""Many small partitions read from the remote tier against the same read from the broker's local log
(issue 36, item 5).

    python -m tests.bench.wide_read [--partitions 5000] [--records 20] [--runs 3] [--shared] [--baseline DIR]
                                    [--keep-work-dir]

One single-node Apache Kafka 4.4 broker (1 GiB heap) holds two topics of ``--partitions``
partitions, ``--records`` records of 1 KiB in each partition:

- ``wide-local``: an ordinary topic, read directly from the broker's local log;
- ``wide-tiered``: created through ``tiered-proxy serve`` with ``remote.storage.enable=true`` and
  ``segment.ms`` 2000, so the proxy closes each partition's range two seconds after its last
  record and tiers it. The broker keeps its copy (its active segment, which local retention never
  deletes, as in Kafka); the reading proxy runs with ``proxy.fetch.routing.policy=remote-preferred``,
  so every record of this topic is read from the remote tier (a local folder).

Then ``--runs`` times, alternating: one confluent-kafka consumer (read_committed, librdkafka's
default) assigned every partition at offset 0 reads every record, directly from ``wide-local``, and
through a fresh proxy from ``wide-tiered``, once the proxy's first tiering round is done (it checks
every partition's lineage with the brokers, which is the start's work, not the read's; its length
is printed) and its next a minute away. ``--baseline DIR`` (``git worktree add /tmp/before
<commit>``) reads through that checkout's proxy too, in the same runs. Prints the seconds from the
consumer's creation to its last record, medians [min-max], and their ratio. The proxy runs on
CPUs of its own, the broker and the consumer on the others (tests/cpu_sets.py); ``--shared`` lets
every process run anywhere. Every wait is bounded; the broker and the proxies are stopped at the
end, also on an error or Ctrl-C.
"""

from __future__ import annotations

import argparse
import re
import statistics
import time
from pathlib import Path

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tests.bench import kafka_native as native
from tests.bench.process_hygiene import run_in_work_dir
from tests.bench.wire_speed import cell
from tests.cpu_sets import pin_self, placement
from tests.kafka_cluster import start_single
from tests.proxy_process import ProxyProcess, start_proxy
from tiering.broker_client import BrokerClient

LOCAL, TIERED = "wide-local", "wide-tiered"
RECORD_BYTES = 1024
KEEP = {"retention.ms": "-1", "retention.bytes": "-1"}
FIRST_ROUND = re.compile(r"first tiering round done: \d+ partitions in ([\d.]+) s")
TIERED_CONFIG = {"remote.storage.enable": "true", "segment.ms": "2000", **KEEP}


def create(bootstrap: str, topic: str, partitions: int, config: dict[str, str]) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap, "socket.timeout.ms": 120_000})
    admin.create_topics([NewTopic(topic, partitions, 1, config=config)], request_timeout=300)[topic].result(300)


def fill(bootstrap: str, topics: list[str], partitions: int, records: int) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 50, "queue.buffering.max.messages": 2_000_000,
                         "message.timeout.ms": 300_000})
    value = bytes(RECORD_BYTES)
    for topic in topics:
        for i in range(records):
            for p in range(partitions):
                while True:
                    try:
                        producer.produce(topic, value, key=str(i).encode(), partition=p)
                        break
                    except BufferError:
                        producer.poll(0.1)
    if producer.flush(300):
        raise RuntimeError("records undelivered")


def read_all(bootstrap: str, topic: str, partitions: int, expected: int, timeout: float = 600) -> float:
    """Seconds from a new consumer's creation, assigned at offset 0 of every partition, to its last record."""
    started = time.perf_counter()
    consumer = Consumer({**native.consumer_config(bootstrap), "enable.partition.eof": False})
    got = 0
    try:
        consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        while got < expected:
            if time.perf_counter() - started > timeout:
                raise TimeoutError(f"read {got} of {expected} records of {topic} at {bootstrap} in {timeout:.0f} s")
            for message in consumer.consume(10_000, 0.2):
                if message.error() is not None:
                    raise RuntimeError(f"{topic}: {message.error()}")
                got += 1
        return time.perf_counter() - started
    finally:
        consumer.close()


def highest_tiered(bootstrap: str, topic: str) -> dict[int, int]:
    """LATEST_TIERED (-5) of every partition through the proxy, one ListOffsets per leader."""
    client = BrokerClient(bootstrap, timeout_s=60)
    try:
        by_leader: dict[int, list[tuple[str, int]]] = {}
        for p, part in client.metadata([topic])[topic].partitions.items():
            by_leader.setdefault(part.leader, []).append((topic, p))
        tiered: dict[int, int] = {}
        for leader, keys in by_leader.items():
            for (_, p), (error, offset) in client.list_offsets(leader, keys, native.LATEST_TIERED).items():
                if error == 0:
                    tiered[p] = offset
        return tiered
    finally:
        client.close()


def wait_tiered(bootstrap: str, topic: str, partitions: int, last: int, timeout: float) -> float:
    """Until every partition is tiered up to offset ``last``."""
    started = time.monotonic()
    while True:
        tiered = highest_tiered(bootstrap, topic)
        done = sum(1 for p in range(partitions) if tiered.get(p, -1) >= last)
        if done == partitions:
            return time.monotonic() - started
        if time.monotonic() - started > timeout:
            raise TimeoutError(f"{partitions - done} of {partitions} partitions of {topic} not tiered after "
                               f"{timeout:.0f} s")
        print(f"  {done}/{partitions} partitions tiered ({time.monotonic() - started:.0f} s)", flush=True)
        time.sleep(5)


def first_round_s(proxy: ProxyProcess, timeout: float = 300) -> float:
    """Waits for the proxy's first tiering round; the seconds it took, by the proxy's log."""
    deadline = time.monotonic() + timeout
    while (found := FIRST_ROUND.search(proxy.log_text())) is None:
        if time.monotonic() > deadline:
            raise TimeoutError(f"no first tiering round within {timeout:.0f} s: {proxy.log_path}")
        time.sleep(0.5)
    return float(found.group(1))


def run(args: argparse.Namespace, work: Path) -> None:
    where = placement(not args.shared)
    pin_self(where)  # the broker and the consumers inherit it
    broker = start_single(work / "broker", heap="1g")
    proxy = None
    data = ("--data-dir", str(work / "proxy-data"))
    try:
        began = time.perf_counter()
        proxy = start_proxy(broker.bootstrap, work / "tiering", *data,
                            "--set", "remote.log.manager.task.interval.ms=1000", timeout=120, cpus=where.proxy)
        create(broker.bootstrap, LOCAL, args.partitions, KEEP)
        create(proxy.bootstrap, TIERED, args.partitions, TIERED_CONFIG)
        fill(broker.bootstrap, [LOCAL, TIERED], args.partitions, args.records)
        print(f"Kafka {broker.version}: {args.partitions} partitions x {args.records} records of {RECORD_BYTES} B in "
              f"{LOCAL} and {TIERED} ({time.perf_counter() - began:.0f} s)", flush=True)
        tiered_s = wait_tiered(proxy.bootstrap, TIERED, args.partitions, args.records - 1, timeout=args.tier_timeout)
        print(f"{TIERED} tiered in {tiered_s:.0f} s", flush=True)
        proxy.stop()
        proxy = None
        expected = args.partitions * args.records
        local: list[float] = []
        sources = {"proxy": None, **({"baseline": Path(args.baseline)} if args.baseline else {})}
        remote: dict[str, list[float]] = {name: [] for name in sources}
        rounds: dict[str, list[float]] = {name: [] for name in sources}
        for run_no in range(1, args.runs + 1):
            local.append(read_all(broker.bootstrap, LOCAL, args.partitions, expected))
            figures = [f"local {local[-1]:.1f} s"]
            for name, source in sources.items():
                proxy = start_proxy(broker.bootstrap, work / "reader", *data,
                                    "--set", "remote.log.manager.task.interval.ms=60000",
                                    "--set", "proxy.fetch.routing.policy=remote-preferred", timeout=120,
                                    cpus=where.proxy, source=source)
                rounds[name].append(first_round_s(proxy))
                remote[name].append(read_all(proxy.bootstrap, TIERED, args.partitions, expected))
                proxy.stop()
                proxy = None
                figures.append(f"{name} {remote[name][-1]:.1f} s (first round {rounds[name][-1]:.1f} s)")
            print(f"  run {run_no}: " + ", ".join(figures), flush=True)
    finally:
        if proxy is not None:
            proxy.stop()
        broker.stop()
    print(f"\n{args.partitions} partitions x {args.records} records of {RECORD_BYTES} B, one confluent-kafka consumer "
          f"assigned every partition from offset 0; {args.runs} runs, seconds, medians [min-max]; CPUs: "
          f"{where.describe()}\n")
    print("| read | seconds | speed vs local | the proxy's first tiering round, s |")
    print("|---|---|---|---|")
    print(f"| broker's local log, directly | {cell(local, '.1f')} | 1.00x | |")
    for name, seconds in remote.items():
        print(f"| remote tier, through a fresh {'proxy' if name == 'proxy' else 'baseline proxy'} | "
              f"{cell(seconds, '.1f')} | {statistics.median(local) / statistics.median(seconds):.2f}x | "
              f"{cell(rounds[name], '.1f')} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--partitions", type=int, default=5000, help="partitions per topic (default 5000)")
    parser.add_argument("--records", type=int, default=20, help="records of 1 KiB per partition (default 20)")
    parser.add_argument("--runs", type=int, default=3, help="reads of each topic (default 3)")
    parser.add_argument("--tier-timeout", type=float, default=1200, help="seconds to wait for the tiering (default 1200)")
    parser.add_argument("--shared", action="store_true", help="let every process run on any CPU, instead of the "
                        "proxy on CPUs of its own and the broker and the consumer on the others")
    parser.add_argument("--baseline", metavar="DIR", help="also read through the proxy of this checkout")
    parser.add_argument("--keep-work-dir", action="store_true", help="keep the broker's and proxies' folders")
    args = parser.parse_args()
    run_in_work_dir("bench-wide-read-", args.keep_work_dir, lambda work: run(args, work))


if __name__ == "__main__":
    main()
