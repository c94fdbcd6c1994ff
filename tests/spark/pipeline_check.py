"""The independent exactly-once check of the averages pipeline (no Spark involved).

Expected: count, sum and average per key (and per tumbling window) computed here from the input
topic's committed records, read with confluent-kafka at read_committed — aborted events and
control records never show up there, so they never count.

Kafka output, read with read_committed: per key (and window) the last value must equal the
expected one, and the sequence of counts must be strictly increasing. Update mode emits a key
once per batch that changed it, with a larger count each time, so a repeated count can only be
a batch written twice (a duplicate), and a missing or wrong last value is a loss.

Database output (SQLite or PostgreSQL): the `averages` table equals the expected result, and
the append-only `averages_history` holds no (key, window, count) twice.
"""

from __future__ import annotations

import itertools
import json
import sqlite3
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import Consumer, TopicPartition

GroupKey = tuple[str, int]  # (key, window start ms; 0 without windows)


@dataclass(frozen=True, slots=True)
class Record:
    partition: int
    offset: int
    key: str
    value: str
    timestamp_ms: int


def read_committed(bootstrap: str, topic: str, timeout: float = 60.0) -> list[Record]:
    """Every committed record of `topic`, until each partition's position reaches its end.

    The end is the LSO (librdkafka asks for it at read_committed); the position can pass
    records we never get (aborted data, markers), so we compare positions, never counts.
    """
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "pipeline-check",
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
            "enable.partition.eof": False,
        }
    )
    try:
        meta = consumer.list_topics(topic, timeout=10).topics[topic]
        parts = sorted(meta.partitions)
        ends = {
            p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1]
            for p in parts
        }
        consumer.assign([TopicPartition(topic, p, 0) for p in parts])
        out: list[Record] = []
        deadline = time.monotonic() + timeout
        idle_since = time.monotonic()
        while True:
            messages = [m for m in consumer.consume(1000, 0.2) if m.error() is None]
            for msg in messages:
                key = msg.key()
                out.append(
                    Record(
                        msg.partition(),
                        msg.offset(),
                        key.decode() if key is not None else "",
                        msg.value().decode(),
                        msg.timestamp()[1],
                    )
                )
            if messages:
                idle_since = time.monotonic()
            positions = consumer.position([TopicPartition(topic, p) for p in parts])
            if all(tp.offset >= ends[tp.partition] or ends[tp.partition] == 0 for tp in positions):
                break
            # A partition ending in control records may leave the position short of the end.
            if time.monotonic() - idle_since > 3:
                break
            if time.monotonic() > deadline:
                raise AssertionError(f"read of {topic} did not reach {ends}: at {positions}")
        return out
    finally:
        consumer.close()


def window_start(ts_ms: int, window_ms: int | None) -> int:
    return 0 if window_ms is None else ts_ms - ts_ms % window_ms


def expected(
    events: list[Record], window_ms: int | None = None
) -> dict[GroupKey, tuple[int, float]]:
    """(count, sum) per (key, window) of the committed input; unparsable values are skipped."""
    acc: dict[GroupKey, tuple[int, float]] = {}
    for rec in events:
        try:
            value = float(rec.value)
        except ValueError:
            continue
        g = (rec.key, window_start(rec.timestamp_ms, window_ms))
        count, total = acc.get(g, (0, 0.0))
        acc[g] = (count + 1, total + value)
    return acc


@dataclass
class Analysis:
    """What the output shows against the expected result."""

    expected: dict[GroupKey, tuple[int, float]]
    outputs: int = 0
    duplicates: list[tuple[GroupKey, list[int]]] = field(default_factory=list)
    wrong: list[tuple[GroupKey, object, object]] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.duplicates and not self.wrong

    def describe(self) -> str:
        return (
            f"{len(self.expected)} groups, {self.outputs} output records; "
            f"duplicates (first 5): {self.duplicates[:5]}; wrong (first 5): {self.wrong[:5]}"
        )


def _close(a: float, b: float) -> bool:
    return abs(a - b) <= 1e-9 * max(1.0, abs(a), abs(b))


def _compare(analysis: Analysis, last: dict[GroupKey, tuple[int, float, float]]) -> None:
    for g in sorted(set(analysis.expected) | set(last)):
        want = analysis.expected.get(g)
        got = last.get(g)
        if want is None or got is None:
            analysis.wrong.append((g, want, got))
            continue
        count, total = want
        if not (got[0] == count and _close(got[1], total) and _close(got[2], total / count)):
            analysis.wrong.append((g, (count, total, total / count), got))


def analyse_kafka(
    bootstrap: str, input_topic: str, output_topic: str, window_ms: int | None = None
) -> Analysis:
    analysis = Analysis(expected(read_committed(bootstrap, input_topic), window_ms))
    counts: dict[GroupKey, list[int]] = defaultdict(list)
    last: dict[GroupKey, tuple[int, float, float]] = {}
    outputs = read_committed(bootstrap, output_topic)
    # Per key the output lives in one partition, so offset order is write order.
    for rec in sorted(outputs, key=lambda r: (r.partition, r.offset)):
        result = json.loads(rec.value)
        assert result["key"] == rec.key, rec
        g = (rec.key, int(result.get("window_start_ms", 0)))
        counts[g].append(int(result["count"]))
        last[g] = (int(result["count"]), float(result["sum"]), float(result["avg"]))
    analysis.outputs = len(outputs)
    for g, seq in counts.items():
        if any(b <= a for a, b in itertools.pairwise(seq)):
            analysis.duplicates.append((g, seq))
    _compare(analysis, last)
    return analysis


RESULTS_SQL = "SELECT key, window_start_ms, count, sum, avg FROM averages"
HISTORY_SQL = "SELECT key, window_start_ms, count FROM averages_history"


def analyse_sqlite(
    db: str, bootstrap: str, input_topic: str, window_ms: int | None = None
) -> Analysis:
    analysis = Analysis(expected(read_committed(bootstrap, input_topic), window_ms))
    with sqlite3.connect(db) as conn:
        rows = conn.execute(RESULTS_SQL).fetchall()
        history = conn.execute(HISTORY_SQL).fetchall()
    _compare_tables(analysis, rows, history)
    return analysis


def analyse_postgres(
    url: str, bootstrap: str, input_topic: str, window_ms: int | None = None
) -> Analysis:
    """The same check as `analyse_sqlite`, of the tables the sink wrote into PostgreSQL."""
    import psycopg  # type: ignore[import-not-found, unused-ignore]

    analysis = Analysis(expected(read_committed(bootstrap, input_topic), window_ms))
    with psycopg.connect(url) as conn:
        rows = conn.execute(RESULTS_SQL).fetchall()
        history = conn.execute(HISTORY_SQL).fetchall()
    _compare_tables(analysis, rows, history)
    return analysis


def _compare_tables(
    analysis: Analysis, rows: list[tuple[Any, ...]], history: list[tuple[Any, ...]]
) -> None:
    """`averages` must equal the expected result; `averages_history` must repeat no count."""
    last = {(k, int(w)): (int(c), float(s), float(a)) for k, w, c, s, a in rows}
    analysis.outputs = len(history)
    seen = Counter((k, int(w), int(c)) for k, w, c in history)
    per_group: dict[GroupKey, list[int]] = defaultdict(list)
    for (k, w, c), n in seen.items():
        if n > 1:
            per_group[(k, w)].append(c)
    analysis.duplicates = sorted(per_group.items())
    _compare(analysis, last)


def wait_converged(analyse: object, timeout: float, *args: object) -> Analysis:
    """Re-run `analyse(*args)` until it is ok (the pipeline may still be catching up)."""
    assert callable(analyse)
    deadline = time.monotonic() + timeout
    while True:
        result: Analysis = analyse(*args)
        if result.ok or time.monotonic() > deadline:
            return result
        time.sleep(2)


def assert_exactly_once(analysis: Analysis) -> None:
    assert analysis.expected, "no input"
    assert analysis.ok, analysis.describe()
