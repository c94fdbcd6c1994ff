"""LeaderEpochCache: Kafka's assign rules, OffsetForLeaderEpoch answers, truncation and the
`leader-epoch-checkpoint` file (cases after Kafka's LeaderEpochFileCacheTest)."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from oncelog.storage.leader_epoch_cache import (
    CHECKPOINT_FILE,
    UNDEFINED_EPOCH,
    UNDEFINED_EPOCH_OFFSET,
    EpochEntry,
    LeaderEpochCache,
)

UNDEFINED = (UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET)


def cache_of(*entries: tuple[int, int], directory: Path | None = None) -> LeaderEpochCache:
    cache = LeaderEpochCache(directory)
    for epoch, start in entries:
        cache.assign(epoch, start)
    return cache


def pairs(cache: LeaderEpochCache) -> list[tuple[int, int]]:
    return [(e.epoch, e.start_offset) for e in cache.entries]


# -- assign ----------------------------------------------------------------------------------


def test_assign_adds_newer_epochs() -> None:
    cache = cache_of((2, 6), (3, 10), (5, 20))
    assert pairs(cache) == [(2, 6), (3, 10), (5, 20)]
    assert cache.latest_epoch == 5
    assert cache.latest_entry == EpochEntry(5, 20)
    assert cache.earliest_entry == EpochEntry(2, 6)


def test_the_latest_epoch_at_a_later_offset_changes_nothing() -> None:
    cache = cache_of((2, 6))
    assert not cache.assign(2, 10)
    assert pairs(cache) == [(2, 6)]


def test_the_latest_epoch_at_a_lower_offset_replaces_it() -> None:
    cache = cache_of((1, 0), (2, 6))
    assert cache.assign(2, 5)
    assert pairs(cache) == [(1, 0), (2, 5)]


def test_an_older_epoch_is_ignored() -> None:
    cache = cache_of((1, 0), (3, 6))
    assert not cache.assign(2, 10)
    assert not cache.assign(1, 2)
    assert pairs(cache) == [(1, 0), (3, 6)]


def test_a_newer_epoch_below_earlier_starts_removes_the_conflicting_tail(
    caplog: pytest.LogCaptureFixture,
) -> None:
    cache = cache_of((1, 0), (2, 6), (3, 8))
    with caplog.at_level(logging.WARNING):
        assert cache.assign(4, 7)
    assert pairs(cache) == [(1, 0), (2, 6), (4, 7)]
    assert "conflicting" in caplog.text
    assert cache.assign(5, 6)  # same start as epoch 2: it goes too
    assert pairs(cache) == [(1, 0), (5, 6)]


def test_assign_refuses_negative_values() -> None:
    with pytest.raises(ValueError):
        LeaderEpochCache().assign(-1, 0)
    with pytest.raises(ValueError):
        LeaderEpochCache().assign(0, -1)


def test_epoch_for_offset() -> None:
    cache = cache_of((1, 5), (3, 10), (4, 20))
    assert cache.epoch_for_offset(4) == UNDEFINED_EPOCH
    assert cache.epoch_for_offset(5) == 1
    assert cache.epoch_for_offset(9) == 1
    assert cache.epoch_for_offset(10) == 3
    assert cache.epoch_for_offset(19) == 3
    assert cache.epoch_for_offset(1000) == 4
    assert LeaderEpochCache().epoch_for_offset(0) == UNDEFINED_EPOCH


# -- end_offset_for (OffsetForLeaderEpoch) ---------------------------------------------------


def test_end_offset_of_the_latest_epoch_is_the_log_end() -> None:
    cache = cache_of((2, 6), (3, 10))
    assert cache.end_offset_for(3, 17) == (3, 17)


def test_end_offset_of_an_earlier_epoch_is_the_next_epochs_start() -> None:
    cache = cache_of((2, 6), (3, 10), (7, 30))
    assert cache.end_offset_for(2, 40) == (2, 10)
    assert cache.end_offset_for(3, 40) == (3, 30)


def test_end_offset_of_an_unknown_epoch_between_two_is_that_of_the_one_below() -> None:
    cache = cache_of((2, 6), (5, 10), (7, 30))
    assert cache.end_offset_for(4, 40) == (2, 10)
    assert cache.end_offset_for(6, 40) == (5, 30)


def test_end_offset_of_an_epoch_below_the_first_is_the_first_start() -> None:
    # Current Kafka: the older epochs' data is gone, the follower truncates to where the
    # leader's epochs begin.
    cache = cache_of((5, 200), (6, 300))
    assert cache.end_offset_for(4, 400) == (4, 200)
    assert cache.end_offset_for(0, 400) == (0, 200)


def test_end_offset_undefined_cases() -> None:
    assert LeaderEpochCache().end_offset_for(0, 0) == UNDEFINED
    assert LeaderEpochCache().end_offset_for(3, 10) == UNDEFINED
    cache = cache_of((2, 6), (3, 10))
    assert cache.end_offset_for(UNDEFINED_EPOCH, 17) == UNDEFINED
    assert cache.end_offset_for(4, 17) == UNDEFINED  # above the latest


# -- truncation ------------------------------------------------------------------------------


def test_truncate_from_end_drops_entries_at_or_after_it() -> None:
    cache = cache_of((2, 6), (3, 8), (4, 11))
    assert cache.truncate_from_end(9)
    assert pairs(cache) == [(2, 6), (3, 8)]
    assert cache.truncate_from_end(8)
    assert pairs(cache) == [(2, 6)]
    assert not cache.truncate_from_end(7)  # the entry covers 6.., nothing starts at 7+
    assert pairs(cache) == [(2, 6)]
    assert cache.truncate_from_end(0)
    assert pairs(cache) == []
    assert not cache.truncate_from_end(0)


def test_truncate_from_end_beyond_everything_changes_nothing() -> None:
    cache = cache_of((2, 6), (3, 8))
    assert not cache.truncate_from_end(100)
    assert not cache.truncate_from_end(-1)
    assert pairs(cache) == [(2, 6), (3, 8)]


def test_truncate_from_start_moves_the_covering_entry_up() -> None:
    cache = cache_of((2, 6), (3, 8), (4, 11))
    assert cache.truncate_from_start(9)
    assert pairs(cache) == [(3, 9), (4, 11)]


def test_truncate_from_start_at_an_entry_keeps_it() -> None:
    cache = cache_of((2, 6), (3, 8), (4, 11))
    assert cache.truncate_from_start(8)
    assert pairs(cache) == [(3, 8), (4, 11)]
    assert not cache.truncate_from_start(8)
    assert not cache.truncate_from_start(5)  # below the first entry
    assert pairs(cache) == [(3, 8), (4, 11)]


def test_truncate_from_start_beyond_the_last_keeps_only_the_latest_epoch() -> None:
    cache = cache_of((2, 6), (3, 8), (4, 11))
    assert cache.truncate_from_start(15)
    assert pairs(cache) == [(4, 15)]


def test_clear() -> None:
    cache = cache_of((2, 6))
    cache.clear()
    assert pairs(cache) == [] and cache.latest_epoch == UNDEFINED_EPOCH


# -- the checkpoint file ---------------------------------------------------------------------


def test_every_change_is_written_in_kafkas_format(tmp_path: Path) -> None:
    cache = cache_of((0, 0), (2, 6), directory=tmp_path)
    path = tmp_path / CHECKPOINT_FILE
    assert path.read_text() == "0\n2\n0 0\n2 6\n"
    cache.assign(3, 9)
    assert path.read_text() == "0\n3\n0 0\n2 6\n3 9\n"
    cache.truncate_from_end(9)
    assert path.read_text() == "0\n2\n0 0\n2 6\n"
    cache.truncate_from_start(7)
    assert path.read_text() == "0\n1\n2 7\n"
    cache.clear()
    assert path.read_text() == "0\n0\n"
    assert not list(tmp_path.glob("*.tmp"))


def test_round_trip(tmp_path: Path) -> None:
    cache_of((0, 0), (2, 6), (5, 100), directory=tmp_path)
    loaded = LeaderEpochCache.load(tmp_path)
    assert not loaded.needs_rebuild
    assert pairs(loaded) == [(0, 0), (2, 6), (5, 100)]


def test_a_missing_file_asks_for_a_rebuild(tmp_path: Path) -> None:
    loaded = LeaderEpochCache.load(tmp_path)
    assert loaded.needs_rebuild and pairs(loaded) == []


@pytest.mark.parametrize(
    "text",
    [
        "",
        "0\n",
        "1\n1\n0 0\n",  # unknown version
        "0\n2\n0 0\n",  # fewer entries than counted
        "0\n1\n0 0\n1 5\n",  # more
        "0\n1\nzero 0\n",
        "0\n1\n0\n",
        "0\n1\n-1 0\n",
        "0\n2\n3 0\n2 5\n",  # epochs going back
        "0\n2\n1 5\n2 3\n",  # offsets going back
        "\x00\xff\x13garbage",
    ],
)
def test_a_malformed_file_asks_for_a_rebuild(
    tmp_path: Path, text: str, caplog: pytest.LogCaptureFixture
) -> None:
    (tmp_path / CHECKPOINT_FILE).write_bytes(text.encode("latin-1"))
    with caplog.at_level(logging.WARNING):
        loaded = LeaderEpochCache.load(tmp_path)
    assert loaded.needs_rebuild and pairs(loaded) == []
    assert CHECKPOINT_FILE in caplog.text


def test_a_failed_write_leaves_the_entries_as_they_were(tmp_path: Path) -> None:
    directory = tmp_path / "p"
    directory.mkdir()
    cache = cache_of((0, 0), directory=directory)
    directory.rename(tmp_path / "gone")
    with pytest.raises(OSError):
        cache.assign(1, 5)
    assert pairs(cache) == [(0, 0)]


# -- background writes after truncations (Kafka's truncateFrom*AsyncFlush) ----------------------


class BackgroundHeld:
    """Keeps the background writer busy until released: what it writes, and when, is then
    up to the test."""

    def __enter__(self) -> BackgroundHeld:
        import threading

        from oncelog.storage import leader_epoch_cache

        self.release = threading.Event()
        self.done = leader_epoch_cache._background().submit(self.release.wait, 10)
        return self

    def __exit__(self, *exc: object) -> None:
        self.release.set()
        self.done.result()


def file_text(directory: Path) -> str:
    return (directory / CHECKPOINT_FILE).read_text()


def test_a_truncation_is_written_in_the_background(tmp_path: Path) -> None:
    cache = cache_of((0, 0), (1, 10), (2, 20), directory=tmp_path)
    with BackgroundHeld():
        assert cache.truncate_from_end(15, flush=False)
        cache.flush_soon()
        assert cache.truncate_from_start(5, flush=False)
        cache.flush_soon()  # the write already queued covers it
        assert file_text(tmp_path) == "0\n3\n0 0\n1 10\n2 20\n"  # not yet
    cache.wait_for_writes()
    assert file_text(tmp_path) == "0\n2\n0 5\n1 10\n"


def test_a_background_write_never_takes_the_file_back(tmp_path: Path) -> None:
    """A new entry is written at once; the truncation's queued write, made later, writes
    the entries of its own moment, which include the new entry."""
    cache = cache_of((0, 0), (1, 10), (2, 20), directory=tmp_path)
    with BackgroundHeld():
        cache.truncate_from_end(15, flush=False)
        cache.flush_soon()
        cache.assign(3, 15)  # synchronous: before the data of epoch 3
        assert file_text(tmp_path) == "0\n3\n0 0\n1 10\n3 15\n"
    cache.wait_for_writes()
    assert file_text(tmp_path) == "0\n3\n0 0\n1 10\n3 15\n"


def test_a_closed_cache_drops_its_queued_write(tmp_path: Path) -> None:
    """A deleted or reloaded partition's old cache must not write over the file later."""
    cache = cache_of((0, 0), (1, 10), directory=tmp_path)
    with BackgroundHeld():
        cache.truncate_from_end(10, flush=False)
        cache.flush_soon()
        cache.close()
        (tmp_path / CHECKPOINT_FILE).write_text("0\n1\n7 0\n")  # the next owner's
    cache.wait_for_writes()
    assert file_text(tmp_path) == "0\n1\n7 0\n"
    cache.flush_soon()  # closed: nothing is queued any more
    cache.wait_for_writes()
    assert file_text(tmp_path) == "0\n1\n7 0\n"


def test_a_clean_close_writes_the_queued_truncation_now(tmp_path: Path) -> None:
    cache = cache_of((0, 0), (1, 10), directory=tmp_path)
    with BackgroundHeld():
        cache.truncate_from_end(10, flush=False)
        cache.flush_soon()
        cache.close(flush=True)
        assert file_text(tmp_path) == "0\n1\n0 0\n"


def test_a_deleted_directory_is_not_written(tmp_path: Path) -> None:
    directory = tmp_path / "t-0"
    directory.mkdir()
    cache = cache_of((0, 0), (1, 10), directory=directory)
    with BackgroundHeld():
        cache.truncate_from_end(10, flush=False)
        cache.flush_soon()
        (directory / CHECKPOINT_FILE).unlink()
        directory.rmdir()
    cache.wait_for_writes()
    assert not directory.exists()
