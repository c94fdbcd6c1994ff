"""The JSON the console's pages read: pure functions from what `oncelog.client` returns (and
the metrics registry's samples) to plain dicts, so the shaping is tested without a broker."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from oncelog.client.admin import ProducerInfo, TransactionListing
from oncelog.client.describe_transactions import TransactionState
from oncelog.client.overview import (
    ClusterInfo,
    GroupDescription,
    GroupListing,
    PartitionInfo,
    PartitionOffsets,
)
from oncelog.client.quotas import CLIENT_ID, USER, QuotaEntity
from oncelog.client.reassignments import OngoingMove
from oncelog.errors import error_name
from oncelog.types import TopicPartition

Json = dict[str, Any]
#: Transaction states in which a transaction is open (Kafka's TransactionState names).
OPEN_STATES = ("Ongoing", "PrepareCommit", "PrepareAbort")


def cluster(info: ClusterInfo) -> Json:
    return {
        "cluster_id": info.cluster_id,
        "controller_id": info.controller_id,
        "brokers": [
            {
                "node_id": b.node_id,
                "host": b.host,
                "port": b.port,
                "rack": b.rack,
                "controller": b.node_id == info.controller_id,
            }
            for b in info.brokers
        ],
    }


def topics(
    partitions: Iterable[PartitionInfo],
    offsets: Mapping[TopicPartition, PartitionOffsets],
    moves: Mapping[TopicPartition, OngoingMove] | None = None,
) -> list[Json]:
    """Topics in name order, each with its partitions, their replicas and offsets, and the
    replicas a reassignment is adding and removing (empty when it is not moving)."""
    by_topic: dict[str, list[Json]] = {}
    for p in sorted(partitions, key=lambda p: p.tp):
        o = offsets.get(p.tp, PartitionOffsets(None, None, None))
        move = (moves or {}).get(p.tp)
        by_topic.setdefault(p.tp.topic, []).append(
            {
                "partition": p.tp.partition,
                "leader": p.leader,
                "leader_epoch": p.leader_epoch,
                "replicas": list(p.replicas),
                "isr": list(p.isr),
                "adding": list(move.adding) if move is not None else [],
                "removing": list(move.removing) if move is not None else [],
                "log_start_offset": o.log_start,
                "high_watermark": o.high_watermark,
                "last_stable_offset": o.last_stable,
                "error": error_name(p.error_code) if p.error_code else None,
            }
        )
    return [
        {"name": name, "internal": name.startswith("__"), "partitions": parts}
        for name, parts in sorted(by_topic.items())
    ]


def producer(p: ProducerInfo, now_ms: int) -> Json:
    """One active producer of a partition. The open transaction's age counts from the
    producer's last write to the partition, as `find-hanging`'s Duration does."""
    open_txn = p.txn_start_offset >= 0
    return {
        "topic": p.tp.topic,
        "partition": p.tp.partition,
        "producer_id": p.producer_id,
        "producer_epoch": p.producer_epoch,
        "last_sequence": p.last_sequence,
        "last_timestamp": p.last_timestamp,
        "coordinator_epoch": p.coordinator_epoch,
        "txn_start_offset": p.txn_start_offset if open_txn else None,
        "txn_age_ms": max(now_ms - p.last_timestamp, 0) if open_txn else None,
    }


def producers(found: Iterable[ProducerInfo], now_ms: int) -> list[Json]:
    ordered = sorted(found, key=lambda p: (p.tp, p.producer_id))
    return [producer(p, now_ms) for p in ordered]


def transaction(listing: TransactionListing, state: TransactionState | None, now_ms: int) -> Json:
    """One transactional id as ListTransactions and DescribeTransactions see it."""
    started = state.transaction_start_time_ms if state is not None else -1
    topics = state.topics if state is not None else ()
    return {
        "transactional_id": listing.transactional_id,
        "coordinator_id": listing.coordinator_id,
        "producer_id": listing.producer_id,
        "state": listing.transaction_state,
        "producer_epoch": state.producer_epoch if state is not None else None,
        "timeout_ms": state.transaction_timeout_ms if state is not None else None,
        "start_time_ms": started if started >= 0 else None,
        "age_ms": max(now_ms - started, 0) if started >= 0 else None,
        "partitions": sorted(f"{d.topic}-{p}" for d in topics for p in d.partitions),
    }


def transactions(
    listings: Iterable[TransactionListing],
    states: Mapping[str, TransactionState],
    hanging: Iterable[ProducerInfo],
    now_ms: int,
    max_timeout_ms: int,
) -> Json:
    """Open transactions (the coordinators' view) and hanging ones (the partitions' view)."""
    open_txns = [
        transaction(t, states.get(t.transactional_id), now_ms)
        for t in sorted(listings, key=lambda t: t.transactional_id)
        if t.transaction_state in OPEN_STATES
    ]
    return {
        "max_transaction_timeout_ms": max_timeout_ms,
        "open": open_txns,
        "hanging": producers(hanging, now_ms),
    }


def group(
    listing: GroupListing,
    description: GroupDescription | None,
    committed: Mapping[TopicPartition, int],
    ends: Mapping[TopicPartition, int],
) -> Json:
    """A group with its members and, per partition it committed to or is assigned, the
    committed offset, the end offset (the LSO: what read_committed consumers read up to) and
    the lag; -1 never appears: unknown is null."""
    owners: dict[TopicPartition, str] = {}
    members: list[Json] = []
    for m in description.members if description is not None else ():
        for tp in m.assignment:
            owners.setdefault(tp, m.member_id)
        members.append(
            {
                "member_id": m.member_id,
                "group_instance_id": m.group_instance_id,
                "client_id": m.client_id,
                "host": m.client_host,
                "assignment": [f"{tp.topic}-{tp.partition}" for tp in m.assignment],
            }
        )
    rows = []
    for tp in sorted(set(committed) | set(owners)):
        offset, end = committed.get(tp), ends.get(tp)
        rows.append(
            {
                "topic": tp.topic,
                "partition": tp.partition,
                "committed_offset": offset,
                "end_offset": end,
                "lag": end - offset if offset is not None and end is not None else None,
                "member_id": owners.get(tp),
            }
        )
    known_lags = [r["lag"] for r in rows if r["lag"] is not None]
    return {
        "group_id": listing.group_id,
        "state": description.state if description is not None else listing.state,
        "protocol_type": listing.protocol_type,
        "coordinator_id": listing.coordinator_id,
        "members": members,
        "partitions": rows,
        "total_lag": sum(known_lags) if known_lags else None,
    }


def metric_samples(registry: Any) -> list[Json]:
    """Every sample of a prometheus_client registry, as {name, labels, value}."""
    out: list[Json] = []
    for family in registry.collect():
        for s in family.samples:
            out.append({"name": s.name, "labels": dict(s.labels), "value": float(s.value)})
    return out


#: Counters the charts draw, by what a metric's name ends with (Kafka's meter names in
#: snake case, with or without a prefix and the `_total` suffix prometheus adds).
THROUGHPUT_SUFFIXES = {
    "messages_in": ("messages_in_total", "messagesin_total", "messages_in"),
    "bytes_in": ("bytes_in_total", "bytesin_total", "bytes_in"),
}
ERROR_LABELS = ("error", "error_code", "code")


def summarize(samples: Iterable[Json]) -> Json:
    """The totals the live charts turn into rates: messages and bytes in, and errors by
    error name. Summed over every label (topics, APIs); the page divides by poll time."""
    totals: Json = {"messages_in": 0.0, "bytes_in": 0.0, "errors": {}}
    errors: dict[str, float] = totals["errors"]
    for s in samples:
        name: str = s["name"]
        if name.endswith(("_created", "_bucket", "_count", "_sum")):
            continue
        for key, suffixes in THROUGHPUT_SUFFIXES.items():
            if name.endswith(suffixes):
                totals[key] += s["value"]
        labels: dict[str, str] = s["labels"]
        if "error" in name and name.endswith("_total"):
            code = next((labels[k] for k in ERROR_LABELS if k in labels), None)
            if code is not None and code not in ("0", "NONE", "none"):
                errors[code] = errors.get(code, 0.0) + s["value"]
    return totals


#: The quota keys the console shows, in Kafka's order.
QUOTA_KEYS = ("producer_byte_rate", "consumer_byte_rate", "request_percentage")


def quotas(found: Iterable[tuple[QuotaEntity, Mapping[str, float]]]) -> list[Json]:
    """One row per entity: its user and client id (a name, `<default>`, or None when the
    entity has no such part) and each quota (None when unset), users first, defaults last."""
    rows = []
    for entity, values in found:
        parts = dict(entity)
        row: Json = {
            "user": _entity_name(parts, USER),
            "client_id": _entity_name(parts, CLIENT_ID),
        }
        row.update({key: values.get(key) for key in QUOTA_KEYS})
        rows.append(row)

    def order(row: Json) -> tuple[bool, bool, str, bool, bool, str]:
        user, client = row["user"], row["client_id"]
        default_user, default_client = user == "<default>", client == "<default>"
        return (
            user is None,
            default_user,
            user or "",
            client is not None,
            default_client,
            client or "",
        )

    return sorted(rows, key=order)


def _entity_name(parts: Mapping[str, str | None], entity_type: str) -> str | None:
    if entity_type not in parts:
        return None
    name = parts[entity_type]
    return "<default>" if name is None else name
