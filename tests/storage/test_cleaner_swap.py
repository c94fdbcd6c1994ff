"""The cleaner's swap split between the log's owner (the event loop) and a worker thread:
the fsyncs, renames and producer snapshot run in the worker, and a partition changed while
the worker runs (retention, DeleteRecords, truncation, close, deletion) ends consistent, in
memory and on disk."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import pytest

from oncelog.clock import ManualClock
from oncelog.config import LogConfig
from oncelog.errors import OffsetOutOfRange
from oncelog.producer_state import snapshot
from oncelog.storage.cleaner import CleanerSettings, CleanSwap, LogCleaner, clean_segments
from oncelog.storage.local_log import LogHooks
from oncelog.storage.partition_log import PartitionLog
from tests.storage.cleaner_util import (
    Producer,
    consume,
    record_fsyncs_and_renames,
    send_plain,
    table,
)
from tests.storage.test_cleaner import COMPACT
from tests.storage.util import T0, open_log

Rows = list[tuple[int, bytes, bytes | None]]


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(T0)


def k(i: int) -> bytes:
    return f"k{i}".encode()


def fill(plog: PartitionLog) -> Rows:
    """Keys overwritten many times, an aborted and a committed transaction; what a
    read_committed consumer reads."""
    txn = Producer(plog, producer_id=7, transactional=True)
    for n in range(40):
        send_plain(plog, [(k(n % 5), f"v{n}".encode())])
        if n % 10 == 4:
            txn.send([(k(n % 5), b"in-txn")])
            txn.end(commit=n % 20 == 4)
    assert len(plog.segments) > 3
    return consume(plog, read_committed=True)


class Pause:
    """A crash hook that holds the swap's worker at `step` until released."""

    def __init__(self, step: str) -> None:
        self.step = step
        self.reached = threading.Event()
        self.go = threading.Event()

    def __call__(self, at: str) -> None:
        if at == self.step:
            self.reached.set()
            assert self.go.wait(10), "never released"

    def release_after(self, seconds: float) -> None:
        threading.Timer(seconds, self.go.set).start()


def begin(
    plog: PartitionLog, clock: ManualClock, hook: Callable[[str], None] | None = None
) -> tuple[LogCleaner, CleanSwap]:
    c = LogCleaner(CleanerSettings(), clock)
    picked = c.grab_filthiest([plog])
    assert picked is not None
    _, job = picked
    cleaned = c.begin_swap(plog, job, clean_segments(job), hook)
    assert cleaned is not None
    return c, cleaned


def in_thread(fn: Callable[[], None]) -> threading.Thread:
    t = threading.Thread(target=fn, name="swap-worker")
    t.start()
    return t


def crash_reload(plog: PartitionLog, config: LogConfig, clock: ManualClock) -> PartitionLog:
    """The process dies (nothing flushed or closed cleanly) and the log is loaded again."""
    # A dead process's checkpoint writer is dead too: the one of this process must not go on
    # renaming its file while the load lists the directory.
    plog.leader_epoch_cache.wait_for_writes()
    for segment in plog.segments:
        segment.close()
    return open_log(
        plog.directory.parent,
        config,
        clock,
        clean=False,
        recovery_point=0,
        log_start_offset=plog.log_start_offset,
    )


def leftovers(directory: Path) -> list[str]:
    """A swap's files and pending snapshots left behind."""
    return [
        n
        for n in os.listdir(directory)
        if n.endswith((".cleaned", ".swap")) or (".snapshot" in n and n.endswith(".tmp"))
    ]


def same_values(rows: Rows, before: Rows) -> None:
    """Every record read is the one written at its offset (offsets never change)."""
    original = {off: (key, val) for off, key, val in before}
    for off, key, val in rows:
        assert original[off] == (key, val)


def append_after_truncation_then_reload(
    plog: PartitionLog, before: Rows, clock: ManualClock
) -> Rows:
    """Append a record to a truncated log: it follows what is left (each record the one
    written at its offset), and a crash and load give the same records, with no swap files
    left; what a read_committed consumer reads."""
    send_plain(plog, [(b"after", b"truncation")])
    rows = consume(plog, read_committed=True)
    assert rows[-1][1:] == (b"after", b"truncation")
    same_values(rows[:-1], before)
    reloaded = crash_reload(plog, COMPACT, clock)
    assert consume(reloaded, read_committed=True) == rows
    assert not leftovers(reloaded.directory)
    return rows


@pytest.fixture
def calls(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, int]]:
    return record_fsyncs_and_renames(monkeypatch)


def test_fsyncs_renames_and_snapshot_run_in_the_worker(
    tmp_path: Path, clock: ManualClock, calls: list[tuple[str, int]]
) -> None:
    plog = open_log(tmp_path, COMPACT, clock)
    before = fill(plog)
    assert not snapshot.list_snapshots(plog.directory)  # the rolls' snapshots are not written
    c, cleaned = begin(plog, clock)
    calls.clear()
    worker = in_thread(cleaned.run)
    worker.join()
    worker_ident = worker.ident
    assert calls and {ident for _, ident in calls} == {worker_ident}
    groups = len(cleaned.result.groups)
    assert sum(1 for name, _ in calls if name == "fsync") >= 3 * groups + 1  # + the snapshot's
    calls.clear()
    assert c.end_swap(cleaned)
    assert calls == []  # applying the swap on the owner's thread costs no fsync or rename
    assert [o for o in snapshot.list_snapshots(plog.directory) if o >= cleaned.result.end_offset]
    assert table(consume(plog, read_committed=True)) == table(before)
    rows = consume(plog, read_committed=True)
    same_values(rows, before)
    reloaded = crash_reload(plog, COMPACT, clock)
    assert consume(reloaded, read_committed=True) == rows


def test_retention_and_delete_records_leave_the_pinned_segments(
    tmp_path: Path, clock: ManualClock
) -> None:
    config = replace(COMPACT, cleanup_policy=("compact", "delete"), retention_bytes=1)
    plog = open_log(tmp_path, config, clock)
    before = fill(plog)
    pause = Pause("indexes-swap")
    c, cleaned = begin(plog, clock, pause)
    worker = in_thread(cleaned.run)
    assert pause.reached.wait(10)
    segments = list(plog.segments)
    start = plog.segments[2].base_offset
    assert plog.apply_retention() == 0  # the segments being swapped stay this round
    assert plog.delete_records_before(start) == start == plog.log_start_offset
    assert plog.segments == segments
    with pytest.raises(OffsetOutOfRange):
        plog.read(start - 1, 1 << 20)
    pause.go.set()
    worker.join()
    assert c.end_swap(cleaned)
    assert plog.log_start_offset == start
    rows = consume(plog, read_committed=True)
    assert rows and all(off >= start for off, _, _ in rows)
    same_values(rows, before)
    assert plog.apply_retention() > 0  # the next round deletes what the swap put in
    assert plog.segments[0].next_offset > plog.log_start_offset
    rows = consume(plog, read_committed=True)
    reloaded = crash_reload(plog, config, clock)
    assert consume(reloaded, read_committed=True) == rows
    assert not leftovers(reloaded.directory)


def test_truncation_waits_for_a_committed_group_then_truncates_the_cleaned_log(
    tmp_path: Path, clock: ManualClock
) -> None:
    plog = open_log(tmp_path, COMPACT, clock)
    before = fill(plog)
    pause = Pause("deleted-old")  # committed, old segments half renamed away
    c, cleaned = begin(plog, clock, pause)
    first = cleaned.pending.old[0]  # the segments of the group the worker is in
    worker = in_thread(cleaned.run)
    assert pause.reached.wait(10)
    cut = first[-1].base_offset + 1  # inside that group
    pause.release_after(0.3)
    started = time.monotonic()
    plog.truncate_to(cut)
    assert time.monotonic() - started >= 0.25  # it waited for the group to be complete
    worker.join()
    assert len(cleaned.pending.done) == 1  # stopped before the next group's commit
    assert plog.segments[0].base_offset == first[0].base_offset
    assert not [s for s in plog.segments if any(s is o for o in first)]  # the cleaned one
    assert plog.log_end_offset <= cut
    assert not c.end_swap(cleaned)  # the cleaner's checkpoint does not move past the cut
    assert plog.cleaner_checkpoint <= plog.log_end_offset
    append_after_truncation_then_reload(plog, before, clock)


def test_truncation_before_the_commit_stops_the_swap(tmp_path: Path, clock: ManualClock) -> None:
    plog = open_log(tmp_path, COMPACT, clock)
    before = fill(plog)
    c, cleaned = begin(plog, clock)  # noted; the worker has not started yet
    old = list(plog.segments[:2])
    cut = plog.segments[1].base_offset + 2
    plog.truncate_to(cut)
    in_thread(cleaned.run).join()
    assert not c.end_swap(cleaned) and not c.in_progress
    assert plog.segments == old  # nothing was swapped
    assert not leftovers(plog.directory)
    send_plain(plog, [(b"after", b"truncation")])
    rows = consume(plog, read_committed=True)
    assert [off for off, _, _ in rows[:-1]] == [off for off, _, _ in before if off < cut]
    reloaded = crash_reload(plog, COMPACT, clock)
    assert consume(reloaded, read_committed=True) == rows


@pytest.mark.parametrize("step", ["log-swap", "log-renamed"])
def test_close_waits_for_a_committed_group(tmp_path: Path, clock: ManualClock, step: str) -> None:
    plog = open_log(tmp_path, COMPACT, clock)
    before = fill(plog)
    leo = plog.log_end_offset
    pause = Pause(step)
    c, cleaned = begin(plog, clock, pause)
    worker = in_thread(cleaned.run)
    assert pause.reached.wait(10)
    pause.release_after(0.2)
    plog.close()
    worker.join()
    assert not c.end_swap(cleaned)
    assert not leftovers(plog.directory)
    reloaded = open_log(tmp_path, COMPACT, clock, clean=True)
    assert reloaded.log_end_offset == leo
    rows = consume(reloaded, read_committed=True)
    assert table(rows) == table(before) and len(rows) < len(before)  # cleaned
    same_values(rows, before)


@pytest.mark.parametrize("committed", [False, True])
def test_a_deleted_and_recreated_partition_gets_nothing_of_the_swap(
    tmp_path: Path, clock: ManualClock, committed: bool
) -> None:
    retired: list[Path] = []
    hooks = LogHooks(discard=lambda paths, _delay: retired.extend(paths))
    plog = open_log(tmp_path, COMPACT, clock, hooks=hooks)
    fill(plog)
    pause = Pause("log-swap")
    c, cleaned = begin(plog, clock, pause)
    worker = None
    if committed:
        worker = in_thread(cleaned.run)
        assert pause.reached.wait(10)
        pause.release_after(0.2)
    plog.delete()
    fresh = open_log(tmp_path, COMPACT, clock)  # the topic created again
    if worker is None:
        pause.go.set()
        worker = in_thread(cleaned.run)
    worker.join()
    assert not c.end_swap(cleaned)
    assert sorted(os.listdir(fresh.directory)) == sorted(
        [f"{0:020d}.{kind}" for kind in ("index", "log", "timeindex")]
    )
    assert fresh.log_end_offset == 0
    # (the renamed directory, with whatever the swap left in it, goes whole)
    assert [p for p in retired if p.name.endswith("-delete")]


class FailOnce:
    """A crash hook that fails the swap's worker with a disk error at `step`, `times` times."""

    def __init__(self, step: str, times: int = 1) -> None:
        self.step = step
        self.left = times

    def __call__(self, at: str) -> None:
        if at == self.step and self.left > 0:
            self.left -= 1
            raise OSError(5, "Input/output error (injected)")


@pytest.mark.parametrize("step", ["log-swap", "indexes-swap", "deleted-old", "log-renamed", "done"])
def test_truncation_completes_a_group_whose_worker_failed_after_the_commit(
    tmp_path: Path, clock: ManualClock, step: str
) -> None:
    """The worker commits a group, then a disk error stops it at `step` (at "deleted-old"
    the old segments are half renamed away, from "log-renamed" on the cleaned segment is
    already `<base>.log`). A follower's truncation into that group before the loop applies
    the swap completes the group first: truncating the old segments and appending to them
    would leave a committed swap that the next load finishes over the truncated log,
    dropping the append and putting back what was cut."""
    plog = open_log(tmp_path, COMPACT, clock)
    before = fill(plog)
    c, cleaned = begin(plog, clock, FailOnce(step))
    first = cleaned.pending.old[0]
    in_thread(cleaned.run).join()
    assert cleaned.pending.error is not None and cleaned.pending.committed == 1
    cut = first[-1].base_offset + 1  # inside the committed group
    plog.truncate_to(cut)
    assert not [s for s in plog.segments if any(s is o for o in first)]  # the cleaned one
    assert plog.log_end_offset <= cut
    assert not c.end_swap(cleaned)  # no error left to reload for; the checkpoint stays
    # The old segments' files, the first renamed by the failed attempt, all went to be
    # deleted (not left until a restart).
    assert not [n for n in os.listdir(plog.directory) if n.endswith(".deleted")]
    rows = append_after_truncation_then_reload(plog, before, clock)
    assert all(off < cut for off, _, _ in rows[:-1])


def test_truncation_is_refused_while_a_committed_group_cannot_be_completed(
    tmp_path: Path, clock: ManualClock
) -> None:
    """The disk keeps failing: the truncation raises and changes nothing; applying the swap
    raises too (the partition is reloaded), and the load completes the swap on the log as
    it was."""
    plog = open_log(tmp_path, COMPACT, clock)
    before = fill(plog)
    leo = plog.log_end_offset
    c, cleaned = begin(plog, clock, FailOnce("deleted-old", times=2))
    first = cleaned.pending.old[0]
    in_thread(cleaned.run).join()
    segments = list(plog.segments)
    with pytest.raises(OSError, match="injected"):
        plog.truncate_to(first[-1].base_offset + 1)
    assert plog.segments == segments and plog.log_end_offset == leo
    with pytest.raises(OSError, match="injected"):
        c.end_swap(cleaned)
    reloaded = crash_reload(plog, COMPACT, clock)
    assert reloaded.log_end_offset == leo
    rows = consume(reloaded, read_committed=True)
    assert table(rows) == table(before)
    same_values(rows, before)
    assert not leftovers(reloaded.directory)
