"""A soak under faults: produce, tail consume and backfill through two proxies while faults hit
at random times, then check that nothing was lost or duplicated anywhere.

    python -m tests.load.soak [--minutes 20] [--seed N] [--rate 400]

One noida-db (it moves its log start, so backfills read the remote tier), SeaweedFS S3 behind a relay
that can slow every request, and two ``tiered-proxy serve`` sharing the topic-based metadata
store: ``copier`` copies every partition (``proxy.copier.ownership=all``), ``server`` only serves
(``none``; noida-db's groups cannot hold two kafka-python members, tests/UPSTREAMS.md). An
idempotent producer writes numbered records through ``server``; a tail consumer group reads
through ``copier``; a backfiller reads each partition from offset 0 through either, over and
over. Faults, one at a time: kill -9 of a proxy (restarted on its ports), a broker restart, an S3
outage (the S3 gateway stopped, then started on its port; the objects stay in SeaweedFS), an S3 slowdown (a second per
request). At the end, with every fault healed: every acknowledged record is read exactly once
from offset 0 through each proxy; every partition's remote segments are finished, contiguous and
stored whole; and a table says what happened. ``tests/integration/test_soak.py`` runs a short one.
"""

from __future__ import annotations

import argparse
import os
import random
import signal
import subprocess
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from proxy.embedded_broker import start_broker
from tests.integration.faulty_http import FaultyRelay
from tests.integration.s3_server import DUMMY_CREDENTIALS, REGION, SeaweedFS, new_bucket
from tests.proxy_process import ProxyProcess, free_port, start_proxy
from tests.tiering_checks import create_tiered_topic, partitions_of, wait_until
from tiering.broker_client import BrokerClient, BrokerClientError
from tiering.metadata.topic_store import TopicMetadataStore
from tiering.model import RemoteLogSegmentState, TopicIdPartition
from tiering.storage.uri import storage_from_uri

TOPIC = "soak"
PARTITIONS = 3
METADATA_PARTITIONS = 3
FAULTS = ("kill -9 copier", "kill -9 server", "broker restart", "S3 outage", "S3 slowdown")


@dataclass
class Result:
    minutes: float
    faults: Counter[str] = field(default_factory=Counter)
    produced: int = 0  # acknowledged
    produce_failures: int = 0
    producer_fatal: list[str] = field(default_factory=list)  # librdkafka's fatal errors (a new producer follows)
    log_duplicates: int = 0  # records the producers wrote twice (retries after faults), seen in the brokers' log
    # Acknowledged records the broker itself no longer had right after a restart (read directly):
    # noida-db loses the writes it acknowledged just before a SIGTERM (tests/UPSTREAMS.md). Not the
    # proxies' to serve; they are left out of the gaps.
    broker_lost: set[tuple[int, int]] = field(default_factory=set)  # (partition, offset)
    tail_read: int = 0
    backfill_passes: int = 0
    backfill_errors: int = 0
    read_back: dict[str, int] = field(default_factory=dict)  # proxy -> records read from offset 0 at the end
    duplicates: dict[str, int] = field(default_factory=dict)
    gaps: dict[str, int] = field(default_factory=dict)
    unacknowledged_extras: dict[str, int] = field(default_factory=dict)  # written although the producer gave up
    max_copy_lag: int = 0  # offsets below the last stable offset not yet tiered, largest sample
    peak_rss_mb: dict[str, float] = field(default_factory=dict)
    remote_segments: int = 0
    problems: list[str] = field(default_factory=list)

    def table(self) -> str:
        rows = [("faults injected", ", ".join(f"{k} x{v}" for k, v in sorted(self.faults.items())) or "none"),
                ("minutes", f"{self.minutes:.1f}"),
                ("records produced (acknowledged)", str(self.produced)),
                ("produce deliveries failed", str(self.produce_failures)),
                ("producer fatal errors", "; ".join(self.producer_fatal) or "none"),
                ("records written twice by producer retries", str(self.log_duplicates)),
                ("acknowledged records the broker lost in its restarts (read directly)", str(len(self.broker_lost))),
                ("tail records read", str(self.tail_read)),
                ("backfill passes (errors)", f"{self.backfill_passes} ({self.backfill_errors})")]
        for name in sorted(self.read_back):
            rows.append((f"read from 0 via {name}: records / duplicates / gaps / unacknowledged",
                         f"{self.read_back[name]} / {self.duplicates[name]} / {self.gaps[name]} / "
                         f"{self.unacknowledged_extras[name]}"))
        rows += [("max copy lag (offsets)", str(self.max_copy_lag)),
                 ("remote segments at the end", str(self.remote_segments)),
                 ("peak RSS (MB)", ", ".join(f"{k} {v:.0f}" for k, v in sorted(self.peak_rss_mb.items()))),
                 ("problems", "; ".join(self.problems) or "none")]
        width = max(len(k) for k, _ in rows)
        return "\n".join(f"| {k.ljust(width)} | {v} |" for k, v in rows)


class _Proxy:
    """One ``serve`` process that can be killed and started again on the same ports."""

    def __init__(self, name: str, proxy: ProxyProcess) -> None:
        self.name, self.proxy, self.peak_kb = name, proxy, 0

    def sample_rss(self) -> None:
        try:
            for line in Path(f"/proc/{self.proxy.process.pid}/status").read_text().splitlines():
                if line.startswith("VmHWM:"):
                    self.peak_kb = max(self.peak_kb, int(line.split()[1]))
        except OSError:
            pass

    def kill_and_restart(self, pause: float) -> None:
        self.sample_rss()
        self.proxy.stop(signal.SIGKILL)
        time.sleep(pause)
        started = self.proxy.log_path.read_bytes().count(b"proxy listening on")
        log = open(self.proxy.log_path, "ab")  # noqa: SIM115 - the child keeps writing to it
        process = subprocess.Popen(self.proxy.process.args, stdout=log, stderr=subprocess.STDOUT,
                                   start_new_session=True, env={**os.environ, "PYTHONUNBUFFERED": "1"})
        log.close()
        self.proxy = ProxyProcess(self.proxy.port, self.proxy.node_ports, process, self.proxy.log_path)
        if not wait_until(lambda: self.proxy.log_path.read_bytes().count(b"proxy listening on") > started, 60):
            raise RuntimeError(f"{self.name} did not restart: {self.proxy.log_text()[-2000:]}")


def _producer(bootstrap: str, rate: int, stop: threading.Event, acked: dict[int, list[tuple[int, int]]],
              result: Result) -> None:
    from confluent_kafka import KafkaException, Producer

    def new_producer() -> Producer:
        return Producer({"bootstrap.servers": bootstrap, "enable.idempotence": False, "acks": "all",
                         "linger.ms": 5, "batch.size": 16384, "message.timeout.ms": 600_000,
                         "compression.type": "lz4"})

    def delivered(err: object, msg: object) -> None:
        if err is not None:
            result.produce_failures += 1
            return
        acked[msg.partition()].append(  # type: ignore[attr-defined]
            (msg.offset(), int(msg.value().split(b"-", 1)[0])))  # type: ignore[attr-defined]

    producer = new_producer()
    number = 0
    while not stop.is_set():
        started = time.monotonic()
        try:
            for _ in range(rate // 10):
                try:
                    producer.produce(TOPIC, value=f"{number}-".encode() + random.randbytes(200),
                                     partition=number % PARTITIONS, on_delivery=delivered)
                except BufferError:  # the queue is full while a fault lasts: wait, as applications do
                    producer.poll(0.5)
                    continue
                number += 1
            producer.poll(0)
        except KafkaException as exc:
            if not exc.args[0].fatal():
                raise
            # An idempotent producer that hits a fatal error is done: what it had not delivered
            # fails (counted), a new one goes on, as an application would.
            result.producer_fatal.append(producer.fatal_error().str() if producer.fatal_error() else str(exc))
            producer.flush(5)
            producer = new_producer()
        stop.wait(max(0.0, 0.1 - (time.monotonic() - started)))
    producer.flush(600)


def _tail(bootstrap: str, stop: threading.Event, result: Result) -> None:
    from confluent_kafka import Consumer

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "soak-tail", "auto.offset.reset": "latest",
                         "session.timeout.ms": 6000})
    consumer.subscribe([TOPIC])
    try:
        while not stop.is_set():
            message = consumer.poll(0.5)
            if message is not None and message.error() is None:
                result.tail_read += 1
    finally:
        consumer.close()


def _read_all(bootstrap: str, ends: dict[int, int], deadline_s: float) -> dict[int, list[tuple[int, int]]]:
    """Every partition from offset 0 to ``ends`` by assignment: (offset, record number) pairs."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"soak-read-{random.random()}",
                         "enable.auto.commit": False, "fetch.queue.backoff.ms": 0})
    consumer.assign([TopicPartition(TOPIC, p, 0) for p in range(PARTITIONS)])
    got: dict[int, list[tuple[int, int]]] = {p: [] for p in range(PARTITIONS)}
    done = {p for p, end in ends.items() if end == 0}
    deadline = time.monotonic() + deadline_s
    try:
        while len(done) < PARTITIONS and time.monotonic() < deadline:
            for message in consumer.consume(1000, 0.5):
                if message.error() is not None:
                    continue
                p = message.partition()
                got[p].append((message.offset(), int(message.value().split(b"-", 1)[0])))
                if message.offset() + 1 >= ends[p]:
                    done.add(p)
    finally:
        consumer.close()
    if len(done) < PARTITIONS:
        raise TimeoutError(f"read from 0 via {bootstrap} did not reach {ends} in {deadline_s:.0f}s")
    return got


def _backfill(proxies: list[_Proxy], client: BrokerClient, stop: threading.Event, result: Result) -> None:
    turn = 0
    while not stop.is_set():
        proxy = proxies[turn % len(proxies)]
        turn += 1
        try:
            ends = {p: client.list_offset(1, TOPIC, p, -1)[1] for p in range(PARTITIONS)}
            _read_all(proxy.proxy.bootstrap, ends, 120)
            result.backfill_passes += 1
        except Exception:  # a fault mid-pass; the final check is what counts
            result.backfill_errors += 1
            stop.wait(1)


def run(minutes: float, work: Path, seed: int = 1, rate: int = 400, fault_every_s: tuple[float, float] = (20, 40),
        fault_seconds: tuple[float, float] = (10, 20), report: bool = True, faults: tuple[str, ...] = FAULTS,
        produce_direct: bool = False) -> Result:
    """``fault_every_s``: the pause between faults; ``fault_seconds``: how long an S3 outage or
    slowdown lasts. Fault kinds come in rounds, each kind once per round in a seeded order."""
    rng = random.Random(seed)
    order: list[str] = []
    result = Result(minutes)
    broker_port = free_port()
    broker = start_broker("noida", work / "broker", port=broker_port)
    seaweedfs = SeaweedFS(work / "seaweedfs").start()
    s3 = seaweedfs.gateway()
    relay = FaultyRelay(s3.endpoint)
    bucket = new_bucket(s3.endpoint)
    storage_uri = f"s3://{bucket}/soak?endpoint_url={relay.endpoint}&region={REGION}"
    common = ("--metadata", "topic://soak-rlmm", "--remote", storage_uri,
              "--set", f"remote.log.storage.s3.access.key.id={DUMMY_CREDENTIALS['aws_access_key_id']}",
              "--set", f"remote.log.storage.s3.secret.access.key={DUMMY_CREDENTIALS['aws_secret_access_key']}",
              "--set", f"remote.log.metadata.topic.num.partitions={METADATA_PARTITIONS}",
              "--set", "remote.log.manager.task.interval.ms=500", "--set", "proxy.copier.backoff.max.ms=2000",
              "--set", "remote.log.storage.s3.max.attempts=2")
    create_tiered_topic(broker.bootstrap, TOPIC, PARTITIONS, **{"segment.bytes": str(256 * 1024),
                                                               "local.retention.bytes": str(512 * 1024)})
    proxies = [_Proxy(name, start_proxy(broker.bootstrap, work / name, "--data-dir", str(work / f"{name}-data"),
                                        *common, "--set", f"proxy.copier.ownership={ownership}", node_ids=[1]))
               for name, ownership in (("copier", "all"), ("server", "none"))]
    copier, server = proxies
    stop_clients, stop_faults = threading.Event(), threading.Event()
    acked: dict[int, list[tuple[int, int]]] = {p: [] for p in range(PARTITIONS)}  # (offset, number), in ack order
    client = BrokerClient(broker.bootstrap)
    store = None
    produce_to = broker.bootstrap if produce_direct else server.proxy.bootstrap
    threads = [threading.Thread(target=_producer, args=(produce_to, rate, stop_clients, acked, result)),
               threading.Thread(target=_tail, args=(copier.proxy.bootstrap, stop_clients, result), daemon=True),
               threading.Thread(target=_backfill, args=(proxies, BrokerClient(broker.bootstrap), stop_clients, result),
                                daemon=True)]
    try:
        for t in threads:
            t.start()
        store = TopicMetadataStore(broker.bootstrap, work / "check", topic="soak-rlmm", partitions=METADATA_PARTITIONS)
        tps = partitions_of(client, TOPIC)
        end_at = time.monotonic() + minutes * 60
        next_fault = time.monotonic() + rng.uniform(*fault_every_s)
        while time.monotonic() < end_at:
            for proxy in proxies:
                proxy.sample_rss()
            result.max_copy_lag = max(result.max_copy_lag, _copy_lag(client, store, tps))
            if time.monotonic() >= next_fault:
                if not order:
                    order = rng.sample(faults, len(faults))
                fault = order.pop()
                result.faults[fault] += 1
                if report:
                    print(f"[{time.strftime('%H:%M:%S')}] fault: {fault}", flush=True)
                if fault.startswith("kill -9"):
                    (copier if fault.endswith("copier") else server).kill_and_restart(rng.uniform(1, 5))
                elif fault == "broker restart":
                    broker.stop()
                    time.sleep(rng.uniform(1, 4))  # the producer takes in the last acknowledgements
                    recent = {p: list(acked[p][-3000:]) for p in range(PARTITIONS)}
                    broker = start_broker("noida", work / "broker", port=broker_port)
                    result.broker_lost |= _lost_by_broker(broker.bootstrap, recent)
                elif fault == "S3 outage":
                    s3.stop()
                    time.sleep(rng.uniform(*fault_seconds))
                    s3.start()
                else:
                    relay.mode, relay.delay_s = "slow", 1.0
                    time.sleep(rng.uniform(*fault_seconds))
                    relay.mode = "pass"
                next_fault = time.monotonic() + rng.uniform(*fault_every_s)
            time.sleep(1)
        stop_faults.set()
        stop_clients.set()
        threads[0].join(660)
        result.produced = sum(len(v) for v in acked.values())
        # Healed: wait for the copier to tier everything below the last stable offset.
        wait_until(lambda: _copy_lag(client, store, tps) == 0, 300)
        ends = {p: client.list_offset(1, TOPIC, p, -1)[1] for p in range(PARTITIONS)}
        for proxy in proxies:
            got = _read_all(proxy.proxy.bootstrap, ends, 600)
            _account(proxy.name, got, ends, acked, result)
            proxy.sample_rss()
            result.peak_rss_mb[proxy.name] = proxy.peak_kb / 1024
        _check_remote(store, tps, storage_uri, result)
    finally:
        stop_faults.set()
        stop_clients.set()
        for proxy in proxies:
            proxy.proxy.stop()
        if store is not None:
            store.close()
        relay.close()
        seaweedfs.close()
        broker.stop()
    if report:
        print(result.table(), flush=True)
    return result


def _lost_by_broker(bootstrap: str, recent: dict[int, list[tuple[int, int]]]) -> set[tuple[int, int]]:
    """The recently acknowledged (partition, offset)s a restarted broker does not hold as
    acknowledged, read from it directly."""
    from confluent_kafka import Consumer, TopicPartition

    lost: set[tuple[int, int]] = set()
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"soak-direct-{random.random()}",
                         "enable.auto.commit": False})
    try:
        for p, entries in recent.items():
            if not entries:
                continue
            low, high = consumer.get_watermark_offsets(TopicPartition(TOPIC, p), timeout=10)
            entries = [(o, n) for o, n in entries if o >= low]  # below: local retention already took them
            if not entries:
                continue
            first, last = min(o for o, _ in entries), max(o for o, _ in entries)
            stop_at = min(last, high - 1)  # the broker's log may end before the last acknowledged offset
            consumer.assign([TopicPartition(TOPIC, p, first)])
            held: dict[int, int] = {}
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline and (not held or max(held) < stop_at):
                for message in consumer.consume(1000, 0.5):
                    if message.error() is None:
                        held[message.offset()] = int(message.value().split(b"-", 1)[0])
            if held and max(held) < stop_at:
                raise TimeoutError(f"could not read {TOPIC}-{p} {first}..{stop_at} from the broker directly")
            lost |= {(p, offset) for offset, number in entries if held.get(offset) != number}
    finally:
        consumer.close()
    return lost


def _copy_lag(client: BrokerClient, store: TopicMetadataStore, tps: list[TopicIdPartition]) -> int:
    """Offsets below the brokers' last stable offset that the remote tier does not hold yet."""
    lag = 0
    for tp in tps:
        try:
            stable = client.fetch(1, TOPIC, tp.partition, 0, max_bytes=1).last_stable_offset
        except (BrokerClientError, OSError):
            return 0  # the broker is restarting: no sample
        copied = store.copied_segments(tp)
        lag += max(0, stable - (copied[-1].end_offset + 1 if copied else 0))
    return lag


def _account(name: str, got: dict[int, list[tuple[int, int]]], ends: dict[int, int],
             acked: dict[int, list[tuple[int, int]]], result: Result) -> None:
    """What one proxy served from offset 0 against the brokers' log and the acknowledgements.
    Duplicates: an offset served twice. Gaps: an offset below the end not served, or an
    acknowledged record not at its offset. Unacknowledged: records served that no producer had
    acknowledged (written, but their delivery failed or timed out)."""
    read = duplicates = gaps = unacknowledged = 0
    for p in range(PARTITIONS):
        latest: dict[int, int] = {}  # offset -> the record last acknowledged there
        for offset, number in acked[p]:
            latest[offset] = number
        served: dict[int, int] = {}
        for offset, number in got[p]:
            duplicates += offset in served
            served[offset] = number
        read += len(got[p])
        missing = [offset for offset in range(ends[p]) if offset not in served]
        moved = [offset for offset, number in latest.items()
                 if served.get(offset) != number and (p, offset) not in result.broker_lost]
        gaps += len(missing) + len(moved)
        if missing or moved:
            result.problems.append(f"{name} partition {p}: offsets not served {missing[:5]}..., acknowledged "
                                   f"records not at their offset {moved[:5]}...")
        unacknowledged += sum(1 for offset in served if offset not in latest)
        numbers = Counter(served.values())
        result.log_duplicates = max(result.log_duplicates, sum(n - 1 for n in numbers.values() if n > 1))
    result.read_back[name], result.duplicates[name], result.gaps[name] = read, duplicates, gaps
    result.unacknowledged_extras[name] = unacknowledged


def _check_remote(store: TopicMetadataStore, tps: list[TopicIdPartition], storage_uri: str, result: Result) -> None:
    storage = storage_from_uri(storage_uri, **{
        "remote.log.storage.s3.access.key.id": DUMMY_CREDENTIALS["aws_access_key_id"],
        "remote.log.storage.s3.secret.access.key": DUMMY_CREDENTIALS["aws_secret_access_key"]})
    try:
        for tp in tps:
            segments = list(store.list_remote_log_segments(tp))
            unfinished = [s for s in segments if s.state != RemoteLogSegmentState.COPY_SEGMENT_FINISHED]
            if unfinished:
                result.problems.append(f"{tp.topic}-{tp.partition}: {len(unfinished)} segments not finished")
            finished = [s for s in segments if s.state == RemoteLogSegmentState.COPY_SEGMENT_FINISHED]
            result.remote_segments += len(finished)
            for before, after in zip(finished, finished[1:], strict=False):
                if after.start_offset != before.end_offset + 1:
                    result.problems.append(f"{tp.topic}-{tp.partition}: {before.end_offset} then {after.start_offset}")
            if finished and finished[0].start_offset != 0:
                result.problems.append(f"{tp.topic}-{tp.partition}: remote tier starts at {finished[0].start_offset}")
            for segment in finished:
                if len(storage.fetch_log_segment(segment, 0)) != segment.segment_size_bytes:
                    result.problems.append(f"segment {segment.segment_id.id}: stored size differs")
    finally:
        storage.close()


def main() -> None:
    import tempfile

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=20)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--rate", type=int, default=400, help="records produced per second")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="soak-"))
    print(f"soak: {args.minutes} minutes, seed {args.seed}, {args.rate} records/s, work dir {work}", flush=True)
    result = run(args.minutes, work, args.seed, args.rate)
    raise SystemExit(1 if result.problems or any(result.gaps.values()) or any(result.duplicates.values()) else 0)


if __name__ == "__main__":
    main()
