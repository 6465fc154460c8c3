"""The remote store a URI names (:func:`storage_from_uri`), and the ``remote.log.storage.s3.*``
keys it reads."""

from __future__ import annotations

import re
import urllib.parse
from collections.abc import Mapping
from pathlib import Path

from tiering.storage.api import (
    CUSTOM_METADATA_MAX_BYTES_CONFIG,
    DEFAULT_CUSTOM_METADATA_MAX_BYTES,
    RemoteStorageManager,
)
from tiering.storage.at_rest import AtRest
from tiering.storage.local_folder import LocalFolderStorage
from tiering.storage.object_layout import salt_length_from_config
from tiering.storage.s3 import RETRY_MODES, MiB, S3Storage

# Our own keys, in the remote.log.storage.* namespace KIP-405 leaves to the storage plugin.
S3_ENDPOINT_URL_CONFIG = "remote.log.storage.s3.endpoint.url"
S3_REGION_CONFIG = "remote.log.storage.s3.region"
S3_MAX_ATTEMPTS_CONFIG = "remote.log.storage.s3.max.attempts"
S3_MULTIPART_THRESHOLD_CONFIG = "remote.log.storage.s3.multipart.threshold.bytes"
S3_PART_SIZE_CONFIG = "remote.log.storage.s3.multipart.part.size.bytes"
S3_ACCESS_KEY_ID_CONFIG = "remote.log.storage.s3.access.key.id"
S3_SECRET_ACCESS_KEY_CONFIG = "remote.log.storage.s3.secret.access.key"
S3_RETRY_MODE_CONFIG = "remote.log.storage.s3.retry.mode"
S3_SSE_CONFIG = "remote.log.storage.s3.server.side.encryption"
S3_SSE_KMS_KEY_ID_CONFIG = "remote.log.storage.s3.sse.kms.key.id"
SSE_TYPES = ("AES256", "aws:kms")


_BUCKET_RE = re.compile(r"[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]")


def _int_config(config: Mapping[str, object], key: str, default: int) -> int:
    value = config.get(key)
    if value is None:
        return default
    try:
        return int(value)  # type: ignore[call-overload]
    except (TypeError, ValueError):
        raise ValueError(f"{key} must be an integer, got {value!r}") from None


def storage_from_uri(uri: str, **config: object) -> RemoteStorageManager:
    """A storage manager for ``uri``:

    - ``file:///absolute/path`` (``file://localhost/...`` and ``file:/...`` too): LocalFolderStorage.
    - ``s3://bucket/optional/prefix?endpoint_url=...&region=...``: S3Storage. The query parameters
      are optional and override the ``remote.log.storage.s3.*`` config keys.

    ``config`` holds Kafka-style properties (values may be strings), e.g.
    ``storage_from_uri(uri, **props)``; keys that do not concern storage are ignored.
    """
    parts = urllib.parse.urlsplit(uri)
    at_rest = AtRest.from_config(config)
    max_bytes = _int_config(config, CUSTOM_METADATA_MAX_BYTES_CONFIG, DEFAULT_CUSTOM_METADATA_MAX_BYTES)
    salt_length = salt_length_from_config(config)
    if parts.fragment:
        raise ValueError(f"storage URI {uri!r} must not have a fragment")
    if parts.scheme == "file":
        if parts.netloc not in ("", "localhost"):
            raise ValueError(f"file URI {uri!r} names a remote host; use file:///absolute/path")
        if parts.query:
            raise ValueError(f"file URI {uri!r} takes no query parameters")
        path = urllib.parse.unquote(parts.path)
        if not path.startswith("/"):
            raise ValueError(f"file URI {uri!r} needs an absolute path: file:///absolute/path")
        return LocalFolderStorage(Path(path), custom_metadata_max_bytes=max_bytes, at_rest=at_rest,
                                  salt_length=salt_length)
    if parts.scheme == "s3":
        bucket = parts.netloc
        if not _BUCKET_RE.fullmatch(bucket):
            raise ValueError(f"S3 URI {uri!r} needs a valid bucket name: s3://bucket/prefix")
        try:
            query = urllib.parse.parse_qs(
                parts.query, keep_blank_values=True, strict_parsing=bool(parts.query)
            )
        except ValueError:
            raise ValueError(f"S3 URI {uri!r} has a malformed query") from None
        unknown = set(query) - {"endpoint_url", "region"}
        if unknown:
            raise ValueError(
                f"S3 URI {uri!r} has unknown parameters {sorted(unknown)}; known: endpoint_url, region"
            )
        if any(len(values) > 1 for values in query.values()):
            raise ValueError(f"S3 URI {uri!r} repeats a parameter")
        endpoint = query.get("endpoint_url", [None])[0] or config.get(S3_ENDPOINT_URL_CONFIG) or None
        region = query.get("region", [None])[0] or config.get(S3_REGION_CONFIG) or None
        if endpoint is not None and urllib.parse.urlsplit(str(endpoint)).scheme not in ("http", "https"):
            raise ValueError(f"S3 endpoint {endpoint!r} must be an http:// or https:// URL")
        access_key = config.get(S3_ACCESS_KEY_ID_CONFIG)
        secret_key = config.get(S3_SECRET_ACCESS_KEY_CONFIG)
        if (access_key is None) != (secret_key is None):
            raise ValueError(
                f"set both or neither of {S3_ACCESS_KEY_ID_CONFIG} and {S3_SECRET_ACCESS_KEY_CONFIG}"
            )
        retry_mode = str(config.get(S3_RETRY_MODE_CONFIG) or "adaptive")
        if retry_mode not in RETRY_MODES:
            raise ValueError(f"{S3_RETRY_MODE_CONFIG}={retry_mode}: expected one of {', '.join(RETRY_MODES)}")
        sse = str(config.get(S3_SSE_CONFIG) or "") or None
        if sse is not None and sse not in SSE_TYPES:
            raise ValueError(f"{S3_SSE_CONFIG}={sse}: expected AES256 (SSE-S3) or aws:kms (SSE-KMS)")
        kms_key = str(config.get(S3_SSE_KMS_KEY_ID_CONFIG) or "") or None
        if kms_key is not None and sse != "aws:kms":
            raise ValueError(f"{S3_SSE_KMS_KEY_ID_CONFIG} needs {S3_SSE_CONFIG}=aws:kms")
        return S3Storage(
            bucket,
            urllib.parse.unquote(parts.path),
            endpoint_url=None if endpoint is None else str(endpoint),
            region=None if region is None else str(region),
            multipart_threshold=_int_config(config, S3_MULTIPART_THRESHOLD_CONFIG, 8 * MiB),
            part_size=_int_config(config, S3_PART_SIZE_CONFIG, 8 * MiB),
            max_attempts=_int_config(config, S3_MAX_ATTEMPTS_CONFIG, 5),
            retry_mode=retry_mode,
            access_key_id=None if access_key is None else str(access_key),
            secret_access_key=None if secret_key is None else str(secret_key),
            custom_metadata_max_bytes=max_bytes,
            at_rest=at_rest,
            server_side_encryption=sse,
            sse_kms_key_id=kms_key,
            salt_length=salt_length,
        )
    raise ValueError(f"unsupported storage URI {uri!r}: expected file:///absolute/path or s3://bucket/prefix")
