"""The brief's git context: what it reads, and a git that does not answer."""

from __future__ import annotations

import os
import stat
import time
from pathlib import Path

import pytest

from conftest import git, run_hook
from phoenix_protocol.core import _git
from phoenix_protocol.core._git import git_context


def test_context_of_a_work_tree(project: Path) -> None:
    (project / "new.txt").write_text("x\n")
    (project / "README.md").write_text("# changed\n")
    found = git_context(str(project))
    assert found is not None
    assert found.branch == "main" and found.head_subject == "Initial commit"
    assert found.head == git(project, "rev-parse", "--short", "HEAD").strip()
    assert sorted(found.changed) == [("??", "new.txt"), ("M", "README.md")] and found.changed_total == 2


def test_outside_a_work_tree_there_is_none(tmp_path: Path) -> None:
    assert git_context(str(tmp_path)) is None


def _hung_git(tmp_path: Path) -> tuple[Path, Path]:
    """A ``git`` first on PATH that logs each call, starts a child, and never answers."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    log = tmp_path / "git-calls.log"
    script = bin_dir / "git"
    script.write_text(f'#!/bin/sh\necho "$$ $*" >> {log}\nsleep 60 &\necho "child $!" >> {log}\nwait\n')
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return bin_dir, log


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(") ")[-1][0] != "Z"
    except FileNotFoundError:
        return False


def test_a_hung_git_costs_one_deadline_and_is_killed_with_its_children(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_git, "_unanswered", {}, raising=False)
    bin_dir, log = _hung_git(tmp_path)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    assert git_context(str(tmp_path), timeout=0.3) is None
    calls = log.read_text().splitlines()
    assert len(calls) == 2 and "rev-parse" in calls[0], calls  # one call, then its child
    # The child git started (sleep) is killed with it, not left behind holding the hook's pipes.
    child = int(calls[1].split()[1])
    deadline = time.monotonic() + 5
    while _alive(child) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert not _alive(child)
    # The same process does not ask it again for a while (each wait would add to the hook's time).
    assert git_context(str(tmp_path), timeout=0.3) is None
    assert len(log.read_text().splitlines()) == 2
    # After the pause it asks again.
    monkeypatch.setattr(_git, "_unanswered", {os.path.abspath(tmp_path): time.monotonic() - 1})
    assert git_context(str(tmp_path), timeout=0.3) is None
    assert len(log.read_text().splitlines()) == 4


def test_the_deadline_is_shared_by_the_calls(project: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A git that answers ``rev-parse`` but hangs afterwards: the later calls get what is left of
    one deadline, not a fresh one each."""
    monkeypatch.setattr(_git, "_unanswered", {}, raising=False)
    real = os.popen("command -v git").read().strip()
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    log = tmp_path / "git-calls.log"
    script = bin_dir / "git"
    script.write_text(
        f'#!/bin/sh\necho "$*" >> {log}\ncase "$*" in *rev-parse*) exec {real} "$@";; esac\nexec sleep 60\n'
    )
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    assert git_context(str(project), timeout=0.5) is None
    calls = log.read_text().splitlines()
    assert len(calls) == 2 and "symbolic-ref" in calls[1], calls  # no third call after the deadline


def test_session_start_asks_a_hung_git_once(project: Path, tmp_path: Path) -> None:
    """SessionStart builds a brief and restores (and PreCompact takes a checkpoint and writes a
    brief): with a git that never answers, each used to wait for it (about 2 s in all)."""
    bin_dir, log = _hung_git(tmp_path)
    env = {"PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}", "CLAUDE_PROJECT_DIR": str(project)}
    for command, event in (("session-start", "SessionStart"), ("pre-compact", "PreCompact")):
        before = len(log.read_text().splitlines()) if log.exists() else 0
        proc = run_hook(project, command, event, env, source="startup", trigger="auto")
        assert proc.returncode == 0, proc.stderr
        calls = [line for line in log.read_text().splitlines()[before:] if not line.startswith("child")]
        assert len(calls) == 1, (command, calls)
