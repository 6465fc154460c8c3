"""Kafka's JSON message schemas, loaded as data.

Kafka describes every request and response in a JSON schema (fields, the versions each field
exists in, nullable/tagged/flexible versions). kafka-python 3.x ships those files as package
data (the messages they lack come from kio's classes, :mod:`protocol.kio_schemas`);
:func:`load_schema` reads one into a :class:`MessageSchema` (its fields are
:class:`Field` objects), from which :mod:`protocol.codegen` generates the codecs of
:mod:`protocol.message_codec`.
"""

from __future__ import annotations

import importlib.util
import json
from functools import cache
from pathlib import Path
from typing import Any

from protocol.kio_schemas import kio_schema, kio_schema_names
from protocol.schema_model import PRIMITIVES, VARIABLE, ZERO_UUID, Field, MessageSchema, Versions, snake_case


def _schema_dir() -> Path:
    spec = importlib.util.find_spec("kafka")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("kafka-python 3.x is required: its package carries Kafka's message schemas")
    return Path(next(iter(spec.submodule_search_locations))) / "protocol" / "schemas" / "resources"


def _strip_comments(text: str) -> str:
    """Kafka's schema files are JSON with // line comments; drop those outside strings."""
    out = []
    for line in text.splitlines():
        in_string = False
        cut = len(line)
        i = 0
        while i < len(line):
            ch = line[i]
            if ch == "\\" and in_string:
                i += 2
                continue
            if ch == '"':
                in_string = not in_string
            elif not in_string and line.startswith("//", i):
                cut = i
                break
            i += 1
        out.append(line[:cut])
    return "\n".join(out)


def _parse_default(type_name: str, raw: Any, nullable_somewhere: bool) -> Any:
    if raw is None:
        if type_name in PRIMITIVES:
            return PRIMITIVES[type_name][2]
        if type_name == "string":
            return ""
        if type_name in ("bytes", "records"):
            return None if type_name == "records" else b""
        if type_name == "uuid":
            return ZERO_UUID
        return None
    if raw == "null":
        return None
    if type_name == "bool":
        return str(raw).lower() == "true"
    if type_name in ("float64",):
        return float(raw)
    if type_name in PRIMITIVES:
        return int(str(raw), 0)
    return raw


def _build_fields(raw_fields: list[dict], common: dict[str, dict]) -> list[Field]:
    fields = []
    for raw in raw_fields:
        type_text: str = raw["type"]
        is_array = type_text.startswith("[]")
        elem = type_text[2:] if is_array else type_text
        sub: list[Field] = []
        if elem not in PRIMITIVES and elem not in VARIABLE:
            sub_raw = raw.get("fields")
            if sub_raw is None:
                sub_raw = common[elem]["fields"]
            sub = _build_fields(sub_raw, common)
        nullable = Versions.parse(raw.get("nullableVersions"))
        default = (
            [] if is_array else _parse_default(elem, raw.get("default"), nullable.low <= nullable.high)
        )
        fields.append(
            Field(
                name=snake_case(raw["name"]),
                kafka_name=raw["name"],
                type=elem,
                is_array=is_array,
                versions=Versions.parse(raw.get("versions")),
                nullable=nullable,
                tagged=Versions.parse(raw.get("taggedVersions")),
                tag=raw.get("tag"),
                default=default,
                fields=sub,
                flexible_override=Versions.parse(raw["flexibleVersions"]) if "flexibleVersions" in raw else None,
            )
        )
    return fields


# Kafka 4 removed the oldest versions of these APIs (KIP-896) by raising "validVersions" alone:
# every field kept its version history in the files ("versions": "0+", "MaxNumOffsets": "0"), so
# the same files still describe the versions Kafka 3.x brokers offer. API name -> the lowest
# version Kafka 3.9 offers; each is checked field by field against kafka-python's hand-written
# structs of those versions (tests/unit/test_removed_versions.py). Other APIs' removed versions
# are relayed undecoded where a broker still offers them (proxy/server.py).
VERSIONS_BEFORE_KAFKA_4 = {
    "Produce": 0, "Fetch": 0, "ListOffsets": 0, "OffsetCommit": 0, "OffsetFetch": 0, "CreateTopics": 0,
    "DeleteTopics": 0, "OffsetForLeaderEpoch": 0, "DescribeAcls": 0, "CreateAcls": 0, "DeleteAcls": 0,
    "DescribeConfigs": 0, "DescribeLogDirs": 0,
}


def _valid_versions(message: str, kind: str, text: str | None) -> Versions:
    valid = Versions.parse(text)
    if kind not in ("request", "response"):
        return valid
    low = VERSIONS_BEFORE_KAFKA_4.get(message.removesuffix(kind.title()))
    return Versions(low, valid.high) if low is not None and low < valid.low else valid


@cache
def json_schema(name: str) -> MessageSchema:
    """One of Kafka's JSON message schemas as kafka-python ships it, e.g. "FetchResponse", with the
    versions Kafka 4 removed from the file put back (:data:`VERSIONS_BEFORE_KAFKA_4`)."""
    path = _schema_dir() / f"{name}.json"
    try:
        raw = json.loads(_strip_comments(path.read_text()))
    except FileNotFoundError:
        raise KeyError(f"no Kafka message schema named {name!r}") from None
    common = {c["name"]: c for c in raw.get("commonStructs", [])}
    return MessageSchema(
        name=raw["name"],
        api_key=raw.get("apiKey"),
        kind=raw["type"],
        valid=_valid_versions(raw["name"], raw["type"], raw.get("validVersions")),
        flexible=Versions.parse(raw.get("flexibleVersions")),
        fields=_build_fields(raw["fields"], common),
    )


def json_schema_names() -> list[str]:
    return sorted(p.stem for p in _schema_dir().glob("*.json"))


@cache
def load_schema(name: str) -> MessageSchema:
    """A message schema by name, e.g. "FetchResponse": from Kafka's JSON file if kafka-python
    ships it, else from kio's classes (Kafka 4's newer APIs)."""
    try:
        return json_schema(name)
    except KeyError:
        return kio_schema(name)


def available_schemas() -> list[str]:
    """Kafka's JSON schemas as kafka-python ships them, and the messages only kio has."""
    return sorted(set(json_schema_names()) | set(kio_schema_names()))
