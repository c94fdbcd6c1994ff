"""Request decoding and response encoding with kio's generated message types.

Handlers are written once for all versions of an API: they describe a response as nested
mappings and `build` turns that into the kio dataclass of the version the client asked for,
keeping only the fields that version has.
"""

from __future__ import annotations

import datetime
import io
from collections.abc import Callable, Mapping
from dataclasses import MISSING, Field, fields
from functools import cache
from typing import Any

from kio._kio_native import tz_aware_from_i64
from kio.index import load_request_schema, load_response_schema
from kio.schema.errors import ErrorCode
from kio.serial import entity_reader, entity_writer
from kio.serial._introspect import EntityField, EntityTupleField, classify_field
from kio.static.primitive import i64

from oncelog.protocol.framing import frame
from oncelog.protocol.headers import API_VERSIONS_KEY, response_header

_Plan = tuple[tuple[str, str, type[Any] | None, bool, object], ...]


class DecodeError(ValueError):
    """The request body does not decode as the message it claims to be."""


@cache
def request_class(api_key: int, version: int) -> type[Any]:
    return load_request_schema(api_key, version)


@cache
def response_class(api_key: int, version: int) -> type[Any]:
    return load_response_schema(api_key, version)


def is_flexible(api_key: int, version: int) -> bool:
    return bool(request_class(api_key, version).__flexible__)


_READERS: dict[type[Any], Callable[[bytes, int], tuple[Any, int]]] = {}
_WRITERS: dict[type[Any], Callable[[io.BytesIO, Any], None]] = {}
_PLANS: dict[type[Any], _Plan] = {}


def _reader(cls: type[Any]) -> Callable[[bytes, int], tuple[Any, int]]:
    reader = _READERS.get(cls)
    if reader is None:
        reader = _READERS[cls] = entity_reader(cls)
    return reader


def _writer(cls: type[Any]) -> Callable[[io.BytesIO, Any], None]:
    writer = _WRITERS.get(cls)
    if writer is None:
        writer = _WRITERS[cls] = entity_writer(cls)
    return writer


def decode_request(cls: type[Any], buf: bytes, offset: int) -> Any:
    """Decode a request body; any malformation (including trailing bytes) is a DecodeError."""
    try:
        entity, size = _reader(cls)(buf, offset)
    except Exception as exc:  # kio raises DecodeError subclasses, ValueError, OverflowError
        raise DecodeError(f"cannot decode {cls.__name__} v{cls.__version__}: {exc}") from exc
    if offset + size != len(buf):
        raise DecodeError(
            f"{len(buf) - offset - size} bytes after {cls.__name__} v{cls.__version__}"
        )
    return entity


def encode_entity(entity: Any) -> bytes:
    out = io.BytesIO()
    _writer(type(entity))(out, entity)
    return out.getvalue()


def encode_response(api_key: int, correlation_id: int, entity: Any) -> bytes:
    """Frame a response: length, header (v0 for ApiVersions, else by flexibility), body."""
    flexible = bool(entity.__flexible__) and api_key != API_VERSIONS_KEY
    return frame(response_header(correlation_id, flexible) + encode_entity(entity))


def _plan(cls: type[Any]) -> _Plan:
    cached = _PLANS.get(cls)
    if cached is not None:
        return cached
    plan = []
    for f in fields(cls):
        kind = classify_field(f)
        nested: type[Any] | None = None
        is_tuple = False
        if isinstance(kind, EntityTupleField):
            nested, is_tuple = kind.type_, True
        elif isinstance(kind, EntityField):
            nested = kind.type_
        plan.append((f.name, str(f.metadata.get("kafka_type", "")), nested, is_tuple, _default(f)))
    _PLANS[cls] = tuple(plan)
    return _PLANS[cls]


def _default(f: Field[Any]) -> object:
    if f.default is not MISSING:
        return f.default
    if f.default_factory is not MISSING:
        return f.default_factory()
    return MISSING


def build(cls: type[Any], data: Mapping[str, Any] | Any) -> Any:
    """Build a kio entity of `cls` from a mapping, ignoring keys the version lacks."""
    if isinstance(data, cls):
        return data
    kwargs: dict[str, Any] = {}
    for name, kafka_type, nested, is_tuple, default in _plan(cls):
        if name not in data:
            if default is MISSING:
                raise KeyError(f"{cls.__module__}.{cls.__name__} needs field {name!r}")
            continue
        value = data[name]
        if nested is not None and value is not None:
            value = tuple(build(nested, v) for v in value) if is_tuple else build(nested, value)
        elif kafka_type in ("timedelta_i32", "timedelta_i64") and isinstance(value, int):
            value = datetime.timedelta(milliseconds=value)
        elif kafka_type == "datetime_i64" and isinstance(value, int):
            value = tz_aware_from_i64(i64(value))
        elif kafka_type == "error_code" and not isinstance(value, ErrorCode):
            value = ErrorCode(value)
        kwargs[name] = value
    return cls(**kwargs)
