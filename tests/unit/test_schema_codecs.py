"""Properties of the schema-compiled codecs: round trips for every message and version, agreement
with kafka-python's encoder, and malformed input rejected with ProtocolError only."""

from __future__ import annotations

import struct

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from protocol.apis import all_apis
from protocol.errors import ProtocolError
from protocol.headers import (
    RequestHeader,
    decode_request_header,
    decode_response_header,
    encode_request_header,
    encode_response_header,
)
from protocol.message_codec import codec
from protocol.message_schema import Field, available_schemas, load_schema

_INT_RANGES = {"int8": 8, "int16": 16, "int32": 32, "int64": 64}


def value_strategy(f: Field, version: int, elem: bool = False) -> st.SearchStrategy:
    nullable = version in f.nullable and not elem  # an array may be null, not its items
    if f.is_array and not elem:
        inner = st.lists(value_strategy(f, version, elem=True), max_size=3)
        return st.none() | inner if nullable else inner
    t = f.type
    if t in _INT_RANGES:
        bits = _INT_RANGES[t]
        return st.integers(-(2 ** (bits - 1)), 2 ** (bits - 1) - 1)
    if t == "uint16":
        return st.integers(0, 2**16 - 1)
    if t == "uint32":
        return st.integers(0, 2**32 - 1)
    if t == "bool":
        return st.booleans()
    if t == "float64":
        return st.floats(allow_nan=False)
    if t == "uuid":
        return st.binary(min_size=16, max_size=16)
    if t == "string":
        s = st.text(max_size=10)
        return st.none() | s if nullable else s
    if t in ("bytes", "records"):
        b = st.binary(max_size=20)
        return st.none() | b if nullable or t == "records" else b
    struct_st = message_strategy(f.fields, version)
    return st.none() | struct_st if nullable else struct_st


def message_strategy(fields: list[Field], version: int) -> st.SearchStrategy:
    # Only fields present in this version are generated: absent ones decode as their defaults,
    # which the comparison below leaves out.
    return st.fixed_dictionaries({f.name: value_strategy(f, version) for f in fields if version in f.versions})


def present(msg: object, fields: list[Field], version: int) -> object:
    """The message restricted to fields of this version, with bytes-like values as bytes."""
    if isinstance(msg, memoryview):
        return bytes(msg)
    if not isinstance(msg, dict):
        return msg
    out = {}
    for f in fields:
        if version not in f.versions:
            continue
        v = msg[f.name]
        if f.fields and v is not None:
            v = [present(x, f.fields, version) for x in v] if f.is_array else present(v, f.fields, version)
        elif isinstance(v, memoryview):
            v = bytes(v)
        out[f.name] = v
    return out


PAIRS = [
    (name, v)
    for name in available_schemas() if name.endswith(("Request", "Response"))
    for v in sorted({load_schema(name).valid.low, load_schema(name).valid.high,
                     *([load_schema(name).flexible.low] if load_schema(name).flexible.low in load_schema(name).valid else []),
                     *([load_schema(name).flexible.low - 1] if load_schema(name).flexible.low - 1 in load_schema(name).valid else [])})
]


@pytest.mark.parametrize(("name", "version"), PAIRS, ids=[f"{n}-v{v}" for n, v in PAIRS])
def test_round_trip(name, version):
    c = codec(name, version)
    fields = c.schema.fields

    @settings(max_examples=5, deadline=None, suppress_health_check=list(HealthCheck))
    @given(message_strategy(fields, version))
    def check(msg):
        data = c.encode(msg)
        decoded = c.decode(data)
        assert present(decoded, fields, version) == present(msg, fields, version)
        assert c.encode(decoded) == data

    check()


CROSS = [("FetchResponse", 4), ("FetchResponse", 11), ("FetchResponse", 12), ("FetchResponse", 16),
         ("ProduceRequest", 3), ("ProduceRequest", 9), ("MetadataResponse", 0), ("MetadataResponse", 9), ("MetadataResponse", 12), ("ListOffsetsRequest", 1),
         ("ListOffsetsRequest", 7), ("ListOffsetsRequest", 10), ("FindCoordinatorResponse", 3), ("FindCoordinatorResponse", 4), ("ApiVersionsResponse", 0),
         ("DescribeClusterResponse", 0)]


@pytest.mark.parametrize(("name", "version"), CROSS, ids=[f"{n}-v{v}" for n, v in CROSS])
def test_kafka_python_decodes_what_we_encode(name, version):
    import importlib
    modules = ["kafka.protocol.metadata", "kafka.protocol.consumer", "kafka.protocol.producer", "kafka.protocol.admin"]
    cls = None
    for m in modules:
        mod = importlib.import_module(m)
        cls = getattr(mod, name, None)
        if cls is not None:
            break
    assert cls is not None, f"kafka-python has no {name}"
    c = codec(name, version)

    @settings(max_examples=10, deadline=None, suppress_health_check=list(HealthCheck),
              phases=[Phase.explicit, Phase.generate])
    @given(message_strategy(c.schema.fields, version))
    def check(msg):
        _drop_records(msg)  # kafka-python parses record sets, and random bytes are not one
        data = c.encode(msg)
        theirs = cls.decode(data, version=version, header=False)
        theirs._header = None  # kafka-python leaves this slot unset on decoded messages
        assert bytes(theirs.encode(version=version, header=False)) == data

    check()


def _drop_records(msg: object) -> None:
    if isinstance(msg, list):
        for item in msg:
            _drop_records(item)
    elif isinstance(msg, dict):
        for key, value in msg.items():
            if key == "records":
                msg[key] = None
            else:
                _drop_records(value)


INTERCEPTED = [0, 1, 2, 3, 10, 18, 19, 20, 21, 23, 32, 33, 44, 60]
REQUEST_CODECS = [(api, v) for api in INTERCEPTED
                  for v in (all_apis()[api].min_version, all_apis()[api].max_version)]


@pytest.mark.parametrize(("api_key", "version"), REQUEST_CODECS)
def test_random_bytes_decode_or_raise_protocol_error(api_key, version):
    c = all_apis()[api_key].request_codec(version)

    @settings(max_examples=150, deadline=None)
    @given(st.binary(max_size=64))
    def check(data):
        try:
            c.decode(data)
        except ProtocolError:
            pass

    check()


@pytest.mark.parametrize(("name", "version"), [("MetadataResponse", 12), ("FetchResponse", 11),
                                               ("FetchResponse", 16), ("ProduceRequest", 9)])
def test_every_truncation_is_a_protocol_error(name, version):
    c = codec(name, version)
    msg = c.default()
    if name == "MetadataResponse":
        msg["brokers"] = [{"node_id": 1, "host": "h", "port": 1, "rack": None}]
        msg["topics"] = [{"name": "t", "partitions": [{"partition_index": 0, "replica_nodes": [1, 2]}]}]
    if name == "FetchResponse":
        msg["responses"] = [{"topic": "t", "partitions": [{"partition_index": 0, "records": b"x" * 30}]}]
    data = c.encode(msg)
    for cut in range(len(data)):
        with pytest.raises(ProtocolError):
            c.decode(data[:cut])


def test_huge_lengths_and_long_varints_fail_fast():
    c = codec("MetadataRequest", 1)
    with pytest.raises(ProtocolError, match="claims"):
        c.decode(struct.pack(">i", 0x7FFFFFFF))
    flexible = codec("MetadataRequest", 12)
    with pytest.raises(ProtocolError, match="varint"):
        flexible.decode(b"\xff" * 8)


@given(st.sampled_from([1, 2]), st.none() | st.text(max_size=20),
       st.dictionaries(st.integers(0, 50), st.binary(max_size=8), max_size=3),
       st.integers(-(2**31), 2**31 - 1))
def test_request_header_round_trip(version, client_id, tags, corr):
    h = RequestHeader(3, 12, corr, client_id, tags if version == 2 else {})
    data = encode_request_header(h, version)
    decoded, pos = decode_request_header(memoryview(data + b"body"), version)
    assert decoded == h and pos == len(data)


@given(st.sampled_from([0, 1]), st.integers(-(2**31), 2**31 - 1))
def test_response_header_round_trip(version, corr):
    data = encode_response_header(corr, version)
    assert decode_response_header(memoryview(data), version) == (corr, len(data))
