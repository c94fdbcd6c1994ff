"""`oncelog acls`, modelled on `kafka-acls.sh`: add, remove and list ACLs through
confluent-kafka's AdminClient (CreateAcls, DeleteAcls, DescribeAcls).

Kafka's options and defaults: `--operation` defaults to All, hosts to `*`, the pattern type
to literal; `--producer` / `--consumer` expand to the ACLs a producer (Write, Describe,
Create on the topics; Write, Describe on `--transactional-id`; IdempotentWrite on the cluster
with `--idempotent`) or a consumer (Read, Describe on the topics, Read on the group) needs.
`--remove` without principals removes every ACL of the resources; it does not ask for
confirmation (`--force` is accepted for Kafka's command lines). `--command-config` names a
properties file of client settings (security.protocol, sasl.mechanism, sasl.username, ...).
"""

from __future__ import annotations

import argparse
from collections.abc import Iterable
from typing import Any

from oncelog.cli import command_config
from oncelog.cli.command_config import UsageError
from oncelog.cli.console import add_bootstrap, describe_error, exits_quietly, fail
from oncelog.security.acl import (
    CLUSTER_NAME,
    SUPPORTED_OPERATIONS,
    AclOperation,
    PatternType,
    ResourceType,
    parse_enum,
)

TIMEOUT_S = 15.0
#: confluent-kafka's name of Kafka's CLUSTER resource type (code 4).
_CK_TYPES = {"CLUSTER": "BROKER"}
Op = AclOperation


def add_parsers(sub: Any) -> None:
    p = sub.add_parser("acls", help="add, remove or list ACLs (like kafka-acls)")
    action = p.add_mutually_exclusive_group(required=True)
    action.add_argument("--add", action="store_true", help="add ACLs")
    action.add_argument("--remove", action="store_true", help="remove ACLs")
    action.add_argument("--list", action="store_true", help="list ACLs")
    p.add_argument("--topic", action="append", default=[], help="a topic (repeatable)")
    p.add_argument("--group", action="append", default=[], help="a consumer group (repeatable)")
    p.add_argument(
        "--transactional-id", action="append", default=[], help="a transactional id (repeatable)"
    )
    p.add_argument("--cluster", action="store_true", help="the cluster resource")
    p.add_argument(
        "--resource-pattern-type",
        default=None,
        choices=["literal", "prefixed", "any", "match"],
        help="literal (default) or prefixed; --list and --remove also take any and match",
    )
    p.add_argument("--allow-principal", action="append", default=[], help="e.g. User:alice")
    p.add_argument("--deny-principal", action="append", default=[], help="e.g. User:mallory")
    p.add_argument("--allow-host", action="append", default=[], help="default *")
    p.add_argument("--deny-host", action="append", default=[], help="default *")
    p.add_argument(
        "--operation",
        action="append",
        default=[],
        help="Read, Write, Create, Delete, Alter, Describe, ClusterAction, DescribeConfigs, "
        "AlterConfigs, IdempotentWrite, All (default All; repeatable)",
    )
    p.add_argument("--principal", help="with --list: only this principal's ACLs")
    p.add_argument("--producer", action="store_true", help="the ACLs a producer needs")
    p.add_argument("--consumer", action="store_true", help="the ACLs a consumer needs")
    p.add_argument("--idempotent", action="store_true", help="with --producer: IdempotentWrite")
    p.add_argument("--force", action="store_true", help="accepted; --remove never asks")
    command_config.add_command_config(p)
    add_bootstrap(p)
    p.set_defaults(func=run_acls)


def _resources(args: argparse.Namespace) -> list[tuple[ResourceType, str]]:
    found = [(ResourceType.TOPIC, t) for t in args.topic]
    found += [(ResourceType.GROUP, g) for g in args.group]
    found += [(ResourceType.TRANSACTIONAL_ID, t) for t in args.transactional_id]
    if args.cluster:
        found.append((ResourceType.CLUSTER, CLUSTER_NAME))
    return found


def _operations(args: argparse.Namespace) -> list[AclOperation]:
    try:
        ops = [parse_enum(AclOperation, o) for o in args.operation]
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    if any(o in (Op.ANY, Op.UNKNOWN) for o in ops):
        raise UsageError("--operation must name an operation (or All)")
    return ops


def _pattern_type(args: argparse.Namespace) -> PatternType:
    text = args.resource_pattern_type or "literal"
    pattern = PatternType[text.upper()]
    if args.add and pattern not in (PatternType.LITERAL, PatternType.PREFIXED):
        raise UsageError("--add takes --resource-pattern-type literal or prefixed")
    return pattern


def _roles(
    args: argparse.Namespace, resources: list[tuple[ResourceType, str]]
) -> list[tuple[ResourceType, str, AclOperation]]:
    """What --producer / --consumer mean, as in Kafka's AclCommand."""
    if args.operation:
        raise UsageError("--operation is not allowed with --producer or --consumer")
    topics = [name for rtype, name in resources if rtype == ResourceType.TOPIC]
    if not topics:
        raise UsageError("--producer and --consumer need --topic")
    out: list[tuple[ResourceType, str, AclOperation]] = []
    if args.producer:
        for name in topics:
            out += [(ResourceType.TOPIC, name, op) for op in (Op.WRITE, Op.DESCRIBE, Op.CREATE)]
        for name in args.transactional_id:
            out += [(ResourceType.TRANSACTIONAL_ID, name, op) for op in (Op.WRITE, Op.DESCRIBE)]
        if args.idempotent:
            out.append((ResourceType.CLUSTER, CLUSTER_NAME, Op.IDEMPOTENT_WRITE))
    if args.consumer:
        if not args.group:
            raise UsageError("--consumer needs --group")
        for name in topics:
            out += [(ResourceType.TOPIC, name, op) for op in (Op.READ, Op.DESCRIBE)]
        out += [(ResourceType.GROUP, name, Op.READ) for name in args.group]
    return out


def _wanted(args: argparse.Namespace) -> list[tuple[ResourceType, str, AclOperation]]:
    """(resource, operation) pairs to add or remove; --producer/--consumer expand."""
    resources = _resources(args)
    if args.producer or args.consumer:
        return _roles(args, resources)
    if not resources:
        raise UsageError("name a resource: --topic, --group, --transactional-id or --cluster")
    ops = _operations(args) or ([Op.ALL] if args.add else [])
    for rtype, _ in resources:
        for op in ops:
            if op != Op.ALL and op not in SUPPORTED_OPERATIONS[rtype]:
                allowed = ", ".join(o.name for o in SUPPORTED_OPERATIONS[rtype])
                raise UsageError(
                    f"ResourceType {rtype.name} only supports operations {allowed}, ALL"
                )
    if not ops:
        return [(rtype, name, Op.ANY) for rtype, name in resources]
    return [(rtype, name, op) for rtype, name in resources for op in ops]


def _entries(args: argparse.Namespace) -> list[tuple[str, str, bool]]:
    """(principal, host, allow) for each principal and host of the command line."""
    allow_hosts = args.allow_host or ["*"]
    deny_hosts = args.deny_host or ["*"]
    for principal in args.allow_principal + args.deny_principal:
        if ":" not in principal or principal.startswith(":"):
            raise UsageError(f"principal {principal!r} is not Type:name (e.g. User:alice)")
    entries = [(p, h, True) for p in args.allow_principal for h in allow_hosts]
    entries += [(p, h, False) for p in args.deny_principal for h in deny_hosts]
    return entries


@exits_quietly
def run_acls(args: argparse.Namespace) -> int:
    try:
        pattern = _pattern_type(args)
        settings = command_config.settings(args)
        if args.list:
            return _list(args, pattern, settings)
        wanted = _wanted(args)
        entries = _entries(args)
        if args.add and not entries:
            raise UsageError("--add needs --allow-principal or --deny-principal")
    except UsageError as exc:
        return fail(str(exc), 2)
    if args.add:
        return _add(settings, wanted, pattern, entries)
    return _remove(settings, wanted, pattern, entries)


def _ck() -> Any:
    """confluent_kafka.admin, imported when a command runs (its stubs are partial)."""
    import importlib

    return importlib.import_module("confluent_kafka.admin")


def _admin(settings: dict[str, str]) -> Any:
    try:
        return _ck().AdminClient(settings)
    except Exception as exc:  # librdkafka refuses unknown or bad settings
        raise UsageError(f"bad client settings: {exc}") from None


def _ck_type(ck: Any, rtype: ResourceType) -> Any:
    return ck.ResourceType[_CK_TYPES.get(rtype.name, rtype.name)]


def _binding(
    rtype: ResourceType,
    name: str,
    pattern: PatternType,
    op: AclOperation,
    principal: str,
    host: str,
    allow: bool,
) -> Any:
    ck = _ck()
    if rtype == ResourceType.CLUSTER:
        pattern = PatternType.LITERAL  # the cluster is only ever named literally
    return ck.AclBinding(
        _ck_type(ck, rtype),
        name,
        ck.ResourcePatternType[pattern.name],
        principal,
        host,
        ck.AclOperation[op.name],
        ck.AclPermissionType.ALLOW if allow else ck.AclPermissionType.DENY,
    )


def _filter(
    rtype: ResourceType | None,
    name: str | None,
    pattern: PatternType,
    op: AclOperation,
    principal: str | None,
    host: str | None,
    allow: bool | None,
) -> Any:
    ck = _ck()
    permission = (
        ck.AclPermissionType.ANY
        if allow is None
        else ck.AclPermissionType.ALLOW
        if allow
        else ck.AclPermissionType.DENY
    )
    build: Any = ck.AclBindingFilter
    return build(
        ck.ResourceType.ANY if rtype is None else _ck_type(ck, rtype),
        name,
        ck.ResourcePatternType[pattern.name],
        principal,
        host,
        ck.AclOperation[op.name],
        permission,
    )


def _add(
    settings: dict[str, str],
    wanted: list[tuple[ResourceType, str, AclOperation]],
    pattern: PatternType,
    entries: list[tuple[str, str, bool]],
) -> int:
    from confluent_kafka import KafkaException

    bindings = [
        _binding(rtype, name, pattern, op, principal, host, allow)
        for rtype, name, op in wanted
        for principal, host, allow in entries
    ]
    try:
        admin = _admin(settings)
        for future in admin.create_acls(bindings, request_timeout=TIMEOUT_S).values():
            future.result()
    except UsageError as exc:
        return fail(str(exc), 2)
    except KafkaException as exc:
        return fail(describe_error(exc))
    _print(bindings, "Adding ACLs for resource")
    return 0


def _remove(
    settings: dict[str, str],
    wanted: list[tuple[ResourceType, str, AclOperation]],
    pattern: PatternType,
    entries: list[tuple[str, str, bool]],
) -> int:
    from confluent_kafka import KafkaException

    if entries:
        filters = [
            _filter(rtype, name, pattern, op, principal, host, allow)
            for rtype, name, op in wanted
            for principal, host, allow in entries
        ]
    else:
        filters = [
            _filter(rtype, name, pattern, op, None, None, None) for rtype, name, op in wanted
        ]
    removed: list[Any] = []
    try:
        admin = _admin(settings)
        for future in admin.delete_acls(filters, request_timeout=TIMEOUT_S).values():
            removed += future.result()
    except UsageError as exc:
        return fail(str(exc), 2)
    except KafkaException as exc:
        return fail(describe_error(exc))
    _print(removed, "Removed ACLs for resource")
    return 0


def _list(args: argparse.Namespace, pattern: PatternType, settings: dict[str, str]) -> int:
    from confluent_kafka import KafkaException

    resources: list[tuple[ResourceType | None, str | None]] = list(_resources(args))
    if not resources:
        resources = [(None, None)]
        if args.resource_pattern_type is None:
            pattern = PatternType.ANY
    found: list[Any] = []
    try:
        admin = _admin(settings)
        for rtype, name in resources:
            acl_filter = _filter(rtype, name, pattern, Op.ANY, args.principal, None, None)
            found += admin.describe_acls(acl_filter, request_timeout=TIMEOUT_S).result()
        if not found and not _authorizer_configured(admin):
            return fail("SECURITY_DISABLED (54): No Authorizer is configured on the broker.")
    except UsageError as exc:
        return fail(str(exc), 2)
    except KafkaException as exc:
        return fail(describe_error(exc))
    _print(found, "Current ACLs for resource")
    return 0


def _authorizer_configured(admin: Any) -> bool:
    """Whether the broker has an authorizer, from its `authorizer.class.name`: librdkafka
    drops DescribeAcls' error code, so SECURITY_DISABLED reaches it as an empty listing.
    True when the broker does not say (the empty listing then stands)."""
    try:
        metadata = admin.list_topics(timeout=TIMEOUT_S)
        node = metadata.controller_id if metadata.controller_id >= 0 else min(metadata.brokers)
        resource = _ck().ConfigResource(_ck().ResourceType.BROKER, str(node))
        futures = admin.describe_configs([resource], request_timeout=TIMEOUT_S)
        entry = next(iter(futures.values())).result().get("authorizer.class.name")
    except Exception:  # no right to DescribeConfigs, an older broker: nothing to add
        return True
    return entry is None or bool(entry.value)


def _print(bindings: Iterable[Any], title: str) -> None:
    """Kafka's format: each resource pattern, then its entries indented."""
    grouped: dict[tuple[str, str, str], list[Any]] = {}
    for b in bindings:
        rtype = {v: k for k, v in _CK_TYPES.items()}.get(b.restype.name, b.restype.name)
        key = (rtype, b.name, b.resource_pattern_type.name)
        grouped.setdefault(key, []).append(b)
    for (rtype, name, pattern), items in grouped.items():
        print(
            f"{title} `ResourcePattern(resourceType={rtype}, name={name}, "
            f"patternType={pattern})`:"
        )
        for b in items:
            print(
                f" \t(principal={b.principal}, host={b.host}, operation={b.operation.name}, "
                f"permissionType={b.permission_type.name})"
            )
        print()
