"""What the remote tier costs per topic, on Apache Kafka 4.4 through a real proxy: two tiered
topics, one of them read from offset 0; the remote-tier requests count per topic (PUTs for both,
GETs for the one read), ``describe --cost`` and the metrics agree on every count and figure, the
configured prices are the ones applied, and with the proxy stopped ``describe --cost`` still prices
the storage from the metadata store. Then keys salted over S3 (SeaweedFS): segments written before
salting was turned on, with it on, and read after it is turned off again, all from offset 0
through the proxy; the bucket's own readers (``segments --remote``, the manifests) find them all."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
import time
import urllib.request
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from proxy.describe import PartitionRow, describe, describe_costs
from proxy.status_page import cost_cells
from tests.clients import consume_records
from tests.integration.s3_server import DUMMY_CREDENTIALS, REGION, new_bucket
from tests.kafka_cluster import track_process
from tests.proxy_process import ProxyProcess, free_port, start_proxy
from tests.tiering_checks import create_tiered_topic, message_number, produce_numbered, wait_until
from tests.unit.test_storage_local import segment_data
from tiering.cost import GB, HOURS_PER_MONTH, TopicCost
from tiering.metadata.manifests import read_bucket
from tiering.metadata.view import load_metadata
from tiering.model import LogSegmentData, RemoteLogSegmentId, RemoteLogSegmentMetadata, TopicIdPartition
from tiering.storage.s3 import MiB, S3Storage
from tiering.storage.segment_location import location
from tiering.storage.uri import storage_from_uri

TIERING = ("--set", "remote.log.manager.task.interval.ms=100", "--set", "log.segment.bytes=16384",
           "--set", "log.roll.ms=1000")
PRICES = {"remote.log.storage.price.get.per.1000": "0.04", "remote.log.storage.price.storage.gb.month": "2.3",
          "remote.log.storage.price.currency": "EUR"}
RECORDS = 2000
S3_KEYS = {"remote.log.storage.s3.access.key.id": DUMMY_CREDENTIALS["aws_access_key_id"],
           "remote.log.storage.s3.secret.access.key": DUMMY_CREDENTIALS["aws_secret_access_key"]}


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "proxy.cli", *args], capture_output=True, text=True, timeout=120)


def scrape(url: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    with urllib.request.urlopen(url, timeout=10) as response:
        text = response.read().decode()
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def _settled(rows: list[PartitionRow]) -> bool:
    """Tiered to the log end, and the brokers' log start moved past the remote log start."""
    return bool(rows) and all(r.ry is not None and r.rx is not None and r.ry + 1 == r.lz and r.lx > r.rx
                              for r in rows)


def _quiet_costs(bootstrap: str, topics: list[str]) -> dict[str, TopicCost]:
    """The topics' last hour once two readings 2 s apart agree (nothing is being copied or read)."""
    last: dict[str, TopicCost] = {}
    for _ in range(30):
        # The window they cover grows by itself (the process is younger than an hour).
        now = {c.topic: dataclasses.replace(c, window_s=0.0) for c in describe_costs(bootstrap) if c.topic in topics}
        if now == last and set(now) == set(topics):
            return now
        last = now
        time.sleep(2)
    raise AssertionError(f"the proxy's counts kept moving: {last}")


def test_each_topic_costs_what_it_asked_of_the_remote_tier(kafka, tmp_path: Path, unique_name: str) -> None:
    metrics_port = free_port()
    data_dir = tmp_path / "data"
    prices = [arg for key, value in PRICES.items() for arg in ("--set", f"{key}={value}")]
    proxy = start_proxy(kafka.bootstrap, tmp_path / "proxy", "--data-dir", str(data_dir), *TIERING, *prices,
                        "--set", f"proxy.metrics.listen=127.0.0.1:{metrics_port}")
    track_process(proxy.process)
    read, only_tiered = f"read-{unique_name}", f"tiered-{unique_name}"
    try:
        for topic in (read, only_tiered):
            create_tiered_topic(proxy.bootstrap, topic, partitions=2, **{"segment.bytes": "16384", "local.retention.bytes": "32768"})
            produce_numbered(proxy.bootstrap, topic, 0, RECORDS, 2)
        assert wait_until(lambda: all(_settled(describe(proxy.bootstrap, t)) for t in (read, only_tiered)), 90), \
            ([describe(proxy.bootstrap, t) for t in (read, only_tiered)], proxy.log_text()[-3000:])
        records = consume_records("confluent", proxy.bootstrap, read, 2, RECORDS, timeout=60)
        assert sum(map(len, records.values())) == RECORDS
        costs = _quiet_costs(proxy.bootstrap, [read, only_tiered])
        metrics = scrape(f"http://127.0.0.1:{metrics_port}/metrics")
        cli = run_cli("describe", "--bootstrap-servers", proxy.bootstrap, "--cost")
        repriced = run_cli("describe", "--bootstrap-servers", proxy.bootstrap, "--cost", "--topic", read,
                           "--set", "remote.log.storage.price.get.per.1000=0.0004")
        stored = {t: sum(r.stored_bytes for r in describe(proxy.bootstrap, t)) for t in (read, only_tiered)}
    finally:
        proxy.stop()

    # The remote tier was written for both topics and read for the one read.
    hot, cold = costs[read], costs[only_tiered]
    assert hot.counts["PUT"] > 0 and cold.counts["PUT"] > 0
    assert hot.counts["GET"] > 0 and cold.counts["GET"] * 10 <= hot.counts["GET"], (hot, cold)
    assert hot.counts["bytes_read"] > 0 and cold.counts["bytes_read"] * 10 <= hot.counts["bytes_read"]
    assert hot.counts["bytes_written"] > 0 and cold.counts["bytes_written"] > 0
    assert (hot.stored_bytes, cold.stored_bytes) == (stored[read], stored[only_tiered])

    # describe and the metrics agree, count for count and figure for figure.
    for c in (hot, cold):
        for kind in ("GET", "PUT", "DELETE", "LIST"):
            assert metrics[("tiered_proxy_remote_topic_requests_total", (("kind", kind), ("topic", c.topic)))] == \
                c.counts.get(kind, 0), (c.topic, kind)
        for direction, key in (("read", "bytes_read"), ("written", "bytes_written")):
            assert metrics[("tiered_proxy_remote_topic_bytes_total", (("direction", direction), ("topic", c.topic)))] \
                == c.counts.get(key, 0)
        for window, figure in (("hour", c.hour), ("month", c.month)):
            for part in ("requests", "transfer", "storage"):
                labels = (("currency", "EUR"), ("part", part), ("topic", c.topic), ("window", window))
                assert metrics[("tiered_proxy_remote_topic_cost", labels)] == pytest.approx(getattr(figure, part))

    # The configured prices are the ones applied (GET 100 times S3's, storage 100 times).
    for c in (hot, cold):
        assert c.currency == "EUR"
        assert c.hour.requests == pytest.approx(
            (c.counts.get("GET", 0) * 0.04 + (c.counts.get("PUT", 0) + c.counts.get("LIST", 0)) * 0.005) / 1000)
        assert c.hour.storage == pytest.approx(c.stored_bytes / GB * 2.3 / HOURS_PER_MONTH)
        assert c.month.total == pytest.approx(c.hour.total * HOURS_PER_MONTH)
    assert hot.hour.requests > (hot.counts["GET"] * 0.0004 + hot.counts["PUT"] * 0.005) / 1000

    # describe --cost prints the same figures; prices given to it price the proxy's counts instead.
    assert cli.returncode == 0, cli.stderr
    lines = {line.split()[0]: line.split()[1:] for line in cli.stdout.splitlines()[1:]}
    for c in (hot, cold):
        assert lines[c.topic] == [text for _, text in cost_cells(c)]
    assert "cost in EUR, as the proxy prices it" in cli.stderr and "the last hour x 730" in cli.stderr
    assert repriced.returncode == 0, repriced.stderr
    (_, *cheaper), = (line.split() for line in repriced.stdout.splitlines()[1:])
    assert float(cheaper[7]) < hot.hour.requests  # REQUESTS at S3's GET price

    # With the proxy stopped: storage alone, from the metadata store, at the prices given.
    config = tmp_path / "prices.properties"
    config.write_text("".join(f"{k}={v}\n" for k, v in PRICES.items()) + "bootstrap.servers=ignored:1\n")
    offline = run_cli("describe", "--bootstrap-servers", proxy.bootstrap, "--cost", "--metadata",
                      f"file://{data_dir}/metadata", "--config", str(config))
    assert offline.returncode == 0, offline.stderr
    rows = {line.split()[0]: line.split()[1:] for line in offline.stdout.splitlines()[1:]}
    for c in (hot, cold):
        assert rows[c.topic][:7] == ["-"] * 6 + [str(c.stored_bytes)]
        assert rows[c.topic][9] == [text for cls, text in cost_cells(c) if cls == "storage"][0]
    assert "request costs need a running proxy" in offline.stderr and "nothing answers at" in offline.stderr


def test_prices_and_salting_that_cannot_work_are_refused_at_start(tmp_path: Path) -> None:
    base = ("serve", "--bootstrap-servers", "127.0.0.1:9", "--data-dir", str(tmp_path), "--set",
            f"proxy.metrics.listen=127.0.0.1:{free_port()}")
    for key, value, message in (
            ("remote.log.storage.price.get.per.1000", "-1", "must be a price of 0 or more, got '-1'"),
            ("remote.log.storage.price.storage.gb.month", "cheap",
             "must be a number (a price in the configured currency), got 'cheap'"),
            ("proxy.metrics.topic.label.max", "-5", "must be 0 or more, got -5"),
            ("remote.log.storage.key.prefix.salt.length", "9", "must be 0 (off) to 8 hex digits, got 9")):
        result = run_cli(*base, "--set", f"{key}={value}")
        assert "Traceback" not in result.stderr, result.stderr
        assert (result.returncode, result.stderr.splitlines()[-1]) == (
            2, f"tiered-proxy: configuration error: {key} {message}"), result.stderr


def test_s3_requests_count_for_the_topic_of_the_segment_they_serve(s3_endpoint: str) -> None:
    """Counted from botocore's events, on whichever thread asks: a multipart upload's parts and a
    ranged read on a pool thread count for their segment's topic, a listing for none."""
    bucket = new_bucket(s3_endpoint)
    store = S3Storage(bucket, "tiered", endpoint_url=s3_endpoint, region=REGION, max_attempts=2, salt_length=2,
                      multipart_threshold=5 * MiB, part_size=5 * MiB,
                      access_key_id=DUMMY_CREDENTIALS["aws_access_key_id"],
                      secret_access_key=DUMMY_CREDENTIALS["aws_secret_access_key"])
    try:
        big, small = segment_data(log=bytes(6 * MiB + 1)), segment_data()
        a = _copy(store, "big-topic", big)
        _copy(store, "small-topic", small)
        with ThreadPoolExecutor(2) as pool:
            assert pool.submit(store.fetch_log_segment, a, MiB, 2 * MiB - 1).result() == bytes(MiB)
        store.list_directory("")
        by_topic = store.requests.by_topic()
        requests = store.requests.snapshot()[0]
    finally:
        store.close()
    # 5 indexes, then the .log in a multipart upload: create, 2 parts, complete.
    assert by_topic["big-topic"] == {"PUT": 9, "GET": 1, "bytes_written": sum(map(len, _objects(big))),
                                     "bytes_read": MiB}
    assert by_topic["small-topic"] == {"PUT": 6, "bytes_written": sum(map(len, _objects(small)))}
    assert requests == {"PUT": 15, "GET": 1, "LIST": 1}  # the listing counts in the totals only


def _copy(store: S3Storage, topic: str, data: LogSegmentData) -> RemoteLogSegmentMetadata:
    tp = TopicIdPartition(uuid.uuid4(), topic, 0)
    metadata = RemoteLogSegmentMetadata(RemoteLogSegmentId.generate(tp), 0, 9, 0, 1, 0, len(data.log), ((0, 0),))
    return dataclasses.replace(metadata, custom_metadata=store.copy_log_segment_data(metadata, data))


def _objects(data: LogSegmentData) -> list[bytes]:
    return [body for body in (data.log, data.offset_index, data.time_index, data.transaction_index,
                              data.leader_epoch_index, data.producer_snapshot) if body]


def _s3_proxy(kafka, work: Path, data_dir: Path, remote: str, *extra: str) -> ProxyProcess:
    settings = [arg for key, value in S3_KEYS.items() for arg in ("--set", f"{key}={value}")]
    proxy = start_proxy(kafka.bootstrap, work, "--data-dir", str(data_dir), "--remote", remote, *TIERING, *settings,
                        "--set", "proxy.manifest.interval.ms=300", *extra)
    track_process(proxy.process)
    return proxy


def _read_all(proxy: ProxyProcess, topic: str, expected: int) -> list[int]:
    records = consume_records("confluent", proxy.bootstrap, topic, 1, expected, timeout=90)
    return [message_number(r.value) for r in records.get(0, [])]


def test_salted_and_unsalted_segments_are_read_back_over_s3(kafka, tmp_path: Path, unique_name: str,
                                                            s3_endpoint: str) -> None:
    bucket = new_bucket(s3_endpoint)
    remote = f"s3://{bucket}/tiered?endpoint_url={s3_endpoint}&region={REGION}"
    data_dir = tmp_path / "data"
    topic = f"salted-{unique_name}"
    metadata = f"file://{data_dir}/metadata"

    def settled(proxy: ProxyProcess, first_salted: int | None = None) -> bool:
        (row,) = describe(proxy.bootstrap, topic)
        return _settled([row]) and (first_salted is None or row.lx > first_salted)

    proxy = _s3_proxy(kafka, tmp_path / "plain", data_dir, remote)
    try:
        create_tiered_topic(proxy.bootstrap, topic, partitions=1, **{"segment.bytes": "16384", "local.retention.bytes": "32768"})
        produce_numbered(proxy.bootstrap, topic, 0, RECORDS, 1)
        assert wait_until(lambda: settled(proxy), 90), proxy.log_text()[-3000:]
    finally:
        proxy.stop()
    unsalted = {s.segment_id for tp, p in load_metadata(metadata).partitions.items() for s in p.finished()}

    proxy = _s3_proxy(kafka, tmp_path / "salted", data_dir, remote, "--set",
                      "remote.log.storage.key.prefix.salt.length=2")
    try:
        produce_numbered(proxy.bootstrap, topic, RECORDS, RECORDS, 1)

        def salted_segments() -> list:
            state = load_metadata(metadata)
            return sorted((s for p in state.partitions.values() for s in p.finished()
                           if s.segment_id not in unsalted), key=lambda s: s.start_offset)

        # Tiered, and the brokers' log start past the first salted segment: its offsets are in the
        # remote tier only, as are the unsalted ones before it.
        assert wait_until(lambda: bool(salted_segments()) and settled(proxy, salted_segments()[0].end_offset), 90), \
            proxy.log_text()[-3000:]
        salted = salted_segments()
        assert all(location(s.custom_metadata).salt for s in salted)  # type: ignore[union-attr]
        (row,) = describe(proxy.bootstrap, topic)
        assert row.lx > salted[0].end_offset and row.rx == 0
        assert _read_all(proxy, topic, 2 * RECORDS) == list(range(2 * RECORDS))
        (cost,) = describe_costs(proxy.bootstrap, topic)  # S3's requests, counted for the topic
        assert cost.counts["PUT"] >= 5 * len(salted) and cost.counts["GET"] >= len(unsalted) + len(salted)
    finally:
        proxy.stop()

    storage = storage_from_uri(remote, **S3_KEYS)
    try:
        keys = {obj["Key"] for page in storage.client.get_paginator("list_objects_v2").paginate(Bucket=bucket)
                for obj in page.get("Contents", [])}
        salt = location(salted[0].custom_metadata).salt  # type: ignore[union-attr]
        assert any(k.startswith(f"tiered/{salt}~{topic}~") and k.endswith(".log") for k in keys)
        assert any(k.startswith(f"tiered/{topic}-") and k.endswith(".log") for k in keys)
        # The bucket's own description finds every segment, salted or not, and takes no salted
        # directory for a topic.
        assert wait_until(lambda: len(read_bucket(storage).state.finished(salted[0].topic_id_partition))
                          == len(unsalted) + len(salted), 30)
        index = read_bucket(storage)
        assert index.topics == 1 and index.undescribed == []
    finally:
        storage.close()

    proxy = _s3_proxy(kafka, tmp_path / "off-again", data_dir, remote)  # salting off again
    try:
        assert _read_all(proxy, topic, 2 * RECORDS) == list(range(2 * RECORDS))
        (row,) = describe(proxy.bootstrap, topic)
        assert row.lx > salted[0].end_offset  # still read from the remote tier
    finally:
        proxy.stop()
