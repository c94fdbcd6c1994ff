"""Small durable files: written atomically (tmp + fsync + rename) and checksummed.

Everything the broker writes except the append-only segments goes through here, so a crash
leaves either the old or the new version of a file, and a damaged file is detected.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import Any

from crc32c import crc32c

from oncelog.fileio import CorruptFileError, fsync_dir, write_atomically

__all__ = ["CorruptFileError", "fsync_dir", "write_atomically"]

_CHECKED_MAGIC = b"OLCK"
_CHECKED_HEADER = struct.Struct(">4sHI")  # magic, version, crc32c of the payload


def encode_checked(payload: bytes, version: int) -> bytes:
    return _CHECKED_HEADER.pack(_CHECKED_MAGIC, version, crc32c(payload)) + payload


def decode_checked(data: bytes, versions: tuple[int, ...]) -> tuple[int, bytes]:
    """Return (version, payload) of a checksummed blob or raise CorruptFileError."""
    if len(data) < _CHECKED_HEADER.size:
        raise CorruptFileError("file shorter than its header")
    magic, version, crc = _CHECKED_HEADER.unpack_from(data, 0)
    payload = data[_CHECKED_HEADER.size :]
    if magic != _CHECKED_MAGIC:
        raise CorruptFileError("bad magic")
    if version not in versions:
        raise CorruptFileError(f"unknown version {version}")
    if crc32c(payload) != crc:
        raise CorruptFileError("checksum mismatch")
    return int(version), payload


def write_checked_json(path: Path, value: Any, version: int = 1) -> None:
    payload = json.dumps(value, sort_keys=True, separators=(",", ":")).encode()
    write_atomically(path, encode_checked(payload, version))


def read_checked_json(path: Path, versions: tuple[int, ...] = (1,)) -> Any:
    """The JSON value of a checksummed file; a damaged file's error names the file."""
    try:
        _, payload = decode_checked(path.read_bytes(), versions)
        return json.loads(payload)
    except CorruptFileError as exc:
        raise CorruptFileError(f"{path}: {exc}") from exc
    except ValueError as exc:
        raise CorruptFileError(f"{path}: {exc}") from exc


def write_offset_checkpoint(path: Path, offsets: dict[tuple[str, int], int]) -> None:
    """Kafka's text checkpoint format: version, count, then `topic partition offset` lines."""
    lines = ["0", str(len(offsets))]
    lines += [f"{t} {p} {o}" for (t, p), o in sorted(offsets.items())]
    write_atomically(path, ("\n".join(lines) + "\n").encode())


def read_offset_checkpoint(path: Path) -> dict[tuple[str, int], int]:
    """Read a checkpoint; a missing or malformed file reads as empty (recovery then scans)."""
    try:
        lines = path.read_text(encoding="utf-8").split("\n")
        if lines[0].strip() != "0":
            return {}
        count = int(lines[1])
        out: dict[tuple[str, int], int] = {}
        for line in lines[2 : 2 + count]:
            topic, partition, offset = line.split(" ")
            out[(topic, int(partition))] = int(offset)
        if len(out) != count:
            return {}
        return out
    except (OSError, ValueError, IndexError):
        return {}
