"""Group states of the classic rebalance protocol and the transitions between them.

Theory of operation: a group starts Empty. A join moves it to PreparingRebalance, where the
coordinator collects the members that (re)join. When all known members have joined, or the
rebalance timeout passes, the join phase completes: the generation is bumped and the group
waits in CompletingRebalance for the leader's assignment (SyncGroup). Once that assignment is
persisted (its record replayed) the group is Stable. Any membership change sends a Stable or
CompletingRebalance group back to PreparingRebalance; losing every member makes it Empty.
Deleting an Empty group (its tombstone replayed) makes it Dead, a terminal state.
"""

from __future__ import annotations

from enum import Enum


class GroupState(Enum):
    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"


S = GroupState
TRANSITIONS: dict[GroupState, frozenset[GroupState]] = {
    # Replaying a group record may load a group straight into Stable.
    S.EMPTY: frozenset({S.PREPARING_REBALANCE, S.STABLE, S.DEAD}),
    S.PREPARING_REBALANCE: frozenset({S.COMPLETING_REBALANCE, S.EMPTY, S.DEAD}),
    S.COMPLETING_REBALANCE: frozenset({S.PREPARING_REBALANCE, S.STABLE, S.EMPTY, S.DEAD}),
    S.STABLE: frozenset({S.PREPARING_REBALANCE, S.STABLE, S.EMPTY, S.DEAD}),
    S.DEAD: frozenset(),
}


class IllegalGroupStateTransition(Exception):
    """A bug: the coordinator tried a transition the protocol does not allow."""

    def __init__(self, group_id: str, current: GroupState, target: GroupState) -> None:
        super().__init__(
            f"group {group_id!r}: illegal transition {current.value} -> {target.value}"
        )
        self.group_id = group_id
        self.current = current
        self.target = target


def check_transition(group_id: str, current: GroupState, target: GroupState) -> None:
    if target not in TRANSITIONS[current]:
        raise IllegalGroupStateTransition(group_id, current, target)
