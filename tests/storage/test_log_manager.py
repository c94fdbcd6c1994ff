"""LogManager: clean-shutdown marker, recovery on startup, checkpoints in Kafka's format."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from oncelog.clock import ManualClock
from oncelog.config import LogConfig
from oncelog.protocol.records.batch import iter_batches
from oncelog.storage.files import read_offset_checkpoint, write_offset_checkpoint
from oncelog.storage.log_manager import (
    CLEAN_SHUTDOWN_FILE,
    LOG_START_FILE,
    RECOVERY_POINT_FILE,
    LogManager,
)
from oncelog.types import TopicPartition
from tests.storage.util import T0, append, batch_offsets, make_batch, read_all

A0 = TopicPartition("a", 0)
A1 = TopicPartition("a", 1)
B0 = TopicPartition("b.x-y", 0)
CONFIG = LogConfig(segment_bytes=3 * len(make_batch([b"v" * 10])))


def _config_for(topic: str) -> LogConfig | None:
    return CONFIG if topic in ("a", "b.x-y") else None


def _populated(log_dir: Path) -> LogManager:
    manager = LogManager([log_dir], ManualClock(T0))
    manager.startup(_config_for)
    for tp, count in ((A0, 5), (A1, 2), (B0, 7)):
        plog = manager.create(tp, CONFIG)
        for _ in range(count):
            append(plog, [b"v" * 10])
    return manager


def test_create_layout_and_checkpoints_on_shutdown(tmp_path: Path) -> None:
    manager = _populated(tmp_path)
    plog = manager.get(B0)
    assert plog is not None
    plog.delete_records_before(4)
    assert sorted(p.name for p in tmp_path.iterdir() if p.is_dir()) == ["a-0", "a-1", "b.x-y-0"]
    assert not (tmp_path / CLEAN_SHUTDOWN_FILE).exists()
    manager.shutdown()
    assert (tmp_path / CLEAN_SHUTDOWN_FILE).exists()
    assert (tmp_path / RECOVERY_POINT_FILE).read_text() == "0\n3\na 0 5\na 1 2\nb.x-y 0 7\n"
    assert (tmp_path / LOG_START_FILE).read_text() == "0\n3\na 0 0\na 1 0\nb.x-y 0 4\n"
    assert sorted(p.name for p in (tmp_path / "b.x-y-0").iterdir() if p.suffix == ".log") == [
        "00000000000000000003.log",
        "00000000000000000006.log",
    ]


def test_startup_with_the_marker_is_clean_and_removes_it(tmp_path: Path) -> None:
    _populated(tmp_path).shutdown()
    manager = LogManager([tmp_path], ManualClock(T0))
    manager.startup(_config_for)
    assert manager.clean_start
    assert not (tmp_path / CLEAN_SHUTDOWN_FILE).exists()
    ends = {tp: plog.log_end_offset for tp, plog in manager.partitions()}
    assert ends == {A0: 5, A1: 2, B0: 7}
    assert manager.create(A0, CONFIG) is manager.get(A0)
    plog = manager.get(A0)
    assert plog is not None and plog.recovery_point == 5
    assert append(plog, [b"z"]).base_offset == 5
    manager.shutdown()


def test_clean_start_does_not_scan_but_unclean_start_repairs(tmp_path: Path) -> None:
    _populated(tmp_path).shutdown()
    # garble the CRC-covered part of A0's last batch (the last indexed region is only
    # checked for plausibility when the shutdown was clean)
    log_file = tmp_path / "a-0" / "00000000000000000003.log"
    raw = bytearray(log_file.read_bytes())
    last_pos = list(iter_batches(raw))[-1][0]
    raw[-1] ^= 0xFF
    log_file.write_bytes(raw)

    manager = LogManager([tmp_path], ManualClock(T0))
    manager.startup(_config_for)
    plog = manager.get(A0)
    assert plog is not None and plog.log_end_offset == 5
    assert log_file.read_bytes() == bytes(raw)
    for _, other in manager.partitions():
        other.close(flush=False)  # crash: no marker

    manager = LogManager([tmp_path], ManualClock(T0))
    manager.startup(_config_for)
    assert not manager.clean_start
    plog = manager.get(A0)
    assert plog is not None and plog.log_end_offset == 4
    assert log_file.stat().st_size == last_pos
    assert batch_offsets(read_all(plog)) == [(n, n) for n in range(4)]
    assert append(plog, [b"z"]).base_offset == 4
    # the startup checkpoint reflects the recovered end
    assert read_offset_checkpoint(tmp_path / RECOVERY_POINT_FILE)[A0] == 4
    manager.shutdown()


def test_unclean_start_trusts_segments_below_the_recovery_point(tmp_path: Path) -> None:
    _populated(tmp_path).shutdown()
    (tmp_path / CLEAN_SHUTDOWN_FILE).unlink()
    # damage A0's first segment, which ends below its checkpointed recovery point (5)
    first = tmp_path / "a-0" / "00000000000000000000.log"
    raw = bytearray(first.read_bytes())
    raw[-1] ^= 0xFF
    first.write_bytes(raw)
    manager = LogManager([tmp_path], ManualClock(T0))
    manager.startup(_config_for)
    plog = manager.get(A0)
    assert plog is not None and plog.log_end_offset == 5
    for _, other in manager.partitions():
        other.close(flush=False)

    # without a recovery point checkpoint everything is scanned
    (tmp_path / RECOVERY_POINT_FILE).unlink()
    manager = LogManager([tmp_path], ManualClock(T0))
    manager.startup(_config_for)
    plog = manager.get(A0)
    assert plog is not None and plog.log_end_offset == 2
    assert [s.base_offset for s in plog.segments] == [0]
    assert not (tmp_path / "a-0" / "00000000000000000003.log").exists()
    manager.shutdown()


def test_torn_tail_repaired_on_unclean_startup(tmp_path: Path) -> None:
    manager = _populated(tmp_path)
    manager.checkpoint()
    for _, plog in manager.partitions():
        plog.close(flush=False)  # crash before shutdown
    tail = tmp_path / "b.x-y-0" / "00000000000000000006.log"
    tail.write_bytes(tail.read_bytes()[:-20])
    manager = LogManager([tmp_path], ManualClock(T0))
    manager.startup(_config_for)
    plog = manager.get(B0)
    assert plog is not None
    assert plog.log_end_offset == 6
    assert tail.stat().st_size == 0
    assert append(plog, [b"z"]).base_offset == 6
    manager.shutdown()


def test_log_start_offset_restored_from_its_checkpoint(tmp_path: Path) -> None:
    manager = _populated(tmp_path)
    plog = manager.get(A0)
    assert plog is not None
    plog.delete_records_before(4)
    manager.shutdown()
    manager = LogManager([tmp_path], ManualClock(T0))
    manager.startup(_config_for)
    plog = manager.get(A0)
    assert plog is not None and plog.log_start_offset == 4
    manager.shutdown()


def test_unknown_topics_are_ignored_and_kept_on_disk(tmp_path: Path) -> None:
    _populated(tmp_path).shutdown()
    manager = LogManager([tmp_path], ManualClock(T0))
    manager.startup(lambda topic: CONFIG if topic == "a" else None)
    assert sorted(tp for tp, _ in manager.partitions()) == [A0, A1]
    assert (tmp_path / "b.x-y-0").is_dir()
    manager.shutdown()
    assert (tmp_path / RECOVERY_POINT_FILE).read_text() == "0\n2\na 0 5\na 1 2\n"


def test_retention_checkpoints_the_new_log_start(tmp_path: Path) -> None:
    config = LogConfig(segment_bytes=CONFIG.segment_bytes, retention_bytes=0)
    manager = LogManager([tmp_path], ManualClock(T0))
    manager.startup(lambda _: config)
    plog = manager.create(A0, config)
    for _ in range(7):
        append(plog, [b"v" * 10])
    assert manager.apply_retention() == 2
    assert read_offset_checkpoint(tmp_path / LOG_START_FILE) == {A0: 6}
    manager.shutdown()


def test_delete_removes_the_directory(tmp_path: Path) -> None:
    manager = _populated(tmp_path)
    manager.delete(A1)
    assert manager.get(A1) is None
    assert not (tmp_path / "a-1").exists()
    manager.shutdown()
    assert read_offset_checkpoint(tmp_path / RECOVERY_POINT_FILE) == {A0: 5, B0: 7}


def test_partitions_spread_over_log_dirs(tmp_path: Path) -> None:
    dirs = [tmp_path / "d1", tmp_path / "d2"]
    manager = LogManager(dirs, ManualClock(T0))
    manager.startup(_config_for)
    for tp in (A0, A1, B0):
        append(manager.create(tp, CONFIG), [b"v"])
    manager.shutdown()
    assert (dirs[0] / "a-0").is_dir() and (dirs[1] / "a-1").is_dir()
    assert (dirs[0] / "b.x-y-0").is_dir()
    assert all((d / CLEAN_SHUTDOWN_FILE).exists() for d in dirs)
    assert read_offset_checkpoint(dirs[0] / RECOVERY_POINT_FILE) == {A0: 1, B0: 1}
    assert read_offset_checkpoint(dirs[1] / RECOVERY_POINT_FILE) == {A1: 1}
    manager = LogManager(dirs, ManualClock(T0))
    manager.startup(_config_for)
    assert {tp: p.log_end_offset for tp, p in manager.partitions()} == {A0: 1, A1: 1, B0: 1}
    manager.shutdown()


# -- checkpoint files -----------------------------------------------------------------------


def test_offset_checkpoint_round_trip_and_format(tmp_path: Path) -> None:
    path = tmp_path / "cp"
    offsets = {("b", 1): 7, ("a", 10): 0, ("a", 2): 123456789012}
    write_offset_checkpoint(path, offsets)
    assert path.read_text() == "0\n3\na 2 123456789012\na 10 0\nb 1 7\n"
    assert read_offset_checkpoint(path) == offsets
    assert not (tmp_path / "cp.tmp").exists()
    write_offset_checkpoint(path, {})
    assert path.read_text() == "0\n0\n"
    assert read_offset_checkpoint(path) == {}


@pytest.mark.parametrize(
    "content",
    [
        "",
        "1\n1\na 0 5\n",  # unknown version
        "0\n2\na 0 5\n",  # fewer entries than announced
        "0\nx\n",
        "0\n1\na 0\n",
        "0\n1\na 0 five\n",
        "0\n2\na 0 5\na 0 6\n",  # a duplicate entry
    ],
)
def test_malformed_checkpoint_reads_as_empty(tmp_path: Path, content: str) -> None:
    path = tmp_path / "cp"
    path.write_text(content)
    assert read_offset_checkpoint(path) == {}


def test_missing_checkpoint_reads_as_empty(tmp_path: Path) -> None:
    assert read_offset_checkpoint(tmp_path / "nope") == {}


def test_kafka_written_checkpoint_is_read(tmp_path: Path) -> None:
    path = tmp_path / "cp"
    path.write_text("0\n2\n__consumer_offsets 3 42\nmy-topic 0 9\n")
    assert read_offset_checkpoint(path) == {("__consumer_offsets", 3): 42, ("my-topic", 0): 9}


def test_recreated_topic_does_not_inherit_a_stray_directory(tmp_path: Path) -> None:
    # "b.x-y" was deleted from the metadata but the broker stopped before its directory went
    _populated(tmp_path).shutdown()
    dirs = [tmp_path / "d1", tmp_path]
    manager = LogManager(dirs, ManualClock(T0))
    manager.startup(lambda topic: CONFIG if topic == "a" else None)
    assert manager.get(B0) is None
    plog = manager.create(B0, CONFIG)  # a new topic of the same name starts empty
    assert (plog.log_start_offset, plog.log_end_offset) == (0, 0)
    assert plog.directory == dirs[0] / "b.x-y-0"
    assert not (tmp_path / "b.x-y-0").exists()
    append(plog, [b"new"])
    manager.shutdown()
    manager = LogManager(dirs, ManualClock(T0))
    manager.startup(_config_for)
    plog = manager.get(B0)
    assert plog is not None and plog.log_end_offset == 1
    assert batch_offsets(read_all(plog)) == [(0, 0)]
    manager.shutdown()


def test_retention_without_checkpoint_leaves_the_files_to_the_caller(tmp_path: Path) -> None:
    """The broker's retention pass writes the files in a worker: noted, then written."""
    config = LogConfig(segment_bytes=CONFIG.segment_bytes, retention_bytes=0)
    manager = LogManager([tmp_path], ManualClock(T0))
    manager.startup(lambda _: config)
    plog = manager.create(A0, config)
    for _ in range(7):
        append(plog, [b"v" * 10])
    manager.checkpoint()
    assert manager.apply_retention(checkpoint=False) == 2
    assert read_offset_checkpoint(tmp_path / LOG_START_FILE) == {A0: 0}
    manager.write_changed_files(manager.checkpoint_contents())
    assert read_offset_checkpoint(tmp_path / LOG_START_FILE) == {A0: 6}
    manager.shutdown()


def test_a_stale_log_start_file_after_retention_loads_from_the_first_segment(
    tmp_path: Path,
) -> None:
    """A crash between retention and the file's write: the log starts at its first segment."""
    config = LogConfig(segment_bytes=CONFIG.segment_bytes, retention_bytes=0)
    manager = LogManager([tmp_path], ManualClock(T0))
    manager.startup(lambda _: config)
    plog = manager.create(A0, config)
    for _ in range(7):
        append(plog, [b"v" * 10])
    manager.checkpoint()
    assert manager.apply_retention(checkpoint=False) == 2
    for _, p in manager.partitions():
        p.close(flush=False)  # as a SIGKILL leaves it: no shutdown, no checkpoint
    again = LogManager([tmp_path], ManualClock(T0))
    again.startup(lambda _: config)
    reloaded = again.get(A0)
    assert reloaded is not None and reloaded.log_start_offset == 6
    again.shutdown()


def _deleted_dirs(log_dir: Path) -> list[str]:
    return sorted(p.name for p in log_dir.iterdir() if p.name.endswith("-delete"))


def _clock(manager: LogManager) -> ManualClock:
    assert isinstance(manager.clock, ManualClock)
    return manager.clock


def test_a_deleted_partition_is_renamed_at_once_and_its_files_go_later(tmp_path: Path) -> None:
    """As Kafka does: the directory becomes `<dir>.<uuid>-delete` (a rename, quick on the
    event loop) and the unlinks of its segments come from `remove_deleted` (a worker's),
    once `file.delete.delay.ms` (60 s by default) has passed."""
    manager = _populated(tmp_path)
    manager.delete(B0)
    assert manager.get(B0) is None and not (tmp_path / "b.x-y-0").exists()
    (retired,) = _deleted_dirs(tmp_path)
    assert retired.startswith("b.x-y-0.") and list((tmp_path / retired).glob("*.log"))
    _clock(manager).advance(CONFIG.file_delete_delay_ms - 1)
    assert not manager.deleting and manager.remove_deleted() == 0
    assert _deleted_dirs(tmp_path) == [retired]
    _clock(manager).advance(1)
    assert manager.deleting
    assert manager.remove_deleted() == 1
    assert _deleted_dirs(tmp_path) == [] and not manager.deleting
    assert manager.remove_deleted() == 0
    plog = manager.create(B0, CONFIG)  # created again under the same name: empty
    assert (plog.log_start_offset, plog.log_end_offset) == (0, 0)
    manager.shutdown()


def test_files_of_a_partition_deleted_before_a_stop_go_at_the_next_start(tmp_path: Path) -> None:
    """A crash (or stop) before the files went leaves the renamed directory: the next start
    removes it, loads no partition from it, and a topic of the same name starts empty."""
    manager = _populated(tmp_path)
    manager.delete(B0)
    manager.shutdown()
    assert len(_deleted_dirs(tmp_path)) == 1
    manager = LogManager([tmp_path], ManualClock(T0))
    manager.startup(_config_for)
    assert _deleted_dirs(tmp_path) == []
    assert manager.get(B0) is None and manager.get(A0) is not None
    plog = manager.create(B0, CONFIG)
    assert (plog.log_start_offset, plog.log_end_offset) == (0, 0)
    manager.shutdown()


def test_segments_deleted_by_retention_are_renamed_then_removed(tmp_path: Path) -> None:
    """Retention (and truncation, DeleteRecords) renames a segment's files to `.deleted` at
    once; `remove_deleted` unlinks them after the topic's `file.delete.delay.ms`, and a
    load removes any a crash left."""
    manager = _populated(tmp_path)
    plog = manager.get(A0)
    assert plog is not None and [s.base_offset for s in plog.segments] == [0, 3]
    plog.config = replace(CONFIG, file_delete_delay_ms=500)  # a topic's own setting
    plog.delete_records_before(4)
    assert [s.base_offset for s in plog.segments] == [3]
    directory = tmp_path / "a-0"
    names = sorted(p.name for p in directory.iterdir() if p.name.startswith("0000"))
    first = "00000000000000000000"
    assert f"{first}.log" not in names and f"{first}.log.deleted" in names
    assert f"{first}.index.deleted" in names and not manager.deleting
    _clock(manager).advance(500)
    assert manager.deleting
    assert manager.remove_deleted() == 3  # .log, .index, .timeindex (no .txnindex here)
    assert not list(directory.glob("*.deleted")) and not manager.deleting
    (directory / f"{first}.log.deleted").write_bytes(b"left by a crash")
    manager.shutdown()
    manager = LogManager([tmp_path], ManualClock(T0))
    manager.startup(_config_for)
    assert not list(directory.glob("*.deleted"))
    reloaded = manager.get(A0)
    assert reloaded is not None and reloaded.log_start_offset == 4
    assert [s.base_offset for s in reloaded.segments] == [3]
    manager.shutdown()
