"""A history of an exactly-once workload: JSON lines, one operation a line, written as it happens.

Why JSON lines: a history must survive the crash of the tool that writes it (each line is
flushed on its own, and a torn last line is ignored on reading) and must be checkable again
later, by `oncelog verify check HISTORY`, or by other tools.

Schema, version 1 (every line carries ``"v": 1`` and ``"type"``):

- ``send``: ``process`` (client id), ``index`` (op index; the invocation and the completion of one
  operation share it), ``phase`` (``invoke`` | ``ok`` | ``fail`` | ``info``), ``topic``,
  ``partition``, ``value`` (unique per partition), ``key``, ``transactional_id``, ``txn`` (the
  workload's transaction id, unique in the history), ``offset`` (when acknowledged), ``source``
  (for copiers: ``[topic, partition, offset]`` of the input this output copies), ``error``,
  ``time``.
- ``txn``: ``process``, ``index``, ``phase``, ``action`` (``begin`` | ``commit`` | ``abort``),
  ``transactional_id``, ``txn``, ``error``, ``time``.
- ``poll``: ``process``, ``index``, ``phase``, ``mode`` (``assign`` | ``subscribe``),
  ``isolation`` (``read_committed`` | ``read_uncommitted``), ``records``: a list of
  ``[topic, partition, offset, value]`` in the order returned, ``error``, ``time``.
- ``final_read``: ``topic``, ``partition``, ``isolation``, ``records`` (every record from offset 0),
  ``time``.
- ``fault``: ``kind`` (kill, pause, resume, ...), ``phase`` (``start`` | ``end``), ``target``,
  ``detail``, ``time``.

Outcomes: ``ok`` succeeded, ``fail`` definitely did not happen, ``info`` is indeterminate (timeouts,
network errors, NOT_LEADER_OR_FOLLOWER, an abort after a commit attempt).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, Literal, TypeAlias

VERSION = 1

Phase: TypeAlias = Literal["invoke", "ok", "fail", "info"]
PHASES: frozenset[str] = frozenset(("invoke", "ok", "fail", "info"))
TxnAction: TypeAlias = Literal["begin", "commit", "abort"]
Mode: TypeAlias = Literal["assign", "subscribe"]
Isolation: TypeAlias = Literal["read_committed", "read_uncommitted"]


class HistoryError(ValueError):
    """A history line that is not valid (other than a torn last line)."""


@dataclass(frozen=True, slots=True)
class Record:
    """One record a read returned."""

    topic: str
    partition: int
    offset: int
    value: str


@dataclass(frozen=True, slots=True)
class Source:
    """The input record a copier's output copies (consume-transform-produce)."""

    topic: str
    partition: int
    offset: int


@dataclass(frozen=True, slots=True)
class Send:
    """The invocation or completion of one produce of one value."""

    process: str
    index: int
    phase: Phase
    topic: str
    partition: int
    value: str
    key: str | None = None
    transactional_id: str | None = None
    txn: int | None = None
    offset: int | None = None
    source: Source | None = None
    error: str | None = None
    time: float = 0.0


@dataclass(frozen=True, slots=True)
class Txn:
    """The invocation or completion of a transaction's begin, commit or abort."""

    process: str
    index: int
    phase: Phase
    action: TxnAction
    transactional_id: str
    txn: int
    error: str | None = None
    time: float = 0.0


@dataclass(frozen=True, slots=True)
class Poll:
    """The invocation or completion of one consumer poll; records in the order returned."""

    process: str
    index: int
    phase: Phase
    mode: Mode
    isolation: Isolation
    records: tuple[Record, ...] = ()
    error: str | None = None
    time: float = 0.0


@dataclass(frozen=True, slots=True)
class FinalRead:
    """Everything in one partition from offset 0, read after the faults healed."""

    topic: str
    partition: int
    isolation: Isolation
    records: tuple[Record, ...]
    time: float = 0.0


@dataclass(frozen=True, slots=True)
class Fault:
    """A fault injected (or healed), for the timeline."""

    kind: str
    phase: Literal["start", "end"]
    target: str
    detail: str | None = None
    time: float = 0.0


Op: TypeAlias = Send | Txn | Poll | FinalRead | Fault


def op_to_dict(op: Op) -> dict[str, Any]:
    """The JSON object of one operation (schema version 1)."""
    out: dict[str, Any] = {"v": VERSION}
    if isinstance(op, Send):
        out["type"] = "send"
        out.update(
            process=op.process,
            index=op.index,
            phase=op.phase,
            topic=op.topic,
            partition=op.partition,
            value=op.value,
            key=op.key,
            transactional_id=op.transactional_id,
            txn=op.txn,
            offset=op.offset,
            source=None
            if op.source is None
            else [op.source.topic, op.source.partition, op.source.offset],
            error=op.error,
            time=op.time,
        )
    elif isinstance(op, Txn):
        out["type"] = "txn"
        out.update(
            process=op.process,
            index=op.index,
            phase=op.phase,
            action=op.action,
            transactional_id=op.transactional_id,
            txn=op.txn,
            error=op.error,
            time=op.time,
        )
    elif isinstance(op, Poll):
        out["type"] = "poll"
        out.update(
            process=op.process,
            index=op.index,
            phase=op.phase,
            mode=op.mode,
            isolation=op.isolation,
            records=_records_out(op.records),
            error=op.error,
            time=op.time,
        )
    elif isinstance(op, FinalRead):
        out["type"] = "final_read"
        out.update(
            topic=op.topic,
            partition=op.partition,
            isolation=op.isolation,
            records=_records_out(op.records),
            time=op.time,
        )
    else:
        out["type"] = "fault"
        out.update(kind=op.kind, phase=op.phase, target=op.target, detail=op.detail, time=op.time)
    return out


def _records_out(records: tuple[Record, ...]) -> list[list[Any]]:
    return [[r.topic, r.partition, r.offset, r.value] for r in records]


def _records_in(raw: Any) -> tuple[Record, ...]:
    return tuple(Record(str(t), int(p), int(o), str(v)) for t, p, o, v in raw)


def _phase(raw: Any) -> Phase:
    if raw not in PHASES:
        raise HistoryError(f"unknown phase {raw!r}")
    phase: Phase = raw
    return phase


def op_from_dict(obj: dict[str, Any]) -> Op:
    """Parse one JSON object; raises HistoryError (or KeyError/TypeError) when malformed."""
    if obj.get("v") != VERSION:
        raise HistoryError(f"unsupported history version {obj.get('v')!r}")
    kind = obj.get("type")
    time = float(obj.get("time", 0.0))
    if kind == "send":
        src = obj.get("source")
        return Send(
            process=str(obj["process"]),
            index=int(obj["index"]),
            phase=_phase(obj["phase"]),
            topic=str(obj["topic"]),
            partition=int(obj["partition"]),
            value=str(obj["value"]),
            key=obj.get("key"),
            transactional_id=obj.get("transactional_id"),
            txn=obj.get("txn"),
            offset=obj.get("offset"),
            source=None if src is None else Source(str(src[0]), int(src[1]), int(src[2])),
            error=obj.get("error"),
            time=time,
        )
    if kind == "txn":
        if obj["action"] not in ("begin", "commit", "abort"):
            raise HistoryError(f"unknown transaction action {obj['action']!r}")
        return Txn(
            process=str(obj["process"]),
            index=int(obj["index"]),
            phase=_phase(obj["phase"]),
            action=obj["action"],
            transactional_id=str(obj["transactional_id"]),
            txn=int(obj["txn"]),
            error=obj.get("error"),
            time=time,
        )
    if kind == "poll":
        return Poll(
            process=str(obj["process"]),
            index=int(obj["index"]),
            phase=_phase(obj["phase"]),
            mode=_choice(obj["mode"], ("assign", "subscribe")),
            isolation=_choice(obj["isolation"], ("read_committed", "read_uncommitted")),
            records=_records_in(obj.get("records", [])),
            error=obj.get("error"),
            time=time,
        )
    if kind == "final_read":
        return FinalRead(
            topic=str(obj["topic"]),
            partition=int(obj["partition"]),
            isolation=_choice(obj["isolation"], ("read_committed", "read_uncommitted")),
            records=_records_in(obj["records"]),
            time=time,
        )
    if kind == "fault":
        return Fault(
            kind=str(obj["kind"]),
            phase=_choice(obj["phase"], ("start", "end")),
            target=str(obj["target"]),
            detail=obj.get("detail"),
            time=time,
        )
    raise HistoryError(f"unknown operation type {kind!r}")


def _choice(raw: Any, allowed: tuple[str, ...]) -> Any:
    if raw not in allowed:
        raise HistoryError(f"{raw!r} is not one of {allowed}")
    return raw


def dumps(op: Op) -> str:
    """One history line (without the newline)."""
    return json.dumps(op_to_dict(op), separators=(",", ":"))


class HistoryWriter:
    """Appends operations to a history file as they happen; each line is flushed at once."""

    def __init__(self, stream: IO[str]) -> None:
        self._stream = stream

    @classmethod
    def open(cls, path: str | Path) -> HistoryWriter:
        return cls(Path(path).open("a", encoding="utf-8"))

    def write(self, op: Op) -> None:
        self._stream.write(dumps(op) + "\n")
        self._stream.flush()

    def close(self) -> None:
        self._stream.close()

    def __enter__(self) -> HistoryWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def write_history(path: str | Path, ops: Iterable[Op]) -> None:
    """Write a whole history at once (tests, conversions)."""
    with Path(path).open("w", encoding="utf-8") as f:
        for op in ops:
            f.write(dumps(op) + "\n")


def parse_lines(lines: Iterable[str]) -> Iterator[Op]:
    """Parse history lines; a malformed LAST line (torn by a crash while writing) is skipped."""
    pending: tuple[int, str] | None = None
    for number, line in enumerate(lines, start=1):
        if pending is not None:
            yield _parse_line(*pending)
        pending = (number, line) if line.strip() else None
    if pending is not None:
        try:
            yield _parse_line(*pending)
        except HistoryError:
            return


def _parse_line(number: int, line: str) -> Op:
    try:
        obj = json.loads(line)
        if not isinstance(obj, dict):
            raise HistoryError("not a JSON object")
        return op_from_dict(obj)
    except (ValueError, KeyError, TypeError, IndexError) as e:
        raise HistoryError(f"history line {number}: {e}") from e


def read_history(path: str | Path) -> list[Op]:
    """All operations of a history file, in the order they were written."""
    with Path(path).open(encoding="utf-8", errors="replace") as f:
        return list(parse_lines(f))
