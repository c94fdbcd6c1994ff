"""What a partition log's appends and reads return (Kafka's LogAppendInfo, FetchDataInfo),
the settings its producer state shares and the follower append's offset error.

Named tuples where one is built per append or per read: a frozen dataclass's field-by-field
`__init__` costs several times more.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple

from oncelog.errors import OffsetOutOfRange
from oncelog.fileio import FileRegion
from oncelog.producer_state.manager import DEFAULT_PRODUCER_ID_EXPIRATION_MS
from oncelog.producer_state.tracker import ProducerTracker
from oncelog.storage.txn_index import AbortedTxn


@dataclass(frozen=True, slots=True)
class ProducerSettings:
    """Broker-level producer-state settings every partition shares."""

    expiration_ms: int = DEFAULT_PRODUCER_ID_EXPIRATION_MS
    tracker: ProducerTracker = field(default_factory=ProducerTracker)


class AppendInfo(NamedTuple):
    """What an append stored (a NamedTuple: one is made for every partition of every
    Produce)."""

    base_offset: int
    last_offset: int
    log_append_time: int  # -1 unless the topic uses LogAppendTime
    log_start_offset: int
    duplicate: bool = False


class FollowerAppendInfo(NamedTuple):
    """What `append_as_follower` stored: offsets -1 and no batches when `data` held no
    complete batch. A named tuple: one is made per partition of every replica fetch."""

    first_offset: int
    last_offset: int
    batches: int
    valid_bytes: int
    """Bytes of `data` stored (a partial trailing batch is not)."""
    records: int = 0


class UnexpectedAppendOffset(OffsetOutOfRange):
    """A follower append whose first batch starts below the log end (Kafka's
    UnexpectedAppendOffsetException); nothing was written."""

    def __init__(self, message: str, first_offset: int, last_offset: int) -> None:
        super().__init__(message)
        self.first_offset = first_offset
        self.last_offset = last_offset


class ReadResult(NamedTuple):
    """One read's batches and the log's offsets at that moment (a NamedTuple: built per
    read, where a frozen dataclass's field-by-field `__init__` costs about 5x)."""

    records: bytes | memoryview | FileRegion
    high_watermark: int
    log_start_offset: int
    log_end_offset: int
    last_stable_offset: int = -1
    aborted: list[AbortedTxn] | None = None
    """Aborted transactions overlapping the records (read_committed reads only)."""
