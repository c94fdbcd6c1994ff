"""oncelog's tagged fields on DescribeLogDirs (protocol.extensions): a client that skips
unknown tags, as every Kafka client does, reads exactly the bytes Kafka would have sent, and
our client reads the cleaner state back; a response without our tags (Apache Kafka) reads as
unknown (-1)."""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st
from kio.index import load_response_schema
from kio.serial import entity_reader

from oncelog.protocol.codec import build, drop_unknown_tags, encode_entity, response_class
from oncelog.protocol.extensions import DIRTY_RATIO_TAG, LAST_CLEAN_TIME_TAG

API = 35
INT64 = st.integers(-(2**63), 2**63 - 1)
NAMES = st.text(st.characters(codec="utf-8", exclude_categories=["Cs"]), max_size=12)

PARTITION = st.fixed_dictionaries(
    {
        "partition_index": st.integers(0, 2**31 - 1),
        "partition_size": st.integers(0, 2**63 - 1),
        "offset_lag": st.integers(0, 2**63 - 1),
        "is_future_key": st.booleans(),
        "dirty_ratio": st.one_of(st.just(-1.0), st.floats(0.0, 1.0)),
        "last_clean_time_ms": st.one_of(st.just(-1), st.integers(0, 2**63 - 1)),
    }
)
RESPONSE = st.fixed_dictionaries(
    {
        "throttle_time": st.integers(0, 2**31 - 1),
        "error_code": st.just(0),
        "results": st.lists(
            st.fixed_dictionaries(
                {
                    "error_code": st.sampled_from([0, 56]),
                    "log_dir": NAMES,
                    "total_bytes": INT64,
                    "usable_bytes": INT64,
                    "topics": st.lists(
                        st.fixed_dictionaries(
                            {"name": NAMES, "partitions": st.lists(PARTITION, max_size=3)}
                        ),
                        max_size=3,
                    ),
                }
            ),
            max_size=2,
        ),
    }
)


def partitions(response: Any) -> list[Any]:
    return [p for r in response.results for t in r.topics for p in t.partitions]


@given(RESPONSE, st.integers(1, 4))
def test_clients_that_skip_unknown_tags_read_kafkas_bytes(data: dict[str, Any], v: int) -> None:
    ours = encode_entity(build(response_class(API, v), data))
    stock_cls = load_response_schema(API, v)
    kafka = encode_entity(build(stock_cls, data))
    assert drop_unknown_tags(stock_cls, ours) == kafka
    decoded, size = entity_reader(stock_cls)(drop_unknown_tags(stock_cls, ours), 0)
    assert size == len(kafka)
    assert decoded == build(stock_cls, data)


@given(RESPONSE, st.integers(2, 4))
def test_our_client_reads_the_cleaner_state(data: dict[str, Any], v: int) -> None:
    cls = response_class(API, v)
    decoded, _ = entity_reader(cls)(encode_entity(build(cls, data)), 0)
    sent = [p for r in data["results"] for t in r["topics"] for p in t["partitions"]]
    got = [(p.dirty_ratio, p.last_clean_time_ms) for p in partitions(decoded)]
    assert got == [(p["dirty_ratio"], p["last_clean_time_ms"]) for p in sent]
    # Against Apache Kafka: no tags, read as unknown.
    kafka = encode_entity(build(load_response_schema(API, v), data))
    from_kafka, _ = entity_reader(cls)(kafka, 0)
    assert all((p.dirty_ratio, p.last_clean_time_ms) == (-1.0, -1) for p in partitions(from_kafka))


def test_tags_are_on_the_wire_with_their_numbers() -> None:
    cls = response_class(API, 4)
    entry = {
        "partition_index": 0,
        "partition_size": 1,
        "offset_lag": 0,
        "is_future_key": False,
        "dirty_ratio": 0.5,
        "last_clean_time_ms": 7,
    }
    result = {"error_code": 0, "log_dir": "d", "topics": [{"name": "t", "partitions": [entry]}]}
    body = encode_entity(build(cls, {"throttle_time": 0, "error_code": 0, "results": [result]}))
    # Two tags: 10000 (varint 90 4e), 8 bytes of float64 0.5; 10001 (91 4e), int64 7.
    tags = bytes([2]) + bytes.fromhex("904e") + bytes([8]) + bytes.fromhex("3fe0000000000000")
    tags += bytes.fromhex("914e") + bytes([8]) + (7).to_bytes(8, "big")
    assert tags in body
    assert DIRTY_RATIO_TAG == 10000 and LAST_CLEAN_TIME_TAG == 10001
    # v1 is not flexible: no tags, kio's own class.
    assert response_class(API, 1) is load_response_schema(API, 1)
