"""Config and offset admin requests librdkafka cannot send: IncrementalAlterConfigs and
DescribeConfigs on the cluster-default BROKER resource ("", which librdkafka and kafka-python
refuse client-side) and OffsetDelete (not in confluent-kafka's Python API). `oncelog
configs` sends all its requests through here, so one code path serves every entity."""

from __future__ import annotations

from dataclasses import dataclass

from oncelog.client.admin import Admin
from oncelog.client.connection import ClientError, Connection
from oncelog.errors import error_name
from oncelog.types import TopicPartition

DESCRIBE_CONFIGS, INCREMENTAL_ALTER_CONFIGS, OFFSET_DELETE = 32, 44, 47
TOPIC, BROKER = 2, 4
SET, DELETE = 0, 1
#: Kafka's ConfigSource names, by id.
SOURCES = {
    0: "UNKNOWN",
    1: "DYNAMIC_TOPIC_CONFIG",
    2: "DYNAMIC_BROKER_CONFIG",
    3: "DYNAMIC_DEFAULT_BROKER_CONFIG",
    4: "STATIC_BROKER_CONFIG",
    5: "DEFAULT_CONFIG",
    6: "DYNAMIC_BROKER_LOGGER_CONFIG",
}


@dataclass(frozen=True, slots=True)
class ConfigInfo:
    name: str
    value: str | None
    source: str
    read_only: bool
    #: (name, value, source) of each layer that sets it, highest precedence first.
    synonyms: tuple[tuple[str, str | None, str], ...]


def _node_for(admin: Admin, resource_type: int, name: str) -> Connection:
    """A BROKER resource goes to that broker; the default and topics to the broker the admin
    bootstrapped from (it answered; the lowest-numbered broker may be down)."""
    if resource_type == BROKER and name:
        try:
            node_id = int(name)
        except ValueError:
            raise ClientError(f"broker id must be an integer, not {name!r}") from None
        if node_id not in admin.node_ids():
            raise ClientError(f"no broker {node_id} in the cluster")
        return admin.node(node_id)
    return admin.any_node()


def _check(code: int, message: str | None, what: str) -> None:
    """A refused resource as ClientError: Kafka's error name and code, then the broker's
    message: `INVALID_CONFIG (40): cannot alter 't': Invalid value ...`."""
    if code != 0:
        raise ClientError(
            f"{error_name(code)}: {what}: {message}" if message else f"{error_name(code)}: {what}"
        )


def describe_configs(admin: Admin, resource_type: int, name: str) -> list[ConfigInfo]:
    body = {
        "resources": [
            {"resource_type": resource_type, "resource_name": name, "configuration_keys": None}
        ],
        "include_synonyms": True,
        "include_documentation": False,
    }
    node = _node_for(admin, resource_type, name)
    response = node.call(DESCRIBE_CONFIGS, (1, 4), body)
    result = response.results[0]
    _check(int(result.error_code), result.error_message, f"cannot describe {name!r}")
    return [
        ConfigInfo(
            c.name,
            c.value,
            SOURCES.get(int(c.config_source), "UNKNOWN"),
            bool(c.read_only),
            tuple((s.name, s.value, SOURCES.get(int(s.source), "UNKNOWN")) for s in c.synonyms),
        )
        for c in result.configs
    ]


def alter_configs(
    admin: Admin,
    resource_type: int,
    name: str,
    changes: list[tuple[str, int, str | None]],
    *,
    validate_only: bool = False,
) -> None:
    """IncrementalAlterConfigs of one resource: (key, SET/DELETE/APPEND/SUBTRACT, value)."""
    body = {
        "resources": [
            {
                "resource_type": resource_type,
                "resource_name": name,
                "configs": [
                    {"name": k, "config_operation": op, "value": v} for k, op, v in changes
                ],
            }
        ],
        "validate_only": validate_only,
    }
    node = _node_for(admin, resource_type, name)
    response = node.call(INCREMENTAL_ALTER_CONFIGS, (0, 1), body)
    result = response.responses[0]
    _check(int(result.error_code), result.error_message, f"cannot alter {name!r}")


def delete_offsets(
    admin: Admin, group: str, partitions: list[TopicPartition]
) -> dict[TopicPartition, int]:
    """OffsetDelete on the group's coordinator: each partition's error code (0: deleted).
    A group-level error raises ClientError with Kafka's error name."""
    topics: dict[str, list[int]] = {}
    for tp in partitions:
        topics.setdefault(tp.topic, []).append(tp.partition)
    body = {
        "group_id": group,
        "topics": [
            {"name": t, "partitions": [{"partition_index": p} for p in ps]}
            for t, ps in topics.items()
        ],
    }
    response = admin.coordinator(group, 0).call(OFFSET_DELETE, (0, 0), body)
    code = int(response.error_code)
    if code != 0:
        raise ClientError(f"cannot delete offsets of group {group!r}: {error_name(code)}")
    return {
        TopicPartition(t.name, p.partition_index): int(p.error_code)
        for t in response.topics
        for p in t.partitions
    }
