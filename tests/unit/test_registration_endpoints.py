"""Broker registrations with every listener's endpoint, and those of older brokers."""

from __future__ import annotations

import json

import pytest

from oncelog.broker.context import Node
from oncelog.metadata import cluster_state as cs


def test_endpoints_round_trip_and_lookup() -> None:
    reg = cs.BrokerRegistration(
        2, "10.0.0.2", 9094, None, (("PLAINTEXT", "h", 9092), ("SASL_SSL", "h2", 9093))
    )
    back = cs.BrokerRegistration.from_bytes(reg.to_bytes())
    assert back == reg
    assert back.endpoint("SASL_SSL") == ("h2", 9093)
    assert back.endpoint("INTERNAL") is None
    assert back.endpoint("") == ("10.0.0.2", 9094)


def test_an_older_registration_serves_every_listener() -> None:
    old = json.dumps({"version": 1, "node_id": 3, "host": "h", "port": 9092, "rack": None})
    reg = cs.BrokerRegistration.from_bytes(old.encode())
    assert reg.endpoints == ()
    assert reg.endpoint("SASL_SSL") == ("h", 9092)


def test_bad_endpoints_are_refused() -> None:
    bad = json.dumps(
        {"version": 1, "node_id": 3, "host": "h", "port": 1, "endpoints": [{"name": "X"}]}
    )
    with pytest.raises(cs.ClusterStateError):
        cs.BrokerRegistration.from_bytes(bad.encode())


def test_node_endpoint_of_a_listener() -> None:
    node = Node(1, "h", 1, (("A", "a", 10), ("B", "b", 20)))
    assert node.endpoint("B") == ("b", 20)
    assert node.endpoint("C") is None


def test_scram_keys_fit_any_user_name() -> None:
    key = cs.key_for_scram("a/b c=ü", "SCRAM-SHA-256")
    parsed = cs.parse_key(key)
    assert parsed.kind == cs.KeyKind.SCRAM
    with pytest.raises(cs.ClusterStateError):
        cs.key_for_scram("alice", "PLAIN")
