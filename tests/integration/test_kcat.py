"""kcat (the librdkafka command-line client, its own librdkafka build) against the real broker.

kcat cannot create topics: they come from confluent's AdminClient or from auto-creation on
Metadata. Keys pick partitions with the Java-compatible murmur2 partitioner, so the expected
partition of every message is known in advance and checked against what is read back.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import time

import pytest
from kafka.partitioner.default import murmur2

from tests.broker_process import BrokerProcess
from tests.integration.helpers import (
    PARTITIONS,
    TIMEOUT,
    Rec,
    ascii_value_of,
    assert_same_records,
    create_topic,
    expected_offset_for_time,
    key_of,
)

pytestmark = pytest.mark.integration

KCAT = shutil.which("kcat") or shutil.which("kafkacat")


def kcat(broker: BrokerProcess, *args: str, stdin: bytes | None = None) -> str:
    assert KCAT is not None, "kcat is not installed (apt-get install -y kcat)"
    proc = subprocess.run(
        [KCAT, "-b", broker.bootstrap, "-X", "socket.timeout.ms=15000", *args],
        input=stdin,
        capture_output=True,
        timeout=TIMEOUT,
        check=False,
    )
    assert proc.returncode == 0, (
        f"kcat {' '.join(args)} exited {proc.returncode}: {proc.stderr.decode(errors='replace')}"
    )
    return proc.stdout.decode()


def kcat_produce(
    broker: BrokerProcess, topic: str, lines: list[tuple[bytes, bytes]], *extra: str
) -> None:
    """Produce key<TAB>value lines with acks=all and the murmur2 key partitioner; kcat exits
    non-zero if any delivery fails."""
    data = b"".join(k + b"\t" + v + b"\n" for k, v in lines)
    kcat(
        broker,
        "-P",
        "-t",
        topic,
        "-K",
        "\t",
        "-X",
        "acks=all",
        "-X",
        "partitioner=murmur2_random",
        *extra,
        stdin=data,
    )


def kcat_consume(broker: BrokerProcess, topic: str, *args: str) -> list[Rec]:
    """Consume with -e (exit at end) and the JSON envelope."""
    out = kcat(broker, "-C", "-t", topic, "-J", "-e", "-q", "-X", "fetch.wait.max.ms=50", *args)
    recs = []
    for line in out.splitlines():
        if not line.strip():
            continue
        obj = json.loads(line)
        key = obj["key"].encode() if obj["key"] is not None else None
        value = obj["payload"].encode() if obj["payload"] is not None else None
        recs.append(Rec(obj["partition"], obj["offset"], key, value, obj["ts"]))
    return recs


def kcat_query(broker: BrokerProcess, topic: str, targets: dict[int, int]) -> dict[int, int]:
    """kcat -Q: offsets for timestamps (-1 = latest, -2 = earliest), one target per partition."""
    args = ["-Q", "-J"]
    for partition, ts in targets.items():
        args += ["-t", f"{topic}:{partition}:{ts}"]
    out = json.loads(kcat(broker, *args))[topic]
    return {int(k): v["offset"] for k, v in out.items() if k != "topic"}


def partition_for(key: bytes, partitions: int = PARTITIONS) -> int:
    return (murmur2(key) & 0x7FFFFFFF) % partitions


def expected_layout(lines: list[tuple[bytes, bytes]], partitions: int = PARTITIONS) -> list[Rec]:
    """Where each line must land: its key's partition, at the next offset there."""
    counters = dict.fromkeys(range(partitions), 0)
    out = []
    for key, value in lines:
        p = partition_for(key, partitions)
        out.append(Rec(p, counters[p], key, value))
        counters[p] += 1
    assert all(counters.values()), f"test data leaves a partition empty: {counters}"
    return out


def test_keyed_produce_read_back_offsets_and_time_queries(broker: BrokerProcess) -> None:
    topic = "kcat-keyed"
    create_topic(broker.bootstrap, topic)
    metadata = kcat(broker, "-L", "-t", topic, "-J")
    partitions = json.loads(metadata)["topics"][0]["partitions"]
    assert sorted(p["partition"] for p in partitions) == list(range(PARTITIONS))

    first = [(key_of("kc", i), ascii_value_of("kc", i)) for i in range(400)]
    second = [(key_of("kc", i), ascii_value_of("kc", i)) for i in range(400, 700)]
    kcat_produce(broker, topic, first)
    time.sleep(0.05)  # so every message of the second run has a later CreateTime
    kcat_produce(broker, topic, second)
    expected = expected_layout(first + second)
    ends = dict.fromkeys(range(PARTITIONS), 0)
    for rec in expected:
        ends[rec.partition] = rec.offset + 1

    # Whole topic from the beginning: every record, at its offset, in per-partition order.
    everything = kcat_consume(broker, topic, "-o", "beginning")
    by_p: dict[int, list[Rec]] = {p: [] for p in range(PARTITIONS)}
    for rec in everything:
        by_p[rec.partition].append(rec)
    assert_same_records(expected, by_p)
    timestamps = {(r.partition, r.offset): r.timestamp for r in everything}

    # -o with an absolute offset and with an offset relative to the end, per partition.
    for p in range(PARTITIONS):
        want = [r for r in expected if r.partition == p]
        mid = len(want) // 2
        got = kcat_consume(broker, topic, "-p", str(p), "-o", str(mid))
        assert [(r.offset, r.key, r.value) for r in got] == [
            (r.offset, r.key, r.value) for r in want[mid:]
        ]
        got = kcat_consume(broker, topic, "-p", str(p), "-o", "-3")
        assert [(r.offset, r.key, r.value) for r in got] == [
            (r.offset, r.key, r.value) for r in want[-3:]
        ]
        assert kcat_consume(broker, topic, "-p", str(p), "-o", "end") == []

    # -Q: earliest (-2), latest (-1), and by timestamp.
    assert kcat_query(broker, topic, dict.fromkeys(range(PARTITIONS), -2)) == dict.fromkeys(
        range(PARTITIONS), 0
    )
    assert kcat_query(broker, topic, dict.fromkeys(range(PARTITIONS), -1)) == ends
    with_ts = {
        p: [
            Rec(r.partition, r.offset, r.key, r.value, timestamps[(r.partition, r.offset)])
            for r in expected
            if r.partition == p
        ]
        for p in range(PARTITIONS)
    }
    first_of_second = {}
    for rec in expected[len(first) :]:
        first_of_second.setdefault(rec.partition, rec)
    assert sorted(first_of_second) == list(range(PARTITIONS))
    probes = {
        "zero": dict.fromkeys(range(PARTITIONS), 0),
        "second run": {p: timestamps[(r.partition, r.offset)] for p, r in first_of_second.items()},
        "after all": {p: max(r.timestamp or 0 for r in with_ts[p]) + 1 for p in with_ts},
    }
    for name, targets in probes.items():
        want = {p: expected_offset_for_time(with_ts[p], ts) for p, ts in targets.items()}
        assert kcat_query(broker, topic, targets) == want, name
    # The second-run probe must land exactly on the first message of the second run.
    assert {
        p: expected_offset_for_time(with_ts[p], ts) for p, ts in probes["second run"].items()
    } == {p: r.offset for p, r in first_of_second.items()}

    # -o s@<ts>: start consuming at a timestamp.
    start_ts = probes["second run"][0]
    got = kcat_consume(broker, topic, "-p", "0", "-o", f"s@{start_ts}")
    assert [(r.offset, r.key) for r in got] == [
        (r.offset, r.key)
        for r in expected
        if r.partition == 0 and r.offset >= first_of_second[0].offset
    ]


@pytest.mark.parametrize("codec", ["gzip", "snappy", "lz4", "zstd"])
def test_compressed_produce_and_consume(broker: BrokerProcess, codec: str) -> None:
    topic = f"kcat-{codec}"
    create_topic(broker.bootstrap, topic)
    lines = [(key_of(codec, i), f"kcat {codec} {i:05d} ".encode() * 10) for i in range(1000)]
    kcat_produce(broker, topic, lines, "-z", codec, "-X", "linger.ms=20")
    expected = expected_layout(lines)
    got: dict[int, list[Rec]] = {p: [] for p in range(PARTITIONS)}
    for rec in kcat_consume(broker, topic, "-o", "beginning"):
        got[rec.partition].append(rec)
    assert_same_records(expected, got)


def test_auto_created_topic(broker_factory: type[BrokerProcess]) -> None:
    """No CreateTopics at all: kcat's Metadata request creates the topic with num.partitions."""
    broker = broker_factory("auto", {"num.partitions": str(PARTITIONS)}).start()
    topic = "kcat-auto"
    lines = [(key_of("auto", i), ascii_value_of("auto", i)) for i in range(300)]
    kcat_produce(broker, topic, lines)
    metadata = json.loads(kcat(broker, "-L", "-t", topic, "-J"))
    assert len(metadata["topics"][0]["partitions"]) == PARTITIONS
    expected = expected_layout(lines)
    got: dict[int, list[Rec]] = {p: [] for p in range(PARTITIONS)}
    for rec in kcat_consume(broker, topic, "-o", "beginning"):
        got[rec.partition].append(rec)
    assert_same_records(expected, got)
