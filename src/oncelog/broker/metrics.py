"""Broker counters kept in memory, for the metrics endpoint to expose.

`errors` counts every error code a response carried, per API and code, as Kafka's
RequestMetrics ErrorsPerSec does (a response with three failed partitions counts three).
Duplicates of idempotent batches are answered as successes and counted apart.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from oncelog.errors import ErrorCode


@dataclass
class BrokerMetrics:
    requests: Counter[int] = field(default_factory=Counter)
    errors: Counter[tuple[int, ErrorCode]] = field(default_factory=Counter)
    duplicate_batches: int = 0

    def record_response(self, api_key: int, answer: Mapping[str, Any]) -> None:
        self.requests[api_key] += 1
        for code in _error_codes(answer):
            self.errors[(api_key, code)] += 1


def _error_codes(answer: Mapping[str, Any]) -> list[ErrorCode]:
    """Every non-zero error_code in a response mapping, nested lists included."""
    found: list[ErrorCode] = []
    stack: list[Mapping[str, Any]] = [answer]
    while stack:
        node = stack.pop()
        for key, value in node.items():
            if key == "error_code":
                if value:
                    found.append(ErrorCode(value))
            elif isinstance(value, list) and value and isinstance(value[0], Mapping):
                stack.extend(value)
    return found
