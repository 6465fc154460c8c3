"""The proxy's own protocol behaviour, checked with exact frames on raw sockets."""

from __future__ import annotations

import signal
import struct

import pytest

from protocol.apis import API_VERSIONS, DESCRIBE_LOG_DIRS, LIST_OFFSETS, METADATA, PRODUCE, all_apis
from protocol.errors import ErrorCode
from proxy.filters.remote_log_dirs import RemoteLogDirs
from proxy.filters.tiered_offsets import TieredOffsets
from tests.api_matrix import offered_with_tiering
from tests.delivery import CheckedProducer
from tests.proxy_process import start_proxy
from tests.raw import RawClient


def _advertised(client: RawClient) -> dict[int, tuple[int, int]]:
    resp = client.request(API_VERSIONS, 3, {"client_software_name": "raw", "client_software_version": "1"})
    assert resp["error_code"] == 0
    return {k["api_key"]: (k["min_version"], k["max_version"]) for k in resp["api_keys"]}


def test_api_versions_is_what_proxy_and_broker_both_support(upstream, proxy):
    client = RawClient(proxy.bootstrap)
    direct = RawClient(upstream.bootstrap)
    try:
        via_proxy = _advertised(client)
        broker = _advertised(direct)
    finally:
        client.close()
        direct.close()
    # Relayed APIs at the broker's own versions; the ones a filter reads within the schemas too;
    # ListOffsets and DescribeLogDirs answered by the proxy (tests/unit/test_version_negotiation.py).
    assert via_proxy == offered_with_tiering(broker)
    for key in (LIST_OFFSETS, DESCRIBE_LOG_DIRS):
        assert via_proxy[key][1] == TieredOffsets.version_overrides.get(key, RemoteLogDirs.version_overrides.get(key))[1]


def test_apis_only_kio_defines_pass_through(tansu, tmp_path):
    """Tansu offers ConsumerGroupDescribe (69) and GetTelemetrySubscriptions (71), which
    kafka-python's schema files lack: the proxy offers them from kio's schemas and forwards them,
    the answers as the broker gives them."""
    proxy = start_proxy(tansu.bootstrap, tmp_path / "proxy")
    requests = {69: (0, {"group_ids": ["no-such-group"], "include_authorized_operations": False}),
                71: (0, {"client_instance_id": bytes(16)})}
    try:
        through, direct = RawClient(proxy.bootstrap), RawClient(tansu.bootstrap)
        try:
            offered = _advertised(through)
            for key, (version, body) in requests.items():
                assert key in offered and offered[key][0] <= version <= offered[key][1], (key, offered.get(key))
                # (The broker names a new client instance id in every telemetry answer.)
                answers = [{k: v for k, v in client.request(key, version, body).items() if k != "client_instance_id"}
                           for client in (through, direct)]
                assert answers[0] == answers[1], all_apis()[key].name
        finally:
            through.close()
            direct.close()
    finally:
        proxy.stop()


def test_requests_pipelined_answers_come_back_in_order(upstream, proxy):
    client = RawClient(proxy.bootstrap)
    try:
        versions = _advertised(client)
        md = versions[METADATA][1]
        sent = []
        for i in range(60):
            if i % 3 == 0:
                sent.append(client.send(API_VERSIONS, 0, {}))  # answered by the proxy itself
            else:
                sent.append(client.send(METADATA, md, {"topics": [], "allow_auto_topic_creation": False}))
        got = [client.recv()[0] for _ in sent]
    finally:
        client.close()
    assert got == sent


def test_acks_zero_produce_is_never_answered(upstream, proxy, unique_name):
    from kafka import KafkaAdminClient
    from kafka.admin import NewTopic

    admin = KafkaAdminClient(bootstrap_servers=proxy.bootstrap)
    admin.create_topics([NewTopic(unique_name, 1, 1)])
    admin.close()
    # One acknowledged write first: Kafka closes the connection of an acks=0 Produce it cannot
    # take (a partition whose leader is not ready yet, as just after CreateTopics).
    ready = CheckedProducer({"bootstrap.servers": proxy.bootstrap})
    ready.produce(unique_name, b"ready", partition=0)
    ready.deliver_all(30)
    client = RawClient(proxy.bootstrap)
    try:
        versions = _advertised(client)
        pv = min(versions[PRODUCE][1], 9)
        records = _one_record_batch()
        body = {"transactional_id": None, "acks": 0, "timeout_ms": 5000,
                "topic_data": [{"name": unique_name, "partition_data": [{"index": 0, "records": records}]}]}
        client.send(PRODUCE, pv, body)
        del client.sent[max(client.sent)]  # no answer expected
        corr = client.send(API_VERSIONS, 0, {})
        got, _ = client.recv()
    finally:
        client.close()
    assert got == corr, "the first frame back must answer the request after the acks=0 produce"


def _one_record_batch() -> bytes:
    from protocol.records import Record, build_batch

    return build_batch([Record(offset=0, timestamp=0, key=None, value=b"hello", headers=[])])


def test_version_the_broker_lacks_is_answered_unsupported(upstream, proxy):
    client = RawClient(proxy.bootstrap)
    try:
        versions = _advertised(client)
        # An API and version our schemas know, with a top-level error code, that the proxy does not advertise.
        candidates = [
            (key, v) for key, spec in all_apis().items()
            for v in range(spec.min_version, spec.max_version + 1)
            if (key not in versions or not versions[key][0] <= v <= versions[key][1])
            and any(f.name == "error_code" and v in f.versions for f in spec.response.fields)
            and key != API_VERSIONS
        ]
        assert candidates, "every version is supported: nothing to test"
        key, version = candidates[-1]
        resp = client.request(key, version, all_apis()[key].request_codec(version).default())
    finally:
        client.close()
    assert resp["error_code"] == ErrorCode.UNSUPPORTED_VERSION


@pytest.mark.parametrize(
    "frame",
    [
        struct.pack(">i", -5),  # negative size
        struct.pack(">i", 200 * 1024 * 1024) + b"\0" * 16,  # over socket.request.max.bytes
        struct.pack(">i", 3) + b"\0\0\0",  # shorter than a request header
        struct.pack(">i", 12) + struct.pack(">hhi", 999, 0, 1) + b"\0\0\0\0",  # unknown API key
    ],
    ids=["negative-size", "oversized", "short-header", "unknown-api"],
)
def test_malformed_frame_closes_only_that_connection(upstream, proxy, frame):
    bad = RawClient(proxy.bootstrap)
    good = RawClient(proxy.bootstrap)
    try:
        _advertised(good)
        bad.sock.sendall(frame)
        assert bad.closed_by_peer(), "the proxy kept a connection that sent a malformed frame"
        _advertised(good)  # the other connection is untouched
        fresh = RawClient(proxy.bootstrap)
        _advertised(fresh)
        fresh.close()
    finally:
        bad.close()
        good.close()
    assert proxy.process.poll() is None
    assert "closing client" in proxy.log_text()


def test_sigterm_shuts_down_cleanly(upstream, tmp_path):
    proxy = start_proxy(upstream.bootstrap, tmp_path)
    client = RawClient(proxy.bootstrap)
    _advertised(client)
    code = proxy.stop(signal.SIGTERM)
    client.close()
    assert code == 0
    assert "shutting down" in proxy.log_text()
