"""The transactions test's check (`check_copy`) on hand-made partitions: each anomaly kind is
found, with evidence, and a clean copy is clean; Java's String.hashCode for fault targets."""

from __future__ import annotations

from collections.abc import Hashable, Sequence

import pytest

from oncelog.verify.copy_check import CopyCheck, check_copy
from oncelog.verify.roles import java_string_hash
from oncelog.verify.txn_system import coordinator_partition


def records(*values: Hashable, start: int = 0) -> list[tuple[int, Hashable]]:
    """Records at consecutive offsets (transaction markers would leave gaps; none needed)."""
    return [(start + i, v) for i, v in enumerate(values)]


INPUT: dict[int, Sequence[Hashable]] = {0: [0, 2, 4, 6], 1: [1, 3, 5, 7]}


def counts(result: CopyCheck) -> tuple[int, int, int, int]:
    return result.duplicates, result.missing, result.order_violations, result.unexpected


def test_a_clean_copy_is_clean() -> None:
    result = check_copy(INPUT, {0: records(0, 2, 4, 6), 1: records(1, 3, 5, 7, start=10)})
    assert result.ok and counts(result) == (0, 0, 0, 0)
    assert (result.expected, result.found, result.copied) == (8, 8, 8)
    assert result.examples == {}


def test_empty_is_clean() -> None:
    assert check_copy({}, {}).ok
    assert check_copy({0: []}, {0: []}).ok


def test_a_duplicate_is_found_with_both_offsets() -> None:
    result = check_copy(INPUT, {0: records(0, 2, 2, 4, 6), 1: records(1, 3, 5, 7)})
    assert counts(result) == (1, 0, 0, 0) and not result.ok
    assert result.copied == 8
    assert result.examples["duplicates"] == [{"partition": 0, "value": 2, "offsets": (1, 2)}]


def test_a_rewound_retry_counts_every_extra_copy() -> None:
    """A batch copied twice (an abort that was not one): each repeated record is a duplicate,
    and the repeat is not also an order violation."""
    result = check_copy(INPUT, {0: records(0, 2, 0, 2, 4, 6), 1: records(1, 3, 5, 7)})
    assert counts(result) == (2, 0, 0, 0)


def test_a_missing_value_is_found_with_its_predecessor() -> None:
    result = check_copy(INPUT, {0: records(0, 2, 6), 1: records(1, 3, 5, 7)})
    assert counts(result) == (0, 1, 0, 0)
    assert result.copied == 7
    assert result.examples["missing"] == [{"partition": 0, "value": 4, "expected_after": 2}]


def test_an_empty_output_partition_misses_everything() -> None:
    result = check_copy(INPUT, {0: records(0, 2, 4, 6)})
    assert counts(result) == (0, 4, 0, 0)
    assert [m["value"] for m in result.examples["missing"]] == [1, 3, 5, 7]


def test_an_order_violation_counts_the_fewest_records_out_of_place() -> None:
    """One record moved to the front is one violation, not one per record it jumped."""
    result = check_copy(INPUT, {0: records(6, 0, 2, 4), 1: records(1, 3, 5, 7)})
    assert counts(result) == (0, 0, 1, 0)
    assert result.examples["order_violations"] == [
        {
            "partition": 0,
            "offset": 0,
            "value": 6,
            "input_before": 4,
            "input_before_offset": 3,  # the input's 4 came before 6; the output has it after
            "input_after": None,
            "input_after_offset": None,
        }
    ]


def test_swapped_neighbours_are_one_violation_with_evidence() -> None:
    result = check_copy(INPUT, {0: records(0, 4, 2, 6), 1: records(1, 3, 5, 7)})
    assert counts(result) == (0, 0, 1, 0)
    (example,) = result.examples["order_violations"]
    assert (example["partition"], example["offset"], example["value"]) == (0, 1, 4)
    assert (example["input_before"], example["input_before_offset"]) == (2, 2)


def test_a_reversed_partition_keeps_one_record_in_order() -> None:
    result = check_copy({0: [1, 2, 3, 4, 5]}, {0: records(5, 4, 3, 2, 1)})
    assert counts(result) == (0, 0, 4, 0)


def test_values_in_the_wrong_partition_are_unexpected_and_missing() -> None:
    """A copy written to another partition number breaks the partition mapping."""
    result = check_copy(INPUT, {0: records(0, 2, 4, 6, 7), 1: records(1, 3, 5)})
    assert counts(result) == (0, 1, 0, 1)
    assert result.examples["unexpected"] == [{"partition": 0, "offset": 4, "value": 7}]
    assert result.examples["missing"][0]["value"] == 7


def test_a_value_never_seeded_is_unexpected() -> None:
    result = check_copy({0: [0, 1]}, {0: records(0, "garbage", 1)})
    assert counts(result) == (0, 0, 0, 1)


def test_all_kinds_at_once_and_the_examples_are_bounded() -> None:
    want = {0: list(range(20))}
    got = list(range(10, 20)) + list(range(10)) + [3, 3, 99]  # 10 out of place, 2 dups
    result = check_copy(want, {0: records(*got)}, examples=2)
    assert (result.duplicates, result.order_violations, result.unexpected) == (2, 10, 1)
    assert result.missing == 0
    assert all(len(v) <= 2 for v in result.examples.values())
    data = result.to_json()
    assert data["ok"] is False and data["order_violations"] == 10


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("", 0),
        ("a", 97),
        ("hello", 99162322),
        ("transactional-id-0", 1051133890),
        ("polygenelubricants", -(1 << 31)),  # Integer.MIN_VALUE
        ("\U0001f600", 1772899),  # a surrogate pair: two UTF-16 code units
        ("txn-test-09e1947a-in-copier1", 1149934034),
    ],
)
def test_java_string_hash(text: str, expected: int) -> None:
    """The expected values are what Java 17's String.hashCode() printed."""
    assert java_string_hash(text) == expected


def test_coordinator_partition_as_kafka_places_it() -> None:
    assert coordinator_partition("polygenelubricants", 50) == 0  # abs(MIN_VALUE) is 0 in Kafka
    assert coordinator_partition("hello", 50) == 99162322 % 50
    assert coordinator_partition("transactional-id-0", 50) == 1051133890 % 50
