"""Where the conversation is (``state.turn``: a prompt submitted to the end of its turn), the tmux
pane the SessionStart hook records, and the fresh brief after a refresh typed as ``/clear``."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from phoenix_protocol.core._home import Home
from phoenix_protocol.integrations._hooks import EVENTS, RECOVERY_BANNER, REFRESH_BANNER, run
from phoenix_protocol.integrations._install import HOOK_SPECS
from phoenix_protocol.services._agent import Agent


def _payload(project: Path, event: str, session: str = "sess-1", **extra: Any) -> bytes:
    body = {"session_id": session, "transcript_path": "/tmp/t.jsonl", "cwd": str(project), "hook_event_name": event}
    return json.dumps({**body, **extra}).encode()


def _agent(project: Path) -> Agent:
    return Agent.open("default", home=Home(str(project / ".phoenix")))


@pytest.fixture(autouse=True)
def _pinned(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PHOENIX_AGENT_PID", str(os.getpid()))
    monkeypatch.delenv("TMUX", raising=False)
    monkeypatch.delenv("TMUX_PANE", raising=False)


def test_user_prompt_is_an_event_and_claude_code_registers_it() -> None:
    assert EVENTS["user-prompt"] == "UserPromptSubmit"
    assert ("UserPromptSubmit", "user-prompt", 5, None) in HOOK_SPECS


def test_a_turn_runs_from_the_prompt_to_stop(project: Path) -> None:
    assert run(["session-start"], _payload(project, "SessionStart", source="startup"))[0] == 0
    state = _agent(project).state.read()
    assert state.turn == "idle" and state.tmux is None  # at its prompt; not in tmux
    started = state.turn_at_ms
    assert run(["user-prompt"], _payload(project, "UserPromptSubmit", prompt="fix the parser")) == (0, "", "")
    state = _agent(project).state.read()
    assert state.turn == "busy" and state.turn_at_ms is not None and started is not None
    assert state.turn_at_ms >= started and state.tool_calls == 0  # a prompt is no tool call
    tool: dict[str, Any] = {"tool_name": "Bash", "tool_input": {"command": "ls"}, "tool_response": {}}
    assert run(["post-tool-use"], _payload(project, "PostToolUse", **tool)) == (0, "", "")
    assert _agent(project).state.read().turn == "busy"
    assert run(["stop"], _payload(project, "Stop", stop_hook_active=False)) == (0, "", "")
    assert _agent(project).state.read().turn == "idle"
    # By Claude Code's event name too (the hook command may name the event as the CLI does).
    assert run(["UserPromptSubmit"], _payload(project, "UserPromptSubmit", prompt="again"))[0] == 0
    assert _agent(project).state.read().turn == "busy"


def test_a_tool_call_of_a_turn_whose_prompt_hook_did_not_run_is_busy(project: Path) -> None:
    run(["session-start"], _payload(project, "SessionStart", source="startup"))
    tool: dict[str, Any] = {"tool_name": "Read", "tool_input": {"file_path": "x"}, "tool_response": {}}
    run(["post-tool-use"], _payload(project, "PostToolUse", **tool))
    assert _agent(project).state.read().turn == "busy"


def test_session_start_records_the_tmux_pane(project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TMUX", "/tmp/tmux-1000/default,4242,0")
    monkeypatch.setenv("TMUX_PANE", "%7")
    run(["session-start"], _payload(project, "SessionStart", source="startup"))
    state = _agent(project).state.read()
    assert state.tmux == {"pane": "%7", "socket": "/tmp/tmux-1000/default"}
    assert state.pid == os.getpid()
    monkeypatch.setenv("TMUX_PANE", "not-a-pane")  # only tmux's own form is kept
    run(["session-start"], _payload(project, "SessionStart", session="sess-2", source="startup"))
    assert _agent(project).state.read().tmux is None


def test_after_a_forced_refresh_the_clear_session_starts_from_the_fresh_brief(project: Path) -> None:
    run(["session-start"], _payload(project, "SessionStart", source="startup"))
    agent = _agent(project)
    agent.state.set_status("working", "Port the parser to the new grammar", session_id="sess-1")
    run(["user-prompt"], _payload(project, "UserPromptSubmit", prompt="go on"))
    info = agent.checkpoints.force_refresh("120 minutes of continuous work")
    run(["stop"], _payload(project, "Stop", stop_hook_active=False))
    # The watchdog typed /clear: Claude Code ends the session (reason clear) and starts another
    # in the same process (source clear).
    assert run(["session-end"], _payload(project, "SessionEnd", reason="clear"))[0] == 0
    code, out, err = run(["session-start"], _payload(project, "SessionStart", session="sess-2", source="clear"))
    assert (code, err) == (0, "")
    context = json.loads(out)["hookSpecificOutput"]["additionalContext"]
    assert REFRESH_BANNER in context and "Port the parser to the new grammar" in context
    assert info.name in context  # the recovery checkpoint the refresh took
    state = _agent(project).state.read()
    assert state.refresh_requested is None and state.session_id == "sess-2"
    assert (state.status, state.turn) == ("working", "idle")


def test_a_clear_in_the_same_process_without_session_end_is_no_crash(project: Path) -> None:
    # Codex fires no SessionEnd before /clear's new session: the same process starts it.
    run(["session-start", "--client", "codex"], _payload(project, "SessionStart", source="startup"))
    agent = _agent(project)
    agent.state.set_status("working", "Port the parser to the new grammar", session_id="sess-1")
    agent.checkpoints.force_refresh("120 minutes of continuous work")
    _code, out, _err = run(
        ["session-start", "--client", "codex"], _payload(project, "SessionStart", session="sess-2", source="clear")
    )
    context = json.loads(out)["hookSpecificOutput"]["additionalContext"]
    assert REFRESH_BANNER in context and RECOVERY_BANNER not in context
    assert "another live process" not in context  # it is this very process
    # Without a refresh requested, a /clear hands the brief over, as after Claude Code's SessionEnd.
    _code, out, _err = run(
        ["session-start", "--client", "codex"], _payload(project, "SessionStart", session="sess-3", source="clear")
    )
    context = json.loads(out)["hookSpecificOutput"]["additionalContext"] if out else ""
    assert RECOVERY_BANNER not in context and REFRESH_BANNER not in context
    # Another process starting a session while this one's state says working is still a recovery.
    other = Agent.open("default", home=Home(str(project / ".phoenix")))
    other.state.change(lambda s: setattr(s, "pid", 1))
    _code, out, _err = run(
        ["session-start", "--client", "codex"], _payload(project, "SessionStart", session="sess-4", source="clear")
    )
    assert RECOVERY_BANNER in json.loads(out)["hookSpecificOutput"]["additionalContext"]


def test_gemini_gets_the_context_its_clear_drops_with_the_first_prompt(project: Path) -> None:
    gemini = ["--client", "gemini-cli"]
    run(["session-start", *gemini], _payload(project, "SessionStart", source="startup"))
    agent = _agent(project)
    agent.state.set_status("working", "Port the parser to the new grammar", session_id="sess-1")
    assert run(["user-prompt", *gemini], _payload(project, "BeforeAgent", prompt="go")) == (0, "", "")
    agent.checkpoints.force_refresh("120 minutes of continuous work")
    run(["stop", *gemini], _payload(project, "AfterAgent", prompt_response="ok"))
    run(["session-end", *gemini], _payload(project, "SessionEnd", reason="clear"))
    # Gemini CLI 0.61.0 shows a SessionStart's systemMessage after /clear, and drops its context...
    _code, out, _err = run(["session-start", *gemini], _payload(project, "SessionStart", session="s2", source="clear"))
    dropped = json.loads(out)["hookSpecificOutput"]["additionalContext"]
    assert REFRESH_BANNER in dropped
    # ...so the first prompt of the new conversation carries it (BeforeAgent's context), once.
    _code, out, _err = run(["user-prompt", *gemini], _payload(project, "BeforeAgent", session="s2", prompt="go on"))
    assert json.loads(out) == {"hookSpecificOutput": {"hookEventName": "BeforeAgent", "additionalContext": dropped}}
    assert run(["user-prompt", *gemini], _payload(project, "BeforeAgent", session="s2", prompt="more"))[1] == ""
    # Claude Code delivers its SessionStart context itself: nothing is kept for its prompt.
    run(["session-start"], _payload(project, "SessionStart", session="s3", source="clear"))
    assert run(["user-prompt"], _payload(project, "UserPromptSubmit", session="s3", prompt="x"))[1] == ""
