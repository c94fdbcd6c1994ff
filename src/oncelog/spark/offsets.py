"""Offsets of the `oncelog` source: Spark-style JSON `{"topic": {"0": 42}}` and their resolution.

Streaming offsets are plain dicts (Spark journals them as JSON in the checkpoint). Two reserved
keys, which can never be Kafka topic names (topics use only `[a-zA-Z0-9._-]`), make batch 0
deterministic across driver restarts:

- `initialOffset()` returns the resolved start with `"$initial": true`;
- the end offset of the first batch carries that resolved start under `"$start"`, so when Spark
  replays batch 0 after a crash (and calls `initialOffset()` again, which might resolve "latest"
  to a newer position) the planner reads from the start journaled inside the end offset;
- likewise a later end offset carries, under `"$start"`, the earliest offset of any partition
  discovered since the previous batch, so a replay reads the same range.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, Literal, TypeAlias

EARLIEST: Literal["earliest"] = "earliest"
LATEST: Literal["latest"] = "latest"
#: Kafka's sentinel offsets in offset JSON.
EARLIEST_SENTINEL = -2
LATEST_SENTINEL = -1

INITIAL_KEY = "$initial"
START_KEY = "$start"

TopicPartition: TypeAlias = tuple[str, int]
PartitionOffsets: TypeAlias = dict[TopicPartition, int]
#: "earliest", "latest" or per-topic {partition: offset} with -2/-1 sentinels.
OffsetSpec: TypeAlias = Literal["earliest", "latest"] | dict[str, dict[int, int]]


class OffsetError(ValueError):
    """Offsets that cannot be parsed or resolved; the message names the offending option."""


def parse_offset_spec(raw: str, option: str) -> OffsetSpec:
    """Parse `startingOffsets`/`endingOffsets`: "earliest", "latest" or offset JSON."""
    text = str(raw).strip()
    if text.lower() == EARLIEST:
        return EARLIEST
    if text.lower() == LATEST:
        return LATEST
    bad = OffsetError(
        f"option {option!r} must be 'earliest', 'latest' or JSON like "
        f'{{"topic":{{"0":23,"1":-2}}}} (-2 = earliest, -1 = latest), got {raw!r}'
    )
    try:
        parsed = json.loads(text)
    except ValueError:
        raise bad from None
    if not isinstance(parsed, dict) or not parsed:
        raise bad
    out: dict[str, dict[int, int]] = {}
    for topic, parts in parsed.items():
        if not isinstance(parts, dict):
            raise bad
        per: dict[int, int] = {}
        for part, offset in parts.items():
            try:
                p = int(part)
            except ValueError:
                raise bad from None
            if p < 0 or not isinstance(offset, int) or isinstance(offset, bool) or offset < -2:
                raise bad
            per[p] = offset
        out[str(topic)] = per
    return out


def to_json(offsets: Mapping[TopicPartition, int]) -> dict[str, dict[str, int]]:
    """Spark's offset JSON shape, topics and partitions sorted so equal offsets compare equal."""
    out: dict[str, dict[str, int]] = {}
    for (topic, part), offset in sorted(offsets.items()):
        out.setdefault(topic, {})[str(part)] = int(offset)
    return out


def from_json(data: Mapping[str, Any]) -> PartitionOffsets:
    """Partition offsets from offset JSON, ignoring the reserved `$` keys."""
    out: PartitionOffsets = {}
    for topic, parts in data.items():
        if topic.startswith("$"):
            continue
        if not isinstance(parts, Mapping):
            raise OffsetError(f"malformed offset JSON for topic {topic!r}: {parts!r}")
        for part, offset in parts.items():
            out[(topic, int(part))] = int(offset)
    return out


def initial_offset_json(start: Mapping[TopicPartition, int]) -> dict[str, Any]:
    """What `initialOffset()` returns: the resolved start, marked as the query's initial offset."""
    data: dict[str, Any] = dict(to_json(start))
    data[INITIAL_KEY] = True
    return data


def end_offset_json(
    start: Mapping[str, Any],
    end: Mapping[TopicPartition, int],
    new_starts: Mapping[TopicPartition, int],
) -> dict[str, Any]:
    """The end offset of a micro-batch, carrying every start not journaled before it.

    For batch 0 (start is the initial offset) that is the whole resolved start; later, only the
    start (earliest offset) of partitions discovered since the previous batch.
    """
    data: dict[str, Any] = dict(to_json(end))
    carried: PartitionOffsets = dict(new_starts)
    if start.get(INITIAL_KEY):
        carried.update(from_json(start))
    if carried:
        data[START_KEY] = to_json(carried)
    return data


def effective_start(start: Mapping[str, Any], end: Mapping[str, Any]) -> PartitionOffsets:
    """The start a micro-batch really reads from: the previous offsets plus what end carries."""
    out = from_json(start)
    carried = end.get(START_KEY)
    if isinstance(carried, Mapping):
        if start.get(INITIAL_KEY):
            out = {}
        out.update(from_json(carried))
    return out


def resolve(
    spec: OffsetSpec,
    partitions: list[TopicPartition],
    earliest: Mapping[TopicPartition, int],
    latest: Mapping[TopicPartition, int],
    option: str,
    default: int,
) -> PartitionOffsets:
    """Concrete offsets for `partitions` from a spec; partitions absent from JSON get `default`.

    `default` is EARLIEST_SENTINEL or LATEST_SENTINEL. JSON naming a partition that does not
    exist is an error, because it almost always means a wrong topic name.
    """
    if spec == EARLIEST:
        return {tp: earliest[tp] for tp in partitions}
    if spec == LATEST:
        return {tp: latest[tp] for tp in partitions}
    known = set(partitions)
    missing = sorted(
        (topic, part)
        for topic, parts in spec.items()
        for part in parts
        if (topic, part) not in known
    )
    if missing:
        raise OffsetError(
            f"option {option!r} names partitions that are not subscribed or do not exist: "
            + ", ".join(f"{t}-{p}" for t, p in missing)
        )
    out: PartitionOffsets = {}
    for tp in partitions:
        wanted = spec.get(tp[0], {}).get(tp[1], default)
        if wanted == EARLIEST_SENTINEL:
            out[tp] = earliest[tp]
        elif wanted == LATEST_SENTINEL:
            out[tp] = latest[tp]
        else:
            out[tp] = wanted
    return out
