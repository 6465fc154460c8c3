"""A tiered topic's whole history for the read tests (tiered reads, Spark): 100k messages (keys,
headers, five codecs, ten transactions of which three aborted) in a 3-partition topic on Apache
Kafka, behind a proxy that has moved the broker's log start past more than half of each partition
(local retention run by the proxy). The topic is created and filled on the broker as an operator
would, and its tiering turned on through the proxy afterwards (Kafka without tiered storage of its
own refuses ``remote.storage.enable`` itself). The truth is the broker's own answer, read directly
before the proxy started and before anything left the broker."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from proxy.embedded_broker import EmbeddedBroker
from tests.admin_clients import Admin
from tests.clients import Record, read_to_end
from tests.kafka_cluster import KafkaCluster
from tests.proxy_process import ProxyProcess, free_port, start_proxy
from tests.tiering_checks import create_topic, produce_mixed, wait_until
from tiering.broker_client import EARLIEST, LATEST, BrokerClient
from tiering.metadata.journal_store import JOURNAL_NAME, read_journal
from tiering.metadata.state import MetadataState

MESSAGES = 100_000
PARTITIONS = 3
SEGMENT_BYTES = 256 * 1024
# The broker keeps at least this much of each partition (Kafka's rule, run by the proxy): well under
# half of one, compressed.
LOCAL_RETENTION_BYTES = 64 * 1024


@dataclass
class History:
    broker: KafkaCluster | EmbeddedBroker
    proxy: ProxyProcess
    topic: str
    committed: dict[int, list[Record]]  # what a read_committed consumer reads from the broker
    everything: dict[int, list[Record]]  # read_uncommitted: aborted records too
    log_starts: dict[int, int]  # the broker's log start once the fixture was ready
    journal: Path  # the proxy's remote log metadata
    data_dir: Path  # the proxy's data directory (remote folder, metadata)
    metrics_url: str  # the proxy's Prometheus endpoint

    def remote_range(self, partition: int) -> tuple[int, int] | None:
        """(Rx, Ry) of a partition, from the proxy's metadata journal."""
        state = MetadataState()
        for record in read_journal(self.journal.read_bytes())[0]:
            state.apply(record)
        for tp in state.partitions:
            if tp.topic == self.topic and tp.partition == partition:
                segments = state.finished(tp)
                return (segments[0].start_offset, segments[-1].end_offset) if segments else None
        return None


@contextmanager
def tiered_history(broker: KafkaCluster | EmbeddedBroker, work: Path) -> Iterator[History]:
    topic = f"history-{work.name}"
    create_topic(broker.bootstrap, topic, PARTITIONS, **{"segment.bytes": str(SEGMENT_BYTES)})
    workload = produce_mixed(broker.bootstrap, topic, MESSAGES, transactions=10, transaction_size=3000)
    assert workload.aborted_messages > 0
    committed = read_to_end(broker.bootstrap, topic, PARTITIONS)
    everything = read_to_end(broker.bootstrap, topic, PARTITIONS, isolation="read_uncommitted")
    client = BrokerClient(broker.bootstrap)
    leader = client.metadata([topic])[topic].partitions[0].leader
    ends = {p: (client.list_offset(leader, topic, p, EARLIEST)[1], client.list_offset(leader, topic, p, LATEST)[1])
            for p in range(PARTITIONS)}
    assert sum(map(len, everything.values())) == MESSAGES, (
        {p: len(v) for p, v in everything.items()}, ends, workload)
    assert sum(map(len, committed.values())) == MESSAGES - workload.aborted_messages

    metrics_port = free_port()
    proxy = start_proxy(broker.bootstrap, work / "proxy", "--data-dir", str(work / "data"),
                        "--set", "remote.log.manager.task.interval.ms=100",
                        "--set", f"proxy.metrics.listen=127.0.0.1:{metrics_port}")
    try:
        admin = Admin("confluent", proxy.bootstrap)
        admin.set_configs(topic, {"remote.storage.enable": "true", "local.retention.bytes": str(LOCAL_RETENTION_BYTES)})
        client = BrokerClient(broker.bootstrap)
        leader = client.metadata([topic])[topic].partitions[0].leader

        def log_starts() -> dict[int, int]:
            return {p: client.list_offset(leader, topic, p, EARLIEST)[1] for p in range(PARTITIONS)}

        # Wait until the brokers keep less than half of each partition.
        assert wait_until(lambda: all(s > len(everything[p]) // 2 for p, s in log_starts().items()), 120), \
            log_starts()
        yield History(broker, proxy, topic, committed, everything, log_starts(), work / "data" / "metadata" / JOURNAL_NAME,
                      work / "data", f"http://127.0.0.1:{metrics_port}/metrics")
    finally:
        proxy.stop()
