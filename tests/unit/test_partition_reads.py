"""proxy/partition_reads.py: the remote reads of one Fetch on a few threads. Counted, not timed:
thread hand-offs per Fetch, and reads started after the wait."""

from __future__ import annotations

import threading
import time

import pytest
import trio

from proxy import partition_reads
from proxy.partition_reads import run_reads


@pytest.fixture
def hand_offs(monkeypatch) -> list[int]:
    """Counts trio.to_thread.run_sync calls made by run_reads."""
    calls: list[int] = []
    real = trio.to_thread.run_sync

    async def counting(*args, **kwargs):  # noqa: ANN202
        calls.append(1)
        return await real(*args, **kwargs)

    monkeypatch.setattr(partition_reads.trio.to_thread, "run_sync", counting)
    return calls


def test_five_thousand_reads_take_one_hand_off_per_thread_not_per_partition(hand_offs) -> None:
    limiter = trio.CapacityLimiter(10)
    results = trio.run(run_reads, [lambda i=i: i * 2 for i in range(5000)], limiter, 30.0)
    assert results == {i: i * 2 for i in range(5000)}
    assert len(hand_offs) == 10  # one per partition before: 5,000


def test_a_read_beside_them_keeps_a_thread_and_few_reads_take_few_threads(hand_offs) -> None:
    limiter = trio.CapacityLimiter(10)
    trio.run(run_reads, [lambda: 1] * 100, limiter, 30.0, 1)
    assert len(hand_offs) == 9
    trio.run(run_reads, [lambda: 1] * 3, limiter, 30.0)
    assert len(hand_offs) == 9 + 3


def test_reads_left_at_the_timeout_are_missing_and_none_starts_after_it() -> None:
    release = threading.Event()
    started: list[int] = []

    def read(i: int) -> int:
        started.append(i)
        if i < 2:
            return i
        release.wait(10)  # stuck until the test ends
        return i

    try:
        results = trio.run(run_reads, [lambda i=i: read(i) for i in range(50)], trio.CapacityLimiter(4), 0.3)
        count_at_timeout = len(started)
        release.set()
        assert results.keys() <= {0, 1}
        assert count_at_timeout <= 2 + 4  # the quick two and one stuck read per thread
        time.sleep(0.1)  # the stuck threads, let go, find the reads stopped
        assert len(started) == count_at_timeout
    finally:
        release.set()


def test_an_error_a_read_raises_reaches_the_caller() -> None:
    def broken() -> int:
        raise RuntimeError("not a storage error")

    with pytest.raises(BaseExceptionGroup) as raised:
        trio.run(run_reads, [lambda: 1, broken, lambda: 2], trio.CapacityLimiter(2), 5.0)
    assert raised.group_contains(RuntimeError, match="not a storage error")
