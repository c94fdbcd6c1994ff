"""Planning Spark input partitions from offset ranges, and rate limiting across partitions.

One Spark partition per Kafka topic-partition, split further when `minPartitions` asks for more
(like Spark's KafkaOffsetRangeCalculator), and a `maxOffsetsPerTrigger` budget divided across
partitions in proportion to their backlog. Pure functions: unit-tested without a JVM.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping
from dataclasses import dataclass

from pyspark.sql.datasource import InputPartition

from oncelog.spark.offsets import TopicPartition


@dataclass(frozen=True, slots=True)
class OffsetRange:
    """Offsets [start, end) of one topic-partition: what one Spark task reads."""

    topic: str
    partition: int
    start: int
    end: int

    @property
    def size(self) -> int:
        return self.end - self.start


class RangePartition(InputPartition):
    """The InputPartition shipped (pickled) to an executor: one offset range."""

    def __init__(self, offset_range: OffsetRange) -> None:
        super().__init__(offset_range)
        self.range = offset_range

    def __repr__(self) -> str:
        r = self.range
        return f"RangePartition({r.topic}-{r.partition} [{r.start}, {r.end}))"


def plan_ranges(
    start: Mapping[TopicPartition, int],
    end: Mapping[TopicPartition, int],
    min_partitions: int | None = None,
) -> list[OffsetRange]:
    """Non-empty ranges from start to end per partition; partitions missing from start begin at 0.

    A partition only in `end` is new since the start was resolved; its end is at least its log
    start, and reading from 0 is the same as reading from the earliest available offset, as
    the executor's reset policy then applies (see kafka_read).
    """
    ranges = [
        OffsetRange(topic, part, start.get((topic, part), 0), stop)
        for (topic, part), stop in sorted(end.items())
        if stop > start.get((topic, part), 0)
    ]
    if min_partitions is None or len(ranges) >= min_partitions:
        return ranges
    return split_ranges(ranges, min_partitions)


def split_ranges(ranges: list[OffsetRange], min_partitions: int) -> list[OffsetRange]:
    """Split large ranges so there are about `min_partitions` pieces, in proportion to size."""
    total = sum(r.size for r in ranges)
    if total == 0:
        return ranges
    out: list[OffsetRange] = []
    for r in ranges:
        pieces = max(1, min(r.size, math.ceil(r.size * min_partitions / total)))
        bounds = [r.start + (r.size * i) // pieces for i in range(pieces + 1)]
        out.extend(
            OffsetRange(r.topic, r.partition, lo, hi)
            for lo, hi in itertools.pairwise(bounds)
            if hi > lo
        )
    return out


def limit_offsets(
    start: Mapping[TopicPartition, int],
    latest: Mapping[TopicPartition, int],
    budget: int,
) -> dict[TopicPartition, int]:
    """End offsets that advance at most `budget` offsets in total, shared by backlog size.

    Largest-remainder rounding keeps the total exactly min(budget, backlog) and never moves a
    partition past its latest offset; every partition with a backlog gets its proportional share
    so none starves.
    """
    backlog = {tp: max(0, latest[tp] - start.get(tp, 0)) for tp in latest}
    total = sum(backlog.values())
    if total <= budget:
        return {tp: max(latest[tp], start.get(tp, 0)) for tp in latest}
    shares = {tp: budget * size / total for tp, size in backlog.items()}
    taken = {tp: math.floor(share) for tp, share in shares.items()}
    left = budget - sum(taken.values())
    by_remainder = sorted(shares, key=lambda tp: (taken[tp] - shares[tp], tp))
    for tp in by_remainder[:left]:
        taken[tp] += 1
    return {tp: start.get(tp, 0) + min(taken[tp], backlog[tp]) for tp in latest}
