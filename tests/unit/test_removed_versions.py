"""The versions Kafka 4 removed (KIP-896), decoded from Kafka 4's own schema files: each field kept
its version history there, only "validVersions" moved (protocol/message_schema.py). Checked here
field by field against kafka-python's hand-written structs of those versions, an independent
description of the same wire format: a message our codec writes is read whole by kafka-python's
struct, which writes back the same bytes."""

from __future__ import annotations

import importlib
import io
import pkgutil
import re
import uuid

import kafka.protocol.old as legacy
import pytest

from protocol.apis import all_apis
from protocol.message_schema import VERSIONS_BEFORE_KAFKA_4, _schema_dir
from protocol.schema_model import Field


def _legacy_structs() -> dict[tuple[str, int], type]:
    """kafka-python's hand-written structs by (message name, version), e.g. ("FetchRequest", 1)."""
    found: dict[tuple[str, int], type] = {}
    for module in pkgutil.iter_modules(legacy.__path__):
        for name, cls in vars(importlib.import_module(f"{legacy.__name__}.{module.name}")).items():
            if isinstance(cls, type) and isinstance(getattr(cls, "API_VERSION", None), int) and "_v" in name:
                found[(name.rsplit("_v", 1)[0], cls.API_VERSION)] = cls
    return found


def _file_low(message: str) -> int:
    """The lowest version in Kafka 4's schema file itself."""
    return int(re.search(r'"validVersions": "(\d+)', (_schema_dir() / f"{message}.json").read_text())[1])


LEGACY = _legacy_structs()
# kafka-python's struct disagrees with Kafka's schema here, and Kafka's is right: its Partitions
# is "[]int32", the struct reads one int32.
LEGACY_STRUCT_BUGS = {("DescribeLogDirsRequest", 0)}
# Every version below Kafka 4's files that we put back, request and response.
REMOVED = [(f"{spec.name}{kind}", version)
           for spec in all_apis().values() if spec.name in VERSIONS_BEFORE_KAFKA_4
           for kind in ("Request", "Response")
           for version in range(VERSIONS_BEFORE_KAFKA_4[spec.name], _file_low(spec.name + kind))
           if (f"{spec.name}{kind}", version) not in LEGACY_STRUCT_BUGS]


def _sample(fields: list[Field], version: int, salt: int) -> dict:
    """A message with a distinct non-default value in every field the version has."""
    out: dict = {}
    for n, f in enumerate(fields):
        if version not in f.versions:
            continue
        out[f.name] = [_value(f, version, salt + n)] if f.is_array else _value(f, version, salt + n)
    return out


def _value(f: Field, version: int, salt: int) -> object:
    if f.fields:
        return _sample(f.fields, version, salt * 7)
    return {
        "int8": salt % 100, "int16": salt % 1000 + 1, "int32": salt + 7, "int64": salt * 1000 + 3,
        "uint16": salt % 1000, "uint32": salt, "float64": salt + 0.5, "bool": True,
        "string": f"s{salt}", "bytes": bytes([salt % 256]) * 3, "records": b"r" * (salt % 5 + 1),
        "uuid": uuid.UUID(int=salt + 1).bytes,
    }[f.type]


def test_every_removed_version_has_a_hand_written_struct_to_check_it():
    names = {spec.name for spec in all_apis().values() if spec.name in VERSIONS_BEFORE_KAFKA_4}
    assert names == set(VERSIONS_BEFORE_KAFKA_4)
    for spec in all_apis().values():
        if spec.name in VERSIONS_BEFORE_KAFKA_4:
            assert spec.min_version == VERSIONS_BEFORE_KAFKA_4[spec.name]
    assert ("ProduceRequest", 0) in REMOVED and ("FetchResponse", 3) in REMOVED and ("ListOffsetsRequest", 0) in REMOVED
    assert all(found in LEGACY for found in REMOVED)


@pytest.mark.parametrize(("message", "version"), REMOVED, ids=[f"{m}-v{v}" for m, v in REMOVED])
def test_removed_version_matches_kafka_pythons_struct(message, version):
    spec = next(s for s in all_apis().values() if message.startswith(s.name) and message[len(s.name):] in
                ("Request", "Response"))
    codec = spec.request_codec(version) if message.endswith("Request") else spec.response_codec(version)
    ours = codec.encode(_sample(codec.schema.fields, version, 11))
    struct = LEGACY[(message, version)].SCHEMA
    stream = io.BytesIO(ours)
    values = struct.decode(stream)
    assert stream.tell() == len(ours), f"kafka-python's {message} v{version} read {stream.tell()} of {len(ours)} bytes"
    assert struct.encode(values) == ours
    assert codec.encode(codec.decode(ours)) == ours
