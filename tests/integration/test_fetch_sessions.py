"""KIP-227 fetch sessions through a live proxy, on raw sockets: the proxy ends clients' sessions
itself and must answer each state as a Kafka broker does (KIP-227, FetchSession.scala's rules)."""

from __future__ import annotations

from typing import Any

import pytest

from protocol.apis import FETCH
from protocol.errors import ErrorCode
from tests.clients import Rec, produce
from tests.raw import RawClient

VERSION = 12  # the highest Fetch the proxy offers (topics by name)


def _fetch(client: RawClient, session_id: int, epoch: int, offsets: dict[tuple[str, int], int],
           forgotten: dict[str, list[int]] | None = None) -> dict[str, Any]:
    topics: dict[str, list[dict[str, Any]]] = {}
    for (topic, partition), offset in offsets.items():
        topics.setdefault(topic, []).append({"partition": partition, "current_leader_epoch": -1,
                                             "fetch_offset": offset, "last_fetched_epoch": -1,
                                             "log_start_offset": -1, "partition_max_bytes": 1 << 20})
    return client.request(FETCH, VERSION, {
        "replica_id": -1, "max_wait_ms": 100, "min_bytes": 0, "max_bytes": 8 << 20, "isolation_level": 0,
        "session_id": session_id, "session_epoch": epoch,
        "topics": [{"topic": t, "partitions": ps} for t, ps in topics.items()],
        "forgotten_topics_data": [{"topic": t, "partitions": ps} for t, ps in (forgotten or {}).items()],
        "rack_id": ""})


def _answered(response: dict[str, Any]) -> dict[tuple[str, int], tuple[int, int]]:
    """(topic, partition) -> (high watermark, record bytes) for each partition in the answer."""
    return {(t["topic"], p["partition_index"]): (p["high_watermark"], len(p["records"] or b""))
            for t in response["responses"] for p in t["partitions"]}


@pytest.fixture
def two_partitions(proxy, unique_name) -> tuple[RawClient, str]:
    """A 2-partition topic with 10 records in partition 0 and none in 1, and a raw client on
    the leader's proxy port."""
    from kafka import KafkaAdminClient
    from kafka.admin import NewTopic

    admin = KafkaAdminClient(bootstrap_servers=proxy.bootstrap)
    admin.create_topics([NewTopic(unique_name, 2, 1)])
    admin.close()
    produce("kafka-python", proxy.bootstrap, unique_name, [Rec(0, None, b"v%d" % i) for i in range(10)])
    (port,) = proxy.node_ports.values()
    client = RawClient(f"127.0.0.1:{port}")
    yield client, unique_name
    client.close()


def test_session_states_answer_as_a_broker_would(proxy, two_partitions):
    client, topic = two_partitions
    p0, p1 = (topic, 0), (topic, 1)

    # Epoch 0 opens a session; a full answer names every partition.
    full = _fetch(client, 0, 0, {p0: 0, p1: 0})
    assert full["error_code"] == ErrorCode.NONE
    session = full["session_id"]
    assert session != 0
    assert _answered(full) == {p0: (10, _answered(full)[p0][1]), p1: (0, 0)}
    assert _answered(full)[p0][1] > 0

    # Incremental: p0 moved to its end, nothing else changed, so nothing is answered.
    assert _answered(_fetch(client, session, 1, {p0: 10})) == {}
    # A partition the client leaves out is still fetched at its cached offset: new records in p1.
    produce("kafka-python", proxy.bootstrap, topic, [Rec(1, None, b"w%d" % i) for i in range(3)])
    answer = _fetch(client, session, 2, {})
    assert answer["session_id"] == session
    assert set(_answered(answer)) == {p1} and _answered(answer)[p1][0] == 3 and _answered(answer)[p1][1] > 0

    # The wrong epoch and an unknown session are top-level errors; neither disturbs the session.
    wrong = _fetch(client, session, 7, {})
    assert wrong["error_code"] == ErrorCode.INVALID_FETCH_SESSION_EPOCH and wrong["responses"] == []
    unknown = _fetch(client, session ^ 0x5A5A5A5, 1, {})
    assert unknown["error_code"] == ErrorCode.FETCH_SESSION_ID_NOT_FOUND

    # Forgetting p1: records produced to it afterwards are no longer answered.
    assert _answered(_fetch(client, session, 3, {p1: 3}, forgotten={topic: [1]})) == {}
    produce("kafka-python", proxy.bootstrap, topic, [Rec(1, None, b"late")])
    assert _answered(_fetch(client, session, 4, {})) == {}
    produce("kafka-python", proxy.bootstrap, topic, [Rec(0, None, b"p0-late")])
    assert set(_answered(_fetch(client, session, 5, {}))) == {p0}

    # Epoch -1 closes it: a sessionless full answer, and the id is gone afterwards.
    closing = _fetch(client, session, -1, {p0: 0})
    assert closing["session_id"] == 0 and set(_answered(closing)) == {p0}
    assert _fetch(client, session, 6, {})["error_code"] == ErrorCode.FETCH_SESSION_ID_NOT_FOUND


def test_sessions_belong_to_the_broker_port_they_were_opened_on(proxy, two_partitions):
    client, topic = two_partitions
    session = _fetch(client, 0, 0, {(topic, 0): 0})["session_id"]
    assert session != 0
    other = RawClient(proxy.bootstrap)
    try:
        assert _fetch(other, session, 1, {})["error_code"] == ErrorCode.FETCH_SESSION_ID_NOT_FOUND
    finally:
        other.close()
    # The failed attempt elsewhere did not touch the session.
    assert _fetch(client, session, 1, {})["error_code"] == ErrorCode.NONE


def test_a_new_initial_epoch_replaces_the_old_session(proxy, two_partitions):
    client, topic = two_partitions
    first = _fetch(client, 0, 0, {(topic, 0): 0})["session_id"]
    second = _fetch(client, first, 0, {(topic, 1): 0})
    assert second["session_id"] not in (0, first) and set(_answered(second)) == {(topic, 1)}
    assert _fetch(client, first, 1, {})["error_code"] == ErrorCode.FETCH_SESSION_ID_NOT_FOUND
