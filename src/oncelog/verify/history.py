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
- ``leaders``: who led what, as the cluster's metadata said at ``time`` (written when it
  changed): ``controller`` (node id, -1 unknown), ``leaders``: a list of
  ``[topic, partition, leader]`` (-1: no leader). For the timeline; the checker ignores it.
- ``note``: ``process``, ``what``, ``detail``, ``time``: something a client did that the checker
  does not judge but a post-mortem needs (a copier's rewind and the committed offsets it got,
  its rebalances); the report of a copy anomaly shows the copier's notes around it.

Outcomes: ``ok`` succeeded, ``fail`` definitely did not happen, ``info`` is indeterminate (timeouts,
network errors, NOT_LEADER_OR_FOLLOWER, an abort after a commit attempt).

The counts of a history (``COUNTS``: operations, sends, acknowledged, faults, ...) are defined once,
in ``Tally``, and fault windows once, in ``fault_windows``: the progress line of ``verify run``,
the checker's report and the timeline page all use them, so they agree.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Iterable, Iterator, Sequence
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


@dataclass(frozen=True, slots=True)
class Leaders:
    """The controller and the partition leaders, as metadata showed them (timeline lanes)."""

    controller: int
    leaders: tuple[tuple[str, int, int], ...]
    time: float = 0.0


@dataclass(frozen=True, slots=True)
class Note:
    """What a client did that is not an operation (a copier's rewind, a rebalance)."""

    process: str
    what: str
    detail: str = ""
    time: float = 0.0


Op: TypeAlias = Send | Txn | Poll | FinalRead | Fault | Leaders | Note


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
    elif isinstance(op, Leaders):
        out["type"] = "leaders"
        out.update(
            controller=op.controller, leaders=[list(x) for x in op.leaders], time=op.time
        )
    elif isinstance(op, Note):
        out["type"] = "note"
        out.update(process=op.process, what=op.what, detail=op.detail, time=op.time)
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
    if kind == "leaders":
        return Leaders(
            controller=int(obj["controller"]),
            leaders=tuple((str(t), int(p), int(n)) for t, p, n in obj["leaders"]),
            time=time,
        )
    if kind == "note":
        return Note(str(obj["process"]), str(obj["what"]), str(obj.get("detail", "")), time)
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


# Every count of a history, in display order: the name used by the progress line, the summary,
# the JSON report ("stats") and the timeline page alike, and what it counts.
COUNTS: dict[str, str] = {
    "operations": "client operations (sends, transaction begin/commit/abort, polls), each counted"
    " once: at its invocation, or at its completion when no invocation was recorded",
    "sends": "send operations (acknowledged or not)",
    "acknowledged": "sends completed ok whose transaction, if they had one, committed",
    "failed": "operations that definitely did not happen (outcome fail)",
    "indeterminate": "operations with an unknown outcome (info: timeouts, transport errors)",
    "polls": "polls that returned (outcome ok)",
    "polled_records": "records those polls returned",
    "transactions": "transactions (distinct transaction ids)",
    "committed": "transactions whose commit succeeded",
    "faults": "fault windows: faults injected, healed or not",
    "final_reads": "partitions read in full after the faults healed",
}


class Tally:
    """The counts of a history (``COUNTS``), kept up to date operation by operation.

    Why one class: ``verify run`` feeds it while recording (its progress line), the checker and
    the timeline feed it the history read back, so the three outputs cannot count differently.
    A transactional send is acknowledged once both its ``ok`` and its transaction's commit ``ok``
    were added, in either order.
    """

    def __init__(self) -> None:
        self._n = dict.fromkeys(COUNTS, 0)
        self._open: set[tuple[str, str, int]] = set()  # invoked, not yet completed
        self._txns: set[int] = set()
        self._committed: set[int] = set()
        self._ok_by_txn: dict[int, int] = defaultdict(int)  # ok sends of uncommitted txns

    def add(self, op: Op) -> None:
        n = self._n
        if isinstance(op, Fault):
            n["faults"] += op.phase == "start"
            return
        if isinstance(op, FinalRead):
            n["final_reads"] += 1
            return
        if isinstance(op, Leaders | Note):
            return
        key = (type(op).__name__, op.process, op.index)
        if op.phase == "invoke":
            self._open.add(key)
            first = True
        else:
            first = key not in self._open
            self._open.discard(key)
        n["operations"] += first
        n["failed"] += op.phase == "fail"
        n["indeterminate"] += op.phase == "info"
        if isinstance(op, Poll):
            if op.phase == "ok":
                n["polls"] += 1
                n["polled_records"] += len(op.records)
            return
        self._txn(op.txn)
        if isinstance(op, Send):
            n["sends"] += first
            if op.phase == "ok":
                if op.txn is None or op.txn in self._committed:
                    n["acknowledged"] += 1
                else:
                    self._ok_by_txn[op.txn] += 1
        elif op.action == "commit" and op.phase == "ok" and op.txn not in self._committed:
            self._committed.add(op.txn)
            n["committed"] += 1
            n["acknowledged"] += self._ok_by_txn.pop(op.txn, 0)

    def _txn(self, txn: int | None) -> None:
        if txn is not None and txn not in self._txns:
            self._txns.add(txn)
            self._n["transactions"] += 1

    def acknowledged(self, send: Send) -> bool:
        """Whether this send completion is counted as acknowledged (by the ops added so far)."""
        return send.phase == "ok" and (send.txn is None or send.txn in self._committed)

    def counts(self) -> dict[str, int]:
        """A copy of every count, in ``COUNTS`` order."""
        return dict(self._n)


def tally(ops: Iterable[Op]) -> Tally:
    """The tally of a whole history."""
    t = Tally()
    for op in ops:
        t.add(op)
    return t


#: The per-topic counts of `per_topic`, in display order.
TOPIC_COUNTS = ("sends", "acknowledged", "polled_records", "final_read_records")


def per_topic(ops: Sequence[Op]) -> dict[str, dict[str, int]]:
    """Topic -> its sends (invoked or completed, once each), acknowledged sends (as ``Tally``
    counts them), records polled and records in the final reads; topics in first-seen order.

    Why: a run spreads its writes over topics of different replication factors; these show that
    each was written and read (a topic nobody could write would hide behind the totals)."""
    done = tally(ops)
    out: dict[str, dict[str, int]] = {}
    seen: set[tuple[str, int]] = set()

    def of(topic: str) -> dict[str, int]:
        return out.setdefault(topic, dict.fromkeys(TOPIC_COUNTS, 0))

    for op in ops:
        if isinstance(op, Send):
            counts = of(op.topic)
            if (op.process, op.index) not in seen:
                seen.add((op.process, op.index))
                counts["sends"] += 1
            counts["acknowledged"] += done.acknowledged(op)
        elif isinstance(op, Poll) and op.phase == "ok":
            for r in op.records:
                of(r.topic)["polled_records"] += 1
        elif isinstance(op, FinalRead):
            of(op.topic)["final_read_records"] += len(op.records)
    return out


def committed_topics(ops: Sequence[Op]) -> dict[int, set[str]]:
    """Committed transaction -> the topics its acknowledged sends went to."""
    committed = {
        op.txn
        for op in ops
        if isinstance(op, Txn) and op.action == "commit" and op.phase == "ok"
    }
    out: dict[int, set[str]] = defaultdict(set)
    for op in ops:
        if isinstance(op, Send) and op.phase == "ok" and op.txn in committed:
            assert op.txn is not None
            out[op.txn].add(op.topic)
    return dict(out)


@dataclass(frozen=True, slots=True)
class FaultWindow:
    """One fault from its start to its end (``None``: never healed); times as in the history."""

    kind: str
    target: str
    start: float
    end: float | None
    detail: str | None = None
    heal_detail: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "target": self.target,
            "start": self.start,
            "end": self.end,
            "detail": self.detail,
            "heal_detail": self.heal_detail,
        }


def fault_windows(ops: Iterable[Op]) -> list[FaultWindow]:
    """One window per fault start (the ``faults`` count), ended by the next end of the same kind
    and target; an end without a start is ignored. Ordered by start."""
    open_: dict[tuple[str, str], list[Fault]] = defaultdict(list)
    out: list[FaultWindow] = []
    for op in ops:
        if not isinstance(op, Fault):
            continue
        key = (op.kind, op.target)
        if op.phase == "start":
            open_[key].append(op)
        elif open_[key]:
            s = open_[key].pop(0)
            out.append(FaultWindow(s.kind, s.target, s.time, op.time, s.detail, op.detail))
    out += [
        FaultWindow(s.kind, s.target, s.time, None, s.detail) for f in open_.values() for s in f
    ]
    out.sort(key=lambda w: w.start)
    return out
