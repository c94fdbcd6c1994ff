"""`oncelog log-dirs --describe`: every broker's log dirs and the replicas in them, like Kafka's
`kafka-log-dirs.sh --describe`.

Prints `Querying brokers for log directories information`, `Received log directory
information from brokers 1,2`, then Kafka's JSON on one line: `{"brokers": [{"broker": 1,
"logDirs": [{"partitions": [{"partition": "t-0", "size": 123, "offsetLag": 0, "isFuture":
false}], "error": null, "logDir": "/data"}]}], "version": 1}` (keys in the order Kafka's tool
prints them; brokers, log dirs and partitions sorted). `error` is the Java exception Kafka
names for the dir's error code (KafkaStorageException for an offline dir), null for none.
`--broker-list 1,2` asks only those brokers (all by default; one the cluster does not have is
an error), `--topic-list a,b` shows only those topics' replicas. The brokers come from
DescribeCluster (confluent-kafka's AdminClient); DescribeLogDirs, which librdkafka does not
offer, goes through `oncelog.client`.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from oncelog.cli.command_config import (
    AdminSession,
    LoginFailed,
    UsageError,
    add_command_config,
    protocol_security,
    settings,
)
from oncelog.cli.console import add_bootstrap, describe_error, exits_quietly, fail
from oncelog.client.admin import Admin, LogDirDescription
from oncelog.client.connection import ClientError
from oncelog.errors import error_name

TIMEOUT_S = 10.0

#: The exceptions Kafka's tool names for the error codes a log dir can have.
JAVA_ERRORS = {
    56: "org.apache.kafka.common.errors.KafkaStorageException",
    -1: "org.apache.kafka.common.errors.UnknownServerException",
}


def add_parsers(sub: Any) -> None:
    p = sub.add_parser(
        "log-dirs",
        help="log directories of brokers and their replicas' sizes (kafka-log-dirs.sh)",
        description="Query the log directories of brokers, like Kafka's kafka-log-dirs.sh.",
    )
    p.add_argument(
        "--describe",
        action="store_true",
        required=True,
        help="describe the log directories on the brokers (the only action, required)",
    )
    add_bootstrap(p)
    p.add_argument(
        "--broker-list",
        default="",
        metavar="IDS",
        help='the brokers to query, "1,2,3" (default: every broker of the cluster)',
    )
    p.add_argument(
        "--topic-list",
        default="",
        metavar="TOPICS",
        help='only the replicas of these topics, "topic1,topic2" (default: all topics)',
    )
    add_command_config(p)
    p.set_defaults(func=run)


def _ids(text: str) -> set[int]:
    try:
        return {int(part) for part in text.split(",") if part}
    except ValueError:
        raise UsageError(f"--broker-list expects broker ids such as 1,2,3, not: {text}") from None


@exits_quietly
def run(args: argparse.Namespace) -> int:
    from confluent_kafka import KafkaException

    try:
        wanted = _ids(args.broker_list)
        topics = {t for t in args.topic_list.split(",") if t}
        config = settings(args)
        sasl, tls = protocol_security(config)
        session = AdminSession(config)
    except UsageError as exc:
        return fail(str(exc), 2)
    try:
        future = session.admin.describe_cluster(request_timeout=TIMEOUT_S)
        cluster = session.result(future, TIMEOUT_S)
    except LoginFailed as exc:
        return fail(str(exc))
    except (KafkaException, TimeoutError) as exc:
        return fail(
            describe_error(exc)
            or f"no broker of {args.bootstrap_server} answered within {TIMEOUT_S:g} s"
        )
    existing = {node.id for node in cluster.nodes}
    missing = wanted - existing
    if missing:
        return fail(
            f"The given brokers do not exist from --broker-list: {_joined(missing)}. "
            f"Current existent brokers: {_joined(existing)}"
        )
    brokers = sorted(wanted or existing)
    print("Querying brokers for log directories information")
    try:
        with Admin(args.bootstrap_server, timeout=TIMEOUT_S, sasl=sasl, tls=tls) as client:
            described = {b: client.broker_log_dirs(b) for b in brokers}
    except (ClientError, OSError) as exc:
        return fail(str(exc))
    print(f"Received log directory information from brokers {_joined(set(brokers))}")
    print(json.dumps(as_json(described, topics), separators=(",", ":")))
    return 0


def _joined(ids: set[int]) -> str:
    return ",".join(str(i) for i in sorted(ids))


def as_json(described: dict[int, list[LogDirDescription]], topics: set[str]) -> dict[str, Any]:
    """Kafka's document, with its keys in the order Kafka's tool prints them (the iteration
    order of its Java HashMaps)."""
    return {
        "brokers": [
            {
                "broker": broker,
                "logDirs": [
                    {
                        "partitions": [
                            {
                                "partition": f"{r.tp.topic}-{r.tp.partition}",
                                "size": r.size,
                                "offsetLag": r.offset_lag,
                                "isFuture": r.is_future,
                            }
                            for r in sorted(log_dir.replicas, key=lambda r: (r.tp, r.is_future))
                            if not topics or r.tp.topic in topics
                        ],
                        "error": _error(log_dir.error_code),
                        "logDir": log_dir.log_dir,
                    }
                    for log_dir in sorted(described[broker], key=lambda d: d.log_dir)
                ],
            }
            for broker in sorted(described)
        ],
        "version": 1,
    }


def _error(code: int) -> str | None:
    if code == 0:
        return None
    return JAVA_ERRORS.get(code, error_name(code))
