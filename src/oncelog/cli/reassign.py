"""`oncelog reassign-partitions`: move partitions between brokers, as
`kafka-reassign-partitions.sh` does, with its JSON files and its messages.

`--generate` proposes an assignment of some topics over a broker list (Kafka's round robin),
`--execute` starts the moves of a reassignment file after printing the current assignment
to roll back to, `--verify` says of each partition whether its move is complete, `--cancel`
takes moves back to their original replicas and `--list` shows the moves in progress. Moves
go through AlterPartitionReassignments (KIP-455); the brokers copy the data while producers
and consumers go on, and the controller switches each partition once its new replicas are in
sync.

`--execute --throttle RATE` limits the copy to RATE bytes/s, as Kafka's tool does (KIP-73, in
`reassign_throttles.py`): it sets the two replication rates on the brokers of the moves and
the throttled replica lists on their topics before starting them; `--execute --additional
--throttle RATE` with the moves in progress changes the rate. `--verify`, once no move is left
in the cluster, and `--cancel` remove those configs again, unless `--preserve-throttles`.
Moves between a broker's log dirs (and so `--replica-alter-log-dirs-throttle`) are not offered.
"""

from __future__ import annotations

import argparse
import json
import random
import re
from pathlib import Path
from typing import Any

from oncelog.cli import reassign_throttles as throttles
from oncelog.cli.console import add_bootstrap, coded, exits_quietly, fail
from oncelog.client import reassignments
from oncelog.client.admin import Admin
from oncelog.client.connection import ClientError
from oncelog.errors import ErrorCode, KafkaError
from oncelog.metadata.placement import assign_replicas
from oncelog.types import TopicPartition

DESCRIPTION = """\
Move partitions to other brokers (like kafka-reassign-partitions.sh).

examples:
  oncelog reassign-partitions --generate --topics-to-move-json-file topics.json --broker-list 1,2,3
  oncelog reassign-partitions --execute --reassignment-json-file plan.json --throttle 50000000
  oncelog reassign-partitions --verify --reassignment-json-file plan.json
  oncelog reassign-partitions --list

plan.json: {"version":1,"partitions":[{"topic":"t","partition":0,"replicas":[2,3]}]}
topics.json: {"version":1,"topics":[{"topic":"t"}]}
"""

Plan = dict[TopicPartition, list[int]]

CANNOT_EXECUTE = (
    "Cannot execute because there is an existing partition assignment.  Use --additional to "
    "override this and create a new partition assignment in addition to the existing one. The "
    "--additional flag can also be used to change the throttle by resubmitting the current "
    "reassignment."
)
#: The options each action takes besides the files and --bootstrap-server (Kafka's
#: permittedArgs); anything else is refused as Kafka's tool refuses it.
_PERMITTED = {
    "execute": {"additional", "throttle", "timeout"},
    "verify": {"preserve_throttles"},
    "cancel": {"preserve_throttles", "timeout"},
    "generate": set(),
    "list": set(),
}
_LONG = re.compile(r"[+-]?[0-9]+")


class _BadInput(ValueError):
    """A file or argument that cannot be used: one line, exit 2."""


def add_parsers(sub: Any) -> None:
    p = sub.add_parser(
        "reassign-partitions",
        help="move partitions between brokers (like kafka-reassign-partitions)",
        description=DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_bootstrap(p)
    actions = p.add_mutually_exclusive_group(required=True)
    for name, what in (
        ("generate", "propose an assignment of --topics-to-move-json-file over --broker-list"),
        ("execute", "start the moves of --reassignment-json-file"),
        ("verify", "whether the moves of --reassignment-json-file are complete"),
        ("cancel", "take the moves of --reassignment-json-file back"),
        ("list", "the moves in progress"),
    ):
        actions.add_argument(f"--{name}", action="store_true", help=what)
    p.add_argument("--reassignment-json-file", metavar="FILE", help="the moves, as Kafka's JSON")
    p.add_argument("--topics-to-move-json-file", metavar="FILE", help="with --generate")
    p.add_argument("--broker-list", metavar="1,2,3", help="with --generate: the brokers to use")
    p.add_argument(
        "--additional",
        action="store_true",
        help="with --execute: start these moves although others are in progress; with "
        "--throttle, resubmitting the moves in progress changes their throttle",
    )
    p.add_argument(
        "--throttle",
        metavar="RATE",
        help="with --execute: limit the copy between brokers to RATE bytes/s (the replication "
        "throttles of the brokers and topics involved; --verify removes them once done)",
    )
    p.add_argument(
        "--preserve-throttles",
        action="store_true",
        help="with --verify or --cancel: leave the throttles of the brokers and topics alone",
    )
    p.add_argument("--timeout", type=int, default=30_000, metavar="MS", help="request timeout (ms)")
    p.set_defaults(func=run)


@exits_quietly
def run(args: argparse.Namespace) -> int:
    try:
        _check_options(args)
        rate = _throttle(args.throttle)
        plan = _read_plan(args) if not (args.list or args.generate) else {}
        topics = _read_topics(args) if args.generate else []
    except _BadInput as exc:
        return fail(str(exc), 2)
    try:
        with Admin(args.bootstrap_server) as admin:
            if args.list:
                return _list(admin)
            if args.generate:
                return _generate(admin, topics, args.broker_list)
            if args.verify:
                return _verify(admin, plan, args.preserve_throttles)
            if args.cancel:
                return _cancel(admin, plan, args.timeout, args.preserve_throttles)
            return _execute(admin, plan, args.additional, rate, args.timeout)
    except _BadInput as exc:
        return fail(str(exc), 2)
    except (ClientError, OSError) as exc:
        return fail(str(exc))


# -- the actions -------------------------------------------------------------------------------


def _execute(admin: Admin, plan: Plan, additional: bool, rate: int | None, timeout_ms: int) -> int:
    """Kafka's executeAssignment: with a throttle, the throttles are in place before the
    moves start."""
    current = _assignment(admin, {tp.topic for tp in plan})
    missing = [tp for tp in plan if tp not in current]
    if missing:
        return fail(
            coded(
                ErrorCode.unknown_topic_or_partition,
                f"Topic partitions not found: {_names(missing)}",
            )
        )
    ongoing = reassignments.ongoing(admin)
    if not additional and ongoing:
        return fail(CANNOT_EXECUTE)
    unknown = sorted({b for replicas in plan.values() for b in replicas} - set(admin.node_ids()))
    if unknown:
        return fail(f"Unknown broker id {unknown[0]}")
    print("Current partition replica assignment\n")
    print(_plan_json({tp: current[tp] for tp in sorted(plan)}))
    print("\nSave this to use as the --reassignment-json-file option during rollback")
    if rate is not None:
        print(throttles.VERIFY_WARNING)
        throttles.set_throttles(admin, throttles.move_map(ongoing, plan, current), rate)
    errors = {
        tp: e
        for tp, e in reassignments.alter(admin, dict(plan), timeout_ms).items()
        if e is not None
    }
    if errors:
        lines = "\n".join(f"{tp.topic}-{tp.partition}: {e}" for tp, e in sorted(errors.items()))
        return fail(f"Error reassigning partition(s):\n{lines}")
    print(f"Successfully started partition reassignment{_plural(plan)} for {_names(plan)}")
    return 0


def _verify(admin: Admin, plan: Plan, preserve_throttles: bool) -> int:
    """Kafka's verifyAssignment: once no move is left in the whole cluster, the throttles
    are removed from every broker and from the file's topics."""
    everywhere = reassignments.ongoing(admin)
    moving = {tp: m for tp, m in everywhere.items() if tp in plan}
    current = _assignment(admin, {tp.topic for tp in plan})
    print("Status of partition reassignment:")
    for tp, target in sorted(plan.items()):
        name = f"{tp.topic}-{tp.partition}"
        if tp in moving:
            print(f"Reassignment of partition {name} is still in progress.")
        elif current.get(tp) == target:
            print(f"Reassignment of partition {name} is completed.")
        else:
            now = ",".join(map(str, current.get(tp, [])))
            print(
                f"There is no active reassignment of partition {name}, but replica set is "
                f"{now} rather than {','.join(map(str, target))}."
            )
    if not everywhere and not preserve_throttles:
        throttles.clear_throttles(admin, _existing_topics(plan, current))
    return 0


def _cancel(admin: Admin, plan: Plan, timeout_ms: int, preserve_throttles: bool) -> int:
    """As Kafka's tool: only the partitions of the file that are moving are cancelled, then
    the throttles are removed (unless --preserve-throttles). With nothing to cancel, the
    throttles are removed (and the removal reported) only if some are set."""
    active = sorted(reassignments.ongoing(admin, list(plan)))
    if active:
        outcome = reassignments.alter(admin, dict.fromkeys(active), timeout_ms)
        errors = {tp: e for tp, e in outcome.items() if e is not None}
        if errors:
            lines = "\n".join(f"{tp.topic}-{tp.partition}: {e}" for tp, e in sorted(errors.items()))
            return fail(f"Error cancelling partition reassignment{_plural(errors)} for:\n{lines}")
        print(
            f"Successfully cancelled partition reassignment{_plural(active)} for: {_names(active)}"
        )
    else:
        print("None of the specified partition reassignments are active.")
    if not preserve_throttles:
        topics = _existing_topics(plan, _assignment(admin, {tp.topic for tp in plan}))
        if active or throttles.throttles_set(admin, topics):
            throttles.clear_throttles(admin, topics)
    return 0


def _list(admin: Admin) -> int:
    moving = reassignments.ongoing(admin)
    if not moving:
        print("No partition reassignments found.")
        return 0
    print("Current partition reassignments:")
    for tp, move in sorted(moving.items()):
        line = f"{tp.topic}-{tp.partition}: replicas: {','.join(map(str, move.replicas))}."
        if move.adding:
            line += f" adding: {','.join(map(str, move.adding))}."
        if move.removing:
            line += f" removing: {','.join(map(str, move.removing))}."
        print(line)
    return 0


def _generate(admin: Admin, topics: list[str], broker_list: str | None) -> int:
    brokers = _broker_list(broker_list)
    current = _assignment(admin, set(topics))
    missing = sorted(set(topics) - {tp.topic for tp in current})
    if missing:
        return fail(
            coded(ErrorCode.unknown_topic_or_partition, f"Topic(s) not found: {', '.join(missing)}")
        )
    proposed: Plan = {}
    for topic in topics:
        parts = sorted(tp for tp in current if tp.topic == topic)
        rf = len(current[parts[0]])
        try:
            placed = assign_replicas(
                brokers,
                len(parts),
                rf,
                start_index=random.randrange(len(brokers)),
                next_replica_shift=random.randrange(len(brokers)),
            )
        except KafkaError as exc:
            return fail(coded(exc.code, f"{topic}: {exc}"))
        proposed.update({tp: list(r) for tp, r in zip(parts, placed, strict=True)})
    print("Current partition replica assignment")
    print(_plan_json({tp: current[tp] for tp in sorted(proposed)}))
    print("\nProposed partition reassignment configuration")
    print(_plan_json(proposed))
    return 0


# -- files and metadata --------------------------------------------------------------------------


def _check_options(args: argparse.Namespace) -> None:
    """Kafka's permittedArgs: an option its action does not take is refused."""
    action = next(a for a in _PERMITTED if getattr(args, a))
    given = {
        "additional": args.additional,
        "throttle": args.throttle is not None,
        "preserve_throttles": args.preserve_throttles,
    }
    for option, present in given.items():
        if present and option not in _PERMITTED[action]:
            name = option.replace("_", "-")
            raise _BadInput(f'Option "[{name}]" can\'t be used with action "[{action}]"')


def _throttle(text: str | None) -> int | None:
    """--throttle as Kafka reads it (a long; a negative rate means no throttle)."""
    if text is None:
        return None
    if not _LONG.fullmatch(text.strip()) or not -(2**63) <= int(text) < 2**63:
        raise _BadInput(f"--throttle must be a rate in bytes/s (an integer), not {text!r}")
    rate = int(text)
    return rate if rate >= 0 else None


def _read_plan(args: argparse.Namespace) -> Plan:
    if not args.reassignment_json_file:
        raise _BadInput("--reassignment-json-file is required with --execute, --verify, --cancel")
    data = _read_json(args.reassignment_json_file)
    entries = data.get("partitions") if isinstance(data, dict) else None
    if not isinstance(entries, list) or not entries:
        raise _BadInput(f'{args.reassignment_json_file}: no "partitions" to reassign')
    plan: Plan = {}
    for entry in entries:
        if not isinstance(entry, dict):
            raise _BadInput(f"{args.reassignment_json_file}: a partition is not an object")
        topic, partition, replicas = (entry.get(k) for k in ("topic", "partition", "replicas"))
        if (
            not isinstance(topic, str)
            or not _is_int(partition)
            or not isinstance(replicas, list)
            or not all(_is_int(r) for r in replicas)
        ):
            raise _BadInput(
                f'{args.reassignment_json_file}: each partition needs "topic", "partition" '
                f'and "replicas" (broker ids): {json.dumps(entry)}'
            )
        dirs = entry.get("log_dirs", [])
        if not isinstance(dirs, list) or any(d != "any" for d in dirs):
            raise _BadInput(
                f'{args.reassignment_json_file}: {topic}-{partition}: only "any" log dirs; '
                "moves between a broker's log dirs are not supported"
            )
        assert isinstance(partition, int)  # checked above
        tp = TopicPartition(topic, partition)
        if tp in plan:
            raise _BadInput(f"{args.reassignment_json_file}: {topic}-{partition} is listed twice")
        plan[tp] = [int(r) for r in replicas]
    return plan


def _read_topics(args: argparse.Namespace) -> list[str]:
    if not args.topics_to_move_json_file or not args.broker_list:
        raise _BadInput("--generate needs --topics-to-move-json-file and --broker-list")
    data = _read_json(args.topics_to_move_json_file)
    entries = data.get("topics") if isinstance(data, dict) else None
    if not isinstance(entries, list) or not all(
        isinstance(e, dict) and isinstance(e.get("topic"), str) for e in entries
    ):
        raise _BadInput(
            f'{args.topics_to_move_json_file}: expected {{"topics": [{{"topic": ...}}]}}'
        )
    _broker_list(args.broker_list)
    return list(dict.fromkeys(e["topic"] for e in entries))


def _read_json(path: str) -> Any:
    try:
        return json.loads(Path(path).read_text())
    except OSError as exc:
        raise _BadInput(f"cannot read {path}: {exc.strerror or exc}") from None
    except (UnicodeDecodeError, ValueError) as exc:
        raise _BadInput(f"{path} is not JSON: {exc}") from None


def _broker_list(text: str | None) -> list[int]:
    try:
        brokers = sorted({int(b) for b in (text or "").split(",") if b.strip()})
    except ValueError:
        raise _BadInput(f"--broker-list must be broker ids like 1,2,3, not {text!r}") from None
    if not brokers:
        raise _BadInput("--broker-list names no broker")
    return brokers


def _assignment(admin: Admin, topics: set[str]) -> Plan:
    """Each partition's replicas now, from Metadata."""
    metadata = admin.refresh_metadata(sorted(topics))
    return {
        TopicPartition(t.name, p.partition_index): [int(r) for r in p.replica_nodes]
        for t in metadata.topics
        if t.error_code == 0
        for p in t.partitions
    }


def _existing_topics(plan: Plan, current: Plan) -> list[str]:
    """The file's topics that exist (a deleted one has no configs to clear)."""
    return sorted({tp.topic for tp in plan} & {tp.topic for tp in current})


def _plan_json(plan: Plan) -> str:
    return json.dumps(
        {
            "version": 1,
            "partitions": [
                {
                    "topic": tp.topic,
                    "partition": tp.partition,
                    "replicas": replicas,
                    "log_dirs": ["any"] * len(replicas),
                }
                for tp, replicas in sorted(plan.items())
            ],
        },
        separators=(",", ":"),
    )


def _plural(items: Any) -> str:
    return "" if len(items) == 1 else "s"


def _names(tps: Any) -> str:
    return ",".join(f"{tp.topic}-{tp.partition}" for tp in sorted(tps))


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)
