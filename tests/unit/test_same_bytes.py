"""Which versions of a message are the same bytes (protocol/schema_model.same_bytes), which lets the
proxy ask a broker at one version and pass its answer back at another untouched (issue 36)."""

from __future__ import annotations

import pytest

from protocol.apis import FETCH, PRODUCE, all_apis, api
from protocol.schema_model import Field, MessageSchema, Versions, same_bytes


def test_fetch_v15_to_v18_are_the_same_bytes_and_no_earlier_version_is():
    fetch = api(FETCH)
    assert all(fetch.same_bytes(v, 15) for v in (15, 16, 17, 18))
    assert not fetch.same_bytes(14, 15)  # replica_id became replica_state
    assert not fetch.same_bytes(12, 13)  # topics named by id


def test_versions_a_message_does_not_have_are_never_the_same():
    assert not api(PRODUCE).same_bytes(9, 99)


def _field(name: str, versions: str, tagged: str = "none", fields: list[Field] | None = None) -> Field:
    return Field(name, name, "int32", False, Versions.parse(versions), Versions.parse("none"),
                 Versions.parse(tagged), 0 if tagged != "none" else None, 0, fields or [])


def _schema(*fields: Field, flexible: str = "2+") -> MessageSchema:
    return MessageSchema("TestResponse", 99, "response", Versions.parse("0-5"), Versions.parse(flexible), list(fields))


@pytest.mark.parametrize("fields, a, b, same", [
    ([_field("x", "0+")], 2, 3, True),
    ([_field("x", "0+"), _field("y", "3+")], 2, 3, False),  # a plain field added
    ([_field("x", "0+"), _field("y", "3+", tagged="3+")], 2, 3, True),  # a tagged field added
    ([_field("x", "0-2"), _field("z", "3+")], 2, 3, False),  # one field replaced by another
    ([_field("s", "0+", fields=[_field("y", "4+", tagged="4+")])], 3, 5, True),  # a tag inside a struct
    ([_field("s", "0+", fields=[_field("y", "4+")])], 3, 5, False),
    ([_field("x", "0+")], 1, 2, False),  # v2 is flexible, v1 not
], ids=["alike", "plain-added", "tag-added", "replaced", "nested-tag", "nested-plain", "flexibility"])
def test_same_bytes_rules(fields, a, b, same):
    assert same_bytes(_schema(*fields), a, b) is same
    assert same_bytes(_schema(*fields), b, a) is same


def test_what_one_version_writes_the_other_reads_and_writes_back_alike():
    """Every pair of neighbouring versions of every API said to be the same bytes: a message
    encoded at one decodes at the other and encodes there to the very same bytes."""
    pairs = 0
    for spec in all_apis().values():
        for a in range(spec.min_version, spec.max_version):
            b = a + 1
            if not (spec.has_schema(a) and spec.has_schema(b) and spec.same_bytes(a, b)):
                continue
            for codec_at in (spec.request_codec, spec.response_codec):
                written = codec_at(a).encode(codec_at(a).default())
                assert codec_at(b).encode(codec_at(b).decode(memoryview(written))) == written, (spec.name, a, b)
            pairs += 1
    assert pairs > 20
