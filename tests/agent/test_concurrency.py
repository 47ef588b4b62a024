"""Many real processes writing one agent at once: no lost update, no duplicated or skipped seq,
no interleaved line; a held lock times out with a clear error, and a dead holder's lock is free."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from phoenix_protocol.agent._state import AgentState
from phoenix_protocol.core._errors import LockTimeoutError
from phoenix_protocol.core._home import Home
from phoenix_protocol.core._jsonio import loads
from phoenix_protocol.services._agent import Agent

PY = sys.executable

# Each child waits for "go" on stdin so that all of them contend for the lock at once, then
# prints every counter value its own updates produced.
COUNTER_CHILD = r"""
import sys
from phoenix_protocol.services._agent import Agent
from phoenix_protocol.core._home import Home

home, n = sys.argv[1], int(sys.argv[2])
# The default lock timeout (10 s): waiters queue in the kernel, so none of 16 writers
# hammering one file starves (an earlier polling lock let a busy writer win again and again).
agent = Agent.open("shared", home=Home(home))


def bump(state):
    state.extra["count"] = int(state.extra.get("count", 0)) + 1


print("ready", flush=True)
sys.stdin.readline()
seen = [agent.state.change(bump).extra["count"] for _ in range(n)]
print(" ".join(map(str, seen)), flush=True)
"""

APPEND_CHILD = r"""
import sys
from phoenix_protocol.services._agent import Agent
from phoenix_protocol.core._home import Home

home, me, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
agent = Agent.open("shared", home=Home(home))  # default lock timeout, see COUNTER_CHILD
print("ready", flush=True)
sys.stdin.readline()
seqs = [agent.ops.record("append", "ok", {"writer": me, "i": i}, trusted=True) for i in range(n)]
print(" ".join(map(str, seqs)), flush=True)
"""

HOLDER_CHILD = r"""
import sys, time
from phoenix_protocol.services._agent import Agent
from phoenix_protocol.core._home import Home

agent = Agent.open("locky", home=Home(sys.argv[1]))
with agent.state.lock():
    print("locked", flush=True)
    time.sleep(120)
"""


def run_together(argvs: list[list[str]], timeout: float = 90) -> list[str]:
    """Start every process, release them at once, return each one's last stdout line."""
    procs = [
        subprocess.Popen(a, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for a in argvs
    ]
    try:
        for proc in procs:
            assert proc.stdout is not None
            assert proc.stdout.readline() == "ready\n", proc.communicate()[1]
        for proc in procs:
            assert proc.stdin is not None
            proc.stdin.write("go\n")
            proc.stdin.flush()
        results = []
        for proc in procs:
            out, err = proc.communicate(timeout=timeout)
            assert proc.returncode == 0, err
            results.append(out.strip())
        return results
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()


@pytest.mark.slow
def test_concurrent_read_modify_write_loses_no_update(tmp_path: Path) -> None:
    home = str(tmp_path / "home")
    procs, updates = 16, 200
    outputs = run_together([[PY, "-P", "-c", COUNTER_CHILD, home, str(updates)] for _ in range(procs)])
    agent = Agent.open("shared", home=Home(home))
    assert agent.state.read().extra["count"] == procs * updates
    seen = [[int(v) for v in out.split()] for out in outputs]
    for values in seen:
        assert len(values) == updates
        assert values == sorted(values) and len(set(values)) == updates, "a process saw its own count go back"
    everything = sorted(v for values in seen for v in values)
    assert everything == list(range(1, procs * updates + 1)), "two updates read the same count"


@pytest.mark.slow
def test_concurrent_appends_get_every_seq_once(tmp_path: Path) -> None:
    home = str(tmp_path / "home")
    procs, appends = 8, 200
    Agent.open("shared", home=Home(home)).ensure()
    outputs = run_together([[PY, "-P", "-c", APPEND_CHILD, home, f"w{i}", str(appends)] for i in range(procs)])
    agent = Agent.open("shared", home=Home(home))
    records, problems = agent.ops.read()
    assert problems == []
    total = procs * appends
    assert [r["seq"] for r in records] == list(range(1, total + 1))
    raw = Path(agent.ops.path).read_bytes()
    lines = raw.split(b"\n")
    assert lines[-1] == b"" and len(lines) == total + 1
    assert [loads(line)["seq"] for line in lines[:-1]] == list(range(1, total + 1))  # every line whole
    by_seq = {r["seq"]: r["meta"] for r in records}
    for i, out in enumerate(outputs):
        seqs = [int(v) for v in out.split()]
        assert seqs == sorted(seqs) and len(seqs) == appends
        # Each acknowledged seq holds exactly the record that writer appended, in its order.
        assert [by_seq[s] for s in seqs] == [{"writer": f"w{i}", "i": k} for k in range(appends)]


def start_holder(home: str) -> subprocess.Popen[str]:
    proc = subprocess.Popen(
        [PY, "-P", "-c", HOLDER_CHILD, home], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if line != "locked\n":
        proc.kill()
        raise AssertionError(f"lock holder did not start: {line!r} {proc.communicate()[1]}")
    return proc


def test_held_lock_times_out_then_a_killed_holder_frees_it(tmp_path: Path) -> None:
    home = str(tmp_path / "home")
    agent = Agent.open("locky", home=Home(home))
    agent.state.set_status("working", "the original task")
    state_before = Path(agent.state.path).read_bytes()
    ops_before = Path(agent.ops.path).read_bytes()
    calls: list[int] = []

    def mutate(state: AgentState) -> None:
        calls.append(1)
        state.current_task = "changed"

    holder = start_holder(home)
    try:
        t0 = time.monotonic()
        with pytest.raises(LockTimeoutError) as info:
            agent.state.change(mutate, lock_timeout=0.2)
        elapsed = time.monotonic() - t0
        assert 0.2 <= elapsed < 3.0
        assert info.value.path == agent.state.path
        assert agent.state.path in str(info.value)
        assert "0.2s" in str(info.value)

        # The same through the configured timeout and the public transition.
        slow = Agent.open("locky", home=Home(home), config_overrides={"lock_timeout": 0.2})
        with pytest.raises(LockTimeoutError, match=r"state\.json"):
            slow.state.set_status("idle", "should not land")

        assert calls == []
        assert Path(agent.state.path).read_bytes() == state_before
        assert Path(agent.ops.path).read_bytes() == ops_before
        assert agent.state.read().current_task == "the original task"
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.communicate(timeout=10)
    assert holder.returncode == -signal.SIGKILL

    # The kernel dropped the dead holder's flock: the next writer gets it at once.
    t0 = time.monotonic()
    agent.state.change(mutate, lock_timeout=0.5)
    assert time.monotonic() - t0 < 0.5
    assert calls == [1]
    assert agent.state.read().current_task == "changed"
    assert os.path.exists(agent.state.path + ".lock"), "lock files are never deleted"
