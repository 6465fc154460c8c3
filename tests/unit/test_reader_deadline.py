"""A remote read spanning several segments stops starting new ones at its deadline; a reader going on
finds where it left off without the offset index."""

from __future__ import annotations

import dataclasses
import time

from protocol.record_set import iter_batches
from protocol.records import Record, build_batch
from protocol.remote_formats.offset_index import encode_offset_index
from tests.unit.test_storage_local import segment_data, segment_metadata
from tiering.metadata.journal_store import FileMetadataStore
from tiering.model import IndexType, RemoteLogSegmentMetadataUpdate, RemoteLogSegmentState
from tiering.read.reader import RemoteReader
from tiering.storage.local_folder import LocalFolderStorage


def _offsets(read) -> list[int]:
    return [o for header, _ in iter_batches(read.records.tobytes())
            for o in range(header.base_offset, header.last_offset + 1)]


def test_a_read_past_its_deadline_answers_with_the_segments_it_has(tmp_path):
    storage = LocalFolderStorage(tmp_path / "remote")
    with FileMetadataStore(tmp_path / "metadata") as rlmm:
        for start in range(0, 40, 10):  # four small segments, one batch of ten records each
            log = build_batch([Record(start + i, 1_700_000_000_000 + start + i, None, b"v", []) for i in range(10)],
                              base_offset=start)
            metadata = dataclasses.replace(segment_metadata(start), segment_size_bytes=len(log))
            rlmm.add_remote_log_segment_metadata(metadata)
            storage.copy_log_segment_data(metadata, dataclasses.replace(segment_data(log=log), offset_index=b""))
            rlmm.update_remote_log_segment_metadata(RemoteLogSegmentMetadataUpdate(
                metadata.segment_id, 1, RemoteLogSegmentState.COPY_SEGMENT_FINISHED, 1))
        reader = RemoteReader(rlmm, storage)
        tp = metadata.segment_id.topic_id_partition
        assert _offsets(reader.read(tp, 0, 1 << 20)) == list(range(40))
        assert _offsets(reader.read(tp, 0, 1 << 20, deadline=time.monotonic() + 60)) == list(range(40))
        # Past the deadline: the first segment still answers (progress), no further one is started.
        assert _offsets(reader.read(tp, 0, 1 << 20, deadline=time.monotonic() - 1)) == list(range(10))
        assert _offsets(reader.read(tp, 15, 1 << 20, deadline=0.0)) == list(range(10, 20))


class _IndexCountingStorage(LocalFolderStorage):
    """The real local store, counting the offset index reads that reach it."""

    offset_index_reads = 0

    def fetch_index(self, metadata, index_type):  # type: ignore[no-untyped-def]
        if index_type is IndexType.OFFSET:
            self.offset_index_reads += 1
        return super().fetch_index(metadata, index_type)


def test_a_reader_going_on_never_waits_for_an_offset_index(tmp_path):
    """Each read starts where the last ended: its position is known without the segment's offset
    index (a GET in series per segment on an object store, issue 28)."""
    storage = _IndexCountingStorage(tmp_path / "remote")
    with FileMetadataStore(tmp_path / "metadata") as rlmm:
        batches = [build_batch([Record(b * 10 + i, 1_700_000_000_000, None, b"v" * 100, []) for i in range(10)],
                               base_offset=b * 10) for b in range(20)]
        log = b"".join(batches)
        positions = [sum(len(x) for x in batches[:b]) for b in range(20)]
        metadata = dataclasses.replace(segment_metadata(0), segment_size_bytes=len(log), end_offset=199)
        rlmm.add_remote_log_segment_metadata(metadata)
        index = encode_offset_index([(b * 10, positions[b]) for b in range(0, 20, 5)], 0)
        storage.copy_log_segment_data(metadata, dataclasses.replace(segment_data(log=log), offset_index=index))
        rlmm.update_remote_log_segment_metadata(RemoteLogSegmentMetadataUpdate(
            metadata.segment_id, 1, RemoteLogSegmentState.COPY_SEGMENT_FINISHED, 1))
        reader = RemoteReader(rlmm, storage, chunk_cache_bytes=1 << 20, chunk_bytes=512, prefetch_threads=0)
        tp = metadata.segment_id.topic_id_partition
        offset, read = 0, []
        while offset < 200:  # two or three batches per read, each from where the last ended
            got = reader.read(tp, offset, 3 * len(batches[0]) - 1)
            read += _offsets(got)
            offset = got.next_offset
        assert read == list(range(200))
        assert storage.offset_index_reads == 0
        # An offset no read ended at: the index, once (then cached), and the same batches.
        assert _offsets(reader.read(tp, 73, len(batches[0])))[0] == 70
        assert storage.offset_index_reads == 1


def test_read_committed_asks_the_brokers_about_aborted_transactions_only_for_transactional_batches(tmp_path):
    """Only a read holding a transactional batch needs the aborted transactions across the remote
    end, which only the brokers know: asking them for every first read of a partition took 5-20 ms
    of a fresh proxy's first answer (issue 36). Counted: one question for the transactional
    partition, none for the plain one."""
    storage = LocalFolderStorage(tmp_path / "remote")
    asked: list[tuple[object, int]] = []

    def local_aborted(tp, offset):  # type: ignore[no-untyped-def]
        asked.append((tp, offset))
        return []

    with FileMetadataStore(tmp_path / "metadata") as rlmm:
        partitions = {}
        for partition, transactional in ((0, False), (1, True)):
            log = build_batch([Record(i, 1_700_000_000_000, None, b"v", []) for i in range(10)], base_offset=0,
                              is_transactional=transactional, producer_id=5 if transactional else -1,
                              producer_epoch=0 if transactional else -1)
            base = segment_metadata(0)
            tp = dataclasses.replace(base.segment_id.topic_id_partition, partition=partition)
            metadata = dataclasses.replace(base, segment_id=dataclasses.replace(base.segment_id, topic_id_partition=tp),
                                           segment_size_bytes=len(log), end_offset=9)
            rlmm.add_remote_log_segment_metadata(metadata)
            storage.copy_log_segment_data(metadata, dataclasses.replace(segment_data(log=log), offset_index=b""))
            rlmm.update_remote_log_segment_metadata(RemoteLogSegmentMetadataUpdate(
                metadata.segment_id, 1, RemoteLogSegmentState.COPY_SEGMENT_FINISHED, 1))
            partitions[partition] = tp
        reader = RemoteReader(rlmm, storage, local_aborted=local_aborted)
        assert _offsets(reader.read(partitions[0], 0, 1 << 20, read_committed=True)) == list(range(10))
        assert asked == []
        assert _offsets(reader.read(partitions[1], 0, 1 << 20, read_committed=True)) == list(range(10))
        assert asked == [(partitions[1], 10)]
