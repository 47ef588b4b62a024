"""Agent files that cannot be turned against the agent (issue 30, item 10), and the user told when
Phoenix breaks (item 9): the installed hook command, run as Claude Code runs it (a process, the
payload on stdin), against a home where something hostile sits in place of a file: a real FIFO,
a sparse gigabyte, symbolic links to files outside the home, a directory at a lock. Each hook
exits 0 within its budget, says so on stderr and to the user, touches nothing outside the home;
``phx doctor`` reports each and repairs it from the ops log."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from conftest import HOOK_PREFIX
from phoenix_protocol.core._home import Home
from phoenix_protocol.services._agent import Agent

HOOK_BUDGET = 2.0
"""Seconds a hook may take whatever is on disk (a FIFO hung it forever; a gigabyte state took 15 s).
Generous for a loaded machine: a hook takes 30-100 ms."""
SECRET = "sk-ant-api03-" + "Qw3rTy7uIoP9aSdF2gHjKl4ZxCvBnM8_x1Yz-AbCdEfGh"  # a made-up key


def hook(project: Path, command: str, event: str, session: str = "sess-1", **extra: Any) -> tuple[Any, float]:
    """Run the installed hook command; returns the finished process and its wall time."""
    body = {"session_id": session, "transcript_path": "/tmp/t.jsonl", "cwd": str(project), "hook_event_name": event}
    started = time.monotonic()
    proc = subprocess.run(
        [*HOOK_PREFIX, command],
        input=json.dumps({**body, **extra}).encode(),
        capture_output=True,
        check=False,
        cwd=project,
        timeout=30,  # a hang fails here instead of hanging the suite
    )
    elapsed = time.monotonic() - started
    assert proc.returncode == 0, proc.stderr
    return proc, elapsed


def tool_call(project: Path, session: str = "sess-1", *, failed: bool = False, tool: str = "Bash") -> tuple[Any, float]:
    """A PostToolUse (a failed tool is always logged: the ops log is written too)."""
    response = {"stdout": "", "stderr": "boom", "is_error": True} if failed else {"stdout": "ok"}
    return hook(
        project, "post-tool-use", "PostToolUse", session, tool_name=tool, tool_input={"command": "ls"},
        tool_response=response,
    )  # fmt: skip


def phx(project: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "phoenix_protocol", *args],
        cwd=project,
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )


def notice(proc: Any) -> str | None:
    """The ``systemMessage`` of a hook's output (what Claude Code shows the user), if any."""
    out = proc.stdout.decode()
    return json.loads(out).get("systemMessage") if out.strip() else None


@pytest.fixture
def agent(project: Path) -> Agent:
    """A session under way with an open loop and a next action, as the hooks and the model left it."""
    hook(project, "session-start", "SessionStart", source="startup")
    agent = Agent.open("default", home=Home(str(project / ".phoenix")))
    agent.state.set_status("working", "Implement refresh tokens", session_id="sess-1")
    agent.state.add_note("open_loop", "Token rotation race")
    agent.state.add_note("next_action", "Write the integration tests")
    tool_call(project)
    return agent


def replace(path: str, make: Any) -> None:
    os.unlink(path)
    make(path)


def fifo(path: str) -> None:
    os.mkfifo(path, 0o600)


@pytest.mark.parametrize(
    "name", ["state.json", "ops.jsonl", "state.json.lock", "ops.jsonl.lock", "brief.md", "phoenix.db"]
)
def test_a_fifo_in_place_of_an_agent_file_never_hangs_a_hook(project: Path, agent: Agent, name: str) -> None:
    # phoenix.db: SQLite's (checkpoints, sessions), opened by SQLite itself, which would block on it
    path = os.path.join(agent.home.root if name == "phoenix.db" else agent.dir, name)
    replace(path, fifo)
    runs = {
        "post-tool-use": tool_call(project, failed=True),  # logs tool_failed: the ops log is written
        "stop": hook(project, "stop", "Stop"),
        "pre-compact": hook(project, "pre-compact", "PreCompact", trigger="auto"),
        "session-start": hook(project, "session-start", "SessionStart", "sess-2", source="startup"),
        "session-end": hook(project, "session-end", "SessionEnd", "sess-2", reason="other"),
    }
    for event, (proc, elapsed) in runs.items():
        assert elapsed < HOOK_BUDGET, f"{event} took {elapsed:.1f} s with a FIFO at {name}"
        err = proc.stderr.decode()
        # A hook that needed the file says so in one line; one that did not (Stop writes the ops
        # log only now and then; a brief is best effort at a session's start) says nothing.
        assert err == "" or (err.count("\n") == 1 and "named pipe (FIFO)" in err and name in err), (event, err)
    loud = runs["pre-compact" if name in ("brief.md", "phoenix.db") else "post-tool-use"][0]
    assert b"named pipe (FIFO)" in loud.stderr and notice(loud) is not None
    assert stat.S_ISFIFO(os.lstat(path).st_mode)  # left as it is, for the doctor
    # The CLI and the doctor too: answered at once (``phx`` would time out), the file named.
    for command in (["state", "show"], ["log"], ["brief"]):
        shown = phx(project, *command)
        assert shown.returncode == 0 or "named pipe (FIFO)" in shown.stderr, (command, shown.stderr)
    if name in ("state.json", "ops.jsonl"):
        assert phx(project, *(["log"] if name == "ops.jsonl" else ["state", "show"])).returncode != 0
    check = phx(project, "doctor", "--check")
    assert check.returncode == 3 and "named pipe (FIFO)" in check.stdout and name in check.stdout
    repaired = phx(project, "doctor")
    assert repaired.returncode == 0, repaired.stdout
    where = os.path.dirname(path)
    [kept] = [p for p in os.listdir(where) if p.startswith(name + ".quarantine-")]
    assert stat.S_ISFIFO(os.lstat(os.path.join(where, kept)).st_mode)  # moved aside, not deleted
    state = agent.state.read()
    assert [n["text"] for n in state.open_loops] == ["Token rotation race"]
    assert [n["text"] for n in state.next_actions] == ["Write the integration tests"]
    proc, _ = tool_call(project, "sess-3")
    assert proc.stderr == b"" and agent.state.read().last_tool is not None


def test_a_gigabyte_state_json_costs_a_hook_nothing(project: Path, agent: Agent) -> None:
    """Valid JSON followed by a gigabyte of NULs (sparse: no disk used) made every PostToolUse
    read and parse it, 15 s each, until ``phx doctor`` ran."""
    _, normal = tool_call(project)
    with open(agent.state.path, "r+b") as fh:
        fh.truncate(1 << 30)
    for _ in range(3):
        proc, elapsed = tool_call(project)
        assert elapsed < min(HOOK_BUDGET, 2 * normal + 0.5), (elapsed, normal)
        assert b"too large" in proc.stderr and b"1,073,741,824 bytes" in proc.stderr
    assert os.path.getsize(agent.state.path) == 1 << 30  # never rewritten, never parsed
    check = phx(project, "doctor", "--check")
    assert check.returncode == 3 and "too large" in check.stdout
    started = time.monotonic()
    repaired = phx(project, "doctor")
    assert repaired.returncode == 0 and time.monotonic() - started < 30, repaired.stdout
    [kept] = [p for p in os.listdir(agent.dir) if p.startswith("state.json.quarantine-")]
    assert os.path.getsize(os.path.join(agent.dir, kept)) == 1 << 30  # kept whole (renamed, not copied)
    state = agent.state.read()
    assert state.current_task == "Implement refresh tokens"
    assert [n["text"] for n in state.open_loops] == ["Token rotation race"]


def test_a_linked_ops_log_is_never_appended_to(project: Path, agent: Agent, tmp_path: Path) -> None:
    outside = tmp_path / "someone-elses.log"
    outside.write_bytes(b"theirs\n")
    replace(agent.ops.path, lambda p: os.symlink(outside, p))
    proc, elapsed = tool_call(project, failed=True)
    assert elapsed < HOOK_BUDGET and b"symbolic link" in proc.stderr
    assert outside.read_bytes() == b"theirs\n"
    check = phx(project, "doctor", "--check")
    assert check.returncode == 3 and "symbolic link" in check.stdout
    assert phx(project, "doctor").returncode == 0
    assert outside.read_bytes() == b"theirs\n"
    [kept] = [p for p in os.listdir(agent.dir) if p.startswith("ops.jsonl.quarantine-")]
    assert os.readlink(os.path.join(agent.dir, kept)) == str(outside)
    tool_call(project, "sess-2", failed=True)
    assert os.path.isfile(agent.ops.path) and not os.path.islink(agent.ops.path)
    assert outside.read_bytes() == b"theirs\n"


def test_a_linked_lock_creates_nothing_outside_the_home(project: Path, agent: Agent, tmp_path: Path) -> None:
    outside = tmp_path / "created-by-phoenix"
    replace(agent.state.path + ".lock", lambda p: os.symlink(outside, p))
    proc, elapsed = tool_call(project)
    assert elapsed < HOOK_BUDGET and b"symbolic link" in proc.stderr
    assert not outside.exists()
    assert phx(project, "doctor", "--check").returncode == 3
    assert phx(project, "doctor").returncode == 0 and not outside.exists()
    proc, _ = tool_call(project, "sess-2")
    assert proc.stderr == b"" and not outside.exists()


def test_a_linked_agent_directory_is_not_followed(project: Path, agent: Agent, tmp_path: Path) -> None:
    """``agents/default`` a link to another directory: none of its files is read or written."""
    elsewhere = tmp_path / "elsewhere"
    os.rename(agent.dir, elsewhere)
    os.symlink(elsewhere, agent.dir, target_is_directory=True)
    before = {p.name: p.read_bytes() for p in elsewhere.iterdir() if p.is_file()}
    proc, elapsed = tool_call(project, failed=True)
    assert elapsed < HOOK_BUDGET and b"symbolic link" in proc.stderr
    assert {p.name: p.read_bytes() for p in elsewhere.iterdir() if p.is_file()} == before
    check = phx(project, "doctor", "--check")
    assert check.returncode == 3 and "symbolic link" in check.stdout
    assert phx(project, "doctor").returncode == 0
    assert {p.name: p.read_bytes() for p in elsewhere.iterdir() if p.is_file()} == before
    assert [p for p in os.listdir(os.path.dirname(agent.dir)) if p.startswith("default.quarantine-")]


def test_a_foreign_state_linked_in_is_refused_and_the_agents_own_comes_back(
    project: Path, agent: Agent, tmp_path: Path
) -> None:
    """Before: accepted as the agent's state (its open loops silently gone) and ``phx doctor``
    said healthy."""
    foreign = tmp_path / "other-project-state.json"
    other = {"schema_version": 1, "status": "idle", "current_task": "", "open_loops": [], "next_actions": []}
    foreign.write_text(json.dumps(other))
    replace(agent.state.path, lambda p: os.symlink(foreign, p))
    proc, elapsed = tool_call(project)
    assert elapsed < HOOK_BUDGET and b"symbolic link" in proc.stderr
    start, _ = hook(project, "session-start", "SessionStart", "sess-2", source="startup")
    context = json.loads(start.stdout)["hookSpecificOutput"]["additionalContext"]
    assert "symbolic link" in context and "phx doctor" in context  # the model is told the same
    assert foreign.read_text() == json.dumps(other)
    check = phx(project, "doctor", "--check")
    assert check.returncode == 3 and "symbolic link" in check.stdout and "healthy" not in check.stdout
    repaired = phx(project, "doctor")
    assert repaired.returncode == 0 and "rebuilt from the log" in repaired.stdout
    assert foreign.read_text() == json.dumps(other)  # the user's file: never written, never deleted
    state = agent.state.read()
    assert [n["text"] for n in state.open_loops] == ["Token rotation race"]
    assert state.current_task == "Implement refresh tokens"


def test_a_directory_at_the_state_lock_is_reported_and_repaired(project: Path, agent: Agent) -> None:
    """Before: every write failed while ``phx doctor`` and ``--check`` said healthy."""
    replace(agent.state.path + ".lock", lambda p: os.mkdir(p, 0o700))
    proc, elapsed = tool_call(project)
    assert elapsed < HOOK_BUDGET and b"is a directory" in proc.stderr
    assert notice(proc) is not None
    check = phx(project, "doctor", "--check")
    assert check.returncode == 3 and "is a directory" in check.stdout and "healthy" not in check.stdout
    repaired = phx(project, "doctor")
    assert repaired.returncode == 0 and "state.json.lock.quarantine-" in repaired.stdout
    seq = agent.state.read().heartbeat_seq
    proc, _ = tool_call(project)
    assert proc.stderr == b"" and agent.state.read().heartbeat_seq == seq + 1


def test_secrets_in_the_fields_a_hook_writes_are_redacted(project: Path, tmp_path: Path) -> None:
    """``source``, ``reason``, ``trigger`` and ``tool_name`` skipped the redactor: a secret placed
    there reached ops.jsonl, state.json and the session records."""
    hook(project, "session-start", "SessionStart", source=SECRET)
    for tool in (SECRET, SECRET, "mcp__vault__get " + SECRET, "Bash"):
        proc, _ = tool_call(project, tool=tool)
        assert proc.stderr == b""
    tool_call(project, tool=SECRET, failed=True)
    hook(project, "pre-compact", "PreCompact", trigger=SECRET)
    hook(project, "session-end", "SessionEnd", reason=SECRET)
    written = {}
    for root in (project / ".phoenix", Path(os.environ["XDG_RUNTIME_DIR"])):
        for path in root.rglob("*"):
            if path.is_file():
                written[path] = path.read_bytes()
    assert any(p.name == "phoenix.db" for p in written)  # the session records were looked at too
    leaked = [str(p) for p, data in written.items() if SECRET.encode() in data or SECRET[:30].encode() in data]
    assert not leaked
    ops = (project / ".phoenix" / "agents" / "default" / "ops.jsonl").read_text()
    assert ops.count("[REDACTED:anthropic-key]") >= 4  # written redacted, not dropped


def test_the_user_is_told_once_per_session(project: Path, agent: Agent) -> None:
    """A failing hook (or a SessionStart that finds the state damaged) gives Claude Code one line
    for the user, ``systemMessage``, the first time in a session; the hook still exits 0, writes
    one line on stderr and an ops event every time."""
    Path(agent.state.path).write_bytes(b'{\n  "schema_version": 1,\n  "status": "wor')  # torn in a string
    first, _ = tool_call(project, "sess-A")
    message = notice(first)
    assert message == (
        "Phoenix Protocol: the PostToolUse hook failed: .phoenix/agents/default/state.json is not valid JSON "
        "(Unterminated string starting at line 3 column 13). Run `phx doctor` to repair it."
    )
    assert set(json.loads(first.stdout)) == {"systemMessage"}  # nothing for the model
    for _ in range(2):
        again, _ = tool_call(project, "sess-A")
        assert again.stdout == b"" and again.stderr.count(b"\n") == 1
    stop, _ = hook(project, "stop", "Stop", "sess-B")
    assert stop.stdout == b"" and stop.stderr.count(b"\n") == 1  # Stop's output would keep the turn going
    other, _ = tool_call(project, "sess-B")
    assert notice(other) == message  # another session is told too
    start, _ = hook(project, "session-start", "SessionStart", "sess-C", source="startup")
    output = json.loads(start.stdout)
    assert output["systemMessage"] == (
        "Phoenix Protocol: .phoenix/agents/default/state.json is not valid JSON "
        "(Unterminated string starting at line 3 column 13). Run `phx doctor` to repair it."
    )
    assert "phx doctor" in output["hookSpecificOutput"]["additionalContext"]  # the model hears the same
    assert start.stderr.count(b"\n") == 1 and b"not valid JSON" in start.stderr
    later, _ = tool_call(project, "sess-C")
    assert later.stdout == b""
    events = [json.loads(line) for line in Path(agent.ops.path).read_text().splitlines()]
    failed = [e for e in events if e["event"] == "hook_failed"]
    assert len(failed) == 6 and all("not valid JSON" in e["meta"]["error"] for e in failed)
    assert [e["status"] for e in events if e["event"] == "session_start"][-1] == "error"


@pytest.mark.parametrize("junk", ["long-tail", "garbage-lines"])
def test_an_ops_log_ending_in_junk_costs_a_hook_nothing_and_the_doctor_keeps_it(
    project: Path, agent: Agent, junk: str
) -> None:
    """A torn tail longer than any record (10 MB of NULs), or half a million lines that are no
    records: the append's look at the log's end is bounded (it used to read back through all of
    it, or parse the whole file), fails, and the doctor repairs the log keeping what it held."""
    events_before = Path(agent.ops.path).read_bytes()
    with open(agent.ops.path, "ab") as fh:
        fh.write(b"\0" * (10 << 20) if junk == "long-tail" else b"x\n" * 500_000)
    proc, elapsed = tool_call(project, failed=True)  # a failed tool is always logged
    said = b"too large" if junk == "long-tail" else b"its last 10,000 lines are no records"
    assert elapsed < HOOK_BUDGET and said in proc.stderr and b"ops.jsonl" in proc.stderr, proc.stderr
    check = phx(project, "doctor", "--check")
    assert check.returncode == 3, check.stdout
    assert len(check.stdout.splitlines()) < 60  # not a line per unreadable line
    repaired = phx(project, "doctor")
    assert repaired.returncode == 0, repaired.stdout
    kept = [p for p in os.listdir(agent.dir) if p.startswith(("ops.jsonl.quarantine-", "ops.jsonl.corrupt-"))]
    assert len(kept) == 1, os.listdir(agent.dir)
    held = Path(agent.dir, kept[0]).read_bytes()
    if junk == "long-tail":
        assert held == b"\0" * (10 << 20)  # the tail, kept before it was cut
        assert Path(agent.ops.path).read_bytes().startswith(events_before)
    else:
        assert held.startswith(events_before) and held.endswith(b"x\n")  # the whole log, moved aside
    proc, _ = tool_call(project, "sess-2", failed=True)
    assert proc.stderr == b"", proc.stderr
    assert agent.state.read().open_loops  # the state was never at risk
