"""Workloads and checks shared by the tiering tests and the tiering benchmark."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from protocol.control_records import ControlType, decode_control_record
from protocol.record_batch import read_header
from protocol.record_set import iter_batches
from protocol.records import decode_records
from protocol.remote_formats.leader_epoch_checkpoint import decode_leader_epoch_checkpoint
from protocol.remote_formats.offset_index import decode_offset_index
from protocol.remote_formats.time_index import decode_time_index
from protocol.remote_formats.transaction_index import decode_transaction_index
from tiering.broker_client import BrokerClient
from tiering.metadata.manager import RemoteLogMetadataManager
from tiering.model import IndexType, RemoteLogSegmentMetadata, RemoteLogSegmentState, TopicIdPartition
from tiering.storage.api import RemoteResourceNotFoundError, RemoteStorageManager

COMPRESSIONS = ["none", "gzip", "snappy", "lz4", "zstd"]


@dataclass
class Workload:
    plain: int  # messages produced without transactions
    transactional: int  # messages in transactions
    aborted_transactions: int
    aborted_messages: int


# Kafka 4 refuses segment.bytes below 1 MiB; internal.segment.bytes is its own way to smaller
# segments, and the proxy rolls remote segments where Kafka rolls local ones (tiering/config.py).
KAFKA_MIN_SEGMENT_BYTES = 1 << 20


def create_topic(bootstrap: str, topic: str, partitions: int = 3, **configs: str) -> None:
    """Create a topic with ``configs``, a ``segment.bytes`` under Kafka 4's minimum given as
    ``internal.segment.bytes`` where the broker refuses it, and wait until Metadata has it."""
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    try:
        admin.create_topics([NewTopic(topic, partitions, 1, config=configs)])[topic].result(30)
    except KafkaException as e:
        small = int(configs.get("segment.bytes", KAFKA_MIN_SEGMENT_BYTES)) < KAFKA_MIN_SEGMENT_BYTES
        if not (small and "segment.bytes" in e.args[0].str()):
            raise
        configs = {("internal.segment.bytes" if k == "segment.bytes" else k): v for k, v in configs.items()}
        admin.create_topics([NewTopic(topic, partitions, 1, config=configs)])[topic].result(30)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if topic in BrokerClient(bootstrap).metadata([topic]):
            return
        time.sleep(0.2)
    raise AssertionError(f"topic {topic} did not appear")


def create_tiered_topic(bootstrap: str, topic: str, partitions: int = 3, **configs: str) -> None:
    """A topic with ``remote.storage.enable=true``. On Apache Kafka, ``bootstrap`` must be the
    proxy's: a broker without its own tiered storage refuses the key, which the proxy keeps."""
    create_topic(bootstrap, topic, partitions,
                 **{"remote.storage.enable": "true", "segment.bytes": str(128 * 1024), "segment.ms": "1500", **configs})


def mark_tiered(rlmm: RemoteLogMetadataManager, bootstrap: str, topic: str, **configs: str) -> None:
    """Record ``remote.storage.enable=true`` for ``topic`` in a metadata store, as the proxy does
    when an admin client sets it through the proxy: for tests that run the copier without a proxy
    in front of a broker that refuses the key itself (Apache Kafka without its own tiered storage)."""
    from tiering.config import TieringConfig
    from tiering.topic_configs import transition

    topic_id = BrokerClient(bootstrap).metadata([topic])[topic].topic_id
    values = {"remote.storage.enable": "true", **configs}
    rlmm.put_topic_tiering_state(transition(rlmm.topic_tiering_state(topic), topic, topic_id, values,
                                            TieringConfig(), int(time.time() * 1000), enable_named=True))


def produce_numbered(bootstrap: str, topic: str, start: int, count: int, partitions: int,
                     value_bytes: int = 150, client: Mapping[str, str] | None = None) -> None:
    """Messages ``start..start+count-1``: value ``v{i}-`` plus random bytes (so local retention
    by bytes acts), round-robin over ``partitions``; see :func:`message_number`. ``client``: more
    producer settings (security)."""
    import random

    from confluent_kafka import Producer

    # Batches of at most 16 KiB, so the copier's segments follow the topic's segment.bytes rather than
    # how fast the producer ran ahead (a 300 KiB batch is one 300 KiB segment, which local retention
    # by bytes then cannot split).
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "compression.type": "lz4",
                         "batch.size": 16384, **(client or {})})
    refused: list[object] = []  # flush() counts what is queued, not what the broker refused
    for i in range(start, start + count):
        producer.produce(topic, key=f"k{i}".encode(), value=f"v{i}-".encode() + random.randbytes(value_bytes),
                         partition=i % partitions,
                         on_delivery=lambda error, _message: refused.append(error) if error is not None else None)
        if i % 5000 == 0:
            producer.poll(0)
    assert producer.flush(60) == 0
    assert not refused, f"{len(refused)} records refused, e.g. {refused[0]}"


def message_number(value: bytes) -> int:
    """``i`` of a value written by :func:`produce_numbered`."""
    return int(value.split(b"-", 1)[0][1:])


def produce_mixed(bootstrap: str, topic: str, total: int, *, transactions: int = 10,
                  transaction_size: int = 1000) -> Workload:
    """``total`` messages over all partitions: most plain, spread over every compression codec,
    then ``transactions`` transactions of ``transaction_size`` messages each, every third one aborted."""
    from confluent_kafka import Producer

    partitions = len(BrokerClient(bootstrap).metadata([topic])[topic].partitions)

    transactional = min(total // 10, transactions * transaction_size)
    plain = total - transactional
    per_codec = plain // len(COMPRESSIONS)
    sent = 0
    for n, codec in enumerate(COMPRESSIONS):
        count = per_codec if n < len(COMPRESSIONS) - 1 else plain - per_codec * (len(COMPRESSIONS) - 1)
        # 16 KiB batches: Kafka refuses a batch larger than the topic's segment (RECORD_LIST_TOO_LARGE),
        # and the tiering tests' segments are as small as 32 KiB.
        producer = Producer({"bootstrap.servers": bootstrap, "compression.type": codec, "linger.ms": 5,
                             "batch.size": 16384, "queue.buffering.max.messages": 1_000_000,
                             "enable.idempotence": False})
        failed: list[tuple] = []  # flush() counts what is queued, not what the broker refused

        def sent_or_not(error, message, failed=failed) -> None:  # noqa: ANN001
            if error is not None:
                failed.append((message.value(), message.key(), message.partition(), message.headers(), error))

        pending = [(f"{codec}-{sent + i}-".encode() * 4, f"k{(sent + i) % 1000}".encode(), (sent + i) % partitions,
                    [("h", str(i).encode())] if i % 7 == 0 else None, None) for i in range(count)]
        for _ in range(3):  # a fresh broker may refuse a first batch (a partition without a leader yet)
            for n, (value, key, partition, headers, _error) in enumerate(pending):
                producer.produce(topic, value=value, key=key, partition=partition, headers=headers,
                                 on_delivery=sent_or_not)
                if n % 10_000 == 0:
                    producer.poll(0)
            assert producer.flush(120) == 0
            pending, failed[:] = list(failed), []
            if not pending:
                break
        assert not pending, f"{len(pending)} records refused, e.g. {pending[0][4]}"
        sent += count
    aborted_transactions = aborted_messages = 0
    if transactional:
        producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"tx-{topic}", "linger.ms": 5,
                             "compression.type": "lz4", "batch.size": 16384})
        producer.init_transactions(30)
        size = transactional // transactions
        for t in range(transactions):
            producer.begin_transaction()
            for i in range(size):
                producer.produce(topic, value=f"tx{t}-{i}".encode(), key=b"tx", partition=i % partitions)
            if t % 3 == 2:
                # Flush first: librdkafka purges unsent messages on abort, and then nothing of
                # the transaction (data or marker) would reach the log.
                assert producer.flush(30) == 0
                producer.abort_transaction(30)
                aborted_transactions += 1
                aborted_messages += size
            else:
                producer.commit_transaction(30)
        producer.flush(30)
    return Workload(plain, transactional, aborted_transactions, aborted_messages)


def partitions_of(client: BrokerClient, topic: str) -> list[TopicIdPartition]:
    info = client.metadata([topic])[topic]
    return [TopicIdPartition(info.topic_id, topic, p) for p in sorted(info.partitions)]


def direct_log(client: BrokerClient, tp: TopicIdPartition, start: int = 0) -> tuple[bytes, int]:
    """The partition's batches from ``start`` up to the last stable offset, as the broker serves
    them (read_uncommitted fetches, cut at the last stable offset), and that offset."""
    leader = client.metadata([tp.topic])[tp.topic].partitions[tp.partition].leader
    out = bytearray()
    offset = start
    last_stable = None
    for _ in range(100_000):
        answer = client.fetch(leader, tp.topic, tp.partition, offset, max_bytes=4 << 20, read_committed=False)
        assert answer.error_code == 0, answer.error_code
        last_stable = answer.last_stable_offset
        progressed = False
        for header, batch in iter_batches(answer.records):
            if header.last_offset < offset or header.base_offset >= last_stable:
                continue
            out += batch
            offset = header.last_offset + 1
            progressed = True
        if not progressed:
            break
    assert last_stable is not None
    return bytes(out), last_stable


def leader_offsets(bootstrap: str, topic: str, timestamp: int) -> dict[int, int]:
    """Each partition's offset for ``timestamp`` (EARLIEST, LATEST, ...) as its leader says, asked
    at ``bootstrap`` (the brokers themselves, not the proxy)."""
    client = BrokerClient(bootstrap)
    try:
        info = client.metadata([topic])[topic]
        found = {}
        for p, part in sorted(info.partitions.items()):
            error, offset = client.list_offset(part.leader, topic, p, timestamp)
            assert error == 0, (p, timestamp, error)
            found[p] = offset
        return found
    finally:
        client.close()


def last_stable_offset(client: BrokerClient, tp: TopicIdPartition) -> int:
    leader = client.metadata([tp.topic])[tp.topic].partitions[tp.partition].leader
    answer = client.fetch(leader, tp.topic, tp.partition, 0, max_bytes=1)
    return answer.last_stable_offset


def remote_end(rlmm: RemoteLogMetadataManager, tp: TopicIdPartition) -> int:
    segments = rlmm.copied_segments(tp)
    return segments[-1].end_offset if segments else -1


def wait_until(condition: Callable[[], bool], timeout: float, step: Callable[[], None] | None = None,
               interval: float = 0.3) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if step is not None:
            step()
        if condition():
            return True
        time.sleep(interval)
    return False


def check_contiguous(rlmm: RemoteLogMetadataManager, tp: TopicIdPartition, start: int = 0) -> list[RemoteLogSegmentMetadata]:
    """Every segment of ``tp`` is COPY_SEGMENT_FINISHED and they tile the log from ``start``."""
    segments = list(rlmm.list_remote_log_segments(tp))
    assert segments, f"nothing tiered for {tp}"
    assert [s.state for s in segments] == [RemoteLogSegmentState.COPY_SEGMENT_FINISHED] * len(segments)
    assert segments[0].start_offset == start
    for before, after in zip(segments, segments[1:], strict=False):
        assert after.start_offset == before.end_offset + 1, (before, after)
    return segments


def check_segment(rsm: RemoteStorageManager, segment: RemoteLogSegmentMetadata) -> bytes:
    """Indexes of one segment point at the right batches; returns the segment's log bytes."""
    log = rsm.fetch_log_segment(segment, 0)
    assert len(log) == segment.segment_size_bytes
    headers = {}
    position = 0
    for header, batch in iter_batches(log):
        headers[header.last_offset] = (position, header)
        position += len(batch)
    assert position == len(log)
    first = read_header(log, 0)
    assert first.base_offset == segment.start_offset
    assert max(h.last_offset for _, h in headers.values()) == segment.end_offset
    assert max(h.max_timestamp for _, h in headers.values()) == segment.max_timestamp_ms
    for entry in decode_offset_index(rsm.fetch_index(segment, IndexType.OFFSET), segment.start_offset):
        assert headers[entry.offset][0] == entry.position, entry
    for entry in decode_time_index(rsm.fetch_index(segment, IndexType.TIMESTAMP), segment.start_offset):
        assert headers[entry.offset][1].max_timestamp == entry.timestamp, entry
    epochs = decode_leader_epoch_checkpoint(rsm.fetch_index(segment, IndexType.LEADER_EPOCH))
    assert all(e.start_offset <= segment.end_offset for e in epochs)
    try:
        aborted = decode_transaction_index(rsm.fetch_index(segment, IndexType.TRANSACTION))
    except RemoteResourceNotFoundError:
        aborted = []
    assert segment.tx_index_empty == (not aborted)
    for txn in aborted:
        position, header = headers[txn.last_offset]
        assert header.is_control and header.producer_id == txn.producer_id
        (marker,) = decode_records(log[position:position + header.size])
        assert decode_control_record(marker)[1] == ControlType.ABORT
        assert txn.first_offset <= txn.last_offset
    return log
