"""Admin requests the operator tools need and confluent-kafka does not offer: producer
state, transactions and markers (KIP-664), offsets by isolation level, log dirs with the
cleaner's state. Requests go to the node that can answer them (partition leader,
transaction coordinator)."""

from __future__ import annotations

import ssl
import threading
import time
from collections import defaultdict
from dataclasses import dataclass
from typing import Any

from oncelog.client import describe_transactions
from oncelog.client.connection import ClientError, Connection, SaslLogin, parse_bootstrap
from oncelog.client.describe_transactions import TransactionState
from oncelog.errors import error_name
from oncelog.types import READ_COMMITTED, READ_UNCOMMITTED, TopicPartition

METADATA, LIST_OFFSETS, FIND_COORDINATOR = 3, 2, 10
DESCRIBE_PRODUCERS, DESCRIBE_TRANSACTIONS, LIST_TRANSACTIONS = 61, 65, 66
WRITE_TXN_MARKERS, OFFSET_FETCH, LIST_GROUPS, DESCRIBE_GROUPS = 27, 9, 16, 15
DESCRIBE_LOG_DIRS = 35


@dataclass(frozen=True, slots=True)
class ProducerInfo:
    tp: TopicPartition
    producer_id: int
    producer_epoch: int
    last_sequence: int
    last_timestamp: int
    coordinator_epoch: int
    txn_start_offset: int


@dataclass(frozen=True, slots=True)
class TransactionListing:
    transactional_id: str
    #: The broker that answered ListTransactions: the transaction's coordinator.
    coordinator_id: int
    producer_id: int
    transaction_state: str


@dataclass(frozen=True, slots=True)
class LogDirInfo:
    """A partition's replica on its leader, from DescribeLogDirs."""

    tp: TopicPartition
    log_dir: str
    size: int
    offset_lag: int
    #: The cleaner's dirty ratio (oncelog's tag 10000); None: not compacted, or not oncelog.
    dirty_ratio: float | None
    #: Last cleaning, ms since the epoch (oncelog's tag 10001); None: unknown or none yet.
    last_clean_ms: int | None


@dataclass(frozen=True, slots=True)
class ReplicaLogInfo:
    """One replica in a broker's log dir, as DescribeLogDirs reports it."""

    tp: TopicPartition
    size: int
    offset_lag: int
    #: A future replica (the target of a move between log dirs, AlterReplicaLogDirs).
    is_future: bool
    #: oncelog's cleaner tags (see LogDirInfo); None when absent.
    dirty_ratio: float | None
    last_clean_ms: int | None


@dataclass(frozen=True, slots=True)
class LogDirDescription:
    """One log dir of one broker: its path, its error (0, or KAFKA_STORAGE_ERROR for an
    offline dir, which lists no replicas) and its replicas."""

    log_dir: str
    error_code: int
    replicas: tuple[ReplicaLogInfo, ...]


class Admin:
    def __init__(
        self,
        bootstrap: str,
        timeout: float = 10.0,
        sasl: SaslLogin | None = None,
        tls: ssl.SSLContext | None = None,
    ) -> None:
        """`sasl`: log in to every broker with it (a SASL listener), else connect anonymously;
        `tls`: connect to every broker with TLS (an SSL or SASL_SSL listener)."""
        self.timeout = timeout
        self._sasl = sasl
        self._tls = tls
        self._bootstrap = Connection(
            *parse_bootstrap(bootstrap), timeout=timeout, sasl=sasl, tls=tls
        )
        self._nodes: dict[int, tuple[str, int]] = {}
        self._conns: dict[int, Connection] = {}
        self._coordinators: dict[tuple[str, int], int] = {}
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
            conn = self._conns[node_id] = Connection(
                *self._nodes[node_id], timeout=self.timeout, sasl=self._sasl, tls=self._tls
            )
        return conn

    def any_node(self) -> Connection:
        """The broker this admin bootstrapped from: it answered, so any request any broker
        can answer (topic configs, the cluster default) goes there."""
        return self._bootstrap

    def all_nodes(self) -> list[Connection]:
        return [self.node(n) for n in sorted(self._nodes)]

    def node_ids(self) -> list[int]:
        """The brokers the last Metadata named (and coordinators found since)."""
        return sorted(self._nodes)

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

    def coordinator_id(self, key: str, key_type: int) -> int:
        """The node coordinating a group (key_type 0) or transactional id (1)."""
        cached = self._coordinators.get((key, key_type))
        if cached is not None:
            return cached
        body = {"key": key, "key_type": key_type, "coordinator_keys": [key]}
        response = self._bootstrap.call(FIND_COORDINATOR, (1, 4), body)
        entry = response.coordinators[0] if hasattr(response, "coordinators") else response
        if int(entry.error_code) != 0:
            raise ClientError(f"no coordinator for {key!r}: {error_name(int(entry.error_code))}")
        self._nodes.setdefault(entry.node_id, (entry.host, entry.port))
        self._coordinators[(key, key_type)] = int(entry.node_id)
        return int(entry.node_id)

    def coordinator(self, key: str, key_type: int) -> Connection:
        return self.node(self.coordinator_id(key, key_type))

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
                            f"cannot describe the producers of {topic.name}-{p.partition_index}: "
                            f"{error_name(int(p.error_code))}"
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
    ) -> list[TransactionListing]:
        body = {
            "state_filters": states or [],
            "producer_id_filters": pids or [],
            "duration_filter": -1,
        }
        out: list[TransactionListing] = []
        for node_id in sorted(self._nodes):
            response = self.node(node_id).call(LIST_TRANSACTIONS, (0, 1), body)
            if int(response.error_code) != 0:
                raise ClientError(
                    f"broker {node_id} cannot list transactions: "
                    f"{error_name(int(response.error_code))}"
                )
            out.extend(
                TransactionListing(
                    t.transactional_id, node_id, int(t.producer_id), t.transaction_state
                )
                for t in response.transaction_states
            )
        return out

    def describe_transaction(self, txn_id: str) -> TransactionState:
        conn = self.coordinator(txn_id, 1)
        version = conn.version_for(DESCRIBE_TRANSACTIONS, (0, 0))
        frame, pos = conn.call_raw(DESCRIBE_TRANSACTIONS, version, {"transactional_ids": [txn_id]})
        return describe_transactions.decode(frame, pos)[0]

    def abort(self, producer: ProducerInfo) -> int:
        """Write an ABORT marker for `producer`'s open transaction on its partition.

        A producer that never had a marker written reports coordinator epoch -1; like Kafka's
        tool we send 0 then, which is not above any epoch a real coordinator could have used.
        """
        body = {
            "markers": [
                {
                    "producer_id": producer.producer_id,
                    "producer_epoch": producer.producer_epoch,
                    "transaction_result": False,
                    "topics": [
                        {"name": producer.tp.topic, "partition_indexes": [producer.tp.partition]}
                    ],
                    "coordinator_epoch": max(producer.coordinator_epoch, 0),
                }
            ]
        }
        leader = self.leaders[producer.tp]
        response = self.node(leader).call(WRITE_TXN_MARKERS, (0, 1), body)
        return int(response.markers[0].topics[0].partitions[0].error_code)

    def describe_log_dirs(
        self, topics: list[str] | None = None, node_timeout: float | None = None
    ) -> dict[TopicPartition, LogDirInfo]:
        """Each partition's replica on its leader (all topics when `topics` is None), one
        DescribeLogDirs request per broker, all brokers at once; partitions no leader
        reported are left out. With `node_timeout`, a broker that cannot answer within it (one
        just killed, a stopped one) only leaves its partitions out, on its own connection;
        without, its error is raised (ClientError, OSError)."""
        out: dict[TopicPartition, LogDirInfo] = {}
        requests: dict[int, dict[str, list[int]] | None] = {}
        if topics is None:
            requests = dict.fromkeys(sorted(self._nodes))
        else:
            led = [tp for tp in self.leaders if tp.topic in topics and self.leaders[tp] >= 0]
            for node_id, wanted in self.by_leader(sorted(led)).items():
                requests[node_id] = dict(wanted)
        if node_timeout is None:
            answers = {n: self.broker_log_dirs(n, wanted) for n, wanted in requests.items()}
        else:
            answers = self._log_dirs_of_each(requests, node_timeout)
        for node_id, log_dirs in answers.items():
            for log_dir in log_dirs:
                if log_dir.error_code != 0:
                    continue  # an offline log dir (KAFKA_STORAGE_ERROR) lists no partitions
                for r in log_dir.replicas:
                    if self.leaders.get(r.tp) != node_id or r.is_future:
                        continue
                    out[r.tp] = LogDirInfo(
                        r.tp, log_dir.log_dir, r.size, r.offset_lag, r.dirty_ratio, r.last_clean_ms
                    )
        return out

    def _log_dirs_of_each(
        self, requests: dict[int, dict[str, list[int]] | None], node_timeout: float
    ) -> dict[int, list[LogDirDescription]]:
        """broker_log_dirs of every broker in `requests` concurrently, each on a connection of
        its own with `node_timeout`; the brokers that answered within about that time."""
        answers: dict[int, list[LogDirDescription]] = {}

        def ask(node_id: int, wanted: dict[str, list[int]] | None) -> None:
            host, port = self._nodes[node_id]
            try:
                conn = Connection(host, port, timeout=node_timeout, sasl=self._sasl, tls=self._tls)
            except (ClientError, OSError):
                return
            try:
                answers[node_id] = self._log_dirs_via(conn, node_id, wanted)
            except (ClientError, OSError):
                pass
            finally:
                conn.close()

        # Daemon threads: one stuck on a broker that does not answer never holds up the exit.
        threads = [
            threading.Thread(target=ask, args=(n, wanted), daemon=True)
            for n, wanted in requests.items()
            if n in self._nodes
        ]
        for thread in threads:
            thread.start()
        # A connection's timeout applies to its connect and to each of its two requests.
        deadline = time.monotonic() + 3 * node_timeout + 1
        for thread in threads:
            thread.join(max(0.0, deadline - time.monotonic()))
        return dict(answers)

    def broker_log_dirs(
        self, node_id: int, topics: dict[str, list[int]] | None = None
    ) -> list[LogDirDescription]:
        """One DescribeLogDirs to broker `node_id`: every log dir it has, with the replicas
        of `topics` (topic -> partitions; None: every replica) it holds in each."""
        return self._log_dirs_via(self.node(node_id), node_id, topics)

    @staticmethod
    def _log_dirs_via(
        conn: Connection, node_id: int, topics: dict[str, list[int]] | None
    ) -> list[LogDirDescription]:
        entries = None
        if topics is not None:
            entries = [{"topic": t, "partitions": ps} for t, ps in topics.items()]
        response = conn.call(DESCRIBE_LOG_DIRS, (1, 4), {"topics": entries})
        if int(getattr(response, "error_code", 0)) != 0:
            raise ClientError(
                f"broker {node_id} cannot describe its log dirs: "
                f"{error_name(int(response.error_code))}"
            )
        out: list[LogDirDescription] = []
        for result in response.results:
            replicas: list[ReplicaLogInfo] = []
            for topic in result.topics:
                for p in topic.partitions:
                    ratio = getattr(p, "dirty_ratio", -1.0)
                    cleaned = getattr(p, "last_clean_time_ms", -1)
                    replicas.append(
                        ReplicaLogInfo(
                            TopicPartition(topic.name, p.partition_index),
                            int(p.partition_size),
                            int(p.offset_lag),
                            bool(p.is_future_key),
                            None if ratio < 0 else float(ratio),
                            None if cleaned < 0 else int(cleaned),
                        )
                    )
            out.append(LogDirDescription(result.log_dir, int(result.error_code), tuple(replicas)))
        return out

    def latest_offsets(
        self, tps: list[TopicPartition], read_committed: bool
    ) -> dict[TopicPartition, int]:
        """End offsets (the LSO when `read_committed`); partitions without one are left out."""
        return self.list_offsets(tps, -1, read_committed)

    def list_offsets(
        self, tps: list[TopicPartition], timestamp: int, read_committed: bool = False
    ) -> dict[TopicPartition, int]:
        """ListOffsets of `timestamp` (-2 earliest, -1 latest, or a time) from each leader;
        partitions without a leader or answering an error are left out."""
        out: dict[TopicPartition, int] = {}
        led = [tp for tp in tps if self.leaders.get(tp, -1) >= 0]
        for leader, topics in self.by_leader(led).items():
            body = {
                "replica_id": -1,
                "isolation_level": READ_COMMITTED if read_committed else READ_UNCOMMITTED,
                "topics": [
                    {
                        "name": t,
                        "partitions": [
                            {
                                "partition_index": p,
                                "timestamp": timestamp,
                                "current_leader_epoch": -1,
                            }
                            for p in ps
                        ],
                    }
                    for t, ps in topics.items()
                ],
            }
            response = self.node(leader).call(LIST_OFFSETS, (2, 7), body)
            for topic in response.topics:
                for p in topic.partitions:
                    if int(p.error_code) == 0:
                        out[TopicPartition(topic.name, p.partition_index)] = int(p.offset)
        return out
