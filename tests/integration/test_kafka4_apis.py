"""Kafka 4's group and share-group APIs through the proxy, byte for byte (issue 16, items 2-4).

Apache Kafka 4.4's own coordinators behind the proxy are in test_kafka_clients.py (KIP-848 groups
with librdkafka and the Java consumer, a share group with Kafka's console share consumer). Here
the proxy stands in front of a scripted broker (`tests/scripted_broker.py`) that advertises Kafka
4.2's versions as kafka-python records them and answers from the tests' scripts, which shows what
a real coordinator cannot: that the proxy offers these APIs exactly where the broker does, forwards
requests unchanged, and passes answers through with their records byte-equal and their KIP-951
leader endpoints re-addressed to the proxy. On a broker without KIP-848 (Tansu), a
confluent-kafka consumer with ``group.protocol=consumer`` fails the same way through the proxy as
directly (`test_consumer_group_protocol_where_the_broker_lacks_it`).
"""

from __future__ import annotations

import logging
import time
import uuid

import pytest
from confluent_kafka import Consumer

from protocol.apis import API_VERSIONS, FETCH, SHARE_ACKNOWLEDGE, SHARE_FETCH, api
from protocol.errors import ErrorCode
from protocol.headers import decode_request_header
from protocol.records import Record, build_batch
from proxy.filters.tiered_offsets import TieredOffsets
from proxy.filters.tiered_reads import TieredReads
from proxy.filters.topic_admin import TopicAdmin
from tests.api_matrix import offered_with_tiering
from tests.proxy_process import start_proxy
from tests.raw import RawClient
from tests.scripted_broker import KAFKA_4_2, ScriptedBroker

CONSUMER_GROUP_HEARTBEAT = 68
SHARE_GROUP_HEARTBEAT = 76
TOPIC_ID = uuid.UUID("6d8c4d1f-3a52-4a8e-9b0e-1f1f2a2b3c4d").bytes
RECORDS = build_batch([Record(40 + i, 1_700_000_000_000 + i, b"k%d" % i, b"v%d" % i, []) for i in range(5)],
                      base_offset=40, partition_leader_epoch=3)
# Node 2 leads now; the broker names it in the answers' NodeEndpoints (its real port is the script's).
LEADER_MOVED = {"leader_id": 2, "leader_epoch": 4}


def _node_endpoints(port: int) -> list[dict]:
    return [{"node_id": 2, "host": "127.0.0.1", "port": port, "rack": "r2"}]


def _heartbeat_answer(version: int, request: dict) -> dict:
    return {"throttle_time_ms": 0, "error_code": 0, "error_message": None, "member_id": request["member_id"],
            "member_epoch": 7, "heartbeat_interval_ms": 5000,
            "assignment": {"topic_partitions": [{"topic_id": TOPIC_ID, "partitions": [0, 1]}]}}


@pytest.fixture(scope="module")
def kafka4(tmp_path_factory):
    answers = {
        CONSUMER_GROUP_HEARTBEAT: _heartbeat_answer,
        SHARE_GROUP_HEARTBEAT: _heartbeat_answer,
        SHARE_FETCH: lambda version, request: {
            "throttle_time_ms": 0, "error_code": 0, "error_message": None, "acquisition_lock_timeout_ms": 30000,
            "responses": [{"topic_id": TOPIC_ID, "partitions": [
                {"partition_index": 0, "error_code": 0, "error_message": None, "acknowledge_error_code": 0,
                 "acknowledge_error_message": None, "current_leader": {"leader_id": 1, "leader_epoch": 3},
                 "records": RECORDS, "acquired_records": [{"first_offset": 40, "last_offset": 44, "delivery_count": 1}]},
                {"partition_index": 1, "error_code": ErrorCode.NOT_LEADER_OR_FOLLOWER, "error_message": None,
                 "acknowledge_error_code": 0, "acknowledge_error_message": None, "current_leader": LEADER_MOVED,
                 "records": None, "acquired_records": []}]}],
            "node_endpoints": _node_endpoints(broker.port)},
        SHARE_ACKNOWLEDGE: lambda version, request: {
            "throttle_time_ms": 0, "error_code": 0, "error_message": None, "acquisition_lock_timeout_ms": 30000,
            "responses": [{"topic_id": TOPIC_ID, "partitions": [
                {"partition_index": 1, "error_code": ErrorCode.NOT_LEADER_OR_FOLLOWER, "error_message": None,
                 "current_leader": LEADER_MOVED}]}],
            "node_endpoints": _node_endpoints(broker.port)},
        FETCH: lambda version, request: {
            "throttle_time_ms": 0, "error_code": 0, "session_id": 0,
            "responses": [{"topic": "", "topic_id": TOPIC_ID, "partitions": [
                {"partition_index": 1, "error_code": ErrorCode.NOT_LEADER_OR_FOLLOWER, "high_watermark": -1,
                 "last_stable_offset": -1, "log_start_offset": -1, "current_leader": LEADER_MOVED,
                 "aborted_transactions": None, "preferred_read_replica": -1, "records": None}]}],
            "node_endpoints": _node_endpoints(broker.port)},
    }
    broker = ScriptedBroker(KAFKA_4_2, answers, node_ids=(1, 2))
    proxy = start_proxy(broker.bootstrap, tmp_path_factory.mktemp("kafka4") / "proxy", node_ids=[1, 2])
    yield broker, proxy
    proxy.stop()
    broker.close()


def _through(kafka4, api_key: int, version: int, body: dict) -> tuple[dict, bytes, bytes]:
    """The answer through the proxy, the request frame the client sent and the one the broker got."""
    broker, proxy = kafka4
    before = len(broker.requests_of(api_key))
    client = RawClient(proxy.bootstrap)
    try:
        corr = client.send(api_key, version, body)
        sent = client.last_frame
        got, answer = client.recv()
    finally:
        client.close()
    assert got == corr
    received = broker.requests_of(api_key)
    assert len(received) == before + 1
    return answer, sent, received[-1][1]


def _body(api_key: int, version: int, frame: bytes) -> bytes:
    return frame[decode_request_header(memoryview(frame), api(api_key).request_header_version(version))[1]:]


def test_the_proxy_offers_kafka_4_apis_the_broker_offers(kafka4):
    _, proxy = kafka4
    client = RawClient(proxy.bootstrap)
    try:
        answer = client.request(API_VERSIONS, 3, {"client_software_name": "raw", "client_software_version": "1"})
    finally:
        client.close()
    offered = {k["api_key"]: (k["min_version"], k["max_version"]) for k in answer["api_keys"]}
    # (Tiering is on, as by default: ListOffsets is offered v1-v10 and translated, Fetch up to v18.)
    assert offered == offered_with_tiering(KAFKA_4_2)
    assert {key: offered[key] for key in (68, 69, 76, 77, 78, 79)} == {
        68: (0, 1), 69: (0, 1), 76: (1, 1), 77: (1, 1), 78: (1, 2), 79: (1, 2)}


@pytest.mark.parametrize("api_key", [CONSUMER_GROUP_HEARTBEAT, SHARE_GROUP_HEARTBEAT])
def test_group_heartbeats_pass_through_unchanged(kafka4, api_key):
    version = 1
    body = {"group_id": "g", "member_id": "member-1", "member_epoch": 0, "rebalance_timeout_ms": 30000,
            "subscribed_topic_names": ["tiered-topic"]}
    answer, sent, received = _through(kafka4, api_key, version, body)
    assert _body(api_key, version, received) == _body(api_key, version, sent)
    assert answer == _heartbeat_answer(version, {"member_id": "member-1"})


@pytest.mark.parametrize("version", [1, 2])
def test_share_fetch_records_pass_byte_equal_and_new_leaders_are_re_addressed(kafka4, version):
    broker, proxy = kafka4
    body = {"group_id": "sg", "member_id": "member-1", "share_session_epoch": 0, "max_wait_ms": 500,
            "min_bytes": 1, "max_bytes": 1 << 20, "max_records": 500, "batch_size": 500,
            "topics": [{"topic_id": TOPIC_ID, "partitions": [{"partition_index": 0}, {"partition_index": 1}]}]}
    answer, sent, received = _through(kafka4, SHARE_FETCH, version, body)
    assert _body(SHARE_FETCH, version, received) == _body(SHARE_FETCH, version, sent)
    first, second = answer["responses"][0]["partitions"]
    assert bytes(first["records"]) == RECORDS
    assert first["acquired_records"] == [{"first_offset": 40, "last_offset": 44, "delivery_count": 1}]
    assert second["error_code"] == ErrorCode.NOT_LEADER_OR_FOLLOWER and second["current_leader"] == LEADER_MOVED
    assert answer["node_endpoints"] == [{"node_id": 2, "host": "127.0.0.1", "port": proxy.node_ports[2], "rack": "r2"}]


_FETCH_V17 = {"replica_id": -1, "max_wait_ms": 0, "min_bytes": 1, "max_bytes": 1 << 20, "isolation_level": 0,
              "session_id": 0, "session_epoch": -1, "topics": [{"topic_id": TOPIC_ID, "partitions": [
                  {"partition": 1, "current_leader_epoch": 3, "fetch_offset": 0, "last_fetched_epoch": -1,
                   "log_start_offset": -1, "partition_max_bytes": 1 << 20}]}],
              "forgotten_topics_data": [], "rack_id": ""}


def test_share_acknowledge_not_leader_names_the_new_leader_at_the_proxy(kafka4):
    _, proxy = kafka4
    body = {"group_id": "sg", "member_id": "member-1", "share_session_epoch": 1, "topics": [
        {"topic_id": TOPIC_ID, "partitions": [{"partition_index": 1, "acknowledgement_batches": [
            {"first_offset": 40, "last_offset": 44, "acknowledge_types": [1]}]}]}]}
    answer, _, _ = _through(kafka4, SHARE_ACKNOWLEDGE, 2, body)
    partition = answer["responses"][0]["partitions"][0]
    assert partition["error_code"] == ErrorCode.NOT_LEADER_OR_FOLLOWER and partition["current_leader"] == LEADER_MOVED
    assert answer["node_endpoints"] == [{"node_id": 2, "host": "127.0.0.1", "port": proxy.node_ports[2], "rack": "r2"}]


def test_fetch_v16_and_up_is_asked_as_v15_and_its_answer_passes_untouched(kafka4):
    """Fetch v16-18 add only NodeEndpoints and replicas' tags: the broker is asked at v15, the same
    request bytes under another version number, and its answer (which names no broker) goes back as
    it is, to be relayed when large (issue 36). The client learns of the new leader by its error and
    current_leader, and finds its address with Metadata, as at v15."""
    broker, _ = kafka4
    answer, sent, received = _through(kafka4, FETCH, 17, _FETCH_V17)
    assert broker.requests_of(FETCH)[-1][0] == 15
    assert _body(FETCH, 15, received) == _body(FETCH, 17, sent)
    partition = answer["responses"][0]["partitions"][0]
    assert partition["error_code"] == ErrorCode.NOT_LEADER_OR_FOLLOWER and partition["current_leader"] == LEADER_MOVED
    assert not answer["node_endpoints"]


def test_fetch_new_leaders_are_re_addressed_where_the_broker_has_no_v15(kafka4, tmp_path):
    """A broker whose Fetch starts at v16 answers with NodeEndpoints: those are rewritten to the
    proxy's ports."""
    scripted, _ = kafka4
    broker = ScriptedBroker({**KAFKA_4_2, FETCH: (16, 18)}, scripted.answers, node_ids=(1, 2))
    proxy = start_proxy(broker.bootstrap, tmp_path / "proxy", node_ids=[1, 2])
    try:
        answer, _, _ = _through((broker, proxy), FETCH, 17, _FETCH_V17)
        assert broker.requests_of(FETCH)[-1][0] == 17
        partition = answer["responses"][0]["partitions"][0]
        assert partition["current_leader"] == LEADER_MOVED
        assert answer["node_endpoints"] == [{"node_id": 2, "host": "127.0.0.1", "port": proxy.node_ports[2],
                                             "rack": "r2"}]
    finally:
        proxy.stop()
        broker.close()


def _consumer_group_protocol_outcome(bootstrap: str, topic: str) -> tuple[str | None, int]:
    """What librdkafka says about a ``group.protocol=consumer`` subscription within 10 s, and how
    many records it got."""
    said: list[str] = []

    class Log(logging.Logger):
        def log(self, level, msg, *args, **kwargs):  # noqa: ANN202 - librdkafka's logger callback
            said.append(msg % args if args else msg)

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"g-{uuid.uuid4().hex[:8]}",
                         "group.protocol": "consumer", "auto.offset.reset": "earliest", "debug": "cgrp",
                         "logger": Log("rdkafka")})
    consumer.subscribe([topic])
    got, deadline = 0, time.monotonic() + 10
    try:
        while time.monotonic() < deadline:
            message = consumer.poll(0.2)
            got += message is not None and message.error() is None
            verdict = next((line for line in said if "ConsumerGroupHeartbeatRequest not supported" in line), None)
            if verdict:
                return verdict[verdict.index("ConsumerGroupHeartbeatRequest"):], got
    finally:
        consumer.close()
    return None, got


def test_consumer_group_protocol_where_the_broker_lacks_it(tansu, tmp_path, unique_name):
    """Tansu has no ConsumerGroupHeartbeat: the proxy does not offer it, and librdkafka says so
    through the proxy exactly as it does directly (it reads nothing either way)."""
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": tansu.bootstrap})
    admin.create_topics([NewTopic(unique_name, 1, 1)])[unique_name].result(10)
    proxy = start_proxy(tansu.bootstrap, tmp_path / "proxy")
    try:
        direct = _consumer_group_protocol_outcome(tansu.bootstrap, unique_name)
        through = _consumer_group_protocol_outcome(proxy.bootstrap, unique_name)
    finally:
        proxy.stop()
    assert direct == through == ("ConsumerGroupHeartbeatRequest not supported by broker", 0)


def test_no_filter_mixes_remote_records_into_share_answers():
    """Share groups read what the brokers hold (docs/compatibility.md, *Kafka 4 clients*): besides the parse
    check, only address rewriting sees ShareFetch and ShareAcknowledge."""
    from proxy.filters import AddressRewriting, FetchSessions, PrometheusMetrics, RequestValidation

    filters = (PrometheusMetrics, RequestValidation, AddressRewriting, FetchSessions, TieredReads, TieredOffsets,
               TopicAdmin)
    for api_key in (SHARE_FETCH, SHARE_ACKNOWLEDGE):
        assert {f.name for f in filters if api_key in f.apis} == {"request-validation", "address-rewriting"}
