"""Producer id allocation: never reuse an id, restarts included.

Ids are handed out from blocks; the end of the current block is persisted (checksummed,
atomically) before any id of it is given, so after a crash allocation resumes past every id
that may have been issued. Kafka records the same blocks in its metadata log
(ProducerIdsRecord).
"""

from __future__ import annotations

from pathlib import Path

from oncelog.config import BrokerConfig
from oncelog.errors import CoordinatorLoadInProgress
from oncelog.storage.files import CorruptFileError, read_checked_json, write_checked_json

BLOCK_SIZE = 1000
PRODUCER_ID_FILE = "producer-id-block"


class ProducerIdManager:
    def __init__(self, path: Path, block_size: int = BLOCK_SIZE) -> None:
        self.path = path
        self.block_size = block_size
        self._next = 0
        self._block_end = 0
        if path.exists():
            try:
                self._next = self._block_end = int(read_checked_json(path)["next_block_start"])
            except (CorruptFileError, KeyError, ValueError, TypeError) as exc:
                raise CorruptFileError(
                    f"{path} is damaged ({exc}); refusing to start, as producer ids could be "
                    "reused. Restore it or set it past every id in use."
                ) from exc

    @property
    def allocated_below(self) -> int:
        """Every id ever handed out is below this."""
        return self._block_end

    def next_id(self) -> int:
        if self._next >= self._block_end:
            end = self._block_end + self.block_size
            write_checked_json(self.path, {"next_block_start": end})
            self._next, self._block_end = self._block_end, end
        pid = self._next
        self._next += 1
        return pid

    def ensure_above(self, producer_id: int) -> None:
        """Never hand out `producer_id` or anything below it (ids found in the logs)."""
        if producer_id >= self._block_end:
            end = producer_id + 1
            write_checked_json(self.path, {"next_block_start": end})
            self._next = self._block_end = end


class ProducerIdPool:
    """Producer ids of a cluster: blocks reserved in etcd (by compare-and-swap, so no two
    brokers get the same block), handed out here one by one.

    The server fetches a block whenever `wants_block` says so (the current one is 90% used,
    as Kafka prefetches) and gives it to `add_block`; until the first block arrives
    InitProducerId answers COORDINATOR_LOAD_IN_PROGRESS and the client retries.
    """

    def __init__(self) -> None:
        self._blocks: list[tuple[int, int]] = []  # (next id, end) of reserved blocks
        self.requested = False
        #: Another broker's block may be newer than this broker's view of etcd, so no id is
        #: refused as "never issued" in a cluster (see ReplicaManager.append).
        self.allocated_below = 2**63 - 1

    @property
    def wants_block(self) -> bool:
        if self.requested:
            return False
        left = sum(end - nxt for nxt, end in self._blocks)
        return left < BLOCK_SIZE // 10

    def add_block(self, first: int, size: int) -> None:
        self._blocks.append((first, first + size))
        self.requested = False

    def next_id(self) -> int:
        while self._blocks and self._blocks[0][0] >= self._blocks[0][1]:
            self._blocks.pop(0)
        if not self._blocks:
            raise CoordinatorLoadInProgress("no producer id block reserved in etcd yet; retry")
        nxt, end = self._blocks[0]
        self._blocks[0] = (nxt + 1, end)
        return nxt

    def ensure_above(self, producer_id: int) -> None:
        """Blocks come from etcd, past every id the cluster issued: nothing to do here."""


def producer_id_source(config: BrokerConfig) -> ProducerIdManager | ProducerIdPool:
    """Where a broker's producer ids come from: in a cluster (etcd.connect set) blocks
    reserved in etcd, on a single node the metadata directory's `producer-id-block` file."""
    if config.get("etcd.connect"):
        return ProducerIdPool()
    return ProducerIdManager(config.log_dirs[0] / PRODUCER_ID_FILE)
