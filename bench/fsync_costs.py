"""What a durable write of a small record costs on this file system, by the way it is made.

    .venv/bin/python bench/fsync_costs.py [--size 11264] [--runs 300] [--dir DIR]

Side by side in one run, interleaved: (1) append to a log and ``fdatasync`` (Phoenix's checkpoint
log); (2) overwrite in place inside a log whose blocks already exist, then ``fdatasync`` (what
SQLite's WAL does once it has been reused; Phoenix's checkpoint log since it is reused in place);
(3) the same, with a file created (not flushed) in the log's directory before each write, as a
named checkpoint file written between two flushes of the log would be; (4) the in-place write
of (2) after a ``stat`` of the file (not timed): on Linux 6.13+ (multigrain timestamps) a query of
a file's times makes its next write record a fine-grained modification time, which the
``fdatasync`` then commits through the journal (why Phoenix's checkpoint log is never ``stat``-ed,
``InPlaceFile.identity``); (5) create a new file, ``fsync`` it and its directory (a file per
checkpoint, durably). Used by docs/benchmarks.md to
explain the checkpoint write's floor. Medians and p90 in ms, each side's calls interleaved with the
others', then back-to-back (three in a row, the last two kept: a tight loop).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--size", type=int, default=11 * 1024, help="bytes per record (default 11264)")
    parser.add_argument("--runs", type=int, default=300)
    parser.add_argument("--dir", help="where to write (default: a temporary directory under the current one)")
    args = parser.parse_args(argv)
    work = tempfile.mkdtemp(prefix="fsync-costs-", dir=args.dir or ".")
    record = os.urandom(args.size)
    region = 4 * 1024 * 1024
    try:
        append = os.open(os.path.join(work, "append.log"), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        reused = os.open(os.path.join(work, "reused.log"), os.O_RDWR | os.O_CREAT, 0o600)
        os.write(reused, b"\0" * region)  # the blocks exist, as in a WAL that has been around once
        os.fsync(reused)
        beside = os.open(os.path.join(work, "beside.log"), os.O_RDWR | os.O_CREAT, 0o600)
        os.write(beside, b"\0" * region)
        os.fsync(beside)
        queried = os.open(os.path.join(work, "queried.log"), os.O_RDWR | os.O_CREAT, 0o600)
        os.write(queried, b"\0" * region)
        os.fsync(queried)
        dir_fd = os.open(work, os.O_RDONLY)
        counter = [0]
        timed_only = [-1.0]  # a side that times only part of its work sets this

        def do_append() -> None:
            os.write(append, record)
            os.fdatasync(append)

        def overwrite(fd: int) -> None:
            offset = (counter[0] * len(record)) % (region - len(record))
            os.pwrite(fd, record, offset)
            os.pwrite(fd, offset.to_bytes(8, "little"), 0)  # a header with the end, as a WAL keeps
            os.fdatasync(fd)

        def timed_overwrite(fd: int) -> None:
            start = time.perf_counter()
            overwrite(fd)
            timed_only[0] = (time.perf_counter() - start) * 1000

        def do_reuse() -> None:
            overwrite(reused)

        def do_reuse_beside_new_files() -> None:
            fd = os.open(os.path.join(work, f"named{counter[0]}"), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            os.write(fd, record)  # a named file written behind, without a flush
            os.close(fd)
            timed_overwrite(beside)

        def do_reuse_after_stat() -> None:
            os.fstat(queried)  # someone asked for the file's times (a reader polling its mtime)
            timed_overwrite(queried)

        def do_new_file() -> None:
            fd = os.open(os.path.join(work, f"f{counter[0]}"), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            os.write(fd, record)
            os.fsync(fd)
            os.close(fd)
            os.fsync(dir_fd)

        sides: dict[str, Callable[[], None]] = {
            "append + fdatasync (the checkpoint log)": do_append,
            "overwrite in place + fdatasync (a reused WAL)": do_reuse,
            "the same, a file created in its directory since the last flush": do_reuse_beside_new_files,
            "the same, after a `stat` of the log since its last write": do_reuse_after_stat,
            "new file + fsync + directory fsync": do_new_file,
        }
        for burst, how in ((1, "interleaved"), (3, "back-to-back (3 per turn, the last 2 kept)")):
            samples: dict[str, list[float]] = {name: [] for name in sides}
            for i in range(args.runs):
                names = list(sides)
                shift = i % len(names)
                for name in names[shift:] + names[:shift]:
                    for j in range(burst):
                        counter[0] += 1
                        timed_only[0] = -1.0
                        start = time.perf_counter()
                        sides[name]()
                        elapsed = (time.perf_counter() - start) * 1000
                        if burst == 1 or j:
                            samples[name].append(timed_only[0] if timed_only[0] >= 0 else elapsed)
            print(f"{args.runs} runs each, {args.size:,}-byte records, {how}; ms")
            print("| durable write | median | p90 |")
            print("|---|---:|---:|")
            for name, values in samples.items():
                p90 = statistics.quantiles(values, n=10)[8]
                print(f"| {name} | {statistics.median(values):.3f} | {p90:.3f} |")
            print()
        for fd in (append, reused, beside, queried, dir_fd):
            os.close(fd)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
