"""A budget of bytes the proxy may hold at once, with back-pressure instead of growth.

Answers the proxy holds before a client has read them (broker frames, remote record bytes) take
their size from a budget; a taker waits until its bytes fit. One answer larger than the whole
budget is let through when nothing else is held, so a budget smaller than the largest answer
slows the proxy down but never stops it.
"""

from __future__ import annotations

import trio


class ByteBudget:
    def __init__(self, limit: int, name: str) -> None:
        self.limit = limit  # <= 0: unbounded (counted, never waited for)
        self.name = name  # the setting, for metrics and log lines
        self.used = 0
        self.peak = 0
        self.waits = 0  # takers that had to wait for room
        self._released = trio.Event()

    def _fits(self, nbytes: int) -> bool:
        return self.limit <= 0 or self.used == 0 or self.used + nbytes <= self.limit

    async def acquire(self, want: int, minimum: int | None = None) -> Holding:
        """Hold up to ``want`` bytes, waiting until at least ``minimum`` (default: all of them)
        fit. The holding says how many were granted: all of ``want`` if they fit, else what
        room there is, never less than ``minimum`` (which alone may exceed the limit)."""
        want = max(want, 0)
        minimum = want if minimum is None else min(max(minimum, 0), want)
        if not self._fits(minimum):
            self.waits += 1
            while not self._fits(minimum):
                await self._released.wait()
        if self.limit <= 0:
            granted = want
        elif self.used == 0:
            granted = min(want, max(self.limit, minimum))  # alone: the whole budget, or the minimum
        else:
            granted = max(min(want, self.limit - self.used), minimum)
        return self._hold(granted)

    def take(self, nbytes: int) -> Holding:
        """Hold ``nbytes`` now, over the limit if need be (for bytes already in memory)."""
        return self._hold(max(nbytes, 0))

    def _hold(self, nbytes: int) -> Holding:
        self.used += nbytes
        self.peak = max(self.peak, self.used)
        return Holding(self, nbytes)

    def _give_back(self, nbytes: int) -> None:
        if nbytes:
            self.used -= nbytes
            self._released.set()
            self._released = trio.Event()


class Holding:
    """Bytes held from a budget until released (idempotent) or resized."""

    __slots__ = ("budget", "nbytes")

    def __init__(self, budget: ByteBudget, nbytes: int) -> None:
        self.budget = budget
        self.nbytes = nbytes

    def resize(self, nbytes: int) -> None:
        """Hold exactly ``nbytes`` (more: taken at once, possibly over the limit; fewer: the rest
        goes back)."""
        nbytes = max(nbytes, 0)
        if nbytes > self.nbytes:
            self.budget.used += nbytes - self.nbytes
            self.budget.peak = max(self.budget.peak, self.budget.used)
        else:
            self.budget._give_back(self.nbytes - nbytes)
        self.nbytes = nbytes

    def release(self) -> None:
        self.budget._give_back(self.nbytes)
        self.nbytes = 0
