"""A reassignment's end and a broker's death together, with unclean leader election.

The controller ends a move with one etcd transaction: the partition state, then the topic's
replicas cut to the target, both at one revision. Here broker 1 leads a partition on (1, 2, 3)
that moves to (1,) alone, and dies as the move ends: the end lands (leader 1, ISR (1,)) and
the partition must go offline, since no replica the cut leaves is alive. Told the partition
event before the topic's, the controller planned with the replicas before the cut and
elected broker 2 uncleanly, a leader outside the replicas. The runtime tells it the topic
first; what the controller plans from the cut and the state before the revision is addressed
to that state's mod_revision, and loses its compare-and-swap.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from oncelog.broker.replica_manager import ReplicaManager
from oncelog.metadata import cluster_state as cs
from oncelog.metadata.cluster_state import BrokerRegistration, PartitionState, TopicAssignment
from oncelog.metadata.controller import Controller, PartitionWrite
from oncelog.server.cluster import ClusterRuntime
from oncelog.server.etcd import Versioned, WatchEvent
from oncelog.types import TopicPartition
from tests.unit.metrics_broker import clustered_replicas

TP = TopicPartition("t", 0)
TOPIC = TopicAssignment(
    "t", uuid.UUID(int=1), ((1, 2, 3),), {"unclean.leader.election.enable": "true"}
)
LED = PartitionState(1, 0, (1, 2), 1)  # broker 3 never caught up
STATE_REV, MOVE_REV, END_REV = 11, 12, 13


def moving(controller: Controller) -> tuple[TopicAssignment, PartitionWrite]:
    """Brokers 1 and 2 up, the partition led by 1 and moving to (1,): the move's end, not
    yet written, and broker 1's death, whose write (planned on the state before the end)
    the end's transaction makes lose its compare-and-swap."""
    for node in (1, 2):
        controller.broker_registered(BrokerRegistration(node, "h", 9092), node)
    controller.topic_changed(TOPIC, 10)
    controller.partition_changed("t", 0, LED, STATE_REV)
    assert controller.became_controller(0) == []
    assignment, outcome = controller.reassign("t", {0: [1]})
    assert outcome == {0: None} and assignment is not None
    [end] = controller.topic_changed(assignment, MOVE_REV)
    assert end.topic_update is not None and end.topic_update.replicas == ((1,),)
    assert end.new_state == PartitionState(1, 0, (1,), 2)
    assert (end.expected_mod_revision, end.topic_mod_revision) == (STATE_REV, MOVE_REV)
    died = controller.broker_expired(1)
    assert [w.expected_mod_revision for w in died] == [STATE_REV]
    return end.topic_update, end


def check_end_writes(writes: list[PartitionWrite], cut: tuple[int, ...]) -> None:
    """What the controller plans once told the whole end: only writes addressed to the
    end's revision can apply, and those keep the partition within its replicas."""
    live = [w for w in writes if w.expected_mod_revision == END_REV]
    assert live, writes
    for w in live:
        assert w.new_state.leader == cs.NO_LEADER or w.new_state.leader in cut, w
        assert set(w.new_state.isr) <= set(cut), w
    assert {w.expected_mod_revision for w in writes} <= {STATE_REV, END_REV}
    assert live[-1].new_state == PartitionState(cs.NO_LEADER, 1, (1,), 3)


def test_the_controller_told_the_topic_first_takes_the_partition_offline() -> None:
    controller = Controller()
    cut, end = moving(controller)
    writes = controller.topic_changed(cut, END_REV)
    writes += controller.partition_changed("t", 0, end.new_state, END_REV)
    check_end_writes(writes, cut.replicas[0])


@pytest.fixture
def replicas(tmp_path: Path) -> Iterator[ReplicaManager]:
    with clustered_replicas(tmp_path, 9) as replicas:  # broker 9: no replica of the topic
        yield replicas


def test_the_runtime_feeds_a_move_end_to_the_controller_topic_first(
    replicas: ReplicaManager, monkeypatch: pytest.MonkeyPatch
) -> None:
    cluster = ClusterRuntime(replicas.config, replicas, lambda _keys: None)
    submitted: list[PartitionWrite] = []
    monkeypatch.setattr(cluster, "_submit", submitted.extend)  # what would go to etcd
    cut, end = moving(cluster.controller)
    partition_key = cs.key_for_partition("t", 0).encode()
    topic_key = cs.key_for_topic("t").encode()
    for key, value, revision in (
        (topic_key, TOPIC.to_bytes(), 10),
        (partition_key, LED.to_bytes(), STATE_REV),
    ):
        cluster._versions[key] = Versioned(key, value, revision, revision, 0)
    # The end's revision as etcd's watch delivers it: the transaction's operations in order.
    cluster._events(
        [
            (WatchEvent("put", partition_key, end.new_state.to_bytes(), END_REV), None),
            (WatchEvent("put", topic_key, cut.to_bytes(), END_REV), None),
        ]
    )
    check_end_writes(submitted, cut.replicas[0])
    # The views took the partition first: the new state, then the replicas cut.
    assert cluster.view.partitions[TP] == end.new_state
    assert cluster.view.topics["t"] == cut
