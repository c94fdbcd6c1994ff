"""CPU of the replication path per request, counted in instructions (issue 15).

Wall-clock benchmarks on this 2-core machine are noisy; callgrind's instruction counts are
not. Each step below runs in-process on a temporary directory, the measured part inside
`operator.call`, so that

    valgrind --tool=callgrind --collect-atstart=no --toggle-collect='_operator_call*' \
        python bench/replication_cpu.py STEP

counts only it (divide by `--rounds`; the script prints the divisor). Without valgrind the
script reports wall time per round and, with `--profile FILE`, writes a cProfile of the
measured part.

Steps (by default 6 partitions, one idempotent 100-record batch of 100 B values per
partition; `--partitions`, `--records`, `--value` change that, e.g. `--partitions 1
--records 1 --value 1024` for the latency benchmark's one-message requests):

- `follower`: a follower's fetch round: the Fetch request is encoded and "sent", the leader's
  answer (a prepared frame, 6 batches) is read, decoded and appended
  (`ReplicaFetcher._fetch`), the socket replaced by in-memory fakes. `--idle N` adds N
  followed partitions that never get data (a cluster's `__consumer_offsets` has 50);
  `--session` has the leader's answers open a fetch session, so requests name only the
  partitions that moved.
- `leader-fetch`: the leader's side: two followers' fetches parked in the purgatory are woken
  by an append and answered (6 batches each); each follower then fetches at the new end,
  which moves the high watermark and completes the waiting acks=all Produce (its answer is
  encoded). The Produce's own handling (the append) is not counted: `leader-produce` is.
  With `--session` the followers fetch in fetch sessions, as the replica fetcher does;
  `--consumer` adds a tailing consumer's fetch (no session), answered on each high-watermark
  move and sent again, to the `leader-fetch` step.
- `leader-produce`: the acks=all Produce of the same round alone.

`--cold MIB` writes one byte per cache line of a buffer of that size between rounds (not
timed) and reports the time of the rounds alone: each round then starts with caches that
another process has filled, as in a real cluster, where six processes share two cores and
each wake-up of a broker follows someone else's work. 16 MiB (more than the last-level
cache) makes the leader's part of a 1 KiB message 3.5x slower than back-to-back rounds,
close to what the brokers spend per message (RESULTS.md 11.8).

The harness touches `BrokerChannel._conn` (`_reader`/`_writer` before) and builds the broker
services as `tests/unit/metrics_broker.py` does, so it runs on older commits (`PYTHONPATH` of a
`git archive`) to compare before and after.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import operator
import struct
import sys
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable, Hashable
from pathlib import Path
from typing import Any

from oncelog.broker.assembly import ServerHooks, assemble
from oncelog.broker.context import Node
from oncelog.broker.dispatcher import Dispatcher, Pending, Reply
from oncelog.broker.partition import ReplicaView
from oncelog.broker.purgatory import Purgatory
from oncelog.broker.replica_manager import ReplicaManager
from oncelog.clock import ManualClock
from oncelog.config import BrokerConfig
from oncelog.protocol.codec import build, encode_entity, request_class
from oncelog.protocol.fast_responses import encode_response_body
from oncelog.protocol.records.batch import build_batch
from oncelog.protocol.records.record import encode_record
from oncelog.replication.follower import FollowerPhase
from oncelog.server.inter_broker import BrokerChannel
from oncelog.server.replica_fetcher import ReplicaFetcher
from oncelog.types import TopicPartition

TOPIC = "bench"
IDLE_TOPIC = "idle"
PARTITIONS = 6
RECORDS = 100
VALUE = 100
PID = 1000
FETCH_V = 12
PRODUCE_V = 9

_BODY = b""


def _set_shape(partitions: int, records: int, value: int) -> None:
    """The workload's shape (`--partitions`, `--records`, `--value`)."""
    global PARTITIONS, RECORDS, VALUE, _BODY
    PARTITIONS, RECORDS, VALUE = partitions, records, value
    _BODY = b"".join(
        encode_record(offset_delta=i, key=None, value=bytes([65 + i % 26]) * VALUE)
        for i in range(RECORDS)
    )


_set_shape(PARTITIONS, RECORDS, VALUE)


class Rounds:
    """Runs rounds and times them, with `--cold`'s eviction between them (untimed)."""

    def __init__(self) -> None:
        self.junk = bytearray()
        self.spent = 0.0

    def set_cold(self, mib: int) -> None:
        self.junk = bytearray(mib * 1024 * 1024)

    def evict(self) -> None:
        junk = self.junk
        for i in range(0, len(junk), 64):
            junk[i] ^= 1

    def timed(self, step: Callable[[], Any]) -> Any:
        if self.junk:
            self.evict()
        started = time.perf_counter()
        try:
            return step()
        finally:
            self.spent += time.perf_counter() - started

    async def timed_async(self, step: Callable[[], Awaitable[Any]]) -> Any:
        if self.junk:
            self.evict()
        started = time.perf_counter()
        try:
            return await step()
        finally:
            self.spent += time.perf_counter() - started


ROUNDS = Rounds()


def batch(base_offset: int, seq: int, leader_epoch: int = 0) -> bytes:
    return build_batch(
        base_offset=base_offset,
        records=_BODY,
        record_count=RECORDS,
        last_offset_delta=RECORDS - 1,
        base_timestamp=1_700_000_000_000,
        max_timestamp=1_700_000_000_000,
        producer_id=PID,
        producer_epoch=0,
        base_sequence=seq,
        partition_leader_epoch=leader_epoch,
    )


def cluster_config(root: Path, node_id: int) -> BrokerConfig:
    return BrokerConfig(
        {
            "log.dirs": str(root),
            "etcd.connect": "http://127.0.0.1:1",  # never contacted: clustered mode only
            "node.id": str(node_id),
        }
    )


def _state() -> ReplicaView:
    return ReplicaView(1, 0, (1, 2, 3), 0, (1, 2, 3), 1)


# -- follower -----------------------------------------------------------------------------------


class _FakeWriter:
    def write(self, data: bytes) -> None:
        pass

    async def drain(self) -> None:
        pass

    def close(self) -> None:
        pass


class _FakeReader:
    """Answers each request with the next prepared Fetch response body."""

    def __init__(self, channel: BrokerChannel, loop: asyncio.AbstractEventLoop) -> None:
        self.channel = channel
        self.bodies: list[bytes] = []
        self.loop = loop
        self._frame = b""

    async def readexactly(self, n: int) -> bytes:
        if n == 4 and not self._frame:
            body = self.bodies.pop(0)
            self._frame = struct.pack(">i", self.channel._correlation) + b"\x00" + body
            return struct.pack(">i", len(self._frame))
        frame, self._frame = self._frame, b""
        assert len(frame) == n
        return frame


class _FakeConn:
    """The same answers for a channel on a `PeerConnection` (since issue 15's eighth round)."""

    def __init__(self, channel: BrokerChannel, loop: asyncio.AbstractEventLoop) -> None:
        self.channel = channel
        self.bodies: list[bytes] = []
        self.loop = loop  # PeerConnection keeps its loop (get_running_loop costs a getpid)

    async def send(self, data: bytes) -> None:
        pass

    async def answer(self) -> bytes:
        return struct.pack(">i", self.channel._correlation) + b"\x00" + self.bodies.pop(0)

    def close(self) -> None:
        pass


def fetch_response_body(offsets: list[int], round_: int, session_id: int = 0) -> bytes:
    parts = [
        {
            "partition_index": p,
            "error_code": 0,
            "high_watermark": offsets[p],
            "last_stable_offset": offsets[p],
            "log_start_offset": 0,
            "aborted_transactions": None,
            "preferred_read_replica": -1,
            "records": batch(offsets[p], round_ * RECORDS),
        }
        for p in range(PARTITIONS)
    ]
    answer = {
        "throttle_time": 0,
        "error_code": 0,
        "session_id": session_id,
        "responses": [{"topic": TOPIC, "partitions": parts}],
    }
    pieces = encode_response_body(1, FETCH_V, answer)
    assert pieces is not None
    return b"".join(bytes(p) for p in pieces)  # type: ignore[arg-type]


def follower_step(
    root: Path, rounds: int, warmup: int, idle: int = 0, session: bool = False
) -> tuple[Callable[[], Any], Callable[[], None]]:
    replicas = ReplicaManager(cluster_config(root, 2), ManualClock())
    replicas.startup()
    replicas.apply_topic(TOPIC, uuid.uuid4(), ((1, 2, 3),) * PARTITIONS, {}, False)
    if idle:
        replicas.apply_topic(IDLE_TOPIC, uuid.uuid4(), ((1, 2, 3),) * idle, {}, False)
    parts = []
    tps = [TopicPartition(TOPIC, p) for p in range(PARTITIONS)]
    for tp in tps + [TopicPartition(IDLE_TOPIC, p) for p in range(idle)]:
        replicas.apply_partition_state(tp, _state())
        replica = replicas.replicas_by_tp[tp]
        assert replica.follower is not None
        replica.follower.move(FollowerPhase.FETCHING)
        parts.append(replica)
    fetcher = ReplicaFetcher(replicas, lambda _id: ("127.0.0.1", 1))
    channel = BrokerChannel(1, "127.0.0.1", 1, 30.0, "bench-fetcher")
    loop = asyncio.new_event_loop()
    reader: _FakeReader | _FakeConn
    if hasattr(channel, "_conn"):
        reader = channel._conn = _FakeConn(channel, loop)  # type: ignore[assignment]
    else:  # older commits: asyncio streams
        reader = _FakeReader(channel)
        channel._reader = reader  # type: ignore[attr-defined]
        channel._writer = _FakeWriter()  # type: ignore[attr-defined]
    # The leader's answers carry the busy partitions only: in a session (`session`, id 1 from
    # the first answer on) the idle ones are then left out of the requests too.
    for r in range(warmup + rounds):
        reader.bodies.append(fetch_response_body([r * RECORDS] * PARTITIONS, r, int(session)))

    # The fetcher's round: since fetch sessions a `_Link` per leader and `_round`; older
    # commits fetch a list of replicas.
    if hasattr(fetcher, "_round"):
        from oncelog.server.replica_fetcher import _Link

        link = fetcher._links[1] = _Link(fetcher.partition_max_bytes)
        link.following.update(r.tp for r in parts)
        link.dirty.update(link.following)

        async def one_round() -> None:
            await fetcher._round(channel, 1, link)

    else:

        async def one_round() -> None:
            await fetcher._fetch(channel, parts)

    async def run(n: int) -> None:
        for _ in range(n):
            await one_round()

    loop.run_until_complete(run(warmup))

    async def run_timed(n: int) -> None:
        for _ in range(n):
            await ROUNDS.timed_async(one_round)

    def measured() -> None:
        loop.run_until_complete(run_timed(rounds))

    def check() -> None:
        ends = {r.log.log_end_offset for r in parts[:PARTITIONS]}
        assert ends == {(warmup + rounds) * RECORDS}, ends
        loop.close()
        replicas.shutdown()

    return measured, check


# -- leader ---------------------------------------------------------------------------------------


class _Leader:
    """Broker 1's services (as the server builds them), leading the 6 partitions."""

    def __init__(self, root: Path) -> None:
        self.clock = ManualClock()
        config = cluster_config(root, 1)
        self.to_wake: set[Hashable] = set()
        core = assemble(config, self.clock, ServerHooks(wake=self.to_wake.update))
        self.replicas = core.replicas
        self.replicas.startup()
        core.groups.startup()
        core.txns.startup()
        self.replicas.producer_ids.add_block(PID, 1000)
        self.replicas.apply_topic(TOPIC, uuid.uuid4(), ((1, 2, 3),) * PARTITIONS, {}, False)
        for p in range(PARTITIONS):
            self.replicas.apply_partition_state(TopicPartition(TOPIC, p), _state())
        self.dispatcher = Dispatcher(core.context(Node(1, "127.0.0.1", 9092)))
        self.purgatory = Purgatory()
        self.finish: dict[int, Callable[[Any], Any]] = {}
        self.correlation = 0
        self.answers = 0

    def frame(self, api_key: int, version: int, body: dict[str, Any]) -> bytes:
        self.correlation += 1
        client = b"bench"
        header = struct.pack(">hhih", api_key, version, self.correlation, len(client)) + client
        return header + b"\x00" + encode_entity(build(request_class(api_key, version), body))

    def fetch_frame(
        self, replica_id: int, offset: int, session_id: int = 0, epoch: int = -1
    ) -> bytes:
        """A follower's fetch of every busy partition at `offset`; by default without a
        session (`session_id` 0, `epoch` -1; epoch 0 opens one)."""
        partitions = [
            {
                "partition": p,
                "current_leader_epoch": 0,
                "fetch_offset": offset,
                "last_fetched_epoch": -1,
                "log_start_offset": 0,
                "partition_max_bytes": 1048576,
            }
            for p in range(PARTITIONS)
        ]
        return self.frame(
            1,
            FETCH_V,
            {
                "replica_id": replica_id,
                "max_wait": 500,
                "min_bytes": 1,
                "max_bytes": 10485760,
                "isolation_level": 0,
                "session_id": session_id,
                "session_epoch": epoch,
                "topics": [{"topic": TOPIC, "partitions": partitions}],
                "forgotten_topics_data": [],
                "rack_id": "",
            },
        )

    def produce_frame(self, round_: int) -> bytes:
        partitions = [
            {"index": p, "records": batch(0, round_ * RECORDS)} for p in range(PARTITIONS)
        ]
        return self.frame(
            0,
            PRODUCE_V,
            {
                "transactional_id": None,
                "acks": -1,
                "timeout": 30000,
                "topic_data": [{"name": TOPIC, "partition_data": partitions}],
            },
        )

    def dispatch(self, frame: bytes) -> None:
        outcome = self.dispatcher.dispatch(frame, "conn")
        if isinstance(outcome, Reply):
            self.answers += 1
            return
        assert isinstance(outcome, Pending), outcome
        self.purgatory.watch(outcome.delayed)
        self.finish[id(outcome.delayed)] = outcome.finish

    def wake(self) -> None:
        """The server's `_wake_pending`: complete what the appends / HW moves released."""
        keys = list(self.to_wake)
        self.to_wake.clear()
        for op, response in self.purgatory.on_append(keys):
            self.finish.pop(id(op))(response)
            self.answers += 1


def _park_followers(leader: _Leader, session: bool) -> dict[int, int]:
    """Followers 2 and 3 parked at the log end, as in steady state; with `session` each one's
    first fetch opens a fetch session (its id returned) and the later ones are incremental in
    it, as the replica fetcher's are (every busy partition moved, so each is named again)."""
    sessions: dict[int, int] = {}
    for follower in (2, 3):
        cache = getattr(leader.dispatcher.broker, "fetch_sessions", None)
        before = set(cache._sessions) if session and cache is not None else set()
        leader.dispatch(leader.fetch_frame(follower, 0, epoch=0 if session else -1))
        if session:
            assert cache is not None, "this commit has no fetch sessions"
            (sessions[follower],) = set(cache._sessions) - before
    return sessions


def leader_steps(
    root: Path, rounds: int, warmup: int, which: str, session: bool = False, consumer: bool = False
) -> tuple[Callable[[], Any], Callable[[], None]]:
    leader = _Leader(root)
    if consumer:  # a consumer's fetch (no session) parked at the log end, as a tailing consumer's
        leader.dispatch(leader.fetch_frame(-1, 0))
    sessions = _park_followers(leader, session)
    produces = [leader.produce_frame(r) for r in range(warmup + rounds)]

    def next_fetch(follower: int, r: int) -> bytes:
        if not session:
            return leader.fetch_frame(follower, (r + 1) * RECORDS)
        return leader.fetch_frame(follower, (r + 1) * RECORDS, sessions[follower], r + 1)

    fetches = [(next_fetch(2, r), next_fetch(3, r)) for r in range(warmup + rounds)]
    consumes = [leader.fetch_frame(-1, (r + 1) * RECORDS) for r in range(warmup + rounds)]

    def produce(r: int) -> None:
        leader.dispatch(produces[r])

    def replicate(r: int) -> None:
        leader.wake()  # the append releases both parked fetches: 6 batches each
        f2, f3 = fetches[r]
        leader.dispatch(f2)  # at the new end: parks
        leader.dispatch(f3)  # moves the HW: the produce completes on the next wake
        leader.wake()  # and the consumer's parked fetch gets the new records
        if consumer:
            leader.dispatch(consumes[r])  # its next fetch, at the new HW: parks

    def run(lo: int, hi: int, part: str) -> None:
        for r in range(lo, hi):
            if part == "leader-produce":
                ROUNDS.timed(lambda r=r: operator.call(produce, r))
                replicate(r)
            elif part == "leader-fetch":
                produce(r)
                ROUNDS.timed(lambda r=r: operator.call(replicate, r))
            else:
                produce(r)
                replicate(r)

    run(0, warmup, "")
    answers_before = leader.answers

    def measured() -> None:
        run(warmup, warmup + rounds, which)

    def check() -> None:
        # Per round: 2 fetch answers with data, the produce answer (and the consumer's).
        expected = (4 if consumer else 3) * rounds
        assert leader.answers - answers_before == expected, leader.answers - answers_before
        for p in range(PARTITIONS):
            plog = leader.replicas.partition(TopicPartition(TOPIC, p))
            assert plog.high_watermark == (warmup + rounds) * RECORDS
        leader.replicas.shutdown()

    return measured, check


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("step", choices=("follower", "leader-fetch", "leader-produce"))
    parser.add_argument("--rounds", type=int, default=50)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--profile", help="write a cProfile of the measured part here")
    parser.add_argument(
        "--idle", type=int, default=0, help="follower: this many more partitions, never written"
    )
    parser.add_argument(
        "--session",
        action="store_true",
        help="follower: the leader's answers open a fetch session (id 1); leader steps: the "
        "followers fetch in sessions",
    )
    parser.add_argument(
        "--consumer",
        action="store_true",
        help="leader steps: a consumer's fetch waits at the log end too, is answered when the "
        "high watermark moves and fetches again (counted in leader-fetch)",
    )
    parser.add_argument(
        "--cold",
        type=int,
        default=0,
        metavar="MIB",
        help="between rounds, write a buffer of this many MiB (caches left cold, untimed)",
    )
    parser.add_argument("--partitions", type=int, default=PARTITIONS, help="busy partitions")
    parser.add_argument("--records", type=int, default=RECORDS, help="records per batch")
    parser.add_argument("--value", type=int, default=VALUE, help="bytes per record value")
    args = parser.parse_args()
    _set_shape(args.partitions, args.records, args.value)
    ROUNDS.set_cold(args.cold)
    with tempfile.TemporaryDirectory(prefix="replication-cpu-") as tmp:
        if args.step == "follower":
            measured, check = follower_step(
                Path(tmp), args.rounds, args.warmup, args.idle, args.session
            )
            wrapped = lambda: operator.call(measured)  # noqa: E731
        else:
            measured, check = leader_steps(
                Path(tmp), args.rounds, args.warmup, args.step, args.session, args.consumer
            )
            wrapped = measured  # the steps wrap their own parts
        profiler = cProfile.Profile() if args.profile else None
        started = time.perf_counter()
        if profiler is not None:
            profiler.enable()
        wrapped()
        if profiler is not None:
            profiler.disable()
            profiler.dump_stats(args.profile)
        elapsed = time.perf_counter() - started
        check()
    cold = f", {ROUNDS.spent / args.rounds * 1e6:.0f} us/round cold ({args.cold} MiB)"
    print(
        f"{args.step}: {args.rounds} rounds, {elapsed / args.rounds * 1e6:.0f} us/round wall"
        f"{cold if args.cold else ''} (divide callgrind's count by {args.rounds})",
        file=sys.stderr,
    )


if __name__ == "__main__":
    main()
