"""DescribeCluster (60): cluster id, controller and brokers.

In a cluster: etcd's live registrations (a broker whose lease expired is not listed; none is
fenced) and the controller (-1 while there is none). A single node: itself, as controller.
`endpoint_type` 2 (KIP-919, the KRaft controllers) is Kafka's UNSUPPORTED_ENDPOINT_TYPE from
a broker; oncelog has no separate controllers.
"""

from __future__ import annotations

from oncelog.broker import authz
from oncelog.broker.context import RequestContext
from oncelog.broker.handlers.types import DescribeClusterAnswer, DescribeClusterRequest
from oncelog.errors import ErrorCode

BROKERS_ENDPOINT = 1
NOT_REQUESTED = -(2**31)


def handle(ctx: RequestContext, request: DescribeClusterRequest) -> DescribeClusterAnswer:
    broker = ctx.broker
    cluster = broker.cluster
    endpoint_type = int(getattr(request, "endpoint_type", BROKERS_ENDPOINT))
    response: DescribeClusterAnswer = {
        "throttle_time": 0,
        "error_code": ErrorCode.none,
        "error_message": None,
        "endpoint_type": endpoint_type,
        "cluster_id": cluster.cluster_id if cluster else broker.replicas.metadata.cluster_id,
        "controller_id": -1,
        "brokers": [],
        "cluster_authorized_operations": authz.cluster_operations(
            ctx, bool(getattr(request, "include_cluster_authorized_operations", False))
        ),
    }
    if endpoint_type != BROKERS_ENDPOINT:
        response["error_code"] = ErrorCode.unsupported_endpoint_type
        response["error_message"] = (
            "The request was sent to an endpoint of type BROKER, but we wanted "
            "an endpoint of type CONTROLLER"
        )
        return response
    if cluster is not None:
        brokers = [
            {
                "broker_id": b.node_id,
                "host": ep[0],
                "port": ep[1],
                "rack": b.rack,
                "is_fenced": False,
            }
            for _, b in sorted(cluster.brokers.items())
            if (ep := b.endpoint(ctx.listener_name)) is not None
        ]
        controller = cluster.controller_id
    else:
        node = broker.node
        host, port = node.endpoint(ctx.listener_name) or (node.host, node.port)
        brokers = [
            {
                "broker_id": node.node_id,
                "host": host,
                "port": port,
                "rack": None,
                "is_fenced": False,
            }
        ]
        controller = node.node_id
    response["controller_id"] = controller
    response["brokers"] = brokers
    return response
