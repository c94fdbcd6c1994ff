"""The exactly-once checker: a history in, every anomaly of REFERENCE §4 out, each with its proof.

Theory of operation
-------------------
1. Index the history. Each line gets a position (its line order). Invocations and completions are
   paired by (process, index). Every send is known by (topic, partition, value) — values are
   unique per partition, so every record any read returned is attributable to one send.
2. Transactions are classified from their commit/abort completions: ``committed`` (commit ok),
   ``indeterminate`` (commit info, or any abort after a commit attempt), ``aborted`` (abort ok
   without a commit attempt, commit fail, or never committed at all).
3. Observations: every (partition, offset, value) seen by a poll, by the final read, or in a send's
   acknowledgement. From them: inconsistent offsets (one offset, two values) and duplicates (one
   value, two offsets).
4. Acknowledged writes (send ok, and its transaction committed if it has one) must be read: never
   read by anything and below the highest offset read in the partition is a lost write; otherwise
   missing from the final read is unseen.
5. read_committed reads must not see an aborted transaction's writes (aborted read) nor a
   transaction's writes before its commit was invoked (precommitted read).
6. Order: each partition's version order is the sorted set of offsets known to hold a value a reader
   of that isolation level may see. Within one poll (and, for assign consumers, across successive
   polls of one process) consecutive records of a partition must advance (else non-monotonic) and
   must not jump over a visible offset (else skip). A producer's acknowledged offsets on one
   partition must advance in invocation order (non-monotonic send).
7. Copiers: each input record in the final read must be copied exactly once into the outputs the
   final read holds (missing copy, duplicate copy).

Allowed by Kafka's design and never reported: G0 (write cycles between transactions) and
int-send-skip (another producer's writes between one producer's consecutive sends).
"""

from __future__ import annotations

import bisect
import itertools
import json
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from oncelog.types import TopicPartition
from oncelog.verify.history import (
    FaultWindow,
    FinalRead,
    Op,
    Poll,
    Record,
    Send,
    Txn,
    fault_windows,
    tally,
)

FAILURES: tuple[str, ...] = (
    "inconsistent-offsets",
    "duplicate",
    "lost-write",
    "unseen",
    "aborted-read",
    "precommitted-read",
    "int-poll-skip",
    "int-nonmonotonic-poll",
    "nonmonotonic-send",
    "poll-skip",
    "nonmonotonic-poll",
    "missing-copy",
    "duplicate-copy",
)
ALLOWED: tuple[str, ...] = ("G0", "int-send-skip")
EXAMPLES_PER_KIND = 8


@dataclass(frozen=True, slots=True)
class OpRef:
    """Which operation proves an anomaly: its line position and (process, index) when it has one."""

    position: int
    type: str
    process: str | None = None
    index: int | None = None

    def label(self) -> str:
        """`send@12 p1#5`: the op type, its line in the history and its process and op index."""
        who = "" if self.process is None else f" {self.process}#{self.index}"
        return f"{self.type}@{self.position}{who}"

    def to_json(self) -> dict[str, Any]:
        return {
            "position": self.position,
            "type": self.type,
            "process": self.process,
            "index": self.index,
        }


@dataclass(frozen=True, slots=True)
class Anomaly:
    """One anomaly: its kind, partition, the offsets/values involved and the proving operations."""

    kind: str
    topic: str
    partition: int
    details: dict[str, Any]
    ops: tuple[OpRef, ...]
    #: Fault windows (numbered from 1 in start order, as on the timeline) active while one of
    #: the proving operations ran (its invocation to its completion; the final read aside: it
    #: runs after every fault healed).
    faults: tuple[int, ...] = ()
    #: When none was active: the first window that began after the proving operations began
    #: (a write acknowledged before a fault can be lost by that fault).
    next_fault: int | None = None

    def fault_note(self, windows: Sequence[FaultWindow]) -> str:
        """`during #3 kill broker 2`, `no fault active; next #4 pause broker 1`, or ``""``."""

        def name(n: int) -> str:
            w = windows[n - 1]
            return f"#{n} {w.kind} {w.target}"

        if self.faults:
            return "during " + ", ".join(name(n) for n in self.faults)
        if self.next_fault is not None:
            return f"no fault active; next {name(self.next_fault)}"
        return "no fault active" if windows else ""

    def to_json(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "topic": self.topic,
            "partition": self.partition,
            "details": self.details,
            "ops": [o.to_json() for o in self.ops],
            "faults": list(self.faults),
            "next_fault": self.next_fault,
        }


@dataclass(slots=True)
class CheckResult:
    """What the checker found: ``ok`` is False when any failure anomaly was found.

    ``stats`` are the history's counts (``history.COUNTS``, from ``history.Tally``) and ``faults``
    its fault windows: the summary, the JSON report and the timeline all show these.
    """

    anomalies: list[Anomaly] = field(default_factory=list)
    stats: dict[str, int] = field(default_factory=dict)
    faults: list[FaultWindow] = field(default_factory=list)

    @property
    def counts(self) -> dict[str, int]:
        counts = dict.fromkeys(FAILURES, 0)
        for a in self.anomalies:
            counts[a.kind] = counts.get(a.kind, 0) + 1
        return counts

    @property
    def ok(self) -> bool:
        return not self.anomalies

    @property
    def verdict(self) -> str:
        """The one-line verdict, worded the same on the terminal and on the timeline page."""
        return "OK: no anomalies" if self.ok else f"FAIL: {len(self.anomalies)} anomalies"

    def of_kind(self, kind: str) -> list[Anomaly]:
        return [a for a in self.anomalies if a.kind == kind]

    def kinds(self) -> set[str]:
        return {a.kind for a in self.anomalies}

    def to_json(self) -> dict[str, Any]:
        examples: dict[str, list[dict[str, Any]]] = defaultdict(list)
        for a in self.anomalies:
            if len(examples[a.kind]) < EXAMPLES_PER_KIND:
                examples[a.kind].append(a.to_json())
        return {
            "ok": self.ok,
            "counts": self.counts,
            "allowed_not_checked": list(ALLOWED),
            "stats": self.stats,
            "faults": [w.to_json() for w in self.faults],
            "examples": dict(examples),
        }


def write_report(result: CheckResult, path: str | Path) -> None:
    """The JSON report of a check."""
    Path(path).write_text(json.dumps(result.to_json(), indent=2) + "\n", encoding="utf-8")


@dataclass(slots=True)
class _Observation:
    """Where one (partition, offset, value) was seen."""

    offset: int
    value: str
    ref: OpRef


def _ref(position: int, op: Op) -> OpRef:
    if isinstance(op, Send | Txn | Poll):
        return OpRef(position, type(op).__name__.lower(), op.process, op.index)
    return OpRef(position, type(op).__name__.lower())


class _Index:
    """The history, indexed for the checks."""

    def __init__(self, ops: Sequence[Op]) -> None:
        self.ops = ops
        self.send_invoke: dict[tuple[str, int], int] = {}
        # (topic, partition, value) -> position of the send's completion (or invocation).
        self.sends: dict[tuple[TopicPartition, str], int] = {}
        self.completed_sends: list[tuple[int, Send]] = []
        self.polls: list[tuple[int, Poll]] = []
        self.finals: dict[TopicPartition, tuple[int, FinalRead]] = {}
        self.commit_invoked: dict[int, int] = {}
        self.txn_status: dict[int, str] = {}
        self.tally = tally(ops)
        self._index(ops)

    def _index(self, ops: Sequence[Op]) -> None:
        txn_seen: set[int] = set()
        commit_attempted: set[int] = set()
        for pos, op in enumerate(ops):
            if isinstance(op, Send):
                key = (TopicPartition(op.topic, op.partition), op.value)
                if op.phase == "invoke":
                    self.send_invoke[(op.process, op.index)] = pos
                    self.sends.setdefault(key, pos)
                else:
                    self.sends[key] = pos
                    self.completed_sends.append((pos, op))
                if op.txn is not None:
                    txn_seen.add(op.txn)
            elif isinstance(op, Txn):
                txn_seen.add(op.txn)
                self._index_txn(pos, op, commit_attempted)
            elif isinstance(op, Poll):
                if op.phase == "ok":
                    self.polls.append((pos, op))
            elif isinstance(op, FinalRead):
                self.finals[TopicPartition(op.topic, op.partition)] = (pos, op)
        # A commit invoked without an outcome (the client crashed or timed out) may have
        # committed; a transaction that never reached commit was aborted (by fencing or timeout).
        for txn in commit_attempted:
            self.txn_status.setdefault(txn, "indeterminate")
        for txn in txn_seen:
            self.txn_status.setdefault(txn, "aborted")

    def _index_txn(self, pos: int, op: Txn, commit_attempted: set[int]) -> None:
        if op.action == "commit":
            if op.phase == "invoke":
                self.commit_invoked.setdefault(op.txn, pos)
                commit_attempted.add(op.txn)
            elif op.phase == "ok":
                self.txn_status[op.txn] = "committed"
            elif op.phase == "info":
                self.txn_status.setdefault(op.txn, "indeterminate")
            else:
                self.txn_status.setdefault(op.txn, "aborted")
        elif op.action == "abort" and op.phase != "invoke":
            if op.txn in commit_attempted:
                self.txn_status.setdefault(op.txn, "indeterminate")
            elif op.phase == "ok":
                self.txn_status.setdefault(op.txn, "aborted")

    def send_of(self, tp: TopicPartition, value: str) -> tuple[int, Send] | None:
        pos = self.sends.get((tp, value))
        if pos is None:
            return None
        op = self.ops[pos]
        assert isinstance(op, Send)
        return pos, op

    def reads(self) -> Iterable[tuple[int, Op, Record, str]]:
        """Every record read: (position, op, record, isolation)."""
        for pos, poll in self.polls:
            for r in poll.records:
                yield pos, poll, r, poll.isolation
        for pos, final in self.finals.values():
            for r in final.records:
                yield pos, final, r, final.isolation

    def acknowledged(self, send: Send) -> bool:
        """The ``acknowledged`` count's definition (``history.Tally``): the writes owed."""
        return self.tally.acknowledged(send)


class Checker:
    """Runs every check of the taxonomy over one history."""

    def __init__(self, ops: Sequence[Op]) -> None:
        self.ix = _Index(ops)
        self.result = CheckResult()

    def run(self) -> CheckResult:
        observations = self._observations()
        self._check_offsets(observations)
        read_values = self._read_values()
        self._check_lost_and_unseen(observations, read_values)
        self._check_transactional_reads()
        visible = self._visible_offsets(observations)
        self._check_polls(visible)
        self._check_sends()
        self._check_copies()
        self.result.stats = self.ix.tally.counts()
        self.result.faults = fault_windows(self.ix.ops)
        if self.result.faults and self.result.anomalies:
            invoked = invocation_times(self.ix.ops)
            self.result.anomalies = [
                attribute(a, self.ix.ops, self.result.faults, invoked)
                for a in self.result.anomalies
            ]
        return self.result

    def _add(
        self, kind: str, tp: TopicPartition, details: dict[str, Any], refs: Iterable[OpRef]
    ) -> None:
        ops = tuple(sorted(set(refs), key=lambda r: r.position))
        self.result.anomalies.append(Anomaly(kind, tp.topic, tp.partition, details, ops))

    # -- 3. offsets and values ---------------------------------------------------------------

    def _observations(self) -> dict[TopicPartition, list[_Observation]]:
        obs: dict[TopicPartition, list[_Observation]] = defaultdict(list)
        for pos, op, r, _ in self.ix.reads():
            obs[TopicPartition(r.topic, r.partition)].append(
                _Observation(r.offset, r.value, _ref(pos, op))
            )
        for pos, send in self.ix.completed_sends:
            if send.phase == "ok" and send.offset is not None:
                obs[TopicPartition(send.topic, send.partition)].append(
                    _Observation(send.offset, send.value, _ref(pos, send))
                )
        return obs

    def _check_offsets(self, observations: dict[TopicPartition, list[_Observation]]) -> None:
        for tp, obs in sorted(observations.items()):
            by_offset: dict[int, dict[str, list[OpRef]]] = defaultdict(lambda: defaultdict(list))
            by_value: dict[str, dict[int, list[OpRef]]] = defaultdict(lambda: defaultdict(list))
            for o in obs:
                by_offset[o.offset][o.value].append(o.ref)
                by_value[o.value][o.offset].append(o.ref)
            for offset, values in sorted(by_offset.items()):
                if len(values) > 1:
                    refs = [r for rs in values.values() for r in rs]
                    self._add(
                        "inconsistent-offsets",
                        tp,
                        {"offset": offset, "values": sorted(values)},
                        refs,
                    )
            for value, offsets in sorted(by_value.items()):
                if len(offsets) > 1:
                    refs = [r for rs in offsets.values() for r in rs]
                    self._add("duplicate", tp, {"value": value, "offsets": sorted(offsets)}, refs)

    # -- 4. acknowledged writes must be read -------------------------------------------------

    def _read_values(self) -> dict[TopicPartition, set[str]]:
        seen: dict[TopicPartition, set[str]] = defaultdict(set)
        for _, _, r, _ in self.ix.reads():
            seen[TopicPartition(r.topic, r.partition)].add(r.value)
        return seen

    def _check_lost_and_unseen(
        self,
        observations: dict[TopicPartition, list[_Observation]],
        read_values: dict[TopicPartition, set[str]],
    ) -> None:
        highest_read: dict[TopicPartition, tuple[int, OpRef]] = {}
        for pos, op, r, _ in self.ix.reads():
            tp = TopicPartition(r.topic, r.partition)
            if tp not in highest_read or r.offset > highest_read[tp][0]:
                highest_read[tp] = (r.offset, _ref(pos, op))
        # The values of each partition's final read, as sets: a scan of the read per
        # acknowledged send was quadratic (minutes for a 7-minute soak).
        final_values = {
            tp: {r.value for r in final.records} for tp, (_, final) in self.ix.finals.items()
        }
        for pos, send in self.ix.completed_sends:
            if not self.ix.acknowledged(send):
                continue
            tp = TopicPartition(send.topic, send.partition)
            ref = _ref(pos, send)
            top = highest_read.get(tp)
            never_read = send.value not in read_values.get(tp, set())
            if never_read and send.offset is not None and top is not None and send.offset < top[0]:
                details = {"value": send.value, "offset": send.offset, "highest_read": top[0]}
                self._add("lost-write", tp, details, [ref, top[1]])
                continue
            final = self.ix.finals.get(tp)
            if final is not None and send.value not in final_values[tp]:
                details = {"value": send.value, "offset": send.offset}
                self._add("unseen", tp, details, [ref, _ref(final[0], final[1])])

    # -- 5. transactional isolation ----------------------------------------------------------

    def _check_transactional_reads(self) -> None:
        for pos, op, r, isolation in self.ix.reads():
            if isolation != "read_committed":
                continue
            tp = TopicPartition(r.topic, r.partition)
            found = self.ix.send_of(tp, r.value)
            if found is None or found[1].txn is None:
                continue
            send_pos, send = found
            txn = send.txn
            assert txn is not None
            status = self.ix.txn_status.get(txn)
            details = {"value": r.value, "offset": r.offset, "txn": txn}
            refs = [_ref(pos, op), _ref(send_pos, send)]
            if status == "aborted":
                self._add("aborted-read", tp, {**details, "status": status}, refs)
                continue
            commit_pos = self.ix.commit_invoked.get(txn)
            if commit_pos is not None and _happened_before(
                pos, op, commit_pos, self.ix.ops[commit_pos]
            ):
                refs.append(_ref(commit_pos, self.ix.ops[commit_pos]))
                self._add("precommitted-read", tp, details, refs)

    # -- 6. order -----------------------------------------------------------------------------

    def _visible_offsets(
        self, observations: dict[TopicPartition, list[_Observation]]
    ) -> dict[tuple[TopicPartition, str], list[int]]:
        """Per partition and isolation level, the sorted offsets a reader must not jump over."""
        read_committed_values: set[tuple[TopicPartition, str]] = set()
        for _, _, r, isolation in self.ix.reads():
            if isolation == "read_committed":
                read_committed_values.add((TopicPartition(r.topic, r.partition), r.value))
        visible: dict[tuple[TopicPartition, str], set[int]] = defaultdict(set)
        for tp, obs in observations.items():
            for o in obs:
                visible[(tp, "read_uncommitted")].add(o.offset)
                if self._committed_visible(tp, o.value, read_committed_values):
                    visible[(tp, "read_committed")].add(o.offset)
        return {k: sorted(v) for k, v in visible.items()}

    def _committed_visible(
        self, tp: TopicPartition, value: str, read_committed: set[tuple[TopicPartition, str]]
    ) -> bool:
        found = self.ix.send_of(tp, value)
        if found is None or found[1].txn is None:
            return True
        status = self.ix.txn_status.get(found[1].txn)
        return status == "committed" or (
            status == "indeterminate" and (tp, value) in read_committed
        )

    def _check_polls(self, visible: dict[tuple[TopicPartition, str], list[int]]) -> None:
        last_by_process: dict[tuple[str, TopicPartition], tuple[int, Poll, Record]] = {}
        for pos, poll in self.ix.polls:
            last_in_poll: dict[TopicPartition, Record] = {}
            for r in poll.records:
                tp = TopicPartition(r.topic, r.partition)
                order = visible.get((tp, poll.isolation), [])
                prev = last_in_poll.get(tp)
                if prev is not None:
                    self._check_step(
                        "int-", tp, order, prev, r, [_ref(pos, poll)], str(poll.process)
                    )
                elif poll.mode == "assign" and (poll.process, tp) in last_by_process:
                    ppos, ppoll, prec = last_by_process[(poll.process, tp)]
                    refs = [_ref(ppos, ppoll), _ref(pos, poll)]
                    self._check_step("", tp, order, prec, r, refs, poll.process)
                last_in_poll[tp] = r
            for tp, r in last_in_poll.items():
                last_by_process[(poll.process, tp)] = (pos, poll, r)

    def _check_step(
        self,
        prefix: str,
        tp: TopicPartition,
        order: list[int],
        prev: Record,
        cur: Record,
        refs: list[OpRef],
        process: str,
    ) -> None:
        details: dict[str, Any] = {
            "process": process,
            "from": [prev.offset, prev.value],
            "to": [cur.offset, cur.value],
        }
        if cur.offset <= prev.offset:
            self._add(prefix + "nonmonotonic-poll", tp, details, refs)
            return
        # `order` is sorted: the visible offsets strictly between the two, by bisection (a
        # scan per step made the check quadratic: minutes after a 7-minute soak).
        lo = bisect.bisect_right(order, prev.offset)
        skipped = order[lo : bisect.bisect_left(order, cur.offset, lo)]
        if skipped:
            self._add(prefix + "poll-skip", tp, {**details, "skipped_offsets": skipped}, refs)

    def _check_sends(self) -> None:
        by_producer: dict[tuple[str, TopicPartition], list[tuple[int, int, Send]]] = defaultdict(
            list
        )
        for pos, send in self.ix.completed_sends:
            if send.phase != "ok" or send.offset is None:
                continue
            invoked = self.ix.send_invoke.get((send.process, send.index), pos)
            tp = TopicPartition(send.topic, send.partition)
            by_producer[(send.process, tp)].append((invoked, pos, send))
        for (process, tp), sends in sorted(by_producer.items()):
            sends.sort(key=lambda t: t[0])
            for (_, ppos, prev), (_, pos, cur) in itertools.pairwise(sends):
                assert prev.offset is not None and cur.offset is not None
                if cur.offset <= prev.offset:
                    details = {
                        "process": process,
                        "from": [prev.offset, prev.value],
                        "to": [cur.offset, cur.value],
                    }
                    self._add("nonmonotonic-send", tp, details, [_ref(ppos, prev), _ref(pos, cur)])

    # -- 7. copiers ---------------------------------------------------------------------------

    def _check_copies(self) -> None:
        """Only copies whose transaction committed count; an input written by a transaction that
        did not (certainly) commit need not be copied, and one with an indeterminate copy may
        lack a committed one."""
        copies: dict[tuple[TopicPartition, int], list[OpRef]] = defaultdict(list)
        maybe: set[tuple[TopicPartition, int]] = set()
        inputs: set[TopicPartition] = set()
        for tp, (_, final) in self.ix.finals.items():
            for r in final.records:
                found = self.ix.send_of(tp, r.value)
                if found is None or found[1].source is None:
                    continue
                src = found[1].source
                src_tp = TopicPartition(src.topic, src.partition)
                inputs.add(src_tp)
                status = "committed" if found[1].txn is None else self._txn(found[1].txn)
                if status == "committed":
                    copies[(src_tp, src.offset)].append(_ref(found[0], found[1]))
                elif status == "indeterminate":
                    maybe.add((src_tp, src.offset))
        for src_tp in sorted(inputs):
            final_in = self.ix.finals.get(src_tp)
            if final_in is None:
                continue
            fref = _ref(final_in[0], final_in[1])
            for r in final_in[1].records:
                written = self.ix.send_of(src_tp, r.value)
                txn = None if written is None else written[1].txn
                if txn is not None and self._txn(txn) != "committed":
                    continue  # aborted or unknown input: a read_committed copier may skip it
                made = copies.get((src_tp, r.offset), [])
                details = {"input_offset": r.offset, "input_value": r.value, "copies": len(made)}
                if not made and (src_tp, r.offset) in maybe:
                    continue
                if not made:
                    self._add("missing-copy", src_tp, details, [fref])
                elif len(made) > 1:
                    self._add("duplicate-copy", src_tp, details, [fref, *made])

    def _txn(self, txn: int) -> str:
        return self.ix.txn_status.get(txn, "aborted")


def check(ops: Sequence[Op]) -> CheckResult:
    """Check one history; see the module docstring for what is checked."""
    return Checker(ops).run()


def invocation_times(ops: Sequence[Op]) -> dict[tuple[str, str, int], float]:
    """(op type, process, index) -> when it was invoked, for every invoked operation."""
    return {
        (type(op).__name__, op.process, op.index): op.time
        for op in ops
        if isinstance(op, Send | Txn | Poll) and op.phase == "invoke"
    }


def attribute(
    anomaly: Anomaly,
    ops: Sequence[Op],
    windows: Sequence[FaultWindow],
    invoked: dict[tuple[str, str, int], float],
) -> Anomaly:
    """The anomaly with the fault windows active while one of its proving operations ran
    (from its invocation to its completion); not those of the quiet time between them."""
    spans: list[tuple[float, float]] = []
    for ref in anomaly.ops:
        op = ops[ref.position]
        if isinstance(op, FinalRead) or not op.time:
            continue
        began = op.time
        if isinstance(op, Send | Txn | Poll):
            began = invoked.get((type(op).__name__, op.process, op.index), 0.0) or op.time
        spans.append((min(began, op.time), op.time))
    if not spans:
        return anomaly
    during = tuple(
        n
        for n, w in enumerate(windows, start=1)
        if any(w.start <= last and (w.end is None or w.end >= first) for first, last in spans)
    )
    began = min(first for first, _ in spans)
    later = next((n for n, w in enumerate(windows, start=1) if w.start > began), None)
    return replace(anomaly, faults=during, next_fault=None if during else later)


def _happened_before(pos: int, op: Op, other_pos: int, other: Op) -> bool:
    """Whether `op` (at line `pos`) completed before `other` was recorded, in real time.

    The lines of a history are in the order the recorder received them, and the ops of writer
    worker processes reach it through a pipe, a little late: a commit invoked before a poll
    completed can be written after it. So ops stamped with a wall-clock time (the same clock:
    every process runs on this machine) are compared by time; unstamped ones (time 0) by line.
    """
    op_time, other_time = getattr(op, "time", 0.0), getattr(other, "time", 0.0)
    if op_time and other_time:
        return bool(op_time < other_time)
    return pos < other_pos
