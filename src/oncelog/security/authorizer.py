"""The ACL authorizer: may this principal, from this host, do this to that resource?

Kafka's StandardAuthorizer rules (and AclAuthorizer's, which agree on every decision here):

1. A principal named in `super.users` may do anything.
2. The ACLs that apply to a resource are those whose pattern matches it (its literal name,
   the literal `*`, any PREFIXED pattern that starts it) and whose entry names the principal
   or `User:*` and the client's host or `*`.
3. A DENY for the operation (or All) wins over every ALLOW. An ALLOW for the operation, for
   All, or for an operation that implies it (Read/Write/Delete/Alter imply Describe,
   AlterConfigs implies DescribeConfigs) allows it.
4. Nothing applies: allowed only when the resource has no ACLs at all (for anyone) and
   `allow.everyone.if.no.acl.found` is true; otherwise denied.

No IO: the server feeds the ACLs in (from the metadata image or etcd's watch).
"""

from __future__ import annotations

from collections.abc import Iterable

from oncelog.security.acl import (
    IMPLIED_BY,
    SUPPORTED_OPERATIONS,
    WILDCARD,
    WILDCARD_HOST,
    WILDCARD_PRINCIPAL,
    AclBinding,
    AclIndex,
    AclOperation,
    PatternType,
    PermissionType,
    ResourceType,
    operations_bitfield,
)


def parse_super_users(text: str) -> frozenset[str]:
    """Kafka's `super.users`: principals separated by semicolons (`User:admin;User:bob`)."""
    return frozenset(p.strip() for p in text.split(";") if p.strip())


class Authorizer:
    def __init__(
        self,
        super_users: Iterable[str] = (),
        allow_everyone_if_no_acl_found: bool = False,
        acls: Iterable[AclBinding] = (),
    ) -> None:
        self.super_users = frozenset(super_users)
        self.allow_everyone_if_no_acl_found = allow_everyone_if_no_acl_found
        self.acls = AclIndex(acls)

    def authorize(
        self,
        principal: str,
        host: str,
        operation: AclOperation,
        resource_type: ResourceType,
        name: str,
    ) -> bool:
        if principal in self.super_users:
            return True
        tables = self.acls.applying(resource_type, name)
        if not tables:
            return self.allow_everyone_if_no_acl_found
        implied = IMPLIED_BY.get(operation, frozenset())
        allowed = False
        for table in tables:
            for who in (principal, WILDCARD_PRINCIPAL):
                for binding in table.get(who, ()):
                    entry = binding.entry
                    if entry.host not in (host, WILDCARD_HOST):
                        continue
                    op = entry.operation
                    if entry.permission == PermissionType.DENY:
                        if op in (operation, AclOperation.ALL):
                            return False
                    elif op in (operation, AclOperation.ALL) or op in implied:
                        allowed = True
        return allowed

    def authorize_any(
        self, principal: str, host: str, operation: AclOperation, resource_type: ResourceType
    ) -> bool:
        """Kafka's authorizeByResourceType: may the principal do `operation` on at least one
        resource of the type? An ALLOW counts unless a DENY of the same principal set covers
        everything it names (a literal `*` DENY covers all)."""
        if principal in self.super_users:
            return True
        allows: list[AclBinding] = []
        deny_literal: set[str] = set()
        deny_prefixed: set[str] = set()
        for binding in self.acls.of_type(resource_type):
            entry = binding.entry
            if entry.principal not in (principal, WILDCARD_PRINCIPAL):
                continue
            if entry.host not in (host, WILDCARD_HOST):
                continue
            if entry.operation not in (operation, AclOperation.ALL):
                continue
            if entry.permission == PermissionType.DENY:
                target = deny_literal if binding.pattern.pattern_type == PatternType.LITERAL else (
                    deny_prefixed
                )
                target.add(binding.pattern.name)
            else:
                allows.append(binding)
        if WILDCARD in deny_literal:
            return False

        def prefix_denied(name: str) -> bool:
            return any(name.startswith(p) for p in deny_prefixed)

        for binding in allows:
            name = binding.pattern.name
            if binding.pattern.pattern_type == PatternType.LITERAL:
                if name == WILDCARD or (name not in deny_literal and not prefix_denied(name)):
                    return True
            elif not prefix_denied(name):
                return True
        return (
            self.allow_everyone_if_no_acl_found
            and not self.acls.has_type(resource_type)
        )

    def authorized_operations(
        self, principal: str, host: str, resource_type: ResourceType, name: str
    ) -> int:
        """Kafka's authorized-operations bit field of the resource for this principal."""
        return operations_bitfield(
            op
            for op in SUPPORTED_OPERATIONS[resource_type]
            if self.authorize(principal, host, op, resource_type, name)
        )


def all_operations(resource_type: ResourceType) -> int:
    """The bit field Kafka answers without an authorizer: every supported operation."""
    return operations_bitfield(SUPPORTED_OPERATIONS[resource_type])
