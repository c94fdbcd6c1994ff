"""This broker's replica of one partition in a cluster: its role and the state behind it.

A partition state from etcd (leader, leader epoch, ISR, partition epoch) makes this broker
the partition's leader, a follower, or neither (`apply_state`). Only a newer leader epoch
changes the role; a newer partition epoch at the same leader epoch is an ISR change. The
leader tracks its followers (`replication.leader`), a follower its fetch phase
(`replication.follower`); the replica manager and the server act on what this returns.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from oncelog.errors import FencedLeaderEpoch, NotLeaderOrFollower, UnknownLeaderEpoch
from oncelog.replication.follower import FollowerState
from oncelog.replication.leader import LeaderState
from oncelog.storage.partition_log import PartitionLog
from oncelog.types import TopicPartition


class Role(enum.Enum):
    LEADER = "leader"
    FOLLOWER = "follower"
    #: A replica whose partition has no leader (offline) or that was never told its role.
    NONE = "none"


class Change(enum.Enum):
    """What `apply_state` did, for the caller to act on."""

    NOTHING = "nothing"
    BECAME_LEADER = "became-leader"
    BECAME_FOLLOWER = "became-follower"
    ISR_CHANGED = "isr-changed"
    STOPPED = "stopped"


@dataclass(frozen=True, slots=True)
class ReplicaView:
    """A partition state as this broker applies it (etcd's, with the key's mod revision)."""

    leader: int
    leader_epoch: int
    isr: tuple[int, ...]
    partition_epoch: int
    replicas: tuple[int, ...]
    mod_revision: int


class Partition:
    def __init__(self, node_id: int, tp: TopicPartition, log: PartitionLog) -> None:
        self.node_id = node_id
        self.tp = tp
        self.log = log
        self.role = Role.NONE
        self.view: ReplicaView | None = None
        self.leader: LeaderState | None = None
        self.follower: FollowerState | None = None

    @property
    def leader_epoch(self) -> int:
        return self.view.leader_epoch if self.view is not None else -1

    @property
    def isr(self) -> tuple[int, ...]:
        """The in-sync replicas etcd's partition state says (none before it arrived)."""
        return self.view.isr if self.view is not None else ()

    def apply_state(self, view: ReplicaView, lag_time_max_ms: int, now_ms: int) -> Change:
        """Take a partition state read from etcd; stale ones (older leader epoch, or the same
        leader epoch with an older partition epoch) and the one already applied (a leader's
        own ISR change comes back from the watch and from its write) are ignored."""
        old = self.view
        if view == old:
            return Change.NOTHING
        if old is not None and (
            view.leader_epoch < old.leader_epoch
            or (
                view.leader_epoch == old.leader_epoch
                and view.partition_epoch < old.partition_epoch
            )
        ):
            return Change.NOTHING
        self.view = view
        if old is not None and view.leader_epoch == old.leader_epoch and self.role != Role.NONE:
            if self.leader is not None:
                if view.replicas != old.replicas:
                    self.leader.replicas_changed(view.replicas)
                self.leader.isr_committed(frozenset(view.isr), view.partition_epoch)
            return Change.ISR_CHANGED
        if view.leader == self.node_id:
            self._become_leader(view, lag_time_max_ms, now_ms)
            return Change.BECAME_LEADER
        if view.leader >= 0 and self.node_id in view.replicas:
            self.role = Role.FOLLOWER
            self.leader = None
            if self.follower is None:
                self.follower = FollowerState(view.leader, view.leader_epoch)
            else:
                self.follower.new_leader(view.leader, view.leader_epoch)
            return Change.BECAME_FOLLOWER
        self.role = Role.NONE
        self.leader = None
        self.follower = None
        return Change.STOPPED

    def _become_leader(self, view: ReplicaView, lag_time_max_ms: int, now_ms: int) -> None:
        """Kafka's makeLeader: the new epoch starts at our log end; what followers hold
        beyond it they truncate away (KIP-101)."""
        self.role = Role.LEADER
        self.follower = None
        end = self.log.log_end_offset
        self.log.assign_leader_epoch(view.leader_epoch, end)
        self.leader = LeaderState.elected(
            self.node_id,
            view.leader_epoch,
            view.replicas,
            view.isr,
            view.partition_epoch,
            end,
            lag_time_max_ms,
            now_ms,
        )

    # -- checks the handlers make -----------------------------------------------------------

    def check_leader(self, current_leader_epoch: int = -1) -> LeaderState:
        """The leader state, or the error a client acts on (KIP-320 epochs)."""
        self.check_epoch(current_leader_epoch)
        if self.role != Role.LEADER or self.leader is None:
            raise NotLeaderOrFollower(f"broker {self.node_id} is not the leader of {self.tp}")
        return self.leader

    def check_epoch(self, current_leader_epoch: int) -> None:
        if current_leader_epoch < 0 or self.view is None:
            return
        ours = self.view.leader_epoch
        if current_leader_epoch < ours:
            raise FencedLeaderEpoch(
                f"{self.tp}: request epoch {current_leader_epoch}, leader epoch {ours}"
            )
        if current_leader_epoch > ours:
            raise UnknownLeaderEpoch(
                f"{self.tp}: request epoch {current_leader_epoch}, leader epoch {ours}"
            )

    # -- the leader's high watermark ----------------------------------------------------------

    def maybe_advance_high_watermark(self) -> bool:
        """Move the HW to the smallest end over the (maximal) ISR; True when it moved."""
        if self.leader is None:
            return False
        hw = self.leader.high_watermark(self.log.log_end_offset)
        return hw >= 0 and self.log.update_high_watermark(hw)
