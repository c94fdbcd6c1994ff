"""The consumer-group APIs' handlers on the in-process broker: a member joins, syncs,
heartbeats, commits and fetches offsets, and leaves; the group is listed, described and
deleted."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest
from kio.schema.delete_groups.v2.response import DeleteGroupsResponse
from kio.schema.describe_groups.v5.response import DescribeGroupsResponse
from kio.schema.find_coordinator.v4.response import FindCoordinatorResponse
from kio.schema.heartbeat.v4.response import HeartbeatResponse
from kio.schema.join_group.v9.response import JoinGroupResponse
from kio.schema.leave_group.v5.response import LeaveGroupResponse
from kio.schema.list_groups.v5.response import ListGroupsResponse
from kio.schema.offset_commit.v9.response import OffsetCommitResponse
from kio.schema.offset_delete.v0.response import OffsetDeleteResponse
from kio.schema.offset_fetch.v7.response import OffsetFetchResponse
from kio.schema.sync_group.v5.response import SyncGroupResponse

from oncelog.errors import ErrorCode
from oncelog.protocol.registry import ApiKey
from tests.harness.in_process import InProcessBroker, build_broker, covers

GROUP = "g1"
TOPIC = "orders"


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[InProcessBroker]:
    b = build_broker(tmp_path, **{"group.initial.rebalance.delay.ms": "0"})
    b.create_topic(TOPIC, 2)
    yield b
    b.close()


def join(broker: InProcessBroker, member_id: str = "") -> JoinGroupResponse:
    return broker.ask(
        JoinGroupResponse,
        {
            "group_id": GROUP,
            "session_timeout": timedelta(seconds=30),
            "rebalance_timeout": timedelta(seconds=30),
            "member_id": member_id,
            "group_instance_id": None,
            "protocol_type": "consumer",
            "protocols": [{"name": "range", "metadata": b"\x00\x01"}],
            "reason": None,
        },
        wait=True,
    )


def member(broker: InProcessBroker) -> tuple[str, int]:
    """A member of GROUP that joined and synced: its id and generation."""
    first = join(broker)
    assert first.error_code == ErrorCode.member_id_required
    joined = join(broker, first.member_id)
    assert joined.error_code == ErrorCode.none, joined
    assert joined.leader == first.member_id
    synced = broker.ask(
        SyncGroupResponse,
        {
            "group_id": GROUP,
            "generation_id": joined.generation_id,
            "member_id": first.member_id,
            "protocol_type": "consumer",
            "protocol_name": "range",
            "assignments": [{"member_id": first.member_id, "assignment": b"mine"}],
        },
        wait=True,
    )
    assert synced.error_code == ErrorCode.none, synced
    assert synced.assignment == b"mine"
    return first.member_id, joined.generation_id


def commit(broker: InProcessBroker, member_id: str, generation: int, offset: int) -> None:
    answer = broker.ask(
        OffsetCommitResponse,
        {
            "group_id": GROUP,
            "generation_id_or_member_epoch": generation,
            "member_id": member_id,
            "topics": [
                {
                    "name": TOPIC,
                    "partitions": [
                        {
                            "partition_index": 0,
                            "committed_offset": offset,
                            "committed_leader_epoch": -1,
                            "committed_metadata": "m",
                        }
                    ],
                }
            ],
        },
        wait=True,
    )
    assert answer.topics[0].partitions[0].error_code == ErrorCode.none, answer


def fetch_offsets(broker: InProcessBroker) -> OffsetFetchResponse:
    return broker.ask(
        OffsetFetchResponse,
        {
            "group_id": GROUP,
            "topics": [{"name": TOPIC, "partition_indexes": [0]}],
            "require_stable": False,
        },
    )


@covers(ApiKey.FIND_COORDINATOR)
def test_find_coordinator_names_this_broker(broker: InProcessBroker) -> None:
    answer = broker.ask(FindCoordinatorResponse, {"key_type": 0, "coordinator_keys": [GROUP]})
    (coordinator,) = answer.coordinators
    assert coordinator.error_code == ErrorCode.none
    assert (coordinator.key, coordinator.node_id) == (GROUP, 1)


@covers(ApiKey.FIND_COORDINATOR)
def test_find_coordinator_refuses_an_unknown_key_type(broker: InProcessBroker) -> None:
    answer = broker.ask(FindCoordinatorResponse, {"key_type": 7, "coordinator_keys": [GROUP]})
    assert answer.coordinators[0].error_code == ErrorCode.invalid_request


@covers(ApiKey.JOIN_GROUP, ApiKey.SYNC_GROUP)
def test_a_member_joins_and_syncs(broker: InProcessBroker) -> None:
    member_id, generation = member(broker)
    assert member_id and generation >= 1


@covers(ApiKey.HEARTBEAT)
def test_heartbeat_of_a_member_and_of_a_stranger(broker: InProcessBroker) -> None:
    member_id, generation = member(broker)
    body = {"group_id": GROUP, "generation_id": generation, "member_id": member_id}
    assert broker.ask(HeartbeatResponse, body).error_code == ErrorCode.none
    stranger = broker.ask(HeartbeatResponse, {**body, "member_id": "nobody"})
    assert stranger.error_code == ErrorCode.unknown_member_id


@covers(ApiKey.OFFSET_COMMIT, ApiKey.OFFSET_FETCH)
def test_a_committed_offset_is_fetched_back(broker: InProcessBroker) -> None:
    member_id, generation = member(broker)
    commit(broker, member_id, generation, 42)
    answer = fetch_offsets(broker)
    assert answer.error_code == ErrorCode.none
    partition = answer.topics[0].partitions[0]
    assert (partition.committed_offset, partition.metadata) == (42, "m")


@covers(ApiKey.OFFSET_COMMIT)
def test_offset_commit_of_an_unknown_topic(broker: InProcessBroker) -> None:
    member_id, generation = member(broker)
    answer = broker.ask(
        OffsetCommitResponse,
        {
            "group_id": GROUP,
            "generation_id_or_member_epoch": generation,
            "member_id": member_id,
            "topics": [
                {
                    "name": "nowhere",
                    "partitions": [
                        {"partition_index": 0, "committed_offset": 1, "committed_metadata": ""}
                    ],
                }
            ],
        },
        wait=True,
    )
    assert answer.topics[0].partitions[0].error_code == ErrorCode.unknown_topic_or_partition


@covers(ApiKey.LIST_GROUPS, ApiKey.DESCRIBE_GROUPS)
def test_the_group_is_listed_and_described(broker: InProcessBroker) -> None:
    member_id, _ = member(broker)
    listed = broker.ask(ListGroupsResponse, {"states_filter": [], "types_filter": []})
    assert listed.error_code == ErrorCode.none
    assert [(g.group_id, g.group_state) for g in listed.groups] == [(GROUP, "Stable")]
    described = broker.ask(
        DescribeGroupsResponse, {"groups": [GROUP], "include_authorized_operations": False}
    )
    (group,) = described.groups
    assert group.error_code == ErrorCode.none
    assert [m.member_id for m in group.members] == [member_id]


@covers(ApiKey.LEAVE_GROUP)
def test_the_member_leaves(broker: InProcessBroker) -> None:
    member_id, _ = member(broker)
    answer = broker.ask(
        LeaveGroupResponse,
        {"group_id": GROUP, "members": [{"member_id": member_id, "reason": None}]},
        wait=True,
    )
    assert answer.error_code == ErrorCode.none
    assert [(m.member_id, m.error_code) for m in answer.members] == [(member_id, ErrorCode.none)]
    described = broker.ask(
        DescribeGroupsResponse, {"groups": [GROUP], "include_authorized_operations": False}
    )
    assert described.groups[0].group_state == "Empty"


@covers(ApiKey.OFFSET_DELETE)
def test_offset_delete_of_an_empty_group(broker: InProcessBroker) -> None:
    member_id, generation = member(broker)
    commit(broker, member_id, generation, 7)
    broker.ask(
        LeaveGroupResponse,
        {"group_id": GROUP, "members": [{"member_id": member_id}]},
        wait=True,
    )
    answer = broker.ask(
        OffsetDeleteResponse,
        {"group_id": GROUP, "topics": [{"name": TOPIC, "partitions": [{"partition_index": 0}]}]},
        wait=True,
    )
    assert answer.error_code == ErrorCode.none
    assert answer.topics[0].partitions[0].error_code == ErrorCode.none
    assert fetch_offsets(broker).topics[0].partitions[0].committed_offset == -1


@covers(ApiKey.DELETE_GROUPS)
def test_delete_groups_of_an_empty_and_of_an_unknown_group(broker: InProcessBroker) -> None:
    member_id, _ = member(broker)
    broker.ask(
        LeaveGroupResponse,
        {"group_id": GROUP, "members": [{"member_id": member_id}]},
        wait=True,
    )
    answer = broker.ask(DeleteGroupsResponse, {"groups_names": [GROUP, "never"]}, wait=True)
    codes = {r.group_id: r.error_code for r in answer.results}
    assert codes == {GROUP: ErrorCode.none, "never": ErrorCode.group_id_not_found}
    listed = broker.ask(ListGroupsResponse, {"states_filter": [], "types_filter": []})
    assert listed.groups == ()
