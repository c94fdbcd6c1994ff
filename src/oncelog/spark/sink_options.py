"""Options of the `oncelog` Kafka sink, parsed once on the driver and pickled to executors.

Spark hands data sources a case-insensitive option map; we normalise keys to lower case so
lookups work whatever map type arrives. `kafka.*` options go to confluent-kafka unchanged
(minus the prefix), as Spark's own Kafka sink does.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

EXACTLY_ONCE = "exactly-once"
AT_LEAST_ONCE = "at-least-once"
SEMANTICS = (EXACTLY_ONCE, AT_LEAST_ONCE)

#: Testing only: "<batchId>:<partitionId>" → attempt 0 of that task raises after producing
#: some rows, before its transaction commits.
FAIL_TASK_ATTEMPT0 = "oncelog.testing.failtaskattempt0"
#: Testing only: "<pid>:<batchId>" → the driver's commit of that batch SIGKILLs pid (the
#: driver JVM/Python, passed by the pipeline) before writing the seal, then sleeps.
KILL_PID_IN_COMMIT = "oncelog.testing.killpidincommit"

#: Defaults for the sink's clients, which live for one task: librdkafka spaces out its
#: connections to "any broker" by half of reconnect.backoff.ms (100 ms by default), and a new
#: transactional producer, whose bootstrap connection is dropped once the cluster's brokers
#: are known, waited those 50 ms before it could look up its coordinator: most of a task's
#: fixed cost on a three-broker cluster (71 -> 28 ms per task, RESULTS 9.2). A `kafka.*`
#: option overrides them.
CLIENT_DEFAULTS = {"reconnect.backoff.ms": "10"}

#: Client settings the sink owns; a user value would break its guarantees.
_RESERVED = ("transactional.id", "group.id", "enable.idempotence", "isolation.level")


class SinkOptionError(ValueError):
    """An option the sink cannot work with."""


def _pair(name: str, value: str) -> tuple[int, int]:
    try:
        a, b = value.split(":")
        return int(a), int(b)
    except ValueError as exc:
        raise SinkOptionError(f"{name} must look like '<int>:<int>', got {value!r}") from exc


@dataclass(frozen=True, slots=True)
class SinkOptions:
    bootstrap: str
    topic: str | None
    sink_id: str
    semantics: str
    marker_topic: str | None
    kafka: dict[str, str] = field(default_factory=dict)
    fail_attempt0: tuple[int, int] | None = None  # (batch id, partition id)
    kill_in_commit: tuple[int, int] | None = None  # (pid, batch id)
    ordered_digest: bool = False

    @property
    def exactly_once(self) -> bool:
        return self.semantics == EXACTLY_ONCE

    def client_conf(self) -> dict[str, str]:
        """Settings shared by the sink's producers and consumers."""
        return {**CLIENT_DEFAULTS, **self.kafka, "bootstrap.servers": self.bootstrap}

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> SinkOptions:
        opts = {k.lower(): v for k, v in options.items()}
        bootstrap = opts.get("kafka.bootstrap.servers")
        if not bootstrap:
            raise SinkOptionError("option kafka.bootstrap.servers is required")
        topic = opts.get("topic") or None
        semantics = opts.get("semantics", EXACTLY_ONCE).lower()
        if semantics not in SEMANTICS:
            raise SinkOptionError(f"semantics must be one of {SEMANTICS}, got {semantics!r}")
        marker_topic = opts.get("markertopic") or topic
        if semantics == EXACTLY_ONCE and marker_topic is None:
            raise SinkOptionError(
                "exactly-once needs an existing topic for its markers: set option 'topic' or "
                "'markerTopic' when rows carry their own topic column"
            )
        sink_id = opts.get("sinkid") or topic
        if not sink_id:
            raise SinkOptionError("option sinkId is required when option topic is not set")
        kafka = {
            k[len("kafka.") :]: v
            for k, v in opts.items()
            if k.startswith("kafka.") and k != "kafka.bootstrap.servers"
        }
        for key in _RESERVED:
            if key in kafka:
                raise SinkOptionError(f"option kafka.{key} is managed by the sink")
        order = opts.get("digestorder", "unordered").lower()
        if order not in ("ordered", "unordered"):
            raise SinkOptionError(f"digestOrder must be 'ordered' or 'unordered', got {order!r}")
        fail = opts.get(FAIL_TASK_ATTEMPT0)
        kill = opts.get(KILL_PID_IN_COMMIT)
        return cls(
            bootstrap=bootstrap,
            topic=topic,
            sink_id=sink_id,
            semantics=semantics,
            marker_topic=marker_topic,
            kafka=kafka,
            fail_attempt0=_pair(FAIL_TASK_ATTEMPT0, fail) if fail else None,
            kill_in_commit=_pair(KILL_PID_IN_COMMIT, kill) if kill else None,
            ordered_digest=order == "ordered",
        )
