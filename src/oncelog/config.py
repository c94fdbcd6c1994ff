"""Broker and topic configuration with Kafka's names and defaults.

A `server.properties` file is read first; `--override key=value` flags (and the `--listen` /
`--data-dir` shortcuts) win over it. Every known key is checked at start-up against Kafka's
bounds (its ConfigDef validators), so a bad value stops the broker before it touches the disk
instead of failing every CreateTopics later. Unknown keys are kept, so a Kafka properties
file loads unchanged, and each is named in one warning, as Kafka does.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from enum import Enum
from pathlib import Path

from oncelog.errors import InvalidConfig

log = logging.getLogger(__name__)

LONG_MAX = 2**63 - 1
INT_MAX = 2**31 - 1
#: Segment size of the coordinators' internal topics (see offsets.topic.segment.bytes).
INTERNAL_SEGMENT_BYTES = 4 * 1024 * 1024
DOUBLE_MAX = 1.7976931348623157e308  # Java's Double.MAX_VALUE


class ConfigType(Enum):
    INT = "int"
    LONG = "long"
    DOUBLE = "double"
    BOOLEAN = "boolean"
    STRING = "string"
    LIST = "list"


@dataclass(frozen=True, slots=True)
class ConfigDef:
    """One configuration key: its type, Kafka default, (for broker keys) topic synonym and
    Kafka's validator: `at_least` / `at_most` (ConfigDef.Range.atLeast / between) or `one_of`
    (ValidString / ValidList.in), so a value Kafka refuses is refused here too."""

    name: str
    type: ConfigType
    default: str | None
    topic_name: str | None = None
    doc: str = ""
    at_least: int | float | None = None
    one_of: tuple[str, ...] | None = None
    at_most: int | float | None = None
    #: A value allowed outside [at_least, at_most] (gzip's level -1, "the codec's default").
    or_equal: int | None = None
    #: Kafka's special-purpose validators (throttled replica lists, metadata versions): return
    #: why the parsed value is refused, or None.
    check: Callable[[object], str | None] | None = None


def _defs(*items: ConfigDef) -> dict[str, ConfigDef]:
    return {d.name: d for d in items}


C = ConfigType
# Kafka's ValidString / ValidList choices (TopicConfig, BrokerCompressionType).
TIMESTAMP_TYPES = ("CreateTime", "LogAppendTime")
CLEANUP_POLICIES = ("compact", "delete")
COMPRESSION_TYPES = ("uncompressed", "zstd", "lz4", "snappy", "gzip", "producer")
_REPLICA_RE = re.compile(r"(?:[0-9]+:[0-9]+)?")


def _throttled_replicas(value: object) -> str | None:
    """Kafka's ThrottledReplicaListValidator: '*' or partitionId:brokerId pairs."""
    assert isinstance(value, list)
    if "".join(value) == "*" or all(_REPLICA_RE.fullmatch(item) for item in value):
        return None
    return (
        "must be the literal '*' or a list of replicas in the following format: "
        "[partitionId]:[brokerId],[partitionId]:[brokerId],..."
    )


#: Kafka's MetadataVersion values (server-common MetadataVersion.java, through 4.0): each
#: release and its internal versions ("0.10.0-IV1"); versions before 0.10.0 have none.
_RELEASE_IVS = (
    ("0.8.0", 0), ("0.8.1", 0), ("0.8.2", 0), ("0.9.0", 0), ("0.10.0", 2), ("0.10.1", 3),
    ("0.10.2", 1), ("0.11.0", 3), ("1.0", 1), ("1.1", 1), ("2.0", 2), ("2.1", 3), ("2.2", 2),
    ("2.3", 2), ("2.4", 2), ("2.5", 1), ("2.6", 1), ("2.7", 3), ("2.8", 2), ("3.0", 2),
    ("3.1", 1), ("3.2", 1), ("3.3", 4), ("3.4", 1), ("3.5", 3), ("3.6", 3), ("3.7", 5),
    ("3.8", 1), ("3.9", 1), ("4.0", 4),
)  # fmt: skip
#: The strings MetadataVersion.fromVersionString looks up: every release and every
#: release-IVn (Kafka's IBP_VERSIONS; all releases through 4.0 are production ones).
METADATA_VERSIONS = frozenset(
    [release for release, _ in _RELEASE_IVS]
    + [f"{release}-IV{i}" for release, count in _RELEASE_IVS for i in range(count)]
)


def metadata_version_key(text: str) -> str:
    """What Kafka's MetadataVersion.fromVersionString looks up for `text`: the first three
    dot-separated parts of a 0.x version, the first two of any other (so `0.10.0.0` is
    `0.10.0`, `0.11.0.2` is `0.11.0`, `2.8.1` is `2.8`); `0.10.0-IV1` stays as it is."""
    parts = text.split(".")
    wanted = 3 if text.startswith("0.") else 2
    return text if wanted >= len(parts) else ".".join(parts[:wanted])


def _metadata_version(value: object) -> str | None:
    """Kafka's MetadataVersionValidator (message.format.version, log.message.format.version,
    inter.broker.protocol.version): a version MetadataVersion knows, after its trimming. The
    value is deprecated and has no effect on v2 records (Kafka 3 ignores it too)."""
    if isinstance(value, str) and metadata_version_key(value) in METADATA_VERSIONS:
        return None
    return f"Version {value} is not a valid version"


#: The class names Kafka's `authorizer.class.name` takes for its ACL authorizer (KRaft and
#: ZooKeeper mode); both select oncelog's ACL authorizer (oncelog.security.authorizer).
ACL_AUTHORIZER_CLASSES = (
    "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
    "kafka.security.authorizer.AclAuthorizer",
)


def _authorizer_class(value: object) -> str | None:
    if value in ("", None) or value in ACL_AUTHORIZER_CLASSES:
        return None
    return "oncelog has only Kafka's ACL authorizer: " + " or ".join(ACL_AUTHORIZER_CLASSES)


SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
SASL_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")


def _protocol_map(value: object) -> str | None:
    """Kafka's listener.security.protocol.map: NAME:PROTOCOL pairs."""
    assert isinstance(value, str)
    for pair in value.split(","):
        name, sep, protocol = pair.strip().partition(":")
        if not sep or not name.strip() or protocol.strip() not in SECURITY_PROTOCOLS:
            return f"Map entry {pair.strip()!r} is not NAME:PROTOCOL with a protocol of " + (
                ", ".join(SECURITY_PROTOCOLS)
            )
    return None


def _pem_only(value: object) -> str | None:
    return None if value == "PEM" else "oncelog reads PEM key and trust stores only"


BROKER_CONFIGS: dict[str, ConfigDef] = _defs(
    ConfigDef("node.id", C.INT, "1", at_least=0, doc="Id of this broker."),
    ConfigDef("listeners", C.LIST, "PLAINTEXT://127.0.0.1:9092"),
    ConfigDef("advertised.listeners", C.LIST, None, doc="Defaults to listeners."),
    ConfigDef(
        "http.listeners",
        C.LIST,
        "",
        doc="oncelog: the HTTP listener (/metrics, the web console), http://HOST:PORT or "
        "https://HOST:PORT (listener.name.https.ssl.* or ssl.*); empty: off. Port 0 picks a "
        "free port, printed in the ready line.",
    ),
    ConfigDef("log.dirs", C.LIST, None, doc="Defaults to log.dir."),
    ConfigDef("log.dir", C.STRING, "./oncelog-data"),
    ConfigDef("num.partitions", C.INT, "1", at_least=1),
    ConfigDef("default.replication.factor", C.INT, "1"),
    ConfigDef("auto.create.topics.enable", C.BOOLEAN, "true"),
    ConfigDef("delete.topic.enable", C.BOOLEAN, "true"),
    ConfigDef("log.segment.bytes", C.INT, "1073741824", "segment.bytes", at_least=14),
    ConfigDef("log.roll.ms", C.LONG, None, "segment.ms", at_least=1),
    ConfigDef("log.roll.hours", C.INT, "168", at_least=1),
    ConfigDef("log.roll.jitter.ms", C.LONG, None, "segment.jitter.ms", at_least=0),
    ConfigDef("log.roll.jitter.hours", C.INT, "0", at_least=0),
    ConfigDef("log.retention.ms", C.LONG, None, "retention.ms"),
    ConfigDef("log.retention.minutes", C.INT, None),
    ConfigDef("log.retention.hours", C.INT, "168"),
    ConfigDef("log.retention.bytes", C.LONG, "-1", "retention.bytes"),
    ConfigDef("log.retention.check.interval.ms", C.LONG, "300000", at_least=1),
    ConfigDef("log.flush.interval.messages", C.LONG, str(LONG_MAX), "flush.messages", at_least=1),
    ConfigDef("log.flush.interval.ms", C.LONG, None, "flush.ms", at_least=0),
    ConfigDef("log.flush.scheduler.interval.ms", C.LONG, str(LONG_MAX)),
    ConfigDef(
        "log.flush.offset.checkpoint.interval.ms",
        C.INT,
        "60000",
        at_least=0,
        doc="The frequency with which we update the persistent record of the last flush which "
        "acts as the log recovery point. oncelog: each time, partitions with new data are "
        "fsynced and get a producer snapshot, so an unclean restart replays at most about this "
        "much producer state (storage README). 0: never.",
    ),
    ConfigDef("log.index.interval.bytes", C.INT, "4096", "index.interval.bytes", at_least=0),
    ConfigDef("log.index.size.max.bytes", C.INT, "10485760", "segment.index.bytes", at_least=4),
    ConfigDef("log.cleanup.policy", C.LIST, "delete", "cleanup.policy", one_of=CLEANUP_POLICIES),
    ConfigDef(
        "log.message.timestamp.type",
        C.STRING,
        "CreateTime",
        "message.timestamp.type",
        one_of=TIMESTAMP_TYPES,
    ),
    ConfigDef("log.segment.delete.delay.ms", C.LONG, "60000", "file.delete.delay.ms", at_least=0),
    ConfigDef("log.preallocate", C.BOOLEAN, "false", "preallocate"),
    ConfigDef(
        "log.message.format.version",
        C.STRING,
        "3.0-IV1",
        "message.format.version",
        check=_metadata_version,
    ),
    ConfigDef(
        "inter.broker.protocol.version",
        C.STRING,
        "3.9-IV0",
        check=_metadata_version,
        doc="Kafka's inter-broker protocol version; accepted (Kafka's versions, such as "
        "2.8.1 or 0.10.0-IV1) and ignored: oncelog brokers speak one protocol.",
    ),
    ConfigDef(
        "log.message.timestamp.difference.max.ms",
        C.LONG,
        str(LONG_MAX),
        "message.timestamp.difference.max.ms",
        at_least=0,
    ),
    ConfigDef(
        "log.message.timestamp.before.max.ms",
        C.LONG,
        str(LONG_MAX),
        "message.timestamp.before.max.ms",
        at_least=0,
    ),
    ConfigDef(
        "log.message.timestamp.after.max.ms",
        C.LONG,
        str(LONG_MAX),
        "message.timestamp.after.max.ms",
        at_least=0,
    ),
    ConfigDef(
        "log.message.downconversion.enable", C.BOOLEAN, "true", "message.downconversion.enable"
    ),
    ConfigDef("log.local.retention.ms", C.LONG, "-2", "local.retention.ms", at_least=-2),
    ConfigDef("log.local.retention.bytes", C.LONG, "-2", "local.retention.bytes", at_least=-2),
    ConfigDef(
        "unclean.leader.election.enable", C.BOOLEAN, "false", "unclean.leader.election.enable"
    ),
    ConfigDef("message.max.bytes", C.INT, "1048588", "max.message.bytes", at_least=0),
    ConfigDef("min.insync.replicas", C.INT, "1", "min.insync.replicas", at_least=1),
    ConfigDef(
        "compression.type", C.STRING, "producer", "compression.type", one_of=COMPRESSION_TYPES
    ),
    # Kafka's CompressionType level validators (KIP-390).
    ConfigDef(
        "compression.gzip.level",
        C.INT,
        "-1",
        "compression.gzip.level",
        at_least=1,
        at_most=9,
        or_equal=-1,
    ),
    ConfigDef("compression.lz4.level", C.INT, "9", "compression.lz4.level", at_least=1, at_most=17),
    ConfigDef(
        "compression.zstd.level",
        C.INT,
        "3",
        "compression.zstd.level",
        at_least=-131072,
        at_most=22,
    ),
    # Kafka's CleanerConfig keys; the topic synonyms are what a compacted topic overrides.
    ConfigDef("log.cleaner.enable", C.BOOLEAN, "true"),
    ConfigDef("log.cleaner.threads", C.INT, "1", at_least=0),
    ConfigDef("log.cleaner.backoff.ms", C.LONG, "15000", at_least=0),
    ConfigDef("log.cleaner.dedupe.buffer.size", C.LONG, "134217728"),
    ConfigDef("log.cleaner.io.buffer.size", C.INT, "524288", at_least=0),
    ConfigDef("log.cleaner.io.buffer.load.factor", C.DOUBLE, "0.9"),
    ConfigDef("log.cleaner.io.max.bytes.per.second", C.DOUBLE, "1.7976931348623157E308"),
    ConfigDef(
        "log.cleaner.min.cleanable.ratio",
        C.DOUBLE,
        "0.5",
        "min.cleanable.dirty.ratio",
        at_least=0,
        at_most=1,
    ),
    ConfigDef(
        "log.cleaner.delete.retention.ms", C.LONG, "86400000", "delete.retention.ms", at_least=0
    ),
    ConfigDef(
        "log.cleaner.min.compaction.lag.ms", C.LONG, "0", "min.compaction.lag.ms", at_least=0
    ),
    ConfigDef(
        "log.cleaner.max.compaction.lag.ms",
        C.LONG,
        str(LONG_MAX),
        "max.compaction.lag.ms",
        at_least=1,
    ),
    ConfigDef("socket.request.max.bytes", C.INT, "104857600", at_least=1),
    # Kafka's ConfigDef has no bound here, but Java's socket refuses a size of 0 or below
    # other than -1 (IllegalArgumentException), failing the listener or every connection.
    ConfigDef(
        "socket.send.buffer.bytes",
        C.INT,
        "-1",
        at_least=1,
        at_most=INT_MAX,
        or_equal=-1,
        doc="The SO_SNDBUF buffer of the socket server sockets. If the value is -1, the OS "
        "default will be used. Kafka: 102400. oncelog: -1, since a set size turns off the "
        "OS's autotuning: 102400 cost 30% of consume throughput with 1 MiB batches "
        "(bench/RESULTS.md 10.2).",
    ),
    ConfigDef(
        "socket.receive.buffer.bytes",
        C.INT,
        "-1",
        at_least=1,
        at_most=INT_MAX,
        or_equal=-1,
        doc="The SO_RCVBUF buffer of the socket server sockets. If the value is -1, the OS "
        "default will be used. Kafka: 102400. oncelog: -1, as socket.send.buffer.bytes: "
        "102400 cost 45% of produce throughput with 1 MiB batches (bench/RESULTS.md 10.2).",
    ),
    ConfigDef("queued.max.requests", C.INT, "500", at_least=1),
    ConfigDef("max.connections.per.ip", C.INT, str(INT_MAX), at_least=0),
    ConfigDef(
        "max.connections.per.ip.overrides",
        C.STRING,
        "",
        check=lambda text: _per_ip_overrides_error(str(text)),
    ),
    ConfigDef("max.connections", C.INT, str(INT_MAX), at_least=0),
    ConfigDef(
        "leader.replication.throttled.rate",
        C.LONG,
        str(LONG_MAX),
        at_least=0,
        doc="Bytes a second this broker sends, as leader, to the out-of-sync followers of "
        "the partitions its topics list in leader.replication.throttled.replicas.",
    ),
    ConfigDef(
        "follower.replication.throttled.rate",
        C.LONG,
        str(LONG_MAX),
        at_least=0,
        doc="Bytes a second this broker fetches, as an out-of-sync follower, for the "
        "partitions its topics list in follower.replication.throttled.replicas.",
    ),
    ConfigDef(
        "replication.quota.window.num",
        C.INT,
        "11",
        at_least=1,
        doc="The number of samples to retain in memory for replication quotas.",
    ),
    ConfigDef(
        "replication.quota.window.size.seconds",
        C.INT,
        "1",
        at_least=1,
        doc="The time span of each sample for replication quotas.",
    ),
    ConfigDef(
        "quota.window.num",
        C.INT,
        "11",
        at_least=1,
        doc="The number of samples to retain in memory for client quotas.",
    ),
    ConfigDef(
        "quota.window.size.seconds",
        C.INT,
        "1",
        at_least=1,
        doc="The time span of each sample for client quotas.",
    ),
    ConfigDef(
        "queued.max.request.bytes",
        C.LONG,
        "-1",
        doc="The number of queued bytes allowed before no more requests are read: one budget "
        "for the requests every connection has received and not yet handled (-1 or 0: no "
        "budget; each connection still stops reading at socket.request.max.bytes queued).",
    ),
    ConfigDef("num.network.threads", C.INT, "3", at_least=1),
    ConfigDef("num.io.threads", C.INT, "8", at_least=1),
    ConfigDef("fetch.max.bytes", C.INT, "57671680", at_least=1024),
    ConfigDef("replica.fetch.max.bytes", C.INT, "1048576", at_least=0),
    ConfigDef(
        "etcd.connect",
        C.STRING,
        None,
        doc="HOST:PORT[,HOST:PORT...][/prefix] of the etcd holding the cluster's metadata "
        "(modelled on zookeeper.connect; the prefix, default /oncelog, lets clusters share an "
        "etcd). Unset: a single broker with its metadata on its own disk.",
    ),
    ConfigDef("broker.session.timeout.ms", C.INT, "9000", at_least=1000),
    ConfigDef("broker.heartbeat.interval.ms", C.INT, "2000", at_least=1),
    ConfigDef("replica.lag.time.max.ms", C.LONG, "30000", at_least=1),
    ConfigDef("replica.fetch.wait.max.ms", C.INT, "500", at_least=0),
    ConfigDef("replica.fetch.min.bytes", C.INT, "1", at_least=1),
    ConfigDef("replica.fetch.response.max.bytes", C.INT, "10485760", at_least=0),
    ConfigDef("replica.fetch.backoff.ms", C.INT, "1000", at_least=0),
    ConfigDef("max.incremental.fetch.session.cache.slots", C.INT, "1000", at_least=0),
    ConfigDef("replica.socket.timeout.ms", C.INT, "30000"),
    ConfigDef(
        "replica.socket.receive.buffer.bytes",
        C.INT,
        "65536",
        at_least=1,
        at_most=INT_MAX,
        or_equal=-1,
        doc="The socket receive buffer for network requests to the leader for replicating "
        "data (-1: the OS default).",
    ),
    ConfigDef("replica.high.watermark.checkpoint.interval.ms", C.LONG, "5000", at_least=1),
    ConfigDef("auto.leader.rebalance.enable", C.BOOLEAN, "true"),
    ConfigDef("leader.imbalance.check.interval.seconds", C.LONG, "300", at_least=1),
    ConfigDef("leader.imbalance.per.broker.percentage", C.INT, "10", at_least=0),
    ConfigDef(
        "inter.broker.listener.name",
        C.STRING,
        None,
        doc="The listener other brokers connect to. Unset: the listener named by "
        "security.inter.broker.protocol (PLAINTEXT), else the first listener.",
    ),
    # Listeners' security (oncelog.server.listeners): Kafka's names; oncelog reads PEM only.
    ConfigDef(
        "listener.security.protocol.map",
        C.STRING,
        "PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_PLAINTEXT:SASL_PLAINTEXT,SASL_SSL:SASL_SSL",
        check=_protocol_map,
    ),
    ConfigDef(
        "security.inter.broker.protocol", C.STRING, "PLAINTEXT", one_of=SECURITY_PROTOCOLS
    ),
    ConfigDef(
        "sasl.enabled.mechanisms",
        C.LIST,
        "SCRAM-SHA-256,SCRAM-SHA-512",
        one_of=SASL_MECHANISMS,
        doc="Kafka: GSSAPI, which oncelog does not have; PLAIN needs a JAAS config with users.",
    ),
    ConfigDef(
        "sasl.mechanism.inter.broker.protocol",
        C.STRING,
        None,
        one_of=SASL_MECHANISMS,
        doc="Kafka: GSSAPI. Unset: the first of the inter-broker listener's mechanisms.",
    ),
    ConfigDef("sasl.jaas.config", C.STRING, None),
    ConfigDef("sasl.server.max.receive.size", C.INT, "524288", at_least=1),
    ConfigDef("connections.max.reauth.ms", C.LONG, "0", at_least=0),
    ConfigDef(
        "connection.failed.authentication.delay.ms",
        C.INT,
        "100",
        at_least=0,
        doc="Connection close delay on failed authentication: the client reads the error "
        "before the close, and a password guesser is slowed down.",
    ),
    ConfigDef("ssl.keystore.type", C.STRING, "PEM", check=_pem_only),
    ConfigDef("ssl.keystore.location", C.STRING, None),
    ConfigDef("ssl.keystore.key", C.STRING, None),
    ConfigDef("ssl.keystore.certificate.chain", C.STRING, None),
    ConfigDef("ssl.key.password", C.STRING, None),
    ConfigDef("ssl.truststore.type", C.STRING, "PEM", check=_pem_only),
    ConfigDef("ssl.truststore.location", C.STRING, None),
    ConfigDef("ssl.truststore.certificates", C.STRING, None),
    ConfigDef("ssl.client.auth", C.STRING, "none", one_of=("none", "requested", "required")),
    ConfigDef("ssl.endpoint.identification.algorithm", C.STRING, "https"),
    ConfigDef("group.initial.rebalance.delay.ms", C.INT, "3000"),
    ConfigDef("group.min.session.timeout.ms", C.INT, "6000"),
    ConfigDef("group.max.session.timeout.ms", C.INT, "1800000"),
    ConfigDef("offset.metadata.max.bytes", C.INT, "4096"),
    ConfigDef("producer.id.expiration.ms", C.INT, "86400000", at_least=1),
    ConfigDef("producer.id.expiration.check.interval.ms", C.INT, "600000", at_least=1),
    ConfigDef(
        "producer.state.max.entries",
        C.INT,
        "500000",
        at_least=1,
        doc="oncelog: cap on (partition, producer) entries; least recently used evicted.",
    ),
    ConfigDef("offsets.topic.num.partitions", C.INT, "50", at_least=1),
    ConfigDef("offsets.retention.minutes", C.INT, "10080", at_least=1),
    ConfigDef("offsets.retention.check.interval.ms", C.INT, "600000", at_least=1),
    ConfigDef(
        "offsets.topic.replication.factor",
        C.INT,
        "3",
        at_least=1,
        doc="Kafka's default; a single node keeps its internal topics on its one replica.",
    ),
    ConfigDef(
        "offsets.topic.segment.bytes",
        C.INT,
        str(INTERNAL_SEGMENT_BYTES),
        at_least=1,
        doc="Kafka: 104857600. oncelog: 4 MiB, since a start replays the never-cleaned active "
        "segment (storage README).",
    ),
    ConfigDef("transaction.state.log.num.partitions", C.INT, "50", at_least=1),
    ConfigDef(
        "transaction.state.log.replication.factor",
        C.INT,
        "3",
        at_least=1,
        doc="Kafka's default; a single node keeps its internal topics on its one replica.",
    ),
    ConfigDef("transaction.state.log.min.isr", C.INT, "2", at_least=1),
    ConfigDef(
        "transaction.state.log.segment.bytes",
        C.INT,
        str(INTERNAL_SEGMENT_BYTES),
        at_least=1,
        doc="Kafka: 104857600. oncelog: 4 MiB, as offsets.topic.segment.bytes.",
    ),
    ConfigDef("transaction.max.timeout.ms", C.INT, "900000", at_least=1),
    ConfigDef("transactional.id.expiration.ms", C.INT, "604800000", at_least=1),
    ConfigDef(
        "transaction.abort.timed.out.transaction.cleanup.interval.ms", C.INT, "10000", at_least=1
    ),
    ConfigDef(
        "authorizer.class.name",
        C.STRING,
        "",
        check=_authorizer_class,
        doc="Empty: no authorization. Kafka's StandardAuthorizer or AclAuthorizer: ACLs.",
    ),
    ConfigDef("super.users", C.STRING, "", doc="Principals allowed everything: User:a;User:b"),
    ConfigDef("allow.everyone.if.no.acl.found", C.BOOLEAN, "false"),
    ConfigDef(
        "oncelog.testing.offsets.retention.ms",
        C.INT,
        "-1",
        at_least=-1,
        doc=(
            "TESTING ONLY: when >= 0, the offset retention in milliseconds instead of "
            "offsets.retention.minutes, so tests need not wait a minute."
        ),
    ),
    ConfigDef(
        "oncelog.testing.crash.after.prepare",
        C.BOOLEAN,
        "false",
        doc=(
            "TEST FAULT INJECTION, never for production: the broker exits at once (status "
            "137, like SIGKILL) right after persisting a PrepareCommit/PrepareAbort record, "
            "before any marker is written, so crash tests reach that point deterministically."
        ),
    ),
)

# Kafka broker keys of its sample server.properties that mean nothing to one oncelog node
# (KRaft roles, inter-broker listeners, recovery threads): accepted, checked
# with Kafka's bounds and ignored, so that file loads without "isn't a known config" warnings.
KAFKA_UNUSED_CONFIGS: dict[str, ConfigDef] = _defs(
    ConfigDef("process.roles", C.LIST, "", one_of=("broker", "controller")),
    ConfigDef("controller.quorum.voters", C.LIST, ""),
    ConfigDef("controller.quorum.bootstrap.servers", C.LIST, ""),
    ConfigDef("controller.listener.names", C.STRING, None),
    ConfigDef("num.recovery.threads.per.data.dir", C.INT, "1", at_least=1),
    ConfigDef("share.coordinator.state.topic.replication.factor", C.INT, "3", at_least=1),
    ConfigDef("share.coordinator.state.topic.min.isr", C.INT, "2", at_least=1),
)

# Topic-level keys of Kafka's LogConfig without a broker-level synonym.
TOPIC_ONLY_CONFIGS: dict[str, ConfigDef] = _defs(
    ConfigDef("leader.replication.throttled.replicas", C.LIST, "", check=_throttled_replicas),
    ConfigDef("follower.replication.throttled.replicas", C.LIST, "", check=_throttled_replicas),
    ConfigDef("remote.storage.enable", C.BOOLEAN, "false"),
    ConfigDef("remote.log.copy.disable", C.BOOLEAN, "false"),
    ConfigDef("remote.log.delete.on.disable", C.BOOLEAN, "false"),
)

_BOOL = {"true": True, "false": False}
_TOPIC_NAME_RE = re.compile(r"^[a-zA-Z0-9._-]{1,249}$")
_INT_RE = re.compile(r"[+-]?[0-9]+")
# Java's Double.parseDouble for decimal text (with its optional d/f suffix); NaN and the
# infinities are refused, since no Kafka double key means anything with them.
_DOUBLE_RE = re.compile(r"[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?[dDfF]?")


ConfigValue = int | float | bool | str | list[str]


def parse_value(d: ConfigDef, raw: str) -> ConfigValue:
    """Parse one raw string value and apply the key's Kafka validator; raise InvalidConfig
    naming the key, the value and the bound (Kafka's ConfigException wording)."""
    text = raw.strip()
    try:
        if d.type in (ConfigType.INT, ConfigType.LONG):
            # Java's parseInt/parseLong: ASCII digits only (Python's int() also takes "1_000"
            # and non-ASCII digits, which Kafka rejects).
            if not _INT_RE.fullmatch(text):
                raise ValueError(text)
            value = int(text)
            limit = INT_MAX if d.type is ConfigType.INT else LONG_MAX
            if not -limit - 1 <= value <= limit:
                raise ValueError(text)
            if value != d.or_equal:
                _check_range(d, text, value)
            return value
        if d.type is ConfigType.DOUBLE:
            if not _DOUBLE_RE.fullmatch(text):
                raise ValueError(text)
            number = float(text.rstrip("dDfF"))
            if number in (float("inf"), float("-inf")):
                raise ValueError(text)
            _check_range(d, text, number)
            return number
        if d.type is ConfigType.BOOLEAN:
            return _BOOL[text.lower()]
    except (ValueError, KeyError) as exc:
        raise InvalidConfig(f"Invalid value {raw!r} for configuration {d.name}") from exc
    if d.type is ConfigType.LIST:
        items = [item.strip() for item in text.split(",") if item.strip()]
        for item in items:
            _check_choice(d, item)
        _check_custom(d, text, items)
        return items
    _check_choice(d, text)
    _check_custom(d, text, text)
    return text


def _check_custom(d: ConfigDef, text: str, value: object) -> None:
    why = d.check(value) if d.check is not None else None
    if why is not None:
        raise _invalid(d, text, why)


def _check_range(d: ConfigDef, text: str, value: float) -> None:
    """Kafka's Range validator (atLeast, or between when at_most is set too)."""
    if d.or_equal is not None and (value < (d.at_least or 0) or value > (d.at_most or 0)):
        raise _invalid(
            d,
            text,
            f"Value must be between {d.at_least} and {d.at_most} or equal to {d.or_equal}",
        )
    if d.at_least is not None and value < d.at_least:
        raise _invalid(d, text, f"Value must be at least {d.at_least}")
    if d.at_most is not None and value > d.at_most:
        raise _invalid(d, text, f"Value must be no more than {d.at_most}")


def _check_choice(d: ConfigDef, value: str) -> None:
    if d.one_of is not None and value not in d.one_of:
        raise _invalid(d, value, f"String must be one of: {', '.join(d.one_of)}")


def _invalid(d: ConfigDef, value: str, why: str) -> InvalidConfig:
    return InvalidConfig(f"Invalid value {value} for configuration {d.name}: {why}")


def read_properties(path: Path) -> dict[str, str]:
    """Read a Java-style properties file (key=value or key: value, # and ! comments)."""
    props: dict[str, str] = {}
    pending = ""
    # The trailing "" flushes a continuation left open on the last line (Java keeps it).
    for raw_line in [*path.read_text(encoding="utf-8").splitlines(), ""]:
        line = pending + raw_line.strip()
        pending = ""
        if not line or line[0] in "#!":
            continue
        if line.endswith("\\"):
            pending = line[:-1]
            continue
        match = re.match(r"([^=:\s]+)\s*[=:\s]\s*(.*)", line)
        if match:
            props[match.group(1)] = match.group(2)
        else:
            props[line] = ""
    return props


def _parse_per_ip_overrides(text: str) -> dict[str, int]:
    """`host:count,host:count` (Kafka's max.connections.per.ip.overrides); ValueError."""
    out: dict[str, int] = {}
    for item in text.split(","):
        if not item.strip():
            continue
        host, sep, count = item.strip().rpartition(":")
        if not sep or not host or not count.strip().isdigit():
            raise ValueError(f"{item.strip()!r} is not host:count")
        out[host.strip()] = int(count)
    return out


def _per_ip_overrides_error(text: str) -> str | None:
    try:
        _parse_per_ip_overrides(text)
    except ValueError as exc:
        return str(exc)
    return None


def _listener_key(key: str) -> str | None:
    """The key a `listener.name.<name>.<key>` override is of (None if it is none)."""
    if not key.startswith("listener.name."):
        return None
    rest = key[len("listener.name.") :].partition(".")[2]
    if rest.endswith("sasl.jaas.config"):
        return "sasl.jaas.config"
    return rest


#: The highest TCP port number (ports are 16 bits).
MAX_PORT = 65535


def parse_port(text: str, where: str, lowest: int = 0) -> int:
    """The port number `text` (ASCII digits) in the address `where`: every port any setting or
    option names (listeners, advertised.listeners, http.listeners, etcd.connect, --listen,
    --bootstrap-server) is read here, so a port outside 0-65535 is refused the same way
    everywhere, instead of being wrapped round by the socket layer (99999 -> 34463).

    Raises InvalidConfig (one line naming the port and the address)."""
    if not text.isascii() or not text.isdigit():
        raise InvalidConfig(f"port {text!r} is not a number in {where}")
    port = int(text)
    if not lowest <= port <= MAX_PORT:
        raise InvalidConfig(f"port {port} is out of range {lowest}-{MAX_PORT} in {where}")
    return port


def split_host_port(entry: str) -> tuple[str, str] | None:
    """`HOST:PORT` or `[IPv6]:PORT` as (host, port text); None when `entry` names no port
    (a bare host, or a bare IPv6 address, which librdkafka takes with its default port)."""
    if entry.startswith("["):
        host, sep, rest = entry[1:].partition("]")
        if not sep or not rest.startswith(":"):
            return None
        return host, rest[1:]
    host, sep, port = entry.rpartition(":")
    if not sep or ":" in host:
        return None
    return host, port


def check_bootstrap(servers: str, option: str = "--bootstrap-server") -> str:
    """`HOST:PORT[,HOST:PORT...]` as a client takes it: every port given must be a number in
    1-65535 (port 0 reaches nothing). Returns `servers`; raises InvalidConfig."""
    for entry in (e.strip() for e in servers.split(",")):
        parts = split_host_port(entry)
        if parts is not None:
            parse_port(parts[1], f"{option} {servers}", lowest=1)
    return servers


@dataclass(frozen=True, slots=True)
class Listener:
    name: str
    host: str
    port: int

    @classmethod
    def parse(cls, spec: str, key: str = "listeners") -> Listener:
        match = re.fullmatch(r"(?:([A-Za-z_][A-Za-z0-9_]*)://)?\[?([^\]]*?)\]?:(\d+)", spec.strip())
        if not match:
            raise InvalidConfig(f"Invalid listener {spec!r}: expected NAME://HOST:PORT")
        name = match.group(1) or "PLAINTEXT"
        port = parse_port(match.group(3), f"{key}={spec.strip()}")
        return cls(name.upper(), match.group(2) or "0.0.0.0", port)


@dataclass(frozen=True)
class BrokerConfig:
    """Typed broker configuration; `raw` keeps every key as given for DescribeConfigs."""

    raw: Mapping[str, str] = field(default_factory=dict)
    #: name -> (raw text, parsed value) of scalar settings already read: the hot paths read
    #: some on every request (fetch.max.bytes on a consumer's fetch), and parsing checks
    #: the text and its bounds each time.
    _parsed: dict[str, tuple[str, ConfigValue]] = field(
        default_factory=dict, init=False, repr=False, compare=False
    )

    def __post_init__(self) -> None:
        """Check every known key now, so a bad value stops the broker before it starts."""
        for key, value in self.raw.items():
            d = BROKER_CONFIGS.get(key) or KAFKA_UNUSED_CONFIGS.get(key)
            if d is not None:
                parse_value(d, value)
        self.listener  # noqa: B018 - validate eagerly
        self.listeners  # noqa: B018
        advertised = self.get("advertised.listeners")
        for spec in advertised if isinstance(advertised, list) else []:
            Listener.parse(spec, "advertised.listeners")
        for key, value in self.raw.items():
            d = BROKER_CONFIGS.get(_listener_key(key) or "")
            if d is not None:
                parse_value(d, value)
        self._retention_ms()
        self.queued_max_request_bytes  # noqa: B018 - validate eagerly
        self.max_connections_per_ip_overrides  # noqa: B018
        _check_log_config(LogConfig.from_topic_configs(self.topic_defaults()))

    def unknown_keys(self) -> list[str]:
        """Keys neither oncelog nor the Kafka keys it ignores know: most likely typos."""
        return [
            k
            for k in self.raw
            if k not in BROKER_CONFIGS
            and k not in KAFKA_UNUSED_CONFIGS
            and _listener_key(k) not in BROKER_CONFIGS
        ]

    def warn_unknown(self) -> None:
        """One warning per unknown key, in Kafka's words (AbstractConfig.logUnused)."""
        for key in self.unknown_keys():
            log.warning("The configuration '%s' was supplied but isn't a known config.", key)

    def get(self, name: str) -> ConfigValue | None:
        d = BROKER_CONFIGS[name]
        raw = self.raw.get(name, d.default)
        if raw is None:
            return None
        cached = self._parsed.get(name)
        if cached is not None and cached[0] == raw:
            return cached[1]
        value = parse_value(d, raw)
        if not isinstance(value, list):  # a list is the caller's to change
            self._parsed[name] = (raw, value)
        return value

    def get_int(self, name: str) -> int:
        value = self.get(name)
        assert isinstance(value, int)
        return value

    def is_set(self, name: str) -> bool:
        return name in self.raw

    @property
    def node_id(self) -> int:
        return self.get_int("node.id")

    @property
    def listener(self) -> Listener:
        listeners = self.get("listeners")
        assert isinstance(listeners, list)
        if not listeners:
            raise InvalidConfig("listeners must name at least one listener")
        return Listener.parse(listeners[0])

    @property
    def listeners(self) -> list[Listener]:
        """Every entry of `listeners` (each served); names and ports must differ."""
        specs = self.get("listeners")
        assert isinstance(specs, list)
        if not specs:
            raise InvalidConfig("listeners must name at least one listener")
        # Kafka's controller listeners (KRaft) are not served: oncelog has no controller quorum
        controllers = self.raw.get("controller.listener.names", "").upper().split(",")
        out = [
            item
            for item in (Listener.parse(spec) for spec in specs)
            if item.name not in controllers
        ]
        if not out:
            raise InvalidConfig("listeners must name at least one broker listener")
        names = [item.name for item in out]
        if len(set(names)) != len(names):
            raise InvalidConfig(f"Each listener must have a different name, listeners: {specs}")
        ports = [item.port for item in out if item.port != 0]
        if len(set(ports)) != len(ports):
            raise InvalidConfig(f"Each listener must have a different port, listeners: {specs}")
        for item in out:
            self.security_protocol(item.name)
        return out

    def security_protocol(self, listener_name: str) -> str:
        """The listener's protocol by `listener.security.protocol.map`."""
        text = self.get("listener.security.protocol.map")
        assert isinstance(text, str)
        for pair in text.split(","):
            name, _, protocol = pair.strip().partition(":")
            if name.strip().upper() == listener_name.upper():
                return protocol.strip()
        raise InvalidConfig(
            f"No security protocol defined for listener {listener_name} "
            f"(listener.security.protocol.map={text})"
        )

    def advertised_for(self, listener_name: str) -> Listener | None:
        """The `advertised.listeners` entry of that listener name, if any."""
        advertised = self.get("advertised.listeners")
        if not advertised:
            return None
        assert isinstance(advertised, list)
        for spec in advertised:
            item = Listener.parse(spec, "advertised.listeners")
            if item.name == listener_name:
                return item
        return None

    def listener_setting(self, listener_name: str, key: str) -> ConfigValue | None:
        """`listener.name.<listener>.<key>` if set (Kafka's per-listener override), else
        `key`, parsed with the key's definition."""
        prefixed = f"listener.name.{listener_name.lower()}.{key}"
        if prefixed in self.raw:
            return parse_value(BROKER_CONFIGS[key], self.raw[prefixed])
        return self.get(key)

    def jaas_config(self, listener_name: str, mechanism: str) -> str | None:
        """`listener.name.<l>.<mechanism>.sasl.jaas.config`, else `sasl.jaas.config`."""
        prefixed = f"listener.name.{listener_name.lower()}.{mechanism.lower()}.sasl.jaas.config"
        if prefixed in self.raw:
            return self.raw[prefixed]
        value = self.get("sasl.jaas.config")
        return value if isinstance(value, str) else None

    @property
    def inter_broker_listener_name(self) -> str:
        """`inter.broker.listener.name`, else the listener named as
        `security.inter.broker.protocol` (Kafka's rule), else the first listener."""
        names = [item.name for item in self.listeners]
        wanted = self.get("inter.broker.listener.name")
        if wanted:
            assert isinstance(wanted, str)
            if self.is_set("security.inter.broker.protocol"):
                raise InvalidConfig(
                    "Only one of inter.broker.listener.name and security.inter.broker.protocol "
                    "should be set."
                )
            if wanted.upper() not in names:
                raise InvalidConfig(
                    f"inter.broker.listener.name={wanted} names no listener of this broker "
                    f"(its listeners: {','.join(names)})"
                )
            return wanted.upper()
        protocol = self.get("security.inter.broker.protocol")
        assert isinstance(protocol, str)
        if protocol in names:
            return protocol
        if self.is_set("security.inter.broker.protocol"):
            raise InvalidConfig(
                f"security.inter.broker.protocol={protocol} names no listener of "
                f"{','.join(names)}"
            )
        return names[0]

    @property
    def advertised_listener(self) -> Listener | None:
        advertised = self.get("advertised.listeners")
        if not advertised:
            return None
        assert isinstance(advertised, list)
        return Listener.parse(advertised[0], "advertised.listeners")

    @property
    def log_dirs(self) -> list[Path]:
        dirs = self.get("log.dirs")
        if dirs:
            assert isinstance(dirs, list)
            return [Path(d) for d in dirs]
        log_dir = self.get("log.dir")
        assert isinstance(log_dir, str)
        return [Path(log_dir)]

    @property
    def num_partitions(self) -> int:
        return self.get_int("num.partitions")

    @property
    def auto_create_topics(self) -> bool:
        return bool(self.get("auto.create.topics.enable"))

    @property
    def socket_request_max_bytes(self) -> int:
        return self.get_int("socket.request.max.bytes")

    @property
    def queued_max_requests(self) -> int:
        return self.get_int("queued.max.requests")

    @property
    def max_connections_per_ip_overrides(self) -> dict[str, int]:
        """Per address (or host name) limits. Kafka allows a per-address default of 0 only
        with overrides (some addresses must be able to connect)."""
        text = self.get("max.connections.per.ip.overrides")
        overrides = _parse_per_ip_overrides(str(text or ""))
        if self.get_int("max.connections.per.ip") == 0 and not overrides:
            raise InvalidConfig(
                "max.connections.per.ip can be set to zero only if "
                "max.connections.per.ip.overrides property is set."
            )
        return overrides

    @property
    def queued_max_request_bytes(self) -> int | None:
        """The broker's budget for received, unhandled request bytes; None: unlimited.
        Kafka refuses a budget below socket.request.max.bytes (one request must fit)."""
        value = self.get_int("queued.max.request.bytes")
        if value <= 0:
            return None
        if value < self.socket_request_max_bytes:
            raise InvalidConfig(
                "queued.max.request.bytes must be larger or equal to socket.request.max.bytes"
            )
        return value

    @property
    def retention_check_interval_ms(self) -> int:
        return self.get_int("log.retention.check.interval.ms")

    @property
    def flush_scheduler_interval_ms(self) -> int:
        return self.get_int("log.flush.scheduler.interval.ms")

    @property
    def flush_offset_checkpoint_interval_ms(self) -> int:
        return self.get_int("log.flush.offset.checkpoint.interval.ms")

    def topic_defaults(self) -> dict[str, str]:
        """The topic-level defaults this broker gives (topic key -> raw value)."""
        out: dict[str, str] = {}
        for d in BROKER_CONFIGS.values():
            if d.topic_name is not None:
                value = self.raw.get(d.name, d.default)
                if value is not None:
                    out[d.topic_name] = value
        out["segment.ms"] = str(self._roll_ms())
        out["segment.jitter.ms"] = str(self._roll_jitter_ms())
        out["retention.ms"] = str(self._retention_ms())
        if "flush.ms" not in out:
            out["flush.ms"] = str(LONG_MAX)
        for d in TOPIC_ONLY_CONFIGS.values():
            assert d.default is not None
            out[d.name] = d.default
        return out

    def _roll_jitter_ms(self) -> int:
        if self.is_set("log.roll.jitter.ms"):
            return self.get_int("log.roll.jitter.ms")
        return self.get_int("log.roll.jitter.hours") * 3_600_000

    def _roll_ms(self) -> int:
        if self.is_set("log.roll.ms"):
            return self.get_int("log.roll.ms")
        return self.get_int("log.roll.hours") * 3_600_000

    def _retention_ms(self) -> int:
        """Kafka's precedence ms > minutes > hours; any negative value means unlimited, -1
        (not e.g. -60000 for minutes=-1); 0 is refused, as KafkaConfig.validateValues does."""
        if self.is_set("log.retention.ms"):
            key, ms = "log.retention.ms", self.get_int("log.retention.ms")
        elif self.is_set("log.retention.minutes"):
            key, ms = "log.retention.minutes", self.get_int("log.retention.minutes") * 60_000
        else:
            key, ms = "log.retention.hours", self.get_int("log.retention.hours") * 3_600_000
        if ms == 0:
            raise _invalid(
                BROKER_CONFIGS[key], "0", "Value must be unlimited (-1) or at least 1 ms"
            )
        return -1 if ms < 0 else ms

    @classmethod
    def load(
        cls, properties_file: Path | None = None, overrides: Iterable[tuple[str, str]] = ()
    ) -> BrokerConfig:
        raw: dict[str, str] = {}
        if properties_file is not None:
            raw.update(read_properties(properties_file))
        raw.update(dict(overrides))
        return cls(raw)


# Topic keys with the bounds of Kafka's LogConfig; a broker key's synonym keeps its bound
# (the broker bound is never looser, so broker defaults always make a valid topic config).
TOPIC_CONFIG_DEFS: dict[str, ConfigDef] = {
    **{
        d.topic_name: replace(d, name=d.topic_name, topic_name=None)
        for d in BROKER_CONFIGS.values()
        if d.topic_name is not None
    },
    "segment.ms": ConfigDef("segment.ms", C.LONG, None, at_least=1),
    "retention.ms": ConfigDef("retention.ms", C.LONG, None, at_least=-1),
    "flush.ms": ConfigDef("flush.ms", C.LONG, None, at_least=0),
    "segment.jitter.ms": ConfigDef("segment.jitter.ms", C.LONG, None, at_least=0),
    **TOPIC_ONLY_CONFIGS,
}


@dataclass(frozen=True, slots=True)
class LogConfig:
    """The configuration one partition log runs with (topic overrides over broker defaults)."""

    segment_bytes: int = 1073741824
    segment_ms: int = 7 * 24 * 3_600_000
    retention_ms: int = 7 * 24 * 3_600_000
    retention_bytes: int = -1
    max_message_bytes: int = 1048588
    flush_messages: int = LONG_MAX
    flush_ms: int = LONG_MAX
    index_interval_bytes: int = 4096
    segment_index_bytes: int = 10485760
    message_timestamp_type: str = "CreateTime"
    min_insync_replicas: int = 1
    cleanup_policy: tuple[str, ...] = ("delete",)
    file_delete_delay_ms: int = 60000
    min_cleanable_dirty_ratio: float = 0.5
    min_compaction_lag_ms: int = 0
    max_compaction_lag_ms: int = LONG_MAX
    delete_retention_ms: int = 86_400_000
    #: True when the cleaner keeps the latest record per key (cleanup.policy has compact);
    #: such a topic also refuses records without a key. A field set from cleanup_policy, not
    #: a property: every Produce asks.
    compact: bool = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "compact", "compact" in self.cleanup_policy)

    @classmethod
    def from_topic_configs(cls, configs: Mapping[str, str]) -> LogConfig:
        parsed: dict[str, object] = {}
        for key, raw in configs.items():
            d = TOPIC_CONFIG_DEFS.get(key)
            if d is not None:
                parsed[key] = parse_value(d, raw)
        policy = parsed.get("cleanup.policy", ["delete"])
        assert isinstance(policy, list)
        ts_type = str(parsed.get("message.timestamp.type", "CreateTime"))
        ratio = parsed.get("min.cleanable.dirty.ratio", 0.5)
        assert isinstance(ratio, float | int) and not isinstance(ratio, bool)

        base = cls()

        def num(key: str) -> int:
            value = parsed.get(key, getattr(base, key.replace(".", "_")))
            assert isinstance(value, int)
            return value

        config = cls(
            segment_bytes=num("segment.bytes"),
            segment_ms=num("segment.ms"),
            retention_ms=num("retention.ms"),
            retention_bytes=num("retention.bytes"),
            max_message_bytes=num("max.message.bytes"),
            flush_messages=num("flush.messages"),
            flush_ms=num("flush.ms"),
            index_interval_bytes=num("index.interval.bytes"),
            segment_index_bytes=num("segment.index.bytes"),
            message_timestamp_type=ts_type,
            min_insync_replicas=num("min.insync.replicas"),
            cleanup_policy=tuple(policy),
            file_delete_delay_ms=num("file.delete.delay.ms"),
            min_cleanable_dirty_ratio=float(ratio),
            min_compaction_lag_ms=num("min.compaction.lag.ms"),
            max_compaction_lag_ms=num("max.compaction.lag.ms"),
            delete_retention_ms=num("delete.retention.ms"),
        )
        return config


def validate_topic_configs(
    configs: Mapping[str, str | None], defaults: Mapping[str, str] | None = None
) -> dict[str, str]:
    """Check topic-level overrides as CreateTopics/AlterConfigs get them; drop nulls.

    `defaults`: the broker's topic defaults, which Kafka's cross-key rules see under the
    overrides (a broker max.compaction.lag.ms bounds a topic's min.compaction.lag.ms).
    """
    out: dict[str, str] = {}
    for key, value in configs.items():
        if value is None:
            continue
        d = TOPIC_CONFIG_DEFS.get(key)
        if d is None:
            raise InvalidConfig(f"Unknown topic config name: {key}")
        parse_value(d, value)
        out[key] = value
    config = LogConfig.from_topic_configs({**(defaults or {}), **out})
    _check_log_config(config)
    if parse_value(
        TOPIC_CONFIG_DEFS["remote.storage.enable"], out.get("remote.storage.enable", "false")
    ):
        # Kafka with remote.log.storage.system.enable=false, which oncelog always is.
        raise InvalidConfig(
            "Tiered Storage functionality is disabled in the broker. "
            "Topic cannot be configured with remote log storage."
        )
    return out


def _check_log_config(config: LogConfig) -> None:
    """Kafka's LogConfig.validateValues: the rules across keys."""
    if config.min_compaction_lag_ms > config.max_compaction_lag_ms:
        raise InvalidConfig(
            f"conflict topic config setting min.compaction.lag.ms ({config.min_compaction_lag_ms})"
            f" > max.compaction.lag.ms ({config.max_compaction_lag_ms})"
        )


def validate_topic_name(name: str) -> None:
    from oncelog.errors import InvalidTopic

    if name in (".", "..") or not _TOPIC_NAME_RE.match(name):
        raise InvalidTopic(
            f"Topic name {name!r} is illegal: it must be 1-249 characters of [a-zA-Z0-9._-]"
        )
