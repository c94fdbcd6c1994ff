"""Request and response headers.

Request header v1: api_key int16, api_version int16, correlation_id int32, client_id
nullable string. v2 (flexible APIs) adds tagged fields. Response header v0 is the correlation
id; v1 adds tagged fields, except that ApiVersions responses always use v0 so a client that
does not yet know our versions can read them.
"""

from __future__ import annotations

import struct
from typing import NamedTuple

from kio.serial.errors import SerialError
from kio.serial.readers import read_unsigned_varint

from oncelog.protocol.framing import Frame
from oncelog.protocol.records.speedups import speedups as _speedups

MAX_CLIENT_ID_BYTES = 32767
_FIXED = struct.Struct(">hhi")
_CLIENT_ID_LEN = struct.Struct(">h")
API_VERSIONS_KEY = 18
_c_read_client_id = getattr(_speedups, "read_client_id", None)


class HeaderError(ValueError):
    """The request header cannot be decoded; the connection is closed."""


class RequestHeader(NamedTuple):
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None


def peek_ids(frame: Frame) -> tuple[int, int, int]:
    """(api_key, api_version, correlation_id) of a frame, for routing before full decoding."""
    if len(frame) < _FIXED.size:
        raise HeaderError(f"request of {len(frame)} bytes is shorter than a header")
    ids: tuple[int, int, int] = _FIXED.unpack_from(frame, 0)  # ints already: no int() calls
    return ids


def parse_request_header(frame: Frame, flexible: bool) -> tuple[RequestHeader, int]:
    """Decode the header; return it and the offset where the request body starts."""
    key, version, correlation_id = peek_ids(frame)
    client_id, pos = read_client_id(frame, flexible)
    return RequestHeader(key, version, correlation_id, client_id), pos


def read_client_id(frame: Frame, flexible: bool) -> tuple[str | None, int]:
    """The rest of a header whose ids `peek_ids` read: the client id, and the offset where
    the request body starts (the C helper's reader when built, for every request; this one
    for anything it does not take, and as its reference)."""
    if _c_read_client_id is not None:
        read: tuple[str | None, int] | None = _c_read_client_id(frame, flexible)
        if read is not None:
            return read
    return read_client_id_python(frame, flexible)


def read_client_id_python(frame: Frame, flexible: bool) -> tuple[str | None, int]:
    """`read_client_id` in Python, which words the errors."""
    pos = _FIXED.size
    if pos + 2 > len(frame):
        raise HeaderError("request header ends inside client_id")
    (length,) = _CLIENT_ID_LEN.unpack_from(frame, pos)
    pos += 2
    client_id: str | None = None
    if length >= 0:
        if pos + length > len(frame):
            raise HeaderError(f"client_id of {length} bytes overruns the request")
        try:
            client_id = str(frame[pos : pos + length], "utf-8")
        except UnicodeDecodeError as exc:
            raise HeaderError("client_id is not UTF-8") from exc
        pos += length
    elif length != -1:
        raise HeaderError(f"client_id length {length}")
    if flexible:
        pos = skip_tagged_fields(frame, pos)
    return client_id, pos


def skip_tagged_fields(buf: Frame, pos: int) -> int:
    """Skip a tagged-field section; bounded by the bytes present, whatever counts it claims."""
    if pos < len(buf) and buf[pos] == 0:
        return pos + 1  # none: what every client sends
    try:
        count, size = read_unsigned_varint(buf, pos)
        pos += size
        if count > len(buf) - pos:
            raise HeaderError(f"{count} tagged fields claimed with {len(buf) - pos} bytes left")
        for _ in range(count):
            _tag, size = read_unsigned_varint(buf, pos)
            pos += size
            length, size = read_unsigned_varint(buf, pos)
            pos += size + length
            if pos > len(buf):
                raise HeaderError("tagged field overruns the request")
    except HeaderError:
        raise
    except (ValueError, IndexError, SerialError) as exc:  # a cut varint is kio's BufferUnderflow
        raise HeaderError(f"bad tagged fields: {exc}") from exc
    return pos


def response_header(correlation_id: int, flexible: bool) -> bytes:
    """Encode a response header (v1 when flexible, else v0)."""
    header = struct.pack(">i", correlation_id)
    return header + b"\x00" if flexible else header
