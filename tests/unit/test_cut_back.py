"""Cutting a diverged remote tier back (tiering/copy/divergence.py) on a real local-folder
tier and journal metadata store: the segment straddling the cut is rewritten up to it byte for
byte, the segments beyond are deleted, the divergence is recorded once, and repeating the cut
after a crash between the rewrite and the deletes finishes it without a second rewrite."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from protocol.record_set import iter_batches
from protocol.records import Record, build_batch
from tiering.config import TieringConfig, TopicTiering
from tiering.copy.copier import PartitionCopier
from tiering.copy.divergence import RemoteTierCutter
from tiering.copy.gap_log import GapLog
from tiering.copy.metrics import TieringMetrics
from tiering.copy.segment import SegmentBuilder
from tiering.metadata.journal_store import FileMetadataStore
from tiering.model import RemoteLogDivergence, TopicIdPartition
from tiering.storage.local_folder import LocalFolderStorage

TP = TopicIdPartition(uuid.uuid4(), "diverged", 0)
BATCH = 10  # records per batch


def batches(first: int, last: int, epoch_at: dict[int, int]) -> list[bytes]:
    """Batches of BATCH records covering first..last; each batch's epoch is that of its base offset
    (``epoch_at``: epoch -> start offset)."""
    out = []
    for base in range(first, last + 1, BATCH):
        epoch = max(e for e, start in epoch_at.items() if start <= base)
        records = [Record(o, 1_700_000_000_000 + o, f"k{o}".encode(), bytes(40), []) for o in range(base, base + BATCH)]
        out.append(build_batch(records, base_offset=base, partition_leader_epoch=epoch))
    return out


@pytest.fixture
def copier(tmp_path: Path):
    rlmm = FileMetadataStore(tmp_path / "metadata")
    rsm = LocalFolderStorage(tmp_path / "remote")
    settings = TopicTiering.resolve(TieringConfig(), {})
    copier = PartitionCopier(TP, 1, settings, rlmm=rlmm, rsm=rsm, spool_dir=tmp_path / "spool",
                             metrics=TieringMetrics(), gaps=GapLog(tmp_path / "gaps.jsonl"),
                             fetch_max_bytes=1 << 20, backoff_max_ms=1000)
    epochs = {0: 0, 1: 150}
    for first, last in ((0, 99), (100, 199), (200, 299)):  # the middle one holds epochs 0 and 1
        builder = SegmentBuilder(copier.spool_dir, 4096, copier._epoch_history())
        for batch in batches(first, last, epochs):
            (header, view), = list(iter_batches(batch))
            builder.add(header, view)
        copier._upload(builder)
    yield copier
    rsm.close()
    rlmm.close()


def cutter(copier: PartitionCopier) -> RemoteTierCutter:
    return RemoteTierCutter(TP, copier.rlmm, copier.rsm, copier.spool_dir, copier._upload, copier._delete_segment)


def remote_log(copier: PartitionCopier) -> bytes:
    return b"".join(copier.rsm.fetch_log_segment(s, 0) for s in copier.rlmm.copied_segments(TP))


def test_the_straddling_segment_is_rewritten_up_to_the_cut_and_the_rest_deleted(copier):
    whole = remote_log(copier)
    segments = copier.rlmm.copied_segments(TP)
    assert cutter(copier).cut(150, segments, 1, 0, 4096) == 150
    kept = copier.rlmm.copied_segments(TP)
    assert [(s.start_offset, s.end_offset) for s in kept] == [(0, 99), (100, 149)]
    assert kept[1].segment_leader_epochs == ((0, 100),)
    assert remote_log(copier) == whole[:len(remote_log(copier))]  # the same bytes, up to the cut
    assert [b.base_offset for b, _ in iter_batches(remote_log(copier))][-1] == 140
    assert copier.rlmm.divergences(TP) == [RemoteLogDivergence(TP, 150, 299, 1, 0, copier.rlmm.divergences(TP)[0]
                                                               .event_timestamp_ms)]
    assert all(s.state.name == "COPY_SEGMENT_FINISHED" for s in copier.rlmm.list_remote_log_segments(TP))
    assert len(list(copier.rsm.root.rglob("*.log"))) == 2  # the deleted segments' objects are gone


def test_a_cut_repeated_after_a_crash_before_the_deletes_finishes_without_a_second_rewrite(copier):
    segments = copier.rlmm.copied_segments(TP)
    cutter(copier).rewrite_up_to(segments[1], 150, segments[:1], 4096)  # the crash: nothing deleted yet
    copier.rlmm.put_remote_log_divergence(RemoteLogDivergence(TP, 150, 299, 1, 0, 1))
    cutter(copier).cut(150, copier.rlmm.copied_segments(TP), 1, 0, 4096)
    kept = copier.rlmm.copied_segments(TP)
    assert [(s.start_offset, s.end_offset) for s in kept] == [(0, 99), (100, 149)]
    assert len(copier.rlmm.divergences(TP)) == 1


def test_a_cut_at_a_segment_boundary_rewrites_nothing(copier):
    assert cutter(copier).cut(200, copier.rlmm.copied_segments(TP), 1, 1, 4096) == 100
    assert [(s.start_offset, s.end_offset) for s in copier.rlmm.copied_segments(TP)] == [(0, 99), (100, 199)]
    assert copier.metrics.copied_segments == 3  # the three of the fixture, none rewritten
