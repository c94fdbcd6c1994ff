"""The executor's vectorised read: Fetch requests over the Kafka protocol, record batches
decoded straight into Arrow columns (option `reader=fetch`, the default).

`fetch_range` reads one offset range [start, end) of one partition from its leader with
oncelog's own protocol client (`oncelog.client`), walks the record batches of each answer and
hands each batch body to `RecordColumns.append` (C when built: no Python object per record),
then wraps the column buffers in a `pyarrow.RecordBatch` without copying them. It keeps what
the consumer path (`kafka_read.read_range`, `reader=consumer`) does:

* **read_committed** as Kafka's consumer does it (the Java client's `CompletedFetch`): per
  answer, the aborted transactions the leader lists become aborted producer ids as the walk
  reaches their first offset; a transactional batch of such a producer is dropped, its ABORT
  marker ends the producer's aborted span, and control batches are never records. The leader
  answers only below the LSO, and the range ends at the LSO the driver planned with.
* **compressed batches** are decompressed per batch (`oncelog.protocol.records.compression`:
  gzip, snappy, lz4, zstd), then decoded like any other.
* **progress by position, not by count**: the position moves to the end of every batch seen
  (markers and aborted batches included) and the read stops once it reaches `end`.
* **failOnDataLoss**: OFFSET_OUT_OF_RANGE fails with DataLossError, or (false) continues
  from the log start offset when the records were deleted.
* **leader changes and retries**: a retriable error or a broken connection refreshes the
  metadata (from any bootstrap server) and tries again; no progress for
  `kafkaConsumer.pollTimeoutMs` fails with ReadTimeoutError.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
from kio.serial import entity_reader

from oncelog.client.admin import Admin
from oncelog.client.connection import ClientError, Connection
from oncelog.protocol.codec import response_class
from oncelog.protocol.fast_fetch import decode_fetch_response
from oncelog.protocol.records import columns as C
from oncelog.protocol.records.batch import (
    CONTROL_FLAG,
    HEADER_SIZE,
    TIMESTAMP_TYPE_MASK,
    TRANSACTIONAL_FLAG,
    iter_batches,
)
from oncelog.protocol.records.compression import decompress
from oncelog.protocol.records.control import parse_marker_at
from oncelog.spark.options import SourceOptions
from oncelog.spark.partitions import OffsetRange
from oncelog.spark.read_errors import DataLossError, ReadTimeoutError
from oncelog.types import TopicPartition

FETCH = 1
FETCH_VERSIONS = (4, 12)
#: Bytes asked of the leader per Fetch (the partition's and the answer's limit).
FETCH_BYTES = 16 * 1024 * 1024
MAX_WAIT_MS = 500
#: An output batch is handed to Spark once it holds this many rows or data bytes.
BATCH_ROWS = 65536
BATCH_BYTES = 32 * 1024 * 1024
RETRY_SECONDS = 0.2
#: Errors that a metadata refresh and another try can cure (leader moved, broker starting).
RETRIABLE = frozenset(
    {
        3,  # UNKNOWN_TOPIC_OR_PARTITION (metadata not there yet)
        5,  # LEADER_NOT_AVAILABLE
        6,  # NOT_LEADER_OR_FOLLOWER
        7,  # REQUEST_TIMED_OUT
        9,  # REPLICA_NOT_AVAILABLE
        13,  # NETWORK_EXCEPTION
        56,  # KAFKA_STORAGE_ERROR
        74,  # FENCED_LEADER_EPOCH
        75,  # UNKNOWN_LEADER_EPOCH
        78,  # OFFSET_NOT_AVAILABLE
    }
)
OFFSET_OUT_OF_RANGE = 1
#: librdkafka settings the protocol reader cannot honour: such a read takes the consumer path.
_CONSUMER_ONLY_PREFIXES = ("security.", "sasl.", "ssl.")


def fetch_supported(options: SourceOptions) -> bool:
    """Whether `reader=fetch` can serve these options (plaintext only; TLS or SASL settings
    go to confluent-kafka's consumer)."""
    if options.reader != "fetch":
        return False
    for name, value in options.kafka_params.items():
        if name == "security.protocol" and value.strip().lower() == "plaintext":
            continue
        if name.startswith(_CONSUMER_ONLY_PREFIXES):
            return False
    return True


class FetchError(RuntimeError):
    """A Fetch answer with an error the reader cannot retry."""


class _Leader:
    """The metadata and a connection to the current leader of one partition."""

    def __init__(self, bootstrap: str, tp: TopicPartition, timeout: float) -> None:
        self.servers = [s.strip() for s in bootstrap.split(",") if s.strip()]
        self.tp = tp
        self.timeout = timeout
        self.admin: Admin | None = None
        self.conn: Connection | None = None
        self.version = FETCH_VERSIONS[1]

    def connection(self) -> Connection:
        if self.conn is not None:
            return self.conn
        self.close()
        last: Exception | None = None
        for server in self.servers:
            try:
                self.admin = Admin(server, timeout=self.timeout)
                break
            except (ClientError, OSError) as exc:
                last = exc
        if self.admin is None:
            raise ClientError(f"no bootstrap server answered: {last}")
        leader = self.admin.leaders.get(self.tp, -1)
        if leader < 0:
            raise ClientError(f"{self.tp.topic}-{self.tp.partition} has no leader")
        self.conn = self.admin.node(leader)
        self.version = self.conn.version_for(FETCH, FETCH_VERSIONS)
        return self.conn

    def close(self) -> None:
        if self.admin is not None:
            with contextlib.suppress(OSError):
                self.admin.close()
        self.admin = None
        self.conn = None

    def earliest(self) -> int | None:
        self.connection()
        assert self.admin is not None
        return self.admin.list_offsets([self.tp], -2).get(self.tp)


def _fetch(leader: _Leader, tp: TopicPartition, position: int, read_committed: bool) -> Any:
    conn = leader.connection()
    body = {
        "replica_id": -1,
        "max_wait": MAX_WAIT_MS,
        "min_bytes": 1,
        "max_bytes": FETCH_BYTES,
        "isolation_level": 1 if read_committed else 0,
        "session_id": 0,
        "session_epoch": -1,
        "topics": [
            {
                "topic": tp.topic,
                "partitions": [
                    {
                        "partition": tp.partition,
                        "current_leader_epoch": -1,
                        "fetch_offset": position,
                        "last_fetched_epoch": -1,
                        "log_start_offset": -1,
                        "partition_max_bytes": FETCH_BYTES,
                    }
                ],
            }
        ],
        "forgotten_topics_data": [],
        "rack_id": "",
    }
    frame, pos = conn.call_raw(FETCH, leader.version, body)
    response = decode_fetch_response(leader.version, frame, pos)
    if response is None:  # not plainly well formed: kio reads it (or raises)
        response, _ = entity_reader(response_class(FETCH, leader.version))(frame, pos)
    if int(response.error_code) != 0:
        return int(response.error_code)
    for topic in response.responses:
        for part in topic.partitions:
            if topic.topic == tp.topic and part.partition_index == tp.partition:
                return part
    raise FetchError(f"the Fetch answer has no {tp.topic}-{tp.partition}")


class _Walk:
    """Appends the records of one Fetch answer's batches to `cols`, as Kafka's consumer
    filters them; `position` ends past the last batch seen."""

    def __init__(self, cols: C.RecordColumns, position: int, end: int, read_committed: bool):
        self.cols = cols
        self.position = position
        self.end = end
        self.read_committed = read_committed

    def answer(self, records: memoryview | bytes, aborted: Any) -> None:
        pending = sorted(
            ((int(a.first_offset), int(a.producer_id)) for a in aborted or ()), reverse=True
        )
        aborted_pids: set[int] = set()
        for pos, h in iter_batches(records):
            if h.base_offset >= self.end:
                self.position = max(self.position, self.end)
                return
            last = h.base_offset + h.last_offset_delta
            if last < self.position:
                continue
            attrs = h.attributes
            skip = bool(attrs & CONTROL_FLAG)
            if self.read_committed and h.producer_id >= 0:
                while pending and pending[-1][0] <= last:
                    aborted_pids.add(pending.pop()[1])
                if attrs & CONTROL_FLAG:
                    marker = parse_marker_at(records, pos)
                    if marker is not None and not marker[0]:  # ABORT ends the span
                        aborted_pids.discard(h.producer_id)
                elif attrs & TRANSACTIONAL_FLAG and h.producer_id in aborted_pids:
                    skip = True
            if not skip and h.record_count:
                body = records[pos + HEADER_SIZE : pos + h.size]
                if h.compression:
                    body = decompress(h.compression, body)
                append_time = h.max_timestamp if attrs & TIMESTAMP_TYPE_MASK else -1
                self.cols.append(
                    body, h.record_count, h.base_offset, h.base_timestamp, append_time,
                    self.position, self.end,
                )  # fmt: skip
            self.position = max(self.position, last + 1)


def to_record_batch(
    cols: C.RecordColumns, topic: str, partition: int, schema: pa.Schema
) -> pa.RecordBatch:
    """Wrap the column buffers (no copy) as a RecordBatch of the source's schema."""
    b = cols.cols
    n = cols.rows
    buf = pa.py_buffer
    arrays = [
        pa.Array.from_buffers(pa.binary(), n, [buf(b[C.KEY_VALID]), buf(b[C.KEY_OFFSETS]),
                                               buf(b[C.KEY_DATA])]),
        pa.Array.from_buffers(pa.binary(), n, [buf(b[C.VALUE_VALID]), buf(b[C.VALUE_OFFSETS]),
                                               buf(b[C.VALUE_DATA])]),
        pa.repeat(pa.scalar(topic, pa.string()), n),
        pa.repeat(pa.scalar(partition, pa.int32()), n),
        pa.Array.from_buffers(pa.int64(), n, [None, buf(b[C.OFFSET])]),
        pa.Array.from_buffers(schema.field("timestamp").type, n, [None, buf(b[C.TIMESTAMP])]),
        pa.Array.from_buffers(pa.int32(), n, [None, buf(b[C.TIMESTAMP_TYPE])]),
    ]  # fmt: skip
    if cols.with_headers:
        list_type = schema.field("headers").type
        struct_type = list_type.value_type
        h = cols.header_count
        hkeys = pa.Array.from_buffers(
            pa.string(), h, [None, buf(b[C.HEADER_KEY_OFFSETS]), buf(b[C.HEADER_KEY_DATA])]
        )
        hvalues = pa.Array.from_buffers(
            pa.binary(), h,
            [buf(b[C.HEADER_VALUE_VALID]), buf(b[C.HEADER_VALUE_OFFSETS]),
             buf(b[C.HEADER_VALUE_DATA])],
        )  # fmt: skip
        pairs = pa.Array.from_buffers(struct_type, h, [None], children=[hkeys, hvalues])
        arrays.append(
            pa.Array.from_buffers(
                list_type,
                n,
                [buf(b[C.HEADERS_VALID]), buf(b[C.HEADERS_OFFSETS])],
                children=[pairs],
            )
        )
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


def fetch_range(
    options: SourceOptions, r: OffsetRange, schema: pa.Schema
) -> Iterator[pa.RecordBatch]:
    """Read [r.start, r.end) of one partition as Arrow batches of `schema`."""
    read = _RangeRead(options, r)
    try:
        while read.position < r.end:
            read.step()
            cols = read.cols
            if cols.rows >= BATCH_ROWS or cols.data_bytes >= BATCH_BYTES:
                yield to_record_batch(cols, r.topic, r.partition, schema)
                read.cols = C.RecordColumns(options.include_headers)
        if read.cols.rows:
            yield to_record_batch(read.cols, r.topic, r.partition, schema)
    finally:
        read.leader.close()


class _RangeRead:
    """One range's read: the position, the leader, the columns filled so far."""

    def __init__(self, options: SourceOptions, r: OffsetRange) -> None:
        self.options = options
        self.r = r
        self.tp = TopicPartition(r.topic, r.partition)
        self.timeout_s = options.poll_timeout_ms / 1000
        self.leader = _Leader(options.bootstrap_servers, self.tp, min(self.timeout_s, 30.0))
        self.position = r.start
        self.cols = C.RecordColumns(options.include_headers)
        self.deadline = time.monotonic() + self.timeout_s

    def step(self) -> None:
        """One Fetch and its answer; retriable trouble waits a little, up to the deadline."""
        problem = self._fetch_once()
        if problem is None:
            return
        r = self.r
        if time.monotonic() > self.deadline:
            raise ReadTimeoutError(
                f"reading {r.topic}-{r.partition} [{r.start}, {r.end}): position stuck at "
                f"{self.position} for {self.options.poll_timeout_ms} ms "
                f"(option kafkaConsumer.pollTimeoutMs); last problem: {problem}"
            )
        time.sleep(RETRY_SECONDS)

    def _progress(self, position: int) -> None:
        if position > self.position:
            self.position = position
            self.deadline = time.monotonic() + self.timeout_s

    def _fetch_once(self) -> str | None:
        """None when the answer was used (records or none yet), else what went wrong."""
        r = self.r
        try:
            part = _fetch(self.leader, self.tp, self.position, self.options.read_committed)
        except (ClientError, OSError) as exc:
            self.leader.close()
            return f"{type(exc).__name__}: {exc}"
        if isinstance(part, int):  # a top-level error
            self.leader.close()
            return f"error {part}"
        code = int(part.error_code)
        if code == OFFSET_OUT_OF_RANGE:
            earliest = self.leader.earliest()
            if self.options.fail_on_data_loss or earliest is None or earliest <= self.position:
                raise DataLossError(
                    f"offset {self.position} of {r.topic}-{r.partition} is no longer "
                    f"available (earliest {earliest}); some data is lost. Set "
                    "failOnDataLoss=false to continue from the earliest offset."
                )
            self._progress(min(earliest, r.end))
            return None
        if code in RETRIABLE:
            self.leader.close()
            return f"error {code}"
        if code != 0:
            raise FetchError(f"Fetch of {r.topic}-{r.partition} at {self.position}: error {code}")
        if part.records:
            walk = _Walk(self.cols, self.position, r.end, self.options.read_committed)
            walk.answer(part.records, part.aborted_transactions)
            self._progress(walk.position)
        elif time.monotonic() > self.deadline:
            return "no records below the end offset"
        return None
