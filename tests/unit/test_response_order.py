"""A connection's responses leave in request order, however their answers arrive (proxy/response_order.py)."""

from __future__ import annotations

import pytest
import trio
from hypothesis import given, settings
from hypothesis import strategies as st

from proxy.response_order import ResponseOrder


@settings(max_examples=50, deadline=None)
@given(st.permutations(range(12)), st.lists(st.integers(0, 3), min_size=12, max_size=12))
def test_answers_in_any_order_leave_in_request_order(answer_order: list[int], answers_between: list[int]) -> None:
    """Requests come while answers arrive in any order (``answers_between[i]`` answers after
    request i): the response loop writes them in request order."""

    async def main() -> list[int]:
        order = ResponseOrder(12)
        written: list[int] = []

        async def response_loop() -> None:
            while (slot := await order.next()) is not None:
                written.append(slot.api_key)

        with trio.fail_after(10):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(response_loop)
                slots = {}
                to_answer = list(answer_order)
                for request in range(12):
                    slot = order.add(request, 0)
                    assert slot is not None
                    slots[request] = slot
                    for _ in range(answers_between[request]):
                        asked = [r for r in to_answer if r in slots]
                        if asked:
                            to_answer.remove(asked[0])
                            slots.pop(asked[0]).resolve(b"")
                    await trio.sleep(0)
                for r in to_answer:
                    slots.pop(r).resolve(b"")
                    await trio.sleep(0)
                order.close()
        return written

    assert trio.run(main) == list(range(12))


def test_a_full_order_takes_no_slot_until_the_oldest_leaves() -> None:
    async def main() -> None:
        order = ResponseOrder(2)
        first, second = order.add(0, 0), order.add(1, 0)
        assert first is not None and second is not None
        assert order.add(2, 0) is None  # two unanswered: the request loop must wait
        second.resolve(b"b")
        with trio.move_on_after(0.05) as waited:
            await order.room()
        assert waited.cancelled_caught  # an answer behind the oldest frees nothing
        first.resolve(b"a")
        assert (await order.next()) is first
        await order.room()  # now there is room
        assert order.add(2, 0) is not None

    trio.run(main)


def test_a_closed_order_drains_then_ends() -> None:
    async def main() -> None:
        order = ResponseOrder(4)
        slot = order.add(0, 0)
        assert slot is not None
        order.close()
        with pytest.raises(trio.ClosedResourceError):
            order.add(1, 0)
        slot.resolve(None)
        assert (await order.next()) is slot
        assert (await order.next()) is None

    trio.run(main)
