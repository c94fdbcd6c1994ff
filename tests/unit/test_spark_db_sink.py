"""The database sink's transaction (oncelog.spark.db_sink) without Spark: replays are skipped,
a failure before commit leaves nothing, the history shows every write.

SQLite always; PostgreSQL too: a server of its own started for the session from the machine's
PostgreSQL binaries (tests/postgres_server.py), or the database ONCELOG_TEST_POSTGRES_URL names
(its three sink tables are dropped first).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from oncelog.spark.db_sink import (
    Database,
    Dialect,
    ResultRow,
    connect,
    create_tables,
    last_batch,
    write_batch,
)
from tests.postgres_server import PostgresServer, find_bin_dir


@pytest.fixture(scope="module")
def postgres_url() -> Iterator[str]:
    url = os.environ.get("ONCELOG_TEST_POSTGRES_URL")
    if url:
        yield url
        return
    bin_dir = find_bin_dir()
    if bin_dir is None:
        # A failure, never a skip: a skipped database test would hide a missing dependency.
        pytest.fail(
            "PostgreSQL is not installed (no initdb) and ONCELOG_TEST_POSTGRES_URL is unset:"
            " `apt-get install postgresql` (scripts/test does it)"
        )
    server = PostgresServer(bin_dir).start()
    try:
        yield server.url
    finally:
        server.stop()


@pytest.fixture(params=["sqlite", "postgresql"])
def db(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[Database, Dialect]:
    if request.param == "sqlite":
        conn, dialect = connect(str(tmp_path / "db.sqlite"))
    else:
        conn, dialect = connect(request.getfixturevalue("postgres_url"))
        cur = conn.cursor()
        for table in ("averages", "averages_history", "sink_progress"):
            cur.execute(f"DROP TABLE IF EXISTS {table}")
        conn.commit()
    create_tables(conn, dialect)
    request.addfinalizer(conn.close)
    return conn, dialect


def rows(*counts: int) -> list[ResultRow]:
    return [ResultRow(f"k{i}", 0, 0, c, float(c * 10), 10.0) for i, c in enumerate(counts)]


def select(conn: Database, sql: str) -> list[Any]:
    cur = conn.cursor()
    cur.execute(sql)
    out = [tuple(r) for r in cur.fetchall()]
    conn.rollback()
    return out


def test_batches_are_written_once_and_replays_skipped(db: tuple[Database, Dialect]) -> None:
    conn, dialect = db
    assert write_batch(conn, dialect, "q", 0, rows(1, 2)) == 2
    assert write_batch(conn, dialect, "q", 1, rows(3)) == 1
    assert write_batch(conn, dialect, "q", 1, rows(3)) is None  # Spark's replay of batch 1
    assert write_batch(conn, dialect, "q", 0, rows(1, 2)) is None
    assert write_batch(conn, dialect, "other", 0, rows(5)) == 1  # progress is per query
    assert last_batch(conn, dialect, "q") == 1
    assert select(conn, "SELECT key, count FROM averages ORDER BY key") == [("k0", 5), ("k1", 2)]
    history = select(conn, "SELECT key, count, batch_id FROM averages_history")
    assert sorted(history) == [("k0", 1, 0), ("k0", 3, 1), ("k0", 5, 0), ("k1", 2, 0)]


def test_failure_before_commit_leaves_nothing(db: tuple[Database, Dialect]) -> None:
    conn, dialect = db

    def crash() -> None:
        raise RuntimeError("crash inside the transaction")

    with pytest.raises(RuntimeError):
        write_batch(conn, dialect, "q", 0, rows(1), before_commit=crash)
    assert last_batch(conn, dialect, "q") == -1
    assert select(conn, "SELECT COUNT(*) FROM averages") == [(0,)]
    assert write_batch(conn, dialect, "q", 0, rows(1)) == 1
    assert select(conn, "SELECT COUNT(*) FROM averages_history") == [(1,)]
