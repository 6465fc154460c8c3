"""The schemas folded from kio's classes equal Kafka's JSON files wherever both define a message,
field by field and version by version; so the messages only kio has (Kafka 4's consumer-group and
share-group APIs among them) can be trusted the same way."""

from __future__ import annotations

import pytest

from protocol.apis import all_apis
from protocol.kio_schemas import kio_schema, kio_schema_names
from protocol.message_schema import VERSIONS_BEFORE_KAFKA_4, json_schema, json_schema_names
from protocol.schema_model import Field

BOTH = sorted(set(json_schema_names()) & set(kio_schema_names()))


def at_version(fields: list[Field], version: int, prefix: str = "") -> list[tuple[object, ...]]:
    """What decides the wire format of ``fields`` at ``version``, in order."""
    out: list[tuple[object, ...]] = []
    for f in fields:
        if version not in f.versions:
            continue
        out.append((prefix + f.name, f.type, f.is_array, version in f.nullable,
                    f.tag if version in f.tagged else None, repr(f.default)))
        out += at_version(f.fields, version, f"{prefix}{f.name}.")
    return out


def test_both_sources_share_most_messages() -> None:
    assert len(BOTH) >= 100, BOTH  # kafka-python 3.0.12 ships 55 APIs' requests and responses


@pytest.mark.parametrize("name", BOTH)
def test_kio_schema_equals_the_json_file(name: str) -> None:
    json, kio = json_schema(name), kio_schema(name)
    # kio's classes cover Kafka 4's versions; the older ones we put back are checked apart
    # (tests/unit/test_removed_versions.py).
    assert (kio.api_key, kio.kind, kio.valid.high, kio.flexible) == (json.api_key, json.kind, json.valid.high, json.flexible)
    assert kio.valid.low == json.valid.low or json.valid.low == VERSIONS_BEFORE_KAFKA_4[name.removesuffix(json.kind.title())]
    for version in range(kio.valid.low, json.valid.high + 1):
        assert at_version(kio.fields, version) == at_version(json.fields, version), f"{name} v{version}"


def test_kafka_4_apis_are_known() -> None:
    names = {key: api.name for key, api in all_apis().items()}
    for key, name in {68: "ConsumerGroupHeartbeat", 69: "ConsumerGroupDescribe", 71: "GetTelemetrySubscriptions",
                      76: "ShareGroupHeartbeat", 77: "ShareGroupDescribe", 78: "ShareFetch",
                      79: "ShareAcknowledge"}.items():
        assert names.get(key) == name


def test_share_fetch_response_names_brokers_like_fetch() -> None:
    """ShareFetch answers carry NodeEndpoints with the host/port fields the proxy must rewrite."""
    response = kio_schema("ShareFetchResponse")
    (endpoints,) = [f for f in response.fields if f.name == "node_endpoints"]
    assert [f.name for f in endpoints.fields] == ["node_id", "host", "port", "rack"]
    assert endpoints.is_array and endpoints.tag is None


def _address_paths(fields: list[Field], path: str = "") -> list[str]:
    """Where in a message a struct has host or port fields."""
    out = [path or "(top)"] if {"host", "port"} & {f.name for f in fields} else []
    for f in fields:
        if f.fields:
            out += _address_paths(f.fields, f"{path}.{f.name}" if path else f.name)
    return out


def test_every_answer_that_names_a_host_is_rewritten_or_says_why_not() -> None:
    """Every response schema with host/port fields: the address-rewriting filter handles it, or
    it is listed as naming no broker a client should reach."""
    from proxy.filters.address_rewriting import NOT_BROKER_ADDRESSES, REWRITERS

    with_hosts = {api.name: _address_paths(api.response.fields) for api in all_apis().values()
                  if _address_paths(api.response.fields)}
    rewritten = {all_apis()[key].name for key in REWRITERS}
    assert set(with_hosts) == rewritten | set(NOT_BROKER_ADDRESSES), with_hosts
    assert not rewritten & set(NOT_BROKER_ADDRESSES)
    assert {name: with_hosts[name] for name in ("ShareFetch", "ShareAcknowledge")} == {
        "ShareFetch": ["node_endpoints"], "ShareAcknowledge": ["node_endpoints"]}


@pytest.mark.parametrize(("name", "version"), [("Produce", 10), ("Fetch", 16), ("Fetch", 17), ("ShareFetch", 1),
                                               ("ShareFetch", 2), ("ShareAcknowledge", 1), ("ShareAcknowledge", 2)])
def test_node_endpoints_are_rewritten_to_the_proxy(name: str, version: int) -> None:
    """KIP-951 NodeEndpoints (a tagged field in Produce and Fetch, a plain one in the share
    APIs) come back naming the proxy's listener, through the real codec both ways."""
    from proxy.filters.address_rewriting import REWRITERS

    (key,) = [k for k, a in all_apis().items() if a.name == name]
    codec = all_apis()[key].response_codec(version)
    body = codec.default()
    body["node_endpoints"] = [{"node_id": 7, "host": "broker-7.internal", "port": 9092, "rack": "r1"}]
    learnt = []

    def advertise(node: int, host: str, port: int, rack: str | None) -> tuple[str, int]:
        learnt.append((node, host, port, rack))
        return "127.0.0.1", 19107

    first_version, rewrite = REWRITERS[key]
    assert version >= first_version
    message = codec.decode(codec.encode(body))
    assert rewrite(message, version, advertise)
    (endpoint,) = codec.decode(codec.encode(message))["node_endpoints"]
    assert (endpoint["host"], endpoint["port"]) == ("127.0.0.1", 19107)
    assert learnt == [(7, "broker-7.internal", 9092, "r1")]
