"""CPU of one Produce request on a single broker, counted in instructions (issue 15).

The broker's own cost per Produce, without the socket: prepared request frames go through
the real dispatcher (`Dispatcher.dispatch`: header, the hand reader, the handler, the
append to a log on a temporary directory, the answer framed) in-process. Wall-clock
figures on this shared 2-core machine are noisy; callgrind's instruction counts are not:

    valgrind --tool=callgrind --collect-atstart=no --toggle-collect='_operator_call*' \\
        python bench/produce_cpu.py 8x100x100

counts only the measured requests (divide by `--rounds`; the script prints the divisor).
With `--consumer` each round also answers a consumer's Fetch (v12, no session, read_uncommitted)
of what that Produce wrote, as a consumer tailing the log sends it (the latency benchmark's
steady state, without the wait in the purgatory).
A case is PARTITIONSxRECORDSxVALUE_BYTES: one idempotent acks=all Produce v9 with one batch of
RECORDS records per partition, each request the producer's next batch. Without valgrind
the script prints wall and CPU time per request; `--profile FILE` writes a cProfile.

The broker services are built as `tests/unit/metrics_broker.py` builds them, from public
constructors only, so the script runs on older commits too (`PYTHONPATH=<git archive>/src`)
to compare before and after.
"""

from __future__ import annotations

import argparse
import cProfile
import operator
import os
import struct
import sys
import tempfile
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

from oncelog.broker.assembly import assemble
from oncelog.broker.context import Node
from oncelog.broker.dispatcher import Dispatcher, Reply
from oncelog.broker.replica_manager import TopicSpec
from oncelog.clock import ManualClock
from oncelog.config import BrokerConfig
from oncelog.fileio import FileRegion
from oncelog.protocol.codec import build, encode_entity, request_class
from oncelog.protocol.records.batch import build_batch
from oncelog.protocol.records.record import encode_record

TOPIC = "bench"
PRODUCE_V = 9
FETCH_V = 12
INIT_PRODUCER_ID_V = 4


def _frame(api_key: int, version: int, body: dict[str, Any]) -> bytes:
    client = b"bench"
    header = struct.pack(">hhih", api_key, version, 1, len(client)) + client + b"\x00"
    return header + encode_entity(build(request_class(api_key, version), body))


class Case:
    """PARTITIONSxRECORDSxVALUE_BYTES."""

    def __init__(self, spec: str) -> None:
        self.partitions, self.records, self.value = (int(x) for x in spec.split("x"))
        value = os.urandom(self.value)
        self.body = b"".join(
            encode_record(offset_delta=i, key=None, value=value) for i in range(self.records)
        )

    def produce(self, producer_id: int, epoch: int, round_: int) -> bytes:
        batch = build_batch(
            base_offset=0,
            records=self.body,
            record_count=self.records,
            last_offset_delta=self.records - 1,
            base_timestamp=1_700_000_000_000,
            max_timestamp=1_700_000_000_000,
            producer_id=producer_id,
            producer_epoch=epoch,
            base_sequence=round_ * self.records,
        )
        partitions = [{"index": p, "records": batch} for p in range(self.partitions)]
        return _frame(
            0,
            PRODUCE_V,
            {
                "transactional_id": None,
                "acks": -1,
                "timeout": timedelta(seconds=5),
                "topic_data": [{"name": TOPIC, "partition_data": partitions}],
            },
        )


def fetch_frame(partitions: int, offset: int) -> bytes:
    """A consumer's Fetch of every partition at `offset` (librdkafka's shape: no session)."""
    wanted = [
        {
            "partition": p,
            "current_leader_epoch": 0,
            "fetch_offset": offset,
            "last_fetched_epoch": -1,
            "log_start_offset": -1,
            "partition_max_bytes": 1048576,
        }
        for p in range(partitions)
    ]
    return _frame(
        1,
        FETCH_V,
        {
            "replica_id": -1,
            "max_wait": timedelta(milliseconds=100),
            "min_bytes": 1,
            "max_bytes": 52428800,
            "isolation_level": 0,
            "session_id": 0,
            "session_epoch": -1,
            "topics": [{"topic": TOPIC, "partitions": wanted}],
            "forgotten_topics_data": [],
            "rack_id": "",
        },
    )


def broker(root: Path, partitions: int) -> Dispatcher:
    clock = ManualClock()
    config = BrokerConfig({"log.dirs": str(root)})
    core = assemble(config, clock)  # the server's wiring (broker/assembly.py)
    replicas = core.replicas
    replicas.startup()
    core.groups.startup()
    core.txns.startup()
    context = core.context(Node(1, "127.0.0.1", 9092))
    context.metrics.attach(context)
    replicas.create_topic(TopicSpec(TOPIC, partitions, 1, {}))
    return Dispatcher(context)


def init_producer(dispatcher: Dispatcher) -> tuple[int, int]:
    frame = _frame(
        22,
        INIT_PRODUCER_ID_V,
        {
            "transactional_id": None,
            "transaction_timeout": timedelta(seconds=60),
            "producer_id": -1,
            "producer_epoch": -1,
        },
    )
    outcome = dispatcher.dispatch(memoryview(frame).toreadonly(), "bench")
    assert isinstance(outcome, Reply), outcome
    answer = b"".join(bytes(p) for p in outcome.data if not isinstance(p, FileRegion))
    # Response v4 (flexible): length, correlation id, tags, throttle, error, id, epoch.
    _throttle, error, producer_id, epoch = struct.unpack_from(">ihqh", answer, 9)
    assert error == 0, error
    return producer_id, epoch


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("case", help="PARTITIONSxRECORDSxVALUE_BYTES, e.g. 8x100x100")
    parser.add_argument("--rounds", type=int, default=200)
    parser.add_argument("--warmup", type=int, default=20)
    parser.add_argument("--profile", help="write a cProfile of the measured part here")
    parser.add_argument(
        "--consumer", action="store_true", help="each round also answers a consumer's Fetch"
    )
    args = parser.parse_args()
    case = Case(args.case)
    with tempfile.TemporaryDirectory(prefix="oncelog-produce-cpu-") as tmp:
        dispatcher = broker(Path(tmp), case.partitions)
        producer_id, epoch = init_producer(dispatcher)
        frames = [
            memoryview(case.produce(producer_id, epoch, r)).toreadonly()
            for r in range(args.warmup + args.rounds)
        ]
        fetches = [
            memoryview(fetch_frame(case.partitions, r * case.records)).toreadonly()
            for r in range(args.warmup + args.rounds)
        ]
        rounds = iter(fetches)

        def measured(frame: memoryview) -> None:
            outcome = dispatcher.dispatch(frame, "bench")
            assert isinstance(outcome, Reply), outcome
            fetch = next(rounds)
            if args.consumer:
                answer = dispatcher.dispatch(fetch, "consumer")
                assert isinstance(answer, Reply), answer

        for frame in frames[: args.warmup]:
            measured(frame)
        rest = frames[args.warmup :]
        profile = cProfile.Profile() if args.profile else None
        if profile:
            profile.enable()
        wall, cpu = time.perf_counter(), time.thread_time()
        for frame in rest:
            operator.call(measured, frame)
        wall, cpu = time.perf_counter() - wall, time.thread_time() - cpu
        if profile:
            profile.disable()
            profile.dump_stats(args.profile)
        ends = {
            dispatcher.broker.replicas.partition(tp).log_end_offset
            for tp in dispatcher.broker.replicas.logs.logs
            if tp.topic == TOPIC
        }
        expected = (args.warmup + args.rounds) * case.records
        assert ends == {expected}, (ends, expected)
    print(
        f"{args.case}: {args.rounds} requests, {wall / args.rounds * 1e6:.1f} us wall, "
        f"{cpu / args.rounds * 1e6:.1f} us CPU per request (divide callgrind's count by "
        f"{args.rounds})",
        file=sys.stderr,
    )


if __name__ == "__main__":
    main()
