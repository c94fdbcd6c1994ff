"""Client quotas without IO: Kafka's resolution order, its sampled rate and throttle time,
and the checks AlterClientQuotas and DescribeClientQuotas make."""

from __future__ import annotations

import pytest

from oncelog.broker.quotas import (
    CLIENT_ID,
    FETCH,
    MATCH_DEFAULT,
    MATCH_EXACT,
    MATCH_SPECIFIED,
    PRODUCE,
    REQUEST,
    USER,
    ClientQuotas,
    Rate,
    describe_filter,
    entity_from_json,
    entity_key,
    entity_to_json,
    image_quotas,
    make_entity,
    user_name,
    validate_entity,
    validate_value,
)
from oncelog.clock import ManualClock
from oncelog.errors import InvalidRequest, UnsupportedVersion


def quotas() -> tuple[ClientQuotas, ManualClock]:
    clock = ManualClock()
    return ClientQuotas(clock), clock


def user(name: str | None) -> tuple[str, str | None]:
    return (USER, name)


def client(name: str | None) -> tuple[str, str | None]:
    return (CLIENT_ID, name)


def test_nothing_set_is_disabled_and_free() -> None:
    q, _ = quotas()
    assert not q.enabled
    assert q.record(PRODUCE, "User:alice", "app", 10**9) == 0


@pytest.mark.parametrize(
    ("entities", "expected"),
    [
        # Kafka's order: the most specific entity that sets the key wins.
        ([[user("alice"), client("app")], [user("alice")], [client("app")]], 1),
        ([[user("alice"), client(None)], [user("alice")], [client("app")]], 1),
        ([[user("alice")], [user(None), client("app")], [client("app")]], 1),
        ([[user(None), client("app")], [user(None), client(None)], [user(None)]], 1),
        ([[user(None), client(None)], [user(None)], [client("app")]], 1),
        ([[user(None)], [client("app")], [client(None)]], 1),
        ([[client("app")], [client(None)]], 1),
        ([[client(None)]], 1),
        # Entities of other users and client ids do not apply.
        ([[user("bob")], [client("other")], [user("bob"), client(None)]], None),
    ],
)
def test_resolution_follows_kafkas_order(
    entities: list[list[tuple[str, str | None]]], expected: int | None
) -> None:
    q, _ = quotas()
    for rank, pairs in enumerate(entities, start=1):
        q.set_entity(make_entity(pairs), {PRODUCE: float(rank)})
    found = q.quota_for(PRODUCE, "alice", "app")
    assert (found[0] if found else None) == expected


def test_each_key_resolves_on_its_own() -> None:
    q, _ = quotas()
    q.set_entity(make_entity([user("alice")]), {PRODUCE: 100.0})
    q.set_entity(make_entity([client(None)]), {FETCH: 200.0})
    assert q.quota_for(PRODUCE, "alice", "app") == (100.0, (PRODUCE, "alice", ""))
    assert q.quota_for(FETCH, "alice", "app") == (200.0, (FETCH, "", "app"))
    assert q.quota_for(REQUEST, "alice", "app") is None


def test_a_user_quota_is_shared_by_its_clients_a_client_default_is_not() -> None:
    q, clock = quotas()
    q.set_entity(make_entity([user("alice")]), {PRODUCE: 1000.0})
    q.set_entity(make_entity([client(None)]), {PRODUCE: 1000.0})
    # alice's two clients share 1000 B/s, measured over at least 10 s: 10,000 B in all.
    assert q.record(PRODUCE, "User:alice", "a", 6000) == 0
    assert q.record(PRODUCE, "User:alice", "b", 6000) > 0
    # bob's clients fall to the client-id default: one rate per client id.
    assert q.record(PRODUCE, "User:bob", "a", 6000) == 0
    assert q.record(PRODUCE, "User:bob", "b", 6000) == 0
    clock.advance(11_000)  # every sample expired: a fresh start
    assert q.record(PRODUCE, "User:alice", "b", 6000) == 0


def test_throttle_time_is_kafkas() -> None:
    q, clock = quotas()
    q.set_entity(make_entity([client("app")]), {PRODUCE: 1000.0})
    # 10 s window at first (11 samples, all but one counted): 10,000 B are within quota.
    assert q.record(PRODUCE, "User:ANONYMOUS", "app", 10_000) == 0
    # 5,000 B more: 1,500 B/s over 10 s, (1500 - 1000) / 1000 * 10 s = 5 s.
    assert q.record(PRODUCE, "User:ANONYMOUS", "app", 5_000) == 5000
    # Kafka's estimate assumes the window grows meanwhile; while it is shorter than all
    # samples but one it does not (10 s of 1 s samples), so a first burst stays throttled
    # until its sample expires (11 s), as in Kafka.
    clock.advance(5000)
    assert q.record(PRODUCE, "User:ANONYMOUS", "app", 0) == 5000
    clock.advance(6000)
    assert q.record(PRODUCE, "User:ANONYMOUS", "app", 0) == 0
    # A steady 1,100 B/s against 1,000: within quota while the 10 s window holds less
    # than 10,000 B, then (rate - quota) / quota * the window the samples span.
    q2, clock2 = quotas()
    q2.set_entity(make_entity([client("app")]), {PRODUCE: 1000.0})
    throttles = []
    for _ in range(11):
        throttles.append(q2.record(PRODUCE, "User:ANONYMOUS", "app", 1100))
        clock2.advance(1000)
    assert throttles == [0] * 9 + [1000, 2100]


def test_rate_forgets_samples_older_than_its_window() -> None:
    rate = Rate(samples=3, window_ms=1000, now_ms=0)
    rate.record(3000, 0)
    assert rate.measure(0) == (1500.0, 2000)  # at least (samples - 1) windows
    rate.record(0, 1500)  # a second sample; 1.5 s spanned, counted as 2.5 s
    assert rate.measure(1500) == (1200.0, 2500)
    rate.record(0, 3000)  # the first sample is 3 s old: gone
    value, window = rate.measure(3000)
    assert value == 0.0 and window == 2500


def test_removing_the_last_quota_disables_and_forgets_rates() -> None:
    q, _ = quotas()
    entity = make_entity([client("app")])
    q.set_entity(entity, {PRODUCE: 1.0})
    assert q.enabled and q.record(PRODUCE, "User:x", "app", 100) > 0
    q.set_entity(entity, {})
    assert not q.enabled and not q.entities
    assert q.quota_for(PRODUCE, "x", "app") is None


def test_a_changed_quota_applies_at_once() -> None:
    q, _ = quotas()
    entity = make_entity([client("app")])
    q.set_entity(entity, {PRODUCE: 1.0})
    assert q.quota_for(PRODUCE, "x", "app") == (1.0, (PRODUCE, "", "app"))
    q.set_entity(entity, {PRODUCE: 5.0})
    assert q.quota_for(PRODUCE, "x", "app") == (5.0, (PRODUCE, "", "app"))


@pytest.mark.parametrize(
    ("pairs", "message"),
    [
        ([], "Invalid empty client quota entity"),
        ([user("a"), user("b")], "Invalid client quota entity, duplicate entity entry user"),
        ([("group", "g")], "Unhandled client quota entity type: group"),
        ([user("")], "Empty user not supported"),
        ([("ip", "1.2.3.4"), user("a")], "Invalid quota entity combination"),
        ([("ip", "1.2.3.4")], "oncelog does not enforce IP quotas"),
    ],
)
def test_bad_entities_are_refused_as_kafka_refuses_them(
    pairs: list[tuple[str, str | None]], message: str
) -> None:
    with pytest.raises(InvalidRequest, match=message):
        validate_entity(pairs)


def test_an_empty_name_is_refused_as_kafka_refuses_it() -> None:
    with pytest.raises(InvalidRequest, match="Empty client-id not supported"):
        validate_entity([client("")])
    assert validate_entity([client(None)]) == ((CLIENT_ID, None),)


def test_a_principals_user_is_its_name() -> None:
    assert user_name("User:alice") == "alice"
    assert user_name("User:") == ""
    assert user_name("ANONYMOUS") == "ANONYMOUS"


def test_idle_rates_are_forgotten() -> None:
    q, clock = quotas()
    q.set_entity(make_entity([client(None)]), {PRODUCE: 1000.0})
    for i in range(3):
        q.record(PRODUCE, "User:x", f"gone-{i}", 10)
    clock.advance(60_000)  # their windows long past, and a sweep due
    q.record(PRODUCE, "User:x", "here", 10)
    assert list(q._rates) == [(PRODUCE, "", "here")]


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("producer_byte_rate", 0.0, "Quota producer_byte_rate must be greater than 0"),
        ("consumer_byte_rate", -5.0, "Quota consumer_byte_rate must be greater than 0"),
        ("producer_byte_rate", 1.5, "producer_byte_rate cannot be a fractional value."),
        ("producer_byte_rate", 1e19, "Proposed value for producer_byte_rate is too large"),
        ("request_percentage", float("nan"), "must be greater than 0"),
        ("request_percentage", float("inf"), "must be a finite number"),
        ("bogus", 1.0, "Invalid configuration key bogus"),
        ("controller_mutation_rate", 1.0, "oncelog does not enforce controller_mutation_rate"),
    ],
)
def test_bad_values_are_refused(key: str, value: float, message: str) -> None:
    with pytest.raises(InvalidRequest, match=message):
        validate_value(key, value)


def test_good_values_pass() -> None:
    validate_value("producer_byte_rate", 1024.0)
    validate_value("request_percentage", 12.5)


def test_describe_filters_match_as_kafkas_image() -> None:
    q, _ = quotas()
    alice = make_entity([user("alice")])
    alice_app = make_entity([user("alice"), client("app")])
    default_user = make_entity([user(None)])
    app = make_entity([client("app")])
    for entity in (alice, alice_app, default_user, app):
        q.set_entity(entity, {PRODUCE: 1.0})

    def found(components: list[tuple[str, int, str | None]], strict: bool = False) -> set:  # type: ignore[type-arg]
        exact, typed = describe_filter(components)
        return {entity for entity, _ in q.describe(exact, typed, strict)}

    assert found([]) == {alice, alice_app, default_user, app}
    assert found([], strict=True) == set()
    assert found([(USER, MATCH_EXACT, "alice")]) == {alice, alice_app}
    assert found([(USER, MATCH_EXACT, "alice")], strict=True) == {alice}
    assert found([(USER, MATCH_DEFAULT, None)]) == {default_user}
    assert found([(USER, MATCH_SPECIFIED, None)], strict=True) == {alice, default_user}
    assert found([(CLIENT_ID, MATCH_SPECIFIED, None)]) == {alice_app, app}


@pytest.mark.parametrize(
    ("components", "error", "message"),
    [
        ([("", MATCH_EXACT, "a")], InvalidRequest, "Invalid empty entity type."),
        (
            [(USER, MATCH_EXACT, "a"), (USER, MATCH_DEFAULT, None)],
            InvalidRequest,
            "Entity type user cannot appear more than once in the filter.",
        ),
        ([("group", MATCH_EXACT, "g")], UnsupportedVersion, "Unsupported entity type group"),
        ([(USER, MATCH_EXACT, None)], InvalidRequest, "MATCH_TYPE_EXACT, but set match"),
        ([(USER, MATCH_DEFAULT, "a")], InvalidRequest, "MATCH_TYPE_DEFAULT, but also"),
        ([(USER, MATCH_SPECIFIED, "a")], InvalidRequest, "MATCH_TYPE_SPECIFIED, but also"),
        ([(USER, 7, None)], InvalidRequest, "Unknown match type 7"),
        (
            [("ip", MATCH_SPECIFIED, None), (USER, MATCH_SPECIFIED, None)],
            InvalidRequest,
            "IP filter component should not be used",
        ),
    ],
)
def test_bad_filters_are_refused(
    components: list[tuple[str, int, str | None]], error: type[Exception], message: str
) -> None:
    with pytest.raises(error, match=message):
        describe_filter(components)


def test_entities_round_trip_through_their_stored_form() -> None:
    entity = make_entity([client("a,b=c"), user(None)])
    assert entity_from_json(entity_to_json(entity)) == entity
    assert entity_key(entity) == '[["client-id","a,b=c"],["user",null]]'
    stored = [{"entity": entity_to_json(entity), "quotas": {PRODUCE: 10}}]
    assert image_quotas(stored) == {entity: {PRODUCE: 10.0}}
    with pytest.raises(ValueError, match="not a client quota entity"):
        entity_from_json([["group", "g"]])


def test_a_request_time_throttle_is_bounded_by_one_window_a_byte_rate_by_int32() -> None:
    q, _ = quotas()
    q.set_entity(make_entity([client("app")]), {REQUEST: 1e-9, PRODUCE: 1e-9})
    assert q.record(REQUEST, "User:x", "app", 50.0) == 1000
    assert q.record(PRODUCE, "User:x", "app", 10**9) == 2**31 - 1
