"""Segments as objects in an S3 bucket (``s3://bucket/prefix`` URIs): :class:`S3Storage`, and the
boto3 client it makes (:func:`make_s3_client`)."""

from __future__ import annotations

import itertools
import logging
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Any

import boto3
import botocore.config
import botocore.exceptions

from tiering.model import RemoteLogSegmentMetadata
from tiering.storage.api import (
    CUSTOM_METADATA_MAX_BYTES_CONFIG,
    DEFAULT_CUSTOM_METADATA_MAX_BYTES,
    RemoteResourceNotFoundError,
    RemoteStorageError,
)
from tiering.storage.at_rest import AtRest
from tiering.storage.object_layout import ObjectStorage
from tiering.storage.segment_location import SegmentLocation

log = logging.getLogger(__name__)

MiB = 1024 * 1024
# botocore's retry modes: both retry throttling, server errors and lost connections with jittered
# exponential backoff; "adaptive" also slows the client's request rate when the store throttles
# (SlowDown, 429): the rate drops multiplicatively at each throttling answer and climbs back along
# a cubic curve, shared by every thread of the client, so that prefetching and copying threads do
# not keep knocking at a store that said slow down.
RETRY_MODES = ("adaptive", "standard")


# Error codes after which the same request may well succeed later. botocore has already retried
# them within max_attempts; whether to go on is the caller's call, hence the flag.
_RETRIABLE_S3_CODES = frozenset(
    {
        "SlowDown",
        "Throttling",
        "ThrottlingException",
        "RequestLimitExceeded",
        "TooManyRequestsException",
        "RequestTimeout",
        "InternalError",
        "ServiceUnavailable",
        "OperationAborted",
    }
)
_NOT_FOUND_S3_CODES = frozenset({"NoSuchKey", "404", "NotFound"})


def _is_retriable_client_error(error: botocore.exceptions.ClientError) -> bool:
    status = error.response.get("ResponseMetadata", {}).get("HTTPStatusCode") or 0
    return (
        error.response.get("Error", {}).get("Code") in _RETRIABLE_S3_CODES or status == 429 or status >= 500
    )


@contextmanager
def _s3_errors(what: str, bucket: str, key: str) -> Iterator[None]:
    where = f"s3://{bucket}/{key}"
    try:
        yield
    except botocore.exceptions.ClientError as e:
        code = e.response.get("Error", {}).get("Code")
        if code in _NOT_FOUND_S3_CODES:
            raise RemoteResourceNotFoundError(f"{what}: {where} not found") from None
        raise RemoteStorageError(f"{what} {where}: {e}", retriable=_is_retriable_client_error(e)) from e
    except (
        botocore.exceptions.ConnectionError,  # refused, DNS, connect timeout
        botocore.exceptions.HTTPClientError,  # read timeout, connection closed, body stream broken
        botocore.exceptions.IncompleteReadError,
    ) as e:
        raise RemoteStorageError(f"{what} {where}: {e}", retriable=True) from e
    except botocore.exceptions.BotoCoreError as e:  # credentials, parameter validation, ...
        raise RemoteStorageError(f"{what} {where}: {e}", retriable=False) from e


def make_s3_client(
    *,
    endpoint_url: str | None = None,
    region: str | None = None,
    max_attempts: int = 5,
    retry_mode: str = "adaptive",
    connect_timeout: float = 5.0,
    read_timeout: float = 30.0,
    access_key_id: str | None = None,
    secret_access_key: str | None = None,
) -> Any:
    """A boto3 S3 client with botocore's ``retry_mode`` (RETRY_MODES): up to ``max_attempts``
    requests in all, with jittered exponential backoff (up to 1 s, 2 s, 4 s, ... capped at 20 s) on
    throttling, 5xx and connection errors. Credentials default to boto3's usual chain."""
    config = botocore.config.Config(
        # botocore's "max_attempts" counts retries only (N + 1 requests); "total_max_attempts"
        # counts the first request too, which is what our max_attempts means.
        retries={"mode": retry_mode, "total_max_attempts": max_attempts},
        connect_timeout=connect_timeout,
        read_timeout=read_timeout,
        # Connections kept open for reuse: room for every reader, prefetch and copier thread at once
        # (botocore's 10 made urllib3 discard connections, and open new ones, under a backfill).
        max_pool_connections=64,
        # Custom endpoints (MinIO, SeaweedFS, Ceph) rarely resolve bucket subdomains.
        s3={"addressing_style": "path"} if endpoint_url else None,
        # Every upload carries a CRC32 of its bytes (x-amz-checksum-crc32), which the store checks
        # before storing (400 BadDigest otherwise); a GET that returns a checksum is checked
        # against it. botocore's defaults since 1.36, said here so that no default can drop them.
        request_checksum_calculation="when_supported",
        response_checksum_validation="when_supported",
    )
    session = boto3.session.Session()
    return session.client(
        "s3",
        endpoint_url=endpoint_url,
        region_name=region,
        aws_access_key_id=access_key_id,
        aws_secret_access_key=secret_access_key,
        config=config,
    )


# S3 operations by the request class object stores bill them in.
_REQUEST_KINDS = {
    "GetObject": "GET", "HeadObject": "GET",
    "PutObject": "PUT", "CreateMultipartUpload": "PUT", "UploadPart": "PUT", "CompleteMultipartUpload": "PUT",
    "DeleteObject": "DELETE", "DeleteObjects": "DELETE", "AbortMultipartUpload": "DELETE",
    "ListObjectsV2": "LIST", "ListObjects": "LIST", "ListMultipartUploads": "LIST", "ListParts": "LIST",
}


def _request_kind(event_name: str) -> str:
    operation = event_name.rsplit(".", 1)[-1]
    return _REQUEST_KINDS.get(operation, operation)


class S3Storage(ObjectStorage):
    """Segments as objects in an S3 bucket (``s3://bucket/prefix`` URIs).

    Objects above ``multipart_threshold`` bytes go up in ``part_size`` parts (aborted on failure);
    ``.log`` reads are ranged GETs. Each copy returns an :class:`SegmentLocation` blob as KIP-917
    custom metadata, and fetch and delete use the prefix (and key salt) recorded there, so changing
    the prefix or salting configuration does not orphan segments copied before.
    """

    def __init__(
        self,
        bucket: str,
        prefix: str = "",
        *,
        endpoint_url: str | None = None,
        region: str | None = None,
        client: Any = None,
        multipart_threshold: int = 8 * MiB,
        part_size: int = 8 * MiB,
        max_attempts: int = 5,
        retry_mode: str = "adaptive",
        access_key_id: str | None = None,
        secret_access_key: str | None = None,
        custom_metadata_max_bytes: int = DEFAULT_CUSTOM_METADATA_MAX_BYTES,
        at_rest: AtRest | None = None,
        server_side_encryption: str | None = None,
        sse_kms_key_id: str | None = None,
        salt_length: int = 0,
    ) -> None:
        super().__init__(prefix, custom_metadata_max_bytes=custom_metadata_max_bytes, at_rest=at_rest,
                         salt_length=salt_length)
        if not bucket:
            raise ValueError("an S3 bucket name is required")
        # S3 rejects parts under 5 MiB (except the last) and uploads over 10,000 parts.
        if part_size < 5 * MiB:
            raise ValueError(f"part_size must be at least 5 MiB, got {part_size}")
        if multipart_threshold < 1:
            raise ValueError(f"multipart_threshold must be positive, got {multipart_threshold}")
        if max_attempts < 1:
            raise ValueError(f"max_attempts must be >= 1, got {max_attempts}")
        size = SegmentLocation.encoded_size(self.prefix)
        if size > custom_metadata_max_bytes:
            # Fail at configuration time rather than on (and after) every copy.
            raise ValueError(
                f"prefix {self.prefix!r} needs {size} bytes of custom metadata, over the "
                f"{custom_metadata_max_bytes} allowed by {CUSTOM_METADATA_MAX_BYTES_CONFIG}"
            )
        self.bucket = bucket
        # What the store does at rest on its side (SSE-S3 "AES256", SSE-KMS "aws:kms"), sent with
        # every write; reads need nothing (the store decrypts for whoever may read).
        self._write_args: dict[str, str] = {}
        if server_side_encryption:
            self._write_args["ServerSideEncryption"] = server_side_encryption
        if sse_kms_key_id:
            if server_side_encryption != "aws:kms":
                raise ValueError("an SSE-KMS key id needs server-side encryption aws:kms")
            self._write_args["SSEKMSKeyId"] = sse_kms_key_id
        self.multipart_threshold = multipart_threshold
        self.part_size = part_size
        self._owns_client = client is None
        self._client = client or make_s3_client(
            endpoint_url=endpoint_url,
            region=region,
            max_attempts=max_attempts,
            retry_mode=retry_mode,
            access_key_id=access_key_id,
            secret_access_key=secret_access_key,
        )
        if self._owns_client:
            # Every HTTP attempt is counted (botocore's retries included: each is billed), from
            # botocore's own events, so no request path can forget to. A client passed in may
            # serve others too: its requests are not counted here.
            events = self._client.meta.events
            events.register("before-send.s3", self._count_sent)
            events.register("needs-retry.s3", self._count_failed)

    def _count_sent(self, event_name: str, **_: Any) -> None:
        self.requests.sent(_request_kind(event_name))

    def _count_failed(self, event_name: str, response: Any = None, caught_exception: Any = None, **_: Any) -> None:
        """After each attempt: a server error, throttling or no answer is a failure (a 404 is an answer)."""
        status = response[0].status_code if response is not None else None
        if caught_exception is not None or (status is not None and (status >= 500 or status == 429)):
            self.requests.failed(_request_kind(event_name))

    @property
    def client(self) -> Any:
        return self._client

    def _prefix_for(self, metadata: RemoteLogSegmentMetadata) -> str:
        if metadata.custom_metadata is None:
            return self.prefix  # copied by something that recorded nothing: assume the current layout
        return SegmentLocation.decode(metadata.custom_metadata).prefix

    def _custom_metadata(self, prefix: str, stored_bytes: int, logical_bytes: int | None,
                         salt: str = "") -> bytes | None:
        if logical_bytes is None:
            return SegmentLocation(prefix, stored_bytes, salt=salt).encode()
        return SegmentLocation(prefix, stored_bytes, True, logical_bytes, salt).encode()

    def _put(self, key: str, body: bytes | memoryview) -> None:
        if len(body) > self.multipart_threshold:
            view = memoryview(body)
            self._put_multipart(key, (bytes(view[o:o + self.part_size]) for o in range(0, len(view), self.part_size)))
            return
        with _s3_errors("put", self.bucket, key):
            self._client.put_object(Bucket=self.bucket, Key=key, Body=bytes(body), **self._write_args)

    def _put_chunks(self, key: str, chunks: Iterable[bytes | memoryview]) -> int:
        """One PUT for an object within the multipart threshold; above it, parts uploaded as the
        pieces fill them, so at most a part is held."""
        pieces = iter(chunks)
        head = bytearray()
        for piece in pieces:
            head += piece
            if len(head) > self.multipart_threshold:
                return self._put_multipart(key, self._parts(head, pieces))
        self._put(key, head)
        return len(head)

    def _parts(self, buffer: bytearray, pieces: Iterator[bytes | memoryview]) -> Iterator[bytes]:
        for piece in itertools.chain((b"",), pieces):
            buffer += piece
            while len(buffer) >= self.part_size:
                yield bytes(buffer[:self.part_size])
                del buffer[:self.part_size]
        if buffer:
            yield bytes(buffer)

    def _put_multipart(self, key: str, parts_of_body: Iterable[bytes]) -> int:
        """Uploads the parts in order; returns the object's size."""
        with _s3_errors("create multipart upload", self.bucket, key):
            upload_id = self._client.create_multipart_upload(Bucket=self.bucket, Key=key, **self._write_args)["UploadId"]
        size = 0
        try:
            parts = []
            for number, body in enumerate(parts_of_body, start=1):
                size += len(body)
                with _s3_errors(f"upload part {number}", self.bucket, key):
                    response = self._client.upload_part(
                        Bucket=self.bucket, Key=key, UploadId=upload_id, PartNumber=number, Body=body,
                    )
                part = {"PartNumber": number, "ETag": response["ETag"]}
                # If botocore asked for per-part checksums (its default), S3 wants them listed again.
                part.update(
                    {k: v for k, v in response.items() if k.startswith("Checksum") and k != "ChecksumType"}
                )
                parts.append(part)
            with _s3_errors("complete multipart upload", self.bucket, key):
                self._client.complete_multipart_upload(
                    Bucket=self.bucket, Key=key, UploadId=upload_id, MultipartUpload={"Parts": parts}
                )
        except BaseException:
            # Unfinished uploads are billed until aborted.
            try:
                self._client.abort_multipart_upload(Bucket=self.bucket, Key=key, UploadId=upload_id)
            except Exception:
                log.warning("could not abort multipart upload %s of s3://%s/%s", upload_id, self.bucket, key)
            raise
        return size

    def _get(self, key: str) -> bytes:
        with _s3_errors("get", self.bucket, key):
            response = self._client.get_object(Bucket=self.bucket, Key=key)
            return response["Body"].read()

    def _get_range(self, key: str, start: int, end: int | None) -> bytes:
        wanted = f"bytes={start}-" if end is None else f"bytes={start}-{end}"
        with _s3_errors("get", self.bucket, key):
            try:
                response = self._client.get_object(Bucket=self.bucket, Key=key, Range=wanted)
            except botocore.exceptions.ClientError as e:
                if e.response.get("Error", {}).get("Code") == "InvalidRange":
                    return b""  # start at or past the end (or an empty object)
                raise
            body = response["Body"].read()
        if "ContentRange" not in response:
            # A store that ignores Range sends the whole object; cut the range out ourselves.
            return body[start : None if end is None else end + 1]
        return body

    def _delete_keys(self, keys: list[str]) -> None:
        # One request for up to 1000 keys; deleting an absent key counts as success in S3.
        for offset in range(0, len(keys), 1000):
            batch = keys[offset : offset + 1000]
            with _s3_errors("delete", self.bucket, batch[0]):
                response = self._client.delete_objects(
                    Bucket=self.bucket, Delete={"Objects": [{"Key": k} for k in batch], "Quiet": True}
                )
            errors = response.get("Errors") or []
            if errors:
                first = errors[0]
                raise RemoteStorageError(
                    f"delete s3://{self.bucket}/{first.get('Key')}: {first.get('Code')} {first.get('Message')}"
                    + (f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""),
                    retriable=any(err.get("Code") in _RETRIABLE_S3_CODES for err in errors),
                )

    def _list(self, start: str) -> tuple[list[str], list[str]]:
        keys: list[str] = []
        directories: list[str] = []
        pages = self._client.get_paginator("list_objects_v2").paginate(Bucket=self.bucket, Prefix=start, Delimiter="/")
        with _s3_errors("list", self.bucket, start):
            for page in pages:  # one LIST request per 1,000 names
                keys.extend(item["Key"] for item in page.get("Contents") or ())
                directories.extend(item["Prefix"] for item in page.get("CommonPrefixes") or ())
        return keys, directories

    def _close(self) -> None:
        super()._close()
        if self._owns_client:
            self._client.close()

