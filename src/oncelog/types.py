"""Small value types shared by every layer."""

from __future__ import annotations

from typing import NamedTuple


class TopicPartition(NamedTuple):
    """A partition of a topic; the key of almost everything a broker keeps."""

    topic: str
    partition: int

    def __str__(self) -> str:
        return f"{self.topic}-{self.partition}"


# Sentinels of the Kafka protocol.
LATEST_TIMESTAMP = -1
EARLIEST_TIMESTAMP = -2
MAX_TIMESTAMP = -3
EARLIEST_LOCAL_TIMESTAMP = -4
NO_TIMESTAMP = -1
CONSUMER_REPLICA_ID = -1
DEBUGGING_REPLICA_ID = -2
# Isolation levels of Fetch and ListOffsets.
READ_UNCOMMITTED = 0
READ_COMMITTED = 1
