"""An aborted transaction that the remote tier's end cuts in two, on Apache Kafka 4.4.

The copier rolls a remote segment inside the transaction's records, and the segment that holds its
abort marker stays open on the proxy (segment.ms is an hour), so no remote transaction index lists
the transaction yet. A read_committed reader of the remote records must still skip them: the
proxy and the Spark source learn the transaction from the brokers' own indexes, as Kafka's
remote reads do. After a restart, the copier learns it the same way before it copies the marker,
and indexes it where the marker lands.
"""

from __future__ import annotations

from pathlib import Path

from tests.clients import consume_records, read_to_end
from tests.delivery import CheckedProducer
from tests.proxy_process import ProxyProcess, start_proxy
from tests.tiering_checks import create_tiered_topic, wait_until
from tiering.metadata.journal_store import JOURNAL_NAME, read_journal
from tiering.metadata.state import MetadataState

SEGMENT_BYTES = 64 * 1024
VALUE = bytes(200)


def _remote_end(data_dir: Path, topic: str) -> int:
    journal = data_dir / "metadata" / JOURNAL_NAME
    state = MetadataState()
    for record in read_journal(journal.read_bytes())[0] if journal.exists() else []:
        state.apply(record)
    ends = [s.end_offset for tp in state.partitions if tp.topic == topic for s in state.finished(tp)]
    return max(ends, default=-1)


def _produce(bootstrap: str, topic: str, count: int, prefix: str, *, transactional_id: str | None = None) -> None:

    config = {"bootstrap.servers": bootstrap, "linger.ms": 5, "batch.size": 16384}
    if transactional_id is not None:
        config["transactional.id"] = transactional_id
    producer = CheckedProducer(config)
    if transactional_id is not None:
        producer.init_transactions(30)
        producer.begin_transaction()
    for i in range(count):
        producer.produce(topic, key=f"{prefix}{i}".encode(), value=prefix.encode() + VALUE, partition=0)
    producer.deliver_all(30)
    if transactional_id is not None:
        producer.abort_transaction(30)


def _proxy(kafka, work: Path) -> ProxyProcess:
    # remote-preferred: the broker keeps the whole log, and reads below the remote end come from the remote tier.
    return start_proxy(kafka.bootstrap, work / "proxy", "--data-dir", str(work / "data"),
                       "--set", "remote.log.manager.task.interval.ms=100",
                       "--set", "proxy.fetch.routing.policy=remote-preferred")


def _spark_rows(proxy: ProxyProcess, data_dir: Path, topic: str) -> list[bytes]:
    """What the tiered-kafka Spark source reads read_committed, planned and read as its driver and
    executors do (without a Spark session: the same functions)."""
    from tiering.spark.splits import TieredKafkaBatchReader, read_split

    options = {"kafka.bootstrap.servers": proxy.bootstrap, "subscribe": topic, "kafka.isolation.level": "read_committed",
               "remote.log.storage.uri": f"file://{data_dir / 'remote'}",
               "remote.log.metadata.uri": f"file://{data_dir / 'metadata'}"}
    reader = TieredKafkaBatchReader(options)
    keys: list[bytes] = []
    for split in reader.partitions():
        for batch in read_split(reader.options, split):
            keys += batch.column("key").to_pylist()
    return keys


def test_an_aborted_transaction_cut_by_the_remote_end_stays_hidden(kafka, tmp_path, unique_name):
    topic = f"txcut-{unique_name}"
    proxy = _proxy(kafka, tmp_path)
    try:
        create_tiered_topic(proxy.bootstrap, topic, 1, **{"segment.bytes": str(SEGMENT_BYTES), "segment.ms": "3600000"})
        _produce(kafka.bootstrap, topic, 300, "plain-")
        _produce(kafka.bootstrap, topic, 2000, "aborted-", transactional_id=f"tx-{topic}")  # about 440 KB
        truth = read_to_end(kafka.bootstrap, topic, 1)[0]
        assert [r.key for r in truth] == [f"plain-{i}".encode() for i in range(300)]
        everything = read_to_end(kafka.bootstrap, topic, 1, isolation="read_uncommitted")[0]
        aborted = [r.offset for r in everything if r.key.startswith(b"aborted-")]
        # Segments roll inside the transaction; the one with its marker stays open.
        assert wait_until(lambda: _remote_end(tmp_path / "data", topic) >= aborted[0] + 1000, 60)
        remote_end = _remote_end(tmp_path / "data", topic)
        assert aborted[0] < remote_end < aborted[-1] + 1, (aborted[0], remote_end, aborted[-1])

        for client in ("confluent", "kafka-python"):
            got = consume_records(client, proxy.bootstrap, topic, 1, len(truth), timeout=60)[0]
            assert got == truth, client
        assert read_to_end(proxy.bootstrap, topic, 1)[0] == truth  # up to the end, nothing more
        assert _spark_rows(proxy, tmp_path / "data", topic) == [r.key for r in truth]
    finally:
        proxy.stop()

    # Restarted, the copier resumes inside the transaction and copies its marker once the open
    # segment fills: the transaction is then in the remote tier's index, and still hidden.
    proxy = _proxy(kafka, tmp_path)
    try:
        _produce(kafka.bootstrap, topic, 600, "after-")
        truth = read_to_end(kafka.bootstrap, topic, 1)[0]
        assert wait_until(lambda: _remote_end(tmp_path / "data", topic) > aborted[-1] + 1, 60)
        got = consume_records("confluent", proxy.bootstrap, topic, 1, len(truth), timeout=60)[0]
        assert got == truth
        assert _spark_rows(proxy, tmp_path / "data", topic) == [r.key for r in truth]
    finally:
        proxy.stop()
