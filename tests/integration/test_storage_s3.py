"""S3Storage against a real S3 server over HTTP (SeaweedFS): the shared storage contract, multipart uploads, ranged
GETs, retries and recovery when the endpoint goes away, and KIP-917 prefix records."""

from __future__ import annotations

import dataclasses
import http.server
import os
import threading
import time
from collections.abc import Iterator

import botocore.exceptions
import pytest

from tests.integration.faulty_http import FaultyRelay, send_s3_error
from tests.integration.s3_server import (
    DUMMY_CREDENTIALS,
    REGION,
    new_bucket,
    s3_client,
)
from tests.unit.test_storage_local import StorageContract, segment_data, segment_metadata
from tiering.model import IndexType, LogSegmentData
from tiering.storage.api import RemoteResourceNotFoundError, RemoteStorageError
from tiering.storage.s3 import MiB, S3Storage
from tiering.storage.segment_location import SegmentLocation
from tiering.storage.uri import storage_from_uri

CREDENTIALS = {"access_key_id": "testing", "secret_access_key": "testing"}


def s3_storage(endpoint: str, bucket: str, prefix: str = "", **kwargs) -> S3Storage:
    kwargs.setdefault("max_attempts", 2)
    return S3Storage(bucket, prefix, endpoint_url=endpoint, region=REGION, **CREDENTIALS, **kwargs)


def all_keys(endpoint: str, bucket: str) -> set[str]:
    pages = s3_client(endpoint).get_paginator("list_objects_v2").paginate(Bucket=bucket)
    return {obj["Key"] for page in pages for obj in page.get("Contents", [])}


@pytest.fixture
def bucket(s3_endpoint) -> str:
    return new_bucket(s3_endpoint)


class TestS3Storage(StorageContract):
    deletes_per_segment = 2  # DeleteObjects: the .log alone first, then the rest in one request
    @pytest.fixture
    def make_storage(self, s3_endpoint, bucket) -> Iterator:
        made: list[S3Storage] = []

        def make(prefix: str = "") -> S3Storage:
            made.append(s3_storage(s3_endpoint, bucket, prefix))
            return made[-1]

        yield make
        for storage in made:
            storage.close()

    @pytest.fixture
    def list_keys(self, s3_endpoint, bucket):
        return lambda: all_keys(s3_endpoint, bucket)

    @pytest.fixture
    def oversized_storage(self, make_storage):
        storage = make_storage(prefix="tiered/v1")
        # The constructor refuses a limit its own metadata cannot meet; lowering it afterwards is
        # the way to reach the copy-time check (as a prefix config that outgrew the limit would).
        storage.custom_metadata_max_bytes = 8
        return storage

    def test_custom_metadata_records_prefix_and_stored_bytes(self, storage):
        data = segment_data()
        blob = storage.copy_log_segment_data(segment_metadata(), data)
        assert blob is not None and len(blob) <= storage.custom_metadata_max_bytes
        sizes = [
            len(data.log),
            len(data.offset_index),
            len(data.time_index),
            len(data.transaction_index or b""),
        ]
        sizes += [len(data.leader_epoch_index), len(data.producer_snapshot)]
        assert SegmentLocation.decode(blob) == SegmentLocation("tiered/v1", sum(sizes))

    def test_ranged_reads_send_a_range_header(self, storage):
        metadata, data = segment_metadata(), segment_data()
        storage.copy_log_segment_data(metadata, data)
        ranges: list[str | None] = []
        storage.client.meta.events.register(
            "before-send.s3.GetObject", lambda request, **_: ranges.append(request.headers.get("Range"))
        )
        assert storage.fetch_log_segment(metadata, 5, 9) == data.log[5:10]
        assert storage.fetch_log_segment(metadata, 7) == data.log[7:]
        assert [r.decode() if isinstance(r, bytes) else r for r in ranges] == ["bytes=5-9", "bytes=7-"]


def test_every_upload_carries_a_checksum_the_store_verifies(s3_endpoint, bucket):
    storage = s3_storage(s3_endpoint, bucket, "sum", multipart_threshold=5 * MiB, part_size=5 * MiB)
    sent: list[tuple[str, bool]] = []
    storage.client.meta.events.register("before-send.s3", lambda request, event_name, **_: sent.append(
        (event_name.rsplit(".", 1)[-1], any(k.lower().startswith("x-amz-checksum-") for k in request.headers))))
    metadata, data = segment_metadata(), segment_data(log=os.urandom(6 * MiB))
    storage.copy_log_segment_data(metadata, data)
    uploads = [(op, summed) for op, summed in sent if op in ("PutObject", "UploadPart")]
    assert [op for op, _ in uploads] == ["PutObject"] * 5 + ["UploadPart"] * 2
    assert all(summed for _, summed in uploads)
    # The store checks it: a body that does not match its checksum is refused, nothing stored.
    client = s3_client(s3_endpoint)
    with pytest.raises(botocore.exceptions.ClientError) as info:
        client.put_object(Bucket=bucket, Key="corrupt", Body=b"payload", ChecksumCRC32="AAAAAA==")
    assert info.value.response["Error"]["Code"] == "BadDigest"
    assert "corrupt" not in all_keys(s3_endpoint, bucket)
    # Reading back a whole object (an index) asks for its checksum, which botocore then checks.
    asked: list[bool] = []
    storage.client.meta.events.register("before-send.s3.GetObject", lambda request, **_: asked.append(
        request.headers.get("x-amz-checksum-mode") in (b"ENABLED", "ENABLED")))
    assert storage.fetch_index(metadata, IndexType.OFFSET) == data.offset_index
    assert asked == [True]


def test_large_segments_go_up_in_parts(s3_endpoint, bucket):
    log = os.urandom(20 * MiB)
    storage = s3_storage(s3_endpoint, bucket, "big", multipart_threshold=8 * MiB, part_size=8 * MiB)
    metadata = segment_metadata()
    storage.copy_log_segment_data(metadata, segment_data(log=log))
    client = s3_client(s3_endpoint)
    head = client.head_object(Bucket=bucket, Key=storage.object_key(metadata, "log"))
    # A multipart object's ETag is "<md5 of part md5s>-<part count>": 8 + 8 + 4 MiB.
    assert head["ETag"].strip('"').endswith("-3")
    assert head["ContentLength"] == len(log)
    small = client.head_object(Bucket=bucket, Key=storage.object_key(metadata, "index"))
    assert "-" not in small["ETag"]
    assert "Uploads" not in client.list_multipart_uploads(Bucket=bucket)
    boundary = 8 * MiB
    assert (
        storage.fetch_log_segment(metadata, boundary - 10, boundary + 10)
        == log[boundary - 10 : boundary + 11]
    )
    assert storage.fetch_log_segment(metadata, 0) == log


def test_failed_multipart_upload_is_aborted(s3_endpoint, bucket, monkeypatch):
    storage = s3_storage(s3_endpoint, bucket, "big", multipart_threshold=5 * MiB, part_size=5 * MiB)
    upload_part = storage.client.upload_part

    def failing_upload_part(**kwargs):
        if kwargs["PartNumber"] == 2:
            raise botocore.exceptions.ClientError(
                {
                    "Error": {"Code": "InternalError", "Message": "injected"},
                    "ResponseMetadata": {"HTTPStatusCode": 500},
                },
                "UploadPart",
            )
        return upload_part(**kwargs)

    monkeypatch.setattr(storage.client, "upload_part", failing_upload_part)
    with pytest.raises(RemoteStorageError) as info:
        storage.copy_log_segment_data(segment_metadata(), segment_data(log=bytes(11 * MiB)))
    assert info.value.retriable is True
    assert "Uploads" not in s3_client(s3_endpoint).list_multipart_uploads(Bucket=bucket)
    assert all_keys(s3_endpoint, bucket) == set()


def test_changed_prefix_still_reaches_old_segments(s3_endpoint, bucket):
    old = s3_storage(s3_endpoint, bucket, "old/layout")
    metadata, data = segment_metadata(), segment_data()
    custom = old.copy_log_segment_data(metadata, data)
    stored = dataclasses.replace(metadata, custom_metadata=custom)  # as the metadata store keeps it

    new = s3_storage(s3_endpoint, bucket, "new")
    assert new.fetch_log_segment(stored, 3, 20) == data.log[3:21]
    assert new.fetch_index(stored, IndexType.TIMESTAMP) == data.time_index
    # Without the record, the current prefix is all there is to go on.
    with pytest.raises(RemoteResourceNotFoundError):
        new.fetch_log_segment(metadata, 0)

    new.delete_log_segment_data(stored)
    assert all_keys(s3_endpoint, bucket) == set()


def test_unreachable_endpoint_is_retriable_and_recovers(seaweedfs):
    server = seaweedfs.gateway()  # its own, so stopping it leaves the session's alone
    try:
        bucket = new_bucket(server.endpoint)
        storage = s3_storage(server.endpoint, bucket, "p", max_attempts=3)
        metadata, data = segment_metadata(), segment_data()
        storage.copy_log_segment_data(metadata, data)

        server.stop()
        began = time.monotonic()
        with pytest.raises(RemoteStorageError) as info:
            storage.fetch_log_segment(metadata, 0, 9)
        assert info.value.retriable is True
        assert not isinstance(info.value, RemoteResourceNotFoundError)
        # Three attempts with standard-mode backoff (at most 1 s, then 2 s, of jittered sleep).
        assert time.monotonic() - began < 10

        server.start()  # same port; the objects stay in the store
        assert storage.fetch_log_segment(metadata, 0, 9) == data.log[:10]
    finally:
        server.stop()


class _AlwaysSlowDown(http.server.BaseHTTPRequestHandler):
    """Answers everything with S3's throttling error."""

    requests = 0
    protocol_version = "HTTP/1.1"

    def _refuse(self) -> None:
        type(self).requests += 1
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        send_s3_error(self, 503, "SlowDown", "Please reduce your request rate.")

    do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = _refuse

    def log_message(self, format, *args):  # noqa: A002 - the base class's parameter name
        pass


def test_throttling_is_retried_then_surfaces_as_retriable():
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _AlwaysSlowDown)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        endpoint = f"http://127.0.0.1:{server.server_address[1]}"
        storage = s3_storage(endpoint, "throttled", max_attempts=3)
        began = time.monotonic()
        with pytest.raises(RemoteStorageError) as info:
            storage.fetch_index(segment_metadata(), IndexType.OFFSET)
        assert info.value.retriable is True
        assert _AlwaysSlowDown.requests == 3  # botocore retried: the retry config is in effect
        # Each attempt is a request (and billed), each failed.
        assert storage.requests.snapshot()[:2] == ({"GET": 3}, {"GET": 3})
        assert time.monotonic() - began < 10
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def test_missing_bucket_is_not_retriable_and_not_a_missing_segment(s3_endpoint):
    storage = s3_storage(s3_endpoint, "no-such-bucket-here")
    with pytest.raises(RemoteStorageError) as info:
        storage.fetch_log_segment(segment_metadata(), 0)
    assert info.value.retriable is False
    assert not isinstance(info.value, RemoteResourceNotFoundError)


def test_custom_metadata_codec():
    location = SegmentLocation("a/b", 12345)
    blob = location.encode()
    assert blob == b"\x01" + (12345).to_bytes(8, "big") + (3).to_bytes(2, "big") + b"a/b"
    assert SegmentLocation.decode(blob) == location
    assert SegmentLocation.decode(SegmentLocation("", 0).encode()) == SegmentLocation("", 0)
    for bad in [b"", b"\x02" + blob[1:], blob[:5], blob + b"x"]:
        with pytest.raises(RemoteStorageError):
            SegmentLocation.decode(bad)


def test_a_throttling_store_gets_the_rate_it_allows_not_a_retry_storm(s3_endpoint, bucket):
    """Eight threads read as fast as they can from a store that answers SlowDown above 20 requests
    a second: the client slows down to that rate (botocore's adaptive mode) and every read succeeds.
    With the standard mode, as measured: 26-28 requests a second, a quarter of them throttled."""
    relay = FaultyRelay(s3_endpoint)
    try:
        storage = s3_storage(relay.endpoint, bucket, "hot", max_attempts=10)
        metadata, data = segment_metadata(), segment_data()
        storage.copy_log_segment_data(metadata, data)
        relay.max_requests_per_s = 20
        began = time.monotonic()
        stop = began + 10
        outcomes: list[bool] = []

        def read() -> None:
            while time.monotonic() < stop:
                outcomes.append(storage.fetch_index(metadata, IndexType.OFFSET) == data.offset_index)

        threads = [threading.Thread(target=read) for _ in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60)
        rate, throttled = relay.rate_since(began + 6)  # once settled
        assert outcomes and all(outcomes)  # every read succeeded, none came back wrong
        assert rate <= 25 and throttled <= 0.1, (rate, throttled)
        _, failures, _, _ = storage.requests.snapshot()
        assert failures.get("GET", 0) > 0  # it was throttled, and the counters (metrics) say so
    finally:
        relay.close()


def test_prefix_too_long_for_the_metadata_limit_is_a_config_error():
    with pytest.raises(ValueError, match="custom metadata"):
        S3Storage("bkt", "p" * 109, client=object())
    # 20 + 108 = 128 fits: the form a sealed segment records, which any topic may ask for
    # (remote.storage.compression.type)
    S3Storage("bkt", "p" * 108, client=object())


def test_s3_uri_parsing():
    storage = storage_from_uri(
        "s3://my-bucket/tiered/prefix/?endpoint_url=http://127.0.0.1:9/&region=eu-west-1",
        **{"remote.log.storage.s3.max.attempts": "2", "unrelated.key": "x"},
    )
    assert isinstance(storage, S3Storage)
    assert (storage.bucket, storage.prefix) == ("my-bucket", "tiered/prefix")
    assert storage.client.meta.endpoint_url == "http://127.0.0.1:9/"
    assert storage.client.meta.region_name == "eu-west-1"

    bare = storage_from_uri("s3://my-bucket", **{"remote.log.storage.s3.endpoint.url": "http://localhost:1"})
    assert isinstance(bare, S3Storage) and bare.prefix == ""
    assert bare.client.meta.endpoint_url == "http://localhost:1"


@pytest.mark.parametrize(
    "uri",
    [
        "s3://",
        "s3:///prefix",
        "s3://Bad_Bucket/x",
        "s3://bkt/x?foo=1",
        "s3://bkt/x?endpoint_url=ftp://host",
        "s3://bkt/x?region=a&region=b",
        "s3://bkt/a//b",
        "s3://bkt/x#frag",
    ],
)
def test_bad_s3_uris(uri):
    with pytest.raises(ValueError):
        storage_from_uri(uri)


def test_retry_mode_is_adaptive_unless_set_and_a_wrong_one_is_named():
    assert storage_from_uri("s3://bkt/p").client.meta.config.retries["mode"] == "adaptive"
    standard = storage_from_uri("s3://bkt/p", **{"remote.log.storage.s3.retry.mode": "standard"})
    assert standard.client.meta.config.retries["mode"] == "standard"
    with pytest.raises(ValueError, match="remote.log.storage.s3.retry.mode=legacy: expected one of adaptive, standard"):
        storage_from_uri("s3://bkt/p", **{"remote.log.storage.s3.retry.mode": "legacy"})


def test_storage_from_uri_round_trip(s3_endpoint, bucket):
    storage = storage_from_uri(
        f"s3://{bucket}/from-uri?endpoint_url={s3_endpoint}&region={REGION}",
        **{
            "remote.log.storage.s3.access.key.id": DUMMY_CREDENTIALS["aws_access_key_id"],
            "remote.log.storage.s3.secret.access.key": DUMMY_CREDENTIALS["aws_secret_access_key"],
        },
    )
    metadata = segment_metadata()
    storage.copy_log_segment_data(metadata, LogSegmentData(b"hello", b"", b"", None, b""))
    assert storage.fetch_log_segment(metadata, 1, 3) == b"ell"
    assert all(k.startswith("from-uri/") for k in all_keys(s3_endpoint, bucket))


def test_a_sealed_segment_goes_up_in_parts_as_it_is_sealed(s3_endpoint, bucket, tmp_path):
    """Sealed at rest, a segment over the multipart threshold is uploaded part by part while it is
    encrypted (never held whole twice), and reads back exactly, whole and across part ends."""
    from protocol.records import Record, build_batch
    from tiering.storage.at_rest import AtRest
    from tiering.storage.key_ring import PemKeyRing, key_block

    (tmp_path / "ring.pem").write_text(key_block("k1"))
    at_rest = AtRest(PemKeyRing(tmp_path / "ring.pem", "k1"), "zstd", chunk_size=1 * MiB)
    storage = s3_storage(s3_endpoint, bucket, "sealed", multipart_threshold=5 * MiB, part_size=5 * MiB,
                         at_rest=at_rest)
    sent: list[str] = []
    storage.client.meta.events.register("before-send.s3", lambda event_name, **_: sent.append(
        event_name.rsplit(".", 1)[-1]))
    # Uncompressed batches: 6 MiB of random values (kept raw), then 6 MiB that zstd shrinks.
    log = b"".join(build_batch([Record(o, 0, None, os.urandom(1024) if o < 6144 else b"compressible " * 80, [])],
                               base_offset=o) for o in range(12288))
    metadata = segment_metadata()
    metadata = dataclasses.replace(metadata, custom_metadata=storage.copy_log_segment_data(
        metadata, segment_data(log=log)))
    assert sent.count("UploadPart") == 2 and sent.count("CompleteMultipartUpload") == 1
    assert sent[-1] == "PutObject"  # the envelope, last: the mark of a complete copy
    location = SegmentLocation.decode(metadata.custom_metadata or b"")
    assert location.sealed and location.stored_bytes < location.logical_bytes - 5 * MiB
    assert storage.fetch_log_segment(metadata, 0) == log
    assert storage.fetch_log_segment(metadata, 5 * MiB - 10, 5 * MiB + 10) == log[5 * MiB - 10:5 * MiB + 11]
    storage.delete_log_segment_data(metadata)
    assert not all_keys(s3_endpoint, bucket)
    storage.close()
