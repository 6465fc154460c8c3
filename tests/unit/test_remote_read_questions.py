"""What a remote read asks the brokers, counted on a loopback server that speaks the Kafka protocol
(tests/scripted_broker.py): the log ends of a Fetch's partitions are one ListOffsets of each kind
per leader, on a connection the manager made at start, and a leader is asked of Metadata once. A
fresh proxy's first record from the remote tier waited on a new client per reader thread, its
connections, logins and a Metadata for each partition (issue 26)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from protocol.apis import API_VERSIONS, LIST_OFFSETS, METADATA
from tests.scripted_broker import ScriptedBroker
from tiering import broker_client
from tiering.broker_client import BrokerClient
from tiering.client_security import ClientSecurity
from tiering.model import TopicIdPartition
from tiering.read.broker_questions import BrokerQuestions

TOPIC = "orders"
TOPIC_ID = uuid.uuid4()
PARTITIONS = 3
END = 1000  # partition p's high watermark is END + p, its last stable offset END + p - 10


def _answers(port: list[int]) -> dict[int, Any]:
    def metadata(version: int, request: dict[str, Any]) -> dict[str, Any]:
        return {"throttle_time_ms": 0, "cluster_id": "scripted", "controller_id": 1,
                "brokers": [{"node_id": 1, "host": "127.0.0.1", "port": port[0], "rack": None}],
                "topics": [{"error_code": 0, "name": TOPIC, "topic_id": TOPIC_ID.bytes, "is_internal": False,
                            "partitions": [{"error_code": 0, "partition_index": p, "leader_id": 1, "leader_epoch": 0,
                                            "replica_nodes": [1], "isr_nodes": [1], "offline_replicas": []}
                                           for p in range(PARTITIONS)],
                            "topic_authorized_operations": -2147483648}
                           for _ in (request.get("topics") or [])],
                "cluster_authorized_operations": -2147483648}

    def list_offsets(version: int, request: dict[str, Any]) -> dict[str, Any]:
        committed = request["isolation_level"] == 1
        return {"throttle_time_ms": 0, "topics": [{"name": t["name"], "partitions": [
            {"partition_index": p["partition_index"], "error_code": 0, "old_style_offsets": [], "timestamp": -1,
             "offset": END + p["partition_index"] - (10 if committed else 0), "leader_epoch": 0}
            for p in t["partitions"]]} for t in request["topics"]]}

    return {METADATA: metadata, LIST_OFFSETS: list_offsets}


@pytest.fixture
def broker_and_questions() -> Iterator[tuple[ScriptedBroker, BrokerQuestions]]:
    port: list[int] = []
    broker = ScriptedBroker({API_VERSIONS: (0, 3), METADATA: (1, 12), LIST_OFFSETS: (1, 9)}, _answers(port))
    port.append(broker.port)
    questions = BrokerQuestions(broker.bootstrap, ClientSecurity())
    try:
        yield broker, questions
    finally:
        questions.close()
        broker.close()


def test_a_fetchs_log_ends_are_one_question_of_each_kind_on_a_connection_made_at_start(broker_and_questions):
    broker, questions = broker_and_questions
    questions.warm()  # what start() does on a thread of its own
    connections = broker.connections
    tps = [TopicIdPartition(TOPIC_ID, TOPIC, p) for p in range(PARTITIONS)]

    asked_from = len(broker.received)
    ends = questions.log_ends(tps)
    assert ends == {tp: (END + tp.partition, END + tp.partition - 10) for tp in tps}
    # The leaders once (all of the topic's partitions from one answer), then one ListOffsets LATEST
    # read_uncommitted and one read_committed for all three partitions; no ApiVersions, no login.
    asked = [key for key, _, _ in broker.received[asked_from:]]
    assert asked == [METADATA, LIST_OFFSETS, LIST_OFFSETS]
    for _, frame in broker.requests_of(LIST_OFFSETS):
        assert frame.count(TOPIC.encode()) == 1  # one topic entry...
    assert broker.connections == connections  # ...on the connections made at start

    asked_from = len(broker.received)
    assert questions.log_ends(tps) == ends
    assert [key for key, _, _ in broker.received[asked_from:]] == [LIST_OFFSETS, LIST_OFFSETS]
    assert broker.connections == connections


def test_a_client_closed_while_another_thread_connects_closes_quietly(broker_and_questions, monkeypatch):
    # A proxy stopping during its first tiering round closed the questions' clients while the
    # warm-up thread was connecting one, and stopped with a traceback instead of its one-line
    # error. Here the other thread's connection arrives exactly while close() closes the first.
    broker, _ = broker_and_questions
    client = BrokerClient(broker.bootstrap)
    client._connection(("127.0.0.1", broker.port))
    closed: list[str] = []
    close = broker_client._Connection.close

    def close_while_another_connects(conn: broker_client._Connection) -> None:
        close(conn)
        closed.append(conn.address)
        if len(closed) == 1:
            client._connection(("localhost", broker.port))

    monkeypatch.setattr(broker_client._Connection, "close", close_while_another_connects)
    client.close()
    assert closed == [f"127.0.0.1:{broker.port}", f"localhost:{broker.port}"]  # the newcomer closed too
    assert client._connections == {}
