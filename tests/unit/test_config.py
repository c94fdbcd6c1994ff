"""server.properties parsing, override precedence, Kafka defaults and validation."""

from __future__ import annotations

from pathlib import Path

import pytest

from oncelog.config import (
    LONG_MAX,
    BrokerConfig,
    Listener,
    LogConfig,
    read_properties,
    validate_topic_configs,
    validate_topic_name,
)
from oncelog.errors import InvalidConfig, InvalidTopic

PROPERTIES = """\
# A comment
! another comment
   # an indented comment

node.id=3
listeners = PLAINTEXT://0.0.0.0:19092
log.dirs=/data/a,\\
         /data/b, \\
   /data/c
log.retention.hours: 24
num.partitions 4
message.max.bytes=\\
  2000000
# comment ending with a backslash does not continue \\
log.segment.bytes=1048576
sasl.jaas.config=org.Foo required user="a=b";
some.flag
  log.roll.ms  =  5000  \n
"""


@pytest.fixture
def props_file(tmp_path: Path) -> Path:
    path = tmp_path / "server.properties"
    path.write_text(PROPERTIES)
    return path


def test_read_properties(props_file: Path) -> None:
    assert read_properties(props_file) == {
        "node.id": "3",
        "listeners": "PLAINTEXT://0.0.0.0:19092",
        "log.dirs": "/data/a,/data/b, /data/c",
        "log.retention.hours": "24",
        "num.partitions": "4",
        "message.max.bytes": "2000000",
        "log.segment.bytes": "1048576",
        "sasl.jaas.config": 'org.Foo required user="a=b";',
        "some.flag": "",
        "log.roll.ms": "5000",
    }


def test_continuation_on_the_last_line(tmp_path: Path) -> None:
    path = tmp_path / "p.properties"
    path.write_text("a=1\nlog.dirs=/x,\\\n  /y\\")
    assert read_properties(path) == {"a": "1", "log.dirs": "/x,/y"}


def test_broker_config_from_file(props_file: Path) -> None:
    config = BrokerConfig.load(props_file)
    assert config.node_id == 3
    assert config.listener == Listener("PLAINTEXT", "0.0.0.0", 19092)
    assert config.log_dirs == [Path("/data/a"), Path("/data/b"), Path("/data/c")]
    assert config.num_partitions == 4
    defaults = config.topic_defaults()
    assert defaults["retention.ms"] == str(24 * 3_600_000)
    assert defaults["segment.ms"] == "5000"
    assert defaults["segment.bytes"] == "1048576"
    assert defaults["max.message.bytes"] == "2000000"
    assert config.raw["some.flag"] == ""  # unknown keys are kept


def test_overrides_win_over_the_file(props_file: Path) -> None:
    config = BrokerConfig.load(
        props_file, [("num.partitions", "9"), ("log.retention.ms", "1000"), ("x.y", "z")]
    )
    assert config.num_partitions == 9
    assert config.topic_defaults()["retention.ms"] == "1000"
    assert config.raw["x.y"] == "z"
    # the last override of a key wins
    config = BrokerConfig.load(None, [("node.id", "1"), ("node.id", "2")])
    assert config.node_id == 2


def test_kafka_defaults() -> None:
    config = BrokerConfig()
    assert config.node_id == 1
    assert config.listener == Listener("PLAINTEXT", "127.0.0.1", 9092)
    assert config.advertised_listener is None
    assert config.log_dirs == [Path("./oncelog-data")]
    assert config.auto_create_topics is True
    assert config.retention_check_interval_ms == 300_000
    assert config.socket_request_max_bytes == 104_857_600
    defaults = config.topic_defaults()
    assert defaults["retention.ms"] == "604800000"  # log.retention.hours=168
    assert defaults["segment.ms"] == "604800000"  # log.roll.hours=168
    assert defaults["retention.bytes"] == "-1"
    assert defaults["segment.bytes"] == "1073741824"
    assert defaults["segment.index.bytes"] == "10485760"
    assert defaults["index.interval.bytes"] == "4096"
    assert defaults["max.message.bytes"] == "1048588"
    assert defaults["cleanup.policy"] == "delete"
    assert defaults["message.timestamp.type"] == "CreateTime"
    assert defaults["flush.messages"] == defaults["flush.ms"] == str(LONG_MAX)
    assert defaults["file.delete.delay.ms"] == "60000"
    assert defaults["min.insync.replicas"] == "1"
    # the broker's topic defaults give exactly LogConfig's defaults
    assert LogConfig.from_topic_configs(defaults) == LogConfig()


@pytest.mark.parametrize(
    ("raw", "retention_ms"),
    [
        ({"log.retention.hours": "1"}, 3_600_000),
        ({"log.retention.minutes": "5"}, 300_000),
        ({"log.retention.minutes": "5", "log.retention.hours": "1"}, 300_000),
        ({"log.retention.ms": "7", "log.retention.minutes": "5"}, 7),
        ({"log.retention.ms": "0"}, 0),
        ({"log.retention.hours": "-1"}, -1),
        ({"log.retention.minutes": "-1"}, -1),
        ({"log.retention.ms": "-1", "log.retention.hours": "5"}, -1),
        ({"log.retention.ms": "-20"}, -1),
    ],
)
def test_retention_precedence(raw: dict[str, str], retention_ms: int) -> None:
    assert BrokerConfig(raw).topic_defaults()["retention.ms"] == str(retention_ms)


@pytest.mark.parametrize(
    ("raw", "segment_ms"),
    [
        ({"log.roll.hours": "1"}, 3_600_000),
        ({"log.roll.ms": "60000", "log.roll.hours": "1"}, 60_000),
    ],
)
def test_roll_precedence(raw: dict[str, str], segment_ms: int) -> None:
    defaults = BrokerConfig(raw).topic_defaults()
    assert defaults["segment.ms"] == str(segment_ms)
    assert LogConfig.from_topic_configs(defaults).segment_ms == segment_ms


def test_topic_overrides_over_broker_defaults() -> None:
    broker = BrokerConfig({"log.retention.hours": "1", "log.segment.bytes": "5000"})
    merged = {**broker.topic_defaults(), "retention.ms": "42", "cleanup.policy": "delete,compact"}
    config = LogConfig.from_topic_configs(merged)
    assert (config.retention_ms, config.segment_bytes) == (42, 5000)
    assert config.cleanup_policy == ("delete", "compact")


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("num.partitions", "abc"),
        ("num.partitions", ""),
        ("num.partitions", "1.5"),
        ("num.partitions", "1_000"),  # Python would take it, Java does not
        ("num.partitions", "\u0663"),  # a non-ASCII digit
        ("num.partitions", str(2**31)),
        ("log.retention.ms", str(2**63)),
        ("log.retention.ms", "0x10"),
        ("auto.create.topics.enable", "yes"),
        ("listeners", "not a listener"),
        ("listeners", ""),
        ("listeners", "PLAINTEXT://host"),
    ],
)
def test_invalid_broker_values(key: str, value: str) -> None:
    with pytest.raises(InvalidConfig):
        BrokerConfig({key: value})


def test_invalid_value_message_names_the_key(tmp_path: Path) -> None:
    path = tmp_path / "p.properties"
    path.write_text("log.segment.bytes=big\n")
    with pytest.raises(InvalidConfig, match=r"log\.segment\.bytes"):
        BrokerConfig.load(path)


def test_numbers_and_booleans_as_java_reads_them() -> None:
    config = BrokerConfig(
        {"num.partitions": " +7 ", "auto.create.topics.enable": "FALSE", "node.id": "-1"}
    )
    assert (config.num_partitions, config.auto_create_topics, config.node_id) == (7, False, -1)
    assert BrokerConfig({"log.retention.ms": str(2**63 - 1)}).topic_defaults()[
        "retention.ms"
    ] == str(2**63 - 1)


@pytest.mark.parametrize(
    ("spec", "listener"),
    [
        ("PLAINTEXT://127.0.0.1:9092", Listener("PLAINTEXT", "127.0.0.1", 9092)),
        ("plaintext://:9092", Listener("PLAINTEXT", "0.0.0.0", 9092)),
        ("localhost:1", Listener("PLAINTEXT", "localhost", 1)),
        ("EXTERNAL://[::1]:9093", Listener("EXTERNAL", "::1", 9093)),
    ],
)
def test_listener_parse(spec: str, listener: Listener) -> None:
    assert Listener.parse(spec) == listener


def test_log_dirs_prefers_log_dirs_over_log_dir() -> None:
    assert BrokerConfig({"log.dir": "/one"}).log_dirs == [Path("/one")]
    assert BrokerConfig({"log.dir": "/one", "log.dirs": "/a, /b"}).log_dirs == [
        Path("/a"),
        Path("/b"),
    ]


def test_validate_topic_configs() -> None:
    assert validate_topic_configs({"retention.ms": "100", "cleanup.policy": None}) == {
        "retention.ms": "100"
    }
    for bad in (
        {"no.such.config": "1"},
        {"retention.ms": "soon"},
        {"segment.bytes": "13"},
        {"max.message.bytes": "-1"},
        {"message.timestamp.type": "WallClock"},
        {"preallocate": "maybe"},
    ):
        with pytest.raises(InvalidConfig):
            validate_topic_configs(bad)
    assert validate_topic_configs({"segment.bytes": "14"}) == {"segment.bytes": "14"}


def test_validate_topic_name() -> None:
    validate_topic_name("a.b_c-D9")
    validate_topic_name("x" * 249)
    for bad in ("", ".", "..", "x" * 250, "a b", "a/b", "ü"):
        with pytest.raises(InvalidTopic):
            validate_topic_name(bad)
