"""What Apache Kafka accepts, the proxy accepts (issue 24): the requests real clients send that
Kafka's parsing takes although they are not exact, sent with the clients' own bytes to the broker
directly and through the proxy, with the same outcome both ways. Runs on Apache Kafka 4.4 and 3.9.

Kafka reads a request's fields and ignores what follows them (``AbstractRequest.parseRequest``
never looks at the bytes left over), keeps unknown tagged fields, and decodes strings with
replacement characters; the proxy's request validation reads requests the same way."""

from __future__ import annotations

import socket
import struct
import time
import uuid
from typing import Any

import pytest
from confluent_kafka import Consumer
from confluent_kafka.admin import AdminClient, NewTopic
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from protocol.apis import (
    ALTER_CONFIGS,
    API_VERSIONS,
    METADATA,
    PRODUCE,
    all_apis,
    api,
)
from protocol.headers import RequestHeader, decode_response_header, encode_request_header
from tests.delivery import CheckedProducer
from tests.proxy_process import start_proxy

pytestmark = pytest.mark.integration

ALTER_USER_SCRAM_CREDENTIALS = 51
# APIs whose default request would change the cluster itself (a broker or voter id 0 unregistered
# or removed): left out of the property, which sends every other API the broker offers.
CLUSTER_CHANGING = {64, 80, 81, 82}


@pytest.fixture(scope="module", params=["kafka", "kafka39"])
def ground(request, tmp_path_factory):
    broker = request.getfixturevalue(request.param)
    proxy = start_proxy(broker.bootstrap, tmp_path_factory.mktemp(f"lenient-{request.param}"))
    yield broker, proxy
    proxy.stop()


def _frame(api_key: int, version: int, body: bytes, corr: int = 7) -> bytes:
    spec = api(api_key)
    payload = encode_request_header(RequestHeader(api_key, version, corr, "rdkafka"),
                                    spec.request_header_version(version)) + body
    return struct.pack(">i", len(payload)) + payload


def _recv_exact(sock: socket.socket, n: int) -> bytes | None:
    out = bytearray()
    while len(out) < n:
        chunk = sock.recv(n - len(out))
        if not chunk:
            return None
        out += chunk
    return bytes(out)


def _exchange(bootstrap: str, frame: bytes, then: bytes | None = None, timeout: float = 15) -> list[bytes | None]:
    """Send ``frame`` (and ``then``, on the same connection) and read one answer each; None where
    the connection was closed instead."""
    host, port = bootstrap.rsplit(":", 1)
    answers: list[bytes | None] = []
    with socket.create_connection((host, int(port)), timeout=timeout) as sock:
        for f in (frame, then) if then is not None else (frame,):
            try:
                sock.sendall(f)
                size = _recv_exact(sock, 4)
                answers.append(None if size is None else _recv_exact(sock, struct.unpack(">i", size)[0]))
            except (ConnectionResetError, BrokenPipeError):
                answers.append(None)
            if answers[-1] is None:
                break
    return answers


def _decode(api_key: int, version: int, answer: bytes) -> dict[str, Any]:
    spec = api(api_key)
    _, pos = decode_response_header(memoryview(answer), spec.response_header_version(version))
    return spec.response_codec(version).decode(answer[pos:])


def _api_versions_frame() -> bytes:
    codec = api(API_VERSIONS).request_codec(3)
    return _frame(API_VERSIONS, 3, codec.encode({"client_software_name": "test", "client_software_version": "1"}), 8)


def test_metadata_v12_with_librdkafkas_placeholder_for_all_topics(ground):
    """librdkafka 2.x writes a 4-byte placeholder where Metadata v9+'s null topics array (one
    byte) belongs: ``00 00 00 00 01 00 00`` instead of ``00 01 00 00``. Kafka reads the fields it
    knows (null topics: all of them) and ignores the 3 bytes left; so must the proxy, and the
    connection goes on serving."""
    broker, proxy = ground
    frame = _frame(METADATA, 12, bytes.fromhex("00000000010000"))
    for bootstrap in (broker.bootstrap, proxy.bootstrap):
        answer, after = _exchange(bootstrap, frame, then=_api_versions_frame())
        assert answer is not None, f"{bootstrap} closed the connection"
        body = _decode(METADATA, 12, answer)
        assert body["topics"] is not None and body["brokers"], body
        assert after is not None, "the connection was closed after the request"
    direct = {t["name"] for t in _decode(METADATA, 12, _exchange(broker.bootstrap, frame)[0])["topics"]}
    proxied = {t["name"] for t in _decode(METADATA, 12, _exchange(proxy.bootstrap, frame)[0])["topics"]}
    assert proxied == direct


def test_alter_user_scram_credentials_v0_with_a_doubled_tag_byte(ground):
    """librdkafka's admin client writes the request's tagged-fields byte twice."""
    broker, proxy = ground
    codec = api(ALTER_USER_SCRAM_CREDENTIALS).request_codec(0)
    frame = _frame(ALTER_USER_SCRAM_CREDENTIALS, 0, codec.encode({"deletions": [], "upsertions": []}) + b"\x00")
    outcomes = []
    for bootstrap in (broker.bootstrap, proxy.bootstrap):
        answer, after = _exchange(bootstrap, frame, then=_api_versions_frame())
        assert answer is not None and after is not None, bootstrap
        outcomes.append(_decode(ALTER_USER_SCRAM_CREDENTIALS, 0, answer)["results"])
    assert outcomes[0] == outcomes[1] == []


def _admin(bootstrap: str) -> AdminClient:
    return AdminClient({"bootstrap.servers": bootstrap, "socket.timeout.ms": 10000})


def _produce_then_read_by_regex(bootstrap: str, topic: str, partitions: int, count: int = 20) -> None:
    """``count`` records produced to ``topic``, read back by a consumer that subscribes with a
    regex matching it (``t-`` and the first hex digits of the unique name), all through ``bootstrap``."""
    producer = CheckedProducer({"bootstrap.servers": bootstrap})
    for i in range(count):
        producer.produce(topic, value=f"v{i}".encode(), partition=i % partitions)
    producer.deliver_all(20)
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": topic, "auto.offset.reset": "earliest",
                         "session.timeout.ms": 6000, "topic.metadata.refresh.interval.ms": 1000})
    try:
        consumer.subscribe([f"^{topic[:6]}.*"])
        got: list[bytes] = []
        deadline = time.monotonic() + 60
        while len(got) < count and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None and msg.error() is None and msg.topic() == topic:
                got.append(msg.value())
        assert sorted(got) == sorted(f"v{i}".encode() for i in range(count))
    finally:
        consumer.close()


def test_confluent_kafka_admin_and_regex_subscription(ground, unique_name):
    """confluent-kafka (librdkafka) through the proxy as directly: list_topics() for all topics
    and for one, describe_cluster(), the topic admin calls our tests use, and a consumer that
    subscribes by regex."""
    broker, proxy = ground
    direct, proxied = _admin(broker.bootstrap), _admin(proxy.bootstrap)
    for future in proxied.create_topics([NewTopic(unique_name, 2, 1)]).values():
        future.result(30)
    deadline = time.monotonic() + 20
    while unique_name not in direct.list_topics(timeout=10).topics and time.monotonic() < deadline:
        time.sleep(0.2)
    all_direct = set(direct.list_topics(timeout=10).topics)
    all_proxied = set(proxied.list_topics(timeout=10).topics)
    assert unique_name in all_proxied and all_proxied == all_direct
    one = proxied.list_topics(unique_name, timeout=10).topics[unique_name]
    assert one.error is None and sorted(one.partitions) == [0, 1]
    cluster = proxied.describe_cluster().result(10)
    assert len(cluster.nodes) == len(direct.describe_cluster().result(10).nodes)
    assert all(node.port in proxy.node_ports.values() for node in cluster.nodes)

    _produce_then_read_by_regex(proxy.bootstrap, unique_name, partitions=2)
    for future in proxied.delete_topics([unique_name]).values():
        future.result(30)


def test_clients_without_api_versions_use_0_9_protocol_versions(kafka39, tmp_path, unique_name):
    """librdkafka with ``api.version.request=false`` and ``broker.version.fallback=0.9.0.0``
    produces with Produce v1 and consumes with Fetch v1, ListOffsets v0 and the v0 group APIs.
    Kafka 3.9 takes all of them; through the proxy they work as directly. (Kafka 4 removed them.)"""
    proxy = start_proxy(kafka39.bootstrap, tmp_path / "proxy")
    old = {"api.version.request": False, "broker.version.fallback": "0.9.0.0"}
    admin = _admin(kafka39.bootstrap)
    try:
        for bootstrap, topic in ((kafka39.bootstrap, unique_name + "-direct"), (proxy.bootstrap, unique_name)):
            admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)
            producer = CheckedProducer({"bootstrap.servers": bootstrap, **old})
            for i in range(50):
                producer.produce(topic, key=str(i).encode(), value=b"x" * i)
            producer.deliver_all(30)
            consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": topic, "auto.offset.reset": "earliest",
                                 **old})
            try:
                consumer.subscribe([topic])
                got = []
                deadline = time.monotonic() + 60
                while len(got) < 50 and time.monotonic() < deadline:
                    msg = consumer.poll(0.5)
                    if msg is not None and msg.error() is None:
                        got.append(int(msg.key()))
                assert got == list(range(50)), bootstrap
                consumer.commit(asynchronous=False)
            finally:
                consumer.close()
    finally:
        proxy.stop()
    assert "Produce v1" not in proxy.log_path.read_text()


# -- the property ---------------------------------------------------------------------------------


def _request_body(api_key: int, version: int) -> dict[str, Any]:
    codec = api(api_key).request_codec(version)
    body = codec.default()
    if api_key == API_VERSIONS:  # Kafka refuses an empty client software name (INVALID_REQUEST)
        body.update(client_software_name="test", client_software_version="1")
    if api_key == PRODUCE:
        body["acks"] = -1  # acks=0 has no answer to compare
    if api_key == ALTER_CONFIGS:
        body["resources"] = []
    return body


def _outcome(bootstrap: str, frame: bytes, api_key: int, version: int) -> tuple[Any, ...]:
    """("closed",) or ("answer", the set of error codes in it)."""
    try:
        answer = _exchange(bootstrap, frame, timeout=10)[0]
    except TimeoutError:
        return ("no answer",)
    if answer is None:
        return ("closed",)
    codes: set[int] = set()

    def walk(value: Any) -> None:
        if isinstance(value, dict):
            for key, item in value.items():
                if key == "error_code":
                    codes.add(item)
                walk(item)
        elif isinstance(value, list):
            for item in value:
                walk(item)

    walk(_decode(api_key, version, answer))
    return ("answer", frozenset(codes))


def _offered(bootstrap: str) -> dict[int, tuple[int, int]]:
    answer = _exchange(bootstrap, _api_versions_frame())[0]
    assert answer is not None
    return {k["api_key"]: (k["min_version"], k["max_version"]) for k in _decode(API_VERSIONS, 3, answer)["api_keys"]}


def test_requests_with_trailing_bytes_and_unknown_tags_get_the_brokers_answer(ground):
    """Random requests of every API both sides offer, with random bytes after the last field and
    (in flexible versions) unknown tagged fields, get through the proxy the answer the broker
    gives directly: the same error codes, or the same closed connection."""
    broker, proxy = ground
    direct, proxied = _offered(broker.bootstrap), _offered(proxy.bootstrap)
    cases = sorted((key, lo, hi) for key, (lo, hi) in proxied.items()
                   if key in direct and key in all_apis() and key not in CLUSTER_CHANGING
                   for lo, hi in [(max(lo, direct[key][0]), min(hi, direct[key][1]))]
                   if lo <= hi and api(key).has_schema(lo))
    assert len(cases) > 40
    seen: set[int] = set()

    @settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
    @given(data=st.data())
    def check(data: st.DataObject) -> None:
        key, lo, hi = data.draw(st.sampled_from(cases))
        version = data.draw(st.integers(lo, hi).filter(api(key).has_schema))
        spec = api(key)
        body = _request_body(key, version)
        if spec.request.is_flexible(version) and data.draw(st.booleans()):
            tags = data.draw(st.dictionaries(st.integers(10_000, 20_000), st.binary(max_size=8), min_size=1, max_size=3))
            body["_unknown_tags"] = tags
        trailing = data.draw(st.binary(min_size=1, max_size=16))
        frame = _frame(key, version, spec.request_codec(version).encode(body) + trailing, corr=data.draw(
            st.integers(0, 2**31 - 1)))
        seen.add(key)
        assert _outcome(proxy.bootstrap, frame, key, version) == _outcome(broker.bootstrap, frame, key, version), \
            f"{spec.name} v{version}"

    check()
    assert len(seen) > 20


def test_a_request_kafka_refuses_closes_the_connection_both_ways(ground):
    """The other side of the rule: a null where the schema has none is refused by Kafka (the
    connection closes), and by the proxy the same way."""
    broker, proxy = ground
    # CreateTopics v4: a topics array of length -1 (non-nullable).
    frame = _frame(19, 4, struct.pack(">iib", -1, 1000, 0))
    assert _exchange(broker.bootstrap, frame) == [None]
    assert _exchange(proxy.bootstrap, frame) == [None]


def test_a_topic_name_that_is_not_utf8_is_kafkas_to_judge(ground):
    broker, proxy = ground
    bad = b"t-\xff\xfe-" + uuid.uuid4().hex[:6].encode()
    body = b"\x00\x00\x00\x01" + struct.pack(">h", len(bad)) + bad + b"\x00"  # Metadata v4: topics [bad], auto-create false
    frame = _frame(METADATA, 4, body)
    direct = _exchange(broker.bootstrap, frame)[0]
    proxied = _exchange(proxy.bootstrap, frame)[0]
    assert direct is not None and proxied is not None
    codes = [[t["error_code"] for t in _decode(METADATA, 4, a)["topics"]] for a in (direct, proxied)]
    assert codes[0] == codes[1] and codes[0][0] != 0



@pytest.mark.parametrize("kind", ["noida", "tansu"])
def test_list_topics_and_regex_subscription_on_the_pypi_brokers(kind, request, tmp_path, unique_name):
    """confluent-kafka's list_topics() and a regex subscription through the proxy on noida-db and
    Tansu too (list_topics closed the connection on librdkafka's Metadata placeholder before
    issue 24)."""
    broker = request.getfixturevalue(kind)
    proxy = start_proxy(broker.bootstrap, tmp_path / "proxy")
    try:
        admin = _admin(proxy.bootstrap)
        admin.create_topics([NewTopic(unique_name, 1, 1)])[unique_name].result(30)
        deadline = time.monotonic() + 20
        while unique_name not in admin.list_topics(timeout=10).topics and time.monotonic() < deadline:
            time.sleep(0.2)
        direct = _admin(broker.bootstrap).list_topics(timeout=10)
        proxied = admin.list_topics(timeout=10)
        assert unique_name in proxied.topics and set(proxied.topics) == set(direct.topics)
        assert sorted(b.port for b in proxied.brokers.values()) == sorted(proxy.node_ports.values())
        _produce_then_read_by_regex(proxy.bootstrap, unique_name, partitions=1)
    finally:
        proxy.stop()
