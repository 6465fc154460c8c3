"""Kafka message codecs compiled from Kafka's own JSON message schemas: :func:`codec` gives the
decoder and encoder of one message at one version.

The schema is read by :mod:`protocol.message_schema`, turned into Python source by
:mod:`protocol.codegen` and compiled once per (message, version).

Decoded messages are plain ``dict``s keyed by snake_case field names; arrays are ``list``s;
``records`` fields are zero-copy ``memoryview`` slices of the input; ``uuid`` is 16 ``bytes``.
Fields that a version lacks are filled with their schema default, so code can read a message
without caring which version it came in. Unknown tagged fields survive a decode/encode round
trip under the key ``_unknown_tags``.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from typing import Any

from protocol.codegen import _RUNTIME, _Gen, _gen_default_struct, _gen_struct_decoder, _gen_struct_encoder
from protocol.errors import ProtocolError
from protocol.message_schema import MessageSchema, load_schema

Message = dict[str, Any]
Decoder = Callable[[memoryview, int], tuple[Message, int]]
Encoder = Callable[[Message, list], None]


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

    def read_request(self, data: bytes | bytearray | memoryview) -> Message:
        """A request read as Kafka's own request parsing reads it: the fields this version defines,
        and nothing said about bytes after them (``AbstractRequest.parseRequest`` leaves them)."""
        return self.decode(data, exact=False)

    def encode(self, msg: Message) -> bytes:
        return b"".join(self.encode_parts(msg))

    def encode_parts(self, msg: Message) -> list:
        """The encoding as a list of bytes-like pieces, ``records`` given as
        :class:`~protocol.record_parts.RecordParts` among them by reference: join it once, with
        whatever goes before it."""
        out: list = []
        try:
            self.encode_into(msg, out)
        except (struct.error, TypeError, AttributeError, KeyError) as e:
            raise ValueError(f"cannot encode {self.schema.name} v{self.version}: {e!r}") from None
        return out


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
