"""Produce and Fetch responses written by hand, the two answers on the data path.

kio's generic encoder builds a dataclass per partition from the handler's mapping and then
writes it field by field; for a Produce of 64 partitions that was a third of the request's
Python time. These encoders write the same bytes straight from the mappings with struct.
They know the fields each version has (ProduceResponse v3-v11, FetchResponse v4-v12) and the
values our handlers set; anything else (a tagged field with a value, an unknown key) makes
them return None, and the caller takes the generic path. `tests/property/
test_fast_responses.py` holds them to kio's bytes for every version.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping, Sequence
from typing import Any

from oncelog.fileio import FileRegion
from oncelog.protocol.records.record import encode_unsigned_varint
from oncelog.protocol.records.speedups import speedups as _speedups

PRODUCE = 0
FETCH = 1
_FIRST_FLEXIBLE = {PRODUCE: 9, FETCH: 12}

_I32 = struct.Struct(">i")
_PRODUCE_PART = struct.Struct(">ihq")  # index, error_code, base_offset
_Q = struct.Struct(">q")
_QQ = struct.Struct(">qq")
_I32_I16_I32 = struct.Struct(">ihi")  # throttle, error_code, session_id
_FETCH_PART = struct.Struct(">ihqq")  # partition, error_code, high watermark, last stable
_EMPTY_TAGS = b"\x00"

_PRODUCE_KEYS = frozenset(
    (
        "index",
        "error_code",
        "base_offset",
        "log_append_time",
        "log_start_offset",
        "record_errors",
        "error_message",
    )
)
_ANSWER_KEYS = frozenset(("responses", "throttle_time"))
_FETCH_ANSWER_KEYS = frozenset(("throttle_time", "error_code", "session_id", "responses"))
_FETCH_KEYS = frozenset(
    (
        "partition_index",
        "error_code",
        "high_watermark",
        "last_stable_offset",
        "log_start_offset",
        "aborted_transactions",
        "preferred_read_replica",
        "records",
    )
)

Piece = bytes | bytearray | memoryview | FileRegion


class _Writer:
    """Gathers small fields in one bytearray; record bytes stay separate pieces."""

    __slots__ = ("flexible", "out", "pieces")

    def __init__(self, flexible: bool) -> None:
        self.flexible = flexible
        self.out = bytearray()
        self.pieces: list[Piece] = [self.out]

    def count(self, n: int) -> None:
        if self.flexible:
            self.out += encode_unsigned_varint(n + 1)
        else:
            self.out += _I32.pack(n)

    def string(self, value: str | None) -> None:
        if value is None:
            self.out += b"\x00" if self.flexible else b"\xff\xff"
            return
        raw = value.encode()
        if self.flexible:
            self.out += encode_unsigned_varint(len(raw) + 1)
        else:
            self.out += struct.pack(">h", len(raw))
        self.out += raw

    def tags(self) -> None:
        if self.flexible:
            self.out += _EMPTY_TAGS

    def records(self, value: Piece | None) -> None:
        if value is None:
            self.out += b"\x00" if self.flexible else b"\xff\xff\xff\xff"
            return
        n = len(value)
        self.out += encode_unsigned_varint(n + 1) if self.flexible else _I32.pack(n)
        if n < 1024 and not isinstance(value, FileRegion):
            self.out += value
            return
        self.pieces.append(value)
        self.out = bytearray()
        self.pieces.append(self.out)


def encode_produce_frame(version: int, correlation_id: int, answer: Any) -> bytes | None:
    """A whole Produce response frame (length, header, body) written in C, the answer on
    every Produce's path; None when the C helper is missing or leaves it to `_produce`."""
    if _speedups is None:
        return None
    frame: bytes | None = _speedups.encode_produce_response(
        version, correlation_id, answer, _ANSWER_KEYS, _PRODUCE_KEYS
    )
    return frame


def encode_fetch_frame(version: int, correlation_id: int, answer: Any) -> list[Piece] | None:
    """A whole Fetch response frame written in C: the small fields in one buffer, records of
    1 KiB or more and file regions as pieces of their own, as `_fetch` cuts them. None when
    the C helper is missing or leaves it to `_fetch`."""
    if _speedups is None:
        return None
    pieces: list[Piece] | None = _speedups.encode_fetch_response(
        version, correlation_id, answer, _FETCH_ANSWER_KEYS, _FETCH_KEYS, FileRegion
    )
    return pieces


def encode_response_body(api_key: int, version: int, answer: Any) -> list[Piece] | None:
    """The body of a Produce or Fetch answer given as the handlers' mapping, or None when
    the generic encoder must do it (another API, a kio entity, a field we do not write)."""
    if not isinstance(answer, Mapping):
        return None
    if api_key == PRODUCE and 3 <= version <= 11:
        return _produce(version, answer)
    if api_key == FETCH and 4 <= version <= 12:
        return _fetch(version, answer)
    return None


def _produce(version: int, answer: Mapping[str, Any]) -> list[Piece] | None:
    if set(answer) - _ANSWER_KEYS:
        return None
    w = _Writer(version >= _FIRST_FLEXIBLE[PRODUCE])
    responses: Sequence[Mapping[str, Any]] = answer["responses"]
    w.count(len(responses))
    for topic in responses:
        w.string(topic["name"])
        partitions: Sequence[Mapping[str, Any]] = topic["partition_responses"]
        w.count(len(partitions))
        for p in partitions:
            if not _PRODUCE_KEYS.issuperset(p):
                return None
            w.out += _PRODUCE_PART.pack(p["index"], p["error_code"], p["base_offset"])
            w.out += _Q.pack(p.get("log_append_time", -1))
            if version >= 5:
                w.out += _Q.pack(p.get("log_start_offset", -1))
            if version >= 8:
                errors: Sequence[Mapping[str, Any]] = p.get("record_errors") or ()
                w.count(len(errors))
                for e in errors:
                    w.out += _I32.pack(e["batch_index"])
                    w.string(e.get("batch_index_error_message"))
                    w.tags()
                w.string(p.get("error_message"))
            w.tags()
        w.tags()
    w.out += _I32.pack(answer.get("throttle_time", 0))
    w.tags()
    return w.pieces


def _fetch(version: int, answer: Mapping[str, Any]) -> list[Piece] | None:
    if set(answer) - _FETCH_ANSWER_KEYS:
        return None
    w = _Writer(version >= _FIRST_FLEXIBLE[FETCH])
    throttle = answer.get("throttle_time", 0)
    if version >= 7:
        w.out += _I32_I16_I32.pack(throttle, answer["error_code"], answer.get("session_id", 0))
    else:
        w.out += _I32.pack(throttle)
    responses: Sequence[Mapping[str, Any]] = answer["responses"]
    w.count(len(responses))
    for topic in responses:
        w.string(topic["topic"])
        partitions: Sequence[Mapping[str, Any]] = topic["partitions"]
        w.count(len(partitions))
        for p in partitions:
            if not _FETCH_KEYS.issuperset(p):
                return None
            w.out += _FETCH_PART.pack(
                p["partition_index"],
                p["error_code"],
                p["high_watermark"],
                p.get("last_stable_offset", -1),
            )
            if version >= 5:
                w.out += _Q.pack(p.get("log_start_offset", -1))
            aborted: Sequence[Mapping[str, Any]] | None = p.get("aborted_transactions")
            if aborted is None:
                w.out += b"\x00" if w.flexible else b"\xff\xff\xff\xff"
            else:
                w.count(len(aborted))
                for txn in aborted:
                    w.out += _QQ.pack(txn["producer_id"], txn["first_offset"])
                    w.tags()
            if version >= 11:
                w.out += _I32.pack(p.get("preferred_read_replica", -1))
            w.records(p.get("records"))
            w.tags()
        w.tags()
    w.tags()
    return w.pieces
