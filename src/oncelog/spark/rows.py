"""Spark rows → Kafka produce arguments, with the column rules of Spark's Kafka sink.

Columns (by name): `value` (string or binary, required), `key` (string or binary), `topic`
(string; the `topic` option overrides it, as in Spark), `partition` (int; absent or null lets
the partitioner choose), `headers` (array<struct<key: string, value: binary>>). The schema is
inspected once per task so the per-row work is a few index lookups and no type dispatch.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

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
