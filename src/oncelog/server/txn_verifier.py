"""KIP-890 verification across brokers: a partition leader asks a transaction's coordinator
whether its partitions are in the producer's open transaction (AddPartitionsToTxn v4,
verify-only), before it accepts the transaction's first batch there.

The coordinator of a transactional id is the leader of its `__transaction_state` partition,
found in the cluster view. The answer comes back as a `PendingOp` whose `result` maps each
partition to an error code; a coordinator that cannot be reached leaves `result` empty and
the produce answers a retriable error.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Hashable, Sequence

from oncelog.broker.cluster_view import ClusterView, PendingOp
from oncelog.coordinator.group.records import partition_for
from oncelog.errors import ErrorCode
from oncelog.protocol.registry import ApiKey
from oncelog.server.inter_broker import BrokerChannel, ChannelSecurity, PeerUnavailable
from oncelog.types import TopicPartition

log = logging.getLogger(__name__)

TXN_TOPIC = "__transaction_state"
ADD_PARTITIONS_TO_TXN_VERIFY_VERSION = 4


class TxnVerifier:
    def __init__(
        self,
        view: ClusterView,
        timeout_s: float,
        wake: Callable[[Sequence[Hashable]], None],
        client_id: str,
        receive_buffer: int = -1,
    ) -> None:
        """`receive_buffer`: SO_RCVBUF of its connections, as Kafka's AddPartitionsToTxn
        manager takes socket.receive.buffer.bytes (-1: the OS's autotuning)."""
        self.view = view
        self.client_id = client_id
        self.timeout_s = timeout_s
        self.receive_buffer = receive_buffer
        self.wake = wake
        self._channels: dict[int, BrokerChannel] = {}
        #: TLS / SASL to the peers' inter-broker listener (set by the cluster runtime).
        self.security: ChannelSecurity | None = None

    def verify(
        self, txn_id: str, producer_id: int, epoch: int, partitions: list[TopicPartition]
    ) -> PendingOp:
        op = PendingOp(key=("verify-txn", txn_id, producer_id, epoch, tuple(partitions)))
        asyncio.get_running_loop().create_task(
            self._verify(op, txn_id, producer_id, epoch, partitions)
        )
        return op

    def close(self) -> None:
        for channel in self._channels.values():
            channel.close()

    async def _verify(
        self,
        op: PendingOp,
        txn_id: str,
        producer_id: int,
        epoch: int,
        partitions: list[TopicPartition],
    ) -> None:
        try:
            op.result = await self._ask(txn_id, producer_id, epoch, partitions)
        finally:
            op.finish()
            self.wake([op.key])

    async def _ask(
        self, txn_id: str, producer_id: int, epoch: int, partitions: list[TopicPartition]
    ) -> dict[TopicPartition, ErrorCode]:
        unavailable = dict.fromkeys(partitions, ErrorCode.coordinator_not_available)
        channel = self._coordinator(txn_id)
        if channel is None:
            return unavailable
        by_topic: dict[str, list[int]] = {}
        for tp in partitions:
            by_topic.setdefault(tp.topic, []).append(tp.partition)
        body = {
            "transactions": [
                {
                    "transactional_id": txn_id,
                    "producer_id": producer_id,
                    "producer_epoch": epoch,
                    "verify_only": True,
                    "topics": [{"name": n, "partitions": ps} for n, ps in by_topic.items()],
                }
            ]
        }
        try:
            response = await channel.call(
                ApiKey.ADD_PARTITIONS_TO_TXN, ADD_PARTITIONS_TO_TXN_VERIFY_VERSION, body
            )
        except PeerUnavailable as exc:
            log.info("verifying transaction %s: %s", txn_id, exc)
            return unavailable
        if response.error_code != ErrorCode.none:
            return dict.fromkeys(partitions, ErrorCode(response.error_code))
        codes: dict[TopicPartition, ErrorCode] = {}
        for result in response.results_by_transaction:
            for topic in result.topic_results:
                for p in topic.results_by_partition:
                    tp = TopicPartition(topic.name, p.partition_index)
                    codes[tp] = ErrorCode(p.partition_error_code)
        return {tp: codes.get(tp, ErrorCode.coordinator_not_available) for tp in partitions}

    def _coordinator(self, txn_id: str) -> BrokerChannel | None:
        assignment = self.view.topics.get(TXN_TOPIC)
        if assignment is None:
            return None
        tp = TopicPartition(TXN_TOPIC, partition_for(txn_id, assignment.partitions))
        state = self.view.partitions.get(tp)
        registration = self.view.brokers.get(state.leader) if state is not None else None
        if registration is None:
            return None
        channel = self._channels.get(registration.node_id)
        if channel is None or channel.moved(registration.host, registration.port):
            if channel is not None:
                channel.close()
            channel = BrokerChannel(
                registration.node_id,
                registration.host,
                registration.port,
                self.timeout_s,
                self.client_id,
                self.security,
                self.receive_buffer,
            )
            self._channels[registration.node_id] = channel
        return channel
