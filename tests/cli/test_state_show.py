"""``phx state show`` (text) shows drift and a pending refresh, as docs/drift.md and docs/cli.md say
(issue 36, found 7)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from phoenix_protocol.cli._main import cli
from phoenix_protocol.integrations._hooks import run


@pytest.fixture(autouse=True)
def _in_project(project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(project)
    monkeypatch.setenv("PHOENIX_HOOK_INLINE", "1")
    monkeypatch.setenv("COLUMNS", "200")


def _show(capsys: pytest.CaptureFixture[str]) -> str:
    assert cli(["state", "show"]) == 0
    return capsys.readouterr().out


def _hook(project: Path, event: str, **extra: object) -> None:
    body = {"session_id": "s1", "cwd": str(project), "hook_event_name": event, "transcript_path": "/dev/null"}
    code, _out, err = run(["post-tool-use-failure" if event == "PostToolUseFailure" else "session-start"],
                          json.dumps({**body, **extra}).encode())  # fmt: skip
    assert code == 0 and not err, err


def test_state_show_tells_drift_and_a_pending_refresh(project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _hook(project, "SessionStart", source="startup")
    assert cli(["state", "working", "Make the migration pass"]) == 0
    plain = _show(capsys)
    assert "drift" not in plain and "refresh" not in plain
    for _ in range(4):  # the same failing call: the repetition rule
        _hook(
            project, "PostToolUseFailure", tool_name="Bash", tool_input={"command": "alembic upgrade head"}, error="x"
        )
    text = _show(capsys)
    drift_line = next(line for line in text.splitlines() if line.strip().startswith("drift"))
    assert "repetition" in drift_line and "since" in drift_line, text
    refresh_line = next(line for line in text.splitlines() if line.strip().startswith("refresh"))
    assert "pending" in refresh_line and "checkpoint" in refresh_line, text


def test_state_show_tells_a_refresh_asked_by_hand(project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli(["state", "working", "Ship it"]) == 0
    assert cli(["recover", "--reason", "looping on the deploy"]) == 0
    capsys.readouterr()
    text = _show(capsys)
    refresh_line = next(line for line in text.splitlines() if line.strip().startswith("refresh"))
    assert "looping on the deploy" in refresh_line, text
