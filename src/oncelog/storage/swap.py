"""Replacing segments with cleaned ones so that a crash at any point leaves a whole log.

Kafka's suffixes: the cleaner writes `<base>.log.cleaned` (and `.index.cleaned`,
`.timeindex.cleaned`, `.txnindex.cleaned`), fsynced. The swap then goes:

1. `<base>.log.cleaned` -> `<base>.log.swap`: the commit point (indexes follow it);
2. the old segments are deleted, each `.log` first, so a `.log` that survives a crash
   always has its own indexes (index files without a `.log` are strays and removed): their
   files are renamed to `<name>.deleted`, removed later off the event loop, as other
   deleted segments are (a load removes any left);
3. `<base>.log.swap` -> `<base>.log` first, then the index `.swap` files.

The log's swap (`SwapState.run`, `swap_state.py`) runs these steps in a worker thread: step 1
(`commit`, one rename) under the log's lock, so a truncation, close or deletion either
comes before it (and the swap stops) or waits for the committed group to be `complete`d.

`recover` (at load, before segments are read) finishes or forgets an interrupted swap:
without a `.log.swap` nothing was committed and `.cleaned` files are deleted; with one, the
old segments it replaces (those starting in its offset range, and its own base) are
deleted and the swap renamed into place; index `.swap` files without a `.log.swap` belong
to a swap whose log was already renamed (step 3) and are renamed too. The old segments
hold the same data as the cleaned one before cleaning, so a recovered log is either cleaned
or not, per group of segments, never a mix inside one group.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterable
from pathlib import Path

from oncelog.fileio import fsync_dir
from oncelog.protocol.records.batch import HEADER_SIZE, MIN_BATCH_LENGTH, parse_header
from oncelog.storage.segment import DELETED_SUFFIX

CLEANED = ".cleaned"
SWAP = ".swap"
LOG = ".log"
INDEXES = (".index", ".timeindex", ".txnindex")

#: Called with a step name between the steps of a swap (tests inject crashes here).
CrashHook = Callable[[str], None]


def _name(base: int, kind: str, state: str = "") -> str:
    return f"{base:020d}{kind}{state}"


def _no_crash(step: str) -> None:
    return None


def cleaned_files(directory: Path, base: int) -> list[Path]:
    return [directory / _name(base, kind, CLEANED) for kind in (LOG, *INDEXES)]


def discard_cleaned(directory: Path, bases: Iterable[int]) -> None:
    """Delete the `.cleaned` files of an abandoned cleaning (missing ones are fine)."""
    for base in bases:
        for path in cleaned_files(directory, base):
            with contextlib.suppress(OSError):
                path.unlink()


def _segment_files(directory: Path, base: int) -> list[Path]:
    """A segment's files in the order they are deleted, the `.log` first: a crash part-way
    leaves stray indexes, never an index-less log."""
    return [directory / _name(base, kind) for kind in (LOG, *INDEXES)]


def _delete_segment(directory: Path, base: int) -> None:
    for path in _segment_files(directory, base):
        with contextlib.suppress(FileNotFoundError):
            path.unlink()


def _retire_segment(directory: Path, base: int) -> None:
    """Rename a replaced segment's files to `<name>.deleted` for the caller to remove later
    (a load removes any it finds)."""
    for path in _segment_files(directory, base):
        with contextlib.suppress(FileNotFoundError):
            os.replace(path, path.with_name(path.name + DELETED_SUFFIX))


def _rename_if_present(src: Path, dst: Path) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.replace(src, dst)


def commit(directory: Path, base: int) -> None:
    """Step 1, the commit point: from here a crash leaves the cleaned segment (a load
    finishes the swap). The caller holds the log's lock, so nothing cancels it half-way."""
    os.replace(directory / _name(base, LOG, CLEANED), directory / _name(base, LOG, SWAP))


def complete(
    directory: Path, base: int, old_bases: Iterable[int], crash: CrashHook = _no_crash
) -> list[Path]:
    """Steps 2 and 3 of a committed swap (three directory fsyncs: a worker thread's job);
    the old segments' files are renamed to `.deleted` and returned, for the caller to
    remove later. Nothing else may rename or delete these files meanwhile: the log pins
    the old segments until the swap is applied (`SwapState.begin`).

    Safe to run again after a failure part-way (a disk error): once the `.log.swap` is
    renamed, `<base>.log` is the cleaned segment, so steps up to that rename are not
    repeated (they would retire it as an old one), only what follows."""
    log_swap = directory / _name(base, LOG, SWAP)
    if log_swap.exists():
        for kind in INDEXES:
            _rename_if_present(
                directory / _name(base, kind, CLEANED), directory / _name(base, kind, SWAP)
            )
        fsync_dir(directory)
        crash("indexes-swap")
        for old in old_bases:
            _retire_segment(directory, old)
            crash("deleted-old")
        fsync_dir(directory)
        os.replace(log_swap, directory / _name(base, LOG))
        crash("log-renamed")
    for kind in INDEXES:
        _rename_if_present(directory / _name(base, kind, SWAP), directory / _name(base, kind))
    fsync_dir(directory)
    crash("done")
    return [
        retired
        for old in old_bases
        for path in _segment_files(directory, old)
        if (retired := path.with_name(path.name + DELETED_SUFFIX)).exists()
    ]


def swap_in(
    directory: Path, base: int, old_bases: Iterable[int], crash: CrashHook = _no_crash
) -> list[Path]:
    """Replace the segments `old_bases` by the cleaned segment `base` on disk (steps 1-3)
    in one go (`commit`, then `complete`)."""
    commit(directory, base)
    crash("log-swap")
    return complete(directory, base, old_bases, crash)


def _base_of(name: str, suffix: str) -> int | None:
    stem = name[: -len(suffix)]
    return int(stem) if name.endswith(suffix) and stem.isdigit() else None


def _next_offset(path: Path, base: int) -> int:
    """Offset after the last whole batch of a segment file (`base` if it has none); reads
    headers only."""
    next_offset = base
    fd = os.open(path, os.O_RDONLY)
    try:
        size = os.fstat(fd).st_size
        pos = 0
        while pos + HEADER_SIZE <= size:
            header = parse_header(os.pread(fd, HEADER_SIZE, pos))
            if header.batch_length < MIN_BATCH_LENGTH or pos + header.size > size:
                break
            next_offset = header.next_offset
            pos += header.size
    finally:
        os.close(fd)
    return next_offset


def recover(directory: Path) -> list[int]:
    """Finish or forget interrupted swaps in a partition directory; return the bases of the
    swaps completed."""
    names = set(os.listdir(directory))
    logs = sorted(b for n in names if (b := _base_of(n, LOG)) is not None)
    completed = [
        _finish_committed(directory, base, logs)
        for name in sorted(names)
        if (base := _base_of(name, LOG + SWAP)) is not None
    ]
    for name in os.listdir(directory):
        for kind in INDEXES:
            base = _base_of(name, kind + SWAP)
            if base is not None:  # step 3 was under way: the `.log` is already the new one
                os.replace(directory / name, directory / _name(base, kind))
    names = set(os.listdir(directory))
    for name in names:
        if name.endswith(CLEANED) or _is_stray_index(name, names):
            (directory / name).unlink()
    if completed or any(n.endswith((CLEANED, SWAP)) for n in names):
        fsync_dir(directory)
    return completed


def _finish_committed(directory: Path, base: int, logs: list[int]) -> int:
    """Steps 2 and 3 of a swap whose `.log.swap` exists (step 3 starts with renaming it, so
    every regular file at `base` is still the old segment's)."""
    end = max(_next_offset(directory / _name(base, LOG, SWAP), base), base + 1)
    for old in logs:
        if base <= old < end:
            _delete_segment(directory, old)
    for kind in INDEXES:
        with contextlib.suppress(FileNotFoundError):
            (directory / _name(base, kind)).unlink()
        _rename_if_present(
            directory / _name(base, kind, CLEANED), directory / _name(base, kind, SWAP)
        )
    os.replace(directory / _name(base, LOG, SWAP), directory / _name(base, LOG))
    for kind in INDEXES:
        _rename_if_present(directory / _name(base, kind, SWAP), directory / _name(base, kind))
    return base


def _is_stray_index(name: str, names: set[str]) -> bool:
    """An index file whose `.log` is gone (a segment deleted by a swap, `.log` first)."""
    for kind in INDEXES:
        base = _base_of(name, kind)
        if base is not None:
            return _name(base, LOG) not in names
    return False
