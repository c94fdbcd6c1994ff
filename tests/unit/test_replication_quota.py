"""Replication throttles without IO: which partitions a topic's throttled replica list names
for this broker, and when the rate is over its limit."""

from __future__ import annotations

from oncelog.broker.replication_quota import UNLIMITED, ReplicationThrottle, throttled_partitions
from oncelog.clock import ManualClock
from oncelog.types import TopicPartition


def test_a_list_throttles_the_partitions_named_with_this_broker() -> None:
    assert throttled_partitions("0:1, 1:2,2:1", 1) == frozenset({0, 2})
    assert throttled_partitions("0:1,1:2", 3) == frozenset()
    assert throttled_partitions("*", 3) is None
    assert throttled_partitions("0:01", 1) == frozenset({0})  # broker ids read as numbers


def test_applies_only_with_a_rate_and_a_listed_partition() -> None:
    throttle = ReplicationThrottle(ManualClock())
    throttle.set_topic("t", "0:1", 1)
    assert not throttle.applies(TopicPartition("t", 0))  # no rate: Kafka's default is none
    throttle.set_limit(1000)
    assert throttle.applies(TopicPartition("t", 0))
    assert not throttle.applies(TopicPartition("t", 1))
    assert not throttle.applies(TopicPartition("u", 0))
    throttle.set_topic("u", "*", 1)
    assert throttle.applies(TopicPartition("u", 7))
    throttle.set_topic("t", "", 1)  # the config removed
    assert not throttle.applies(TopicPartition("t", 0))
    throttle.forget_others(["v"])  # topic u deleted
    assert throttle.topics == {}
    throttle.set_limit(UNLIMITED)
    assert not throttle.applies(TopicPartition("u", 7))


def test_exceeded_once_the_rate_passes_the_limit_until_it_falls_back() -> None:
    clock = ManualClock()
    throttle = ReplicationThrottle(clock, window_num=11, window_size_ms=1000)
    throttle.set_limit(1000)
    throttle.record(10_000)  # 1,000 B/s over the 10 s a rate is measured over at least
    assert not throttle.exceeded()
    throttle.record(1)
    assert throttle.exceeded()
    clock.advance(11_000)  # every sample expired
    assert not throttle.exceeded()
