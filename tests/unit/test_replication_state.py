"""The leader's follower tracking (HW, ISR shrink/expand) and the follower's truncation."""

from __future__ import annotations

import pytest

from oncelog.replication.follower import (
    UNDEFINED_EPOCH,
    UNDEFINED_OFFSET,
    FollowerPhase,
    FollowerState,
    IllegalFollowerTransition,
    follower_high_watermark,
    truncation_offset,
)
from oncelog.replication.leader import LeaderState

LAG = 30_000


def leader(isr: tuple[int, ...] = (1, 2, 3), now: int = 0, start: int = 0) -> LeaderState:
    return LeaderState.elected(1, 5, (1, 2, 3), isr, 7, start, LAG, now)


def test_high_watermark_is_the_smallest_end_over_the_isr() -> None:
    state = leader()
    assert state.high_watermark(100) == -1  # followers have not fetched yet
    state.on_follower_fetch(2, 80, 100, 10)
    state.on_follower_fetch(3, 90, 100, 10)
    assert state.high_watermark(100) == 80
    state.on_follower_fetch(2, 100, 100, 20)
    assert state.high_watermark(100) == 90


def test_an_out_of_sync_follower_does_not_hold_the_high_watermark_back() -> None:
    state = leader(isr=(1, 2))
    state.on_follower_fetch(2, 100, 100, 10)
    state.on_follower_fetch(3, 3, 100, 10)
    assert state.high_watermark(100) == 100


def test_a_follower_that_does_not_catch_up_within_the_lag_time_leaves_the_isr() -> None:
    state = leader(now=0)
    state.on_follower_fetch(2, 100, 100, 1_000)
    state.on_follower_fetch(3, 50, 100, 1_000)
    assert state.isr_to_shrink(100, LAG) is None  # exactly the lag time: still in
    assert state.isr_to_shrink(100, LAG + 1) == frozenset({1, 2})


def test_fetching_up_to_the_previous_leader_end_counts_as_caught_up_then() -> None:
    state = leader(now=0)
    state.on_follower_fetch(3, 90, 100, 20_000)  # behind; the leader ended at 100
    state.on_follower_fetch(3, 100, 130, 40_000)  # reached the old end, leader moved on
    state.on_follower_fetch(2, 130, 130, 40_000)
    # caught up as of the previous fetch (20 s): not lagging at 45 s
    assert state.isr_to_shrink(130, 45_000) is None
    assert state.isr_to_shrink(130, 50_001) == frozenset({1, 2})


def test_a_caught_up_follower_rejoins_only_after_fetching_in_this_epoch() -> None:
    state = leader(isr=(1, 2), start=60)
    assert state.isr_to_expand(3, 50) is None  # never fetched in this epoch
    state.on_follower_fetch(3, 40, 100, 10)
    assert state.isr_to_expand(3, 40) is None  # below the epoch's start offset
    state.on_follower_fetch(3, 70, 100, 10)
    assert state.isr_to_expand(3, 80) is None  # below the high watermark
    assert state.isr_to_expand(3, 70) == frozenset({1, 2, 3})


def test_an_isr_change_in_flight_counts_the_maximal_isr_and_blocks_another() -> None:
    state = leader()
    state.on_follower_fetch(2, 100, 100, 10)
    state.on_follower_fetch(3, 10, 100, 10)
    shrunk = state.isr_to_shrink(100, LAG + 100)
    assert shrunk == frozenset({1, 2})
    state.isr_proposed(shrunk)
    assert state.high_watermark(100) == 10  # still held by 3 until the change commits
    assert state.isr_to_shrink(100, LAG + 200) is None
    state.isr_committed(shrunk, 8)
    assert state.high_watermark(100) == 100
    assert state.partition_epoch == 8


def test_a_refused_isr_change_keeps_the_committed_isr() -> None:
    state = leader()
    state.isr_proposed(frozenset({1}))
    state.isr_refused()
    assert state.isr == frozenset({1, 2, 3}) and state.pending_isr is None


def test_min_insync_replicas_counts_the_committed_isr() -> None:
    state = leader(isr=(1, 2))
    assert not state.under_min_isr(2)
    state.isr_proposed(frozenset({1, 2, 3}))
    assert state.under_min_isr(3)


def test_new_leadership_gives_followers_the_lag_time_to_fetch() -> None:
    state = leader(now=100_000)
    assert state.isr_to_shrink(0, 100_000 + LAG) is None
    assert state.isr_to_shrink(5, 100_000 + LAG + 1) == frozenset({1})


def test_fetches_from_unknown_replicas_are_ignored() -> None:
    state = leader()
    state.on_follower_fetch(9, 100, 100, 10)
    assert 9 not in state.followers


# -- follower -----------------------------------------------------------------------------


def local_cache(entries: list[tuple[int, int]], log_end: int):  # type: ignore[no-untyped-def]
    """Kafka's endOffsetFor over (epoch, start) entries, for the tests."""

    def end_for(epoch: int) -> int:
        if not entries or epoch < entries[0][0]:
            return -1
        for i, (e, _) in enumerate(entries):
            if e > epoch:
                return entries[i][1]
        return log_end

    return end_for


def test_same_epoch_on_the_leader_truncates_to_the_shorter_end() -> None:
    cache = local_cache([(0, 0), (3, 50)], 120)
    assert truncation_offset(3, 100, 120, 90, cache) == 100
    assert truncation_offset(3, 130, 120, 90, cache) == 120


def test_an_older_leader_epoch_truncates_where_it_ends_locally() -> None:
    # The follower wrote epoch 3 from 50 on; the leader never saw epoch 3: its epoch 0
    # ends at 70 there, but locally epoch 0 ends at 50.
    cache = local_cache([(0, 0), (3, 50)], 120)
    assert truncation_offset(0, 70, 120, 40, cache) == 50


def test_an_undefined_answer_falls_back_to_the_high_watermark() -> None:
    cache = local_cache([(0, 0)], 120)
    assert truncation_offset(UNDEFINED_EPOCH, UNDEFINED_OFFSET, 120, 90, cache) == 90


def test_no_local_epoch_at_or_below_the_answer_keeps_up_to_the_leader_end() -> None:
    cache = local_cache([(4, 10)], 30)
    assert truncation_offset(2, 20, 30, 5, cache) == 20


def test_follower_phases_follow_their_table() -> None:
    state = FollowerState(2, 4)
    state.move(FollowerPhase.FETCHING)
    state.move(FollowerPhase.WAITING)
    with pytest.raises(IllegalFollowerTransition):
        state.move(FollowerPhase.FETCHING)
    state.new_leader(3, 5)
    assert (state.leader_id, state.leader_epoch, state.phase) == (3, 5, FollowerPhase.TRUNCATING)


def test_follower_high_watermark_never_passes_its_own_end() -> None:
    assert follower_high_watermark(100, 80) == 80
    assert follower_high_watermark(60, 80) == 60
