"""Kafka's text checkpoint files (`leader-epoch-checkpoint`, `replication-offset-checkpoint`):
a version line (0), a count line, then one entry per line. The callers own the entries'
shape; the frame and its checks live here once."""

from __future__ import annotations

VERSION = 0


def format_entries(entries: list[str]) -> str:
    return "\n".join([str(VERSION), str(len(entries)), *entries]) + "\n"


def entry_lines(text: str) -> list[str]:
    """The entry lines of a checkpoint's text; ValueError names what is wrong."""
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    if len(lines) < 2:
        raise ValueError("shorter than its header")
    if lines[0].strip() != str(VERSION):
        raise ValueError(f"unknown version {lines[0].strip()!r}")
    count = int(lines[1])
    if count < 0 or len(lines) != 2 + count:
        raise ValueError(f"expected {count} entries, found {len(lines) - 2} lines")
    return lines[2:]
