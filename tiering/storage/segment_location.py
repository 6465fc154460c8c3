"""Where a store put a segment and how, as it records it in the segment's KIP-917 custom metadata
(:class:`SegmentLocation`): the key prefix, so that a later change of the prefix configuration
orphans no segment; the salt its keys begin with, if any (``remote.log.storage.key.prefix.salt.length``,
``tiering.storage.object_layout``), so that turning salting on or off orphans none either; the
bytes stored and their logical size; and whether the objects are sealed (compressed or encrypted at
rest, ``tiering.storage.at_rest``), so that a reader knows to read the segment's envelope first.
The S3 store records it for every segment; the local-folder store only for sealed or salted ones
(before that it recorded nothing)."""

from __future__ import annotations

import dataclasses
import struct

from tiering.storage.api import RemoteStorageError

# KIP-917 blob, big-endian.
#   version 1 (segments in the clear, keys not salted):
#     u8 version, u64 bytes stored (all objects, as written), u16 length N, N bytes UTF-8 prefix
#   version 2 (sealed segments, keys not salted):
#     u8 version, u8 flags (bit 0: sealed), u64 bytes stored, u64 logical bytes, u16 N, N bytes prefix
#   version 3 (salted keys, sealed or not):
#     version 2's fields, then u8 length M, M bytes ASCII salt
# A segment whose keys are not salted is written as version 1 or 2, as before salting existed, so
# a proxy of an earlier version reads it; a salted one only this version reads (an earlier one
# refuses version 3 by its number rather than look for the segment under an unsalted key).
_V1 = struct.Struct(">BQH")
_V2 = struct.Struct(">BBQQH")
_SALT_LENGTH = struct.Struct(">B")
_SEALED = 0x01
VERSIONS = (1, 2, 3)


@dataclasses.dataclass(frozen=True)
class SegmentLocation:
    """What a store records about a copied segment in its custom metadata."""

    prefix: str
    stored_bytes: int
    sealed: bool = False
    logical_bytes: int = -1  # -1: as stored (in the clear)
    salt: str = ""  # the first directory of the segment's keys after the prefix ("": not salted)

    @property
    def logical(self) -> int:
        return self.stored_bytes if self.logical_bytes < 0 else self.logical_bytes

    def encode(self) -> bytes:
        prefix = self.prefix.encode("utf-8")
        if self.salt:
            salt = self.salt.encode("ascii")
            return (_V2.pack(3, _SEALED if self.sealed else 0, self.stored_bytes, self.logical, len(prefix)) + prefix
                    + _SALT_LENGTH.pack(len(salt)) + salt)
        if not self.sealed:
            return _V1.pack(1, self.stored_bytes, len(prefix)) + prefix
        return _V2.pack(2, _SEALED, self.stored_bytes, self.logical, len(prefix)) + prefix

    @classmethod
    def decode(cls, blob: bytes) -> SegmentLocation:
        version = blob[0] if blob else None
        layout = {1: _V1, 2: _V2, 3: _V2}.get(version)  # type: ignore[arg-type]
        if layout is None:
            raise RemoteStorageError(f"unknown segment custom metadata version in {blob[:1].hex() or 'empty blob'}")
        if len(blob) < layout.size:
            raise RemoteStorageError(f"truncated segment custom metadata ({len(blob)} bytes)")
        fields = layout.unpack_from(blob)
        end = layout.size + fields[-1]
        salt = ""
        if version == 3:
            if len(blob) < end + 1 or len(blob) != end + 1 + blob[end]:
                raise RemoteStorageError(f"segment custom metadata of {len(blob)} bytes does not match its "
                                         "prefix and salt lengths")
            try:
                salt = blob[end + 1:].decode("ascii")
            except UnicodeDecodeError:
                raise RemoteStorageError("segment custom metadata holds a salt that is not ASCII") from None
        elif len(blob) != end:
            raise RemoteStorageError(f"segment custom metadata of {len(blob)} bytes does not match its prefix length")
        prefix = blob[layout.size:end].decode("utf-8")
        if version == 1:
            return cls(prefix, fields[1])
        sealed = bool(fields[1] & _SEALED)
        return cls(prefix, fields[2], sealed, fields[3] if sealed else -1, salt)

    @staticmethod
    def encoded_size(prefix: str, sealed: bool = True, salt_length: int = 0) -> int:
        if salt_length:
            return _V2.size + len(prefix.encode("utf-8")) + _SALT_LENGTH.size + salt_length
        return (_V2 if sealed else _V1).size + len(prefix.encode("utf-8"))


def location(custom_metadata: bytes | None) -> SegmentLocation | None:
    """The location a store of ours recorded, or None where it recorded none (or the blob is not
    one of ours)."""
    if not custom_metadata or custom_metadata[0] not in VERSIONS:
        return None
    try:
        return SegmentLocation.decode(custom_metadata)
    except RemoteStorageError:
        return None


def stored_bytes(custom_metadata: bytes | None, segment_size_bytes: int) -> int:
    """What a segment takes in the remote tier, as its store recorded it (every object, indexes
    included); a segment whose store recorded nothing (in the clear, in a local folder) counts its
    data, stored as it is."""
    found = location(custom_metadata)
    return segment_size_bytes if found is None else found.stored_bytes


def is_sealed(custom_metadata: bytes | None) -> bool:
    """Whether a segment with this custom metadata was stored sealed."""
    if not custom_metadata or custom_metadata[0] not in (2, 3):
        return False
    return SegmentLocation.decode(custom_metadata).sealed
