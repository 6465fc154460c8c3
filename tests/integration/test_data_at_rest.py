"""Segments at rest through the proxy on Apache Kafka, on the local folder and on S3 (SeaweedFS):

1. a topic tiered in the clear, then by a proxy with AES-256-GCM and zstd on: one bucket holding
   both (mixed), read back from offset 0 through the proxy, record for record;
2. no object the sealed proxy wrote holds any record's plaintext, nor a manifest's configs, read
   raw from the file system or with boto3;
3. a proxy whose ring holds another key under the same id is refused at start, naming the key;
4. rotation under load: a new key made active while producers write to the cluster, every data key
   re-wrapped by ``tiered-proxy keys rewrap`` beside the running proxy, the old key's removal
   refused before and allowed after, and everything read again;
5. one byte altered in one stored chunk: the proxy answers tiered storage not available, counts and
   logs it, and never serves a record that was not produced.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import pytest

from tests.clients import read_to_end
from tests.integration.s3_server import DUMMY_CREDENTIALS, REGION, new_bucket, s3_client
from tests.proxy_process import ProxyProcess, free_port, start_proxy
from tests.tiering_checks import create_tiered_topic, leader_offsets, wait_until
from tiering.metadata.journal_store import JOURNAL_NAME, read_journal
from tiering.metadata.state import MetadataState
from tiering.storage.key_ring import key_block

PARTITIONS = 2
SECRET = "card-4111-"  # in every value; must never appear in a sealed object
S3_KEYS = {"remote.log.storage.s3.access.key.id": DUMMY_CREDENTIALS["aws_access_key_id"],
           "remote.log.storage.s3.secret.access.key": DUMMY_CREDENTIALS["aws_secret_access_key"]}


def _value(i: int) -> bytes:
    return json.dumps({"order": i, "payment": f"{SECRET}{i:08d}", "customer": f"customer-{i * 7919 % 5000}",
                       "items": [{"sku": f"sku-{(i + j) % 300}", "qty": j + 1} for j in range(i % 4 + 1)],
                       "status": ["new", "paid", "shipped", "delivered"][i % 4]}).encode()


def _produce(bootstrap: str, topic: str, start: int, count: int) -> None:
    """Uncompressed batches (so zstd at rest has something to do), round-robin over the partitions."""
    from confluent_kafka import Producer

    # Idempotent, so a batch retried while the topic's metadata spreads keeps its place.
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "batch.size": 16384,
                         "compression.type": "none", "enable.idempotence": True})
    for i in range(start, start + count):
        producer.produce(topic, key=f"k{i}".encode(), value=_value(i), partition=i % PARTITIONS)
        if i % 2000 == 0:
            producer.poll(0)
    assert producer.flush(60) == 0


class Tier:
    """The remote tier under test, read raw: files, or objects through boto3."""

    def __init__(self, kind: str, tmp_path: Path, s3_endpoint: str) -> None:
        self.kind = kind
        if kind == "s3":
            self.bucket = new_bucket(s3_endpoint)
            self.client = s3_client(s3_endpoint)
            self.uri = f"s3://{self.bucket}/tiered?endpoint_url={s3_endpoint}&region={REGION}"
            self.settings = S3_KEYS
        else:
            self.root = tmp_path / "remote"
            self.uri = f"file://{self.root}"
            self.settings = {}

    def objects(self) -> dict[str, bytes]:
        if self.kind == "s3":
            pages = self.client.get_paginator("list_objects_v2").paginate(Bucket=self.bucket)
            keys = [item["Key"] for page in pages for item in page.get("Contents") or ()]
            return {k: self.client.get_object(Bucket=self.bucket, Key=k)["Body"].read() for k in keys}
        return {str(p.relative_to(self.root)): p.read_bytes() for p in self.root.rglob("*") if p.is_file()}

    def replace(self, key: str, body: bytes) -> None:
        if self.kind == "s3":
            self.client.put_object(Bucket=self.bucket, Key=key, Body=body)
        else:
            (self.root / key).write_bytes(body)


def _remote_ends(data_dir: Path, topic: str) -> dict[int, int]:
    state = MetadataState()
    path = data_dir / "metadata" / JOURNAL_NAME
    for record in read_journal(path.read_bytes())[0] if path.exists() else ():
        state.apply(record)
    return {tp.partition: max((s.end_offset for s in p.finished()), default=-1)
            for tp, p in state.partitions.items() if tp.topic == topic}


def _tiered(data_dir: Path, topic: str, produced: int) -> bool:
    """Every partition's remote tier holds all but its last (open) segment's worth of the first
    ``produced`` records, and the brokers have let go of what it holds."""
    ends = _remote_ends(data_dir, topic)
    per_partition = produced // PARTITIONS
    return len(ends) == PARTITIONS and all(end >= per_partition - 400 for end in ends.values())


def _read_all(proxy: ProxyProcess, topic: str, produced: int) -> None:
    records = read_to_end(proxy.bootstrap, topic, PARTITIONS, isolation="read_uncommitted", timeout=120)
    for p, got in records.items():
        assert [r.offset for r in got] == list(range(len(got))), f"partition {p} has gaps"
        assert [r.value for r in got] == [_value(i) for i in range(p, produced, PARTITIONS)][:len(got)]
        assert len(got) == len(range(p, produced, PARTITIONS)), f"partition {p}: {len(got)} records"


def _read_for(bootstrap: str, topic: str, seconds: float) -> dict[int, list[tuple[int, bytes]]]:
    """What a consumer from offset 0 gets within ``seconds``, errors aside (they are retried)."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"unused-{topic}", "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(PARTITIONS)])
    got: dict[int, list[tuple[int, bytes]]] = {p: [] for p in range(PARTITIONS)}
    deadline = time.monotonic() + seconds
    try:
        while time.monotonic() < deadline:
            for m in consumer.consume(10_000, 0.5):
                if m.error() is None:
                    got[m.partition()].append((m.offset(), m.value()))
    finally:
        consumer.close()
    return got


def _read_with_the_spark_source(proxy: ProxyProcess, topic: str, tier: Tier, ring: Path, produced: int) -> None:
    """The tiered-kafka data source's planner and readers, as Spark's driver and executors run
    them, over the bucket's own (sealed) manifests and sealed segments."""
    import pyarrow

    from tiering.spark.splits import RemoteSplit, TieredKafkaBatchReader

    reader = TieredKafkaBatchReader({
        "kafka.bootstrap.servers": proxy.bootstrap, "subscribe": topic, "remote.log.storage.uri": tier.uri,
        "remote.log.metadata.uri": "manifests:", **tier.settings,
        "remote.log.storage.encryption.key.ring.file": str(ring), "remote.log.storage.encryption.key.id": "kek-2"})
    splits = reader.partitions()
    assert sum(isinstance(split, RemoteSplit) for split in splits) >= 4
    rows = pyarrow.Table.from_batches([b for split in splits for b in reader.read(split)]).to_pylist()
    by_partition: dict[int, list[tuple[int, bytes]]] = {}
    for row in rows:
        by_partition.setdefault(row["partition"], []).append((row["offset"], row["value"]))
    for p, got in by_partition.items():
        assert sorted(got) == [(n, _value(i)) for n, i in enumerate(range(p, produced, PARTITIONS))], p


def _scrape(port: int) -> dict[str, float]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as answer:
        lines = answer.read().decode().splitlines()
    return {name: float(value) for name, _, value in (line.rpartition(" ") for line in lines if line[:1] not in "#")}


def _keys_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "proxy.cli", "keys", *args], capture_output=True, text=True,
                          timeout=120)


@pytest.mark.parametrize("tier_kind", ["local", "s3"])
def test_sealed_segments_end_to_end(kafka, tmp_path, unique_name, tier_kind, s3_endpoint):
    tier = Tier(tier_kind, tmp_path, s3_endpoint)
    data_dir, ring = tmp_path / "data", tmp_path / "ring.pem"
    ring.write_text(key_block("kek-1"))
    config = tmp_path / "proxy.properties"
    settings = {"remote.log.storage.uri": tier.uri, **tier.settings, "proxy.data.dir": str(data_dir),
                "remote.log.manager.task.interval.ms": "200", "proxy.manifest.interval.ms": "300"}
    sealed = {**settings, "remote.log.storage.encryption.key.ring.file": str(ring),
              "remote.log.storage.encryption.key.id": "kek-1", "remote.log.storage.compression.type": "zstd"}
    metrics_port = free_port()

    def start(props: dict[str, str]) -> ProxyProcess:
        config.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
        return start_proxy(kafka.bootstrap, tmp_path / "proxy", "--config", str(config), "--data-dir", str(data_dir),
                           "--set", f"proxy.metrics.listen=127.0.0.1:{metrics_port}")

    topic = unique_name
    proxy = start(settings)
    try:  # 1. in the clear first
        create_tiered_topic(proxy.bootstrap, topic, partitions=PARTITIONS, **{"local.retention.bytes": "1"})
        _produce(kafka.bootstrap, topic, 0, 3000)
        assert wait_until(lambda: _tiered(data_dir, topic, 3000), 90), proxy.log_text()[-3000:]
    finally:
        proxy.stop()
    plain_objects = set(tier.objects())

    proxy = start(sealed)
    try:  # then sealed, into the same bucket
        _produce(kafka.bootstrap, topic, 3000, 6000)
        assert wait_until(lambda: _tiered(data_dir, topic, 9000), 120), proxy.log_text()[-3000:]
        assert wait_until(lambda: min(leader_offsets(kafka.bootstrap, topic, -2).values()) > 1000, 60)
        _read_all(proxy, topic, 9000)
        metrics = _scrape(metrics_port)
        stored = metrics[f'tiered_proxy_remote_stored_bytes{{topic="{topic}"}}']
        logical = metrics[f'kafka_server_brokertopicmetrics_remotelogsizebytes{{topic="{topic}"}}']
        assert stored < 0.75 * logical, (stored, logical)  # the plain third stored as it is; the rest zstd
    finally:
        proxy.stop()

    # 2. Nothing the sealed proxy wrote is readable: no record value, no manifest's configs.
    objects = tier.objects()
    new = {k: v for k, v in objects.items() if k not in plain_objects}
    assert sum(k.endswith(".seal") for k in new) >= 4 and sum(k.endswith(".manifest") for k in new) >= 0
    for key, body in objects.items():
        if key in plain_objects and key.endswith(".log"):
            continue  # the first proxy's segments, in the clear as they were written
        assert SECRET.encode() not in body and b"customer-" not in body, key
        assert b"local.retention.bytes" not in body, key  # manifests are sealed too (rewritten at start)
    assert any(SECRET.encode() in objects[k] for k in plain_objects if k.endswith(".log"))  # the check can fail

    # 3. Another key under the same id: refused at start, before anything is written.
    impostor = tmp_path / "impostor.pem"
    impostor.write_text(key_block("kek-1"))
    refused = subprocess.run([sys.executable, "-m", "proxy.cli", "serve", "--bootstrap-servers", kafka.bootstrap,
                              "--listen", f"127.0.0.1:{free_port()}", "--config", str(config),
                              "--set", f"remote.log.storage.encryption.key.ring.file={impostor}"],
                             capture_output=True, text=True, timeout=60)
    assert refused.returncode == 2, refused.stderr
    assert "is not the key kek-1 this remote tier was encrypted with" in refused.stderr

    # 4. Rotation under load.
    with ring.open("a") as f:
        f.write(key_block("kek-2"))
    loading = threading.Thread(target=_produce, args=(kafka.bootstrap, topic, 9000, 6000))
    loading.start()
    proxy = start({**sealed, "remote.log.storage.encryption.key.id": "kek-2"})
    try:
        removal = _keys_cli("remove", "--config", str(config), "--key-id", "kek-1")
        assert removal.returncode == 1 and "refusing to remove kek-1" in removal.stderr, removal.stderr
        assert "needs kek-1: " in removal.stderr
        rewrap = _keys_cli("rewrap", "--config", str(config))
        assert rewrap.returncode == 0, rewrap.stderr
        assert "every data key is under kek-2" in rewrap.stdout
        loading.join(120)
        assert wait_until(lambda: _tiered(data_dir, topic, 15000), 120), proxy.log_text()[-3000:]
        removal = _keys_cli("remove", "--config", str(config), "--key-id", "kek-1")
        assert removal.returncode == 0, removal.stderr
        _read_all(proxy, topic, 15000)
        _read_with_the_spark_source(proxy, topic, tier, ring, 15000)
    finally:
        loading.join(120)
        proxy.stop()

    # 5. One byte altered in one sealed chunk: refused, counted, logged; no garbage served.
    target = sorted(k for k, v in tier.objects().items() if k.endswith(".log") and k not in plain_objects
                    and f"{topic}-" in k and "/0/" in k)[0]
    body = bytearray(tier.objects()[target])
    body[len(body) // 2] ^= 0x01
    tier.replace(target, bytes(body))
    proxy = start({**sealed, "remote.log.storage.encryption.key.id": "kek-2"})
    try:
        not_available = proxy.log_text().count("TIERED_STORAGE_NOT_AVAILABLE")
        got = _read_for(proxy.bootstrap, topic, 20)
        assert len(got[1]) == 7500 and len(got[0]) < 7500  # partition 0 stops at the altered chunk
        for p, records in got.items():
            assert records == [(n, _value(i)) for n, i in enumerate(range(p, 15000, PARTITIONS))][:len(records)]
        assert _scrape(metrics_port)["tiered_proxy_remote_integrity_failures_total"] >= 1
        log = proxy.log_text()
        assert "refusing to serve a remote object" in log and "fails its checksum" in log, log[-3000:]
        assert log.count("TIERED_STORAGE_NOT_AVAILABLE") > not_available
    finally:
        proxy.stop()
