"""The top-level tagged fields of a Fetch response, found without decoding it.

A Fetch answer of v16+ may carry KIP-951 ``NodeEndpoints`` (tag 0 at the top level, after every
partition's records), which the proxy must re-address; most answers carry none. Decoding a whole
answer to find out costs more than relaying it (tests/bench/wire_speed.py), so this walks the
flexible (v12+) layout by lengths alone: fixed-size fields are skipped by size, strings, arrays,
record sets and tagged fields by their prefixes. Hot path, hand-specialised; checked against the
schema codec by ``tests/unit/test_fetch_response_tags.py``.
"""

from __future__ import annotations

from protocol.errors import ProtocolError
from protocol.varint import read_uvarint

FIRST_FLEXIBLE_VERSION = 12
NODE_ENDPOINTS_TAG = 0
_HEAD = 4 + 2 + 4  # throttle_time_ms, error_code, session_id
_PARTITION_FIXED = 4 + 2 + 8 + 8 + 8  # partition_index .. log_start_offset
_ABORTED_FIXED = 8 + 8  # producer_id, first_offset
_TOPIC_ID = 16


def _skip_tags(body: memoryview, pos: int) -> int:
    count, pos = read_uvarint(body, pos)
    for _ in range(count):
        _, pos = read_uvarint(body, pos)
        size, pos = read_uvarint(body, pos)
        pos += size
    return pos


def fetch_response_tags(body: memoryview, version: int) -> set[int]:
    """The tags of the top-level tagged fields of a Fetch response body (after its header) at
    ``version`` (flexible versions only). ProtocolError if the body is not well-formed."""
    if version < FIRST_FLEXIBLE_VERSION:
        raise ValueError(f"Fetch v{version} has no tagged fields")
    end = len(body)
    pos = _HEAD
    topics, pos = read_uvarint(body, pos)
    for _ in range(max(topics - 1, 0)):
        if version >= 13:
            pos += _TOPIC_ID
        else:
            length, pos = read_uvarint(body, pos)
            pos += max(length - 1, 0)
        partitions, pos = read_uvarint(body, pos)
        for _ in range(max(partitions - 1, 0)):
            pos += _PARTITION_FIXED
            aborted, pos = read_uvarint(body, pos)
            for _ in range(max(aborted - 1, 0)):
                pos = _skip_tags(body, pos + _ABORTED_FIXED)
            pos += 4  # preferred_read_replica
            records, pos = read_uvarint(body, pos)
            pos = _skip_tags(body, pos + max(records - 1, 0))
        pos = _skip_tags(body, pos)
        if pos > end:
            raise ProtocolError(f"Fetch v{version} response shorter than its lengths say")
    tags: set[int] = set()
    count, pos = read_uvarint(body, pos)
    for _ in range(count):
        tag, pos = read_uvarint(body, pos)
        size, pos = read_uvarint(body, pos)
        tags.add(tag)
        pos += size
    if pos != end:
        raise ProtocolError(f"Fetch v{version} response: {end - pos} bytes after its tagged fields")
    return tags
