"""KIP-956's copy and remote fetch quotas, with Kafka's key names, against a real S3 server
(SeaweedFS) in front of Apache Kafka 4.4 and 3.9 (which has the same keys): a backlog is copied at the copy quota's rate, a consumer
reading the history from offset 0 gets it at the fetch quota's rate, every record once and no
error, and the throttled time shows in the metrics."""

from __future__ import annotations

import time
import urllib.request
from pathlib import Path

import pytest

from tests.clients import read_to_end
from tests.integration.s3_server import new_bucket, s3_uri_args
from tests.proxy_process import free_port, start_proxy
from tests.tiering_checks import create_tiered_topic, leader_offsets, wait_until
from tiering.metadata.journal_store import JOURNAL_NAME, read_journal
from tiering.metadata.state import MetadataState

pytestmark = pytest.mark.integration

PARTITIONS = 2
RECORDS = 16_000  # 400-byte values: ~6.7 MB
COPY_RATE = 1_000_000  # bytes per second
FETCH_RATE = 2_000_000
SAMPLES, SAMPLE_S = 2, 1  # quota.window.num, quota.window.size.seconds: a burst of one sample's worth


def _tiered_bytes(data_dir: Path, topic: str) -> int:
    state = MetadataState()
    path = data_dir / "metadata" / JOURNAL_NAME
    for record in read_journal(path.read_bytes())[0] if path.exists() else ():
        state.apply(record)
    return sum(s.segment_size_bytes for tp, p in state.partitions.items() if tp.topic == topic for s in p.finished())


def _scrape(port: int) -> dict[str, float]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as answer:
        lines = answer.read().decode().splitlines()
    return {name: float(value) for name, _, value in (line.rpartition(" ") for line in lines if line[:1] not in "#")}


@pytest.fixture(params=["4.4", "3.9"])
def kafka_release(request: pytest.FixtureRequest):  # noqa: ANN201 - tests.kafka_cluster.KafkaCluster
    return request.getfixturevalue("kafka" if request.param == "4.4" else "kafka39")


def test_copy_and_fetch_quotas_hold_their_rates(kafka_release, tmp_path: Path, unique_name: str,
                                                s3_endpoint: str) -> None:
    from confluent_kafka import Producer

    kafka = kafka_release

    data_dir, metrics_port = tmp_path / "data", free_port()
    quota = ("--set", f"remote.log.manager.copy.max.bytes.per.second={COPY_RATE}",
             "--set", f"remote.log.manager.copy.quota.window.num={SAMPLES}",
             "--set", f"remote.log.manager.copy.quota.window.size.seconds={SAMPLE_S}",
             "--set", f"remote.log.manager.fetch.max.bytes.per.second={FETCH_RATE}",
             "--set", f"remote.log.manager.fetch.quota.window.num={SAMPLES}",
             "--set", f"remote.log.manager.fetch.quota.window.size.seconds={SAMPLE_S}")
    proxy = start_proxy(kafka.bootstrap, tmp_path / "proxy", "--data-dir", str(data_dir),
                        *s3_uri_args(new_bucket(s3_endpoint), "quotas", s3_endpoint), *quota,
                        "--set", "remote.log.manager.task.interval.ms=200",
                        "--set", f"proxy.metrics.listen=127.0.0.1:{metrics_port}")
    try:
        topic = unique_name
        create_tiered_topic(proxy.bootstrap, topic, partitions=PARTITIONS, **{"local.retention.bytes": "1"})
        # Idempotent: a retry of a batch the new topic's leader refused at first keeps its place.
        producer = Producer({"bootstrap.servers": kafka.bootstrap, "linger.ms": 5, "batch.size": 16384,
                             "enable.idempotence": True})
        for i in range(RECORDS):
            producer.produce(topic, value=f"{i:08d}".encode() + bytes(392), partition=i % PARTITIONS)
            if i % 1000 == 0:
                producer.poll(0)
        assert producer.flush(60) == 0

        # 1. The copy quota: the backlog goes out at its rate, however fast the copiers could go.
        samples: list[tuple[float, int]] = []

        def copied_all() -> bool:
            samples.append((time.monotonic(), _tiered_bytes(data_dir, topic)))
            return samples[-1][1] >= RECORDS * 400 * 0.9

        assert wait_until(copied_all, 90, interval=0.2), (samples[-1], proxy.log_text()[-3000:])
        first = next(i for i, (_, copied) in enumerate(samples) if copied > 0)
        (t0, b0), (t1, b1) = samples[first], samples[-1]
        copy_rate = (b1 - b0) / (t1 - t0)
        # Above the rate by at most the first sample's burst (and the segment in flight at each end).
        assert b1 - b0 <= COPY_RATE * (t1 - t0 + SAMPLES * SAMPLE_S) + 2 * 128 * 1024, (copy_rate, samples[:3])
        assert copy_rate >= COPY_RATE * 0.4, copy_rate  # and not starved either
        copy_metrics = _scrape(metrics_port)
        assert copy_metrics["tiered_proxy_remote_copy_throttled_total"] > 0
        assert copy_metrics["tiered_proxy_remote_copy_throttle_seconds_total"] > 1

        # 2. The fetch quota: a consumer from offset 0 gets the remote part at its rate, no error.
        assert wait_until(lambda: min(leader_offsets(kafka.bootstrap, topic, -2).values()) > RECORDS // PARTITIONS // 2,
                          60)
        remote_records = sum(leader_offsets(kafka.bootstrap, topic, -2).values())
        started = time.monotonic()
        got = read_to_end(proxy.bootstrap, topic, PARTITIONS, isolation="read_uncommitted", timeout=120)
        elapsed = time.monotonic() - started
        for p, records in got.items():
            assert [r.offset for r in records] == list(range(RECORDS // PARTITIONS)), f"partition {p}"
            assert [int(r.value[:8]) for r in records] == list(range(p, RECORDS, PARTITIONS))
        remote_bytes = remote_records * 400
        assert remote_bytes <= FETCH_RATE * (elapsed + SAMPLES * SAMPLE_S) + (2 << 20), (remote_bytes, elapsed)
        print(f"copy: {copy_rate / 1e6:.2f} MB/s at a quota of {COPY_RATE / 1e6:.1f}; remote fetch: "
              f"{remote_bytes / elapsed / 1e6:.2f} MB/s at a quota of {FETCH_RATE / 1e6:.1f}")
        fetch_metrics = _scrape(metrics_port)
        assert fetch_metrics["tiered_proxy_remote_fetch_throttled_total"] > 0
        assert fetch_metrics["tiered_proxy_tiered_storage_not_available_total"] == 0
    finally:
        proxy.stop()
