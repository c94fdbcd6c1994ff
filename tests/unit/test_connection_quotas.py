"""Kafka's connection quotas (max.connections.per.ip, its overrides, max.connections), sans-IO."""

from __future__ import annotations

import pytest

from oncelog.config import BrokerConfig, InvalidConfig
from oncelog.server.connection_quotas import ConnectionQuotas

UNLIMITED = 2**31 - 1


def quotas(
    *,
    per_ip: int = UNLIMITED,
    overrides: dict[str, int] | None = None,
    broker_max: int = UNLIMITED,
    listener_max: dict[str, int] | None = None,
    protected: str | None = None,
) -> ConnectionQuotas:
    return ConnectionQuotas(
        per_ip=per_ip,
        per_ip_overrides=overrides or {},
        broker_max=broker_max,
        listener_max=listener_max or {},
        protected_listener=protected,
    )


def test_an_address_over_its_limit_is_refused_until_one_of_its_connections_closes() -> None:
    q = quotas(per_ip=2)
    assert q.admit("PLAINTEXT", "127.0.0.1") is None
    assert q.admit("PLAINTEXT", "127.0.0.1") is None
    assert q.admit("PLAINTEXT", "127.0.0.1") == (
        "max.connections.per.ip",
        "address already has the configured maximum of 2 connections",
    )
    assert q.admit("PLAINTEXT", "127.0.0.2") is None  # another address has its own count
    q.release("PLAINTEXT", "127.0.0.1")
    assert q.admit("PLAINTEXT", "127.0.0.1") is None
    assert q.total == 3 and q.by_ip == {"127.0.0.1": 2, "127.0.0.2": 1}


def test_an_override_replaces_the_default_for_its_address() -> None:
    q = quotas(per_ip=0, overrides={"127.0.0.5": 2})
    assert q.admit("PLAINTEXT", "127.0.0.1") is not None  # 0: nobody else
    assert q.admit("PLAINTEXT", "127.0.0.5") is None
    assert q.admit("PLAINTEXT", "127.0.0.5") is None
    assert q.admit("PLAINTEXT", "127.0.0.5") is not None


def test_the_broker_limit_counts_every_listener() -> None:
    q = quotas(broker_max=2)
    assert q.admit("A", "127.0.0.1") is None
    assert q.admit("B", "127.0.0.2") is None
    refused = q.admit("A", "127.0.0.3")
    assert refused is not None and refused[0] == "max.connections"
    assert "the broker already has the configured maximum of 2" in refused[1]
    q.release("B", "127.0.0.2")
    assert q.admit("A", "127.0.0.3") is None


def test_the_inter_broker_listener_is_let_in_over_the_broker_limit_when_there_are_others() -> None:
    q = quotas(broker_max=1, protected="INTERNAL")
    assert q.admit("CLIENTS", "127.0.0.1") is None
    assert q.admit("INTERNAL", "127.0.0.11") is None
    assert q.admit("INTERNAL", "127.0.0.12") is None
    assert q.admit("CLIENTS", "127.0.0.2") is not None
    assert q.total == 3


def test_a_listener_limit_applies_to_that_listener_only_and_to_the_protected_one_too() -> None:
    q = quotas(listener_max={"CLIENTS": 1, "INTERNAL": 1}, protected="INTERNAL")
    assert q.admit("CLIENTS", "127.0.0.1") is None
    refused = q.admit("CLIENTS", "127.0.0.2")
    assert refused is not None and "listener CLIENTS already has" in refused[1]
    assert q.admit("OTHER", "127.0.0.2") is None
    assert q.admit("INTERNAL", "127.0.0.11") is None
    assert q.admit("INTERNAL", "127.0.0.12") is not None


def test_from_config_reads_kafkas_keys_and_resolves_host_names() -> None:
    config = BrokerConfig(
        {
            "listeners": "CLIENTS://127.0.0.1:0,INTERNAL://127.0.0.1:0",
            "listener.security.protocol.map": "CLIENTS:PLAINTEXT,INTERNAL:PLAINTEXT",
            "inter.broker.listener.name": "INTERNAL",
            "max.connections.per.ip": "7",
            "max.connections.per.ip.overrides": "localhost:9, 127.0.0.2:0",
            "max.connections": "100",
            "listener.name.clients.max.connections": "50",
        }
    )
    q = ConnectionQuotas.from_config(config)
    assert q.per_ip == 7
    assert q.per_ip_overrides == {"127.0.0.1": 9, "127.0.0.2": 0}
    assert q.broker_max == 100
    assert q.listener_max == {"CLIENTS": 50}
    assert q.protected_listener == "INTERNAL"


def test_a_single_listener_is_not_protected() -> None:
    q = ConnectionQuotas.from_config(BrokerConfig({"max.connections": "3"}))
    assert q.protected_listener is None and q.listener_max == {}


def test_zero_per_address_needs_overrides_as_in_kafka() -> None:
    with pytest.raises(InvalidConfig, match="can be set to zero only if"):
        BrokerConfig({"max.connections.per.ip": "0"})
    BrokerConfig({"max.connections.per.ip": "0", "max.connections.per.ip.overrides": "h:1"})


@pytest.mark.parametrize("bad", ["127.0.0.1", "127.0.0.1:x", ":3", "a:1,b"])
def test_overrides_that_are_not_host_count_pairs_are_refused(bad: str) -> None:
    with pytest.raises(InvalidConfig, match=r"max\.connections\.per\.ip\.overrides"):
        BrokerConfig({"max.connections.per.ip.overrides": bad})
