"""``phx doctor --env`` with the real agent CLIs (the pinned npm packages of ``npm_clis``) on
``PATH`` as a user's installs put them (``claude``, ``gemini``, ``codex`` commands): each one's
``--version`` answer, within the deadline, all three asked at once; and Phoenix's Gemini CLI
extension as ``gemini extensions link`` leaves it."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
from pathlib import Path

import pytest
from claude_code import REPO_ROOT, ensure_claude_code
from codex_cli import ensure_codex
from gemini_cli import ensure_gemini_cli
from npm_clis import CLAUDE_CODE, CODEX, GEMINI_CLI

from phoenix_protocol.cli._main import cli
from phoenix_protocol.integrations import _environment

pytestmark = pytest.mark.e2e


def test_doctor_env_reports_the_installed_agent_clis_and_their_versions(
    capsys: pytest.CaptureFixture[str], project: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    bindir = tmp_path / "bin"
    bindir.mkdir()
    for name, argv in (("claude", ensure_claude_code()), ("gemini", ensure_gemini_cli()), ("codex", ensure_codex())):
        script = bindir / name
        script.write_text(f'#!/bin/sh\nexec {shlex.join(argv)} "$@"\n')
        script.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bindir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("DISABLE_AUTOUPDATER", "1")
    monkeypatch.setenv("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1")
    monkeypatch.chdir(project)
    monkeypatch.setattr(_environment, "VERSION_TIMEOUT", 60.0)  # the versions, not the deadline, on a busy machine
    assert cli(["doctor", "--env", "--json"]) == 0
    clis = {c["client"]: c for c in json.loads(capsys.readouterr().out)["clis"]}
    assert clis["claude-code"]["version"] == f"{CLAUDE_CODE.version} (Claude Code)", clis["claude-code"]
    assert clis["gemini-cli"]["version"] == GEMINI_CLI.version, clis["gemini-cli"]
    assert clis["codex"]["version"] == f"codex-cli {CODEX.version}", clis["codex"]
    for name in ("claude", "gemini", "codex"):
        assert any(c["path"] == str(bindir / name) for c in clis.values())

    linked = subprocess.run(
        [str(bindir / "gemini"), "extensions", "link", REPO_ROOT, "--consent"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert linked.returncode == 0, linked.stderr
    assert cli(["doctor", "--env", "--json"]) == 0
    hooks = {(h["client"], h["scope"]): h for h in json.loads(capsys.readouterr().out)["hooks"]}
    assert hooks[("gemini-cli", "user")]["plugin"] == "phoenix-protocol"
