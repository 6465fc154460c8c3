"""Byte-rate quotas of the remote tier (KIP-956): copies and remote fetches across the proxy.

Kafka measures each as a rate over ``*.quota.window.num`` samples of
``*.quota.window.size.seconds`` and, once the rate is above ``*.max.bytes.per.second``, holds
the next copy until it is back under (RLMCopyQuotaManager), and leaves remote reads out of fetch
answers until then (the partition answers no records and no error; the client fetches again).
The same rate here: bytes recorded per sample, the rate the bytes of the live samples over the
time they span (at least all but one whole sample), the wait what brings it back to the bound."""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable

UNLIMITED = 2**63 - 1  # Long.MAX_VALUE: Kafka's default, no quota
_EPSILON_S = 1e-9  # a sample expires at its end to the nanosecond (clock arithmetic rounds)


class QuotaWaitEnded(Exception):
    """A wait for a quota ended before the rate was back under it (the waiter was stopped)."""


class ByteRateQuota:
    """A bound on bytes per second, measured over ``samples`` windows of ``window_s`` seconds;
    thread-safe. ``clock`` is for tests."""

    def __init__(self, bytes_per_second: int, samples: int = 11, window_s: float = 1.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        if bytes_per_second < 1 or samples < 1 or window_s <= 0:
            raise ValueError(f"a quota needs a positive rate, sample count and window, got {bytes_per_second}, "
                             f"{samples}, {window_s}")
        self.bound = bytes_per_second
        self.samples = samples
        self.window_s = window_s
        self.clock = clock
        self._lock = threading.Lock()
        self._windows: deque[list[float]] = deque()  # [start, bytes], oldest first
        self.throttled_s = 0.0  # time spent waiting, or answered without, because of the quota
        self.throttled = 0  # waits, or reads left out

    @property
    def unlimited(self) -> bool:
        return self.bound >= UNLIMITED

    def record(self, nbytes: int) -> None:
        if self.unlimited or nbytes <= 0:
            return
        now = self.clock()
        with self._lock:
            self._expire(now)
            if not self._windows or now - self._windows[-1][0] >= self.window_s:
                self._windows.append([now, 0.0])
            self._windows[-1][1] += nbytes

    def rate(self) -> float:
        """Bytes per second over the live samples."""
        now = self.clock()
        with self._lock:
            self._expire(now)
            total, span = self._measure(now)
        return total / span if span > 0 else 0.0

    def wait_s(self) -> float:
        """How long until the rate is back at the bound if nothing more is recorded (0: under it)."""
        if self.unlimited:
            return 0.0
        now = self.clock()
        with self._lock:
            self._expire(now)
            windows = [(start, nbytes) for start, nbytes in self._windows]
        shortest = (self.samples - 1) * self.window_s
        lifetime = self.samples * self.window_s
        t = now
        for i, (start, _) in enumerate(windows):
            if t - start >= lifetime - _EPSILON_S:
                continue  # expired by then: the rate is that of the later samples
            needed = sum(nbytes for _, nbytes in windows[i:]) / self.bound  # the span that brings them to the bound
            if needed <= shortest:
                break
            if start + needed < start + lifetime:
                t = max(t, start + needed)
                break
            t = start + lifetime  # this sample expires first
        return t - now

    def wait(self, cancelled: Callable[[], bool], step_s: float = 0.1) -> bool:
        """Block until the rate is back under the bound; False if ``cancelled`` said so first.
        The time waited is counted as throttled."""
        started = self.clock()
        waits = 0
        try:
            while (remaining := self.wait_s()) > 0:
                waits = 1
                if cancelled():
                    return False
                time.sleep(min(remaining, step_s))
            return True
        finally:
            if waits:
                self._count(self.clock() - started)

    def left_out(self) -> float:
        """A remote read left out of an answer because the rate is above the bound: counted, with
        the wait it would have needed; returns that wait (0 if the rate is under the bound)."""
        waited = self.wait_s()
        if waited > 0:
            self._count(waited)
        return waited

    def _count(self, seconds: float) -> None:
        with self._lock:
            self.throttled += 1
            self.throttled_s += seconds

    def _expire(self, now: float) -> None:
        while self._windows and now - self._windows[0][0] >= self.samples * self.window_s - _EPSILON_S:
            self._windows.popleft()

    def _measure(self, now: float) -> tuple[float, float]:
        total = sum(w[1] for w in self._windows)
        oldest = self._windows[0][0] if self._windows else now
        return total, max(now - oldest, (self.samples - 1) * self.window_s)
