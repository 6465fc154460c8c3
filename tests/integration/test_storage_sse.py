"""Server-side encryption (``remote.log.storage.s3.server.side.encryption``, ``...sse.kms.key.id``)
against a real S3 server (SeaweedFS): segments copied with SSE-S3 or SSE-KMS are stored encrypted,
read back byte-exact (whole, ranged, across multipart part boundaries), and the store reports the
encryption on every object; what SeaweedFS refuses, and bad values the configuration refuses.

The stock gateways (``s3_endpoint``) can encrypt nothing: SeaweedFS needs a key for SSE-S3 and a KMS
for SSE-KMS, and answers 500 InternalError without them. The tests that encrypt therefore run on a
gateway of their own over the session's store with both (:class:`EncryptingGateway`).
tests/UPSTREAMS.md says what SeaweedFS supports.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import botocore.exceptions
import pytest

from tests.integration.s3_server import (
    DUMMY_CREDENTIALS,
    REGION,
    S3Gateway,
    SeaweedFS,
    new_bucket,
    s3_client,
)
from tests.integration.test_storage_s3 import all_keys
from tests.unit.test_storage_local import expected_index, segment_data, segment_metadata
from tiering.model import IndexType, LogSegmentData, RemoteLogSegmentMetadata
from tiering.storage.api import RemoteStorageError
from tiering.storage.s3 import MiB, S3Storage
from tiering.storage.uri import storage_from_uri

SSE = "remote.log.storage.s3.server.side.encryption"
KMS_KEY_ID = "remote.log.storage.s3.sse.kms.key.id"
# SeaweedFS's local KMS makes a key on first use of an id of 3-100 characters [A-Za-z0-9_/-] (so not
# an ARN); its keys live in the gateway's memory only.
KEY_ID = "tiering-test-key"
# SSE-S3's key: SeaweedFS derives its key-encryption key from ``s3.sse.key`` (security.toml, or
# WEED_S3_SSE_KEY in the environment), kept on no filer.
SSE_S3_SECRET = "tiering-tests-sse-s3-secret"
LOCAL_KMS = {"default_provider": "local", "providers": {"local": {"type": "local", "enableOnDemandCreate": True}}}
PART = 5 * MiB  # multipart threshold and part size of every store here: S3's smallest part


class EncryptingGateway(S3Gateway):
    """``weed s3`` over a :class:`SeaweedFS` that can encrypt: SSE-S3 with a key of the tests' (from
    its environment) and SSE-KMS with SeaweedFS's local KMS (a ``kms`` block in its ``-config``).
    Started as :meth:`S3Gateway.start` starts the stock one."""

    def __init__(self, store: SeaweedFS) -> None:
        super().__init__(store, 0)
        self.log = store.folder / f"s3-gateway-encrypting-{self.port}.log"
        self.config = store.folder / f"s3-encrypting-{self.port}.json"

    def gateway_config(self) -> dict[str, Any]:
        return {**super().gateway_config(), "kms": LOCAL_KMS}

    def environment(self) -> dict[str, str]:
        return {"WEED_S3_SSE_KEY": SSE_S3_SECRET}


@pytest.fixture(scope="module")
def sse_endpoint(seaweedfs: SeaweedFS) -> Iterator[str]:
    """An S3 endpoint over the session's store that can do SSE-S3 and SSE-KMS, for this module."""
    gateway = EncryptingGateway(seaweedfs)
    gateway.start()
    try:
        yield gateway.endpoint
    finally:
        gateway.stop()


def sse_storage(endpoint: str, bucket: str, prefix: str, **props: str) -> S3Storage:
    """An S3Storage as the proxy makes one: from its URI and properties, parts of 5 MiB."""
    storage = storage_from_uri(f"s3://{bucket}/{prefix}?endpoint_url={endpoint}&region={REGION}", **{
        "remote.log.storage.s3.access.key.id": DUMMY_CREDENTIALS["aws_access_key_id"],
        "remote.log.storage.s3.secret.access.key": DUMMY_CREDENTIALS["aws_secret_access_key"],
        "remote.log.storage.s3.multipart.threshold.bytes": str(PART),
        "remote.log.storage.s3.multipart.part.size.bytes": str(PART),
        "remote.log.storage.s3.max.attempts": "1",  # a refusal shows at once; nothing here is flaky
        **props,
    })
    assert isinstance(storage, S3Storage)
    return storage


def encryption(answer: dict[str, Any]) -> dict[str, str]:
    """What a HeadObject/GetObject answer says of the object's server-side encryption."""
    return {k: answer[k] for k in ("ServerSideEncryption", "SSEKMSKeyId") if k in answer}


@pytest.mark.parametrize(("props", "reported"), [
    pytest.param({}, {}, id="none"),
    pytest.param({SSE: "AES256"}, {"ServerSideEncryption": "AES256"}, id="sse-s3"),
    pytest.param({SSE: "aws:kms", KMS_KEY_ID: KEY_ID}, {"ServerSideEncryption": "aws:kms", "SSEKMSKeyId": KEY_ID},
                 id="sse-kms"),
])
def test_segments_are_stored_encrypted_and_read_back(sse_endpoint: str, s3_endpoint: str,
                                                     props: dict[str, str], reported: dict[str, str]) -> None:
    """A small segment and one whose .log goes up in two parts, copied with the configured
    encryption: read back byte-exact (whole, ranged, across the part boundary, every index), every
    object of both reported by HeadObject and every GET answer as encrypted as configured (nothing
    without the setting: the gateway encrypts nothing by default, so the header is the product's),
    unreadable through a gateway without the keys, and deleted as usual."""
    bucket = new_bucket(sse_endpoint)
    storage = sse_storage(sse_endpoint, bucket, "sse", **props)
    answers: list[dict[str, str]] = []
    storage.client.meta.events.register("after-call.s3.GetObject",
                                        lambda parsed, **_: answers.append(encryption(parsed)))
    small_metadata, small = segment_metadata(), segment_data()
    big_metadata, big = segment_metadata(start_offset=200), segment_data(log=os.urandom(PART + MiB))
    storage.copy_log_segment_data(small_metadata, small)
    storage.copy_log_segment_data(big_metadata, big)

    assert storage.fetch_log_segment(small_metadata, 0) == small.log
    assert storage.fetch_log_segment(small_metadata, 5, 9) == small.log[5:10]
    assert storage.fetch_log_segment(big_metadata, PART - 10, PART + 10) == big.log[PART - 10 : PART + 11]
    assert storage.fetch_log_segment(big_metadata, PART + 7) == big.log[PART + 7 :]
    assert storage.fetch_log_segment(big_metadata, 0) == big.log
    for index_type in IndexType:
        assert storage.fetch_index(small_metadata, index_type) == expected_index(small, index_type)
    assert answers == [reported] * (5 + len(IndexType))

    client = s3_client(sse_endpoint)
    keys = all_keys(sse_endpoint, bucket)
    assert len(keys) == 2 * (1 + len(IndexType))  # each segment: its .log and five indexes
    heads = {key: client.head_object(Bucket=bucket, Key=key) for key in keys}
    assert {key: encryption(head) for key, head in heads.items()} == {key: reported for key in keys}
    big_log = storage.object_key(big_metadata, "log")
    assert heads[big_log]["ETag"].strip('"').endswith("-2")  # multipart: 5 MiB + 1 MiB
    assert "Uploads" not in client.list_multipart_uploads(Bucket=bucket)

    # Encrypted at rest, not only labelled: a gateway without the keys reports the encryption
    # but cannot read the bytes.
    stock = s3_client(s3_endpoint)
    assert encryption(stock.head_object(Bucket=bucket, Key=big_log)) == reported
    if reported:
        with pytest.raises(botocore.exceptions.ClientError) as info:
            stock.get_object(Bucket=bucket, Key=big_log)
        assert info.value.response["Error"]["Code"] == "InternalError"
    else:
        assert stock.get_object(Bucket=bucket, Key=big_log)["Body"].read() == big.log

    storage.delete_log_segment_data(small_metadata)
    storage.delete_log_segment_data(big_metadata)
    assert all_keys(sse_endpoint, bucket) == set()
    storage.close()


def big_first_segment() -> LogSegmentData:
    """A segment whose first object (the offset index) goes up in parts."""
    data = segment_data()
    return LogSegmentData(data.log, os.urandom(PART + MiB), data.time_index, data.transaction_index,
                          data.leader_epoch_index, data.producer_snapshot)


def assert_copy_refused(storage: S3Storage, metadata: RemoteLogSegmentMetadata, data: LogSegmentData, step: str,
                        endpoint: str, bucket: str) -> list[str]:
    """The copy fails at ``step`` with the store's 500 InternalError and leaves no object behind;
    returns the keys of the multipart uploads still listed (aborted here)."""
    with pytest.raises(RemoteStorageError, match=rf"^{step} s3://.*InternalError"):
        storage.copy_log_segment_data(metadata, data)
    assert all_keys(endpoint, bucket) == set()
    client = s3_client(endpoint)
    uploads = client.list_multipart_uploads(Bucket=bucket).get("Uploads", [])
    for upload in uploads:
        client.abort_multipart_upload(Bucket=bucket, Key=upload["Key"], UploadId=upload["UploadId"])
    assert "Uploads" not in client.list_multipart_uploads(Bucket=bucket)
    return [upload["Key"] for upload in uploads]


def test_sse_kms_without_a_key_id_is_refused_by_seaweedfs(sse_endpoint: str) -> None:
    """SeaweedFS has no default KMS key (S3 would use its aws/s3 key): aws:kms without a key id is
    refused with 500 InternalError, a PutObject at once and a multipart upload at its first part
    (CreateMultipartUpload took the header, which the product does not send again with the parts)."""
    bucket = new_bucket(sse_endpoint)
    storage = sse_storage(sse_endpoint, bucket, "kms", **{SSE: "aws:kms"})
    assert assert_copy_refused(storage, segment_metadata(), segment_data(), "put", sse_endpoint, bucket) == []
    assert assert_copy_refused(storage, segment_metadata(), big_first_segment(), "upload part 1", sse_endpoint,
                               bucket) == []
    storage.close()


@pytest.mark.parametrize(("props", "multipart_refused_at", "orphaned"), [
    pytest.param({SSE: "AES256"}, "create multipart upload", True, id="sse-s3"),
    pytest.param({SSE: "aws:kms", KMS_KEY_ID: KEY_ID}, "upload part 1", False, id="sse-kms"),
])
def test_a_gateway_without_keys_refuses_encryption(s3_endpoint: str, props: dict[str, str],
                                                   multipart_refused_at: str, orphaned: bool) -> None:
    """The stock gateway (no SSE-S3 key, no KMS) refuses both with 500 InternalError rather than
    store in the clear: a PutObject at once; SSE-S3 multipart at CreateMultipartUpload, SSE-KMS at
    the first part. No object is left behind; but the refused SSE-S3 CreateMultipartUpload still
    leaves an upload listed, whose id the product never got and so cannot abort."""
    bucket = new_bucket(s3_endpoint)
    storage = sse_storage(s3_endpoint, bucket, "stock", **props)
    assert assert_copy_refused(storage, segment_metadata(), segment_data(), "put", s3_endpoint, bucket) == []
    metadata = segment_metadata()
    uploads = assert_copy_refused(storage, metadata, big_first_segment(), multipart_refused_at, s3_endpoint, bucket)
    assert uploads == ([storage.object_key(metadata, IndexType.OFFSET.value)] if orphaned else [])
    storage.close()


def test_seaweedfs_ignores_what_the_configuration_refuses(sse_endpoint: str, s3_endpoint: str) -> None:
    """Sent directly, an unknown encryption or a KMS key id without aws:kms is stored in the
    clear without a word (a gateway without keys reads it; and a key id with AES256 is dropped):
    only the configuration's own check (below) stands between a typo and unencrypted segments."""
    bucket = new_bucket(sse_endpoint)
    client = s3_client(sse_endpoint)
    client.put_object(Bucket=bucket, Key="typo", Body=b"x", ServerSideEncryption="aes")
    client.put_object(Bucket=bucket, Key="key-only", Body=b"x", SSEKMSKeyId=KEY_ID)
    client.put_object(Bucket=bucket, Key="aes-and-key", Body=b"x", ServerSideEncryption="AES256", SSEKMSKeyId=KEY_ID)
    assert encryption(client.head_object(Bucket=bucket, Key="typo")) == {}
    assert encryption(client.head_object(Bucket=bucket, Key="key-only")) == {}
    assert encryption(client.head_object(Bucket=bucket, Key="aes-and-key")) == {"ServerSideEncryption": "AES256"}
    stock = s3_client(s3_endpoint)
    assert [stock.get_object(Bucket=bucket, Key=key)["Body"].read() for key in ("typo", "key-only")] == [b"x", b"x"]


@pytest.mark.parametrize(("props", "message"), [
    pytest.param({SSE: "aes"}, f"{SSE}=aes: expected AES256 (SSE-S3) or aws:kms (SSE-KMS)", id="unknown"),
    pytest.param({SSE: "aws:KMS"}, f"{SSE}=aws:KMS: expected AES256", id="wrong-case"),
    pytest.param({KMS_KEY_ID: KEY_ID}, f"{KMS_KEY_ID} needs {SSE}=aws:kms", id="key-without-sse"),
    pytest.param({SSE: "AES256", KMS_KEY_ID: KEY_ID}, f"{KMS_KEY_ID} needs {SSE}=aws:kms", id="key-with-sse-s3"),
])
def test_bad_encryption_settings_are_refused(props: dict[str, str], message: str) -> None:
    """A value S3 does not know, or a KMS key id without aws:kms, is a configuration error that names
    the property, before any request."""
    with pytest.raises(ValueError) as info:
        storage_from_uri("s3://bkt/p?endpoint_url=http://127.0.0.1:9", **props)
    assert str(info.value).startswith(message)
