"""A read replica on Apache Kafka 4.4: a proxy in front of cluster B, given cluster A's remote tier
(SeaweedFS) with credentials that may only read and list, serves A's tiered topic to B's clients
under another name, every record once from offset 0, while A keeps producing and tiering; new
segments show on B within the bound the settings give; B never writes to A's bucket."""

from __future__ import annotations

import re
import time
import urllib.request

import pytest
from confluent_kafka import Producer

from proxy.describe import describe
from tests.clients import read_to_end
from tests.integration.s3_server import READ_ONLY_CREDENTIALS, REGION, new_bucket, s3_client, s3_uri_args
from tests.kafka_cluster import start_single
from tests.proxy_process import free_port, start_proxy
from tests.tiering_checks import create_tiered_topic, message_number, produce_numbered, wait_until
from tiering.metadata.journal_store import JOURNAL_NAME, read_journal
from tiering.metadata.state import MetadataState

PARTITIONS = 2
REFRESH_MS, MANIFEST_MS = 500, 300


def _scrape(port: int) -> dict[str, float]:
    """The proxy's Prometheus samples, by name with labels."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as answer:
        lines = answer.read().decode().splitlines()
    return {name: float(value) for name, _, value in (line.rpartition(" ") for line in lines if line[:1] not in "#")}


def _remote_end(data_dir, topic: str) -> dict[int, int]:
    """The last offset A's metadata store records as tiered, per partition."""
    state = MetadataState()
    path = data_dir / "metadata" / JOURNAL_NAME
    for record in read_journal(path.read_bytes())[0] if path.exists() else ():
        state.apply(record)
    return {tp.partition: p.finished()[-1].end_offset for tp, p in state.partitions.items()
            if tp.topic == topic and p.finished()}


@pytest.mark.parametrize("tier", ["s3", "local"])
def test_cluster_b_reads_cluster_a_s_history_as_a_keeps_tiering(kafka, tmp_path, unique_name, s3_endpoint, tier):
    topic, local_name = unique_name, f"a.{unique_name}"
    bucket = new_bucket(s3_endpoint)
    a_data = tmp_path / "a-data"
    if tier == "s3":
        a_remote = s3_uri_args(bucket, "cluster-a", s3_endpoint)
        replica = (
            "--set", f"proxy.read.replica.remote.log.storage.uri=s3://{bucket}/cluster-a?endpoint_url={s3_endpoint}"
                     f"&region={REGION}",
            "--set", f"proxy.read.replica.remote.log.storage.s3.access.key.id={READ_ONLY_CREDENTIALS['aws_access_key_id']}",
            "--set", "proxy.read.replica.remote.log.storage.s3.secret.access.key="
                     f"{READ_ONLY_CREDENTIALS['aws_secret_access_key']}")
    else:
        a_remote = ("--remote", f"file://{tmp_path}/a-remote")
        replica = ("--set", f"proxy.read.replica.remote.log.storage.uri=file://{tmp_path}/a-remote")
    proxy_a = start_proxy(kafka.bootstrap, tmp_path / "proxy-a", "--data-dir", str(a_data), *a_remote,
                          "--set", "remote.log.manager.task.interval.ms=200",
                          "--set", f"proxy.manifest.interval.ms={MANIFEST_MS}")
    cluster_b = start_single(tmp_path / "cluster-b")
    proxy_b = None
    try:
        create_tiered_topic(proxy_a.bootstrap, topic, partitions=PARTITIONS)
        produce_numbered(proxy_a.bootstrap, topic, 0, 3000, PARTITIONS)
        assert wait_until(lambda: sum(e + 1 for e in _remote_end(a_data, topic).values()) >= 2000, 90)

        def a_objects() -> set[str]:
            if tier == "s3":
                return {o["Key"] for o in s3_client(s3_endpoint).list_objects_v2(Bucket=bucket).get("Contents", [])}
            # Not A's objects in flight: the local folder writes .<name>.<random>.tmp, then renames it.
            return {str(p.relative_to(tmp_path)) for p in (tmp_path / "a-remote").rglob("*")
                    if p.is_file() and not (p.name.startswith(".") and p.name.endswith(".tmp"))}

        keys_before_b = a_objects()

        metrics_port = free_port()
        proxy_b = start_proxy(
            cluster_b.bootstrap, tmp_path / "proxy-b", "--remote", f"file://{tmp_path}/b-remote", *replica,
            "--set", f"proxy.metrics.listen=127.0.0.1:{metrics_port}",
            "--set", f"proxy.read.replica.topics={topic}:{local_name}",
            "--set", f"proxy.read.replica.refresh.interval.ms={REFRESH_MS}")

        # What A has tiered, B serves from offset 0, each record once, under its local name.
        tiered = _remote_end(a_data, topic)
        time.sleep((REFRESH_MS + MANIFEST_MS) / 1000 + 0.5)
        got = read_to_end(proxy_b.bootstrap, local_name, PARTITIONS, timeout=60)
        for p, records in got.items():
            assert [r.offset for r in records] == list(range(len(records)))
            assert len(records) >= tiered[p] + 1, (p, len(records), tiered)

        # A keeps producing and tiering: B's end follows within the bound.
        produce_numbered(proxy_a.bootstrap, topic, 3000, 3000, PARTITIONS)
        assert wait_until(lambda: sum(e + 1 for e in _remote_end(a_data, topic).values()) == 6000, 90)
        tiered_at = time.monotonic()
        assert wait_until(lambda: sum(map(len, read_to_end(proxy_b.bootstrap, local_name, PARTITIONS,
                                                             timeout=30).values())) == 6000, 30)
        lag_s = time.monotonic() - tiered_at
        got = read_to_end(proxy_b.bootstrap, local_name, PARTITIONS, timeout=60)
        assert sorted(message_number(r.value) for rs in got.values() for r in rs) == list(range(6000))
        print(f"read replica caught up {lag_s:.1f} s after A's last segment was tiered")

        assert {r.state for r in describe(proxy_b.bootstrap, local_name)} == {"READ-REPLICA"}
        metrics = _scrape(metrics_port)
        assert metrics['tiered_proxy_archived_topics{source="read-replica"}'] == 1
        assert metrics['tiered_proxy_archive_index_reads_total{source="read-replica"}'] > 0
        assert metrics[f'kafka_server_brokertopicmetrics_remotefetchbytespersec_total{{topic="{local_name}"}}'] > 0
        replica_requests = {k: v for k, v in metrics.items()
                            if k.startswith("tiered_proxy_remote_storage_requests_total") and ("cluster-a" in k or "a-remote" in k)}
        assert any('kind="GET"' in k and v > 0 for k, v in replica_requests.items()), replica_requests
        assert not any('kind="PUT"' in k or 'kind="DELETE"' in k for k in replica_requests), replica_requests
        errors: list[object] = []
        producer = Producer({"bootstrap.servers": proxy_b.bootstrap, "message.timeout.ms": 10_000})
        producer.produce(local_name, b"nope", partition=0, on_delivery=lambda e, m: errors.append(e))
        producer.flush(15)
        del producer  # its threads end now, before the proxy does
        assert len(errors) == 1 and errors[0] is not None and errors[0].code() == 29, errors
    finally:
        if proxy_b is not None:
            proxy_b.stop()
        proxy_a.stop()
        cluster_b.stop()
    # B sent reads only (and with credentials that allow nothing else): its count, from its log.
    counts = re.search(r"read replica of \S+: requests GET (\d+), LIST (\d+), PUT (\d+), DELETE (\d+)",
                       proxy_b.log_path.read_text())
    assert counts is not None and int(counts[1]) > 0 and counts.group(3, 4) == ("0", "0"), counts
    assert "AccessDenied" not in proxy_b.log_path.read_text()
    assert keys_before_b <= a_objects()  # nothing of A's removed
