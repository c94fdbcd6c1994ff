"""Admin requests the operator tools need and confluent-kafka does not offer: producer
state, transactions and markers (KIP-664), offsets by isolation level. Requests go to the
node that can answer them (partition leader, transaction coordinator)."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import Any

from oncelog.client import describe_transactions
from oncelog.client.connection import ClientError, Connection, parse_bootstrap
from oncelog.client.describe_transactions import TransactionState
from oncelog.types import READ_COMMITTED, READ_UNCOMMITTED, TopicPartition

METADATA, LIST_OFFSETS, FIND_COORDINATOR = 3, 2, 10
DESCRIBE_PRODUCERS, DESCRIBE_TRANSACTIONS, LIST_TRANSACTIONS = 61, 65, 66
WRITE_TXN_MARKERS, OFFSET_FETCH, LIST_GROUPS, DESCRIBE_GROUPS = 27, 9, 16, 15


@dataclass(frozen=True, slots=True)
class ProducerInfo:
    tp: TopicPartition
    producer_id: int
    producer_epoch: int
    last_sequence: int
    last_timestamp: int
    coordinator_epoch: int
    txn_start_offset: int


class Admin:
    def __init__(self, bootstrap: str, timeout: float = 10.0) -> None:
        self.timeout = timeout
        self._bootstrap = Connection(*parse_bootstrap(bootstrap), timeout=timeout)
        self._nodes: dict[int, tuple[str, int]] = {}
        self._conns: dict[int, Connection] = {}
        self.leaders: dict[TopicPartition, int] = {}
        self.refresh_metadata()

    def close(self) -> None:
        for conn in self._conns.values():
            conn.close()
        self._bootstrap.close()

    def __enter__(self) -> Admin:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- routing -----------------------------------------------------------------------------

    def refresh_metadata(self, topics: list[str] | None = None) -> Any:
        body = {
            "topics": None if topics is None else [{"name": t, "topic_id": None} for t in topics],
            "allow_auto_topic_creation": False,
            "include_cluster_authorized_operations": False,
            "include_topic_authorized_operations": False,
        }
        response = self._bootstrap.call(METADATA, (1, 12), body)
        self._nodes = {b.node_id: (b.host, b.port) for b in response.brokers}
        for topic in response.topics:
            for p in topic.partitions:
                self.leaders[TopicPartition(topic.name, p.partition_index)] = p.leader_id
        return response

    def node(self, node_id: int) -> Connection:
        conn = self._conns.get(node_id)
        if conn is None:
            if node_id not in self._nodes:
                raise ClientError(f"unknown broker {node_id}")
            conn = self._conns[node_id] = Connection(*self._nodes[node_id], timeout=self.timeout)
        return conn

    def all_nodes(self) -> list[Connection]:
        return [self.node(n) for n in sorted(self._nodes)]

    def topics(self) -> list[str]:
        return sorted({tp.topic for tp in self.leaders})

    def by_leader(self, tps: list[TopicPartition]) -> dict[int, dict[str, list[int]]]:
        out: dict[int, dict[str, list[int]]] = defaultdict(lambda: defaultdict(list))
        for tp in tps:
            leader = self.leaders.get(tp)
            if leader is None or leader < 0:
                raise ClientError(f"no leader known for {tp}")
            out[leader][tp.topic].append(tp.partition)
        return out

    def coordinator(self, key: str, key_type: int) -> Connection:
        body = {"key": key, "key_type": key_type, "coordinator_keys": [key]}
        response = self._bootstrap.call(FIND_COORDINATOR, (1, 4), body)
        entry = response.coordinators[0] if hasattr(response, "coordinators") else response
        if int(entry.error_code) != 0:
            raise ClientError(f"no coordinator for {key!r}: error {int(entry.error_code)}")
        self._nodes.setdefault(entry.node_id, (entry.host, entry.port))
        return self.node(entry.node_id)

    # -- requests ----------------------------------------------------------------------------

    def describe_producers(self, tps: list[TopicPartition]) -> list[ProducerInfo]:
        out: list[ProducerInfo] = []
        for leader, topics in self.by_leader(tps).items():
            body = {"topics": [{"name": t, "partition_indexes": ps} for t, ps in topics.items()]}
            response = self.node(leader).call(DESCRIBE_PRODUCERS, (0, 0), body)
            for topic in response.topics:
                for p in topic.partitions:
                    if int(p.error_code) != 0:
                        raise ClientError(
                            f"{topic.name}-{p.partition_index}: error {int(p.error_code)}"
                        )
                    tp = TopicPartition(topic.name, p.partition_index)
                    out.extend(
                        ProducerInfo(
                            tp,
                            a.producer_id,
                            a.producer_epoch,
                            a.last_sequence,
                            a.last_timestamp,
                            a.coordinator_epoch,
                            a.current_txn_start_offset,
                        )
                        for a in p.active_producers
                    )
        return out

    def list_transactions(
        self, states: list[str] | None = None, pids: list[int] | None = None
    ) -> list[Any]:
        body = {
            "state_filters": states or [],
            "producer_id_filters": pids or [],
            "duration_filter": -1,
        }
        out: list[Any] = []
        for conn in self.all_nodes():
            out.extend(conn.call(LIST_TRANSACTIONS, (0, 1), body).transaction_states)
        return out

    def describe_transaction(self, txn_id: str) -> TransactionState:
        conn = self.coordinator(txn_id, 1)
        version = conn.version_for(DESCRIBE_TRANSACTIONS, (0, 0))
        frame, pos = conn.call_raw(DESCRIBE_TRANSACTIONS, version, {"transactional_ids": [txn_id]})
        return describe_transactions.decode(frame, pos)[0]

    def abort(self, producer: ProducerInfo) -> int:
        """Write an ABORT marker for `producer`'s open transaction on its partition."""
        body = {
            "markers": [
                {
                    "producer_id": producer.producer_id,
                    "producer_epoch": producer.producer_epoch,
                    "transaction_result": False,
                    "topics": [
                        {"name": producer.tp.topic, "partition_indexes": [producer.tp.partition]}
                    ],
                    "coordinator_epoch": producer.coordinator_epoch,
                }
            ]
        }
        leader = self.leaders[producer.tp]
        response = self.node(leader).call(WRITE_TXN_MARKERS, (0, 1), body)
        return int(response.markers[0].topics[0].partitions[0].error_code)

    def latest_offsets(
        self, tps: list[TopicPartition], read_committed: bool
    ) -> dict[TopicPartition, int]:
        out: dict[TopicPartition, int] = {}
        for leader, topics in self.by_leader(tps).items():
            body = {
                "replica_id": -1,
                "isolation_level": READ_COMMITTED if read_committed else READ_UNCOMMITTED,
                "topics": [
                    {
                        "name": t,
                        "partitions": [
                            {"partition_index": p, "timestamp": -1, "current_leader_epoch": -1}
                            for p in ps
                        ],
                    }
                    for t, ps in topics.items()
                ],
            }
            response = self.node(leader).call(LIST_OFFSETS, (2, 7), body)
            for topic in response.topics:
                for p in topic.partitions:
                    out[TopicPartition(topic.name, p.partition_index)] = p.offset
        return out
