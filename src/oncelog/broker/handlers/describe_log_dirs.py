"""DescribeLogDirs (35): per log dir, the size of each partition on this broker, as Kafka
answers it (`kafka-log-dirs.sh`, admin clients' describe_log_dirs).

Kafka's semantics: topics null means every partition; unknown topics and partitions are
simply absent; every log dir is listed, with its absolute path, even when empty. A leader's
offset_lag is 0 and there are no future logs (no AlterReplicaLogDirs). v4 adds the volume's
total and usable bytes, v5 (KIP-1066) whether a dir is cordoned, which no oncelog dir is.

oncelog adds the log cleaner's state to each partition entry of the flexible versions (v2+)
as tagged fields, which other clients skip (`oncelog.protocol.extensions`): tag 10000
`dirty_ratio` (float64, compacted topics only) and tag 10001 `last_clean_time_ms` (int64,
once the partition has been cleaned since the broker started).
"""

from __future__ import annotations

import os
from collections import defaultdict
from pathlib import Path
from typing import Any

from oncelog.broker import authz
from oncelog.broker.context import RequestContext
from oncelog.broker.handlers.types import DescribeLogDirsAnswer, DescribeLogDirsRequest
from oncelog.errors import ErrorCode
from oncelog.security.acl import AclOperation as Op
from oncelog.storage.partition_log import PartitionLog


def handle(ctx: RequestContext, request: DescribeLogDirsRequest) -> DescribeLogDirsAnswer:
    if not authz.authorize_cluster(ctx, Op.DESCRIBE):
        return {
            "throttle_time": 0,
            "error_code": ErrorCode.cluster_authorization_failed,
            "results": [],
        }
    wanted: dict[str, set[int]] | None = None
    if request.topics is not None:
        wanted = defaultdict(set)
        for t in request.topics:
            wanted[t.topic].update(t.partitions)
    by_dir: dict[Path, dict[str, list[dict[str, Any]]]] = {
        Path(d): defaultdict(list) for d in ctx.broker.config.log_dirs
    }
    for tp, plog in ctx.broker.replicas.logs.partitions():
        if wanted is not None and tp.partition not in wanted.get(tp.topic, ()):
            continue
        by_dir.setdefault(plog.directory.parent, defaultdict(list))[tp.topic].append(
            _partition(tp.partition, plog)
        )
    results: list[dict[str, Any]] = []
    for log_dir, topics in by_dir.items():
        total, usable = _volume(log_dir)
        results.append(
            {
                "error_code": ErrorCode.none,
                "log_dir": os.path.abspath(log_dir),
                "topics": [
                    {"name": name, "partitions": sorted(ps, key=_index)}
                    for name, ps in sorted(topics.items())
                ],
                "total_bytes": total,
                "usable_bytes": usable,
                "is_cordoned": False,
            }
        )
    return {"throttle_time": 0, "error_code": ErrorCode.none, "results": results}


def _index(entry: dict[str, Any]) -> int:
    return int(entry["partition_index"])


def _partition(index: int, plog: PartitionLog) -> dict[str, Any]:
    return {
        "partition_index": index,
        "partition_size": plog.size_bytes,
        "offset_lag": 0,
        "is_future_key": False,
        "dirty_ratio": plog.dirty_ratio() if plog.config.compact else -1.0,
        "last_clean_time_ms": plog.last_clean_ms,
    }


def _volume(log_dir: Path) -> tuple[int, int]:
    """(total, usable) bytes of the log dir's file system, as Java's FileStore reports them;
    -1 when it cannot be read."""
    try:
        st = os.statvfs(log_dir)
    except OSError:
        return -1, -1
    return st.f_blocks * st.f_frsize, st.f_bavail * st.f_frsize
