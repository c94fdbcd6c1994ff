"""Option parsing, offset JSON and partition planning of the Spark source (no JVM, no broker)."""

from __future__ import annotations

import itertools
import json

import pytest

from oncelog.spark.offsets import (
    INITIAL_KEY,
    START_KEY,
    OffsetError,
    effective_start,
    end_offset_json,
    from_json,
    initial_offset_json,
    parse_offset_spec,
    resolve,
    to_json,
)
from oncelog.spark.options import (
    Assign,
    OptionError,
    Subscribe,
    SubscribePattern,
    parse_options,
)
from oncelog.spark.partitions import OffsetRange, limit_offsets, plan_ranges

BOOT = {"kafka.bootstrap.servers": "127.0.0.1:9092"}


def opts(**extra: str) -> dict[str, str]:
    # Spark hands options over with lower-cased keys; parse_options must accept both.
    return {**BOOT, **extra}


def test_subscription_styles() -> None:
    assert parse_options(opts(subscribe="a, b,c"), streaming=True).subscription == Subscribe(
        ("a", "b", "c")
    )
    pattern = parse_options(opts(subscribePattern="in-.*"), streaming=True).subscription
    assert isinstance(pattern, SubscribePattern)
    assert pattern.matches("in-1") and not pattern.matches("xin-1")
    assigned = parse_options(opts(assign='{"t":[1,0],"u":[2]}'), streaming=True).subscription
    assert assigned == Assign((("t", 0), ("t", 1), ("u", 2)))


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ({}, "exactly one of 'subscribe', 'subscribePattern' or 'assign'"),
        ({"subscribe": "a", "assign": '{"a":[0]}'}, "exactly one of"),
        ({"subscribe": " , "}, "'subscribe' must list at least one topic"),
        ({"subscribePattern": "("}, "'subscribePattern' is not a valid regex"),
        ({"assign": "[0]"}, "option 'assign' must be JSON"),
        ({"assign": '{"a":[-1]}'}, "option 'assign' must be JSON"),
        ({"subscribe": "a", "startingOffset": "earliest"}, "unknown option(s) 'startingoffset'"),
        ({"subscribe": "a", "maxOffsetsPerTrigger": "0"}, "'maxOffsetsPerTrigger' must be a pos"),
        ({"subscribe": "a", "minPartitions": "x"}, "'minPartitions' must be a positive integer"),
        ({"subscribe": "a", "failOnDataLoss": "yes"}, "'failOnDataLoss' must be 'true' or"),
        ({"subscribe": "a", "startingOffsets": "first"}, "'startingOffsets' must be 'earliest'"),
        ({"subscribe": "a", "startingOffsets": '{"a":{"0":-3}}'}, "'startingOffsets' must be"),
        ({"subscribe": "a", "endingOffsets": "latest"}, "'endingOffsets' is only valid for batch"),
        ({"subscribe": "a", "kafka.group.id": "g"}, "'kafka.group.id' is not supported"),
        ({"subscribe": "a", "kafka.isolation.level": "dirty"}, "'kafka.isolation.level' must"),
    ],
)
def test_bad_options_name_the_option(extra: dict[str, str], message: str) -> None:
    with pytest.raises(OptionError) as info:
        parse_options(opts(**extra), streaming=True)
    assert message in str(info.value)


def test_unknown_option_lists_known_ones() -> None:
    with pytest.raises(OptionError) as info:
        parse_options(opts(subscribe="a", bogus="1"), streaming=True)
    assert "known options: subscribe, subscribePattern, assign, startingOffsets" in str(info.value)


def test_bootstrap_required() -> None:
    with pytest.raises(OptionError, match=r"'kafka\.bootstrap\.servers' is required"):
        parse_options({"subscribe": "a"}, streaming=True)


def test_defaults_and_kafka_params() -> None:
    stream = parse_options(opts(subscribe="a", **{"kafka.fetch.max.bytes": "1000"}), streaming=True)
    assert stream.starting_offsets == "latest" and stream.ending_offsets == "latest"
    assert stream.fail_on_data_loss and not stream.include_headers
    assert stream.read_committed
    assert stream.kafka_params == {
        "bootstrap.servers": "127.0.0.1:9092",
        "fetch.max.bytes": "1000",
        "isolation.level": "read_committed",
    }
    config = stream.consumer_config("g1")
    assert config["group.id"] == "g1" and config["enable.auto.commit"] is False
    assert config["auto.offset.reset"] == "error"

    batch = parse_options(opts(subscribe="a"), streaming=False)
    assert batch.starting_offsets == "earliest"
    lenient = parse_options(
        {
            "kafka.bootstrap.servers": "h:1",
            "subscribe": "a",
            "failondataloss": "False",
            "includeheaders": "TRUE",
            "kafka.isolation.level": "read_uncommitted",
        },
        streaming=False,
    )
    assert not lenient.fail_on_data_loss and lenient.include_headers
    assert not lenient.read_committed
    assert lenient.consumer_config("g")["auto.offset.reset"] == "earliest"


def test_batch_only_and_stream_only_options() -> None:
    with pytest.raises(OptionError, match="cannot be 'latest'"):
        parse_options(opts(subscribe="a", startingOffsets="latest"), streaming=False)
    with pytest.raises(OptionError, match="cannot be 'latest'"):
        parse_options(opts(subscribe="a", startingOffsets='{"a":{"0":-1}}'), streaming=False)
    with pytest.raises(OptionError, match="cannot be 'earliest'"):
        parse_options(opts(subscribe="a", endingOffsets='{"a":{"0":-2}}'), streaming=False)
    with pytest.raises(OptionError, match="only valid for streaming"):
        parse_options(opts(subscribe="a", maxOffsetsPerTrigger="10"), streaming=False)
    ok = parse_options(opts(subscribe="a", endingOffsets='{"a":{"0":5}}'), streaming=False)
    assert ok.ending_offsets == {"a": {0: 5}}


def test_offset_json_round_trip() -> None:
    offsets = {("b", 1): 7, ("a", 10): 3, ("a", 2): 0}
    data = to_json(offsets)
    assert json.dumps(data) == '{"a": {"2": 0, "10": 3}, "b": {"1": 7}}'
    assert from_json(json.loads(json.dumps(data))) == offsets
    assert parse_offset_spec(json.dumps({"a": {"0": 23, "1": -2}}), "x") == {"a": {0: 23, 1: -2}}
    assert parse_offset_spec(" Earliest ", "x") == "earliest"


def test_resolve_sentinels_and_defaults() -> None:
    parts = [("a", 0), ("a", 1), ("b", 0)]
    earliest = {("a", 0): 5, ("a", 1): 0, ("b", 0): 2}
    latest = {("a", 0): 50, ("a", 1): 10, ("b", 0): 20}
    assert resolve("earliest", parts, earliest, latest, "s", -2) == earliest
    assert resolve("latest", parts, earliest, latest, "s", -2) == latest
    spec = {"a": {0: 7, 1: -1}}
    assert resolve(spec, parts, earliest, latest, "s", -2) == {
        ("a", 0): 7,
        ("a", 1): 10,
        ("b", 0): 2,
    }
    with pytest.raises(OffsetError, match=r"names partitions that are not subscribed.*c-0"):
        resolve({"c": {0: 1}}, parts, earliest, latest, "startingOffsets", -2)


def test_batch0_start_travels_in_the_end_offset() -> None:
    initial = initial_offset_json({("a", 0): 100})
    assert initial[INITIAL_KEY] is True
    end0 = end_offset_json(initial, {("a", 0): 130}, {})
    assert end0 == {"a": {"0": 130}, START_KEY: {"a": {"0": 100}}}
    # A replay of batch 0 after a restart: initialOffset re-resolved "latest" to 150.
    replayed_initial = initial_offset_json({("a", 0): 150})
    assert effective_start(replayed_initial, end0) == {("a", 0): 100}
    # Batch 1 starts at batch 0's end; a partition discovered now carries its earliest offset.
    end1 = end_offset_json(end0, {("a", 0): 140, ("a", 1): 9}, {("a", 1): 4})
    assert end1 == {"a": {"0": 140, "1": 9}, START_KEY: {"a": {"1": 4}}}
    assert effective_start(end0, end1) == {("a", 0): 130, ("a", 1): 4}
    end2 = end_offset_json(end1, {("a", 0): 141, ("a", 1): 9}, {})
    assert START_KEY not in end2
    assert effective_start(end1, end2) == {("a", 0): 140, ("a", 1): 9}


def test_plan_ranges_one_per_partition_and_min_partitions() -> None:
    start = {("a", 0): 0, ("a", 1): 10, ("b", 0): 5}
    end = {("a", 0): 100, ("a", 1): 10, ("b", 0): 25, ("c", 0): 3}
    ranges = plan_ranges(start, end)
    assert ranges == [
        OffsetRange("a", 0, 0, 100),
        OffsetRange("b", 0, 5, 25),
        OffsetRange("c", 0, 0, 3),
    ]
    split = plan_ranges(start, end, min_partitions=10)
    assert len(split) >= 10
    for tp, lo, hi in ((("a", 0), 0, 100), (("b", 0), 5, 25), (("c", 0), 0, 3)):
        pieces = sorted((r.start, r.end) for r in split if (r.topic, r.partition) == tp)
        assert pieces[0][0] == lo and pieces[-1][1] == hi
        assert all(a[1] == b[0] for a, b in itertools.pairwise(pieces))
    # The biggest range gets most pieces; no piece is empty.
    assert len([r for r in split if r.topic == "a"]) > len([r for r in split if r.topic == "c"])
    assert all(r.size > 0 for r in split)
    assert plan_ranges(start, end, min_partitions=2) == ranges


def test_limit_offsets_splits_the_budget_by_backlog() -> None:
    start = {("a", 0): 0, ("a", 1): 100, ("a", 2): 7}
    latest = {("a", 0): 300, ("a", 1): 200, ("a", 2): 7}
    end = limit_offsets(start, latest, 100)
    moved = {tp: end[tp] - start[tp] for tp in start}
    assert sum(moved.values()) == 100
    assert moved == {("a", 0): 75, ("a", 1): 25, ("a", 2): 0}
    assert limit_offsets(start, latest, 1000) == latest
    # Rounding keeps the exact total and never passes the latest offset.
    small = limit_offsets({("x", p): 0 for p in range(3)}, {("x", p): 1 for p in range(3)}, 2)
    assert sum(small.values()) == 2 and all(v <= 1 for v in small.values())
    # A partition new since the start begins at 0 in the budget (the planner carries its start).
    assert limit_offsets({}, {("n", 0): 10}, 4) == {("n", 0): 4}


def test_data_source_schema_and_readers() -> None:
    from oncelog.spark import OncelogDataSource
    from oncelog.spark.batch_reader import KafkaBatchReader
    from oncelog.spark.stream_reader import KafkaStreamReader

    assert OncelogDataSource.name() == "oncelog"
    plain = OncelogDataSource({**BOOT, "subscribe": "a"})
    assert plain.schema().fieldNames() == [
        "key",
        "value",
        "topic",
        "partition",
        "offset",
        "timestamp",
        "timestampType",
    ]
    with_headers = OncelogDataSource({**BOOT, "subscribe": "a", "includeHeaders": "true"})
    assert with_headers.schema().fieldNames()[-1] == "headers"
    assert isinstance(plain.reader(plain.schema()), KafkaBatchReader)
    stream = plain.streamReader(plain.schema())
    assert isinstance(stream, KafkaStreamReader)
    # Executors get a pickled reader: no driver consumer travels with it.
    import pickle

    copy = pickle.loads(pickle.dumps(stream))
    assert copy.options == stream.options and copy._fetcher is None
    with pytest.raises(OptionError, match="unknown option"):
        OncelogDataSource({**BOOT, "subscribe": "a", "typo": "1"}).reader(plain.schema())
