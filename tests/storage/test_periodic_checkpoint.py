"""The periodic recovery-point checkpoint (log.flush.offset.checkpoint.interval.ms).

A partition with new data is noted (log end L, producer state as of L), fsynced, given a
producer snapshot at L and its recovery point moved to L. After a crash (files left as
they are, no clean shutdown, no shutdown snapshot) a load replays only the batches after L
and ends with the producer state of a twin that never crashed: open transactions across L
and their LSO, aborts after L with their `.txnindex` entries, duplicate detection. Races:
truncation, deletion and cleaning between the steps, failed fsyncs and writes.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from oncelog.clock import ManualClock
from oncelog.config import LogConfig
from oncelog.producer_state import snapshot
from oncelog.producer_state.manager import ProducerStateManager
from oncelog.protocol.records.batch import BatchHeader, iter_batches
from oncelog.storage.cleaner import CleanerSettings, LogCleaner
from oncelog.storage.files import read_offset_checkpoint
from oncelog.storage.log_manager import RECOVERY_POINT_FILE, LogManager
from oncelog.storage.partition_log import PartitionLog
from oncelog.storage.segment import LogSegment
from oncelog.storage.validator import ValidatedRecords
from oncelog.types import TopicPartition
from tests.storage.cleaner_util import Producer, keyed_batch, send_plain
from tests.storage.util import T0, TP, append, open_log, read_all, validated

BIG = LogConfig(index_interval_bytes=200)  # 1 GiB segments: rolls only when asked


@dataclass
class Recovery:
    """What the last load did: the snapshot it started from and the batches it replayed;
    `by_dir`: the same for each partition directory loaded."""

    snapshot_offset: int | None = None
    replayed: list[int] = field(default_factory=list)
    by_dir: dict[str, tuple[int | None, list[int]]] = field(default_factory=dict)


@pytest.fixture
def recovery(monkeypatch: pytest.MonkeyPatch) -> Recovery:
    seen = Recovery()
    load = ProducerStateManager.load_snapshot
    replay = ProducerStateManager.replay

    def spy_load(self: ProducerStateManager, directory: Path, end: int) -> int | None:
        seen.snapshot_offset = load(self, directory, end)
        seen.replayed = []
        seen.by_dir[directory.name] = (seen.snapshot_offset, seen.replayed)
        return seen.snapshot_offset

    def spy_replay(
        self: ProducerStateManager, headers: Iterable[BatchHeader], read_marker: Any = None
    ) -> Any:
        def counted() -> Iterable[BatchHeader]:
            for header in headers:
                seen.replayed.append(header.base_offset)
                yield header

        return replay(self, counted(), read_marker)

    monkeypatch.setattr(ProducerStateManager, "load_snapshot", spy_load)
    monkeypatch.setattr(ProducerStateManager, "replay", spy_replay)
    return seen


def checkpoint(plog: PartitionLog) -> int:
    """One whole periodic checkpoint, the three steps in a row; return the offset noted."""
    cp = plog.begin_checkpoint()
    assert cp is not None
    plog.write_checkpoint(cp)
    assert plog.finish_checkpoint(cp), cp.error
    return cp.offset


def crash(plog: PartitionLog) -> None:
    """A SIGKILL: the files stay as they are; no flush, no snapshot, no checkpoint."""
    for segment in plog.segments:
        segment.close()


def snapshots(plog: PartitionLog) -> list[int]:
    return snapshot.list_snapshots(plog.directory)


def batch_bases(plog: PartitionLog, start: int) -> list[int]:
    return [h.base_offset for _, h in iter_batches(read_all(plog)) if h.base_offset >= start]


def state(plog: PartitionLog) -> tuple[object, ...]:
    """Everything about producers and transactions a client can observe."""
    committed = plog.read(plog.log_start_offset, 1 << 24, read_committed=True)
    return (
        plog.log_end_offset,
        dict(plog.producer_state.producers),
        plog.producer_state.ongoing_transactions(),
        plog.last_stable_offset,
        plog.aborted_transactions(0, plog.log_end_offset),
        bytes(committed.records),
        committed.aborted,
    )


class Workload:
    """The same operations on a log that will crash and on its twin that will not."""

    def __init__(self, logs: list[PartitionLog], *, rolls: bool = False) -> None:
        self.logs = logs
        self.rolls = rolls
        self.idem = [Producer(p, 1) for p in logs]
        self.txn = [Producer(p, 2, transactional=True) for p in logs]
        self.span = [Producer(p, 3, transactional=True) for p in logs]

    def before(self) -> None:
        for i, plog in enumerate(self.logs):
            for n in range(6):
                self.idem[i].send([(b"k", f"i{n}".encode())])
                self.txn[i].send([(b"t", f"t{n}".encode())] * 2)
                self.txn[i].end(commit=n % 3 != 0)  # aborts at n = 0, 3
                if self.rolls and n in (1, 3):
                    plog.roll()
            self.span[i].send([(b"s", b"open-1")])  # spans the checkpoint

    def after(self) -> None:
        for i in range(len(self.logs)):
            self.span[i].send([(b"s", b"open-2")])
            self.idem[i].send([(b"k", b"i-after")])
            self.txn[i].send([(b"t", b"aborted-after")])
            self.txn[i].end(commit=False)  # an ABORT after the checkpoint
            self.txn[i].send([(b"t", b"committed-after")])
            self.txn[i].end(commit=True)


@pytest.mark.parametrize("rolls", [False, True], ids=["one-segment", "rolled-segments"])
@pytest.mark.parametrize("lose_unflushed_index", [False, True])
def test_crash_after_a_checkpoint_replays_only_what_follows(
    tmp_path: Path,
    recovery: Recovery,
    monkeypatch: pytest.MonkeyPatch,
    rolls: bool,
    lose_unflushed_index: bool,
) -> None:
    """Rolled segments are left unflushed (the server flushes them within a second): the
    checkpoint fsyncs them too, so the recovery point can pass them."""
    config = BIG
    clock = ManualClock(T0)
    plog = open_log(tmp_path / "crashed", config, clock)
    twin = open_log(tmp_path / "twin", config, clock)
    work = Workload([plog, twin], rolls=rolls)
    work.before()
    segments = len(plog.segments)
    assert segments == (3 if rolls else 1)
    open_first = plog.producer_state.ongoing_transactions()[3]

    flushed: list[int] = []
    with monkeypatch.context() as patch:
        real_flush = LogSegment.flush

        def spy_flush(segment: LogSegment) -> None:
            flushed.append(segment.base_offset)
            real_flush(segment)

        patch.setattr(LogSegment, "flush", spy_flush)
        offset = checkpoint(plog)
    assert sorted(flushed) == [s.base_offset for s in plog.segments]
    assert offset == plog.log_end_offset == plog.recovery_point
    assert snapshots(plog)[-1] == offset
    active = plog.active
    index_path = active.txn_index.path
    index_at_checkpoint = index_path.read_bytes() if index_path.exists() else b""
    work.after()
    assert len(active.txn_index.entries) > len(index_at_checkpoint) // 34  # abort after L
    after = batch_bases(plog, offset)
    crash(plog)
    if lose_unflushed_index:  # written after the fsync, so a crash may lose it
        index_path.write_bytes(index_at_checkpoint)

    reloaded = PartitionLog.load(
        plog.directory, TP, config, clock, clean=False, recovery_point=plog.recovery_point
    )
    assert recovery.snapshot_offset == offset
    assert recovery.replayed == after and len(after) == 6
    assert reloaded.recovery_point == offset > reloaded.active.base_offset
    assert reloaded.producer_state.ongoing_transactions() == {3: open_first}
    assert reloaded.last_stable_offset == open_first < offset
    assert state(reloaded) == state(twin)

    # Both go on alike: a retry is a duplicate, the open transaction commits.
    retry = reloaded.append(last_batch_again(work.idem[0], b"i-after"), 0)
    assert retry.duplicate
    for log_, producer in ((reloaded, work.span[0]), (twin, work.span[1])):
        producer.plog = log_
        producer.end(commit=True)
    assert state(reloaded) == state(twin)
    assert reloaded.last_stable_offset == reloaded.log_end_offset


def last_batch_again(producer: Producer, value: bytes) -> ValidatedRecords:
    """An idempotent producer's last (one-record) batch again, as a client retry sends it."""
    return validated(
        keyed_batch(
            [(b"k", value)],
            producer_id=producer.producer_id,
            epoch=producer.epoch,
            sequence=producer.sequence - 1,
            timestamp=producer.plog.clock.wall_ms(),
        )
    )


def test_without_a_checkpoint_the_whole_log_is_replayed(tmp_path: Path, recovery: Recovery) -> None:
    """The baseline the checkpoint improves on (and the spy works)."""
    plog = open_log(tmp_path, BIG)
    Workload([plog]).before()
    everything = batch_bases(plog, 0)
    crash(plog)
    open_log(tmp_path, BIG, clean=False, recovery_point=0)
    assert recovery.snapshot_offset is None
    assert recovery.replayed == everything


def test_idle_partitions_are_not_checkpointed(tmp_path: Path) -> None:
    plog = open_log(tmp_path, BIG)
    assert plog.begin_checkpoint() is None  # empty
    append(plog, [b"a"])
    first = checkpoint(plog)
    assert plog.begin_checkpoint() is None  # nothing new since
    append(plog, [b"b"])
    assert checkpoint(plog) == first + 1
    assert snapshots(plog) == [first, first + 1]
    plog.close()
    reloaded = open_log(tmp_path, BIG)  # clean: shutdown snapshot at the end
    assert reloaded.begin_checkpoint() is None


def test_a_flushed_log_still_gets_its_snapshot(tmp_path: Path) -> None:
    """flush.messages=1 keeps the recovery point at the end; the replay is still bounded."""
    plog = open_log(tmp_path, LogConfig(flush_messages=1))
    Producer(plog, 1).send([(b"k", b"v")])
    assert plog.recovery_point == plog.log_end_offset
    assert checkpoint(plog) == plog.log_end_offset
    assert snapshots(plog) == [plog.log_end_offset]


def test_only_the_newest_snapshots_are_kept(tmp_path: Path) -> None:
    plog = open_log(tmp_path, BIG)
    offsets = []
    for n in range(6):
        append(plog, [f"v{n}".encode()])
        offsets.append(checkpoint(plog))
    assert snapshots(plog) == offsets[-3:]
    assert not list(plog.directory.glob("*.tmp"))


# -- the log manager: which partitions, the checkpoint file, a restart ----------------------


def test_log_manager_round_and_unclean_restart(tmp_path: Path, recovery: Recovery) -> None:
    busy, idle = TopicPartition("t", 0), TopicPartition("t", 1)
    manager = LogManager([tmp_path], ManualClock(T0))
    manager.startup(lambda topic: BIG)
    for tp in (busy, idle):
        Workload([manager.create(tp, BIG)]).before()
    open_txns = manager.logs[busy].producer_state.ongoing_transactions()
    assert list(open_txns) == [3]
    manager.shutdown()  # a clean stop: both have snapshots at their ends
    manager = LogManager([tmp_path], ManualClock(T0))
    manager.startup(lambda topic: BIG)
    assert manager.begin_checkpoints() == []  # nothing new anywhere
    plog = manager.get(busy)
    assert plog is not None
    send_plain(plog, [(b"k", b"new")])
    pending = manager.begin_checkpoints()
    assert [p.tp for p, _ in pending] == [busy]
    manager.write_checkpoints(pending)
    assert manager.finish_checkpoints(pending) == 1
    manager.write_changed_files(manager.checkpoint_contents())  # the broker: in a worker
    end = plog.log_end_offset
    assert read_offset_checkpoint(tmp_path / RECOVERY_POINT_FILE)[busy] == end

    # an idle round writes nothing at all
    before = {p: p.stat().st_mtime_ns for p in tmp_path.iterdir() if p.is_file()}
    assert manager.finish_checkpoints(manager.begin_checkpoints()) == 0
    manager.write_changed_files(manager.checkpoint_contents())
    assert {p: p.stat().st_mtime_ns for p in tmp_path.iterdir() if p.is_file()} == before

    Producer(plog, 9).send([(b"k", b"after-the-checkpoint")])
    for _, p in manager.partitions():
        crash(p)
    manager = LogManager([tmp_path], ManualClock(T0))
    manager.startup(lambda topic: BIG)
    assert not manager.clean_start
    reloaded = manager.get(busy)
    assert reloaded is not None
    assert reloaded.recovery_point == end
    assert recovery.by_dir["t-0"] == (end, [end])
    assert recovery.by_dir["t-1"][1] == []  # its shutdown snapshot is at its end
    assert reloaded.producer_state.entry(9) is not None
    assert reloaded.producer_state.ongoing_transactions() == open_txns


# -- races and failures -------------------------------------------------------------------


def test_truncation_before_the_write_publishes_nothing(tmp_path: Path) -> None:
    plog = open_log(tmp_path, BIG)
    for n in range(4):
        append(plog, [f"v{n}".encode()])
    cp = plog.begin_checkpoint()
    assert cp is not None
    plog.truncate_to(2)
    plog.write_checkpoint(cp)
    assert not plog.finish_checkpoint(cp)
    assert snapshots(plog) == []
    assert plog.recovery_point <= plog.log_end_offset == 2
    assert not list(plog.directory.glob("*.tmp"))


def test_truncation_after_the_write_drops_the_snapshot(tmp_path: Path) -> None:
    plog = open_log(tmp_path, BIG)
    for n in range(4):
        append(plog, [f"v{n}".encode()])
    cp = plog.begin_checkpoint()
    assert cp is not None
    plog.write_checkpoint(cp)
    assert snapshots(plog) == [4]
    plog.truncate_to(2)
    assert snapshots(plog) == []  # beyond the new end
    assert not plog.finish_checkpoint(cp)
    assert plog.recovery_point <= 2
    for n in range(4):  # the log grows past 4 again: no stale snapshot may be found there
        append(plog, [f"w{n}".encode()])
    assert snapshots(plog) == []


def test_deletion_between_the_steps(tmp_path: Path) -> None:
    manager = LogManager([tmp_path], ManualClock(T0))
    manager.startup(lambda topic: BIG)
    plog = manager.create(TP, BIG)
    Producer(plog, 1).send([(b"k", b"v")])
    pending = manager.begin_checkpoints()
    manager.delete(TP)
    again = manager.create(TP, BIG)  # a new topic of the same name
    manager.write_checkpoints(pending)  # must not raise
    assert manager.finish_checkpoints(pending) == 0
    manager.write_changed_files(manager.checkpoint_contents())
    assert snapshots(again) == []
    assert not list(again.directory.glob("*.tmp"))
    assert read_offset_checkpoint(tmp_path / RECOVERY_POINT_FILE) == {TP: 0}


def test_cleaning_past_the_noted_offset_publishes_nothing(tmp_path: Path) -> None:
    clock = ManualClock(T0)
    config = LogConfig(
        segment_bytes=600,
        cleanup_policy=("compact",),
        min_cleanable_dirty_ratio=0.01,
        retention_ms=-1,
    )
    plog = open_log(tmp_path, config, clock)
    for n in range(10):
        send_plain(plog, [(f"k{n % 2}".encode(), f"v{n}".encode())])
    plog.flush()  # nothing to fsync: only the snapshot is to be written
    cp = plog.begin_checkpoint()
    assert cp is not None and cp.segments == []
    for n in range(30):  # rolls past the noted offset, which the cleaner then cleans over
        send_plain(plog, [(f"k{n % 2}".encode(), f"w{n}".encode())])
    assert LogCleaner(CleanerSettings(), clock).clean_now(plog) is not None
    assert plog.cleaner_checkpoint > cp.offset
    plog.write_checkpoint(cp)
    assert not cp.error and not cp.snapshot_written
    assert plog.finish_checkpoint(cp)  # the recovery point may move; no snapshot below
    assert cp.offset not in snapshots(plog)


def test_failed_fsync_keeps_the_recovery_point(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    plog = open_log(tmp_path, BIG)
    append(plog, [b"a"])
    first = checkpoint(plog)
    append(plog, [b"b"])
    cp = plog.begin_checkpoint()
    assert cp is not None

    def failing(fd: int) -> None:
        raise OSError(5, "Input/output error")

    with monkeypatch.context() as patch:
        patch.setattr(os, "fsync", failing)
        plog.write_checkpoint(cp)  # must not raise
    with caplog.at_level(logging.WARNING):
        assert not plog.finish_checkpoint(cp)
    assert "checkpoint at offset 2 failed" in caplog.text
    assert plog.recovery_point == first and snapshots(plog) == [first]
    assert checkpoint(plog) == 2  # the next round does it


def test_failed_snapshot_write_keeps_the_recovery_point(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    plog = open_log(tmp_path, BIG)
    append(plog, [b"a"])
    cp = plog.begin_checkpoint()
    assert cp is not None

    def no_space(src: Any, dst: Any) -> None:
        raise OSError(28, "No space left on device")

    with monkeypatch.context() as patch:
        patch.setattr(os, "replace", no_space)
        plog.write_checkpoint(cp)
    with caplog.at_level(logging.WARNING):
        assert not plog.finish_checkpoint(cp)
    assert "writing producer snapshot 1" in caplog.text
    assert plog.recovery_point == 0 and snapshots(plog) == []
    assert not list(plog.directory.glob("*.tmp"))


def test_checkpoint_files_never_go_back_to_older_contents(tmp_path: Path) -> None:
    """The broker writes the periodic checkpoint files in a worker thread from contents noted
    on the loop; a synchronous write (a topic deletion) may come between. The older contents
    must not overwrite the newer: here the deleted partition's recovery point would come back
    for the new partition of the same name."""
    manager = LogManager([tmp_path], ManualClock(T0))
    manager.startup(lambda topic: BIG)
    plog = manager.create(TP, BIG)
    Producer(plog, 1).send([(b"k", b"v")] * 3)
    plog.flush()
    noted = manager.checkpoint_contents()  # the periodic round, its write still to come
    manager.delete(TP)
    manager.create(TP, BIG)
    manager.checkpoint()  # the deletion's own write, on the loop
    manager.write_changed_files(noted)  # the worker, late: dropped
    assert read_offset_checkpoint(tmp_path / RECOVERY_POINT_FILE) == {TP: 0}
    later = manager.checkpoint_contents()
    manager.write_changed_files(later)
    assert read_offset_checkpoint(tmp_path / RECOVERY_POINT_FILE) == {TP: 0}
