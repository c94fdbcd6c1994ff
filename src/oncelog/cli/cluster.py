"""`oncelog cluster describe | elect-leaders`: the cluster as a whole.

`describe` prints the cluster id, the controller, the live brokers and the partitions that
need attention (under-replicated: ISR smaller than the replicas; offline: no live leader),
each like a line of `kafka-topics.sh --describe`. `elect-leaders` is
`kafka-leader-election.sh`: a preferred or unclean election for some partitions or all, with
that tool's messages. Both use confluent-kafka's AdminClient (DescribeCluster, Metadata,
ElectLeaders), so they work against Apache Kafka too; an unreachable cluster is one `Error:`
line, never a traceback.
"""

from __future__ import annotations

import argparse
from typing import Any

from oncelog.cli.console import add_bootstrap, coded, describe_error, exits_quietly, fail
from oncelog.cli.topics import admin_client, partition_line
from oncelog.errors import ErrorCode

TIMEOUT_S = 10.0


def add_parsers(sub: Any) -> None:
    cluster = sub.add_parser("cluster", help="describe the cluster, elect leaders")
    actions = cluster.add_subparsers(dest="action", required=True)
    describe = actions.add_parser(
        "describe", help="cluster id, controller, brokers, under-replicated and offline partitions"
    )
    add_bootstrap(describe)
    elect = actions.add_parser(
        "elect-leaders", help="preferred or unclean leader election (kafka-leader-election.sh)"
    )
    add_bootstrap(elect)
    elect.add_argument(
        "--election-type",
        choices=["preferred", "unclean", "PREFERRED", "UNCLEAN"],
        default="preferred",
        help="preferred: move leadership back to the first replica; unclean: give a "
        "partition without a live in-sync replica a leader (may lose data)",
    )
    elect.add_argument("--topic", help="the topic of the partition(s) to elect")
    elect.add_argument(
        "--partition", type=int, action="append", help="a partition of --topic; repeatable"
    )
    elect.add_argument(
        "--all-topic-partitions", action="store_true", help="every partition of every topic"
    )
    cluster.set_defaults(func=run_cluster)


@exits_quietly
def run_cluster(args: argparse.Namespace) -> int:
    from confluent_kafka import KafkaException

    admin = admin_client(args.bootstrap_server)
    try:
        if args.action == "describe":
            return _describe(admin)
        return _elect(admin, args)
    except (KafkaException, TimeoutError) as exc:
        return fail(
            describe_error(exc)
            or f"no broker of {args.bootstrap_server} answered within {TIMEOUT_S:g} s"
        )


def _describe(admin: Any) -> int:
    cluster = admin.describe_cluster(request_timeout=TIMEOUT_S).result(TIMEOUT_S)
    metadata = admin.list_topics(timeout=TIMEOUT_S)
    nodes = sorted(cluster.nodes, key=lambda n: n.id)
    live = {n.id for n in nodes} | set(metadata.brokers)
    controller = cluster.controller
    print(f"Cluster ID: {cluster.cluster_id}")
    if controller is None or controller.id < 0:
        print("Controller: none")
    else:
        print(f"Controller: {controller.id}\t({controller.host}:{controller.port})")
    print(f"Brokers: {len(nodes)}")
    for n in nodes:
        rack = n.rack or "-"
        print(f"\tBroker: {n.id}\tHost: {n.host}:{n.port}\tRack: {rack}")
    under: list[str] = []
    offline: list[str] = []
    for name in sorted(metadata.topics):
        topic = metadata.topics[name]
        for pid in sorted(topic.partitions):
            p = topic.partitions[pid]
            line = partition_line(name, pid, p.leader, list(p.replicas), list(p.isrs), live)
            if p.leader < 0 or p.leader not in live:
                offline.append(line)
            elif len(p.isrs) < len(p.replicas):
                under.append(line)
    print(f"Under-replicated partitions: {len(under)}")
    for line in under:
        print(line)
    print(f"Offline partitions: {len(offline)}")
    for line in offline:
        print(line)
    return 0


def _elect(admin: Any, args: argparse.Namespace) -> int:
    from confluent_kafka import ElectionType
    from confluent_kafka import TopicPartition as KafkaTopicPartition

    kind = args.election_type.upper()
    if args.all_topic_partitions == bool(args.topic):
        return fail("name either --topic (with --partition) or --all-topic-partitions", 2)
    partitions = None
    if args.topic:
        wanted = args.partition
        if not wanted:
            metadata = admin.list_topics(args.topic, timeout=TIMEOUT_S)
            topic = metadata.topics.get(args.topic)
            if topic is None or topic.error is not None:
                if topic is not None and topic.error.code() != ErrorCode.unknown_topic_or_partition:
                    return fail(f"{describe_error(topic.error)} (topic '{args.topic}')")
                return fail(
                    coded(
                        ErrorCode.unknown_topic_or_partition,
                        f"Topic '{args.topic}' does not exist.",
                    )
                )
            wanted = sorted(topic.partitions)
        partitions = [KafkaTopicPartition(args.topic, p) for p in wanted]
    results = admin.elect_leaders(ElectionType[kind], partitions).result(TIMEOUT_S)
    done, not_needed, failed = [], [], []
    for tp, error in sorted(results.items(), key=lambda kv: (kv[0].topic, kv[0].partition)):
        name = f"{tp.topic}-{tp.partition}"
        if error is None:
            done.append(name)
        elif error.name() == "ELECTION_NOT_NEEDED":
            not_needed.append(name)
        else:
            failed.append(f"{name}: {describe_error(error)}")
    if done:
        print(f"Successfully completed leader election ({kind}) for partitions {', '.join(done)}")
    if not_needed:
        print(f"Valid replica already elected for partitions {', '.join(not_needed)}")
    if not (done or not_needed or failed):
        print(f"No partition needed a leader election ({kind})")
    for line in failed:
        fail(f"leader election ({kind}) failed for partition {line}")
    return 1 if failed else 0
