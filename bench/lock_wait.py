"""How long a contended ``FileLock`` makes its waiters wait: in the kernel (the main thread's
``flock`` bounded by a ``SIGALRM`` timer, as ``FileLock`` waits) against polling.

    PYTHONPATH=src .venv/bin/python bench/lock_wait.py [--procs 16] [--cycles 150] [--hold-ms 1]
        [--rounds 3] [--other-python /tmp/libvenv/bin/python]   # an interpreter with filelock

``--procs`` processes, released at once, each take one lock ``--cycles`` times: wait for it,
hold it ``--hold-ms`` (a state change's read, write and fsync), release it and ask again at
once: the saturated case in which tests/agent/test_concurrency.py's sixteen writers run. Every
wait is timed (the waits here never give up); one over 2 s would have timed out in a hook
(``hook_lock_timeout``), one over 10 s anywhere (``lock_timeout``).
Strategies, interleaved round by round:

- ``kernel``: ``FileLock`` as it is (main thread: a blocking ``flock`` and a one-shot
  ``ITIMER_REAL``);
- ``poll``: ``FileLock`` polling, as it does outside the main thread (non-blocking ``flock``,
  jittered sleeps from 0.5 ms doubling to 5 ms);
- ``filelock``: the ``filelock`` library's ``UnixFileLock`` (non-blocking ``flock`` every
  ``poll_interval``, 50 ms by default) and ``filelock-1ms`` (``poll_interval=0.001``), with
  ``--other-python``.

Prints per strategy: waits p50, p99 and the longest (over all rounds), locks taken per second
(median of the rounds), and how many waits went over 2 s and over 10 s.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

CHILD = r"""
import sys, time
mode, path, cycles, hold = sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4]) / 1000
if mode in ("kernel", "poll"):
    from phoenix_protocol.core import _durable
    if mode == "poll":
        _durable._wait_blocking = lambda fd, timeout: None  # what FileLock does off the main thread
    lock = _durable.FileLock(path, timeout=3600)
    acquire, release = lock.acquire, lock.release
else:
    from filelock import UnixFileLock
    lock = UnixFileLock(path + ".lock", poll_interval=0.05 if mode == "filelock" else 0.001)
    acquire, release = (lambda: lock.acquire(timeout=3600)), lock.release
print("ready", flush=True)
sys.stdin.readline()
waits = []
for _ in range(cycles):
    start = time.monotonic()
    acquire()
    waits.append(time.monotonic() - start)
    time.sleep(hold)
    release()
print(" ".join(f"{w:.6f}" for w in waits), flush=True)
"""


def run_round(python: str, mode: str, procs: int, cycles: int, hold_ms: float) -> tuple[list[float], float]:
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "state.json")
        children = [
            subprocess.Popen(
                [python, "-c", CHILD, mode, path, str(cycles), str(hold_ms)],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            for _ in range(procs)
        ]
        for child in children:
            assert child.stdout is not None and child.stdin is not None
            line = child.stdout.readline()
            if line != "ready\n":
                raise RuntimeError(f"{mode}: {child.communicate()[1][-1500:]}")
        start = time.monotonic()
        for child in children:
            assert child.stdin is not None
            child.stdin.write("go\n")
            child.stdin.flush()
        waits: list[float] = []
        for child in children:
            out, err = child.communicate(timeout=3600)
            if child.returncode != 0:
                raise RuntimeError(f"{mode}: {err[-1500:]}")
            waits += [float(w) for w in out.split()]
        elapsed = time.monotonic() - start
    return waits, len(waits) / elapsed


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--procs", type=int, default=16)
    parser.add_argument("--cycles", type=int, default=150)
    parser.add_argument("--hold-ms", type=float, default=1.0)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--other-python", default=None, help="an interpreter with filelock installed")
    args = parser.parse_args()
    modes = [("kernel", sys.executable), ("poll", sys.executable)]
    if args.other_python:
        modes += [("filelock", args.other_python), ("filelock-1ms", args.other_python)]
    waits: dict[str, list[float]] = {m: [] for m, _ in modes}
    rates: dict[str, list[float]] = {m: [] for m, _ in modes}
    for _ in range(args.rounds):
        for mode, python in modes:
            w, rate = run_round(python, mode, args.procs, args.cycles, args.hold_ms)
            waits[mode] += w
            rates[mode].append(rate)
    print(
        f"{args.procs} processes x {args.cycles} locks, held {args.hold_ms:g} ms, {args.rounds} rounds "
        f"({os.cpu_count()} CPUs)\n"
    )
    print("| strategy | wait p50 (ms) | p99 (ms) | longest (ms) | locks/s | waits > 2 s | > 10 s |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for mode, _ in modes:
        w = sorted(waits[mode])
        p99 = w[min(len(w) - 1, int(len(w) * 0.99))]
        over2, over10 = sum(1 for x in w if x > 2), sum(1 for x in w if x > 10)
        print(
            f"| {mode} | {statistics.median(w) * 1000:.1f} | {p99 * 1000:.0f} | {w[-1] * 1000:.0f} | "
            f"{statistics.median(rates[mode]):.0f} | {over2} | {over10} |"
        )


if __name__ == "__main__":
    main()
