"""Time per appended batch of the producer-state hot path, in microseconds.

    .venv/bin/python bench/producer_state_timing.py [--producers 10000] [--rounds 5]

A partition with `--producers` idempotent producers, each with its five cached batches;
then every producer appends `--rounds` more batches, round-robin, as the leader does:
`find_duplicate` (the retry check), `prepare`, `append` (validate + stage), `update`
(apply + LRU touch). The best of three runs is printed, per batch, in CPU time of this
process (`time.process_time`), which other work on a shared machine disturbs less than wall
time.
"""

from __future__ import annotations

import argparse
import time

from oncelog.producer_state.manager import ProducerStateManager
from oncelog.producer_state.tracker import ProducerTracker
from oncelog.protocol.records.batch import BatchHeader
from oncelog.types import TopicPartition


def run(producers: int, rounds: int) -> tuple[float, float]:
    manager = ProducerStateManager(TopicPartition("bench", 0), tracker=ProducerTracker())
    offset = 0
    headers = []
    for r in range(5 + rounds):
        headers.append(
            [
                BatchHeader(offset + 10 * pid, 100, 0, 2, 0, 0, 9, 1, 1, pid, 0, 10 * r, 10)
                for pid in range(producers)
            ]
        )
        offset += 10 * producers
    for row in headers[:5]:
        for header in row:
            info = manager.prepare(header.producer_id)
            info.stage(header)
            manager.update(info)
    start = time.process_time()
    for row in headers[5:]:
        for header in row:
            manager.find_duplicate(header)
    dup = time.process_time() - start
    start = time.process_time()
    for row in headers[5:]:
        for header in row:
            info = manager.prepare(header.producer_id)
            info.append(header)
            manager.update(info)
    append = time.process_time() - start
    n = producers * rounds
    return dup / n * 1e6, append / n * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--producers", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    results = [run(args.producers, args.rounds) for _ in range(3)]
    print(f"producers: {args.producers}, batches timed each: {args.rounds}")
    print(f"find_duplicate per batch: {min(r[0] for r in results):.2f} us")
    print(f"prepare + append + update per batch: {min(r[1] for r in results):.2f} us")


if __name__ == "__main__":
    main()
