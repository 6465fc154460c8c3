"""The remote reads of one Fetch, many partitions each, run on a few threads that take the next
partition as they finish one.

A task and a thread hand-off per partition cost more than the read of a small partition itself:
for a consumer assigned 5,000 partitions of 20 records, py-spy put about a third of the proxy's
read time in trio's spawning, thread dispatch, capacity limiter and the cancelling of waiting
tasks. The concurrency is the same either way (the limiter bounds the threads), so each Fetch
now takes at most as many threads as the limiter has tokens, and each runs its share of reads
in one hand-off.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable, Sequence
from typing import TypeVar

import trio

T = TypeVar("T")


async def run_reads(reads: Sequence[Callable[[], T]], limiter: trio.CapacityLimiter,
                    timeout_s: float, spare: int = 0) -> dict[int, T]:
    """``reads[i]()`` for every ``i``, on at most ``limiter.total_tokens`` threads (less ``spare``
    for work beside them, but at least one), and its result by ``i``. Reads not finished within
    ``timeout_s`` are missing from the result; none starts after it (those running finish in
    their abandoned threads, and are dropped)."""
    pending = deque(range(len(reads)))
    results: dict[int, T] = {}
    lock = threading.Lock()
    stopped = False

    def work() -> None:
        while True:
            with lock:
                if stopped or not pending:
                    return
                i = pending.popleft()
            result = reads[i]()
            with lock:
                if stopped:
                    return
                results[i] = result

    with trio.move_on_after(timeout_s):
        async with trio.open_nursery() as nursery:
            for _ in range(min(len(reads), max(1, int(limiter.total_tokens) - spare))):
                nursery.start_soon(lambda: trio.to_thread.run_sync(work, limiter=limiter, abandon_on_cancel=True))
    with lock:
        stopped = True
        return dict(results)
