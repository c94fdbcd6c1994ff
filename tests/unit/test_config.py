"""server.properties parsing, override precedence, Kafka defaults and validation."""

from __future__ import annotations

from pathlib import Path

import pytest

from oncelog.config import (
    BROKER_CONFIGS,
    LONG_MAX,
    TOPIC_CONFIG_DEFS,
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
        {"num.partitions": " +7 ", "auto.create.topics.enable": "FALSE", "node.id": "-0"}
    )
    assert (config.num_partitions, config.auto_create_topics, config.node_id) == (7, False, 0)
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


# Kafka's ConfigDef bounds (KafkaConfig, LogConfig, ServerLogConfigs, SocketServerConfigs,
# GroupCoordinatorConfig, TransactionLogConfig, TransactionStateManagerConfig): the first
# value is refused, the second (the bound) accepted.
BROKER_BOUNDS = [
    ("log.segment.bytes", "13", "14"),
    ("num.partitions", "0", "1"),
    ("message.max.bytes", "-1", "0"),
    ("min.insync.replicas", "0", "1"),
    ("log.index.size.max.bytes", "3", "4"),
    ("log.index.interval.bytes", "-1", "0"),
    ("log.roll.ms", "0", "1"),
    ("log.roll.hours", "0", "1"),
    ("log.retention.check.interval.ms", "0", "1"),
    ("log.flush.interval.messages", "0", "1"),
    ("log.flush.interval.ms", "-1", "0"),
    ("log.segment.delete.delay.ms", "-1", "0"),
    ("queued.max.requests", "0", "1"),
    ("socket.request.max.bytes", "0", "1"),
    ("num.network.threads", "0", "1"),
    ("num.io.threads", "0", "1"),
    ("fetch.max.bytes", "1023", "1024"),
    ("replica.fetch.max.bytes", "-1", "0"),
    ("node.id", "-1", "0"),
    ("transaction.max.timeout.ms", "0", "1"),
    ("transactional.id.expiration.ms", "0", "1"),
    ("transaction.abort.timed.out.transaction.cleanup.interval.ms", "0", "1"),
    ("transaction.state.log.num.partitions", "0", "1"),
    ("transaction.state.log.replication.factor", "0", "1"),
    ("transaction.state.log.min.isr", "0", "1"),
    ("offsets.topic.num.partitions", "0", "1"),
    ("offsets.topic.replication.factor", "0", "1"),
    ("offsets.retention.minutes", "0", "1"),
    ("offsets.retention.check.interval.ms", "0", "1"),
    ("producer.id.expiration.ms", "0", "1"),
    ("producer.id.expiration.check.interval.ms", "0", "1"),
    ("producer.state.max.entries", "0", "1"),
    ("oncelog.testing.offsets.retention.ms", "-2", "-1"),
    ("num.recovery.threads.per.data.dir", "0", "1"),  # a Kafka key oncelog ignores
    ("log.message.timestamp.type", "createtime", "LogAppendTime"),
    ("log.cleanup.policy", "delete,shrink", "compact,delete"),
    ("compression.type", "none", "uncompressed"),
    ("process.roles", "broker,observer", "broker,controller"),
]


@pytest.mark.parametrize(("key", "bad", "good"), BROKER_BOUNDS)
def test_broker_bounds_are_kafkas(key: str, bad: str, good: str) -> None:
    with pytest.raises(InvalidConfig) as info:
        BrokerConfig({key: bad})
    message = str(info.value)
    refused = bad.rsplit(",", maxsplit=1)[-1]  # a list names its first refused item
    assert message.startswith(f"Invalid value {refused} for configuration {key}: ")
    assert ("at least" in message) or ("one of" in message)
    BrokerConfig({key: good})


def test_bound_message_names_key_value_and_bound() -> None:
    with pytest.raises(InvalidConfig) as info:
        BrokerConfig({"log.segment.bytes": "-5"})
    assert str(info.value) == (
        "Invalid value -5 for configuration log.segment.bytes: Value must be at least 14"
    )


BUFFER_KEYS = [
    "socket.send.buffer.bytes",
    "socket.receive.buffer.bytes",
    "replica.socket.receive.buffer.bytes",
]


def test_socket_buffer_defaults() -> None:
    """The listeners' are the OS's (Kafka: 102400, which cost 30-45% of the throughput of 1 MiB
    batches, bench/RESULTS.md 10.2); a follower's is Kafka's."""
    config = BrokerConfig()
    assert [config.get_int(key) for key in BUFFER_KEYS] == [-1, -1, 65536]


@pytest.mark.parametrize("key", BUFFER_KEYS)
@pytest.mark.parametrize("bad", ["0", "-2", "-2147483648", "2147483648", "100k"])
def test_socket_buffers_are_a_size_or_minus_one(key: str, bad: str) -> None:
    """-1 is the OS default; Kafka's ConfigDef takes any int, but Java's socket refuses a size
    of 0 or below (the listener, or every connection, then fails), so oncelog refuses it at
    start-up."""
    with pytest.raises(InvalidConfig) as info:
        BrokerConfig({key: bad})
    if bad in ("0", "-2", "-2147483648"):  # an int, outside the bounds
        assert str(info.value) == (
            f"Invalid value {bad} for configuration {key}: "
            "Value must be between 1 and 2147483647 or equal to -1"
        )
    else:
        assert str(info.value) == f"Invalid value '{bad}' for configuration {key}"
    for good in ("-1", "1", "4096", "2147483647"):
        assert BrokerConfig({key: good}).get_int(key) == int(good)


@pytest.mark.parametrize(
    "key", ["log.retention.ms", "log.retention.minutes", "log.retention.hours"]
)
def test_retention_zero_is_refused_negative_is_unlimited(key: str) -> None:
    """KafkaConfig: log.retention.ms must be unlimited (-1) or at least 1 (any negative
    value is read as -1)."""
    with pytest.raises(InvalidConfig, match=f"Invalid value 0 for configuration {key}: "):
        BrokerConfig({key: "0"})
    assert BrokerConfig({key: "-7"}).topic_defaults()["retention.ms"] == "-1"


def test_every_broker_default_is_within_its_bounds() -> None:
    """The defaults pass the validators, and the broker's topic defaults always make a valid
    topic config (else every CreateTopics would fail)."""
    config = BrokerConfig({d.name: d.default for d in BROKER_CONFIGS.values() if d.default})
    validate_topic_configs(config.topic_defaults())
    for key, _bad, good in BROKER_BOUNDS:
        if key in BROKER_CONFIGS and BROKER_CONFIGS[key].topic_name is not None:
            validate_topic_configs(BrokerConfig({key: good}).topic_defaults())


def test_broker_bound_is_never_looser_than_its_topic_synonym() -> None:
    for d in BROKER_CONFIGS.values():
        if d.topic_name is None or d.name in ("log.retention.ms", "log.roll.ms"):
            continue  # those two derive the topic value; checked by their own tests
        topic = TOPIC_CONFIG_DEFS[d.topic_name]
        assert topic.name == d.topic_name
        assert (d.at_least, d.one_of) == (topic.at_least, topic.one_of), d.name


@pytest.mark.parametrize(
    ("key", "bad", "bound"),
    [
        ("segment.bytes", "13", "Value must be at least 14"),
        ("segment.ms", "0", "Value must be at least 1"),
        ("segment.index.bytes", "3", "Value must be at least 4"),
        ("retention.ms", "-2", "Value must be at least -1"),
        ("flush.messages", "0", "Value must be at least 1"),
        ("flush.ms", "-1", "Value must be at least 0"),
        ("index.interval.bytes", "-1", "Value must be at least 0"),
        ("max.message.bytes", "-1", "Value must be at least 0"),
        ("min.insync.replicas", "0", "Value must be at least 1"),
        ("file.delete.delay.ms", "-1", "Value must be at least 0"),
        ("message.timestamp.difference.max.ms", "-1", "Value must be at least 0"),
        ("message.timestamp.type", "Wall", "String must be one of: CreateTime, LogAppendTime"),
        ("cleanup.policy", "shrink", "String must be one of: compact, delete"),
        ("compression.type", "brotli", "String must be one of: uncompressed, zstd, lz4"),
    ],
)
def test_topic_bounds_name_the_topic_key(key: str, bad: str, bound: str) -> None:
    """CreateTopics/AlterConfigs overrides get LogConfig's bounds, named by the topic key."""
    with pytest.raises(InvalidConfig) as info:
        validate_topic_configs({key: bad})
    assert str(info.value).startswith(f"Invalid value {bad} for configuration {key}: {bound}")
    assert info.value.code == 40  # INVALID_CONFIG


def test_retention_ms_zero_is_a_valid_topic_override() -> None:
    """Only the broker refuses 0 (KafkaConfig); LogConfig's retention.ms is atLeast(-1)."""
    assert validate_topic_configs({"retention.ms": "0"}) == {"retention.ms": "0"}


def test_unknown_keys_get_one_warning_each(caplog: pytest.LogCaptureFixture) -> None:
    config = BrokerConfig(
        {
            "log.segmnt.bytes": "1",
            "num.partitions": "3",
            "retention.ms": "5",  # a topic key is not a broker config, in Kafka either
            "num.recovery.threads.per.data.dir": "1",  # Kafka's, ignored by oncelog: no warning
            "oncelog.testing.crash.after.prepare": "false",
        }
    )
    assert config.unknown_keys() == ["log.segmnt.bytes", "retention.ms"]
    with caplog.at_level("WARNING", logger="oncelog.config"):
        config.warn_unknown()
    assert [r.getMessage() for r in caplog.records] == [
        "The configuration 'log.segmnt.bytes' was supplied but isn't a known config.",
        "The configuration 'retention.ms' was supplied but isn't a known config.",
    ]
    assert all(r.levelname == "WARNING" for r in caplog.records)


def test_kafkas_sample_server_properties_loads_without_warnings(tmp_path: Path) -> None:
    """Every key of Kafka's config/kraft/server.properties is known (used or ignored)."""
    path = tmp_path / "server.properties"
    path.write_text(
        "process.roles=broker,controller\nnode.id=1\n"
        "controller.quorum.voters=1@localhost:9093\n"
        "listeners=PLAINTEXT://:9092,CONTROLLER://:9093\ninter.broker.listener.name=PLAINTEXT\n"
        "advertised.listeners=PLAINTEXT://localhost:9092,CONTROLLER://localhost:9093\n"
        "controller.listener.names=CONTROLLER\n"
        "listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT\n"
        "num.network.threads=3\nnum.io.threads=8\nsocket.send.buffer.bytes=102400\n"
        "socket.receive.buffer.bytes=102400\nsocket.request.max.bytes=104857600\n"
        "log.dirs=/tmp/kraft-combined-logs\nnum.partitions=1\n"
        "num.recovery.threads.per.data.dir=1\noffsets.topic.replication.factor=1\n"
        "transaction.state.log.replication.factor=1\ntransaction.state.log.min.isr=1\n"
        "share.coordinator.state.topic.replication.factor=1\n"
        "share.coordinator.state.topic.min.isr=1\nlog.retention.hours=168\n"
        "log.segment.bytes=1073741824\nlog.retention.check.interval.ms=300000\n"
    )
    assert BrokerConfig.load(path).unknown_keys() == []


def test_every_key_the_broker_reads_is_known() -> None:
    """config.get() raises KeyError for a key not in BROKER_CONFIGS; the keys the code reads
    (grep get_int/get) must stay known, oncelog's own included."""
    import re
    import subprocess

    src = Path(__file__).resolve().parents[2] / "src" / "oncelog"
    text = subprocess.run(
        ["grep", "-rhoE", r"config\.get(_int)?\(\s*\"[a-z.]+\"", str(src)],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    keys = set(re.findall(r"\"([a-z.]+)\"", text))
    assert "producer.state.max.entries" in keys and "oncelog.testing.crash.after.prepare" in keys
    assert keys <= set(BROKER_CONFIGS), keys - set(BROKER_CONFIGS)


def test_cleaner_broker_keys_have_kafkas_defaults() -> None:
    config = BrokerConfig({})
    assert config.get("log.cleaner.enable") is True
    assert config.get("log.cleaner.threads") == 1
    assert config.get("log.cleaner.backoff.ms") == 15000
    assert config.get("log.cleaner.dedupe.buffer.size") == 134217728
    assert config.get("log.cleaner.io.buffer.size") == 524288
    assert config.get("log.cleaner.io.buffer.load.factor") == 0.9
    assert config.get("log.cleaner.io.max.bytes.per.second") == 1.7976931348623157e308
    assert config.get("log.cleaner.min.cleanable.ratio") == 0.5
    assert config.get("log.cleaner.delete.retention.ms") == 86400000
    assert config.get("log.cleaner.min.compaction.lag.ms") == 0
    assert config.get("log.cleaner.max.compaction.lag.ms") == LONG_MAX
    defaults = config.topic_defaults()
    assert defaults["min.cleanable.dirty.ratio"] == "0.5"
    assert defaults["delete.retention.ms"] == "86400000"
    assert defaults["min.compaction.lag.ms"] == "0"
    assert defaults["max.compaction.lag.ms"] == str(LONG_MAX)


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("log.cleaner.min.cleanable.ratio", "1.5"),
        ("log.cleaner.min.cleanable.ratio", "-0.1"),
        ("log.cleaner.min.cleanable.ratio", "NaN"),
        ("log.cleaner.min.cleanable.ratio", "half"),
        ("log.cleaner.threads", "-1"),
        ("log.cleaner.backoff.ms", "-1"),
        ("log.cleaner.io.buffer.size", "-1"),
        ("log.cleaner.delete.retention.ms", "-1"),
        ("log.cleaner.min.compaction.lag.ms", "-1"),
        ("log.cleaner.max.compaction.lag.ms", "0"),
    ],
)
def test_cleaner_broker_keys_refuse_kafkas_bad_values(key: str, value: str) -> None:
    with pytest.raises(InvalidConfig, match=key):
        BrokerConfig({key: value})


@pytest.mark.parametrize(
    ("text", "value"),
    [("0", 0.0), ("1", 1.0), ("0.25", 0.25), (" .5 ", 0.5), ("1e-1", 0.1), ("0.75d", 0.75)],
)
def test_double_parses_like_java(text: str, value: float) -> None:
    assert validate_topic_configs({"min.cleanable.dirty.ratio": text})
    assert (
        LogConfig.from_topic_configs({"min.cleanable.dirty.ratio": text}).min_cleanable_dirty_ratio
        == value
    )


def test_double_bound_message_names_the_bound() -> None:
    with pytest.raises(InvalidConfig, match="no more than 1"):
        validate_topic_configs({"min.cleanable.dirty.ratio": "2"})
    with pytest.raises(InvalidConfig, match="at least 0"):
        validate_topic_configs({"min.cleanable.dirty.ratio": "-1"})


def test_log_config_compaction_fields() -> None:
    default = LogConfig.from_topic_configs({})
    assert default.min_cleanable_dirty_ratio == 0.5
    assert default.min_compaction_lag_ms == 0
    assert default.max_compaction_lag_ms == LONG_MAX
    assert default.delete_retention_ms == 86_400_000
    assert not default.compact
    config = LogConfig.from_topic_configs(
        {
            "cleanup.policy": "compact,delete",
            "min.cleanable.dirty.ratio": "0.1",
            "min.compaction.lag.ms": "100",
            "max.compaction.lag.ms": "5000",
            "delete.retention.ms": "1000",
        }
    )
    assert config.compact
    assert config.cleanup_policy == ("compact", "delete")
    assert config.min_cleanable_dirty_ratio == 0.1
    assert config.min_compaction_lag_ms == 100
    assert config.max_compaction_lag_ms == 5000
    assert config.delete_retention_ms == 1000
    assert LogConfig.from_topic_configs({"cleanup.policy": "compact"}).compact


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("delete.retention.ms", "-1"),
        ("min.compaction.lag.ms", "-1"),
        ("max.compaction.lag.ms", "0"),
        ("min.cleanable.dirty.ratio", "1.01"),
    ],
)
def test_compaction_topic_keys_refuse_kafkas_bad_values(key: str, value: str) -> None:
    with pytest.raises(InvalidConfig, match=key):
        validate_topic_configs({key: value})


# Every topic config of Kafka's LogConfig (Kafka 3.9 / 4.0), with its default.
KAFKA_TOPIC_DEFAULTS = {
    "cleanup.policy": "delete",
    "compression.gzip.level": "-1",
    "compression.lz4.level": "9",
    "compression.type": "producer",
    "compression.zstd.level": "3",
    "delete.retention.ms": "86400000",
    "file.delete.delay.ms": "60000",
    "flush.messages": str(LONG_MAX),
    "flush.ms": str(LONG_MAX),
    "follower.replication.throttled.replicas": "",
    "index.interval.bytes": "4096",
    "leader.replication.throttled.replicas": "",
    "local.retention.bytes": "-2",
    "local.retention.ms": "-2",
    "max.compaction.lag.ms": str(LONG_MAX),
    "max.message.bytes": "1048588",
    "message.downconversion.enable": "true",
    "message.format.version": "3.0-IV1",
    "message.timestamp.after.max.ms": str(LONG_MAX),
    "message.timestamp.before.max.ms": str(LONG_MAX),
    "message.timestamp.difference.max.ms": str(LONG_MAX),
    "message.timestamp.type": "CreateTime",
    "min.cleanable.dirty.ratio": "0.5",
    "min.compaction.lag.ms": "0",
    "min.insync.replicas": "1",
    "preallocate": "false",
    "remote.log.copy.disable": "false",
    "remote.log.delete.on.disable": "false",
    "remote.storage.enable": "false",
    "retention.bytes": "-1",
    "retention.ms": "604800000",
    "segment.bytes": "1073741824",
    "segment.index.bytes": "10485760",
    "segment.jitter.ms": "0",
    "segment.ms": "604800000",
    "unclean.leader.election.enable": "false",
}


def test_every_kafka_topic_config_is_known_with_kafkas_default() -> None:
    assert set(TOPIC_CONFIG_DEFS) == set(KAFKA_TOPIC_DEFAULTS)
    assert BrokerConfig({}).topic_defaults() == KAFKA_TOPIC_DEFAULTS
    # Each default is a valid override too.
    assert validate_topic_configs(KAFKA_TOPIC_DEFAULTS) == KAFKA_TOPIC_DEFAULTS


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("compression.gzip.level", "0"),
        ("compression.gzip.level", "10"),
        ("compression.lz4.level", "18"),
        ("compression.zstd.level", "23"),
        ("compression.zstd.level", "-131073"),
        ("segment.jitter.ms", "-1"),
        ("local.retention.ms", "-3"),
        ("local.retention.bytes", "-3"),
        ("message.timestamp.before.max.ms", "-1"),
        ("message.timestamp.after.max.ms", "-1"),
        ("message.format.version", "three"),
        ("leader.replication.throttled.replicas", "0:1,x"),
        ("follower.replication.throttled.replicas", "*,0:1"),
        ("message.downconversion.enable", "maybe"),
        ("remote.log.copy.disable", "1"),
    ],
)
def test_kafka_topic_configs_refuse_kafkas_bad_values(key: str, value: str) -> None:
    with pytest.raises(InvalidConfig, match=key):
        validate_topic_configs({key: value})


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("compression.gzip.level", "-1"),
        ("compression.gzip.level", "9"),
        ("compression.lz4.level", "1"),
        ("compression.zstd.level", "-5"),
        ("message.format.version", "2.8-IV1"),
        ("message.format.version", "0.10.2"),
        ("leader.replication.throttled.replicas", "*"),
        ("follower.replication.throttled.replicas", "0:1, 1:1"),
        ("local.retention.ms", "-2"),
        ("segment.jitter.ms", "1000"),
    ],
)
def test_kafka_topic_configs_accept_kafkas_good_values(key: str, value: str) -> None:
    assert validate_topic_configs({key: value}) == {key: value}


def test_min_compaction_lag_may_not_exceed_max() -> None:
    validate_topic_configs({"min.compaction.lag.ms": "100", "max.compaction.lag.ms": "100"})
    with pytest.raises(InvalidConfig, match=r"min.compaction.lag.ms \(101\) > max"):
        validate_topic_configs({"min.compaction.lag.ms": "101", "max.compaction.lag.ms": "100"})
    # The broker's default is under the topic's override, as in Kafka.
    broker = BrokerConfig({"log.cleaner.max.compaction.lag.ms": "1000"})
    with pytest.raises(InvalidConfig, match="conflict"):
        validate_topic_configs({"min.compaction.lag.ms": "5000"}, broker.topic_defaults())
    with pytest.raises(InvalidConfig, match="conflict"):
        BrokerConfig(
            {"log.cleaner.min.compaction.lag.ms": "2", "log.cleaner.max.compaction.lag.ms": "1"}
        )


def test_remote_storage_is_refused_as_kafka_without_tiered_storage() -> None:
    with pytest.raises(InvalidConfig, match="Tiered Storage functionality is disabled"):
        validate_topic_configs({"remote.storage.enable": "true"})


def test_broker_synonyms_of_the_new_topic_keys() -> None:
    defaults = BrokerConfig(
        {
            "log.roll.jitter.hours": "2",
            "log.preallocate": "true",
            "log.message.timestamp.after.max.ms": "3600000",
            "compression.zstd.level": "7",
            "unclean.leader.election.enable": "true",
        }
    ).topic_defaults()
    assert defaults["segment.jitter.ms"] == "7200000"
    assert defaults["preallocate"] == "true"
    assert defaults["message.timestamp.after.max.ms"] == "3600000"
    assert defaults["compression.zstd.level"] == "7"
    assert defaults["unclean.leader.election.enable"] == "true"
    assert BrokerConfig({"log.roll.jitter.ms": "5"}).topic_defaults()["segment.jitter.ms"] == "5"


def test_a_setting_read_again_is_the_same_value_and_a_list_is_the_callers_own() -> None:
    """Scalars are parsed once per config (the hot paths read some per request); a list
    is parsed afresh each time, so a caller that changes it does not change the config."""
    config = BrokerConfig({"fetch.max.bytes": "100000", "log.dirs": "/a,/b"})
    assert config.get_int("fetch.max.bytes") == config.get_int("fetch.max.bytes") == 100000
    assert config.get("socket.request.max.bytes") == 104857600  # a default, parsed and kept
    assert config.get("socket.request.max.bytes") == 104857600
    dirs = config.get("log.dirs")
    assert isinstance(dirs, list)
    dirs.append("/c")
    assert config.get("log.dirs") == ["/a", "/b"]
    assert config == BrokerConfig({"fetch.max.bytes": "100000", "log.dirs": "/a,/b"})
