"""The Produce and Fetch readers of a response's error codes (on every request's path) find
exactly what the generic walk over the whole answer finds; the Fetch one also counts each
topic's record bytes."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from oncelog.broker.metrics import _count_fetch, _error_codes, _produce_error_codes, _TopicBytes

codes = st.sampled_from([0, 0, 0, 1, 6, 45])

produce_answers = st.fixed_dictionaries(
    {
        "responses": st.lists(
            st.fixed_dictionaries(
                {
                    "name": st.just("t"),
                    "partition_responses": st.lists(
                        st.fixed_dictionaries(
                            {
                                "index": st.integers(0, 9),
                                "error_code": codes,
                                "record_errors": st.just([]),
                            }
                        ),
                        max_size=4,
                    ),
                }
            ),
            max_size=3,
        ),
        "throttle_time": st.just(0),
    }
)
fetch_answers = st.fixed_dictionaries(
    {
        "throttle_time": st.just(0),
        "error_code": codes,
        "session_id": st.integers(0, 5),
        "responses": st.lists(
            st.fixed_dictionaries(
                {
                    "topic": st.sampled_from(["t", "u"]),
                    "partitions": st.lists(
                        st.fixed_dictionaries(
                            {
                                "partition_index": st.integers(0, 9),
                                "error_code": codes,
                                "aborted_transactions": st.none()
                                | st.lists(
                                    st.fixed_dictionaries(
                                        {
                                            "producer_id": st.integers(0, 9),
                                            "first_offset": st.just(0),
                                        }
                                    ),
                                    max_size=2,
                                ),
                                "records": st.sampled_from([b"", b"x", b"xyz" * 10]),
                            }
                        ),
                        max_size=4,
                    ),
                }
            ),
            max_size=3,
        ),
    }
)


@settings(max_examples=200, deadline=None)
@given(answer=produce_answers)
def test_produce_error_codes_are_the_generic_walks(answer: dict[str, Any]) -> None:
    assert sorted(_produce_error_codes(answer)) == sorted(_error_codes(answer))


@settings(max_examples=200, deadline=None)
@given(answer=fetch_answers)
def test_fetch_error_codes_are_the_generic_walks(answer: dict[str, Any]) -> None:
    counter = _TopicBytes("bytes", "")
    assert sorted(_count_fetch(answer, counter)) == sorted(_error_codes(answer))
    expected: dict[str, int] = {}
    for topic in answer["responses"]:
        for p in topic["partitions"]:
            expected[topic["topic"]] = expected.get(topic["topic"], 0) + len(p["records"])
    assert {t: c[0] for t, c in counter.by_topic.items()} == {
        t: n for t, n in expected.items() if n
    }
