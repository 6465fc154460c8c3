"""A remote read spanning several segments stops starting new ones at its deadline."""

from __future__ import annotations

import dataclasses
import time

from protocol.record_set import iter_batches
from protocol.records import Record, build_batch
from tests.unit.test_storage_local import segment_data, segment_metadata
from tiering.metadata.journal_store import FileMetadataStore
from tiering.model import RemoteLogSegmentMetadataUpdate, RemoteLogSegmentState
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
