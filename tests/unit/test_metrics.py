"""Error counting by error code, as ErrorsPerSec does."""

from __future__ import annotations

from oncelog.broker.metrics import BrokerMetrics
from oncelog.errors import ErrorCode


def test_every_nested_error_code_is_counted_once() -> None:
    metrics = BrokerMetrics()
    answer = {
        "throttle_time": 0,
        "responses": [
            {
                "name": "t",
                "partition_responses": [
                    {"index": 0, "error_code": ErrorCode.none},
                    {"index": 1, "error_code": ErrorCode.out_of_order_sequence_number},
                    {"index": 2, "error_code": ErrorCode.out_of_order_sequence_number},
                    {"index": 3, "error_code": ErrorCode.corrupt_message},
                ],
            }
        ],
    }
    metrics.record_response(0, answer)
    assert metrics.requests[0] == 1
    assert metrics.errors == {
        (0, ErrorCode.out_of_order_sequence_number): 2,
        (0, ErrorCode.corrupt_message): 1,
    }
