"""The Fetch response tag walker agrees with the schema codec on every flexible version."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from protocol.apis import FETCH, api
from protocol.errors import ProtocolError
from protocol.fetch_response_tags import NODE_ENDPOINTS_TAG, fetch_response_tags
from protocol.records import Record, build_batch

VERSIONS = st.integers(12, 18)
I32, I64 = st.integers(-(2**31), 2**31 - 1), st.integers(-(2**63), 2**63 - 1)
RECORDS = st.one_of(st.none(), st.just(b""), st.integers(1, 5).map(
    lambda n: build_batch([Record(i, 1_700_000_000_000 + i, None, b"v" * i, []) for i in range(n)])))
PARTITION = st.fixed_dictionaries({
    "partition_index": I32, "error_code": st.integers(-1, 120), "high_watermark": I64,
    "last_stable_offset": I64, "log_start_offset": I64,
    "aborted_transactions": st.none() | st.lists(st.fixed_dictionaries({"producer_id": I64, "first_offset": I64}),
                                                 max_size=3),
    "preferred_read_replica": I32, "records": RECORDS,
    # Tagged partition fields, default or not.
    "diverging_epoch": st.just({"epoch": -1, "end_offset": -1}) | st.fixed_dictionaries({"epoch": I32, "end_offset": I64}),
    "current_leader": st.just({"leader_id": -1, "leader_epoch": -1})
    | st.fixed_dictionaries({"leader_id": I32, "leader_epoch": I32}),
})
TOPIC = st.fixed_dictionaries({"topic": st.text(max_size=12), "topic_id": st.binary(min_size=16, max_size=16),
                               "partitions": st.lists(PARTITION, max_size=3)})
ENDPOINTS = st.lists(st.fixed_dictionaries({"node_id": I32, "host": st.text(max_size=15), "port": I32,
                                            "rack": st.none() | st.text(max_size=5)}), max_size=2)


def _body(version: int, topics: list, endpoints: list) -> bytes:
    return api(FETCH).response_codec(version).encode({"throttle_time_ms": 0, "error_code": 0, "session_id": 7,
                                                      "responses": topics, "node_endpoints": endpoints})


@settings(max_examples=300, deadline=None)
@given(VERSIONS, st.lists(TOPIC, max_size=3), ENDPOINTS)
def test_the_walker_finds_node_endpoints_exactly_when_the_codec_wrote_them(version, topics, endpoints):
    body = _body(version, topics, endpoints)
    decoded = api(FETCH).response_codec(version).decode(body)
    present = NODE_ENDPOINTS_TAG in fetch_response_tags(memoryview(body), version)
    assert present == bool(decoded.get("node_endpoints"))
    assert present == (version >= 16 and bool(endpoints))


@settings(max_examples=300, deadline=None)
@given(VERSIONS, st.lists(TOPIC, min_size=1, max_size=2), ENDPOINTS, st.data())
def test_a_cut_or_padded_body_is_a_protocol_error(version, topics, endpoints, data):
    body = _body(version, topics, endpoints)
    cut = data.draw(st.integers(0, len(body) - 1))
    for broken in (body[:cut], body + b"\x00"):
        try:
            fetch_response_tags(memoryview(broken), version)
        except ProtocolError:
            continue
        raise AssertionError(f"{len(broken)} of {len(body)} bytes parsed")
