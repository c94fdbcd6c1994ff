"""One module per Kafka API. Each exposes `handle(ctx, request)` (a `types.Handler`): the
request is one of the API's kio classes (`types.<Api>Request`), the answer a
`types.<Api>Answer` (built into the requested version by the dispatcher), a `Delayed`, or
`NO_RESPONSE`."""

from __future__ import annotations

from typing import Final

NO_RESPONSE: Final = object()
"""Returned for requests that get no response (Produce with acks=0)."""


class CloseConnection(Exception):
    """The client must be disconnected (Kafka closes the connection on these errors)."""
