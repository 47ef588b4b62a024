"""state.json: fields, transitions, precedence, migration, unknown fields, corruption."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from phoenix_protocol.agent._state import SCHEMA_VERSION, AgentState
from phoenix_protocol.core._clock import ManualClock
from phoenix_protocol.core._errors import CorruptStateError, SchemaVersionError, StatusRefusedError, UsageError
from phoenix_protocol.services._agent import Agent


def _raw(agent: Agent) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(Path(agent.state.path).read_text())
    return data


def test_fresh_agent_reads_idle_without_creating_anything(agent: Agent) -> None:
    state = agent.state.read()
    assert state.status == "idle"
    assert not os.path.exists(agent.home.root)


def test_working_done_error_idle_set_the_seed_fields(agent: Agent, clock: ManualClock) -> None:
    agent.state.set_status("working", "Implementing user authentication")
    raw = _raw(agent)
    assert raw["status"] == "working"
    assert raw["current_task"] == "Implementing user authentication"
    assert raw["last_active"] == "2026-01-01T00:00:00.000Z"
    assert raw["schema_version"] == SCHEMA_VERSION
    assert raw["updated_by"] == "model"
    clock.advance(60)
    agent.state.set_status("idle", "Added JWT validation middleware")
    raw = _raw(agent)
    assert raw["status"] == "idle"
    assert raw["last_output"] == "Added JWT validation middleware"
    assert raw["current_task"] == "Implementing user authentication"
    assert raw["last_active"] == "2026-01-01T00:01:00.000Z"
    agent.state.set_status("error", "tests fail on CI")
    raw = _raw(agent)
    assert (raw["status"], raw["error_message"]) == ("error", "tests fail on CI")
    agent.state.set_status("idle", event="state_idle")
    raw = _raw(agent)
    assert (raw["status"], raw["current_task"], raw["error_message"]) == ("idle", "", None)


def test_every_transition_is_logged_with_seq(agent: Agent) -> None:
    agent.state.set_status("working", "a")
    agent.state.set_status("error", "b")
    agent.state.set_status("idle", "c")
    events, problems = agent.ops.read()
    assert not problems
    assert [e["event"] for e in events] == ["task_started", "task_error", "task_done"]
    assert [e["seq"] for e in events] == [1, 2, 3]
    assert events[1]["status"] == "error"
    assert events[0]["meta"]["to"] == "working"


def test_files_are_private(agent: Agent) -> None:
    agent.state.set_status("working", "x")
    assert os.stat(agent.home.root).st_mode & 0o777 == 0o700
    assert os.stat(agent.dir).st_mode & 0o777 == 0o700
    for name in ("state.json", "ops.jsonl"):
        assert os.stat(os.path.join(agent.dir, name)).st_mode & 0o777 == 0o600
    gitignore = Path(agent.home.root, ".gitignore").read_text()
    assert "*" in gitignore.splitlines()


def test_unknown_fields_written_by_other_tools_are_preserved(agent: Agent) -> None:
    agent.state.set_status("working", "x")
    raw = _raw(agent)
    raw["custom_tool"] = {"owner": "ci", "runs": [1, 2]}
    Path(agent.state.path).write_text(json.dumps(raw))
    agent.state.set_status("working", "y")
    raw = _raw(agent)
    assert raw["custom_tool"] == {"owner": "ci", "runs": [1, 2]}
    assert raw["current_task"] == "y"


def test_seed_format_migrates_forward(agent: Agent) -> None:
    agent.ensure()
    seed = {
        "status": "working",
        "current_task": "Implementing user authentication",
        "last_output": "Added JWT validation middleware",
        "last_active": "2026-02-02T10:30:00+00:00",
    }
    Path(agent.state.path).write_text(json.dumps(seed))
    state = agent.state.read()
    assert state.status == "working"
    assert state.last_active == "2026-02-02T10:30:00.000Z"
    assert state.schema_version == SCHEMA_VERSION
    agent.state.add_note("open_loop", "refresh tokens")
    assert _raw(agent)["schema_version"] == SCHEMA_VERSION


def test_newer_schema_is_refused_and_left_alone(agent: Agent) -> None:
    agent.ensure()
    content = json.dumps({"schema_version": SCHEMA_VERSION + 1, "status": "working", "current_task": "x"})
    Path(agent.state.path).write_text(content)
    with pytest.raises(SchemaVersionError, match="newer Phoenix"):
        agent.state.read()
    with pytest.raises(SchemaVersionError):
        agent.state.set_status("idle")
    assert Path(agent.state.path).read_text() == content


@pytest.mark.parametrize(
    "content",
    [
        "",
        "{",
        '{"status": "working", "current_task": "x"',
        "[1, 2]",
        '{"status": "sleeping"}',
        '{"heartbeat_seq": "7"}',
    ],
)
def test_corrupt_state_is_reported_with_its_path_and_never_reset(agent: Agent, content: str) -> None:
    agent.ensure()
    Path(agent.state.path).write_text(content)
    with pytest.raises(CorruptStateError) as info:
        agent.state.read()
    assert agent.state.path in str(info.value)
    assert "phx doctor" in str(info.value)
    with pytest.raises(CorruptStateError):
        agent.state.set_status("working", "overwrite?")
    assert agent.state.read_or_none() is None  # for readers that can do without it
    assert Path(agent.state.path).read_text() == content


def test_read_or_none_is_none_only_when_there_is_no_readable_state(agent: Agent) -> None:
    assert agent.state.read_or_none() is None and not os.path.exists(agent.state.path)
    agent.state.set_status("working", "parse logs")
    state = agent.state.read_or_none()
    assert state is not None and state.current_task == "parse logs"
    Path(agent.state.path).write_text(json.dumps({"schema_version": SCHEMA_VERSION + 1}))
    assert agent.state.read_or_none() is None


def test_notes_open_resolve(agent: Agent) -> None:
    _, first = agent.state.add_note("open_loop", "Need to add refresh token logic")
    _, second = agent.state.add_note("next_action", "Write integration tests for auth endpoints")
    assert (first, second) == (1, 2)
    state, item = agent.state.resolve_note(1)
    assert item["text"] == "Need to add refresh token logic"
    assert state.open_loops == []
    assert [n["id"] for n in state.next_actions] == [2]
    with pytest.raises(UsageError, match="the open ones are 2"):
        agent.state.resolve_note(7)
    events, _ = agent.ops.read()
    assert [e["event"] for e in events] == ["note_added", "note_added", "note_resolved"]


def test_bad_input_is_refused_before_anything_is_written(agent: Agent) -> None:
    with pytest.raises(UsageError):
        agent.state.set_status("sleeping", "x")
    with pytest.raises(UsageError):
        agent.state.set_status("working", "a\x00b")
    with pytest.raises(UsageError):
        agent.state.add_note("open_loop", "   ")
    assert not os.path.exists(agent.state.path)


def test_secrets_in_free_text_are_redacted_before_writing(agent: Agent) -> None:
    key = "AKIA" + "Z7Q4RM2XW6PLK3TB"  # AWS key ids are base32 (A-Z, 2-7)
    agent.state.set_status("working", f"deploy with aws key {key}")
    agent.state.add_note("next_action", "psql postgres://admin:Sup3rS3cret@db.internal/prod")
    for name in ("state.json", "ops.jsonl"):
        text = Path(agent.dir, name).read_text()
        assert key not in text
        assert "Sup3rS3cret" not in text
    assert "deploy with aws key" in agent.state.read().current_task


# -- precedence: watchdog > hook > model ---------------------------------------------------


def _watchdog_verdict(agent: Agent) -> None:
    agent.state.start_session("s1", process={"pid": 123, "start_time": 1.0, "host": "h"})
    agent.state.set_status("error", "stalled: agent process gone", source="watchdog", event="stalled")


def test_watchdog_verdict_stands_against_model_and_hook(agent: Agent) -> None:
    _watchdog_verdict(agent)
    with pytest.raises(StatusRefusedError, match="watchdog"):
        agent.state.set_status("working", "still here", source="model")
    with pytest.raises(StatusRefusedError):
        agent.state.set_status("idle", source="hook", session_id="s1")
    assert agent.state.read().status == "error"
    assert agent.state.read().updated_by == "watchdog"


def test_new_session_or_force_clears_a_verdict(agent: Agent) -> None:
    _watchdog_verdict(agent)
    agent.state.set_status("working", "I checked, carrying on", force=True)
    assert agent.state.read().status == "working"
    events, _ = agent.ops.read()
    assert events[-1]["meta"]["forced"] is True
    _watchdog_verdict(agent)
    _before, after = agent.state.start_session("s2")
    assert (after.status, after.updated_by, after.session_id) == ("working", "hook", "s2")


def test_session_end_stands_against_late_model_writes_of_that_session(agent: Agent) -> None:
    agent.state.start_session("s1")
    agent.state.end_session("s1", reason="logout")
    with pytest.raises(StatusRefusedError, match="SessionEnd"):
        agent.state.set_status("working", "late write", source="model", session_id="s1")
    # A person at a terminal (no session) or another session may start new work.
    agent.state.set_status("working", "next task", source="model")
    assert agent.state.read().status == "working"


def test_model_may_finish_its_task_inside_a_live_session(agent: Agent) -> None:
    agent.state.start_session("s1")
    agent.state.set_status("idle", "merged", source="model", session_id="s1")
    assert agent.state.read().status == "idle"


def test_stale_session_end_does_not_close_a_newer_session(agent: Agent) -> None:
    agent.state.start_session("old")
    agent.state.start_session("new")
    state = agent.state.end_session("old")
    assert (state.status, state.session_id) == ("working", "new")
    events, _ = agent.ops.read()
    assert events[-1]["event"] == "session_end"
    assert events[-1]["meta"]["stale"] is True


def test_agent_state_equality_and_copy() -> None:
    a = AgentState(current_task="x")
    b = a.copy()
    b.open_loops.append({"id": 1, "text": "t"})
    assert a != b
    assert a == AgentState(current_task="x")
