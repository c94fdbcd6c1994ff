"""What a handler sees: the request's identity and the broker's services."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NamedTuple

from oncelog.broker.fetch_session import FetchSessionCache
from oncelog.broker.metrics import BrokerMetrics
from oncelog.broker.quotas import ClientQuotas
from oncelog.security.credentials import ScramCredentials

if TYPE_CHECKING:
    from oncelog.broker.cluster_view import ClusterOps, ClusterView
    from oncelog.broker.group_runtime import GroupRuntime
    from oncelog.broker.replica_manager import ReplicaManager
    from oncelog.broker.txn_runtime import TxnRuntime
    from oncelog.clock import Clock
    from oncelog.config import BrokerConfig
    from oncelog.security.authorizer import Authorizer


#: The principal of a connection that did not authenticate (Kafka's KafkaPrincipal.ANONYMOUS).
ANONYMOUS = "User:ANONYMOUS"


@dataclass(frozen=True, slots=True)
class Node:
    """`host`/`port`: the inter-broker listener's advertised endpoint; `endpoints`: every
    listener's (name, host, port), which clients are answered from."""

    node_id: int
    host: str
    port: int
    endpoints: tuple[tuple[str, str, int], ...] = ()

    def endpoint(self, listener: str) -> tuple[str, int] | None:
        return listener_endpoint(self.host, self.port, self.endpoints, listener)


def listener_endpoint(
    host: str, port: int, endpoints: tuple[tuple[str, str, int], ...], listener: str
) -> tuple[str, int] | None:
    """A broker's endpoint on the listener a request came in on (Kafka answers Metadata,
    FindCoordinator and DescribeCluster so); None if it has no such listener. Without
    endpoints (an older registration) or a listener name, its one host and port."""
    if not endpoints or not listener:
        return host, port
    for name, ep_host, ep_port in endpoints:
        if name == listener:
            return ep_host, ep_port
    return None


@dataclass(slots=True)
class BrokerContext:
    """The services every handler may use (built once by the server's composition root)."""

    config: BrokerConfig
    clock: Clock
    replicas: ReplicaManager
    node: Node
    groups: GroupRuntime
    txns: TxnRuntime
    #: Incremental fetch sessions (KIP-227), which the replica manager also tells what moved.
    fetch_sessions: FetchSessionCache
    metrics: BrokerMetrics = field(default_factory=BrokerMetrics)
    #: In a cluster: what etcd says, and the writes to it handlers may ask for.
    cluster: ClusterView | None = None
    cluster_ops: ClusterOps | None = None
    #: The ACL authorizer (authorizer.class.name set), else None: everything is allowed.
    authorizer: Authorizer | None = None
    #: The SCRAM credentials SASL logins are checked against (the server's; Describe/
    #: AlterUserScramCredentials read and change them).
    scram: ScramCredentials = field(default_factory=ScramCredentials)
    #: Client quotas (AlterClientQuotas) and the rates they are enforced on.
    quotas: ClientQuotas = field(init=False)

    def __post_init__(self) -> None:
        """The metrics watch these services' scraped state from the start."""
        self.quotas = ClientQuotas(
            self.clock,
            window_num=self.config.get_int("quota.window.num"),
            window_size_ms=self.config.get_int("quota.window.size.seconds") * 1000,
        )
        self.metrics.attach(self)


class RequestContext(NamedTuple):
    """What a handler knows about its request. A NamedTuple, not a frozen dataclass: one is
    built per request, and a frozen dataclass's `__init__` sets each field through
    `object.__setattr__` (about 5x the cost, a measurable share of a one-message Produce)."""

    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    connection_id: str
    broker: BrokerContext
    client_host: str = ""
    #: Kafka's principal of the connection ("User:alice"); unauthenticated is User:ANONYMOUS.
    principal: str = ANONYMOUS
    #: The name of the listener the request came in on ("" when not known).
    listener_name: str = ""

    def response_class(self) -> type[Any]:
        from oncelog.protocol.codec import response_class

        return response_class(self.api_key, self.api_version)
