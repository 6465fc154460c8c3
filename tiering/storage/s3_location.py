"""Where the S3 store put a segment, as it records it in the segment's KIP-917 custom metadata
(:class:`S3SegmentLocation`): the key prefix and the bytes stored, so that a later change of the
prefix configuration orphans no segment."""

from __future__ import annotations

import dataclasses
import struct

from tiering.storage.api import RemoteStorageError

# KIP-917 blob of S3Storage, version 1, big-endian:
#   u8  version (1)
#   u64 total bytes stored for the segment (all objects, as written)
#   u16 length N of the key prefix, then N bytes of UTF-8 prefix (normalized; empty = bucket root)
_S3_CUSTOM_METADATA_V1 = struct.Struct(">BQH")
S3_CUSTOM_METADATA_VERSION = 1


@dataclasses.dataclass(frozen=True)
class S3SegmentLocation:
    """What S3Storage records about a copied segment in its custom metadata."""

    prefix: str
    stored_bytes: int

    def encode(self) -> bytes:
        prefix = self.prefix.encode("utf-8")
        return (
            _S3_CUSTOM_METADATA_V1.pack(S3_CUSTOM_METADATA_VERSION, self.stored_bytes, len(prefix)) + prefix
        )

    @classmethod
    def decode(cls, blob: bytes) -> S3SegmentLocation:
        if not blob or blob[0] != S3_CUSTOM_METADATA_VERSION:
            raise RemoteStorageError(
                f"unknown S3 custom metadata version in {blob[:1].hex() or 'empty blob'}"
            )
        if len(blob) < _S3_CUSTOM_METADATA_V1.size:
            raise RemoteStorageError(f"truncated S3 custom metadata ({len(blob)} bytes)")
        _, stored, length = _S3_CUSTOM_METADATA_V1.unpack_from(blob)
        if len(blob) != _S3_CUSTOM_METADATA_V1.size + length:
            raise RemoteStorageError(
                f"S3 custom metadata of {len(blob)} bytes does not match its prefix length"
            )
        return cls(blob[_S3_CUSTOM_METADATA_V1.size :].decode("utf-8"), stored)

    @staticmethod
    def encoded_size(prefix: str) -> int:
        return _S3_CUSTOM_METADATA_V1.size + len(prefix.encode("utf-8"))

