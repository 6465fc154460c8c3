"""Reading every partition of a topic from its beginning (ListOffsets EARLIEST, which the proxy
answers with the remote log start) with confluent-kafka and kafka-python, by assignment, until
the expected number of records, then one more look: anything after them would be a duplicate or
a stray. Records come back as (partition, offset, key, value)."""

from __future__ import annotations

import time
import uuid
from typing import Any

Record = tuple[int, int, bytes | None, bytes | None]


def read_confluent(bootstrap: str, topic: str, partitions: int, expected: int, timeout: float,
                   **config: Any) -> list[Record]:
    from confluent_kafka import OFFSET_BEGINNING, Consumer
    from confluent_kafka import TopicPartition as CTopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"zero-{uuid.uuid4().hex[:8]}",
                         "enable.auto.commit": False, "enable.partition.eof": False, **config})
    got: list[Record] = []

    def take(timeout_s: float) -> None:
        for msg in consumer.consume(1000, timeout_s):
            assert msg.error() is None, msg.error()
            got.append((msg.partition(), msg.offset(), msg.key(), msg.value()))

    try:
        consumer.assign([CTopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
        deadline = time.monotonic() + timeout
        while len(got) < expected and time.monotonic() < deadline:
            take(0.5)
        take(1.0)
    finally:
        consumer.close()
    return got


def read_kafka_python(bootstrap: str, topic: str, partitions: int, expected: int, timeout: float) -> list[Record]:
    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, group_id=None,
                             consumer_timeout_ms=2000)
    got: list[Record] = []
    try:
        assigned = [TopicPartition(topic, p) for p in range(partitions)]
        consumer.assign(assigned)
        consumer.seek_to_beginning(*assigned)
        deadline = time.monotonic() + timeout
        while len(got) < expected and time.monotonic() < deadline:
            for records in consumer.poll(timeout_ms=500, max_records=2000).values():
                got.extend((r.partition, r.offset, r.key, r.value) for r in records)
        for records in consumer.poll(timeout_ms=1000).values():
            got.extend((r.partition, r.offset, r.key, r.value) for r in records)
    finally:
        consumer.close()
    return got
