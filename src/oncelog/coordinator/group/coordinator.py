"""The classic group coordinator: JoinGroup, SyncGroup, Heartbeat, LeaveGroup and offsets.

Theory of operation (sans-IO, event-sourced, clock injected):

1. Every operation validates against the current state and returns a `Result`: the records
   to append to the group's `__consumer_offsets` partition and the reply. The reply is either
   ready, or a `Waiter` that a later operation, a timer or a replayed record fills in.
2. The broker appends the records and then calls `replay` on each. Durable state (committed
   offsets, the generation's assignment, deletion) changes only there, so a broker that
   starts and replays the partitions rebuilds the same groups and offsets.
3. Membership between records (who has rejoined, heartbeats, pending replies) is transient,
   as in Kafka: after a restart the members of a Stable group are loaded from the last group
   record and must heartbeat within their session timeout.
4. Timers are data: `next_deadline()` says when `tick(now)` must run next; `tick` expires
   sessions, ends join phases (rebalance timeout, initial delay) and evicts members that never
   sent SyncGroup. `take_woken()` names the groups whose waiters were filled.
5. Transactional offsets (TxnOffsetCommit) are records of the producer's transaction: replayed,
   they wait per (group, producer id); the COMMIT marker on the group's partition (`TxnEnd`,
   live or replayed) turns them into committed offsets, ABORT drops them. Members are fenced
   by generation and member id when the request names them (KIP-447).
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from oncelog.clock import Clock
from oncelog.coordinator.group.group import Deadlines, Group
from oncelog.coordinator.group.member import Member, Response, Waiter
from oncelog.coordinator.group.records import (
    GroupKey,
    GroupRecord,
    GroupValue,
    OffsetKey,
    OffsetValue,
    partition_for,
)
from oncelog.coordinator.group.state import GroupState
from oncelog.coordinator.group.subscription import (
    CONSUMER_PROTOCOL_TYPE,
    SubscriptionError,
    subscribed_topics,
)
from oncelog.errors import ErrorCode
from oncelog.types import TopicPartition

S = GroupState
E = ErrorCode
#: Waiters get their fallback this long after the timer that should have filled them.
WAITER_SLACK_MS = 5_000

__all__ = ["GroupCoordinator", "GroupSettings", "Result", "Waiter"]


@dataclass(frozen=True, slots=True)
class GroupSettings:
    partitions: int = 50
    initial_rebalance_delay_ms: int = 3000
    min_session_timeout_ms: int = 6000
    max_session_timeout_ms: int = 1_800_000
    max_metadata_bytes: int = 4096


@dataclass
class Result:
    """What an operation produced: records to persist first, then `response` (maybe a Waiter).

    If the append fails, the broker answers `fail(code)` instead (when given).
    """

    response: Any
    records: list[GroupRecord] = field(default_factory=list)
    fail: Callable[[ErrorCode], Any] | None = None


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


class GroupCoordinator:
    def __init__(
        self,
        settings: GroupSettings,
        clock: Clock,
        new_member_id: Callable[[str], str] | None = None,
    ) -> None:
        self.settings = settings
        self.clock = clock
        self.groups: dict[str, Group] = {}
        self._woken: set[str] = set()
        #: Count of replayed records: their order in the log, which decides whether a
        #: committed transaction's offset is newer than a plain commit of the same partition.
        self._position = 0
        self._new_member_id = new_member_id or (lambda prefix: f"{prefix}-{uuid.uuid4()}")
        #: The `__consumer_offsets` partitions this coordinator owns (leads and has loaded);
        #: None: all of them (a single node). Groups of other partitions get NOT_COORDINATOR.
        self.owned: set[int] | None = None

    def partition_for(self, group_id: str) -> int:
        return partition_for(group_id, self.settings.partitions)

    # == Ownership (a cluster: the leader of a group's partition is its coordinator) ===========

    def owns(self, group_id: str) -> bool:
        return self.owned is None or self.partition_for(group_id) in self.owned

    def own_partitions(self) -> None:
        """From now on only partitions given to `loaded` are served (cluster mode)."""
        if self.owned is None:
            self.owned = set()

    def loaded(self, partition: int) -> None:
        """Partition `partition` was replayed: its groups are served from now on."""
        if self.owned is not None:
            self.owned.add(partition)

    def unload(self, partition: int) -> None:
        """This broker no longer leads `partition`: forget its groups; waiting members are
        answered NOT_COORDINATOR and find the new coordinator."""
        if self.owned is not None:
            self.owned.discard(partition)
        for group_id in [g for g in self.groups if self.partition_for(g) == partition]:
            group = self.groups.pop(group_id)
            for member_id in list(group.members):
                self._remove_member(group, member_id, E.not_coordinator)
            self._woken.add(group_id)

    def take_woken(self) -> set[str]:
        woken, self._woken = self._woken, set()
        return woken

    # == JoinGroup =============================================================================

    def join(self, req: JoinRequest) -> Result:
        s = self.settings
        if not req.group_id:
            return Result(join_error(E.invalid_group_id, req.member_id))
        if not self.owns(req.group_id):
            return Result(join_error(E.not_coordinator, req.member_id))
        if not s.min_session_timeout_ms <= req.session_timeout_ms <= s.max_session_timeout_ms:
            return Result(join_error(E.invalid_session_timeout, req.member_id))
        group = self.groups.get(req.group_id)
        if group is None:
            if req.member_id:
                return Result(join_error(E.unknown_member_id, req.member_id))
            group = self.groups[req.group_id] = Group(req.group_id)
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
        member = Member(
            member_id,
            req.group_instance_id,
            req.client_id,
            req.client_host,
            req.session_timeout_ms,
            req.rebalance_timeout_ms,
            req.protocol_type,
            list(req.protocols),
        )
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
        member = Member(
            new_id,
            req.group_instance_id,
            req.client_id,
            req.client_host,
            req.session_timeout_ms,
            req.rebalance_timeout_ms,
            req.protocol_type,
            list(req.protocols),
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
        if not self.owns(group_id):
            return Result(sync_reply(E.not_coordinator))
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
        if not self.owns(group_id):
            return E.not_coordinator
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
        if not self.owns(group_id):
            return Result([E.not_coordinator for _ in members])
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

    # == Offsets ===============================================================================

    def commit_offsets(
        self,
        group_id: str,
        generation: int,
        member_id: str,
        instance_id: str | None,
        offsets: dict[TopicPartition, OffsetValue],
    ) -> Result:
        """OffsetCommit; the response maps each partition to its error code."""
        code = self._check_commit(group_id, generation, member_id, instance_id)
        if code is not E.none:
            return Result(dict.fromkeys(offsets, code))
        group = self.groups.get(group_id)
        if group is not None:
            member = group.members.get(member_id)
            if member is not None:
                member.last_heartbeat_ms = self.clock.monotonic_ms()
        return self._offset_records(group_id, offsets)

    def _offset_records(
        self,
        group_id: str,
        offsets: dict[TopicPartition, OffsetValue],
        producer_id: int = -1,
        producer_epoch: int = -1,
    ) -> Result:
        """The records of an (transactional) offset commit and its per-partition answer;
        metadata above offset.metadata.max.bytes is refused for that partition alone."""
        response: dict[TopicPartition, ErrorCode] = {}
        records = []
        for tp, value in offsets.items():
            if len(value.metadata.encode()) > self.settings.max_metadata_bytes:
                response[tp] = E.offset_metadata_too_large
                continue
            response[tp] = E.none
            key = OffsetKey(group_id, tp.topic, tp.partition)
            records.append(GroupRecord(key, value, producer_id, producer_epoch))
        ok = [tp for tp, c in response.items() if c is E.none]

        def fail(code: ErrorCode) -> dict[TopicPartition, ErrorCode]:
            return {**response, **dict.fromkeys(ok, code)}

        return Result(response, records, fail)

    def _check_commit(
        self, group_id: str, generation: int, member_id: str, instance_id: str | None
    ) -> ErrorCode:
        if not group_id:
            return E.invalid_group_id
        if not self.owns(group_id):
            return E.not_coordinator
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

    def commit_txn_offsets(
        self,
        group_id: str,
        producer_id: int,
        producer_epoch: int,
        generation: int,
        member_id: str,
        instance_id: str | None,
        offsets: dict[TopicPartition, OffsetValue],
    ) -> Result:
        """TxnOffsetCommit; the producer was verified by the broker (its transaction holds
        this group's partition). The records are transactional: they count once the
        transaction's COMMIT marker is replayed."""
        code = self._check_txn_commit(group_id, generation, member_id, instance_id)
        if code is not E.none:
            return Result(dict.fromkeys(offsets, code))
        return self._offset_records(group_id, offsets, producer_id, producer_epoch)

    def _check_txn_commit(
        self, group_id: str, generation: int, member_id: str, instance_id: str | None
    ) -> ErrorCode:
        """Kafka's checks for transactional commits: a member named must be in the group and
        a generation given (>= 0) must be current; generation -1 without a member id is a
        producer outside group management, accepted. A rebalance in progress is no error."""
        if not group_id:
            return E.invalid_group_id
        if not self.owns(group_id):
            return E.not_coordinator
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

    def unstable_partitions(self, group_id: str) -> set[TopicPartition]:
        """Partitions with transactional offsets still waiting for their marker."""
        group = self.groups.get(group_id)
        if group is None:
            return set()
        return {tp for pending in group.pending_txn_offsets.values() for tp in pending}

    def fetch_offsets(
        self, group_id: str, partitions: Iterable[TopicPartition] | None
    ) -> dict[TopicPartition, OffsetValue | None]:
        """Committed offsets of the requested partitions (None: all the group has)."""
        group = self.groups.get(group_id)
        stored = group.offsets if group is not None else {}
        if partitions is None:
            return dict(stored)
        return {tp: stored.get(tp) for tp in partitions}

    # == Groups as a whole =====================================================================

    def list_groups(self) -> list[Group]:
        return [g for g in self.groups.values() if not g.in_state(S.DEAD)]

    def describe(self, group_id: str) -> Group | None:
        return self.groups.get(group_id)

    def delete_groups(self, group_ids: list[str]) -> Result:
        """DeleteGroups: tombstones for every offset and the group record of Empty groups.

        Partitions whose only offsets are transactional and pending get a tombstone too (as
        Kafka's): the group's tombstone drops those offsets here, but a load that no longer
        sees it (superseded by a new group record, or cleaned) would replay them and their
        COMMIT, and the deleted group would come back with them."""
        codes: dict[str, ErrorCode] = {}
        records: list[GroupRecord] = []
        for group_id in group_ids:
            group = self.groups.get(group_id)
            if not self.owns(group_id):
                codes[group_id] = E.not_coordinator
            elif group is None or group.in_state(S.DEAD):
                codes[group_id] = E.group_id_not_found
            elif not group.in_state(S.EMPTY):
                codes[group_id] = E.non_empty_group
            else:
                codes[group_id] = E.none
                pending = [tp for offsets in group.pending_txn_offsets.values() for tp in offsets]
                for tp in dict.fromkeys([*group.offsets, *pending]):
                    records.append(GroupRecord(OffsetKey(group_id, tp.topic, tp.partition), None))
                records.append(GroupRecord(GroupKey(group_id), None))
        ok = [g for g, c in codes.items() if c is E.none]

        def fail(code: ErrorCode) -> dict[str, ErrorCode]:
            return {**codes, **dict.fromkeys(ok, code)}

        return Result(codes, records, fail)

    def delete_offsets(
        self, group_id: str, partitions: list[TopicPartition]
    ) -> tuple[ErrorCode, Result]:
        """OffsetDelete (KIP-496): tombstones for the partitions' committed offsets.

        An Empty group loses any of them; a consumer group with members keeps those of topics
        a member subscribes to (GROUP_SUBSCRIBED_TO_TOPIC per partition); any other group
        with members is refused as a whole (NON_EMPTY_GROUP). A group left Empty without
        offsets is deleted, as Kafka's cleanup does. Returns the group-level code and a
        Result whose response maps each partition to its code.
        """
        group = self.groups.get(group_id)
        if not self.owns(group_id):
            return E.not_coordinator, Result({})
        if group is None or group.in_state(S.DEAD):
            return E.group_id_not_found, Result({})
        subscribed: set[str] = set()
        if not group.in_state(S.EMPTY):
            if group.protocol_type != CONSUMER_PROTOCOL_TYPE:
                return E.non_empty_group, Result({})
            subscribed = self._subscribed_topics(group)
        codes: dict[TopicPartition, ErrorCode] = {}
        records: list[GroupRecord] = []
        for tp in partitions:
            if tp.topic in subscribed:
                codes[tp] = E.group_subscribed_to_topic
                continue
            codes[tp] = E.none
            if tp in group.offsets:
                records.append(GroupRecord(OffsetKey(group_id, tp.topic, tp.partition), None))
        deleted = {tp for tp, c in codes.items() if c is E.none and tp in group.offsets}
        if deleted and set(group.offsets) <= deleted and group.in_state(S.EMPTY):
            records.append(GroupRecord(GroupKey(group_id), None))
        ok = [tp for tp, c in codes.items() if c is E.none]

        def fail(code: ErrorCode) -> dict[TopicPartition, ErrorCode]:
            return {**codes, **dict.fromkeys(ok, code)}

        return E.none, Result(codes, records, fail)

    @staticmethod
    def _subscribed_topics(group: Group) -> set[str]:
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

    # == Offset retention =======================================================================

    def expire_offsets(self, now_ms: int, retention_ms: int) -> list[GroupRecord]:
        """Tombstones for committed offsets past `offsets.retention.minutes` (KIP-211).

        Only Empty groups lose offsets: a consumer group's clock starts when it became Empty
        (the time of its last group record), a group without a protocol (commits only, e.g.
        `assign` consumers or the Spark sink's markers) counts from each offset's commit.
        Partitions with transactional offsets still pending are kept. A group left with no
        offsets is deleted too. (Kafka also expires the offsets of topics an active consumer
        group no longer subscribes to; oncelog does not, yet.)
        """
        records: list[GroupRecord] = []
        for group in self.groups.values():
            if not group.in_state(S.EMPTY) or group.pending_txn_offsets:
                continue
            since = group.state_timestamp if group.protocol_type else -1
            expired = []
            for tp, value in group.offsets.items():
                start = since if since >= 0 else value.commit_timestamp
                if start >= 0 and start + retention_ms <= now_ms:
                    expired.append(tp)
            records += [
                GroupRecord(OffsetKey(group.group_id, tp.topic, tp.partition), None)
                for tp in expired
            ]
            if len(expired) == len(group.offsets):
                records.append(GroupRecord(GroupKey(group.group_id), None))
        return records

    # == Replay ================================================================================

    def replay(self, record: GroupRecord) -> None:
        """Apply one record of `__consumer_offsets`: the only way durable state changes
        (markers, `TxnEnd`, go to `complete_txn_offsets`)."""
        self._position += 1
        key = record.key
        if isinstance(key, OffsetKey):
            tp = TopicPartition(key.topic, key.partition)
            if record.producer_id >= 0:
                assert isinstance(record.value, OffsetValue)
                pending = self._group(key.group_id).pending_txn_offsets
                pending.setdefault(record.producer_id, {})[tp] = (record.value, self._position)
                return
            group = self.groups.get(key.group_id)
            if record.value is None:
                if group is not None:
                    group.offsets.pop(tp, None)
                    group.offset_positions[tp] = self._position
                return
            assert isinstance(record.value, OffsetValue)
            group = self._group(key.group_id)
            group.offsets[tp] = record.value
            group.offset_positions[tp] = self._position
            return
        if record.value is None:
            group = self.groups.pop(key.group_id, None)
            if group is not None:
                for m in list(group.members):
                    self._remove_member(group, m, E.coordinator_not_available)
                group.transition(S.DEAD)
            return
        assert isinstance(record.value, GroupValue)
        self._apply_group_value(self._group(key.group_id), record.value)

    def complete_txn_offsets(self, producer_id: int, partition: int, commit: bool) -> None:
        """A COMMIT/ABORT marker of `producer_id` landed on `__consumer_offsets` partition
        `partition`: its pending offsets in the groups of that partition are committed (unless
        a plain commit written after them exists) or dropped."""
        self._position += 1
        for group in self.groups.values():
            if producer_id not in group.pending_txn_offsets:
                continue
            if self.partition_for(group.group_id) != partition:
                continue
            pending = group.pending_txn_offsets.pop(producer_id)
            if not commit:
                continue
            for tp, (value, position) in pending.items():
                if group.offset_positions.get(tp, -1) < position:
                    group.offsets[tp] = value
                    group.offset_positions[tp] = position

    def _group(self, group_id: str) -> Group:
        group = self.groups.get(group_id)
        if group is None:
            group = self.groups[group_id] = Group(group_id)
        return group

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
