"""A Fetch answer that skips offsets (tiering/copy/offset_jumps.py), on a real local-folder tier
and journal store: the copier does not copy on past offsets it was not given until the next pass
is answered the same (a log with a gap: a topic compacted before it was tiered), and copies them
when the next pass gets them (a broker that answered from its next segment while it was deleting
or uploading the one that held them: Kafka's own tiered storage does)."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from protocol.records import Record, build_batch
from tiering.broker_client import FetchedPartition
from tiering.config import TieringConfig, TopicTiering
from tiering.copy.copier import PartitionCopier
from tiering.copy.gap_log import GapLog
from tiering.copy.metrics import TieringMetrics
from tiering.metadata.journal_store import FileMetadataStore
from tiering.model import TopicIdPartition
from tiering.storage.local_folder import LocalFolderStorage

TP = TopicIdPartition(uuid.uuid4(), "jumps", 0)
LOG_END = 100


def batch(base: int, count: int = 10) -> bytes:
    records = [Record(o, 1_700_000_000_000 + o, None, bytes(20), []) for o in range(base, base + count)]
    return build_batch(records, base_offset=base)


class Broker:
    """Answers each Fetch with the next scripted record set (the copier's one broker call here)."""

    def __init__(self, *answers: bytes) -> None:
        self.answers = list(answers)
        self.asked: list[int] = []
        self.waits_ms: list[object] = []  # max_wait_ms of each Fetch

    def fetch(self, leader: int, topic: str, partition: int, offset: int, **kwargs: object) -> FetchedPartition:
        self.asked.append(offset)
        self.waits_ms.append(kwargs.get("max_wait_ms", 100))  # BrokerClient.fetch's default
        records = self.answers.pop(0) if self.answers else b""
        return FetchedPartition(0, LOG_END, LOG_END, 0, [], memoryview(records))


@pytest.fixture
def copier(tmp_path: Path):
    rlmm = FileMetadataStore(tmp_path / "metadata")
    rsm = LocalFolderStorage(tmp_path / "remote")
    copier = PartitionCopier(TP, 1, TopicTiering.resolve(TieringConfig(), {}), rlmm=rlmm, rsm=rsm,
                             spool_dir=tmp_path / "spool", metrics=TieringMetrics(),
                             gaps=GapLog(tmp_path / "gaps.jsonl"), fetch_max_bytes=1 << 20, backoff_max_ms=1000)
    copier.next_offset, copier.transactions_seeded = 0, True
    yield copier
    rsm.close()
    rlmm.close()


def from_segment(start: int, end: int) -> bytes:
    return b"".join(batch(base) for base in range(start, end, 10))


def test_offsets_an_answer_skipped_are_copied_when_the_next_pass_gets_them(copier: PartitionCopier) -> None:
    broker = Broker(from_segment(40, 100), from_segment(0, 100))
    copier._copy(broker)  # type: ignore[arg-type]
    assert copier.next_offset == 0  # 0..39 were not given: nothing copied on past them
    copier._copy(broker)  # type: ignore[arg-type]
    assert copier.next_offset == 100
    assert broker.asked == [0, 0]
    # Rolled by segment.ms (the records are old) and copied: one segment of the whole log.
    assert [(s.start_offset, s.end_offset) for s in copier.rlmm.copied_segments(TP)] == [(0, 99)]


def test_a_gap_answered_twice_is_the_logs_own(copier: PartitionCopier) -> None:
    broker = Broker(from_segment(40, 100), from_segment(40, 100))
    copier._copy(broker)  # type: ignore[arg-type]
    assert copier.next_offset == 0
    copier._copy(broker)  # type: ignore[arg-type]
    assert copier.next_offset == 100
    assert [(s.start_offset, s.end_offset) for s in copier.rlmm.copied_segments(TP)] == [(40, 99)]


def test_a_pass_asks_the_broker_to_wait_for_nothing(copier: PartitionCopier) -> None:
    """At the log end a Fetch that may wait parks in the broker's purgatory for its whole wait: 100
    ms per idle partition per pass, 53 s for a round of 5,000 (tests/bench/wide_read.py)."""
    broker = Broker(from_segment(0, 100))
    copier._copy(broker)  # type: ignore[arg-type]
    assert copier.next_offset == 100
    assert broker.waits_ms and set(broker.waits_ms) == {1}
