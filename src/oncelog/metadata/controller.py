"""The cluster controller as a state machine without IO: events in, partition writes out.

Theory of operation (Kafka's ZooKeeper-mode controller, with etcd in ZooKeeper's place):

1. One broker is the controller: it holds `controller` in etcd under its lease, and the key's
   create_revision is the controller epoch. The IO adapter makes every write conditional on
   that key still being ours, so a deposed controller's writes fail. This object does not
   know about leases or epochs: it is told `became_controller` and `lost_controller`.
2. Every broker, controller or not, keeps a `Controller` fed with what it watches in etcd:
   `broker_registered` / `broker_expired` (the lease-bound `brokers/<id>` keys),
   `topic_changed` / `topic_deleted` (`topics/<name>`) and `partition_changed` (each
   `partitions/<topic>/<p>` with the mod_revision it was read at). That is the view. A standby
   only keeps the view; so the broker that takes over starts from a warm one.
3. When active, each event recomputes the partitions it can touch with one pure function of
   (partition state, replicas, live brokers, unclean allowed): `reconcile` for partitions that
   exist, `initial_state` for those that do not yet. `became_controller` recomputes all.
4. The result is a list of intents, `PartitionWrite`: the new state, and the mod_revision
   of the state it was computed from (0: the key must not exist). The IO adapter applies each
   as a compare-and-swap on that revision. Nothing is assumed to have happened: the view only
   changes when the write comes back as a `partition_changed` event.
5. A CAS that fails (a leader changed its ISR meanwhile, or a later intent of ours won)
   comes back as `partition_changed` with the real state, and that partition is recomputed
   from it. Because the function is pure and idempotent, computing twice from the same
   revision is harmless: at most one of the two writes can apply.
6. Leaders change their own ISR (shrink and expand) with `isr_change`, also a CAS on the
   partition key; the controller only ever removes dead brokers from ISRs and elects leaders.
   Followers rejoin the ISR through their leader only.
7. Reassignments (KIP-455) live in the topic: a moving partition's replicas are its target
   and original ones together. `complete_reassignment` ends a move once every target replica
   is in the ISR; that write also carries the topic cut to the target, and the IO adapter
   applies both keys in one transaction (each on its own mod_revision).
8. `tick(now_ms)` runs the preferred-leader rebalance every
   `leader.imbalance.check.interval.seconds` (first 5 s after taking over, as Kafka), and
   `elect_leaders` answers the ElectLeaders API. Time comes in as `now_ms`; nothing here
   reads a clock, so tests drive it by hand.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from enum import Enum

from oncelog.config import BrokerConfig
from oncelog.errors import (
    ElectionNotNeeded,
    EligibleLeadersNotAvailable,
    InvalidPartitions,
    InvalidReplicaAssignment,
    InvalidReplicationFactor,
    InvalidRequest,
    KafkaError,
    NoReassignmentInProgress,
    PreferredLeaderNotAvailable,
    UnknownTopicOrPartition,
)
from oncelog.metadata.cluster_state import (
    NO_LEADER,
    BrokerRegistration,
    PartitionState,
    Reassignment,
    TopicAssignment,
)
from oncelog.metadata.placement import (
    add_partitions_start_index,
    assign_replicas,
    validate_manual_assignment,
)
from oncelog.types import TopicPartition

UNCLEAN_KEY = "unclean.leader.election.enable"


class ControllerRole(Enum):
    """STANDBY keeps the view; ACTIVE also answers events with writes."""

    STANDBY = "standby"
    ACTIVE = "active"


_ROLE_TRANSITIONS = {
    # STANDBY -> STANDBY: a lease lost while campaigning; there was nothing to give up.
    ControllerRole.STANDBY: {ControllerRole.ACTIVE, ControllerRole.STANDBY},
    # ACTIVE -> ACTIVE: elected again (after a reconnect); recompute everything.
    ControllerRole.ACTIVE: {ControllerRole.ACTIVE, ControllerRole.STANDBY},
}


class PartitionPhase(Enum):
    """Kafka's partition states, as derived from a PartitionState (None: no key yet)."""

    NEW = "new"
    ONLINE = "online"
    OFFLINE = "offline"
    RECOVERING = "recovering"  # unclean leader, KIP-704: the ISR cannot grow yet

    @classmethod
    def of(cls, state: PartitionState | None) -> PartitionPhase:
        if state is None:
            return cls.NEW
        if not state.has_leader:
            return cls.OFFLINE
        return cls.RECOVERING if state.leader_recovery else cls.ONLINE


#: What the controller may move a partition to. RECOVERING -> ONLINE is the leader's own
#: `isr_change(recovered=True)`; nothing moves a partition back to NEW.
CONTROLLER_TRANSITIONS = {
    PartitionPhase.NEW: {PartitionPhase.ONLINE, PartitionPhase.OFFLINE},
    PartitionPhase.ONLINE: {
        PartitionPhase.ONLINE,
        PartitionPhase.OFFLINE,
        PartitionPhase.RECOVERING,
    },
    PartitionPhase.OFFLINE: {
        PartitionPhase.ONLINE,
        PartitionPhase.OFFLINE,
        PartitionPhase.RECOVERING,
    },
    PartitionPhase.RECOVERING: {PartitionPhase.RECOVERING, PartitionPhase.OFFLINE},
}


class ControllerNotActive(RuntimeError):
    """An action only the active controller may take was asked of a standby."""


@dataclass(frozen=True, slots=True)
class PartitionWrite:
    """Intent: CAS `partitions/<topic>/<partition>` from `expected_mod_revision` (0: create)."""

    topic: str
    partition: int
    expected_mod_revision: int
    new_state: PartitionState
    reason: str
    #: A finished reassignment also rewrites the topic (its replicas cut to the target), in
    #: the same etcd transaction, on the topic's mod_revision.
    topic_update: TopicAssignment | None = None
    topic_mod_revision: int = 0

    @property
    def tp(self) -> TopicPartition:
        return TopicPartition(self.topic, self.partition)


@dataclass(frozen=True, slots=True)
class VersionedState:
    """A partition state as last read, with the mod_revision to CAS against (0: absent)."""

    state: PartitionState | None
    mod_revision: int


@dataclass(frozen=True, slots=True)
class ControllerSettings:
    """Kafka's broker keys, with Kafka's defaults."""

    unclean_leader_election_enable: bool = False
    auto_leader_rebalance_enable: bool = True
    leader_imbalance_check_interval_ms: int = 300_000  # leader.imbalance.check.interval.seconds
    leader_imbalance_per_broker_percentage: int = 10
    #: Kafka's first check after a failover comes 5 s later, then every interval.
    first_rebalance_delay_ms: int = 5_000

    @classmethod
    def from_broker_config(cls, config: BrokerConfig) -> ControllerSettings:
        """The broker keys of the same names (already checked against Kafka's bounds)."""
        return cls(
            unclean_leader_election_enable=config.get(UNCLEAN_KEY) is True,
            auto_leader_rebalance_enable=config.get("auto.leader.rebalance.enable") is True,
            leader_imbalance_check_interval_ms=1000
            * config.get_int("leader.imbalance.check.interval.seconds"),
            leader_imbalance_per_broker_percentage=config.get_int(
                "leader.imbalance.per.broker.percentage"
            ),
        )


# -- the pure rules ----------------------------------------------------------------------------


def initial_state(replicas: Sequence[int], live: Iterable[int]) -> PartitionState:
    """Rule 1: a new partition is led by its first live replica, with the live ones as ISR.

    With none alive it is offline with the whole assignment as ISR: it holds no data yet,
    so whichever replica comes back first may lead.
    """
    alive = set(live)
    isr = tuple(r for r in replicas if r in alive)
    if not isr:
        return PartitionState(NO_LEADER, 0, tuple(replicas), 0)
    return PartitionState(isr[0], 0, isr, 0)


def reconcile(
    state: PartitionState, replicas: Sequence[int], live: Iterable[int], *, unclean: bool
) -> tuple[PartitionState, str] | None:
    """The state this partition should have given who is alive, and why; None if it has it.

    Rules 2 and 3: dead brokers leave the ISR but the ISR never empties (its last members
    stay, so one of them can come back as leader); a leader that is dead or missing is
    replaced by the first replica, in assignment order, that is alive and in the ISR; failing
    that, with unclean election allowed, by the first live replica alone (RECOVERING);
    failing that the partition is offline.
    """
    alive = set(live)
    alive_isr = tuple(r for r in state.isr if r in alive)
    if state.leader in alive:
        if alive_isr == state.isr:
            return None
        gone = [r for r in state.isr if r not in alive]
        return _changed(state, state.leader, alive_isr), f"dead followers {gone} leave the ISR"
    clean = next((r for r in replicas if r in alive_isr), None)
    if clean is not None:
        return _changed(state, clean, alive_isr), f"leader {state.leader} -> {clean} (clean)"
    first_live = next((r for r in replicas if r in alive), None)
    if unclean and first_live is not None:
        why = f"leader {state.leader} -> {first_live} (unclean: no live ISR member)"
        return _changed(state, first_live, (first_live,), recovery=True), why
    if state.leader == NO_LEADER:
        return None
    return _changed(state, NO_LEADER, state.isr), f"leader {state.leader} died: offline"


def _changed(
    old: PartitionState, leader: int, isr: tuple[int, ...], *, recovery: bool | None = None
) -> PartitionState:
    """Rule 4: every change bumps the partition epoch, every leader change the leader epoch."""
    return PartitionState(
        leader,
        old.leader_epoch + (leader != old.leader),
        isr,
        old.partition_epoch + 1,
        old.leader_recovery if recovery is None else recovery,
    )


def preferred_election(
    state: PartitionState, replicas: Sequence[int], live: Iterable[int]
) -> PartitionState | KafkaError:
    """Move leadership to the preferred replica if it is alive and in the ISR."""
    preferred = replicas[0]
    if state.leader == preferred:
        return ElectionNotNeeded(f"{preferred} already leads")
    if preferred not in set(live) or preferred not in state.isr:
        return PreferredLeaderNotAvailable(
            f"preferred replica {preferred} is not alive and in the ISR {list(state.isr)}"
        )
    return _changed(state, preferred, state.isr)


def unclean_election(
    state: PartitionState, replicas: Sequence[int], live: Iterable[int]
) -> PartitionState | KafkaError:
    """ElectLeaders(UNCLEAN): a partition without a live leader gets one, clean if it can."""
    alive = set(live)
    if state.leader in alive:
        return ElectionNotNeeded(f"{state.leader} leads")
    step = reconcile(state, replicas, alive, unclean=True)
    if step is None or not step[0].has_leader:
        return EligibleLeadersNotAvailable(f"none of the replicas {list(replicas)} is alive")
    return step[0]


def isr_change(
    state: PartitionState,
    new_isr: Sequence[int],
    leader: int,
    replicas: Sequence[int],
    *,
    recovered: bool = False,
) -> PartitionState | KafkaError:
    """What a leader CASes to shrink or expand its ISR (Kafka's AlterPartition checks).

    Only the partition epoch moves. `recovered=True` ends KIP-704's RECOVERING, before
    which the ISR may not grow past the leader. Returns `state` itself when nothing changes
    (write nothing), an INVALID_REQUEST error (Kafka's answer) when refused.
    """
    isr = tuple(new_isr)
    if leader != state.leader:
        return InvalidRequest(f"broker {leader} is not the leader ({state.leader})")
    if not isr or len(set(isr)) != len(isr) or not set(isr) <= set(replicas):
        return InvalidRequest(f"invalid ISR {list(isr)} for replicas {list(replicas)}")
    if leader not in isr:
        return InvalidRequest(f"ISR {list(isr)} does not include the leader {leader}")
    recovering = state.leader_recovery and not recovered
    if recovering and len(isr) > 1:
        return InvalidRequest(f"ISR {list(isr)} cannot grow while the leader is recovering")
    if isr == state.isr and recovering == state.leader_recovery:
        return state
    return PartitionState(leader, state.leader_epoch, isr, state.partition_epoch + 1, recovering)


def complete_reassignment(
    state: PartitionState, move: Reassignment, live: Iterable[int]
) -> PartitionState | None:
    """Rule 6 (KIP-455): the state that ends a reassignment, or None while it must wait.

    A move ends once every target replica is in the ISR (a cancelled one, whose target is
    its original replicas, as soon as one of them is): the ISR keeps only target replicas,
    and a leader outside the target hands over to the first target replica in the ISR.
    Nothing ends while the partition has no leader or is recovering (KIP-704)."""
    if not state.has_leader or state.leader_recovery:
        return None
    cancelled = move.target == move.original
    if not cancelled and not set(move.target) <= set(state.isr):
        return None
    isr = tuple(r for r in state.isr if r in move.target)
    alive = set(live)
    leader = (
        state.leader
        if state.leader in move.target
        else next((r for r in move.target if r in isr and r in alive), NO_LEADER)
    )
    if leader == NO_LEADER:
        return None
    return _changed(state, leader, isr)


def unclean_allowed(assignment: TopicAssignment, default: bool) -> bool:
    """The topic's unclean.leader.election.enable, else the cluster's."""
    value = assignment.configs.get(UNCLEAN_KEY)
    return default if value is None else value.strip().lower() == "true"


# -- the controller ----------------------------------------------------------------------------


class Controller:
    """The view of the cluster and the rules applied to it; see the module docstring."""

    def __init__(self, settings: ControllerSettings | None = None) -> None:
        self.settings = settings or ControllerSettings()
        self.role = ControllerRole.STANDBY
        self._brokers: dict[int, BrokerRegistration] = {}
        self._broker_epochs: dict[int, int | None] = {}
        self._topics: dict[str, TopicAssignment] = {}
        #: The mod_revision each topic was read at (0: unknown), for a reassignment's end.
        self._topic_revisions: dict[str, int] = {}
        self._partitions: dict[TopicPartition, VersionedState] = {}
        self._next_rebalance_ms: int | None = None
        #: Leader changes seen while active (Kafka's LeaderElectionRateAndTimeMs count):
        #: a partition state with a live leader under a higher leader epoch.
        self.leader_elections = 0

    # -- the view ---------------------------------------------------------------------------

    @property
    def brokers(self) -> Mapping[int, BrokerRegistration]:
        return self._brokers

    @property
    def live_brokers(self) -> frozenset[int]:
        return frozenset(self._brokers)

    @property
    def topics(self) -> Mapping[str, TopicAssignment]:
        return self._topics

    def partition(self, tp: TopicPartition) -> VersionedState | None:
        return self._partitions.get(tp)

    @property
    def active(self) -> bool:
        return self.role is ControllerRole.ACTIVE

    def offline_partition_count(self) -> int:
        """Partitions of known topics whose state has no leader (OfflinePartitionsCount)."""
        return sum(
            1
            for tp, known in self._partitions.items()
            if tp.topic in self._topics and known.state is not None and not known.state.has_leader
        )

    # -- events -----------------------------------------------------------------------------

    def broker_registered(
        self, reg: BrokerRegistration, broker_epoch: int | None = None
    ) -> list[PartitionWrite]:
        """`brokers/<id>` was put; `broker_epoch` is the mod_revision of that put (each
        broker start puts its key once; a watch resync reads the same revision again).

        A live broker seen under a new epoch restarted within its lease: as Kafka's bounced
        brokers, that is a death then a return, so it leaves ISRs and partitions it led get
        a new leader epoch. Without epochs a registration of a live broker is a re-read.
        """
        node = reg.node_id
        known = self._broker_epochs.get(node)
        bounced = (
            node in self._brokers and None not in (known, broker_epoch) and known != broker_epoch
        )
        self._brokers[node] = reg
        self._broker_epochs[node] = known if broker_epoch is None else broker_epoch
        live = self.live_brokers
        passes = (live - {node}, live) if bounced else (live,)
        why = f"broker {node} {'restarted' if bounced else 'registered'}"
        return self._plan_all(self._partitions_of_broker(node), why, passes)

    def broker_expired(self, node_id: int) -> list[PartitionWrite]:
        self._brokers.pop(node_id, None)
        self._broker_epochs.pop(node_id, None)
        why = f"broker {node_id} expired"
        return self._plan_all(self._partitions_of_broker(node_id), why, (self.live_brokers,))

    def topic_changed(
        self, assignment: TopicAssignment, mod_revision: int = 0
    ) -> list[PartitionWrite]:
        self._topics[assignment.name] = assignment
        self._topic_revisions[assignment.name] = mod_revision
        tps = [TopicPartition(assignment.name, p) for p in range(assignment.partitions)]
        return self._plan_all(tps, f"topic {assignment.name} changed", (self.live_brokers,))

    def topic_deleted(self, name: str) -> list[PartitionWrite]:
        """Forget the assignment. Partition states stay in the view until their keys are
        reported deleted (the IO adapter deletes them with the topic, in one transaction)."""
        self._topics.pop(name, None)
        self._topic_revisions.pop(name, None)
        return []

    def partition_changed(
        self, topic: str, partition: int, state: PartitionState | None, mod_revision: int
    ) -> list[PartitionWrite]:
        """The key was read or watched at `mod_revision`; None: it does not exist."""
        tp = TopicPartition(topic, partition)
        if state is None:
            self._partitions.pop(tp, None)
        else:
            old = self._partitions.get(tp)
            if (
                self.active
                and state.has_leader
                and old is not None
                and old.state is not None
                and state.leader_epoch > old.state.leader_epoch
            ):
                self.leader_elections += 1
            self._partitions[tp] = VersionedState(state, mod_revision)
        return self._plan_all([tp], "partition changed", (self.live_brokers,))

    def became_controller(self, now_ms: int) -> list[PartitionWrite]:
        self._move_to(ControllerRole.ACTIVE)
        self._next_rebalance_ms = now_ms + self.settings.first_rebalance_delay_ms
        return self._plan_all(self._all_partitions(), "became controller", (self.live_brokers,))

    def lost_controller(self) -> list[PartitionWrite]:
        """The controller key is no longer ours: keep the view, stop writing."""
        self._move_to(ControllerRole.STANDBY)
        self._next_rebalance_ms = None
        return []

    def tick(self, now_ms: int) -> list[PartitionWrite]:
        """Rule 5: the periodic preferred-leader rebalance, when its time has come."""
        s = self.settings
        due = self._next_rebalance_ms
        if not self.active or not s.auto_leader_rebalance_enable or due is None or now_ms < due:
            return []
        self._next_rebalance_ms = now_ms + s.leader_imbalance_check_interval_ms
        return self._rebalance()

    # -- requests ---------------------------------------------------------------------------

    def elect_leaders(
        self, partitions: Iterable[TopicPartition], preferred: bool
    ) -> tuple[list[PartitionWrite], dict[TopicPartition, KafkaError | None]]:
        """ElectLeaders: the writes, and per partition None (election started) or the error."""
        if not self.active:
            raise ControllerNotActive("ElectLeaders goes to the active controller")
        writes: list[PartitionWrite] = []
        errors: dict[TopicPartition, KafkaError | None] = {}
        elect = preferred_election if preferred else unclean_election
        kind = "preferred" if preferred else "unclean"
        for tp in partitions:
            found = self._existing(tp)
            if found is None:
                errors[tp] = UnknownTopicOrPartition(f"no such partition {tp}")
                continue
            replicas, view, state = found
            result = elect(state, replicas, self.live_brokers)
            if isinstance(result, KafkaError):
                errors[tp] = result
                continue
            errors[tp] = None
            why = f"{kind} election requested: leader {state.leader} -> {result.leader}"
            writes.append(self._write(tp, view, result, why))
        return writes, errors

    def reassign(
        self,
        name: str,
        targets: Mapping[int, Sequence[int] | None],
        *,
        allow_replication_factor_change: bool = True,
    ) -> tuple[TopicAssignment | None, dict[int, KafkaError | None]]:
        """AlterPartitionReassignments for one topic: the assignment to write (None when
        nothing changes) and each partition's outcome. A target of None cancels the
        partition's move: it goes back to its original replicas. A new target while a move
        is in progress replaces it; the original replicas stay those before the first."""
        current = self._topics.get(name)
        if current is None:
            missing = UnknownTopicOrPartition(f"Topic {name} does not exist.")
            return None, dict.fromkeys(targets, missing)
        replicas = list(current.replicas)
        moves = dict(current.reassignments)
        outcome: dict[int, KafkaError | None] = {}
        for p, asked in targets.items():
            if not 0 <= p < current.partitions:
                outcome[p] = UnknownTopicOrPartition(f"Partition {name}-{p} does not exist.")
                continue
            move = moves.get(p)
            if asked is None:
                if move is None:
                    outcome[p] = NoReassignmentInProgress(
                        f"Partition {name}-{p} has no ongoing reassignment."
                    )
                    continue
                target = move.original
            else:
                try:
                    validate_manual_assignment([asked], self.live_brokers)
                except KafkaError as exc:
                    outcome[p] = exc
                    continue
                target = tuple(asked)
            original = move.original if move is not None else replicas[p]
            if not allow_replication_factor_change and len(target) != len(original):
                outcome[p] = InvalidReplicationFactor(
                    f"The replication factor is changed from {len(original)} to {len(target)}"
                )
                continue
            outcome[p] = None
            if move is None and set(target) == set(replicas[p]):
                # Nothing to add or remove (Kafka's rule too): only the order, at once.
                replicas[p] = target
                continue
            replicas[p] = target + tuple(r for r in replicas[p] if r not in target)
            moves[p] = Reassignment(target, original)
        if tuple(replicas) == current.replicas and moves == dict(current.reassignments):
            return None, outcome
        return replace(current, replicas=tuple(replicas), reassignments=moves), outcome

    def create_topic_assignment(
        self,
        name: str,
        partitions: int,
        replication_factor: int,
        configs: Mapping[str, str],
        start_index: int,
        shift: int,
        *,
        manual: Sequence[Sequence[int]] | None = None,
        topic_id: uuid.UUID | None = None,
        internal: bool = False,
    ) -> TopicAssignment:
        """CreateTopics: the assignment to write at `topics/<name>` (create-only)."""
        if manual is not None:
            validate_manual_assignment(manual, self.live_brokers)
            replicas = tuple(tuple(r) for r in manual)
        else:
            replicas = assign_replicas(
                self.live_brokers,
                partitions,
                replication_factor,
                start_index=start_index,
                next_replica_shift=shift,
            )
        return TopicAssignment(name, topic_id or uuid.uuid4(), replicas, configs, internal)

    def add_partitions(
        self, name: str, total: int, manual: Sequence[Sequence[int]] | None = None
    ) -> TopicAssignment:
        """CreatePartitions: the topic's assignment grown to `total` partitions, placed as
        Kafka's ZooKeeper mode does (the round robin resumes after the existing ones)."""
        current = self._topics.get(name)
        if current is None:
            raise UnknownTopicOrPartition(f"Topic {name} does not exist.")
        count = current.partitions
        if total <= count:
            raise InvalidPartitions(
                f"The number of partitions for a topic can only be increased. Topic {name} "
                f"currently has {count} partitions, {total} would not be an increase."
            )
        moving = current.reassignments.get(0)  # its replicas are two sets for now
        rf = len(moving.target if moving is not None else current.replicas[0])
        if manual is not None:
            if len(manual) != total - count:
                raise InvalidReplicaAssignment(
                    f"Increasing the number of partitions by {total - count} but "
                    f"{len(manual)} assignments provided."
                )
            validate_manual_assignment(manual, self.live_brokers, rf)
            added = tuple(tuple(r) for r in manual)
        else:
            start = add_partitions_start_index(self.live_brokers, current.replicas[0])
            added = assign_replicas(
                self.live_brokers,
                total - count,
                rf,
                start_index=start,
                next_replica_shift=start,
                first_partition=count,
            )
        return replace(current, replicas=current.replicas + added)

    # -- internals --------------------------------------------------------------------------

    def _move_to(self, role: ControllerRole) -> None:
        if role not in _ROLE_TRANSITIONS[self.role]:
            raise ControllerNotActive(f"controller cannot go from {self.role} to {role}")
        self.role = role

    def _all_partitions(self) -> list[TopicPartition]:
        return [
            TopicPartition(t.name, p) for t in self._topics.values() for p in range(t.partitions)
        ]

    def _partitions_of_broker(self, node_id: int) -> list[TopicPartition]:
        return [
            TopicPartition(t.name, p)
            for t in self._topics.values()
            for p, replicas in enumerate(t.replicas)
            if node_id in replicas
        ]

    def _existing(self, tp: TopicPartition) -> _Found | None:
        topic = self._topics.get(tp.topic)
        view = self._partitions.get(tp)
        if topic is None or not 0 <= tp.partition < topic.partitions or view is None:
            return None
        assert view.state is not None
        return topic.replicas[tp.partition], view, view.state

    def _plan_all(
        self, tps: Iterable[TopicPartition], why: str, passes: Sequence[frozenset[int]]
    ) -> list[PartitionWrite]:
        if not self.active:
            return []
        writes = (self._plan(tp, why, passes) for tp in tps)
        return [w for w in writes if w is not None]

    def _plan(
        self, tp: TopicPartition, why: str, passes: Sequence[frozenset[int]]
    ) -> PartitionWrite | None:
        """Rules 1-4 for one partition; `passes` are successive live sets (a restart is a
        death then a return)."""
        topic = self._topics.get(tp.topic)
        if topic is None or not 0 <= tp.partition < topic.partitions:
            return None
        replicas = topic.replicas[tp.partition]
        view = self._partitions.get(tp, VersionedState(None, 0))
        if view.state is None:
            new = initial_state(replicas, passes[-1])
            return self._write(tp, view, new, f"{why}: new partition")
        state, reasons = view.state, []
        registered = self._broker_epochs.get(state.leader) if state.leader >= 0 else None
        if (
            registered is not None
            and registered > view.mod_revision
            and len(passes) == 1
            and state.leader in passes[0]
        ):
            # The leader registered after this state was written: it restarted since it was
            # elected (a controller that missed the restart, say because it was that broker).
            # As for a bounce seen live: a death, then a return, so the epoch moves on.
            passes = (passes[0] - {state.leader}, passes[0])
            why = f"{why}: leader {state.leader} restarted since"
        unclean = unclean_allowed(topic, self.settings.unclean_leader_election_enable)
        for live in passes:
            step = reconcile(state, replicas, live, unclean=unclean)
            if step is not None:
                state, reason = step
                reasons.append(reason)
        if not reasons:
            return self._plan_reassignment(tp, topic, view, state)
        return self._write(tp, view, state, f"{why}: {'; '.join(reasons)}")

    def _plan_reassignment(
        self,
        tp: TopicPartition,
        topic: TopicAssignment,
        view: VersionedState,
        state: PartitionState,
    ) -> PartitionWrite | None:
        """Rule 6 for a partition the other rules leave as it is: end its move if it can."""
        move = topic.reassignments.get(tp.partition)
        revision = self._topic_revisions.get(tp.topic, 0)
        if move is None or revision <= 0:
            return None
        done = complete_reassignment(state, move, self.live_brokers)
        if done is None:
            return None
        replicas = list(topic.replicas)
        replicas[tp.partition] = move.target
        moves = {p: m for p, m in topic.reassignments.items() if p != tp.partition}
        cut = replace(topic, replicas=tuple(replicas), reassignments=moves)
        before = list(topic.replicas[tp.partition])
        why = (
            f"reassignment complete: replicas {before} -> {list(move.target)}, "
            f"leader {state.leader} -> {done.leader}"
        )
        write = self._write(tp, view, done, why)
        return replace(write, topic_update=cut, topic_mod_revision=revision)

    def _write(
        self, tp: TopicPartition, view: VersionedState, new: PartitionState, why: str
    ) -> PartitionWrite:
        before, after = PartitionPhase.of(view.state), PartitionPhase.of(new)
        if after not in CONTROLLER_TRANSITIONS[before]:
            raise AssertionError(f"{tp}: controller may not move {before} -> {after}")
        return PartitionWrite(tp.topic, tp.partition, view.mod_revision, new, why)

    def _rebalance(self) -> list[PartitionWrite]:
        """Kafka's checkAndTriggerAutoLeaderRebalance: per preferred broker, the share of
        its partitions led by another; above the threshold, elect it where it can lead."""
        by_preferred: dict[int, list[tuple[TopicPartition, _Found]]] = {}
        for tp in self._all_partitions():
            found = self._existing(tp)
            if found is not None:
                by_preferred.setdefault(found[0][0], []).append((tp, found))
        limit = self.settings.leader_imbalance_per_broker_percentage / 100
        writes: list[PartitionWrite] = []
        for broker, entries in sorted(by_preferred.items()):
            elsewhere = [(tp, f) for tp, f in entries if f[2].leader != broker]
            if len(elsewhere) / len(entries) <= limit:
                continue
            for tp, (replicas, view, state) in elsewhere:
                result = preferred_election(state, replicas, self.live_brokers)
                if isinstance(result, PartitionState):
                    why = f"leader rebalance: {state.leader} -> preferred {broker}"
                    writes.append(self._write(tp, view, result, why))
        return writes


_Found = tuple[tuple[int, ...], VersionedState, PartitionState]
"""A partition the view knows: its replicas, its versioned state and that state."""
