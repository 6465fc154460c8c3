"""Leader-epoch lineage: where the remote tier stops being the cluster's history (KIP-405).

Every batch carries the leader epoch it was written in, and every remote segment records the
epochs it holds with their start offsets. A Kafka follower that comes back asks the leader, for
its own last epoch, where that epoch ends in the leader's log (OffsetForLeaderEpoch), and truncates
whatever it holds beyond that: those offsets were written by a leader whose log lost the election.
The copier asks the same question about the remote tier before it copies on.

The rule, with ``E`` the remote tier's last epoch and ``(L, O)`` the leader's answer (the largest
epoch ``L <= E`` the leader knows and the offset where it ends, exclusive):

- ``L == E``: the leader's epoch ``E`` ends at ``O``; the remote tier holds the cluster's history
  up to ``min(O, remote end + 1)``.
- ``L < E``: the leader never had epoch ``E`` (nor those between ``L`` and ``E``); the remote tier
  agrees with it up to where the remote tier's own epoch ``L`` ends, and no further than ``O``.
- No epoch at all (``L`` undefined): the leader knows nothing as old as ``E``'s predecessors can
  tell; the copier cannot decide and waits (:class:`LineageUnknown`).

Why it is safe: an epoch has exactly one leader, so two logs that both hold offsets of epoch
``L`` hold the same batches there; the first offset where they differ is where one of them moved
to a later epoch. After a cut the remote tier's last epoch is ``<= L`` and the question is asked
again, until the leader's answer covers the remote end (at most once per remote epoch).
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Iterable, Sequence

UNDEFINED_EPOCH = -1

# (epoch, start offset) of each leader epoch in log order, as a leader-epoch checkpoint lists them.
Lineage = list[tuple[int, int]]
# OffsetForLeaderEpoch: epoch -> (the leader's largest epoch <= it, the end offset of that epoch).
EndOffsetFor = Callable[[int], tuple[int, int]]


class LineageUnknown(Exception):
    """The leader cannot place the remote tier's epochs (it knows none as old): try again later."""


def lineage_of(segment_epochs: Iterable[Sequence[tuple[int, int]]]) -> Lineage:
    """One lineage from the segments' leader epochs, in offset order; epochs that do not grow (a
    broker that writes no epochs, -1) add nothing."""
    lineage: Lineage = []
    for epochs in segment_epochs:
        for epoch, start in epochs:
            if epoch >= 0 and (not lineage or epoch > lineage[-1][0]):
                lineage.append((epoch, start))
    return lineage


def first_regression(segment_epochs: Iterable[Sequence[tuple[int, int]]]) -> int | None:
    """The first offset where the remote tier holds a leader epoch lower than one it holds from an
    earlier or the same offset, or None. No leader writes such a log: a remote tier pieced together
    from several leaders without the check below differs from the cluster's history there at the
    latest. Segments that overlap (a segment rewritten up to a cut, beside the one it replaces)
    repeat an epoch at the offset where it started, which is no regression."""
    starts: list[int] = []  # the lineage so far: epochs and their starts, both ascending
    epochs: list[int] = []
    for entries in segment_epochs:
        for epoch, start in entries:
            if epoch < 0:
                continue
            held = bisect.bisect_right(starts, start)  # the lineage's epoch at ``start``
            if held and epochs[held - 1] > epoch:
                return start
            if not epochs or (epoch > epochs[-1] and start >= starts[-1]):
                starts.append(start)
                epochs.append(epoch)
    return None


def remote_divergence(segment_epochs: Sequence[Sequence[tuple[int, int]]], remote_end: int,
                      end_offset_for: EndOffsetFor, *, every_epoch: bool = False) -> int | None:
    """:func:`divergence_point` for a remote tier given as its segments' leader epochs: the
    remote tier is first cut where its epochs go back (:func:`first_regression`), then asked of
    the leader up to there."""
    regression = first_regression(segment_epochs)
    if regression is not None:
        remote_end = regression - 1
    cut = divergence_point(lineage_of(segment_epochs), remote_end, end_offset_for, every_epoch=every_epoch)
    return regression if cut is None else cut


def _end_of(lineage: Lineage, epoch: int, log_end: int) -> int:
    """Where ``epoch`` ends (exclusive) in a log with this lineage: the start of the first later
    epoch, or the log end. An epoch the log lacks ends where the next later one starts."""
    for later, start in lineage:
        if later > epoch:
            return start
    return log_end


def divergence_point(lineage: Lineage, remote_end: int, end_offset_for: EndOffsetFor, *,
                     every_epoch: bool = False) -> int | None:
    """The first offset at or below ``remote_end`` that the remote tier holds but the cluster's
    log does not (the remote tier must be cut back to end just before it), or None if the remote
    tier is a prefix of the leader's log. ``lineage`` is the remote tier's.

    Asking for the last epoch is exact for a remote tier that was checked before every copy on
    (each of its epochs was then the cluster's). ``every_epoch`` also asks for each earlier epoch,
    for a remote tier of unknown provenance (copied by a proxy that did not check): one request
    per epoch, and the cut may come earlier than the first differing offset, never later."""
    end = remote_end + 1  # exclusive
    remaining = [(epoch, start) for epoch, start in lineage if start < end]
    cut: int | None = None
    asked: set[int] = set()
    while remaining:
        if every_epoch:
            pending = [e for e, _ in remaining if e not in asked]
            if not pending:
                break
            epoch = max(pending)
        else:
            epoch = remaining[-1][0]
        asked.add(epoch)
        leader_epoch, leader_end = end_offset_for(epoch)
        if leader_epoch == UNDEFINED_EPOCH or leader_end < 0:
            raise LineageUnknown(f"the leader has no end offset for leader epoch {epoch}")
        if leader_epoch > epoch:
            raise LineageUnknown(f"the leader answered epoch {leader_epoch} for epoch {epoch}")
        own_end = _end_of(remaining, epoch, end)
        if leader_epoch == epoch:
            agreed = min(leader_end, own_end)
        else:
            # The leader never had this epoch: the remote tier agrees with it at most up to where
            # this epoch starts, and up to the end of the leader's epoch before it.
            start = next(s for e, s in remaining if e == epoch)
            agreed = min(leader_end, _end_of(remaining, leader_epoch, end), start)
        if agreed < own_end:
            cut = end = agreed
            remaining = [(e, s) for e, s in remaining if s < end]
        elif not every_epoch:
            break
    return cut
