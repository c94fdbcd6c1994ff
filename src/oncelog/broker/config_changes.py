"""Config changes of AlterConfigs (33) and IncrementalAlterConfigs (44), without IO.

Kafka's rules (ConfigAdminManager, DynamicBrokerConfig): a resource appears at most once
and names each key at most once; only DELETE may carry a null value; APPEND and SUBTRACT
work on LIST keys only; a topic's new overrides are validated as CreateTopics validates
them. Broker resources are this broker's id (its own dynamic configs) or "" (the cluster
default); only the keys listed in `DYNAMIC_BROKER_KEYS` can change there, because those
are what the broker applies live (the topic defaults its partition logs run with). Any
other key is refused as Kafka refuses a static one. The effective broker configuration is
static < cluster default < per broker, as Kafka's precedence.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from oncelog.config import (
    BROKER_CONFIGS,
    TOPIC_CONFIG_DEFS,
    BrokerConfig,
    ConfigDef,
    ConfigType,
    validate_topic_configs,
)
from oncelog.errors import InvalidConfig, InvalidRequest, KafkaError

# Kafka's ConfigResource.Type ids.
TOPIC = 2
BROKER = 4
BROKER_LOGGER = 8

# AlterConfigOp.OpType ids.
SET = 0
DELETE = 1
APPEND = 2
SUBTRACT = 3

#: Broker keys whose dynamic value the broker applies at once: the defaults of the topic
#: configs its partition logs run with (a subset of Kafka's DynamicLogConfig keys) and the
#: replication throttles' rates (Kafka's DynamicConfig.Broker).
DYNAMIC_BROKER_KEYS = frozenset(
    {
        "log.segment.bytes",
        "log.roll.ms",
        "log.roll.hours",
        "log.retention.ms",
        "log.retention.minutes",
        "log.retention.hours",
        "log.retention.bytes",
        "log.flush.interval.messages",
        "log.flush.interval.ms",
        "log.index.interval.bytes",
        "log.index.size.max.bytes",
        "log.cleanup.policy",
        "log.message.timestamp.type",
        "log.segment.delete.delay.ms",
        "log.cleaner.min.cleanable.ratio",
        "log.cleaner.delete.retention.ms",
        "log.cleaner.min.compaction.lag.ms",
        "log.cleaner.max.compaction.lag.ms",
        "message.max.bytes",
        "min.insync.replicas",
        "leader.replication.throttled.rate",
        "follower.replication.throttled.rate",
    }
)

#: The name a dynamic default is stored under (Kafka's ZooKeeper entity "<default>").
DEFAULT_ENTITY = ""


@dataclass(frozen=True, slots=True)
class Change:
    """One config entry of a request: `op` is SET for the legacy AlterConfigs."""

    name: str
    op: int
    value: str | None


def check_resource(changes: Iterable[Change], *, incremental: bool) -> None:
    """The checks every resource gets first (duplicate keys, null values, unknown ops)."""
    names = [c.name for c in changes]
    if len(set(names)) != len(names):
        raise InvalidRequest("Error due to duplicate config keys")
    nulls = [c.name for c in changes if c.value is None and c.op != DELETE]
    if nulls:
        raise InvalidRequest("Null value not supported for : " + ", ".join(nulls))
    for c in changes:
        if incremental and c.op not in (SET, DELETE, APPEND, SUBTRACT):
            raise InvalidRequest(f"Unknown operations type {c.op}")


def apply_changes(
    current: Mapping[str, str],
    changes: Iterable[Change],
    defs: Mapping[str, ConfigDef],
    defaults: Mapping[str, str | None],
    *,
    incremental: bool,
) -> dict[str, str]:
    """The new set of overrides: `current` with the changes (incremental), or exactly the
    request's entries (the legacy AlterConfigs replaces every override)."""
    if not incremental:
        return {c.name: c.value for c in changes if c.value is not None}
    out = dict(current)
    for c in changes:
        if c.op == SET:
            assert c.value is not None
            out[c.name] = c.value
        elif c.op == DELETE:
            out.pop(c.name, None)
        else:
            d = defs.get(c.name)
            if d is None:
                raise InvalidConfig(f"Unknown config name: {c.name}")
            verb = "append" if c.op == APPEND else "subtract"
            if d.type is not ConfigType.LIST:
                raise InvalidConfig(f"Config value {verb} is not allowed for config key: {c.name}")
            old_text = out.get(c.name, defaults.get(c.name) or "")
            old = [v for v in old_text.split(",") if v] if old_text else []
            given = (c.value or "").split(",")
            if c.op == APPEND:
                new = old + [v for v in given if v not in old]
            else:
                new = [v for v in old if v not in given]
            out[c.name] = ",".join(new)
    return out


def new_topic_configs(
    current: Mapping[str, str],
    changes: list[Change],
    broker_topic_defaults: Mapping[str, str],
    *,
    incremental: bool,
) -> dict[str, str]:
    """A topic's validated new overrides (INVALID_CONFIG for unknown keys or bad values)."""
    for c in changes:
        if c.name not in TOPIC_CONFIG_DEFS:
            raise InvalidConfig(f"Unknown topic config name: {c.name}")
    new = apply_changes(
        current, changes, TOPIC_CONFIG_DEFS, broker_topic_defaults, incremental=incremental
    )
    return validate_topic_configs(new, broker_topic_defaults)


def broker_entity(name: str, node_id: int) -> str:
    """The dynamic-config entity a BROKER resource names: "" (the cluster default) or this
    broker's id; INVALID_REQUEST for anything else, in Kafka's words."""
    if name == DEFAULT_ENTITY:
        return DEFAULT_ENTITY
    try:
        broker_id = int(name)
    except ValueError:
        raise InvalidRequest(f"Node id must be an integer, but it is: {name}") from None
    if broker_id != node_id:
        raise InvalidRequest(f"Unexpected broker id, expected {node_id}, but received {name}")
    return str(broker_id)


def new_broker_configs(
    current: Mapping[str, str],
    changes: list[Change],
    static: BrokerConfig,
    other_layer: Mapping[str, str],
    entity: str,
    *,
    incremental: bool,
) -> dict[str, str]:
    """A broker entity's validated new dynamic configs. Keys the broker cannot apply live
    answer INVALID_REQUEST as Kafka's static keys do; bad values INVALID_REQUEST too (Kafka
    wraps the ConfigException, KAFKA-13609)."""
    refused = sorted({c.name for c in changes if c.name not in DYNAMIC_BROKER_KEYS})
    if refused:
        raise InvalidRequest(f"Cannot update these configs dynamically: Set({', '.join(refused)})")
    defaults = {k: d.default for k, d in BROKER_CONFIGS.items()}
    new = apply_changes(current, changes, BROKER_CONFIGS, defaults, incremental=incremental)
    layers = (other_layer, new) if entity != DEFAULT_ENTITY else (new, other_layer)
    try:
        effective(static, *layers)
    except KafkaError as exc:
        raise InvalidRequest(str(exc)) from None
    return new


def effective(
    static: BrokerConfig, default: Mapping[str, str], own: Mapping[str, str]
) -> BrokerConfig:
    """The broker configuration in force: static < cluster default < this broker's own
    (validated on construction, so a bad combination raises InvalidConfig)."""
    if not default and not own:
        return static
    return BrokerConfig({**static.raw, **default, **own})
