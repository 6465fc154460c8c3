"""The compression codecs of a record batch's records section.

A batch names its codec in the low three bits of its attributes (:class:`Compression`).
:func:`decompress` accepts what any producer writes; :func:`compress` frames data as the Java
producer does.
"""

from __future__ import annotations

import enum
import gzip
import struct

import cramjam
import lz4.frame
import zstandard

from protocol.buffers import Buffer
from protocol.errors import ProtocolError

_I32 = struct.Struct(">i")


class Compression(enum.IntEnum):
    NONE = 0
    GZIP = 1
    SNAPPY = 2
    LZ4 = 3
    ZSTD = 4


# The Java producer writes snappy through snappy-java's stream format ("xerial"): this 8-byte
# magic, int32 version and int32 compatible version, then (int32 length, raw snappy block)*.
_XERIAL_MAGIC = b"\x82SNAPPY\x00"
_XERIAL_HEADER = _XERIAL_MAGIC + struct.pack(">ii", 1, 1)
_XERIAL_BLOCK = 32 * 1024  # snappy-java's default block size


def _snappy_decompress(data: bytes) -> bytes:
    if not data.startswith(_XERIAL_MAGIC):
        return bytes(cramjam.snappy.decompress_raw(data))  # librdkafka and others: one raw block
    if len(data) < len(_XERIAL_HEADER):
        raise ProtocolError(f"xerial snappy header truncated: {len(data)} of {len(_XERIAL_HEADER)} bytes")
    out = bytearray()
    pos = len(_XERIAL_HEADER)
    while pos < len(data):
        if len(data) - pos < 4:
            raise ProtocolError(f"xerial snappy block length truncated at byte {pos} of the stream")
        (n,) = _I32.unpack_from(data, pos)
        pos += 4
        if n < 0 or n > len(data) - pos:
            raise ProtocolError(f"xerial snappy block of {n} bytes at byte {pos - 4} of the stream, {len(data) - pos} left")
        out += cramjam.snappy.decompress_raw(data[pos : pos + n])
        pos += n
    return bytes(out)


def _zstd_decompress(data: bytes) -> bytes:
    # Frames may lack a content size (zstd-jni's stream writer omits it) and may be concatenated,
    # so decode frame by frame with a streaming object rather than one-shot decompress().
    dctx = zstandard.ZstdDecompressor()
    out = []
    rest = data
    while rest:
        obj = dctx.decompressobj()
        out.append(obj.decompress(rest))
        if not obj.eof:
            raise ProtocolError("zstd frame truncated")
        rest = obj.unused_data
    return b"".join(out)


def decompress(codec: Compression, data: Buffer) -> bytes:
    """The records section of a batch, uncompressed; ProtocolError on any codec failure."""
    if codec == Compression.NONE:
        return bytes(data)
    raw = bytes(data)
    try:
        if codec == Compression.GZIP:
            return gzip.decompress(raw)
        if codec == Compression.SNAPPY:
            return _snappy_decompress(raw)
        if codec == Compression.LZ4:
            return lz4.frame.decompress(raw)
        if codec == Compression.ZSTD:
            return _zstd_decompress(raw)
    except ProtocolError as e:
        raise ProtocolError(f"cannot decompress {codec.name} records: {e}") from None
    except Exception as e:  # each codec library raises its own types on bad input
        raise ProtocolError(f"cannot decompress {codec.name} records: {type(e).__name__}: {e}") from None
    raise ProtocolError(f"unknown compression codec {int(codec)}")


def compress(codec: Compression, data: bytes) -> bytes:
    """``data`` compressed as the Java producer would frame it (snappy in xerial blocks; LZ4 as a
    frame of independent blocks, which Kafka's LZ4 reader requires)."""
    if codec == Compression.NONE:
        return data
    if codec == Compression.GZIP:
        return gzip.compress(data)
    if codec == Compression.SNAPPY:
        out = bytearray(_XERIAL_HEADER)
        for i in range(0, len(data), _XERIAL_BLOCK):
            block = cramjam.snappy.compress_raw(data[i : i + _XERIAL_BLOCK])
            out += _I32.pack(len(block))
            out += block
        return bytes(out)
    if codec == Compression.LZ4:
        return lz4.frame.compress(data, block_linked=False, store_size=False)
    if codec == Compression.ZSTD:
        return zstandard.ZstdCompressor().compress(data)
    raise ValueError(f"unknown compression codec {codec}")
