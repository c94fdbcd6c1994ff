"""A follower's position in one partition: truncate to the leader's history, then fetch.

Theory of operation (KIP-101 and KIP-279; Kafka's `AbstractFetcherThread`):

1. On every leader change the follower is *truncating*: it asks the new leader, with
   OffsetForLeaderEpoch, where its own latest epoch ends in the leader's log.
2. The answer (epoch E', end offset O) gives the divergence point. If the leader knows the
   follower's epoch (E' equal), the follower keeps min(O, its log end). If the leader's
   largest epoch at or below the asked one is older (E' smaller), the follower's entries
   from E' on may differ: it keeps min(O, where E' ends in its own log). An UNDEFINED answer
   (the leader has no epoch at or below) truncates to the high watermark, as before KIP-101.
   The follower truncates, and only then starts *fetching* at its log end.
3. Fetched batches are appended byte for byte; the follower's high watermark is
   min(the leader's, its own log end).
4. FENCED_LEADER_EPOCH / NOT_LEADER_OR_FOLLOWER: the follower waits for the new partition
   state; OFFSET_OUT_OF_RANGE below the leader's log start: start over at that offset.

No IO: the caller sends the requests this object asks for and feeds back the answers.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass

UNDEFINED_EPOCH = -1
UNDEFINED_OFFSET = -1


class FollowerPhase(enum.Enum):
    TRUNCATING = "truncating"
    FETCHING = "fetching"
    #: The leader refused us (fenced / not leader): wait for a newer partition state.
    WAITING = "waiting"


_TRANSITIONS: dict[FollowerPhase, frozenset[FollowerPhase]] = {
    FollowerPhase.TRUNCATING: frozenset({FollowerPhase.FETCHING, FollowerPhase.WAITING}),
    FollowerPhase.FETCHING: frozenset(
        {FollowerPhase.TRUNCATING, FollowerPhase.WAITING, FollowerPhase.FETCHING}
    ),
    FollowerPhase.WAITING: frozenset({FollowerPhase.TRUNCATING}),
}


class IllegalFollowerTransition(Exception):
    """A follower was asked to move between phases that do not follow each other."""


@dataclass(slots=True)
class FollowerState:
    leader_id: int
    leader_epoch: int
    phase: FollowerPhase = FollowerPhase.TRUNCATING

    def move(self, phase: FollowerPhase) -> None:
        if phase not in _TRANSITIONS[self.phase]:
            raise IllegalFollowerTransition(f"follower cannot go from {self.phase} to {phase}")
        self.phase = phase

    def new_leader(self, leader_id: int, leader_epoch: int) -> None:
        """A newer partition state: truncate again against the (possibly same) leader."""
        self.leader_id = leader_id
        self.leader_epoch = leader_epoch
        self.phase = FollowerPhase.TRUNCATING


def truncation_offset(
    leader_epoch_answer: int,
    leader_end_offset: int,
    log_end_offset: int,
    high_watermark: int,
    local_end_for: Callable[[int], int],
) -> int:
    """Where a follower truncates after OffsetForLeaderEpoch (step 2 above).

    `local_end_for(epoch)` is the end offset of `epoch` in the follower's own epoch cache
    (the start of the next epoch, its log end for its latest epoch, -1 when it has no epoch
    at or below `epoch`).
    """
    if leader_epoch_answer == UNDEFINED_EPOCH or leader_end_offset == UNDEFINED_OFFSET:
        return min(high_watermark, log_end_offset)
    local_end = local_end_for(leader_epoch_answer)
    if local_end < 0:
        # No local epoch at or below the leader's: nothing of ours predates the divergence.
        local_end = leader_end_offset
    return min(leader_end_offset, local_end, log_end_offset)


def follower_high_watermark(leader_high_watermark: int, log_end_offset: int) -> int:
    return min(leader_high_watermark, log_end_offset)
