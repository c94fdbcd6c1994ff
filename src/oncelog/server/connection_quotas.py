"""How many connections a client address, a listener and the broker may have (Kafka's
`max.connections.per.ip`, `max.connections.per.ip.overrides` and `max.connections`, with its
`listener.name.<listener>.max.connections`).

Kafka's ConnectionQuotas: a connection beyond its address's limit is closed at once ("address
already has the configured maximum"); every listener counts toward it. One beyond the
broker's or its listener's `max.connections` waits in Kafka's accept queue until a slot frees;
here it is closed at once too (the client reconnects after its backoff), so an application
that opens connections without end costs the broker a refused connection each, not a
connection's memory. When the broker has several listeners, connections on the inter-broker
listener are not refused for the broker's `max.connections`, as Kafka lets them in over it
(and closes another listener's least recently used connection): replication must not wait
for clients. A listener's own limit applies to every listener. Sans-IO.
"""

from __future__ import annotations

import socket
from collections import Counter

from oncelog.config import BrokerConfig
from oncelog.server.startup import StartupError


class ConnectionQuotas:
    """Counts open connections per address and per listener against the limits."""

    def __init__(
        self,
        *,
        per_ip: int,
        per_ip_overrides: dict[str, int],
        broker_max: int,
        listener_max: dict[str, int],
        protected_listener: str | None,
    ) -> None:
        self.per_ip = per_ip
        self.per_ip_overrides = per_ip_overrides
        self.broker_max = broker_max
        #: Only listeners with their own `listener.name.<l>.max.connections` (as Kafka).
        self.listener_max = listener_max
        #: The inter-broker listener, when there are others: exempt from `max.connections`.
        self.protected_listener = protected_listener
        self.by_ip: Counter[str] = Counter()
        self.by_listener: Counter[str] = Counter()
        self.total = 0

    def admit(self, listener: str, ip: str) -> tuple[str, str] | None:
        """Count a new connection, or say why it is refused, as (the setting, a sentence);
        a refused one is not counted."""
        listener_limit = self.listener_max.get(listener)
        if listener_limit is not None and self.by_listener[listener] >= listener_limit:
            return (
                "max.connections",
                f"listener {listener} already has the configured maximum of {listener_limit} "
                "connections",
            )
        if listener != self.protected_listener and self.total >= self.broker_max:
            return (
                "max.connections",
                f"the broker already has the configured maximum of {self.broker_max} "
                "connections",
            )
        limit = self.per_ip_overrides.get(ip, self.per_ip)
        if self.by_ip[ip] >= limit:
            return (
                "max.connections.per.ip",
                f"address already has the configured maximum of {limit} connections",
            )
        self.by_ip[ip] += 1
        self.by_listener[listener] += 1
        self.total += 1
        return None

    def release(self, listener: str, ip: str) -> None:
        """An admitted connection closed."""
        self.by_ip[ip] -= 1
        if self.by_ip[ip] <= 0:
            del self.by_ip[ip]
        self.by_listener[listener] -= 1
        if self.by_listener[listener] <= 0:
            del self.by_listener[listener]
        self.total -= 1

    @classmethod
    def from_config(cls, config: BrokerConfig) -> ConnectionQuotas:
        """The limits of `config`; a host name in the overrides is resolved now, as Kafka
        does (StartupError when it cannot be)."""
        overrides = {}
        for host, count in config.max_connections_per_ip_overrides.items():
            try:
                overrides[socket.gethostbyname(host)] = count
            except OSError as exc:
                raise StartupError(
                    f"max.connections.per.ip.overrides: cannot resolve {host}: {exc}"
                ) from exc
        listener_max = {}
        for listener in config.listeners:
            if f"listener.name.{listener.name.lower()}.max.connections" in config.raw:
                value = config.listener_setting(listener.name, "max.connections")
                assert isinstance(value, int)
                listener_max[listener.name] = value
        several = len(config.listeners) > 1
        return cls(
            per_ip=config.get_int("max.connections.per.ip"),
            per_ip_overrides=overrides,
            broker_max=config.get_int("max.connections"),
            listener_max=listener_max,
            protected_listener=config.inter_broker_listener_name if several else None,
        )
