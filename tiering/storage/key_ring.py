"""Key-encryption keys: what wraps each segment's data key (:class:`KeyEncryptionKeys`), a key-ring
file the operator provides (:class:`PemKeyRing`), and the place a KMS plugs in
(``remote.log.storage.encryption.kms.class``).

The key-ring file holds PEM blocks, one per key, each naming its key in a ``Key-Id`` header (the
RFC 1421 header style OpenSSL uses for ``DEK-Info``)::

    -----BEGIN TIERED STORAGE KEY-----
    Key-Id: kek-2026-11

    <base64 of 32 random bytes>
    -----END TIERED STORAGE KEY-----

``tiered-proxy keys generate --key-id NAME`` prints a new block to append.
"""

from __future__ import annotations

import base64
import binascii
import importlib
import os
import re
from abc import ABC, abstractmethod
from collections.abc import Mapping
from pathlib import Path

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

KEY_RING_FILE_CONFIG = "remote.log.storage.encryption.key.ring.file"
ACTIVE_KEY_ID_CONFIG = "remote.log.storage.encryption.key.id"
KMS_CLASS_CONFIG = "remote.log.storage.encryption.kms.class"

KEY_BYTES = 32  # AES-256
_PEM_LABEL = "TIERED STORAGE KEY"
_BLOCK = re.compile(rf"-----BEGIN {_PEM_LABEL}-----\n(.*?)-----END {_PEM_LABEL}-----", re.S)
_KEY_ID = re.compile(r"[A-Za-z0-9._:-]{1,128}")


class KeyUnavailableError(Exception):
    """A data key cannot be unwrapped: its key-encryption key is not in the ring, or is not the key
    that wrapped it."""


class KeyEncryptionKeys(ABC):
    """Wraps and unwraps data keys. ``active_key_id`` wraps every new data key; the others only
    unwrap. ``context`` names what the data key protects (a segment, an object), so a wrapped key
    moved to another object does not unwrap."""

    active_key_id: str

    @abstractmethod
    def key_ids(self) -> list[str]:
        """Every key this can unwrap with."""

    @abstractmethod
    def wrap(self, data_key: bytes, context: bytes) -> bytes:
        """``data_key`` wrapped by the active key."""

    @abstractmethod
    def unwrap(self, key_id: str, wrapped: bytes, context: bytes) -> bytes:
        """The data key; KeyUnavailableError if ``key_id`` is unknown or did not wrap it."""

    def describe(self) -> str:
        return f"{type(self).__name__} (active key {self.active_key_id})"


class PemKeyRing(KeyEncryptionKeys):
    """AES-256 key-encryption keys from a key-ring file; data keys wrapped with AES-GCM."""

    def __init__(self, path: Path | str, active_key_id: str) -> None:
        self.path = Path(path)
        self.keys = read_key_ring(self.path)
        if active_key_id not in self.keys:
            known = ", ".join(sorted(self.keys)) or "none"
            raise ValueError(f"{ACTIVE_KEY_ID_CONFIG}={active_key_id}: no such key in {self.path} (it holds: {known})")
        self.active_key_id = active_key_id

    def key_ids(self) -> list[str]:
        return sorted(self.keys)

    def wrap(self, data_key: bytes, context: bytes) -> bytes:
        nonce = os.urandom(12)
        return nonce + AESGCM(self.keys[self.active_key_id]).encrypt(nonce, data_key, _aad(self.active_key_id, context))

    def unwrap(self, key_id: str, wrapped: bytes, context: bytes) -> bytes:
        key = self.keys.get(key_id)
        if key is None:
            raise KeyUnavailableError(f"key {key_id} is not in the key ring {self.path}")
        try:
            return AESGCM(key).decrypt(wrapped[:12], wrapped[12:], _aad(key_id, context))
        except (InvalidTag, ValueError):
            raise KeyUnavailableError(
                f"key {key_id} in {self.path} did not wrap this data key (a different key under the same "
                "id, or the wrapped key was altered)") from None

    def describe(self) -> str:
        return f"key ring {self.path} ({len(self.keys)} keys, active {self.active_key_id})"


def _aad(key_id: str, context: bytes) -> bytes:
    return b"tiered-proxy data key|" + key_id.encode() + b"|" + context


def read_key_ring(path: Path) -> dict[str, bytes]:
    """The keys of a key-ring file by id; ValueError naming the file and block for anything amiss."""
    try:
        text = path.read_text("ascii")
    except FileNotFoundError:
        raise ValueError(f"{KEY_RING_FILE_CONFIG}: {path} does not exist") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ValueError(f"{KEY_RING_FILE_CONFIG}: cannot read {path}: {exc}") from None
    keys: dict[str, bytes] = {}
    for number, block in enumerate(_BLOCK.findall(text.replace("\r\n", "\n")), start=1):
        head, _, body = block.partition("\n\n")
        headers = dict(line.split(":", 1) for line in head.splitlines() if ":" in line)
        key_id = headers.get("Key-Id", "").strip()
        if not _KEY_ID.fullmatch(key_id):
            raise ValueError(f"{path}: key {number} needs a Key-Id header of letters, digits and . _ : - "
                             f"(got {key_id!r})")
        try:
            key = base64.b64decode("".join(body.split()), validate=True)
        except binascii.Error:
            raise ValueError(f"{path}: key {key_id} is not base64") from None
        if len(key) != KEY_BYTES:
            raise ValueError(f"{path}: key {key_id} has {len(key)} bytes; AES-256 needs {KEY_BYTES}")
        if key_id in keys:
            raise ValueError(f"{path}: key {key_id} appears twice")
        keys[key_id] = key
    if not keys:
        raise ValueError(f"{KEY_RING_FILE_CONFIG}: {path} holds no '-----BEGIN {_PEM_LABEL}-----' block")
    return keys


def key_block(key_id: str, key: bytes | None = None) -> str:
    """A key-ring PEM block for a new random key (or ``key``)."""
    if not _KEY_ID.fullmatch(key_id):
        raise ValueError(f"key id {key_id!r}: use letters, digits and . _ : - (at most 128)")
    body = base64.b64encode(os.urandom(KEY_BYTES) if key is None else key).decode()
    return f"-----BEGIN {_PEM_LABEL}-----\nKey-Id: {key_id}\n\n{body}\n-----END {_PEM_LABEL}-----\n"


def remove_key_block(path: Path, key_id: str) -> None:
    """Rewrites the key-ring file without ``key_id``'s block (atomically: a new file renamed over it)."""
    text = path.read_text("ascii")
    kept = [m.group(0) + "\n" for m in _BLOCK.finditer(text.replace("\r\n", "\n"))
            if _block_key_id(m.group(1)) != key_id]
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text("".join(kept), "ascii")
    os.chmod(tmp, path.stat().st_mode & 0o777)
    os.replace(tmp, path)


def _block_key_id(block: str) -> str:
    head = block.partition("\n\n")[0]
    return dict(line.split(":", 1) for line in head.splitlines() if ":" in line).get("Key-Id", "").strip()


def keys_from_config(config: Mapping[str, object]) -> KeyEncryptionKeys | None:
    """The key-encryption keys the configuration names, or None when encryption is off (no
    ``remote.log.storage.encryption.key.id`` and no KMS class). A KMS class is ``module:Class``,
    called with the whole configuration."""
    kms = config.get(KMS_CLASS_CONFIG)
    if kms:
        module_name, _, class_name = str(kms).partition(":")
        try:
            cls = getattr(importlib.import_module(module_name), class_name)
        except (ImportError, AttributeError, ValueError) as exc:
            raise ValueError(f"{KMS_CLASS_CONFIG}={kms}: cannot load it ({exc}); expected module:Class") from None
        keys = cls(config)
        if not isinstance(keys, KeyEncryptionKeys):
            raise ValueError(f"{KMS_CLASS_CONFIG}={kms} is not a tiering.storage.key_ring.KeyEncryptionKeys")
        return keys
    key_id = config.get(ACTIVE_KEY_ID_CONFIG)
    ring = config.get(KEY_RING_FILE_CONFIG)
    if not key_id:
        if ring:
            raise ValueError(f"{KEY_RING_FILE_CONFIG} is set but {ACTIVE_KEY_ID_CONFIG} is not: name the key "
                             "that wraps new segments' data keys")
        return None
    if not ring:
        raise ValueError(f"{ACTIVE_KEY_ID_CONFIG}={key_id} needs {KEY_RING_FILE_CONFIG} (or {KMS_CLASS_CONFIG})")
    return PemKeyRing(str(ring), str(key_id))
