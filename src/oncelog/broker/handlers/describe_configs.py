"""DescribeConfigs (32): topic and broker configuration with Kafka's sources and types."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from oncelog.broker.context import RequestContext
from oncelog.config import BROKER_CONFIGS, TOPIC_CONFIG_DEFS, ConfigType
from oncelog.errors import ErrorCode, InvalidRequest, KafkaError

TOPIC = 2
BROKER = 4
BROKER_LOGGER = 8

SOURCE_TOPIC = 1
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


def handle(ctx: RequestContext, request: Any) -> dict[str, Any]:
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
        try:
            keys = resource.configuration_keys
            if resource.resource_type == TOPIC:
                configs = describe_topic_configs(ctx, resource.resource_name, keys, synonyms)
            elif resource.resource_type == BROKER:
                configs = _describe_broker(ctx, resource.resource_name, keys)
            else:
                raise InvalidRequest(f"Unsupported resource type {resource.resource_type}")
            result["configs"] = configs
        except KafkaError as exc:
            result.update(error_code=exc.code, error_message=str(exc))
        results.append(result)
    return {"throttle_time": 0, "results": results}


def describe_topic_configs(
    ctx: RequestContext, topic: str, keys: Sequence[str] | None, synonyms: bool
) -> list[dict[str, Any]]:
    overrides = ctx.broker.replicas.topic_configs(topic)
    config = ctx.broker.config
    defaults = config.topic_defaults()
    broker_name = {d.topic_name: d.name for d in BROKER_CONFIGS.values() if d.topic_name}
    out = []
    for name in sorted(TOPIC_CONFIG_DEFS):
        if keys is not None and name not in keys:
            continue
        synonym_list = []
        if name in overrides:
            value, source = overrides[name], SOURCE_TOPIC
            synonym_list.append({"name": name, "value": value, "source": SOURCE_TOPIC})
        else:
            static = broker_name.get(name)
            from_broker = static is not None and config.is_set(static)
            value = defaults.get(name, "")
            source = SOURCE_STATIC_BROKER if from_broker else SOURCE_DEFAULT
        if name not in overrides or synonyms:
            static = broker_name.get(name)
            if static is not None and config.is_set(static):
                synonym_list.append(
                    {"name": static, "value": config.raw[static], "source": SOURCE_STATIC_BROKER}
                )
            # Kafka lists the broker key's default last (a DEFAULT_CONFIG synonym).
            default = BROKER_CONFIGS[static].default if static is not None else None
            if synonyms and default is not None:
                synonym_list.append({"name": static, "value": default, "source": SOURCE_DEFAULT})
        out.append(_entry(name, value, source, TOPIC_CONFIG_DEFS[name].type, synonym_list))
    return out


def _describe_broker(
    ctx: RequestContext, name: str, keys: Sequence[str] | None
) -> list[dict[str, Any]]:
    config = ctx.broker.config
    if name not in ("", str(config.node_id)):
        raise InvalidRequest(f"Unexpected broker id, expected {config.node_id} but received {name}")
    out = []
    for key, d in sorted(BROKER_CONFIGS.items()):
        if keys is not None and key not in keys:
            continue
        if config.is_set(key):
            out.append(_entry(key, config.raw[key], SOURCE_STATIC_BROKER, d.type, []))
        else:
            out.append(_entry(key, d.default, SOURCE_DEFAULT, d.type, []))
    return out


def _entry(
    name: str, value: str | None, source: int, ctype: ConfigType, synonyms: list[dict[str, Any]]
) -> dict[str, Any]:
    return {
        "name": name,
        "value": value,
        "read_only": source not in (SOURCE_TOPIC, SOURCE_DEFAULT),
        "config_source": source,
        "is_default": source == SOURCE_DEFAULT,
        "is_sensitive": False,
        "synonyms": synonyms,
        "config_type": _TYPE_CODES.get(ctype, 0),
        "documentation": None,
    }
