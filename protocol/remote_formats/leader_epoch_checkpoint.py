"""The leader-epoch checkpoint that travels with a remote segment: Kafka's text format, ``0`` /
entry count / ``epoch startOffset`` lines."""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from typing import NamedTuple

from protocol.errors import ProtocolError

_INT32_MAX = 2**31 - 1
_INT64_MAX = 2**63 - 1


class EpochEntry(NamedTuple):
    epoch: int
    start_offset: int


_CHECKPOINT_VERSION = 0
_NUMBER = re.compile(r"[0-9]{1,19}")
_ENTRY_LINE = re.compile(r"([0-9]{1,10})[ \t]+([0-9]{1,19})")


def encode_leader_epoch_checkpoint(entries: Iterable[tuple[int, int]]) -> bytes:
    """Kafka's checkpoint text: version, count, then ``epoch startOffset`` lines, each ending
    in a newline. Epochs must strictly ascend and start offsets must not descend."""
    items = [EpochEntry(*e) for e in entries]
    _check_epochs(items, ValueError)
    lines = [str(_CHECKPOINT_VERSION), str(len(items))]
    lines += [f"{e.epoch} {e.start_offset}" for e in items]
    return ("\n".join(lines) + "\n").encode("ascii")


def _check_epochs(items: Sequence[EpochEntry], error: type[ValueError]) -> None:
    previous: EpochEntry | None = None
    for e in items:
        if not 0 <= e.epoch <= _INT32_MAX or not 0 <= e.start_offset <= _INT64_MAX:
            raise error(f"leader epoch entry {tuple(e)} is out of range")
        if previous is not None and (e.epoch <= previous.epoch or e.start_offset < previous.start_offset):
            raise error(f"leader epoch entry {tuple(e)} does not follow {tuple(previous)}")
        previous = e


def decode_leader_epoch_checkpoint(data: bytes | memoryview) -> list[EpochEntry]:
    """Parse a leader-epoch checkpoint strictly: ASCII, version 0, a count matching the entry
    lines, no blank or extra lines (a final newline is optional, ``\\r\\n`` is accepted, as by
    Kafka's line reader), epochs ascending."""
    try:
        text = bytes(data).decode("ascii")
    except UnicodeDecodeError as exc:
        raise ProtocolError("leader epoch checkpoint is not ASCII text", exc.start) from None
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()  # the newline that ends the last line
    lines = [line[:-1] if line.endswith("\r") else line for line in lines]
    if len(lines) < 2:
        raise ProtocolError("leader epoch checkpoint lacks its version and count lines")
    if lines[0] != str(_CHECKPOINT_VERSION):
        raise ProtocolError(f"leader epoch checkpoint has version {lines[0]!r}, expected 0")
    if not _NUMBER.fullmatch(lines[1]):
        raise ProtocolError(f"leader epoch checkpoint count {lines[1]!r} is not a number")
    count = int(lines[1])
    if count != len(lines) - 2:
        raise ProtocolError(f"leader epoch checkpoint announces {count} entries but holds {len(lines) - 2}")
    items = []
    for n, line in enumerate(lines[2:], start=3):
        match = _ENTRY_LINE.fullmatch(line)
        if not match:
            raise ProtocolError(f"leader epoch checkpoint line {n} is malformed: {line[:40]!r}")
        items.append(EpochEntry(int(match[1]), int(match[2])))
    _check_epochs(items, ProtocolError)
    return items
