"""Kafka message codecs compiled from Kafka's own JSON message schemas.

Kafka describes every request and response in a JSON schema (fields, the versions each field
exists in, nullable/tagged/flexible versions). kafka-python 3.x ships those files as package
data; we read them as data and compile, per (message, version), a specialised Python decoder
and encoder (generated source, ``exec``-ed once). Generated straight-line code is several times
faster than interpreting the field tree on every message, which matters for Fetch and Metadata.

Decoded messages are plain ``dict``s keyed by snake_case field names; arrays are ``list``s;
``records`` fields are zero-copy ``memoryview`` slices of the input; ``uuid`` is 16 ``bytes``.
Fields that a version lacks are filled with their schema default, so code can read a message
without caring which version it came in. Unknown tagged fields survive a decode/encode round
trip under the key ``_unknown_tags``.
"""

from __future__ import annotations

import importlib.util
import json
import re
import struct
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

from protocol.errors import ProtocolError

Message = dict[str, Any]
Decoder = Callable[[memoryview, int], tuple[Message, int]]
Encoder = Callable[[Message, list], None]

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


# ---------------------------------------------------------------------------------------------
# Code generation. Each generated decoder has the signature (buf: memoryview, pos: int) ->
# (dict, pos) and each encoder (msg: dict, out: list) appends bytes-like chunks to ``out``.


class _Gen:
    def __init__(self, version: int, flexible: bool) -> None:
        self.version = version
        self.flexible = flexible
        self.lines: list[str] = []
        self.counter = 0
        self.funcs: list[str] = []
        self.consts: dict[str, Any] = {}

    def fresh(self, prefix: str) -> str:
        self.counter += 1
        return f"{prefix}{self.counter}"

    def const(self, value: Any) -> str:
        name = self.fresh("_c")
        self.consts[name] = value
        return name


def _field_flexible(f: Field, gen: _Gen) -> bool:
    if f.flexible_override is not None:
        return gen.version in f.flexible_override
    return gen.flexible


def _default_expr(f: Field, gen: _Gen) -> str:
    if f.is_array:
        return "[]"
    if f.fields:
        return f"{_gen_default_struct(f.fields, gen)}()"
    return repr(f.default) if isinstance(f.default, (int, float, str, bool, type(None))) else gen.const(f.default)


def _gen_default_struct(fields: list[Field], gen: _Gen) -> str:
    fname = gen.fresh("_default_struct")
    items = ", ".join(f"{f.name!r}: {_default_expr(f, gen)}" for f in fields)
    gen.funcs.append(f"def {fname}():\n    return {{{items}}}\n")
    return fname


def _decode_value_lines(f: Field, target: str, gen: _Gen, indent: str, elem: bool = False) -> list[str]:
    """Lines that read one value of f (an element when elem is True) into ``target``."""
    flex = _field_flexible(f, gen)
    nullable = gen.version in f.nullable
    t = f.type
    if f.is_array and not elem:
        n = gen.fresh("n")
        i = gen.fresh("i")
        lst = gen.fresh("lst")
        lines = []
        if flex:
            lines.append(f"{n}, pos = _uvarint(buf, pos)")
            lines.append(f"{n} -= 1")
        else:
            lines.append(f"{n} = _i32(buf, pos)[0]; pos += 4")
        lines.append(f"if {n} < 0:")
        if nullable:
            lines.append(f"    {target} = None")
        else:
            lines.append(f"    raise _PE('non-nullable array {f.kafka_name} is null at byte %d' % pos)")
        lines.append("else:")
        lines.append(f"    if {n} > len(buf) - pos: raise _PE('array {f.kafka_name} claims %d items with %d bytes left' % ({n}, len(buf) - pos))")
        if t in _PRIMITIVES:
            fmt, size, _ = _PRIMITIVES[t]
            lines.append(f"    {target} = list(_struct.unpack_from('>%d{fmt}' % {n}, buf, pos)); pos += {size} * {n}")
        else:
            lines.append(f"    {lst} = []")
            lines.append(f"    for {i} in range({n}):")
            v = gen.fresh("v")
            for line in _decode_value_lines(f, v, gen, "", elem=True):
                lines.append("        " + line)
            lines.append(f"        {lst}.append({v})")
            lines.append(f"    {target} = {lst}")
        return [indent + line for line in lines]
    if t in _PRIMITIVES:
        fmt, size, _ = _PRIMITIVES[t]
        return [indent + f"{target} = _prim_{t}(buf, pos)[0]; pos += {size}"]
    if t == "uuid":
        return [indent + f"{target} = bytes(buf[pos:pos + 16]); pos += 16", indent + f"if len({target}) != 16: raise _PE('truncated uuid')"]
    if t in ("string", "bytes", "records"):
        n = gen.fresh("n")
        lines = []
        if flex:
            lines.append(f"{n}, pos = _uvarint(buf, pos)")
            lines.append(f"{n} -= 1")
        elif t == "string":
            lines.append(f"{n} = _i16(buf, pos)[0]; pos += 2")
        else:
            lines.append(f"{n} = _i32(buf, pos)[0]; pos += 4")
        lines.append(f"if {n} < 0:")
        if nullable or t == "records":
            lines.append(f"    {target} = None")
        else:
            lines.append(f"    raise _PE('non-nullable {f.kafka_name} is null at byte %d' % pos)")
        lines.append("else:")
        lines.append(f"    if pos + {n} > len(buf): raise _PE('{f.kafka_name} claims %d bytes with %d left' % ({n}, len(buf) - pos))")
        if t == "string":
            lines.append(f"    {target} = str(buf[pos:pos + {n}], 'utf-8'); pos += {n}")
        elif t == "bytes":
            lines.append(f"    {target} = bytes(buf[pos:pos + {n}]); pos += {n}")
        else:
            lines.append(f"    {target} = buf[pos:pos + {n}]; pos += {n}")
        return [indent + line for line in lines]
    # a struct
    fn = _gen_struct_decoder(f.fields, gen, f.kafka_name)
    if nullable and not elem:  # a nullable array's items are never null themselves
        # nullable structs carry an int8 presence marker
        return [
            indent + "if _prim_int8(buf, pos)[0] < 0:",
            indent + f"    pos += 1; {target} = None",
            indent + "else:",
            indent + f"    {target}, pos = {fn}(buf, pos + 1)",
        ]
    return [indent + f"{target}, pos = {fn}(buf, pos)"]


def _gen_struct_decoder(fields: list[Field], gen: _Gen, label: str) -> str:
    fname = gen.fresh("_decode_struct")
    body: list[str] = []
    present = [f for f in fields if gen.version in f.versions and gen.version not in f.tagged]
    tagged = [f for f in fields if gen.version in f.versions and gen.version in f.tagged]
    absent = [f for f in fields if gen.version not in f.versions]
    for f in present:
        body += _decode_value_lines(f, f"m_{f.name}", gen, "")
    items = [f"{f.name!r}: m_{f.name}" for f in present]
    items += [f"{f.name!r}: {_default_expr(f, gen)}" for f in absent + tagged]
    body.append("m = {" + ", ".join(items) + "}")
    if gen.flexible:
        body.append("ntags, pos = _uvarint(buf, pos)")
        body.append("for _t in range(ntags):")
        body.append("    tag, pos = _uvarint(buf, pos)")
        body.append("    size, pos = _uvarint(buf, pos)")
        body.append("    end = pos + size")
        body.append("    if end > len(buf): raise _PE('tagged field %d claims %d bytes with %d left' % (tag, size, len(buf) - pos))")
        first = True
        for f in tagged:
            kw = "if" if first else "elif"
            first = False
            body.append(f"    {kw} tag == {f.tag}:")
            body.append("        sub = buf[:end]")
            for line in _decode_value_lines(f, "val", gen, "        ").copy():
                body.append(line.replace("(buf,", "(sub,").replace("buf[", "sub[").replace("len(buf)", "len(sub)"))
            body.append(f"        m[{f.name!r}] = val")
            body.append("        if pos != end: raise _PE('tagged field %d has %d bytes left over' % (tag, end - pos))")
        if tagged:
            body.append("    else:")
            body.append("        m.setdefault('_unknown_tags', {})[tag] = bytes(buf[pos:end])")
            body.append("        pos = end")
        else:
            body.append("    m.setdefault('_unknown_tags', {})[tag] = bytes(buf[pos:end])")
            body.append("    pos = end")
    body.append("return m, pos")
    src = f"def {fname}(buf, pos):  # {label}\n" + "\n".join("    " + line for line in body) + "\n"
    gen.funcs.append(src)
    return fname


def _encode_value_lines(f: Field, expr: str, gen: _Gen, indent: str, elem: bool = False) -> list[str]:
    flex = _field_flexible(f, gen)
    t = f.type
    if f.is_array and not elem:
        v = gen.fresh("v")
        x = gen.fresh("x")
        lines = [f"{v} = {expr}", f"if {v} is None:"]
        lines.append("    out.append(b'\\x00')" if flex else "    out.append(b'\\xff\\xff\\xff\\xff')")
        lines.append("else:")
        lines.append(f"    out.append(_uvarint_bytes(len({v}) + 1))" if flex else f"    out.append(_p_i32(len({v})))")
        if t in _PRIMITIVES:
            fmt, _, _ = _PRIMITIVES[t]
            lines.append(f"    out.append(_struct.pack('>%d{fmt}' % len({v}), *{v}))")
        else:
            lines.append(f"    for {x} in {v}:")
            for line in _encode_value_lines(f, x, gen, "        ", elem=True):
                lines.append(line)
        return [indent + line for line in lines]
    if t in _PRIMITIVES:
        return [indent + f"out.append(_pack_{t}({expr}))"]
    if t == "uuid":
        return [indent + f"out.append({expr})"]
    if t in ("string", "bytes", "records"):
        v = gen.fresh("v")
        lines = [f"{v} = {expr}", f"if {v} is None:"]
        if flex:
            lines.append("    out.append(b'\\x00')")
        elif t == "string":
            lines.append("    out.append(b'\\xff\\xff')")
        else:
            lines.append("    out.append(b'\\xff\\xff\\xff\\xff')")
        lines.append("else:")
        if t == "string":
            lines.append(f"    {v} = {v}.encode('utf-8')")
        if flex:
            lines.append(f"    out.append(_uvarint_bytes(len({v}) + 1))")
        elif t == "string":
            lines.append(f"    out.append(_p_i16(len({v})))")
        else:
            lines.append(f"    out.append(_p_i32(len({v})))")
        lines.append(f"    out.append({v})")
        return [indent + line for line in lines]
    fn = _gen_struct_encoder(f.fields, gen, f.kafka_name)
    if gen.version in f.nullable and not elem:  # a nullable array's items are never null themselves
        return [
            indent + f"if {expr} is None:",
            indent + "    out.append(b'\\xff')",
            indent + "else:",
            indent + "    out.append(b'\\x01')",
            indent + f"    {fn}({expr}, out)",
        ]
    return [indent + f"{fn}({expr}, out)"]


def _gen_struct_encoder(fields: list[Field], gen: _Gen, label: str) -> str:
    fname = gen.fresh("_encode_struct")
    body: list[str] = []
    present = [f for f in fields if gen.version in f.versions and gen.version not in f.tagged]
    tagged = [f for f in fields if gen.version in f.versions and gen.version in f.tagged]
    for f in present:
        body += _encode_value_lines(f, f"m.get({f.name!r}, {_default_expr(f, gen)})", gen, "")
    if gen.flexible:
        body.append("unknown = m.get('_unknown_tags')")
        body.append("tags = []")
        for f in sorted(tagged, key=lambda f: f.tag or 0):
            default = _default_expr(f, gen)
            body.append(f"tv = m.get({f.name!r}, {default})")
            body.append(f"if tv != {default}:")
            body.append("    sub = []")
            for line in _encode_value_lines(f, "tv", gen, "    "):
                body.append(line.replace("out.append(", "sub.append(").replace(", out)", ", sub)"))
            body.append(f"    tags.append(({f.tag}, b''.join(sub)))")
        body.append("if unknown:")
        body.append("    tags.extend(unknown.items())")
        body.append("    tags.sort()")
        body.append("out.append(_uvarint_bytes(len(tags)))")
        body.append("for tag, data in tags:")
        body.append("    out.append(_uvarint_bytes(tag)); out.append(_uvarint_bytes(len(data))); out.append(data)")
    if not body:
        body.append("pass")
    src = f"def {fname}(m, out):  # {label}\n" + "\n".join("    " + line for line in body) + "\n"
    gen.funcs.append(src)
    return fname


# ---------------------------------------------------------------------------------------------
# Runtime helpers the generated code calls.

_i16 = struct.Struct(">h").unpack_from
_i32 = struct.Struct(">i").unpack_from
_p_i16 = struct.Struct(">h").pack
_p_i32 = struct.Struct(">i").pack


def read_uvarint(buf: memoryview | bytes, pos: int) -> tuple[int, int]:
    """Unsigned LEB128 varint as Kafka uses for compact lengths and tags (at most 5 bytes)."""
    result = 0
    shift = 0
    end = len(buf)
    while True:
        if pos >= end:
            raise ProtocolError(f"truncated unsigned varint at byte {pos}")
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result, pos
        shift += 7
        if shift >= 35:
            raise ProtocolError(f"unsigned varint longer than 5 bytes at byte {pos}")


def uvarint_bytes(value: int) -> bytes:
    if value < 0x80:
        return _SMALL_UVARINTS[value]
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


_SMALL_UVARINTS = [bytes([i]) for i in range(0x80)]

_RUNTIME: dict[str, Any] = {
    "_struct": struct,
    "_PE": ProtocolError,
    "_uvarint": read_uvarint,
    "_uvarint_bytes": uvarint_bytes,
    "_i16": _i16,
    "_i32": _i32,
    "_p_i16": _p_i16,
    "_p_i32": _p_i32,
}
for _name, (_fmt, _size, _default) in _PRIMITIVES.items():
    _s = struct.Struct(">" + _fmt)
    _RUNTIME[f"_prim_{_name}"] = _s.unpack_from
    _RUNTIME[f"_pack_{_name}"] = _s.pack


@dataclass(frozen=True)
class Codec:
    """The compiled decoder and encoder of one message at one version."""

    schema: MessageSchema
    version: int
    decode_at: Decoder
    encode_into: Encoder
    default: Callable[[], Message]

    def decode(self, data: bytes | bytearray | memoryview, pos: int = 0, exact: bool = True) -> Message:
        buf = data if isinstance(data, memoryview) else memoryview(data)
        try:
            msg, end = self.decode_at(buf, pos)
        except ProtocolError:
            raise
        except (struct.error, UnicodeDecodeError, IndexError, ValueError, OverflowError, MemoryError) as e:
            raise ProtocolError(f"malformed {self.schema.name} v{self.version}: {e}") from None
        if exact and end != len(buf):
            raise ProtocolError(f"{self.schema.name} v{self.version} has {len(buf) - end} trailing bytes")
        return msg

    def encode(self, msg: Message) -> bytes:
        out: list = []
        try:
            self.encode_into(msg, out)
        except (struct.error, TypeError, AttributeError, KeyError) as e:
            raise ValueError(f"cannot encode {self.schema.name} v{self.version}: {e!r}") from None
        return b"".join(out)


@cache
def codec(name: str, version: int) -> Codec:
    """The codec of message ``name`` (e.g. "MetadataResponse") at ``version``."""
    schema = load_schema(name)
    if version not in schema.valid and schema.kind not in ("header", "data"):
        raise ProtocolError(f"{name} has no version {version} (valid {schema.valid.low}-{schema.valid.high})")
    gen = _Gen(version, schema.is_flexible(version))
    dec = _gen_struct_decoder(schema.fields, gen, name)
    enc = _gen_struct_encoder(schema.fields, gen, name)
    dflt = _gen_default_struct(schema.fields, gen)
    namespace = dict(_RUNTIME)
    namespace.update(gen.consts)
    exec(compile("\n".join(gen.funcs), f"<{name} v{version}>", "exec"), namespace)  # noqa: S102
    return Codec(schema, version, namespace[dec], namespace[enc], namespace[dflt])
