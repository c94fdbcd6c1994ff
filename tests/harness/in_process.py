"""InProcessBroker: the real replica manager, coordinators and dispatcher on a temporary
directory and a ManualClock, driven with request frames and answering with kio's response
entities, typed by the response class asked for. No sockets, no threads, no subprocesses.

    broker = build_broker(tmp_path)
    answer = broker.ask(HeartbeatResponse, {"group_id": "g", ...})  # HeartbeatResponse v4
    assert answer.error_code == ErrorCode.unknown_member_id

The broker is assembled in one place, `build_broker` (today through the metrics tests'
`Broker`, whose constructor is the broker's assembly); a test that needs the wiring itself
(the replica manager, the runtimes, the clock) reads it from the returned broker.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Protocol, TypeVar, cast

from oncelog.broker.authz import load_authorizer
from oncelog.broker.dispatcher import Pending, Reply
from oncelog.protocol.codec import build, encode_entity, is_flexible, request_class
from oncelog.protocol.registry import ApiKey
from tests.unit.metrics_broker import Broker, batch

__all__ = ["COVERED", "InProcessBroker", "batch", "build_broker", "covers"]


class _Response(Protocol):
    __api_key__: Any
    __version__: Any


R = TypeVar("R", bound=_Response)
F = TypeVar("F", bound=Callable[..., object])

#: The API keys a handler test declares it covers (`@covers(ApiKey.X)`); the coverage test
#: (tests/unit/test_handlers_coverage.py) fails for a supported key that none covers.
COVERED: set[ApiKey] = set()


def covers(*keys: ApiKey) -> Callable[[F], F]:
    """Mark a test as one of the tests of `keys`' handlers."""

    def mark(test: F) -> F:
        COVERED.update(keys)
        return test

    return mark


class InProcessBroker(Broker):
    """The in-process broker, with typed requests: `ask` frames a body for the API and
    version of a kio response class and decodes the answer into that class."""

    def frame(self, api_key: int, version: int, body: Mapping[str, Any]) -> bytes:
        self._correlation += 1
        client = b"harness"
        header = struct.pack(">hhih", api_key, version, self._correlation, len(client)) + client
        if is_flexible(api_key, version):
            header += b"\x00"
        return header + encode_entity(build(request_class(api_key, version), body))

    def ask(
        self,
        response: type[R],
        body: Mapping[str, Any],
        *,
        principal: str = "User:ANONYMOUS",
        wait: bool = False,
    ) -> R:
        """The answer to `body`, sent as the request of `response`'s API and version, from
        `principal`. An answer the broker holds (a Delayed) fails the test unless `wait`:
        then it is completed at once, as when its deadline passes."""
        api_key, version = int(response.__api_key__), int(response.__version__)
        frame = self.frame(api_key, version, body)
        outcome = self.dispatcher.dispatch(frame, "conn-1", "127.0.0.1", principal)
        if isinstance(outcome, Pending) and wait:
            return cast(R, self.finish(api_key, version, outcome))
        assert isinstance(outcome, Reply), outcome
        return cast(R, self.decode(api_key, version, outcome.data))

    def send(self, api_key: int, version: int, body: Mapping[str, Any]) -> object:
        """The dispatcher's outcome for a request (Reply, Pending, Close, NoReply)."""
        return self.dispatcher.dispatch(self.frame(api_key, version, body), "conn-1")


def build_broker(root: Path, **overrides: str) -> InProcessBroker:
    """A started single-node broker on `root` with the configuration `overrides`
    (`authorizer.class.name` set: ACLs enforced, as the server loads them)."""
    broker = InProcessBroker(root, **overrides)
    if overrides.get("authorizer.class.name"):
        broker.context.authorizer = load_authorizer(broker.context, from_image=True)
    return broker
