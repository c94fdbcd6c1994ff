"""Batch markers, content digests and batch seals of the exactly-once Kafka sink.

Pure logic, no Spark and no client: the sink stores a *marker* per (sink, query, Spark
partition) as a consumer-group offset committed inside the partition's transaction. The
committed offset is ``batch_id + 1`` (offsets must be non-negative and "nothing yet" is an absent
offset) and the offset metadata is compact JSON carrying the batch id, the record count and a
digest of the produced records. A replay of a batch whose marker is already there is verified
against the digest and skipped; a replay producing different records fails loudly, because
skipping it would silently keep output that no longer matches the input.
"""

from __future__ import annotations

import enum
import hashlib
import json
import struct
from collections.abc import Sequence
from dataclasses import dataclass

#: Version of the marker/seal metadata layout, stored so a later layout can still read old ones.
FORMAT_VERSION = 1
DIGEST_BYTES = 16

Headers = Sequence[tuple[str, bytes | None]] | None


class MarkerError(ValueError):
    """Offset metadata that is not a marker or seal this sink wrote."""


class NonDeterministicReplay(RuntimeError):
    """A replayed batch produced records that differ from the ones already committed."""


class CheckpointBehindOutput(RuntimeError):
    """The output already holds a later batch than the one Spark asks to write."""


_LEN = struct.Struct(">i")
#: partition (-1: unassigned), key length, value length (-1: null), header count (-1: none).
_HEAD = struct.Struct(">iiii")
_MASK = (1 << (8 * DIGEST_BYTES)) - 1
_blake2b = hashlib.blake2b


def _field(data: bytes | None) -> bytes:
    """Length-prefixed so that no two different header lists hash the same byte stream."""
    if data is None:
        return b"\xff\xff\xff\xff"
    return _LEN.pack(len(data)) + data


class Digest:
    """Digest of produced (topic, partition, key, value, headers) records.

    Unordered (default): a sum of per-record blake2b values, so the same multiset of records in
    another order digests the same. Spark does not promise row order after a shuffle (fetch
    order varies between attempts), and a reordered replay holds the same records as the
    committed output, so skipping it is right. Ordered: one chained blake2b, for inputs whose
    order is deterministic and matters. The two never compare equal (prefix "o:" for ordered).
    """

    __slots__ = ("_hash", "_prefixes", "_sum", "count", "ordered")

    def __init__(self, ordered: bool = False) -> None:
        self.ordered = ordered
        self._hash = hashlib.blake2b(digest_size=DIGEST_BYTES)
        self._prefixes: dict[str, bytes] = {}
        self._sum = 0  # masked to DIGEST_BYTES only when read: cheaper per record
        self.count = 0

    def add(
        self,
        topic: str,
        partition: int | None,
        key: bytes | None,
        value: bytes | None,
        headers: Headers = None,
    ) -> None:
        """One record as a single byte string: topic, fixed-size lengths, key, value, headers.
        Runs once per produced row, so it does as few allocations as it can."""
        prefix = self._prefixes.get(topic)
        if prefix is None:
            prefix = self._prefixes[topic] = _field(topic.encode())
        data = prefix + _HEAD.pack(
            -1 if partition is None else partition,
            -1 if key is None else len(key),
            -1 if value is None else len(value),
            -1 if headers is None else len(headers),
        )
        if key:
            data += key
        if value:
            data += value
        if headers:
            data += b"".join(_field(n.encode()) + _field(v) for n, v in headers)
        if self.ordered:
            self._hash.update(data)
        else:
            self._sum += int.from_bytes(_blake2b(data, digest_size=DIGEST_BYTES).digest(), "big")
        self.count += 1

    def hexdigest(self) -> str:
        if self.ordered:
            return "o:" + self._hash.hexdigest()
        return (self._sum & _MASK).to_bytes(DIGEST_BYTES, "big").hex()


Record = tuple[str, int | None, bytes | None, bytes | None, Headers]


def digest_of(records: Sequence[Record], ordered: bool = False) -> str:
    """Digest of a whole record list (tests and tools; the sink feeds `Digest` row by row)."""
    d = Digest(ordered)
    for topic, partition, key, value, headers in records:
        d.add(topic, partition, key, value, headers)
    return d.hexdigest()


@dataclass(frozen=True, slots=True)
class Marker:
    """What a committed transaction of one Spark partition wrote for one batch."""

    batch_id: int
    records: int
    digest: str

    @property
    def offset(self) -> int:
        """The group offset that stores this marker: the next batch to write."""
        return self.batch_id + 1

    def metadata(self) -> str:
        return json.dumps(
            {"v": FORMAT_VERSION, "b": self.batch_id, "n": self.records, "d": self.digest},
            separators=(",", ":"),
        )

    @classmethod
    def decode(cls, offset: int, metadata: str | None) -> Marker | None:
        """The marker stored at a committed group offset; None if nothing was committed yet
        (a negative offset is librdkafka's "no committed offset")."""
        if offset < 0:
            return None
        try:
            data = json.loads(metadata or "")
            batch, records, digest = data["b"], data["n"], data["d"]
        except (ValueError, TypeError, KeyError) as exc:
            raise MarkerError(
                f"committed offset {offset} has metadata {metadata!r}, not a sink marker: "
                "is another application using this consumer group?"
            ) from exc
        if not (isinstance(batch, int) and isinstance(records, int) and isinstance(digest, str)):
            raise MarkerError(f"malformed sink marker metadata {metadata!r}")
        if batch + 1 != offset:
            raise MarkerError(f"sink marker {metadata!r} disagrees with its offset {offset}")
        return cls(batch, records, digest)


class Action(enum.Enum):
    """What a task does with its batch given the partition's marker."""

    WRITE = "write"
    VERIFY = "verify"  # already written: consume, digest, compare, skip


def plan(marker: Marker | None, batch_id: int, partition_id: int) -> Action:
    """WRITE if the marker is older than this batch; VERIFY if it is this batch; a marker of a
    later batch means the checkpoint was rolled back behind the output, which we refuse."""
    if marker is None or marker.batch_id < batch_id:
        return Action.WRITE
    if marker.batch_id == batch_id:
        return Action.VERIFY
    raise CheckpointBehindOutput(
        f"partition {partition_id}: the output already holds batch {marker.batch_id} but Spark "
        f"asks to write batch {batch_id}; was the checkpoint rolled back or reused?"
    )


def verify_replay(
    marker: Marker, batch_id: int, partition_id: int, digest: str, records: int
) -> None:
    """Raise unless the replayed records are exactly the ones committed for this batch."""
    if marker.digest != digest or marker.records != records:
        raise NonDeterministicReplay(
            f"non-deterministic replay of batch {batch_id} partition {partition_id}: committed "
            f"{marker.records} records with digest {marker.digest}, the replay has {records} "
            f"records with digest {digest}; the output keeps the committed records"
        )


@dataclass(frozen=True, slots=True)
class Seal:
    """The driver's record that a whole batch was committed to Spark's sink."""

    batch_id: int
    partitions: int
    records: int
    skipped: int

    @property
    def offset(self) -> int:
        return self.batch_id + 1

    def metadata(self) -> str:
        return json.dumps(
            {
                "v": FORMAT_VERSION,
                "b": self.batch_id,
                "p": self.partitions,
                "n": self.records,
                "s": self.skipped,
            },
            separators=(",", ":"),
        )

    @classmethod
    def decode(cls, offset: int, metadata: str | None) -> Seal | None:
        if offset < 0:
            return None
        try:
            data = json.loads(metadata or "")
            seal = cls(int(data["b"]), int(data["p"]), int(data["n"]), int(data["s"]))
        except (ValueError, TypeError, KeyError) as exc:
            raise MarkerError(f"offset {offset} metadata {metadata!r} is not a batch seal") from exc
        if seal.offset != offset:
            raise MarkerError(f"batch seal {metadata!r} disagrees with its offset {offset}")
        return seal


def marker_group(sink_id: str, query_id: str, partition_id: int) -> str:
    """The transactional.id of a streaming task, also the consumer group of its marker."""
    return f"{sink_id}-{query_id}-{partition_id}"


def seal_group(sink_id: str, query_id: str) -> str:
    return f"{sink_id}-{query_id}-seal"
