"""When a client re-authenticates its SASL session (KIP-368), sans-IO: Kafka's
SaslClientAuthenticator decides it, and the broker's own connections (replica fetchers,
transaction markers, KIP-890 verification) follow the same rule.

A SaslAuthenticate answer's `session_lifetime_ms` (non-zero when the broker has
`connections.max.reauth.ms`) is counted from the moment the client received it. The client
logs in again on the same connection once a random share of that lifetime between 85 % and
95 % has passed: the 85 % leave room for network latency and clock drift, the 10 % of jitter
keep many connections made together from re-authenticating together. The broker closes a
session past its lifetime at its next request other than a SaslHandshake, so the
re-authentication must come before the next request once it is due.
"""

from __future__ import annotations

import random
from collections.abc import Callable

from oncelog.clock import Clock

#: Kafka's pctWindowFactorToTakeNetworkLatencyAndClockDriftIntoAccount and
#: pctWindowJitterToAvoidReauthenticationStormAcrossManyChannelsSimultaneously.
WINDOW_FACTOR = 0.85
WINDOW_JITTER = 0.10


class ReauthSchedule:
    """One connection's session: `authenticated` after each login, `due` before each
    request. Times are the clock's monotonic milliseconds."""

    def __init__(self, clock: Clock, jitter: Callable[[], float] = random.random) -> None:
        """`jitter` gives a number in [0, 1) per login (a fixed one in tests)."""
        self._clock = clock
        self._jitter = jitter
        #: When to log in again, None while the session does not expire (lifetime 0).
        self.reauth_at_ms: int | None = None
        #: When the broker ends the session (the lifetime it told, from the login's answer).
        self.expires_at_ms: int | None = None
        #: Re-authentications completed so far (a connection's first login not counted).
        self.reauthentications = 0
        self._logged_in = False

    def authenticated(self, session_lifetime_ms: int) -> None:
        """The login (or a re-authentication) just completed with this session lifetime."""
        now = self._clock.monotonic_ms()
        if self._logged_in:
            self.reauthentications += 1
        self._logged_in = True
        if session_lifetime_ms <= 0:
            self.reauth_at_ms = self.expires_at_ms = None
            return
        share = WINDOW_FACTOR + WINDOW_JITTER * min(max(self._jitter(), 0.0), 1.0)
        self.reauth_at_ms = now + int(session_lifetime_ms * share)
        self.expires_at_ms = now + session_lifetime_ms

    def due(self) -> bool:
        """True when the next request must wait for a re-authentication."""
        return self.reauth_at_ms is not None and self._clock.monotonic_ms() >= self.reauth_at_ms

    def reset(self) -> None:
        """The connection closed: a new one starts with a first login."""
        self.reauth_at_ms = self.expires_at_ms = None
        self._logged_in = False
