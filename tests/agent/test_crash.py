"""Crash consistency: real writer processes SIGKILLed at random moments, hundreds of times.

After every kill the files must be as the durability contract says: ``state.json`` parses, no
acknowledged update is lost (and at most the one in flight was applied), ``ops.jsonl`` holds
whole lines with seq 1..N (a torn, unterminated final fragment is the only damage allowed; the
next append repairs it), and temporary files belong only to killed writers and are removed by
``phx doctor``.
"""

from __future__ import annotations

import os
import random
import resource
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from conftest import HOOK_PREFIX
from phoenix_protocol.agent._state import STATUSES
from phoenix_protocol.core._durable import host_tag, temp_writer
from phoenix_protocol.core._home import Home
from phoenix_protocol.core._jsonio import dumps_line
from phoenix_protocol.services._agent import Agent
from phoenix_protocol.services._doctor import check_agent

PY = sys.executable
HOOK = HOOK_PREFIX  # the command phx install writes

# The library writer. Every loop: reconcile the status with the counter, bump the counter (with
# a "count" transition logged before the state is replaced), append a "tick" event. Each
# update is acknowledged on stdout only after the library call returned.
LIBRARY_CHILD = r"""
import sys
from phoenix_protocol.services._agent import Agent
from phoenix_protocol.core._home import Home
from phoenix_protocol.agent._state import Transition
import phoenix_protocol.core._redact  # warm the lazy import, so that kills land in real work

home, agent_id = sys.argv[1], sys.argv[2]
agent = Agent.open(agent_id, home=Home(home))
out = sys.stdout


def status_for(n):
    return "idle" if (n // 3) % 2 == 0 else "working"


def bump(state):
    n = int(state.extra.get("n", 0)) + 1
    state.extra["n"] = n
    return [Transition("count", "ok", {"n": n}, trusted=True)]


out.write("ready\n")
out.flush()
while True:
    state = agent.state.read()
    n = int(state.extra.get("n", 0))
    want = status_for(n)
    if state.status != want:
        agent.state.set_status(want, f"task {n}" if want == "working" else f"done {n}")
        out.write(f"ack status {want} {n}\n")
        out.flush()
    n = agent.state.change(bump).extra["n"]
    out.write(f"ack n {n}\n")
    out.flush()
    seq = agent.ops.record("tick", "ok", {"n": n}, trusted=True)
    out.write(f"ack seq {seq} {n}\n")
    out.flush()
"""

# Appends big records (about 1 MB each) so that a kill can land inside the write(2) itself.
BIG_APPEND_CHILD = r"""
import sys
from phoenix_protocol.services._agent import Agent
from phoenix_protocol.core._home import Home

home, agent_id, size = sys.argv[1], sys.argv[2], int(sys.argv[3])
agent = Agent.open(agent_id, home=Home(home), config_overrides={"ops_max_bytes": 1 << 40})
blob = "x" * size
out = sys.stdout
out.write("ready\n")
out.flush()
i = 0
while True:
    i += 1
    seq = agent.record("big", "ok", {"i": i, "blob": blob}, trusted=True, durable=False)
    out.write(f"ack seq {seq}\n")
    out.flush()
"""


def status_for(n: int) -> str:
    return "idle" if (n // 3) % 2 == 0 else "working"


@dataclass
class Acks:
    n: int = 0
    seqs: dict[int, int] = field(default_factory=dict)  # acked seq -> counter value it carried
    status: tuple[str, int] | None = None


def parse_acks(out: str) -> Acks:
    acks = Acks()
    for line in out.splitlines():
        parts = line.split()
        if parts[:2] == ["ack", "n"]:
            acks.n = max(acks.n, int(parts[2]))
        elif parts[:2] == ["ack", "seq"]:
            acks.seqs[int(parts[2])] = int(parts[3]) if len(parts) > 3 else 0
        elif parts[:2] == ["ack", "status"]:
            acks.status = (parts[2], int(parts[3]))
        elif line != "ready":
            raise AssertionError(f"unexpected child output line {line!r}")
    return acks


def check_log(agent: Agent) -> tuple[list[dict[str, object]], int]:
    """The ops log's invariants; returns its records and the length of a torn tail (0 if none)."""
    records, problems = agent.ops.read()
    torn = 0
    for problem in problems:
        assert problem.kind == "torn-tail", f"damage other than a torn tail: {problem}"
        assert problem.path == agent.ops.path
    assert len(problems) <= 1, [str(p) for p in problems]
    current = Path(agent.ops.path).read_bytes() if os.path.exists(agent.ops.path) else b""
    raw = b""
    for rotated in agent.ops.log.files():
        if rotated != agent.ops.path:
            data = Path(rotated).read_bytes()
            assert data.endswith(b"\n"), f"{rotated} was rotated with a torn tail"
            raw += data
    raw += current
    if problems:
        torn = len(current) - (current.rfind(b"\n") + 1)
        assert torn > 0
        assert problems[0].line == current.count(b"\n") + 1, "the torn fragment must be the last line"
    else:
        assert current == b"" or current.endswith(b"\n")
    seqs = [r["seq"] for r in records]
    assert seqs == list(range(1, len(seqs) + 1)), "seq has a gap or a duplicate"
    assert len(records) == raw.count(b"\n"), "every complete line must be a record"
    return records, torn


def leftover_tmp(agent: Agent) -> list[str]:
    try:
        return sorted(n for n in os.listdir(agent.dir) if n.endswith(".tmp"))
    except FileNotFoundError:
        return []


def check_tmp_and_doctor(agent: Agent, killed: set[int]) -> int:
    """Temp files may only belong to killed writers; the doctor removes and reports them."""
    names = leftover_tmp(agent)
    for name in names:
        writer = temp_writer(name)
        assert writer is not None and writer[1] == host_tag(), name
        pid = writer[0]
        assert pid in killed, f"temporary file {name} of a writer that was not killed"
    if names:
        findings = check_agent(agent)
        reported = {f.path for f in findings if f.repaired and "temporary file" in f.message}
        assert reported == {os.path.join(agent.dir, n) for n in names}
        assert leftover_tmp(agent) == []
        assert not [f for f in findings if f.level == "error"], [f.as_dict() for f in findings]
        killed.clear()
    return len(names)


@dataclass
class Stats:
    kills: int = 0
    acks: int = 0
    tmp_files: int = 0
    torn_tails: int = 0
    in_flight_applied: int = 0
    hook_completed: int = 0


def sigkill(proc: subprocess.Popen[str], timeout: float = 20) -> tuple[str, str]:
    """SIGKILL ``proc``; return the rest of its stdout and stderr. (Not ``communicate``: it reads
    the raw pipe and would miss lines already buffered by an earlier ``readline``.)"""
    proc.send_signal(signal.SIGKILL)
    assert proc.stdout is not None and proc.stderr is not None
    out = proc.stdout.read()
    err = proc.stderr.read()
    proc.wait(timeout)
    proc.stdout.close()
    proc.stderr.close()
    return out, err


# One worker's ops log rotates every few KB (and keeps every rotation), so kills also land
# in the middle of rotations: the seq must still run 1..N across ops.jsonl.N ... ops.jsonl.
ROTATING = {"ops_max_bytes": 4096, "ops_keep": 1000}


def library_worker(home: str, agent_id: str, kills: int, seed: int, max_delay: float, config: dict[str, int]) -> Stats:
    rng = random.Random(seed)
    agent = Agent.open(agent_id, home=Home(home), config_overrides=config)
    env = {**os.environ, **{f"PHOENIX_{k.upper()}": str(v) for k, v in config.items()}}
    stats = Stats()
    killed: set[int] = set()
    prev_n = 0
    for round_no in range(kills):
        where = f"(agent {agent_id}, seed {seed}, round {round_no})"
        proc = subprocess.Popen(
            [PY, "-P", "-c", LIBRARY_CHILD, home, agent_id],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        assert proc.stdout is not None
        ready = proc.stdout.readline()
        if ready != "ready\n":
            proc.kill()
            raise AssertionError(f"child did not start {where}: {ready!r} {proc.communicate()[1]}")
        # A random moment: after a random number of acknowledged steps (so that the children
        # make progress however loaded the machine is), plus a random delay inside the next one.
        seen = "".join(proc.stdout.readline() for _ in range(rng.randrange(0, 8)))
        time.sleep(rng.uniform(0, max_delay))
        out, err = sigkill(proc)
        out = seen + out
        assert proc.returncode == -signal.SIGKILL, f"child died on its own {where}: {err}"
        killed.add(proc.pid)
        stats.kills += 1
        acks = parse_acks(out)
        stats.acks += len(out.splitlines())

        state = agent.state.read()  # must not raise
        assert state.status in STATUSES
        n = int(state.extra.get("n", 0))
        floor = max(prev_n, acks.n)
        assert floor <= n <= floor + 1, f"counter {n}, last acknowledged {floor} {where}"
        stats.in_flight_applied += n - floor
        assert state.status in (status_for(n), status_for(n - 1)), f"status {state.status} at n={n} {where}"
        if acks.status is not None and acks.status[1] == n:
            assert state.status == acks.status[0], f"acknowledged status lost {where}"
        if state.status == "working":
            assert state.current_task.startswith("task "), state.current_task

        records, torn = check_log(agent)
        stats.torn_tails += bool(torn)
        for seq, value in acks.seqs.items():
            record = records[seq - 1]
            assert record["event"] == "tick", f"acknowledged seq {seq} is {record} {where}"
            assert record["meta"] == {"n": value}
        counted = {r["meta"]["n"] for r in records if r["event"] == "count"}  # type: ignore[index]
        assert set(range(1, n + 1)) <= counted, f"a state change without its ops event {where}"
        assert max(counted, default=0) <= n + 1

        stats.tmp_files += check_tmp_and_doctor(agent, killed)
        prev_n = n
    return stats


@pytest.mark.slow
def test_sigkill_library_writers(tmp_path: Path) -> None:
    home = str(tmp_path / "home")
    workers, kills_each = 4, 80
    seed = random.randrange(1 << 30)
    with ThreadPoolExecutor(workers) as pool:
        futures = [
            pool.submit(library_worker, home, f"crash{i}", kills_each, seed + i, 0.005, ROTATING if i == 0 else {})
            for i in range(workers)
        ]
        results = [f.result() for f in futures]
    total = Stats()
    for s in results:
        total.kills += s.kills
        total.acks += s.acks
        total.tmp_files += s.tmp_files
        total.torn_tails += s.torn_tails
        total.in_flight_applied += s.in_flight_applied
    print(f"\nlibrary writers: {total} (seed {seed})")
    assert total.kills >= 300
    assert total.acks > total.kills, "the children must get real work done between kills"
    rotated = Agent.open("crash0", home=Home(home), config_overrides=ROTATING).ops.log.files()
    # About one rotation every 8 rounds (how much a child writes before its kill varies with the
    # seed and the machine's speed): 80 rounds give 8-12; at least 6 shows kills met rotations.
    assert len(rotated) >= 6, f"the rotating worker's log should have rotated many times ({len(rotated)})"
    for i in range(workers):
        agent = Agent.open(f"crash{i}", home=Home(home), config_overrides=ROTATING if i == 0 else {})
        findings = check_agent(agent)
        unexpected = [f for f in findings if f.level != "ok" and "torn last line" not in f.message]
        assert not unexpected, [f.as_dict() for f in unexpected]


@pytest.mark.slow
def test_sigkill_during_large_appends_leaves_only_a_torn_tail(tmp_path: Path) -> None:
    """Records of ~1 MB make a kill inside write(2) likely: the damage must stay a torn tail."""
    home = str(tmp_path / "home")
    agent = Agent.open("big", home=Home(home), config_overrides={"ops_max_bytes": 1 << 40})
    rng = random.Random(random.randrange(1 << 30))
    stats = Stats()
    killed: set[int] = set()
    last_acked = 0
    for _ in range(30):
        proc = subprocess.Popen(
            [PY, "-P", "-c", BIG_APPEND_CHILD, home, "big", str(1 << 20)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        assert proc.stdout is not None
        assert proc.stdout.readline() == "ready\n"
        time.sleep(rng.uniform(0, 0.02))
        out, err = sigkill(proc)
        assert proc.returncode == -signal.SIGKILL, err
        killed.add(proc.pid)
        stats.kills += 1
        acks = parse_acks(out)
        records, torn = check_log(agent)
        stats.torn_tails += bool(torn)
        if acks.seqs:
            last_acked = max(acks.seqs)
        assert len(records) >= last_acked, "an acknowledged append was lost"
        assert len(records) <= last_acked + 1 or not acks.seqs
        check_tmp_and_doctor(agent, killed)
    print(f"\nlarge appends: {stats}")
    # Whatever is left, the next append (or the doctor) repairs it.
    seq = agent.ops.record("after", "ok")
    records, torn = check_log(agent)
    assert torn == 0 and records[-1]["seq"] == seq == len(records)


def test_torn_append_is_reported_and_repaired_by_the_next_append(tmp_path: Path) -> None:
    """A writer killed mid-append (the file size limit stops its write(2) half way, and the
    SIGXFSZ of the next write kills it) leaves an unterminated fragment: readers report it as
    torn-tail, the state is untouched, and the next append cuts it off and reuses the seq that
    was never acknowledged."""
    home = str(tmp_path / "home")
    agent = Agent.open("torn", home=Home(home))
    agent.state.set_status("working", "before the crash")
    first = agent.ops.record("whole", "ok", {"i": 1})
    size = os.path.getsize(agent.ops.path)
    state_before = Path(agent.state.path).read_bytes()
    code = (
        "import os, signal, sys\n"
        "from phoenix_protocol.services._agent import Agent\n"
        "from phoenix_protocol.core._home import Home\n"
        "agent = Agent.open('torn', home=Home(sys.argv[1]))\n"
        "signal.signal(signal.SIGXFSZ, signal.SIG_DFL)  # Python ignores it; restore the kill\n"
        "agent.ops.record('cut', 'ok', {'blob': 'y' * 5000}, trusted=True)\n"
        "print('not cut')\n"
    )
    limit = size + 200

    def limit_file_size() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    proc = subprocess.run(
        [PY, "-P", "-c", code, home], capture_output=True, text=True, preexec_fn=limit_file_size, timeout=30
    )
    assert proc.returncode == -signal.SIGXFSZ, (proc.stdout, proc.stderr)
    assert os.path.getsize(agent.ops.path) == limit
    records, problems = agent.ops.read()
    assert [r["seq"] for r in records] == list(range(1, first + 1))
    assert [p.kind for p in problems] == ["torn-tail"]
    assert "200 bytes" in problems[0].message
    assert Path(agent.state.path).read_bytes() == state_before
    assert agent.state.read().current_task == "before the crash"

    seq = agent.ops.record("next", "ok", {"i": 2})
    assert seq == first + 1, "the torn record's seq was never acknowledged and must be reused"
    assert agent.ops.log.repaired_bytes == 200
    records, torn = check_log(agent)
    assert torn == 0
    assert [r["event"] for r in records][-2:] == ["whole", "next"]


def test_failed_append_leaves_no_fragment(tmp_path: Path) -> None:
    """A write that fails half way (the size limit returns EFBIG) is rolled back: the caller gets
    StorageError and the log holds no fragment of the record it was told did not happen."""
    home = str(tmp_path / "home")
    agent = Agent.open("cut", home=Home(home))
    agent.state.set_status("working", "before")
    before = Path(agent.ops.path).read_bytes()
    code = (
        "import sys\n"
        "from phoenix_protocol.services._agent import Agent\n"
        "from phoenix_protocol.core._errors import StorageError\n"
        "from phoenix_protocol.core._home import Home\n"
        "agent = Agent.open('cut', home=Home(sys.argv[1]))\n"
        "try:\n"
        "    agent.state.set_status('working', 'x' * 3000)\n"
        "except StorageError as exc:\n"
        "    print('refused:', exc)\n"
    )
    limit = len(before) + 200

    def limit_file_size() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    proc = subprocess.run(
        [PY, "-P", "-c", code, home], capture_output=True, text=True, preexec_fn=limit_file_size, timeout=30
    )
    assert proc.returncode == 0 and "refused:" in proc.stdout, (proc.stdout, proc.stderr)
    assert Path(agent.ops.path).read_bytes() == before
    assert agent.state.read().current_task == "before"
    assert agent.ops.read()[1] == []


def hook_worker(project: str, agent_id: str, runs: int, seed: int) -> Stats:
    rng = random.Random(seed)
    home = Home(os.path.join(project, ".phoenix"))
    agent = Agent.open(agent_id, home=home)
    payload = dumps_line(
        {
            "session_id": f"session-{agent_id}",
            "hook_event_name": "PostToolUse",
            "tool_name": "Bash",
            "tool_input": {"command": "ls -la"},
            "tool_response": {"stdout": "x", "stderr": ""},
            "cwd": project,
        }
    ).encode()
    env = {k: v for k, v in os.environ.items() if not k.startswith("PHOENIX_")}
    argv = [*HOOK, "post-tool-use", "--agent", agent_id]

    payload_file = os.path.join(project, f"payload-{agent_id}.json")
    Path(payload_file).write_bytes(payload)

    def start() -> subprocess.Popen[bytes]:
        with open(payload_file, "rb") as stdin:
            return subprocess.Popen(
                argv, stdin=stdin, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, cwd=project
            )

    # How long one hook takes here, so that kill times spread over its whole life.
    durations = []
    for _ in range(3):
        t0 = time.monotonic()
        proc = start()
        proc.wait(timeout=30)
        durations.append(time.monotonic() - t0)
    life = sorted(durations)[1]
    stats = Stats()
    killed: set[int] = set()
    prev = agent.state.read().heartbeat_seq
    assert prev == 3
    for round_no in range(runs):
        where = f"(agent {agent_id}, seed {seed}, round {round_no})"
        proc = start()
        time.sleep(rng.uniform(0.3, 1.15) * life)
        proc.send_signal(signal.SIGKILL)
        _out, err = proc.communicate(timeout=30)
        state = agent.state.read()  # must not raise
        hb = state.heartbeat_seq
        if proc.returncode == -signal.SIGKILL:
            stats.kills += 1
            killed.add(proc.pid)
            assert prev <= hb <= prev + 1, f"heartbeat_seq {prev} -> {hb} {where}"
            stats.in_flight_applied += hb - prev
        else:
            assert proc.returncode == 0
            assert err == b"", err
            stats.hook_completed += 1
            assert hb == prev + 1, f"a completed heartbeat was lost: {prev} -> {hb} {where}"
        if hb > prev:
            assert state.last_tool is not None and state.last_tool["name"] == "Bash"
            assert state.session_id == f"session-{agent_id}"
        check_log(agent)
        stats.tmp_files += check_tmp_and_doctor(agent, killed)
        prev = hb
    return stats


@pytest.mark.slow
def test_sigkill_post_tool_use_hook(project: Path) -> None:
    seed = random.randrange(1 << 30)
    results: list[Stats] = []
    # Where a kill lands depends on the machine's load; run more rounds until enough landed
    # mid-flight (the checks run after every kill, whatever the count).
    for round_no in range(4):
        with ThreadPoolExecutor(2) as pool:
            futures = [
                pool.submit(hook_worker, str(project), f"hook{round_no}-{i}", 60, seed + 10 * round_no + i)
                for i in range(2)
            ]
            results += [f.result() for f in futures]
        if sum(s.kills for s in results) >= 30:
            break
    kills = sum(s.kills for s in results)
    completed = sum(s.hook_completed for s in results)
    applied = sum(s.in_flight_applied for s in results)
    tmp = sum(s.tmp_files for s in results)
    print(
        f"\nhook: {kills} SIGKILLs ({applied} after the write), {completed} runs completed, {tmp} temp files (seed {seed})"
    )
    assert kills >= 30, "most hook runs should have been killed mid-flight"
