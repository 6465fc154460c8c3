"""One connection's responses in request order: a slot per request, filled when its answer is
known, and a queue the connection's response loop takes them from, oldest first, once answered.

The response loop is woken only when the oldest slot has its answer. With a memory channel of
slots it was woken twice per request (once for the slot, once for its answer), and the request
loop took a turn of the event loop for every send: a forwarded request took five turns, now three
(counted in tests/integration/test_response_turns.py, issue 36).
"""

from __future__ import annotations

import collections
import time
from typing import TYPE_CHECKING, Any

import trio

if TYPE_CHECKING:
    from proxy.byte_budget import Holding
    from proxy.framing import FrameStream


class Relay:
    """An answer to stream from the broker's socket to the client's (proxy/connection.py);
    ``done`` is set once it has gone through, or failed."""

    __slots__ = ("source", "size", "done")

    def __init__(self, source: FrameStream, size: int) -> None:
        self.source = source
        self.size = size
        self.done = trio.Event()


Payload = bytes | bytearray | memoryview | list[Any] | Relay


class Slot:
    """The place of one request's response in the connection's response order."""

    __slots__ = ("order", "answered", "payload", "api_key", "version", "started", "outcome", "held")

    def __init__(self, order: ResponseOrder, api_key: int, version: int) -> None:
        self.order = order
        self.answered = False
        self.payload: Payload | None = None  # None: nothing goes back to the client
        self.api_key = api_key
        self.version = version
        self.started = time.perf_counter()
        # forwarded (as is), relayed (forwarded as it arrived), rewritten (the proxy changed
        # request or answer), local (answered by the proxy), unsupported (UNSUPPORTED_VERSION),
        # no_response (acks=0)
        self.outcome = "forwarded"
        self.held: list[Holding] = []  # budget bytes the answer takes until the client has it

    def release(self) -> None:
        for holding in self.held:
            holding.release()
        self.held.clear()

    def resolve(self, payload: Payload | None) -> None:
        self.payload = payload
        self.answered = True
        self.order.on_answer(self)


class ResponseOrder:
    """Slots in request order, at most ``capacity`` of them: ``add`` waits for room beyond that
    (the client has that many requests unanswered), ``next`` for the oldest slot's answer."""

    def __init__(self, capacity: int) -> None:
        self.capacity = max(capacity, 1)
        self._slots: collections.deque[Slot] = collections.deque()
        self._ready = trio.Event()  # the oldest slot is answered, or no slot will come
        self._room: trio.Event | None = None  # set when a slot leaves a full queue
        self._closed = False

    def add(self, api_key: int, version: int) -> Slot | None:
        """The next request's slot, or None when the queue is full (wait with ``room``)."""
        if self._closed:
            raise trio.ClosedResourceError("no requests after the client closed")
        if len(self._slots) >= self.capacity:
            return None
        slot = Slot(self, api_key, version)
        self._slots.append(slot)
        return slot

    async def room(self) -> None:
        """Until a slot has left the queue."""
        if len(self._slots) >= self.capacity:
            if self._room is None:
                self._room = trio.Event()
            await self._room.wait()

    def on_answer(self, slot: Slot) -> None:
        """``slot`` has its answer: the response loop goes on if it is the oldest."""
        if self._slots and self._slots[0] is slot:
            self._ready.set()

    def close(self) -> None:
        """No more slots: ``next`` returns None once the queued ones are taken."""
        self._closed = True
        self._ready.set()

    async def next(self) -> Slot | None:
        """The oldest slot once it is answered, taken off the queue; None when closed and empty."""
        while True:
            if self._slots and self._slots[0].answered:
                slot = self._slots.popleft()
                if self._room is not None:
                    self._room.set()
                    self._room = None
                return slot
            if self._closed and not self._slots:
                return None
            if self._ready.is_set():
                self._ready = trio.Event()
            await self._ready.wait()
