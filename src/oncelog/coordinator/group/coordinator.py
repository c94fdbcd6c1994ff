"""The classic group coordinator: the shard that routes to membership and offsets.

Theory of operation (sans-IO, event-sourced, clock injected; the counterpart of Kafka's
`GroupCoordinatorShard`):

1. `GroupCoordinator` is what the broker calls (`broker/group_runtime.py`, the handlers).
   It owns what is neither membership nor offsets: which `__consumer_offsets` partitions
   this broker serves (`owns`; NOT_COORDINATOR otherwise), the settings, and the count of
   replayed records. Every request goes to the manager that owns it: JoinGroup, SyncGroup,
   Heartbeat, LeaveGroup, List/DescribeGroups and the timers to `MembershipManager`
   (`membership.py`); OffsetCommit, TxnOffsetCommit, OffsetFetch and expiry to
   `OffsetManager` (`offsets.py`). Requests that need both are composed here, facts passed
   explicitly: a commit is checked by membership (generation, member, fencing) and then
   written by offsets; DeleteGroups, OffsetDelete and expiry ask membership which groups may
   lose offsets and offsets for the tombstones.
2. Every operation returns a `Result`: the records to append to the group's partition and
   the reply (ready, or a `Waiter` filled in later). The broker appends the records and then
   calls `replay` on each; durable state changes only there, so a broker that replays the
   partitions at start rebuilds the same groups and offsets.
3. `replay` routes by record type: group records to membership, offset records to offsets
   (an offset's value first creates its group, Empty). A group's offsets are opened with the
   group and forgotten with it (its tombstone, or its partition unloaded), so the two
   managers always agree on which groups exist.
4. Transactional offsets (TxnOffsetCommit) are records of the producer's transaction: replayed,
   they wait per (group, producer id); the COMMIT marker on the group's partition (`TxnEnd`,
   live or replayed, `complete_txn_offsets`) turns them into committed offsets, ABORT drops
   them. Members are fenced by generation and member id when the request names them (KIP-447).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from oncelog.clock import Clock
from oncelog.coordinator.group.group import Group
from oncelog.coordinator.group.member import Waiter
from oncelog.coordinator.group.membership import (
    WAITER_SLACK_MS,
    JoinRequest,
    MembershipManager,
    join_error,
    sync_reply,
)
from oncelog.coordinator.group.offsets import OffsetManager
from oncelog.coordinator.group.records import (
    GroupKey,
    GroupRecord,
    GroupValue,
    OffsetKey,
    OffsetValue,
    partition_for,
)
from oncelog.coordinator.group.result import Result
from oncelog.coordinator.group.settings import GroupSettings
from oncelog.errors import ErrorCode
from oncelog.types import TopicPartition

E = ErrorCode

__all__ = [
    "WAITER_SLACK_MS",
    "GroupCoordinator",
    "GroupSettings",
    "JoinRequest",
    "Result",
    "Waiter",
]


class GroupCoordinator:
    def __init__(
        self,
        settings: GroupSettings,
        clock: Clock,
        new_member_id: Callable[[str], str] | None = None,
    ) -> None:
        self.clock = clock
        self.offsets = OffsetManager(settings)
        self.membership = MembershipManager(
            settings, clock, new_member_id, open_offsets=self.offsets.open
        )
        self._settings = settings
        #: Count of replayed records: their order in the log, which decides whether a
        #: committed transaction's offset is newer than a plain commit of the same partition.
        self._position = 0
        #: The `__consumer_offsets` partitions this coordinator owns (leads and has loaded);
        #: None: all of them (a single node). Groups of other partitions get NOT_COORDINATOR.
        self.owned: set[int] | None = None

    @property
    def settings(self) -> GroupSettings:
        return self._settings

    @settings.setter
    def settings(self, settings: GroupSettings) -> None:
        """The broker replaces them (the partition count it found): both managers see it."""
        self._settings = settings
        self.membership.settings = settings
        self.offsets.settings = settings

    @property
    def groups(self) -> dict[str, Group]:
        """The groups, each with a read-only view of its offsets (`Group.offsets`)."""
        return self.membership.groups

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
        """This broker no longer leads `partition`: forget its groups and their offsets;
        waiting members are answered NOT_COORDINATOR and find the new coordinator."""
        if self.owned is not None:
            self.owned.discard(partition)
        for group_id in self.membership.unload(partition):
            self.offsets.forget(group_id)

    def take_woken(self) -> set[str]:
        return self.membership.take_woken()

    # == Membership: JoinGroup, SyncGroup, Heartbeat, LeaveGroup ===============================

    def join(self, req: JoinRequest) -> Result:
        if req.group_id and not self.owns(req.group_id):
            return Result(join_error(E.not_coordinator, req.member_id))
        return self.membership.join(req)

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
        return self.membership.sync(
            group_id, generation, member_id, instance_id, protocol_type, protocol_name, assignments
        )

    def heartbeat(
        self, group_id: str, generation: int, member_id: str, instance_id: str | None
    ) -> ErrorCode:
        if not self.owns(group_id):
            return E.not_coordinator
        return self.membership.heartbeat(group_id, generation, member_id, instance_id)

    def leave(self, group_id: str, members: list[tuple[str, str | None]]) -> Result:
        """Remove members (by member id, or by instance id for static members); the response
        is one error code per member, in request order."""
        if not self.owns(group_id):
            return Result([E.not_coordinator for _ in members])
        return self.membership.leave(group_id, members)

    # == Offsets: OffsetCommit, TxnOffsetCommit, OffsetFetch ===================================

    def _served(self, group_id: str) -> ErrorCode:
        if not group_id:
            return E.invalid_group_id
        if not self.owns(group_id):
            return E.not_coordinator
        return E.none

    def commit_offsets(
        self,
        group_id: str,
        generation: int,
        member_id: str,
        instance_id: str | None,
        offsets: dict[TopicPartition, OffsetValue],
    ) -> Result:
        """OffsetCommit; the response maps each partition to its error code."""
        code = self._served(group_id)
        if code is E.none:
            code = self.membership.check_commit(group_id, generation, member_id, instance_id)
        if code is not E.none:
            return Result(dict.fromkeys(offsets, code))
        self.membership.touch(group_id, member_id)
        return self.offsets.commit(group_id, offsets)

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
        code = self._served(group_id)
        if code is E.none:
            code = self.membership.check_txn_commit(group_id, generation, member_id, instance_id)
        if code is not E.none:
            return Result(dict.fromkeys(offsets, code))
        return self.offsets.commit(group_id, offsets, producer_id, producer_epoch)

    def unstable_partitions(self, group_id: str) -> set[TopicPartition]:
        """Partitions with transactional offsets still waiting for their marker."""
        return self.offsets.unstable_partitions(group_id)

    def fetch_offsets(
        self, group_id: str, partitions: Iterable[TopicPartition] | None
    ) -> dict[TopicPartition, OffsetValue | None]:
        """Committed offsets of the requested partitions (None: all the group has)."""
        return self.offsets.fetch(group_id, partitions)

    # == Groups as a whole =====================================================================

    def list_groups(self) -> list[Group]:
        return self.membership.list_groups()

    def describe(self, group_id: str) -> Group | None:
        return self.membership.describe(group_id)

    def delete_groups(self, group_ids: list[str]) -> Result:
        """DeleteGroups: tombstones for every offset (pending transactional ones included,
        see `OffsetManager.tombstones`) and the group record of Empty groups."""
        codes: dict[str, ErrorCode] = {}
        records: list[GroupRecord] = []
        for group_id in group_ids:
            if not self.owns(group_id):
                codes[group_id] = E.not_coordinator
                continue
            codes[group_id] = self.membership.deletable(group_id)
            if codes[group_id] is E.none:
                records += self.offsets.tombstones(group_id)
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
        if not self.owns(group_id):
            return E.not_coordinator, Result({})
        code, subscribed, empty = self.membership.offsets_deletable(group_id)
        if code is not E.none:
            return code, Result({})
        return E.none, self.offsets.delete(group_id, partitions, subscribed, empty)

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
        return self.offsets.expire(now_ms, retention_ms, self.membership.expiry_clocks())

    # == Replay ================================================================================

    def replay(self, record: GroupRecord) -> None:
        """Apply one record of `__consumer_offsets`: the only way durable state changes
        (markers, `TxnEnd`, go to `complete_txn_offsets`)."""
        self._position += 1
        key = record.key
        if isinstance(key, OffsetKey):
            if record.value is not None:
                self.membership.ensure_group(key.group_id)
            self.offsets.replay(record, self._position)
            return
        if record.value is None:
            if self.membership.replay_tombstone(key.group_id):
                self.offsets.forget(key.group_id)
            return
        assert isinstance(record.value, GroupValue)
        self.membership.replay_group(key.group_id, record.value)

    def complete_txn_offsets(self, producer_id: int, partition: int, commit: bool) -> None:
        """A COMMIT/ABORT marker of `producer_id` landed on `__consumer_offsets` partition
        `partition`: its pending offsets in the groups of that partition are committed (unless
        a plain commit written after them exists) or dropped."""
        self._position += 1
        self.offsets.complete(producer_id, partition, commit)

    # == Timers ================================================================================

    def next_deadline(self) -> int | None:
        return self.membership.next_deadline()

    def tick(self) -> list[GroupRecord]:
        """Run every timer that is due; return the records the changes need persisted."""
        return self.membership.tick()
