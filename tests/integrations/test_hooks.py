"""The Claude Code hooks: behaviour per event, failure handling, and the seed's recovery flow
with real processes (start, working, SIGKILL, new session -> recovery context injected)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from conftest import HOOK_PREFIX
from phoenix_protocol.core._home import Home
from phoenix_protocol.integrations._hooks import RECOVERY_BANNER, run
from phoenix_protocol.services._agent import Agent


def _payload(project: Path, event: str, **extra: Any) -> bytes:
    body = {
        "session_id": "sess-1",
        "transcript_path": "/tmp/t.jsonl",
        "cwd": str(project),
        "hook_event_name": event,
        **extra,
    }
    return json.dumps(body).encode()


def _agent(project: Path) -> Agent:
    return Agent.open("default", home=Home(str(project / ".phoenix")))


def _context(out: str) -> str:
    data = json.loads(out)
    assert data["hookSpecificOutput"]["hookEventName"] == "SessionStart"
    return str(data["hookSpecificOutput"]["additionalContext"])


def test_session_start_fresh_records_session_and_injects_nothing(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # In-process, the "agent" above the hook is whatever launched pytest: pin it.
    monkeypatch.setenv("PHOENIX_AGENT_PID", str(os.getpid()))
    code, out, err = run(["session-start"], _payload(project, "SessionStart", source="startup"))
    assert (code, out, err) == (0, "", "")
    state = _agent(project).state.read()
    assert (state.status, state.session_id, state.updated_by) == ("working", "sess-1", "hook")
    assert state.pid == os.getpid() and state.pid_start_time is not None and state.host


def test_post_tool_use_is_the_heartbeat(project: Path) -> None:
    run(["session-start"], _payload(project, "SessionStart", source="startup"))
    for i in range(3):
        tool_input = {"command": f"echo {i}"}
        response = {"stdout": str(i), "stderr": "", "interrupted": False}
        code, out, err = run(
            ["post-tool-use"],
            _payload(project, "PostToolUse", tool_name="Bash", tool_input=tool_input, tool_response=response),
        )
        assert (code, out, err) == (0, "", "")
    state = _agent(project).state.read()
    assert state.heartbeat_seq == 3
    assert state.last_tool is not None
    assert state.last_tool["name"] == "Bash" and state.last_tool["ok"] is True
    assert len(state.last_tool["input_digest"]) == 16
    events, _ = _agent(project).ops.read()
    # Heartbeat lines are throttled (one per interval), transitions are not.
    assert [e["event"] for e in events if e["event"] in ("session_start", "heartbeat")] == [
        "session_start",
        "heartbeat",
    ]


def test_tool_failure_is_recorded_and_redacted(project: Path) -> None:
    secret = "ghp_" + "x7Yq2Lm9Pz4Rt6Vb8Nc1Kd3Fg5Hj0Ws2Ea4Ub"
    payload = _payload(
        project,
        "PostToolUseFailure",
        tool_name="Bash",
        tool_input={"command": "git push"},
        error=f"auth failed for token {secret}",
    )
    assert run(["post-tool-use-failure"], payload)[0] == 0
    state = _agent(project).state.read()
    assert state.last_tool is not None and state.last_tool["ok"] is False
    assert "auth failed" in state.last_tool["error"]
    for name in ("state.json", "ops.jsonl"):
        assert secret not in (project / ".phoenix/agents/default" / name).read_text()
    events, _ = _agent(project).ops.read()
    assert events[-1]["event"] == "tool_failed" and events[-1]["status"] == "warn"


def test_recovery_context_after_working(project: Path) -> None:
    agent = _agent(project)
    agent.state.start_session("sess-0")
    agent.state.set_status("working", "Migrate the billing tables")
    agent.state.add_note("next_action", "Backfill invoices for March")
    code, out, err = run(["session-start"], _payload(project, "SessionStart", source="startup"))
    assert code == 0 and err == ""
    context = _context(out)
    assert RECOVERY_BANNER in context
    assert "Migrate the billing tables" in context
    assert "Backfill invoices for March" in context
    assert "## Current State" in context and "## Next Actions" in context
    assert len(context) <= 10_000
    assert (project / ".phoenix/agents/default/brief.md").exists()


def test_recovery_context_after_error(project: Path) -> None:
    agent = _agent(project)
    agent.state.set_status("error", "database migration failed halfway")
    context = _context(run(["session-start"], _payload(project, "SessionStart", source="startup"))[1])
    assert RECOVERY_BANNER in context and "database migration failed halfway" in context


def test_compact_injects_the_brief_and_a_resume_only_what_changed(project: Path, tmp_path: Path) -> None:
    """Without a transcript to read (docs/recovery.md): a compaction gets the brief; resuming the
    conversation that holds it gets only what changed since (here a recovery: the previous run
    was left working), never a second copy of the brief."""
    transcript = str(tmp_path / "none.jsonl")
    run(["session-start"], _payload(project, "SessionStart", source="startup", transcript_path=transcript))
    _agent(project).state.set_status("working", "Refactor the parser", session_id="sess-1")
    out = run(["session-start"], _payload(project, "SessionStart", source="compact", transcript_path=transcript))[1]
    context = _context(out)
    assert "Refactor the parser" in context and "## Current State" in context
    _agent(project).state.add_note("next_action", "Split the tokenizer out")
    out = run(["session-start"], _payload(project, "SessionStart", source="resume", transcript_path=transcript))[1]
    delta = _context(out)
    assert RECOVERY_BANNER in delta and "## Current State" not in delta
    assert "- New next action [1]: Split the tokenizer out" in delta
    assert len(delta) < 600


def test_pre_compact_refreshes_the_brief_and_prints_nothing(project: Path) -> None:
    _agent(project).state.set_status("working", "Write the docs")
    code, out, err = run(["pre-compact"], _payload(project, "PreCompact", trigger="auto"))
    assert (code, out, err) == (0, "", "")
    assert "Write the docs" in (project / ".phoenix/agents/default/brief.md").read_text()


def test_stop_is_a_silent_heartbeat(project: Path) -> None:
    run(["session-start"], _payload(project, "SessionStart", source="startup"))
    code, out, err = run(["stop"], _payload(project, "Stop", stop_hook_active=False))
    assert (code, out, err) == (0, "", "")
    state = _agent(project).state.read()
    assert state.heartbeat_seq == 1 and state.last_tool is None


def test_session_end_sets_idle(project: Path) -> None:
    run(["session-start"], _payload(project, "SessionStart", source="startup"))
    code, out, _ = run(["session-end"], _payload(project, "SessionEnd", reason="prompt_input_exit"))
    assert (code, out) == (0, "")
    assert _agent(project).state.read().status == "idle"
    events, _ = _agent(project).ops.read()
    end = [e for e in events if e["event"] == "session_end"]
    assert len(end) == 1 and end[0]["meta"]["reason"] == "prompt_input_exit"
    assert events[-1]["event"] == "session_checkpointed"  # checkpoint_on_exit


@pytest.mark.parametrize(
    ("argv", "stdin"),
    [
        (["post-tool-use"], b""),
        (["post-tool-use"], b"{not json"),
        (["post-tool-use"], b"[1, 2]"),
        (["post-tool-use"], b"\xff\xfe"),
        (["no-such-event"], b"{}"),
        ([], b"{}"),
    ],
)
def test_bad_input_exits_0_with_one_line_on_stderr(
    project: Path, monkeypatch: pytest.MonkeyPatch, argv: list[str], stdin: bytes
) -> None:
    monkeypatch.chdir(project)
    code, out, err = run(argv, stdin)
    # stdout: nothing, or only the user's notice (``test_hooks_hostile`` tests it)
    assert code == 0 and (out == "" or list(json.loads(out)) == ["systemMessage"])
    assert err.count("\n") == 1 and err.startswith("phoenix:")
    events, _ = _agent(project).ops.read()
    assert events[-1]["event"] == "hook_failed" and events[-1]["status"] == "error"


def test_corrupt_state_is_left_intact_and_reported(project: Path) -> None:
    agent = _agent(project)
    agent.state.set_status("working", "x")
    Path(agent.state.path).write_text('{"status": "work')
    code, out, err = run(
        ["post-tool-use"], _payload(project, "PostToolUse", tool_name="Read", tool_input={}, tool_response={})
    )
    assert code == 0 and "not valid JSON" in err
    assert Path(agent.state.path).read_text() == '{"status": "work'
    # SessionStart still hands over what exists: the last brief.
    agent.write_brief(agent.state.parse(b'{"status": "working", "current_task": "the task before"}'))
    code, out, err = run(["session-start"], _payload(project, "SessionStart", source="startup"))
    context = _context(out)
    assert RECOVERY_BANNER in context and "not valid JSON" in context and "the task before" in context
    assert Path(agent.state.path).read_text() == '{"status": "work'


def test_locked_state_times_out_quickly_and_exits_0(project: Path) -> None:
    agent = _agent(project)
    agent.state.set_status("working", "x")
    (project / ".phoenix" / "phoenix.toml").write_text("hook_lock_timeout = 0.2\n")
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys,time; from phoenix_protocol.core._durable import FileLock; "
            "l=FileLock(sys.argv[1]); l.acquire(); print('locked', flush=True); time.sleep(30)",
            agent.state.path,
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "locked"
        started = time.monotonic()
        proc = subprocess.run(
            [*HOOK_PREFIX, "post-tool-use"],
            input=_payload(project, "PostToolUse", tool_name="Bash"),
            capture_output=True,
            check=False,
        )
        assert time.monotonic() - started < 5
        assert proc.returncode == 0 and b"could not lock" in proc.stderr
        assert agent.state.read().heartbeat_seq == 0
    finally:
        holder.kill()
        holder.wait()


def test_hook_env_file_exports_session_for_later_tool_calls(
    project: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    env_file = tmp_path / "env.sh"
    env_file.write_text("")
    monkeypatch.setenv("CLAUDE_ENV_FILE", str(env_file))
    run(["session-start"], _payload(project, "SessionStart", source="startup"))
    text = env_file.read_text()
    assert "export PHOENIX_SESSION_ID='sess-1'" in text
    assert "export PHOENIX_AGENT='default'" in text


# -- the seed's recovery flow, with real processes --------------------------------------------

AGENT_SCRIPT = r"""
import json, subprocess, sys, time
hook, project, session = json.loads(sys.argv[1]), sys.argv[2], sys.argv[3]
def fire(event, name, **extra):
    payload = {"session_id": session, "cwd": project, "hook_event_name": name, "transcript_path": "/dev/null", **extra}
    return subprocess.run(hook + [event], input=json.dumps(payload).encode(), capture_output=True)
fire("session-start", "SessionStart", source="startup")
subprocess.run([sys.executable, "-m", "phoenix_protocol", "state", "working", "Test task"], cwd=project, check=True, capture_output=True)
fire("post-tool-use", "PostToolUse", tool_name="Bash", tool_input={"command": "state-update"}, tool_response={"stdout": ""})
print("working", flush=True)
time.sleep(60)
"""


def test_seed_recovery_flow_with_sigkill(project: Path) -> None:
    agent_proc = subprocess.Popen(
        [sys.executable, "-c", AGENT_SCRIPT, json.dumps(HOOK_PREFIX), str(project), "first"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert agent_proc.stdout is not None
    assert agent_proc.stdout.readline().strip() == "working"
    os.kill(agent_proc.pid, signal.SIGKILL)
    agent_proc.wait()
    agent_proc.stdout.close()
    assert agent_proc.stderr is not None
    agent_proc.stderr.close()
    state = _agent(project).state.read()
    assert state.status == "working" and state.current_task == "Test task"
    # The hook recorded the agent process (the process above the hook's shell), not the hook.
    assert state.pid == agent_proc.pid
    payload = _payload(project, "SessionStart", source="startup")
    proc = subprocess.run([*HOOK_PREFIX, "session-start"], input=payload, capture_output=True, check=False)
    assert proc.returncode == 0, proc.stderr
    context = _context(proc.stdout.decode())
    assert RECOVERY_BANNER in context
    assert "Test task" in context
    assert f"pid {agent_proc.pid}) is gone" in context


def test_tool_error_with_nul_still_counts(project: Path) -> None:
    """Found by hypothesis: a tool's stderr holding NUL must not cost the heartbeat."""
    response = {"is_error": True, "stderr": "bad\x00byte"}
    code, out, err = run(
        ["post-tool-use"], _payload(project, "PostToolUse", tool_name="Bash", tool_input={}, tool_response=response)
    )
    assert (code, out, err) == (0, "", "")
    state = _agent(project).state.read()
    assert state.heartbeat_seq == 1 and state.last_tool is not None and state.last_tool["ok"] is False
    assert "\x00" not in state.last_tool["error"]


def test_a_session_id_that_is_a_secret_is_never_stored(project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An agent whose session id is a credential: every hook of the session keeps the same hash
    of it instead, and the credential is written nowhere."""
    monkeypatch.setenv("PHOENIX_AGENT_PID", str(os.getpid()))
    secret = "ghp_" + "x7Yq2Lm9Pz4Rt6Vb8Nc1Kd3Fg5Hj0Ws2Ea4Ub"

    def hook(event: str, name: str, **extra: Any) -> None:
        body = json.loads(_payload(project, name, **extra))
        code, _out, err = run([event], json.dumps({**body, "session_id": secret}).encode())
        assert (code, err) == (0, "")

    hook("session-start", "SessionStart", source="startup")
    kept = _agent(project).state.read().session_id
    assert kept is not None and kept.startswith("sid-")
    hook("post-tool-use", "PostToolUse", tool_name="Bash", tool_input={"command": "ls"}, tool_response={})
    hook("stop", "Stop")
    hook("pre-compact", "PreCompact", trigger="auto")
    hook("session-end", "SessionEnd", reason="logout")
    state = _agent(project).state.read()
    assert (state.session_id, state.status, state.heartbeat_seq) == (kept, "idle", 2)
    events, _ = _agent(project).ops.read()
    assert not [e for e in events if e["event"] == "session_adopted"]  # the heartbeats met the start
    assert [e["meta"]["session_id"] for e in events if e["event"] in ("session_start", "session_end")] == [kept, kept]
    leaked = [p for p in (project / ".phoenix").rglob("*") if p.is_file() and secret.encode() in p.read_bytes()]
    assert leaked == []


def test_a_heartbeat_adopts_a_new_session_id_as_the_start_would_keep_it(project: Path) -> None:
    run(["session-start"], _payload(project, "SessionStart", source="startup"))
    _agent(project).state.end_session("sess-1")  # a verdict: the next session may be adopted
    body = json.loads(_payload(project, "PostToolUse", tool_name="Bash", tool_input={}, tool_response={}))
    run(["post-tool-use"], json.dumps({**body, "session_id": "a/b"}).encode())
    from phoenix_protocol.core._ids import session_id_of

    assert _agent(project).state.read().session_id == session_id_of("a/b")


def test_a_heartbeat_after_state_json_was_lost_rebuilds_it_from_the_log(project: Path) -> None:
    run(["session-start"], _payload(project, "SessionStart", source="startup"))
    _agent(project).state.add_note("open_loop", "Timer drift under load")
    os.unlink(_agent(project).state.path)
    body = _payload(project, "PostToolUse", tool_name="Bash", tool_input={"command": "ls"}, tool_response={})
    assert run(["post-tool-use"], body) == (0, "", "")
    state = _agent(project).state.read()
    assert (state.status, state.session_id) == ("working", "sess-1")
    assert [n["text"] for n in state.open_loops] == ["Timer drift under load"]
    events, _ = _agent(project).ops.read()
    assert "state_rebuilt" in [e["event"] for e in events]
