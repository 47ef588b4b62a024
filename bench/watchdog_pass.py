"""One watchdog pass over a home with 1,000 agents (target: at most 1 s).

    .venv/bin/python bench/watchdog_pass.py [--agents 1000] [--passes 7] [--act-passes 5]

Builds a home (in a temporary directory) whose agents are a mix of what a fleet looks like:

* idle agents (a session that ended);
* working agents whose process is alive: this benchmark's own PID with its real start time
  (``_process.identity_of(os.getpid())``), each with a ring of 30 recent actions for the drift
  detectors; a few of them drifting (the same call again and again);
* working agents whose process is gone: a PID that does not exist, or this process's PID with
  another start time (PID reuse); most heartbeats recent (``grace``), a few past the grace;
* agents recorded on another host (judged by heartbeat; a few silent for more than an hour);
* working agents with no process recorded.

Then times ``run_pass(home, clock=...)`` (each pass opens every agent, as ``phx watchdog`` does):
``act=False`` passes (read-only: every agent judged, nothing written), and ``act=True`` passes on a
fresh copy of the home each time (copying is not timed), so that every timed pass marks the
stalled agents (state change, ops event, recovery checkpoint) and runs the emergency recovery of
the drifting ones. Prints Markdown and writes ``bench/results/watchdog_pass.md``.
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

from phoenix_protocol.core._clock import ManualClock
from phoenix_protocol.core._home import Home
from phoenix_protocol.core._process import hostname, identity_of
from phoenix_protocol.services._agent import Agent
from phoenix_protocol.services._watchdog import WatchdogReport, run_pass

HERE = Path(__file__).resolve().parent
MINUTE = 60_000


def _mix(n: int) -> list[str]:
    """The kinds of agents, in proportions of a 1,000-agent fleet."""
    shares = (
        ("idle", 0.40),
        ("alive", 0.33),
        ("alive_drifting", 0.01),
        ("dead_in_grace", 0.07),
        ("dead_stalled", 0.01),
        ("reused_pid_in_grace", 0.02),
        ("reused_pid_stalled", 0.01),
        ("remote", 0.09),
        ("remote_stale", 0.01),
        ("unknown", 0.05),
    )
    kinds = [kind for kind, share in shares for _ in range(round(share * n))]
    kinds += ["alive"] * (n - len(kinds))
    return kinds[:n]


def _dead_pids(count: int) -> list[int]:
    try:
        with open("/proc/sys/kernel/pid_max", encoding="ascii") as f:
            top = int(f.read().strip())
    except (OSError, ValueError):
        top = 32768
    import psutil

    pids: list[int] = []
    pid = top - 1
    while len(pids) < count and pid > 300:
        if not psutil.pid_exists(pid):
            pids.append(pid)
        pid -= 1
    return pids


def _ring(now: int, k: int, drifting: bool) -> list[list[Any]]:
    """30 recent actions ([ts, tool, digest, ok, duration, progress]), oldest first."""
    out: list[list[Any]] = []
    for j in range(30):
        ts = now - (30 - j) * 20_000
        if drifting and j >= 24:
            out.append([ts, "Bash", "same0000digest00", False, 900, False])
        elif j % 6 == 5:
            out.append([ts, "Edit", f"edit{k:05d}{j:02d}0000"[:16], True, 120, True])
        else:
            tool = ("Read", "Grep", "Bash", "Glob")[j % 4]
            out.append([ts, tool, f"{k:06d}{j:04d}abcdef"[:16], True, 200 + (j * 7919 + k) % 900, False])
    return out


def build_home(root: str, n: int, now: int) -> Counter[str]:
    home = Home(root)
    clock = ManualClock(now)
    me = identity_of(os.getpid())
    if me is None:
        raise SystemExit("cannot read this process's identity")
    kinds = _mix(n)
    dead = iter(_dead_pids(sum(k.startswith("dead") for k in kinds)))
    here = hostname()
    for k, kind in enumerate(kinds):
        agent_id = f"agent-{k:04d}"
        stale = kind.endswith("stalled") or kind == "remote_stale"
        clock.set(now - (90 * MINUTE if stale else 10_000))
        agent = Agent.open(agent_id, home=home, clock=clock)
        process: dict[str, Any] | None
        if kind.startswith(("alive", "idle")):
            process = {"pid": me.pid, "start_time": me.start_time, "host": here}
        elif kind.startswith("dead"):
            process = {"pid": next(dead), "start_time": me.start_time, "host": here}
        elif kind.startswith("reused_pid"):
            process = {"pid": me.pid, "start_time": me.start_time - 3600.0, "host": here}
        elif kind.startswith("remote"):
            process = {"pid": 4242, "start_time": me.start_time, "host": "build-07.example.internal"}
        else:
            process = None
        session = f"session-{k:04d}"
        agent.state.start_session(session, process=process)
        agent.state.set_status("working", f"task {k}", session_id=session)
        if kind.startswith("alive"):
            ring = _ring(clock.now_ms(), k, kind == "alive_drifting")

            def mutate(state: Any, ring: list[list[Any]] = ring) -> list[Any]:
                state.recent_actions = ring
                state.last_progress_ms = max(a[0] for a in ring if a[5])
                return []

            agent.state.change(mutate)
        if kind == "idle":
            agent.state.end_session(session)
    return Counter(kinds)


def _time_pass(home: Home, clock: ManualClock, act: bool) -> tuple[float, WatchdogReport]:
    started = time.perf_counter()
    report = run_pass(home, clock=clock, act=act)
    return time.perf_counter() - started, report


def _fmt(values: list[float]) -> str:
    return f"{statistics.median(values) * 1000:.0f} ms (max {max(values) * 1000:.0f} ms)"


def _machine() -> str:
    model = ""
    try:
        with open("/proc/cpuinfo", encoding="ascii", errors="replace") as f:
            model = next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), "")
    except OSError:
        pass
    return f"{platform.system()} {platform.machine()}, {os.cpu_count()} cores ({model or 'unknown CPU'}), Python {platform.python_version()}"


def _commit() -> str:
    try:
        out = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=HERE, capture_output=True, text=True, check=False
        )
        return out.stdout.strip() or "unknown"
    except OSError:
        return "unknown"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Time one watchdog pass over a home with many agents.")
    parser.add_argument("--agents", type=int, default=1000)
    parser.add_argument("--passes", type=int, default=7, help="act=False passes")
    parser.add_argument("--act-passes", type=int, default=5, help="act=True passes, each on a fresh copy")
    parser.add_argument("--out", default=str(HERE / "results" / "watchdog_pass.md"))
    args = parser.parse_args(argv)

    tmp = tempfile.mkdtemp(prefix="phx-watchdog-bench-")
    try:
        template = os.path.join(tmp, "template")
        now = int(time.time() * 1000)
        t0 = time.perf_counter()
        mix = build_home(template, args.agents, now)
        setup = time.perf_counter() - t0
        size = sum(len(files) for _, _, files in os.walk(template))
        clock = ManualClock(now)

        read_only: list[float] = []
        verdicts: Counter[str] = Counter()
        drifting = 0
        for _ in range(args.passes):
            elapsed, report = _time_pass(Home(template), clock, act=False)
            read_only.append(elapsed)
            verdicts = Counter(v.verdict for v in report.verdicts)
            drifting = sum(v.drift is not None for v in report.verdicts)

        acting: list[float] = []
        actions: Counter[str] = Counter()
        for p in range(args.act_passes):
            copy = os.path.join(tmp, f"act-{p}")
            shutil.copytree(template, copy)
            elapsed, report = _time_pass(Home(copy), clock, act=True)
            acting.append(elapsed)
            actions = Counter(v.action for v in report.verdicts if v.action)
            shutil.rmtree(copy)
        # The pass after an acting one: what is already marked is left alone.
        after = os.path.join(tmp, "after")
        shutil.copytree(template, after)
        run_pass(Home(after), clock=clock, act=True)
        again, _ = _time_pass(Home(after), clock, act=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)

    target = 1.0
    lines = [
        "## Watchdog: one pass over 1,000 agents",
        "",
        "```sh",
        ".venv/bin/python bench/watchdog_pass.py" + ("" if args.agents == 1000 else f" --agents {args.agents}"),
        "```",
        "",
        f"**{time.strftime('%Y-%m-%d')}**, {_machine()}, phoenix-protocol commit {_commit()}. "
        f"Home: {args.agents:,} agents, {size:,} files, built in {setup:.1f} s (not timed).",
        "",
        "Mix: " + ", ".join(f"{k} {n}" for k, n in mix.items()) + ". Live agents are this benchmark's own "
        "process (its PID and real start time), so liveness is a real `psutil` check; dead ones have a PID "
        "that does not exist or this PID with another start time (reuse).",
        "",
        "| pass | passes | median (max) | target | verdicts / actions |",
        "|---|---:|---:|---|---|",
        f"| `run_pass(act=False)`: judge every agent, write nothing | {len(read_only)} | {_fmt(read_only)} "
        f"| <= 1 s: **{'pass' if max(read_only) <= target else 'miss'}** | "
        + ", ".join(f"{k} {n}" for k, n in sorted(verdicts.items()))
        + f"; drift seen in {drifting} |",
        f"| `run_pass(act=True)` on a fresh copy: mark the stalled, recover the drifting | {len(acting)} "
        f"| {_fmt(acting)} | <= 1 s: **{'pass' if max(acting) <= target else 'miss'}** | "
        + ", ".join(f"{k} {n}" for k, n in sorted(actions.items()))
        + " |",
        f"| `run_pass(act=True)` again, right after (all already handled) | 1 | {again * 1000:.0f} ms | | |",
        "",
        "Each pass opens every agent (`Agent.open`, configuration included) and reads its `state.json`, as "
        "`phx watchdog` does; *max* is the slowest pass, the first included (no warm-up).",
    ]
    text = "\n".join(lines)
    print(text)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(text + "\n", encoding="utf-8")
    print(f"\nwritten to {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
