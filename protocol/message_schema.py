"""Kafka's JSON message schemas, loaded as data.

Kafka describes every request and response in a JSON schema (fields, the versions each field
exists in, nullable/tagged/flexible versions). kafka-python 3.x ships those files as package
data; :func:`load_schema` reads one into a :class:`MessageSchema` (its fields are
:class:`Field` objects), from which :mod:`protocol.codegen` generates the codecs of
:mod:`protocol.message_codec`.
"""

from __future__ import annotations

import importlib.util
import json
import re
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

_PRIMITIVES = {
    # name: (struct format, size, default)
    "bool": ("?", 1, False),
    "int8": ("b", 1, 0),
    "int16": ("h", 2, 0),
    "uint16": ("H", 2, 0),
    "int32": ("i", 4, 0),
    "uint32": ("I", 4, 0),
    "int64": ("q", 8, 0),
    "float64": ("d", 8, 0.0),
}
_VARIABLE = {"string", "bytes", "records", "uuid"}
ZERO_UUID = bytes(16)


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


def snake_case(name: str) -> str:
    name = re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", name)
    name = re.sub(r"(?<=[A-Z])(?=[A-Z][a-z])", "_", name)
    return name.lower()


@dataclass(frozen=True)
class Versions:
    """A Kafka version range such as "3+", "0-7" or "none"."""

    low: int
    high: int  # inclusive; a large number stands for "+"

    @classmethod
    def parse(cls, text: str | None) -> Versions:
        if text is None or text == "none" or text == "":
            return cls(1, 0)
        if text.endswith("+"):
            return cls(int(text[:-1]), 1 << 15)
        if "-" in text:
            lo, hi = text.split("-")
            return cls(int(lo), int(hi))
        return cls(int(text), int(text))

    def __contains__(self, version: int) -> bool:
        return self.low <= version <= self.high


@dataclass
class Field:
    name: str  # snake_case
    kafka_name: str
    type: str  # primitive name, "string", "bytes", "records", "uuid", or a struct name
    is_array: bool
    versions: Versions
    nullable: Versions
    tagged: Versions
    tag: int | None
    default: Any
    fields: list[Field] = field(default_factory=list)  # for struct types
    flexible_override: Versions | None = None


@dataclass
class MessageSchema:
    name: str
    api_key: int | None
    kind: str  # "request", "response", "header", "data"
    valid: Versions
    flexible: Versions
    fields: list[Field]

    def is_flexible(self, version: int) -> bool:
        return version in self.flexible

    @property
    def max_version(self) -> int:
        return self.valid.high

    @property
    def min_version(self) -> int:
        return self.valid.low


def _parse_default(type_name: str, raw: Any, nullable_somewhere: bool) -> Any:
    if raw is None:
        if type_name in _PRIMITIVES:
            return _PRIMITIVES[type_name][2]
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
    if type_name in _PRIMITIVES:
        return int(str(raw), 0)
    return raw


def _build_fields(raw_fields: list[dict], common: dict[str, dict]) -> list[Field]:
    fields = []
    for raw in raw_fields:
        type_text: str = raw["type"]
        is_array = type_text.startswith("[]")
        elem = type_text[2:] if is_array else type_text
        sub: list[Field] = []
        if elem not in _PRIMITIVES and elem not in _VARIABLE:
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


@cache
def load_schema(name: str) -> MessageSchema:
    """Load one of Kafka's message schemas by its name, e.g. "FetchResponse"."""
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
        valid=Versions.parse(raw.get("validVersions")),
        flexible=Versions.parse(raw.get("flexibleVersions")),
        fields=_build_fields(raw["fields"], common),
    )


def available_schemas() -> list[str]:
    return sorted(p.stem for p in _schema_dir().glob("*.json"))
