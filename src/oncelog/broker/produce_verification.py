"""KIP-890's late-produce defence, on the partition's side: transactional data is accepted
only for a partition the coordinator has in the producer's open transaction.

On a single node, and for producers this broker coordinates, the coordinator is asked at
once (`TransactionChecks.verify`). In a cluster whose coordinator for the producer is
another broker, the produce handler asks it first (`to_verify` names the producer to ask,
AddPartitionsToTxn verify-only); later batches of the same transaction here need no new
check, since the partition's producer state shows it open."""

from __future__ import annotations

from oncelog.broker.replica_listeners import TransactionChecks
from oncelog.errors import (
    ErrorCode,
    InvalidProducerEpoch,
    InvalidProducerIdMapping,
    InvalidTxnState,
)
from oncelog.protocol.records.batch import HEADER_SIZE, parse_header
from oncelog.storage.partition_log import PartitionLog


class ProduceVerification:
    def __init__(self, checks: TransactionChecks, clustered: bool) -> None:
        self.checks = checks
        self.clustered = clustered

    def check(self, plog: PartitionLog, producer_id: int, epoch: int) -> None:
        """Raise the typed error refusing a transactional batch of `producer_id` here."""
        tp = plog.tp
        if self.clustered and not self.checks.knows(producer_id):
            if in_open_transaction(plog, producer_id, epoch):
                return
            raise InvalidTxnState(
                f"{tp}: producer {producer_id} epoch {epoch}: the transaction was not verified "
                "with its coordinator"
            )
        code = self.checks.verify(producer_id, epoch, tp)
        if code == ErrorCode.none:
            return
        message = f"{tp}: producer {producer_id} epoch {epoch} has no open transaction here"
        if code == ErrorCode.invalid_producer_epoch:
            raise InvalidProducerEpoch(message)
        if code == ErrorCode.invalid_producer_id_mapping:
            raise InvalidProducerIdMapping(message)
        raise InvalidTxnState(message)

    def to_verify(self, plog: PartitionLog, records: bytes | memoryview) -> tuple[int, int] | None:
        """In a cluster: (producer id, epoch) when this transactional batch opens a
        transaction here whose coordinator is another broker (it must be asked first)."""
        if not self.clustered or len(records) < HEADER_SIZE:
            return None
        header = parse_header(records, 0)  # a bad batch is refused by the append itself
        if not header.is_transactional or self.checks.knows(header.producer_id):
            return None
        if in_open_transaction(plog, header.producer_id, header.producer_epoch):
            return None
        return header.producer_id, header.producer_epoch


def in_open_transaction(plog: PartitionLog, producer_id: int, epoch: int) -> bool:
    """Whether the partition's producer state has `producer_id`'s transaction open in
    `epoch`."""
    entry = plog.producer_state.producers.get(producer_id)
    return (
        entry is not None
        and entry.producer_epoch == epoch
        and producer_id in plog.producer_state.ongoing_transactions()
    )
