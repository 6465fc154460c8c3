"""Building one remote segment from record batches as the broker served them.

Batches are appended byte for byte to a spool file (so a 1 GiB segment does not sit in memory)
while the offset and time indexes, the segment's leader epochs and its aborted transactions are
collected. ``finish`` hands back the :class:`LogSegmentData` to copy (the log as a read-only
memory map of the spool file) and the facts the segment's metadata records.
"""

from __future__ import annotations

import contextlib
import mmap
import os
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from protocol.record_batch import BatchHeader
from protocol.remote_formats.index_builder import SegmentIndexBuilder
from protocol.remote_formats.leader_epoch_checkpoint import encode_leader_epoch_checkpoint
from protocol.remote_formats.transaction_index import AbortedTxn, encode_transaction_index
from tiering.model import LogSegmentData

NO_TIMESTAMP = -1


@dataclass(frozen=True)
class SegmentFacts:
    start_offset: int
    end_offset: int
    max_timestamp_ms: int
    size_bytes: int
    leader_epochs: tuple[tuple[int, int], ...]
    tx_index_empty: bool


class SegmentBuilder:
    """One open segment. Feed batches in log order with :meth:`add`, then :meth:`finish` or
    :meth:`discard`."""

    def __init__(self, spool_dir: Path, index_interval_bytes: int, epoch_history: list[tuple[int, int]]) -> None:
        spool_dir.mkdir(parents=True, exist_ok=True)
        fd, name = tempfile.mkstemp(prefix="segment-", suffix=".spool", dir=spool_dir)
        self._file = os.fdopen(fd, "w+b")
        self.path = Path(name)
        self.index_interval_bytes = index_interval_bytes
        # The partition's leader epochs (epoch, start offset) before this segment; a copy, this
        # segment's are appended as they appear.
        self.epoch_history = list(epoch_history)
        self.indexes: SegmentIndexBuilder | None = None
        self.start_offset = -1
        self.end_offset = -1
        self.size = 0
        self.max_timestamp = NO_TIMESTAMP
        self.first_batch_timestamp = NO_TIMESTAMP  # segment.ms counts from here, as Kafka's roll does
        self.leader_epochs: list[tuple[int, int]] = []
        self.aborted: list[AbortedTxn] = []

    @property
    def empty(self) -> bool:
        return self.size == 0

    def add(self, header: BatchHeader, batch: memoryview) -> None:
        if self.indexes is None:
            self.start_offset = header.base_offset
            self.indexes = SegmentIndexBuilder(header.base_offset, self.index_interval_bytes)
            self.first_batch_timestamp = header.max_timestamp
        self.indexes.add(header.last_offset, len(batch), header.max_timestamp)
        self._file.write(batch)
        self.size += len(batch)
        self.end_offset = header.last_offset
        self.max_timestamp = max(self.max_timestamp, header.max_timestamp)
        epoch = header.partition_leader_epoch
        if not self.leader_epochs or epoch > self.leader_epochs[-1][0]:
            self.leader_epochs.append((epoch, header.base_offset))
            if epoch >= 0 and (not self.epoch_history or epoch > self.epoch_history[-1][0]):
                self.epoch_history.append((epoch, header.base_offset))

    def add_aborted(self, producer_id: int, first_offset: int, marker_offset: int) -> None:
        """An aborted transaction whose abort marker is in this segment."""
        # The last stable offset at the abort is at least the marker's successor; readers only
        # use it to stop searching later segments early, so the lower bound is safe.
        self.aborted.append(AbortedTxn(producer_id, first_offset, marker_offset, marker_offset + 1))

    def facts(self) -> SegmentFacts:
        return SegmentFacts(self.start_offset, self.end_offset, self.max_timestamp, self.size,
                            tuple(self.leader_epochs), not self.aborted)

    @contextlib.contextmanager
    def finish(self) -> Iterator[tuple[LogSegmentData, SegmentFacts]]:
        """The segment's data, valid inside the ``with`` block (the log is a memory map)."""
        if self.indexes is None:
            raise ValueError("an empty segment cannot be finished")
        self._file.flush()
        checkpoint = encode_leader_epoch_checkpoint(
            [(e, o) for e, o in self.epoch_history if o <= self.end_offset])
        txn = encode_transaction_index(sorted(self.aborted, key=lambda t: t.last_offset)) if self.aborted else None
        with mmap.mmap(self._file.fileno(), self.size, access=mmap.ACCESS_READ) as mapped:
            view = memoryview(mapped)
            try:
                yield LogSegmentData(
                    log=view,
                    offset_index=self.indexes.offset_index(),
                    time_index=self.indexes.time_index(),
                    transaction_index=txn,
                    leader_epoch_index=checkpoint,
                ), self.facts()
            finally:
                view.release()

    def discard(self) -> None:
        with contextlib.suppress(OSError):
            self._file.close()
        with contextlib.suppress(OSError):
            self.path.unlink()
