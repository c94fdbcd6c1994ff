"""Cluster-wide producer id blocks: each broker takes 1000 ids at a time from etcd.

Kafka's ZooKeeper mode keeps the latest block in one znode and moves it by conditional set
(`ProducerIdManager`, PRODUCER_ID_BLOCK_SIZE = 1000); here `producer_ids` holds
`{"version": 1, "next": N}`, the first id no broker has been given. A broker computes
`next_block(current)` from the value it read and the IO adapter CASes the new value on the
key's mod_revision (create if absent); if the CAS fails it reads again and retries, so two
brokers never get overlapping blocks and an id is never reused. A value that does not
decode is refused, never taken for "start from 0".

A block is what the single-node `ProducerIdManager` keeps as `_next`/`_block_end`: ids
`first .. end - 1`.
"""

from __future__ import annotations

from dataclasses import dataclass

from oncelog.metadata.cluster_state import ClusterStateError, dump_object, load_object, typed_field

PRODUCER_ID_BLOCK_SIZE = 1000
#: Producer ids are int64; a block must end within them.
LONG_MAX = 2**63 - 1


@dataclass(frozen=True, slots=True)
class ProducerIdBlock:
    """Ids `first` .. `first + size - 1`, this broker's alone."""

    first: int
    size: int

    @property
    def end(self) -> int:
        """One past the last id of the block: where the next block starts."""
        return self.first + self.size

    @property
    def last(self) -> int:
        return self.end - 1

    def __contains__(self, producer_id: object) -> bool:
        return isinstance(producer_id, int) and self.first <= producer_id < self.end


def decode_next(current: bytes | None) -> int:
    """The first id not yet handed out to any broker (0 when the key does not exist)."""
    if current is None:
        return 0
    what = "producer_ids"
    value = typed_field(load_object(current, what), "next", int, what)
    if value < 0:
        raise ClusterStateError(f"{what}: 'next' is negative: {value}")
    return value


def encode_next(next_id: int) -> bytes:
    return dump_object({"next": next_id})


def next_block(
    current: bytes | None, *, at_least: int = 0, size: int = PRODUCER_ID_BLOCK_SIZE
) -> tuple[ProducerIdBlock, bytes]:
    """The block to take and the value to CAS in its place.

    `at_least` skips ids known to be in use (found in the logs after a lost key, as
    ProducerIdManager.ensure_above does on one node).
    """
    first = max(decode_next(current), at_least)
    if first + size > LONG_MAX:
        raise ClusterStateError(f"producer_ids: exhausted (next block would start at {first})")
    block = ProducerIdBlock(first, size)
    return block, encode_next(block.end)
