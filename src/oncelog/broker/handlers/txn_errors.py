"""Error codes of the transactional APIs by request version (KIP-588).

PRODUCER_FENCED exists from InitProducerId v4 and AddPartitionsToTxn, AddOffsetsToTxn and
EndTxn v2; older versions (aiokafka sends v0) know a fenced producer only as
INVALID_PRODUCER_EPOCH, and a client that meets an unknown code fails instead of stopping as
fenced. TxnOffsetCommit has no PRODUCER_FENCED at any version.
"""

from __future__ import annotations

from oncelog.errors import ErrorCode

#: First version of each API (by key) that may answer PRODUCER_FENCED.
PRODUCER_FENCED_SINCE = {22: 4, 24: 2, 25: 2, 26: 2}


def for_version(code: ErrorCode, api_key: int, version: int) -> ErrorCode:
    """`code` as a client of this `version` of `api_key` understands it."""
    if code == ErrorCode.producer_fenced and version < PRODUCER_FENCED_SINCE.get(api_key, 99):
        return ErrorCode.invalid_producer_epoch
    return code
