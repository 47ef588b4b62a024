"""Hooks and checkpoints: PreCompact and SessionEnd take one, SessionStart restores, the
heartbeat claims time-based ones and takes them off the hot path, forced refresh."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from conftest import change_checkpoint
from phoenix_protocol.core._home import Home
from phoenix_protocol.integrations._hooks import run
from phoenix_protocol.services._agent import Agent


def _payload(project: Path, event: str, session: str = "sess-1", **extra: Any) -> bytes:
    body = {
        "session_id": session,
        "transcript_path": "/dev/null",
        "cwd": str(project),
        "hook_event_name": event,
        **extra,
    }
    return json.dumps(body).encode()


def _agent(project: Path) -> Agent:
    return Agent.open("default", home=Home(str(project / ".phoenix")))


def _types(project: Path) -> list[str]:
    return [e.checkpoint_type for e in _agent(project).checkpoints.entries()]


def _context(out: str) -> str:
    return str(json.loads(out)["hookSpecificOutput"]["additionalContext"])


def test_pre_compact_and_session_end_take_checkpoints(project: Path) -> None:
    run(["session-start"], _payload(project, "SessionStart", source="startup"))
    _agent(project).state.set_status("working", "Write the parser", session_id="sess-1")
    assert run(["pre-compact"], _payload(project, "PreCompact", trigger="auto")) == (0, "", "")
    assert _types(project) == ["routine"]
    assert run(["session-end"], _payload(project, "SessionEnd", reason="other")) == (0, "", "")
    assert _types(project) == ["session", "routine"]
    from phoenix_protocol.services._sessions import list_sessions

    [session] = list_sessions(_agent(project))
    assert (
        session["session_id"] == "sess-1"
        and session["ended_at"]
        and session["checkpoint"].endswith("_session.checkpoint")
    )


@pytest.mark.parametrize("odd", [None, "../x", "s" * 300, "sessi\u00f3n-\u00e9", ""])
def test_an_odd_or_missing_session_id_still_ends_its_session_with_a_checkpoint(project: Path, odd: Any) -> None:
    from phoenix_protocol.services._sessions import list_sessions

    def payload(event: str, **extra: Any) -> bytes:
        body = json.loads(_payload(project, event, **extra))
        if odd is None:
            del body["session_id"]
        else:
            body["session_id"] = odd
        return json.dumps(body).encode()

    if odd is None:  # the start had one; the end payload lacks it
        run(["session-start"], _payload(project, "SessionStart", session="abc-1", source="startup"))
    else:
        run(["session-start"], payload("SessionStart", source="startup"))
    assert run(["session-end"], payload("SessionEnd", reason="other")) == (0, "", "")
    assert _types(project) == ["session"]
    [session] = list_sessions(_agent(project))
    assert session["status"] == "ended" and session["started_at"] and session["duration_seconds"] is not None
    if odd is None:
        assert session["session_id"] == "abc-1"
    else:
        assert session["session_id"] != "unknown" and len(session["session_id"]) <= 128


def test_a_cd_out_of_the_project_does_not_move_the_home(
    project: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The payload's cwd follows the session's `cd`; CLAUDE_PROJECT_DIR stays the project."""
    monkeypatch.delenv("PHOENIX_HOME", raising=False)
    monkeypatch.setenv("CLAUDE_PROJECT_DIR", str(project))
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    run(["session-start"], _payload(project, "SessionStart", source="startup"))
    moved = str(elsewhere)
    bash = {"command": "cd /elsewhere"}
    assert (
        run(["post-tool-use"], _payload(project, "PostToolUse", cwd=moved, tool_name="Bash", tool_input=bash))[0] == 0
    )
    assert run(["session-end"], _payload(project, "SessionEnd", cwd=moved, reason="other"))[0] == 0
    assert not (elsewhere / ".phoenix").exists()
    assert _types(project) == ["session"]


def test_session_start_restores_and_hands_over_the_last_session(project: Path) -> None:
    run(["session-start"], _payload(project, "SessionStart", source="startup"))
    agent = _agent(project)
    agent.state.set_status("working", "Write the parser", session_id="sess-1")
    agent.state.add_note("next_action", "Handle nested brackets")
    agent.state.set_status("idle", "Parser handles flat input", session_id="sess-1")
    run(["session-end"], _payload(project, "SessionEnd", reason="logout"))
    code, out, err = run(["session-start"], _payload(project, "SessionStart", session="sess-2", source="startup"))
    assert (code, err) == (0, "")
    context = _context(out)
    assert "RECOVERY DETECTED" not in context  # a clean end: a hand-over, not a recovery
    assert "Handle nested brackets" in context and "Parser handles flat input" in context
    # The checkpoint restored holds nothing the state does not: no bookkeeping about it either.
    assert "checkpoint" not in context.lower() and "Pending:" not in context
    identity = _agent(project).identity.read()
    assert identity.mutable["accumulated_experience"] == 2
    assert identity.mutable["state"]["last_session_at"]


def test_a_new_session_is_told_when_no_checkpoint_could_be_restored(project: Path) -> None:
    run(["session-start"], _payload(project, "SessionStart", source="startup"))
    run(["session-end"], _payload(project, "SessionEnd", reason="other"))
    agent = _agent(project)
    [only] = agent.checkpoints.entries()
    change_checkpoint(agent, only.name, lambda content: "garbage")
    code, out, err = run(["session-start"], _payload(project, "SessionStart", session="sess-2", source="startup"))
    assert (code, err) == (0, "")
    context = _context(out)
    assert "restore problem:" in context and "checksum mismatch" in context
    assert "no checkpoint could be restored" in context


def test_restore_on_start_can_be_switched_off(project: Path) -> None:
    (project / ".phoenix").mkdir()
    (project / ".phoenix" / "phoenix.toml").write_text("restore_on_start = false\ncheckpoint_on_exit = false\n")
    run(["session-start"], _payload(project, "SessionStart", source="startup"))
    _agent(project).state.add_note("next_action", "x")
    run(["session-end"], _payload(project, "SessionEnd", reason="other"))
    assert _types(project) == []
    assert run(["session-start"], _payload(project, "SessionStart", session="s2", source="startup"))[1] == ""


def _work_for_hours(project: Path, hours: float, monkeypatch: pytest.MonkeyPatch) -> tuple[int, str, str]:
    run(["session-start"], _payload(project, "SessionStart", source="startup"))
    _agent(project).state.set_status("working", "Long refactor", session_id="sess-1")
    started = _agent(project).state.read().work_started_ms
    assert started is not None
    monkeypatch.setenv("PHOENIX_NOW_MS", str(started + int(hours * 3_600_000)))
    tool: dict[str, Any] = {
        "tool_name": "Edit",
        "tool_input": {"file_path": "a.py"},
        "tool_response": {"success": True},
    }
    return run(["post-tool-use"], _payload(project, "PostToolUse", **tool))


def test_heartbeat_takes_a_routine_checkpoint_after_30_minutes(project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PHOENIX_HOOK_INLINE", "1")
    assert _work_for_hours(project, 0.5, monkeypatch) == (0, "", "")
    assert _types(project) == ["routine"]
    events, _ = _agent(project).ops.read()
    assert any(e["event"] == "checkpoint_due" for e in events)


def test_heartbeat_checkpoint_runs_in_a_detached_child(project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PHOENIX_HOOK_INLINE", raising=False)
    assert _work_for_hours(project, 0.5, monkeypatch) == (0, "", "")
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and _types(project) != ["routine"]:
        time.sleep(0.05)
    assert _types(project) == ["routine"]
    # The child leaves with os._exit, which skips atexit: it finished its write-behind first.
    agent = _agent(project)
    name = agent.checkpoints.entries()[0].name

    def finished() -> bool:  # the event follows the checkpoint
        return any(e["event"] == "checkpoint_created" and e["meta"]["name"] == name for e in agent.ops.read()[0])

    while time.monotonic() < deadline and not finished():
        time.sleep(0.05)
    assert finished()


def test_a_due_checkpoint_whose_child_failed_is_taken_by_a_heartbeat_after_the_lease(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The heartbeat claims the due checkpoint and its child fails to write it (here: the
    database refuses the write): the claim stays, and the first heartbeat after the lease claims
    it again, so the interval is not lost."""
    from phoenix_protocol.agent._state import CHECKPOINT_CLAIM_LEASE_MS
    from phoenix_protocol.core._errors import StorageError
    from phoenix_protocol.store._checkpoints import CheckpointRows

    monkeypatch.setenv("PHOENIX_HOOK_INLINE", "1")
    run(["session-start"], _payload(project, "SessionStart", source="startup"))
    agent = _agent(project)
    agent.state.set_status("working", "Long refactor", session_id="sess-1")

    def refuse(self: CheckpointRows, build: Any) -> Any:
        raise StorageError("the disk holding phoenix.db is full; nothing was written: free some space.")

    write = CheckpointRows.write
    monkeypatch.setattr(CheckpointRows, "write", refuse)
    due_at = int(agent.state.read().work_started_ms or 0) + 31 * 60_000
    tool: dict[str, Any] = {"tool_name": "Edit", "tool_input": {"file_path": "a.py"}, "tool_response": {}}
    monkeypatch.setenv("PHOENIX_NOW_MS", str(due_at))
    assert run(["post-tool-use"], _payload(project, "PostToolUse", **tool)) == (0, "", "")
    events = agent.ops.read()[0]
    assert [e["event"] for e in events if e["event"] in ("checkpoint_due", "checkpoint_failed")] == [
        "checkpoint_due",
        "checkpoint_failed",
    ]
    assert agent.state.read().checkpoint_claim == {"kinds": ["routine"], "ms": due_at}
    monkeypatch.setattr(CheckpointRows, "write", write)
    monkeypatch.setenv("PHOENIX_NOW_MS", str(due_at + CHECKPOINT_CLAIM_LEASE_MS - 1000))
    assert run(["post-tool-use"], _payload(project, "PostToolUse", **tool)) == (0, "", "")
    assert _types(project) == []  # within the lease
    monkeypatch.setenv("PHOENIX_NOW_MS", str(due_at + CHECKPOINT_CLAIM_LEASE_MS))
    assert run(["post-tool-use"], _payload(project, "PostToolUse", **tool)) == (0, "", "")
    assert _types(project) == ["routine"]
    due = [e for e in agent.ops.read()[0] if e["event"] == "checkpoint_due"]
    assert due[-1]["meta"] == {"types": ["routine"], "taken_over_from": due_at}
    assert agent.state.read().checkpoint_claim is None


def test_two_hours_tell_the_model_once_and_refresh_the_next_session(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PHOENIX_HOOK_INLINE", "1")
    code, out, err = _work_for_hours(project, 2.0, monkeypatch)
    assert (code, err) == (0, "")
    message = json.loads(out)["hookSpecificOutput"]
    assert message["hookEventName"] == "PostToolUse" and "2 hours of continuous work" in message["additionalContext"]
    assert _types(project) == ["recovery"]
    assert _agent(project).state.read().refresh_requested is not None
    # The next tool call does not repeat the message.
    tool: dict[str, Any] = {"tool_name": "Edit", "tool_input": {}, "tool_response": {}}
    assert run(["post-tool-use"], _payload(project, "PostToolUse", **tool))[1] == ""
    # The next session starts from a fresh brief and clears the flag.
    code, out, err = run(["session-start"], _payload(project, "SessionStart", session="sess-2", source="startup"))
    context = _context(out)
    assert "forced refresh was requested" in context and "Long refactor" in context
    assert _agent(project).state.read().refresh_requested is None


def test_a_compaction_answers_the_forced_refresh(project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PHOENIX_HOOK_INLINE", "1")
    _work_for_hours(project, 2.0, monkeypatch)
    _code, out, _err = run(["session-start"], _payload(project, "SessionStart", source="compact"))
    context = _context(out)
    assert "FORCED REFRESH" in context and "RECOVERY DETECTED" not in context and "Long refactor" in context
    state = _agent(project).state.read()
    assert state.refresh_requested is None and state.session_id == "sess-1"  # the same session goes on
    assert state.work_started_ms == state.last_active_ms  # two more hours before the next refresh
    tool: dict[str, Any] = {"tool_name": "Edit", "tool_input": {"file_path": "b.py"}, "tool_response": {}}
    assert run(["post-tool-use"], _payload(project, "PostToolUse", **tool))[1] == ""
    assert _types(project) == ["recovery"]  # no second recovery checkpoint


def test_a_refresh_after_a_clean_end_is_not_called_a_recovery(project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PHOENIX_HOOK_INLINE", "1")
    _work_for_hours(project, 2.0, monkeypatch)
    run(["session-end"], _payload(project, "SessionEnd", reason="other"))
    _code, out, _err = run(["session-start"], _payload(project, "SessionStart", session="sess-2", source="startup"))
    context = _context(out)
    assert "FORCED REFRESH" in context and "RECOVERY DETECTED" not in context
    assert "forced refresh was requested" in context
    assert _agent(project).state.read().refresh_requested is None


def test_with_restore_off_a_session_is_still_listed_with_its_start_and_duration(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``restore_on_start = false`` skips the restore, not the session: its start is recorded, so
    ``phx sessions`` shows a start, an end and the duration between them."""
    from phoenix_protocol.core._clock import iso_from_ms
    from phoenix_protocol.services._sessions import list_sessions

    (project / ".phoenix").mkdir()
    (project / ".phoenix" / "phoenix.toml").write_text("restore_on_start = false\n")
    start = 1_767_225_600_000
    monkeypatch.setenv("PHOENIX_NOW_MS", str(start))
    run(["session-start"], _payload(project, "SessionStart", source="startup"))
    _agent(project).state.set_status("working", "Write the parser", session_id="sess-1")
    monkeypatch.setenv("PHOENIX_NOW_MS", str(start + 90_000))
    assert run(["session-end"], _payload(project, "SessionEnd", reason="other")) == (0, "", "")
    monkeypatch.setenv("PHOENIX_NOW_MS", str(start + 120_000))
    code, out, err = run(["session-start"], _payload(project, "SessionStart", session="sess-2", source="startup"))
    assert (code, err) == (0, "") and "Restored from checkpoint" not in out  # still no restore
    first, second = list_sessions(_agent(project))
    assert first["session_id"] == "sess-1" and first["status"] == "ended"
    assert (first["started_at"], first["ended_at"], first["duration_seconds"]) == (
        iso_from_ms(start),
        iso_from_ms(start + 90_000),
        90,
    )
    assert first["restored_from"] is None
    assert (second["session_id"], second["status"], second["started_at"]) == (
        "sess-2",
        "open",
        iso_from_ms(start + 120_000),
    )
    assert _agent(project).identity.read().mutable["accumulated_experience"] == 2


def test_a_session_listed_without_a_start_has_no_duration(project: Path) -> None:
    """An end record with no start record: the start the duration was measured from, when the
    end record names it, is the row's start; a duration from a start nobody can show is dropped."""
    from phoenix_protocol.services._sessions import list_sessions, storage

    sessions = storage(_agent(project))
    sessions.append({"event": "end", "session_id": "old", "at": "2026-01-01T00:01:30.000Z", "duration_seconds": 90})
    sessions.append(
        {
            "event": "end",
            "session_id": "new",
            "at": "2026-01-01T00:03:30.000Z",
            "started_at": "2026-01-01T00:02:00.000Z",
            "duration_seconds": 90,
        }
    )
    old, new = list_sessions(_agent(project))
    assert (old["started_at"], old["duration_seconds"]) == (None, None)
    assert (new["started_at"], new["duration_seconds"]) == ("2026-01-01T00:02:00.000Z", 90)


def test_pre_compact_takes_its_checkpoint_when_state_json_is_damaged(project: Path) -> None:
    """The brief needs a state.json that reads; the checkpoint does not: context compaction is
    when the checkpoint matters most, so a damaged state costs the brief, not the checkpoint."""
    run(["session-start"], _payload(project, "SessionStart", source="startup"))
    _agent(project).state.set_status("working", "Write the parser", session_id="sess-1")
    state = project / ".phoenix" / "agents" / "default" / "state.json"
    state.write_bytes(state.read_bytes()[:40])  # torn
    code, out, err = run(["pre-compact"], _payload(project, "PreCompact", trigger="auto"))
    assert code == 0 and "pre-compact hook" in err  # the brief's failure, said once
    [notice] = json.loads(out).values()  # and to the user: the first failure of the session
    assert "state.json is not valid JSON" in notice and "phx doctor" in notice
    assert _types(project) == ["routine"]


def test_session_end_takes_its_checkpoint_when_state_json_is_damaged(project: Path) -> None:
    """As PreCompact: a state.json that cannot be changed costs the session's end in the state
    (and the brief), not its checkpoint; the hook reports the damage and exits 0."""
    run(["session-start"], _payload(project, "SessionStart", source="startup"))
    _agent(project).state.set_status("working", "Write the parser", session_id="sess-1")
    state = project / ".phoenix" / "agents" / "default" / "state.json"
    state.write_bytes(state.read_bytes()[:40])  # torn
    code, out, err = run(["session-end"], _payload(project, "SessionEnd", reason="other"))
    assert code == 0 and out == "" and "session-end hook" in err
    assert _types(project) == ["session"]
    [row] = _agent(project).sessions.entries()
    assert row["status"] == "ended" and row["checkpoint"] == _agent(project).checkpoints.entries()[0].name


def test_a_hook_failure_is_redacted_before_it_is_cut(project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A message cut first could keep a token's head that no longer matches its pattern."""
    from phoenix_protocol.integrations import _hooks_session

    token = "ghp_" + "a1B2c3D4e5" * 3 + "a1B2c3"
    message = "x" * 280 + " token " + token

    def fail(*_args: Any, **_kwargs: Any) -> None:
        raise RuntimeError(message)

    run(["session-start"], _payload(project, "SessionStart", source="startup"))
    monkeypatch.setattr(_hooks_session, "handle_session_event", fail)
    code, _out, err = run(["pre-compact"], _payload(project, "PreCompact", trigger="auto"))
    assert code == 0 and token[:12] not in err
    logged = (project / ".phoenix" / "agents" / "default" / "ops.jsonl").read_text()
    assert "hook_failed" in logged and token[:12] not in logged
