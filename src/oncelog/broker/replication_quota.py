"""Replication throttles (Kafka's KIP-73 ReplicationQuotaManager), sans-IO.

Moving a partition to a new broker copies its whole log; a throttle keeps that copy from
starving the brokers' clients. Two directions, each with its rate (dynamic broker configs):
`leader.replication.throttled.rate` caps what this broker sends as leader, and
`follower.replication.throttled.rate` what it fetches as follower, in bytes a second. Which
replicas are throttled is per topic: `leader.replication.throttled.replicas` and
`follower.replication.throttled.replicas` list `partition:broker` pairs (or `*` for all), and
this broker throttles the partitions listed with its own id.

All replication of the listed partitions counts against the rate, as in Kafka, but only
replicas out of sync are held back: an in-sync follower never is, so `acks=all` producers do
not wait on a move. Over the rate, the leader answers such a follower's fetch without records
and the follower leaves such partitions out of its fetches, until the rate has fallen back
(Kafka's sampled rate, `replication.quota.window.num` samples of
`replication.quota.window.size.seconds`).
"""

from __future__ import annotations

from collections.abc import Iterable

from oncelog.broker.quotas import Rate
from oncelog.clock import Clock
from oncelog.types import TopicPartition

#: Kafka's default rate: no limit.
UNLIMITED = 2**63 - 1
LEADER_REPLICAS = "leader.replication.throttled.replicas"
FOLLOWER_REPLICAS = "follower.replication.throttled.replicas"


def throttled_partitions(value: str, node_id: int) -> frozenset[int] | None:
    """The partitions a `*.replication.throttled.replicas` value throttles on `node_id`:
    None for all (`*`), else those listed with that broker."""
    text = value.strip()
    if text == "*":
        return None
    out = set()
    for item in text.split(","):
        partition, sep, broker = item.strip().partition(":")
        if sep and broker.strip().isdigit() and int(broker) == node_id:
            out.add(int(partition))
    return frozenset(out)


class ReplicationThrottle:
    """One direction's throttle on this broker: its rate, the partitions it applies to and
    the bytes sent or fetched for them."""

    def __init__(self, clock: Clock, window_num: int = 11, window_size_ms: int = 1000) -> None:
        self.clock = clock
        self.limit = UNLIMITED
        #: topic -> the throttled partitions (None: all of them).
        self.topics: dict[str, frozenset[int] | None] = {}
        self._rate = Rate(window_num, window_size_ms, clock.monotonic_ms())

    def set_limit(self, bytes_per_second: int) -> None:
        self.limit = bytes_per_second

    def set_topic(self, topic: str, value: str, node_id: int) -> None:
        """Apply one topic's `*.replication.throttled.replicas` ("" for none)."""
        partitions = throttled_partitions(value, node_id) if value.strip() else frozenset()
        if partitions is None or partitions:
            self.topics[topic] = partitions
        else:
            self.topics.pop(topic, None)

    def forget_others(self, topics: Iterable[str]) -> None:
        """Drop the topics not in `topics` (deleted ones)."""
        keep = set(topics)
        for topic in [t for t in self.topics if t not in keep]:
            del self.topics[topic]

    def applies(self, tp: TopicPartition) -> bool:
        """Whether this direction throttles `tp` here (its rate set and the partition listed)."""
        if self.limit >= UNLIMITED or tp.topic not in self.topics:
            return False
        partitions = self.topics[tp.topic]
        return partitions is None or tp.partition in partitions

    def exceeded(self) -> bool:
        """Whether the bytes recorded have taken the rate past the limit."""
        return self._rate.measure(self.clock.monotonic_ms())[0] > self.limit

    def record(self, nbytes: int) -> None:
        self._rate.record(nbytes, self.clock.monotonic_ms())
