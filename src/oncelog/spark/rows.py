"""Spark rows → Kafka produce arguments, with the column rules of Spark's Kafka sink.

Columns (by name): `value` (string or binary, required), `key` (string or binary), `topic`
(string; the `topic` option overrides it, as in Spark), `partition` (int; absent or null lets
the partitioner choose), `headers` (array<struct<key: string, value: binary>>). The schema is
inspected once per task so the per-row work is a few index lookups and no type dispatch.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any, NamedTuple

from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    DataType,
    IntegerType,
    LongType,
    ShortType,
    StringType,
    StructType,
)

Headers = list[tuple[str, bytes | None]] | None
ProduceArgs = tuple[str, int | None, bytes | None, bytes | None, Headers]
RowEncoder = Callable[[Any], ProduceArgs]


class RowSchemaError(ValueError):
    """A DataFrame the Kafka sink cannot write."""


class MissingTopic(ValueError):
    """A row without a topic while the sink has no `topic` option."""


def _bytes_of(kind: DataType, column: str) -> Callable[[Any], bytes | None]:
    if isinstance(kind, StringType):
        return lambda v: None if v is None else v.encode()
    if isinstance(kind, BinaryType):
        return lambda v: None if v is None else bytes(v)
    raise RowSchemaError(f"column {column!r} must be string or binary, not {kind.simpleString()}")


def _headers_reader(kind: DataType) -> Callable[[Any], Headers]:
    element = kind.elementType if isinstance(kind, ArrayType) else None
    if not (
        isinstance(element, StructType)
        and element.fieldNames() == ["key", "value"]
        and isinstance(element["key"].dataType, StringType)
        and isinstance(element["value"].dataType, BinaryType | StringType)
    ):
        raise RowSchemaError(
            "column 'headers' must be array<struct<key: string, value: binary>>, "
            f"not {kind.simpleString()}"
        )
    as_bytes = _bytes_of(element["value"].dataType, "headers.value")

    def read(v: Any) -> Headers:
        if v is None:
            return None
        return [(h[0], as_bytes(h[1])) for h in v]

    return read


def _key_reader(schema: StructType) -> Callable[[Any], bytes | None]:
    names = schema.fieldNames()
    if "key" not in names:
        return lambda row: None
    ki = names.index("key")
    as_bytes = _bytes_of(schema["key"].dataType, "key")
    return lambda row: as_bytes(row[ki])


def _topic_reader(schema: StructType, topic_option: str | None) -> Callable[[Any], str]:
    names = schema.fieldNames()
    if topic_option is not None:
        return lambda row: topic_option
    if "topic" not in names:
        raise RowSchemaError("set option 'topic' or give the rows a 'topic' column")
    if not isinstance(schema["topic"].dataType, StringType):
        raise RowSchemaError("column 'topic' must be a string")
    ti = names.index("topic")

    def topic_of(row: Any) -> str:
        t = row[ti]
        if t is None:
            raise MissingTopic("a row has a null topic and the sink has no 'topic' option")
        return str(t)

    return topic_of


def _partition_reader(schema: StructType) -> Callable[[Any], int | None]:
    names = schema.fieldNames()
    if "partition" not in names:
        return lambda row: None
    if not isinstance(schema["partition"].dataType, IntegerType | LongType | ShortType):
        raise RowSchemaError("column 'partition' must be an integer")
    pi = names.index("partition")
    return lambda row: row[pi]


def _fast_encoder(schema: StructType, topic: str) -> RowEncoder:
    """The common shape (fixed topic, key and value only) in one call per row."""
    names = schema.fieldNames()
    vi = names.index("value")
    v_str = isinstance(schema["value"].dataType, StringType)
    ki = names.index("key") if "key" in names else -1
    k_str = ki >= 0 and isinstance(schema["key"].dataType, StringType)

    def encode(row: Any) -> ProduceArgs:
        v = row[vi]
        if v is not None:
            v = v.encode() if v_str else bytes(v)
        k = None
        if ki >= 0:
            k = row[ki]
            if k is not None:
                k = k.encode() if k_str else bytes(k)
        return topic, None, k, v, None

    return encode


def row_encoder(schema: StructType, topic_option: str | None) -> RowEncoder:
    """A function turning one row into (topic, partition, key, value, headers)."""
    names = schema.fieldNames()
    if "value" not in names:
        raise RowSchemaError("the Kafka sink needs a 'value' column (string or binary)")
    vi = names.index("value")
    value_of = _bytes_of(schema["value"].dataType, "value")
    key_of = _key_reader(schema)
    topic_of = _topic_reader(schema, topic_option)
    partition_of = _partition_reader(schema)
    if topic_option is not None and "partition" not in names and "headers" not in names:
        return _fast_encoder(schema, topic_option)  # types were checked above
    if "headers" in names:
        hi = names.index("headers")
        read_headers = _headers_reader(schema["headers"].dataType)

        def headers_of(row: Any) -> Headers:
            return read_headers(row[hi])
    else:

        def headers_of(row: Any) -> Headers:
            return None

    def encode(row: Any) -> ProduceArgs:
        return topic_of(row), partition_of(row), key_of(row), value_of(row[vi]), headers_of(row)

    return encode


# == Arrow batches (the sink's DataSourceArrowWriter path) =====================================


class BatchRecords(NamedTuple):
    """One Arrow batch's produce arguments, column by column (no Row objects).

    `topic` is the fixed topic (the `topic` option) or None with `topics` per row; `keys` and
    `values` hold what the columns hold (bytes or str: the producer takes both), `partitions`
    and `headers` are None when the rows have no such column.
    """

    topic: str | None
    topics: list[str | None] | None
    partitions: list[int | None] | None
    keys: list[Any] | None
    values: list[Any]
    headers: list[Any] | None

    @property
    def plain(self) -> bool:
        """Fixed topic, no partition and no headers: produce(topic, value, key) per row."""
        return self.topic is not None and self.partitions is None and self.headers is None

    def __len__(self) -> int:
        return len(self.values)

    def records(self) -> Iterator[ProduceArgs]:
        """Each row as (topic, partition, key, value, headers) with bytes, as `RowEncoder`
        gives it (for the digest and for rows that need more than the plain produce)."""
        n = len(self.values)
        topics = self.topics if self.topics is not None else [self.topic] * n
        partitions = self.partitions if self.partitions is not None else [None] * n
        keys = self.keys if self.keys is not None else [None] * n
        headers = self.headers if self.headers is not None else [None] * n
        for topic, partition, key, value, hdrs in zip(
            topics, partitions, keys, self.values, headers, strict=True
        ):
            if topic is None:
                raise MissingTopic("a row has a null topic and the sink has no 'topic' option")
            yield topic, partition, _as_bytes(key), _as_bytes(value), _headers_of(hdrs)


def _as_bytes(v: Any) -> bytes | None:
    if v is None or isinstance(v, bytes):
        return v
    if isinstance(v, str):
        return v.encode()
    return bytes(v)


def _headers_of(v: Any) -> Headers:
    if v is None:
        return None
    return [(h["key"], _as_bytes(h["value"])) for h in v]


BatchEncoder = Callable[[Any], BatchRecords]


def batch_encoder(schema: StructType, topic_option: str | None) -> BatchEncoder:
    """A function turning one `pyarrow.RecordBatch` of `schema` into `BatchRecords`, with the
    column rules (and errors) of `row_encoder`, which it runs once to check the schema."""
    row_encoder(schema, topic_option)
    names = schema.fieldNames()

    def column(batch: Any, name: str) -> list[Any] | None:
        if name not in names:
            return None
        values: list[Any] = batch.column(names.index(name)).to_pylist()
        return values

    def encode(batch: Any) -> BatchRecords:
        values = column(batch, "value")
        assert values is not None
        return BatchRecords(
            topic_option,
            None if topic_option is not None else column(batch, "topic"),
            column(batch, "partition"),
            column(batch, "key"),
            values,
            column(batch, "headers"),
        )

    return encode
