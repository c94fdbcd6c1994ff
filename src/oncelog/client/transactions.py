"""Which open transactions hang: shared by `oncelog transactions find-hanging` and the web
console, so both call the same transactions hanging.

A transaction open on a partition for longer than the brokers' transaction.max.timeout.ms is
suspect; it hangs when its coordinator does not have it Ongoing with that partition in the
same producer epoch, or has had it ongoing for that long too (Kafka's TransactionsCommand).
"""

from __future__ import annotations

import time

from oncelog.client.admin import Admin, ProducerInfo


def now_ms() -> int:
    return int(time.time() * 1000)


def find_hanging(
    admin: Admin, topics: list[str] | None, max_timeout_ms: int, now: int | None = None
) -> list[ProducerInfo]:
    """Open transactions older than `max_timeout_ms` that no coordinator drives properly."""
    names = topics or [t for t in admin.topics() if not t.startswith("__")]
    tps = [tp for tp in admin.leaders if tp.topic in names]
    now = now_ms() if now is None else now
    suspects = [
        p
        for p in admin.describe_producers(tps)
        if p.txn_start_offset >= 0 and now - p.last_timestamp >= max_timeout_ms
    ]
    if not suspects:
        return []
    known = {
        t.producer_id: t for t in admin.list_transactions(pids=[p.producer_id for p in suspects])
    }
    hanging = []
    for p in suspects:
        listed = known.get(p.producer_id)
        if listed is None or listed.transaction_state != "Ongoing":
            hanging.append(p)
            continue
        t = admin.describe_transaction(listed.transactional_id)
        in_txn = any(d.topic == p.tp.topic and p.tp.partition in d.partitions for d in t.topics)
        started = t.transaction_start_time_ms
        if t.producer_epoch != p.producer_epoch or not in_txn or now - started >= max_timeout_ms:
            hanging.append(p)
    return hanging
