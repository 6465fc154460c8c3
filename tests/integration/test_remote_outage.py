"""The S3 server stops in the middle of a backfill: consumers of remote data retry and resume when
it returns, with nothing skipped or duplicated, while tail traffic on another partition goes on.

This is also how the wire code for "tiered storage not available" was chosen: each client must
retry it without losing or resetting its position (see docs/operating-tiering.md, "Reads from the remote tier")."""

from __future__ import annotations

import asyncio
import random
import threading
import time
import uuid
from collections.abc import Callable

import pytest

from tests.clients import CLIENTS, Rec, Record, _headers, produce, read_to_end
from tests.delivery import CheckedProducer
from tests.integration.s3_server import DUMMY_CREDENTIALS, REGION, new_bucket
from tests.proxy_process import ProxyProcess, start_proxy
from tests.tiering_checks import create_tiered_topic, wait_until
from tiering.broker_client import EARLIEST, BrokerClient

HISTORY = 60_000  # over partitions 0 and 1; partition 2 is the tail
PARTITIONS = 3


@pytest.fixture(scope="module")
def outage_setup(own_noida, tmp_path_factory, seaweedfs):
    """A tiered topic on noida-db behind a proxy whose remote tier is an S3 gateway of its own (SeaweedFS); the
    broker's log start has moved past most of partitions 0 and 1."""
    server = seaweedfs.gateway()
    work = tmp_path_factory.mktemp("outage")
    topic = f"outage-{work.name}"
    create_tiered_topic(own_noida.bootstrap, topic, PARTITIONS, **{"segment.bytes": str(64 * 1024),
                                                              "local.retention.bytes": str(128 * 1024)})

    producer = CheckedProducer({"bootstrap.servers": own_noida.bootstrap, "linger.ms": 5, "compression.type": "lz4"})
    for i in range(HISTORY):
        # Incompressible values, so the remote range is megabytes, more than a client prefetches.
        producer.produce(topic, key=f"k{i}".encode(), value=f"history-{i}-".encode() + random.randbytes(150),
                         partition=i % 2,
                         headers=[("n", str(i).encode())])
        if i % 10_000 == 0:
            producer.poll(0)
    producer.deliver_all(60)
    truth = read_to_end(own_noida.bootstrap, topic, 2)
    bucket = new_bucket(server.endpoint)
    proxy = start_proxy(
        own_noida.bootstrap, work / "proxy", "--data-dir", str(work / "data"),
        "--remote", f"s3://{bucket}/tiered?endpoint_url={server.endpoint}&region={REGION}",
        "--set", f"remote.log.storage.s3.access.key.id={DUMMY_CREDENTIALS['aws_access_key_id']}",
        "--set", f"remote.log.storage.s3.secret.access.key={DUMMY_CREDENTIALS['aws_secret_access_key']}",
        "--set", "remote.log.manager.task.interval.ms=100",
        # A chunk cache smaller than the history, so every backfill (one per client) needs S3.
        "--set", "remote.log.chunk.cache.size.bytes=2097152")
    try:
        client = BrokerClient(own_noida.bootstrap)
        leader = client.metadata([topic])[topic].partitions[0].leader
        assert wait_until(lambda: all(client.list_offset(leader, topic, p, EARLIEST)[1] > len(truth[p]) * 2 // 3
                                      for p in (0, 1)), 120)
        yield server, proxy, topic, truth
    finally:
        proxy.stop()
        server.stop()


def _slow_reader(client: str, bootstrap: str, topic: str, out: list[Record], stop: threading.Event,
                 slowly: threading.Event) -> Callable[[], None]:
    """A consumer of partitions 0 and 1 from offset 0 that reads in small steps while ``slowly``
    is set (so an outage lands in the middle of its backfill), until ``stop`` is set."""

    def run_kafka_python() -> None:
        from kafka import KafkaConsumer, TopicPartition

        consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, group_id=None,
                                 auto_offset_reset="none", max_partition_fetch_bytes=64 * 1024)
        tps = [TopicPartition(topic, p) for p in (0, 1)]
        consumer.assign(tps)
        consumer.seek_to_beginning(*tps)
        try:
            while not stop.is_set():
                for msgs in consumer.poll(timeout_ms=200, max_records=200).values():
                    out.extend(Record(m.offset, m.timestamp, m.key, m.value, _headers(m.headers)) for m in msgs)
                if slowly.is_set():
                    time.sleep(0.04)
        finally:
            consumer.close()

    async def aio() -> None:
        from aiokafka import AIOKafkaConsumer, TopicPartition

        consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False,
                                    auto_offset_reset="none", max_partition_fetch_bytes=64 * 1024)
        await consumer.start()
        try:
            tps = [TopicPartition(topic, p) for p in (0, 1)]
            consumer.assign(tps)
            await consumer.seek_to_beginning(*tps)
            while not stop.is_set():
                batch = await consumer.getmany(timeout_ms=200, max_records=200)
                for msgs in batch.values():
                    out.extend(Record(m.offset, m.timestamp, m.key, m.value, _headers(m.headers)) for m in msgs)
                await asyncio.sleep(0.04 if slowly.is_set() else 0)
        finally:
            await consumer.stop()

    def run_confluent() -> None:
        from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

        consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"unused-{uuid.uuid4().hex[:8]}",
                             "enable.auto.commit": False, "auto.offset.reset": "error",
                             "queued.max.messages.kbytes": 256, "queued.min.messages": 500,
                             "max.partition.fetch.bytes": 64 * 1024,
                             # Fetch again soon after the queue drains (default: a second later).
                             "fetch.queue.backoff.ms": 20})
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in (0, 1)])
        try:
            while not stop.is_set():
                for m in consumer.consume(200, 0.2):
                    if m.error() is not None:
                        continue  # reported and retried by librdkafka itself; position is what counts
                    out.append(Record(m.offset(), m.timestamp()[1], m.key(), m.value(), _headers(m.headers())))
                if slowly.is_set():
                    time.sleep(0.04)
        finally:
            consumer.close()

    return {"kafka-python": run_kafka_python, "aiokafka": lambda: asyncio.run(aio()),
            "confluent": run_confluent}[client]


@pytest.mark.parametrize("client", CLIENTS)
def test_backfill_resumes_after_the_remote_tier_returns(outage_setup, client):
    server, proxy, topic, truth = outage_setup
    total = sum(len(v) for v in truth.values())
    got: list[Record] = []
    stop, slowly = threading.Event(), threading.Event()
    slowly.set()
    errors: list[BaseException] = []

    def guarded() -> None:
        try:
            _slow_reader(client, proxy.bootstrap, topic, got, stop, slowly)()
        except BaseException as e:  # noqa: BLE001 - reported by the test below
            errors.append(e)

    reader = threading.Thread(target=guarded, daemon=True)
    reader.start()
    outage_started = False
    try:
        assert wait_until(lambda: len(got) >= 3000 or bool(errors), 60) and not errors, \
            f"backfill did not start: {errors}"
        not_available_before = proxy.log_text().count("TIERED_STORAGE_NOT_AVAILABLE")
        server.stop()
        outage_started = True
        # The tail goes on: produce to partition 2 and read it back through the proxy.
        tail = [Rec(2, f"t{i}".encode(), f"tail-{client}-{i}".encode()) for i in range(2000)]
        started = time.monotonic()
        tail_start = _tail_end(proxy, topic)
        produce("confluent", proxy.bootstrap, topic, tail)
        assert _read_tail(proxy, topic, tail_start) == [r.value for r in tail]
        assert wait_until(lambda: proxy.log_text().count("TIERED_STORAGE_NOT_AVAILABLE") > not_available_before, 30), \
            (len(got), total, errors)
        held = len(got)
        time.sleep(2)
        assert len(got) < total and not errors, "the backfill should be stuck while the remote tier is down"
        tail_seconds = time.monotonic() - started
        server.start()  # same port, same objects
        outage_started = False
        slowly.clear()  # the rest of the backfill at the client's own pace
        assert wait_until(lambda: len(got) >= total or bool(errors), 120), (len(got), total, held, errors)
        time.sleep(1)  # anything duplicated would arrive now
    finally:
        if outage_started:
            server.start()
        stop.set()
        reader.join(60)
    assert not errors, errors
    by_partition: dict[int, list[Record]] = {0: [], 1: []}
    for r in got:
        by_partition[int(r.headers[0][1]) % 2].append(r)
    for partition in (0, 1):
        assert by_partition[partition] == truth[partition], f"partition {partition}: skipped or duplicated records"
    assert tail_seconds < 30


def _tail_end(proxy: ProxyProcess, topic: str) -> int:
    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(bootstrap_servers=proxy.bootstrap)
    try:
        tp = TopicPartition(topic, 2)
        return consumer.end_offsets([tp])[tp]
    finally:
        consumer.close()


def _read_tail(proxy: ProxyProcess, topic: str, start: int, timeout: float = 30) -> list[bytes]:
    """2000 values of partition 2 from ``start`` (the tail, on the broker), read through the proxy."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": proxy.bootstrap, "group.id": f"unused-{uuid.uuid4().hex[:8]}",
                         "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, 2, start)])
    values: list[bytes] = []
    deadline = time.monotonic() + timeout
    try:
        while len(values) < 2000 and time.monotonic() < deadline:
            for m in consumer.consume(1000, 0.2):
                assert m.error() is None, m.error()
                values.append(m.value())
    finally:
        consumer.close()
    return values
