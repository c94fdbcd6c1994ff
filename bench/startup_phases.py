"""Where a broker start goes: the three start-up phases, timed in one process on a copy of a
data dir (issue 11's restart time).

    .venv/bin/python bench/startup_phases.py DATA_DIR [--crashed] [--profile OUT.pstats]

The data dir is copied first (the original is never touched). `--crashed` makes the copy look
like a SIGKILL straight after its last write: no clean-shutdown marker, no producer snapshot
past each partition's last rolled segment, recovery points back at the last roll. That is the
worst a SIGKILL can leave, since the broker moves recovery points and writes snapshots at
rolls (and, since issue 11, at each periodic checkpoint).

The broker is built as `oncelog serve` builds it (`BrokerServer`), with the cleaner off; each
phase (`replicas.startup`, `groups.startup`, `txns.startup`) is timed in wall and CPU
seconds. `--profile` writes a cProfile of the three phases together.
"""

from __future__ import annotations

import argparse
import cProfile
import shutil
import sys
import tempfile
import time
from pathlib import Path


def _crash_copy(data: Path) -> None:
    """Remove what a clean stop leaves that a SIGKILL would not have written."""
    from oncelog.producer_state.snapshot import list_snapshots, snapshot_path
    from oncelog.storage.files import read_offset_checkpoint, write_offset_checkpoint
    from oncelog.storage.log_manager import CLEAN_SHUTDOWN_FILE, RECOVERY_POINT_FILE

    (data / CLEAN_SHUTDOWN_FILE).unlink(missing_ok=True)
    points = read_offset_checkpoint(data / RECOVERY_POINT_FILE)
    for topic, partition in list(points):
        directory = data / f"{topic}-{partition}"
        bases = sorted(int(p.name[:-4]) for p in directory.glob("*.log") if p.name[:-4].isdigit())
        last_roll = bases[-1] if bases else 0
        points[topic, partition] = min(points[topic, partition], last_roll)
        for offset in list_snapshots(directory):
            if offset > last_roll:
                snapshot_path(directory, offset).unlink()
    write_offset_checkpoint(data / RECOVERY_POINT_FILE, points)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("data_dir", type=Path)
    parser.add_argument("--crashed", action="store_true", help="as after a SIGKILL (see above)")
    parser.add_argument("--profile", type=Path, help="write a cProfile of the start here")
    args = parser.parse_args()

    t0 = time.perf_counter()
    from oncelog.config import BrokerConfig
    from oncelog.server.app import BrokerServer

    imports = time.perf_counter() - t0
    with tempfile.TemporaryDirectory(prefix="oncelog-startup-") as tmp:
        data = Path(tmp) / "data"
        shutil.copytree(args.data_dir, data)
        if args.crashed:
            _crash_copy(data)
        config = BrokerConfig(
            {
                "log.dirs": str(data),
                "listeners": "PLAINTEXT://127.0.0.1:0",
                "log.cleaner.enable": "false",
            }
        )
        server = BrokerServer(config)
        profile = cProfile.Profile() if args.profile else None
        rows = [("imports", imports, imports)]
        for name, phase in (
            ("replicas.startup", server.replicas.startup),
            ("groups.startup", server.groups.startup),
            ("txns.startup", server.txns.startup),
        ):
            w, c = time.perf_counter(), time.process_time()
            if profile is not None:
                profile.enable()
            phase()
            if profile is not None:
                profile.disable()
            rows.append((name, time.perf_counter() - w, time.process_time() - c))
        server.replicas.logs.shutdown()
        if profile is not None:
            profile.dump_stats(str(args.profile))
    print(f"{'phase':<18} {'wall s':>8} {'cpu s':>8}")
    for name, wall, cpu in rows:
        print(f"{name:<18} {wall:8.3f} {cpu:8.3f}")
    total = sum(r[1] for r in rows)
    print(f"{'total':<18} {total:8.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
