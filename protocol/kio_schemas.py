"""Kafka message schemas that kafka-python's JSON files lack, read from kio's entity classes.

kafka-python 3.0.12 ships Kafka's JSON schemas for 55 APIs; Kafka 4.x defines more (KIP-848's
ConsumerGroupHeartbeat and ConsumerGroupDescribe, KIP-932's share-group APIs, telemetry, ...).
kio (Aiven's ``kio`` on PyPI) ships Python dataclasses generated from the same JSON files, one
module per API version (``kio.schema.share_fetch.v1.request.ShareFetchRequest``). This module
folds those per-version classes back into one :class:`MessageSchema` per message, as if read from
its JSON file, so that every codec, filter and test treats both sources alike.

kio's generator renames and retypes a few things, undone here:
- ``*_ms`` fields it types as durations or timestamps lose the suffix (``throttle_time``): the
  suffix comes back, and the types are Kafka's again (int32/int64; ``error_code`` is int16);
- UUIDs and timestamps may be None in kio (for the zero UUID and -1): on the wire they are never
  null, so only strings, bytes, records, arrays and structs are nullable here.

``tests/unit/test_kio_schemas.py`` holds every message both sources define equal, field by field
and version by version: the rules above are checked on 55 APIs before they are trusted for the
rest.
"""

from __future__ import annotations

import dataclasses
import datetime
import enum
import pkgutil
import types
import typing
import uuid
from functools import cache
from typing import Any

from protocol.schema_model import ZERO_UUID, Field, MessageSchema, Versions

_KAFKA_TYPES = {"error_code": "int16", "timedelta_i32": "int32", "timedelta_i64": "int64", "datetime_i64": "int64"}
_MS_SUFFIXED = {"timedelta_i32", "timedelta_i64", "datetime_i64"}
_NULLABLE_TYPES = {"string", "bytes", "records"}
_TYPE_DEFAULTS: dict[str, Any] = {"bool": False, "string": "", "bytes": b"", "records": None, "uuid": ZERO_UUID,
                                  "float64": 0.0}


@cache
def _class_paths() -> dict[str, dict[int, str]]:
    """Message name ("ShareFetchRequest") -> version -> "module:Class" of kio's class, from kio's
    index: cheap, where importing the classes themselves takes hundreds of modules."""
    from kio.schema.index import schema_name_map

    out: dict[str, dict[int, str]] = {}
    for by_version in schema_name_map.values():
        for version, kinds in by_version.items():
            for kind, path in kinds.items():
                if kind.name in ("request", "response"):
                    out.setdefault(path.rsplit(":", 1)[1], {})[int(version)] = path
    return out


def _unwrap(hint: Any) -> tuple[Any, bool, bool]:
    """(element type, is an array, may be None) of a field's type hint."""
    may_be_none = False
    if typing.get_origin(hint) in (types.UnionType, typing.Union):
        args = typing.get_args(hint)
        kept = [a for a in args if a is not type(None)]
        may_be_none, hint = len(kept) < len(args), kept[0]
    if typing.get_origin(hint) is tuple:
        return typing.get_args(hint)[0], True, may_be_none
    return hint, False, may_be_none


def _span(versions: set[int], what: str) -> Versions:
    if not versions:
        return Versions(1, 0)
    low, high = min(versions), max(versions)
    if len(versions) != high - low + 1:
        raise ValueError(f"{what}: versions {sorted(versions)} are not one range")
    return Versions(low, high)


def _flexible(versions: set[int], what: str) -> Versions:
    """Flexible versions are "N+" in Kafka's schemas: from the first one on, for ever."""
    span = _span(versions, f"{what} flexible")
    return span if span.low > span.high else Versions(span.low, 1 << 15)


def _plain(value: Any, kafka_type: str) -> Any:
    """A kio default as this codebase's codecs hold it."""
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, datetime.timedelta):
        return int(value / datetime.timedelta(milliseconds=1))
    if isinstance(value, datetime.datetime):
        return int(value.timestamp() * 1000)
    if isinstance(value, uuid.UUID):
        return value.bytes
    if value is None and kafka_type == "uuid":
        return ZERO_UUID
    if value is None and kafka_type in ("datetime_i64", "timedelta_i64", "timedelta_i32"):
        return -1
    if isinstance(value, bool):
        return value
    if isinstance(value, int):
        return int(value)
    return value


def _merged_order(orders: list[list[str]]) -> list[str]:
    """One field order that keeps every version's order (each is a subsequence of Kafka's)."""
    merged: list[str] = []
    for order in orders:
        previous = -1
        for name in order:
            if name in merged:
                previous = merged.index(name)
            else:
                previous += 1
                merged.insert(previous, name)
    return merged


def _fields(per_version: dict[int, type], where: str) -> list[Field]:
    """The fields of one struct, given its class at each version it exists in."""
    seen: dict[str, dict[int, tuple[dataclasses.Field[Any], Any]]] = {}
    orders = []
    for version, cls in sorted(per_version.items()):
        hints = typing.get_type_hints(cls)
        order = []
        for f in dataclasses.fields(cls):
            seen.setdefault(f.name, {})[version] = (f, hints[f.name])
            order.append(f.name)
        orders.append(order)
    out = []
    for kio_name in _merged_order(orders):
        at = seen[kio_name]
        first_field, first_hint = at[min(at)]
        element, is_array, _ = _unwrap(first_hint)
        is_struct = dataclasses.is_dataclass(element)
        kio_type = "struct" if is_struct else first_field.metadata["kafka_type"]
        kafka_type = element.__name__ if is_struct else _KAFKA_TYPES.get(kio_type, kio_type)
        name = f"{kio_name}_ms" if kio_type in _MS_SUFFIXED else kio_name
        nullable_at = {v for v, (_, hint) in at.items()
                       if _unwrap(hint)[2] and (is_array or is_struct or kafka_type in _NULLABLE_TYPES)}
        tagged_at = {v for v, (f, _) in at.items() if "tag" in f.metadata}
        tags = {at[v][0].metadata["tag"] for v in tagged_at}
        if len(tags) > 1:
            raise ValueError(f"{where}.{name}: tag changes between versions: {sorted(tags)}")
        last_field = at[max(at)][0]
        if is_array:
            default: Any = []
        elif is_struct:
            default = None  # as read from JSON: a tagged struct left at its default is not sent
        elif last_field.default is not dataclasses.MISSING:
            default = _plain(last_field.default, kio_type)
        else:
            default = _TYPE_DEFAULTS.get(kafka_type, None if is_struct else 0)
        sub = _fields({v: _unwrap(hint)[0] for v, (_, hint) in at.items()}, f"{where}.{name}") if is_struct else []
        out.append(Field(
            name=name,
            kafka_name="".join(part.capitalize() for part in name.split("_")),
            type=kafka_type,
            is_array=is_array,
            versions=_span(set(at), f"{where}.{name}"),
            nullable=_span(nullable_at, f"{where}.{name} nullable"),
            tagged=_span(tagged_at, f"{where}.{name} tagged"),
            tag=tags.pop() if tags else None,
            default=default,
            fields=sub,
        ))
    return out


@cache
def kio_schema(name: str) -> MessageSchema:
    """The schema of a request or response message (e.g. "ShareFetchRequest") from kio's
    classes; KeyError if kio has none."""
    paths = _class_paths().get(name)
    if not paths:
        raise KeyError(f"no Kafka message schema named {name!r}")
    classes = {v: pkgutil.resolve_name(path) for v, path in sorted(paths.items())}
    newest = classes[max(classes)]
    return MessageSchema(
        name=name,
        api_key=int(newest.__api_key__),
        kind="request" if name.endswith("Request") else "response",
        valid=_span(set(classes), name),
        flexible=_flexible({v for v, cls in classes.items() if cls.__flexible__}, name),
        fields=_fields(classes, name),
    )


@cache
def kio_api_index() -> dict[int, tuple[str, int, int]]:
    """API key -> (name, lowest version, highest version) of every API kio defines (both its
    request and response, at the same versions), without importing them."""
    from kio.schema.index import api_key_map

    paths = _class_paths()
    out = {}
    for key, package in api_key_map.items():
        base = "".join(part.capitalize() for part in package.split("_"))
        request, response = paths.get(base + "Request"), paths.get(base + "Response")
        if request and response and set(request) == set(response):
            out[int(key)] = (base, min(request), max(request))
    return dict(sorted(out.items()))


def kio_schema_names() -> list[str]:
    """Every request and response message kio defines."""
    return sorted(f"{name}{kind}" for name, _, _ in kio_api_index().values() for kind in ("Request", "Response"))
