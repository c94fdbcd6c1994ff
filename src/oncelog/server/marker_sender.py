"""Transaction markers to partition leaders, over WriteTxnMarkers (Kafka's
TransactionMarkerChannelManager, in short).

In a cluster the transaction coordinator hands a decided transaction's markers here. They are
grouped by each partition's current leader (this broker included) and sent as one
WriteTxnMarkers request per leader; a leader answers once its marker is replicated. The
coordinator hears `ok` only when every marker landed (or is no longer needed: the partition
is gone, or a newer producer epoch or coordinator already ended the transaction there); it
then persists Complete*. A failed attempt is retried after a short backoff (0.1 s doubling to
1 s, to the leaders of the moment) for as long as this broker coordinates the transaction in
the same epoch: the producer's next transaction waits until this one is complete. Markers are
idempotent on the partitions.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

from oncelog.broker.cluster_view import ClusterView
from oncelog.coordinator.txn import Marker
from oncelog.errors import ErrorCode
from oncelog.protocol.registry import ApiKey
from oncelog.server.inter_broker import BrokerChannel, ChannelSecurity, PeerUnavailable

log = logging.getLogger(__name__)

WRITE_TXN_MARKERS_VERSION = 1
RETRY_BACKOFF_S = 0.1
RETRY_BACKOFF_MAX_S = 1.0

#: Answers that mean the marker is not needed any more. Not UNKNOWN_TOPIC_OR_PARTITION: a
#: leader without the partition is retried, as Kafka does (a deleted topic is left out by
#: `_send`, from the cluster's metadata); taking it as settled would complete the transaction
#: with that partition still open, its last stable offset stuck below the transaction.
_SETTLED = {
    ErrorCode.none,
    ErrorCode.producer_fenced,
    ErrorCode.invalid_producer_epoch,
    ErrorCode.transaction_coordinator_fenced,
}


class TxnMarkerSender:
    def __init__(
        self, view: ClusterView, timeout_s: float, client_id: str, receive_buffer: int = -1
    ) -> None:
        """`receive_buffer`: SO_RCVBUF of its connections, as Kafka's marker sender takes
        socket.receive.buffer.bytes (-1: the OS's autotuning)."""
        self.view = view
        self.client_id = client_id
        self.timeout_s = timeout_s
        self.receive_buffer = receive_buffer
        self._channels: dict[int, BrokerChannel] = {}
        #: TLS / SASL to the peers' inter-broker listener (set by the server).
        self.security: ChannelSecurity | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    def send(
        self,
        txn_id: str,
        markers: list[Marker],
        done: Callable[[str, bool], None],
        coordinating: Callable[[], bool],
    ) -> None:
        """Send now (the caller waited until the decision was replicated) and retry while
        `coordinating()` says this broker still coordinates the transaction."""
        task = asyncio.get_running_loop().create_task(
            self._send_until_done(txn_id, markers, done, coordinating)
        )
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def stop(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        for channel in self._channels.values():
            channel.close()

    async def _send_until_done(
        self,
        txn_id: str,
        markers: list[Marker],
        done: Callable[[str, bool], None],
        coordinating: Callable[[], bool],
    ) -> None:
        backoff = RETRY_BACKOFF_S
        while not await self._send(markers):
            if not coordinating():
                done(txn_id, False)  # no longer this transaction's coordinator
                return
            # Kafka's marker channel retries at once too: a leader that was down comes back
            # (or moves) within seconds, and the producer's next transaction waits on this one.
            await asyncio.sleep(backoff)
            backoff = min(backoff * 2, RETRY_BACKOFF_MAX_S)
        done(txn_id, True)

    async def _send(self, markers: list[Marker]) -> bool:
        """One attempt to every current leader; True when every marker landed."""
        ok = True
        by_leader: dict[int, list[Marker]] = {}
        for marker in markers:
            if marker.tp.topic not in self.view.topics:
                continue  # deleted: nothing left to end
            state = self.view.partitions.get(marker.tp)
            if state is None or state.leader < 0:
                ok = False
                continue
            by_leader.setdefault(state.leader, []).append(marker)
        results = await asyncio.gather(
            *(self._send_to(leader, group) for leader, group in by_leader.items())
        )
        return ok and all(results)

    async def _send_to(self, leader: int, markers: list[Marker]) -> bool:
        registration = self.view.brokers.get(leader)
        if registration is None:
            return False
        channel = self._channels.get(leader)
        if channel is None or channel.moved(registration.host, registration.port):
            if channel is not None:
                channel.close()
            channel = BrokerChannel(
                leader,
                registration.host,
                registration.port,
                self.timeout_s,
                self.client_id,
                self.security,
                self.receive_buffer,
            )
            self._channels[leader] = channel
        try:
            response = await channel.call(
                ApiKey.WRITE_TXN_MARKERS, WRITE_TXN_MARKERS_VERSION, _request(markers)
            )
        except PeerUnavailable as exc:
            log.info("transaction markers to broker %d not sent: %s", leader, exc)
            return False
        ok = True
        for result in response.markers:
            for topic in result.topics:
                for p in topic.partitions:
                    if p.error_code not in _SETTLED:
                        log.info(
                            "marker for %s-%d on broker %d: %s",
                            topic.name,
                            p.partition_index,
                            leader,
                            ErrorCode(p.error_code).name,
                        )
                        ok = False
        return ok


def _request(markers: list[Marker]) -> dict[str, Any]:
    """One WriteTxnMarkers entry per (producer, epoch, result, coordinator epoch)."""
    grouped: dict[tuple[int, int, bool, int], dict[str, list[int]]] = {}
    for m in markers:
        key = (m.producer_id, m.producer_epoch, m.commit, m.coordinator_epoch)
        grouped.setdefault(key, {}).setdefault(m.tp.topic, []).append(m.tp.partition)
    return {
        "markers": [
            {
                "producer_id": pid,
                "producer_epoch": epoch,
                "transaction_result": commit,
                "topics": [
                    {"name": name, "partition_indexes": parts} for name, parts in topics.items()
                ],
                "coordinator_epoch": coordinator_epoch,
            }
            for (pid, epoch, commit, coordinator_epoch), topics in grouped.items()
        ]
    }
