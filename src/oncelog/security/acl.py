"""Kafka's ACL vocabulary and an index of ACL bindings.

Resource types, operations, permission and pattern types carry Kafka's wire codes
(`org.apache.kafka.common.resource.ResourceType`, `acl.AclOperation`, ...). A binding is a
resource pattern (type, name, LITERAL or PREFIXED) plus an entry (principal, host, operation,
ALLOW or DENY). `AclIndex` keeps them by resource type and name so that finding the ACLs that
apply to one resource costs a few dict lookups, never a scan of every ACL: literal names are
looked up directly (plus the `*` wildcard), prefixed patterns by each prefix length in use.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from enum import IntEnum
from typing import Any

#: The literal resource name that matches every resource of its type.
WILDCARD = "*"
#: The only name of the cluster resource.
CLUSTER_NAME = "kafka-cluster"
#: The principal and host of an entry that applies to everyone / from anywhere.
WILDCARD_PRINCIPAL = "User:*"
WILDCARD_HOST = "*"


class ResourceType(IntEnum):
    UNKNOWN = 0
    ANY = 1
    TOPIC = 2
    GROUP = 3
    CLUSTER = 4
    TRANSACTIONAL_ID = 5
    DELEGATION_TOKEN = 6
    USER = 7


class AclOperation(IntEnum):
    UNKNOWN = 0
    ANY = 1
    ALL = 2
    READ = 3
    WRITE = 4
    CREATE = 5
    DELETE = 6
    ALTER = 7
    DESCRIBE = 8
    CLUSTER_ACTION = 9
    DESCRIBE_CONFIGS = 10
    ALTER_CONFIGS = 11
    IDEMPOTENT_WRITE = 12
    CREATE_TOKENS = 13
    DESCRIBE_TOKENS = 14


class PermissionType(IntEnum):
    UNKNOWN = 0
    ANY = 1
    DENY = 2
    ALLOW = 3


class PatternType(IntEnum):
    UNKNOWN = 0
    ANY = 1
    MATCH = 2
    LITERAL = 3
    PREFIXED = 4


O = AclOperation  # noqa: E741 - short in the tables below
#: Kafka's AclEntry.supportedOperations: what `include_*_authorized_operations` reports.
SUPPORTED_OPERATIONS: dict[ResourceType, tuple[AclOperation, ...]] = {
    ResourceType.TOPIC: (
        O.READ, O.WRITE, O.CREATE, O.DESCRIBE, O.DELETE, O.ALTER, O.DESCRIBE_CONFIGS,
        O.ALTER_CONFIGS,
    ),
    ResourceType.GROUP: (O.READ, O.DESCRIBE, O.DELETE),
    ResourceType.CLUSTER: (
        O.CREATE, O.CLUSTER_ACTION, O.DESCRIBE_CONFIGS, O.ALTER_CONFIGS, O.IDEMPOTENT_WRITE,
        O.ALTER, O.DESCRIBE,
    ),
    ResourceType.TRANSACTIONAL_ID: (O.DESCRIBE, O.WRITE),
    ResourceType.DELEGATION_TOKEN: (O.DESCRIBE,),
    ResourceType.USER: (O.CREATE_TOKENS, O.DESCRIBE_TOKENS),
}  # fmt: skip

#: Kafka's implied operations: an ALLOW of any of these also allows the key.
IMPLIED_BY: dict[AclOperation, frozenset[AclOperation]] = {
    O.DESCRIBE: frozenset({O.READ, O.WRITE, O.DELETE, O.ALTER}),
    O.DESCRIBE_CONFIGS: frozenset({O.ALTER_CONFIGS}),
}


def operations_bitfield(ops: Iterable[AclOperation]) -> int:
    """Kafka's 32-bit field of operation codes (Utils.to32BitField), as a signed int32."""
    bits = 0
    for op in ops:
        bits |= 1 << int(op)
    return bits - (1 << 32) if bits >= 1 << 31 else bits


def _enum_name(value: IntEnum) -> str:
    """Kafka's toString: upper case with underscores (TRANSACTIONAL_ID, IDEMPOTENT_WRITE)."""
    return value.name


def parse_enum(kind: type[IntEnum], text: str) -> Any:
    """An enum member from Kafka's spellings: READ, Read, read, IdempotentWrite,
    idempotent-write, TransactionalId; ValueError naming the choices otherwise."""
    wanted = text.replace("-", "").replace("_", "").lower()
    for member in kind:
        if member.name.replace("_", "").lower() == wanted:
            return member
    choices = ", ".join(m.name for m in kind if m.name not in ("UNKNOWN",))
    raise ValueError(f"unknown {kind.__name__} {text!r} (one of {choices})")


@dataclass(frozen=True, slots=True)
class ResourcePattern:
    resource_type: ResourceType
    name: str
    pattern_type: PatternType


@dataclass(frozen=True, slots=True)
class AccessControlEntry:
    principal: str
    host: str
    operation: AclOperation
    permission: PermissionType


@dataclass(frozen=True, slots=True)
class AclBinding:
    pattern: ResourcePattern
    entry: AccessControlEntry

    def to_json(self) -> dict[str, Any]:
        p, e = self.pattern, self.entry
        return {
            "resource_type": _enum_name(p.resource_type),
            "name": p.name,
            "pattern_type": _enum_name(p.pattern_type),
            "principal": e.principal,
            "host": e.host,
            "operation": _enum_name(e.operation),
            "permission": _enum_name(e.permission),
        }

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> AclBinding:
        """The binding stored by `to_json`; ValueError/KeyError/TypeError if malformed."""
        binding = cls(
            ResourcePattern(
                ResourceType[str(obj["resource_type"])],
                _text(obj["name"]),
                PatternType[str(obj["pattern_type"])],
            ),
            AccessControlEntry(
                _text(obj["principal"]),
                _text(obj["host"]),
                AclOperation[str(obj["operation"])],
                PermissionType[str(obj["permission"])],
            ),
        )
        problem = validate_binding(binding)
        if problem is not None:
            raise ValueError(problem)
        return binding

    def key(self) -> str:
        """A stable id (hex digest of the canonical JSON): one etcd key per binding, so
        creating an existing ACL again is a no-op, as in Kafka."""
        canonical = json.dumps(self.to_json(), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(canonical.encode()).hexdigest()[:32]


def _text(value: object) -> str:
    if not isinstance(value, str):
        raise TypeError(f"not a string: {value!r}")
    return value


def validate_binding(binding: AclBinding) -> str | None:
    """Why Kafka refuses to create this binding (INVALID_REQUEST), or None."""
    p, e = binding.pattern, binding.entry
    if p.resource_type in (ResourceType.UNKNOWN, ResourceType.ANY):
        return f"Invalid resourceType {p.resource_type.name}"
    if p.pattern_type not in (PatternType.LITERAL, PatternType.PREFIXED):
        return f"Invalid patternType {p.pattern_type.name}"
    if e.operation in (AclOperation.UNKNOWN, AclOperation.ANY):
        return f"Invalid operation {e.operation.name}"
    if e.permission not in (PermissionType.ALLOW, PermissionType.DENY):
        return f"Invalid permissionType {e.permission.name}"
    if not p.name:
        return "Resource name should not be empty"
    if p.resource_type == ResourceType.CLUSTER and p.name != CLUSTER_NAME:
        return f"The only valid name for the CLUSTER resource is {CLUSTER_NAME}"
    colon = e.principal.find(":")
    if colon <= 0:
        return f"Could not parse principal from `{e.principal}` (no colon is present separating "
        "the principal type from the principal name)"
    if not e.host:
        return "Host should not be empty"
    return None


@dataclass(frozen=True, slots=True)
class AclBindingFilter:
    """Kafka's AclBindingFilter: None and the ANY members match everything; pattern type
    MATCH matches every pattern that applies to the named resource (the literal name, the
    `*` wildcard, every prefix of it)."""

    resource_type: ResourceType = ResourceType.ANY
    name: str | None = None
    pattern_type: PatternType = PatternType.ANY
    principal: str | None = None
    host: str | None = None
    operation: AclOperation = AclOperation.ANY
    permission: PermissionType = PermissionType.ANY

    def problem(self) -> str | None:
        """Why the filter is unusable (Kafka: INVALID_REQUEST), or None."""
        for value in (self.resource_type, self.pattern_type, self.operation, self.permission):
            if int(value) == 0:
                return f"Invalid filter: {type(value).__name__} UNKNOWN"
        return None

    def matches(self, binding: AclBinding) -> bool:
        return self.matches_pattern(binding.pattern) and self.matches_entry(binding.entry)

    def matches_pattern(self, p: ResourcePattern) -> bool:
        if self.resource_type not in (ResourceType.ANY, p.resource_type):
            return False
        if self.pattern_type not in (PatternType.ANY, PatternType.MATCH, p.pattern_type):
            return False
        if self.name is None:
            return True
        if self.pattern_type in (PatternType.ANY, p.pattern_type):
            return self.name == p.name
        if p.pattern_type == PatternType.LITERAL:
            return p.name in (self.name, WILDCARD)
        return self.name.startswith(p.name)

    def matches_entry(self, e: AccessControlEntry) -> bool:
        return (
            (self.principal is None or self.principal == e.principal)
            and (self.host is None or self.host == e.host)
            and self.operation in (AclOperation.ANY, e.operation)
            and self.permission in (PermissionType.ANY, e.permission)
        )


class _TypeIndex:
    """The ACLs of one resource type: literal[name][principal], prefixed[prefix][principal]."""

    __slots__ = ("count", "literal", "prefix_lengths", "prefixed")

    def __init__(self) -> None:
        self.literal: dict[str, dict[str, set[AclBinding]]] = {}
        self.prefixed: dict[str, dict[str, set[AclBinding]]] = {}
        #: How many prefixed names have each length (lookups try only lengths in use).
        self.prefix_lengths: dict[int, int] = {}
        self.count = 0

    def table(self, pattern_type: PatternType) -> dict[str, dict[str, set[AclBinding]]]:
        return self.literal if pattern_type == PatternType.LITERAL else self.prefixed


class AclIndex:
    """Every ACL binding, indexed for the authorizer's lookups."""

    def __init__(self, bindings: Iterable[AclBinding] = ()) -> None:
        self._types: dict[ResourceType, _TypeIndex] = {}
        self._all: set[AclBinding] = set()
        for binding in bindings:
            self.add(binding)

    def __len__(self) -> int:
        return len(self._all)

    def __contains__(self, binding: object) -> bool:
        return binding in self._all

    def __iter__(self) -> Iterator[AclBinding]:
        return iter(self._all)

    def add(self, binding: AclBinding) -> bool:
        """Add `binding`; False if it was there already."""
        if binding in self._all:
            return False
        self._all.add(binding)
        p = binding.pattern
        index = self._types.setdefault(p.resource_type, _TypeIndex())
        table = index.table(p.pattern_type)
        if p.pattern_type == PatternType.PREFIXED and p.name not in table:
            n = len(p.name)
            index.prefix_lengths[n] = index.prefix_lengths.get(n, 0) + 1
        by_principal = table.setdefault(p.name, {})
        by_principal.setdefault(binding.entry.principal, set()).add(binding)
        index.count += 1
        return True

    def remove(self, binding: AclBinding) -> bool:
        """Remove `binding`; False if it was not there."""
        if binding not in self._all:
            return False
        self._all.discard(binding)
        p = binding.pattern
        index = self._types[p.resource_type]
        table = index.table(p.pattern_type)
        by_principal = table[p.name]
        entries = by_principal[binding.entry.principal]
        entries.discard(binding)
        if not entries:
            del by_principal[binding.entry.principal]
        if not by_principal:
            del table[p.name]
            if p.pattern_type == PatternType.PREFIXED:
                n = len(p.name)
                index.prefix_lengths[n] -= 1
                if not index.prefix_lengths[n]:
                    del index.prefix_lengths[n]
        index.count -= 1
        if not index.count:
            del self._types[p.resource_type]
        return True

    def has_type(self, resource_type: ResourceType) -> bool:
        return resource_type in self._types

    def applying(self, resource_type: ResourceType, name: str) -> list[dict[str, set[AclBinding]]]:
        """The per-principal tables of every pattern that applies to the resource: its
        literal name, the literal `*` and each prefixed pattern that is a prefix of it."""
        index = self._types.get(resource_type)
        if index is None:
            return []
        found = []
        for literal in (name, WILDCARD):
            table = index.literal.get(literal)
            if table is not None:
                found.append(table)
            if name == WILDCARD:
                break
        for n in index.prefix_lengths:
            if n <= len(name):
                table = index.prefixed.get(name[:n])
                if table is not None:
                    found.append(table)
        return found

    def of_type(self, resource_type: ResourceType) -> Iterator[AclBinding]:
        index = self._types.get(resource_type)
        if index is None:
            return
        for table in (index.literal, index.prefixed):
            for by_principal in table.values():
                for entries in by_principal.values():
                    yield from entries

    def matching(self, f: AclBindingFilter) -> list[AclBinding]:
        """The bindings the filter matches (DescribeAcls, DeleteAcls), in a stable order.
        A filter naming one literal or MATCH resource uses the index, not a scan."""
        if f.name is not None and f.resource_type != ResourceType.ANY:
            if f.pattern_type == PatternType.MATCH:
                candidates: Iterable[AclBinding] = (
                    b
                    for table in self.applying(f.resource_type, f.name)
                    for entries in table.values()
                    for b in entries
                )
            else:
                index = self._types.get(f.resource_type)
                tables = [] if index is None else [index.literal, index.prefixed]
                candidates = (
                    b
                    for table in tables
                    for entries in table.get(f.name, {}).values()
                    for b in entries
                )
        elif f.resource_type != ResourceType.ANY:
            candidates = self.of_type(f.resource_type)
        else:
            candidates = self._all
        return sorted((b for b in candidates if f.matches(b)), key=sort_key)


def sort_key(b: AclBinding) -> tuple[int, str, int, str, str, int, int]:
    p, e = b.pattern, b.entry
    return (
        p.resource_type, p.name, p.pattern_type, e.principal, e.host, e.operation, e.permission
    )
