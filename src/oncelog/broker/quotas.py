"""Client quotas (Kafka's KIP-13, KIP-55 and KIP-124), sans-IO.

Quotas are set per *entity*: a user, a client id, or a user and a client id, each either named
or the default (`<default>`, a name of None here). Three keys are enforced:
`producer_byte_rate` (bytes of Produce requests a second), `consumer_byte_rate` (bytes of
Fetch responses a second) and `request_percentage` (request handling time, in percent of one
thread). Which entity's quota applies to a request is Kafka's order, per key: user and client
id, user and default client id, user, default user and client id, default user and default
client id, default user, client id, default client id; the first entity that sets the key
wins. Clients that match the same entity share one rate: a quota set on a user alone is the
sum over all its client ids.

A rate is Kafka's: `quota.window.num` samples of `quota.window.size.seconds` each, measured
over at least all but one of them. When a recorded value takes the rate past the quota, the
throttle time is how long the client must stay silent for the rate to fall back to it,
`(rate - quota) / quota * window`. The broker answers with that `throttle_time_ms` and reads
nothing more from the connection meanwhile (KIP-219: the server's connection mutes itself).
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from oncelog.clock import Clock
from oncelog.errors import InvalidRequest, KafkaError, UnsupportedVersion

USER = "user"
CLIENT_ID = "client-id"
IP = "ip"

PRODUCE = "producer_byte_rate"
FETCH = "consumer_byte_rate"
REQUEST = "request_percentage"
#: The keys Kafka knows for users and client ids, and whether their values are whole numbers.
USER_CLIENT_KEYS = {PRODUCE: True, FETCH: True, REQUEST: False, "controller_mutation_rate": False}
#: The keys oncelog enforces; the others are refused rather than stored and ignored.
ENFORCED = (PRODUCE, FETCH, REQUEST)

#: How often idle rates are looked for and dropped (ms).
SWEEP_MS = 60_000
#: The longest throttle time an answer can carry (int32 milliseconds).
_MAX_THROTTLE_MS = 2**31 - 1

#: An entity: its (type, name) pairs sorted by type, a name of None being the default.
Entity = tuple[tuple[str, str | None], ...]

#: One AlterClientQuotas op: a key and its new value, None to remove it.
QuotaOp = tuple[str, float | None]

#: Describe filters' match types.
MATCH_EXACT, MATCH_DEFAULT, MATCH_SPECIFIED = 0, 1, 2

#: Kafka's resolution order: (user part, client id part, rate shared by user, by client id).
#: A part is "name" (the request's), "default" or absent; the tags say which of the request's
#: user and client id its rate is kept under ("" for all of them).
_LEVELS: tuple[tuple[str | None, str | None, bool, bool], ...] = (
    ("name", "name", True, True),
    ("name", "default", True, True),
    ("name", None, True, False),
    ("default", "name", True, True),
    ("default", "default", True, True),
    ("default", None, True, False),
    (None, "name", False, True),
    (None, "default", False, True),
)


def user_name(principal: str) -> str:
    """The user entity's name of a principal: `User:alice` -> `alice`."""
    kind, sep, name = principal.partition(":")
    return name if sep else kind


def make_entity(pairs: Iterable[tuple[str, str | None]]) -> Entity:
    return tuple(sorted(pairs))


def entity_text(entity: Entity) -> str:
    """Kafka's rendering in messages: `user=alice, client-id=<default>`."""
    return ", ".join(f"{t}={'<default>' if n is None else n}" for t, n in entity)


def entity_to_json(entity: Entity) -> list[list[str | None]]:
    return [[t, n] for t, n in entity]


def entity_from_json(data: Any) -> Entity:
    if not isinstance(data, list) or not all(
        isinstance(p, list)
        and len(p) == 2
        and p[0] in (USER, CLIENT_ID)
        and (p[1] is None or isinstance(p[1], str))
        for p in data
    ):
        raise ValueError(f"not a client quota entity: {data!r}")
    return make_entity((p[0], p[1]) for p in data)


def entity_key(entity: Entity) -> str:
    """A text naming the entity (the metadata image's and etcd's key)."""
    return json.dumps(entity_to_json(entity), separators=(",", ":"))


def validate_entity(pairs: Iterable[tuple[str, str | None]]) -> Entity:
    """The entity of an AlterClientQuotas entry; InvalidRequest as Kafka refuses it."""
    seen: dict[str, str | None] = {}
    for entity_type, name in pairs:
        if entity_type in seen:
            raise InvalidRequest(
                f"Invalid client quota entity, duplicate entity entry {entity_type}"
            )
        if entity_type not in (USER, CLIENT_ID, IP):
            raise InvalidRequest(f"Unhandled client quota entity type: {entity_type}")
        if name == "":
            raise InvalidRequest(f"Empty {entity_type} not supported")
        seen[entity_type] = name
    if not seen:
        raise InvalidRequest("Invalid empty client quota entity")
    if IP in seen:
        if len(seen) > 1:
            raise InvalidRequest(
                "Invalid quota entity combination, IP entity should not be combined with "
                "User or ClientId"
            )
        raise InvalidRequest(
            "oncelog does not enforce IP quotas (connection_creation_rate); "
            "max.connections.per.ip and its overrides limit connections per address"
        )
    return make_entity(seen.items())


def validate_value(key: str, value: float) -> None:
    """InvalidRequest as Kafka answers for a bad key or value (and for the keys oncelog does
    not enforce)."""
    integral = USER_CLIENT_KEYS.get(key)
    if integral is None:
        raise InvalidRequest(f"Invalid configuration key {key}")
    if key not in ENFORCED:
        raise InvalidRequest(f"oncelog does not enforce {key}; it is not stored")
    if not value > 0.0:  # NaN too
        raise InvalidRequest(f"Quota {key} must be greater than 0")
    if math.isinf(value):  # Kafka takes it; JSON (the console, the image) cannot hold it
        raise InvalidRequest(f"Quota {key} must be a finite number")
    if integral:
        if value > 2**63 - 1:
            raise InvalidRequest(f"Proposed value for {key} is too large for a LONG.")
        if abs(math.fmod(value, 1.0)) > 1e-6:
            raise InvalidRequest(f"{key} cannot be a fractional value.")


def describe_filter(
    components: Iterable[tuple[str, int, str | None]],
) -> tuple[dict[str, str | None], set[str]]:
    """(exact matches, types that must be present) of a DescribeClientQuotas filter of
    (entity type, match type, match); InvalidRequest/UnsupportedVersion as Kafka answers."""
    exact: dict[str, str | None] = {}
    typed: set[str] = set()
    for entity_type, match_type, match in components:
        if not entity_type:
            raise InvalidRequest("Invalid empty entity type.")
        if entity_type in exact or entity_type in typed:
            raise InvalidRequest(
                f"Entity type {entity_type} cannot appear more than once in the filter."
            )
        if entity_type not in (USER, CLIENT_ID, IP):
            raise UnsupportedVersion(f"Unsupported entity type {entity_type}")
        if match_type == MATCH_EXACT:
            if match is None:
                raise InvalidRequest(
                    "Request specified MATCH_TYPE_EXACT, but set match string to null."
                )
            exact[entity_type] = match
        elif match_type == MATCH_DEFAULT:
            if match is not None:
                raise InvalidRequest(
                    "Request specified MATCH_TYPE_DEFAULT, but also specified a match string."
                )
            exact[entity_type] = None
        elif match_type == MATCH_SPECIFIED:
            if match is not None:
                raise InvalidRequest(
                    "Request specified MATCH_TYPE_SPECIFIED, but also specified a match string."
                )
            typed.add(entity_type)
        else:
            raise InvalidRequest(f"Unknown match type {match_type}")
    if (IP in exact or IP in typed) and ({USER, CLIENT_ID} & (set(exact) | typed)):
        raise InvalidRequest(
            "Invalid entity filter component combination. IP filter component should not be "
            "used with user or clientId filter component."
        )
    return exact, typed


class Rate:
    """Kafka's sampled rate (org.apache.kafka.common.metrics.stats.Rate): the sum over the
    live samples divided by the time they span, at least all samples but one."""

    __slots__ = ("current", "samples", "starts", "values", "window_ms")

    def __init__(self, samples: int, window_ms: int, now_ms: int) -> None:
        self.samples = samples
        self.window_ms = window_ms
        self.starts = [now_ms]
        self.values = [0.0]
        self.current = 0

    def record(self, value: float, now_ms: int) -> None:
        self._purge(now_ms)
        if now_ms >= self.starts[self.current] + self.window_ms:
            self.current = (self.current + 1) % self.samples
            if self.current >= len(self.starts):
                self.starts.append(now_ms)
                self.values.append(0.0)
            else:
                self.starts[self.current] = now_ms
                self.values[self.current] = 0.0
        self.values[self.current] += value

    def measure(self, now_ms: int) -> tuple[float, int]:
        """(value per second, the window in ms it was measured over)."""
        self._purge(now_ms)
        elapsed = now_ms - min(self.starts)
        full = elapsed // self.window_ms
        if full < self.samples - 1:
            elapsed += (self.samples - 1 - full) * self.window_ms
        elapsed = max(elapsed, 1)
        return sum(self.values) * 1000.0 / elapsed, elapsed

    def _purge(self, now_ms: int) -> None:
        expire = self.samples * self.window_ms
        for i, start in enumerate(self.starts):
            if now_ms - start >= expire:
                self.starts[i] = now_ms
                self.values[i] = 0.0


@dataclass
class ClientQuotas:
    """The quotas set, the rates of the clients they apply to, and which connections are
    muted for how long. `enabled` is False while no quota is set: the request path then
    asks nothing of this object."""

    clock: Clock
    window_num: int = 11
    window_size_ms: int = 1000
    #: entity -> {key: value}
    entities: dict[Entity, dict[str, float]] = field(default_factory=dict)
    #: connection id -> how long it is to stay muted (ms), for the connection to take.
    muted: dict[str, int] = field(default_factory=dict)
    enabled: bool = False
    #: (key, user, client id) -> (quota, rate key), recomputed when a quota changes.
    _resolved: dict[tuple[str, str, str], tuple[float, tuple[str, str, str]] | None] = field(
        default_factory=dict
    )
    _rates: dict[tuple[str, str, str], Rate] = field(default_factory=dict)
    _swept_ms: int = 0

    # -- the quotas set -------------------------------------------------------------------

    def set_entity(self, entity: Entity, values: Mapping[str, float]) -> None:
        """Replace one entity's quotas (none: the entity is removed)."""
        if values:
            self.entities[entity] = dict(values)
        else:
            self.entities.pop(entity, None)
        self._changed()

    def replace_all(self, entities: Mapping[Entity, Mapping[str, float]]) -> None:
        self.entities = {e: dict(v) for e, v in entities.items() if v}
        self._changed()

    def _changed(self) -> None:
        self._resolved.clear()
        self.enabled = bool(self.entities)
        if not self.enabled:
            self._rates.clear()

    def describe(
        self, exact: Mapping[str, str | None], typed: set[str], strict: bool
    ) -> list[tuple[Entity, dict[str, float]]]:
        """The entities a DescribeClientQuotas filter matches, with their quotas (Kafka's
        ClientQuotasImage.describe: strict wants exactly the filter's types)."""
        out = []
        for entity, values in self.entities.items():
            names = dict(entity)
            if strict and len(names) != len(exact) + len(typed):
                continue
            if any(t not in names or names[t] != n for t, n in exact.items()):
                continue
            if any(t not in names for t in typed):
                continue
            out.append((entity, dict(values)))
        return sorted(out, key=lambda item: entity_key(item[0]))

    # -- enforcement ----------------------------------------------------------------------

    def quota_for(
        self, key: str, user: str, client_id: str
    ) -> tuple[float, tuple[str, str, str]] | None:
        """The quota on `key` for this user (principal name) and client id, and the rate it is
        counted in; None when no entity sets it."""
        cache_key = (key, user, client_id)
        found = self._resolved.get(cache_key, False)
        if found is not False:
            return found  # type: ignore[return-value]
        found = None
        for user_part, client_part, by_user, by_client in _LEVELS:
            pairs: list[tuple[str, str | None]] = []
            if user_part is not None:
                pairs.append((USER, user if user_part == "name" else None))
            if client_part is not None:
                pairs.append((CLIENT_ID, client_id if client_part == "name" else None))
            values = self.entities.get(make_entity(pairs))
            if values is not None and key in values:
                tags = (key, user if by_user else "", client_id if by_client else "")
                found = (values[key], tags)
                break
        if len(self._resolved) > 10_000:
            self._resolved.clear()
        self._resolved[cache_key] = found
        return found

    def record(self, key: str, principal: str, client_id: str | None, value: float) -> int:
        """Count `value` against the quota on `key` of this client; the throttle time in ms
        (0: within its quota, or none applies)."""
        found = self.quota_for(key, user_name(principal), client_id or "")
        if found is None:
            return 0
        quota, tags = found
        now = self.clock.monotonic_ms()
        if now - self._swept_ms >= SWEEP_MS:
            self._swept_ms = now
            self._forget_idle(now)
        rate = self._rates.get(tags)
        if rate is None:
            rate = self._rates[tags] = Rate(self.window_num, self.window_size_ms, now)
        rate.record(value, now)
        measured, window_ms = rate.measure(now)
        if measured <= quota:
            return 0
        throttle = (measured - quota) / quota * window_ms
        # Kafka bounds a request-time throttle by one sample window (ClientRequestQuotaManager),
        # and every throttle time must fit the answer's int32.
        bound = self.window_size_ms if key == REQUEST else _MAX_THROTTLE_MS
        return round(min(throttle, bound))

    def window_allowance(self, ctx: Any) -> int:
        """The most bytes one Fetch of this request's client may carry: what its
        `consumer_byte_rate` allows over all samples but one (Kafka's
        getMaxValueInQuotaWindow), so that one answer never costs a throttle longer than
        about one window. Unlimited without such a quota."""
        found = self.quota_for(FETCH, user_name(ctx.principal), ctx.client_id or "")
        if found is None:
            return 2**31 - 1
        allowed = found[0] * (self.window_num - 1) * self.window_size_ms / 1000
        return max(1, min(int(allowed), 2**31 - 1))

    def _forget_idle(self, now_ms: int) -> None:
        """Drop the rates with nothing left in their window: clients gone, or entities
        removed (Kafka expires idle quota sensors likewise)."""
        for tags, rate in list(self._rates.items()):
            if rate.measure(now_ms)[0] == 0.0:
                del self._rates[tags]


def quota_error_result(entity: list[dict[str, Any]], error: KafkaError) -> dict[str, Any]:
    """One AlterClientQuotas entry's answer for a refused entity."""
    return {"error_code": error.code, "error_message": str(error), "entity": entity}


def image_quotas(stored: Iterable[Mapping[str, Any]]) -> dict[Entity, dict[str, float]]:
    """The quotas a single node's metadata image keeps (`MetadataImage.client_quotas`)."""
    return {
        entity_from_json(item["entity"]): {str(k): float(v) for k, v in item["quotas"].items()}
        for item in stored
    }
