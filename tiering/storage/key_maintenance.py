"""Key-encryption keys against the bucket: the check a proxy makes before it encrypts anything
(:func:`check_keys`), and the walks behind ``tiered-proxy keys``: which objects each key wraps
(:func:`key_usage`) and re-wrapping every data key under the active key (:func:`rewrap`).

The bucket keeps one small check object per key-encryption key (``_keys/{id}.check``): a data key
of zeros wrapped by it. A key ring whose key of that id does not unwrap it is not the ring the
bucket's data was written with, and the proxy refuses to start rather than write what it (or
another proxy) could not read back.

Re-wrapping rewrites segment envelopes (``.seal``) and sealed manifests, never a segment. It is
idempotent, so a run that stops is resumed by running it again, and safe beside running proxies:
an envelope keeps its data key and chunk tables, so a reader holding the old one reads on. A
manifest is re-wrapped only if it is still the one read (a proxy may have rewritten it meanwhile,
under the active key).
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor

from tiering.storage.api import RemoteResourceNotFoundError
from tiering.storage.at_rest import IntegrityError
from tiering.storage.key_ring import KeyUnavailableError
from tiering.storage.object_layout import SEAL_SUFFIX, ObjectStorage
from tiering.storage.sealed_format import (
    SealedFormatError,
    SegmentEnvelope,
    WrappedKey,
    decode_sealed_object,
    encode_sealed_object,
    is_sealed_object,
)

KEYS_DIRECTORY = "_keys"
_CHECK_CONTEXT = b"tiered-proxy key check"
_ZERO_KEY = bytes(32)
_THREADS = 8


def check_keys(storage: ObjectStorage, *, writes: bool = True) -> None:
    """Refuses (ValueError) a key ring that does not match the bucket's, or a bucket holding
    encrypted data with no key ring configured. A store this proxy ``writes`` gets the active
    key's check object the first time this key encrypts there, read back; a read replica's only
    has its checks read."""
    names, _ = storage.list_directory(KEYS_DIRECTORY)
    known = sorted(name[:-len(".check")] for name in names if name.endswith(".check"))
    keys = storage.at_rest.keys
    if keys is None:
        if known:
            raise ValueError(f"the remote tier holds data encrypted under keys {', '.join(known)}; configure the "
                             "key ring (remote.log.storage.encryption.key.ring.file and .key.id) to read it")
        return
    for key_id in known:
        if key_id in keys.key_ids():
            _verify(storage, key_id)
    if writes and keys.active_key_id not in known:
        storage._put(storage.key(_check_name(keys.active_key_id)), keys.wrap(_ZERO_KEY, _CHECK_CONTEXT))
        _verify(storage, keys.active_key_id)  # what was written reads back


def _verify(storage: ObjectStorage, key_id: str) -> None:
    keys = storage.at_rest.keys
    assert keys is not None
    blob = storage._get(storage.key(_check_name(key_id)))
    try:
        opened = keys.unwrap(key_id, blob, _CHECK_CONTEXT)
    except KeyUnavailableError:
        opened = None
    if opened != _ZERO_KEY:
        raise ValueError(f"key {key_id} of {keys.describe()} is not the key {key_id} this remote tier was "
                         f"encrypted with (its check object {storage.key(_check_name(key_id))} does not open): "
                         "a different key under the same id, or another cluster's key ring")


def _check_name(key_id: str) -> str:
    return f"{KEYS_DIRECTORY}/{key_id}.check"


def sealed_objects(storage: ObjectStorage) -> Iterator[str]:
    """Every segment envelope and manifest in the bucket (keys relative to the prefix)."""
    _, top = storage.list_directory("")
    for directory in top:
        if directory == KEYS_DIRECTORY:
            continue
        names, partitions = storage.list_directory(directory)
        yield from (f"{directory}/{n}" for n in names if n.endswith(".manifest"))
        for partition in partitions:
            if partition.isdigit():
                names, _ = storage.list_directory(f"{directory}/{partition}")
                yield from (f"{directory}/{partition}/{n}" for n in names
                            if n.endswith(f".{SEAL_SUFFIX}") or n.endswith(".manifest"))


def _context(relative: str) -> bytes:
    """What the object's data key is bound to: a segment's id, or a whole object's key."""
    if relative.endswith(f".{SEAL_SUFFIX}"):
        return relative.rsplit("/", 1)[-1][:-len(SEAL_SUFFIX) - 1].split("-", 1)[1].encode()
    return relative.encode()


def _key_of(storage: ObjectStorage, relative: str, blob: bytes) -> WrappedKey | None:
    if relative.endswith(f".{SEAL_SUFFIX}"):
        return storage.at_rest.open_envelope(blob, storage.key(relative)).key
    if is_sealed_object(blob):
        return decode_sealed_object(blob, storage.key(relative))[0]
    return None  # a manifest in the clear


@dataclasses.dataclass
class Walk:
    """What a walk over the bucket found and did."""

    objects: int = 0
    rewrapped: int = 0
    already: int = 0  # under the active key, or not encrypted
    gone: int = 0  # deleted while the walk ran
    failed: list[str] = dataclasses.field(default_factory=list)
    uses: dict[str, list[str]] = dataclasses.field(default_factory=dict)  # key id -> objects it wraps
    _lock: threading.Lock = dataclasses.field(default_factory=threading.Lock, repr=False)

    def count(self, what: str) -> None:
        with self._lock:
            setattr(self, what, getattr(self, what) + 1)

    def note(self, into: list[str], item: str) -> None:
        with self._lock:
            into.append(item)


def key_usage(storage: ObjectStorage, progress: Callable[[Walk], None] = lambda walk: None) -> Walk:
    """Which key wraps each envelope and manifest."""
    walk = Walk()

    def one(relative: str) -> None:
        try:
            key = _key_of(storage, relative, storage._get(storage.key(relative)))
        except RemoteResourceNotFoundError:
            walk.count("gone")
            return
        except (IntegrityError, SealedFormatError) as exc:
            walk.note(walk.failed, f"{relative}: {exc}")
            return
        if key is not None and key.encrypted:
            with walk._lock:
                walk.uses.setdefault(key.key_id, []).append(relative)

    _run(storage, one, walk, progress)
    return walk


def rewrap(storage: ObjectStorage, progress: Callable[[Walk], None] = lambda walk: None) -> Walk:
    """Re-wraps every data key not under the active key with it."""
    keys = storage.at_rest.keys
    if keys is None:
        raise ValueError("no key ring configured: nothing to re-wrap with")
    walk = Walk()

    def one(relative: str) -> None:
        key = storage.key(relative)
        try:
            blob = storage._get(key)
            current = _key_of(storage, relative, blob)
            if current is None or not current.encrypted or current.key_id == keys.active_key_id:
                walk.count("already")
                return
            context = _context(relative)
            data_key = keys.unwrap(current.key_id, current.wrapped, context)
            wrapped = WrappedKey(keys.active_key_id, keys.wrap(data_key, context))
            if relative.endswith(f".{SEAL_SUFFIX}"):
                storage._put(key, SegmentEnvelope.decode(blob, key).with_key(wrapped).encode())
            else:
                _, table, body = decode_sealed_object(blob, key)
                if storage._get(key) != blob:  # rewritten meanwhile by a proxy (under the active key)
                    walk.count("already")
                    return
                storage._put(key, encode_sealed_object(wrapped, table, [bytes(body)]))
            walk.count("rewrapped")
        except RemoteResourceNotFoundError:
            walk.count("gone")
        except (IntegrityError, SealedFormatError, KeyUnavailableError) as exc:
            walk.note(walk.failed, f"{relative}: {exc}")

    _run(storage, one, walk, progress)
    return walk


def _run(storage: ObjectStorage, one: Callable[[str], None], walk: Walk, progress: Callable[[Walk], None]) -> None:
    last = time.monotonic()
    with ThreadPoolExecutor(_THREADS, thread_name_prefix="key-walk") as pool:
        pending = []
        for relative in sealed_objects(storage):
            walk.objects += 1
            pending.append(pool.submit(one, relative))
            if len(pending) >= 4 * _THREADS:
                for future in pending:
                    future.result()
                pending.clear()
                if time.monotonic() - last >= 2:
                    progress(walk)
                    last = time.monotonic()
        for future in pending:
            future.result()
    progress(walk)
