"""``phx doctor --env`` (integrations/_environment.py) and ``phx --version`` (issue 37): the
versions, the agent CLIs on PATH (real processes: a CLI that answers, one that hangs and is
killed, one missing), the hooks of each CLI and scope with when the SessionStart hook last ran
(a real hook run), the store; and the commit of a clone."""

from __future__ import annotations

import importlib.metadata
import json
import os
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from phoenix_protocol import __version__
from phoenix_protocol.cli._main import cli, version_line
from phoenix_protocol.core._git import checkout_revision
from phoenix_protocol.integrations import _environment

SRC = str(Path(__file__).resolve().parents[2] / "src")


def _script(path: Path, body: str) -> None:
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(0o755)


def _session_start(project: Path, session: str) -> None:
    """Claude Code's SessionStart hook, run as the installed command runs it (a new process)."""
    payload = {"session_id": session, "cwd": str(project), "hook_event_name": "SessionStart", "source": "startup"}
    env = {**os.environ, "PYTHONPATH": SRC, "CLAUDE_PROJECT_DIR": str(project)}
    done = subprocess.run(
        [sys.executable, "-m", "phoenix_protocol", "hook", "session-start"],
        input=json.dumps(payload),
        capture_output=True,
        text=True,
        cwd=project,
        env=env,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr


def test_doctor_env_describes_versions_clis_hooks_and_store(
    capsys: pytest.CaptureFixture[str], project: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    bindir = tmp_path / "bin"
    bindir.mkdir()
    _script(bindir / "claude", 'echo "2.1.330 (Claude Code)"\n')
    hung = tmp_path / "gemini.pid"
    _script(bindir / "gemini", f'echo $$ > "{hung}"\nexec sleep 60\n')  # never answers
    monkeypatch.setenv("PATH", f"{bindir}{os.pathsep}/usr/bin{os.pathsep}/bin")  # no codex
    monkeypatch.setattr(_environment, "VERSION_TIMEOUT", 1.5)
    monkeypatch.chdir(project)

    assert cli(["install", "claude-code"]) == 0
    _session_start(project, "env-1")
    capsys.readouterr()

    started = time.monotonic()
    code = cli(["doctor", "--env", "--json"])
    took = time.monotonic() - started
    doc = json.loads(capsys.readouterr().out)
    assert code == 0 and doc["ok"] is True
    assert set(doc) == {"ok", "phoenix", "python", "sqlite", "psycopg", "clis", "hooks", "store"}
    assert doc["phoenix"]["version"] == __version__
    assert doc["phoenix"]["installed_in"] == SRC and doc["phoenix"]["commit"]  # run from this clone
    assert doc["python"]["version"] == ".".join(map(str, sys.version_info[:3]))
    assert doc["sqlite"] == {"version": sqlite3.sqlite_version}
    assert doc["psycopg"]["version"] == importlib.metadata.version("psycopg")

    clis = {c["client"]: c for c in doc["clis"]}
    assert set(clis) == {"claude-code", "gemini-cli", "codex"}
    assert clis["claude-code"]["version"] == "2.1.330 (Claude Code)"
    assert clis["claude-code"]["path"] == str(bindir / "claude")
    assert clis["gemini-cli"]["version"] is None and "no answer" in clis["gemini-cli"]["problem"]
    assert took < 10
    pid = int(hung.read_text())
    with pytest.raises(ProcessLookupError):  # killed, not left behind
        os.kill(pid, 0)
    assert clis["codex"]["path"] is None and clis["codex"]["problem"] is None

    hooks = {(h["client"], h["scope"]): h for h in doc["hooks"]}
    shared = hooks[("claude-code", "project")]
    assert shared["path"] == str(project / ".claude" / "settings.json")
    assert shared["installed"] is True and shared["kind"] == "portable"
    assert "SessionStart" in shared["events"] and "PostToolUse" in shared["events"]
    assert shared["last_session_start"]["session_id"] == "env-1"
    assert shared["last_session_start"]["agent"] == "default"
    assert hooks[("claude-code", "local")]["installed"] is False
    assert all(h["plugin"] is None for h in doc["hooks"])
    assert hooks[("gemini-cli", "project")]["installed"] is False
    assert hooks[("gemini-cli", "project")]["last_session_start"] is None
    assert hooks[("codex", "user")]["path"] == str(Path.home() / ".codex" / "hooks.json")

    assert doc["store"] == {
        "engine": "sqlite",
        "where": str(project / ".phoenix" / "phoenix.db"),
        "exists": True,
        "home": str(project / ".phoenix"),
    }

    # Phoenix's Claude Code plugin enabled in the local settings.
    (project / ".claude" / "settings.local.json").write_text('{"enabledPlugins": {"phoenix@phoenix-protocol": true}}')
    assert cli(["doctor", "--env", "--json"]) == 0
    hooks = {(h["client"], h["scope"]): h for h in json.loads(capsys.readouterr().out)["hooks"]}
    assert hooks[("claude-code", "local")]["plugin"] == "phoenix@phoenix-protocol"
    assert hooks[("claude-code", "local")]["installed"] is False
    assert hooks[("claude-code", "project")]["plugin"] is None
    # ... and Gemini CLI's extension, installed (a folder in the user's extensions).
    assert hooks[("gemini-cli", "user")]["plugin"] is None
    (Path.home() / ".gemini" / "extensions" / "phoenix-protocol").mkdir(parents=True)
    assert cli(["doctor", "--env", "--json"]) == 0
    hooks = {(h["client"], h["scope"]): h for h in json.loads(capsys.readouterr().out)["hooks"]}
    assert hooks[("gemini-cli", "user")]["plugin"] == "phoenix-protocol"

    # The same as text, and a settings file that is not JSON named, not fatal.
    (project / ".gemini").mkdir()
    (project / ".gemini" / "settings.json").write_text("{not json")
    assert cli(["doctor", "--env"]) == 0
    text = capsys.readouterr().out
    assert "2.1.330 (Claude Code)" in text and "not installed (no `codex` on PATH)" in text
    assert "is not valid JSON" in " ".join(text.split())
    assert "plugin phoenix@phoenix-protocol enabled" in " ".join(text.split())
    assert "extension phoenix-protocol enabled" in " ".join(text.split())


def test_doctor_env_with_a_postgres_store_names_the_server_never_the_password(
    capsys: pytest.CaptureFixture[str], project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(project)
    monkeypatch.setenv("PHOENIX_STORE", "postgresql://phoenix:s3cret-pw@db.internal:5433/phoenix")
    monkeypatch.setattr(_environment, "VERSION_TIMEOUT", 1.0)
    assert cli(["doctor", "--env", "--json"]) == 0
    out = capsys.readouterr().out
    assert "s3cret-pw" not in out
    assert json.loads(out)["store"]["where"] == "postgresql://db.internal:5433/phoenix"


def _git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, check=True).stdout.strip()


def test_checkout_revision_names_a_clones_commit_and_nothing_else(tmp_path: Path) -> None:
    clone = tmp_path / "clone"
    (clone / "src" / "phoenix_protocol").mkdir(parents=True)
    (clone / "pyproject.toml").write_text("[project]\nname = 'phoenix-protocol'\n")
    _git(clone, "init", "-q", "-b", "main")
    _git(clone, "add", "-A")
    _git(clone, "-c", "user.name=t", "-c", "user.email=t@example.com", "commit", "-qm", "first")
    head = _git(clone, "rev-parse", "--short=7", "HEAD")
    assert checkout_revision(str(clone / "src")) == head
    _git(clone, "-c", "user.name=t", "-c", "user.email=t@example.com", "tag", "-a", "v0.2.0", "-m", "0.2.0")
    assert checkout_revision(str(clone / "src")) == "v0.2.0"
    (clone / "pyproject.toml").write_text("[project]\nname = 'phoenix-protocol'\nversion = '1'\n")
    assert checkout_revision(str(clone / "src")) == "v0.2.0-dirty"
    # An installed package (site-packages), even inside someone's work tree, names no commit.
    site = clone / "venv" / "lib" / "python3.11" / "site-packages"
    site.mkdir(parents=True)
    assert checkout_revision(str(site)) is None
    assert checkout_revision(str(tmp_path / "elsewhere" / "src")) is None


def test_version_names_the_commit_when_run_from_this_clone(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli(["--version"]) == 0
    line = capsys.readouterr().out.strip()
    assert line == version_line()
    revision = checkout_revision(SRC)
    assert revision and line == f"phx, version {__version__} (git {revision})"
