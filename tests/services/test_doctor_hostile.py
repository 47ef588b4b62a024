"""``phx doctor`` and entries that are no file of the agent's: each of the agent's files replaced by
a FIFO, a symbolic link, a directory, another user's file or a file larger than Phoenix reads is
reported (``--check``: an error, not "healthy"), then moved aside whole and what was there rebuilt
from the ops log or a checkpoint; the thing moved aside and anything it points to stay as they
were."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from phoenix_protocol.core._home import Home
from phoenix_protocol.services._agent import Agent
from phoenix_protocol.services._doctor import Finding, check_home

ROOT_ONLY = pytest.mark.skipif(os.geteuid() != 0, reason="needs root: chown to another user")
DATA = [
    "state.json",
    "ops.jsonl",
    "ops.jsonl.1",
    "brief.md",
    "identity.yaml",
    "identity.digest",
    ".store-sync",
    "injections.json",
]
LOCKS = ["state.json.lock", "ops.jsonl.lock", "identity.yaml.lock", "injections.json.lock"]
OVERSIZE = {  # bytes just past what Phoenix reads of each (sparse files: no disk used)
    "state.json": (8 << 20) + 1,
    "ops.jsonl": (64 << 20) + 1,
    "ops.jsonl.1": (64 << 20) + 1,
    "brief.md": (1 << 20) + 1,
    "identity.yaml": (16 << 20) + 1,
    "identity.digest": (64 << 10) + 1,
    ".store-sync": 65,
    "injections.json": (1 << 20) + 1,
}


@pytest.fixture
def worked(agent: Agent) -> Agent:
    """An agent with a history in its ops log (rotated once), an identity and a checkpoint of it."""
    agent.state.start_session("s1")
    agent.state.set_status("working", "Port the scheduler to asyncio", session_id="s1")
    agent.state.add_note("open_loop", "Timer drift under load")
    agent.identity.add("skill", {"name": "python", "level": "expert"})
    agent.checkpoints.create("routine")
    agent.write_brief()
    with agent.ops.log.lock():
        os.rename(agent.ops.path, agent.ops.path + ".1")  # as a rotation leaves it
    agent.state.add_note("next_action", "Benchmark with 1k timers")
    Path(agent.dir, ".store-sync").write_bytes(b"0")
    from phoenix_protocol.integrations._context import record_injection  # what SessionStart keeps

    record_injection(agent, {"id": "phx-ctx-0123456789", "session_id": "s1", "kind": "full", "ms": 1, "facts": {}})
    for name in DATA + LOCKS:
        assert os.path.isfile(os.path.join(agent.dir, name)), name
    return agent


def doctor(agent: Agent, *, repair: bool) -> list[Finding]:
    fresh = Agent.open(agent.id, home=Home(agent.home.root), clock=agent.clock)  # a new process would
    return check_home(fresh.home, [fresh], repair=repair)


def errors(findings: list[Finding]) -> list[Finding]:
    return [f for f in findings if f.level == "error" and not f.repaired]


def make_fifo(path: str, _outside: Path) -> None:
    os.mkfifo(path, 0o600)


def make_link(path: str, outside: Path) -> None:
    os.symlink(outside, path)


def make_dir(path: str, _outside: Path) -> None:
    os.mkdir(path, 0o700)
    Path(path, "inside").write_bytes(b"kept")


def make_foreign(path: str, _outside: Path) -> None:
    Path(path).write_bytes(b"{}")
    os.chown(path, 65534, 65534)


HOSTILE: dict[str, tuple[Callable[[str, Path], None], str]] = {
    "fifo": (make_fifo, "named pipe (FIFO)"),
    "symlink": (make_link, "symbolic link"),
    "directory": (make_dir, "is a directory"),
    "foreign": (make_foreign, "owned by another user"),
}


@pytest.mark.parametrize("name", DATA + LOCKS)
@pytest.mark.parametrize("kind", list(HOSTILE))
def test_each_agent_file_replaced_is_reported_then_moved_aside_and_rebuilt(
    worked: Agent, tmp_path: Path, name: str, kind: str
) -> None:
    if kind == "foreign" and os.geteuid() != 0:
        pytest.skip("needs root: chown to another user")
    agent = worked
    expected = agent.state.read()
    outside = tmp_path / "outside.json"
    outside.write_bytes(b'{"status": "idle", "open_loops": []}')
    path = os.path.join(agent.dir, name)
    os.unlink(path)
    make, said = HOSTILE[kind]
    make(path, outside)
    before = os.lstat(path)

    checked = doctor(agent, repair=False)
    [problem] = [f for f in errors(checked) if f.path == path]
    assert said in problem.message and "phx doctor" not in problem.message
    assert os.lstat(path).st_ino == before.st_ino  # --check changes nothing

    repaired = doctor(agent, repair=True)
    assert not errors(repaired), [f.as_dict() for f in errors(repaired)]
    moved = [f for f in repaired if f.path == path and "moved aside as" in f.message]
    assert len(moved) == 1 and moved[0].repaired
    [kept] = [n for n in os.listdir(agent.dir) if n.startswith(name + ".quarantine-")]
    after = os.lstat(os.path.join(agent.dir, kept))
    assert (after.st_ino, after.st_mode, after.st_uid) == (before.st_ino, before.st_mode, before.st_uid)
    assert outside.read_bytes() == b'{"status": "idle", "open_loops": []}'
    if kind == "directory":
        assert Path(agent.dir, kept, "inside").read_bytes() == b"kept"

    state = agent.state.read()  # whatever was replaced, the agent's state is its own again
    assert [n["text"] for n in state.open_loops] == [n["text"] for n in expected.open_loops]
    assert state.current_task == expected.current_task
    if name == "identity.yaml":
        assert agent.identity.read().mutable["skills"][0]["name"] == "python"  # from the checkpoint
    assert not errors(doctor(agent, repair=False))  # healthy now
    agent.state.add_note("open_loop", "Written after the repair")  # and writable


@pytest.mark.parametrize("name", DATA)
def test_a_file_larger_than_phoenix_reads_is_reported_and_moved_aside_unread(worked: Agent, name: str) -> None:
    agent = worked
    expected = agent.state.read()
    path = os.path.join(agent.dir, name)
    with open(path, "r+b") as fh:
        fh.truncate(OVERSIZE[name])
    [problem] = [f for f in errors(doctor(agent, repair=False)) if f.path == path]
    assert "too large" in problem.message and f"{OVERSIZE[name]:,} bytes" in problem.message
    repaired = doctor(agent, repair=True)
    assert not errors(repaired), [f.as_dict() for f in errors(repaired)]
    [kept] = [n for n in os.listdir(agent.dir) if n.startswith(name + ".quarantine-")]
    assert os.path.getsize(os.path.join(agent.dir, kept)) == OVERSIZE[name]  # renamed, not copied
    state = agent.state.read()
    assert [n["text"] for n in state.open_loops] == [n["text"] for n in expected.open_loops]


@pytest.mark.parametrize("where", ["agents", "agents/tester"])
@pytest.mark.parametrize("kind", ["symlink", "file"])
def test_a_directory_of_the_home_that_is_a_link_or_a_file_is_reported_and_moved_aside(
    worked: Agent, tmp_path: Path, where: str, kind: str
) -> None:
    agent = worked
    path = os.path.join(agent.home.root, where)
    elsewhere = tmp_path / "elsewhere"
    os.rename(path, elsewhere)
    if kind == "symlink":
        os.symlink(elsewhere, path, target_is_directory=True)
    else:
        Path(path).write_bytes(b"not a directory")
    listing = sorted(os.listdir(elsewhere))
    [problem] = [f for f in errors(doctor(agent, repair=False)) if f.path == path]
    assert ("symbolic link" if kind == "symlink" else "not a directory") in problem.message
    repaired = doctor(agent, repair=True)
    assert not errors(repaired) and any(f.repaired and "moved aside as" in f.message for f in repaired)
    assert sorted(os.listdir(elsewhere)) == listing  # nothing behind the link touched
    assert [n for n in os.listdir(os.path.dirname(path)) if n.startswith(os.path.basename(path) + ".quarantine-")]
    fresh = Agent.open(agent.id, home=Home(agent.home.root), clock=agent.clock)
    fresh.state.add_note("open_loop", "A new start")  # the agent's directory is made anew
    assert stat.S_ISDIR(os.lstat(agent.dir).st_mode)


@ROOT_ONLY
def test_the_modes_pass_leaves_links_fifos_and_other_users_entries_alone(worked: Agent, tmp_path: Path) -> None:
    agent = worked
    target = tmp_path / "target"
    target.write_bytes(b"x")
    os.chmod(target, 0o644)
    os.symlink(target, os.path.join(agent.home.root, "link"))
    os.mkfifo(os.path.join(agent.home.root, "pipe"), 0o644)
    theirs = Path(agent.home.root, "theirs.txt")
    theirs.write_bytes(b"y")
    os.chmod(theirs, 0o644)
    os.chown(theirs, 65534, 65534)
    doctor(agent, repair=True)
    assert stat.S_IMODE(os.stat(target).st_mode) == 0o644
    assert stat.S_IMODE(os.lstat(os.path.join(agent.home.root, "pipe")).st_mode) == 0o644
    assert stat.S_IMODE(os.stat(theirs).st_mode) == 0o644


@pytest.mark.parametrize("name", [".gitignore", "phoenix.db", "phoenix.db-wal", "phoenix.db.lock"])
def test_a_home_file_that_is_a_fifo_or_a_link_is_reported_and_moved_aside(
    worked: Agent, tmp_path: Path, name: str
) -> None:
    """SQLite opens ``phoenix.db`` itself (following links, blocking on a FIFO): Phoenix looks at
    its files first and refuses them, and the doctor moves them aside."""
    agent = worked
    path = os.path.join(agent.home.root, name)
    if os.path.lexists(path):
        os.rename(path, tmp_path / "was-there")
    outside = tmp_path / "elsewhere.db"
    outside.write_bytes(b"not ours")
    os.symlink(outside, path) if name != "phoenix.db.lock" else os.mkfifo(path)
    [problem] = [f for f in errors(doctor(agent, repair=False)) if f.path == path]
    assert ("symbolic link" if name != "phoenix.db.lock" else "named pipe") in problem.message
    if name in ("phoenix.db", "phoenix.db-wal"):  # a new process (this one keeps its connection)
        listed = subprocess.run(
            [sys.executable, "-m", "phoenix_protocol", "checkpoint", "list", "--home", agent.home.root,
             "--agent", agent.id],
            capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip
        assert listed.returncode != 0 and "symbolic link" in listed.stderr, listed.stderr
    repaired = doctor(agent, repair=True)
    assert not errors(repaired), [f.as_dict() for f in errors(repaired)]
    assert [n for n in os.listdir(agent.home.root) if n.startswith(name + ".quarantine-")]
    assert outside.read_bytes() == b"not ours"
