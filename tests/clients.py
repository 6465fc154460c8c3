"""The same few operations done with each real client library, so tests can parametrize over them.

Each function takes a bootstrap address (the proxy's, in proxy tests) and uses only that.
Loops are bounded by a deadline so a broken path fails the test instead of hanging it.
"""

from __future__ import annotations

import asyncio
import threading
import time
import uuid
from collections import defaultdict
from collections.abc import Coroutine
from dataclasses import dataclass
from typing import Any, TypeVar

CLIENTS = ["kafka-python", "aiokafka", "confluent"]
COMPRESSIONS = ["none", "gzip", "snappy", "lz4", "zstd"]


@dataclass(frozen=True)
class Rec:
    partition: int
    key: bytes | None
    value: bytes
    headers: tuple[tuple[str, bytes], ...] = ()


Consumed = dict[int, list[tuple[int, bytes | None, bytes]]]  # partition -> [(offset, key, value)]


# -- produce --------------------------------------------------------------------------------------


def produce(client: str, bootstrap: str, topic: str, records: list[Rec], compression: str = "none",
            acks: int | str = "all") -> None:
    if client == "kafka-python":
        from kafka import KafkaProducer

        producer = KafkaProducer(bootstrap_servers=bootstrap, acks=acks if acks != "all" else "all",
                                 compression_type=None if compression == "none" else compression,
                                 linger_ms=5, batch_size=256 * 1024)
        for r in records:
            producer.send(topic, value=r.value, key=r.key, partition=r.partition, headers=list(r.headers))
        producer.flush(120)
        producer.close()
    elif client == "aiokafka":
        asyncio.run(_aio_produce(bootstrap, topic, records, compression, acks))
    elif client == "confluent":
        from confluent_kafka import Producer

        errors: list[str] = []
        producer = Producer({"bootstrap.servers": bootstrap, "compression.type": compression, "linger.ms": 5,
                             "acks": str(acks), "enable.idempotence": False,
                             "queue.buffering.max.messages": 1_000_000})

        def report(err: object, _msg: object) -> None:
            if err is not None:
                errors.append(str(err))

        for r in records:
            while True:
                try:
                    producer.produce(topic, r.value, key=r.key, partition=r.partition,
                                     headers=list(r.headers) or None, on_delivery=report)
                    break
                except BufferError:
                    producer.poll(0.05)
        left = producer.flush(120)
        assert left == 0 and not errors, f"confluent producer: {left} undelivered, errors {errors[:3]}"
    else:
        raise ValueError(client)


async def _aio_produce(bootstrap: str, topic: str, records: list[Rec], compression: str, acks: int | str) -> None:
    from aiokafka import AIOKafkaProducer

    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks=acks,
                                compression_type=None if compression == "none" else compression,
                                linger_ms=5, max_batch_size=256 * 1024)
    await producer.start()
    try:
        futures = [await producer.send(topic, r.value, key=r.key, partition=r.partition,
                                       headers=list(r.headers) or None) for r in records]
        await asyncio.wait_for(asyncio.gather(*futures), 120)
    finally:
        await producer.stop()


# -- consume by assignment --------------------------------------------------------------------------


def consume_all(client: str, bootstrap: str, topic: str, partitions: int, expected: int,
                timeout: float = 120) -> Consumed:
    """Read ``expected`` records from offset 0 of every partition, by assignment (no group)."""
    if client == "kafka-python":
        from kafka import KafkaConsumer, TopicPartition

        consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, group_id=None,
                                 auto_offset_reset="earliest")
        tps = [TopicPartition(topic, p) for p in range(partitions)]
        consumer.assign(tps)
        consumer.seek_to_beginning(*tps)
        out: Consumed = defaultdict(list)
        got = 0
        deadline = time.monotonic() + timeout
        while got < expected and time.monotonic() < deadline:
            for tp, msgs in consumer.poll(timeout_ms=500, max_records=10_000).items():
                for m in msgs:
                    out[tp.partition].append((m.offset, m.key, m.value))
                    got += 1
        consumer.close()
        return dict(out)
    if client == "aiokafka":
        return asyncio.run(_aio_consume(bootstrap, topic, partitions, expected, timeout))
    if client == "confluent":
        from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

        consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"unused-{uuid.uuid4().hex[:8]}",
                             "enable.auto.commit": False})
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
        out = defaultdict(list)
        got = 0
        deadline = time.monotonic() + timeout
        while got < expected and time.monotonic() < deadline:
            for m in consumer.consume(10_000, 0.5):
                if m.error() is not None:
                    raise AssertionError(f"confluent consumer error: {m.error()}")
                out[m.partition()].append((m.offset(), m.key(), m.value()))
                got += 1
        consumer.close()
        return dict(out)
    raise ValueError(client)


async def _aio_consume(bootstrap: str, topic: str, partitions: int, expected: int, timeout: float) -> Consumed:
    from aiokafka import AIOKafkaConsumer, TopicPartition

    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False,
                                auto_offset_reset="earliest")
    await consumer.start()
    out: Consumed = defaultdict(list)
    try:
        tps = [TopicPartition(topic, p) for p in range(partitions)]
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        got = 0
        deadline = time.monotonic() + timeout
        while got < expected and time.monotonic() < deadline:
            batch = await consumer.getmany(timeout_ms=500, max_records=10_000)
            for tp, msgs in batch.items():
                for m in msgs:
                    out[tp.partition].append((m.offset, m.key, m.value))
                    got += 1
    finally:
        await consumer.stop()
    return dict(out)


# -- consume every field ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Record:
    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes], ...]


def _headers(raw: object) -> tuple[tuple[str, bytes], ...]:
    return tuple((k, bytes(v) if v is not None else b"") for k, v in (raw or ()))  # type: ignore[attr-defined]


def consume_records(client: str, bootstrap: str, topic: str, partitions: int, expected: int, *,
                    isolation: str = "read_committed", timeout: float = 180) -> dict[int, list[Record]]:
    """Every field of ``expected`` records from offset 0 of every partition, by assignment."""
    out: dict[int, list[Record]] = defaultdict(list)
    deadline = time.monotonic() + timeout
    got = 0
    if client == "kafka-python":
        from kafka import KafkaConsumer, TopicPartition

        consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, group_id=None,
                                 auto_offset_reset="earliest", isolation_level=isolation)
        tps = [TopicPartition(topic, p) for p in range(partitions)]
        consumer.assign(tps)
        consumer.seek_to_beginning(*tps)
        try:
            while got < expected and time.monotonic() < deadline:
                for tp, msgs in consumer.poll(timeout_ms=500, max_records=10_000).items():
                    for m in msgs:
                        out[tp.partition].append(Record(m.offset, m.timestamp, m.key, m.value, _headers(m.headers)))
                        got += 1
        finally:
            consumer.close()
    elif client == "aiokafka":
        out.update(asyncio.run(_aio_consume_records(bootstrap, topic, partitions, expected, isolation, deadline)))
    elif client == "confluent":
        from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

        consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"unused-{uuid.uuid4().hex[:8]}",
                             "enable.auto.commit": False, "isolation.level": isolation})
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
        try:
            while got < expected and time.monotonic() < deadline:
                for m in consumer.consume(10_000, 0.5):
                    if m.error() is not None:
                        raise AssertionError(f"confluent consumer error: {m.error()}")
                    out[m.partition()].append(Record(m.offset(), m.timestamp()[1], m.key(), m.value(),
                                                     _headers(m.headers())))
                    got += 1
        finally:
            consumer.close()
    else:
        raise ValueError(client)
    return dict(out)


async def _aio_consume_records(bootstrap: str, topic: str, partitions: int, expected: int, isolation: str,
                               deadline: float) -> dict[int, list[Record]]:
    from aiokafka import AIOKafkaConsumer, TopicPartition

    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False,
                                auto_offset_reset="earliest", isolation_level=isolation)
    await consumer.start()
    out: dict[int, list[Record]] = defaultdict(list)
    try:
        tps = [TopicPartition(topic, p) for p in range(partitions)]
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        got = 0
        while got < expected and time.monotonic() < deadline:
            batch = await consumer.getmany(timeout_ms=500, max_records=10_000)
            for tp, msgs in batch.items():
                for m in msgs:
                    out[tp.partition].append(Record(m.offset, m.timestamp, m.key, m.value, _headers(m.headers)))
                    got += 1
    finally:
        await consumer.stop()
    return dict(out)


def offsets_read(client: str, bootstrap: str, topic: str, partitions: int, expected: int,
                 results: dict[str, object]) -> None:
    """For a thread: the offsets ``client`` reads from offset 0 of every partition
    (read_uncommitted), or the exception it raised, into ``results[client]``."""
    try:
        got = consume_records(client, bootstrap, topic, partitions, expected, isolation="read_uncommitted",
                              timeout=120)
        results[client] = {p: [r.offset for r in records] for p, records in got.items()}
    except Exception as e:  # noqa: BLE001 - the test reports it
        results[client] = e


def every_client_reads_at_once(bootstrap: str, topic: str, partitions: int, expected: int) -> None:
    """Every client library reads the topic from offset 0 at the same time (one thread each) and
    gets every offset once, in order."""
    results: dict[str, object] = {}
    threads = [threading.Thread(target=offsets_read, args=(c, bootstrap, topic, partitions, expected, results))
               for c in CLIENTS]
    for t in threads:
        t.start()
    for t in threads:
        t.join(150)
    for client in CLIENTS:
        check_every_offset(results.get(client), partitions, expected // partitions)


def check_every_offset(offsets: object, partitions: int, per_partition: int) -> None:
    """``offsets_read`` got every offset 0..per_partition-1 of every partition, once, in order."""
    assert isinstance(offsets, dict), offsets
    for p in range(partitions):
        assert offsets.get(p) == list(range(per_partition)), p


def read_to_end(bootstrap: str, topic: str, partitions: int, *, isolation: str = "read_committed",
                timeout: float = 120) -> dict[int, list[Record]]:
    """Every record of every partition up to its end (last stable offset for read_committed),
    with confluent-kafka, which reports the end of each partition."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"unused-{uuid.uuid4().hex[:8]}",
                         "enable.auto.commit": False, "isolation.level": isolation, "enable.partition.eof": True})
    consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
    out: dict[int, list[Record]] = {p: [] for p in range(partitions)}
    at_end: set[int] = set()
    deadline = time.monotonic() + timeout
    try:
        while len(at_end) < partitions and time.monotonic() < deadline:
            for m in consumer.consume(10_000, 0.5):
                if m.error() is not None:
                    if m.error().code() == KafkaError._PARTITION_EOF:
                        at_end.add(m.partition())
                        continue
                    raise AssertionError(f"confluent consumer error: {m.error()}")
                at_end.discard(m.partition())
                out[m.partition()].append(Record(m.offset(), m.timestamp()[1], m.key(), m.value(),
                                                 _headers(m.headers())))
    finally:
        consumer.close()
    assert len(at_end) == partitions, f"only partitions {sorted(at_end)} reached their end in {timeout}s"
    return out


# -- consumer groups ------------------------------------------------------------------------------


T = TypeVar("T")
_loop: asyncio.AbstractEventLoop | None = None


def _background_loop() -> asyncio.AbstractEventLoop:
    global _loop
    if _loop is None:
        _loop = asyncio.new_event_loop()
        threading.Thread(target=_loop.run_forever, daemon=True, name="aiokafka-loop").start()
    return _loop


class GroupMember:
    """One member of a consumer group, driven step by step from the test thread.

    Every member uses a short max poll interval: it is also the group's rebalance timeout, which
    bounds how long a broker that misses a LeaveGroup keeps a new member waiting to join.
    """

    def __init__(self, client: str, bootstrap: str, topic: str, group: str) -> None:
        self.client = client
        self.seen: list[tuple[int, int, bytes]] = []  # (partition, offset, value)
        if client == "kafka-python":
            from kafka import KafkaConsumer

            self._c = KafkaConsumer(topic, bootstrap_servers=bootstrap, group_id=group,
                                    auto_offset_reset="earliest", enable_auto_commit=False,
                                    session_timeout_ms=6000, heartbeat_interval_ms=1000,
                                    max_poll_interval_ms=10_000)
        elif client == "confluent":
            from confluent_kafka import Consumer

            self._c = Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                                "auto.offset.reset": "earliest", "enable.auto.commit": False,
                                "session.timeout.ms": 6000, "heartbeat.interval.ms": 1000,
                                "max.poll.interval.ms": 10_000})
            self._c.subscribe([topic])
        elif client == "aiokafka":
            # aiokafka heartbeats from tasks on its event loop, so the loop must keep running
            # between polls: every aiokafka member shares one loop in a background thread.
            self._run(self._aio_start(bootstrap, topic, group))
        else:
            raise ValueError(client)

    async def _aio_start(self, bootstrap: str, topic: str, group: str) -> None:
        from aiokafka import AIOKafkaConsumer

        self._c = AIOKafkaConsumer(topic, bootstrap_servers=bootstrap, group_id=group,
                                   auto_offset_reset="earliest", enable_auto_commit=False,
                                   session_timeout_ms=6000, heartbeat_interval_ms=1000,
                                   max_poll_interval_ms=10_000)
        await self._c.start()

    @staticmethod
    def _run(coro: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coro, _background_loop()).result(120)

    def poll(self, timeout: float = 0.5) -> int:
        n = 0
        if self.client == "kafka-python":
            for tp, msgs in self._c.poll(timeout_ms=int(timeout * 1000)).items():
                for m in msgs:
                    self.seen.append((tp.partition, m.offset, m.value))
                    n += 1
        elif self.client == "confluent":
            for m in self._c.consume(10_000, timeout):
                if m.error() is None:
                    self.seen.append((m.partition(), m.offset(), m.value()))
                    n += 1
        else:
            batch = self._run(self._c.getmany(timeout_ms=int(timeout * 1000)))
            for tp, msgs in batch.items():
                for m in msgs:
                    self.seen.append((tp.partition, m.offset, m.value))
                    n += 1
        return n

    def assignment(self) -> set[int]:
        return {tp.partition for tp in self._c.assignment()}

    def commit(self) -> None:
        if self.client == "kafka-python":
            self._c.commit()
        elif self.client == "confluent":
            self._c.commit(asynchronous=False)
        else:
            self._run(self._c.commit())

    def close(self) -> None:
        if self.client == "aiokafka":
            self._run(self._c.stop())
        else:
            self._c.close()


# -- admin ----------------------------------------------------------------------------------------


def admin_round_trip(client: str, bootstrap: str, topic: str, partitions: int) -> dict[str, object]:
    """Create, describe and delete a topic; returns what describe said."""
    if client == "aiokafka":
        return asyncio.run(_aio_admin(bootstrap, topic, partitions))
    if client == "kafka-python":
        from kafka import KafkaAdminClient
        from kafka.admin import NewTopic

        admin = KafkaAdminClient(bootstrap_servers=bootstrap)
        try:
            admin.create_topics([NewTopic(topic, partitions, 1)])
            # A KRaft broker learns of a new topic from the controller a moment after
            # CreateTopics answers; until then describe says UNKNOWN_TOPIC_OR_PARTITION.
            deadline = time.monotonic() + 30
            described = admin.describe_topics([topic])[0]
            while described.get("error_code") and time.monotonic() < deadline:
                time.sleep(0.2)
                described = admin.describe_topics([topic])[0]
            assert topic in admin.list_topics()
            admin.delete_topics([topic])
            return {"partitions": len(described["partitions"]), "name": described["name"]}
        finally:
            admin.close()
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    for f in admin.create_topics([NewTopic(topic, partitions, 1)]).values():
        f.result(30)
    deadline = time.monotonic() + 30
    md = admin.list_topics(topic, timeout=10)
    while (topic not in md.topics or md.topics[topic].error is not None) and time.monotonic() < deadline:
        time.sleep(0.2)
        md = admin.list_topics(topic, timeout=10)
    described = {"partitions": len(md.topics[topic].partitions), "name": topic}
    for f in admin.delete_topics([topic]).values():
        f.result(30)
    return described


async def _aio_admin(bootstrap: str, topic: str, partitions: int) -> dict[str, object]:
    from aiokafka.admin import AIOKafkaAdminClient, NewTopic

    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(topic, partitions, 1)])
        # As for kafka-python: the broker may not know the topic yet when CreateTopics answers.
        deadline = time.monotonic() + 30
        described = (await admin.describe_topics([topic]))[0]
        while described.get("error_code") and time.monotonic() < deadline:
            await asyncio.sleep(0.2)
            described = (await admin.describe_topics([topic]))[0]
        assert topic in await admin.list_topics()
        await admin.delete_topics([topic])
        return {"partitions": len(described["partitions"]), "name": described["topic"]}
    finally:
        await admin.close()
