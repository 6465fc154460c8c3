"""The transaction index (``.txnindex``): 34-byte entries, one per aborted transaction, in
ascending last-offset order. Tiny and read rarely, so it is encoded and decoded through its
``construct`` declaration; :func:`aborted_in_range` is the one struct-based pass."""

from __future__ import annotations

import struct
from collections.abc import Iterable
from typing import NamedTuple

from construct import Const, ConstructError, GreedyRange, Int16sb, Int64sb, Struct

from protocol.errors import ProtocolError
from protocol.remote_formats.index_entries import _entry_count

ABORTED_TXN_ENTRY = Struct(
    "version" / Const(0, Int16sb),
    "producer_id" / Int64sb,
    "first_offset" / Int64sb,
    "last_offset" / Int64sb,
    "last_stable_offset" / Int64sb,
)
TRANSACTION_INDEX = GreedyRange(ABORTED_TXN_ENTRY)

_TXN_ENTRY = struct.Struct(">hqqqq")
TXN_ENTRY_SIZE = _TXN_ENTRY.size  # 34
_TXN_VERSION = 0


class AbortedTxn(NamedTuple):
    """A transaction index entry: an aborted transaction of ``producer_id`` spanning
    ``first_offset``..``last_offset`` (the abort marker), inclusive."""

    producer_id: int
    first_offset: int
    last_offset: int
    last_stable_offset: int


def _check_txn(txn: AbortedTxn, previous_last: int) -> str | None:
    if txn.first_offset < 0 or txn.first_offset > txn.last_offset:
        return f"aborted transaction spans {txn.first_offset}..{txn.last_offset}"
    # Kafka's TransactionIndex.append refuses a last offset that does not grow.
    if txn.last_offset <= previous_last:
        return f"aborted transaction last offset {txn.last_offset} does not follow {previous_last}"
    return None


def encode_transaction_index(txns: Iterable[tuple[int, int, int, int]]) -> bytes:
    """Encode aborted transactions (in ascending last-offset order)."""
    items = [AbortedTxn(*t) for t in txns]
    previous = -1
    for txn in items:
        problem = _check_txn(txn, previous)
        if problem:
            raise ValueError(problem)
        previous = txn.last_offset
    try:
        return TRANSACTION_INDEX.build([dict(t._asdict(), version=_TXN_VERSION) for t in items])
    except ConstructError as exc:
        raise ValueError(f"aborted transaction does not fit the format: {exc}") from None


def decode_transaction_index(data: bytes | memoryview) -> list[AbortedTxn]:
    """Decode and validate a transaction index through its declaration (small, read rarely)."""
    count = _entry_count(data, TXN_ENTRY_SIZE, "transaction index")
    entries: list[AbortedTxn] = []
    previous = -1
    for i in range(count):
        at = i * TXN_ENTRY_SIZE
        try:
            parsed = ABORTED_TXN_ENTRY.parse(bytes(data[at : at + TXN_ENTRY_SIZE]))
        except ConstructError:
            raise ProtocolError(f"transaction index entry {i} has an unknown version", at) from None
        txn = AbortedTxn(parsed.producer_id, parsed.first_offset, parsed.last_offset, parsed.last_stable_offset)
        problem = _check_txn(txn, previous)
        if problem:
            raise ProtocolError(f"transaction index entry {i}: {problem}", at)
        entries.append(txn)
        previous = txn.last_offset
    return entries


def aborted_in_range(index: bytes | memoryview, start_offset: int, end_offset: int) -> list[AbortedTxn]:
    """The aborted transactions overlapping ``start_offset``..``end_offset`` (both inclusive).

    A read_committed fetch of [fetch offset, upper bound) passes ``end_offset = upper - 1``
    (Kafka's ``collectAbortedTxns`` compares ``first_offset < upper``). Entries ascend by last
    offset but not necessarily by first offset, so this is one full, struct-based pass; it also
    validates every entry as ``decode_transaction_index`` does.
    """
    _entry_count(index, TXN_ENTRY_SIZE, "transaction index")
    found = []
    previous = -1
    for i, (version, pid, first, last, lso) in enumerate(_TXN_ENTRY.iter_unpack(index)):
        if version != _TXN_VERSION:
            raise ProtocolError(f"transaction index entry {i} has version {version}", i * TXN_ENTRY_SIZE)
        txn = AbortedTxn(pid, first, last, lso)
        problem = _check_txn(txn, previous)
        if problem:
            raise ProtocolError(f"transaction index entry {i}: {problem}", i * TXN_ENTRY_SIZE)
        previous = last
        if last >= start_offset and first <= end_offset:
            found.append(txn)
    return found
