"""`oncelog configs --entity-type users|clients`: client quotas, as `kafka-configs.sh` sets and
shows them with --bootstrap-server (AlterClientQuotas, DescribeClientQuotas).

Entities are chosen as Kafka's tool chooses them: `--entity-type users|clients`, each paired in
command-line order with an `--entity-name NAME` or `--entity-default` (a type left without one
matches every named entity of that type when describing), both types together for a user's
client id; or the shorthand `--user NAME`, `--client NAME`, `--user-defaults`,
`--client-defaults`, which Kafka lists clients first.

Output, in Kafka's words: `Completed updating config for user alice.` (the first entity type,
singular, and its name: `client app1` for clients, `user alice` for a user's client id too) or
`Completed updating default config for users in the cluster.` (the first entity is a default);
`--describe` prints `Quota configs for user-principal 'alice', client-id 'app1' are
consumer_byte_rate=2048.0, producer_byte_rate=1024.0` per entity (`the default user-principal`
for a default; values as Java prints a double, so 10485760 is `1.048576E7`; nothing for an
entity without quotas), then for users alone, not defaults, `SCRAM credential configs for
user-principal 'alice' are SCRAM-SHA-256=iterations=8192` per user with SCRAM credentials.
"""

from __future__ import annotations

import argparse
import math
import re
from collections.abc import Iterator
from decimal import Decimal
from typing import Any

from oncelog.cli.command_config import UsageError
from oncelog.client.admin import Admin
from oncelog.client.connection import ClientError
from oncelog.client.quotas import (
    CLIENT_ID,
    MATCH_DEFAULT,
    MATCH_EXACT,
    MATCH_SPECIFIED,
    USER,
    QuotaEntity,
    alter_client_quotas,
    describe_client_quotas,
    describe_scram_users,
)
from oncelog.errors import error_name

QUOTA_TYPES = ("users", "clients")
#: Kafka's client and user quota keys (QuotaConfig.isClientOrUserQuotaConfig); the broker
#: decides which it enforces.
QUOTA_KEYS = (
    "producer_byte_rate",
    "consumer_byte_rate",
    "request_percentage",
    "controller_mutation_rate",
)
SCRAM_KEYS = ("SCRAM-SHA-256", "SCRAM-SHA-512")
#: What Java's Double.parseDouble reads (hexadecimal floats aside).
_JAVA_DOUBLE = re.compile(r"[+-]?(?:NaN|Infinity|(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?[fFdD]?)")
_PROTOCOL_TYPES = {"users": USER, "clients": CLIENT_ID}
_LABELS = {USER: "user-principal", CLIENT_ID: "client-id"}


class EntityName(argparse.Action):
    """`--entity-name NAME` and `--entity-default`, kept in command-line order in one list
    (None for the default), since Kafka pairs them in that order with the --entity-type
    options."""

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: Any,
        option_string: str | None = None,
    ) -> None:
        names = list(getattr(namespace, self.dest, None) or [])
        names.append(None if self.nargs == 0 else values)
        setattr(namespace, self.dest, names)


def add_shorthand(p: argparse.ArgumentParser) -> None:
    p.add_argument("--user", metavar="NAME", help="a user principal (--entity-type users ...)")
    p.add_argument("--client", metavar="NAME", help="a client id (--entity-type clients ...)")
    p.add_argument("--user-defaults", action="store_true", help="the default user's quotas")
    p.add_argument("--client-defaults", action="store_true", help="the default client id's quotas")


def selection(args: argparse.Namespace) -> tuple[list[str], list[str | None]]:
    """The entity types and the names paired with them, in Kafka's order (the shorthand after
    --entity-type, clients before users); a name of None is the default entity. UsageError
    for the combinations Kafka's tool refuses."""
    types = list(args.entity_type or [])
    names: list[str | None] = list(args.entity_names or [])
    flag_types: list[str] = []
    flag_names: list[str | None] = []
    for flag_type, name in (("clients", args.client), ("users", args.user)):
        if name is not None:
            flag_types.append(flag_type)
            flag_names.append(name)
    for flag_type, default in (("clients", args.client_defaults), ("users", args.user_defaults)):
        if default:
            flag_types.append(flag_type)
            flag_names.append(None)
    if flag_types and (types or names):
        raise UsageError(
            "--entity-{type,name,default} should not be used in conjunction with specific "
            "entity flags"
        )
    types += flag_types
    names += flag_names
    if not types:
        raise UsageError("At least one entity type must be specified")
    duplicates = sorted({t for t in types if types.count(t) > 1})
    if duplicates:
        raise UsageError(f"Duplicate entity type(s) specified: {','.join(duplicates)}")
    if len(types) > 1 and set(types) != set(QUOTA_TYPES):
        raise UsageError("Only 'users' and 'clients' entity types may be specified together")
    if len(names) > len(types):
        if len(types) == 1 and None in names and any(n is not None for n in names):
            raise UsageError("give --entity-name or --entity-default, not both")
        raise UsageError("More entity names specified than entity types")
    if types[0] in QUOTA_TYPES:
        # Kafka's tool reads an empty user or client name as the default entity.
        names = [n if n else None for n in names]
    return types, names


def parse_ops(
    types: list[str], changes: list[tuple[str, int, str | None]], set_op: int
) -> list[tuple[str, float | None]]:
    """--add-config / --delete-config as AlterClientQuotas ops: (key, value) to set, (key,
    None) to remove. Only quota keys; values are read as Java reads a double."""
    kind = "clients" if "clients" in types else "users"
    added = [k for k, op, _ in changes if op == set_op]
    deleted = [k for k, op, _ in changes if op != set_op]
    for verb, keys in (("added", added), ("deleted", deleted)):
        scram = [k for k in keys if k in SCRAM_KEYS]
        if scram and kind == "users":
            raise UsageError(
                f"SCRAM credentials ({', '.join(scram)}) are {verb} with `oncelog users alter`"
            )
        unexpected = [k for k in keys if k not in QUOTA_KEYS]
        if unexpected:
            raise UsageError(
                f"Only quota configs can be {verb} for '{kind}' using --bootstrap-server. "
                f"Unexpected config names: {', '.join(unexpected)}"
            )
    ops: list[tuple[str, float | None]] = []
    for key, op, value in changes:
        ops.append((key, parse_double(key, value or "") if op == set_op else None))
    return ops


def parse_double(key: str, text: str) -> float:
    """A quota value as Java's Double.parseDouble reads it; UsageError with Kafka's message."""
    stripped = text.strip()
    if not _JAVA_DOUBLE.fullmatch(stripped):
        raise UsageError(f"Cannot parse quota configuration value for {key}: {text}")
    return float(stripped.rstrip("fFdD") if stripped[-1:] in "fFdD" else stripped)


def java_double(value: float) -> str:
    """The value as Java's Double.toString prints it: `1024.0`, `0.5`, `1.048576E7`,
    `1.0E-4` (scientific below 10^-3 and from 10^7 on), shortest digits that read back."""
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "Infinity" if value > 0 else "-Infinity"
    sign = "-" if math.copysign(1.0, value) < 0 else ""
    magnitude = abs(value)
    if magnitude == 0:
        return f"{sign}0.0"
    _, digit_tuple, exponent = Decimal(repr(magnitude)).as_tuple()
    digits = "".join(map(str, digit_tuple)).rstrip("0") or "0"
    assert isinstance(exponent, int)
    # the value is d.ddd x 10^point
    point = len(digit_tuple) + exponent - 1
    if 1e-3 <= magnitude < 1e7:
        if point >= 0:
            whole = digits[: point + 1].ljust(point + 1, "0")
            fraction = digits[point + 1 :] or "0"
            return f"{sign}{whole}.{fraction}"
        return f"{sign}0.{'0' * (-point - 1)}{digits}"
    return f"{sign}{digits[0]}.{digits[1:] or '0'}E{point}"


def _entity(types: list[str], names: list[str | None]) -> QuotaEntity:
    return tuple((_PROTOCOL_TYPES[t], n) for t, n in zip(types, names, strict=True))


def _components(types: list[str], names: list[str | None]) -> list[tuple[str, int, str | None]]:
    out: list[tuple[str, int, str | None]] = []
    for i, entity_type in enumerate(types):
        protocol_type = _PROTOCOL_TYPES[entity_type]
        if i >= len(names):
            out.append((protocol_type, MATCH_SPECIFIED, None))
        elif names[i] is None:
            out.append((protocol_type, MATCH_DEFAULT, None))
        else:
            out.append((protocol_type, MATCH_EXACT, names[i]))
    return out


def entity_label(entity: QuotaEntity) -> str:
    """Kafka's `user-principal 'alice', client-id 'app1'` / `the default client-id`."""
    parts = dict(entity)
    out = []
    for entity_type in (USER, CLIENT_ID):
        if entity_type in parts:
            name = parts[entity_type]
            label = _LABELS[entity_type]
            out.append(f"the default {label}" if name is None else f"{label} '{name}'")
    return ", ".join(out)


def completed(types: list[str], names: list[str | None]) -> str:
    """Kafka's line after an alteration, which names only the first entity type."""
    if names[0] is None:
        return f"Completed updating default config for {types[0]} in the cluster."
    return f"Completed updating config for {types[0][:-1]} {names[0]}."


def alter(
    admin: Admin,
    types: list[str],
    names: list[str | None],
    ops: list[tuple[str, float | None]],
) -> None:
    """Kafka's order: the entity's current quotas first, a key to delete that is not set is
    `Invalid config(s): k`, then one AlterClientQuotas."""
    entity = _entity(types, names)
    found = describe_client_quotas(admin, _components(types, names))
    current = found[0][1] if found else {}
    missing = [k for k, v in ops if v is None and k not in current]
    if missing:
        raise ClientError(f"Invalid config(s): {','.join(missing)}")
    try:
        alter_client_quotas(admin, entity, ops)
    except ClientError as exc:
        raise ClientError(f"cannot alter the quotas of {entity_label(entity)}: {exc}") from None


def _order(entity: QuotaEntity) -> tuple[tuple[int, str], ...]:
    parts = dict(entity)
    key = []
    for entity_type in (USER, CLIENT_ID):
        if entity_type not in parts:
            key.append((0, ""))
        else:
            name = parts[entity_type]
            key.append((1, "") if name is None else (2, name))
    return tuple(key)


def describe(admin: Admin, types: list[str], names: list[str | None]) -> Iterator[str]:
    """Kafka's lines for the entities matched (each entity's keys sorted), then, for users
    alone and no default, their SCRAM credentials."""
    found = describe_client_quotas(admin, _components(types, names))
    for entity, values in sorted(found, key=lambda item: _order(item[0])):
        shown = ", ".join(f"{k}={java_double(v)}" for k, v in sorted(values.items()))
        yield f"Quota configs for {entity_label(entity)} are {shown}"
    if "clients" not in types and None not in names:
        for user in describe_scram_users(admin, [n for n in names if n is not None]):
            if user.error_code:
                reason = user.error_message or ""
                yield (
                    f"Error retrieving SCRAM credential configs for user-principal "
                    f"'{user.user}': {error_name(user.error_code)}: {reason}"
                )
                continue
            text = ", ".join(f"{m}=iterations={i}" for m, i in user.credentials)
            yield f"SCRAM credential configs for user-principal '{user.user}' are {text}"
