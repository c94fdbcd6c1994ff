"""Reads for the wire (`regions=True`): a large span comes back as a FileRegion of the segment,
cut at whole batches from the offset index, and holds the same bytes as the copying read."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from oncelog.clock import ManualClock
from oncelog.config import LogConfig
from oncelog.fileio import FileRegion
from oncelog.protocol.records.batch import span_batches
from oncelog.storage.partition_log import PartitionLog
from oncelog.storage.segment import REGION_MIN_BYTES
from tests.storage.util import T0, append, open_log


def _log(root: Path, seed: int) -> PartitionLog:
    """~600 KB in batches of 1-30 records of up to 2 KB, segments of 256 KB, index every 4 KB."""
    rng = random.Random(seed)
    config = LogConfig(segment_bytes=256 * 1024, index_interval_bytes=4096)
    plog = open_log(root, config, ManualClock(T0))
    while plog.active.size + sum(s.size for s in plog.segments[:-1]) < 600_000:
        n = rng.randint(1, 30)
        append(plog, [rng.randbytes(rng.randint(0, 2048)) for _ in range(n)])
    return plog


@pytest.fixture(scope="module")
def logs(tmp_path_factory: pytest.TempPathFactory) -> list[PartitionLog]:
    return [_log(tmp_path_factory.mktemp(f"log{seed}"), seed) for seed in range(3)]


def _bytes(records: bytes | memoryview | FileRegion) -> bytes:
    return records.read() if isinstance(records, FileRegion) else bytes(records)


def test_region_reads_are_a_whole_batch_prefix_of_copying_reads(
    logs: list[PartitionLog],
) -> None:
    rng = random.Random(11)
    regions = shorter = 0
    for _ in range(600):
        plog = rng.choice(logs)
        end = plog.log_end_offset
        offset = rng.randrange(end)
        upper = rng.choice([end, rng.randint(offset + 1, end)])
        max_bytes = rng.choice([rng.randint(0, 300_000), rng.randint(0, 40_000)])
        min_one = rng.random() < 0.5
        copied = plog.read(offset, max_bytes, upper, min_one=min_one)
        wire = plog.read(offset, max_bytes, upper, min_one=min_one, regions=True)
        want, got = _bytes(copied.records), _bytes(wire.records)
        assert (wire.high_watermark, wire.log_start_offset, wire.log_end_offset) == (
            copied.high_watermark,
            copied.log_start_offset,
            copied.log_end_offset,
        )
        if not isinstance(wire.records, FileRegion):
            assert got == want
            continue
        regions += 1
        shorter += len(got) < len(want)
        # Whole batches from the same start, at most one index interval plus one batch
        # (30 records of up to 2 KB) short of what the copying read returns.
        assert len(got) >= REGION_MIN_BYTES
        assert want.startswith(got)
        assert span_batches(got)[0] == len(got)
        assert len(want) - len(got) <= 4096 + 30 * 2100
    assert regions > 100 and shorter > 0, (regions, shorter)


def test_region_of_a_tail_read_ends_at_the_log_end(tmp_path: Path) -> None:
    plog = _log(tmp_path, 9)
    segment = plog.active
    first = segment.base_offset
    wire = plog.read(first, 10 << 20, regions=True)
    assert isinstance(wire.records, FileRegion)
    assert wire.records.length == segment.size
    assert wire.records.read() == _bytes(plog.read(first, 10 << 20).records)


def test_region_stops_below_an_upper_bound(tmp_path: Path) -> None:
    plog = _log(tmp_path, 5)
    segment = plog.active
    batches = segment.headers_from(segment.base_offset)
    pos, header = batches[len(batches) * 3 // 4]
    wire = plog.read(segment.base_offset, 10 << 20, header.base_offset, regions=True)
    assert isinstance(wire.records, FileRegion)
    assert wire.records.length == pos
    assert span_batches(wire.records.read())[1] == header.base_offset


def test_small_reads_are_copied(tmp_path: Path) -> None:
    plog = _log(tmp_path, 2)
    wire = plog.read(plog.log_end_offset - 1, REGION_MIN_BYTES - 1, regions=True)
    assert not isinstance(wire.records, FileRegion)
