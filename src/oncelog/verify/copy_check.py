"""The check of `oncelog verify transactions` (`check_copy`): a pure function over
per-partition sequences, testable without a broker.

Output partition p must list input partition p's values exactly once, in input order; the
input topic must still hold what was acknowledged. The evidence of each anomaly (partition,
offsets, values) goes into the report.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

#: Examples of each anomaly kind kept for the report.
EXAMPLES = 5

Value = Hashable  # a record's value: an int when it parses as one, else the text


@dataclass(slots=True)
class CopyCheck:
    """Expected values per partition (in order) against the records found there."""

    expected: int = 0
    found: int = 0
    copied: int = 0
    duplicates: int = 0
    missing: int = 0
    order_violations: int = 0
    unexpected: int = 0
    examples: dict[str, list[dict[str, Any]]] = field(default_factory=dict)

    @property
    def anomalies(self) -> int:
        return self.duplicates + self.missing + self.order_violations + self.unexpected

    @property
    def ok(self) -> bool:
        return self.anomalies == 0

    def example(self, kind: str, item: dict[str, Any], limit: int) -> None:
        shown = self.examples.setdefault(kind, [])
        if len(shown) < limit:
            shown.append(item)

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "ok": self.ok}


def _longest_increasing(indices: Sequence[int]) -> set[int]:
    """Positions (into `indices`) of one longest strictly increasing subsequence."""
    tails: list[int] = []  # tails[k]: smallest tail value of an increasing run of length k+1
    tail_at: list[int] = []  # its position
    before = [-1] * len(indices)
    for pos, x in enumerate(indices):
        k = bisect_left(tails, x)
        if k == len(tails):
            tails.append(x)
            tail_at.append(pos)
        else:
            tails[k], tail_at[k] = x, pos
        before[pos] = tail_at[k - 1] if k > 0 else -1
    keep: set[int] = set()
    pos = tail_at[-1] if tail_at else -1
    while pos >= 0:
        keep.add(pos)
        pos = before[pos]
    return keep


def check_copy(
    expected: Mapping[int, Sequence[Value]],
    found: Mapping[int, Sequence[tuple[int, Value]]],
    examples: int = EXAMPLES,
) -> CopyCheck:
    """Does partition p of `found` (offset, value records) hold exactly `expected[p]`, once
    each, in order?

    - duplicate: a further record of a value already found in its partition (each counts);
    - missing: an expected value found nowhere in its partition;
    - order violation: the fewest records that must move to restore the expected order (those
      outside a longest in-order subsequence of first copies);
    - unexpected: a record whose value partition p does not expect (misplaced or never written).
    """
    result = CopyCheck()
    for p in sorted(set(expected) | set(found)):
        want = list(expected.get(p, ()))
        position = {v: i for i, v in enumerate(want)}
        result.expected += len(want)
        first_offset: dict[Value, int] = {}
        firsts: list[tuple[int, Value, int]] = []  # (offset, value, expected index)
        for offset, value in found.get(p, ()):
            result.found += 1
            index = position.get(value)
            if index is None:
                result.unexpected += 1
                item = {"partition": p, "offset": offset, "value": value}
                result.example("unexpected", item, examples)
            elif value in first_offset:
                result.duplicates += 1
                item = {"partition": p, "value": value, "offsets": (first_offset[value], offset)}
                result.example("duplicates", item, examples)
            else:
                first_offset[value] = offset
                firsts.append((offset, value, index))
        result.copied += len(firsts)
        for i, value in enumerate(want):
            if value not in first_offset:
                result.missing += 1
                after = want[i - 1] if i else None
                item = {"partition": p, "value": value, "expected_after": after}
                result.example("missing", item, examples)
        in_order = _longest_increasing([index for _, _, index in firsts])
        for pos, (offset, value, index) in enumerate(firsts):
            if pos in in_order:
                continue
            result.order_violations += 1
            # The evidence: its neighbours in the input, and where the output has them.
            before = want[index - 1] if index > 0 else None
            after = want[index + 1] if index + 1 < len(want) else None
            item = {
                "partition": p,
                "offset": offset,
                "value": value,
                "input_before": before,
                "input_before_offset": first_offset.get(before),
                "input_after": after,
                "input_after_offset": first_offset.get(after),
            }
            result.example("order_violations", item, examples)
    return result
