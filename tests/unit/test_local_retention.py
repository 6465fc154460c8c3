"""local_retention_target: Kafka's local retention rule over the proxy's view of a broker log."""

from __future__ import annotations

import uuid

from hypothesis import given
from hypothesis import strategies as st

from tiering.copy.local_retention import local_retention_target
from tiering.model import (
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentState,
    TopicIdPartition,
)

TP = TopicIdPartition(uuid.uuid4(), "t", 0)
OFF = -1


def seg(start: int, end: int, size: int, max_ts: int = 0) -> RemoteLogSegmentMetadata:
    return RemoteLogSegmentMetadata(RemoteLogSegmentId(TP, uuid.uuid4()), start, end, max_ts, 0, 0, size, ((0, start),),
                                    RemoteLogSegmentState.COPY_SEGMENT_FINISHED)


def four(timestamps: tuple[int, ...] = (0, 0, 0, 0)) -> list[RemoteLogSegmentMetadata]:
    """Offsets 0-9, 10-19, 20-29, 30-39; 10 bytes each."""
    return [seg(10 * i, 10 * i + 9, 10, ts) for i, ts in enumerate(timestamps)]


def target(segments: list[RemoteLogSegmentMetadata], *, log_start: int = 0, log_end: int = 40, open_bytes: int = 0,
           ms: int = OFF, size: int = OFF, now: int = 1000) -> int:
    return local_retention_target(segments, log_start, log_end, open_bytes, ms, size, now)


def test_size_keeps_at_least_the_limit():
    # 40 bytes: the first goes (30 stay >= 25); the second would leave 20 < 25.
    assert target(four(), size=25) == 10
    assert target(four(), size=20) == 20  # exactly the limit stays
    assert target(four(), size=21) == 10
    assert target(four(), size=40) == 0
    assert target(four(), size=41) == 0  # already below: nothing goes
    assert target(four(), size=10) == 30


def test_size_zero_never_removes_the_segment_holding_the_log_end():
    assert target(four(), size=0) == 30
    # Something newer than the last segment is on the brokers: then it may go too, but only up
    # to what is tiered.
    assert target(four(), size=0, log_end=45) == 40


def test_time_by_max_timestamp():
    segments = four((100, 200, 300, 400))
    assert target(segments, ms=750) == 20  # cutoff 250
    assert target(segments, ms=700) == 20  # cutoff 300: not older than it
    assert target(segments, ms=699) == 30  # cutoff 301
    assert target(segments, ms=0) == 30  # the segment reaching the log end stays
    assert target(segments, ms=900) == 0  # cutoff 100
    # The first segment that does not qualify stops the walk.
    assert target(four((100, 500, 100, 100)), ms=750) == 10


def test_both_rules():
    segments = four((100, 200, 300, 400))
    # Time takes the first two even though 20 < 25 bytes then stay.
    assert target(segments, ms=750, size=25) == 20
    # Time takes the first, size the second (20 >= 15 stay), the third would leave 10 < 15.
    assert target(segments, ms=850, size=15) == 20
    # Neither: the first is neither old (cutoff 50) nor too much (30 < 35 would stay).
    assert target(segments, ms=950, size=35) == 0
    assert target(segments) == 0  # both off


def test_log_start_inside_a_segment():
    # The brokers hold 10..39 (a whole segment file from 10): 30 bytes.
    assert target(four(), log_start=15, size=15) == 20
    assert target(four(), log_start=15, size=25) == 15
    assert target(four((100, 200, 300, 400)), log_start=15, ms=750) == 20
    assert target(four(), log_start=40, size=0) == 40


def test_nothing_tiered():
    assert target([], log_start=7, log_end=100, open_bytes=500, size=0, ms=0) == 7


def test_never_past_what_is_tiered():
    # The brokers hold up to 99; only 0..19 is tiered.
    segments = four()[:2]
    assert target(segments, log_end=100, size=0) == 20
    assert target(segments, log_end=100, ms=0, now=10**12) == 20


def test_open_bytes_count_as_staying():
    # 40..49 is fetched but not tiered yet (10 bytes).
    assert target(four(), log_end=50, open_bytes=10, size=25) == 20
    assert target(four(), log_end=50, open_bytes=0, size=25) == 10
    assert target(four(), log_end=50, open_bytes=10, size=10) == 40


@st.composite
def logs(draw: st.DrawFn) -> tuple[list[RemoteLogSegmentMetadata], int, int, int, int]:
    first = draw(st.integers(0, 1000))
    segments = []
    start = first
    for size in draw(st.lists(st.integers(1, 1000), min_size=1, max_size=12)):
        end = start + draw(st.integers(0, 20))
        segments.append(seg(start, end, size))
        start = end + 1
    log_start = draw(st.integers(first, segments[-1].end_offset))
    beyond = draw(st.integers(0, 50))  # offsets on the brokers past the last tiered one
    open_bytes = draw(st.integers(0, 1000)) if beyond else 0
    total = sum(s.segment_size_bytes for s in segments) + open_bytes
    limit = draw(st.integers(0, total + 10))
    return segments, log_start, start + beyond, open_bytes, limit


def staying(segments: list[RemoteLogSegmentMetadata], log_start: int, open_bytes: int) -> int:
    return sum(s.segment_size_bytes for s in segments if s.end_offset >= log_start) + open_bytes


@given(logs())
def test_size_rule_property(log):
    segments, log_start, log_end, open_bytes, limit = log
    new_start = local_retention_target(segments, log_start, log_end, open_bytes, OFF, limit, 0)
    before = staying(segments, log_start, open_bytes)
    after = staying(segments, new_start, open_bytes)
    if before >= limit:
        assert after >= limit
    assert log_start <= new_start <= segments[-1].end_offset + 1
    assert new_start < log_end
    assert new_start == log_start or new_start in {s.end_offset + 1 for s in segments}
    # It stopped at the first segment that does not qualify (or ran out of segments).
    rest = [s for s in segments if s.end_offset >= new_start]
    if rest:
        nxt = rest[0]
        assert nxt.end_offset + 1 >= log_end or after - nxt.segment_size_bytes < limit
