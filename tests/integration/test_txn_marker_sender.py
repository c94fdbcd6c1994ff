"""The transaction coordinator's marker sender against a real broker: a leader that answers
UNKNOWN_TOPIC_OR_PARTITION for a partition the cluster still has is retried (Kafka's
TransactionMarkerRequestCompletionHandler), or the transaction would complete without its
marker there and that partition's last stable offset would never pass it; a topic gone from
the cluster's metadata needs no marker."""

from __future__ import annotations

import asyncio
import os
import uuid

from oncelog.broker.cluster_view import ClusterView
from oncelog.coordinator.txn.coordinator import Marker
from oncelog.metadata.cluster_state import BrokerRegistration, PartitionState, TopicAssignment
from oncelog.server.marker_sender import TxnMarkerSender
from oncelog.types import TopicPartition
from tests.broker_process import BrokerProcess
from tests.integration.test_socket_buffers import socket_buffers

GHOST = TopicPartition("not-on-that-broker", 0)


def ghost_view(broker: BrokerProcess) -> tuple[ClusterView, Marker]:
    """A cluster view in which `broker` (as broker 7) leads GHOST, which it does not have,
    and a marker for GHOST."""
    view = ClusterView("cluster")
    view.brokers[7] = BrokerRegistration(7, "127.0.0.1", broker.port)
    view.topics[GHOST.topic] = TopicAssignment(GHOST.topic, uuid.uuid4(), ((7,),), {})
    view.partitions[GHOST] = PartitionState(7, 0, (7,), 0)
    return view, Marker(GHOST, producer_id=1000, producer_epoch=0, commit=True)


def test_an_unknown_partition_is_retried_unless_the_topic_is_gone(broker: BrokerProcess) -> None:
    view, marker = ghost_view(broker)

    async def attempts() -> tuple[bool, bool]:
        sender = TxnMarkerSender(view, 10.0, "test-markers")
        try:
            while_known = await sender._send([marker])  # the broker has no such partition
            del view.topics[GHOST.topic]  # deleted from the cluster
            once_gone = await sender._send([marker])
            return while_known, once_gone
        finally:
            await sender.stop()

    assert asyncio.run(attempts()) == (False, True)


def test_the_marker_senders_connections_get_the_receive_buffer(broker: BrokerProcess) -> None:
    """As Kafka's marker sender takes socket.receive.buffer.bytes for its connections."""
    view, marker = ghost_view(broker)
    mine = f"pid={os.getpid()},"

    async def buffers() -> list[int]:
        sender = TxnMarkerSender(view, 10.0, "test-markers", receive_buffer=40000)
        try:
            await sender._send([marker])  # connects, whatever the answer
            return [
                rb
                for _, _, process, rb, _ in socket_buffers(f"dport = :{broker.port}")
                if mine in process
            ]
        finally:
            await sender.stop()

    assert asyncio.run(buffers()) == [2 * 40000]  # Linux doubles a size that is set
