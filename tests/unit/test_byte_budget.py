"""ByteBudget: takers wait for room, an answer larger than the budget goes through alone, and
whatever is held goes back exactly once (checked against a model over random schedules)."""

from __future__ import annotations

import trio
import trio.testing
from hypothesis import given, settings
from hypothesis import strategies as st

from proxy.byte_budget import ByteBudget


def test_a_taker_waits_until_its_bytes_fit():
    async def main() -> None:
        budget = ByteBudget(100, "test")
        first = await budget.acquire(80)
        got: list[int] = []

        async def second() -> None:
            got.append((await budget.acquire(50)).nbytes)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(second)
            await trio.testing.wait_all_tasks_blocked()
            assert got == [] and budget.waits == 1
            first.release()
        assert got == [50] and budget.used == 50 and budget.peak == 80

    trio.run(main)


def test_a_partial_grant_takes_the_room_there_is_but_at_least_the_minimum():
    async def main() -> None:
        budget = ByteBudget(100, "test")
        await budget.acquire(70)
        part = await budget.acquire(50, minimum=20)
        assert part.nbytes == 30 and budget.used == 100
        part.resize(45)  # one batch more than was granted: held over the limit
        assert budget.used == 115 and budget.peak == 115
        part.resize(10)
        assert budget.used == 80

    trio.run(main)


def test_more_than_the_whole_budget_goes_through_alone():
    async def main() -> None:
        budget = ByteBudget(100, "test")
        big = await budget.acquire(500)
        assert big.nbytes == 500
        with trio.move_on_after(0.05) as scope:
            await budget.acquire(1)
        assert scope.cancelled_caught  # nothing fits while it is held
        big.release()
        assert (await budget.acquire(1)).nbytes == 1

    trio.run(main)


def test_an_unbounded_budget_counts_and_never_waits():
    async def main() -> None:
        budget = ByteBudget(0, "test")
        holdings = [await budget.acquire(1 << 30) for _ in range(3)]
        assert budget.used == 3 << 30 and budget.waits == 0
        for h in holdings:
            h.release()
            h.release()  # idempotent
        assert budget.used == 0

    trio.run(main)


@settings(max_examples=100, deadline=None)
@given(st.integers(1, 1000), st.lists(st.tuples(st.integers(0, 1500), st.integers(0, 1500), st.integers(0, 3)),
                                      min_size=1, max_size=12))
def test_concurrent_takers_never_exceed_the_limit_beyond_one_oversize_answer(limit, takers):
    """Takers (want, minimum, steps held) run at once: every one is served, the bytes held never
    pass the limit unless a single holding does alone, and everything goes back."""

    async def main() -> None:
        budget = ByteBudget(limit, "test")
        held: list[int] = []
        worst = [0]

        async def taker(want: int, minimum: int, steps: int) -> None:
            holding = await budget.acquire(want, minimum=minimum)
            held.append(holding.nbytes)
            assert min(minimum, want) <= holding.nbytes <= want
            if budget.used > limit:
                assert len([n for n in held if n]) == 1, (budget.used, held)  # alone (empty holdings aside)
            worst[0] = max(worst[0], budget.used)
            for _ in range(steps):
                await trio.sleep(0)
            held.remove(holding.nbytes)
            holding.release()

        with trio.fail_after(5):
            async with trio.open_nursery() as nursery:
                for want, minimum, steps in takers:
                    nursery.start_soon(taker, want, minimum, steps)
        assert budget.used == 0
        assert budget.peak == worst[0]

    trio.run(main)
