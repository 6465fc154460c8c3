"""Control records: the transaction markers (COMMIT, ABORT) that end a transaction in a
partition, each written alone in a batch with the control attribute set.

Key: version int16, type int16. Value (version 0): version int16, coordinator epoch int32.
"""

from __future__ import annotations

import enum
import struct

from protocol.errors import ProtocolError
from protocol.records import Record

_CONTROL_KEY = struct.Struct(">hh")
_CONTROL_VALUE = struct.Struct(">hi")


class ControlType(enum.IntEnum):
    """Transaction markers; KRaft uses further types (2+) in its own metadata log."""

    ABORT = 0
    COMMIT = 1


def decode_control_record(record: Record) -> tuple[int, int]:
    """(version, type) from a control record's key; type 0 is ABORT, 1 COMMIT (see ControlType)."""
    key = record.key
    if key is None or len(key) < _CONTROL_KEY.size:
        raise ProtocolError(f"control record key is {'null' if key is None else f'{len(key)} bytes'}, needs 4")
    version, kind = _CONTROL_KEY.unpack_from(key)
    if version < 0:
        raise ProtocolError(f"control record key has negative version {version}")
    return version, kind


def make_control_record(offset: int, timestamp: int, control_type: int, coordinator_epoch: int = 0) -> Record:
    """A transaction marker record (version 0 key and value) for :func:`build_batch` with is_control."""
    return Record(offset, timestamp, _CONTROL_KEY.pack(0, control_type), _CONTROL_VALUE.pack(0, coordinator_epoch), [])
