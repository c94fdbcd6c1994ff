"""Metadata in a cluster always lists the answering broker: when its registration expired
(etcd unreachable or paused past the session) it is still alive and answering, and an empty
broker list fails the whole response in librdkafka ("No brokers or topics in metadata"; its
DescribeCluster even aborts the process on it)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from oncelog.broker.cluster_view import ClusterView
from oncelog.broker.context import Node
from oncelog.broker.handlers import metadata
from oncelog.metadata.cluster_state import BrokerRegistration


def answer(view: ClusterView) -> dict[str, Any]:
    node = Node(1, "127.0.0.1", 9092)
    replicas = SimpleNamespace(metadata=SimpleNamespace(topics={}))
    ctx: Any = SimpleNamespace(
        broker=SimpleNamespace(node=node, cluster=view, replicas=replicas),
        api_version=12,
        listener_name="",
    )
    return metadata.handle(ctx, SimpleNamespace(topics=None))


def test_a_broker_whose_registration_expired_still_lists_itself() -> None:
    assert answer(ClusterView("c"))["brokers"] == [
        {"node_id": 1, "host": "127.0.0.1", "port": 9092, "rack": None}
    ]
    view = ClusterView("c", brokers={2: BrokerRegistration(2, "127.0.0.1", 9093)})
    assert [b["node_id"] for b in answer(view)["brokers"]] == [2, 1]


def test_a_registered_broker_is_listed_once() -> None:
    view = ClusterView(
        "c",
        brokers={
            1: BrokerRegistration(1, "127.0.0.1", 9092),
            2: BrokerRegistration(2, "127.0.0.1", 9093),
        },
    )
    assert [b["node_id"] for b in answer(view)["brokers"]] == [1, 2]


def test_without_a_known_controller_the_answering_broker_is_named() -> None:
    """librdkafka's admin client that reads controller -1 waits on that cached answer and a
    new cluster's first CreateTopics times out; any broker takes admin requests (as Kafka's
    KRaft brokers, which name a live broker)."""
    brokers = {2: BrokerRegistration(2, "127.0.0.1", 9093)}
    assert answer(ClusterView("c", brokers=brokers))["controller_id"] == 1
    assert answer(ClusterView("c", brokers=brokers, controller_id=2))["controller_id"] == 2
