"""The log's housekeeping on the broker's event loop (Kafka's LogManager scheduler tasks):
retention, the fsync of rolled segments and their producer snapshots, the recovery-point
checkpoint and the offset checkpoint files, producer-id expiry and the log cleaner's rounds.
What touches the disk runs in a worker (threads, or the cleaner's process); the loop only
notes what changed, so it keeps serving. The server runs the periodic jobs (`periodic`)
and forwards the storage's two hooks (`rolled`, `checkpoint_files_soon`)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from concurrent.futures import ProcessPoolExecutor

from oncelog.config import BrokerConfig
from oncelog.server.cleaner_pool import new_pool, stop_pool
from oncelog.storage.cleaner import LogCleaner, clean_segments
from oncelog.storage.log_manager import LogManager

log = logging.getLogger(__name__)

#: How often rolled segments are fsynced and snapshotted at the latest (a roll asks sooner).
ROLLED_FLUSH_INTERVAL_S = 1.0


class LogHousekeeping:
    def __init__(self, logs: LogManager) -> None:
        self.logs = logs
        #: The broker's loop once it runs (`rolled` may be called from a start-up thread).
        self.loop: asyncio.AbstractEventLoop | None = None
        self._cleaner_pool: ProcessPoolExecutor | None = None
        self._flushing = asyncio.Lock()
        self._roll_flush: asyncio.Future[None] | None = None
        self._roll_wanted = False
        self._checkpoint_files_wanted = False
        self._checkpoint_files_task: asyncio.Future[None] | None = None

    def periodic(self, config: BrokerConfig) -> list[tuple[float, Callable[[], Awaitable[None]]]]:
        """(interval s, job) of each periodic job the configuration asks for."""
        jobs: list[tuple[float, Callable[[], Awaitable[None]]]] = [
            (config.retention_check_interval_ms / 1000, self.retention),
            (ROLLED_FLUSH_INTERVAL_S, self.flush),
            (
                config.get_int("producer.id.expiration.check.interval.ms") / 1000,
                self.expire_producers,
            ),
        ]
        checkpoint_ms = config.flush_offset_checkpoint_interval_ms
        if checkpoint_ms > 0:
            jobs.append((checkpoint_ms / 1000, self.checkpoint))
        cleaner = self.logs.cleaner.settings
        if cleaner.enable and cleaner.threads > 0:
            jobs.append((cleaner.backoff_ms / 1000, self.clean))
        return jobs

    def stop(self) -> None:
        """The broker stops: no roll flush pending, the cleaner's worker ended."""
        if self._roll_flush is not None:
            self._roll_flush.cancel()
        self.stop_cleaner()

    async def retention(self) -> None:
        """Retention on the loop; the checkpoint files it changed in a worker."""
        logs = self.logs
        deleted = logs.apply_retention(checkpoint=False)
        if deleted:
            log.info("retention deleted %d segments", deleted)
            await self.write_checkpoint_files()

    async def flush(self) -> None:
        await self._flush_rolled()
        logs = self.logs
        logs.flush_by_time()
        if logs.deleting:  # files of deleted segments and partitions, unlinked off the loop
            await asyncio.get_running_loop().run_in_executor(None, logs.remove_deleted)

    async def _flush_rolled(self) -> None:
        """fsync rolled segments and write their rolls' producer snapshots, in a worker
        thread; one run at a time (the 1 s timer, or a roll asking for one)."""
        async with self._flushing:
            await asyncio.get_running_loop().run_in_executor(None, self.logs.flush_rolled)

    def rolled(self) -> None:
        """A partition rolled (storage's hook, on the loop or a start-up thread): write its
        snapshot within milliseconds rather than at the next 1 s flush."""
        loop = self.loop
        if loop is None or loop.is_closed():
            return
        loop.call_soon_threadsafe(self._schedule_roll_flush)

    def _schedule_roll_flush(self) -> None:
        self._roll_wanted = True
        if self._roll_flush is None or self._roll_flush.done():
            self._roll_flush = asyncio.ensure_future(self._flush_after_rolls())

    async def _flush_after_rolls(self) -> None:
        while self._roll_wanted:  # rolls during a flush get one more
            self._roll_wanted = False
            await self._flush_rolled()

    async def clean(self) -> None:
        """Clean partitions until none needs it (Kafka's cleaner thread, then its backoff).

        The round runs in the worker process on closed segments; the loop keeps serving.
        The swap is noted here, its snapshot write, renames and directory fsyncs run in the
        default executor (the loop pins the segments it replaces meanwhile), and the new
        segments go into the log here; a result whose segments changed is discarded.
        """
        loop = asyncio.get_running_loop()
        while (picked := self.logs.next_clean_job()) is not None:
            plog, job = picked
            if self._cleaner_pool is None:
                self._cleaner_pool = new_pool()
            try:
                result = await loop.run_in_executor(self._cleaner_pool, clean_segments, job)
            except asyncio.CancelledError:
                self.logs.clean_failed(job, RuntimeError("broker stopping"))
                raise
            except Exception as exc:
                self.logs.clean_failed(job, exc)
                return
            current = self.logs.get(job.tp)  # None or another log: deleted, reloaded
            cleaned = self.logs.cleaner.begin_swap(plog if current is plog else None, job, result)
            if cleaned is None:
                await loop.run_in_executor(None, LogCleaner.discard, job, result)
                continue
            # Cancelled (the broker stopping), the worker goes on; closing the log settles it.
            await loop.run_in_executor(None, cleaned.run)
            if self.logs.finish_clean(cleaned):
                await self.write_checkpoint_files()

    def stop_cleaner(self) -> None:
        """Stop the worker now: a round in progress only wrote `.cleaned` files, which the
        next load deletes."""
        pool, self._cleaner_pool = self._cleaner_pool, None
        if pool is not None:
            stop_pool(pool)

    async def expire_producers(self) -> None:
        removed = self.logs.remove_expired_producers()
        if removed:
            log.info("expired %d producer entries (producer.id.expiration.ms)", removed)

    async def checkpoint(self) -> None:
        """The recovery-point checkpoint: partitions with new data are noted here, fsynced
        and snapshotted in a worker thread, and their recovery points moved back here; then
        the offset checkpoint files (recovery points, log starts, cleaner offsets, high
        watermarks) are noted here and those that changed written in a worker."""
        logs = self.logs
        loop = asyncio.get_running_loop()
        pending = logs.begin_checkpoints()
        if pending:
            await loop.run_in_executor(None, logs.write_checkpoints, pending)
        logs.finish_checkpoints(pending)
        await self.write_checkpoint_files()

    def checkpoint_files_soon(self) -> None:
        """Storage asks for the checkpoint files (after a DeleteRecords): noted and written
        by a task, in a worker; requests made while it runs get one more pass."""
        self._checkpoint_files_wanted = True
        task = self._checkpoint_files_task
        if task is None or task.done():
            self._checkpoint_files_task = asyncio.ensure_future(self._write_wanted_checkpoints())

    async def _write_wanted_checkpoints(self) -> None:
        while self._checkpoint_files_wanted:
            self._checkpoint_files_wanted = False
            try:
                await self.write_checkpoint_files()
            except OSError as exc:  # the periodic checkpoint tries again
                log.error("writing the checkpoint files failed: %s", exc)

    async def write_checkpoint_files(self) -> None:
        """The offset checkpoint files, noted here (where the offsets change) and those that
        changed written in a worker (two fsyncs a file)."""
        logs = self.logs
        files = logs.checkpoint_contents()
        await asyncio.get_running_loop().run_in_executor(None, logs.write_changed_files, files)
