"""`replication-offset-checkpoint`: the high watermark of each replicated partition of a log
dir, in Kafka's text format:

    0
    <count>
    <topic> <partition> <offset>
    ...

Written atomically (tmp + fsync + rename + directory fsync). Topic names cannot hold spaces
(`config.validate_topic_name` allows only `[a-zA-Z0-9._-]`), so a line splits in three.
A missing file reads as empty; a malformed one as empty with a warning: the high watermarks
then start at each log's start and the leader moves them up again.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from pathlib import Path

from oncelog.fileio import write_atomically
from oncelog.storage.checkpoint_text import entry_lines, format_entries
from oncelog.types import TopicPartition

log = logging.getLogger(__name__)

REPLICATION_CHECKPOINT_FILE = "replication-offset-checkpoint"


def write_offsets(path: Path, offsets: Mapping[TopicPartition, int]) -> None:
    """Replace the file with `offsets`; ValueError for a topic name a line cannot hold."""
    lines = []
    for (topic, partition), offset in sorted(offsets.items()):
        if not topic or any(c.isspace() for c in topic):
            raise ValueError(f"topic name {topic!r} cannot be written to {path.name}")
        lines.append(f"{topic} {partition} {offset}")
    write_atomically(path, format_entries(lines).encode("utf-8"))


def read_offsets(path: Path) -> dict[TopicPartition, int]:
    """The offsets in the file; {} if it is missing, {} with a warning if it is malformed."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return {}
    except (OSError, UnicodeDecodeError) as exc:
        log.warning("%s: unreadable, ignored: %s", path, exc)
        return {}
    try:
        return parse_offsets(text)
    except ValueError as exc:
        log.warning("%s: malformed, ignored: %s", path, exc)
        return {}


def parse_offsets(text: str) -> dict[TopicPartition, int]:
    lines = entry_lines(text)
    out: dict[TopicPartition, int] = {}
    for line in lines:
        parts = line.split(" ")
        if len(parts) != 3 or not parts[0]:
            raise ValueError(f"malformed line {line!r}")
        partition, offset = int(parts[1]), int(parts[2])
        if partition < 0 or offset < 0:
            raise ValueError(f"negative value in line {line!r}")
        out[TopicPartition(parts[0], partition)] = offset
    if len(out) != len(lines):
        raise ValueError("a partition is listed twice")
    return out
