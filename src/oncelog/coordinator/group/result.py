"""What a group-coordinator operation returns: the records to append, then the reply.

Both managers (`membership.py`, `offsets.py`) and the shard (`coordinator.py`) answer with a
`Result`; the broker appends `records` to the group's `__consumer_offsets` partition, replays
them, and only then sends `response` (or `fail(code)` if the append failed).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from oncelog.coordinator.group.records import GroupRecord
from oncelog.errors import ErrorCode


@dataclass
class Result:
    """What an operation produced: records to persist first, then `response` (maybe a Waiter).

    If the append fails, the broker answers `fail(code)` instead (when given).
    """

    response: Any
    records: list[GroupRecord] = field(default_factory=list)
    fail: Callable[[ErrorCode], Any] | None = None
