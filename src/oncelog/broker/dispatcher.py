"""From a request frame to a response frame, sans-IO.

1. Read api key, version and correlation id; an unknown key or an unsupported version closes
   the connection, except ApiVersions, which answers in the v0 layout with
   UNSUPPORTED_VERSION and our ranges so the client can retry with a version we have.
2. Decode header and body (Produce by hand, records left in the frame; the rest, and any
   Produce the hand reader does not take, with kio); anything malformed closes the
   connection.
3. Run the API's handler; build its answer into the requested version and frame it
   (Produce and Fetch by hand, `protocol/fast_responses.py`).
A handler that raises anything but CloseConnection is a bug: it is logged and that one
connection is closed, never the broker.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from functools import partial
from typing import Any, NamedTuple

from oncelog.broker.context import ANONYMOUS, BrokerContext, RequestContext
from oncelog.broker.handlers import (
    NO_RESPONSE,
    CloseConnection,
    add_offsets_to_txn,
    add_partitions_to_txn,
    alter_client_quotas,
    alter_configs,
    alter_partition_reassignments,
    alter_user_scram_credentials,
    api_versions,
    create_acls,
    create_partitions,
    create_topics,
    delete_acls,
    delete_groups,
    delete_records,
    delete_topics,
    describe_acls,
    describe_client_quotas,
    describe_cluster,
    describe_configs,
    describe_groups,
    describe_log_dirs,
    describe_producers,
    describe_transactions,
    describe_user_scram_credentials,
    elect_leaders,
    end_txn,
    fetch,
    find_coordinator,
    heartbeat,
    incremental_alter_configs,
    init_producer_id,
    join_group,
    leave_group,
    list_groups,
    list_offsets,
    list_partition_reassignments,
    list_transactions,
    metadata,
    offset_commit,
    offset_delete,
    offset_fetch,
    offset_for_leader_epoch,
    produce,
    sasl_authenticate,
    sasl_handshake,
    sync_group,
    txn_offset_commit,
    write_txn_markers,
)
from oncelog.broker.handlers.coordinator_wait import (
    COORDINATOR_WRITE_TIMEOUT_MS,
    answer_once_replicated,
)
from oncelog.broker.handlers.types import Handler
from oncelog.broker.metrics import BrokerMetrics
from oncelog.broker.purgatory import Delayed
from oncelog.broker.quotas import FETCH, PRODUCE, REQUEST, ClientQuotas
from oncelog.errors import ErrorCode
from oncelog.fileio import FileRegion
from oncelog.protocol.codec import (
    Buffer,
    DecodeError,
    build,
    decode_request,
    encode_fast_response,
    encode_response,
    is_flexible,
    request_class,
    response_class,
)
from oncelog.protocol.fast_requests import decode_fetch, decode_produce
from oncelog.protocol.framing import Frame
from oncelog.protocol.headers import HeaderError, peek_ids, read_client_id
from oncelog.protocol.registry import SUPPORTED_VERSIONS, ApiKey
from oncelog.types import TopicPartition

log = logging.getLogger(__name__)

#: Each handler is typed with its API's request union and answer (handlers/types.py); the table
#: erases the request type: `_decode` builds the class of the version asked for, which
#: tests/unit/test_handler_types.py holds to be in each handler's annotated union.
HANDLERS: dict[ApiKey, Handler[Any]] = {
    ApiKey.PRODUCE: produce.handle,
    ApiKey.FETCH: fetch.handle,
    ApiKey.LIST_OFFSETS: list_offsets.handle,
    ApiKey.METADATA: metadata.handle,
    ApiKey.FIND_COORDINATOR: find_coordinator.handle,
    ApiKey.API_VERSIONS: api_versions.handle,
    ApiKey.CREATE_TOPICS: create_topics.handle,
    ApiKey.DELETE_TOPICS: delete_topics.handle,
    ApiKey.DELETE_RECORDS: delete_records.handle,
    ApiKey.INIT_PRODUCER_ID: init_producer_id.handle,
    ApiKey.ADD_PARTITIONS_TO_TXN: add_partitions_to_txn.handle,
    ApiKey.ADD_OFFSETS_TO_TXN: add_offsets_to_txn.handle,
    ApiKey.END_TXN: end_txn.handle,
    ApiKey.TXN_OFFSET_COMMIT: txn_offset_commit.handle,
    ApiKey.WRITE_TXN_MARKERS: write_txn_markers.handle,
    ApiKey.DESCRIBE_PRODUCERS: describe_producers.handle,
    ApiKey.DESCRIBE_TRANSACTIONS: describe_transactions.handle,
    ApiKey.LIST_TRANSACTIONS: list_transactions.handle,
    ApiKey.OFFSET_FOR_LEADER_EPOCH: offset_for_leader_epoch.handle,
    ApiKey.DESCRIBE_CONFIGS: describe_configs.handle,
    ApiKey.DESCRIBE_LOG_DIRS: describe_log_dirs.handle,
    ApiKey.OFFSET_COMMIT: offset_commit.handle,
    ApiKey.OFFSET_FETCH: offset_fetch.handle,
    ApiKey.JOIN_GROUP: join_group.handle,
    ApiKey.HEARTBEAT: heartbeat.handle,
    ApiKey.LEAVE_GROUP: leave_group.handle,
    ApiKey.SYNC_GROUP: sync_group.handle,
    ApiKey.DESCRIBE_GROUPS: describe_groups.handle,
    ApiKey.LIST_GROUPS: list_groups.handle,
    ApiKey.DELETE_GROUPS: delete_groups.handle,
    ApiKey.CREATE_PARTITIONS: create_partitions.handle,
    ApiKey.ELECT_LEADERS: elect_leaders.handle,
    ApiKey.ALTER_PARTITION_REASSIGNMENTS: alter_partition_reassignments.handle,
    ApiKey.LIST_PARTITION_REASSIGNMENTS: list_partition_reassignments.handle,
    ApiKey.DESCRIBE_CLUSTER: describe_cluster.handle,
    ApiKey.SASL_HANDSHAKE: sasl_handshake.handle,
    ApiKey.SASL_AUTHENTICATE: sasl_authenticate.handle,
    ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS: describe_user_scram_credentials.handle,
    ApiKey.ALTER_USER_SCRAM_CREDENTIALS: alter_user_scram_credentials.handle,
    ApiKey.ALTER_CONFIGS: alter_configs.handle,
    ApiKey.INCREMENTAL_ALTER_CONFIGS: incremental_alter_configs.handle,
    ApiKey.OFFSET_DELETE: offset_delete.handle,
    ApiKey.DESCRIBE_ACLS: describe_acls.handle,
    ApiKey.CREATE_ACLS: create_acls.handle,
    ApiKey.DELETE_ACLS: delete_acls.handle,
    ApiKey.DESCRIBE_CLIENT_QUOTAS: describe_client_quotas.handle,
    ApiKey.ALTER_CLIENT_QUOTAS: alter_client_quotas.handle,
}


class _Route:
    """What dispatch needs of one API key, and of each version it has seen (flexible
    header or not, the response class): one dict lookup per request instead of `ApiKey(...)`
    conversions and schema lookups, which cost ~4 µs a request, 5-10% of a broker at 10,000
    one-message Produces and Fetches a second (issue 15)."""

    __slots__ = ("handler", "highest", "lowest", "versions")

    def __init__(self, lowest: int, highest: int, handler: Handler[Any]) -> None:
        self.lowest = lowest
        self.highest = highest
        self.handler = handler
        self.versions: dict[int, tuple[bool, type[Any]]] = {}

    def version(self, api_key: int, version: int) -> tuple[bool, type[Any]]:
        """(flexible, response class) of a supported `version`."""
        known = self.versions.get(version)
        if known is None:
            known = self.versions[version] = (
                is_flexible(api_key, version),
                response_class(api_key, version),
            )
        return known


#: Every supported API key (registry.SUPPORTED_VERSIONS) has a handler, and only those.
_ROUTES: dict[int, _Route] = {
    int(key): _Route(*SUPPORTED_VERSIONS[key], HANDLERS[key]) for key in SUPPORTED_VERSIONS
}


# What `dispatch` decides, one per request: NamedTuples, which cost a fraction of a frozen
# dataclass to build (see RequestContext).


class Reply(NamedTuple):
    data: list[Buffer]


class NoReply(NamedTuple):
    pass


class Close(NamedTuple):
    reason: str


class Pending(NamedTuple):
    """Wait for `delayed` in the purgatory, then frame its response with `finish`."""

    delayed: Delayed
    finish: Callable[[Any], list[Buffer]]


Outcome = Reply | NoReply | Close | Pending


#: `tuple.__new__(Cls, values)` builds the per-request NamedTuples without the Python-level
#: `__new__` a NamedTuple call runs (about 2.5x the cost on CPython 3.11).
_new_tuple = tuple.__new__
#: Enum members read once: on CPython 3.11 every `ApiKey.X` goes through EnumType.__getattr__.
_PRODUCE = int(ApiKey.PRODUCE)
_FETCH = int(ApiKey.FETCH)
#: Never throttled by client quotas: what clients need before they can be (ApiVersions, the
#: SASL exchange) and what brokers send each other (Kafka exempts cluster actions).
_QUOTA_EXEMPT = frozenset(
    int(k)
    for k in (
        ApiKey.API_VERSIONS,
        ApiKey.SASL_HANDSHAKE,
        ApiKey.SASL_AUTHENTICATE,
        ApiKey.WRITE_TXN_MARKERS,
    )
)
_OFFSET_FOR_LEADER_EPOCH = int(ApiKey.OFFSET_FOR_LEADER_EPOCH)
_ADD_PARTITIONS_TO_TXN = int(ApiKey.ADD_PARTITIONS_TO_TXN)


class _Charge(NamedTuple):
    """What a request subject to client quotas owes: whose it is, and the throttle time its
    request time and produced bytes already cost (a Fetch adds its bytes when framed)."""

    quotas: ClientQuotas
    principal: str
    client_id: str | None
    connection_id: str
    throttle_ms: int


class Dispatcher:
    def __init__(self, broker: BrokerContext) -> None:
        self.broker = broker

    def dispatch(
        self,
        frame: Frame,
        connection_id: str,
        client_host: str = "",
        principal: str = ANONYMOUS,
        listener_name: str = "",
        *,
        received: float | None = None,
    ) -> Outcome:
        """`principal` and `listener_name` are the connection's (oncelog.server.connection);
        `received`: when the frame arrived, on `now()`'s timer (else: now), for the
        request latency metric."""
        metrics = self.broker.metrics
        started = metrics.now() if received is None else received
        try:
            api_key, version, correlation_id = peek_ids(frame)
        except HeaderError as exc:
            return Close(str(exc))
        route = _ROUTES.get(api_key)
        if route is None:
            return Close(f"unknown api key {api_key}")
        if not route.lowest <= version <= route.highest:
            if api_key == ApiKey.API_VERSIONS:
                body = build(
                    response_class(api_key, 0), api_versions.unsupported_version_response()
                )
                metrics.record_error(api_key, ErrorCode.unsupported_version)
                metrics.record_request(api_key, started)
                return Reply(encode_response(api_key, correlation_id, body))
            return Close(f"unsupported version {version} of api key {api_key}")
        flexible, cls = route.version(api_key, version)
        try:
            client_id, offset = read_client_id(frame, flexible)
            request = _decode(api_key, version, frame, offset)
        except (HeaderError, DecodeError) as exc:
            return Close(f"malformed request (api key {api_key} v{version}): {exc}")
        ctx = _new_tuple(
            RequestContext,
            (
                api_key,
                version,
                correlation_id,
                client_id,
                connection_id,
                self.broker,
                client_host,
                principal,
                listener_name,
            ),
        )
        replicas = self.broker.replicas
        quotas = self.broker.quotas
        charged = quotas.enabled and _charged(api_key, version, request)
        handling = time.perf_counter() if charged else 0.0
        try:
            answer, writes = replicas.writes_of(route.handler, ctx, request)
        except CloseConnection as exc:
            metrics.record_request(api_key, started)
            return Close(str(exc))
        except Exception:
            log.exception("handler for api key %d v%d failed", api_key, version)
            return Close("internal error")
        charge = None
        if charged:
            charge = _charge(quotas, ctx, len(frame), time.perf_counter() - handling)
        if answer is NO_RESPONSE:
            if charge is not None and charge.throttle_ms > 0:
                quotas.muted[connection_id] = charge.throttle_ms  # acks=0: muted all the same
            metrics.record_request(api_key, started)
            return NoReply()
        follower = api_key == _FETCH and getattr(request, "replica_id", -1) >= 0
        if writes and not isinstance(answer, Delayed):
            answer = self._after_replication(answer, writes)
            if isinstance(answer, CloseConnection):
                metrics.record_request(api_key, started)
                return Close(str(answer))
        if isinstance(answer, Delayed):
            _count_closes(answer, api_key, started, metrics)
            # Framed when the answer comes (a partial: what a closure would hold, cheaper).
            ids = (api_key, version, correlation_id)
            framing = partial(_frame, *ids, metrics, started, follower, cls, charge)
            return _new_tuple(Pending, (answer, framing))
        framed = _frame(
            api_key, version, correlation_id, metrics, started, follower, cls, charge, answer
        )
        return _new_tuple(Reply, (framed,))

    def _after_replication(
        self, answer: Any, writes: list[tuple[TopicPartition, int, int]]
    ) -> Any:
        """Hold `answer` until the coordinator records it depends on are replicated (the HW
        covers them). If the leadership moves or they are not replicated in time, the
        connection is closed instead: the client retries with the new coordinator, and never
        hears success for a record a failover may lose."""
        replicas = self.broker.replicas

        def attempt(force: bool) -> Any:
            return answer_once_replicated(replicas, writes, answer, force)

        ready = attempt(False)
        if ready is not None:
            return ready
        deadline = self.broker.clock.monotonic_ms() + COORDINATOR_WRITE_TIMEOUT_MS
        return Delayed(attempt, deadline, tuple(tp for tp, _, _ in writes))


def _decode(api_key: int, version: int, frame: Frame, offset: int) -> Any:
    """The request body: Produce and Fetch read by hand (records as views of the frame),
    the rest, and anything the hand readers do not take, by kio."""
    request: Any = None
    if api_key == _PRODUCE:
        request = decode_produce(version, frame, offset)
    elif api_key == _FETCH:
        request = decode_fetch(version, frame, offset)
    if request is None:
        request = decode_request(request_class(api_key, version), frame, offset)
    return request


def _frame(
    api_key: int,
    version: int,
    correlation_id: int,
    metrics: BrokerMetrics,
    started: float,
    follower: bool,
    cls: type[Any],
    charge: _Charge | None,
    answer: Any,
) -> list[Buffer]:
    """The framed response to `answer`, counted in the metrics; with a charge, its throttle
    time is in the answer and the connection is told to mute itself for it."""
    if charge is not None and charge.throttle_ms > 0:
        _set_throttle(answer, cls, charge.throttle_ms)
    framed = encode_fast_response(api_key, version, correlation_id, answer)
    if framed is None:
        framed = encode_response(api_key, correlation_id, build(cls, answer))
    if charge is not None:
        throttle_ms = charge.throttle_ms
        if api_key == _FETCH:
            size = sum(p.length if type(p) is FileRegion else len(p) for p in framed)
            fetched = charge.quotas.record(FETCH, charge.principal, charge.client_id, size)
            if fetched > throttle_ms:
                throttle_ms = fetched
                _set_throttle(answer, cls, throttle_ms)
                framed = encode_fast_response(api_key, version, correlation_id, answer) or (
                    encode_response(api_key, correlation_id, build(cls, answer))
                )
        if throttle_ms > 0:
            charge.quotas.muted[charge.connection_id] = throttle_ms
            metrics.record_throttle(api_key, throttle_ms)
    if type(answer) is dict or isinstance(answer, Mapping):  # dict: no ABC check
        metrics.record_response(api_key, answer, started, follower=follower)
    else:
        metrics.record_request(api_key, started)
    return framed


def _charged(api_key: int, version: int, request: Any) -> bool:
    """Whether client quotas apply to this request (not to brokers' own requests)."""
    if api_key in _QUOTA_EXEMPT:
        return False
    if api_key in (_FETCH, _OFFSET_FOR_LEADER_EPOCH):
        return getattr(request, "replica_id", -1) < 0
    return not (api_key == _ADD_PARTITIONS_TO_TXN and version >= 4)


def _charge(
    quotas: ClientQuotas, ctx: RequestContext, frame_bytes: int, handled_s: float
) -> _Charge:
    """Count the request's handling time (Kafka counts thread time in percent of a second)
    and, for a Produce, its bytes; the throttle time they call for."""
    principal, client_id = ctx.principal, ctx.client_id
    throttle = quotas.record(REQUEST, principal, client_id, handled_s * 100.0)
    if ctx.api_key == _PRODUCE:
        throttle = max(throttle, quotas.record(PRODUCE, principal, client_id, frame_bytes))
    return _Charge(quotas, principal, client_id, ctx.connection_id, throttle)


def _set_throttle(answer: Any, cls: type[Any], throttle_ms: int) -> None:
    """Put the throttle time in an answer whose response has the field (not in one older
    than KIP-219's versions, which have none: the client is muted all the same)."""
    if isinstance(answer, dict) and (
        "throttle_time" in answer or "throttle_time" in getattr(cls, "__dataclass_fields__", {})
    ):
        answer["throttle_time"] = max(int(answer.get("throttle_time", 0)), throttle_ms)


def _count_closes(
    delayed: Delayed, api_key: int, started: float, metrics: BrokerMetrics
) -> None:
    """A waiting request that ends by closing the connection is never framed: count it
    (and its latency) when its wait ends so."""
    attempt = delayed.try_complete

    def try_complete(force: bool) -> Any:
        response = attempt(force)
        if isinstance(response, CloseConnection):
            metrics.record_request(api_key, started)
        return response

    delayed.try_complete = try_complete
