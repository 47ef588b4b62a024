"""Gemini CLI's hooks through ``phx hook … --client gemini-cli``, with the payloads Gemini CLI 0.61.0
really gave (``tests/data/gemini-cli/``): a failed tool call is told in ``tool_response`` (a shell
command's exit code, another tool's ``error``), AfterAgent's ``prompt_response`` is the last answer,
and PreCompress, which Gemini fires before every model call, is throttled."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from phoenix_protocol import Agent
from phoenix_protocol.core._home import Home
from phoenix_protocol.integrations._clients import CLAUDE_CODE, GEMINI_CLI, adapt_payload
from phoenix_protocol.integrations._hooks import run
from phoenix_protocol.integrations._install import settings_path

DATA = Path(__file__).parents[1] / "data" / "gemini-cli"
RECORDED = "/work/project"


def recorded(project: Path) -> list[dict[str, Any]]:
    """The recorded payloads of the session that ran ``do things`` (in order), moved to ``project``."""
    rows = []
    for line in (DATA / "payloads-0.61.0.jsonl").read_text().splitlines():
        payload = json.loads(line.replace(RECORDED, str(project)))
        if payload["session_id"].startswith("ab96dd83"):
            rows.append(payload)
    return rows


def hook(event: str, payload: dict[str, Any]) -> tuple[str, str]:
    code, out, err = run([event, "--client", "gemini-cli"], json.dumps(payload).encode())
    assert code == 0
    return out, err


def _agent(project: Path) -> Agent:
    return Agent.open("default", home=Home(str(project / ".phoenix")))


def _state(project: Path) -> dict[str, Any]:
    return json.loads((project / ".phoenix" / "agents" / "default" / "state.json").read_text())  # type: ignore[no-any-return]


def _events(project: Path, name: str) -> list[dict[str, Any]]:
    lines = (project / ".phoenix" / "agents" / "default" / "ops.jsonl").read_text().splitlines()
    return [e for e in map(json.loads, lines) if e.get("event") == name]


@pytest.fixture
def gemini_env(project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """What Gemini CLI gives its hooks: the project as GEMINI_PROJECT_DIR (and CLAUDE_PROJECT_DIR)."""
    monkeypatch.setenv("GEMINI_PROJECT_DIR", str(project))
    monkeypatch.setenv("CLAUDE_PROJECT_DIR", str(project))
    monkeypatch.setenv("PHOENIX_HOOK_INLINE", "1")


# -- payloads ------------------------------------------------------------------------------------


def test_recorded_after_tool_payloads_say_which_calls_failed(project: Path) -> None:
    outcomes = []
    for payload in recorded(project):
        if payload["hook_event_name"] == "AfterTool":
            response = adapt_payload(GEMINI_CLI, payload)["tool_response"]
            outcomes.append((payload["tool_name"], response.get("is_error", False), response.get("error")))
    assert outcomes == [
        ("run_shell_command", False, None),
        ("write_file", False, None),
        ("run_shell_command", True, "exit code 2"),  # `ls` of a missing folder
        ("read_file", True, f"File not found: {project}/missing.txt"),
        ("replace", False, None),
    ]


@pytest.mark.parametrize(
    ("content", "display", "error"),
    [
        # An output whose last line reads like the tool's own line is the output (returnDisplay says so).
        ("Output: build ok\nExit Code: 3\nProcess Group PGID: 7", "build ok\nExit Code: 3", None),
        ("Output: Error: not really\nProcess Group PGID: 7", "Error: not really", None),
        ("Output: (empty)\nExit Code: 1\nProcess Group PGID: 7", "Command exited with code: 1", "exit code 1"),
        (
            "Output: (empty)\nSignal: SIGTERM\nProcess Group PGID: 7",
            "Command terminated by signal: SIGTERM",
            "signal: SIGTERM",
        ),
        ("Output: x\nError: spawn bash ENOENT\nProcess Group PGID: 7", "x", "error: spawn bash ENOENT"),
        # Coloured output (returnDisplay is not the text): the lines are read from the end.
        ("Output: x\nExit Code: 127\nProcess Group PGID: 7", [{"ansi": 1}], "exit code 127"),
        ("Output: fine", "fine", None),
    ],
)
def test_a_shell_commands_failure_is_read_from_the_lines_after_its_output(
    content: str, display: object, error: str | None
) -> None:
    response = {"llmContent": f"<untrusted_context>\n{content}\n</untrusted_context>", "returnDisplay": display}
    payload = adapt_payload(GEMINI_CLI, {"tool_name": "run_shell_command", "tool_response": response})
    assert payload["tool_response"].get("error") == error
    assert payload["tool_response"].get("is_error", False) is (error is not None)


def test_after_agent_gives_the_last_answer_and_no_transcript_is_read(project: Path) -> None:
    after_agent = next(p for p in recorded(project) if p["hook_event_name"] == "AfterAgent")
    adapted = adapt_payload(GEMINI_CLI, dict(after_agent))
    assert adapted["last_assistant_message"] == "All done."
    # Gemini's chat files are not Claude Code's transcripts: Phoenix's own records decide (_context).
    assert "transcript_path" not in adapted
    claude = adapt_payload(CLAUDE_CODE, dict(after_agent))
    assert claude["transcript_path"] == after_agent["transcript_path"]


# -- a recorded session through the hooks ---------------------------------------------------------


@pytest.mark.usefixtures("gemini_env")
def test_a_recorded_session_through_the_hooks(project: Path) -> None:
    hooks = {native: ours for native, ours, _, _ in GEMINI_CLI.hooks}
    for payload in recorded(project):
        event = hooks.get(payload["hook_event_name"])
        if event is None:
            continue  # BeforeTool, BeforeAgent: not registered
        _out, err = hook(payload["hook_event_name"], payload)  # the CLI's own name works too
        assert err == "", err
        if payload["hook_event_name"] == "AfterTool" and payload["tool_name"] == "read_file":
            state = _state(project)
            assert state["last_tool"]["ok"] is False
            assert "File not found" in state["last_tool"]["error"]
    state = _state(project)
    assert state["status"] == "idle"  # SessionEnd
    assert state["session_id"] == recorded(project)[0]["session_id"]
    assert state["tool_calls"] == 5
    work = json.dumps(state["recent_work"])
    assert "echo hello-from-shell" in work and "ls /nonexistent-dir" in work
    assert "a.txt" in work and str(project) not in work  # the file relative to the project
    failed = [(e["meta"].get("tool"), e["meta"]["error"]) for e in _events(project, "tool_failed")]
    assert failed == [("run_shell_command", "exit code 2"), ("read_file", f"File not found: {project}/missing.txt")]
    assert _events(project, "session_end")


# -- PreCompress, fired before every model call ----------------------------------------------------


def _start(project: Path, monkeypatch: pytest.MonkeyPatch, at: int) -> dict[str, Any]:
    base = {"session_id": "gem-1", "cwd": str(project), "timestamp": "x"}
    monkeypatch.setenv("PHOENIX_NOW_MS", str(at))
    hook("SessionStart", {**base, "hook_event_name": "SessionStart", "source": "startup"})
    return base


def _pre_compress(monkeypatch: pytest.MonkeyPatch, base: dict[str, Any], at: int, trigger: str = "auto") -> None:
    monkeypatch.setenv("PHOENIX_NOW_MS", str(at))
    out, err = hook("PreCompress", {**base, "hook_event_name": "PreCompress", "trigger": trigger})
    assert (out, err) == ("", "")


def _pre_compact_checkpoints(project: Path) -> int:
    """The PreCompress hooks that did their work: each logs ``pre_compact`` and takes a routine
    checkpoint (``keep_routine`` keeps the newest 3 of those)."""
    done = len(_events(project, "pre_compact"))
    assert len(_agent(project).checkpoints.entries("routine")) == min(done, 3)
    return done


@pytest.mark.usefixtures("gemini_env")
def test_automatic_pre_compress_is_throttled(project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    t0 = 1_800_000_000_000
    minute = 60_000
    base = _start(project, monkeypatch, t0)
    for i in range(1, 61):  # one model call every 10 s for 10 minutes from the session's first
        _pre_compress(monkeypatch, base, t0 + i * 10_000)
    assert _pre_compact_checkpoints(project) == 0
    _pre_compress(monkeypatch, base, t0 + 10 * minute + 10_000)  # ten minutes after the first: one
    assert _pre_compact_checkpoints(project) == 1
    for i in range(1, 30):
        _pre_compress(monkeypatch, base, t0 + 10 * minute + 10_000 + i * 10_000)
    assert _pre_compact_checkpoints(project) == 1
    _pre_compress(monkeypatch, base, t0 + 15 * minute, trigger="manual")  # /compress: always
    assert _pre_compact_checkpoints(project) == 2
    assert [e["meta"]["trigger"] for e in _events(project, "pre_compact")] == ["auto", "manual"]
    _pre_compress(monkeypatch, base, t0 + 24 * minute)  # within 10 minutes of the manual one's checkpoint
    assert _pre_compact_checkpoints(project) == 2
    _pre_compress(monkeypatch, base, t0 + 26 * minute)
    assert _pre_compact_checkpoints(project) == 3
    # A clock set back (the mark in the future) does not stop them for good.
    _pre_compress(monkeypatch, base, t0 + 1 * minute)
    assert _pre_compact_checkpoints(project) == 4
    # A new session's first PreCompress starts its interval again.
    other = {**base, "session_id": "gem-2"}
    _pre_compress(monkeypatch, other, t0 + 60 * minute)
    assert _pre_compact_checkpoints(project) == 4
    mark = (project / ".phoenix" / "agents" / "default" / ".pre-compact").read_text()
    assert mark.startswith(str(t0 + 60 * minute) + " ") and "gem-2" not in mark  # a digest, not the id


@pytest.mark.usefixtures("gemini_env")
def test_pre_compress_unthrottled_with_interval_zero_and_claude_codes_never(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    t0 = 1_800_000_000_000
    base = _start(project, monkeypatch, t0)
    monkeypatch.setenv("PHOENIX_PRE_COMPACT_INTERVAL_MINUTES", "0")
    for i in range(1, 4):
        _pre_compress(monkeypatch, base, t0 + i * 1000)
    assert _pre_compact_checkpoints(project) == 3  # the session's first too
    monkeypatch.delenv("PHOENIX_PRE_COMPACT_INTERVAL_MINUTES")
    # Claude Code's PreCompact means a compaction: never throttled.
    monkeypatch.setenv("PHOENIX_NOW_MS", str(t0 + 5000))
    code, out, err = run(["pre-compact"], json.dumps({**base, "trigger": "auto"}).encode())
    assert (code, out, err) == (0, "", "")
    assert _pre_compact_checkpoints(project) == 4


def test_gemini_user_settings_follow_gemini_cli_home(tmp_path: Path) -> None:
    env = {"HOME": str(tmp_path / "home")}
    assert settings_path("user", env=env, client=GEMINI_CLI) == str(tmp_path / "home" / ".gemini" / "settings.json")
    env["GEMINI_CLI_HOME"] = str(tmp_path / "elsewhere")
    assert settings_path("user", env=env, client=GEMINI_CLI) == str(
        tmp_path / "elsewhere" / ".gemini" / "settings.json"
    )
    assert os.path.basename(GEMINI_CLI.user_config_dir(env)) == ".gemini"


@pytest.mark.usefixtures("gemini_env")
def test_a_failing_hook_tells_gemini_users_once(project: Path) -> None:
    """Gemini CLI shows the user a hook's stderr whenever its stdout is empty: a failed hook prints
    ``{}`` then, and the ``systemMessage`` notice once a session."""
    base = {"session_id": "gem-2", "cwd": str(project), "timestamp": "x"}
    hook("SessionStart", {**base, "hook_event_name": "SessionStart", "source": "startup"})
    (project / ".phoenix" / "agents" / "default" / "state.json").write_text('{"status": "work')
    after = {**base, "hook_event_name": "AfterTool", "tool_name": "glob", "tool_input": {}, "tool_response": {}}
    first, err = hook("AfterTool", after)
    assert json.loads(first)["systemMessage"].startswith("Phoenix Protocol: the AfterTool hook failed: ")
    assert err.startswith("phoenix: post-tool-use hook: ")
    again, err = hook("AfterTool", after)
    assert (again, err.startswith("phoenix: post-tool-use hook: ")) == ("{}\n", True)
    # Claude Code does not show it: nothing on stdout there.
    code, out, err = run(["post-tool-use"], json.dumps({**after, "session_id": "claude-1"}).encode())
    assert (code, err.startswith("phoenix: ")) == (0, True) and not out.startswith("{}")


def test_gemini_s_cosmetic_arguments_do_not_change_a_calls_digest() -> None:
    """Drift compares digests of tool inputs: the same edit or command said differently is the same call."""
    from phoenix_protocol.integrations._hooks import _digest

    edit = {"file_path": "/p/a.txt", "old_string": "x", "new_string": "y"}
    assert _digest({**edit, "instruction": "fix the typo"}) == _digest({**edit, "instruction": "again"})
    shell = {"command": "pytest -q"}
    assert _digest({**shell, "is_background": False, "description": "run tests"}) == _digest(shell)
    assert _digest({**edit, "new_string": "z"}) != _digest(edit)
