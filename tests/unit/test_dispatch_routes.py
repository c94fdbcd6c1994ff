"""The dispatcher's per-key table agrees with the registry and the codec (issue 15: it
replaced `ApiKey(...)` conversions and schema lookups made on every request)."""

from __future__ import annotations

from oncelog.broker.dispatcher import _ROUTES, HANDLERS
from oncelog.protocol.codec import is_flexible, response_class
from oncelog.protocol.registry import SUPPORTED_VERSIONS, supported_range


def test_every_supported_key_and_only_those_is_routed() -> None:
    assert set(_ROUTES) == {int(key) for key in SUPPORTED_VERSIONS} == set(HANDLERS)
    for key, route in _ROUTES.items():
        assert (route.lowest, route.highest) == supported_range(key)
        assert route.handler is HANDLERS[key]  # type: ignore[index]  # IntEnum keys
    assert _ROUTES.get(9999) is None


def test_version_facts_match_the_codec() -> None:
    for key, route in _ROUTES.items():
        for version in range(route.lowest, route.highest + 1):
            expected = (is_flexible(key, version), response_class(key, version))
            assert route.version(key, version) == expected
            assert route.version(key, version) == expected  # cached
