"""The rules of AlterConfigs / IncrementalAlterConfigs without a broker: Kafka's operations on
list keys, its refusals and messages, and the dynamic broker layers."""

from __future__ import annotations

import pytest

from oncelog.broker.config_changes import (
    APPEND,
    DELETE,
    SET,
    SUBTRACT,
    Change,
    broker_entity,
    check_resource,
    effective,
    new_broker_configs,
    new_topic_configs,
)
from oncelog.config import BrokerConfig
from oncelog.coordinator.group.subscription import SubscriptionError, subscribed_topics
from oncelog.errors import InvalidConfig, InvalidRequest

DEFAULTS = BrokerConfig().topic_defaults()


def test_incremental_operations_on_a_list_key() -> None:
    current = {"cleanup.policy": "delete", "retention.ms": "1000"}
    new = new_topic_configs(
        current,
        [Change("cleanup.policy", APPEND, "compact,delete"), Change("retention.ms", DELETE, None)],
        DEFAULTS,
        incremental=True,
    )
    assert new == {"cleanup.policy": "delete,compact"}
    new = new_topic_configs(
        new, [Change("cleanup.policy", SUBTRACT, "delete")], DEFAULTS, incremental=True
    )
    assert new == {"cleanup.policy": "compact"}
    # APPEND to a key without an override starts from the broker default.
    new = new_topic_configs(
        {}, [Change("cleanup.policy", APPEND, "compact")], DEFAULTS, incremental=True
    )
    assert new == {"cleanup.policy": "delete,compact"}


def test_legacy_alter_replaces_every_override() -> None:
    new = new_topic_configs(
        {"retention.ms": "1000", "segment.bytes": "4096"},
        [Change("retention.bytes", SET, "77")],
        DEFAULTS,
        incremental=False,
    )
    assert new == {"retention.bytes": "77"}


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ([Change("retention.ms", APPEND, "5")], "Config value append is not allowed"),
        ([Change("segment.bytes", SUBTRACT, "5")], "Config value subtract is not allowed"),
        ([Change("no.such", SET, "5")], "Unknown topic config name: no.such"),
        ([Change("retention.ms", SET, "soon")], "Invalid value 'soon'"),
        ([Change("cleanup.policy", APPEND, "forever")], "String must be one of"),
        (
            [Change("min.compaction.lag.ms", SET, "9"), Change("max.compaction.lag.ms", SET, "2")],
            "conflict topic config setting",
        ),
    ],
)
def test_topic_changes_kafka_refuses(changes: list[Change], message: str) -> None:
    with pytest.raises(InvalidConfig, match=message):
        new_topic_configs({}, changes, DEFAULTS, incremental=True)


def test_request_level_checks() -> None:
    with pytest.raises(InvalidRequest, match="duplicate config keys"):
        check_resource([Change("a", SET, "1"), Change("a", DELETE, None)], incremental=True)
    with pytest.raises(InvalidRequest, match="Null value not supported for : a, b"):
        check_resource([Change("a", SET, None), Change("b", APPEND, None)], incremental=True)
    with pytest.raises(InvalidRequest, match="Unknown operations type 9"):
        check_resource([Change("a", 9, "1")], incremental=True)
    check_resource([Change("a", DELETE, None)], incremental=True)


def test_broker_entities() -> None:
    assert broker_entity("", 1) == ""
    assert broker_entity("1", 1) == "1"
    with pytest.raises(InvalidRequest, match="Unexpected broker id, expected 1, but received 2"):
        broker_entity("2", 1)
    with pytest.raises(InvalidRequest, match="Node id must be an integer, but it is: x"):
        broker_entity("x", 1)


def test_dynamic_broker_configs_layer_and_refuse_static_keys() -> None:
    static = BrokerConfig({"log.retention.hours": "24"})
    default = new_broker_configs(
        {}, [Change("log.retention.ms", SET, "5000")], static, {}, "", incremental=True
    )
    own = new_broker_configs(
        {}, [Change("log.retention.ms", SET, "9000")], static, default, "1", incremental=True
    )
    assert effective(static, default, {}).topic_defaults()["retention.ms"] == "5000"
    assert effective(static, default, own).topic_defaults()["retention.ms"] == "9000"
    assert effective(static, {}, {}) is static
    with pytest.raises(InvalidRequest, match=r"dynamically: Set\(log.dirs, num.io.threads\)"):
        new_broker_configs(
            {},
            [Change("num.io.threads", SET, "2"), Change("log.dirs", SET, "/x")],
            static,
            {},
            "1",
            incremental=True,
        )
    # A bad value answers INVALID_REQUEST, as Kafka wraps its ConfigException.
    with pytest.raises(InvalidRequest, match=r"log\.retention\.ms"):
        new_broker_configs(
            {}, [Change("log.retention.ms", SET, "0")], static, {}, "1", incremental=True
        )


def _subscription(topics: list[str], version: int = 1) -> bytes:
    out = version.to_bytes(2, "big") + len(topics).to_bytes(4, "big")
    for t in topics:
        out += len(t).to_bytes(2, "big") + t.encode()
    return out + b"\xff\xff\xff\xff"  # user data null, then more fields of later versions


def test_consumer_subscriptions() -> None:
    assert subscribed_topics(_subscription(["a", "bb"])) == {"a", "bb"}
    assert subscribed_topics(_subscription([], version=3)) == set()
    for bad in (b"", b"\x00\x01\x00\x00\x00\x05\x00\x01a", b"\xff\xff\x00\x00\x00\x00"):
        with pytest.raises(SubscriptionError):
            subscribed_topics(bad)
