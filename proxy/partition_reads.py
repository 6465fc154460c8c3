"""The remote reads of one Fetch: its partitions read on a few threads that take the next partition
as they finish one, within room in the remote fetch buffer and a time limit, and started as the
request arrives where the remote tier is known to be the one to answer (``FetchReads``).

A task and a thread hand-off per partition cost more than the read of a small partition itself:
for a consumer assigned 5,000 partitions of 20 records, py-spy put about a third of the proxy's
read time in trio's spawning, thread dispatch, capacity limiter and the cancelling of waiting
tasks. The concurrency is the same either way (the limiter bounds the threads), so each Fetch
now takes at most as many threads as the limiter has tokens, and each runs its share of reads
in one hand-off.
"""

from __future__ import annotations

import functools
import threading
import time
from collections import deque
from collections.abc import Awaitable, Callable, Collection, Iterable, Sequence
from dataclasses import dataclass, field
from typing import TypeVar

import trio

from proxy.byte_budget import ByteBudget, Holding
from tiering.model import TopicIdPartition
from tiering.quota import ByteRateQuota
from tiering.read.reader import RemoteRead, RemoteReader
from tiering.storage.api import RemoteStorageError

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


# A partition as a Fetch of some version names it: (topic name, or topic id bytes from v13, partition).
PartitionKey = tuple[str | bytes, int]
# A partition to read from the remote tier: its key, the partition, the fetch offset, its max bytes.
ReadEntry = tuple[PartitionKey, TopicIdPartition, int, int]
class Throttled:
    """A read left out because the remote fetch quota (KIP-956) was exceeded: the partition answers
    no records and no error, as Kafka's does, and the client fetches again."""


THROTTLED = Throttled()
ReadResult = RemoteRead | BaseException | Throttled | None  # None: the offset was deleted meanwhile
# A Fetch's remote reads wait for at least this much room in the remote fetch buffer (or all of a
# smaller want, or the whole buffer if smaller) rather than start with a sliver; each read returns
# at least one batch whatever share of the room it got.
_MIN_REMOTE_GRANT = 1 << 20
# How long the brokers' answer about a partition's log ends is used for the remote answers that
# carry them: a value that old is still above every remote offset.
_LOG_ENDS_TTL_S = 1.0


@dataclass
class EarlyReads:
    """Remote reads started when a Fetch arrives, for its response hook to await."""

    done: trio.Event = field(default_factory=trio.Event)
    results: dict[PartitionKey, ReadResult] = field(default_factory=dict)
    holding: Holding | None = None
    error: Exception | None = None


class FetchReads:
    """How a Fetch's partitions are read from the remote tier: threads from one pool, room in the
    remote fetch buffer, a time limit, and the brokers' log ends asked beside the reads."""

    def __init__(self, reader: RemoteReader, limiter: trio.CapacityLimiter, buffer: ByteBudget,
                 max_wait_s: float, log_ends: Callable[[list[TopicIdPartition]], dict[TopicIdPartition, tuple[int, int]]],
                 quota: ByteRateQuota | None = None) -> None:
        self.reader = reader
        self.quota = quota  # remote fetch bytes per second across the proxy (KIP-956)
        self.limiter = limiter
        self.buffer = buffer
        self.max_wait_s = max_wait_s
        self._ask_log_ends = log_ends
        # The brokers' high watermark and last stable offset per partition read remotely, and
        # when they were asked: a remote answer carries them, as Kafka's own remote reads do.
        self._log_ends: dict[TopicIdPartition, tuple[float, int, int]] = {}
        self.room_timeouts = 0  # requests that went ahead without room in the remote fetch buffer
        self.log_end_questions = 0  # asked of the brokers: most remote answers take the probe's ends

    def log_ends(self, tp: TopicIdPartition) -> tuple[int, int] | None:
        """(high watermark, last stable offset) as the brokers last answered, if ever."""
        ends = self._log_ends.get(tp)
        return (ends[1], ends[2]) if ends is not None else None

    def stale(self, tps: Iterable[TopicIdPartition]) -> list[TopicIdPartition]:
        """Those of ``tps`` whose log ends were last asked _LOG_ENDS_TTL_S ago or more, or never."""
        now = time.monotonic()
        return [tp for tp in dict.fromkeys(tps)
                if tp not in self._log_ends or now - self._log_ends[tp][0] >= _LOG_ENDS_TTL_S]

    async def ask_log_ends(self, tps: list[TopicIdPartition]) -> None:
        """Ask the brokers the log ends of ``tps`` (one ListOffsets of each kind per leader),
        waiting at most remote.fetch.max.wait.ms; what they answer is kept for log_ends."""
        self.log_end_questions += 1
        with trio.move_on_after(self.max_wait_s):
            ends = await trio.to_thread.run_sync(self._ask_log_ends, tps, limiter=self.limiter, abandon_on_cancel=True)
            for tp, (high_watermark, last_stable) in ends.items():
                self._log_ends[tp] = (time.monotonic(), high_watermark, last_stable)

    def start(self, start_soon: Callable[[Callable[[], Awaitable[None]]], None], held: list[Holding],
              entries: list[ReadEntry], room: int, read_committed: bool,
              ends_for: Collection[TopicIdPartition]) -> EarlyReads:
        """Start reading ``entries`` in ``start_soon``'s nursery; the caller awaits ``done``."""
        early = EarlyReads()

        async def run() -> None:
            try:
                early.results, early.holding = await self.read(held, entries, room, read_committed, ends_for)
            except Exception as exc:  # noqa: BLE001 - the response hook raises it, as if read there
                early.error = exc
            finally:
                early.done.set()

        start_soon(run)
        return early

    async def read(self, held: list[Holding], entries: list[ReadEntry], room: int, read_committed: bool,
                   ends_for: Collection[TopicIdPartition] | None = None,
                   ) -> tuple[dict[PartitionKey, ReadResult], Holding]:
        """Read every entry within ``room`` bytes shared out (the buffer's room goes into
        ``held``), beside one question to the brokers of the log ends of ``ends_for`` (default:
        every entry's partition) where the last answer is older than _LOG_ENDS_TTL_S. Reads not
        done within the time limit answer an error. Over the remote fetch quota, the reads wait for it
        at most half the time limit, and are left out (THROTTLED) if it is still exceeded."""
        if self.quota is not None and (wait := self.quota.wait_s()) > 0:
            await trio.sleep(min(wait, self.max_wait_s / 2))
            if self.quota.left_out() > 0:
                holding = self.buffer.take(0)
                held.append(holding)
                return dict.fromkeys((key for key, *_ in entries), THROTTLED), holding
        share = max(room // len(entries), 0)
        limits = [min(partition_max, share) for *_, partition_max in entries]
        # Room for the whole request at once (its partitions never wait on one another),
        # scaled down to what there is; the reads return at least one batch each anyway.
        holding = await self._room(sum(limits))
        held.append(holding)  # released once the client has the answer
        scale = holding.nbytes / sum(limits) if sum(limits) else 1.0

        # Reads start no new segment after half the wait, so each answers with what it has
        # rather than run out of time over many small segments (and answer nothing, again).
        deadline = time.monotonic() + self.max_wait_s / 2

        def read(tp: TopicIdPartition, offset: int, limit: int) -> RemoteRead | RemoteStorageError | None:
            try:
                return self.reader.read(tp, offset, limit, read_committed=read_committed, deadline=deadline)
            except RemoteStorageError as exc:
                return exc

        stale = self.stale(tp for _, tp, _, _ in entries) if ends_for is None else self.stale(ends_for)
        async with trio.open_nursery() as nursery:
            if stale:  # all in one question, beside the reads
                nursery.start_soon(self.ask_log_ends, stale)
            with self.reader.foreground():  # what the reads start fetching ahead waits until they are back
                results: dict[int, RemoteRead | RemoteStorageError | None] = await run_reads(
                    [functools.partial(read, tp, offset, int(limits[i] * scale))
                     for i, (_, tp, offset, _) in enumerate(entries)],
                    self.limiter, self.max_wait_s, spare=1 if stale else 0)
        if self.quota is not None:
            self.quota.record(sum(r.size for r in results.values() if isinstance(r, RemoteRead)))
        late = RemoteStorageError(f"no answer within remote.fetch.max.wait.ms ({self.max_wait_s:g}s)")
        return {key: results.get(i, late) for i, (key, *_) in enumerate(entries)}, holding

    async def _room(self, want: int) -> Holding:
        """Room in the remote fetch buffer for up to ``want`` bytes: what there is, at least a
        chunk's worth. Waiting for it takes at most half of remote.fetch.max.wait.ms; then the read
        goes ahead with that chunk's worth beyond the buffer, so answers held by a client that
        stopped reading slow the others down but cannot stop them."""
        minimum = min(want, _MIN_REMOTE_GRANT, max(self.buffer.limit, 1))
        with trio.move_on_after(self.max_wait_s / 2):
            return await self.buffer.acquire(want, minimum=minimum)
        self.room_timeouts += 1
        return self.buffer.take(minimum)
