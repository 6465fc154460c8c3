"""Requests are read as Kafka reads them (protocol/message_codec.py ``read_request``): bytes after
the last field and unknown tagged fields are accepted, and the fields are what the client sent.
Exact decoding, which the proxy used before, refuses the same bytes."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from protocol.apis import METADATA, all_apis, api
from protocol.errors import ProtocolError

CASES = [(key, version) for key, spec in all_apis().items()
         for version in range(spec.min_version, spec.max_version + 1) if spec.has_schema(version)]


@settings(max_examples=400, deadline=None)
@given(case=st.sampled_from(CASES), trailing=st.binary(min_size=1, max_size=32),
       tags=st.dictionaries(st.integers(10_000, 20_000), st.binary(max_size=8), max_size=3))
def test_trailing_bytes_and_unknown_tags_are_read_past(case, trailing, tags):
    key, version = case
    codec = api(key).request_codec(version)
    body = codec.default()
    expected = codec.decode(codec.encode(body))
    if codec.schema.is_flexible(version) and tags:
        body["_unknown_tags"] = tags
        expected["_unknown_tags"] = tags
    data = codec.encode(body) + trailing
    assert codec.read_request(data) == expected
    with pytest.raises(ProtocolError, match="trailing bytes"):
        codec.decode(data)


def test_librdkafkas_metadata_v12_placeholder_reads_as_all_topics():
    codec = api(METADATA).request_codec(12)
    body = codec.read_request(bytes.fromhex("00000000010000"))
    assert body["topics"] is None and body["allow_auto_topic_creation"] is False


def test_a_string_that_is_not_utf8_is_read_with_replacement_characters():
    codec = api(METADATA).request_codec(4)
    body = codec.read_request(b"\x00\x00\x00\x01\x00\x04t-\xff\xfe\x01")
    assert body["topics"] == [{"name": "t-\ufffd\ufffd", "topic_id": body["topics"][0]["topic_id"]}]
