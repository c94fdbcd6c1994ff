"""The classic group coordinator as a state machine, driven directly with a ManualClock.

Records a Result returns are replayed right away (as the broker does after appending them),
and `replay rebuilds` checks that a fresh coordinator fed the same records ends up equal.
"""

from __future__ import annotations

import itertools
from typing import Any

import pytest

from oncelog.clock import ManualClock
from oncelog.coordinator.group import GroupCoordinator, GroupSettings, GroupState, Waiter
from oncelog.coordinator.group.coordinator import JoinRequest, Result
from oncelog.coordinator.group.records import (
    GroupRecord,
    OffsetValue,
    decode_batches,
    encode_batch,
    java_string_hash,
    partition_for,
)
from oncelog.coordinator.group.state import IllegalGroupStateTransition, check_transition
from oncelog.errors import ErrorCode as E
from oncelog.types import TopicPartition

G = "group-a"
TP = TopicPartition("t", 0)


class Harness:
    def __init__(self, delay: int = 0) -> None:
        self.clock = ManualClock()
        ids = itertools.count(1)
        self.coordinator = GroupCoordinator(
            GroupSettings(partitions=50, initial_rebalance_delay_ms=delay),
            self.clock,
            new_member_id=lambda prefix: f"{prefix}-{next(ids)}",
        )
        self.log: list[GroupRecord] = []

    def run(self, result: Result) -> Any:
        for record in result.records:
            self.coordinator.replay(record)
        self.log += result.records
        return result.response

    def tick(self, ms: int) -> None:
        self.clock.advance(ms)
        records = self.coordinator.tick()
        for record in records:
            self.coordinator.replay(record)
        self.log += records

    def join(
        self, member_id: str = "", instance: str | None = None, protocols: Any = None, **kw: Any
    ) -> Any:
        req = JoinRequest(
            group_id=G,
            member_id=member_id,
            group_instance_id=instance,
            client_id=kw.get("client_id", "c"),
            client_host="/127.0.0.1",
            session_timeout_ms=kw.get("session", 10_000),
            rebalance_timeout_ms=kw.get("rebalance", 30_000),
            protocol_type="consumer",
            protocols=protocols or [("range", b"r"), ("roundrobin", b"rr")],
            require_known_member=kw.get("require_known", False),
        )
        return self.run(self.coordinator.join(req))

    def sync(
        self, member_id: str, generation: int, assignments: dict[str, bytes] | None = None
    ) -> Any:
        return self.run(
            self.coordinator.sync(G, generation, member_id, None, None, None, assignments or {})
        )

    @property
    def group(self) -> Any:
        return self.coordinator.groups[G]


def result_of(reply: Any) -> dict[str, Any]:
    if isinstance(reply, Waiter):
        assert reply.result is not None, "still waiting"
        return reply.result
    return reply


def form_group(h: Harness, n: int) -> list[str]:
    """n members join and sync; returns their member ids (the first is the leader)."""
    first = result_of(h.join())
    ids = [first["member_id"]]
    h.sync(ids[0], first["generation_id"], {ids[0]: b"a0"})
    waiters = []
    for _ in range(n - 1):
        waiters.append(h.join())  # waits for the others to rejoin
    if n > 1:
        leader_wait = h.join(ids[0])
        replies = [result_of(w) for w in [leader_wait, *waiters]]
        ids = [r["member_id"] for r in replies]
        gen = replies[0]["generation_id"]
        syncs = [h.sync(m, gen) for m in ids[1:]]
        h.sync(ids[0], gen, {m: f"a-{m}".encode() for m in ids})
        assert all(result_of(s)["error_code"] == E.none for s in syncs)
    assert h.group.state is GroupState.STABLE
    return ids


def test_transition_table_refuses_illegal_moves() -> None:
    check_transition(G, GroupState.EMPTY, GroupState.PREPARING_REBALANCE)
    with pytest.raises(IllegalGroupStateTransition):
        check_transition(G, GroupState.EMPTY, GroupState.COMPLETING_REBALANCE)
    with pytest.raises(IllegalGroupStateTransition):
        check_transition(G, GroupState.DEAD, GroupState.EMPTY)


def test_java_hash_and_partition() -> None:
    assert java_string_hash("") == 0
    assert java_string_hash("hello") == 99162322
    assert java_string_hash("polygenelubricants") == -(2**31)  # Integer.MIN_VALUE
    assert partition_for("polygenelubricants", 50) == 0
    assert partition_for("my-group", 50) == abs(java_string_hash("my-group")) % 50


def test_single_member_join_sync_heartbeat() -> None:
    h = Harness()
    reply = result_of(h.join())
    assert reply["error_code"] == E.none and reply["generation_id"] == 1
    member = reply["member_id"]
    assert reply["leader"] == member and reply["protocol_name"] == "range"
    assert h.group.state is GroupState.COMPLETING_REBALANCE
    assert result_of(h.sync(member, 1, {member: b"assign"}))["assignment"] == b"assign"
    assert h.group.state is GroupState.STABLE
    assert h.coordinator.heartbeat(G, 1, member, None) == E.none
    assert h.coordinator.heartbeat(G, 0, member, None) == E.illegal_generation
    assert h.coordinator.heartbeat(G, 1, "nobody", None) == E.unknown_member_id


def test_member_id_required_v4() -> None:
    h = Harness()
    first = h.join(require_known=True)
    assert first["error_code"] == E.member_id_required and first["member_id"]
    reply = result_of(h.join(first["member_id"], require_known=True))
    assert reply["error_code"] == E.none and reply["member_id"] == first["member_id"]


def test_second_member_triggers_rebalance_and_old_generation_is_fenced() -> None:
    h = Harness()
    a, b = form_group(h, 2)
    assert h.group.generation == 2
    assert h.coordinator.heartbeat(G, 2, b, None) == E.none
    offsets = {TP: OffsetValue(5)}
    assert h.run(h.coordinator.commit_offsets(G, 1, a, None, offsets)) == {TP: E.illegal_generation}
    assert h.run(h.coordinator.commit_offsets(G, 2, a, None, offsets)) == {TP: E.none}
    assert h.coordinator.fetch_offsets(G, [TP])[TP] == OffsetValue(5)
    assert h.run(h.coordinator.commit_offsets(G, 2, "zombie", None, offsets)) == {
        TP: E.unknown_member_id
    }


def test_heartbeat_during_rebalance_and_rejoin_timeout() -> None:
    h = Harness()
    a, b = form_group(h, 2)
    c_wait = h.join()  # a third member: rebalance
    assert h.group.state is GroupState.PREPARING_REBALANCE
    assert h.coordinator.heartbeat(G, 2, a, None) == E.rebalance_in_progress
    a_wait = h.join(a)
    # b never rejoins: after the rebalance timeout it is removed and the join completes.
    h.tick(30_000)
    assert result_of(a_wait)["generation_id"] == 3
    assert result_of(c_wait)["generation_id"] == 3
    assert b not in h.group.members
    assert h.coordinator.heartbeat(G, 3, b, None) == E.unknown_member_id


def test_session_timeout_removes_member_and_rebalances() -> None:
    h = Harness()
    a, b = form_group(h, 2)
    for _ in range(2):
        h.tick(4_000)
        assert h.coordinator.heartbeat(G, 2, a, None) == E.none
    assert b in h.group.members
    h.tick(4_000)
    assert b not in h.group.members  # b stopped heartbeating for 12 s > 10 s
    assert h.group.state is GroupState.PREPARING_REBALANCE
    assert h.coordinator.heartbeat(G, 2, a, None) == E.rebalance_in_progress
    reply = result_of(h.join(a))
    assert reply["generation_id"] == 3 and reply["leader"] == a


def test_sync_waits_for_leader_and_follower_gets_its_share() -> None:
    h = Harness()
    first = result_of(h.join())
    a = first["member_id"]
    h.sync(a, 1, {a: b"x"})
    b_wait = h.join()
    a_reply = result_of(h.join(a))
    b_reply = result_of(b_wait)
    b = b_reply["member_id"]
    assert a_reply["members"] and not b_reply["members"]  # only the leader gets the members
    follower = h.sync(b, 2)
    assert isinstance(follower, Waiter) and follower.result is None
    assert h.coordinator.heartbeat(G, 2, b, None) == E.none  # CompletingRebalance
    h.sync(a, 2, {a: b"for-a", b: b"for-b"})
    assert result_of(follower)["assignment"] == b"for-b"


def test_leader_that_never_syncs_is_evicted() -> None:
    h = Harness()
    a, b = form_group(h, 2)
    h.join()  # c joins; a and b rejoin
    h.join(a)
    h.join(b)
    gen = h.group.generation
    leader = h.group.leader_id
    followers = [m for m in h.group.members if m != leader]
    waits = [h.sync(m, gen) for m in followers]
    h.tick(30_000)  # no SyncGroup from the leader within the rebalance timeout
    assert leader not in h.group.members
    assert all(result_of(w)["error_code"] == E.rebalance_in_progress for w in waits)


def test_leave_group_rebalances_and_empty_group_bumps_generation() -> None:
    h = Harness()
    a, b = form_group(h, 2)
    codes = h.run(h.coordinator.leave(G, [(b, None), ("nobody", None)]))
    assert codes == [E.none, E.unknown_member_id]
    assert h.group.state is GroupState.PREPARING_REBALANCE
    h.run(h.coordinator.leave(G, [(a, None)]))
    assert h.group.state is GroupState.EMPTY
    assert h.group.generation == 3


def test_initial_rebalance_delay_collects_members() -> None:
    h = Harness(delay=3_000)
    w1 = h.join()
    h.tick(2_000)
    w2 = h.join()
    h.tick(1_000)  # first delay passed, but a member arrived: extended
    assert w1.result is None
    h.tick(3_000)
    assert result_of(w1)["generation_id"] == 1 == result_of(w2)["generation_id"]
    assert len(h.group.members) == 2


def test_static_member_rejoin_replaces_without_rebalance_and_fences_old_id() -> None:
    h = Harness()
    first = result_of(h.join(instance="i-1"))
    old = first["member_id"]
    h.sync(old, 1, {old: b"mine"})
    assert h.group.state is GroupState.STABLE
    reply = result_of(h.join(instance="i-1"))
    new = reply["member_id"]
    assert new != old and reply["generation_id"] == 1  # no rebalance
    assert h.group.state is GroupState.STABLE
    assert reply["skip_assignment"] is True  # it was the leader
    assert h.coordinator.heartbeat(G, 1, old, "i-1") == E.fenced_instance_id
    assert h.run(h.coordinator.commit_offsets(G, 1, old, "i-1", {TP: OffsetValue(1)})) == {
        TP: E.fenced_instance_id
    }
    assert result_of(h.sync(new, 1))["assignment"] == b"mine"
    assert h.coordinator.heartbeat(G, 1, new, "i-1") == E.none


def test_simple_commits_and_delete_group() -> None:
    h = Harness()
    assert h.run(h.coordinator.commit_offsets(G, 3, "", None, {TP: OffsetValue(1)})) == {
        TP: E.illegal_generation
    }
    assert h.run(h.coordinator.commit_offsets(G, -1, "", None, {TP: OffsetValue(7)})) == {
        TP: E.none
    }
    assert h.group.state is GroupState.EMPTY
    assert h.run(h.coordinator.delete_groups([G, "nope"])) == {
        G: E.none,
        "nope": E.group_id_not_found,
    }
    assert G not in h.coordinator.groups
    assert h.coordinator.fetch_offsets(G, [TP]) == {TP: None}


def test_delete_refuses_non_empty_group() -> None:
    h = Harness()
    form_group(h, 1)
    assert h.run(h.coordinator.delete_groups([G])) == {G: E.non_empty_group}


def test_replay_rebuilds_the_same_state() -> None:
    h = Harness()
    a, _ = form_group(h, 2)
    h.run(h.coordinator.commit_offsets(G, 2, a, None, {TP: OffsetValue(42, 0, "m", 1)}))
    h.run(h.coordinator.commit_offsets("other", -1, "", None, {TP: OffsetValue(3)}))
    h.run(h.coordinator.delete_groups(["other"]))
    data = encode_batch(h.log, 1)
    records, _ = decode_batches(data)
    assert records == h.log
    fresh = GroupCoordinator(GroupSettings(), h.clock)
    for record in records:
        fresh.replay(record)
    group = fresh.groups[G]
    assert set(fresh.groups) == {G}
    assert group.state is GroupState.STABLE
    assert group.generation == 2 and group.leader_id == h.group.leader_id
    assert {m: x.assignment for m, x in group.members.items()} == {
        m: x.assignment for m, x in h.group.members.items()
    }
    assert group.offsets == h.group.offsets
    # Loaded members must heartbeat within their session timeout.
    assert fresh.heartbeat(G, 2, a, None) == E.none
