"""Turns of the event loop a forwarded request costs the proxy, counted in a proxy run in this
process in front of Apache Kafka 4.4 (issue 36). Counted, not timed: each turn is some
microseconds of Python, and what the proxy adds to a Fetch round trip (+93 µs pinned,
tests/bench/relay_floor.py) was its turns.

The least a forwarded request can take is one turn of each of the connection's three loops: the
request loop woken by the client's bytes, the upstream loop by the broker's, and the response loop
by the answer to write. A memory channel of slots took five (the request loop a turn for every
send, the response loop woken for the slot and again for its answer)."""

from __future__ import annotations

import collections
import threading
from collections.abc import Iterator
from typing import Any

import pytest
import trio
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from protocol.apis import FETCH
from proxy.config import ProxyConfig
from proxy.filters import build_chain
from proxy.server import Proxy
from tests.bench.backfill import raw_fetch_body
from tests.proxy_process import free_port
from tests.raw import RawClient

RECORDS = 1500  # of 1 KiB: a 1 MiB Fetch answer is relayed (proxy/connection.py, 512 KiB or more)
REQUESTS = 50


class _TurnsByLoop(trio.abc.Instrument):
    def __init__(self) -> None:
        self.counting = False
        self.turns: collections.Counter[str] = collections.Counter()

    def before_task_step(self, task: trio.lowlevel.Task) -> None:
        if self.counting:
            self.turns[task.name.rsplit(".", 1)[-1]] += 1


@pytest.fixture(scope="module")
def proxy_in_process(kafka) -> Iterator[tuple[str, _TurnsByLoop]]:
    """A pass-through proxy (no tiering) on a trio loop in a thread of this process: the address of
    its listener for broker 1, and the instrument counting its loops' turns."""
    host, port = kafka.bootstrap.rsplit(":", 1)
    base = free_port()
    config = ProxyConfig(bootstrap_servers=[(host, int(port))], listen_port=free_port(), broker_port_base=base,
                         broker_node_id_min=1)
    proxy = Proxy(config, build_chain(config, None), [])
    counter = _TurnsByLoop()
    started, stop = threading.Event(), threading.Event()

    async def serve() -> None:
        async with trio.open_nursery() as nursery:
            await nursery.start(proxy.run)
            trio.lowlevel.add_instrument(counter)
            started.set()
            while not stop.is_set():
                await trio.sleep(0.05)
            nursery.cancel_scope.cancel()

    thread = threading.Thread(target=trio.run, args=(serve,), daemon=True)
    thread.start()
    try:
        assert started.wait(30), "the in-process proxy did not start"
        yield f"127.0.0.1:{base}", counter
    finally:
        stop.set()
        thread.join(30)


@pytest.fixture(scope="module")
def topic(kafka) -> str:
    name = "response-turns"
    admin = AdminClient({"bootstrap.servers": kafka.bootstrap})  # kept alive until the topic exists
    admin.create_topics([NewTopic(name, 1, 1)])[name].result(30)
    producer = Producer({"bootstrap.servers": kafka.bootstrap, "linger.ms": 20})
    for _ in range(RECORDS):
        producer.produce(name, bytes(1024), partition=0)
    assert producer.flush(30) == 0
    return name


def _fetch(client: RawClient, topic: str, offset: int) -> dict[str, Any]:
    # Answered at once (no wait at the log end), up to 1 MiB.
    body = {**raw_fetch_body(topic, [offset], [offset + 1]), "max_wait_ms": 0, "min_bytes": 0}
    answer = client.request(FETCH, 12, body)
    (partition,) = answer["responses"][0]["partitions"]
    assert partition["error_code"] == 0
    return partition


def _turns_per_request(address: str, counter: _TurnsByLoop, topic: str, offset: int) -> tuple[dict[str, float], int]:
    client = RawClient(address)
    try:
        _fetch(client, topic, offset)  # the connection to the broker made
        counter.turns.clear()
        counter.counting = True
        size = 0
        for _ in range(REQUESTS):
            size = len(_fetch(client, topic, offset)["records"] or b"")
        counter.counting = False
    finally:
        client.sock.close()
    return {loop: n / REQUESTS for loop, n in counter.turns.items()}, size


def test_a_forwarded_request_takes_one_turn_of_each_loop(proxy_in_process, topic) -> None:
    address, counter = proxy_in_process
    turns, size = _turns_per_request(address, counter, topic, RECORDS)  # at the log end: an empty answer
    assert size == 0
    assert turns.get("_run_handler", 0) <= 1.05, turns  # the request loop (trio names it for its handler)
    assert turns.get("_response_loop", 0) <= 1.05, turns
    assert turns.get("_upstream_loop", 0) <= 1.25, turns  # now and then the answer is there before it waits
    assert sum(turns.values()) <= 3.4, turns


def test_a_relayed_answer_adds_turns_only_where_it_waits_for_a_socket(proxy_in_process, topic) -> None:
    address, counter = proxy_in_process
    turns, size = _turns_per_request(address, counter, topic, 0)
    assert size > 512 * 1024  # relayed, not held
    # Now and then a request waits on a relay still sending the last answer (1.06 once, in a CI with
    # a Java process spinning beside it).
    assert turns.get("_run_handler", 0) <= 1.1, turns
    # The upstream loop: woken by the answer's head, then by the relay's end.
    assert turns.get("_upstream_loop", 0) <= 2.25, turns
