"""The HTTP listener's aiohttp app: `/metrics`, the console's static pages and its JSON API.

The API reads the cluster the way any tool does, through the Kafka protocol with the
blocking `oncelog.client` (in a worker thread, `asyncio.to_thread`, one short-lived `Admin`
per request), so the console never reaches into the broker it runs beside and shows what a
client would see. Only `/metrics` reads the broker's process: the prometheus registry handed
in by whoever composes the broker and the console (`oncelog serve`).

Authentication and authorization plug in (`ConsoleSettings.authenticate`, `may_abort`,
`admin_for`): with none given, as on a broker without SASL and an authorizer, everyone may
read and abort.
"""

from __future__ import annotations

import asyncio
import json
import logging
import socket
import ssl
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from importlib import resources
from typing import Any

from aiohttp import web

from oncelog.client import reassignments
from oncelog.client.admin import Admin, ProducerInfo
from oncelog.client.connection import ClientError
from oncelog.client.describe_transactions import TransactionState
from oncelog.client.overview import (
    committed_offsets,
    describe_cluster,
    describe_group,
    list_groups,
    list_offsets,
    partition_offsets,
    partitions,
)
from oncelog.client.quotas import describe_client_quotas
from oncelog.client.transactions import find_hanging, now_ms
from oncelog.console import views
from oncelog.errors import error_name
from oncelog.types import LATEST_TIMESTAMP, TopicPartition

log = logging.getLogger(__name__)

#: Kafka's transaction.max.timeout.ms default: what `find-hanging` calls too old.
DEFAULT_MAX_TRANSACTION_TIMEOUT_MS = 900_000
STATIC_FILES = {
    "index.html": "text/html",
    "console.js": "text/javascript",
    "console.css": "text/css",
}

#: Finds the user of a request (basic auth, a token), or None to refuse it (401). The user is
#: any object with a `name` (or a plain string); the other hooks get it back.
Authenticator = Callable[[web.Request], Awaitable[Any]]


def allow_everyone(user: object) -> bool:
    """No authorizer: the abort action is open to anyone who reaches the console."""
    return True


@dataclass(frozen=True)
class ConsoleSettings:
    #: Where the console's Kafka client connects (the broker's own listener).
    bootstrap: str
    #: The prometheus_client registry `/metrics` renders; None: an empty one.
    registry: Any = None
    authenticate: Authenticator | None = None
    #: May this user abort transactions (the issue's rule: Alter on the cluster)? Called in
    #: a worker thread: it may ask the broker.
    may_abort: Callable[[Any], bool] = allow_everyone
    #: The Kafka client a request of this user reads with: to log in to the broker as the
    #: user (SASL) so the broker's own checks apply. Default: an anonymous `Admin`.
    admin_for: Callable[[Any], Admin] | None = None
    timeout: float = 10.0
    #: TLS to the broker's listener (an SSL one), else plaintext.
    tls: ssl.SSLContext | None = None


SETTINGS = web.AppKey("settings", ConsoleSettings)
#: The authenticated user of a request (None without an authenticator).
USER: Any = web.RequestKey("user", object) if hasattr(web, "RequestKey") else "user"


def make_app(settings: ConsoleSettings) -> web.Application:
    app = web.Application(middlewares=[_errors, _authentication])
    app[SETTINGS] = settings
    app.router.add_get("/", _index)
    app.router.add_get("/static/{name}", _static)
    app.router.add_get("/metrics", _metrics)
    app.router.add_get("/api/whoami", _whoami)
    app.router.add_get("/api/cluster", _cluster)
    app.router.add_get("/api/topics", _topics)
    app.router.add_get("/api/producers", _producers)
    app.router.add_get("/api/transactions", _transactions)
    app.router.add_post("/api/transactions/abort", _abort)
    app.router.add_get("/api/groups", _groups)
    app.router.add_get("/api/quotas", _quotas)
    app.router.add_get("/api/metrics", _metrics_json)
    return app


class ConsoleServer:
    """The app on a socket its starter bound beforehand, served on the running loop."""

    def __init__(
        self,
        settings: ConsoleSettings,
        sock: socket.socket,
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        self._runner = web.AppRunner(make_app(settings), access_log=None)
        self._sock = sock
        self._ssl = ssl_context

    @property
    def port(self) -> int:
        return int(self._sock.getsockname()[1])

    async def start(self) -> int:
        await self._runner.setup()
        site = web.SockSite(self._runner, self._sock, shutdown_timeout=1.0, ssl_context=self._ssl)
        await site.start()
        return self.port

    async def stop(self) -> None:
        await self._runner.cleanup()


# -- middlewares -----------------------------------------------------------------------------


class ApiError(Exception):
    """An answer the API gives as {"error": message} with an HTTP status."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


@web.middleware
async def _errors(
    request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
) -> web.StreamResponse:
    """Failures become one-line JSON errors: the cluster's (502), the caller's (4xx)."""
    try:
        return await handler(request)
    except web.HTTPException:
        raise
    except ApiError as exc:
        return web.json_response({"error": str(exc)}, status=exc.status)
    except (ClientError, OSError, TimeoutError) as exc:
        return web.json_response({"error": str(exc) or type(exc).__name__}, status=502)
    except Exception as exc:
        log.warning("console: %s %s failed", request.method, request.path, exc_info=True)
        return web.json_response({"error": f"{type(exc).__name__}: {exc}"}, status=500)


@web.middleware
async def _authentication(
    request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
) -> web.StreamResponse:
    authenticate = request.app[SETTINGS].authenticate
    request[USER] = None
    if authenticate is not None:
        user = await authenticate(request)
        if user is None:
            raise web.HTTPUnauthorized(headers={"WWW-Authenticate": 'Basic realm="oncelog"'})
        request[USER] = user
    return await handler(request)


# -- pages and metrics -----------------------------------------------------------------------


def _static_bytes(name: str) -> bytes:
    return resources.files("oncelog.console").joinpath("static", name).read_bytes()


async def _index(request: web.Request) -> web.Response:
    return web.Response(body=_static_bytes("index.html"), content_type="text/html")


async def _static(request: web.Request) -> web.Response:
    name = request.match_info["name"]
    kind = STATIC_FILES.get(name)
    if kind is None:
        raise web.HTTPNotFound()
    return web.Response(body=_static_bytes(name), content_type=kind, charset="utf-8")


def _registry(request: web.Request) -> Any:
    registry = request.app[SETTINGS].registry
    if registry is None:
        from prometheus_client import CollectorRegistry

        registry = CollectorRegistry()
    return registry


async def _metrics(request: web.Request) -> web.Response:
    """Prometheus' text format. Rendered on the loop: collectors read broker state."""
    from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

    body = generate_latest(_registry(request))
    return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})


async def _metrics_json(request: web.Request) -> web.Response:
    samples = views.metric_samples(_registry(request))
    return web.json_response(
        {"time_ms": now_ms(), "totals": views.summarize(samples), "samples": samples}
    )


async def _whoami(request: web.Request) -> web.Response:
    user = request[USER]
    may_abort = await asyncio.to_thread(request.app[SETTINGS].may_abort, user)
    name = user if user is None or isinstance(user, str) else getattr(user, "name", str(user))
    return web.json_response({"user": name, "may_abort": may_abort})


# -- the cluster, through the Kafka protocol ---------------------------------------------------


async def _read(request: web.Request, read: Callable[[Admin], Any]) -> Any:
    """Run `read` with a fresh Admin of the request's user in a worker thread."""
    settings = request.app[SETTINGS]
    user = request[USER]

    def run() -> Any:
        if settings.admin_for is not None:
            admin = settings.admin_for(user)
        else:
            admin = Admin(settings.bootstrap, timeout=settings.timeout, tls=settings.tls)
        with admin:
            return read(admin)

    return await asyncio.to_thread(run)


async def _cluster(request: web.Request) -> web.Response:
    return web.json_response(await _read(request, lambda a: views.cluster(describe_cluster(a))))


def _read_topics(admin: Admin) -> list[views.Json]:
    found = partitions(admin)
    try:
        moves = reassignments.ongoing(admin)
    except ClientError:  # no Describe on the cluster, or a broker without the API
        moves = {}
    return views.topics(found, partition_offsets(admin, [p.tp for p in found]), moves)


async def _topics(request: web.Request) -> web.Response:
    return web.json_response(await _read(request, _read_topics))


def _user_partitions(admin: Admin) -> list[TopicPartition]:
    return sorted(
        tp for tp, leader in admin.leaders.items() if leader >= 0 and not tp.topic.startswith("__")
    )


async def _producers(request: web.Request) -> web.Response:
    def read(admin: Admin) -> list[views.Json]:
        return views.producers(admin.describe_producers(_user_partitions(admin)), now_ms())

    return web.json_response(await _read(request, read))


def _max_timeout(request: web.Request) -> int:
    raw = request.query.get("max_transaction_timeout_ms", str(DEFAULT_MAX_TRANSACTION_TIMEOUT_MS))
    try:
        value = int(raw)
    except ValueError:
        value = -1
    if value < 0:
        raise ApiError(400, f"max_transaction_timeout_ms must be a number >= 0, got {raw!r}")
    return value


async def _transactions(request: web.Request) -> web.Response:
    max_timeout = _max_timeout(request)

    def read(admin: Admin) -> views.Json:
        listings = admin.list_transactions()
        states: dict[str, TransactionState] = {}
        for t in listings:
            if t.transaction_state in views.OPEN_STATES:
                states[t.transactional_id] = admin.describe_transaction(t.transactional_id)
        hanging = find_hanging(admin, None, max_timeout)
        return views.transactions(listings, states, hanging, now_ms(), max_timeout)

    return web.json_response(await _read(request, read))


async def _groups(request: web.Request) -> web.Response:
    def read(admin: Admin) -> list[views.Json]:
        out = []
        for listing in list_groups(admin):
            description = describe_group(admin, listing.group_id)
            committed = committed_offsets(admin, listing.group_id)
            tps = sorted({*committed, *(tp for m in description.members for tp in m.assignment)})
            ends = list_offsets(admin, tps, LATEST_TIMESTAMP, read_committed=True)
            out.append(views.group(listing, description, committed, ends))
        return out

    return web.json_response(await _read(request, read))


async def _quotas(request: web.Request) -> web.Response:
    def read(admin: Admin) -> list[views.Json]:
        return views.quotas(describe_client_quotas(admin, [], strict=False))

    return web.json_response(await _read(request, read))


# -- the abort action --------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class AbortRequest:
    topic: str
    partition: int
    producer_id: int
    start_offset: int

    @classmethod
    def parse(cls, body: object) -> AbortRequest:
        """The JSON body {topic, partition, producer_id, start_offset}; bad: ApiError 400."""
        if not isinstance(body, dict):
            raise ApiError(400, "expected a JSON object")
        topic = body.get("topic")
        if not isinstance(topic, str) or not topic:
            raise ApiError(400, "topic must be a non-empty string")
        numbers = {}
        for key in ("partition", "producer_id", "start_offset"):
            value = body.get(key)
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise ApiError(400, f"{key} must be an integer >= 0")
            numbers[key] = value
        return cls(topic, numbers["partition"], numbers["producer_id"], numbers["start_offset"])


def abort_open_transaction(admin: Admin, wanted: AbortRequest) -> str:
    """Write an ABORT marker for the one open transaction `wanted` names (as `oncelog
    transactions abort` does); the sentence saying what was aborted."""
    tp = TopicPartition(wanted.topic, wanted.partition)
    if tp not in admin.leaders:
        raise ApiError(404, f"partition {tp} does not exist")
    chosen: list[ProducerInfo] = [
        p
        for p in admin.describe_producers([tp])
        if p.txn_start_offset == wanted.start_offset and p.producer_id == wanted.producer_id
    ]
    if not chosen:
        raise ApiError(
            409,
            f"no open transaction of producer {wanted.producer_id} on {tp} starts at offset "
            f"{wanted.start_offset}",
        )
    p = chosen[0]
    what = (
        f"the transaction of producer {p.producer_id} (epoch {p.producer_epoch}) "
        f"open on {tp} since offset {p.txn_start_offset}"
    )
    code = admin.abort(p)
    if code != 0:
        raise ApiError(502, f"cannot abort {what}: {error_name(code)}")
    return f"Aborted {what}."


async def _abort(request: web.Request) -> web.Response:
    """POST JSON only: a cross-site form cannot send application/json without CORS."""
    if request.content_type != "application/json":
        raise ApiError(415, "send the request as application/json")
    if not await asyncio.to_thread(request.app[SETTINGS].may_abort, request[USER]):
        raise ApiError(403, "aborting transactions needs the Alter operation on the cluster")
    try:
        body = await request.json()
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ApiError(400, f"the body is not JSON: {exc}") from exc
    wanted = AbortRequest.parse(body)
    message = await _read(request, lambda admin: abort_open_transaction(admin, wanted))
    return web.json_response({"message": message})
