"""aiokafka against the real broker: it picks every request version from ApiVersions itself.

Each test runs one coroutine under asyncio.run with an overall deadline.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import Any, TypeVar

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic, RecordsToDelete

from tests.broker_process import BrokerProcess
from tests.integration.helpers import (
    PARTITIONS,
    TIMEOUT,
    TS_BASE,
    Rec,
    assert_acked_layout,
    assert_same_records,
    by_partition,
    confluent_read,
    end_offsets,
    expected_offset_for_time,
    key_of,
    value_of,
)

pytestmark = pytest.mark.integration

T = TypeVar("T")


def run(coro: Awaitable[T], timeout: float = 90.0) -> T:
    async def bounded() -> T:
        return await asyncio.wait_for(coro, timeout)

    return asyncio.run(bounded())


async def create_topic(bootstrap: str, topic: str, partitions: int = PARTITIONS) -> None:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=15000)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(topic, partitions, 1)])
    finally:
        await admin.close()


async def produce(
    bootstrap: str,
    topic: str,
    messages: list[tuple[bytes, bytes | None, int | None]],
    *,
    headers: bool = False,
    **extra: Any,
) -> list[Rec]:
    """Send in order without waiting for each ack; return acked records in send order."""
    producer = AIOKafkaProducer(
        bootstrap_servers=bootstrap, acks="all", request_timeout_ms=15000, **extra
    )
    await producer.start()
    try:
        futures = []
        for i, (key, value, ts) in enumerate(messages):
            hdrs = [("index", str(i).encode())] if headers else None
            futures.append(
                await producer.send(topic, value=value, key=key, timestamp_ms=ts, headers=hdrs)
            )
        metadata = await asyncio.gather(*futures)
    finally:
        await producer.stop()
    # The broker answers log_append_time -1 (CreateTime), which aiokafka reports as type 0.
    # aiokafka then gives every record of a batch the first record's timestamp (a client
    # quirk in MessageBatch.done), so the timestamp we sent is the expected one.
    assert {md.timestamp_type for md in metadata} <= {0}
    return [
        Rec(md.partition, md.offset, key, value, ts)
        for (key, value, ts), md in zip(messages, metadata, strict=True)
    ]


async def read(
    consumer: AIOKafkaConsumer,
    topic: str,
    ends: dict[int, int],
    starts: dict[int, int] | None = None,
) -> tuple[dict[int, list[Rec]], dict[tuple[int, int], list[tuple[str, bytes]]]]:
    """assign + seek to explicit offsets and read until every partition reaches its end."""
    starts = starts or {}
    tps = [TopicPartition(topic, p) for p in ends]
    consumer.assign(tps)
    for tp in tps:
        consumer.seek(tp, starts.get(tp.partition, 0))
    got: dict[int, list[Rec]] = {p: [] for p in ends}
    headers: dict[tuple[int, int], list[tuple[str, bytes]]] = {}

    def done() -> bool:
        return all(
            (got[p][-1].offset + 1 if got[p] else starts.get(p, 0)) >= end
            for p, end in ends.items()
        )

    loop = asyncio.get_running_loop()
    deadline = loop.time() + TIMEOUT
    while not done():
        assert loop.time() < deadline, (
            f"timed out: have { {p: len(v) for p, v in got.items()} }, want ends {ends}"
        )
        batches = await consumer.getmany(timeout_ms=200, max_records=5000)
        for tp, records in batches.items():
            for r in records:
                got[tp.partition].append(Rec(r.partition, r.offset, r.key, r.value, r.timestamp))
                headers[(r.partition, r.offset)] = list(r.headers)
    for tp, records in (await consumer.getmany(timeout_ms=300)).items():
        got[tp.partition] += [
            Rec(r.partition, r.offset, r.key, r.value, r.timestamp) for r in records
        ]
    return got, headers


def new_consumer(bootstrap: str, **extra: Any) -> AIOKafkaConsumer:
    return AIOKafkaConsumer(
        bootstrap_servers=bootstrap,
        group_id=None,
        enable_auto_commit=False,
        auto_offset_reset="none",
        request_timeout_ms=15000,
        **extra,
    )


def test_keyed_produce_read_back_and_list_offsets(broker: BrokerProcess) -> None:
    topic = "aiokafka-keyed"
    count = 1200
    messages: list[tuple[bytes, bytes | None, int | None]] = [
        (key_of("ak", i), value_of("ak", i), TS_BASE + 10 * i) for i in range(count)
    ]
    messages[11] = (key_of("ak", 11), None, TS_BASE + 110)

    async def scenario() -> tuple[list[Rec], dict[int, int]]:
        await create_topic(broker.bootstrap, topic)
        acked = await produce(broker.bootstrap, topic, messages, headers=True, linger_ms=5)
        assert_acked_layout(acked)
        assert [r.timestamp for r in acked] == [ts for _, _, ts in messages]
        ends = end_offsets(acked)
        grouped = by_partition(acked)

        consumer = new_consumer(broker.bootstrap)
        await consumer.start()
        try:
            assert consumer.partitions_for_topic(topic) in (None, set(range(PARTITIONS)))
            consumed, headers = await read(consumer, topic, ends)
            assert_same_records(acked, consumed, check_timestamps=True)
            send_index = {(r.partition, r.offset): i for i, r in enumerate(acked)}
            assert headers == {pos: [("index", str(i).encode())] for pos, i in send_index.items()}
            assert consumer.partitions_for_topic(topic) == set(range(PARTITIONS))

            tps = [TopicPartition(topic, p) for p in range(PARTITIONS)]
            assert await consumer.beginning_offsets(tps) == dict.fromkeys(tps, 0)
            assert await consumer.end_offsets(tps) == {tp: ends[tp.partition] for tp in tps}

            for probe in ("before", "exact", "between", "after"):
                query = {}
                for tp in tps:
                    mid = grouped[tp.partition][len(grouped[tp.partition]) // 2]
                    assert mid.timestamp is not None
                    query[tp] = {
                        "before": 0,
                        "exact": mid.timestamp,
                        "between": mid.timestamp + 1,
                        "after": TS_BASE + 10 * count,
                    }[probe]
                answer = await consumer.offsets_for_times(query)
                for tp, target in query.items():
                    want = expected_offset_for_time(grouped[tp.partition], target)
                    if want == -1:
                        assert answer[tp] is None, (probe, tp, answer[tp])
                    else:
                        found = answer[tp]
                        assert found is not None, (probe, tp)
                        want_ts = grouped[tp.partition][want].timestamp
                        assert (found.offset, found.timestamp) == (want, want_ts), (probe, tp)

            # seek_to_end / position, then seek into the middle and read exactly the suffix.
            tp3 = TopicPartition(topic, 3)
            consumer.assign([tp3])
            await consumer.seek_to_end(tp3)
            assert await consumer.position(tp3) == ends[3]
            start = len(grouped[3]) // 2
            suffix, _ = await read(consumer, topic, {3: ends[3]}, starts={3: start})
            assert suffix[3] == grouped[3][start:]
        finally:
            await consumer.stop()
        return acked, ends

    acked, ends = run(scenario())
    assert_same_records(acked, confluent_read(broker.bootstrap, topic, ends))


@pytest.mark.parametrize("codec", ["gzip", "snappy", "lz4", "zstd"])
def test_compression(broker: BrokerProcess, codec: str) -> None:
    topic = f"aiokafka-{codec}"
    messages: list[tuple[bytes, bytes | None, int | None]] = [
        (key_of(codec, i), f"aiokafka {codec} {i:06d} ".encode() * 20, None) for i in range(3000)
    ]

    async def scenario() -> tuple[list[Rec], dict[int, int]]:
        await create_topic(broker.bootstrap, topic)
        acked = await produce(
            broker.bootstrap,
            topic,
            messages,
            compression_type=codec,
            linger_ms=20,
            max_batch_size=256 * 1024,
        )
        assert_acked_layout(acked)
        ends = end_offsets(acked)
        consumer = new_consumer(broker.bootstrap)
        await consumer.start()
        try:
            consumed, _ = await read(consumer, topic, ends)
        finally:
            await consumer.stop()
        assert_same_records(acked, consumed)
        return acked, ends

    acked, ends = run(scenario())
    raw = sum(len(k) + len(v or b"") for k, v, _ in messages)
    stored = sum(f.stat().st_size for f in broker.data_dir.glob(f"{topic}-*/*.log"))
    assert 0 < stored < raw // 4, f"{codec}: {stored} bytes on disk for {raw} raw bytes"
    assert_same_records(acked, confluent_read(broker.bootstrap, topic, ends))


def test_auto_create_and_delete_records(broker: BrokerProcess) -> None:
    topic = "aiokafka-auto"
    messages: list[tuple[bytes, bytes | None, int | None]] = [
        (key_of("aa", i), value_of("aa", i), TS_BASE + i) for i in range(60)
    ]

    async def scenario() -> None:
        # No CreateTopics: the producer's Metadata request auto-creates (num.partitions=1).
        acked = await produce(broker.bootstrap, topic, messages)
        assert_acked_layout(acked, partitions=1)
        tp = TopicPartition(topic, 0)
        admin = AIOKafkaAdminClient(bootstrap_servers=broker.bootstrap, request_timeout_ms=15000)
        await admin.start()
        try:
            assert await admin.delete_records({tp: RecordsToDelete(25)}) == {tp: 25}
        finally:
            await admin.close()
        consumer = new_consumer(broker.bootstrap)
        await consumer.start()
        try:
            assert await consumer.beginning_offsets([tp]) == {tp: 25}
            assert await consumer.end_offsets([tp]) == {tp: 60}
            found = (await consumer.offsets_for_times({tp: 0}))[tp]
            assert found is not None
            assert (found.offset, found.timestamp) == (25, TS_BASE + 25)
            consumed, _ = await read(consumer, topic, {0: 60}, starts={0: 25})
            assert_same_records(acked[25:], consumed, check_timestamps=True)
        finally:
            await consumer.stop()

    run(scenario())


def test_consumer_at_tail_gets_new_messages(broker: BrokerProcess) -> None:
    topic = "aiokafka-tail"

    async def scenario() -> None:
        await create_topic(broker.bootstrap, topic, partitions=1)
        consumer = new_consumer(broker.bootstrap, fetch_max_wait_ms=2000)
        await consumer.start()
        try:
            tp = TopicPartition(topic, 0)
            consumer.assign([tp])
            consumer.seek(tp, 0)
            assert await consumer.getmany(timeout_ms=500) == {}

            async def later() -> list[Rec]:
                await asyncio.sleep(0.3)
                return await produce(broker.bootstrap, topic, [(b"k", b"late", None)])

            sender = asyncio.create_task(later())
            got: list[tuple[int, bytes | None, bytes | None]] = []
            loop = asyncio.get_running_loop()
            deadline = loop.time() + TIMEOUT
            while not got:
                assert loop.time() < deadline, "consumer at the tail never got the message"
                for records in (await consumer.getmany(timeout_ms=200)).values():
                    got += [(r.offset, r.key, r.value) for r in records]
            assert got == [(0, b"k", b"late")]
            assert [(r.partition, r.offset) for r in await sender] == [(0, 0)]
        finally:
            await consumer.stop()

    run(scenario())
