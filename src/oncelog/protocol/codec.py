"""Request decoding and response encoding with kio's generated message types.

Handlers are written once for all versions of an API: they describe a response as nested
mappings and `build` turns that into the kio dataclass of the version the client asked for,
keeping only the fields that version has.
"""

from __future__ import annotations

import datetime
import io
import logging
import struct
from collections.abc import Callable, Mapping
from dataclasses import MISSING, Field, fields
from functools import cache
from typing import Any, NamedTuple

from kio._kio_native import tz_aware_from_i64
from kio.index import load_request_schema, load_response_schema
from kio.schema.errors import ErrorCode
from kio.serial import entity_reader, entity_writer
from kio.serial._introspect import (
    EntityField,
    EntityTupleField,
    PrimitiveTupleField,
    classify_field,
    get_field_tag,
    is_optional,
)
from kio.static.primitive import i64

from oncelog.fileio import FileRegion
from oncelog.protocol.extensions import extended_response
from oncelog.protocol.fast_responses import (
    encode_fetch_frame,
    encode_produce_frame,
    encode_response_body,
)
from oncelog.protocol.framing import Frame
from oncelog.protocol.headers import API_VERSIONS_KEY, response_header
from oncelog.protocol.records.record import encode_unsigned_varint

log = logging.getLogger(__name__)

PRODUCE_KEY = 0
FETCH_KEY = 1

_Plan = tuple[tuple[str, str, type[Any] | None, bool, object], ...]


class DecodeError(ValueError):
    """The request body does not decode as the message it claims to be."""


@cache
def request_class(api_key: int, version: int) -> type[Any]:
    return load_request_schema(api_key, version)


@cache
def response_class(api_key: int, version: int) -> type[Any]:
    """kio's response class, or ours with oncelog's extra tagged fields (`extensions`)."""
    return extended_response(api_key, version) or load_response_schema(api_key, version)


def is_flexible(api_key: int, version: int) -> bool:
    return bool(request_class(api_key, version).__flexible__)


_READERS: dict[type[Any], Callable[[Frame, int], tuple[Any, int]]] = {}
_WRITERS: dict[type[Any], Callable[[io.BytesIO, Any], None]] = {}
_PLANS: dict[type[Any], _Plan] = {}


def _reader(cls: type[Any]) -> Callable[[Frame, int], tuple[Any, int]]:
    reader = _READERS.get(cls)
    if reader is None:
        reader = _READERS[cls] = entity_reader(cls)
    return reader


def _writer(cls: type[Any]) -> Callable[[io.BytesIO, Any], None]:
    writer = _WRITERS.get(cls)
    if writer is None:
        writer = _WRITERS[cls] = entity_writer(cls)
    return writer


def decode_request(cls: type[Any], buf: Frame, offset: int) -> Any:
    """Decode a request body; any malformation is a DecodeError. Unknown tagged fields are
    dropped first, as Kafka ignores them.

    Bytes after a complete body are ignored, as Kafka does (its request parser never checks
    for them): librdkafka 2.16 sends Metadata v12 requests for all topics with three extra
    bytes, and a broker that refused them would be unusable for it.
    """
    stripped = drop_unknown_tags(cls, buf, offset)
    if stripped is not buf:
        log.debug("ignored unknown tagged fields in %s v%d", cls.__name__, cls.__version__)
        buf = stripped
    try:
        entity, size = _reader(cls)(buf, offset)
    except Exception as exc:  # kio raises DecodeError subclasses, ValueError, OverflowError
        raise DecodeError(f"cannot decode {cls.__name__} v{cls.__version__}: {exc}") from exc
    if offset + size != len(buf):
        log.debug(
            "ignored %d bytes after %s v%d", len(buf) - offset - size, cls.__name__, cls.__version__
        )
    return entity


def drop_unknown_tags(cls: type[Any], buf: Frame, offset: int = 0) -> Frame:
    """`buf` without the tagged fields `cls` does not know, as every Kafka client reads a
    message (kio refuses them); `buf` itself when there are none. Checks array counts."""
    edits = check_array_counts(cls, buf, offset)
    edited = _apply_edits(buf, edits) if edits else None
    return buf if edited is None else edited


def encode_entity(entity: Any) -> bytes:
    out = io.BytesIO()
    _writer(type(entity))(out, entity)
    return out.getvalue()


#: A piece of a framed response: bytes, or stored batches still in their segment file.
Buffer = bytes | bytearray | memoryview | FileRegion

_LARGE_WRITE = 8192


class _Chunks:
    """A kio `Writable` that keeps large writes (stored record batches) by reference.

    Small fields are gathered into one bytearray; a large value becomes its own chunk, so a
    Fetch response carries its record bytes to the socket without being copied again, and a
    FileRegion (kio only asks its length) stays in its file until the connection sends it.
    """

    __slots__ = ("_small", "parts", "size")

    def __init__(self, first: bytes) -> None:
        self.parts: list[Buffer] = []
        self._small = bytearray(first)
        self.size = len(first)

    def write(self, data: Buffer) -> int:
        n = len(data)
        if n >= _LARGE_WRITE or isinstance(data, FileRegion):
            if self._small:
                self.parts.append(self._small)
                self._small = bytearray()
            self.parts.append(data)
        else:
            self._small += data
        self.size += n
        return n

    def finish(self) -> list[Buffer]:
        if self._small:
            self.parts.append(self._small)
        return self.parts


def encode_response(api_key: int, correlation_id: int, entity: Any) -> list[Buffer]:
    """Frame a response as a list of buffers for one vectored write: length, header (v0 for
    ApiVersions, else by flexibility), body."""
    flexible = bool(entity.__flexible__) and api_key != API_VERSIONS_KEY
    header = response_header(correlation_id, flexible)
    out = _Chunks(b"\0\0\0\0" + header)
    _writer(type(entity))(out, entity)  # type: ignore[arg-type]
    parts = out.finish()
    first = parts[0]
    assert isinstance(first, bytearray)
    struct.pack_into(">i", first, 0, out.size - 4)
    return parts


def encode_fast_response(
    api_key: int, version: int, correlation_id: int, answer: Any
) -> list[Buffer] | None:
    """Frame a Produce or Fetch answer with the hand encoders (`fast_responses`); None when
    they do not take it and `encode_response(build(...))` must."""
    if api_key == PRODUCE_KEY:
        frame = encode_produce_frame(version, correlation_id, answer)
        if frame is not None:
            return [frame]
    elif api_key == FETCH_KEY:
        pieces = encode_fetch_frame(version, correlation_id, answer)
        if pieces is not None:
            return pieces
    pieces = encode_response_body(api_key, version, answer)
    if pieces is None:
        return None
    header = response_header(correlation_id, is_flexible(api_key, version))
    size = len(header) + sum(len(p) for p in pieces)
    return [_I32.pack(size) + header, *pieces]


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


# -- array counts, checked before kio sees them ------------------------------------------------
#
# kio's native reader reserves memory for an array's declared element count before reading
# any element, so a 5-byte body claiming 2^32 elements makes it allocate 32 GiB and abort the
# process. This walk mirrors kio's wire layout just far enough to find every array count and
# refuses any count whose elements could not fit in the bytes that are left; what it does not
# check (UTF-8, enum values, trailing bytes) kio still does.

_FIXED_SIZES = {
    "int8": 1,
    "uint8": 1,
    "bool": 1,
    "int16": 2,
    "uint16": 2,
    "error_code": 2,
    "int32": 4,
    "uint32": 4,
    "timedelta_i32": 4,
    "int64": 8,
    "uint64": 8,
    "float64": 8,
    "timedelta_i64": 8,
    "datetime_i64": 8,
    "uuid": 16,
}
_FIXED, _STRING, _BYTES, _ENTITY, _ARRAY = range(5)
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")


class _Shape(NamedTuple):
    """Wire shape of one field (or array element): opcode, argument, minimum wire size."""

    op: int
    arg: Any  # fixed size | None | (entity shape, nullable) | element shape
    min_size: int


class _EntityShape(NamedTuple):
    flexible: bool
    fields: tuple[_Shape, ...]
    tagged: dict[int, _Shape]
    min_size: int


_SHAPES: dict[type[Any], _EntityShape] = {}


def _entity_shape(cls: type[Any]) -> _EntityShape:
    cached = _SHAPES.get(cls)
    if cached is not None:
        return cached
    flexible = bool(cls.__flexible__)
    plain: list[_Shape] = []
    tagged: dict[int, _Shape] = {}
    for f in fields(cls):
        shape = _field_shape(f, flexible)
        tag = get_field_tag(f)
        if tag is None:
            if plain and shape.op == _FIXED and plain[-1].op == _FIXED:  # one skip for a run
                size = plain[-1].arg + shape.arg
                shape = plain.pop()._replace(arg=size, min_size=size)
            plain.append(shape)
        else:
            tagged[int(tag)] = shape
    min_size = sum(s.min_size for s in plain) + int(flexible)
    _SHAPES[cls] = _EntityShape(flexible, tuple(plain), tagged, min_size)
    return _SHAPES[cls]


def _field_shape(f: Field[Any], flexible: bool) -> _Shape:
    kind = classify_field(f)
    shape: _Shape
    if isinstance(kind, EntityField | EntityTupleField):
        nested = _entity_shape(kind.type_)
        nullable = isinstance(kind, EntityField) and is_optional(f)
        shape = _Shape(_ENTITY, (nested, nullable), 1 if nullable else nested.min_size)
    else:
        kafka_type = str(f.metadata["kafka_type"])
        if kafka_type in _FIXED_SIZES:
            shape = _Shape(_FIXED, _FIXED_SIZES[kafka_type], _FIXED_SIZES[kafka_type])
        elif kafka_type == "string":
            shape = _Shape(_STRING, None, 1 if flexible else 2)
        elif kafka_type in ("bytes", "records"):
            shape = _Shape(_BYTES, None, 1 if flexible else 4)
        else:
            raise TypeError(f"no wire shape for kafka_type {kafka_type!r} of {f.name}")
    if isinstance(kind, EntityTupleField | PrimitiveTupleField):
        return _Shape(_ARRAY, shape, 1 if flexible else 4)
    return shape


def check_array_counts(cls: type[Any], buf: Frame, offset: int) -> list[_Edit]:
    """Raise DecodeError if an array in `buf[offset:]` claims more elements than can fit.

    Returns the edits that drop unknown tagged fields (see `_walk_entity`)."""
    edits: list[_Edit] = []
    try:
        _walk_entity(_entity_shape(cls), buf, offset, len(buf), edits)
    except (struct.error, IndexError) as exc:
        raise DecodeError(f"{cls.__name__} v{cls.__version__} ends early: {exc}") from exc
    return edits


#: (start, end, replacement): bytes of the request to replace before kio decodes it.
_Edit = tuple[int, int, bytes]


def _apply_edits(buf: Frame, edits: list[_Edit]) -> bytes | None:
    """`buf` with the edits applied; None when they overlap (an unknown tag nested inside a
    known tagged field: left to kio, which refuses it)."""
    out, pos = bytearray(), 0
    for start, end, replacement in sorted(edits):
        if start < pos:
            return None
        out += buf[pos:start]
        out += replacement
        pos = end
    out += buf[pos:]
    return bytes(out)


def _uvarint(buf: Frame, pos: int) -> tuple[int, int]:
    """Unsigned varint of at most 5 bytes, as kio reads them."""
    value = 0
    for shift in range(0, 35, 7):
        byte = buf[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, pos
    raise DecodeError("varint longer than 5 bytes")


def _walk_entity(
    shape: _EntityShape, buf: Frame, pos: int, end: int, edits: list[_Edit] | None = None
) -> int:
    """Walk one entity; a tagged-field section holding tags this version does not know is
    noted in `edits` as a rewrite without them: Kafka ignores unknown tagged fields (newer
    clients may send them), kio refuses them."""
    for field in shape.fields:
        pos = _walk(field, shape.flexible, buf, pos, end, edits)
    if shape.flexible:
        if buf[pos] == 0:  # no tagged fields, the usual case
            return pos + 1
        section = pos
        count, pos = _uvarint(buf, pos)
        kept: list[tuple[int, int]] = []
        for _ in range(count):  # each field takes >= 2 bytes, so this ends with the buffer
            start = pos
            tag, pos = _uvarint(buf, pos)
            size, pos = _uvarint(buf, pos)
            known = shape.tagged.get(tag)
            if known is None:
                pos += size
            else:
                pos = _walk(known, True, buf, pos, end, edits)
                kept.append((start, pos))
            if pos > end:
                raise DecodeError("tagged field overruns the request")
        if len(kept) < count and edits is not None:
            fields_kept = b"".join(buf[a:b] for a, b in kept)
            edits.append((section, pos, encode_unsigned_varint(len(kept)) + fields_kept))
    return pos


def _walk(
    shape: _Shape, flexible: bool, buf: Frame, pos: int, end: int, edits: list[_Edit] | None
) -> int:
    op = shape.op
    if op == _FIXED:
        pos += shape.arg
    elif op in (_STRING, _BYTES):
        if flexible:
            length, pos = _uvarint(buf, pos)
            pos += max(length - 1, 0)
        elif op == _STRING:
            pos += 2 + max(_I16.unpack_from(buf, pos)[0], 0)
        else:
            pos += 4 + max(_I32.unpack_from(buf, pos)[0], 0)
    elif op == _ENTITY:
        nested, nullable = shape.arg
        if nullable:
            pos += 1
            if buf[pos - 1] == 0xFF:
                return pos
        pos = _walk_entity(nested, buf, pos, end, edits)
    else:
        if flexible:
            count, pos = _uvarint(buf, pos)
            count -= 1
        else:
            (count,) = _I32.unpack_from(buf, pos)
            pos += 4
        element: _Shape = shape.arg
        if count * max(element.min_size, 1) > end - pos:
            raise DecodeError(f"array of {count} elements in {end - pos} bytes")
        if element.op == _FIXED:
            pos += max(count, 0) * element.arg
        else:
            for _ in range(count):
                pos = _walk(element, flexible, buf, pos, end, edits)
    if pos > end:
        raise DecodeError(f"field overruns the request by {pos - end} bytes")
    return pos
