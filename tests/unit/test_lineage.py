"""The divergence rule of tiering/copy/lineage.py: exact cases, then a property over simulated
cluster histories (leaders elected cleanly and uncleanly, followers that fall behind, a remote tier
copied from whichever leader was current)."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from tiering.copy.lineage import (
    UNDEFINED_EPOCH,
    LineageUnknown,
    divergence_point,
    first_regression,
    lineage_of,
    remote_divergence,
)


def leader(cache: list[tuple[int, int]], log_end: int):
    """OffsetForLeaderEpoch as a Kafka leader answers it from its leader-epoch cache
    (LeaderEpochFileCache.endOffsetFor)."""
    def end_offset_for(epoch: int) -> tuple[int, int]:
        latest = cache[-1][0] if cache else UNDEFINED_EPOCH
        if epoch == latest:
            return epoch, log_end
        higher = [(e, s) for e, s in cache if e > epoch]
        if not higher:
            return UNDEFINED_EPOCH, -1
        floor = [(e, s) for e, s in cache if e <= epoch]
        if not floor:
            return epoch, higher[0][1]
        return floor[-1][0], higher[0][1]
    return end_offset_for


# --- exact cases ------------------------------------------------------------------------------


def test_a_remote_tier_that_is_a_prefix_of_the_leaders_log_is_kept():
    assert divergence_point([(0, 0), (1, 100)], 149, leader([(0, 0), (1, 100), (2, 300)], 400)) is None


def test_the_remote_tier_ending_exactly_where_the_leader_moved_on_is_kept():
    # Epoch 1 ended at 150 on the leader; the remote tier holds 0..149.
    assert divergence_point([(0, 0), (1, 100)], 149, leader([(0, 0), (1, 100), (3, 150)], 160)) is None


def test_unclean_election_cuts_at_the_new_leaders_end_of_the_shared_epoch():
    # The old leader wrote epoch 1 up to 199 and the remote tier copied it; the new leader had
    # epoch 1 only up to 149 and started epoch 2 at 150.
    assert divergence_point([(0, 0), (1, 100)], 199, leader([(0, 0), (1, 100), (2, 150)], 180)) == 150


def test_the_divergence_inside_a_segment_is_an_offset_not_a_segment_boundary():
    # One remote segment 0..999 of epoch 0; the new leader left epoch 0 at 437.
    assert divergence_point([(0, 0)], 999, leader([(0, 0), (4, 437)], 500)) == 437


def test_epochs_the_leader_never_had_are_cut_where_the_shared_epoch_ends_in_the_remote_tier():
    # The remote tier holds epochs 0, 2, 3 (2 and 3 from a leader that lost); the leader went
    # from 0 straight to 4 at 260. It answers epoch 3 with (0, 260): the remote tier agrees up to
    # its own end of epoch 0 (200), before the epochs the leader never had.
    assert divergence_point([(0, 0), (2, 200), (3, 250)], 299, leader([(0, 0), (4, 260)], 300)) == 200


def test_several_epochs_cut_back_in_one_answer_then_confirmed():
    asked = []
    ask = leader([(0, 0), (1, 50), (5, 120)], 130)

    def recording(epoch: int) -> tuple[int, int]:
        asked.append(epoch)
        return ask(epoch)

    assert divergence_point([(0, 0), (1, 50), (2, 100), (3, 150)], 199, recording) == 100
    assert asked == [3, 1]  # epoch 3 -> (1, 120): cut at min(120, remote end of 1 = 100); 1 -> kept


def test_a_leader_with_an_empty_log_cuts_everything():
    # Every replica lost its disk; the new leader starts epoch 7 at offset 0.
    assert divergence_point([(0, 0), (2, 80)], 99, leader([(7, 0)], 0)) == 0


def test_a_leader_whose_log_start_passed_the_remote_tiers_epochs_keeps_it():
    # Local retention moved the log start to 100 = remote end + 1, exactly where epoch 3 began:
    # the leader's cache no longer has epoch 1, and answers (1, 100).
    assert divergence_point([(0, 0), (1, 40)], 99, leader([(3, 100)], 150)) is None


def test_a_leader_that_knows_no_epoch_that_old_or_new_cannot_decide():
    with pytest.raises(LineageUnknown):
        divergence_point([(0, 0), (6, 10)], 19, leader([(0, 0), (4, 10)], 30))  # 6 > the leader's 4


def test_no_epochs_at_all_is_nothing_to_check():
    assert divergence_point([], 99, leader([(0, 0)], 100)) is None


def test_epochs_that_go_back_are_cut_where_they_do_even_if_the_leader_agrees_before():
    # Segment 0..0 copied from a leader of epoch 1; segment 1..1 from a replica still at epoch 0
    # (no check between): the leader (epoch 1 from 0, then 3 at 2) never had an epoch-0 record at 1.
    segments = [((1, 0),), ((0, 1),)]
    assert first_regression(segments) == 1
    assert remote_divergence(segments, 1, leader([(1, 0), (3, 2)], 2), every_epoch=True) == 1


def test_a_segment_rewritten_up_to_a_cut_beside_the_one_it_replaces_is_no_regression():
    # A proxy stopped between uploading 0..49 (epoch 1) and deleting 0..99 (epochs 1, then 2 at 50):
    # both are listed, by start offset, in either order; then epoch 3 from 50.
    for segments in ([((1, 0), (2, 50)), ((1, 0),), ((3, 50),)], [((1, 0),), ((1, 0), (2, 50)), ((3, 50),)]):
        assert first_regression(segments) is None


def test_lineage_of_segments_skips_missing_and_repeated_epochs():
    assert lineage_of([((0, 0), (1, 10)), ((1, 20),), ((-1, 30),), ((3, 40),)]) == [(0, 0), (1, 10), (3, 40)]


# --- the property -----------------------------------------------------------------------------


@dataclass
class Replica:
    records: list[tuple[int, int]] = field(default_factory=list)  # (epoch, record id) per offset
    elected: tuple[int, int] | None = None  # (epoch, start) when it became leader

    def cache(self) -> list[tuple[int, int]]:
        entries: list[tuple[int, int]] = []
        for offset, (epoch, _) in enumerate(self.records):
            if not entries or epoch > entries[-1][0]:
                entries.append((epoch, offset))
        if self.elected is not None and (not entries or self.elected[0] > entries[-1][0]):
            entries.append(self.elected)
        return entries


# One step of a cluster's life: append records, copy a prefix of the leader's log to a follower
# (truncating what it held beyond the shared history), elect any replica (clean or not), or copy
# the leader's log to the remote tier.
steps = st.lists(st.one_of(
    st.tuples(st.just("append"), st.integers(1, 5)),
    st.tuples(st.just("follow"), st.integers(0, 2), st.floats(0, 1)),
    st.tuples(st.just("elect"), st.integers(0, 2)),
    st.tuples(st.just("tier"), st.floats(0, 1)),
), max_size=40)


def _simulate(history, check_before_copy: bool):
    """Run a history; returns (remote tier, the leader at the end)."""
    replicas = [Replica(), Replica(), Replica()]
    current, epoch, next_id = 0, 0, 0
    replicas[0].elected = (0, 0)
    remote: list[tuple[int, int]] = []
    for step in history:
        lead = replicas[current]
        if step[0] == "append":
            for _ in range(step[1]):
                lead.records.append((epoch, next_id))
                next_id += 1
        elif step[0] == "follow" and step[1] != current:
            follower = replicas[step[1]]
            shared = _shared(follower.records, lead.records)
            follower.records = list(lead.records[:shared + round(step[2] * (len(lead.records) - shared))])
            follower.elected = None
        elif step[0] == "elect":
            epoch += 1
            current = step[1]
            replicas[current].elected = (epoch, len(replicas[current].records))
        elif step[0] == "tier":
            if check_before_copy and remote:
                cut = remote_divergence(_segment_epochs(remote), len(remote) - 1, leader(lead.cache(), len(lead.records)))
                if cut is not None:
                    remote = remote[:cut]
                assert _shared(remote, lead.records) == len(remote)  # a prefix of the leader's log now
            upto = len(remote) + round(step[1] * max(0, len(lead.records) - len(remote)))
            remote = remote + lead.records[len(remote):upto]
    return remote, replicas[current]


def _shared(a: list[tuple[int, int]], b: list[tuple[int, int]]) -> int:
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return n


def _segment_epochs(records: list[tuple[int, int]]) -> list[list[tuple[int, int]]]:
    """One single-record segment per offset: the remote tier's epochs exactly as copied."""
    return [[(epoch, offset)] for offset, (epoch, _) in enumerate(records)]


@settings(max_examples=500, deadline=None)
@given(steps)
def test_a_copier_that_checks_before_copying_on_cuts_exactly_where_the_leader_differs(history):
    """The copier's use: the remote tier was checked before each copy, so it is one leader's
    history plus what that leader wrote; the cut is exactly the first offset that differs."""
    remote, lead = _simulate(history, check_before_copy=True)
    if remote:
        same = _shared(remote, lead.records)
        expected = None if same == len(remote) else same
        assert remote_divergence(_segment_epochs(remote), len(remote) - 1,
                                 leader(lead.cache(), len(lead.records))) == expected


@settings(max_examples=500, deadline=None)
@given(steps)
@example([("append", 1), ("append", 1), ("elect", 1), ("append", 1), ("append", 1), ("tier", 0.5), ("elect", 0),
          ("tier", 1.0), ("elect", 1)])  # epochs 1 then 0 in the remote tier: found by CI
def test_even_a_remote_tier_copied_without_checks_keeps_nothing_the_leader_lacks(history):
    """A remote tier pieced together from several leaders with no check (what the copier did
    before this rule), asked about every epoch: the cut may come early, never late, and nothing
    is cut from a prefix."""
    remote, lead = _simulate(history, check_before_copy=False)
    if remote:
        same = _shared(remote, lead.records)
        try:
            cut = remote_divergence(_segment_epochs(remote), len(remote) - 1,
                                    leader(lead.cache(), len(lead.records)), every_epoch=True)
        except LineageUnknown:
            return  # the copier waits; it copies nothing on top
        if same == len(remote):
            assert cut is None
        else:
            assert cut is not None and cut <= same
