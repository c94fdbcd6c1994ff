"""oncelog's own tagged fields on standard responses.

Tagged fields exist so that a message can carry more than a client knows: every Kafka client
skips tags it does not know, so extra tags cost real clients nothing. We add ours by deriving
kio's response classes with extra tagged fields on one nested entity; kio's own writer and
reader then encode and decode them, the broker through `build`, our client through
`response_class`. A field left at its default is not sent, so -1 means "absent".

Tags are numbered from 10000 up, far above Kafka's (which count up from 0 per entity).

DescribeLogDirs (35) v2+, on each partition entry (`DescribeLogDirsPartition`):

- tag 10000 `dirty_ratio` (float64): the log cleaner's dirty ratio now, dirty bytes over
  cleanable bytes; absent (-1) when the topic is not compacted.
- tag 10001 `last_clean_time_ms` (int64): wall time of the last cleaning, in ms since the
  epoch; absent (-1) when the partition has not been cleaned since the broker started.
"""

from __future__ import annotations

import dataclasses
import types
from collections.abc import Sequence
from typing import Any, NamedTuple

from kio.serial._introspect import EntityField, EntityTupleField, classify_field

DESCRIBE_LOG_DIRS = 35
DIRTY_RATIO_TAG = 10000
LAST_CLEAN_TIME_TAG = 10001


class ExtraTag(NamedTuple):
    name: str
    tag: int
    kafka_type: str
    default: Any


DESCRIBE_LOG_DIRS_PARTITION_TAGS = (
    ExtraTag("dirty_ratio", DIRTY_RATIO_TAG, "float64", -1.0),
    ExtraTag("last_clean_time_ms", LAST_CLEAN_TIME_TAG, "int64", -1),
)
_PY_TYPES = {"float64": float, "int64": int, "int32": int}


def with_tags(cls: type[Any], path: Sequence[str], tags: Sequence[ExtraTag]) -> type[Any]:
    """`cls` derived so that the entity reached through the field names in `path` (arrays
    or single entities) also has `tags` as tagged fields; the rest is unchanged."""
    if not cls.__flexible__:
        raise ValueError(f"{cls.__name__} v{cls.__version__} has no tagged fields")
    if not path:
        extra = [
            (
                t.name,
                _PY_TYPES[t.kafka_type],
                dataclasses.field(
                    default=t.default, metadata={"kafka_type": t.kafka_type, "tag": t.tag}
                ),
            )
            for t in tags
        ]
        return _derive(cls, extra)
    (f,) = [f for f in dataclasses.fields(cls) if f.name == path[0]]
    kind = classify_field(f)
    if not isinstance(kind, EntityField | EntityTupleField):
        raise ValueError(f"{cls.__name__}.{f.name} is not an entity")
    nested = with_tags(kind.type_, path[1:], tags)
    new_type: Any = (
        types.GenericAlias(tuple, (nested, ...)) if isinstance(kind, EntityTupleField) else nested
    )
    kwargs: dict[str, Any] = {"metadata": f.metadata}
    if f.default is not dataclasses.MISSING:
        kwargs["default"] = f.default
    elif f.default_factory is not dataclasses.MISSING:
        kwargs["default_factory"] = f.default_factory
    return _derive(cls, [(f.name, new_type, dataclasses.field(**kwargs))])


def _derive(cls: type[Any], extra: list[tuple[str, Any, Any]]) -> type[Any]:
    """A subclass of a kio entity with fields added or (same name) retyped in place."""
    derived = dataclasses.make_dataclass(
        cls.__name__, extra, bases=(cls,), frozen=True, slots=True, kw_only=True
    )
    derived.__module__ = __name__
    derived.__qualname__ = cls.__qualname__
    return derived


def _describe_log_dirs(version: int) -> type[Any]:
    from kio.index import load_response_schema

    return with_tags(
        load_response_schema(DESCRIBE_LOG_DIRS, version),
        ("results", "topics", "partitions"),
        DESCRIBE_LOG_DIRS_PARTITION_TAGS,
    )


def extended_response(api_key: int, version: int) -> type[Any] | None:
    """Our derived response class for this API version, or None to use kio's."""
    if api_key == DESCRIBE_LOG_DIRS and 2 <= version <= 4:
        return _describe_log_dirs(version)
    return None
