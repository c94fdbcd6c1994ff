"""All partition logs of this broker, across `log.dirs`, and their checkpoints.

On disk, per log dir (Kafka's names): `<topic>-<partition>/` directories,
`recovery-point-offset-checkpoint`, `log-start-offset-checkpoint`,
`cleaner-offset-checkpoint` (each compacted partition's first dirty offset),
`replication-offset-checkpoint` (the high watermark of each replicated partition; never
written while no partition of the dir is replicated), and the clean-shutdown
marker `.kafka_cleanshutdown`, present only between a clean stop and the next start. Without
the marker, segments past each partition's recovery point are scanned and repaired.

`.lock` is Kafka's exclusive per-directory lock, taken with `lock_log_dirs` before anything
reads or writes the directory and held for the life of the process: a second broker on the
same directory would otherwise "recover" the live broker's tails and leave a clean-shutdown
marker under it. The OS releases the lock when its holder dies, even by SIGKILL.
"""

from __future__ import annotations

import errno
import fcntl
import logging
import os
import re
import shutil
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from oncelog.clock import Clock
from oncelog.config import LogConfig
from oncelog.storage.cleaner import CleanerSettings, CleanJob, CleanSwap, LogCleaner
from oncelog.storage.files import read_offset_checkpoint, write_offset_checkpoint
from oncelog.storage.local_log import LogHooks, remove_paths, retire_directory
from oncelog.storage.partition_log import PartitionLog, ProducerSettings
from oncelog.storage.recovery_checkpoint import RecoveryCheckpoint
from oncelog.storage.replication_checkpoint import (
    REPLICATION_CHECKPOINT_FILE,
    read_offsets,
    write_offsets,
)
from oncelog.types import TopicPartition

log = logging.getLogger(__name__)

CLEAN_SHUTDOWN_FILE = ".kafka_cleanshutdown"
RECOVERY_POINT_FILE = "recovery-point-offset-checkpoint"
LOG_START_FILE = "log-start-offset-checkpoint"
CLEANER_CHECKPOINT_FILE = "cleaner-offset-checkpoint"
LOCK_FILE = ".lock"
_PARTITION_DIR = re.compile(r"^(.+)-(\d+)$")
#: A deleted partition's directory, renamed to be removed later (`PartitionLog.delete`).
_DELETED_DIR = re.compile(r"^.+-\d+\.[0-9a-f]+-delete$")


@dataclass(frozen=True, slots=True)
class CheckpointFiles:
    """The content of every checkpoint file, noted on the loop, numbered in noting order."""

    seq: int
    contents: dict[Path, dict[tuple[str, int], int]]


class LogDirError(Exception):
    """A log directory cannot be used; the message is the one line the broker prints."""


class LogDirLock:
    """The exclusive flock on `<log.dir>/.lock`; the file holds the holder's pid so that a
    refused broker can name it."""

    def __init__(self, log_dir: Path) -> None:
        self.path = log_dir / LOCK_FILE
        try:
            # no O_TRUNC: the holder's pid must survive until the lock is ours
            self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        except OSError as exc:
            raise LogDirError(f"log directory {log_dir} is not writable: {exc.strerror}") from exc
        try:
            fcntl.flock(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            holder = _read_pid(self._fd)
            os.close(self._fd)
            if exc.errno not in (errno.EWOULDBLOCK, errno.EAGAIN):
                raise LogDirError(f"cannot lock log directory {log_dir}: {exc.strerror}") from exc
            known = f" (pid {holder})" if holder is not None else ""
            raise LogDirError(
                f"log directory {log_dir} is in use by another process{known}"
            ) from exc
        os.ftruncate(self._fd, 0)
        os.pwrite(self._fd, f"{os.getpid()}\n".encode(), 0)

    def release(self) -> None:
        """Unlock (closing the descriptor drops the flock); the file stays, as in Kafka."""
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


def _read_pid(fd: int) -> int | None:
    try:
        text = os.pread(fd, 32, 0).decode("ascii").strip()
        return int(text) if text else None
    except (OSError, ValueError):
        return None


def lock_log_dirs(log_dirs: list[Path]) -> list[LogDirLock]:
    """Create each log dir (with its parents, as Kafka does) and lock it; raise LogDirError
    with one line when one is a file, cannot be created or written, or is locked."""
    locks: list[LogDirLock] = []
    seen: set[Path] = set()
    try:
        for log_dir in log_dirs:
            if log_dir.resolve() in seen:
                raise LogDirError(f"log directory {log_dir} is listed twice in log.dirs")
            seen.add(log_dir.resolve())
            if log_dir.exists() and not log_dir.is_dir():
                raise LogDirError(f"log directory {log_dir} is not a directory")
            try:
                log_dir.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise LogDirError(f"cannot create log directory {log_dir}: {exc.strerror}") from exc
            if not os.access(log_dir, os.W_OK | os.X_OK):
                raise LogDirError(f"log directory {log_dir} is not writable")
            locks.append(LogDirLock(log_dir))
    except LogDirError:
        for lock in locks:
            lock.release()
        raise
    return locks


class LogManager:
    def __init__(
        self,
        log_dirs: list[Path],
        clock: Clock,
        producers: ProducerSettings | None = None,
        *,
        replication: bool = False,
        flush: Callable[[Callable[[], None]], None] | None = None,
        rolled: Callable[[], None] | None = None,
        checkpoint_soon: Callable[[], None] | None = None,
        cleaner: LogCleaner | None = None,
    ) -> None:
        """`replication`: a clustered broker; every partition loaded or created keeps its
        high watermark as state (`PartitionLog.enable_replication`). Partitions listed in
        `replication-offset-checkpoint` are loaded replicated either way.

        The broker's hooks: `flush` runs every segment fsync of every partition (the
        metrics time them); `rolled` is told when a partition rolled a segment (on whatever
        thread appended: the broker then runs `flush_rolled` in a worker soon, not only on
        its 1 s timer); `checkpoint_soon` writes the checkpoint files soon (the broker: in a
        worker, off its event loop; None: at once). `cleaner`: compaction's rounds over
        these logs (Kafka's LogManager owns its LogCleaner too); none by default."""
        self.log_dirs = log_dirs
        self.clock = clock
        self.producers = producers or ProducerSettings()
        self.replication = replication
        self.logs: dict[TopicPartition, PartitionLog] = {}
        self._dir_of: dict[TopicPartition, Path] = {}
        self._written: dict[Path, dict[tuple[str, int], int]] = {}
        """What each checkpoint file holds, as last written by this broker."""
        self._files_lock = threading.Lock()
        """Writers of the checkpoint files (the loop, a worker) take turns."""
        self._files_noted = 0
        self._files_written = 0
        """Numbers of the newest contents noted and written (`CheckpointFiles.seq`)."""
        self.clean_start = True
        self.cleaner = cleaner or LogCleaner(CleanerSettings(enable=False), clock)
        self._flush_hook = flush or _run
        self._roll_hook = rolled or _nothing
        self._checkpoint_hook = checkpoint_soon or self.checkpoint
        #: Renamed files of deleted segments and directories of deleted partitions, with
        #: when they are due (monotonic ms), for `remove_deleted` (a worker's).
        self._deleted: list[tuple[int, Path]] = []
        self._deleted_lock = threading.Lock()
        #: Every log's fsyncs, rolls and deleted files go through this manager.
        self._hooks = LogHooks(self._flush, self._discard, self._rolled)

    def _flush(self, flush: Callable[[], None]) -> None:
        self._flush_hook(flush)

    def _rolled(self) -> None:
        self._roll_hook()

    def startup(self, config_for: Callable[[str], LogConfig | None]) -> None:
        """Load every partition directory whose topic is known; recover after a crash."""
        for log_dir in self.log_dirs:
            log_dir.mkdir(parents=True, exist_ok=True)
            marker = log_dir / CLEAN_SHUTDOWN_FILE
            fresh = not any(_PARTITION_DIR.match(p.name) for p in log_dir.iterdir() if p.is_dir())
            clean = marker.exists() or fresh
            self.clean_start = self.clean_start and clean
            recovery = read_offset_checkpoint(log_dir / RECOVERY_POINT_FILE)
            starts = read_offset_checkpoint(log_dir / LOG_START_FILE)
            cleaned = read_offset_checkpoint(log_dir / CLEANER_CHECKPOINT_FILE)
            high_watermarks = read_offsets(log_dir / REPLICATION_CHECKPOINT_FILE)
            for path in sorted(log_dir.iterdir()):
                if path.is_dir() and _DELETED_DIR.match(path.name):
                    log.info("removing %s, deleted before the last stop", path)
                    shutil.rmtree(path, ignore_errors=True)
                    continue
                match = _PARTITION_DIR.match(path.name)
                if not path.is_dir() or not match:
                    continue
                tp = TopicPartition(match.group(1), int(match.group(2)))
                config = config_for(tp.topic)
                if config is None:
                    log.warning("ignoring %s: topic %s is not in the metadata", path, tp.topic)
                    continue
                self.logs[tp] = PartitionLog.load(
                    path,
                    tp,
                    config,
                    self.clock,
                    clean=clean,
                    recovery_point=recovery.get(tp, 0),
                    log_start_offset=starts.get(tp, 0),
                    producers=self.producers,
                    replicated=self.replication or tp in high_watermarks,
                    high_watermark=high_watermarks.get(tp),
                    hooks=self._hooks,
                )
                self.logs[tp].cleaner_checkpoint = cleaned.get(tp, 0)
                self._dir_of[tp] = log_dir
            if clean:
                marker.unlink(missing_ok=True)
            else:
                log.warning("%s: no clean-shutdown marker, recovered partition tails", log_dir)
        self.checkpoint()

    def get(self, tp: TopicPartition) -> PartitionLog | None:
        return self.logs.get(tp)

    def create(
        self, tp: TopicPartition, config: LogConfig, *, replicated: bool | None = None
    ) -> PartitionLog:
        """The log of `tp`, created empty if there is none; `replicated` (default: the
        manager's `replication`) applies to a new log only."""
        existing = self.logs.get(tp)
        if existing is not None:
            return existing
        # A directory of a partition that startup did not load belongs to a topic that is
        # no longer in the metadata (e.g. a stop in the middle of its deletion): a new topic
        # of that name must not inherit its records, nor have two directories next startup.
        for stray in (d / str(tp) for d in self.log_dirs):
            retired = retire_directory(stray)
            if retired is not None:
                log.warning("deleting stray partition directory %s", stray)
                self._discard([retired], 0)
        log_dir = min(self.log_dirs, key=lambda d: sum(1 for v in self._dir_of.values() if v == d))
        plog = PartitionLog.load(
            log_dir / str(tp),
            tp,
            config,
            self.clock,
            clean=True,
            producers=self.producers,
            replicated=self.replication if replicated is None else replicated,
            hooks=self._hooks,
        )
        self.logs[tp] = plog
        self._dir_of[tp] = log_dir
        return plog

    def reload(self, tp: TopicPartition) -> PartitionLog | None:
        """Load a partition again from its files (after an operation failed half-way)."""
        plog = self.logs.get(tp)
        if plog is None:
            return None
        plog.close(flush=False)
        fresh = PartitionLog.load(
            plog.directory,
            tp,
            plog.config,
            self.clock,
            clean=False,
            recovery_point=plog.recovery_point,
            log_start_offset=plog.log_start_offset,
            producers=self.producers,
            replicated=plog.replicated,
            high_watermark=plog.high_watermark,
            hooks=self._hooks,
        )
        fresh.cleaner_checkpoint = plog.cleaner_checkpoint
        self.logs[tp] = fresh
        return fresh

    def delete(self, tp: TopicPartition) -> None:
        """Drop a partition at once; its files go with a later `remove_deleted`."""
        plog = self.logs.pop(tp, None)
        self._dir_of.pop(tp, None)
        if plog is not None:
            plog.delete()

    @property
    def deleting(self) -> bool:
        """Whether files of deleted segments or partitions are due for `remove_deleted`."""
        now = self.clock.monotonic_ms()
        return any(due <= now for due, _ in self._deleted)

    def _discard(self, paths: list[Path], delay_ms: int) -> None:
        due = self.clock.monotonic_ms() + delay_ms
        with self._deleted_lock:
            self._deleted.extend((due, path) for path in paths)

    def remove_deleted(self) -> int:
        """Remove the files of deleted segments and partitions whose `file.delete.delay.ms`
        has passed (for a worker thread: the unlinks of a big segment take the kernel a
        while); how many paths went."""
        now = self.clock.monotonic_ms()
        with self._deleted_lock:
            due = [path for when, path in self._deleted if when <= now]
            self._deleted = [(when, path) for when, path in self._deleted if when > now]
        return remove_paths(due)

    def partitions(self) -> Iterator[tuple[TopicPartition, PartitionLog]]:
        return iter(list(self.logs.items()))

    def apply_retention(self, *, checkpoint: bool = True) -> int:
        """Delete segments past retention; return how many went. With `checkpoint`, the
        checkpoint files follow at once; the broker passes False and writes them in a worker
        (two fsyncs a file on its event loop otherwise): a log-start file left behind by a
        crash is harmless, a load starts a log at its first segment at the earliest, as
        Kafka writes that file from its scheduler, not from the retention pass."""
        deleted = sum(plog.apply_retention() for _, plog in self.partitions())
        if deleted and checkpoint:
            self.checkpoint()
        return deleted

    def remove_expired_producers(self) -> int:
        """Drop producer state idle longer than producer.id.expiration.ms."""
        now = self.clock.wall_ms()
        return sum(plog.producer_state.remove_expired(now) for _, plog in self.partitions())

    def flush_rolled(self) -> None:
        """fsync rolled segments (the slow part, meant for a worker thread)."""
        for _, plog in self.partitions():
            plog.flush_rolled()

    def flush_by_time(self) -> None:
        for _, plog in self.partitions():
            plog.maybe_flush_by_time()

    def checkpoint(self, *, if_changed: bool = False) -> None:
        """Write the checkpoint files; `if_changed`: only those whose content changed."""
        self.write_checkpoint_files(self.checkpoint_contents(), if_changed=if_changed)

    def checkpoint_soon(self) -> None:
        """Write the checkpoint files soon, not on this call (two fsyncs a file): after a
        DeleteRecords, which Kafka Streams sends with every commit. Until they are written
        a crash restores the older log start offsets, as in Kafka, which only writes them
        every `log.flush.start.offset.checkpoint.interval.ms`."""
        self._checkpoint_hook()

    def checkpoint_contents(self) -> CheckpointFiles:
        """What the checkpoint files would hold now (on the event loop, where the offsets
        change), numbered: `write_checkpoint_files` never writes it over a newer one."""
        contents: dict[Path, dict[tuple[str, int], int]] = {}
        for log_dir in self.log_dirs:
            mine = {tp: plog for tp, plog in self.partitions() if self._dir_of.get(tp) == log_dir}
            contents[log_dir / RECOVERY_POINT_FILE] = {
                tp: p.recovery_point for tp, p in mine.items()
            }
            contents[log_dir / LOG_START_FILE] = {tp: p.log_start_offset for tp, p in mine.items()}
            contents[log_dir / CLEANER_CHECKPOINT_FILE] = {
                tp: p.cleaner_checkpoint for tp, p in mine.items() if p.cleaner_checkpoint > 0
            }
            contents[log_dir / REPLICATION_CHECKPOINT_FILE] = {
                tp: p.high_watermark for tp, p in mine.items() if p.replicated
            }
        with self._files_lock:
            self._files_noted += 1
            return CheckpointFiles(self._files_noted, contents)

    def write_checkpoint_files(self, files: CheckpointFiles, *, if_changed: bool = False) -> None:
        """Write what `checkpoint_contents` noted (any thread: the broker's periodic one runs
        in a worker, since each file costs two fsyncs). Writers take turns, and contents
        older than what was already written are dropped: a file never goes back to offsets
        noted before a change another writer already recorded (a deleted partition's
        recovery point, say, which a new partition of that name must not inherit)."""
        with self._files_lock:
            if files.seq < self._files_written:
                return
            for path, offsets in files.contents.items():
                if if_changed and self._written.get(path) == offsets:
                    continue
                if path.name == REPLICATION_CHECKPOINT_FILE:
                    if not offsets and path not in self._written and not path.exists():
                        continue  # a single broker: no high watermarks to keep
                    self._written.pop(path, None)
                    write_offsets(path, {TopicPartition(*k): v for k, v in offsets.items()})
                    self._written[path] = offsets
                    continue
                self._written.pop(path, None)  # unknown if the write fails half-way
                write_offset_checkpoint(path, offsets)
                self._written[path] = offsets
            self._files_written = files.seq

    # -- periodic checkpoint (log.flush.offset.checkpoint.interval.ms): the server calls the
    # first and last on its event loop and `write_checkpoints` in a worker thread -------------

    def begin_checkpoints(self) -> list[tuple[PartitionLog, RecoveryCheckpoint]]:
        """Note the log end and producer state of every partition with new data."""
        out = []
        for _, plog in self.partitions():
            cp = plog.begin_checkpoint()
            if cp is not None:
                out.append((plog, cp))
        return out

    def write_checkpoints(self, pending: list[tuple[PartitionLog, RecoveryCheckpoint]]) -> None:
        """fsync and write the snapshots (slow: meant for a worker thread)."""
        for plog, cp in pending:
            plog.write_checkpoint(cp)

    def finish_checkpoints(self, pending: list[tuple[PartitionLog, RecoveryCheckpoint]]) -> int:
        """Move the recovery points of the partitions written (and still ours); return how
        many moved. The checkpoint files follow with `checkpoint_contents` (here, on the
        loop) and `write_changed_files` (a worker thread)."""
        return sum(
            1
            for plog, cp in pending
            if self.logs.get(plog.tp) is plog and plog.finish_checkpoint(cp)
        )

    def write_changed_files(self, files: CheckpointFiles) -> None:
        """The checkpoint files whose content changed (slow: meant for a worker thread); a
        failure is a warning, the next round writes them again."""
        try:
            self.write_checkpoint_files(files, if_changed=True)
        except OSError as exc:
            log.warning("writing the offset checkpoint files failed: %s", exc)

    def shutdown(self) -> None:
        """Flush everything, write checkpoints and the clean-shutdown marker."""
        for _, plog in self.partitions():
            plog.close(flush=True)
        self.checkpoint()
        for log_dir in self.log_dirs:
            (log_dir / CLEAN_SHUTDOWN_FILE).touch()

    # -- the log cleaner: the server runs `clean_segments` in a worker, these on its loop ------

    def next_clean_job(self) -> tuple[PartitionLog, CleanJob] | None:
        """The next cleaning round to run, if a compacted partition needs one."""
        if not self.cleaner.settings.enable:
            return None
        return self.cleaner.grab_filthiest(list(self.logs.values()))

    def finish_clean(self, cleaned: CleanSwap) -> bool:
        """Apply a swap whose files were renamed in a worker (`LogCleaner.begin_swap`, then
        `CleanSwap.run`); whether it went in whole. The caller writes the checkpoint files
        (the cleaner's offset) then, in a worker as after retention (a crash before they are
        written only makes the next round clean the same range again).

        A swap that fails half-way (a disk error) leaves the files for the next load to
        complete; the partition is reloaded from them now, as a start would.
        """
        try:
            return self.cleaner.end_swap(cleaned)
        except OSError as exc:
            tp = cleaned.job.tp
            log.error("%s: swapping cleaned segments failed: %s; reloading the partition", tp, exc)
            if self.logs.get(tp) is cleaned.plog:
                self.reload(tp)
            return False

    def clean_failed(self, job: CleanJob, exc: BaseException) -> None:
        self.cleaner.failed(job, exc)


def _run(flush: Callable[[], None]) -> None:
    flush()


def _nothing() -> None:
    return None
