"""DescribeConfigs (32): topic and broker configuration with Kafka's sources and types.

A value comes from the first layer that sets it: a topic override (DYNAMIC_TOPIC_CONFIG),
this broker's dynamic config (DYNAMIC_BROKER_CONFIG), the cluster-wide dynamic default
(DYNAMIC_DEFAULT_BROKER_CONFIG), server.properties (STATIC_BROKER_CONFIG), Kafka's default
(DEFAULT_CONFIG). With `include_synonyms` every layer that sets the key or one of its broker
synonyms (log.retention.ms, .minutes, .hours for retention.ms) is listed in that order.
Describing the BROKER resource "" lists the cluster default's dynamic keys only, as Kafka
does; a broker key the broker cannot change live is read-only.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from oncelog.broker import authz
from oncelog.broker.config_changes import DYNAMIC_BROKER_KEYS
from oncelog.broker.context import RequestContext
from oncelog.broker.handlers.types import DescribeConfigsAnswer, DescribeConfigsRequest
from oncelog.config import BROKER_CONFIGS, TOPIC_CONFIG_DEFS, ConfigType
from oncelog.errors import ErrorCode, InvalidRequest, KafkaError
from oncelog.security.acl import AclOperation as Op

TOPIC = 2
BROKER = 4
BROKER_LOGGER = 8

SOURCE_TOPIC = 1
SOURCE_DYNAMIC_BROKER = 2
SOURCE_DYNAMIC_DEFAULT = 3
SOURCE_STATIC_BROKER = 4
SOURCE_DEFAULT = 5

_TYPE_CODES = {
    ConfigType.BOOLEAN: 1,
    ConfigType.STRING: 2,
    ConfigType.INT: 3,
    ConfigType.LONG: 5,
    ConfigType.DOUBLE: 6,
    ConfigType.LIST: 7,
}

#: Topic keys whose broker default is spread over several broker keys (Kafka's synonyms,
#: most precise first); every other topic key has its one broker key, if any.
_MULTI_SYNONYMS = {
    "retention.ms": ("log.retention.ms", "log.retention.minutes", "log.retention.hours"),
    "segment.ms": ("log.roll.ms", "log.roll.hours"),
    "segment.jitter.ms": ("log.roll.jitter.ms", "log.roll.jitter.hours"),
}
_BROKER_KEY = {d.topic_name: d.name for d in BROKER_CONFIGS.values() if d.topic_name}


def handle(ctx: RequestContext, request: DescribeConfigsRequest) -> DescribeConfigsAnswer:
    synonyms = bool(getattr(request, "include_synonyms", False))
    results = []
    for resource in request.resources:
        result: dict[str, Any] = {
            "error_code": ErrorCode.none,
            "error_message": None,
            "resource_type": resource.resource_type,
            "resource_name": resource.resource_name,
            "configs": [],
        }
        refused = authz.config_refusal(
            ctx, Op.DESCRIBE_CONFIGS, resource.resource_type, resource.resource_name
        )
        if refused is not None:
            result["error_code"] = refused
            results.append(result)
            continue
        try:
            keys = resource.configuration_keys
            if resource.resource_type == TOPIC:
                configs = describe_topic_configs(ctx, resource.resource_name, keys, synonyms)
            elif resource.resource_type == BROKER:
                configs = _describe_broker(ctx, resource.resource_name, keys, synonyms)
            else:
                raise InvalidRequest(f"Unsupported resource type {resource.resource_type}")
            result["configs"] = configs
        except KafkaError as exc:
            result.update(error_code=exc.code, error_message=str(exc))
        results.append(result)
    return {"throttle_time": 0, "results": results}


def _broker_layers(ctx: RequestContext, key: str) -> list[dict[str, Any]]:
    """The layers that set broker key `key`, highest precedence first (without the
    DEFAULT_CONFIG one)."""
    replicas, config = ctx.broker.replicas, ctx.broker.config
    out = []
    own = replicas.dynamic_configs.get(str(config.node_id), {})
    default = replicas.dynamic_configs.get("", {})
    if key in own:
        out.append({"name": key, "value": own[key], "source": SOURCE_DYNAMIC_BROKER})
    if key in default:
        out.append({"name": key, "value": default[key], "source": SOURCE_DYNAMIC_DEFAULT})
    if config.is_set(key):
        out.append({"name": key, "value": config.raw[key], "source": SOURCE_STATIC_BROKER})
    return out


def describe_topic_configs(
    ctx: RequestContext, topic: str, keys: Sequence[str] | None, synonyms: bool
) -> list[dict[str, Any]]:
    overrides = ctx.broker.replicas.topic_configs(topic)
    defaults = ctx.broker.replicas.topic_defaults()
    out = []
    for name in sorted(TOPIC_CONFIG_DEFS):
        if keys is not None and name not in keys:
            continue
        broker_keys = _MULTI_SYNONYMS.get(name) or (
            (_BROKER_KEY[name],) if name in _BROKER_KEY else ()
        )
        layers: list[dict[str, Any]] = []
        if name in overrides:
            layers.append({"name": name, "value": overrides[name], "source": SOURCE_TOPIC})
        for key in broker_keys:
            layers += _broker_layers(ctx, key)
        # Kafka lists the broker key's default last (a DEFAULT_CONFIG synonym).
        for key in broker_keys:
            default = BROKER_CONFIGS[key].default
            if default is not None:
                layers.append({"name": key, "value": default, "source": SOURCE_DEFAULT})
                break
        top = layers[0] if layers else None
        if name in overrides:
            value, source = overrides[name], SOURCE_TOPIC
        else:
            value = defaults.get(name, "")
            source = top["source"] if top is not None else SOURCE_DEFAULT
        entry = _entry(
            name, value, source, TOPIC_CONFIG_DEFS[name].type, layers if synonyms else []
        )
        entry["read_only"] = False
        out.append(entry)
    return out


def _describe_broker(
    ctx: RequestContext, name: str, keys: Sequence[str] | None, synonyms: bool
) -> list[dict[str, Any]]:
    config = ctx.broker.config
    if name == "":
        # The cluster default resource: only its dynamic keys, as Kafka answers.
        default = ctx.broker.replicas.dynamic_configs.get("", {})
        return [
            _entry(
                key,
                value,
                SOURCE_DYNAMIC_DEFAULT,
                BROKER_CONFIGS[key].type,
                [{"name": key, "value": value, "source": SOURCE_DYNAMIC_DEFAULT}]
                if synonyms
                else [],
            )
            for key, value in sorted(default.items())
            if keys is None or key in keys
        ]
    if name != str(config.node_id):
        raise InvalidRequest(f"Unexpected broker id, expected {config.node_id} but received {name}")
    out = []
    for key, d in sorted(BROKER_CONFIGS.items()):
        if keys is not None and key not in keys:
            continue
        layers = _broker_layers(ctx, key)
        if d.default is not None:
            layers.append({"name": key, "value": d.default, "source": SOURCE_DEFAULT})
        value, source = (
            (layers[0]["value"], layers[0]["source"]) if layers else (None, SOURCE_DEFAULT)
        )
        entry = _entry(key, value, source, d.type, layers if synonyms else [])
        entry["read_only"] = key not in DYNAMIC_BROKER_KEYS
        out.append(entry)
    return out


def _entry(
    name: str, value: str | None, source: int, ctype: ConfigType, synonyms: list[dict[str, Any]]
) -> dict[str, Any]:
    return {
        "name": name,
        "value": value,
        "read_only": name not in DYNAMIC_BROKER_KEYS,
        "config_source": source,
        "is_default": source == SOURCE_DEFAULT,
        "is_sensitive": False,
        "synonyms": synonyms,
        "config_type": _TYPE_CODES.get(ctype, 0),
        "documentation": None,
    }
