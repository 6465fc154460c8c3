"""Python source generated from a message schema: one specialised decoder and encoder per
(message, version), and the runtime helpers that generated code calls.

Generated straight-line code is several times faster than interpreting the field tree on every
message, which matters for Fetch and Metadata. :func:`protocol.message_codec.codec` compiles the
source (``exec``-ed once) with :data:`_RUNTIME` as its globals.
"""

from __future__ import annotations

import struct
from typing import Any

from protocol.errors import ProtocolError
from protocol.record_parts import RecordParts
from protocol.schema_model import PRIMITIVES, Field
from protocol.varint import read_uvarint, uvarint_bytes

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
        if t in PRIMITIVES:
            fmt, size, _ = PRIMITIVES[t]
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
    if t in PRIMITIVES:
        fmt, size, _ = PRIMITIVES[t]
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
            # Kafka decodes strings with replacement characters, never refusing a message for them.
            lines.append(f"    {target} = str(buf[pos:pos + {n}], 'utf-8', 'replace'); pos += {n}")
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
        if t in PRIMITIVES:
            fmt, _, _ = PRIMITIVES[t]
            lines.append(f"    out.append(_struct.pack('>%d{fmt}' % len({v}), *{v}))")
        else:
            lines.append(f"    for {x} in {v}:")
            for line in _encode_value_lines(f, x, gen, "        ", elem=True):
                lines.append(line)
        return [indent + line for line in lines]
    if t in PRIMITIVES:
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
        if t == "records":
            # Pieces of other buffers go into the output by reference (protocol.record_parts).
            size = "_uvarint_bytes({n} + 1)" if flex else "_p_i32({n})"
            lines.append(f"elif type({v}) is _RecordParts:")
            lines.append(f"    out.append({size.format(n=v + '.nbytes')})")
            lines.append(f"    out.extend({v})")
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

_RUNTIME: dict[str, Any] = {
    "_struct": struct,
    "_PE": ProtocolError,
    "_uvarint": read_uvarint,
    "_uvarint_bytes": uvarint_bytes,
    "_i16": _i16,
    "_i32": _i32,
    "_p_i16": _p_i16,
    "_p_i32": _p_i32,
    "_RecordParts": RecordParts,
}
for _name, (_fmt, _size, _default) in PRIMITIVES.items():
    _s = struct.Struct(">" + _fmt)
    _RUNTIME[f"_prim_{_name}"] = _s.unpack_from
    _RUNTIME[f"_pack_{_name}"] = _s.pack
