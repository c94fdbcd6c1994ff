"""The replication throttles of `oncelog reassign-partitions` (KIP-73), as
`kafka-reassign-partitions.sh` sets and clears them.

`--execute --throttle RATE` sets `leader.replication.throttled.rate` and
`follower.replication.throttled.rate` on each broker that holds or will hold a replica of a
moving partition, and on each moving topic `leader.replication.throttled.replicas` (the
`partition:broker` pairs of the replicas the data comes from) and
`follower.replication.throttled.replicas` (those of the replicas being added). The moves in
progress count too, so a second `--execute --additional` keeps the throttles of the first and
can change the rate. `--verify` of a finished reassignment and `--cancel` delete the four
configs again. All through IncrementalAlterConfigs (SET, DELETE), as Kafka's tool sends them.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sized
from dataclasses import dataclass

from oncelog.client.admin import Admin
from oncelog.client.configs import BROKER, DELETE, SET, TOPIC, alter_configs, describe_configs
from oncelog.client.reassignments import OngoingMove
from oncelog.types import TopicPartition

LEADER_RATE = "leader.replication.throttled.rate"
FOLLOWER_RATE = "follower.replication.throttled.rate"
LEADER_REPLICAS = "leader.replication.throttled.replicas"
FOLLOWER_REPLICAS = "follower.replication.throttled.replicas"
BROKER_LEVEL = (LEADER_RATE, FOLLOWER_RATE)
TOPIC_LEVEL = (LEADER_REPLICAS, FOLLOWER_REPLICAS)

VERIFY_WARNING = (
    "Warning: You must run --verify periodically, until the reassignment completes, to ensure "
    "the throttle is removed."
)


@dataclass(frozen=True, slots=True)
class Move:
    """A partition's move: the replicas the data comes from and those it goes to."""

    sources: frozenset[int]
    destinations: frozenset[int]


#: topic -> partition -> its move.
MoveMap = dict[str, dict[int, Move]]


def move_map(
    ongoing: Mapping[TopicPartition, OngoingMove],
    proposed: Mapping[TopicPartition, list[int]],
    current: Mapping[TopicPartition, list[int]],
) -> MoveMap:
    """Kafka's calculateProposedMoveMap: every move in progress (its sources are its replicas
    but those being added), then the proposed ones, whose sources are those of the move in
    progress if there is one, else the partition's replicas now."""
    moves: MoveMap = {}
    for tp, move in ongoing.items():
        sources = frozenset(move.replicas) - frozenset(move.adding)
        moves.setdefault(tp.topic, {})[tp.partition] = Move(sources, frozenset(move.adding))
    for tp, replicas in proposed.items():
        partitions = moves.setdefault(tp.topic, {})
        before = partitions.get(tp.partition)
        sources = before.sources if before is not None else frozenset(current[tp])
        partitions[tp.partition] = Move(sources, frozenset(replicas) - sources)
    return moves


def leader_throttles(moves: MoveMap) -> dict[str, str]:
    """Kafka's calculateLeaderThrottles: per topic, `partition:source` of every move (in
    Kafka's order: sorted as text)."""
    return {
        topic: ",".join(sorted({f"{p}:{b}" for p, move in parts.items() for b in move.sources}))
        for topic, parts in moves.items()
    }


def follower_throttles(moves: MoveMap) -> dict[str, str]:
    """Kafka's calculateFollowerThrottles: per topic, `partition:destination` of every move."""
    return {
        topic: ",".join(
            sorted(
                {
                    f"{p}:{b}"
                    for p, move in parts.items()
                    for b in move.destinations
                    if b not in move.sources
                }
            )
        )
        for topic, parts in moves.items()
    }


def reassigning_brokers(moves: MoveMap) -> list[int]:
    """Every broker a move reads from or writes to."""
    return sorted(
        {b for parts in moves.values() for move in parts.values() for b in move.sources}
        | {b for parts in moves.values() for move in parts.values() for b in move.destinations}
    )


def set_throttles(admin: Admin, moves: MoveMap, rate: int) -> None:
    """Kafka's modifyReassignmentThrottle: the topics' replica lists, then the brokers'
    rates; then Kafka's line."""
    leaders, followers = leader_throttles(moves), follower_throttles(moves)
    for topic in sorted(moves):
        alter_configs(
            admin,
            TOPIC,
            topic,
            [(LEADER_REPLICAS, SET, leaders[topic]), (FOLLOWER_REPLICAS, SET, followers[topic])],
        )
    for broker in reassigning_brokers(moves):
        alter_configs(
            admin,
            BROKER,
            str(broker),
            [(LEADER_RATE, SET, str(rate)), (FOLLOWER_RATE, SET, str(rate))],
        )
    print(f"The inter-broker throttle limit was set to {rate} B/s")


def throttles_set(admin: Admin, topics: Iterable[str]) -> bool:
    """Whether any broker or any of `topics` has one of the four throttle configs."""
    for broker in admin.node_ids():
        if any(
            c.name in BROKER_LEVEL and c.source == "DYNAMIC_BROKER_CONFIG"
            for c in describe_configs(admin, BROKER, str(broker))
        ):
            return True
    return any(
        c.name in TOPIC_LEVEL and c.source == "DYNAMIC_TOPIC_CONFIG"
        for topic in topics
        for c in describe_configs(admin, TOPIC, topic)
    )


def clear_throttles(admin: Admin, topics: Iterable[str]) -> None:
    """Kafka's clearAllThrottles: the rates of every broker of the cluster (which brokers a
    finished move used is not known any more) and the replica lists of `topics`."""
    brokers = admin.node_ids()
    print(f"Clearing broker-level throttles on broker{_s(brokers)} {','.join(map(str, brokers))}")
    for broker in brokers:
        alter_configs(admin, BROKER, str(broker), [(k, DELETE, None) for k in BROKER_LEVEL])
    names = sorted(set(topics))
    print(f"Clearing topic-level throttles on topic{_s(names)} {','.join(names)}")
    for topic in names:
        alter_configs(admin, TOPIC, topic, [(k, DELETE, None) for k in TOPIC_LEVEL])


def _s(items: Sized) -> str:
    return "" if len(items) == 1 else "s"
