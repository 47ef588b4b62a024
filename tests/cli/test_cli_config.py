"""One ``phx`` command reads the configuration once and hands it down (agent, teams, store,
tokens, doctor, watchdog, export and import)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from phoenix_protocol.cli._main import cli

TEAM = "release-1"

COMMANDS = [
    ["checkpoint", "--summary", "Parser written"],
    ["checkpoint", "list"],
    ["restore"],
    ["sessions"],
    ["state", "show"],
    ["brief"],
    ["identity", "show"],
    ["memory", "store", "Timers drift under load"],
    ["memory", "recall", "timers"],
    ["recover", "--reason", "looping"],
    ["doctor", "--all-agents"],
    ["watchdog", "--once", "--dry-run"],
    ["team", "send", TEAM, "--from", "alice", "--to", "bob", "--subject", "parser", "--body", "done"],
    ["team", "inbox", TEAM, "--as", "bob"],
    ["team", "claim", TEAM, "--as", "alice"],
    ["team", "status", TEAM],
    ["team", "list"],
    ["team", "resume", TEAM],
    ["token", "create", "--agent", "alice"],
    ["token", "list"],
    ["status"],
]


def _prepare(
    project: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Work in ``project``, whose home gets an agent with a session and a team with a task."""
    monkeypatch.chdir(project)
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path / "run"))
    monkeypatch.setenv("PHOENIX_AGENT", "alice")
    for args in (
        ["restore"],
        ["team", "create", "release", "--lead", "lead", "--id", TEAM],
        ["team", "join", TEAM, "alice"],
        ["team", "join", TEAM, "bob"],
        ["team", "task", "add", TEAM, "Write the parser"],
    ):
        assert cli([*args, "--json"]) == 0, capsys.readouterr()
    capsys.readouterr()


@pytest.fixture
def in_project(
    project: Path, tmp_path: Path, backend: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> Path:
    """``_prepare``'d, on either store."""
    _prepare(project, tmp_path, monkeypatch, capsys)
    return project


@pytest.mark.parametrize("args", COMMANDS, ids=lambda args: " ".join(args[:2]))
def test_a_command_reads_the_configuration_once(
    in_project: Path, args: list[str], load_config_calls: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    load_config_calls.clear()
    code = cli([*args, "--json"])
    out = capsys.readouterr().out
    assert code == 0, out
    assert json.loads(out)["ok"] is True
    assert len(load_config_calls) == 1, load_config_calls


def test_export_and_import_read_the_configuration_once(
    project: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    load_config_calls: list[str],
    capsys: pytest.CaptureFixture[str],
) -> None:
    _prepare(project, tmp_path, monkeypatch, capsys)
    path = str(tmp_path / "home.phx.jsonl")
    for args in (["export", path], ["import", path, "--home", str(tmp_path / "new-home")]):
        load_config_calls.clear()
        assert cli([*args, "--json"]) == 0, capsys.readouterr()
        assert len(load_config_calls) == 1, (args, load_config_calls)
