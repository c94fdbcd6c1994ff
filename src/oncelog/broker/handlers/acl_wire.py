"""What CreateAcls, DescribeAcls and DeleteAcls share: the wire's codes as Kafka's enums, the
common refusals, and waiting for a cluster's etcd write of ACLs."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from enum import IntEnum
from typing import Any, TypeVar

from oncelog.broker import authz
from oncelog.broker.context import RequestContext
from oncelog.broker.purgatory import Delayed
from oncelog.errors import ErrorCode
from oncelog.security.acl import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    PatternType,
    PermissionType,
    ResourceType,
)

E = TypeVar("E", bound=IntEnum)
A = TypeVar("A", bound=Mapping[str, object])

#: How long a cluster's ACL answer waits for etcd.
WRITE_TIMEOUT_MS = 30_000


def code(kind: type[E], value: int) -> E:
    """The enum member of a wire code; an unknown code is UNKNOWN (0), which is refused."""
    try:
        return kind(int(value))
    except ValueError:
        return kind(0)


def refusal(ctx: RequestContext, op: AclOperation) -> tuple[ErrorCode, str] | None:
    """SECURITY_DISABLED without an authorizer; CLUSTER_AUTHORIZATION_FAILED without `op`
    (Alter to change ACLs, Describe to list them) on the cluster."""
    if ctx.broker.authorizer is None:
        return ErrorCode.security_disabled, "No Authorizer is configured."
    if not authz.authorize_cluster(ctx, op):
        return ErrorCode.cluster_authorization_failed, "Cluster authorization failed."
    return None


def filter_of(item: Any) -> AclBindingFilter:
    """A DescribeAcls request or DeleteAcls filter as an AclBindingFilter."""
    return AclBindingFilter(
        code(ResourceType, item.resource_type_filter),
        item.resource_name_filter,
        code(PatternType, getattr(item, "pattern_type_filter", PatternType.LITERAL)),
        item.principal_filter,
        item.host_filter,
        code(AclOperation, item.operation),
        code(PermissionType, item.permission_type),
    )


def apply(
    ctx: RequestContext,
    create: Sequence[AclBinding],
    delete: Sequence[AclBinding],
    answer: Callable[[ErrorCode | None, str | None], A],
) -> A | Delayed:
    """Store the change: a single node at once (its image), a cluster through etcd. `answer`
    builds the response given the write's error (None: stored)."""
    authorizer = ctx.broker.authorizer
    assert authorizer is not None
    ops = ctx.broker.cluster_ops
    if ops is None:
        for binding in create:
            authorizer.acls.add(binding)
        for binding in delete:
            authorizer.acls.remove(binding)
        if create or delete:
            authz.persist_local(ctx.broker)
        return answer(None, None)
    if not create and not delete:
        return answer(None, None)
    op = ops.write_acls(create, delete)
    deadline = ctx.broker.clock.monotonic_ms() + WRITE_TIMEOUT_MS

    def attempt(force: bool) -> A | None:
        if op.done:
            if op.error is not None:
                return answer(op.error.code, str(op.error))
            return answer(None, None)
        if not force:
            return None
        return answer(ErrorCode.request_timed_out, "etcd did not confirm the ACLs in time")

    return Delayed(attempt, deadline, (op.key,))
