"""``phx persona check TRANSCRIPT``: each assistant message of a Claude Code transcript (JSONL, in
Claude Code's shape: one line per content block, sharing the message id) checked against the
identity core; tool calls' commands count as acts."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from phoenix_protocol.cli._main import cli
from phoenix_protocol.core._home import Home
from phoenix_protocol.services._agent import Agent

CORE = {
    "name": "zero",
    "role": "release engineer",
    "principles": ["tests before merge", "never force-push to main", "every release gets a changelog entry"],
}


def _line(kind: str, message: dict[str, Any], n: int) -> str:
    return json.dumps(
        {
            "parentUuid": None,
            "isSidechain": False,
            "type": kind,
            "message": message,
            "uuid": f"u-{n}",
            "timestamp": f"2026-11-28T03:{n:02d}:00.000Z",
            "sessionId": "0b6f3c1e-7a2d-4e95-8c41-2f9d6a0b7e53",
        }
    )


def _assistant(msg_id: str, block: dict[str, Any]) -> dict[str, Any]:
    return {"id": msg_id, "type": "message", "role": "assistant", "model": "claude", "content": [block]}


def _transcript(path: Path) -> Path:
    lines = [
        _line("user", {"role": "user", "content": "Cut the 2.5.0 release."}, 1),
        _line(
            "assistant", _assistant("msg_1", {"type": "text", "text": "Tagged 2.5.0 and wrote the changelog entry."}), 2
        ),
        _line(
            "assistant",
            _assistant(
                "msg_2",
                {"type": "tool_use", "id": "t1", "name": "Bash", "input": {"command": "git push origin v2.5.0"}},
            ),
            3,
        ),
        _line("user", {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "ok"}]}, 4),
        # One message in two lines: its text, then a tool call that force-pushes main.
        _line("assistant", _assistant("msg_3", {"type": "text", "text": "Cleaning up the history of the branch."}), 5),
        _line(
            "assistant",
            _assistant(
                "msg_3",
                {
                    "type": "tool_use",
                    "id": "t2",
                    "name": "Bash",
                    "input": {"command": "git push --force-with-lease origin HEAD:main"},
                },
            ),
            6,
        ),
        "not json at all",
        _line("assistant", _assistant("msg_4", {"type": "text", "text": "I force-pushed the fix to main."}), 7),
    ]
    path.write_text("\n".join(lines) + "\n")
    return path


def _home(project: Path) -> str:
    home = project / ".phoenix"
    Agent.open("default", home=Home(str(home))).identity.reset_core(CORE)
    return str(home)


def test_check_a_transcript_json(project: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    home = _home(project)
    transcript = _transcript(tmp_path / "session.jsonl")
    code = cli(["persona", "check", str(transcript), "--home", home, "--json"])
    report = json.loads(capsys.readouterr().out)
    assert code == 5
    assert (report["messages"], report["failed"], report["passed"]) == (4, 2, False)
    by_id = {r["id"]: r for r in report["results"]}
    assert by_id["msg_1"]["passed"] and by_id["msg_2"]["passed"]
    [forbidden] = [s for s in by_id["msg_3"]["signals"] if s["kind"] == "forbidden_action"]
    assert forbidden["how"] == "tool call" and "HEAD:main" in forbidden["evidence"]
    assert by_id["msg_3"]["line"] == 5  # the line of its first block (counted from 1)
    assert any(s["kind"] == "forbidden_action" for s in by_id["msg_4"]["signals"])
    # Nothing recorded: the check changes no state.
    agent = Agent.open("default", home=Home(home))
    assert not [e for e in agent.ops.read()[0] if e["event"] == "drift_check"]


def test_check_a_transcript_text(project: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    home = _home(project)
    transcript = _transcript(tmp_path / "session.jsonl")
    assert cli(["persona", "check", str(transcript), "--home", home]) == 5
    text = capsys.readouterr().out
    assert "4 assistant messages checked, 2 drifted" in text
    assert "forbidden by 'never force-push to main'" in text
    assert "Tagged 2.5.0" not in text  # passing messages only with --all
    assert cli(["persona", "check", str(transcript), "--home", home, "--all"]) == 5
    assert "Tagged 2.5.0" in capsys.readouterr().out


def test_a_clean_transcript_exits_0_and_a_missing_one_is_a_usage_error(
    project: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    home = _home(project)
    clean = tmp_path / "clean.jsonl"
    clean.write_text(_line("assistant", _assistant("m", {"type": "text", "text": "Tagged 2.5.0."}), 1) + "\n")
    assert cli(["persona", "check", str(clean), "--home", home, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["passed"] is True
    assert cli(["persona", "check", str(tmp_path / "missing.jsonl"), "--home", home]) == 2
    assert "cannot read the transcript" in capsys.readouterr().err
