"""Read-only views of a cluster for the web console: the cluster and its brokers, partitions
with their offsets, consumer groups with members and committed offsets.

Everything goes through the Kafka protocol (DescribeCluster, Metadata, ListOffsets,
ListGroups, DescribeGroups, OffsetFetch), so the console reads Apache Kafka the same way.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from oncelog.client.admin import Admin
from oncelog.client.connection import ClientError
from oncelog.errors import error_name
from oncelog.types import (
    EARLIEST_TIMESTAMP,
    LATEST_TIMESTAMP,
    TopicPartition,
)

LIST_OFFSETS, OFFSET_FETCH, DESCRIBE_GROUPS, LIST_GROUPS, DESCRIBE_CLUSTER = 2, 9, 15, 16, 60
GROUP_KEY = 0


@dataclass(frozen=True, slots=True)
class BrokerInfo:
    node_id: int
    host: str
    port: int
    rack: str | None


@dataclass(frozen=True, slots=True)
class ClusterInfo:
    cluster_id: str
    controller_id: int
    brokers: tuple[BrokerInfo, ...]


@dataclass(frozen=True, slots=True)
class PartitionInfo:
    tp: TopicPartition
    leader: int
    leader_epoch: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    #: Non-zero when Metadata reported an error for the partition (LEADER_NOT_AVAILABLE...).
    error_code: int


@dataclass(frozen=True, slots=True)
class GroupListing:
    group_id: str
    protocol_type: str
    state: str
    coordinator_id: int


@dataclass(frozen=True, slots=True)
class GroupMember:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    #: The partitions the member was assigned (decoded for protocol type "consumer").
    assignment: tuple[TopicPartition, ...]


@dataclass(frozen=True, slots=True)
class GroupDescription:
    group_id: str
    state: str
    protocol_type: str
    protocol: str
    members: tuple[GroupMember, ...]


def describe_cluster(admin: Admin) -> ClusterInfo:
    """DescribeCluster from the first broker, or Metadata where DescribeCluster is missing."""
    conn = admin.all_nodes()[0]
    if DESCRIBE_CLUSTER in conn.versions:
        response = conn.call(
            DESCRIBE_CLUSTER, (0, 1), {"include_cluster_authorized_operations": False}
        )
        code = int(response.error_code)
        if code != 0:
            raise ClientError(f"cannot describe the cluster: {error_name(code)}")
        brokers = [BrokerInfo(b.broker_id, b.host, b.port, b.rack) for b in response.brokers]
        cluster_id, controller = response.cluster_id, response.controller_id
    else:
        response = admin.refresh_metadata([])
        brokers = [BrokerInfo(b.node_id, b.host, b.port, b.rack) for b in response.brokers]
        cluster_id, controller = response.cluster_id or "", response.controller_id
    return ClusterInfo(
        str(cluster_id),
        int(controller),
        tuple(sorted(brokers, key=lambda b: b.node_id)),
    )


#: Kafka's "not requested" value of the authorized-operations fields.
OPERATIONS_NOT_REQUESTED = -(2**31)


def cluster_operations(admin: Admin) -> int:
    """The operations the connection's principal may do on the cluster, as Kafka's bit field
    (bit n set: AclOperation code n allowed), from DescribeCluster."""
    conn = admin.all_nodes()[0]
    response = conn.call(DESCRIBE_CLUSTER, (0, 1), {"include_cluster_authorized_operations": True})
    code = int(response.error_code)
    if code != 0:
        raise ClientError(f"cannot describe the cluster: {error_name(code)}")
    return int(response.cluster_authorized_operations)


def partitions(admin: Admin) -> list[PartitionInfo]:
    """Every partition of every topic (internal topics included), from Metadata."""
    response = admin.refresh_metadata()
    out = [
        PartitionInfo(
            TopicPartition(topic.name, p.partition_index),
            int(p.leader_id),
            int(p.leader_epoch),
            tuple(int(r) for r in p.replica_nodes),
            tuple(int(r) for r in p.isr_nodes),
            int(p.error_code),
        )
        for topic in response.topics
        if int(topic.error_code) == 0
        for p in topic.partitions
    ]
    return sorted(out, key=lambda p: p.tp)


def list_offsets(
    admin: Admin, tps: list[TopicPartition], timestamp: int, read_committed: bool = False
) -> dict[TopicPartition, int]:
    """ListOffsets of `timestamp` (EARLIEST_TIMESTAMP, LATEST_TIMESTAMP...) from each leader;
    partitions without a leader or answering an error are left out."""
    return admin.list_offsets(tps, timestamp, read_committed)


@dataclass(frozen=True, slots=True)
class PartitionOffsets:
    log_start: int | None
    high_watermark: int | None
    last_stable: int | None


def partition_offsets(
    admin: Admin, tps: list[TopicPartition]
) -> dict[TopicPartition, PartitionOffsets]:
    """Log start offset, high watermark and LSO: ListOffsets earliest, latest and latest
    read_committed."""
    earliest = list_offsets(admin, tps, EARLIEST_TIMESTAMP)
    latest = list_offsets(admin, tps, LATEST_TIMESTAMP)
    stable = list_offsets(admin, tps, LATEST_TIMESTAMP, read_committed=True)
    return {
        tp: PartitionOffsets(earliest.get(tp), latest.get(tp), stable.get(tp)) for tp in tps
    }


def list_groups(admin: Admin) -> list[GroupListing]:
    """ListGroups on every broker (each lists the groups it coordinates)."""
    out: list[GroupListing] = []
    for conn_id in admin.node_ids():
        response = admin.node(conn_id).call(LIST_GROUPS, (0, 4), {"states_filter": []})
        if int(response.error_code) != 0:
            raise ClientError(
                f"broker {conn_id} cannot list groups: {error_name(int(response.error_code))}"
            )
        out.extend(
            GroupListing(
                g.group_id, g.protocol_type, getattr(g, "group_state", "") or "", conn_id
            )
            for g in response.groups
        )
    return sorted(out, key=lambda g: g.group_id)


def describe_group(admin: Admin, group_id: str) -> GroupDescription:
    response = admin.coordinator(group_id, GROUP_KEY).call(
        DESCRIBE_GROUPS,
        (0, 5),
        {"groups": [group_id], "include_authorized_operations": False},
    )
    g = response.groups[0]
    if int(g.error_code) != 0:
        raise ClientError(f"cannot describe group '{group_id}': {error_name(int(g.error_code))}")
    members = tuple(
        GroupMember(
            m.member_id,
            getattr(m, "group_instance_id", None),
            m.client_id,
            m.client_host,
            consumer_assignment(m.member_assignment) if g.protocol_type == "consumer" else (),
        )
        for m in g.members
    )
    return GroupDescription(g.group_id, g.group_state, g.protocol_type, g.protocol_data, members)


def committed_offsets(admin: Admin, group_id: str) -> dict[TopicPartition, int]:
    """The group's committed offsets (OffsetFetch of all topics); none committed: empty."""
    response = admin.coordinator(group_id, GROUP_KEY).call(
        OFFSET_FETCH, (2, 7), {"group_id": group_id, "topics": None, "require_stable": False}
    )
    if int(getattr(response, "error_code", 0)) != 0:
        raise ClientError(
            f"cannot fetch the offsets of group '{group_id}': "
            f"{error_name(int(response.error_code))}"
        )
    return {
        TopicPartition(t.name, p.partition_index): int(p.committed_offset)
        for t in response.topics
        for p in t.partitions
        if int(p.error_code) == 0 and p.committed_offset >= 0
    }


def consumer_assignment(data: bytes) -> tuple[TopicPartition, ...]:
    """The partitions of a ConsumerProtocolAssignment (version, [topic, [partition]], user
    data); bytes that are not one (another protocol, truncated) give no partitions."""
    try:
        pos = 2  # version: every version starts with the same topic array
        (n_topics,) = struct.unpack_from(">i", data, pos)
        pos += 4
        out: list[TopicPartition] = []
        for _ in range(max(n_topics, 0)):
            (name_len,) = struct.unpack_from(">h", data, pos)
            pos += 2
            name = data[pos : pos + name_len].decode()
            pos += name_len
            (n_parts,) = struct.unpack_from(">i", data, pos)
            pos += 4
            for _ in range(max(n_parts, 0)):
                (partition,) = struct.unpack_from(">i", data, pos)
                pos += 4
                out.append(TopicPartition(name, partition))
    except (struct.error, UnicodeDecodeError):
        return ()
    return tuple(sorted(out))
