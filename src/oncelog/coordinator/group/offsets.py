"""Committed offsets of the classic groups: commits, transactional offsets, fetch, expiry.

Theory of operation (sans-IO, event-sourced; the counterpart of Kafka's
`OffsetMetadataManager`):

1. `OffsetManager` keeps one `GroupOffsets` per group: its committed offsets, the
   transactional offsets still waiting for their producer's marker, and the replay position
   of each partition's last plain commit. Entries are opened and forgotten by the shard
   (`coordinator.py`) together with the group they belong to (`membership.py`), so a group
   and its offsets live and die together; `Group.offsets` is a read-only view of its entry.
2. Operations (`commit`, `delete`, `tombstones`, `expire`) only build records and replies;
   whatever membership must decide first (generation and member checks, whether the group
   is Empty, the topics its members subscribe to) is decided by the shard through the
   membership manager and passed in.
3. State changes only in `replay`, for OffsetCommit records, and in `complete`, for the
   COMMIT/ABORT marker of a transaction on the group's partition. A transactional offset
   waits per (group, producer id); COMMIT makes it the committed offset unless a plain commit
   of the same partition was written after it (replay positions, counted by the shard, tell),
   ABORT drops it.
"""

from __future__ import annotations

from collections.abc import Iterable

from oncelog.coordinator.group.records import (
    GroupKey,
    GroupRecord,
    OffsetKey,
    OffsetValue,
    partition_for,
)
from oncelog.coordinator.group.result import Result
from oncelog.coordinator.group.settings import GroupSettings
from oncelog.errors import ErrorCode
from oncelog.types import TopicPartition

E = ErrorCode

#: producer id -> partition -> (offset, replay position of its record)
PendingOffsets = dict[int, dict[TopicPartition, tuple[OffsetValue, int]]]


class GroupOffsets:
    """One group's offsets; changed only by `OffsetManager` replaying records."""

    def __init__(self) -> None:
        self.committed: dict[TopicPartition, OffsetValue] = {}
        #: Transactional offsets awaiting their producer's marker: producer id -> partition
        #: -> (offset, replay position). The marker commits or drops them.
        self.pending: PendingOffsets = {}
        #: Replay position of each partition's last plain commit: a transactional offset
        #: written before it must not overwrite it when its transaction commits later.
        self.positions: dict[TopicPartition, int] = {}

    def pending_partitions(self) -> list[TopicPartition]:
        """Partitions with transactional offsets still waiting (in order, each once)."""
        return list(dict.fromkeys(tp for offsets in self.pending.values() for tp in offsets))


class OffsetManager:
    def __init__(self, settings: GroupSettings) -> None:
        self.settings = settings
        self.groups: dict[str, GroupOffsets] = {}

    # == Lifetime (the shard opens and forgets an entry with its group) ========================

    def open(self, group_id: str) -> GroupOffsets:
        """A group was created: a fresh entry for its offsets."""
        offsets = self.groups[group_id] = GroupOffsets()
        return offsets

    def forget(self, group_id: str) -> None:
        """The group is gone (deleted, or its partition unloaded): so are its offsets."""
        self.groups.pop(group_id, None)

    def _of(self, group_id: str) -> GroupOffsets:
        return self.groups.get(group_id) or GroupOffsets()

    # == OffsetCommit and TxnOffsetCommit ======================================================

    def commit(
        self,
        group_id: str,
        offsets: dict[TopicPartition, OffsetValue],
        producer_id: int = -1,
        producer_epoch: int = -1,
    ) -> Result:
        """The records of an (transactional) offset commit and its per-partition answer;
        metadata above offset.metadata.max.bytes is refused for that partition alone. The
        commit was validated against the group already."""
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

    # == OffsetFetch ===========================================================================

    def unstable_partitions(self, group_id: str) -> set[TopicPartition]:
        """Partitions with transactional offsets still waiting for their marker."""
        return set(self._of(group_id).pending_partitions())

    def fetch(
        self, group_id: str, partitions: Iterable[TopicPartition] | None
    ) -> dict[TopicPartition, OffsetValue | None]:
        """Committed offsets of the requested partitions (None: all the group has)."""
        stored = self._of(group_id).committed
        if partitions is None:
            return dict(stored)
        return {tp: stored.get(tp) for tp in partitions}

    # == Deletion and expiry ===================================================================

    def tombstones(self, group_id: str) -> list[GroupRecord]:
        """A tombstone for every partition the group has offsets of, committed or pending.

        Pending ones get one too (as Kafka's DeleteGroups): the group's tombstone drops them
        here, but a load that no longer sees it (superseded by a new group record, or
        cleaned) would replay them and their COMMIT, and the deleted group would come back."""
        offsets = self._of(group_id)
        partitions = dict.fromkeys([*offsets.committed, *offsets.pending_partitions()])
        return [GroupRecord(OffsetKey(group_id, tp.topic, tp.partition), None) for tp in partitions]

    def delete(
        self,
        group_id: str,
        partitions: list[TopicPartition],
        subscribed: set[str],
        group_empty: bool,
    ) -> Result:
        """OffsetDelete of a group that may lose offsets: partitions of `subscribed` topics
        are refused (GROUP_SUBSCRIBED_TO_TOPIC), the others' committed offsets get
        tombstones, and an Empty group (`group_empty`) left without offsets its own."""
        committed = self._of(group_id).committed
        codes: dict[TopicPartition, ErrorCode] = {}
        records: list[GroupRecord] = []
        for tp in partitions:
            if tp.topic in subscribed:
                codes[tp] = E.group_subscribed_to_topic
                continue
            codes[tp] = E.none
            if tp in committed:
                records.append(GroupRecord(OffsetKey(group_id, tp.topic, tp.partition), None))
        deleted = {tp for tp, c in codes.items() if c is E.none and tp in committed}
        if deleted and set(committed) <= deleted and group_empty:
            records.append(GroupRecord(GroupKey(group_id), None))
        ok = [tp for tp, c in codes.items() if c is E.none]

        def fail(code: ErrorCode) -> dict[TopicPartition, ErrorCode]:
            return {**codes, **dict.fromkeys(ok, code)}

        return Result(codes, records, fail)

    def expire(
        self, now_ms: int, retention_ms: int, empty_groups: Iterable[tuple[str, int]]
    ) -> list[GroupRecord]:
        """Tombstones for committed offsets past `retention_ms` (KIP-211) in `empty_groups`:
        (group id, when it became Empty, or -1 to count from each offset's commit). Groups
        with transactional offsets still pending keep theirs; a group left with no offsets
        gets its own tombstone."""
        records: list[GroupRecord] = []
        for group_id, since in empty_groups:
            offsets = self._of(group_id)
            if offsets.pending:
                continue
            expired = []
            for tp, value in offsets.committed.items():
                start = since if since >= 0 else value.commit_timestamp
                if start >= 0 and start + retention_ms <= now_ms:
                    expired.append(tp)
            records += [
                GroupRecord(OffsetKey(group_id, tp.topic, tp.partition), None) for tp in expired
            ]
            if len(expired) == len(offsets.committed):
                records.append(GroupRecord(GroupKey(group_id), None))
        return records

    # == Replay ================================================================================

    def replay(self, record: GroupRecord, position: int) -> None:
        """Apply one OffsetCommit record, the `position`-th of the log. The shard has opened
        the group's entry before a value is replayed; a tombstone of an unknown group is
        ignored."""
        key = record.key
        assert isinstance(key, OffsetKey)
        tp = TopicPartition(key.topic, key.partition)
        if record.producer_id >= 0:
            assert isinstance(record.value, OffsetValue)
            pending = self.groups[key.group_id].pending
            pending.setdefault(record.producer_id, {})[tp] = (record.value, position)
            return
        offsets = self.groups.get(key.group_id)
        if record.value is None:
            if offsets is not None:
                offsets.committed.pop(tp, None)
                offsets.positions[tp] = position
            return
        assert isinstance(record.value, OffsetValue)
        assert offsets is not None
        offsets.committed[tp] = record.value
        offsets.positions[tp] = position

    def complete(self, producer_id: int, partition: int, commit: bool) -> None:
        """A COMMIT/ABORT marker of `producer_id` landed on `__consumer_offsets` partition
        `partition`: its pending offsets in the groups of that partition are committed (unless
        a plain commit written after them exists) or dropped."""
        for group_id, offsets in self.groups.items():
            if producer_id not in offsets.pending:
                continue
            if partition_for(group_id, self.settings.partitions) != partition:
                continue
            pending = offsets.pending.pop(producer_id)
            if not commit:
                continue
            for tp, (value, position) in pending.items():
                if offsets.positions.get(tp, -1) < position:
                    offsets.committed[tp] = value
                    offsets.positions[tp] = position
