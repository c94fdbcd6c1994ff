"""`oncelog delete-records`: move partitions' log start offsets forward, like Kafka's
`kafka-delete-records.sh`.

`--offset-json-file` is Kafka's file: `{"partitions": [{"topic": "t", "partition": 0,
"offset": 3}], "version": 1}` (version 1 is the only one, and the default); offset -1 means
the partition's high watermark. The records below each offset become unreadable and whole
segments below it are deleted. Prints Kafka's lines: `Executing records delete operation`,
`Records delete operation completed:`, then per partition `partition: t-0\tlow_watermark: 3`
or `partition: t-0\terror: ...` (sorted by topic and partition; exit 1 if any failed). A file
that cannot be read or is not such JSON is one `Error:` line, exit 2. DeleteRecords through
confluent-kafka's AdminClient.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from oncelog.cli.command_config import AdminSession, UsageError, add_command_config, settings
from oncelog.cli.console import add_bootstrap, describe_error, exits_quietly, fail

TIMEOUT_S = 30.0
INT32 = (-(2**31), 2**31 - 1)
INT64 = (-(2**63), 2**63 - 1)
EXAMPLE = '{"partitions": [{"topic": "foo", "partition": 1, "offset": 1}], "version": 1}'


def add_parsers(sub: Any) -> None:
    p = sub.add_parser(
        "delete-records",
        help="delete records below offsets (kafka-delete-records.sh)",
        description="Delete the records of partitions below the given offsets, like Kafka's "
        "kafka-delete-records.sh.",
    )
    add_bootstrap(p)
    p.add_argument(
        "--offset-json-file",
        required=True,
        metavar="FILE",
        help=f"the offset per partition, as JSON: {EXAMPLE} (offset -1: the high watermark)",
    )
    add_command_config(p)
    p.set_defaults(func=run)


def _integer(entry: dict[str, Any], index: int, name: str, bounds: tuple[int, int]) -> int:
    value = entry.get(name)
    if name not in entry:
        raise UsageError(f"partitions[{index}]: missing field `{name}`")
    if isinstance(value, bool) or not isinstance(value, int):
        raise UsageError(f"partitions[{index}]: `{name}` must be an integer, not {value!r}")
    if not bounds[0] <= value <= bounds[1]:
        raise UsageError(f"partitions[{index}]: `{name}` is out of range: {value}")
    return value


def parse_offsets(text: str) -> dict[tuple[str, int], int]:
    """Kafka's offset JSON as {(topic, partition): offset}; UsageError for anything else,
    duplicates included."""
    try:
        document = json.loads(text)
    except ValueError as exc:  # JSONDecodeError, or a number too long to convert
        raise UsageError(f"The input string is not a valid JSON: {exc}") from None
    if not isinstance(document, dict):
        raise UsageError(f"The offset JSON must be an object, e.g. {EXAMPLE}")
    version = document.get("version", 1)
    if isinstance(version, bool) or not isinstance(version, int) or version != 1:
        raise UsageError(f"Not supported version field value {json.dumps(version)}")
    if "partitions" not in document:
        raise UsageError("Missing partitions field")
    entries = document["partitions"]
    if not isinstance(entries, list):
        raise UsageError("The partitions field must be a list")
    out: dict[tuple[str, int], int] = {}
    duplicates: list[str] = []
    for index, entry in enumerate(entries):
        if not isinstance(entry, dict):
            raise UsageError(f"partitions[{index}] must be an object, e.g. {EXAMPLE}")
        topic = entry.get("topic")
        if not isinstance(topic, str):
            what = "missing field `topic`" if topic is None else "`topic` must be a string"
            raise UsageError(f"partitions[{index}]: {what}")
        partition = _integer(entry, index, "partition", INT32)
        offset = _integer(entry, index, "offset", INT64)
        if (topic, partition) in out and f"{topic}-{partition}" not in duplicates:
            duplicates.append(f"{topic}-{partition}")
        out[(topic, partition)] = offset
    if duplicates:
        raise UsageError(
            f"Offset json file contains duplicate topic partitions: {','.join(duplicates)}"
        )
    return out


@exits_quietly
def run(args: argparse.Namespace) -> int:
    from confluent_kafka import TopicPartition

    try:
        try:
            with open(args.offset_json_file, encoding="utf-8") as f:
                text = f.read()
        except OSError as exc:
            raise UsageError(f"cannot read --offset-json-file: {exc.strerror or exc}") from None
        except UnicodeDecodeError:
            raise UsageError("The input string is not a valid JSON: not UTF-8 text") from None
        offsets = parse_offsets(text)
        session = AdminSession(settings(args))
    except UsageError as exc:
        return fail(str(exc), 2)
    print("Executing records delete operation")
    wanted = [TopicPartition(t, p, offset) for (t, p), offset in sorted(offsets.items())]
    futures = (
        session.admin.delete_records(wanted, request_timeout=TIMEOUT_S, operation_timeout=TIMEOUT_S)
        if wanted
        else {}
    )
    print("Records delete operation completed:")
    status = 0
    for tp, future in sorted(futures.items(), key=lambda kv: (kv[0].topic, kv[0].partition)):
        name = f"{tp.topic}-{tp.partition}"
        try:
            low_watermark = session.result(future, TIMEOUT_S).low_watermark
        except Exception as exc:  # KafkaException, LoginFailed, or no answer in time
            print(f"partition: {name}\terror: {describe_error(exc) or 'no answer in time'}")
            status = 1
        else:
            print(f"partition: {name}\tlow_watermark: {low_watermark}")
    return status
