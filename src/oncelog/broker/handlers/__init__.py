"""One module per Kafka API. Each exposes `handle(ctx, request)`, returning a response as a
mapping (built into the requested version by the dispatcher), a `Delayed`, or `NO_RESPONSE`."""

from __future__ import annotations

from typing import Final

NO_RESPONSE: Final = object()
"""Returned for requests that get no response (Produce with acks=0)."""


class CloseConnection(Exception):
    """The client must be disconnected (Kafka closes the connection on these errors)."""
