"""OffsetForLeaderEpoch answers from the remote tier's leader-epoch data (a real file store)."""

from __future__ import annotations

from tests.unit.test_metadata_store import TP, copied, segment
from tiering.metadata.journal_store import FileMetadataStore
from tiering.read.reader import RemoteReader
from tiering.storage.local_folder import LocalFolderStorage


def test_end_offset_for_epoch_follows_kafka_rules(tmp_path):
    with FileMetadataStore(tmp_path / "metadata") as rlmm:
        # Epoch 2 from offset 0, epoch 4 from 150 (inside the second segment), epoch 5 from 300.
        copied(rlmm, segment(0, 99, ((2, 0),)))
        copied(rlmm, segment(100, 199, ((2, 100), (4, 150))))
        copied(rlmm, segment(200, 399, ((4, 200), (5, 300))))
        reader = RemoteReader(rlmm, LocalFolderStorage(tmp_path / "remote"))
        assert reader.end_offset_for_epoch(TP, 1) is None  # older than anything tiered
        assert reader.end_offset_for_epoch(TP, 2) == (2, 150)
        assert reader.end_offset_for_epoch(TP, 3) == (2, 150)  # the largest epoch <= 3
        assert reader.end_offset_for_epoch(TP, 4) == (4, 300)
        assert reader.end_offset_for_epoch(TP, 5) == (5, 400)  # the last tiered epoch ends at Ry + 1
        assert reader.end_offset_for_epoch(TP, 9) == (5, 400)
        assert reader.leader_epoch_of(TP, 149) == 2 and reader.leader_epoch_of(TP, 150) == 4
        assert reader.leader_epoch_of(TP, 400) == -1
