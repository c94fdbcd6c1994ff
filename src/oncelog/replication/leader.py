"""The leader's view of one partition's replicas: follower positions, high watermark, ISR.

Theory of operation (Kafka's `Partition`, with KIP-497's rule for ISR changes in flight):

1. Each follower's Fetch tells the leader the follower's log end offset (its fetch offset).
   A follower is *caught up* at a fetch whose offset reaches the leader's log end at that
   moment; fetching up to where the leader's end was at its previous fetch counts as caught
   up as of that previous fetch (Kafka's `lastCaughtUpTimeMs`).
2. The high watermark is the smallest log end offset over the ISR, the leader's own
   included. While an ISR change is being written (a compare-and-swap in etcd) the *maximal*
   ISR counts: the old members while shrinking, the new one while expanding, so the high
   watermark never moves on a view that might not be committed.
3. An ISR member that has not been caught up for `replica.lag.time.max.ms` is proposed for
   removal (`isr_to_shrink`); a follower outside the ISR whose end reached the high
   watermark, and which has fetched in the current leader epoch, is proposed for addition
   (`isr_to_expand`). Proposals become the partition state only when the caller's CAS
   succeeds (`isr_committed`); a failed CAS means the leader's view is stale and it stops
   acting on it until the new state arrives.
4. `acks=all` waits for the high watermark; `min.insync.replicas` is checked against the
   committed ISR, as Kafka does.

No IO and no clock: `now_ms` is passed in.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(slots=True)
class FollowerReplica:
    node_id: int
    log_end_offset: int = -1
    last_caught_up_ms: int = 0
    last_fetch_ms: int = 0
    #: The leader's log end offset when this follower last fetched.
    leader_end_at_last_fetch: int = -1
    #: The leader epoch of this follower's latest fetch (-1: none in this epoch).
    fetched_in_epoch: int = -1

    def fetched_at_end(self, end: int, now_ms: int) -> None:
        """Another fetch at the leader's log end `end`, in the leader epoch of the previous
        one: what `LeaderState.on_follower_fetch` records then, for a fetch session's idle
        partition (which is not read at all)."""
        self.last_caught_up_ms = self.last_fetch_ms = now_ms
        self.log_end_offset = self.leader_end_at_last_fetch = end


@dataclass(slots=True)
class LeaderState:
    """One partition led by this broker, from the leader epoch it was elected in."""

    node_id: int
    leader_epoch: int
    replicas: tuple[int, ...]
    isr: frozenset[int]
    partition_epoch: int
    #: First offset of this leader epoch (a follower must reach it to rejoin the ISR).
    epoch_start_offset: int
    lag_time_max_ms: int
    followers: dict[int, FollowerReplica] = field(default_factory=dict)
    #: An ISR change written but not yet committed (KIP-497's pending state).
    pending_isr: frozenset[int] | None = None

    @classmethod
    def elected(
        cls,
        node_id: int,
        leader_epoch: int,
        replicas: tuple[int, ...],
        isr: tuple[int, ...],
        partition_epoch: int,
        epoch_start_offset: int,
        lag_time_max_ms: int,
        now_ms: int,
    ) -> LeaderState:
        """A new leadership: followers start as caught up now, so none is dropped before it
        had `lag_time_max_ms` to fetch (Kafka resets their times on becoming leader)."""
        followers = {
            r: FollowerReplica(r, last_caught_up_ms=now_ms if r in isr else 0)
            for r in replicas
            if r != node_id
        }
        return cls(
            node_id,
            leader_epoch,
            replicas,
            frozenset(isr),
            partition_epoch,
            epoch_start_offset,
            lag_time_max_ms,
            followers,
        )

    # -- 1. follower fetches --------------------------------------------------------------

    def on_follower_fetch(
        self, node_id: int, fetch_offset: int, leader_end: int, now_ms: int
    ) -> None:
        """Record a follower's fetch at `fetch_offset` while the leader's log ends at
        `leader_end`."""
        follower = self.followers.get(node_id)
        if follower is None:
            return
        if fetch_offset >= leader_end:
            follower.last_caught_up_ms = now_ms
        elif fetch_offset >= follower.leader_end_at_last_fetch >= 0:
            follower.last_caught_up_ms = max(follower.last_caught_up_ms, follower.last_fetch_ms)
        follower.log_end_offset = fetch_offset
        follower.last_fetch_ms = now_ms
        follower.leader_end_at_last_fetch = leader_end
        follower.fetched_in_epoch = self.leader_epoch

    # -- 2. high watermark ----------------------------------------------------------------

    @property
    def maximal_isr(self) -> frozenset[int]:
        return self.isr if self.pending_isr is None else self.isr | self.pending_isr

    def high_watermark(self, leader_end: int) -> int:
        """The smallest log end over the maximal ISR (the leader's is `leader_end`)."""
        hw = leader_end
        for node_id in self.maximal_isr:
            if node_id == self.node_id:
                continue
            follower = self.followers.get(node_id)
            end = follower.log_end_offset if follower is not None else -1
            if end < 0:
                # A member that has not fetched in this leadership yet: nothing is known to
                # be on it, so nothing new can be committed until it fetches.
                return -1
            hw = min(hw, end)
        return hw

    # -- 3. ISR changes -------------------------------------------------------------------

    def isr_to_shrink(self, leader_end: int, now_ms: int) -> frozenset[int] | None:
        """The ISR without members that lag more than `replica.lag.time.max.ms`; None when
        nobody lags or a change is already in flight."""
        if self.pending_isr is not None:
            return None
        lagging = {
            r
            for r in self.isr
            if r != self.node_id
            and (f := self.followers.get(r)) is not None
            and f.log_end_offset != leader_end
            and now_ms - f.last_caught_up_ms > self.lag_time_max_ms
        }
        if not lagging:
            return None
        return self.isr - lagging

    def isr_to_expand(self, node_id: int, high_watermark: int) -> frozenset[int] | None:
        """The ISR with `node_id` added when it caught up in this leader epoch."""
        if self.pending_isr is not None or node_id in self.isr:
            return None
        follower = self.followers.get(node_id)
        if follower is None or follower.fetched_in_epoch != self.leader_epoch:
            return None
        end = follower.log_end_offset
        if end < high_watermark or end < self.epoch_start_offset:
            return None
        return self.isr | {node_id}

    def replicas_changed(self, replicas: tuple[int, ...]) -> None:
        """A reassignment changed who replicates this partition (same leader epoch): new
        replicas are followers that have not caught up yet, removed ones are forgotten."""
        self.replicas = replicas
        self.followers = {
            r: self.followers.get(r) or FollowerReplica(r) for r in replicas if r != self.node_id
        }

    def isr_proposed(self, isr: frozenset[int]) -> None:
        self.pending_isr = isr

    def isr_committed(self, isr: frozenset[int], partition_epoch: int) -> None:
        self.isr = isr
        self.partition_epoch = partition_epoch
        self.pending_isr = None

    def isr_refused(self) -> None:
        """The CAS failed: the state moved on without us; keep the committed view."""
        self.pending_isr = None

    # -- 4. acks=all ----------------------------------------------------------------------

    def under_min_isr(self, min_insync_replicas: int) -> bool:
        return len(self.isr) < min_insync_replicas
