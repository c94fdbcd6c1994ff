"""`oncelog configs`, modelled on `kafka-configs.sh`: describe and alter topic configs and
dynamic broker configs (one broker's, or the cluster default's with --entity-default).

Alterations are IncrementalAlterConfigs (SET for --add-config, DELETE for --delete-config),
as Kafka's tool sends them; `--describe` lists the dynamic configs (every config with
--all) with their synonyms, in Kafka's format. Requests go through `oncelog.client.configs`
because librdkafka cannot name the cluster-default broker resource.

`--entity-type users|clients` (or `--user`, `--client`, `--user-defaults`,
`--client-defaults`) sets and shows client quotas instead: AlterClientQuotas and
DescribeClientQuotas, in `configs_quotas.py`. `--command-config` is the other admin tools'
properties file (its SASL login and TLS settings).
"""

from __future__ import annotations

import argparse
import re
import ssl
from typing import Any

from oncelog.cli import configs_quotas
from oncelog.cli.command_config import (
    UsageError,
    add_command_config,
    protocol_security,
    settings,
)
from oncelog.cli.console import add_bootstrap, exits_quietly, fail
from oncelog.client.admin import Admin
from oncelog.client.configs import (
    BROKER,
    DELETE,
    SET,
    TOPIC,
    ConfigInfo,
    alter_configs,
    describe_configs,
)
from oncelog.client.connection import ClientError, SaslLogin

TIMEOUT_S = 10.0
#: Commas split entries except inside [...] (a list value: `cleanup.policy=[compact,delete]`).
_ENTRY_SPLIT = re.compile(r",(?![^\[]*\])")


def add_parsers(sub: Any) -> None:
    p = sub.add_parser(
        "configs",
        help="describe or alter topic and broker configs and client quotas (like kafka-configs)",
    )
    action = p.add_mutually_exclusive_group(required=True)
    action.add_argument("--describe", action="store_true", help="list configs")
    action.add_argument("--alter", action="store_true", help="change configs")
    p.add_argument(
        "--entity-type",
        action="append",
        choices=["topics", "brokers", "users", "clients"],
        help="topics, brokers (dynamic broker configs), users or clients (client quotas); "
        "users and clients together for a user's client id",
    )
    p.add_argument(
        "--entity-name",
        dest="entity_names",
        action=configs_quotas.EntityName,
        help="the topic, broker id, user principal or client id (one per --entity-type)",
    )
    p.add_argument(
        "--entity-default",
        dest="entity_names",
        action=configs_quotas.EntityName,
        nargs=0,
        help="the default entity instead of a name: the cluster-wide default of dynamic "
        "broker configs, the default user or client id",
    )
    configs_quotas.add_shorthand(p)
    p.add_argument(
        "--add-config",
        help="k1=v1,k2=[v1,v2],... to set (a list value in square brackets)",
    )
    p.add_argument("--delete-config", help="k1,k2,... to remove (back to the default)")
    p.add_argument("--all", action="store_true", help="with --describe: every config")
    add_bootstrap(p)
    add_command_config(p)
    p.set_defaults(func=run_configs)


@exits_quietly
def run_configs(args: argparse.Namespace) -> int:
    try:
        types, names = configs_quotas.selection(args)
        changes = _changes(args) if args.alter else []
        sasl, tls = protocol_security(settings(args))
        if types[0] in configs_quotas.QUOTA_TYPES:
            return _run_quotas(args, types, names, changes, sasl, tls)
        resource_type, resource_names = _entities(args, types[0], names)
    except UsageError as exc:
        return fail(str(exc), 2)
    try:
        with Admin(args.bootstrap_server, timeout=TIMEOUT_S, sasl=sasl, tls=tls) as admin:
            if args.alter:
                name = resource_names[0] if resource_names else ""
                alter_configs(admin, resource_type, name, changes)
                print(_completed(resource_type, name))
                return 0
            if not resource_names:
                resource_names = (
                    admin.topics() if resource_type == TOPIC else [str(n) for n in admin.node_ids()]
                )
            for name in resource_names:
                _print_configs(
                    resource_type, name, describe_configs(admin, resource_type, name), args.all
                )
            return 0
    except (ClientError, OSError) as exc:
        return fail(str(exc))


def _run_quotas(
    args: argparse.Namespace,
    types: list[str],
    names: list[str | None],
    changes: list[tuple[str, int, str | None]],
    sasl: SaslLogin | None,
    tls: ssl.SSLContext | None,
) -> int:
    """Client quotas of users, client ids or both (UsageError for a bad command line)."""
    ops: list[tuple[str, float | None]] = []
    if args.alter:
        if len(names) != len(types):
            raise UsageError(
                "--entity-name or --entity-default must be specified with each --entity-type "
                "for --alter"
            )
        ops = configs_quotas.parse_ops(types, changes, SET)
    if args.all:
        raise UsageError("--all is for topics and brokers")
    try:
        with Admin(args.bootstrap_server, timeout=TIMEOUT_S, sasl=sasl, tls=tls) as admin:
            if args.alter:
                configs_quotas.alter(admin, types, names, ops)
                print(configs_quotas.completed(types, names))
                return 0
            for line in configs_quotas.describe(admin, types, names):
                print(line)
            return 0
    except (ClientError, OSError) as exc:
        return fail(str(exc))


def _entities(
    args: argparse.Namespace, entity_type: str, names: list[str | None]
) -> tuple[int, list[str]]:
    resource_type = TOPIC if entity_type == "topics" else BROKER
    if None in names:
        if resource_type == TOPIC:
            raise UsageError("--entity-default is only for --entity-type brokers")
        return resource_type, [""]
    if not names:
        if args.alter:
            raise UsageError("--alter needs --entity-name (or --entity-default for brokers)")
        return resource_type, []
    name = names[0]
    assert name is not None
    if resource_type == BROKER and not name.isdigit():
        raise UsageError(f"the broker entity name must be a broker id, not {name!r}")
    return resource_type, [name]


def _changes(args: argparse.Namespace) -> list[tuple[str, int, str | None]]:
    if not args.add_config and not args.delete_config:
        raise UsageError("--alter needs --add-config or --delete-config")
    changes: list[tuple[str, int, str | None]] = []
    for entry in _ENTRY_SPLIT.split(args.add_config or ""):
        if not entry.strip():
            continue
        key, sep, value = entry.partition("=")
        if not sep or not key.strip():
            raise UsageError(f"--add-config entries are key=value, not {entry!r}")
        value = value.strip()
        if value.startswith("[") and value.endswith("]"):
            value = value[1:-1]
        changes.append((key.strip(), SET, value))
    for key in (args.delete_config or "").split(","):
        if key.strip():
            changes.append((key.strip(), DELETE, None))
    keys = [k for k, _, _ in changes]
    if len(set(keys)) != len(keys):
        raise UsageError("a config appears more than once in --add-config / --delete-config")
    return changes


def _label(resource_type: int, name: str) -> str:
    if resource_type == TOPIC:
        return f"topic {name}"
    return "the default broker" if name == "" else f"broker {name}"


def _completed(resource_type: int, name: str) -> str:
    if resource_type == BROKER and name == "":
        return "Completed updating default config for brokers in the cluster."
    return f"Completed updating config for {_label(resource_type, name)}."


def _print_configs(resource_type: int, name: str, configs: list[ConfigInfo], every: bool) -> None:
    """Kafka's layout; without --all only the entity's own dynamic layer is listed."""
    if resource_type == BROKER and name == "":
        print(f"{'All' if every else 'Default'} configs for brokers in the cluster are:")
        own = "DYNAMIC_DEFAULT_BROKER_CONFIG"
    else:
        print(f"{'All' if every else 'Dynamic'} configs for {_label(resource_type, name)} are:")
        own = "DYNAMIC_TOPIC_CONFIG" if resource_type == TOPIC else "DYNAMIC_BROKER_CONFIG"
    for c in configs:
        if not every and c.source != own:
            continue
        synonyms = ", ".join(f"{source}:{n}={v}" for n, v, source in c.synonyms)
        value = c.value if c.value is not None else "null"
        print(f"  {c.name}={value} sensitive=false synonyms={{{synonyms}}}")
