"""Listener keys as Kafka reads them: every listener, its protocol by the map, advertised
endpoints per name, the inter-broker listener, per-listener overrides."""

from __future__ import annotations

import pytest

from oncelog.config import BrokerConfig
from oncelog.errors import InvalidConfig


def test_every_listener_with_its_protocol() -> None:
    config = BrokerConfig(
        {
            "listeners": "PLAINTEXT://127.0.0.1:9092,SASL_SSL://127.0.0.1:9093,"
            "INTERNAL://127.0.0.1:9094",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,SASL_SSL:SASL_SSL,"
            "INTERNAL:SASL_PLAINTEXT",
            "advertised.listeners": "SASL_SSL://kafka.example:19093",
            "inter.broker.listener.name": "INTERNAL",
        }
    )
    assert [(item.name, item.port) for item in config.listeners] == [
        ("PLAINTEXT", 9092),
        ("SASL_SSL", 9093),
        ("INTERNAL", 9094),
    ]
    assert config.security_protocol("INTERNAL") == "SASL_PLAINTEXT"
    advertised = config.advertised_for("SASL_SSL")
    assert advertised is not None and (advertised.host, advertised.port) == ("kafka.example", 19093)
    assert config.advertised_for("PLAINTEXT") is None
    assert config.inter_broker_listener_name == "INTERNAL"


def test_inter_broker_listener_defaults() -> None:
    assert BrokerConfig({}).inter_broker_listener_name == "PLAINTEXT"
    only_sasl = BrokerConfig({"listeners": "SASL_PLAINTEXT://127.0.0.1:0"})
    assert only_sasl.inter_broker_listener_name == "SASL_PLAINTEXT"
    by_protocol = BrokerConfig(
        {
            "listeners": "PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:1",
            "security.inter.broker.protocol": "SSL",
        }
    )
    assert by_protocol.inter_broker_listener_name == "SSL"
    with pytest.raises(InvalidConfig, match="names no listener"):
        _ = BrokerConfig({"inter.broker.listener.name": "REPLICATION"}).inter_broker_listener_name


@pytest.mark.parametrize(
    ("raw", "why"),
    [
        ({"listeners": "PLAINTEXT://:1,PLAINTEXT://:2"}, "different name"),
        ({"listeners": "PLAINTEXT://:1,SSL://:1"}, "different port"),
        ({"listeners": "FOO://:1"}, "No security protocol defined for listener FOO"),
        ({"listener.security.protocol.map": "A:TLS"}, "NAME:PROTOCOL"),
        ({"sasl.enabled.mechanisms": "GSSAPI"}, "String must be one of"),
        ({"ssl.client.auth": "always"}, "String must be one of"),
        ({"listener.name.plaintext.ssl.client.auth": "sometimes"}, "String must be one of"),
        ({"ssl.truststore.type": "JKS"}, "PEM"),
    ],
)
def test_bad_listener_settings(raw: dict[str, str], why: str) -> None:
    with pytest.raises(InvalidConfig, match=why):
        BrokerConfig(raw)


def test_listener_prefixed_overrides_and_jaas() -> None:
    config = BrokerConfig(
        {
            "listeners": "SASL_SSL://127.0.0.1:0,SSL://127.0.0.1:1",
            "ssl.client.auth": "requested",
            "listener.name.ssl.ssl.client.auth": "required",
            "sasl.jaas.config": "A required;",
            "listener.name.sasl_ssl.scram-sha-256.sasl.jaas.config": "B required;",
        }
    )
    assert config.listener_setting("SSL", "ssl.client.auth") == "required"
    assert config.listener_setting("SASL_SSL", "ssl.client.auth") == "requested"
    assert config.jaas_config("SASL_SSL", "SCRAM-SHA-256") == "B required;"
    assert config.jaas_config("SASL_SSL", "PLAIN") == "A required;"
    assert config.unknown_keys() == []


def test_controller_listeners_are_not_served() -> None:
    config = BrokerConfig(
        {
            "listeners": "PLAINTEXT://:9092,CONTROLLER://:9093",
            "controller.listener.names": "CONTROLLER",
            "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
        }
    )
    assert [item.name for item in config.listeners] == ["PLAINTEXT"]
