"""System CPU of writing to the page cache, per KiB, by write size: the floor under
oncelog's produce path (the mock cluster keeps data in memory and does not pay it).

    .venv/bin/python bench/page_cache_write.py [--mib 512] [--files 64] [--dir DIR]

Writes round-robin into `--files` files opened with O_APPEND (as segments are), no fsync,
three runs per size; prints CPU microseconds per KiB (user + system, from getrusage).
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import tempfile

SIZES = (4096, 16384, 65536, 262144, 1 << 20)


def cpu_us_per_kib(directory: str, chunk: int, files: int, total: int) -> float:
    fds = [
        os.open(f"{directory}/f{i}", os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND, 0o644)
        for i in range(files)
    ]
    buf = os.urandom(chunk)
    before = resource.getrusage(resource.RUSAGE_SELF)
    written = i = 0
    while written < total:
        written += os.write(fds[i % files], buf)
        i += 1
    after = resource.getrusage(resource.RUSAGE_SELF)
    for fd in fds:
        os.close(fd)
    for name in os.listdir(directory):
        os.unlink(f"{directory}/{name}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return cpu / (written / 1024) * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--mib", type=int, default=512)
    parser.add_argument("--files", type=int, default=64)
    parser.add_argument("--dir", default=None, help="where to write (default: a temp dir)")
    args = parser.parse_args()
    directory = tempfile.mkdtemp(prefix="pagecache-", dir=args.dir)
    try:
        print(f"load {os.getloadavg()[0]:.1f}; {args.files} files, {args.mib} MiB per run")
        for size in SIZES:
            runs = [cpu_us_per_kib(directory, size, args.files, args.mib << 20) for _ in range(3)]
            print(f"{size:>8} B writes: " + " ".join(f"{r:.3f}" for r in runs) + " us/KiB")
    finally:
        shutil.rmtree(directory, ignore_errors=True)


if __name__ == "__main__":
    main()
