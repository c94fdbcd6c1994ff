"""What this broker knows of the cluster from etcd: live brokers, controller, topics and
partition states. The server fills it from etcd's watch; handlers (Metadata,
DescribeCluster, CreateTopics) read it. Operations that must write etcd are asked for
through `ClusterOps`, whose answer arrives later (`PendingOp`, completed by the server).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from oncelog.broker.purgatory import Delayed
from oncelog.broker.quotas import Entity, QuotaOp
from oncelog.errors import ErrorCode, KafkaError
from oncelog.metadata.cluster_state import BrokerRegistration, PartitionState, TopicAssignment
from oncelog.metadata.placement import assign_replicas
from oncelog.security.acl import AclBinding
from oncelog.security.credentials import Change
from oncelog.types import TopicPartition


@dataclass(eq=False)
class PendingOp:
    """An etcd write in flight for a request; `key` wakes its waiter in the purgatory."""

    key: object
    done: bool = False
    error: KafkaError | None = None
    #: What the write or request answered, for ops that answer more than success.
    result: object = None

    def finish(self, error: KafkaError | None = None) -> None:
        self.done = True
        self.error = error


def answer_when_written(
    op: PendingOp,
    deadline_ms: int,
    response: Mapping[str, object],
    fail: Callable[[ErrorCode, str], None],
) -> Delayed:
    """Hold `response` until the etcd write `op` is done (or `deadline_ms`); if it failed
    or did not finish in time, `fail(code, message)` marks the entries it concerned first."""

    def attempt(force: bool) -> Mapping[str, object] | None:
        if not op.done and not force:
            return None
        if op.done and op.error is None:
            return response
        code = op.error.code if op.error is not None else ErrorCode.request_timed_out
        fail(code, str(op.error) if op.error is not None else "etcd did not confirm in time")
        return response

    return Delayed(attempt, deadline_ms, (op.key,))


class ClusterOps(Protocol):
    def create_topic(
        self,
        name: str,
        replicas: tuple[tuple[int, ...], ...],
        configs: Mapping[str, str],
        internal: bool,
    ) -> PendingOp: ...

    def verify_transaction(
        self, transactional_id: str, producer_id: int, epoch: int, partitions: list[TopicPartition]
    ) -> PendingOp:
        """KIP-890: ask the id's coordinator (AddPartitionsToTxn verify-only) whether the
        partitions are in the producer's open transaction; `result` maps each to its code."""
        ...

    def random_placement(self) -> tuple[int, int]:
        """The round robin's start index and replica shift for a new topic."""
        ...

    def delete_topic_atomically(self, name: str) -> PendingOp:
        """Delete the topic and its partition states in one etcd transaction
        (UNKNOWN_TOPIC_OR_PARTITION in the op if it is gone by then)."""
        ...

    def create_partitions(
        self,
        name: str,
        total: int,
        manual: Sequence[Sequence[int]] | None,
        validate_only: bool,
    ) -> PendingOp:
        """Grow a topic to `total` partitions; raises the KafkaError Kafka would answer
        (UNKNOWN_TOPIC_OR_PARTITION, INVALID_PARTITIONS, INVALID_REQUEST for a bad manual
        assignment, INVALID_REPLICATION_FACTOR) before writing anything."""
        ...

    def elect_leaders(
        self, partitions: Iterable[TopicPartition] | None, preferred: bool
    ) -> tuple[dict[TopicPartition, KafkaError | None], PendingOp] | None:
        """ElectLeaders on the active controller (None elsewhere): each partition's outcome
        (final once the op is done) and the op. `partitions=None`: all of them."""
        ...

    def reassign_partitions(
        self,
        name: str,
        targets: Mapping[int, Sequence[int] | None],
        allow_replication_factor_change: bool,
    ) -> tuple[dict[int, KafkaError | None], PendingOp]:
        """AlterPartitionReassignments for one topic (target None: cancel): each partition's
        outcome, final once the op that writes the topic is done."""
        ...

    def alter_topic_configs(
        self,
        name: str,
        change: Callable[[Mapping[str, str]], dict[str, str]],
        validate_only: bool = False,
    ) -> PendingOp:
        """Rewrite a topic's overrides to `change(current)` in etcd (CAS, recomputed when
        another change wins; `change` raises the KafkaError to answer). `validate_only`:
        only check `change` against etcd's current overrides."""
        ...

    def alter_broker_configs(
        self, entity: str, change: Callable[[Mapping[str, str]], dict[str, str]]
    ) -> PendingOp:
        """Set the dynamic broker configs of `entity` ("" the cluster default, else a broker
        id) to `change(current)` in etcd."""
        ...

    def write_client_quotas(self, changes: Mapping[Entity, Sequence[QuotaOp]]) -> PendingOp:
        """Apply each entity's ops to its quotas in etcd (delete an entity left without any);
        when done, this broker enforces them (every other broker's watch follows)."""
        ...

    def write_scram(self, changes: Sequence[Change]) -> PendingOp:
        """Put or delete the SCRAM credentials in etcd; when done, this broker's credentials
        have them (every other broker's watch follows)."""
        ...


    def write_acls(
        self, create: Sequence[AclBinding], delete: Sequence[AclBinding]
    ) -> PendingOp:
        """Put `create` and delete `delete` in etcd (one key per binding); when done, this
        broker's authorizer has them (every other broker's watch follows)."""
        ...


@dataclass
class ClusterView:
    cluster_id: str
    brokers: dict[int, BrokerRegistration] = field(default_factory=dict)
    controller_id: int = -1
    topics: dict[str, TopicAssignment] = field(default_factory=dict)
    partitions: dict[TopicPartition, PartitionState] = field(default_factory=dict)

    def live_broker_ids(self) -> list[int]:
        return sorted(self.brokers)

    def state(self, tp: TopicPartition) -> PartitionState | None:
        return self.partitions.get(tp)

    def place(
        self, ops: ClusterOps, partitions: int, replication_factor: int
    ) -> tuple[tuple[int, ...], ...]:
        """Kafka's round robin over the live brokers (INVALID_REPLICATION_FACTOR if too few)."""
        start, shift = ops.random_placement()
        return assign_replicas(
            self.live_broker_ids(),
            partitions,
            replication_factor,
            start_index=start,
            next_replica_shift=shift,
        )


def answer_after_writes(
    response: Mapping[str, object],
    pending: list[tuple[dict[str, Any], PendingOp]],
    deadline_ms: int,
    what: str,
) -> Delayed:
    """Hold an admin answer until its etcd writes are done: each entry gets its write's
    error, or REQUEST_TIMED_OUT when etcd did not confirm `what` by the deadline."""

    def attempt(force: bool) -> Mapping[str, object] | None:
        if not force and not all(op.done for _, op in pending):
            return None
        for entry, op in pending:
            if op.error is not None:
                entry.update(error_code=op.error.code, error_message=str(op.error))
            elif not op.done:
                entry.update(
                    error_code=ErrorCode.request_timed_out,
                    error_message=f"etcd did not confirm {what} in time",
                )
        return response

    return Delayed(attempt, deadline_ms, tuple(op.key for _, op in pending))
