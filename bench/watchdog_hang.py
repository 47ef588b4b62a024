"""The cost of the watchdog's hang check (issue 36), side by side in one run.

    .venv/bin/python bench/watchdog_hang.py [--agents 200] [--passes 5]

A home of ``--agents`` working agents, all mid-turn with a heartbeat 40 minutes old (past
``watchdog_hang_minutes``), whose recorded process is this benchmark's own (real liveness, real
status, a real process tree): every agent needs the CPU time of its process tree. Timed
``run_pass(act=False)`` (nothing written) three ways:

* ``shared table``: what Phoenix does, one walk of the process table per pass (``ProcessTable``);
* ``walk per agent``: the same with a new walk for every agent (what ``psutil``'s
  ``children(recursive=True)`` does on each call);
* ``no hang check``: ``watchdog_hang_minutes = 0`` (the status is still read: stopped agents).

Prints Markdown.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import tempfile
import time
from typing import Any
from unittest import mock

from phoenix_protocol.core._clock import ManualClock
from phoenix_protocol.core._home import Home
from phoenix_protocol.core._process import ProcessTable, hostname, identity_of
from phoenix_protocol.services import _watchdog
from phoenix_protocol.services._agent import Agent

MINUTE = 60_000


class _WalkEveryTime(ProcessTable):
    def children(self, pid: int) -> list[int]:
        self._children = None
        return super().children(pid)


def build(root: str, n: int, now: int) -> None:
    me = identity_of(os.getpid())
    assert me is not None
    clock = ManualClock(now - 40 * MINUTE)
    for k in range(n):
        agent = Agent.open(f"agent-{k:04d}", home=Home(root), clock=clock)
        session = f"session-{k:04d}"
        agent.state.start_session(session, process={"pid": me.pid, "start_time": me.start_time, "host": hostname()})
        agent.state.set_status("working", f"task {k}", session_id=session)
        agent.state.heartbeat(session_id=session, tool=None, turn="busy")


def timed(root: str, now: int, passes: int, **kwargs: Any) -> list[float]:
    out = []
    for _ in range(passes):
        started = time.perf_counter()
        report = _watchdog.run_pass(Home(root), clock=ManualClock(now), act=False, **kwargs)
        out.append(time.perf_counter() - started)
        assert all(v.verdict == "alive" for v in report.verdicts)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--agents", type=int, default=200)
    parser.add_argument("--passes", type=int, default=5)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="phx-hang-bench-") as tmp:
        now = int(time.time() * 1000)
        build(tmp, args.agents, now)
        config = Agent.open("agent-0000", home=Home(tmp)).config
        rows = []
        shared = timed(tmp, now, args.passes, config=config)
        with mock.patch.object(_watchdog, "ProcessTable", _WalkEveryTime):
            walking = timed(tmp, now, args.passes, config=config)
        off = timed(tmp, now, args.passes, config=config.replace({"watchdog_hang_minutes": 0}))
        for name, values in (("shared table", shared), ("walk per agent", walking), ("no hang check", off)):
            rows.append(
                f"| {name} | {statistics.median(values) * 1000:.0f} ms | {max(values) * 1000:.0f} ms | "
                f"{statistics.median(values) * 1e6 / args.agents:.0f} µs |"
            )
        processes = len(os.listdir("/proc")) if os.path.isdir("/proc") else 0
    print(f"{args.agents} agents past watchdog_hang_minutes, {args.passes} passes each, act=False")
    print(f"{platform.system()} {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}, "
          f"load {os.getloadavg()[0]:.1f}, about {processes} entries in /proc")  # fmt: skip
    print()
    print("| pass | median | max | per agent |")
    print("|---|---:|---:|---:|")
    print("\n".join(rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
