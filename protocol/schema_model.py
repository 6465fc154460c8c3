"""The shape of a Kafka message schema, whichever source it is read from: the versions each
field exists in, is nullable or tagged in, its type, default and sub-fields.
(:mod:`protocol.message_schema` reads Kafka's JSON files, :mod:`protocol.kio_schemas` kio's
classes; :mod:`protocol.codegen` turns either into codecs.)"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

PRIMITIVES = {
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
VARIABLE = {"string", "bytes", "records", "uuid"}
ZERO_UUID = bytes(16)


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


def same_bytes(schema: MessageSchema, a: int, b: int) -> bool:
    """Whether a message's bodies at versions ``a`` and ``b`` are the same bytes: both flexible or
    neither, every field of one version that the other lacks is tagged there (a reader skips tags it
    does not know, a writer at the other version has none to write), and every field of both is
    alike in both (nullable, tagged, and so on down its sub-fields)."""
    if a not in schema.valid or b not in schema.valid:
        return False
    return schema.is_flexible(a) == schema.is_flexible(b) and _fields_alike(schema.fields, a, b)


def _fields_alike(fields: list[Field], a: int, b: int) -> bool:
    for f in fields:
        in_a, in_b = a in f.versions, b in f.versions
        if in_a != in_b:
            if (a if in_a else b) not in f.tagged:
                return False
            continue
        if not in_a:
            continue
        override = f.flexible_override
        if (a in f.tagged) != (b in f.tagged) or (a in f.nullable) != (b in f.nullable) or \
                (override is not None and (a in override) != (b in override)):
            return False
        if not _fields_alike(f.fields, a, b):
            return False
    return True
