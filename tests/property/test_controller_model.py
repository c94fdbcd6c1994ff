"""Model-based test of the cluster controller against a fake etcd that loses writes.

Hypothesis kills, revives and restarts brokers, lets leaders shrink and grow their ISRs
(and end an unclean leader's recovery), asks for elections and rebalances, and fails the
controller over to a fresh one fed from etcd. The fake IO layer applies a random subset of
the controller's writes as compare-and-swaps; every other write is dropped and the key's
real state is replayed to the controller as an event, as the real adapter does.

Partitions are also moved to other replicas and moves cancelled (KIP-455); the controller
ends a move in one write with the topic, which the fake applies only if neither key moved,
as one revision whose topic event the controller is told before the partition's (as the
real IO layer does).

Checked on every change etcd accepts: the leader is in the ISR or -1; the ISR is a
non-empty subset of the replicas; without unclean election a new leader was in the ISR it
replaced; epochs never go back, the partition epoch grows on every change and the leader
epoch on every leader change. Checked on every write: it is addressed to the revision the
controller was last told. A move ends only once every target replica is in the ISR (a
cancel at once), leaving an ISR of target replicas only. Checked once everything is
delivered: no online partition has a dead leader or dead ISR member, an offline one has no
live broker that could lead it, and no move that could end is left open.
"""

from __future__ import annotations

import uuid

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, precondition, rule

from oncelog.errors import KafkaError
from oncelog.metadata.cluster_state import BrokerRegistration, PartitionState, TopicAssignment
from oncelog.metadata.controller import (
    Controller,
    ControllerSettings,
    PartitionWrite,
    complete_reassignment,
    isr_change,
)
from oncelog.metadata.placement import assign_replicas
from oncelog.types import TopicPartition

BROKERS = (1, 2, 3, 4)
PARTITIONS = 4
TPS = [TopicPartition("t", p) for p in range(PARTITIONS)]
brokers = st.sampled_from(BROKERS)
partitions = st.sampled_from(TPS)


def reg(node: int) -> BrokerRegistration:
    return BrokerRegistration(node, "localhost", 9000 + node)


class ControllerMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.etcd: dict[TopicPartition, tuple[PartitionState, int]] = {}
        self.revision = 0
        self.seen: dict[TopicPartition, int] = {}
        self.pending: list[PartitionWrite] = []
        self.live: set[int] = set()
        self.epochs: dict[int, int | None] = {}
        self.next_epoch = 0
        self.now = 0
        self.topic_rev = 0

    @initialize(
        unclean=st.booleans(),
        live=st.sets(brokers, min_size=1),
        start=st.integers(0, 3),
        shift=st.integers(0, 3),
    )
    def start(self, unclean: bool, live: set[int], start: int, shift: int) -> None:
        self.unclean = unclean
        self.settings = ControllerSettings(unclean_leader_election_enable=unclean)
        replicas = assign_replicas(
            BROKERS, PARTITIONS, 3, start_index=start, next_replica_shift=shift
        )
        self.topic = TopicAssignment("t", uuid.UUID(int=1), replicas, {})
        self.live = set(live)
        self.controller = Controller(self.settings)
        for b in sorted(self.live):
            self.epochs[b] = self.next_epoch = self.next_epoch + 1
            self.take(self.controller.broker_registered(reg(b), self.epochs[b]))
        self.take(self.controller.became_controller(self.now))
        self.put_topic(self.topic)

    # -- the IO layer ---------------------------------------------------------------------

    def take(self, writes: list[PartitionWrite]) -> None:
        for w in writes:
            assert w.expected_mod_revision == self.seen.get(w.tp, 0), w
        self.pending += writes

    def feed(self, tp: TopicPartition) -> None:
        """Tell the controller the key's real state (a watch event or a replay)."""
        current = self.etcd.get(tp)
        state, rev = current if current else (None, 0)
        self.seen[tp] = rev
        self.take(self.controller.partition_changed(tp.topic, tp.partition, state, rev))

    def put(
        self, tp: TopicPartition, new: PartitionState, by_controller: bool, forced: bool = False
    ) -> None:
        """Apply a change; `forced`: an unclean election an operator asked for."""
        old = self.etcd.get(tp)
        unclean = self.unclean or forced
        check_transition(self.replicas(tp), old[0] if old else None, new, unclean, by_controller)
        self.revision += 1
        self.etcd[tp] = (new, self.revision)
        self.feed(tp)

    def put_topic(self, topic: TopicAssignment) -> None:
        self.revision += 1
        self.topic, self.topic_rev = topic, self.revision
        self.take(self.controller.topic_changed(topic, self.revision))

    def end_move(self, w: PartitionWrite, old: PartitionState) -> None:
        """A move's end: the partition and the topic in one transaction, so one revision.
        The IO layer tells the controller the topic first (`ClusterRuntime._events`)."""
        assert w.topic_update is not None
        check_move_end(self.topic, w, old)
        self.revision += 1
        self.topic, self.topic_rev = w.topic_update, self.revision
        check_transition(self.replicas(w.tp), old, w.new_state, self.unclean, True)
        self.etcd[w.tp] = (w.new_state, self.revision)
        self.take(self.controller.topic_changed(self.topic, self.revision))
        self.feed(w.tp)

    def replicas(self, tp: TopicPartition) -> tuple[int, ...]:
        return self.topic.replicas[tp.partition]

    def deliver(self, keep: list[bool]) -> None:
        writes, self.pending = self.pending, []
        for i, w in enumerate(writes):
            current = self.etcd.get(w.tp)
            matches = (current[1] if current else 0) == w.expected_mod_revision
            if w.topic_update is not None:
                matches = matches and w.topic_mod_revision == self.topic_rev
            if matches and (keep[i] if i < len(keep) else True):
                forced = w.reason.startswith("unclean election requested")
                if w.topic_update is not None:
                    assert current is not None
                    self.end_move(w, current[0])
                else:
                    self.put(w.tp, w.new_state, by_controller=True, forced=forced)
            else:
                self.feed(w.tp)  # dropped or CAS failed: replay the real state

    # -- rules -----------------------------------------------------------------------------

    @rule(keep=st.lists(st.booleans(), max_size=12))
    def deliver_some(self, keep: list[bool]) -> None:
        self.deliver(keep)

    @precondition(lambda self: len(self.live) > 0)
    @rule(data=st.data())
    def kill(self, data: st.DataObject) -> None:
        node = data.draw(st.sampled_from(sorted(self.live)))
        self.live.discard(node)
        self.take(self.controller.broker_expired(node))

    @rule(node=brokers)
    def start_broker(self, node: int) -> None:
        """A broker registers: one that was dead returns, a live one restarted quickly."""
        self.live.add(node)
        self.epochs[node] = self.next_epoch = self.next_epoch + 1
        self.take(self.controller.broker_registered(reg(node), self.epochs[node]))

    @precondition(lambda self: len(self.live) > 0)
    @rule(data=st.data())
    def reread_broker(self, data: st.DataObject) -> None:
        """The IO layer reads a registration it already reported (a watch resync)."""
        node = data.draw(st.sampled_from(sorted(self.live)))
        self.take(self.controller.broker_registered(reg(node), self.epochs.get(node)))

    @rule(tp=partitions, node=brokers, grow=st.booleans())
    def leader_changes_isr(self, tp: TopicPartition, node: int, grow: bool) -> None:
        current = self.etcd.get(tp)
        if current is None or current[0].leader not in self.live:
            return
        state = current[0]
        if grow:
            if node not in self.live or node not in self.replicas(tp) or node in state.isr:
                return
            isr = (*state.isr, node)
        else:
            isr = tuple(r for r in state.isr if r != node)
        result = isr_change(state, isr, state.leader, self.replicas(tp))
        if isinstance(result, KafkaError):
            assert state.leader_recovery or node == state.leader
            return
        if result is not state:
            self.put(tp, result, by_controller=False)

    @rule(tp=partitions)
    def leader_recovers(self, tp: TopicPartition) -> None:
        current = self.etcd.get(tp)
        if current is None or not current[0].leader_recovery or current[0].leader not in self.live:
            return
        state = current[0]
        result = isr_change(state, state.isr, state.leader, self.replicas(tp), recovered=True)
        assert isinstance(result, PartitionState)
        self.put(tp, result, by_controller=False)

    @rule(advance=st.integers(0, 400_000))
    def tick(self, advance: int) -> None:
        self.now += advance
        self.take(self.controller.tick(self.now))

    @rule(chosen=st.sets(partitions, min_size=1), preferred=st.booleans())
    def elect(self, chosen: set[TopicPartition], preferred: bool) -> None:
        writes, errors = self.controller.elect_leaders(sorted(chosen), preferred)
        assert set(errors) == chosen
        assert {w.tp for w in writes} == {tp for tp, e in errors.items() if e is None}
        self.take(writes)

    @rule(
        tp=partitions,
        replicas=st.none() | st.lists(brokers, min_size=1, max_size=3, unique=True),
    )
    def reassign(self, tp: TopicPartition, replicas: list[int] | None) -> None:
        """An operator moves a partition (None: cancels its move)."""
        assignment, outcome = self.controller.reassign("t", {tp.partition: replicas})
        assert set(outcome) == {tp.partition}
        if assignment is not None:
            assert outcome[tp.partition] is None
            self.put_topic(assignment)

    @rule()
    def fail_over(self) -> None:
        """A new controller, its view fed from etcd; the old one's writes can no longer
        apply (the IO layer conditions them on the controller key)."""
        self.controller.lost_controller()
        self.pending = []
        self.controller = Controller(self.settings)
        for b in sorted(self.live):
            self.take(self.controller.broker_registered(reg(b), self.epochs.get(b)))
        self.take(self.controller.topic_changed(self.topic, self.topic_rev))
        for tp in TPS:
            self.feed(tp)
        self.take(self.controller.became_controller(self.now))

    @rule()
    def settle(self) -> None:
        for _ in range(50):
            if not self.pending:
                break
            self.deliver([])
        assert not self.pending, "the controller's writes never settled"
        for tp in TPS:
            state, rev = self.etcd[tp]
            assert self.seen[tp] == rev
            check_settled(state, self.replicas(tp), self.live, self.unclean)
            move = self.topic.reassignments.get(tp.partition)
            if move is not None:
                assert complete_reassignment(state, move, self.live) is None, (move, state)


def check_transition(
    replicas: tuple[int, ...],
    old: PartitionState | None,
    new: PartitionState,
    unclean: bool,
    by_controller: bool,
) -> None:
    assert new.leader == -1 or new.leader in new.isr
    assert new.isr and set(new.isr) <= set(replicas)
    if old is None:
        assert (new.leader_epoch, new.partition_epoch) == (0, 0)
        return
    assert new.partition_epoch > old.partition_epoch
    if new.leader != old.leader:
        assert by_controller
        assert new.leader_epoch > old.leader_epoch
        if not unclean and new.leader != -1:
            assert new.leader in old.isr, (old, new)
    else:
        assert new.leader_epoch >= old.leader_epoch
    if by_controller:
        # The controller only removes from the ISR, unless it elects a leader uncleanly.
        assert set(new.isr) <= set(old.isr) or new.leader_recovery


def check_move_end(topic: TopicAssignment, w: PartitionWrite, old: PartitionState) -> None:
    """A move ends only with its targets in sync (a cancel at once), onto the target."""
    assert w.topic_update is not None
    move = topic.reassignments[w.partition]
    assert w.partition not in w.topic_update.reassignments
    assert w.topic_update.replicas[w.partition] == move.target
    assert set(w.new_state.isr) <= set(move.target)
    if move.target != move.original:
        assert set(move.target) <= set(old.isr), (move, old)


def check_settled(
    state: PartitionState, replicas: tuple[int, ...], live: set[int], unclean: bool
) -> None:
    if state.leader != -1:
        assert state.leader in live, state
        assert set(state.isr) <= live, state
        return
    assert not set(state.isr) & live, state
    if unclean:
        assert not set(replicas) & live, state


ControllerMachine.TestCase.settings = settings(
    max_examples=300, stateful_step_count=40, deadline=None
)
test_controller_model = ControllerMachine.TestCase
