"""Real processes racing for a team's tasks, with SIGKILLs thrown in (seed 004, issue 4).

Eight worker processes claim tasks from one team until none is ready, finishing each one they
claim. Meanwhile the test SIGKILLs workers at random moments (in the middle of a claim, a
checkpoint, an atomic rewrite of ``metadata.json``, while holding its lock...) and restarts them
under the same name; a restarted worker first finishes whatever ``metadata.json`` says it holds.
At the end every task was claimed exactly once, by exactly one worker, and completed: none lost,
none claimed twice.

(The 8 processes × 1,000 messages mailbox race lives in ``tests/test_mailbox_races.py``.)
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

from phoenix_protocol._home import Home
from phoenix_protocol._jsonio import loads
from phoenix_protocol._teams import Team

WORKERS = 8
TASKS = 1000
KILLS = 12
KILL_PHASE_S = 25.0

# A worker: argv = home, team id, name, log path. Logs one line per event (a short write() in
# append mode: whole lines, even when the process is killed).
WORKER = r"""
import random, sys
from phoenix_protocol._errors import LockTimeoutError
from phoenix_protocol._home import Home
from phoenix_protocol._teams import ClaimConflictError, Team

home, team_id, me, log_path = sys.argv[1:5]
team = Team.open(Home(home), team_id)
rng = random.Random()
log = open(log_path, "a", buffering=1)


def retry(call, *args, **kwargs):
    while True:
        try:
            return call(*args, **kwargs)
        except LockTimeoutError:
            log.write("lock-timeout\n")


def finish(task_id):
    retry(team.done, task_id, me, check="green", files=[f"src/{task_id}.py"])
    log.write(f"done {task_id}\n")


log.write("start\n")
# Restarted after a SIGKILL: finish what metadata.json says this worker holds.
for task in retry(team.read)["tasks"]:
    if task["assigned_to"] == me and task["status"] == "in_progress":
        log.write(f"resumed {task['task_id']}\n")
        finish(task["task_id"])
while True:
    ready = retry(team.ready)
    if not ready:
        break
    task_id = rng.choice(ready[:WINDOW])["task_id"]  # a small window: workers collide often
    try:
        retry(team.claim, task_id, me)
    except ClaimConflictError:
        log.write(f"conflict {task_id}\n")
        continue
    log.write(f"claimed {task_id}\n")
    finish(task_id)
log.write("exit\n")
""".replace("WINDOW", "4")


def _start(home: Home, team_id: str, name: str, logs: Path) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-c", WORKER, home.root, team_id, name, str(logs / f"{name}.log")],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_eight_processes_claim_1000_tasks_with_sigkills(
    project: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path / "run"))
    home = Home(str(project / ".phoenix"))
    team = Team.create(home, "race", lead="lead")
    names = [f"w{i}" for i in range(WORKERS)]
    for name in names:
        team.join(name)
    for i in range(TASKS):
        team.add_task(f"task number {i}")
    logs = tmp_path / "logs"
    logs.mkdir()

    t0 = time.monotonic()
    procs = {name: _start(home, team.id, name, logs) for name in names}
    rng = random.Random(4)
    kills = 0
    errors: list[str] = []
    next_kill = time.monotonic() + rng.uniform(0.5, 2.0)
    while any(p.poll() is None for p in procs.values()):
        now = time.monotonic()
        if kills < KILLS and now >= next_kill and now - t0 < KILL_PHASE_S:
            running = [n for n, p in procs.items() if p.poll() is None]
            if running:
                victim = rng.choice(running)
                procs[victim].send_signal(signal.SIGKILL)
                _out, err = procs[victim].communicate(timeout=30)
                assert procs[victim].returncode == -signal.SIGKILL or procs[victim].returncode == 0, err
                if procs[victim].returncode == -signal.SIGKILL:
                    kills += 1
                    procs[victim] = _start(home, team.id, victim, logs)  # the same teammate, restarted
            next_kill = now + rng.uniform(0.5, 2.0)
        for name, proc in procs.items():
            if proc.poll() not in (None, 0):
                errors.append(f"{name} exited {proc.returncode}: {proc.stderr.read().decode() if proc.stderr else ''}")
        assert not errors, errors
        if time.monotonic() - t0 > 200:
            for proc in procs.values():
                proc.kill()
            pytest.fail("the race did not finish within 200 s")
        time.sleep(0.05)
    elapsed = time.monotonic() - t0
    for name, proc in procs.items():
        _out, err = proc.communicate(timeout=30)
        assert proc.returncode == 0, f"{name}: {err.decode()}"

    # metadata.json survived every kill as a whole, valid document.
    data = loads(Path(team.metadata_path).read_bytes())
    assert isinstance(data, dict) and data["schema_version"] == "1.1"
    tasks = {t["task_id"]: t for t in data["tasks"]}
    assert len(tasks) == TASKS, "a task was lost"
    assert all(t["status"] == "completed" for t in tasks.values()), [
        (t["task_id"], t["status"]) for t in tasks.values() if t["status"] != "completed"
    ]
    assert all(t["assigned_to"] in names for t in tasks.values())
    assert all(t["checkpoint"]["files_modified"] == [f"src/{tid}.py"] for tid, t in tasks.items())

    # Exactly one claim per task, by its owner: a claim that returned is logged "claimed"; a worker
    # killed between its claim and the log line finds the task its own on restart ("resumed").
    claimed: Counter[str] = Counter()
    owner: dict[str, set[str]] = {}
    conflicts = lock_timeouts = resumed = 0
    for name in names:
        for line in (logs / f"{name}.log").read_text().splitlines():
            kind, _, task_id = line.partition(" ")
            if kind in ("claimed", "resumed"):
                owner.setdefault(task_id, set()).add(name)
                if kind == "claimed":
                    claimed[task_id] += 1
                else:
                    resumed += 1
            conflicts += kind == "conflict"
            lock_timeouts += kind == "lock-timeout"
    assert max(claimed.values()) == 1, [t for t, n in claimed.items() if n > 1]
    assert set(owner) == set(tasks), "a task was completed without a claim"
    for task_id, who in owner.items():
        assert who == {tasks[task_id]["assigned_to"]}, (task_id, who, tasks[task_id]["assigned_to"])
    assert kills >= 1
    sys.stderr.write(
        f"\nrace: {TASKS} tasks, {WORKERS} workers, {kills} SIGKILLs, {resumed} resumed after a kill, "
        f"{conflicts} claim conflicts, {lock_timeouts} lock timeouts, {elapsed:.1f} s\n"
    )
    assert os.path.exists(team.metadata_path + ".lock")
