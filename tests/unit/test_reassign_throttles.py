"""The throttles `oncelog reassign-partitions --throttle` sets, computed as Kafka's
ReassignPartitionsCommand computes them (the case of its unit test testMoveMap): moves in
progress count with the proposed ones, a resubmitted partition keeps the sources of its move
in progress, the replica lists are sorted as text."""

from __future__ import annotations

from oncelog.cli.reassign_throttles import (
    Move,
    follower_throttles,
    leader_throttles,
    move_map,
    reassigning_brokers,
)
from oncelog.client.reassignments import OngoingMove
from oncelog.types import TopicPartition as TP


def ongoing(replicas: list[int], adding: list[int], removing: list[int]) -> OngoingMove:
    return OngoingMove(tuple(replicas), tuple(adding), tuple(removing))


def move(sources: list[int], destinations: list[int]) -> Move:
    return Move(frozenset(sources), frozenset(destinations))


def test_moves_in_progress_and_proposed_ones_make_kafkas_throttles() -> None:
    in_progress = {
        TP("foo", 0): ongoing([1, 2, 3, 4], [4], [3]),
        TP("foo", 1): ongoing([4, 5, 6, 7, 8], [7, 8], [4, 5]),
        **{TP("foo", p): ongoing([1, 2, 3, 4], [3, 4], [1, 2]) for p in (2, 3, 4, 5)},
    }
    proposed = {
        TP("foo", 0): [1, 2, 5],
        TP("foo", 2): [3, 4],
        TP("foo", 3): [5, 6],
        TP("foo", 4): [3],
        TP("foo", 5): [3, 4, 5, 6],
        TP("bar", 0): [1, 2, 3],
    }
    current = {
        **{TP("foo", p): [1, 2, 3, 4] for p in (0, 2, 3, 4, 5)},
        TP("foo", 1): [4, 5, 6, 7, 8],
        TP("bar", 0): [2, 3, 4],
        TP("baz", 0): [1, 2, 3],
    }
    moves = move_map(in_progress, proposed, current)
    assert moves == {
        "foo": {
            0: move([1, 2, 3], [5]),
            1: move([4, 5, 6], [7, 8]),
            2: move([1, 2], [3, 4]),
            3: move([1, 2], [5, 6]),
            4: move([1, 2], [3]),
            5: move([1, 2], [3, 4, 5, 6]),
        },
        "bar": {0: move([2, 3, 4], [1])},
    }
    assert leader_throttles(moves) == {
        "foo": "0:1,0:2,0:3,1:4,1:5,1:6,2:1,2:2,3:1,3:2,4:1,4:2,5:1,5:2",
        "bar": "0:2,0:3,0:4",
    }
    assert follower_throttles(moves) == {
        "foo": "0:5,1:7,1:8,2:3,2:4,3:5,3:6,4:3,5:3,5:4,5:5,5:6",
        "bar": "0:1",
    }
    assert reassigning_brokers(moves) == [1, 2, 3, 4, 5, 6, 7, 8]


def test_a_partition_that_stays_is_listed_with_its_replicas_and_sorted_as_text() -> None:
    moves = move_map(
        {}, {TP("t", 10): [1], TP("t", 2): [2, 3]}, {TP("t", 10): [1], TP("t", 2): [2]}
    )
    assert leader_throttles(moves) == {"t": "10:1,2:2"}
    assert follower_throttles(moves) == {"t": "2:3"}
    assert reassigning_brokers(moves) == [1, 2, 3]
