"""A confluent-kafka producer that fails a test on any record not delivered.

``Producer.flush()`` returns how many records are still queued, and a record the broker refused
(RECORD_LIST_TOO_LARGE for a batch above a small ``segment.bytes``, say) leaves the queue with an
error in its delivery report: ``assert producer.flush() == 0`` passed while a third of the records
were never written, and a test then waited for offsets that did not exist.
"""

from __future__ import annotations

import collections
from typing import Any

from confluent_kafka import KafkaError, Message, Producer


class CheckedProducer(Producer):
    """``Producer`` with a delivery report for every record (``on_delivery`` given to ``produce``
    replaces it for that record) and :meth:`deliver_all`."""

    def __init__(self, config: dict[str, Any]) -> None:
        self.failed: collections.Counter[str] = collections.Counter()
        super().__init__({**config, "on_delivery": self._report})

    def _report(self, err: KafkaError | None, _msg: Message) -> None:
        if err is not None:
            self.failed[err.name()] += 1

    def deliver_all(self, timeout: float) -> None:
        """Flush, and fail unless every record was delivered."""
        left = self.flush(timeout)
        assert left == 0 and not self.failed, f"{left} record(s) still queued after {timeout}s; failed: {dict(self.failed)}"

    def produce_waiting(self, topic: str, value: bytes, key: bytes | None, partition: int) -> None:
        """``produce``, waiting for room while the local queue is full."""
        while True:
            try:
                self.produce(topic, value, key=key, partition=partition)
                return
            except BufferError:
                self.poll(0.1)
