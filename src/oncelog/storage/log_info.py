"""What a partition log's appends take and return (Kafka's AppendOrigin, LogAppendInfo) and
its reads return (FetchDataInfo), the settings its producer state shares and the follower
append's offset error.

Named tuples where one is built per append or per read: a frozen dataclass's field-by-field
`__init__` costs several times more.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
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


class AppendOrigin(Enum):
    """Who writes to a partition (Kafka's AppendOrigin), which decides what is checked."""

    CLIENT = "client"
    """A producer's batches: a retry within the last five batches is answered as the
    duplicate it is, sequence numbers must follow on, epochs are fenced."""
    COORDINATOR = "coordinator"
    """A coordinator of this broker: its own records (several batches, no sequence rules) or
    a transaction marker (`EndTxnMarker`); epochs are still fenced."""
    REPLICATION = "replication"
    """A follower storing the leader's batches byte for byte, with the leader's offsets and
    leader epochs: framing and CRC are checked, producer state is replayed as recovery does."""


@dataclass(frozen=True, slots=True)
class EndTxnMarker:
    """A COMMIT or ABORT control batch ending a producer's transaction on one partition
    (Kafka's EndTransactionMarker), which only a coordinator writes."""

    producer_id: int
    producer_epoch: int
    coordinator_epoch: int
    commit: bool


class AppendInfo(NamedTuple):
    """What an append stored (a NamedTuple: one is made for every partition of every
    Produce)."""

    base_offset: int
    last_offset: int
    log_append_time: int  # -1 unless the topic uses LogAppendTime
    log_start_offset: int
    duplicate: bool = False


class FollowerAppendInfo(NamedTuple):
    """What a follower's append (origin REPLICATION) stored: offsets -1 and no batches when
    `data` held no complete batch. A named tuple: one is made per partition of every
    replica fetch."""

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
