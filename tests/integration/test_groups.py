"""Consumer groups (classic protocol) with real clients against the real broker.

confluent-kafka, kafka-python and aiokafka subscribe, share partitions, commit and resume;
dead members lose their partitions after the session timeout; a zombie's commit from an old
generation is refused; committed offsets survive SIGKILL; the admin APIs see the groups.
"""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
import textwrap
import time
from datetime import timedelta
from typing import Any

import pytest
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient
from kio.schema.join_group.v5.request import JoinGroupRequest, JoinGroupRequestProtocol
from kio.schema.offset_commit.v7.request import (
    OffsetCommitRequest,
    OffsetCommitRequestPartition,
    OffsetCommitRequestTopic,
)
from kio.schema.sync_group.v3.request import SyncGroupRequest, SyncGroupRequestAssignment
from kio.static.primitive import i32, i32Timedelta, i64

from oncelog.errors import ErrorCode
from oncelog.protocol.codec import encode_entity
from tests.broker_process import BrokerProcess
from tests.integration.helpers import PARTITIONS, create_topic, key_of, value_of, wait_until
from tests.integration.rawclient import RawClient, decode_response, request

pytestmark = pytest.mark.integration

GROUP_OVERRIDES = {
    "group.initial.rebalance.delay.ms": "100",
    "offsets.topic.num.partitions": "5",
}
JOIN_GROUP, SYNC_GROUP, OFFSET_COMMIT = 11, 14, 8


@pytest.fixture
def gbroker(broker_factory: type[BrokerProcess]) -> BrokerProcess:
    return broker_factory(overrides=GROUP_OVERRIDES).start()


def _produce(bootstrap: str, topic: str, count: int, start: int = 0) -> None:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5})
    for i in range(start, start + count):
        producer.produce(topic, key=key_of(topic, i), value=value_of(topic, i))
    assert producer.flush(30) == 0


def _consumer(bootstrap: str, group: str, **extra: object) -> Consumer:
    conf: dict[str, object] = {
        "bootstrap.servers": bootstrap,
        "group.id": group,
        "auto.offset.reset": "earliest",
        "enable.auto.commit": False,
        "session.timeout.ms": 6000,
        "heartbeat.interval.ms": 500,
    }
    conf.update(extra)
    return Consumer(conf)


def _poll_all(consumers: list[Consumer], want: int, timeout: float = 30.0) -> dict[int, list[int]]:
    """Poll until `want` messages arrived and every consumer has an assignment; return
    consumer index -> partitions of the messages it got."""
    got: dict[int, list[int]] = {i: [] for i in range(len(consumers))}
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for i, c in enumerate(consumers):
            msg = c.poll(0.1)
            if msg is not None and msg.error() is None:
                got[i].append(msg.partition())
        done = sum(len(v) for v in got.values()) >= want
        if done and all(c.assignment() for c in consumers):
            return got
    raise AssertionError(f"timed out: got {sum(len(v) for v in got.values())} of {want}")


def test_confluent_two_consumers_share_partitions_commit_and_resume(gbroker: BrokerProcess) -> None:
    topic, group = "g-share", "share-group"
    create_topic(gbroker.bootstrap, topic, PARTITIONS)
    _produce(gbroker.bootstrap, topic, 400)
    consumers = [_consumer(gbroker.bootstrap, group) for _ in range(2)]
    try:
        for c in consumers:
            c.subscribe([topic])
        got = _poll_all(consumers, 400)
        assignments = [{tp.partition for tp in c.assignment()} for c in consumers]
        assert assignments[0] and assignments[1]
        assert not assignments[0] & assignments[1]
        assert assignments[0] | assignments[1] == set(range(PARTITIONS))
        for i, partitions in got.items():
            assert set(partitions) <= assignments[i]
        for c in consumers:
            c.commit(asynchronous=False)
    finally:
        consumers[1].close()
    committed = consumers[0].committed(
        [TopicPartition(topic, p) for p in range(PARTITIONS)], timeout=10
    )
    consumers[0].close()
    assert sum(tp.offset for tp in committed) == 400

    # A new member of the group resumes from the committed offsets: only new messages come.
    _produce(gbroker.bootstrap, topic, 40, start=400)
    again = _consumer(gbroker.bootstrap, group)
    try:
        again.subscribe([topic])
        seen = []
        deadline = time.monotonic() + 30
        while len(seen) < 40 and time.monotonic() < deadline:
            msg = again.poll(0.2)
            if msg is not None and msg.error() is None:
                seen.append(msg.key())
        assert sorted(seen) == sorted(key_of(topic, i) for i in range(400, 440))
        assert again.poll(1.0) is None
    finally:
        again.close()


_DYING_CONSUMER = textwrap.dedent(
    """
    import sys, time
    from confluent_kafka import Consumer
    c = Consumer({"bootstrap.servers": sys.argv[1], "group.id": sys.argv[2],
                  "session.timeout.ms": 6000, "heartbeat.interval.ms": 500,
                  "auto.offset.reset": "earliest"})
    c.subscribe([sys.argv[3]])
    while True:
        c.poll(0.1)
        if c.assignment():
            print("assigned", flush=True)
            break
    while True:
        c.poll(0.1)
    """
)


def test_dead_member_loses_its_partitions_after_session_timeout(gbroker: BrokerProcess) -> None:
    topic, group = "g-dead", "dead-group"
    create_topic(gbroker.bootstrap, topic, PARTITIONS)
    survivor = _consumer(gbroker.bootstrap, group)
    proc = subprocess.Popen(
        [sys.executable, "-c", _DYING_CONSUMER, gbroker.bootstrap, group, topic],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "assigned"
        survivor.subscribe([topic])

        def shared() -> bool:
            survivor.poll(0.1)
            return 0 < len(survivor.assignment()) < PARTITIONS

        wait_until(shared, 30, "the two members to share the partitions")
        proc.send_signal(signal.SIGKILL)  # no LeaveGroup: only the session timeout tells
        proc.wait(10)
        killed_at = time.monotonic()

        def took_over() -> bool:
            survivor.poll(0.1)
            return len(survivor.assignment()) == PARTITIONS

        wait_until(took_over, 30, "the survivor to get every partition")
        assert time.monotonic() - killed_at >= 4.0  # not before the session timeout
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        survivor.close()


def _join(client: RawClient, member_id: str, correlation_id: int) -> None:
    body = JoinGroupRequest(
        group_id="zombie-group",
        session_timeout=i32Timedelta.parse(timedelta(seconds=10)),
        rebalance_timeout=i32Timedelta.parse(timedelta(seconds=10)),
        member_id=member_id,
        group_instance_id=None,
        protocol_type="consumer",
        protocols=(JoinGroupRequestProtocol(name="range", metadata=b"m"),),
    )
    client.send(request(JOIN_GROUP, 5, encode_entity(body), correlation_id))


def _joined(client: RawClient) -> Any:
    return decode_response(JOIN_GROUP, 5, client.recv_frame())[1]


def _commit(client: RawClient, generation: int, member_id: str) -> ErrorCode:
    body = OffsetCommitRequest(
        group_id="zombie-group",
        generation_id_or_member_epoch=i32(generation),
        member_id=member_id,
        group_instance_id=None,
        topics=(
            OffsetCommitRequestTopic(
                name="g-zombie",
                partitions=(
                    OffsetCommitRequestPartition(
                        partition_index=i32(0),
                        committed_offset=i64(1),
                        committed_leader_epoch=i32(-1),
                        committed_metadata="",
                    ),
                ),
            ),
        ),
    )
    response = client.call(OFFSET_COMMIT, 7, encode_entity(body))
    return ErrorCode(response.topics[0].partitions[0].error_code)


def test_zombie_commit_with_old_generation_is_refused(gbroker: BrokerProcess) -> None:
    create_topic(gbroker.bootstrap, "g-zombie", 1)
    with RawClient(gbroker.port) as a, RawClient(gbroker.port) as b:
        _join(a, "", 1)  # v4+: the first join only hands out a member id (KIP-394)
        required: Any = _joined(a)
        assert required.error_code == ErrorCode.member_id_required
        member_a = required.member_id
        _join(a, member_a, 1)
        first: Any = _joined(a)
        assert first.generation_id == 1
        sync = SyncGroupRequest(
            group_id="zombie-group",
            generation_id=i32(1),
            member_id=member_a,
            group_instance_id=None,
            assignments=(SyncGroupRequestAssignment(member_id=member_a, assignment=b"a"),),
        )
        synced = a.call(SYNC_GROUP, 3, encode_entity(sync))
        assert synced.error_code == ErrorCode.none and synced.assignment == b"a"
        assert _commit(a, 1, member_a) == ErrorCode.none
        _join(b, "", 2)  # a second member: generation 2 once a rejoins
        member_b = _joined(b).member_id
        _join(b, member_b, 2)
        _join(a, member_a, 3)
        assert _joined(a).generation_id == 2
        assert _joined(b).generation_id == 2
        assert _commit(a, 1, member_a) == ErrorCode.illegal_generation
        assert _commit(a, 2, "not-a-member") == ErrorCode.unknown_member_id


def test_committed_offsets_survive_sigkill(gbroker: BrokerProcess) -> None:
    topic, group = "g-durable", "durable-group"
    create_topic(gbroker.bootstrap, topic, 4)
    consumer = _consumer(gbroker.bootstrap, group)
    offsets = [TopicPartition(topic, p, 10 + p) for p in range(4)]
    consumer.commit(offsets=offsets, asynchronous=False)  # a simple commit (no membership)
    consumer.close()
    gbroker.restart(kill=True)
    again = _consumer(gbroker.bootstrap, group)
    try:
        committed = again.committed([TopicPartition(topic, p) for p in range(4)], timeout=15)
        assert [(tp.partition, tp.offset) for tp in committed] == [(p, 10 + p) for p in range(4)]
    finally:
        again.close()


def test_offsets_expire_after_the_retention_and_stay_gone(
    broker_factory: type[BrokerProcess],
) -> None:
    """offsets.retention (testing: in ms): a simple group's offsets and then the group go."""
    overrides = {
        **GROUP_OVERRIDES,
        "oncelog.testing.offsets.retention.ms": "1500",
        "offsets.retention.check.interval.ms": "300",
    }
    broker = broker_factory(overrides=overrides).start()
    topic = "g-expiring"
    create_topic(broker.bootstrap, topic, 2)
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})

    def listed() -> set[str]:
        return {g.group_id for g in admin.list_consumer_groups().result(10).valid}

    consumer = _consumer(broker.bootstrap, "expiring")
    consumer.commit(offsets=[TopicPartition(topic, 0, 7)], asynchronous=False)
    committed = consumer.committed([TopicPartition(topic, 0)], timeout=10)
    assert committed[0].offset == 7 and "expiring" in listed()
    wait_until(lambda: "expiring" not in listed(), 15, "the group expires")
    assert consumer.committed([TopicPartition(topic, 0)], timeout=10)[0].offset < 0
    consumer.close()
    broker.restart(kill=True)
    assert "expiring" not in listed()


def test_kafka_python_group_consumer(gbroker: BrokerProcess) -> None:
    from kafka import KafkaConsumer
    from kafka import TopicPartition as KTP

    topic, group = "g-kp", "kp-group"
    create_topic(gbroker.bootstrap, topic, 4)
    _produce(gbroker.bootstrap, topic, 100)
    consumer = KafkaConsumer(
        topic,
        bootstrap_servers=gbroker.bootstrap,
        group_id=group,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        consumer_timeout_ms=15000,
    )
    try:
        seen = []
        for msg in consumer:
            seen.append(msg.key)
            if len(seen) == 100:
                break
        assert sorted(seen) == sorted(key_of(topic, i) for i in range(100))
        consumer.commit()
        ends = consumer.end_offsets([KTP(topic, p) for p in range(4)])
        for tp, end in ends.items():
            assert consumer.committed(tp) == end
    finally:
        consumer.close()


def test_aiokafka_group_consumer(gbroker: BrokerProcess) -> None:
    from aiokafka import AIOKafkaConsumer
    from aiokafka.structs import TopicPartition as ATP

    topic, group = "g-aio", "aio-group"
    create_topic(gbroker.bootstrap, topic, 4)
    _produce(gbroker.bootstrap, topic, 100)

    async def run() -> None:
        consumer = AIOKafkaConsumer(
            topic,
            bootstrap_servers=gbroker.bootstrap,
            group_id=group,
            auto_offset_reset="earliest",
            enable_auto_commit=False,
        )
        await consumer.start()
        try:
            seen = []
            async with asyncio.timeout(20):
                async for msg in consumer:
                    seen.append(msg.key)
                    if len(seen) == 100:
                        break
            assert sorted(seen) == sorted(key_of(topic, i) for i in range(100))
            await consumer.commit()
            total = 0
            for p in range(4):
                committed = await consumer.committed(ATP(topic, p))
                total += committed or 0
            assert total == 100
        finally:
            await consumer.stop()

    asyncio.run(run())


def test_admin_lists_describes_and_deletes_groups(gbroker: BrokerProcess) -> None:
    topic = "g-admin"
    create_topic(gbroker.bootstrap, topic, 2)
    _produce(gbroker.bootstrap, topic, 10)
    admin = AdminClient({"bootstrap.servers": gbroker.bootstrap})
    active = _consumer(gbroker.bootstrap, "admin-active")
    try:
        active.subscribe([topic])
        wait_until(lambda: bool(active.poll(0.1) or active.assignment()), 20, "an assignment")
        idle = _consumer(gbroker.bootstrap, "admin-idle")
        idle.commit(offsets=[TopicPartition(topic, 0, 3)], asynchronous=False)
        idle.close()

        listed = admin.list_consumer_groups().result(10)
        ids = {g.group_id: g for g in listed.valid}
        assert {"admin-active", "admin-idle"} <= set(ids)
        assert str(ids["admin-active"].state).endswith("STABLE")
        described = admin.describe_consumer_groups(["admin-active"])["admin-active"].result(10)
        assert str(described.state).endswith("STABLE")
        assert len(described.members) == 1
        member = described.members[0]
        assert {tp.partition for tp in member.assignment.topic_partitions} == {0, 1}

        deleted = admin.delete_consumer_groups(["admin-idle", "admin-active"])
        deleted["admin-idle"].result(10)
        with pytest.raises(Exception, match=r"(?i)not.?empty"):
            deleted["admin-active"].result(10)
        listed = admin.list_consumer_groups().result(10)
        assert "admin-idle" not in {g.group_id for g in listed.valid}
    finally:
        active.close()
