"""The index files that travel with each remote segment, in Kafka's own on-disk formats.

A remote segment is uploaded with the indexes a broker keeps beside a local ``.log`` file, so
that a fetch from the remote tier can seek instead of scanning the whole object:

* offset index (``.index``): 8-byte entries (relative offset int32, position int32), big endian;
* time index (``.timeindex``): 12-byte entries (timestamp int64, relative offset int32);
* transaction index (``.txnindex``): 34-byte aborted-transaction entries;
* leader-epoch checkpoint: text, ``0`` / entry count / ``epoch startOffset`` lines.

Each binary layout is declared once with ``construct`` (``OFFSET_INDEX_ENTRY`` and friends).
Those declarations are the specification; the transaction index, which is tiny and read
rarely, is encoded and decoded through them directly. Offset and time indexes can hold a
quarter of a million entries per segment and are consulted on every remote fetch, so their
codecs and look-ups use ``struct`` and binary search over the raw bytes (no full decode),
and the tests check that the fast paths agree with the declarations byte for byte.

Indexing semantics (mirroring Kafka's ``LogSegment``):

* An index entry is added for a batch when more than ``interval_bytes`` of log have been
  written since the previous entry, counting the bytes *before* that batch, so the first
  batch of a segment is never indexed and a lookup that finds no entry starts at position 0.
* The offset index maps a batch's **last** offset to the batch's start position, as Kafka
  does. ``lookup_position(target)`` returns the entry with the largest offset <= target.
  Because the key is the batch's last offset, every batch before that position ends before
  target, so the returned position is at or before the batch containing target: scanning
  forward from it always reaches target, and never misses it.
* The time index maps the segment's running maximum timestamp to the last offset of the batch
  that first reached it; an entry is added at each index point only when the maximum grew,
  and once more when the segment is finished (Kafka does this when it rolls a segment).
  Hence all batches before that batch have smaller timestamps, and
  ``lookup_offset_for_timestamp(ts)`` (largest entry with timestamp <= ts) gives an offset
  from which a forward scan never skips the first batch whose max timestamp >= ts.

Every decoder raises ``ProtocolError`` (and nothing else) for malformed bytes; encoders and
builders raise ``ValueError`` for values the format cannot hold.

Modules, one per format:

* :mod:`~protocol.remote_formats.offset_index` and :mod:`~protocol.remote_formats.time_index`:
  codecs and binary-search look-ups;
* :mod:`~protocol.remote_formats.index_builder`: both indexes built batch by batch, as a broker does;
* :mod:`~protocol.remote_formats.transaction_index`;
* :mod:`~protocol.remote_formats.leader_epoch_checkpoint`;
* :mod:`~protocol.remote_formats.index_entries`: what the binary indexes share.

Import names from those modules; this package re-exports their public names so that the family
also reads as one namespace (``from protocol import remote_formats as rf``).
"""

from __future__ import annotations

from protocol.remote_formats.index_builder import (
    DEFAULT_INDEX_INTERVAL_BYTES,
    OffsetIndexBuilder,
    SegmentIndexBuilder,
    TimeIndexBuilder,
)
from protocol.remote_formats.leader_epoch_checkpoint import (
    EpochEntry,
    decode_leader_epoch_checkpoint,
    encode_leader_epoch_checkpoint,
)
from protocol.remote_formats.offset_index import (
    OFFSET_ENTRY_SIZE,
    OFFSET_INDEX_ENTRY,
    OffsetPosition,
    decode_offset_index,
    encode_offset_index,
    lookup_position,
)
from protocol.remote_formats.time_index import (
    TIME_ENTRY_SIZE,
    TIME_INDEX_ENTRY,
    TimestampOffset,
    decode_time_index,
    encode_time_index,
    lookup_offset_for_timestamp,
    position_for_timestamp,
)
from protocol.remote_formats.transaction_index import (
    ABORTED_TXN_ENTRY,
    TRANSACTION_INDEX,
    TXN_ENTRY_SIZE,
    AbortedTxn,
    aborted_in_range,
    decode_transaction_index,
    encode_transaction_index,
)

__all__ = [
    "ABORTED_TXN_ENTRY",
    "DEFAULT_INDEX_INTERVAL_BYTES",
    "OFFSET_ENTRY_SIZE",
    "OFFSET_INDEX_ENTRY",
    "TIME_ENTRY_SIZE",
    "TIME_INDEX_ENTRY",
    "TRANSACTION_INDEX",
    "TXN_ENTRY_SIZE",
    "AbortedTxn",
    "EpochEntry",
    "OffsetIndexBuilder",
    "OffsetPosition",
    "SegmentIndexBuilder",
    "TimeIndexBuilder",
    "TimestampOffset",
    "aborted_in_range",
    "decode_leader_epoch_checkpoint",
    "decode_offset_index",
    "decode_time_index",
    "decode_transaction_index",
    "encode_leader_epoch_checkpoint",
    "encode_offset_index",
    "encode_time_index",
    "encode_transaction_index",
    "lookup_offset_for_timestamp",
    "lookup_position",
    "position_for_timestamp",
]
