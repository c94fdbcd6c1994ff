"""The periodic recovery-point checkpoint on the real broker.

1 GiB segments never roll here, so before the checkpoint existed a SIGKILLed broker had no
producer snapshot and rebuilt every partition's producer state from the whole log. With a
1 s interval: a transactional and an idempotent confluent-kafka producer write (commits,
aborts, and a transaction left open across the checkpoint), the broker fsyncs and snapshots
each partition, is SIGKILLed and restarted. It loads the snapshots (no "rebuilding from the
log"), the same producer instances go on (the open transaction commits, new ones follow)
without sequence or producer-id errors, and read_committed sees exactly what was committed.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from confluent_kafka import KafkaError, Message, Producer, TopicPartition

from tests.broker_process import BrokerProcess
from tests.integration.helpers import create_topic, wait_until
from tests.integration.test_transactions import consumer, read_values, tx_producer

pytestmark = [pytest.mark.integration, pytest.mark.slow]

TOPIC = "ckpt"
PARTITIONS = 2
OVERRIDES = {
    "log.flush.offset.checkpoint.interval.ms": "1000",
    "transaction.state.log.num.partitions": "4",
    "offsets.topic.num.partitions": "4",
    "num.partitions": "1",
}
REBUILD = "no usable producer snapshot; rebuilding from the log"


class Errors:
    """Delivery reports that failed, whatever the producer."""

    def __init__(self) -> None:
        self.seen: list[str] = []

    def __call__(self, err: KafkaError | None, msg: Message) -> None:
        if err is not None:
            self.seen.append(f"{msg.topic()}[{msg.partition()}]: {err}")


def snapshot_offsets(directory: Path) -> list[int]:
    return sorted(int(p.name.removesuffix(".snapshot")) for p in directory.glob("*.snapshot"))


def log_ends(bootstrap: str) -> dict[int, int]:
    c = consumer(bootstrap, "read_uncommitted", "ends")
    try:
        return {
            p: int(c.get_watermark_offsets(TopicPartition(TOPIC, p), 10, False)[1])
            for p in range(PARTITIONS)
        }
    finally:
        c.close()


def test_sigkill_after_a_checkpoint_restarts_from_the_snapshots(
    broker_factory: type[BrokerProcess],
) -> None:
    broker = broker_factory(overrides=OVERRIDES).start()
    bs = broker.bootstrap
    create_topic(bs, TOPIC, PARTITIONS)
    errors = Errors()
    txn = tx_producer(bs, "ckpt-txn", on_delivery=errors)
    idem = Producer({"bootstrap.servers": bs, "enable.idempotence": True, "linger.ms": 5})
    committed: list[bytes] = []

    def transaction(n: int, commit: bool) -> None:
        txn.begin_transaction()
        values = [f"t{n}-{i}".encode() for i in range(4)]
        for i, value in enumerate(values):
            txn.produce(TOPIC, value, partition=i % PARTITIONS)
        if commit:
            txn.commit_transaction(30)
            committed.extend(values)
        else:
            assert txn.flush(30) == 0  # abort_transaction would drop it unsent
            txn.abort_transaction(30)

    for n in range(20):
        transaction(n, commit=n % 5 != 4)
        idem.produce(TOPIC, f"i{n}".encode(), partition=n % PARTITIONS, on_delivery=errors)
    assert idem.flush(30) == 0
    txn.begin_transaction()  # open across the checkpoint and the kill
    spanning = [f"open-{p}".encode() for p in range(PARTITIONS)]
    for p, value in enumerate(spanning):
        txn.produce(TOPIC, value, partition=p)
    assert txn.flush(30) == 0

    dirs = [broker.data_dir / f"{TOPIC}-{p}" for p in range(PARTITIONS)]
    ends = log_ends(bs)
    wait_until(
        lambda: all(ends[p] in snapshot_offsets(d) for p, d in enumerate(dirs)),
        15,
        "a periodic producer snapshot at each partition's log end",
    )
    assert all(len(list(d.glob("*.log"))) == 1 for d in dirs), "no roll expected"
    log_size = broker.log_path.stat().st_size
    broker.kill()
    for p, directory in enumerate(dirs):
        assert max(snapshot_offsets(directory)) == ends[p] > 0  # beyond the segment base 0
    broker.start()
    with open(broker.log_path, "rb") as f:
        f.seek(log_size)
        restart_log = f.read().decode(errors="replace")
    assert "no clean-shutdown marker" in restart_log  # it really was an unclean start
    for p in range(PARTITIONS):
        assert f"{TOPIC}-{p}: {REBUILD}" not in restart_log, restart_log[-3000:]

    # The same producer instances go on: the open transaction commits, more follow.
    txn.commit_transaction(30)
    committed.extend(spanning)
    for n in range(20, 25):
        transaction(n, commit=n != 22)
        idem.produce(TOPIC, f"i{n}".encode(), partition=n % PARTITIONS, on_delivery=errors)
    assert idem.flush(30) == 0
    assert txn.flush(30) == 0
    assert errors.seen == []

    check_reads(bs, committed, {f"i{n}".encode() for n in range(25)}, aborted=5)


def check_reads(bs: str, committed: list[bytes], idempotent: set[bytes], aborted: int) -> None:
    """read_committed: every committed and idempotent value once, nothing else."""
    got = read_values(bs, TOPIC, PARTITIONS, "read_committed")
    assert sorted(v for v in got if v not in idempotent) == sorted(committed)
    assert {v for v in got if v in idempotent} == idempotent
    assert len(got) == len(committed) + len(idempotent)
    uncommitted = read_values(bs, TOPIC, PARTITIONS, "read_uncommitted")
    assert len(uncommitted) == len(got) + 4 * aborted
