"""The etcd value codecs and key layout of the replicated cluster's metadata."""

from __future__ import annotations

import json
import uuid

import pytest

from oncelog.metadata.cluster_state import (
    BrokerRegistration,
    ClusterStateError,
    ControllerInfo,
    KeyKind,
    PartitionState,
    TopicAssignment,
    key_for_broker,
    key_for_controller,
    key_for_partition,
    key_for_producer_ids,
    key_for_topic,
    parse_key,
    prefix_for_partitions,
)
from oncelog.metadata.producer_id_blocks import decode_next, encode_next, next_block

TOPIC = TopicAssignment(
    "events", uuid.UUID(int=7), ((1, 2, 3), (2, 3, 1)), {"retention.ms": "1000"}, False
)


@pytest.mark.parametrize(
    "value",
    [
        BrokerRegistration(1, "127.0.0.1", 9092, None),
        BrokerRegistration(2, "b2", 9093, "rack-a"),
        ControllerInfo(3),
        TOPIC,
        PartitionState(1, 4, (1, 2), 9),
        PartitionState(-1, 5, (3,), 10, leader_recovery=True),
    ],
)
def test_round_trip_with_version(value: object) -> None:
    data = value.to_bytes()  # type: ignore[attr-defined]
    assert json.loads(data)["version"] == 1
    assert type(value).from_bytes(data) == value  # type: ignore[attr-defined]


def test_topic_assignment_is_frozen_and_normalised() -> None:
    t = TopicAssignment("t", uuid.UUID(int=1), [[1, 2]], {"a": "b"})  # type: ignore[arg-type]
    assert t.replicas == ((1, 2),)
    assert t.partitions == 1
    with pytest.raises(TypeError):
        t.configs["a"] = "c"  # type: ignore[index]


BAD_PARTITION_STATES = [
    b"",
    b"\xff\xfe",
    b"[]",
    b'{"leader": 1}',
    b'{"version": 2, "leader": 1, "leader_epoch": 0, "isr": [1], "partition_epoch": 0}',
    b'{"version": 1, "leader_epoch": 0, "isr": [1], "partition_epoch": 0}',
    b'{"version": 1, "leader": "1", "leader_epoch": 0, "isr": [1], "partition_epoch": 0}',
    b'{"version": 1, "leader": true, "leader_epoch": 0, "isr": [1], "partition_epoch": 0}',
    b'{"version": 1, "leader": 1, "leader_epoch": 0, "isr": 1, "partition_epoch": 0}',
    b'{"version": 1, "leader": 1, "leader_epoch": 0, "isr": [1.5], "partition_epoch": 0}',
    b'{"version": 1, "leader": 1, "leader_epoch": 0, "isr": [], "partition_epoch": 0}',
    b'{"version": 1, "leader": 1, "leader_epoch": 0, "isr": [2], "partition_epoch": 0}',
    b'{"version": 1, "leader": 1, "leader_epoch": 0, "isr": [1, 1], "partition_epoch": 0}',
    b'{"version": 1, "leader": 1, "leader_epoch": -1, "isr": [1], "partition_epoch": 0}',
    b'{"version": 1, "leader": 1, "leader_epoch": 0, "isr": [1], "partition_epoch": 0,'
    b' "leader_recovery": 1}',
]


@pytest.mark.parametrize("data", BAD_PARTITION_STATES)
def test_malformed_partition_state_is_one_typed_error(data: bytes) -> None:
    with pytest.raises(ClusterStateError) as info:
        PartitionState.from_bytes(data)
    assert "\n" not in str(info.value)
    assert isinstance(info.value, ValueError)


def _topic_json(**changes: object) -> bytes:
    obj = json.loads(TOPIC.to_bytes())
    obj.update(changes)
    return json.dumps(obj).encode()


@pytest.mark.parametrize(
    "data",
    [
        _topic_json(topic_id="not-a-uuid"),
        _topic_json(topic_id=5),
        _topic_json(replicas=[[1, 1]]),
        _topic_json(replicas=[[]]),
        _topic_json(replicas=[1, 2]),
        _topic_json(replicas="x"),
        _topic_json(configs={"a": 1}),
        _topic_json(configs=[]),
        _topic_json(internal="no"),
        _topic_json(name=None),
    ],
)
def test_malformed_topic_assignment(data: bytes) -> None:
    with pytest.raises(ClusterStateError, match="topic"):
        TopicAssignment.from_bytes(data)


@pytest.mark.parametrize(
    "data",
    [
        b'{"version": 1, "node_id": 1, "host": "h", "port": "9092"}',
        b'{"version": 1, "node_id": 1, "host": "h", "port": 9092, "rack": 3}',
        b'{"version": 1, "host": "h", "port": 9092}',
    ],
)
def test_malformed_broker_registration(data: bytes) -> None:
    with pytest.raises(ClusterStateError, match="broker registration"):
        BrokerRegistration.from_bytes(data)


def test_malformed_controller() -> None:
    with pytest.raises(ClusterStateError, match="controller"):
        ControllerInfo.from_bytes(b'{"version": 1}')


def test_keys_and_parse_key() -> None:
    assert key_for_broker(3) == "brokers/3"
    assert key_for_controller() == "controller"
    assert key_for_topic("a.b_c-d") == "topics/a.b_c-d"
    assert key_for_partition("t", 12) == "partitions/t/12"
    assert prefix_for_partitions("t") == "partitions/t/"
    assert key_for_producer_ids() == "producer_ids"
    assert parse_key("brokers/3") == (KeyKind.BROKER, ("3",))
    assert parse_key("brokers/3").node_id == 3
    parsed = parse_key(b"partitions/t/12")
    assert parsed.kind is KeyKind.PARTITION
    assert (parsed.topic, parsed.partition) == ("t", 12)
    assert parse_key("topics/t").topic == "t"
    assert parse_key("controller").kind is KeyKind.CONTROLLER
    assert parse_key("producer_ids").kind is KeyKind.PRODUCER_IDS


@pytest.mark.parametrize(
    "key",
    [
        "",
        "brokers",
        "brokers/x",
        "brokers/01",
        "brokers/1/2",
        "controller/1",
        "topics/",
        "topics/a/b",
        "partitions/t",
        "partitions/t/-1",
        "partitions/t/1/2",
        "other/1",
        "topics/a b",
    ],
)
def test_parse_key_refuses(key: str) -> None:
    with pytest.raises(ClusterStateError, match="not a cluster metadata key"):
        parse_key(key)


def test_key_helpers_refuse_names_that_would_break_the_layout() -> None:
    with pytest.raises(ClusterStateError):
        key_for_topic("a/b")
    with pytest.raises(ClusterStateError):
        key_for_partition("", 0)


# -- producer id blocks -------------------------------------------------------------------------


def test_producer_id_blocks_follow_each_other() -> None:
    block, value = next_block(None)
    assert (block.first, block.size, block.end, block.last) == (0, 1000, 1000, 999)
    assert 0 in block and 999 in block and 1000 not in block
    assert json.loads(value) == {"version": 1, "next": 1000}
    second, value = next_block(value)
    assert (second.first, second.end) == (1000, 2000)
    assert decode_next(value) == 2000


def test_producer_id_block_skips_ids_in_use() -> None:
    block, value = next_block(encode_next(1000), at_least=5000)
    assert block.first == 5000
    assert decode_next(value) == 6000
    assert next_block(encode_next(7000), at_least=5000)[0].first == 7000


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"{}",
        b'{"version": 1}',
        b'{"version": 1, "next": "5"}',
        b'{"version": 1, "next": -1}',
        b'{"version": 1, "next": 1.5}',
        b'{"version": 3, "next": 5}',
        b"null",
    ],
)
def test_corrupt_producer_ids_refused(data: bytes) -> None:
    with pytest.raises(ClusterStateError, match="producer_ids"):
        next_block(data)


def test_producer_ids_exhausted() -> None:
    with pytest.raises(ClusterStateError, match="exhausted"):
        next_block(encode_next(2**63 - 1000))
