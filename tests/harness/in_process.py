"""InProcessBroker: the real replica manager, coordinators and dispatcher on a temporary
directory and a ManualClock, driven with request frames and answering with kio's response
entities, typed by the response class asked for. No sockets, no threads, no subprocesses.

    broker = build_broker(tmp_path)
    answer = broker.ask(HeartbeatResponse, {"group_id": "g", ...})  # HeartbeatResponse v4
    assert answer.error_code == ErrorCode.unknown_member_id

The broker is assembled in one function, `assemble_in_process`, as the server assembles it
(`oncelog.broker.assembly`); its metrics page is parsed back with prometheus-client's own
parser (the metrics tests). tests/unit/metrics_broker.py re-exports this module under its
old names.
"""

from __future__ import annotations

import struct
import uuid
from collections.abc import Callable, Hashable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import replace
from datetime import timedelta
from pathlib import Path
from typing import Any, Protocol, TypeVar, cast

from kio.serial import entity_reader
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from oncelog.broker.assembly import ServerHooks, assemble
from oncelog.broker.authz import load_authorizer
from oncelog.broker.context import BrokerContext, Node
from oncelog.broker.dispatcher import Dispatcher, Outcome, Pending, Reply
from oncelog.broker.metrics import BrokerMetrics
from oncelog.broker.partition import ReplicaView
from oncelog.broker.replica_manager import ReplicaManager, TopicSpec
from oncelog.clock import ManualClock
from oncelog.config import BrokerConfig
from oncelog.fileio import FileRegion
from oncelog.protocol.codec import build, encode_entity, is_flexible, request_class, response_class
from oncelog.protocol.records.batch import build_batch
from oncelog.protocol.records.record import encode_record
from oncelog.protocol.registry import ApiKey
from oncelog.types import TopicPartition

PRODUCE_V = 9
FETCH_V = 12


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


#: The settings of a broker in a cluster (its replica manager never reaches etcd here: the
#: tests hand it topics and partition states as etcd's watch would).
CLUSTERED = {"etcd.connect": "http://127.0.0.1:2379", "node.id": "1"}


@contextmanager
def clustered_replicas(root: Path, node_id: int) -> Iterator[ReplicaManager]:
    """A started replica manager of clustered broker `node_id` (etcd never reached), shut
    down afterwards."""
    config = BrokerConfig(
        {"log.dirs": str(root), "etcd.connect": "127.0.0.1:2379", "node.id": str(node_id)}
    )
    replicas = ReplicaManager(config, ManualClock())
    replicas.startup()
    try:
        yield replicas
    finally:
        replicas.shutdown()


def replica_state(isr: tuple[int, ...], partition_epoch: int, leader_epoch: int = 0) -> ReplicaView:
    """Broker 1 leading a partition replicated on brokers 1-3, with `isr` in sync."""
    return ReplicaView(1, leader_epoch, isr, partition_epoch, (1, 2, 3), partition_epoch + 1)


class Timer:
    """The metrics' latency timer, moved by hand."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def assemble_in_process(
    config: BrokerConfig, clock: ManualClock, metrics: BrokerMetrics, hooks: ServerHooks
) -> BrokerContext:
    """The broker the harness runs, assembled as the server assembles it and started: what
    the handlers see (`authorizer.class.name` set: ACLs enforced, loaded as the server
    loads a single node's). The one place a change to the broker's assembly reaches."""
    core = assemble(config, clock, hooks, metrics)
    core.replicas.startup()
    core.groups.startup()
    core.txns.startup()
    context = core.context(Node(1, "127.0.0.1", 9092))
    if config.get("authorizer.class.name"):
        context.authorizer = load_authorizer(context, from_image=True)
    return context


class InProcessBroker:
    """The in-process broker. `ask` frames a body for the API and version of a kio response
    class and decodes the answer into that class; `dispatch`/`call` take the API key and
    version as numbers (the answer untyped)."""

    def __init__(self, root: Path, hooks: ServerHooks | None = None, **overrides: str) -> None:
        """`hooks`: what the broker tells the server (`ServerHooks`: a cluster's marker
        sending, say), inert unless given; its wake-ups go to `wake_listeners`."""
        self.clock = ManualClock()
        self.timer = Timer()
        self.config = BrokerConfig({"log.dirs": str(root), **overrides})
        #: Told the keys each wake-up names (what the server's purgatory would complete).
        self.wake_listeners: list[Callable[[list[Hashable]], object]] = []
        hooks = replace(hooks or ServerHooks(), wake=self._wake)
        metrics = BrokerMetrics(now=self.timer)
        self.context = assemble_in_process(self.config, self.clock, metrics, hooks)
        self.replicas = self.context.replicas
        self.groups = self.context.groups
        self.txns = self.context.txns
        self.metrics = self.context.metrics
        self.dispatcher = Dispatcher(self.context)
        self._correlation = 0

    def _wake(self, keys: list[Hashable]) -> None:
        for listener in self.wake_listeners:
            listener(keys)

    def close(self) -> None:
        self.replicas.shutdown()

    def create_topic(self, name: str, partitions: int = 1) -> None:
        self.replicas.create_topic(TopicSpec(name, partitions, 1, {}))

    def lead(self, topic: str, internal: bool = False) -> TopicPartition:
        """In a cluster: a one-partition topic on brokers 1-3 that this broker (1) leads with
        the full ISR; its partition."""
        tp = TopicPartition(topic, 0)
        self.replicas.apply_topic(topic, uuid.uuid4(), ((1, 2, 3),), {}, internal)
        self.replicas.apply_partition_state(tp, replica_state((1, 2, 3), 0))
        return tp

    # -- requests ------------------------------------------------------------------------------

    #: The requests' client id (the quota tests' client entity).
    CLIENT_ID = b"metrics-test"

    def frame(self, api_key: int, version: int, body: Mapping[str, Any]) -> bytes:
        """A request frame (without the length prefix), the next correlation id."""
        self._correlation += 1
        client = self.CLIENT_ID
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

    def dispatch(
        self, api_key: int, version: int, body: Mapping[str, Any], received: float | None = None
    ) -> tuple[Outcome, int]:
        frame = self.frame(api_key, version, body)
        return self.dispatcher.dispatch(frame, "conn-1", received=received), version

    def decode(self, api_key: int, version: int, parts: list[Any]) -> Any:
        pieces = (p.read() if isinstance(p, FileRegion) else bytes(p) for p in parts)
        frame = b"".join(pieces)[4:]  # without the length prefix
        flexible = is_flexible(api_key, version) and api_key != ApiKey.API_VERSIONS
        entity, _ = entity_reader(response_class(api_key, version))(frame, 4 + flexible)
        return entity

    def call(
        self, api_key: int, version: int, body: Mapping[str, Any], received: float | None = None
    ) -> Any:
        outcome, _ = self.dispatch(api_key, version, body, received)
        assert isinstance(outcome, Reply), outcome
        return self.decode(api_key, version, outcome.data)

    def finish(self, api_key: int, version: int, pending: Pending) -> Any:
        """Complete a waiting request now (its deadline passed) and decode its answer."""
        response = pending.delayed.try_complete(True)
        return self.decode(api_key, version, pending.finish(response))

    def add_partitions(self, transactional_id: str, pid: int, epoch: int, topic: str) -> Outcome:
        """AddPartitionsToTxn v3 of partition 0 of `topic`; the dispatcher's outcome."""
        outcome, _ = self.dispatch(
            ApiKey.ADD_PARTITIONS_TO_TXN,
            3,
            {
                "v3_and_below_transactional_id": transactional_id,
                "v3_and_below_producer_id": pid,
                "v3_and_below_producer_epoch": epoch,
                "v3_and_below_topics": [{"name": topic, "partitions": [0]}],
                "transactions": [],
            },
        )
        return outcome

    def init_producer(self, transactional_id: str | None = None) -> tuple[int, int]:
        answer = self.call(
            ApiKey.INIT_PRODUCER_ID,
            4,
            {
                "transactional_id": transactional_id,
                "transaction_timeout": timedelta(seconds=60),
                "producer_id": -1,
                "producer_epoch": -1,
            },
        )
        assert answer.error_code == 0, answer
        return int(answer.producer_id), int(answer.producer_epoch)

    def produce(
        self,
        topic: str,
        partition: int,
        records: bytes,
        *,
        acks: int = -1,
        transactional_id: str | None = None,
        received: float | None = None,
    ) -> Any:
        answer = self.call(
            ApiKey.PRODUCE,
            PRODUCE_V,
            {
                "transactional_id": transactional_id,
                "acks": acks,
                "timeout": timedelta(seconds=5),
                "topic_data": [
                    {"name": topic, "partition_data": [{"index": partition, "records": records}]}
                ],
            },
            received,
        )
        return answer.responses[0].partition_responses[0]

    def fetch_body(
        self, topic: str, offset: int, *, max_wait_ms: int = 0, isolation: int = 0
    ) -> dict[str, Any]:
        return {
            "cluster_id": None,
            "replica_id": -1,
            "max_wait": timedelta(milliseconds=max_wait_ms),
            "min_bytes": 1,
            "max_bytes": 1 << 20,
            "isolation_level": isolation,
            "session_id": 0,
            "session_epoch": -1,
            "topics": [
                {
                    "topic": topic,
                    "partitions": [
                        {
                            "partition": 0,
                            "current_leader_epoch": -1,
                            "fetch_offset": offset,
                            "last_fetched_epoch": -1,
                            "log_start_offset": -1,
                            "partition_max_bytes": 1 << 20,
                        }
                    ],
                }
            ],
            "forgotten_topics_data": [],
            "rack_id": "",
        }

    # -- the page ------------------------------------------------------------------------------

    def page(self) -> str:
        return generate_latest(self.metrics.registry).decode()

    def samples(self) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
        """Every sample of the page, by (name, labels)."""
        out: dict[tuple[str, frozenset[tuple[str, str]]], float] = {}
        for family in text_string_to_metric_families(self.page()):
            for s in family.samples:
                out[(s.name, frozenset(s.labels.items()))] = s.value
        return out

    def value(self, name: str, **labels: str) -> float | None:
        return self.samples().get((name, frozenset(labels.items())))


def batch(
    values: list[bytes],
    *,
    producer_id: int = -1,
    epoch: int = -1,
    sequence: int = -1,
    transactional: bool = False,
    timestamp: int = 1_700_000_000_000,
) -> bytes:
    body = b"".join(
        encode_record(offset_delta=i, timestamp_delta=0, key=None, value=v)
        for i, v in enumerate(values)
    )
    return build_batch(
        base_offset=0,
        records=body,
        record_count=len(values),
        last_offset_delta=len(values) - 1,
        base_timestamp=timestamp,
        max_timestamp=timestamp,
        attributes=0x10 if transactional else 0,
        producer_id=producer_id,
        producer_epoch=epoch,
        base_sequence=sequence,
    )


def build_broker(root: Path, **overrides: str) -> InProcessBroker:
    """A started single-node broker on `root` with the configuration `overrides`."""
    return InProcessBroker(root, **overrides)
