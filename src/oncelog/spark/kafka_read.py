"""All Kafka access of the source through confluent-kafka: driver metadata and executor reads.

Driver side, `OffsetFetcher` discovers partitions and their earliest/latest offsets; with
`isolation.level=read_committed` librdkafka's watermark query returns the last stable offset
(LSO) as the high mark, so a batch never ends inside an open transaction.

Executor side, `read_range` reads one offset range [start, end) into Arrow record batches. It
stops when the consumer *position* reaches `end`, never by counting records: a transactional
topic has offsets without records (commit/abort markers, and aborted records filtered out in
read_committed), and librdkafka moves the position past them.
"""

from __future__ import annotations

import re
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import pyarrow as pa
from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition
from confluent_kafka._types import HeadersType
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from oncelog.spark.offsets import PartitionOffsets
from oncelog.spark.offsets import TopicPartition as TP
from oncelog.spark.options import Assign, SourceOptions, Subscribe
from oncelog.spark.partitions import OffsetRange
from oncelog.spark.read_errors import DataLossError, ReadTimeoutError

#: Records per consume() call and per Arrow batch handed to Spark.
CHUNK = 2000
#: How long one consume() call waits for a full chunk; short, because a range with transaction
#: markers or aborted records holds fewer records than offsets and always waits this out.
POLL_SECONDS = 0.05
METADATA_TIMEOUT = 30.0
#: Driver requests are retried like Spark's Kafka source does (fetchOffset.numRetries=3,
#: fetchOffset.retryIntervalMs=1000): a broker that dies fails the requests in flight to it
#: (e.g. _DESTROY_BROKER once the cluster's metadata drops it) while the others take over its
#: partitions, and failing the query for that would cost a driver restart.
FETCH_ATTEMPTS = 4
FETCH_RETRY_SECONDS = 1.0
#: Topics a pattern never matches (Kafka's internal topics).
_INTERNAL = re.compile(r"^__")

# confluent-kafka timestamp types -> Spark's timestampType column (Kafka's TimestampType.id).
_TIMESTAMP_TYPE = {0: -1, 1: 0, 2: 1}


T = TypeVar("T")


def retried(call: Callable[[], T]) -> T:
    """`call()`, again after FETCH_RETRY_SECONDS when it raises a KafkaException."""
    for _ in range(FETCH_ATTEMPTS - 1):
        try:
            return call()
        except KafkaException:
            time.sleep(FETCH_RETRY_SECONDS)
    return call()


def source_schema(include_headers: bool) -> StructType:
    """The output schema of Spark's Kafka source."""
    fields = [
        StructField("key", BinaryType()),
        StructField("value", BinaryType()),
        StructField("topic", StringType()),
        StructField("partition", IntegerType()),
        StructField("offset", LongType()),
        StructField("timestamp", TimestampType()),
        StructField("timestampType", IntegerType()),
    ]
    if include_headers:
        header = StructType([StructField("key", StringType()), StructField("value", BinaryType())])
        fields.append(StructField("headers", ArrayType(header)))
    return StructType(fields)


def _group_id(options: SourceOptions, role: str) -> str:
    """A group id nobody else uses and that is never committed to (librdkafka needs one)."""
    return f"{options.group_id_prefix}-{role}-{uuid.uuid4().hex}"


class OffsetFetcher:
    """Driver-side metadata: subscribed partitions and their earliest and latest offsets."""

    def __init__(self, options: SourceOptions) -> None:
        self.options = options
        self._consumer = Consumer(options.consumer_config(_group_id(options, "driver")))

    def close(self) -> None:
        self._consumer.close()

    def partitions(self) -> list[TP]:
        """Partitions currently matched by the subscription, sorted."""
        sub = self.options.subscription
        if isinstance(sub, Assign):
            existing = self._topics(sorted({t for t, _ in sub.partitions}))
            missing = [f"{t}-{p}" for t, p in sub.partitions if p not in existing.get(t, [])]
            if missing:
                raise DataLossError(
                    f"assigned partitions do not exist: {', '.join(missing)} (option 'assign')"
                )
            return list(sub.partitions)
        if isinstance(sub, Subscribe):
            existing = self._topics(list(sub.topics))
        else:
            existing = {
                t: parts
                for t, parts in self._topics(None).items()
                if not _INTERNAL.match(t) and sub.matches(t)
            }
        return sorted((t, p) for t, parts in existing.items() for p in parts)

    def _topics(self, names: list[str] | None) -> dict[str, list[int]]:
        """Partitions of the named topics (all topics when None); absent topics are left out.

        Named topics are asked for one by one rather than through an all-topics request:
        cheaper on big clusters, and never creates a topic (consumers disable auto-creation).
        """
        wanted: list[str | None] = [None] if names is None else list(names)
        metas = [self._metadata(name) for name in wanted]
        out: dict[str, list[int]] = {}
        for meta in metas:
            for name, topic in meta.topics.items():
                ok = topic.error is None or topic.error.code() == KafkaError.NO_ERROR
                if ok and topic.partitions and (names is None or name in names):
                    out[name] = sorted(topic.partitions)
        return out

    def _metadata(self, topic: str | None) -> Any:
        """Metadata of one topic (all topics when None), retried."""
        if topic is None:
            return retried(lambda: self._consumer.list_topics(timeout=METADATA_TIMEOUT))
        return retried(lambda: self._consumer.list_topics(topic, timeout=METADATA_TIMEOUT))

    def _watermarks(self, tp: TopicPartition) -> tuple[int, int]:
        """(low, high) of one partition, asked of its leader (never cached), retried."""
        return retried(
            lambda: self._consumer.get_watermark_offsets(tp, timeout=METADATA_TIMEOUT, cached=False)
        )

    def watermarks(self, partitions: list[TP]) -> tuple[PartitionOffsets, PartitionOffsets]:
        """(earliest, latest) per partition; latest is the LSO when reading read_committed."""
        earliest: PartitionOffsets = {}
        latest: PartitionOffsets = {}
        for topic, part in partitions:
            low, high = self._watermarks(TopicPartition(topic, part))
            earliest[(topic, part)] = low
            latest[(topic, part)] = high
        return earliest, latest


def check_data_loss(
    start: PartitionOffsets, earliest: PartitionOffsets, fail_on_data_loss: bool
) -> PartitionOffsets:
    """Starts below the log start: an error naming them, or (failOnDataLoss=false) the log start."""
    lost = {tp: (s, earliest[tp]) for tp, s in start.items() if tp in earliest and s < earliest[tp]}
    if lost and fail_on_data_loss:
        detail = ", ".join(f"{t}-{p}: wanted {s}, earliest {e}" for (t, p), (s, e) in lost.items())
        raise DataLossError(
            f"offsets were deleted before they were read ({detail}); some data is lost. "
            "Set failOnDataLoss=false to continue from the earliest available offset."
        )
    return {tp: max(s, earliest.get(tp, s)) for tp, s in start.items()}


def read_range(
    options: SourceOptions, r: OffsetRange, schema: StructType
) -> Iterator[pa.RecordBatch]:
    """Read [r.start, r.end) of one partition as Arrow batches matching `schema`: by Fetch
    requests decoded into Arrow (`kafka_fetch`, option reader=fetch, the default) unless the
    options need librdkafka (TLS, SASL) or ask for reader=consumer."""
    from pyspark.sql.pandas.types import to_arrow_schema

    from oncelog.spark import kafka_fetch

    arrow_schema = to_arrow_schema(schema, timezone="UTC")
    if kafka_fetch.fetch_supported(options):
        yield from kafka_fetch.fetch_range(options, r, arrow_schema)
    else:
        yield from consume_range(options, r, arrow_schema)


def consume_range(
    options: SourceOptions, r: OffsetRange, arrow_schema: pa.Schema
) -> Iterator[pa.RecordBatch]:
    """`read_range` by confluent-kafka's consumer (reader=consumer; TLS and SASL)."""
    headers_type = arrow_schema.field("headers").type if options.include_headers else None
    config: dict[str, Any] = options.consumer_config(_group_id(options, "executor"))
    config.setdefault("enable.partition.eof", False)
    consumer = Consumer(config)
    try:
        consumer.assign([TopicPartition(r.topic, r.partition, r.start)])
        position = r.start
        deadline = time.monotonic() + options.poll_timeout_ms / 1000
        while position < r.end:
            # Never ask for more than the range can still hold: the call returns as soon as
            # that many records arrived instead of waiting out the timeout.
            wanted = max(1, min(CHUNK, r.end - position))
            messages = consumer.consume(num_messages=wanted, timeout=POLL_SECONDS)
            keys: list[bytes | None] = []
            values: list[bytes | None] = []
            offsets: list[int] = []
            stamps: list[int | None] = []
            stamp_types: list[int] = []
            headers: list[list[dict[str, Any]] | None] = []
            for m in messages:
                err = m.error()
                if err is not None:
                    _raise_read_error(err, r, options)
                    continue
                offset = m.offset()
                if offset is None or offset < r.start or offset >= r.end:
                    continue
                keys.append(m.key())
                values.append(m.value())
                offsets.append(offset)
                kind, ts = m.timestamp()
                stamps.append(ts * 1000 if kind else None)
                stamp_types.append(_TIMESTAMP_TYPE.get(kind, -1))
                if headers_type is not None:
                    headers.append(_headers(m.headers()))
            if offsets:
                n = len(offsets)
                columns = [
                    pa.array(keys, pa.binary()),
                    pa.array(values, pa.binary()),
                    pa.array([r.topic] * n, pa.string()),
                    pa.array([r.partition] * n, pa.int32()),
                    pa.array(offsets, pa.int64()),
                    pa.array(stamps, arrow_schema.field("timestamp").type),
                    pa.array(stamp_types, pa.int32()),
                ]
                if headers_type is not None:
                    columns.append(pa.array(headers, headers_type))
                yield pa.RecordBatch.from_arrays(columns, schema=arrow_schema)
            new_position = _position(consumer, r)
            if new_position > position:
                position = new_position
                deadline = time.monotonic() + options.poll_timeout_ms / 1000
            elif time.monotonic() > deadline:
                raise ReadTimeoutError(
                    f"reading {r.topic}-{r.partition} [{r.start}, {r.end}): position stuck at "
                    f"{position} for {options.poll_timeout_ms} ms "
                    "(option kafkaConsumer.pollTimeoutMs); is the broker reachable?"
                )
    finally:
        consumer.close()


def _headers(raw: HeadersType | None) -> list[dict[str, Any]] | None:
    """Spark's headers column: null when a record has none (consumers return a list)."""
    if not raw:
        return None
    pairs = raw.items() if isinstance(raw, dict) else raw
    return [{"key": k, "value": v} for k, v in pairs]


def _position(consumer: Consumer, r: OffsetRange) -> int:
    tp = consumer.position([TopicPartition(r.topic, r.partition)])[0]
    return int(tp.offset) if tp.offset >= 0 else r.start


def _raise_read_error(err: KafkaError, r: OffsetRange, options: SourceOptions) -> None:
    """Turn a consumer error into a clear exception; transient ones are left to librdkafka."""
    code = err.code()
    if code in (KafkaError._AUTO_OFFSET_RESET, KafkaError.OFFSET_OUT_OF_RANGE):
        raise DataLossError(
            f"offset {r.start} of {r.topic}-{r.partition} is no longer available ({err.str()}); "
            "some data is lost. Set failOnDataLoss=false to continue from the earliest offset."
        )
    if err.fatal():
        raise KafkaException(err)
    # Anything else (broker down, leader moving, transport errors) is retried by librdkafka;
    # the read loop's no-progress deadline bounds how long that may take.
