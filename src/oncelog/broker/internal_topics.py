"""What the coordinators' internal topics (`__consumer_offsets`, `__transaction_state`) share:
their configs and the replay of a partition that rebuilds a coordinator at startup."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from typing import TypeVar

from oncelog.storage.latest import read_latest
from oncelog.storage.partition_log import PartitionLog

log = logging.getLogger(__name__)

T = TypeVar("T")

#: The group coordinator's topic (Kafka's name).
OFFSETS_TOPIC = "__consumer_offsets"

#: oncelog's own: an internal topic's active segment rolls (KIP-354) once its first record
#: is a minute old, so the cleaner reaches it; Kafka leaves this at its default (never).
INTERNAL_MAX_COMPACTION_LAG_MS = 60_000


def internal_topic_configs(segment_bytes: int) -> dict[str, str]:
    """Compacted, as in Kafka, and never expired by time.

    The active segment is never cleaned, so it is what a start replays beyond the live keys.
    Two oncelog choices keep it small: `segment_bytes` (offsets.topic.segment.bytes /
    transaction.state.log.segment.bytes, 4 MiB by default instead of Kafka's 100 MiB) and a
    max.compaction.lag.ms of a minute (bench/RESULTS.md section 7: a day of commits and
    transactions restarts in 7.5 s with it, 16.7 s without).
    """
    return {
        "cleanup.policy": "compact",
        "retention.ms": "-1",
        "segment.bytes": str(segment_bytes),
        "max.compaction.lag.ms": str(INTERNAL_MAX_COMPACTION_LAG_MS),
    }
READ_CHUNK = 1 << 20


def read_entries(
    plog: PartitionLog,
    decode: Callable[[bytes | memoryview], tuple[list[T], int]],
    *,
    to_log_end: bool = False,
) -> Iterator[T]:
    """Every entry `decode` finds in the partition, from its start to the high watermark,
    as a cleaning would leave the log (`read_latest`): a record superseded by a later one of
    its key is not decoded, which is what makes a start fast on a log the cleaner has not
    caught up with (the active segment is never cleaned).

    A batch that cannot be decoded stops the replay there (logged): later entries would be
    applied on top of a gap. `to_log_end`: past the high watermark to the log end (a new
    leader's load, see `read_latest`).
    """
    for data in read_latest(plog, READ_CHUNK, to_log_end=to_log_end):
        entries, next_offset = decode(data)
        if next_offset < 0:
            log.error("%s: cannot decode stored batches; stop loading", plog.tp)
            return
        yield from entries
