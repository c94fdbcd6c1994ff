"""`oncelog configs` for client quotas, without a broker: entities chosen as kafka-configs.sh
pairs its options, values read and printed as Java reads and prints a double."""

from __future__ import annotations

import pytest

from oncelog.cli.command_config import UsageError
from oncelog.cli.configs_quotas import (
    completed,
    entity_label,
    java_double,
    parse_double,
    parse_ops,
    selection,
)
from oncelog.cli.main import build_parser

SET, DELETE = 0, 1


def chosen(*args: str) -> tuple[list[str], list[str | None]]:
    return selection(build_parser().parse_args(["configs", "--describe", *args]))


def test_names_pair_with_types_in_command_line_order() -> None:
    assert chosen("--entity-type", "users", "--entity-name", "alice") == (["users"], ["alice"])
    assert chosen("--entity-type", "users", "--entity-default") == (["users"], [None])
    assert chosen(
        "--entity-type", "users", "--entity-default", "--entity-type", "clients",
        "--entity-name", "app1",
    ) == (["users", "clients"], [None, "app1"])  # fmt: skip
    # A type without a name: every named entity of that type.
    assert chosen("--entity-type", "users", "--entity-name", "a", "--entity-type", "clients") == (
        ["users", "clients"],
        ["a"],
    )
    # Kafka reads an empty user or client name as the default.
    assert chosen("--entity-type", "clients", "--entity-name", "") == (["clients"], [None])
    assert chosen("--entity-type", "topics", "--entity-name", "t") == (["topics"], ["t"])


def test_shorthand_lists_clients_before_users() -> None:
    assert chosen("--user", "alice", "--client", "app1") == (
        ["clients", "users"],
        ["app1", "alice"],
    )
    assert chosen("--user-defaults", "--client", "app1") == (
        ["clients", "users"],
        ["app1", None],
    )
    assert chosen("--client-defaults") == (["clients"], [None])


@pytest.mark.parametrize(
    "args",
    [
        (),
        ("--entity-type", "users", "--user", "a"),
        ("--entity-type", "users", "--entity-type", "topics"),
        ("--client", "a", "--client-defaults"),
        ("--entity-type", "users", "--entity-name", "a", "--entity-default"),
    ],
)
def test_refused_selections(args: tuple[str, ...]) -> None:
    with pytest.raises(UsageError):
        chosen(*args)


def test_values_read_as_java_doubles() -> None:
    assert parse_double("k", "1024") == 1024.0
    assert parse_double("k", " 1.5e3 ") == 1500.0
    assert parse_double("k", "2048d") == 2048.0
    assert parse_double("k", ".5") == 0.5
    for bad in ("fast", "1_000", "", "0x10", "1,5"):
        with pytest.raises(UsageError, match="Cannot parse quota configuration value for k"):
            parse_double("k", bad)


def test_values_printed_as_java_doubles() -> None:
    cases = {
        1024.0: "1024.0",
        12.5: "12.5",
        0.001: "0.001",
        9999999.0: "9999999.0",
        1e7: "1.0E7",
        10485760.0: "1.048576E7",
        1e-4: "1.0E-4",
        2e9: "2.0E9",
        0.0: "0.0",
        -3.0: "-3.0",
        float("nan"): "NaN",
        float("inf"): "Infinity",
    }
    assert {v: java_double(v) for v in cases} == cases


def test_ops_take_only_quota_keys() -> None:
    ops = parse_ops(
        ["users"],
        [("producer_byte_rate", SET, "1024"), ("request_percentage", DELETE, None)],
        SET,
    )
    assert ops == [("producer_byte_rate", 1024.0), ("request_percentage", None)]
    with pytest.raises(UsageError, match="Only quota configs can be added for 'clients'"):
        parse_ops(["users", "clients"], [("retention.ms", SET, "1")], SET)
    with pytest.raises(UsageError, match="oncelog users alter"):
        parse_ops(["users"], [("SCRAM-SHA-256", SET, "[password=x]")], SET)


def test_kafkas_lines() -> None:
    assert completed(["users", "clients"], ["alice", "app1"]) == (
        "Completed updating config for user alice."
    )
    assert completed(["clients"], ["app1"]) == "Completed updating config for client app1."
    assert completed(["users"], [None]) == (
        "Completed updating default config for users in the cluster."
    )
    assert entity_label((("client-id", None), ("user", "alice"))) == (
        "user-principal 'alice', the default client-id"
    )
