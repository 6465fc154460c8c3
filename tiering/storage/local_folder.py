"""Segments as files under a local folder (``file:///path`` URIs): :class:`LocalFolderStorage`."""

from __future__ import annotations

import errno
import glob
import os
import tempfile
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path

from tiering.storage.api import (
    DEFAULT_CUSTOM_METADATA_MAX_BYTES,
    RemoteResourceNotFoundError,
    RemoteStorageError,
)
from tiering.storage.at_rest import AtRest
from tiering.storage.object_layout import ObjectStorage

_RETRIABLE_ERRNOS = frozenset(
    {errno.EAGAIN, errno.EBUSY, errno.EINTR, errno.ENOSPC, errno.EDQUOT, errno.ETIMEDOUT, errno.ENOMEM}
)


@contextmanager
def _os_errors(what: str, key: str, *, reading: bool = True) -> Iterator[None]:
    try:
        yield
    except FileNotFoundError as e:
        if reading:
            raise RemoteResourceNotFoundError(f"{what}: {key} not found") from None
        # A missing directory while writing means the root vanished: not a missing segment.
        raise RemoteStorageError(f"{what} {key}: {e}") from e
    except OSError as e:
        raise RemoteStorageError(f"{what} {key}: {e}", retriable=e.errno in _RETRIABLE_ERRNOS) from e


def _fsync_dir(path: Path) -> None:
    # Makes renames and unlinks in the directory durable.
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class LocalFolderStorage(ObjectStorage):
    """Segments as files under ``root`` (``file:///path`` URIs): for tests, single-node setups, and
    shared file systems. Returns custom metadata only for sealed segments and salted keys.

    Each object is written to a temporary file (``.<name>.<random>.tmp``) in its final directory,
    fsynced, then renamed into place with ``os.replace`` and the directory fsynced, so a crash never
    leaves a partial object under a final name (at worst a stray temporary file).
    """

    def __init__(
        self,
        root: Path | str,
        prefix: str = "",
        *,
        custom_metadata_max_bytes: int = DEFAULT_CUSTOM_METADATA_MAX_BYTES,
        at_rest: AtRest | None = None,
        salt_length: int = 0,
    ) -> None:
        super().__init__(prefix, custom_metadata_max_bytes=custom_metadata_max_bytes, at_rest=at_rest,
                         salt_length=salt_length)
        self.root = Path(root)
        if not self.root.is_absolute():
            raise ValueError(f"local storage root must be an absolute path, got {str(root)!r}")
        self.root.mkdir(parents=True, exist_ok=True)

    def path_of(self, key: str) -> Path:
        return self.root / key

    @contextmanager
    def _counted(self, kind: str) -> Iterator[None]:
        """One request of ``kind`` (a file operation here), failed if it raises anything but
        not-found (which S3 answers too, and which is no failure of the store)."""
        self.requests.sent(kind)
        try:
            yield
        except RemoteResourceNotFoundError:
            raise
        except Exception:
            self.requests.failed(kind)
            raise

    def _put(self, key: str, body: bytes | memoryview) -> None:
        self._put_chunks(key, (body,))

    def _put_chunks(self, key: str, chunks: Iterable[bytes | memoryview]) -> int:
        path = self.path_of(key)
        size = 0
        with self._counted("PUT"), _os_errors("write", key, reading=False):
            path.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
            try:
                try:
                    for chunk in chunks:
                        view = memoryview(chunk)
                        size += len(view)
                        while view:
                            view = view[os.write(fd, view) :]
                    os.fsync(fd)
                finally:
                    os.close(fd)
                os.replace(tmp, path)
            except BaseException:
                with _suppress_os_errors():
                    os.unlink(tmp)
                raise
            # Every rename is made durable before the next object is written, so the .log (written
            # last) can never survive a crash that loses an index's rename.
            _fsync_dir(path.parent)
        return size

    def _get(self, key: str) -> bytes:
        with self._counted("GET"), _os_errors("read", key):
            return self.path_of(key).read_bytes()

    def _get_range(self, key: str, start: int, end: int | None) -> bytes:
        with self._counted("GET"), _os_errors("read", key):
            fd = os.open(self.path_of(key), os.O_RDONLY)
            try:
                size = os.fstat(fd).st_size
                stop = size if end is None else min(end + 1, size)
                chunks: list[bytes] = []
                position = start
                while position < stop:
                    chunk = os.pread(fd, stop - position, position)
                    if not chunk:  # truncated underneath us; return what exists
                        break
                    chunks.append(chunk)
                    position += len(chunk)
                return b"".join(chunks)
            finally:
                os.close(fd)

    def _delete_keys(self, keys: list[str]) -> None:
        directories: set[Path] = set()
        for key in keys:
            path = self.path_of(key)
            with self._counted("DELETE"), _os_errors("delete", key, reading=False):
                # A write killed before its rename leaves a temporary file; it goes too.
                for stray in path.parent.glob(f".{glob.escape(path.name)}.*.tmp"):
                    stray.unlink(missing_ok=True)
                    directories.add(path.parent)
                try:
                    path.unlink()
                except FileNotFoundError:
                    continue
            directories.add(path.parent)
        for directory in directories:
            with _os_errors("sync", str(directory), reading=False):
                _fsync_dir(directory)

    def _list(self, start: str) -> tuple[list[str], list[str]]:
        keys: list[str] = []
        directories: list[str] = []
        with self._counted("LIST"), _os_errors("list", start):
            try:
                entries = sorted(os.scandir(self.path_of(start) if start else self.root), key=lambda e: e.name)
            except FileNotFoundError:
                return keys, directories
            for entry in entries:
                if entry.name.startswith("."):
                    continue  # a write's temporary file, never an object
                if entry.is_dir():
                    directories.append(f"{start}{entry.name}/")
                else:
                    keys.append(f"{start}{entry.name}")
        return keys, directories


@contextmanager
def _suppress_os_errors() -> Iterator[None]:
    try:
        yield
    except OSError:
        pass

