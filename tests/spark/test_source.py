"""The `oncelog` Spark source against the real broker, with data produced by confluent-kafka.

Every test compares what Spark read with what the producer's delivery reports acknowledged:
same keys, values, partitions, offsets, timestamps and headers, each exactly once.
"""

from __future__ import annotations

import json
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import KafkaError, Message, Producer

from oncelog.spark import register
from tests.broker_process import BrokerProcess
from tests.integration.helpers import TS_BASE, create_topic

pytestmark = pytest.mark.timeout(300)

#: (topic, partition, offset, key, value, timestamp in ms, headers or None)
Row = tuple[
    str, int, int, bytes | None, bytes | None, int, tuple[tuple[str, bytes | None], ...] | None
]

QUERY_TIMEOUT = 120


@pytest.fixture(scope="module")
def ospark(spark: Any) -> Iterator[Any]:
    register(spark)
    yield spark


def produce(
    bootstrap: str, topic: str, count: int, partitions: int, *, headers: bool = False, tag: str = ""
) -> list[Row]:
    """Produce `count` records round-robin over partitions; return what the broker acknowledged."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    acked: list[Row] = []
    errors: list[KafkaError] = []

    def reporter(hdrs: list[tuple[str, str | bytes | None]] | None) -> Any:
        # Delivery reports carry no headers: expect the ones that were sent.
        def report(err: KafkaError | None, msg: Message) -> None:
            if err is not None:
                errors.append(err)
                return
            acked.append(
                (
                    str(msg.topic()),
                    int(msg.partition() or 0),
                    int(msg.offset() or 0),
                    msg.key(),
                    msg.value(),
                    msg.timestamp()[1],
                    tuple((k, v if not isinstance(v, str) else v.encode()) for k, v in hdrs)
                    if hdrs
                    else None,
                )
            )

        return report

    for i in range(count):
        hdrs: list[tuple[str, str | bytes | None]] | None = (
            [("h", f"{tag}{i}".encode()), ("n", None)] if headers and i % 3 else None
        )
        producer.produce(
            topic,
            key=None if i % 17 == 0 else f"{tag}k{i}".encode(),
            value=f"{tag}v{i}".encode() + bytes([i % 256]),
            partition=i % partitions,
            timestamp=TS_BASE + i,
            headers=hdrs,
            on_delivery=reporter(hdrs),
        )
    assert producer.flush(30) == 0
    assert not errors, errors
    assert len(acked) == count
    return acked


def rows_of(df: Any, with_headers: bool = False) -> list[Row]:
    """Collect a source DataFrame into comparable tuples (timestamps as epoch ms, UTC)."""
    from pyspark.sql import functions as F

    cols = [
        "topic",
        "partition",
        "offset",
        "key",
        "value",
        (F.unix_micros("timestamp") / 1000).cast("long").alias("ts"),
    ]
    if with_headers:
        cols.append("headers")
    out: list[Row] = []
    for r in df.select(*cols).collect():
        hs = None
        if with_headers and r["headers"] is not None:
            hs = tuple(
                (h["key"], None if h["value"] is None else bytes(h["value"])) for h in r["headers"]
            )
        out.append(
            (
                r["topic"],
                r["partition"],
                r["offset"],
                None if r["key"] is None else bytes(r["key"]),
                None if r["value"] is None else bytes(r["value"]),
                r["ts"],
                hs,
            )
        )
    return out


def batch_df(spark: Any, bootstrap: str, **options: str) -> Any:
    reader = spark.read.format("oncelog").option("kafka.bootstrap.servers", bootstrap)
    for key, value in options.items():
        reader = reader.option(key, value)
    return reader.load()


def topic_name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def test_batch_reads_exactly_what_was_produced(ospark: Any, broker: BrokerProcess) -> None:
    topic = topic_name("batch")
    create_topic(broker.bootstrap, topic, 3)
    acked = produce(broker.bootstrap, topic, 600, 3, headers=True)

    df = batch_df(ospark, broker.bootstrap, subscribe=topic, includeHeaders="true")
    assert df.schema.simpleString() == (
        "struct<key:binary,value:binary,topic:string,partition:int,offset:bigint,"
        "timestamp:timestamp,timestampType:int,headers:array<struct<key:string,value:binary>>>"
    )
    got = rows_of(df, with_headers=True)
    assert sorted(got, key=repr) == sorted(acked, key=repr)
    assert len(got) == len(set(got))
    assert {r["timestampType"] for r in df.select("timestampType").collect()} == {0}

    plain = batch_df(ospark, broker.bootstrap, subscribe=topic, minPartitions="7")
    assert "headers" not in plain.columns
    assert plain.rdd.getNumPartitions() >= 7
    assert sorted(rows_of(plain), key=repr) == sorted([(*r[:6], None) for r in acked], key=repr)


def test_assign_and_json_offsets(ospark: Any, broker: BrokerProcess) -> None:
    prefix = topic_name("pat")
    t1, t2, other = f"{prefix}-a", f"{prefix}-b", topic_name("other")
    for t in (t1, t2, other):
        create_topic(broker.bootstrap, t, 2)
    acked = {t: produce(broker.bootstrap, t, 100, 2, tag=t) for t in (t1, t2, other)}

    assigned = rows_of(batch_df(ospark, broker.bootstrap, assign=json.dumps({t1: [1]})))
    assert sorted(assigned, key=repr) == sorted([r for r in acked[t1] if r[1] == 1], key=repr)

    ranged = rows_of(
        batch_df(
            ospark,
            broker.bootstrap,
            subscribe=f"{t1},{t2}",
            startingOffsets=json.dumps({t1: {"0": 10, "1": -2}, t2: {"0": -2, "1": 45}}),
            endingOffsets=json.dumps({t1: {"0": 20, "1": -1}, t2: {"0": 5, "1": -1}}),
        )
    )
    want = {t1: {0: (10, 20), 1: (0, 50)}, t2: {0: (0, 5), 1: (45, 50)}}
    expected = [
        r for t in (t1, t2) for r in acked[t] if want[t][r[1]][0] <= r[2] < want[t][r[1]][1]
    ]
    assert sorted(ranged, key=repr) == sorted(expected, key=repr)


def test_subscribe_pattern(ospark: Any, broker: BrokerProcess) -> None:
    """A pattern needs an all-topics Metadata request (librdkafka's list_topics())."""
    prefix = topic_name("pat")
    t1, t2, other = f"{prefix}-a", f"{prefix}-b", topic_name("other")
    for t in (t1, t2, other):
        create_topic(broker.bootstrap, t, 2)
    acked = {t: produce(broker.bootstrap, t, 50, 2, tag=t) for t in (t1, t2, other)}
    by_pattern = rows_of(batch_df(ospark, broker.bootstrap, subscribePattern=f"{prefix}-.*"))
    assert sorted(by_pattern, key=repr) == sorted(acked[t1] + acked[t2], key=repr)


def test_bad_options_fail_with_a_clear_message(ospark: Any, broker: BrokerProcess) -> None:
    with pytest.raises(Exception, match="startingOffset"):
        batch_df(ospark, broker.bootstrap, subscribe="x", startingOffset="earliest").collect()


def _transactional_topic(bootstrap: str, topic: str) -> tuple[list[bytes], list[bytes], Producer]:
    """committed, aborted, committed, aborted, then an open transaction: gaps everywhere."""
    create_topic(bootstrap, topic, 1)
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"tx-{topic}"})
    producer.init_transactions(30)
    committed: list[bytes] = []
    aborted: list[bytes] = []
    for round_ in range(4):
        producer.begin_transaction()
        values = [f"r{round_}-{i}".encode() for i in range(25)]
        for v in values:
            producer.produce(topic, value=v, key=b"k", partition=0)
        producer.flush(30)
        if round_ % 2 == 0:
            producer.commit_transaction(30)
            committed += values
        else:
            producer.abort_transaction(30)
            aborted += values
    producer.begin_transaction()
    for i in range(5):
        producer.produce(topic, value=f"open-{i}".encode(), partition=0)
    producer.flush(30)
    return committed, aborted, producer


def test_transactional_topic_with_gaps(ospark: Any, broker: BrokerProcess) -> None:
    topic = topic_name("txn")
    committed, aborted, producer = _transactional_topic(broker.bootstrap, topic)
    try:
        got = rows_of(batch_df(ospark, broker.bootstrap, subscribe=topic))
        assert [r[4] for r in sorted(got, key=lambda r: r[2])] == committed
        # The range ends with an abort marker right before the open transaction (the LSO).
        offsets = [r[2] for r in got]
        assert max(offsets) < 4 * 26 - 1

        # Ranges that end right after a commit marker (26) and right after an aborted
        # transaction and its abort marker (52): the position must get there without records.
        for end, want in ((26, committed[:25]), (52, committed[:25]), (78, committed)):
            ranged = rows_of(
                batch_df(
                    ospark,
                    broker.bootstrap,
                    subscribe=topic,
                    endingOffsets=json.dumps({topic: {"0": end}}),
                    **{"kafkaConsumer.pollTimeoutMs": "20000"},
                )
            )
            assert [r[4] for r in sorted(ranged, key=lambda r: r[2])] == want, end
        aborted_only = rows_of(
            batch_df(
                ospark,
                broker.bootstrap,
                subscribe=topic,
                startingOffsets=json.dumps({topic: {"0": 26}}),
                endingOffsets=json.dumps({topic: {"0": 52}}),
                **{"kafkaConsumer.pollTimeoutMs": "20000"},
            )
        )
        assert aborted_only == []

        dirty = rows_of(
            batch_df(
                ospark,
                broker.bootstrap,
                subscribe=topic,
                **{"kafka.isolation.level": "read_uncommitted"},
            )
        )
        values = {r[4] for r in dirty}
        assert values >= set(committed) | set(aborted)
        assert {v for v in values if v and v.startswith(b"open-")} == {
            f"open-{i}".encode() for i in range(5)
        }
    finally:
        producer.abort_transaction(30)


class Collector:
    """foreachBatch target: rows per batch id, appended on the driver."""

    def __init__(self, fail_batches: set[int] | None = None) -> None:
        self.batches: dict[int, list[Row]] = {}
        self.calls: list[int] = []
        self.fail_batches = set(fail_batches or ())
        self.lock = threading.Lock()

    def __call__(self, df: Any, batch_id: int) -> None:
        rows = rows_of(df)
        with self.lock:
            self.calls.append(batch_id)
            if batch_id in self.fail_batches:
                self.fail_batches.discard(batch_id)
                raise RuntimeError(f"injected failure in batch {batch_id}")
            self.batches[batch_id] = rows

    def all_rows(self) -> list[Row]:
        return [r for rows in self.batches.values() for r in rows]


def run_available_now(
    spark: Any, bootstrap: str, checkpoint: Path, collector: Collector, **options: str
) -> None:
    reader = spark.readStream.format("oncelog").option("kafka.bootstrap.servers", bootstrap)
    for key, value in options.items():
        reader = reader.option(key, value)
    query = (
        reader.load()
        .writeStream.foreachBatch(collector)
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    try:
        assert query.awaitTermination(QUERY_TIMEOUT), "AvailableNow query did not finish"
    finally:
        query.stop()
    if query.exception() is not None:
        raise RuntimeError(str(query.exception()))


def test_stream_available_now_with_rate_limit_and_restart(
    ospark: Any, broker: BrokerProcess, tmp_path: Path
) -> None:
    topic = topic_name("stream")
    create_topic(broker.bootstrap, topic, 3)
    first = produce(broker.bootstrap, topic, 450, 3, tag="a")
    checkpoint = tmp_path / "ckpt"
    options = {"subscribe": topic, "startingOffsets": "earliest", "maxOffsetsPerTrigger": "100"}

    run1 = Collector()
    run_available_now(ospark, broker.bootstrap, checkpoint, run1, **options)
    assert sorted(run1.all_rows(), key=repr) == sorted([(*r[:6], None) for r in first], key=repr)
    sizes = [len(rows) for _, rows in sorted(run1.batches.items())]
    assert max(sizes) <= 100 and len([s for s in sizes if s]) >= 5, sizes

    second = produce(broker.bootstrap, topic, 150, 3, tag="b")
    run2 = Collector()
    run_available_now(ospark, broker.bootstrap, checkpoint, run2, **options)
    assert min(run2.batches) > max(run1.batches)
    assert sorted(run2.all_rows(), key=repr) == sorted([(*r[:6], None) for r in second], key=repr)

    # Data produced after an AvailableNow query starts waits for the next run.
    run3 = Collector()
    run_available_now(ospark, broker.bootstrap, checkpoint, run3, **options)
    assert run3.all_rows() == []


def test_stream_batch0_is_deterministic_across_restarts(
    ospark: Any, broker: BrokerProcess, tmp_path: Path
) -> None:
    """Batch 0 fails after its offsets were journaled; the replay must read the same range.

    startingOffsets=latest resolves when the query starts. Records produced between the crash
    and the restart must neither be skipped (a re-resolved 'latest' would jump past them) nor
    read twice, and records produced before the query started must never be read.
    """
    topic = topic_name("b0")
    create_topic(broker.bootstrap, topic, 2)
    produce(broker.bootstrap, topic, 100, 2, tag="old")
    checkpoint = tmp_path / "ckpt"

    run1 = Collector(fail_batches={0})
    with pytest.raises(Exception, match="injected failure"):
        run_available_now(ospark, broker.bootstrap, checkpoint, run1, subscribe=topic)
    assert run1.calls == [0]

    newer = produce(broker.bootstrap, topic, 60, 2, tag="new")
    run2 = Collector()
    run_available_now(ospark, broker.bootstrap, checkpoint, run2, subscribe=topic)
    assert run2.calls[0] == 0, "batch 0 must be replayed"
    assert run2.batches[0] == []
    assert sorted(run2.all_rows(), key=repr) == sorted([(*r[:6], None) for r in newer], key=repr)


def delete_before(bootstrap: str, topic: str, partition: int, offset: int) -> None:
    from confluent_kafka import TopicPartition
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.delete_records([TopicPartition(topic, partition, offset)])
    for future in futures.values():
        future.result(30)


def test_fail_on_data_loss(ospark: Any, broker: BrokerProcess, tmp_path: Path) -> None:
    topic = topic_name("loss")
    create_topic(broker.bootstrap, topic, 1)
    first = produce(broker.bootstrap, topic, 100, 1, tag="a")
    checkpoint = tmp_path / "ckpt"
    options = {"subscribe": topic, "startingOffsets": "earliest"}
    run1 = Collector()
    run_available_now(ospark, broker.bootstrap, checkpoint, run1, **options)
    assert len(run1.all_rows()) == len(first)

    second = produce(broker.bootstrap, topic, 100, 1, tag="b")
    delete_before(broker.bootstrap, topic, 0, 150)

    start10 = json.dumps({topic: {"0": 10}})
    with pytest.raises(Exception, match="failOnDataLoss=false"):
        batch_df(ospark, broker.bootstrap, subscribe=topic, startingOffsets=start10).collect()
    lenient = rows_of(
        batch_df(
            ospark,
            broker.bootstrap,
            subscribe=topic,
            startingOffsets=start10,
            failOnDataLoss="false",
        )
    )
    kept = [(*r[:6], None) for r in second if r[2] >= 150]
    assert sorted(lenient, key=repr) == sorted(kept, key=repr)

    with pytest.raises(Exception, match="failOnDataLoss=false"):
        run_available_now(ospark, broker.bootstrap, checkpoint, Collector(), **options)
    run2 = Collector()
    run_available_now(ospark, broker.bootstrap, checkpoint, run2, failOnDataLoss="false", **options)
    assert sorted(run2.all_rows(), key=repr) == sorted(kept, key=repr)
