"""Authorization checks for the handlers, as Kafka's AuthHelper makes them.

Every check asks the broker's authorizer about the request's principal and client host; with
no authorizer configured (`authorizer.class.name` empty) everything is allowed. A handler
checks before it appends or changes anything, so nothing an unauthorised request sends is
stored, and answers with the typed error of the resource: TOPIC_, GROUP_, CLUSTER_ or
TRANSACTIONAL_ID_AUTHORIZATION_FAILED.
"""

from __future__ import annotations

from oncelog.broker.context import BrokerContext, RequestContext
from oncelog.errors import ErrorCode
from oncelog.security.acl import CLUSTER_NAME, AclBinding, AclOperation, ResourceType, sort_key
from oncelog.security.authorizer import Authorizer, all_operations, parse_super_users

Op = AclOperation
Res = ResourceType

#: The "not requested" answer of the authorized-operations fields (Integer.MIN_VALUE).
NOT_REQUESTED = -(2**31)

#: The error of a refused operation on each resource type.
DENIED_ERROR: dict[ResourceType, ErrorCode] = {
    Res.TOPIC: ErrorCode.topic_authorization_failed,
    Res.GROUP: ErrorCode.group_authorization_failed,
    Res.CLUSTER: ErrorCode.cluster_authorization_failed,
    Res.TRANSACTIONAL_ID: ErrorCode.transactional_id_authorization_failed,
}


def load_authorizer(broker: BrokerContext, from_image: bool) -> Authorizer | None:
    """The authorizer `authorizer.class.name` asks for (None when empty), with the ACLs of
    the metadata image when `from_image` (a single node; a cluster's come from etcd)."""
    config = broker.config
    if not config.get("authorizer.class.name"):
        return None
    users = config.get("super.users")
    stored = broker.replicas.metadata.acls if from_image else []
    return Authorizer(
        parse_super_users(users if isinstance(users, str) else ""),
        config.get("allow.everyone.if.no.acl.found") is True,
        (AclBinding.from_json(obj) for obj in stored),
    )


def _authorizer(ctx: RequestContext) -> Authorizer | None:
    # getattr: handler unit tests build their broker from SimpleNamespace without one.
    return getattr(ctx.broker, "authorizer", None)


def enabled(ctx: RequestContext) -> bool:
    """Whether requests are authorized at all (a handler may skip preparing its checks)."""
    return _authorizer(ctx) is not None


def authorize(
    ctx: RequestContext, op: AclOperation, resource_type: ResourceType, name: str
) -> bool:
    authorizer = _authorizer(ctx)
    if authorizer is None:
        return True
    return authorizer.authorize(ctx.principal, ctx.client_host, op, resource_type, name)


def authorize_cluster(ctx: RequestContext, op: AclOperation) -> bool:
    return authorize(ctx, op, Res.CLUSTER, CLUSTER_NAME)


def authorize_any(ctx: RequestContext, op: AclOperation, resource_type: ResourceType) -> bool:
    """Allowed `op` on at least one resource of the type (Kafka's authorizeByResourceType)."""
    authorizer = _authorizer(ctx)
    if authorizer is None:
        return True
    return authorizer.authorize_any(ctx.principal, ctx.client_host, op, resource_type)


def topic(ctx: RequestContext, op: AclOperation, name: str) -> bool:
    return authorize(ctx, op, Res.TOPIC, name)


def group(ctx: RequestContext, op: AclOperation, group_id: str) -> bool:
    return authorize(ctx, op, Res.GROUP, group_id)


def transactional_id(ctx: RequestContext, op: AclOperation, tid: str) -> bool:
    return authorize(ctx, op, Res.TRANSACTIONAL_ID, tid)


def authorized_operations(
    ctx: RequestContext, resource_type: ResourceType, name: str, requested: bool = True
) -> int:
    """The authorized-operations bit field Kafka answers (NOT_REQUESTED unless asked)."""
    if not requested:
        return NOT_REQUESTED
    authorizer = _authorizer(ctx)
    if authorizer is None:
        return all_operations(resource_type)
    return authorizer.authorized_operations(ctx.principal, ctx.client_host, resource_type, name)


def persist_local(broker: BrokerContext) -> None:
    """Write a single node's ACLs into its metadata image (one atomic, checksummed file)."""
    assert broker.authorizer is not None
    broker.replicas.metadata.set_acls(
        [b.to_json() for b in sorted(broker.authorizer.acls, key=sort_key)]
    )


def cluster_operations(ctx: RequestContext, requested: bool) -> int:
    """The cluster's authorized-operations bit field (Metadata, DescribeCluster): 0 for a
    principal that may not Describe the cluster, as Kafka answers."""
    if requested and not authorize_cluster(ctx, Op.DESCRIBE):
        return 0
    return authorized_operations(ctx, Res.CLUSTER, CLUSTER_NAME, requested)


#: ConfigResource types of DescribeConfigs / AlterConfigs (Kafka's ConfigResource.Type).
CONFIG_TOPIC = 2
CONFIG_BROKER = 4
CONFIG_BROKER_LOGGER = 8


def config_refusal(
    ctx: RequestContext, op: AclOperation, config_type: int, name: str
) -> ErrorCode | None:
    """Kafka's config checks: a topic's configs need `op` (DescribeConfigs / AlterConfigs) on
    the topic, a broker's on the cluster; the error to answer, or None."""
    if config_type == CONFIG_TOPIC:
        return None if topic(ctx, op, name) else ErrorCode.topic_authorization_failed
    if config_type in (CONFIG_BROKER, CONFIG_BROKER_LOGGER):
        return None if authorize_cluster(ctx, op) else ErrorCode.cluster_authorization_failed
    return None
