"""What the coordinators' internal topics (`__consumer_offsets`, `__transaction_state`) share:
their configs and the replay of a partition that rebuilds a coordinator at startup."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from typing import TypeVar

from oncelog.storage.partition_log import PartitionLog

log = logging.getLogger(__name__)

T = TypeVar("T")

#: Kafka compacts these topics; we do not compact yet, so nothing may expire by time either.
INTERNAL_TOPIC_CONFIGS = {
    "cleanup.policy": "compact",
    "retention.ms": "-1",
    "segment.bytes": "104857600",
}
READ_CHUNK = 1 << 20


def read_entries(
    plog: PartitionLog, decode: Callable[[bytes | memoryview], tuple[list[T], int]]
) -> Iterator[T]:
    """Every entry `decode` finds in the partition, from its start to the high watermark.

    A batch that cannot be decoded stops the replay there (logged): later entries would be
    applied on top of a gap.
    """
    offset = plog.log_start_offset
    while offset < plog.high_watermark:
        data = plog.read(offset, READ_CHUNK).records
        if not data:
            return
        entries, next_offset = decode(data)
        if next_offset <= offset:
            log.error("%s: cannot decode the batch at offset %d; stop loading", plog.tp, offset)
            return
        offset = next_offset
        yield from entries
