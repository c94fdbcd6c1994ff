"""Producer id allocation: never reuse an id, restarts included.

Ids are handed out from blocks; the end of the current block is persisted (checksummed,
atomically) before any id of it is given, so after a crash allocation resumes past every id
that may have been issued. Kafka records the same blocks in its metadata log
(ProducerIdsRecord).
"""

from __future__ import annotations

from pathlib import Path

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
