"""The sans-IO cluster controller: Kafka's election rules, fed events, answering intents.

`FakeEtcd` plays the IO adapter: it applies each write as a compare-and-swap on the
partition key's mod_revision and reports every change back as `partition_changed`.
"""

from __future__ import annotations

import uuid

import pytest

from oncelog.config import BrokerConfig
from oncelog.errors import (
    ElectionNotNeeded,
    EligibleLeadersNotAvailable,
    InvalidPartitions,
    InvalidReplicaAssignment,
    InvalidReplicationFactor,
    InvalidRequest,
    PreferredLeaderNotAvailable,
    UnknownTopicOrPartition,
)
from oncelog.metadata.cluster_state import BrokerRegistration, PartitionState, TopicAssignment
from oncelog.metadata.controller import (
    Controller,
    ControllerNotActive,
    ControllerRole,
    ControllerSettings,
    PartitionPhase,
    PartitionWrite,
    isr_change,
)
from oncelog.types import TopicPartition

TP = TopicPartition("t", 0)


def reg(node: int) -> BrokerRegistration:
    return BrokerRegistration(node, f"b{node}", 9092)


def topic(
    name: str = "t",
    replicas: tuple[tuple[int, ...], ...] = ((1, 2, 3),),
    configs: dict[str, str] | None = None,
) -> TopicAssignment:
    return TopicAssignment(name, uuid.UUID(int=1), replicas, configs or {})


class FakeEtcd:
    """Partition keys with mod_revisions; CAS writes; changes are fed back as events."""

    def __init__(self, controller: Controller) -> None:
        self.c = controller
        self.revision = 100
        self.keys: dict[TopicPartition, tuple[PartitionState, int]] = {}

    def state(self, tp: TopicPartition = TP) -> PartitionState:
        return self.keys[tp][0]

    def put(self, tp: TopicPartition, state: PartitionState) -> list[PartitionWrite]:
        self.revision += 1
        self.keys[tp] = (state, self.revision)
        return self.c.partition_changed(tp.topic, tp.partition, state, self.revision)

    def apply(self, writes: list[PartitionWrite]) -> list[PartitionWrite]:
        """Apply writes and the writes they cause until quiet; return those applied."""
        applied: list[PartitionWrite] = []
        for _ in range(100):
            if not writes:
                return applied
            follow: list[PartitionWrite] = []
            for w in writes:
                current = self.keys.get(w.tp)
                if (current[1] if current else 0) != w.expected_mod_revision:
                    continue  # CAS failed: the event with the real state was already fed
                applied.append(w)
                follow += self.put(w.tp, w.new_state)
            writes = follow
        raise AssertionError("writes never settled")

    def leader_sets_isr(self, isr: tuple[int, ...], tp: TopicPartition = TP) -> None:
        state = self.state(tp)
        replicas = self.c.topics[tp.topic].replicas[tp.partition]
        new = isr_change(state, isr, state.leader, replicas)
        assert isinstance(new, PartitionState)
        self.apply(self.put(tp, new))


def cluster(
    *brokers: int, unclean: bool = False, assignment: TopicAssignment | None = None
) -> tuple[Controller, FakeEtcd]:
    c = Controller(ControllerSettings(unclean_leader_election_enable=unclean))
    etcd = FakeEtcd(c)
    for b in brokers or (1, 2, 3):
        assert c.broker_registered(reg(b), broker_epoch=10 * b) == []
    etcd.apply(c.became_controller(now_ms=0))
    etcd.apply(c.topic_changed(assignment or topic()))
    return c, etcd


# -- rule 1: new partitions ----------------------------------------------------------------


def test_new_partition_led_by_first_live_replica() -> None:
    c, etcd = cluster()
    assert etcd.state() == PartitionState(1, 0, (1, 2, 3), 0)
    assert c.partition(TP) is not None


def test_new_partition_isr_is_the_live_replicas() -> None:
    _, etcd = cluster(2, 3)
    assert etcd.state() == PartitionState(2, 0, (2, 3), 0)


def test_new_partition_without_live_replicas_is_offline_until_one_comes() -> None:
    c, etcd = cluster(7)
    assert etcd.state() == PartitionState(-1, 0, (1, 2, 3), 0)
    etcd.apply(c.broker_registered(reg(3)))
    assert etcd.state() == PartitionState(3, 1, (3,), 1)


def test_create_is_addressed_to_revision_zero() -> None:
    c = Controller()
    c.broker_registered(reg(1))
    c.became_controller(0)
    [w] = c.topic_changed(topic(replicas=((1,),)))
    assert (w.expected_mod_revision, w.new_state) == (0, PartitionState(1, 0, (1,), 0))
    assert "new partition" in w.reason


def test_standby_keeps_the_view_and_writes_nothing() -> None:
    c = Controller()
    assert c.role is ControllerRole.STANDBY
    assert c.broker_registered(reg(1)) == []
    assert c.topic_changed(topic(replicas=((1,),))) == []
    assert c.partition_changed("t", 0, PartitionState(1, 0, (1,), 0), 5) == []
    assert c.broker_expired(1) == []
    [w] = c.became_controller(0)
    assert w.expected_mod_revision == 5
    assert w.new_state == PartitionState(-1, 1, (1,), 1)


# -- rule 2: a broker expires --------------------------------------------------------------


def test_leader_dies_first_live_isr_replica_leads() -> None:
    c, etcd = cluster()
    etcd.apply(c.broker_expired(1))
    assert etcd.state() == PartitionState(2, 1, (2, 3), 1)


def test_election_follows_assignment_order_not_isr_order() -> None:
    c, etcd = cluster()
    etcd.leader_sets_isr((1,))
    etcd.leader_sets_isr((1, 3, 2))
    etcd.apply(c.broker_expired(1))
    assert etcd.state().leader == 2
    assert etcd.state().isr == (3, 2)


def test_follower_dies_leaves_the_isr_leader_epoch_unchanged() -> None:
    c, etcd = cluster()
    [w] = etcd.apply(c.broker_expired(2))
    assert w.new_state == PartitionState(1, 0, (1, 3), 1)
    assert "dead followers [2]" in w.reason


def test_dead_follower_outside_the_isr_changes_nothing() -> None:
    c, etcd = cluster()
    etcd.leader_sets_isr((1, 3))
    assert c.broker_expired(2) == []


def test_last_isr_member_dies_stays_in_the_isr() -> None:
    c, etcd = cluster()
    etcd.apply(c.broker_expired(2))
    etcd.apply(c.broker_expired(3))
    assert etcd.state() == PartitionState(1, 0, (1,), 2)
    etcd.apply(c.broker_expired(1))
    assert etcd.state() == PartitionState(-1, 1, (1,), 3)
    assert PartitionPhase.of(etcd.state()) is PartitionPhase.OFFLINE


def test_unclean_off_isr_shrunk_by_leader_then_leader_dies_goes_offline() -> None:
    c, etcd = cluster()
    etcd.leader_sets_isr((1,))
    etcd.apply(c.broker_expired(1))
    assert etcd.state() == PartitionState(-1, 1, (1,), 2)


def test_unclean_on_elects_first_live_replica_recovering() -> None:
    c, etcd = cluster(unclean=True)
    etcd.leader_sets_isr((1,))
    [w] = etcd.apply(c.broker_expired(1))
    assert w.new_state == PartitionState(2, 1, (2,), 2, leader_recovery=True)
    assert "unclean" in w.reason
    assert PartitionPhase.of(w.new_state) is PartitionPhase.RECOVERING


def test_topic_config_overrides_cluster_default() -> None:
    on = topic(configs={"unclean.leader.election.enable": "true"})
    c, etcd = cluster(assignment=on)
    etcd.leader_sets_isr((1,))
    etcd.apply(c.broker_expired(1))
    assert etcd.state().leader == 2
    off = topic(configs={"unclean.leader.election.enable": "false"})
    c, etcd = cluster(unclean=True, assignment=off)
    etcd.leader_sets_isr((1,))
    etcd.apply(c.broker_expired(1))
    assert etcd.state().leader == -1


def test_all_brokers_die_partition_offline_with_last_member() -> None:
    c, etcd = cluster(unclean=True)
    for b in (1, 2, 3):
        etcd.apply(c.broker_expired(b))
    assert etcd.state() == PartitionState(-1, 3, (3,), 3)


# -- rule 3: a broker registers ------------------------------------------------------------


def test_last_isr_member_returns_and_leads() -> None:
    c, etcd = cluster()
    for b in (2, 3, 1):
        etcd.apply(c.broker_expired(b))
    assert c.broker_registered(reg(2)) == []  # not in the ISR: unclean is off
    etcd.apply(c.broker_registered(reg(1)))
    assert etcd.state() == PartitionState(1, 2, (1,), 4)


def test_returning_follower_does_not_rejoin_through_the_controller() -> None:
    c, etcd = cluster()
    etcd.apply(c.broker_expired(3))
    assert c.broker_registered(reg(3)) == []
    assert etcd.state().isr == (1, 2)
    etcd.leader_sets_isr((1, 2, 3))
    assert etcd.state() == PartitionState(1, 0, (1, 2, 3), 2)


def test_unclean_on_any_returning_replica_leads_an_offline_partition() -> None:
    c, etcd = cluster()
    for b in (2, 3, 1):
        etcd.apply(c.broker_expired(b))
    c.settings = ControllerSettings(unclean_leader_election_enable=True)
    etcd.apply(c.broker_registered(reg(2)))
    assert etcd.state() == PartitionState(2, 2, (2,), 4, leader_recovery=True)


def test_leader_restarted_within_its_lease_gets_a_new_leader_epoch() -> None:
    c, etcd = cluster()
    [w] = etcd.apply(c.broker_registered(reg(1), broker_epoch=11))
    assert w.new_state == PartitionState(2, 1, (2, 3), 1)
    assert "restarted" in w.reason


def test_new_controller_moves_a_leader_that_registered_after_its_state() -> None:
    """The controller that saw broker 1 restart was broker 1 itself: its successor finds a
    state naming 1 leader written (revision 150) before 1 registered again (revision 200), so
    1 restarted since it was elected; the epoch moves on, as for a bounce seen live."""
    c = Controller(ControllerSettings())
    etcd = FakeEtcd(c)
    for b, epoch in ((1, 200), (2, 20), (3, 30)):
        c.broker_registered(reg(b), broker_epoch=epoch)
    c.topic_changed(topic())
    etcd.keys[TP] = (PartitionState(1, 4, (1, 2, 3), 7), 150)
    etcd.revision = 200
    c.partition_changed("t", 0, etcd.state(), 150)
    [w] = etcd.apply(c.became_controller(now_ms=0))
    assert w.new_state.leader == 2 and w.new_state.leader_epoch == 5
    assert "restarted since" in w.reason
    assert c.became_controller(now_ms=0) == []  # the new state is newer than the registration


def test_broker_epoch_tells_a_restart_from_a_re_read() -> None:
    c, etcd = cluster()
    assert c.broker_registered(reg(2), broker_epoch=20) == []  # the same put read again
    assert c.broker_registered(reg(2)) == []  # no epoch: taken for a re-read
    [w] = etcd.apply(c.broker_registered(reg(2), broker_epoch=27))
    assert w.new_state.isr == (1, 3)  # a restarted follower leaves the ISR
    assert "restarted" in w.reason
    assert c.broker_registered(reg(2), broker_epoch=27) == []


def test_sole_leader_restarted_leads_again_with_higher_epoch() -> None:
    c, etcd = cluster(1, assignment=topic(replicas=((1,),)))
    [w] = etcd.apply(c.broker_registered(reg(1), broker_epoch=11))
    assert w.new_state.leader == 1
    assert w.new_state.leader_epoch == 2


# -- CAS failures ----------------------------------------------------------------------------


def test_failed_cas_comes_back_and_is_recomputed() -> None:
    c, etcd = cluster()
    [stale] = c.broker_expired(1)  # computed from the state at its revision...
    shrunk = isr_change(etcd.state(), (1, 3), 1, (1, 2, 3))
    assert isinstance(shrunk, PartitionState)
    [again] = etcd.put(TP, shrunk)  # ...which the leader changes before the CAS
    rev = etcd.keys[TP][1]
    assert stale.expected_mod_revision == rev - 1
    assert etcd.apply([stale]) == []  # CAS fails; the event above was the real state
    assert again.expected_mod_revision == rev
    assert again.new_state == PartitionState(3, 1, (3,), 2)


def test_deleted_partition_key_is_recreated() -> None:
    c, _ = cluster()
    [w] = c.partition_changed("t", 0, None, 0)
    assert w.expected_mod_revision == 0


def test_deleted_topic_is_forgotten() -> None:
    c, _ = cluster()
    assert c.topic_deleted("t") == []
    assert c.broker_expired(1) == []
    assert c.partition_changed("t", 0, None, 0) == []


# -- rule 5: preferred leaders ---------------------------------------------------------------


def three_partitions() -> tuple[Controller, FakeEtcd]:
    return cluster(assignment=topic(replicas=((1, 2, 3), (2, 3, 1), (3, 1, 2))))


def test_rebalance_moves_leadership_back_to_the_preferred_replica() -> None:
    c, etcd = three_partitions()
    etcd.apply(c.broker_expired(1))
    etcd.apply(c.broker_registered(reg(1)))
    assert etcd.state().leader == 2
    etcd.leader_sets_isr((2, 3, 1))
    assert c.tick(4_999) == []  # first check 5 s after taking over
    [w] = etcd.apply(c.tick(5_000))
    assert w.new_state == PartitionState(1, 2, (2, 3, 1), 3)
    assert "rebalance" in w.reason
    assert c.tick(6_000) == []
    assert c.tick(305_000) == []  # balanced now


def test_rebalance_waits_for_the_preferred_replica_in_the_isr() -> None:
    c, etcd = three_partitions()
    etcd.apply(c.broker_expired(1))
    etcd.apply(c.broker_registered(reg(1)))
    assert c.tick(5_000) == []
    etcd.leader_sets_isr((2, 3, 1))
    assert c.tick(5_001) == []  # next check only after the interval
    assert len(etcd.apply(c.tick(305_000))) == 1


def test_rebalance_threshold_is_per_broker_and_strict() -> None:
    replicas = tuple((1, 2) for _ in range(10))
    c, etcd = cluster(1, 2, assignment=topic(replicas=replicas))
    one = TopicPartition("t", 0)
    etcd.put(one, PartitionState(2, 1, (2, 1), 1))
    assert c.tick(5_000) == []  # 1 of 10 = 10%: not above 10%
    two = TopicPartition("t", 1)
    etcd.put(two, PartitionState(2, 1, (2, 1), 1))
    assert {w.tp for w in c.tick(305_000)} == {one, two}


def test_rebalance_disabled() -> None:
    c = Controller(ControllerSettings(auto_leader_rebalance_enable=False))
    c.broker_registered(reg(1))
    c.became_controller(0)
    assert c.tick(10**9) == []


# -- ElectLeaders ------------------------------------------------------------------------------


def test_elect_preferred_leaders() -> None:
    c, etcd = three_partitions()
    etcd.apply(c.broker_expired(1))
    etcd.apply(c.broker_registered(reg(1)))
    p0, p1 = TopicPartition("t", 0), TopicPartition("t", 1)
    writes, errors = c.elect_leaders([p0, p1, TopicPartition("t", 9)], preferred=True)
    assert writes == []
    assert isinstance(errors[p0], PreferredLeaderNotAvailable)
    assert isinstance(errors[p1], ElectionNotNeeded)
    assert isinstance(errors[TopicPartition("t", 9)], UnknownTopicOrPartition)
    etcd.leader_sets_isr((2, 3, 1))
    writes, errors = c.elect_leaders([p0], preferred=True)
    assert errors == {p0: None}
    assert [w.new_state.leader for w in writes] == [1]


def test_elect_unclean_leaders() -> None:
    c, etcd = cluster()
    etcd.leader_sets_isr((1,))
    writes, errors = c.elect_leaders([TP], preferred=False)
    assert (writes, type(errors[TP])) == ([], ElectionNotNeeded)
    etcd.apply(c.broker_expired(1))
    assert etcd.state().leader == -1
    writes, errors = c.elect_leaders([TP], preferred=False)
    assert errors == {TP: None}
    assert writes[0].new_state == PartitionState(2, 2, (2,), 3, leader_recovery=True)
    for b in (2, 3):
        c.broker_expired(b)
    _, errors = c.elect_leaders([TP], preferred=False)
    assert isinstance(errors[TP], EligibleLeadersNotAvailable)


def test_unclean_election_prefers_a_clean_leader() -> None:
    c, etcd = cluster()
    for b in (1, 2, 3):
        etcd.apply(c.broker_expired(b))
    c.broker_registered(reg(2))
    c.broker_registered(reg(3))  # its write is not applied: the view is still offline
    writes, errors = c.elect_leaders([TP], preferred=False)
    assert errors == {TP: None}
    assert writes[0].new_state == PartitionState(3, 4, (3,), 4)


def test_elect_leaders_needs_the_active_controller() -> None:
    c = Controller()
    with pytest.raises(ControllerNotActive):
        c.elect_leaders([TP], preferred=True)


def test_role_transitions() -> None:
    c = Controller()
    assert c.lost_controller() == []
    c.became_controller(0)
    assert c.active
    c.became_controller(1)
    c.lost_controller()
    assert not c.active
    assert c.tick(10**9) == []


# -- the leader's ISR changes ----------------------------------------------------------------

STATE = PartitionState(1, 4, (1, 2), 7)


def test_isr_change_bumps_partition_epoch_only() -> None:
    assert isr_change(STATE, (1, 2, 3), 1, (1, 2, 3)) == PartitionState(1, 4, (1, 2, 3), 8)
    assert isr_change(STATE, (1,), 1, (1, 2, 3)) == PartitionState(1, 4, (1,), 8)
    assert isr_change(STATE, (1, 2), 1, (1, 2, 3)) is STATE


@pytest.mark.parametrize(
    ("isr", "leader", "match"),
    [
        ((1, 2), 2, "not the leader"),
        ((2, 3), 1, "does not include the leader"),
        ((1, 4), 1, "invalid ISR"),
        ((1, 1), 1, "invalid ISR"),
        ((), 1, "invalid ISR"),
    ],
)
def test_isr_change_refused(isr: tuple[int, ...], leader: int, match: str) -> None:
    result = isr_change(STATE, isr, leader, (1, 2, 3))
    assert isinstance(result, InvalidRequest)
    assert match in str(result)


def test_isr_cannot_grow_while_recovering() -> None:
    recovering = PartitionState(2, 3, (2,), 5, leader_recovery=True)
    assert isinstance(isr_change(recovering, (2, 3), 2, (1, 2, 3)), InvalidRequest)
    done = isr_change(recovering, (2,), 2, (1, 2, 3), recovered=True)
    assert done == PartitionState(2, 3, (2,), 6)
    grown = isr_change(recovering, (2, 3), 2, (1, 2, 3), recovered=True)
    assert grown == PartitionState(2, 3, (2, 3), 6)


# -- rule 6: assignments -----------------------------------------------------------------------


def test_create_topic_assignment_uses_placement() -> None:
    c = Controller()
    for b in range(5):
        c.broker_registered(reg(b))
    t = c.create_topic_assignment("x", 10, 3, {"a": "b"}, 0, 0, topic_id=uuid.UUID(int=3))
    assert t.replicas[5] == (0, 2, 3)
    assert (t.topic_id, dict(t.configs), t.internal) == (uuid.UUID(int=3), {"a": "b"}, False)
    with pytest.raises(InvalidReplicationFactor):
        c.create_topic_assignment("x", 1, 6, {}, 0, 0)
    manual = c.create_topic_assignment("m", -1, -1, {}, 0, 0, manual=[[4, 0]])
    assert manual.replicas == ((4, 0),)
    with pytest.raises(InvalidReplicaAssignment):
        c.create_topic_assignment("m", -1, -1, {}, 0, 0, manual=[[9]])


def test_add_partitions_and_the_new_ones_get_states() -> None:
    c, etcd = cluster(0, 1, 2, 3, 4, assignment=topic(replicas=((0, 1, 2), (1, 2, 3))))
    grown = c.add_partitions("t", 5)
    assert grown.replicas == ((0, 1, 2), (1, 2, 3), (2, 3, 4), (3, 4, 0), (4, 0, 1))
    etcd.apply(c.topic_changed(grown))
    assert etcd.state(TopicPartition("t", 4)) == PartitionState(4, 0, (4, 0, 1), 0)
    with pytest.raises(InvalidPartitions, match="would not be an increase"):
        c.add_partitions("t", 5)
    with pytest.raises(UnknownTopicOrPartition):
        c.add_partitions("nope", 5)
    with pytest.raises(InvalidReplicaAssignment, match="by 1 but 2 assignments"):
        c.add_partitions("t", 6, manual=[[0, 1, 2], [1, 2, 3]])
    with pytest.raises(InvalidReplicaAssignment, match="which have 3 replica"):
        c.add_partitions("t", 6, manual=[[0, 1]])
    assert c.add_partitions("t", 6, manual=[[4, 3, 2]]).replicas[5] == (4, 3, 2)


def test_settings_from_broker_config() -> None:
    assert ControllerSettings.from_broker_config(BrokerConfig()) == ControllerSettings()
    config = BrokerConfig(
        {
            "unclean.leader.election.enable": "true",
            "auto.leader.rebalance.enable": "false",
            "leader.imbalance.check.interval.seconds": "60",
            "leader.imbalance.per.broker.percentage": "25",
        }
    )
    assert ControllerSettings.from_broker_config(config) == ControllerSettings(
        unclean_leader_election_enable=True,
        auto_leader_rebalance_enable=False,
        leader_imbalance_check_interval_ms=60_000,
        leader_imbalance_per_broker_percentage=25,
    )
