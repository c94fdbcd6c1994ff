"""OffsetDelete (KIP-496) in the group coordinator: which offsets may go, Kafka's codes."""

from __future__ import annotations

from oncelog.coordinator.group.records import GroupKey, OffsetKey
from oncelog.errors import ErrorCode
from oncelog.types import TopicPartition
from tests.unit.test_group_coordinator import TP, G, Harness, result_of
from tests.unit.test_group_offset_retention import commit, committed

OTHER = TopicPartition("u", 0)


def subscription(*topics: str) -> bytes:
    """A ConsumerProtocolSubscription v0: version, topics, null user data."""
    out = b"\x00\x00" + len(topics).to_bytes(4, "big")
    for t in topics:
        out += len(t).to_bytes(2, "big") + t.encode()
    return out + b"\xff\xff\xff\xff"


def delete(h: Harness, *tps: TopicPartition) -> tuple[ErrorCode, dict[TopicPartition, ErrorCode]]:
    code, result = h.coordinator.delete_offsets(G, list(tps))
    return code, h.run(result)


def test_an_active_consumer_group_keeps_the_offsets_of_its_subscribed_topics() -> None:
    h = Harness()
    first = result_of(h.join(protocols=[("range", subscription("t"))]))
    member = first["member_id"]
    h.sync(member, first["generation_id"], {member: b""})
    commit(h, {TP: 5, OTHER: 7}, generation=first["generation_id"], member=member)
    code, codes = delete(h, TP, OTHER)
    assert code is ErrorCode.none
    assert codes == {TP: ErrorCode.group_subscribed_to_topic, OTHER: ErrorCode.none}
    assert committed(h) == {TP}
    assert h.log[-1].key == OffsetKey(G, "u", 0) and h.log[-1].value is None

    # A group of another protocol type with members: nothing goes (NON_EMPTY_GROUP).
    h.group.protocol_type = "connect"
    assert delete(h, TP) == (ErrorCode.non_empty_group, {})
    assert committed(h) == {TP}


def test_an_empty_group_loses_any_offset_and_then_itself() -> None:
    h = Harness()
    commit(h, {TP: 1, OTHER: 2})
    assert delete(h, OTHER) == (ErrorCode.none, {OTHER: ErrorCode.none})
    assert committed(h) == {TP}
    # A partition without a committed offset answers NONE, as in Kafka.
    never = TopicPartition("t", 9)
    assert delete(h, TP, never) == (ErrorCode.none, {TP: ErrorCode.none, never: ErrorCode.none})
    assert h.log[-1].key == GroupKey(G) and h.log[-1].value is None
    assert G not in h.coordinator.groups
    assert delete(h, TP) == (ErrorCode.group_id_not_found, {})
