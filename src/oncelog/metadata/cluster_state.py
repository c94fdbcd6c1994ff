"""The replicated cluster's metadata as it is kept in etcd: one small JSON value per key.

Like Kafka's ZooKeeper mode, every fact has its own key so that each can be changed on its
own by compare-and-swap and watched: broker registrations live under their broker's lease
(they vanish when it dies), partition states change only by CAS on their mod_revision. Every
value carries `"version": 1` so that a later layout can be read beside this one, and a value
that does not decode raises one `ClusterStateError` naming the key's kind, never a KeyError.

Keys here are relative to the cluster's prefix; the IO adapter adds it.
"""

from __future__ import annotations

import base64
import json
import re
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from enum import Enum
from types import MappingProxyType
from typing import Any, NamedTuple, TypeVar

VERSION = 1
NO_LEADER = -1
PRODUCER_IDS_KEY = "producer_ids"
CONTROLLER_KEY = "controller"
_TOPIC_NAME = re.compile(r"[A-Za-z0-9._-]{1,249}")
_INT = re.compile(r"0|[1-9][0-9]*")
_ACL_ID = re.compile(r"[0-9a-f]{32}")
_SCRAM_USER = re.compile(r"[A-Za-z0-9_-]+")
_SCRAM_MECHANISM = re.compile(r"SCRAM-SHA-(?:256|512)")
_CONFIG_ENTITY = re.compile(r"default|0|[1-9][0-9]*")
_BASE64URL = re.compile(r"[A-Za-z0-9_-]+")

T = TypeVar("T")


class ClusterStateError(ValueError):
    """A stored value or key that does not decode: one line saying which and why."""


# -- decoding helpers: strict types, so a wrong value never slips in as a bool or float --------


def load_object(data: bytes, what: str) -> dict[str, Any]:
    """The JSON object of a stored value, checked to be of our version."""
    try:
        obj = json.loads(data)
    except (UnicodeDecodeError, ValueError) as exc:
        raise ClusterStateError(f"{what}: not JSON ({exc})") from None
    if not isinstance(obj, dict):
        raise ClusterStateError(f"{what}: not a JSON object")
    if obj.get("version") != VERSION:
        raise ClusterStateError(f"{what}: unsupported version {obj.get('version')!r}")
    return obj


def typed_field(obj: dict[str, Any], key: str, kind: type[T], what: str) -> T:
    """`obj[key]`, which must be a `kind`; `what` names the value in the error."""
    if key not in obj:
        raise ClusterStateError(f"{what}: missing {key!r}")
    value = obj[key]
    # bool is an int in Python: refuse it where an int is meant, and the other way round.
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise ClusterStateError(f"{what}: {key!r} is not a {kind.__name__}: {value!r}")
    return value


def _ints(value: object, key: str, what: str) -> tuple[int, ...]:
    if not isinstance(value, list) or not all(
        isinstance(v, int) and not isinstance(v, bool) for v in value
    ):
        raise ClusterStateError(f"{what}: {key!r} is not a list of integers: {value!r}")
    return tuple(value)


def dump_object(obj: dict[str, Any]) -> bytes:
    """A stored value: compact JSON with our version."""
    return json.dumps({"version": VERSION, **obj}, separators=(",", ":")).encode()


def _decoded(what: str, build: Callable[..., T], *args: Any) -> T:
    """Build a value from decoded fields; its own checks become ClusterStateError."""
    try:
        return build(*args)
    except ClusterStateError as exc:
        raise ClusterStateError(f"{what}: {exc}") from None


# -- the values ---------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class BrokerRegistration:
    """`brokers/<node_id>`, written under the broker's lease: present means alive."""

    node_id: int
    host: str
    port: int
    rack: str | None = None
    #: Every listener's (name, host, port); host/port is the inter-broker listener's. Absent
    #: in registrations of older brokers, which had one listener.
    endpoints: tuple[tuple[str, str, int], ...] = ()

    def to_bytes(self) -> bytes:
        obj: dict[str, Any] = {
            "node_id": self.node_id, "host": self.host, "port": self.port, "rack": self.rack
        }
        if self.endpoints:
            obj["endpoints"] = [
                {"name": name, "host": host, "port": port} for name, host, port in self.endpoints
            ]
        return dump_object(obj)

    def endpoint(self, listener: str) -> tuple[str, int] | None:
        """Its endpoint on `listener` (see oncelog.broker.context.listener_endpoint)."""
        if not self.endpoints or not listener:
            return self.host, self.port
        for name, host, port in self.endpoints:
            if name == listener:
                return host, port
        return None

    @classmethod
    def from_bytes(cls, data: bytes) -> BrokerRegistration:
        what = "broker registration"
        obj = load_object(data, what)
        rack = obj.get("rack")
        if rack is not None and not isinstance(rack, str):
            raise ClusterStateError(f"{what}: 'rack' is not a str: {rack!r}")
        endpoints = []
        raw_endpoints = obj.get("endpoints", [])
        if not isinstance(raw_endpoints, list):
            raise ClusterStateError(f"{what}: 'endpoints' is not a list: {raw_endpoints!r}")
        for item in raw_endpoints:
            if not isinstance(item, dict):
                raise ClusterStateError(f"{what}: endpoint is not an object: {item!r}")
            endpoints.append(
                (
                    typed_field(item, "name", str, what),
                    typed_field(item, "host", str, what),
                    typed_field(item, "port", int, what),
                )
            )
        return cls(
            typed_field(obj, "node_id", int, what),
            typed_field(obj, "host", str, what),
            typed_field(obj, "port", int, what),
            rack,
            tuple(endpoints),
        )


@dataclass(frozen=True, slots=True)
class ControllerInfo:
    """`controller`, under the controller's lease; its create_revision is the epoch."""

    node_id: int

    def to_bytes(self) -> bytes:
        return dump_object({"node_id": self.node_id})

    @classmethod
    def from_bytes(cls, data: bytes) -> ControllerInfo:
        return cls(typed_field(load_object(data, "controller"), "node_id", int, "controller"))


@dataclass(frozen=True, slots=True)
class Reassignment:
    """A partition moving from `original` to `target` replicas (KIP-455). Meanwhile the
    partition's replicas are both sets, target first; `adding` ones catch up as followers,
    and once all of `target` is in the ISR the controller cuts the replicas to `target`."""

    target: tuple[int, ...]
    original: tuple[int, ...]

    @property
    def adding(self) -> tuple[int, ...]:
        return tuple(r for r in self.target if r not in self.original)

    def removing(self, replicas: tuple[int, ...]) -> tuple[int, ...]:
        """Of the partition's replicas now, those the move takes away: the original ones
        not in the target, and those an earlier target added that this one does not keep."""
        return tuple(r for r in replicas if r not in self.target)


@dataclass(frozen=True, slots=True)
class TopicAssignment:
    """`topics/<name>`: the replicas of each partition (preferred leader first) and configs.

    Written once by CreateTopics and rewritten by CreatePartitions and partition
    reassignments (`reassignments`: partition -> its move in progress); the controller
    derives every partition state from it.
    """

    name: str
    topic_id: uuid.UUID
    replicas: tuple[tuple[int, ...], ...]
    configs: Mapping[str, str]
    internal: bool = False
    reassignments: Mapping[int, Reassignment] = field(default_factory=dict)

    def __post_init__(self) -> None:
        replicas = tuple(tuple(r) for r in self.replicas)
        for p, r in enumerate(replicas):
            if not r or len(set(r)) != len(r):
                raise ClusterStateError(f"topic {self.name}: bad replicas of partition {p}: {r}")
        for p, move in self.reassignments.items():
            if not 0 <= p < len(replicas):
                raise ClusterStateError(f"topic {self.name}: reassignment of no partition {p}")
            if not move.target or len(set(move.target)) != len(move.target):
                raise ClusterStateError(f"topic {self.name}: bad target of partition {p}")
            if not set(move.target) | set(move.original) <= set(replicas[p]):
                raise ClusterStateError(
                    f"topic {self.name}: partition {p} moves outside its replicas {replicas[p]}"
                )
        object.__setattr__(self, "replicas", replicas)
        object.__setattr__(self, "configs", MappingProxyType(dict(self.configs)))
        object.__setattr__(self, "reassignments", MappingProxyType(dict(self.reassignments)))

    @property
    def partitions(self) -> int:
        return len(self.replicas)

    def to_bytes(self) -> bytes:
        obj: dict[str, Any] = {
            "name": self.name,
            "topic_id": str(self.topic_id),
            "replicas": [list(r) for r in self.replicas],
            "configs": dict(self.configs),
            "internal": self.internal,
        }
        if self.reassignments:
            obj["reassignments"] = {
                str(p): {"target": list(m.target), "original": list(m.original)}
                for p, m in sorted(self.reassignments.items())
            }
        return dump_object(obj)

    @classmethod
    def from_bytes(cls, data: bytes) -> TopicAssignment:
        what = "topic assignment"
        obj = load_object(data, what)
        raw_id = typed_field(obj, "topic_id", str, what)
        try:
            topic_id = uuid.UUID(raw_id)
        except ValueError:
            raise ClusterStateError(f"{what}: bad topic_id {raw_id!r}") from None
        raw = typed_field(obj, "replicas", list, what)
        replicas = tuple(_ints(r, "replicas", what) for r in raw)
        configs = typed_field(obj, "configs", dict, what)
        if not all(isinstance(k, str) and isinstance(v, str) for k, v in configs.items()):
            raise ClusterStateError(f"{what}: 'configs' is not a map of strings")
        moves = obj.get("reassignments", {})
        if not isinstance(moves, dict):
            raise ClusterStateError(f"{what}: 'reassignments' is not an object")
        reassignments = {}
        for p, move in moves.items():
            if not isinstance(p, str) or not _INT.fullmatch(p) or not isinstance(move, dict):
                raise ClusterStateError(f"{what}: bad reassignment {p!r}: {move!r}")
            reassignments[int(p)] = Reassignment(
                _ints(typed_field(move, "target", list, what), "target", what),
                _ints(typed_field(move, "original", list, what), "original", what),
            )
        return _decoded(
            what,
            cls,
            typed_field(obj, "name", str, what),
            topic_id,
            replicas,
            configs,
            typed_field(obj, "internal", bool, what),
            reassignments,
        )


@dataclass(frozen=True, slots=True)
class PartitionState:
    """`partitions/<topic>/<partition>`: leader and ISR, changed only by CAS.

    `leader_epoch` fences old leaders (bumped on every leader change, to -1 included);
    `partition_epoch` orders every change. `leader_recovery` is KIP-704's RECOVERING: set by
    an unclean election until the leader has recovered its log, the ISR cannot grow.
    """

    leader: int
    leader_epoch: int
    isr: tuple[int, ...]
    partition_epoch: int
    leader_recovery: bool = False

    def __post_init__(self) -> None:
        isr = tuple(self.isr)
        object.__setattr__(self, "isr", isr)
        if not isr or len(set(isr)) != len(isr):
            raise ClusterStateError(f"ISR must be non-empty and without duplicates: {isr}")
        if self.leader != NO_LEADER and self.leader not in isr:
            raise ClusterStateError(f"leader {self.leader} is not in the ISR {isr}")
        if self.leader_epoch < 0 or self.partition_epoch < 0:
            raise ClusterStateError("epochs must not be negative")

    @property
    def has_leader(self) -> bool:
        return self.leader != NO_LEADER

    def to_bytes(self) -> bytes:
        return dump_object(
            {
                "leader": self.leader,
                "leader_epoch": self.leader_epoch,
                "isr": list(self.isr),
                "partition_epoch": self.partition_epoch,
                "leader_recovery": self.leader_recovery,
            }
        )

    @classmethod
    def from_bytes(cls, data: bytes) -> PartitionState:
        what = "partition state"
        obj = load_object(data, what)
        recovery = obj.get("leader_recovery", False)
        if not isinstance(recovery, bool):
            raise ClusterStateError(f"{what}: 'leader_recovery' is not a bool: {recovery!r}")
        return _decoded(
            what,
            cls,
            typed_field(obj, "leader", int, what),
            typed_field(obj, "leader_epoch", int, what),
            _ints(typed_field(obj, "isr", list, what), "isr", what),
            typed_field(obj, "partition_epoch", int, what),
            recovery,
        )


# -- keys --------------------------------------------------------------------------------------


class KeyKind(Enum):
    BROKER = "brokers"
    CONTROLLER = "controller"
    TOPIC = "topics"
    PARTITION = "partitions"
    PRODUCER_IDS = "producer_ids"
    ACL = "acls"
    SCRAM = "scram"
    BROKER_CONFIGS = "broker_configs"
    CLIENT_QUOTAS = "client_quotas"


class ParsedKey(NamedTuple):
    """What `parse_key` found: the kind and the key's parts after the kind, as text."""

    kind: KeyKind
    parts: tuple[str, ...]

    @property
    def node_id(self) -> int:
        assert self.kind is KeyKind.BROKER
        return int(self.parts[0])

    @property
    def topic(self) -> str:
        assert self.kind in (KeyKind.TOPIC, KeyKind.PARTITION)
        return self.parts[0]

    @property
    def partition(self) -> int:
        assert self.kind is KeyKind.PARTITION
        return int(self.parts[1])


def _check_topic(name: str) -> str:
    if not _TOPIC_NAME.fullmatch(name):
        raise ClusterStateError(f"not a legal topic name: {name!r}")
    return name


def key_for_broker(node_id: int) -> str:
    return f"brokers/{node_id}"


def key_for_controller() -> str:
    return CONTROLLER_KEY


def key_for_topic(name: str) -> str:
    return f"topics/{_check_topic(name)}"


def key_for_partition(topic: str, partition: int) -> str:
    return f"partitions/{_check_topic(topic)}/{partition}"


def prefix_for_partitions(topic: str) -> str:
    """Every partition key of one topic starts with this (to delete them with the topic)."""
    return f"partitions/{_check_topic(topic)}/"


def key_for_scram(user: str, mechanism: str) -> str:
    """`scram/<user as unpadded url-safe base64>/<mechanism>`: any user name fits a key."""
    encoded = base64.urlsafe_b64encode(user.encode()).decode().rstrip("=")
    if not _SCRAM_MECHANISM.fullmatch(mechanism):
        raise ClusterStateError(f"not a SCRAM mechanism: {mechanism!r}")
    return f"scram/{encoded or '-'}/{mechanism}"


def key_for_acl(acl_id: str) -> str:
    """One ACL binding per key, named by its digest (oncelog.security.acl.AclBinding.key)."""
    if not _ACL_ID.fullmatch(acl_id):
        raise ClusterStateError(f"not an ACL id: {acl_id!r}")
    return f"acls/{acl_id}"


def key_for_broker_configs(entity: str) -> str:
    """`broker_configs/<id>` or `broker_configs/default` (entity ""): dynamic broker configs."""
    return f"broker_configs/{entity or 'default'}"


def broker_configs_to_bytes(configs: Mapping[str, str]) -> bytes:
    return dump_object({"configs": dict(configs)})


def broker_configs_from_bytes(data: bytes) -> dict[str, str]:
    what = "broker configs"
    configs = typed_field(load_object(data, what), "configs", dict, what)
    if not all(isinstance(k, str) and isinstance(v, str) for k, v in configs.items()):
        raise ClusterStateError(f"{what}: 'configs' is not a map of strings")
    return dict(configs)


def key_for_client_quota(entity_key: str) -> str:
    """`client_quotas/<entity as unpadded url-safe base64>`: one client quota entity's values
    (the entity is oncelog.broker.quotas.entity_key's text, any name fits)."""
    encoded = base64.urlsafe_b64encode(entity_key.encode()).decode().rstrip("=")
    return f"client_quotas/{encoded}"


def key_for_producer_ids() -> str:
    return PRODUCER_IDS_KEY


def parse_key(key: str | bytes) -> ParsedKey:
    """Which value a (prefix-less) key holds; ClusterStateError for anything else."""
    text = key.decode("utf-8", "replace") if isinstance(key, bytes) else key
    head, *rest = text.split("/")
    shapes = {
        "brokers": (1, (_INT,)),
        "controller": (0, ()),
        "topics": (1, (_TOPIC_NAME,)),
        "partitions": (2, (_TOPIC_NAME, _INT)),
        "producer_ids": (0, ()),
        "acls": (1, (_ACL_ID,)),
        "scram": (2, (_SCRAM_USER, _SCRAM_MECHANISM)),
        "broker_configs": (1, (_CONFIG_ENTITY,)),
        "client_quotas": (1, (_BASE64URL,)),
    }
    shape = shapes.get(head)
    if shape is None or len(rest) != shape[0] or not _all_match(shape[1], rest):
        raise ClusterStateError(f"not a cluster metadata key: {text!r}")
    return ParsedKey(KeyKind(head), tuple(rest))


def _all_match(patterns: Iterable[re.Pattern[str]], parts: list[str]) -> bool:
    return all(p.fullmatch(s) for p, s in zip(patterns, parts, strict=True))
