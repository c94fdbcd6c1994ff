"""A connection keeps the file regions of an answer a slow reader has not taken on
descriptors of its own; with none left (EMFILE) it reads them into memory instead."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

from oncelog.fileio import FileRegion
from oncelog.server.connection import Connection


def _connection() -> Connection:
    conn = Connection.__new__(Connection)
    conn._owned_fds = set()
    return conn


def test_waiting_regions_outlive_the_segment_descriptor(tmp_path: Path) -> None:
    path = tmp_path / "segment"
    path.write_bytes(b"0123456789" * 10)
    fd = os.open(path, os.O_RDONLY)
    conn = _connection()
    (kept,) = conn._detached([FileRegion(fd, 10, 20)])
    os.close(fd)  # the segment closes (retention, a deleted topic)
    assert isinstance(kept, FileRegion) and kept.fd in conn._owned_fds
    assert kept.read() == b"01234567890123456789"
    conn._release_regions()
    assert not conn._owned_fds


def test_without_a_descriptor_left_a_region_is_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "segment"
    path.write_bytes(b"abcdefghij")
    fd = os.open(path, os.O_RDONLY)

    def no_descriptor(_fd: int) -> int:
        raise OSError(errno.EMFILE, "Too many open files")

    monkeypatch.setattr(os, "dup", no_descriptor)
    try:
        assert _connection()._detached([b"head", FileRegion(fd, 2, 5)]) == [b"head", b"cdefg"]
    finally:
        os.close(fd)
