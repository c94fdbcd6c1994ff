"""Every acknowledged batch is readable at the offsets the answer gave (issue 10 B).

Hypothesis sends requests of one or more batches to a PartitionLog: new batches of two
idempotent producers, retries of batches already acknowledged (inside and outside the
five-batch window), sequence gaps and plain batches, mixed in any order. An answer (new or
duplicate) must describe every batch of its request at consecutive offsets from its base,
and each must be stored there byte for byte; a refusal must leave the log as it was. Client
data with several batches is refused by the validator as Kafka's LogValidator does.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from oncelog.errors import InvalidRecord, KafkaError
from oncelog.protocol.records.batch import MAGIC_OFFSET, iter_batches
from oncelog.storage.partition_log import PartitionLog
from oncelog.storage.validator import validate_produce_records
from tests.storage.test_transactions import txn_batch
from tests.storage.util import make_batch, open_log, read_all

MAX = 1 << 20
PIDS = (7, 8)


@dataclass(frozen=True)
class Spec:
    kind: str  # "new", "retry", "gap", "plain"
    pid: int
    back: int  # retry: how many acknowledged batches back; gap: how far ahead
    count: int


SPECS = st.builds(
    Spec,
    kind=st.sampled_from(["new", "new", "retry", "gap", "plain"]),
    pid=st.sampled_from(PIDS),
    back=st.integers(1, 7),
    count=st.integers(1, 3),
)


@dataclass(frozen=True)
class Request:
    specs: list[Spec]
    client: bool  # validated as a client's data (one batch) or as an internal append
    again: int | None  # resend the request acknowledged this many requests back...
    extra: bool  # ...followed by the batches of `specs`


REQUESTS = st.lists(
    st.builds(
        Request,
        specs=st.lists(SPECS, min_size=1, max_size=4),
        client=st.booleans(),
        again=st.none() | st.integers(1, 4),
        extra=st.booleans(),
    ),
    min_size=1,
    max_size=12,
)


def seq_batch(pid: int, seq: int, count: int) -> bytes:
    """An idempotent (non-transactional) batch of producer `pid`, epoch 0."""
    return txn_batch(pid, 0, seq, count, transactional=False)


class Model:
    """What was acknowledged: each batch's bytes and offset, and each producer's next seq."""

    def __init__(self) -> None:
        self.acked: list[tuple[bytes, int]] = []
        self.requests: list[list[bytes]] = []  # the batches of each acknowledged request
        self.sent: dict[int, list[bytes]] = {pid: [] for pid in PIDS}
        self.next_seq = dict.fromkeys(PIDS, 0)
        self.plain = 0

    def request(self, req: Request) -> list[bytes]:
        if req.again is not None and self.requests:
            earlier = list(self.requests[-min(req.again, len(self.requests))])
            return earlier + self.build(req.specs) if req.extra else earlier
        return self.build(req.specs)

    def build(self, specs: list[Spec]) -> list[bytes]:
        """The batches of one request; new batches of a producer follow each other."""
        next_seq = dict(self.next_seq)
        out = []
        for spec in specs:
            sent = self.sent[spec.pid]
            if spec.kind == "retry" and sent:
                out.append(sent[-min(spec.back, len(sent))])
            elif spec.kind == "gap":
                out.append(seq_batch(spec.pid, next_seq[spec.pid] + spec.back, spec.count))
            elif spec.kind == "plain":
                self.plain += 1
                out.append(
                    make_batch([f"plain-{self.plain}-{i}".encode() for i in range(spec.count)])
                )
            else:
                out.append(seq_batch(spec.pid, next_seq[spec.pid], spec.count))
                next_seq[spec.pid] += spec.count
        return out


def stored_batches(plog: PartitionLog) -> dict[int, bytes]:
    """base offset -> stored batch, from the magic byte on (what the broker never rewrites)."""
    data = read_all(plog)
    return {h.base_offset: data[pos + MAGIC_OFFSET : pos + h.size] for pos, h in iter_batches(data)}


def assert_stored(plog: PartitionLog, acked: list[tuple[bytes, int]]) -> None:
    stored = stored_batches(plog)
    for batch, offset in acked:
        assert stored.get(offset) == batch[MAGIC_OFFSET:], f"acknowledged batch lost at {offset}"


@settings(
    max_examples=200,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(requests=REQUESTS)
def test_every_acknowledged_batch_is_stored_where_the_answer_says(
    tmp_path_factory: pytest.TempPathFactory, requests: list[Request]
) -> None:
    plog = open_log(tmp_path_factory.mktemp("acked"))
    model = Model()
    try:
        for req in requests:
            client = req.client
            batches = model.request(req)
            data = b"".join(batches)
            before_end, before = plog.log_end_offset, read_all(plog)
            try:
                validated = validate_produce_records(data, MAX, client=client)
                info = plog.append(validated, 0)
            except KafkaError as exc:
                event(f"refused: {type(exc).__name__}")
                assert plog.log_end_offset == before_end and read_all(plog) == before
                if client and len(batches) > 1:
                    assert isinstance(exc, InvalidRecord)
                continue
            assert not (client and len(batches) > 1), "client data with several batches"
            offsets = []
            offset = info.base_offset
            for _, header in validated.batches:
                offsets.append(offset)
                offset += header.record_count
            assert info.last_offset == offset - 1, "the answer does not cover the request"
            acked = list(zip(batches, offsets, strict=True))
            assert_stored(plog, acked)
            event(f"acknowledged: {len(batches)} batches, duplicate={info.duplicate}")
            if info.duplicate:
                assert plog.log_end_offset == before_end
                continue
            assert info.base_offset == before_end
            model.acked += acked
            model.requests.append(batches)
            for batch, (_, header) in zip(batches, validated.batches, strict=True):
                if header.has_producer_id:
                    model.sent[header.producer_id].append(batch)
                    model.next_seq[header.producer_id] = header.last_sequence + 1
        assert_stored(plog, model.acked)
        # Nothing unacknowledged is stored either.
        assert sorted(stored_batches(plog)) == sorted(offset for _, offset in model.acked)
    finally:
        plog.close(flush=False)


def _pair(plog: PartitionLog) -> tuple[bytes, bytes]:
    first, second = seq_batch(7, 0, 5), seq_batch(7, 5, 5)
    plog.append(validate_produce_records(first, MAX), 0)
    return first, second


def test_retry_followed_by_a_new_batch_is_refused_whole(tmp_path: Path) -> None:
    """The issue's request at storage level, as internal (several-batch) data."""
    plog = open_log(tmp_path)
    first, second = _pair(plog)
    with pytest.raises(InvalidRecord, match="duplicate"):
        plog.append(validate_produce_records(first + second, MAX, client=False), 0)
    assert plog.log_end_offset == 5
    info = plog.append(validate_produce_records(second, MAX), 0)
    assert (info.base_offset, info.last_offset, info.duplicate) == (5, 9, False)
    plog.close()


def test_retry_of_several_batches_at_consecutive_offsets_is_a_duplicate(tmp_path: Path) -> None:
    plog = open_log(tmp_path)
    first, second = _pair(plog)
    plog.append(validate_produce_records(second, MAX), 0)
    info = plog.append(validate_produce_records(first + second, MAX, client=False), 0)
    assert (info.base_offset, info.last_offset, info.duplicate) == (0, 9, True)
    assert plog.log_end_offset == 10
    plog.close()


def test_client_data_with_two_batches_is_invalid_record() -> None:
    data = make_batch([b"a"]) + make_batch([b"b"])
    with pytest.raises(InvalidRecord, match="more than one"):
        validate_produce_records(data, MAX)
    assert validate_produce_records(data, MAX, client=False).record_count == 2
