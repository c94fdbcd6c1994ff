"""Exactly-once sink of the averages pipeline into a database, through `foreachBatch`.

Spark replays a micro-batch after a crash (the batch whose `commits/N` file is missing), with the
same batch id and, for a deterministic query, the same rows. The sink makes that replay harmless
as any exactly-once Kafka→DB writer does: the batch's rows and the batch id are written in ONE
database transaction, and a batch id at or below the one stored for the query is skipped. So
the database holds each batch's effect exactly once whatever Spark re-runs.

Tables (created if missing):

- `averages(key, window_start_ms, window_end_ms, count, sum, avg, batch_id)`, primary key
  (key, window_start_ms): the current result per key (and window; 0/0 without windows);
- `averages_history(key, window_start_ms, count, batch_id)`: append-only, one row per upsert, so
  a duplicate (the same count written twice for a key) stays visible to a checker;
- `sink_progress(query_id, batch_id)`: the last batch written, per streaming query id.

SQLite (stdlib) by default; PostgreSQL through psycopg when a `postgresql://` URL is given. Both
take the same SQL (`INSERT … ON CONFLICT … DO UPDATE`), only the placeholders differ.
"""

from __future__ import annotations

import os
import sqlite3
import threading
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from oncelog import fault_points

#: Where a testing hook SIGKILLs the driver: inside the transaction, or after the database
#: commit but before Spark records the batch as committed.
KILL_POINTS = ("before-commit", "after-commit")

SCHEMA = (
    """CREATE TABLE IF NOT EXISTS averages (
        key TEXT NOT NULL,
        window_start_ms BIGINT NOT NULL,
        window_end_ms BIGINT NOT NULL,
        count BIGINT NOT NULL,
        sum DOUBLE PRECISION NOT NULL,
        avg DOUBLE PRECISION NOT NULL,
        batch_id BIGINT NOT NULL,
        PRIMARY KEY (key, window_start_ms))""",
    """CREATE TABLE IF NOT EXISTS averages_history (
        key TEXT NOT NULL,
        window_start_ms BIGINT NOT NULL,
        count BIGINT NOT NULL,
        batch_id BIGINT NOT NULL)""",
    """CREATE TABLE IF NOT EXISTS sink_progress (
        query_id TEXT PRIMARY KEY,
        batch_id BIGINT NOT NULL)""",
)

UPSERT = """INSERT INTO averages
    (key, window_start_ms, window_end_ms, count, sum, avg, batch_id)
    VALUES (?, ?, ?, ?, ?, ?, ?)
    ON CONFLICT (key, window_start_ms) DO UPDATE SET
        window_end_ms = excluded.window_end_ms, count = excluded.count,
        sum = excluded.sum, avg = excluded.avg, batch_id = excluded.batch_id"""
HISTORY = "INSERT INTO averages_history (key, window_start_ms, count, batch_id) VALUES (?, ?, ?, ?)"
PROGRESS_GET = "SELECT batch_id FROM sink_progress WHERE query_id = ?"
PROGRESS_SET = """INSERT INTO sink_progress (query_id, batch_id) VALUES (?, ?)
    ON CONFLICT (query_id) DO UPDATE SET batch_id = excluded.batch_id"""


@dataclass(frozen=True, slots=True)
class ResultRow:
    """One aggregate as the database stores it."""

    key: str
    window_start_ms: int
    window_end_ms: int
    count: int
    sum: float
    avg: float


class Database(Protocol):
    """The little a sink needs from a DB-API connection, whatever the driver."""

    def cursor(self) -> Any: ...
    def commit(self) -> None: ...
    def rollback(self) -> None: ...
    def close(self) -> None: ...


@dataclass(frozen=True, slots=True)
class Dialect:
    """How one database spells the parts that differ."""

    name: str
    placeholder: str
    begin: str | None  # statement that opens a write transaction (None: the driver does)
    lock_progress: str  # appended to PROGRESS_GET to lock the row against a concurrent writer

    def sql(self, statement: str) -> str:
        return statement.replace("?", self.placeholder)


SQLITE = Dialect("sqlite", "?", "BEGIN IMMEDIATE", "")
POSTGRES = Dialect("postgresql", "%s", None, " FOR UPDATE")


def connect(target: str) -> tuple[Database, Dialect]:
    """Open `target`: a `postgresql://` URL (psycopg needed) or a SQLite file path."""
    if target.startswith(("postgresql://", "postgres://")):
        import psycopg  # type: ignore[import-not-found, unused-ignore]

        conn: Any = psycopg.connect(target)
        return conn, POSTGRES
    # isolation_level=None: we issue BEGIN ourselves, so the transaction spans exactly what we
    # mean (the stdlib would otherwise open it lazily at the first INSERT, after our SELECT).
    lite = sqlite3.connect(target, isolation_level=None, timeout=30)
    lite.execute("PRAGMA journal_mode=WAL")
    lite.execute("PRAGMA synchronous=FULL")
    return lite, SQLITE


def create_tables(conn: Database, dialect: Dialect) -> None:
    cur = conn.cursor()
    if dialect.begin:
        cur.execute(dialect.begin)
    for statement in SCHEMA:
        cur.execute(statement)
    conn.commit()


def last_batch(conn: Database, dialect: Dialect, query_id: str) -> int:
    """The last batch id written for `query_id`, -1 if none."""
    cur = conn.cursor()
    cur.execute(dialect.sql(PROGRESS_GET), (query_id,))
    row = cur.fetchone()
    result = -1 if row is None else int(row[0])
    conn.rollback()
    return result


def write_batch(
    conn: Database,
    dialect: Dialect,
    query_id: str,
    batch_id: int,
    rows: Iterable[ResultRow],
    before_commit: Callable[[], None] | None = None,
) -> int | None:
    """Write one batch in one transaction; None when the batch was already written (a replay).

    Returns the number of rows written otherwise.
    """
    cur = conn.cursor()
    try:
        if dialect.begin:
            cur.execute(dialect.begin)
        cur.execute(dialect.sql(PROGRESS_GET) + dialect.lock_progress, (query_id,))
        stored = cur.fetchone()
        if stored is not None and batch_id <= int(stored[0]):
            conn.rollback()
            return None
        written = 0
        for row in rows:
            cur.execute(
                dialect.sql(UPSERT),
                (
                    row.key,
                    row.window_start_ms,
                    row.window_end_ms,
                    row.count,
                    row.sum,
                    row.avg,
                    batch_id,
                ),
            )
            cur.execute(dialect.sql(HISTORY), (row.key, row.window_start_ms, row.count, batch_id))
            written += 1
        cur.execute(dialect.sql(PROGRESS_SET), (query_id, batch_id))
        if before_commit is not None:
            before_commit()
        conn.commit()
    except BaseException:
        conn.rollback()
        raise
    return written


def parse_kill_hook(spec: str | None) -> tuple[int, str] | None:
    """`"BATCH:before-commit"` or `"BATCH:after-commit"` → (batch, point)."""
    if not spec:
        return None
    batch, _, point = spec.partition(":")
    if point not in KILL_POINTS:
        raise ValueError(f"kill point must be one of {KILL_POINTS}, got {spec!r}")
    return int(batch), point


def _kill_self() -> None:
    fault_points.kill(os.getpid(), "spark.db-sink")


class DatabaseSink:
    """The `foreachBatch` function: call `bind(query.id)` right after `start()`.

    The query id is only known once the query started, while Spark may already be running
    batch 0 in its own thread; the function waits for `bind`. The id is stable across restarts
    of one checkpoint, so progress survives them.
    """

    def __init__(
        self,
        target: str,
        *,
        on_batch: Callable[[int, int | None], None] | None = None,
        kill_hook: str | None = None,
    ) -> None:
        self.target = target
        self.on_batch = on_batch
        self.kill = parse_kill_hook(kill_hook)
        self._query_id: str | None = None
        self._bound = threading.Event()
        self._conn: Database | None = None
        self._dialect = SQLITE
        conn, self._dialect = connect(target)
        create_tables(conn, self._dialect)
        conn.close()

    def bind(self, query_id: str) -> None:
        self._query_id = query_id
        self._bound.set()

    def _connection(self) -> Database:
        if self._conn is None:
            self._conn, self._dialect = connect(self.target)
        return self._conn

    def __call__(self, df: Any, batch_id: int) -> None:
        if not self._bound.wait(120):
            raise RuntimeError("DatabaseSink.bind(query id) was never called")
        assert self._query_id is not None
        # Always run the batch, even a replay we will skip: the stateful operator's state store
        # versions are committed by this job, and Spark 4 fails the query when a foreachBatch
        # leaves them uncommitted (STATE_STORE_COMMIT_VALIDATION_FAILED).
        rows = rows_of(df.collect())
        conn = self._connection()
        hook = _kill_self if self.kill == (batch_id, "before-commit") else None
        written = write_batch(conn, self._dialect, self._query_id, batch_id, rows, hook)
        if self.kill is not None and self.kill == (batch_id, "after-commit"):
            _kill_self()
        self._report(batch_id, written)

    def _report(self, batch_id: int, written: int | None) -> None:
        if self.on_batch is not None:
            self.on_batch(batch_id, written)

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None


def rows_of(spark_rows: Sequence[Any]) -> list[ResultRow]:
    """Spark rows of the aggregate (key, count, sum, avg[, window_start_ms, window_end_ms])."""
    out = []
    for r in spark_rows:
        d = r.asDict()
        out.append(
            ResultRow(
                key=str(d["key"]),
                window_start_ms=int(d.get("window_start_ms") or 0),
                window_end_ms=int(d.get("window_end_ms") or 0),
                count=int(d["count"]),
                sum=float(d["sum"]),
                avg=float(d["avg"]),
            )
        )
    return out
