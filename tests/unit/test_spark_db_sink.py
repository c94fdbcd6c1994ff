"""The database sink's transaction (oncelog.spark.db_sink) without Spark: replays are skipped,
a failure before commit leaves nothing, the history shows every write."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from oncelog.spark.db_sink import ResultRow, connect, create_tables, last_batch, write_batch


def rows(*counts: int) -> list[ResultRow]:
    return [ResultRow(f"k{i}", 0, 0, c, float(c * 10), 10.0) for i, c in enumerate(counts)]


def test_batches_are_written_once_and_replays_skipped(tmp_path: Path) -> None:
    conn, dialect = connect(str(tmp_path / "db.sqlite"))
    create_tables(conn, dialect)
    assert write_batch(conn, dialect, "q", 0, rows(1, 2)) == 2
    assert write_batch(conn, dialect, "q", 1, rows(3)) == 1
    assert write_batch(conn, dialect, "q", 1, rows(3)) is None  # Spark's replay of batch 1
    assert write_batch(conn, dialect, "q", 0, rows(1, 2)) is None
    assert write_batch(conn, dialect, "other", 0, rows(5)) == 1  # progress is per query
    assert last_batch(conn, dialect, "q") == 1
    table = sqlite3.connect(tmp_path / "db.sqlite")
    assert table.execute("SELECT key, count FROM averages ORDER BY key").fetchall() == [
        ("k0", 5),
        ("k1", 2),
    ]
    history = table.execute("SELECT key, count, batch_id FROM averages_history").fetchall()
    assert sorted(history) == [("k0", 1, 0), ("k0", 3, 1), ("k0", 5, 0), ("k1", 2, 0)]


def test_failure_before_commit_leaves_nothing(tmp_path: Path) -> None:
    conn, dialect = connect(str(tmp_path / "db.sqlite"))
    create_tables(conn, dialect)

    def crash() -> None:
        raise RuntimeError("crash inside the transaction")

    with pytest.raises(RuntimeError):
        write_batch(conn, dialect, "q", 0, rows(1), before_commit=crash)
    assert last_batch(conn, dialect, "q") == -1
    assert write_batch(conn, dialect, "q", 0, rows(1)) == 1
    table = sqlite3.connect(tmp_path / "db.sqlite")
    assert table.execute("SELECT COUNT(*) FROM averages_history").fetchone() == (1,)
