"""`http.listeners`: where the HTTP listener (/metrics, the web console) binds.

Kafka-style: a list of `http://HOST:PORT` or `https://HOST:PORT` (TLS with the broker's
`ssl.keystore.*`, or `listener.name.https.ssl.*`); empty (the default) turns the listener off.
Only the first entry is served, as with `listeners`. Port 0 binds any free port; the ready line
prints the bound one.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from oncelog.config import parse_port
from oncelog.errors import InvalidConfig

_SPEC = re.compile(r"((?i:https?))://\[?([^\]/]*?)\]?:(\d+)/?")


class HttpListenerError(Exception):
    """A bad `http.listeners` value or an address that cannot be bound (one line)."""


@dataclass(frozen=True, slots=True)
class HttpListener:
    host: str
    port: int
    tls: bool = False

    def url(self, port: int | None = None) -> str:
        """The console's URL; a wildcard host is shown as loopback, which always reaches it."""
        host = "127.0.0.1" if self.host in ("", "0.0.0.0") else self.host
        if host == "::":
            host = "::1"
        if ":" in host:
            host = f"[{host}]"
        scheme = "https" if self.tls else "http"
        return f"{scheme}://{host}:{self.port if port is None else port}/"


def parse(values: list[str]) -> HttpListener | None:
    """The listener `http.listeners` names; None when the list is empty (listener off)."""
    entries = [v.strip() for v in values if v.strip()]
    if not entries:
        return None
    match = _SPEC.fullmatch(entries[0])
    if match is None:
        raise HttpListenerError(
            f"Invalid http.listeners entry {entries[0]!r}: expected http://HOST:PORT "
            "or https://HOST:PORT"
        )
    try:
        port = parse_port(match.group(3), f"http.listeners={entries[0]}")
    except InvalidConfig as exc:
        raise HttpListenerError(str(exc)) from None
    tls = match.group(1).lower() == "https"
    return HttpListener(match.group(2) or "0.0.0.0", port, tls)
