"""Atomic file replacement, shared by every layer that writes small files."""

from __future__ import annotations

import os
from pathlib import Path


def fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_atomically(path: Path, data: bytes) -> None:
    """Replace `path` with `data` so that a crash leaves the old or the new content."""
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as handle:
        handle.write(data)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(tmp, path)
    fsync_dir(path.parent)


class CorruptFileError(ValueError):
    """A checksummed file is truncated, has a bad checksum or an unknown version."""


class FileRegion:
    """`length` bytes of the open file `fd` from `offset`: a Fetch response's stored batches,
    left in the file so the connection can send them with sendfile (zero copy) or, where the
    transport cannot (TLS), read them at the last moment. Only valid while the segment that
    owns `fd` is open: the connection sends a response holding one before it handles the
    next request, and segments are closed only on the event loop."""

    __slots__ = ("fd", "length", "offset")

    def __init__(self, fd: int, offset: int, length: int) -> None:
        self.fd = fd
        self.offset = offset
        self.length = length

    def __len__(self) -> int:
        return self.length

    def __repr__(self) -> str:
        return f"FileRegion(fd={self.fd}, offset={self.offset}, length={self.length})"

    def read(self) -> bytes:
        """The region's bytes (a short read means the file shrank: an error, since the
        response's framing already counts every byte)."""
        data = os.pread(self.fd, self.length, self.offset)
        if len(data) != self.length:
            raise OSError(f"file region {self!r} shrank: read {len(data)} of {self.length} bytes")
        return data

    def split(self, n: int) -> tuple[FileRegion, FileRegion]:
        """The first `n` bytes and the rest, as two regions of the same file."""
        return (
            FileRegion(self.fd, self.offset, n),
            FileRegion(self.fd, self.offset + n, self.length - n),
        )
