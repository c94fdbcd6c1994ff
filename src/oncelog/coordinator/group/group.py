"""One classic group: its state, generation, members and (a view of) its offsets.

Theory of operation: `Group` is plain data plus the rules that read it (who is fenced, which
protocol wins, whether everybody has rejoined). It changes state only through `transition`,
which checks the table in `state.py`; the membership manager (`membership.py`) decides when.
Its offsets belong to the offset manager (`offsets.py`); `offsets` and
`pending_txn_offsets` are read-only views of them.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass

from oncelog.coordinator.group.member import Member
from oncelog.coordinator.group.offsets import GroupOffsets
from oncelog.coordinator.group.records import GroupValue, MemberValue, OffsetValue
from oncelog.coordinator.group.state import GroupState, check_transition
from oncelog.types import TopicPartition


@dataclass(frozen=True, slots=True)
class Deadlines:
    """The timers of a group in milliseconds (monotonic); None when not armed."""

    join: int | None = None
    initial_delay_cap: int | None = None
    sync: int | None = None


class Group:
    def __init__(self, group_id: str, offset_state: GroupOffsets | None = None) -> None:
        self.group_id = group_id
        self.state = GroupState.EMPTY
        self.generation = 0
        self.protocol_type: str | None = None
        self.protocol_name: str | None = None
        self.leader_id: str | None = None
        self.members: dict[str, Member] = {}
        self.static_members: dict[str, str] = {}
        #: Member ids handed out with MEMBER_ID_REQUIRED (KIP-394) -> when they expire.
        self.pending_members: dict[str, int] = {}
        #: The group's offsets, kept (and changed) by the coordinator's `OffsetManager`,
        #: which opened this entry with the group; read here through `offsets`.
        self.offset_state = offset_state if offset_state is not None else GroupOffsets()
        self.timers = Deadlines()
        #: A new member joined during the initial rebalance delay (which then extends).
        self.new_member_added = False
        self.state_timestamp = -1

    def transition(self, target: GroupState) -> None:
        check_transition(self.group_id, self.state, target)
        self.state = target

    def in_state(self, *states: GroupState) -> bool:
        return self.state in states

    # -- offsets (read-only views of `offset_state`) -------------------------------------------

    @property
    def offsets(self) -> Mapping[TopicPartition, OffsetValue]:
        """Committed offsets."""
        return self.offset_state.committed

    @property
    def pending_txn_offsets(self) -> Mapping[int, Mapping[TopicPartition, tuple[OffsetValue, int]]]:
        """Transactional offsets awaiting their producer's marker: producer id -> partition
        -> (offset, replay position)."""
        return self.offset_state.pending

    def has_pending_offsets(self, tp: TopicPartition) -> bool:
        return any(tp in pending for pending in self.pending_txn_offsets.values())

    # -- membership ---------------------------------------------------------------------------

    def add(self, member: Member) -> None:
        self.members[member.member_id] = member
        if member.group_instance_id is not None:
            self.static_members[member.group_instance_id] = member.member_id
        if self.protocol_type is None or not self.members:
            self.protocol_type = member.protocol_type

    def remove(self, member_id: str) -> Member | None:
        member = self.members.pop(member_id, None)
        if member is None:
            return None
        instance = member.group_instance_id
        if instance is not None and self.static_members.get(instance) == member_id:
            del self.static_members[instance]
        if self.leader_id == member_id:
            self.leader_id = next(iter(self.members), None)
        return member

    def is_fenced(self, member_id: str, instance_id: str | None) -> bool:
        """A static member whose instance id now belongs to another member id (KIP-345)."""
        if instance_id is None:
            return False
        current = self.static_members.get(instance_id)
        return current is not None and current != member_id

    def all_joined(self) -> bool:
        return not self.pending_members and all(
            m.awaiting_join is not None for m in self.members.values()
        )

    def max_rebalance_timeout_ms(self) -> int:
        return max((m.rebalance_timeout_ms for m in self.members.values()), default=0)

    # -- protocols ----------------------------------------------------------------------------

    def candidate_protocols(self) -> set[str]:
        members = list(self.members.values())
        if not members:
            return set()
        common = set(members[0].protocol_names())
        for m in members[1:]:
            common &= set(m.protocol_names())
        return common

    def supports(self, protocol_type: str, protocols: list[tuple[str, bytes]]) -> bool:
        names = {name for name, _ in protocols}
        if not protocol_type or not names:
            return False
        if not self.members:
            return True
        return protocol_type == self.protocol_type and bool(names & self.candidate_protocols())

    def select_protocol(self) -> str:
        """Every member votes for its favourite common protocol; most votes wins."""
        candidates = self.candidate_protocols()
        votes = Counter(m.vote(candidates) for m in self.members.values())
        return max(sorted(votes), key=lambda name: votes[name])

    # -- persistence --------------------------------------------------------------------------

    def to_value(self, assignments: dict[str, bytes] | None = None, now_ms: int = -1) -> GroupValue:
        """The GroupMetadataValue of this group (with `assignments` if given)."""
        members = tuple(
            MemberValue(
                m.member_id,
                m.group_instance_id,
                m.client_id,
                m.client_host,
                m.rebalance_timeout_ms,
                m.session_timeout_ms,
                m.metadata_for(self.protocol_name),
                (assignments or {}).get(m.member_id, m.assignment),
            )
            for m in self.members.values()
        )
        return GroupValue(
            self.protocol_type or "",
            self.generation,
            self.protocol_name,
            self.leader_id,
            now_ms,
            members,
        )
