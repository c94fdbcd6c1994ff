"""The broker's Prometheus metrics: one `CollectorRegistry` per broker, never the global one.

Two kinds, as in Kafka:

- Events counted where they happen (the dispatcher and the replica manager): requests and
  errors per API and error code, request latency, bytes and messages in and out per topic,
  duplicates of idempotent batches, log fsync time. Per request or per partition and
  request, never per record: message counts come from the batch headers.
- State read when the page is scraped (`metrics_collector.BrokerStateCollector`): offsets
  and sizes of every partition, open transactions, producer state, consumer groups and their
  lag, the cluster's replication health. Nothing is kept up to date on the hot path for them.

`oncelog_request_errors_total` counts every error code a response carried, per API and
code, as Kafka's RequestMetrics ErrorsPerSec does (a response with three failed partitions
counts three). Duplicates of idempotent batches are answered as successes and counted apart.
The HTTP listener renders `registry` with `prometheus_client.generate_latest`.
"""

from __future__ import annotations

import math
import time
from bisect import bisect_left
from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import CounterMetricFamily, HistogramMetricFamily
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector
from prometheus_client.utils import floatToGoString

from oncelog.errors import ErrorCode
from oncelog.protocol.registry import ApiKey

if TYPE_CHECKING:

    from oncelog.broker.context import BrokerContext
    from oncelog.metadata.controller import Controller

#: Request latency buckets, seconds: sub-millisecond answers up to long polls and timeouts.
REQUEST_BUCKETS = (
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
)
#: Compared per request: plain ints (on CPython 3.11 `ApiKey.X` and comparing with an
#: IntEnum member cost a Python-level lookup each).
_PRODUCE = int(ApiKey.PRODUCE)
_FETCH = int(ApiKey.FETCH)
#: fsync latency buckets, seconds.
FLUSH_BUCKETS = (
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 5.0,
)


def api_name(api_key: int) -> str:
    """Kafka's name of an API (`Produce`, `AddPartitionsToTxn`), the number if unknown."""
    try:
        name = ApiKey(api_key).name
    except ValueError:
        return str(api_key)
    return "".join(part.capitalize() for part in name.split("_"))


def error_label(code: int) -> str:
    """Kafka's name of an error code (`OUT_OF_ORDER_SEQUENCE_NUMBER`)."""
    try:
        return ErrorCode(code).name.upper()
    except ValueError:
        return f"UNKNOWN_ERROR_CODE_{code}"


class BrokerMetrics:
    def __init__(self, now: Callable[[], float] = time.perf_counter) -> None:
        #: The timer request latency is measured with (seconds); tests may replace it.
        self.now = now
        self.registry = CollectorRegistry()
        r = self.registry
        self._per_api = _RequestCounters()
        r.register(self._per_api)
        self._errors = Counter(
            "oncelog_request_errors",
            "Error codes in responses, per API and Kafka error name (each failed partition "
            "counts once).",
            ["api", "error"],
            registry=r,
        )
        self._duplicates = Counter(
            "oncelog_duplicate_batches",
            "Retried idempotent batches recognised as duplicates (answered as success, not "
            "written again).",
            ["topic"],
            registry=r,
        )
        self._appends = _AppendCounters()
        r.register(self._appends)
        self._bytes_out = _TopicBytes(
            "oncelog_bytes_out", "Record bytes sent in Fetch responses to consumers, per topic."
        )
        self._replication_bytes_out = _TopicBytes(
            "oncelog_replication_bytes_out",
            "Record bytes sent in Fetch responses to follower brokers, per topic.",
        )
        self._replication_bytes_in = _TopicBytes(
            "oncelog_replication_bytes_in",
            "Record bytes this broker stored as a follower, per topic.",
        )
        for counter in (self._bytes_out, self._replication_bytes_out, self._replication_bytes_in):
            r.register(counter)
        self._flush = Histogram(
            "oncelog_log_flush_duration_seconds",
            "Time one fsync of a log segment (with its indexes) took.",
            buckets=FLUSH_BUCKETS,
            registry=r,
        )
        self._connections = Gauge(
            "oncelog_open_connections", "Open client and broker connections.", registry=r
        )
        self._connections.set_function(lambda: 0)
        self._request_memory = Gauge(
            "oncelog_request_memory_used_bytes",
            "Bytes of requests received and not yet handled, all connections together "
            "(queued.max.request.bytes caps them).",
            registry=r,
        )
        self._request_memory.set_function(lambda: 0)
        self._memory_waits = Gauge(
            "oncelog_connections_waiting_for_memory",
            "Connections that stopped reading until queued.max.request.bytes has room.",
            registry=r,
        )
        self._memory_waits.set_function(lambda: 0)
        self._rejected = Counter(
            "oncelog_connections_rejected",
            "Connections closed as they opened, by the limit they were over "
            "(max.connections.per.ip, max.connections).",
            ["limit"],
            registry=r,
        )
        self._throttled = Counter(
            "oncelog_throttled_responses",
            "Responses that carried a client quota's throttle time (the connection then reads "
            "nothing for that long), per API.",
            ["api"],
            registry=r,
        )
        self._throttle_time = Counter(
            "oncelog_throttle_time_seconds",
            "Throttle time client quotas imposed, per API.",
            ["api"],
            registry=r,
        )
        #: Set by the server in a cluster: the controller state machine of this broker.
        self.controller: Controller | None = None
        self._attached = False

    # -- wiring --------------------------------------------------------------------------------

    def attach(self, broker: BrokerContext) -> None:
        """Read `broker`'s services' state at scrape time (the appends and fsyncs the
        replica manager reports come through its listeners, `broker/assembly.py`)."""
        if self._attached:
            return
        self._attached = True
        from oncelog.broker.metrics_collector import BrokerStateCollector

        self.registry.register(BrokerStateCollector(broker, self))

    def count_connections(self, count: Callable[[], int]) -> None:
        """The server's count of open connections, read at scrape time."""
        self._connections.set_function(lambda: float(count()))

    def watch_request_memory(self, used: Callable[[], int], waiting: Callable[[], int]) -> None:
        """The server's request-memory budget, read at scrape time."""
        self._request_memory.set_function(lambda: float(used()))
        self._memory_waits.set_function(lambda: float(waiting()))

    # -- events ----------------------------------------------------------------------------------

    def record_throttle(self, api_key: int, throttle_ms: int) -> None:
        """A response throttled by a client quota for `throttle_ms`."""
        api = api_name(api_key)
        self._throttled.labels(api=api).inc()
        self._throttle_time.labels(api=api).inc(throttle_ms / 1000)

    def record_rejected_connection(self, limit: str) -> None:
        self._rejected.labels(limit=limit).inc()

    def record_request(self, api_key: int, started: float | None) -> None:
        """One request answered (or closed, or acks=0); `started`: its arrival (`now`)."""
        stats = self._per_api.by_key.get(api_key) or self._per_api.add(api_key)
        stats.count += 1
        if started is not None:
            seconds = self.now() - started
            seconds = seconds if seconds > 0.0 else 0.0
            stats.sum += seconds
            stats.buckets[bisect_left(REQUEST_BUCKETS, seconds)] += 1

    def record_response(
        self,
        api_key: int,
        answer: Mapping[str, Any],
        started: float | None = None,
        *,
        follower: bool = False,
    ) -> None:
        """A response about to be framed: the request, its latency, its error codes, and a
        Fetch's bytes out per topic (`follower`: a replica's fetch)."""
        self.record_request(api_key, started)
        name = self._per_api.by_key[api_key].name
        if api_key == _PRODUCE:
            codes = _produce_error_codes(answer)
        elif api_key == _FETCH:
            counter = self._replication_bytes_out if follower else self._bytes_out
            codes = _count_fetch(answer, counter)
        else:
            codes = _error_codes(answer)
        for code in codes:
            self._errors.labels(name, error_label(code)).inc()

    def record_error(self, api_key: int, code: int) -> None:
        self._errors.labels(api_name(api_key), error_label(code)).inc()

    def record_duplicate(self, topic: str) -> None:
        self._duplicates.labels(topic).inc()

    def record_append(self, topic: str, size: int, records: int) -> None:
        counts = self._appends.by_topic.get(topic)
        if counts is None:
            counts = self._appends.by_topic[topic] = [0, 0, time.time()]
        counts[0] += size
        counts[1] += records

    def record_replicated(self, topic: str, size: int) -> None:
        if size:
            self._replication_bytes_in.add(topic, size)

    def time_flush(self, flush: Callable[[], None]) -> None:
        """Run one segment fsync for storage and time it (storage reads no clock itself)."""
        started = time.perf_counter()
        flush()
        self._flush.observe(time.perf_counter() - started)

    @property
    def duplicate_batches(self) -> int:
        """Duplicates over every topic."""
        return int(sum(s.value for s in _samples(self._duplicates, "_total")))


_BUCKET_LABELS = tuple(floatToGoString(b) for b in (*REQUEST_BUCKETS, math.inf))  # type: ignore[no-untyped-call]
"""The `le` labels of the request histogram, as prometheus-client writes them."""


class _ApiStats:
    """One API's requests and latency histogram (buckets not cumulative; the last one is
    +Inf)."""

    __slots__ = ("buckets", "count", "created", "name", "sum")

    def __init__(self, name: str) -> None:
        self.name = name
        self.count = 0
        self.sum = 0.0
        self.buckets = [0] * (len(REQUEST_BUCKETS) + 1)
        self.created = time.time()


class _RequestCounters(Collector):
    """`oncelog_requests` and `oncelog_request_duration_seconds` per API as plain numbers:
    every request moves them, where prometheus-client's counter and histogram take a lock
    per step; the page reads them here, in the same families and buckets."""

    def __init__(self) -> None:
        self.by_key: dict[int, _ApiStats] = {}

    def add(self, api_key: int) -> _ApiStats:
        stats = self.by_key[api_key] = _ApiStats(api_name(api_key))
        return stats

    def collect(self) -> Iterator[Metric]:
        requests = CounterMetricFamily(
            "oncelog_requests", "Requests handled, per API.", labels=["api"]
        )
        duration = HistogramMetricFamily(
            "oncelog_request_duration_seconds",
            "Time from a request's arrival to its response being framed, purgatory waits "
            "included.",
            labels=["api"],
        )
        for stats in list(self.by_key.values()):
            requests.add_metric([stats.name], stats.count, created=stats.created)
            running = 0
            buckets: list[tuple[str, float]] = []
            for label, count in zip(_BUCKET_LABELS, stats.buckets, strict=True):
                running += count
                buckets.append((label, running))
            duration.add_metric([stats.name], buckets, stats.sum)
        yield requests
        yield duration


class _AppendCounters(Collector):
    """`oncelog_bytes_in` and `oncelog_messages_in` per topic, kept as plain integers: they
    move for every partition of every Produce, where a prometheus-client child's `inc` (a
    lock and three calls) was a measurable part of the append; the page reads them here."""

    def __init__(self) -> None:
        #: topic -> [bytes, records, created (unix seconds)]
        self.by_topic: dict[str, list[Any]] = {}

    def collect(self) -> Iterator[Metric]:
        size = CounterMetricFamily(
            "oncelog_bytes_in", "Bytes appended to the log, per topic.", labels=["topic"]
        )
        records = CounterMetricFamily(
            "oncelog_messages_in",
            "Records appended to the log, per topic (from the batch headers).",
            labels=["topic"],
        )
        for topic, (appended, count, created) in list(self.by_topic.items()):
            size.add_metric([topic], appended, created=created)
            records.add_metric([topic], count, created=created)
        yield size
        yield records


class _TopicBytes(Collector):
    """A per-topic byte counter kept as plain integers, as `_AppendCounters`: it moves with
    every Fetch answer and every follower append, where a prometheus-client child took a lock
    and a label lookup each time."""

    def __init__(self, name: str, documentation: str) -> None:
        self.name = name
        self.documentation = documentation
        #: topic -> [bytes, created (unix seconds)]
        self.by_topic: dict[str, list[Any]] = {}

    def add(self, topic: str, size: int) -> None:
        counts = self.by_topic.get(topic)
        if counts is None:
            counts = self.by_topic[topic] = [0, time.time()]
        counts[0] += size

    def collect(self) -> Iterator[Metric]:
        family = CounterMetricFamily(self.name, self.documentation, labels=["topic"])
        for topic, (size, created) in list(self.by_topic.items()):
            family.add_metric([topic], size, created=created)
        yield family


def _samples(metric: Any, suffix: str) -> list[Any]:
    return [
        sample
        for family in metric.collect()
        for sample in family.samples
        if sample.name.endswith(suffix)
    ]


def _produce_error_codes(answer: Mapping[str, Any]) -> list[int]:
    """`_error_codes` of a Produce answer, which has them only per partition: read there,
    without walking every field of every partition of every request."""
    return [
        int(partition["error_code"])
        for topic in answer["responses"]
        for partition in topic["partition_responses"]
        if partition["error_code"]
    ]


def _count_fetch(answer: Mapping[str, Any], counter: _TopicBytes) -> list[int]:
    """`_error_codes` of a Fetch answer (the top-level code and each partition's), and its
    record bytes per topic added to `counter`, in one walk."""
    found = [int(answer["error_code"])] if answer.get("error_code") else []
    for topic in answer.get("responses") or ():
        size = 0
        for partition in topic.get("partitions") or ():
            if partition.get("error_code"):
                found.append(int(partition["error_code"]))
            size += len(partition.get("records") or b"")
        if size:
            counter.add(topic.get("topic") or "", size)
    return found


def _error_codes(answer: Mapping[str, Any]) -> list[int]:
    """Every non-zero error_code in a response mapping, nested lists included."""
    found: list[int] = []
    stack: list[Mapping[str, Any]] = [answer]
    while stack:
        node = stack.pop()
        for key, value in node.items():
            if key == "error_code":
                if value:
                    found.append(int(value))
            elif isinstance(value, list) and value and isinstance(value[0], Mapping):
                stack.extend(value)
    return found
