"""`oncelog get-offsets`, `delete-records` and `log-dirs --describe` print what Kafka's
kafka-get-offsets.sh, kafka-delete-records.sh and kafka-log-dirs.sh print. One real broker for
the module (a plain listener, and a SASL one for `--command-config`), records produced with
confluent-kafka, the tools run as the `oncelog` command."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tests.integration.secure_broker import SecureBroker, plain_jaas

USERS = {"admin": "admin-secret"}
#: ledger-0's timestamps: the largest is at offset 1, not at the end.
LEDGER_0 = [1_000, 1_030, 1_010, 1_020, 1_005]
LEDGER_1 = [2_000, 2_001]


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecureBroker]:
    proc = SecureBroker(
        tmp_path_factory.mktemp("offset-tools") / "data",
        {
            "listeners": "PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0",
            "sasl.enabled.mechanisms": "PLAIN",
            "listener.name.sasl_plaintext.plain.sasl.jaas.config": plain_jaas(USERS),
            "auto.create.topics.enable": "false",
            "offsets.topic.num.partitions": "2",
        },
    ).start()
    try:
        bootstrap = proc.bootstrap_of("PLAINTEXT")
        admin = AdminClient({"bootstrap.servers": bootstrap})
        topics = [
            NewTopic("ledger", 3, 1),
            NewTopic("ledger-archive", 1, 1),
            NewTopic("wide", 12, 1),
            NewTopic("trim", 2, 1),
        ]
        for future in admin.create_topics(topics).values():
            future.result(10)
        producer = Producer({"bootstrap.servers": bootstrap})
        for partition, stamps in ((0, LEDGER_0), (1, LEDGER_1)):
            for i, ts in enumerate(stamps):
                producer.produce("ledger", value=b"v%d" % i, partition=partition, timestamp=ts)
        producer.produce("ledger-archive", value=b"old", partition=0)
        for partition in range(12):
            producer.produce("wide", value=b"w", partition=partition)
        for i in range(10):
            producer.produce("trim", value=b"t%d" % i, partition=0)
        for i in range(3):
            producer.produce("trim", value=b"t%d" % i, partition=1)
        assert producer.flush(10) == 0
        yield proc
    finally:
        proc.kill()


def oncelog(broker: SecureBroker, *args: str, listener: str = "PLAINTEXT") -> tuple[int, str, str]:
    result = subprocess.run(
        [sys.executable, "-m", "oncelog", *args, "-b", broker.bootstrap_of(listener)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert "Traceback" not in result.stderr, result.stderr
    return result.returncode, result.stdout, result.stderr


def run_all(broker: SecureBroker, commands: list[tuple[str, ...]]) -> list[tuple[int, str, str]]:
    """Independent commands, a few at a time (each is mostly Python starting up)."""
    with ThreadPoolExecutor(4) as pool:
        return list(pool.map(lambda args: oncelog(broker, *args), commands))


def lines(out: str) -> list[str]:
    return out.splitlines()


def test_get_offsets_latest_earliest_max_timestamp_and_a_time(broker: SecureBroker) -> None:
    latest = ["ledger:0:5", "ledger:1:2", "ledger:2:0"]
    earliest = ["ledger:0:0", "ledger:1:0", "ledger:2:0"]
    # The record with the largest timestamp; an empty partition has none and prints nothing.
    max_timestamp = ["ledger:0:1", "ledger:1:1"]
    expected = {
        (): latest,
        ("--time", "-1"): latest,
        ("--time", "latest"): latest,
        ("--time", "-2"): earliest,
        ("--time", "earliest"): earliest,
        ("--time", "-3"): max_timestamp,
        ("--time", "max-timestamp"): max_timestamp,
        # The first offset whose timestamp is at or after the time; none: no line.
        ("--time", "1015"): ["ledger:0:1", "ledger:1:0"],
        ("--time", "1005"): ["ledger:0:1", "ledger:1:0"],
        ("--time", "1000"): ["ledger:0:0", "ledger:1:0"],
        ("--time", "2001"): ["ledger:1:1"],
    }
    results = run_all(broker, [("get-offsets", "--topic", "ledger", *a) for a in expected])
    for (code, out, err), (args, want) in zip(results, expected.items(), strict=True):
        assert (code, lines(out), err) == (0, want, ""), args


def test_get_offsets_filters_and_kafka_order(broker: SecureBroker) -> None:
    # Every topic, internal ones included, sorted by the text "topic-partition" as Kafka does.
    code, out, _ = oncelog(broker, "get-offsets")
    assert code == 0
    got = lines(out)
    assert got[:2] == ["__consumer_offsets:0:0", "__consumer_offsets:1:0"]
    wide = [line for line in got if line.startswith("wide:")]
    assert wide == [f"wide:{p}:1" for p in (0, 1, 10, 11, 2, 3, 4, 5, 6, 7, 8, 9)]
    assert got == sorted(got, key=lambda line: "-".join(line.split(":")[:2]))

    code, out, _ = oncelog(broker, "get-offsets", "--exclude-internal-topics")
    assert code == 0 and not any(line.startswith("__") for line in lines(out))
    assert "ledger-archive:0:1" in lines(out)

    # The regex matches the whole name: "ledger" is not "ledger-archive".
    code, out, _ = oncelog(broker, "get-offsets", "--topic", "ledger", "--partitions", "0,2")
    assert (code, lines(out)) == (0, ["ledger:0:5", "ledger:2:0"])
    code, out, _ = oncelog(broker, "get-offsets", "--topic", "ledger.*", "--partitions", "0")
    assert (code, lines(out)) == (0, ["ledger:0:5", "ledger-archive:0:1"])  # "ledger-0" first
    code, out, _ = oncelog(broker, "get-offsets", "--topic", "ledger,trim", "--partitions", "1")
    assert (code, lines(out)) == (0, ["ledger:1:2", "trim:1:3"])

    code, out, _ = oncelog(
        broker, "get-offsets", "--topic-partitions", "ledger:1-3,wide:10,wide:-1,trim:1-"
    )
    assert (code, lines(out)) == (
        0,
        ["ledger:1:2", "ledger:2:0", "trim:1:3", "wide:0:1", "wide:10:1"],
    )
    code, out, _ = oncelog(broker, "get-offsets", "--topic-partitions", ":11")
    assert (code, lines(out)) == (0, ["wide:11:1"])


def test_delete_records_moves_the_low_watermark(broker: SecureBroker, tmp_path: Path) -> None:
    plan = tmp_path / "offsets.json"
    plan.write_text(
        json.dumps(
            {
                "partitions": [
                    {"topic": "trim", "partition": 1, "offset": -1},
                    {"topic": "trim", "partition": 0, "offset": 4},
                ],
                "version": 1,
            }
        )
    )
    code, out, err = oncelog(broker, "delete-records", "--offset-json-file", str(plan))
    assert (code, err) == (0, "")
    assert lines(out) == [
        "Executing records delete operation",
        "Records delete operation completed:",
        "partition: trim-0\tlow_watermark: 4",
        "partition: trim-1\tlow_watermark: 3",  # -1: the high watermark
    ]
    code, out, _ = oncelog(broker, "get-offsets", "--topic", "trim", "--time", "-2")
    assert (code, lines(out)) == (0, ["trim:0:4", "trim:1:3"])
    code, out, _ = oncelog(broker, "get-offsets", "--topic", "trim")
    assert (code, lines(out)) == (0, ["trim:0:10", "trim:1:3"])

    consumer = Consumer(
        {
            "bootstrap.servers": broker.bootstrap_of("PLAINTEXT"),
            "group.id": "trim-reader",
            "enable.auto.commit": False,
        }
    )
    try:
        consumer.assign([TopicPartition("trim", 0, OFFSET_BEGINNING)])
        deadline = time.monotonic() + 10
        msg = None
        while msg is None and time.monotonic() < deadline:
            msg = consumer.poll(0.2)
        assert msg is not None and msg.error() is None, msg and msg.error()
        assert (msg.offset(), msg.value()) == (4, b"t4")
    finally:
        consumer.close()


def test_delete_records_reports_each_partition_error(broker: SecureBroker, tmp_path: Path) -> None:
    plan = tmp_path / "offsets.json"
    plan.write_text(
        '{"partitions": [{"topic": "absent", "partition": 0, "offset": 1},'
        ' {"topic": "ledger", "partition": 2, "offset": 7}]}'  # no version: 1
    )
    code, out, _ = oncelog(broker, "delete-records", "--offset-json-file", str(plan))
    assert code == 1
    assert lines(out) == [
        "Executing records delete operation",
        "Records delete operation completed:",
        "partition: absent-0\terror: UNKNOWN_TOPIC_OR_PART (3): Broker: Unknown topic or partition",
        "partition: ledger-2\terror: OFFSET_OUT_OF_RANGE (1): Broker: Offset out of range",
    ]


def test_log_dirs_describe_shows_partitions_and_sizes(broker: SecureBroker) -> None:
    code, out, err = oncelog(broker, "log-dirs", "--describe", "--topic-list", "ledger,wide")
    assert (code, err) == (0, "")
    first, second, document = lines(out)
    assert first == "Querying brokers for log directories information"
    assert second == "Received log directory information from brokers 1"
    assert list(json.loads(document)) == ["brokers", "version"]  # Kafka's key order
    assert document.startswith('{"brokers":[{"broker":1,"logDirs":[{"partitions":[{"partition":')
    assert document.endswith(f'"error":null,"logDir":"{broker.data_dir}"}}]}}],"version":1}}')
    (broker_entry,) = json.loads(document)["brokers"]
    (log_dir,) = broker_entry["logDirs"]
    replicas = {p["partition"]: p for p in log_dir["partitions"]}
    assert sorted(replicas) == sorted([f"ledger-{p}" for p in range(3)] + [
        f"wide-{p}" for p in range(12)
    ])  # fmt: skip
    on_disk = (broker.data_dir / "ledger-0" / ("0" * 20 + ".log")).stat().st_size
    assert replicas["ledger-0"] == {
        "partition": "ledger-0",
        "size": on_disk,
        "offsetLag": 0,
        "isFuture": False,
    }
    assert on_disk > 0 and replicas["ledger-1"]["size"] > 0 and replicas["wide-7"]["size"] > 0
    assert replicas["ledger-2"]["size"] == 0

    code, out, _ = oncelog(broker, "log-dirs", "--describe", "--broker-list", "1")
    partitions = json.loads(lines(out)[2])["brokers"][0]["logDirs"][0]["partitions"]
    assert code == 0 and "__consumer_offsets-0" in {p["partition"] for p in partitions}

    code, out, err = oncelog(broker, "log-dirs", "--describe", "--broker-list", "1,5,3")
    assert (code, out) == (1, "")
    assert lines(err) == [
        "Error: The given brokers do not exist from --broker-list: 3,5. Current existent brokers: 1"
    ]


def test_command_config_reaches_a_sasl_listener(broker: SecureBroker, tmp_path: Path) -> None:
    good = tmp_path / "admin.properties"
    good.write_text(
        "# the admin's login\nsecurity.protocol=SASL_PLAINTEXT\nsasl.mechanism=PLAIN\n"
        "sasl.username=admin\nsasl.password=admin-secret\n"
    )
    plan = tmp_path / "offsets.json"
    plan.write_text('{"partitions": [{"topic": "ledger", "partition": 1, "offset": 0}]}')
    sasl = {"listener": "SASL_PLAINTEXT"}
    config = ("--command-config", str(good))
    code, out, err = oncelog(broker, "get-offsets", "--topic", "ledger", *config, **sasl)
    assert (code, lines(out), err) == (0, ["ledger:0:5", "ledger:1:2", "ledger:2:0"], "")
    code, out, err = oncelog(
        broker, "delete-records", "--offset-json-file", str(plan), *config, **sasl
    )
    assert (code, lines(out)[-1], err) == (0, "partition: ledger-1\tlow_watermark: 0", "")
    code, out, err = oncelog(
        broker, "log-dirs", "--describe", "--topic-list", "ledger", *config, **sasl
    )
    assert (code, err) == (0, "") and '"partition":"ledger-0"' in out

    # A refused login is one line with the broker's reason: its answer, not a timeout.
    wrong = tmp_path / "wrong.properties"
    wrong.write_text(good.read_text().replace("admin-secret", "not-it"))
    refused = "Authentication failed: Invalid username or password"
    for tool in (("get-offsets",), ("log-dirs", "--describe")):
        code, out, err = oncelog(broker, *tool, "--command-config", str(wrong), **sasl)
        assert code == 1 and out == "", (tool, out, err)
        assert len(lines(err)) == 1 and err.startswith("Error: _AUTHENTICATION"), (tool, err)
        assert refused in err, (tool, err)
    code, out, _ = oncelog(
        broker,
        "delete-records",
        "--offset-json-file",
        str(plan),
        "--command-config",
        str(wrong),
        **sasl,
    )
    assert code == 1 and lines(out)[-1].startswith("partition: ledger-1\terror: _AUTHENTICATION")


def test_bad_input_is_one_error_line(broker: SecureBroker, tmp_path: Path) -> None:
    """Every bad command line or file: exit 2 (1 when nothing matches), one `Error:` line on
    stderr, nothing on stdout, no traceback."""
    archive = '{"topic": "ledger-archive", "partition": 0'
    files = {
        "malformed.json": '{"partitions": [' + archive + ', "offset": 1}',
        "not-object.json": "[1, 2]",
        "duplicate.json": '{"partitions": ['
        + archive
        + ', "offset": 1}, '
        + archive
        + ', "offset": 1}]}',
        "version-2.json": '{"partitions": [], "version": 2}',
        "no-partitions.json": '{"version": 1}',
        "no-offset.json": '{"partitions": [' + archive + "}]}",
        "text-offset.json": '{"partitions": [' + archive + ', "offset": "1"}]}',
        "binary.json": b"\xff\xfe\x00",
        "unknown-key.properties": "no.such.setting=1\n",
        "not-properties.properties": "just a line\n",
    }
    for name, content in files.items():
        path = tmp_path / name
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content)

    def records(name: str) -> tuple[str, ...]:
        return ("delete-records", "--offset-json-file", str(tmp_path / name))

    cases: dict[tuple[str, ...], tuple[int, str]] = {
        ("get-offsets", "--time", "yesterday"): (2, "Error: Malformed time argument yesterday."),
        ("get-offsets", "--time", "-7"): (2, "Error: Malformed time argument -7."),
        ("get-offsets", "--time", "-5"): (2, "Error: --time -5: earliest-local (-4) and"),
        ("get-offsets", "--topic", "led(ger"): (2, "Error: led(ger is an invalid regex."),
        ("get-offsets", "--partitions", "0,x"): (2, "Error: --partitions expects a comma"),
        ("get-offsets", "--topic-partitions", "ledger:x"): (
            2,
            "Error: Invalid rule specification: ledger:x",
        ),
        ("get-offsets", "--topic-partitions", "ledger", "--partitions", "0"): (
            2,
            "Error: --topic-partitions cannot be used with --topic or --partitions",
        ),
        ("get-offsets", "--topic", "absent.*"): (
            1,
            "Error: Could not match any topic-partitions with the specified filters",
        ),
        ("get-offsets", "--command-config", str(tmp_path / "missing.properties")): (
            2,
            "Error: cannot read --command-config: No such file or directory",
        ),
        ("get-offsets", "--command-config", str(tmp_path / "unknown-key.properties")): (
            2,
            "Error: bad client settings:",
        ),
        (
            "log-dirs",
            "--describe",
            "--command-config",
            str(tmp_path / "not-properties.properties"),
        ): (
            2,
            "Error: --command-config: not key=value: just a line",
        ),
        ("log-dirs", "--describe", "--broker-list", "1,one"): (
            2,
            "Error: --broker-list expects broker ids",
        ),
        records("absent.json"): (2, "Error: cannot read --offset-json-file: No such file"),
        records("malformed.json"): (2, "Error: The input string is not a valid JSON"),
        records("binary.json"): (2, "Error: The input string is not a valid JSON"),
        records("not-object.json"): (2, "Error: The offset JSON must be an object"),
        records("duplicate.json"): (
            2,
            "Error: Offset json file contains duplicate topic partitions: ledger-archive-0",
        ),
        records("version-2.json"): (2, "Error: Not supported version field value 2"),
        records("no-partitions.json"): (2, "Error: Missing partitions field"),
        records("no-offset.json"): (2, "Error: partitions[0]: missing field `offset`"),
        records("text-offset.json"): (2, "Error: partitions[0]: `offset` must be an integer"),
        (
            *records("malformed.json"),
            "--command-config",
            str(tmp_path / "unknown-key.properties"),
        ): (
            2,
            "Error: The input string is not a valid JSON",
        ),
    }
    results = dict(zip(cases, run_all(broker, list(cases)), strict=True))
    for args, (want_code, want_start) in cases.items():
        code, out, err = results[args]
        assert (code, out) == (want_code, ""), (args, code, out, err)
        assert len(lines(err)) == 1 and err.startswith(want_start), (args, err)

    # Without --describe (Kafka's tool requires it) argparse's usage error, exit 2.
    code, out, err = oncelog(broker, "log-dirs")
    assert code == 2 and out == "" and "--describe" in err
    # No file was valid: nothing was deleted.
    code, out, _ = oncelog(broker, "get-offsets", "--topic", "ledger-archive", "--time", "-2")
    assert (code, lines(out)) == (0, ["ledger-archive:0:0"])
