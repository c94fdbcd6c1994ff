"""Options of the `oncelog` Spark source, parsed once into a frozen dataclass.

Mirrors the option names of Spark's Kafka source. Spark hands Python data sources their options
in a case-insensitive map with lower-cased keys, so every lookup here is by lower-case name and
errors quote the documented camel-case spelling. Unknown non-`kafka.` options are rejected
(Spark silently ignores them), because a typo such as `startingOffset` would otherwise change
what a query reads without any warning.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from oncelog.spark.offsets import EARLIEST, LATEST, OffsetError, OffsetSpec, parse_offset_spec

#: Documented spelling of every non-`kafka.` option the source understands.
KNOWN_OPTIONS: tuple[str, ...] = (
    "subscribe",
    "subscribePattern",
    "assign",
    "startingOffsets",
    "endingOffsets",
    "maxOffsetsPerTrigger",
    "minPartitions",
    "failOnDataLoss",
    "includeHeaders",
    "groupIdPrefix",
    "kafkaConsumer.pollTimeoutMs",
    "reader",
)
#: `reader`: how executors read (Fetch requests decoded into Arrow, or librdkafka's consumer).
READERS = ("fetch", "consumer")
_KNOWN_BY_LOWER = {name.lower(): name for name in KNOWN_OPTIONS}

#: Options accepted by the writer side of the same format; ignored by the source.
SINK_OPTIONS: frozenset[str] = frozenset({"topic", "checkpointlocation", "path"})

#: librdkafka settings the source owns: the executor read must never commit or join a group.
_RESERVED_KAFKA = frozenset({"group.id", "enable.auto.commit", "auto.offset.reset"})


class OptionError(ValueError):
    """A source option is missing, unknown or malformed; the message names the option."""


@dataclass(frozen=True, slots=True)
class Subscribe:
    """`subscribe`: a fixed list of topics."""

    topics: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class SubscribePattern:
    """`subscribePattern`: every topic whose whole name matches the regex."""

    pattern: str

    def matches(self, topic: str) -> bool:
        return re.fullmatch(self.pattern, topic) is not None


@dataclass(frozen=True, slots=True)
class Assign:
    """`assign`: explicit topic-partitions."""

    partitions: tuple[tuple[str, int], ...]


Subscription = Subscribe | SubscribePattern | Assign


@dataclass(frozen=True, slots=True)
class SourceOptions:
    """Validated source options; picklable so executors get the same view as the driver."""

    bootstrap_servers: str
    subscription: Subscription
    starting_offsets: OffsetSpec
    ending_offsets: OffsetSpec
    max_offsets_per_trigger: int | None = None
    min_partitions: int | None = None
    fail_on_data_loss: bool = True
    include_headers: bool = False
    group_id_prefix: str = "spark-oncelog-source"
    poll_timeout_ms: int = 120_000
    kafka_params: Mapping[str, str] = field(default_factory=dict)
    reader: str = "fetch"

    @property
    def read_committed(self) -> bool:
        return self.kafka_params.get("isolation.level", "read_committed") == "read_committed"

    def consumer_config(self, group_id: str) -> dict[str, str | bool | int]:
        """librdkafka config for one consumer: user `kafka.*` settings plus the owned ones."""
        config: dict[str, str | bool | int] = dict(self.kafka_params)
        config["group.id"] = group_id
        config["enable.auto.commit"] = False
        config["enable.auto.offset.store"] = False
        config["auto.offset.reset"] = "error" if self.fail_on_data_loss else "earliest"
        # librdkafka's 100 ms spaces a new client's second connection by 50 ms (the sink's
        # CLIENT_DEFAULTS says why); the driver makes a new consumer for every plan.
        config.setdefault("reconnect.backoff.ms", "10")
        return config


def _bool(options: Mapping[str, str], name: str, default: bool) -> bool:
    raw = options.get(name.lower())
    if raw is None:
        return default
    text = str(raw).strip().lower()
    if text in ("true", "false"):
        return text == "true"
    raise OptionError(f"option {name!r} must be 'true' or 'false', got {raw!r}")


def _positive_int(options: Mapping[str, str], name: str) -> int | None:
    raw = options.get(name.lower())
    if raw is None:
        return None
    try:
        value = int(str(raw).strip())
    except ValueError:
        raise OptionError(f"option {name!r} must be a positive integer, got {raw!r}") from None
    if value <= 0:
        raise OptionError(f"option {name!r} must be a positive integer, got {raw!r}")
    return value


def _subscription(options: Mapping[str, str]) -> Subscription:
    given = [
        name for name in ("subscribe", "subscribePattern", "assign") if name.lower() in options
    ]
    if len(given) != 1:
        raise OptionError(
            "exactly one of 'subscribe', 'subscribePattern' or 'assign' must be set, got "
            + (", ".join(repr(name) for name in given) if given else "none")
        )
    kind = given[0]
    raw = str(options[kind.lower()])
    if kind == "subscribe":
        topics = tuple(t.strip() for t in raw.split(",") if t.strip())
        if not topics:
            raise OptionError(f"option 'subscribe' must list at least one topic, got {raw!r}")
        return Subscribe(topics)
    if kind == "subscribePattern":
        if not raw.strip():
            raise OptionError("option 'subscribePattern' must be a non-empty regex")
        try:
            re.compile(raw)
        except re.error as exc:
            raise OptionError(f"option 'subscribePattern' is not a valid regex: {exc}") from None
        return SubscribePattern(raw)
    return Assign(_parse_assign(raw))


def _parse_assign(raw: str) -> tuple[tuple[str, int], ...]:
    bad = OptionError(f"option 'assign' must be JSON like {{\"topic\":[0,1]}}, got {raw!r}")
    try:
        parsed = json.loads(raw)
    except ValueError:
        raise bad from None
    if not isinstance(parsed, dict) or not parsed:
        raise bad
    out: list[tuple[str, int]] = []
    for topic, parts in parsed.items():
        if not isinstance(parts, list) or not all(
            isinstance(p, int) and not isinstance(p, bool) and p >= 0 for p in parts
        ):
            raise bad
        out.extend((str(topic), p) for p in parts)
    if not out:
        raise bad
    return tuple(sorted(set(out)))


def parse_options(options: Mapping[str, str], *, streaming: bool) -> SourceOptions:
    """Validate `options` (keys in any case) for a streaming or a batch read."""
    try:
        return _parse(options, streaming)
    except OffsetError as exc:
        raise OptionError(str(exc)) from None


def _parse(options: Mapping[str, str], streaming: bool) -> SourceOptions:
    lower = {str(k).lower(): str(v) for k, v in options.items()}
    unknown = sorted(
        k
        for k in lower
        if not k.startswith("kafka.") and k not in _KNOWN_BY_LOWER and k not in SINK_OPTIONS
    )
    if unknown:
        raise OptionError(
            f"unknown option(s) {', '.join(repr(k) for k in unknown)} for the oncelog source; "
            f"known options: {', '.join(KNOWN_OPTIONS)} and kafka.* (passed to the client)"
        )
    bootstrap = lower.get("kafka.bootstrap.servers", "").strip()
    if not bootstrap:
        raise OptionError("option 'kafka.bootstrap.servers' is required")
    kafka_params: dict[str, str] = {}
    for key, value in lower.items():
        if not key.startswith("kafka."):
            continue
        name = key[len("kafka.") :]
        if name in _RESERVED_KAFKA:
            raise OptionError(
                f"option 'kafka.{name}' is not supported: the source never commits offsets "
                "(they live in Spark's checkpoint); use startingOffsets/failOnDataLoss instead"
            )
        kafka_params[name] = value
    kafka_params.setdefault("isolation.level", "read_committed")
    if kafka_params["isolation.level"] not in ("read_committed", "read_uncommitted"):
        raise OptionError(
            "option 'kafka.isolation.level' must be 'read_committed' or 'read_uncommitted', "
            f"got {kafka_params['isolation.level']!r}"
        )

    starting = parse_offset_spec(
        lower.get("startingoffsets", LATEST if streaming else EARLIEST), "startingOffsets"
    )
    if "endingoffsets" in lower:
        if streaming:
            raise OptionError("option 'endingOffsets' is only valid for batch reads")
        ending = parse_offset_spec(lower["endingoffsets"], "endingOffsets")
        if ending == EARLIEST or (
            isinstance(ending, dict)
            and any(o == -2 for parts in ending.values() for o in parts.values())
        ):
            raise OptionError("option 'endingOffsets' cannot be 'earliest' (-2)")
    else:
        ending = LATEST
    if not streaming and (
        starting == LATEST
        or (
            isinstance(starting, dict)
            and any(o == -1 for parts in starting.values() for o in parts.values())
        )
    ):
        raise OptionError("option 'startingOffsets' cannot be 'latest' (-1) for batch reads")
    max_per_trigger = _positive_int(lower, "maxOffsetsPerTrigger")
    if max_per_trigger is not None and not streaming:
        raise OptionError("option 'maxOffsetsPerTrigger' is only valid for streaming reads")
    poll_timeout = _positive_int(lower, "kafkaConsumer.pollTimeoutMs")
    reader = lower.get("reader", "fetch").strip().lower()
    if reader not in READERS:
        raise OptionError(f"option 'reader' must be 'fetch' or 'consumer', got {reader!r}")
    return SourceOptions(
        bootstrap_servers=bootstrap,
        subscription=_subscription(lower),
        starting_offsets=starting,
        ending_offsets=ending,
        max_offsets_per_trigger=max_per_trigger,
        min_partitions=_positive_int(lower, "minPartitions"),
        fail_on_data_loss=_bool(lower, "failOnDataLoss", True),
        include_headers=_bool(lower, "includeHeaders", False),
        group_id_prefix=lower.get("groupidprefix", "spark-oncelog-source"),
        poll_timeout_ms=poll_timeout if poll_timeout is not None else 120_000,
        kafka_params=kafka_params,
        reader=reader,
    )
