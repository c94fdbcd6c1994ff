"""A follower's append (`PartitionLog.append` of origin REPLICATION): the leader's batches
stored byte for byte, with their offsets and partition leader epochs.

Every complete batch is checked first (`validator.check_follower_batches`: framing, magic,
CRC32C, offsets increasing, the first not below the log end: `UnexpectedAppendOffset`
otherwise), so an error writes nothing. A partial batch at the end (a fetch cuts batches at
its size limit) is ignored. Offsets may leave gaps, as a cleaned (compacted) leader log
does. The batches roll segments as the leader's appends did, update producer state through
the same replay recovery uses (aborts are indexed in `.txnindex` as the markers arrive), and
the leader epoch cache from their partition leader epochs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from oncelog.protocol.records.batch import BatchHeader
from oncelog.storage.log_info import FollowerAppendInfo
from oncelog.storage.producer_appends import replay_appended
from oncelog.storage.validator import check_follower_batches

if TYPE_CHECKING:
    from oncelog.storage.partition_log import PartitionLog


def append_replicated(
    plog: PartitionLog, data: bytes | bytearray | memoryview
) -> FollowerAppendInfo:
    """Store what the leader sent (see the module's docstring); what was stored."""
    view = memoryview(data)
    local = plog.local
    batches, markers, valid, records, max_timestamp = check_follower_batches(
        view, plog.tp, local.segments[-1].next_offset, plog.log_start_offset
    )
    if not batches:
        return FollowerAppendInfo(-1, -1, 0, 0)
    n = len(batches)
    first = batches[0][1]
    last = batches[-1][1]
    if not local.fits_one_write(first, last, n, valid, max_timestamp):
        write_runs(plog, view, batches, markers)
    else:
        # The common case: everything goes into the active segment in one write.
        epochs = plog.leader_epoch_cache
        latest = epochs.latest_epoch
        for _, header in batches:
            if header.partition_leader_epoch > latest:
                plog.note_epoch(header.partition_leader_epoch, header.base_offset)
                latest = epochs.latest_epoch
        local.segments[-1].append([view[:valid]], batches)
        headers = [h for _, h in batches]
        if markers:
            replay_appended(plog.producer_state, headers, markers, plog.index_abort)
        else:
            plog.producer_state.replay_data(headers)
    plog.producer_state.map_end_offset = plog.log_end_offset
    local.unflushed_messages += records
    if local.unflushed_messages >= local.config.flush_messages:
        plog.flush()
    return FollowerAppendInfo(
        first.base_offset, last.base_offset + last.last_offset_delta, n, valid, records
    )


def write_runs(
    plog: PartitionLog,
    view: memoryview,
    batches: list[tuple[int, BatchHeader]],
    markers: dict[int, tuple[bool, int]],
) -> None:
    """Write a follower append run by run, rolling between them as the leader did: each
    batch rolls exactly when the leader's append of it alone would have."""
    local = plog.local
    i, n = 0, len(batches)
    while i < n:
        first = batches[i][1]
        if local.first_rolls(first):
            plog.roll(first.base_offset)
        else:
            local.replace_empty_active(first)
        j = local.run_end(batches, i)
        run = batches[i:j]
        for _, header in run:
            plog.note_epoch(header.partition_leader_epoch, header.base_offset)
        local.append_run(view, run)
        replay_appended(plog.producer_state, [h for _, h in run], markers, plog.index_abort)
        i = j
