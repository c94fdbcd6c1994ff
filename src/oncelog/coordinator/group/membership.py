"""Membership of the classic groups: JoinGroup, SyncGroup, Heartbeat, LeaveGroup, timers.

Theory of operation (sans-IO, event-sourced, clock injected; the counterpart of Kafka's
`GroupMetadataManager` for classic groups):

1. `MembershipManager` keeps the groups (`Group`) and their members. Each operation
   validates against the current state and returns a `Result`: the records to append to the
   group's `__consumer_offsets` partition and the reply, either ready or a `Waiter` that a
   later operation, a timer or a replayed record fills in.
2. Durable state changes only when a group record is replayed (`replay_group`,
   `replay_tombstone`): the generation's assignment makes the group Stable, a tombstone
   deletes it. Membership between records (who has rejoined, heartbeats, pending replies) is
   transient, as in Kafka: after a restart the members of a Stable group are loaded from the
   last group record and must heartbeat within their session timeout.
3. Timers are data: `next_deadline()` says when `tick()` must run next; `tick` expires
   sessions, ends join phases (rebalance timeout, initial delay) and evicts members that never
   sent SyncGroup. `take_woken()` names the groups whose waiters were filled.
4. What offsets need from membership is asked explicitly: `check_commit` and
   `check_txn_commit` (generation and member fencing, KIP-447), `touch` (a commit counts as
   a heartbeat), `deletable`, `subscribed_topics`, `expiry_clocks`. Ownership of a group's
   partition (NOT_COORDINATOR) is checked by the shard (`coordinator.py`) before it calls in.
   A group's offsets are opened through `open_offsets` when the group is created.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from oncelog.clock import Clock
from oncelog.coordinator.group.group import Deadlines, Group
from oncelog.coordinator.group.member import Member, Response, Waiter
from oncelog.coordinator.group.offsets import GroupOffsets
from oncelog.coordinator.group.records import GroupKey, GroupRecord, GroupValue, partition_for
from oncelog.coordinator.group.result import Result
from oncelog.coordinator.group.settings import GroupSettings
from oncelog.coordinator.group.state import GroupState
from oncelog.coordinator.group.subscription import (
    CONSUMER_PROTOCOL_TYPE,
    SubscriptionError,
    subscribed_topics,
)
from oncelog.errors import ErrorCode

S = GroupState
E = ErrorCode
#: Waiters get their fallback this long after the timer that should have filled them.
WAITER_SLACK_MS = 5_000

__all__ = ["WAITER_SLACK_MS", "JoinRequest", "MembershipManager", "join_error", "sync_reply"]


@dataclass(frozen=True, slots=True)
class JoinRequest:
    group_id: str
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    protocol_type: str
    protocols: list[tuple[str, bytes]]
    require_known_member: bool


def _member_of(
    req: JoinRequest,
    member_id: str,
    *,
    assignment: bytes = b"",
    last_heartbeat_ms: int = 0,
    is_new: bool = True,
) -> Member:
    """The member a JoinGroup describes; a static member's replacement keeps its
    assignment and is not new."""
    return Member(
        member_id,
        req.group_instance_id,
        req.client_id,
        req.client_host,
        req.session_timeout_ms,
        req.rebalance_timeout_ms,
        req.protocol_type,
        list(req.protocols),
        assignment=assignment,
        last_heartbeat_ms=last_heartbeat_ms,
        is_new=is_new,
    )


def join_error(code: ErrorCode, member_id: str = "") -> Response:
    return {
        "error_code": code,
        "generation_id": -1,
        "protocol_type": None,
        "protocol_name": None,
        "leader": "",
        "skip_assignment": False,
        "member_id": member_id,
        "members": [],
    }


def sync_reply(code: ErrorCode, group: Group | None = None, assignment: bytes = b"") -> Response:
    return {
        "error_code": code,
        "protocol_type": group.protocol_type if group else None,
        "protocol_name": group.protocol_name if group else None,
        "assignment": assignment,
    }


class MembershipManager:
    def __init__(
        self,
        settings: GroupSettings,
        clock: Clock,
        new_member_id: Callable[[str], str] | None = None,
        open_offsets: Callable[[str], GroupOffsets] | None = None,
    ) -> None:
        self.settings = settings
        self.clock = clock
        self.groups: dict[str, Group] = {}
        self._woken: set[str] = set()
        self._new_member_id = new_member_id or (lambda prefix: f"{prefix}-{uuid.uuid4()}")
        #: Gives a new group the entry its offsets are kept in (the shard's offset manager).
        self._open_offsets = open_offsets or (lambda _group_id: GroupOffsets())

    def _new_group(self, group_id: str) -> Group:
        group = self.groups[group_id] = Group(group_id, self._open_offsets(group_id))
        return group

    def ensure_group(self, group_id: str) -> Group:
        """The group, created Empty (no protocol) if it does not exist: an offset commit's
        record creates the group it names."""
        group = self.groups.get(group_id)
        if group is None:
            group = self._new_group(group_id)
        return group

    def unload(self, partition: int) -> list[str]:
        """Forget the groups of `partition`; waiting members are answered NOT_COORDINATOR
        and find the new coordinator. Returns the ids of the groups forgotten."""
        gone = [g for g in self.groups if partition_for(g, self.settings.partitions) == partition]
        for group_id in gone:
            group = self.groups.pop(group_id)
            for member_id in list(group.members):
                self._remove_member(group, member_id, E.not_coordinator)
            self._woken.add(group_id)
        return gone

    def take_woken(self) -> set[str]:
        woken, self._woken = self._woken, set()
        return woken

    # == JoinGroup =============================================================================

    def join(self, req: JoinRequest) -> Result:
        s = self.settings
        if not req.group_id:
            return Result(join_error(E.invalid_group_id, req.member_id))
        if not s.min_session_timeout_ms <= req.session_timeout_ms <= s.max_session_timeout_ms:
            return Result(join_error(E.invalid_session_timeout, req.member_id))
        group = self.groups.get(req.group_id)
        if group is None:
            if req.member_id:
                return Result(join_error(E.unknown_member_id, req.member_id))
            group = self._new_group(req.group_id)
        if group.in_state(S.DEAD):
            return Result(join_error(E.coordinator_not_available, req.member_id))
        if not group.supports(req.protocol_type, req.protocols):
            return Result(join_error(E.inconsistent_group_protocol, req.member_id))
        if not req.member_id:
            return self._join_new(group, req)
        return self._join_known(group, req)

    def _join_new(self, group: Group, req: JoinRequest) -> Result:
        member_id = self._new_member_id(req.group_instance_id or req.client_id or "member")
        if req.group_instance_id is not None:
            old = group.static_members.get(req.group_instance_id)
            if old is not None and old in group.members:
                return self._replace_static(group, old, member_id, req)
        elif req.require_known_member:
            now = self.clock.monotonic_ms()
            group.pending_members[member_id] = now + req.session_timeout_ms
            return Result(join_error(E.member_id_required, member_id))
        return Result(self._add_member(group, member_id, req))

    def _join_known(self, group: Group, req: JoinRequest) -> Result:
        if req.member_id in group.pending_members:
            del group.pending_members[req.member_id]
            return Result(self._add_member(group, req.member_id, req))
        if group.is_fenced(req.member_id, req.group_instance_id):
            return Result(join_error(E.fenced_instance_id, req.member_id))
        member = group.members.get(req.member_id)
        if member is None or group.in_state(S.EMPTY):
            return Result(join_error(E.unknown_member_id, req.member_id))
        unchanged = member.same_protocols(req.protocols)
        if group.in_state(S.COMPLETING_REBALANCE) and unchanged:
            return Result(self._join_reply(group, member))
        if group.in_state(S.STABLE) and unchanged and member.member_id != group.leader_id:
            return Result(self._join_reply(group, member))
        waiter = self._await_join(group, member, req)
        if not group.in_state(S.PREPARING_REBALANCE):
            self._prepare_rebalance(group)
        self._maybe_complete_join(group)
        return Result(waiter)

    def _add_member(self, group: Group, member_id: str, req: JoinRequest) -> Waiter:
        member = _member_of(req, member_id)
        group.add(member)
        waiter = self._await_join(group, member, req)
        group.new_member_added = True
        if not group.in_state(S.PREPARING_REBALANCE):
            self._prepare_rebalance(group)
        self._maybe_complete_join(group)
        return waiter

    def _await_join(self, group: Group, member: Member, req: JoinRequest) -> Waiter:
        member.protocols = list(req.protocols)
        member.session_timeout_ms = req.session_timeout_ms
        member.rebalance_timeout_ms = req.rebalance_timeout_ms
        member.last_heartbeat_ms = self.clock.monotonic_ms()
        if member.awaiting_join is not None:
            member.awaiting_join.complete(join_error(E.rebalance_in_progress, member.member_id))
            self._woken.add(group.group_id)
        member.awaiting_join = Waiter(join_error(E.unknown_member_id, member.member_id))
        return member.awaiting_join

    def _replace_static(self, group: Group, old_id: str, new_id: str, req: JoinRequest) -> Result:
        """A known group.instance.id rejoins: its new member id replaces the old, which is
        fenced from now on. A Stable group keeps its assignment and does not rebalance."""
        old = group.members[old_id]
        was_leader = group.leader_id == old_id
        group.remove(old_id)
        for waiter in (old.awaiting_join, old.awaiting_sync):
            if waiter is not None:
                waiter.complete(
                    join_error(E.fenced_instance_id, old_id) | sync_reply(E.fenced_instance_id)
                )
        self._woken.add(group.group_id)
        member = _member_of(
            req,
            new_id,
            assignment=old.assignment,
            last_heartbeat_ms=self.clock.monotonic_ms(),
            is_new=False,
        )
        group.add(member)
        if was_leader:
            group.leader_id = new_id
        if group.in_state(S.STABLE) and group.select_protocol() == group.protocol_name:
            reply = self._join_reply(group, member)
            reply["skip_assignment"] = was_leader
            value = group.to_value(now_ms=self.clock.wall_ms())
            return Result(
                reply,
                [GroupRecord(GroupKey(group.group_id), value)],
                fail=lambda code: join_error(code, new_id),
            )
        waiter = self._await_join(group, member, req)
        if not group.in_state(S.PREPARING_REBALANCE):
            self._prepare_rebalance(group)
        self._maybe_complete_join(group)
        return Result(waiter)

    def _join_reply(self, group: Group, member: Member) -> Response:
        is_leader = member.member_id == group.leader_id
        members = (
            [
                {
                    "member_id": m.member_id,
                    "group_instance_id": m.group_instance_id,
                    "metadata": m.metadata_for(group.protocol_name),
                }
                for m in group.members.values()
            ]
            if is_leader
            else []
        )
        return {
            "error_code": E.none,
            "generation_id": group.generation,
            "protocol_type": group.protocol_type,
            "protocol_name": group.protocol_name,
            "leader": group.leader_id or "",
            "skip_assignment": False,
            "member_id": member.member_id,
            "members": members,
        }

    # -- rebalance phases ---------------------------------------------------------------------

    def _prepare_rebalance(self, group: Group) -> None:
        now = self.clock.monotonic_ms()
        if group.in_state(S.COMPLETING_REBALANCE):
            for m in group.members.values():
                if m.awaiting_sync is not None:
                    m.awaiting_sync.complete(sync_reply(E.rebalance_in_progress, group))
                    m.awaiting_sync = None
            self._woken.add(group.group_id)
        delay = self.settings.initial_rebalance_delay_ms
        if group.in_state(S.EMPTY) and delay > 0:
            cap = now + max(group.max_rebalance_timeout_ms(), delay)
            group.timers = Deadlines(join=now + delay, initial_delay_cap=cap)
            group.new_member_added = False
        else:
            group.timers = Deadlines(join=now + group.max_rebalance_timeout_ms())
        group.transition(S.PREPARING_REBALANCE)

    def _maybe_complete_join(self, group: Group) -> list[GroupRecord]:
        in_initial_delay = group.timers.initial_delay_cap is not None
        if group.in_state(S.PREPARING_REBALANCE) and not in_initial_delay and group.all_joined():
            return self._complete_join(group)
        return []

    def _complete_join(self, group: Group) -> list[GroupRecord]:
        """End the join phase: drop who did not rejoin, bump the generation, answer joiners."""
        for m in list(group.members.values()):
            if m.awaiting_join is None:
                self._remove_member(group, m.member_id, E.unknown_member_id)
        group.timers = Deadlines()
        group.generation += 1
        now = self.clock.monotonic_ms()
        if not group.members:
            group.protocol_name = None
            group.leader_id = None
            group.transition(S.EMPTY)
            value = group.to_value(now_ms=self.clock.wall_ms())
            return [GroupRecord(GroupKey(group.group_id), value)]
        group.protocol_name = group.select_protocol()
        if group.leader_id not in group.members:
            group.leader_id = next(iter(group.members))
        group.transition(S.COMPLETING_REBALANCE)
        group.timers = Deadlines(sync=now + group.max_rebalance_timeout_ms())
        for m in group.members.values():
            assert m.awaiting_join is not None
            m.awaiting_join.complete(self._join_reply(group, m))
            m.awaiting_join = None
            m.is_new = False
            m.last_heartbeat_ms = now
        self._woken.add(group.group_id)
        return []

    def _remove_member(self, group: Group, member_id: str, code: ErrorCode) -> None:
        member = group.remove(member_id)
        if member is None:
            return
        if member.awaiting_join is not None:
            member.awaiting_join.complete(join_error(code, member_id))
        if member.awaiting_sync is not None:
            member.awaiting_sync.complete(sync_reply(code))
        self._woken.add(group.group_id)

    def _after_removal(self, group: Group) -> list[GroupRecord]:
        if group.in_state(S.STABLE, S.COMPLETING_REBALANCE):
            self._prepare_rebalance(group)
        return self._maybe_complete_join(group)

    # == SyncGroup =============================================================================

    def sync(
        self,
        group_id: str,
        generation: int,
        member_id: str,
        instance_id: str | None,
        protocol_type: str | None,
        protocol_name: str | None,
        assignments: dict[str, bytes],
    ) -> Result:
        group = self.groups.get(group_id)
        code = self._check_member(group, generation, member_id, instance_id)
        if group is None or code is not E.none:
            return Result(sync_reply(code))
        if (protocol_type is not None and protocol_type != group.protocol_type) or (
            protocol_name is not None and protocol_name != group.protocol_name
        ):
            return Result(sync_reply(E.inconsistent_group_protocol))
        member = group.members[member_id]
        if group.in_state(S.PREPARING_REBALANCE):
            return Result(sync_reply(E.rebalance_in_progress))
        if group.in_state(S.STABLE):
            return Result(sync_reply(E.none, group, member.assignment))
        member.awaiting_sync = Waiter(sync_reply(E.rebalance_in_progress))
        waiter = member.awaiting_sync
        if member_id != group.leader_id:
            return Result(waiter)
        full = {m: assignments.get(m, b"") for m in group.members}
        value = group.to_value(full, now_ms=self.clock.wall_ms())

        def fail(code: ErrorCode) -> Response:
            self._write_failed(group, code)
            return sync_reply(code)

        return Result(waiter, [GroupRecord(GroupKey(group_id), value)], fail)

    def _write_failed(self, group: Group, code: ErrorCode) -> None:
        """The assignment could not be stored: answer everyone waiting and rebalance."""
        for m in group.members.values():
            if m.awaiting_sync is not None:
                m.awaiting_sync.complete(sync_reply(code))
                m.awaiting_sync = None
        self._woken.add(group.group_id)
        if group.in_state(S.COMPLETING_REBALANCE):
            self._prepare_rebalance(group)

    def _check_member(
        self, group: Group | None, generation: int, member_id: str, instance_id: str | None
    ) -> ErrorCode:
        """The fencing shared by SyncGroup and Heartbeat."""
        if group is None:
            return E.unknown_member_id
        if group.in_state(S.DEAD):
            return E.coordinator_not_available
        if group.is_fenced(member_id, instance_id):
            return E.fenced_instance_id
        if member_id not in group.members or group.in_state(S.EMPTY):
            return E.unknown_member_id
        if generation != group.generation:
            return E.illegal_generation
        return E.none

    # == Heartbeat and LeaveGroup ==============================================================

    def heartbeat(
        self, group_id: str, generation: int, member_id: str, instance_id: str | None
    ) -> ErrorCode:
        group = self.groups.get(group_id)
        code = self._check_member(group, generation, member_id, instance_id)
        if group is None or code is not E.none:
            return code
        group.members[member_id].last_heartbeat_ms = self.clock.monotonic_ms()
        if group.in_state(S.PREPARING_REBALANCE):
            return E.rebalance_in_progress
        return E.none

    def leave(self, group_id: str, members: list[tuple[str, str | None]]) -> Result:
        """Remove members (by member id, or by instance id for static members); the response
        is one error code per member, in request order."""
        group = self.groups.get(group_id)
        if group is None or group.in_state(S.DEAD):
            code = E.unknown_member_id if group is None else E.coordinator_not_available
            return Result([code for _ in members])
        codes = [self._leave_one(group, member_id, instance) for member_id, instance in members]
        records: list[GroupRecord] = []
        if any(code is E.none for code in codes):
            records = self._after_removal(group)
        return Result(codes, records)

    def _leave_one(self, group: Group, member_id: str, instance_id: str | None) -> ErrorCode:
        if instance_id is not None:
            current = group.static_members.get(instance_id)
            if current is None:
                return E.unknown_member_id
            if member_id and member_id != current:
                return E.fenced_instance_id
            member_id = current
        if group.pending_members.pop(member_id, None) is not None:
            return E.none
        if member_id not in group.members:
            return E.unknown_member_id
        self._remove_member(group, member_id, E.unknown_member_id)
        return E.none

    # == What offsets ask of membership ========================================================

    def check_commit(
        self, group_id: str, generation: int, member_id: str, instance_id: str | None
    ) -> ErrorCode:
        """May this member commit offsets (OffsetCommit) in this generation?"""
        group = self.groups.get(group_id)
        if group is None:
            # No group management: a simple consumer commits with generation -1.
            return E.none if generation < 0 else E.illegal_generation
        if group.in_state(S.DEAD):
            return E.coordinator_not_available
        if group.is_fenced(member_id, instance_id):
            return E.fenced_instance_id
        if generation < 0 and group.in_state(S.EMPTY):
            return E.none
        if member_id not in group.members:
            return E.unknown_member_id
        if generation != group.generation:
            return E.illegal_generation
        if group.in_state(S.COMPLETING_REBALANCE):
            return E.rebalance_in_progress
        return E.none

    def check_txn_commit(
        self, group_id: str, generation: int, member_id: str, instance_id: str | None
    ) -> ErrorCode:
        """Kafka's checks for transactional commits: a member named must be in the group and
        a generation given (>= 0) must be current; generation -1 without a member id is a
        producer outside group management, accepted. A rebalance in progress is no error."""
        group = self.groups.get(group_id) or Group(group_id)
        if group.in_state(S.DEAD):
            return E.coordinator_not_available
        if group.is_fenced(member_id, instance_id):
            return E.fenced_instance_id
        if member_id and member_id not in group.members:
            return E.unknown_member_id
        if generation >= 0 and generation != group.generation:
            return E.illegal_generation
        return E.none

    def touch(self, group_id: str, member_id: str) -> None:
        """A member's offset commit counts as a heartbeat."""
        group = self.groups.get(group_id)
        if group is not None:
            member = group.members.get(member_id)
            if member is not None:
                member.last_heartbeat_ms = self.clock.monotonic_ms()

    def deletable(self, group_id: str) -> ErrorCode:
        """DeleteGroups' check: only an existing Empty group may be deleted."""
        group = self.groups.get(group_id)
        if group is None or group.in_state(S.DEAD):
            return E.group_id_not_found
        if not group.in_state(S.EMPTY):
            return E.non_empty_group
        return E.none

    def offsets_deletable(self, group_id: str) -> tuple[ErrorCode, set[str], bool]:
        """OffsetDelete's check (KIP-496): the group-level code, the topics whose offsets
        must be kept, and whether the group is Empty. An Empty group may lose any offset; a
        consumer group with members keeps those of topics a member subscribes to; any other
        group with members is refused (NON_EMPTY_GROUP)."""
        group = self.groups.get(group_id)
        if group is None or group.in_state(S.DEAD):
            return E.group_id_not_found, set(), False
        if group.in_state(S.EMPTY):
            return E.none, set(), True
        if group.protocol_type != CONSUMER_PROTOCOL_TYPE:
            return E.non_empty_group, set(), False
        return E.none, self.subscribed_topics(group), False

    @staticmethod
    def subscribed_topics(group: Group) -> set[str]:
        """Every topic some member subscribes to (all its protocols' metadata before one is
        chosen); a subscription that does not decode protects nothing, as in Kafka."""
        topics: set[str] = set()
        for member in group.members.values():
            chosen = [
                meta
                for name, meta in member.protocols
                if group.protocol_name is None or name == group.protocol_name
            ]
            for metadata in chosen:
                with contextlib.suppress(SubscriptionError):
                    topics |= subscribed_topics(metadata)
        return topics

    def expiry_clocks(self) -> Iterator[tuple[str, int]]:
        """The Empty groups, whose offsets may expire (KIP-211), each with when its clock
        started: when a consumer group became Empty (the time of its last group record), or
        -1 for a group without a protocol (commits only: each offset counts from its commit)."""
        for group in self.groups.values():
            if group.in_state(S.EMPTY):
                yield group.group_id, group.state_timestamp if group.protocol_type else -1

    # == Groups as a whole =====================================================================

    def list_groups(self) -> list[Group]:
        return [g for g in self.groups.values() if not g.in_state(S.DEAD)]

    def describe(self, group_id: str) -> Group | None:
        return self.groups.get(group_id)

    # == Replay ================================================================================

    def replay_tombstone(self, group_id: str) -> bool:
        """The group's tombstone: it is deleted (Dead), its members answered
        COORDINATOR_NOT_AVAILABLE. Returns whether there was such a group."""
        group = self.groups.pop(group_id, None)
        if group is None:
            return False
        for m in list(group.members):
            self._remove_member(group, m, E.coordinator_not_available)
        group.transition(S.DEAD)
        return True

    def replay_group(self, group_id: str, value: GroupValue) -> None:
        """A group record: the generation, protocol, leader and assignment it stores."""
        self._apply_group_value(self.ensure_group(group_id), value)

    def _apply_group_value(self, group: Group, value: GroupValue) -> None:
        group.state_timestamp = value.state_timestamp
        if group.in_state(S.PREPARING_REBALANCE):
            return  # written before this rebalance began; the live rebalance wins
        group.protocol_type = value.protocol_type or group.protocol_type
        group.generation = value.generation
        group.protocol_name = value.protocol
        group.leader_id = value.leader
        if not value.members:
            # A load replaying an earlier record of the group added members this one ends.
            for member_id in list(group.members):
                self._remove_member(group, member_id, E.unknown_member_id)
            if not group.in_state(S.EMPTY):
                group.transition(S.EMPTY)
            return
        now = self.clock.monotonic_ms()
        for mv in value.members:
            member = group.members.get(mv.member_id)
            if member is None:
                member = Member(
                    mv.member_id,
                    mv.group_instance_id,
                    mv.client_id,
                    mv.client_host,
                    mv.session_timeout_ms,
                    mv.rebalance_timeout_ms,
                    value.protocol_type,
                    [(value.protocol or "", mv.subscription)],
                    last_heartbeat_ms=now,
                    is_new=False,
                )
                group.add(member)
            member.assignment = mv.assignment
            if member.awaiting_sync is not None:
                member.awaiting_sync.complete(sync_reply(E.none, group, mv.assignment))
                member.awaiting_sync = None
                member.last_heartbeat_ms = now
        kept = {mv.member_id for mv in value.members}
        for member_id in [m for m in group.members if m not in kept]:
            self._remove_member(group, member_id, E.unknown_member_id)
        group.timers = Deadlines()
        group.transition(S.STABLE)
        self._woken.add(group.group_id)

    # == Timers ================================================================================

    def next_deadline(self) -> int | None:
        deadlines: list[int] = []
        for group in self.groups.values():
            t = group.timers
            deadlines += [d for d in (t.join, t.sync) if d is not None]
            deadlines += group.pending_members.values()
            for m in group.members.values():
                d = m.session_deadline_ms()
                if d is not None:
                    deadlines.append(d)
        return min(deadlines, default=None)

    def tick(self) -> list[GroupRecord]:
        """Run every timer that is due; return the records the changes need persisted."""
        now = self.clock.monotonic_ms()
        records: list[GroupRecord] = []
        for group in list(self.groups.values()):
            records += self._tick_group(group, now)
        return records

    def _tick_group(self, group: Group, now: int) -> list[GroupRecord]:
        records: list[GroupRecord] = []
        expired_pending = [m for m, d in group.pending_members.items() if d <= now]
        for member_id in expired_pending:
            del group.pending_members[member_id]
        expired = [
            m.member_id
            for m in group.members.values()
            if (d := m.session_deadline_ms()) is not None and d <= now
        ]
        for member_id in expired:
            self._remove_member(group, member_id, E.unknown_member_id)
        if expired:
            records += self._after_removal(group)
        elif expired_pending:
            records += self._maybe_complete_join(group)
        t = group.timers
        if group.in_state(S.PREPARING_REBALANCE) and t.join is not None and t.join <= now:
            records += self._join_timer(group, now)
        t = group.timers
        if group.in_state(S.COMPLETING_REBALANCE) and t.sync is not None and t.sync <= now:
            for m in list(group.members.values()):
                if m.awaiting_sync is None:
                    self._remove_member(group, m.member_id, E.unknown_member_id)
            records += self._after_removal(group)
        return records

    def _join_timer(self, group: Group, now: int) -> list[GroupRecord]:
        t = group.timers
        cap = t.initial_delay_cap
        if cap is not None and group.new_member_added and now < cap:
            # Members keep arriving during the initial delay: wait a little longer.
            group.new_member_added = False
            delay = self.settings.initial_rebalance_delay_ms
            group.timers = Deadlines(join=min(now + delay, cap), initial_delay_cap=cap)
            return []
        return self._complete_join(group)
