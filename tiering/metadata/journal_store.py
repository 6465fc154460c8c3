"""The embedded remote log metadata store: one crash-safe journal file in a directory.

The journal ``remote_log_metadata.journal`` is a sequence of entries, each a metadata record
value (``tiering.metadata.codec``, the same bytes the metadata topic would hold) framed as::

    length  uint32 big endian   bytes of payload
    crc     uint32 big endian   CRC-32C of payload
    payload

Every write appends one entry and fsyncs before the call returns, so a record the caller saw
succeed survives kill -9 and power loss. On open, entries are replayed until the first one that
is incomplete or fails its CRC (a write torn by a crash); the file is cut back to that point.
When the journal holds many more entries than live records it is compacted: the live state is
written to a temporary file, fsynced and renamed over the journal, which is atomic on POSIX
file systems, so a crash leaves either the old journal or the new one.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

import crc32c
from construct import Bytes, ConstructError, Int32ub, Struct, this

from protocol.errors import ProtocolError
from tiering.metadata.codec import deserialize, serialize
from tiering.metadata.manager import RemoteLogMetadataManager
from tiering.metadata.state import RemoteLogMetadata

log = logging.getLogger(__name__)

JOURNAL_NAME = "remote_log_metadata.journal"
JOURNAL_ENTRY = Struct("length" / Int32ub, "crc" / Int32ub, "payload" / Bytes(this.length))
_HEADER_SIZE = 8
_MAX_ENTRY = 1 << 20  # a metadata record is well under a kilobyte; more means corruption

# Compact when the journal has this many entries more than there are live records.
COMPACT_SLACK = 10_000


def frame(payload: bytes) -> bytes:
    return JOURNAL_ENTRY.build({"length": len(payload), "crc": crc32c.crc32c(payload), "payload": payload})


def read_journal(data: bytes) -> tuple[list[RemoteLogMetadata], int]:
    """The records of a journal and the length of its valid prefix."""
    records: list[RemoteLogMetadata] = []
    position = 0
    while position + _HEADER_SIZE <= len(data):
        try:
            entry = JOURNAL_ENTRY.parse(data[position:position + _HEADER_SIZE + _MAX_ENTRY])
        except ConstructError:
            break  # the header promises more bytes than the file holds: a torn write
        if entry.length > _MAX_ENTRY or crc32c.crc32c(entry.payload) != entry.crc:
            break
        try:
            records.append(deserialize(entry.payload))
        except ProtocolError as exc:
            # The CRC matched, so these bytes were written as they are: a record from a newer
            # version. Skip it rather than lose everything after it.
            log.error("metadata journal entry at byte %d unreadable, skipped: %s", position, exc)
        position += _HEADER_SIZE + entry.length
    return records, position


def fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class FileMetadataStore(RemoteLogMetadataManager):
    """RemoteLogMetadataManager over a journal file in ``directory`` (created if missing)."""

    def __init__(self, directory: str | os.PathLike[str], *, compact_slack: int = COMPACT_SLACK) -> None:
        super().__init__()
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self.path = self.directory / JOURNAL_NAME
        self.compact_slack = compact_slack
        data = self.path.read_bytes() if self.path.exists() else b""
        records, valid = read_journal(data)
        for record in records:
            self._state.apply(record)
        self._entries = len(records)
        if valid < len(data):
            log.warning("metadata journal %s: cut %d bytes of a torn write at byte %d", self.path, len(data) - valid, valid)
            with open(self.path, "r+b") as f:
                f.truncate(valid)
                f.flush()
                os.fsync(f.fileno())
        self._file = open(self.path, "ab")  # noqa: SIM115 - held open for the store's lifetime
        log.info("metadata store %s: %d records replayed", self.path, len(records))

    def _persist(self, record: RemoteLogMetadata) -> None:
        if self._file.closed:
            raise RuntimeError("metadata store is closed")
        self._file.write(frame(serialize(record)))
        self._file.flush()
        os.fsync(self._file.fileno())
        self._state.apply(record)
        self._entries += 1
        if self._entries - self._state.size_of_live_records() > self.compact_slack:
            self.compact()

    def compact(self) -> None:
        """Rewrite the journal with only the live state (atomically)."""
        with self._lock:
            records = list(self._state.snapshot_records())
            temporary = self.path.with_suffix(".compacting")
            with open(temporary, "wb") as f:
                for record in records:
                    f.write(frame(serialize(record)))
                f.flush()
                os.fsync(f.fileno())
            self._file.close()
            os.replace(temporary, self.path)
            fsync_dir(self.directory)
            self._file = open(self.path, "ab")  # noqa: SIM115
            self._entries = len(records)
            log.info("metadata store %s compacted to %d records", self.path, len(records))

    def close(self) -> None:
        with self._lock:
            if not self._file.closed:
                self._file.close()
