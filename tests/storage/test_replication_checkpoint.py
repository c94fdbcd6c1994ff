"""replication-offset-checkpoint: Kafka's format, atomic writes, malformed files."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from oncelog.storage.replication_checkpoint import (
    REPLICATION_CHECKPOINT_FILE,
    read_offsets,
    write_offsets,
)
from oncelog.types import TopicPartition


def test_round_trip_in_kafkas_format(tmp_path: Path) -> None:
    path = tmp_path / REPLICATION_CHECKPOINT_FILE
    offsets = {
        TopicPartition("b.topic", 1): 7,
        TopicPartition("a-topic_2", 0): 0,
        TopicPartition("b.topic", 0): 12345678901,
    }
    write_offsets(path, offsets)
    assert path.read_text() == "0\n3\na-topic_2 0 0\nb.topic 0 12345678901\nb.topic 1 7\n"
    assert read_offsets(path) == offsets
    assert not list(tmp_path.glob("*.tmp"))
    write_offsets(path, {})
    assert path.read_text() == "0\n0\n"
    assert read_offsets(path) == {}


def test_a_missing_file_is_empty(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING):
        assert read_offsets(tmp_path / REPLICATION_CHECKPOINT_FILE) == {}
    assert not caplog.text


@pytest.mark.parametrize(
    "text",
    [
        "",
        "0",
        "1\n0\n",
        "0\n2\nt 0 5\n",
        "0\n1\nt 0 5\nt 1 6\n",
        "0\n1\nt 0\n",
        "0\n1\nt x 5\n",
        "0\n1\nt 0 -5\n",
        "0\n2\nt 0 5\nt 0 6\n",  # listed twice
        "\xff\xfe",
    ],
)
def test_a_malformed_file_is_empty_with_a_warning(
    tmp_path: Path, text: str, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / REPLICATION_CHECKPOINT_FILE
    path.write_bytes(text.encode("latin-1"))
    with caplog.at_level(logging.WARNING):
        assert read_offsets(path) == {}
    assert REPLICATION_CHECKPOINT_FILE in caplog.text


def test_a_topic_name_with_a_space_is_refused(tmp_path: Path) -> None:
    path = tmp_path / REPLICATION_CHECKPOINT_FILE
    with pytest.raises(ValueError):
        write_offsets(path, {TopicPartition("a b", 0): 1})
    assert not path.exists()
