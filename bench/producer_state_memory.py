"""Bytes of memory per tracked (partition, producer) entry, measured with tracemalloc.

    .venv/bin/python bench/producer_state_memory.py [--producers 10000]

Each producer gets the five cached batches a busy idempotent producer has, as in the broker.
"""

from __future__ import annotations

import argparse
import tracemalloc

from oncelog.producer_state.manager import ProducerStateManager
from oncelog.producer_state.tracker import ProducerTracker
from oncelog.protocol.records.batch import BatchHeader
from oncelog.types import TopicPartition


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--producers", type=int, default=10_000)
    args = parser.parse_args()
    tracemalloc.start()
    before = tracemalloc.take_snapshot()
    # Both inside the measurement: the tracker holds every partition's records and the LRU.
    tracker = ProducerTracker()
    manager = ProducerStateManager(TopicPartition("bench", 0), tracker=tracker)
    offset = 0
    for seq in range(0, 50, 10):
        for pid in range(args.producers):
            header = BatchHeader(offset, 100, 0, 2, 0, 0, 9, 1, 1, pid, 0, seq, 10)
            info = manager.prepare(pid)
            info.stage(header)
            manager.update(info)
            offset += 10
    after = tracemalloc.take_snapshot()
    used = sum(s.size_diff for s in after.compare_to(before, "filename"))
    print(f"producers: {args.producers}, batches cached each: 5")
    print(f"bytes per (partition, producer) entry incl. LRU tracking: {used / args.producers:.0f}")


if __name__ == "__main__":
    main()
