"""ByteRateQuota (KIP-956's copy and remote fetch quotas): the rate over the live samples, and the
wait that brings it back to the bound."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tiering.quota import UNLIMITED, ByteRateQuota


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_under_the_bound_nothing_waits():
    clock = Clock()
    quota = ByteRateQuota(1000, samples=2, window_s=1, clock=clock)
    quota.record(500)
    assert quota.wait_s() == 0
    assert quota.rate() == 500  # over at least (samples - 1) windows


def test_over_the_bound_the_wait_brings_the_rate_back():
    clock = Clock()
    quota = ByteRateQuota(1000, samples=3, window_s=1, clock=clock)
    quota.record(5000)
    assert quota.wait_s() == pytest.approx(3.0)  # 5000 bytes at 1000/s span 5 s; 2 s of window already count
    clock.now += 3.0
    assert quota.wait_s() == 0  # the sample expired
    assert quota.rate() == 0


def test_unlimited_never_waits_nor_counts():
    quota = ByteRateQuota(UNLIMITED)
    quota.record(10**15)
    assert quota.wait_s() == 0 and quota.unlimited


def test_bad_settings_are_refused():
    for args in ((0,), (10, 0), (10, 2, 0)):
        with pytest.raises(ValueError):
            ByteRateQuota(*args)


def test_left_out_reads_are_counted_with_their_wait():
    clock = Clock()
    quota = ByteRateQuota(100, samples=2, window_s=1, clock=clock)
    assert quota.left_out() == 0 and quota.throttled == 0
    quota.record(300)
    assert quota.left_out() == pytest.approx(2.0)
    assert (quota.throttled, quota.throttled_s) == (1, pytest.approx(2.0))


def test_a_cancelled_wait_returns_false_and_counts():
    clock = Clock()
    quota = ByteRateQuota(100, samples=2, window_s=1, clock=clock)
    quota.record(10_000)
    assert quota.wait(lambda: True) is False
    assert quota.throttled == 1


@given(bound=st.integers(100, 10_000), samples=st.integers(2, 11),
       steps=st.lists(st.tuples(st.integers(1, 50_000), st.floats(0, 3)), min_size=1, max_size=60))
def test_after_the_wait_it_asks_for_the_rate_is_at_most_the_bound(bound, samples, steps):
    """Whatever was recorded and whenever: waiting as told brings the measured rate to the bound,
    and a wait of 0 means the rate is at most the bound already."""
    clock = Clock()
    quota = ByteRateQuota(bound, samples=samples, window_s=1, clock=clock)
    for size, pause in steps:
        quota.record(size)
        clock.now += pause
        if quota.wait_s() == 0:
            assert quota.rate() <= bound + 1e-6
        clock.now += quota.wait_s()
        assert quota.rate() <= bound + 1e-6
