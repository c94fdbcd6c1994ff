"""The source's Fetch reader (reader=fetch: Kafka protocol → Arrow columns in C) against the
consumer reader it replaced (reader=consumer: confluent-kafka), on one real broker: a
partition with interleaved committed and aborted transactions of two producers, plain records,
every compression codec, headers, and an open transaction at the end (the LSO). Both readers
must give the same rows, read_committed and read_uncommitted, for the whole range and for
ranges cut anywhere."""

from __future__ import annotations

import random
import uuid
from typing import Any

import pyarrow as pa
import pytest
from confluent_kafka import Producer
from pyspark.sql.pandas.types import to_arrow_schema

from oncelog.spark.kafka_fetch import fetch_range
from oncelog.spark.kafka_read import (
    DataLossError,
    OffsetFetcher,
    consume_range,
    source_schema,
)
from oncelog.spark.options import parse_options
from oncelog.spark.partitions import OffsetRange
from tests.broker_process import BrokerProcess
from tests.integration.helpers import create_topic

pytestmark = pytest.mark.timeout(300)


def _messy_partition(bootstrap: str, topic: str) -> Producer:
    """Two transactional producers interleaved (commit/abort mixed), a plain producer per
    codec, headers on some records; the last transaction stays open. Returns its producer."""
    create_topic(bootstrap, topic, 1)
    rng = random.Random(7)
    txn = [
        Producer(
            {
                "bootstrap.servers": bootstrap,
                "transactional.id": f"tx-{topic}-{i}",
                "compression.type": codec,
                "linger.ms": 2,
            }
        )
        for i, codec in enumerate(("none", "lz4"))
    ]
    for p in txn:
        p.init_transactions(30)
    plain = {
        codec: Producer({"bootstrap.servers": bootstrap, "compression.type": codec, "linger.ms": 2})
        for codec in ("gzip", "snappy", "lz4", "zstd", "none")
    }
    for round_ in range(6):
        for p in txn:
            p.begin_transaction()
        for i in range(40):
            p = txn[i % 2]
            headers = [("h", f"{round_}".encode()), ("n", None)] if i % 3 == 0 else None
            key = None if i % 5 == 0 else f"k{i % 7}".encode()
            value = f"t{round_}-{i}".encode() * rng.randint(1, 9)
            p.produce(topic, value=value, key=key, partition=0, headers=headers)
            if i % 10 == 0:
                codec = rng.choice(sorted(plain))
                plain_value = None if i == 20 else f"p{codec}{i}".encode()
                tag = [("c", codec.encode())]
                plain[codec].produce(
                    topic, value=plain_value, key=b"plain", partition=0, headers=tag
                )
                plain[codec].flush(30)
            p.poll(0)
        for j, p in enumerate(txn):
            p.flush(30)
            if (round_ + j) % 3 == 0:
                p.abort_transaction(30)
            else:
                p.commit_transaction(30)
    for p in plain.values():
        p.flush(30)
    txn[0].begin_transaction()
    for i in range(5):
        txn[0].produce(topic, value=f"open-{i}".encode(), partition=0)
    txn[0].flush(30)
    return txn[0]


def _rows(batches: list[pa.RecordBatch]) -> list[dict[str, Any]]:
    return [row for b in batches for row in b.to_pylist()]


def _options(bootstrap: str, topic: str, isolation: str, **extra: str) -> Any:
    return parse_options(
        {
            "kafka.bootstrap.servers": bootstrap,
            "subscribe": topic,
            "includeHeaders": "true",
            "kafka.isolation.level": isolation,
            "kafkaConsumer.pollTimeoutMs": "20000",
            **extra,
        },
        streaming=False,
    )


@pytest.mark.parametrize("isolation", ["read_committed", "read_uncommitted"])
def test_fetch_reader_equals_consumer_reader(broker: BrokerProcess, isolation: str) -> None:
    topic = f"fetch-{uuid.uuid4().hex[:8]}"
    open_txn = _messy_partition(broker.bootstrap, topic)
    try:
        opts = _options(broker.bootstrap, topic, isolation)
        fetcher = OffsetFetcher(opts)
        try:
            (_, low), (_, high) = (x.popitem() for x in fetcher.watermarks([(topic, 0)]))
        finally:
            fetcher.close()
        schema = to_arrow_schema(source_schema(True), timezone="UTC")
        whole = OffsetRange(topic, 0, low, high)
        new = _rows(list(fetch_range(opts, whole, schema)))
        old = _rows(list(consume_range(opts, whole, schema)))
        assert new == old
        values = [r["value"] for r in new]
        assert len(new) > 100
        # read_committed stops at the LSO, before the open transaction; read_uncommitted not
        opened = any(v and v.startswith(b"open-") for v in values)
        assert opened == (isolation == "read_uncommitted")
        if isolation == "read_committed":
            assert any(r["headers"] for r in new) and any(r["headers"] is None for r in new)
            # aborted transactions were dropped: fewer rows than the uncommitted read
            everything = _options(broker.bootstrap, topic, "read_uncommitted")
            assert len(_rows(list(fetch_range(everything, whole, schema)))) > len(new)
        rng = random.Random(3)
        for _ in range(12):
            a, b = sorted(rng.sample(range(low, high + 1), 2))
            part = OffsetRange(topic, 0, a, b)
            cut_new = _rows(list(fetch_range(opts, part, schema)))
            assert cut_new == [r for r in new if a <= r["offset"] < b], (a, b)
    finally:
        open_txn.abort_transaction(30)


def test_fetch_reader_fails_on_data_loss(broker: BrokerProcess) -> None:
    topic = f"loss-{uuid.uuid4().hex[:8]}"
    create_topic(broker.bootstrap, topic, 1)
    p = Producer({"bootstrap.servers": broker.bootstrap})
    for i in range(10):
        p.produce(topic, value=b"%d" % i, partition=0)
    p.flush(30)
    schema = to_arrow_schema(source_schema(False), timezone="UTC")
    opts = parse_options(
        {"kafka.bootstrap.servers": broker.bootstrap, "subscribe": topic}, streaming=False
    )
    with pytest.raises(DataLossError):
        list(fetch_range(opts, OffsetRange(topic, 0, 100, 120), schema))


def test_spark_reads_the_same_with_either_reader(spark: Any, broker: BrokerProcess) -> None:
    """Through Spark (minPartitions splits the range): reader=fetch equals reader=consumer."""
    from oncelog.spark import register

    register(spark)
    topic = f"spark-fetch-{uuid.uuid4().hex[:8]}"
    open_txn = _messy_partition(broker.bootstrap, topic)
    try:

        def read(reader: str) -> list[Any]:
            df = (
                spark.read.format("oncelog")
                .option("kafka.bootstrap.servers", broker.bootstrap)
                .option("subscribe", topic)
                .option("includeHeaders", "true")
                .option("minPartitions", "3")
                .option("reader", reader)
                .load()
            )
            return sorted((tuple(r) for r in df.collect()), key=lambda r: r[4])

        fetched = read("fetch")
        assert fetched == read("consumer")
        assert len(fetched) > 100
    finally:
        open_txn.abort_transaction(30)


def test_fetch_reader_without_the_c_extension(
    broker: BrokerProcess, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The pure-Python decoder (the fallback when the C helper is not built) reads the same."""
    from oncelog.protocol.records import columns

    topic = f"nocext-{uuid.uuid4().hex[:8]}"
    open_txn = _messy_partition(broker.bootstrap, topic)
    try:
        opts = _options(broker.bootstrap, topic, "read_committed")
        fetcher = OffsetFetcher(opts)
        try:
            (_, low), (_, high) = (x.popitem() for x in fetcher.watermarks([(topic, 0)]))
        finally:
            fetcher.close()
        schema = to_arrow_schema(source_schema(True), timezone="UTC")
        whole = OffsetRange(topic, 0, low, high)
        with_c = _rows(list(fetch_range(opts, whole, schema)))
        monkeypatch.setattr(columns, "_speedups", None)
        assert _rows(list(fetch_range(opts, whole, schema))) == with_c
    finally:
        open_txn.abort_transaction(30)
