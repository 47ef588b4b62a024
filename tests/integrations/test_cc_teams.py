"""Claude Code's own agent teams, guarded by Phoenix (integrations/_cc_teams): what the hooks
record, what the next lead is told after the lead died (resumed and fresh), the messages
delivered again into its inbox, and the guardrails, on both stores. The files and payloads are
shaped as Claude Code 2.1.330 writes and sends them (/work/shared/claude-code-teams.md); the
end-to-end test with the real CLI is tests/e2e/test_claude_code_teams.py."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from phoenix_protocol.core._home import Home
from phoenix_protocol.integrations._hooks import run
from phoenix_protocol.store._cc_teams import ClaudeTeamStore
from phoenix_protocol.store._db import open_database

LEAD_SID = "1a2b3c4d-0000-4000-8000-00000000aaaa"
FRESH_SID = "9f8e7d6c-0000-4000-8000-00000000bbbb"
TEAM = "session-1a2b3c4d"
PROMPT = "You are alice. Write the config parser in parser.py, then tell team-lead when its tests pass."
REPLY = "Parser done: parser.py, 42 tests pass. Ready for the next task."
ORDER = "Please start on task 1 (the parser) now."


@pytest.fixture
def claude(tmp_path: Path) -> Path:
    """``$HOME/.claude`` (conftest gives every test its own HOME)."""
    root = Path(os.environ["HOME"]) / ".claude"
    root.mkdir(parents=True, exist_ok=True)
    return root


@pytest.fixture
def lead_process() -> Iterator[subprocess.Popen[bytes]]:
    """A process standing for the lead's Claude Code (Phoenix records it as the agent process)."""
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    yield proc
    proc.kill()
    proc.wait()


def _hook(project: Path, event: str, native: str, session: str = LEAD_SID, **extra: Any) -> tuple[int, str, str]:
    body = {
        "session_id": session,
        "transcript_path": str(_transcript(project, session)),
        "cwd": str(project),
        "hook_event_name": native,
        **extra,
    }
    return run([event], json.dumps(body).encode())


def _transcript(project: Path, session: str) -> Path:
    folder = Path(os.environ["HOME"]) / ".claude" / "projects" / "-project"
    folder.mkdir(parents=True, exist_ok=True)
    return folder / f"{session}.jsonl"


def _write(path: Path, value: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(value, indent=2))


def _config(claude: Path, members: list[dict[str, Any]], team: str = TEAM, lead: str = LEAD_SID) -> None:
    _write(
        claude / "teams" / team / "config.json",
        {
            "name": team,
            "createdAt": 1_764_300_000_000,
            "leadAgentId": f"team-lead@{team}",
            "leadSessionId": lead,
            "leadProcess": {"pid": 1, "pidSpace": "host", "claimedAt": 1, "procStart": "1"},
            "members": members,
        },
    )


LEAD_MEMBER = {"agentId": f"team-lead@{TEAM}", "name": "team-lead", "agentType": "team-lead", "joinedAt": 1_764_300_000_000,
               "tmuxPaneId": "", "cwd": "/p", "subscriptions": [], "backendType": "in-process"}  # fmt: skip
ALICE = {"agentId": f"alice@{TEAM}", "name": "alice", "agentType": "general-purpose", "joinedAt": 1_764_300_001_000,
         "tmuxPaneId": "in-process", "cwd": "/p", "subscriptions": [], "backendType": "in-process", "color": "blue",
         "model": "claude-opus-5-5", "prompt": PROMPT}  # fmt: skip


def _task_file(claude: Path, task_id: str, **fields: Any) -> None:
    task = {"id": task_id, "subject": f"task {task_id}", "description": "d", "status": "pending", "blocks": [],
            "blockedBy": [], **fields}  # fmt: skip
    _write(claude / "tasks" / TEAM / f"{task_id}.json", task)


def _send(project: Path, sender: str, target: str, content: str, msg_id: str) -> None:
    # As 2.1.330 answers: the reader with an "@", the content cut after 40 characters.
    response = {"success": True, "message": f"Message sent to {target}'s inbox", "msg_id": msg_id,
                "routing": {"sender": sender, "target": f"@{target}", "summary": content[:20],
                            "content": content[:40] + "…"}}  # fmt: skip
    extra = {} if sender == "team-lead" else {"agent_id": f"a{sender}-0f0f0f0f0f0f0f0f", "agent_type": sender}
    code, _out, err = _hook(
        project, "post-tool-use", "PostToolUse", tool_name="SendMessage",
        tool_input={"to": target, "message": content, "summary": content[:20]}, tool_response=response,
        tool_use_id="toolu_1", **extra,
    )  # fmt: skip
    assert (code, err) == (0, ""), err


def _store(project: Path) -> ClaudeTeamStore:
    return ClaudeTeamStore(open_database(Home(str(project / ".phoenix"))))


def _context(out: str) -> str:
    return str(json.loads(out)["hookSpecificOutput"]["additionalContext"])


def _run_team(project: Path, claude: Path, lead: subprocess.Popen[bytes], monkeypatch: pytest.MonkeyPatch) -> None:
    """A lead starts, spawns alice, makes two tasks, they exchange two messages; alice's reply to
    the lead is taken off its inbox (into the lead's memory) but never reaches its transcript."""
    monkeypatch.setenv("PHOENIX_AGENT_PID", str(lead.pid))
    monkeypatch.setenv("PHOENIX_HOOK_INLINE", "1")
    assert _hook(project, "session-start", "SessionStart", source="startup")[0] == 0
    _transcript(project, LEAD_SID).write_text(json.dumps({"type": "user", "message": {"content": "build it"}}) + "\n")
    _config(claude, [LEAD_MEMBER, ALICE])
    meta = claude / "projects" / "-project" / LEAD_SID / "subagents" / "agent-aalice-0f0f.meta.json"
    _write(meta, {"name": "alice", "agentType": "general-purpose", "taskKind": "in_process_teammate", "teamName": TEAM})
    alice_transcript = meta.parent / "agent-aalice-0f0f.jsonl"
    assert _hook(project, "subagent-start", "SubagentStart", agent_id="aalice-0f0f0f0f0f0f0f0f", agent_type="alice") == (
        0, "", "")  # fmt: skip
    for task_id in ("1", "2"):
        _task_file(claude, task_id, **({"blockedBy": ["1"]} if task_id == "2" else {}))
        assert _hook(project, "task-created", "TaskCreated", task_id=task_id, task_subject=f"task {task_id}",
                     task_description="d")[0] == 0  # fmt: skip
    _task_file(claude, "1", status="in_progress", owner="alice")
    assert _hook(project, "post-tool-use", "PostToolUse", tool_name="TaskUpdate",
                 tool_input={"taskId": "1", "owner": "alice", "status": "in_progress"},
                 tool_response={"success": True})[0] == 0  # fmt: skip
    _send(project, "team-lead", "alice", ORDER, "m-order")
    alice_transcript.write_text(
        json.dumps({"type": "user", "message": {"content": f"<teammate-message>{ORDER}"}}) + "\n"
    )
    _send(project, "alice", "team-lead", REPLY, "m-reply")
    assert _hook(project, "subagent-stop", "SubagentStop", agent_id="aalice-0f0f0f0f0f0f0f0f", agent_type="alice",
                 stop_hook_active=False, agent_transcript_path=str(alice_transcript),
                 last_assistant_message="sent")[0] == 0  # fmt: skip


def _kill(proc: subprocess.Popen[bytes]) -> None:
    proc.kill()
    proc.wait()


def _claude_code_resumes(claude: Path) -> None:
    """What 2.1.330's --resume does to the files: roster cut to the lead, inboxes deleted, the
    dead teammate's task reset to pending with no owner."""
    _config(claude, [LEAD_MEMBER])
    for inbox in (claude / "teams" / TEAM / "inboxes").glob("*.json"):
        inbox.unlink()
    _task_file(claude, "1", status="pending")


def test_the_hooks_record_the_team_with_claude_codes_ids(
    backend: str, project: Path, claude: Path, lead_process: subprocess.Popen[bytes], monkeypatch: pytest.MonkeyPatch
) -> None:
    _run_team(project, claude, lead_process, monkeypatch)
    # An unread entry in an inbox file that no SendMessage hook reported (the fallback).
    _write(claude / "teams" / TEAM / "inboxes" / "alice.json",
           [{"from": "team-lead", "text": "also check the docs", "timestamp": "2026-11-28T03:00:00.000Z", "msgV": 1,
             "msg_id": "m-inbox", "type": "message", "read": False}])  # fmt: skip
    assert _hook(project, "stop", "Stop", stop_hook_active=False)[0] == 0
    store = _store(project)
    team = store.team(TEAM)
    assert team is not None and team["state"] == "live" and team["lead_session_id"] == LEAD_SID
    assert team["project"] == str(project / ".phoenix")
    assert team["record"]["lead_process"]["pid"] == lead_process.pid
    members = {m["name"]: m for m in store.members(TEAM)}
    assert set(members) == {"team-lead", "alice"}
    alice = members["alice"]
    assert (alice["agent_id"], alice["prompt"], alice["role"]) == (f"alice@{TEAM}", PROMPT, "general-purpose")
    assert alice["transcript"].endswith("subagents/agent-aalice-0f0f.jsonl")
    tasks = {t["id"]: t for t in store.tasks(TEAM)}
    assert (tasks["1"]["status"], tasks["1"]["owner"]) == ("in_progress", "alice")
    assert tasks["2"]["blocked_by"] == ["1"] and tasks["2"]["status"] == "pending"
    messages = {m["msg_id"]: m for m in store.messages(TEAM)}
    assert set(messages) == {"m-order", "m-reply", "m-inbox"}
    assert (messages["m-reply"]["sender"], messages["m-reply"]["recipient"]) == ("alice", "team-lead")
    assert messages["m-reply"]["content"] == REPLY and messages["m-inbox"]["source"] == "inbox"
    assert [m["seq"] for m in store.messages(TEAM)] == [1, 2, 3]
    # The same message again (the tool's view, then the inbox's): kept once.
    _send(project, "alice", "team-lead", REPLY, "m-reply")
    assert len(store.messages(TEAM)) == 3


def test_a_session_without_a_team_records_nothing(project: Path, claude: Path) -> None:
    assert _hook(project, "session-start", "SessionStart", source="startup")[0] == 0
    assert _hook(project, "subagent-start", "SubagentStart", agent_id="a1", agent_type="Explore") == (0, "", "")
    assert _hook(project, "post-tool-use", "PostToolUse", tool_name="Agent", tool_input={"prompt": "look"},
                 tool_response={"status": "completed"}) == (0, "", "")  # fmt: skip
    assert _store(project).teams(str(project / ".phoenix")) == []


def test_resume_after_the_lead_died_tells_what_claude_code_lost_and_delivers_the_reply_again(
    backend: str, project: Path, claude: Path, lead_process: subprocess.Popen[bytes], monkeypatch: pytest.MonkeyPatch
) -> None:
    _run_team(project, claude, lead_process, monkeypatch)
    _send(project, "team-lead", "alice", "Also add the TOML reader.", "m-late")  # alice died before reading it
    _kill(lead_process)
    _claude_code_resumes(claude)
    monkeypatch.setenv("PHOENIX_AGENT_PID", str(os.getpid()))
    code, out, err = _hook(project, "session-start", "SessionStart", source="resume")
    assert (code, err) == (0, "")
    context = _context(out)
    assert "CLAUDE CODE TEAM RECOVERED" in context
    assert "- alice (role general-purpose" in context and PROMPT in context
    assert "agent-aalice-0f0f.jsonl" in context
    assert "task 1 [in_progress, owner alice]" in context  # as before the crash, not Claude Code's reset
    assert "task 2 [pending, owner none]: task 2 (blocked by 1)" in context
    assert "from alice to team-lead" in context and REPLY in context
    assert ORDER not in context  # delivered: alice's transcript holds it
    assert 'verified="false"' in context
    assert "from team-lead to alice (Also add the TOML re), msg m-late: Also add the TOML reader." in context
    assert "deliver the 1 message(s) addressed to team-lead" in context  # only the lead's come again
    store = _store(project)
    team = store.team(TEAM)
    assert team is not None and team["state"] == "recovered"
    # Told once: another start does not tell it again.
    again = _hook(project, "session-start", "SessionStart", source="resume")[1]
    assert "CLAUDE CODE TEAM RECOVERED" not in ((again and _context(again)) or "")
    # The lead's turn ends: the reply goes into its inbox, once.
    assert _hook(project, "stop", "Stop", stop_hook_active=False) == (0, "", "")
    inbox = json.loads((claude / "teams" / TEAM / "inboxes" / "team-lead.json").read_text())
    assert [(e["from"], e["text"], e["msg_id"], e["read"]) for e in inbox] == [("alice", REPLY, "m-reply", False)]
    assert not (claude / "teams" / TEAM / "inboxes" / "team-lead.json.lock").exists()
    (claude / "teams" / TEAM / "inboxes" / "team-lead.json").write_text("[]")  # Claude Code read it
    assert _hook(project, "stop", "Stop", stop_hook_active=False) == (0, "", "")
    assert json.loads((claude / "teams" / TEAM / "inboxes" / "team-lead.json").read_text()) == []
    reply = next(m for m in store.messages(TEAM) if m["msg_id"] == "m-reply")
    assert reply["redeliver_to"] == LEAD_SID and reply["redelivered_ms"] is not None
    # The resumed lead runs the team again: live, with its new process.
    _hook(project, "post-tool-use", "PostToolUse", tool_name="TaskList", tool_input={}, tool_response={})
    _send(project, "team-lead", "alice", "respawned you", "m-after")
    team = store.team(TEAM)
    assert team is not None and team["state"] == "live" and team["record"]["lead_process"]["pid"] == os.getpid()
    assert {m["name"] for m in store.members(TEAM)} == {"team-lead", "alice"}  # Claude Code's cut is not Phoenix's


def test_a_fresh_session_is_offered_the_orphaned_team_and_gets_the_reply(
    backend: str, project: Path, claude: Path, lead_process: subprocess.Popen[bytes], monkeypatch: pytest.MonkeyPatch
) -> None:
    _run_team(project, claude, lead_process, monkeypatch)
    _kill(lead_process)
    monkeypatch.setenv("PHOENIX_AGENT_PID", str(os.getpid()))
    code, out, err = _hook(project, "session-start", "SessionStart", session=FRESH_SID, source="startup")
    assert (code, err) == (0, "")
    context = _context(out)
    assert f"the lead of team {TEAM} (session {LEAD_SID}) died" in context
    assert PROMPT in context and "task 1 [in_progress, owner alice]" in context and REPLY in context
    assert f"~/.claude/tasks/{TEAM}" in context
    store = _store(project)
    old = store.team(TEAM)
    assert old is not None and old["state"] == "archived" and old["record"]["recovery"]["by_session"] == FRESH_SID
    # The new lead's first turn ends: the reply goes into its own team's inbox.
    assert _hook(project, "stop", "Stop", session=FRESH_SID, stop_hook_active=False) == (0, "", "")
    inbox = json.loads((claude / "teams" / "session-9f8e7d6c" / "inboxes" / "team-lead.json").read_text())
    assert [(e["from"], e["text"], e["type"], e["msgV"]) for e in inbox] == [("alice", REPLY, "message", 1)]
    # A late write of the dead lead's session (a detached recording that outlived it) does not
    # bring the archived team back to life.
    _send(project, "team-lead", "alice", "late", "m-late-write")
    assert (store.team(TEAM) or {})["state"] == "archived"
    # A third session is not offered it again.
    third = _hook(project, "session-start", "SessionStart", session="77777777-0000-4000-8000-0000000000cc",
                  source="startup")[1]  # fmt: skip
    assert "CLAUDE CODE TEAM RECOVERED" not in ((third and _context(third)) or "")


def test_a_live_lead_or_a_clean_exit_leaves_the_team_alone(
    backend: str, project: Path, claude: Path, lead_process: subprocess.Popen[bytes], monkeypatch: pytest.MonkeyPatch
) -> None:
    _run_team(project, claude, lead_process, monkeypatch)
    monkeypatch.setenv("PHOENIX_AGENT_PID", str(os.getpid()))
    out = _hook(project, "session-start", "SessionStart", session=FRESH_SID, source="startup")[1]
    assert "CLAUDE CODE TEAM RECOVERED" not in ((out and _context(out)) or "")  # its lead still runs
    assert (_store(project).team(TEAM) or {})["state"] == "live"
    monkeypatch.setenv("PHOENIX_AGENT_PID", str(lead_process.pid))
    assert _hook(project, "session-end", "SessionEnd", reason="prompt_input_exit")[0] == 0
    assert (_store(project).team(TEAM) or {})["state"] == "ended"
    _kill(lead_process)
    monkeypatch.setenv("PHOENIX_AGENT_PID", str(os.getpid()))
    out = _hook(project, "session-start", "SessionStart", session="77777777-0000-4000-8000-0000000000cc",
                source="startup")[1]  # fmt: skip
    assert "CLAUDE CODE TEAM RECOVERED" not in ((out and _context(out)) or "")


def _settings(project: Path, text: str) -> None:
    home = project / ".phoenix"
    home.mkdir(exist_ok=True)
    (home / "phoenix.toml").write_text(text)


def test_task_completed_is_refused_while_the_check_is_red(
    backend: str, project: Path, claude: Path, lead_process: subprocess.Popen[bytes], monkeypatch: pytest.MonkeyPatch
) -> None:
    _run_team(project, claude, lead_process, monkeypatch)
    _settings(project, 'claude_team_check_command = "test -f green || { echo 3 tests failed; exit 1; }"\n')
    completed = {"task_id": "1", "task_subject": "task 1", "task_description": "d", "agent_id": f"alice@{TEAM}",
                 "agent_type": "general-purpose", "teammate_name": "alice", "team_name": TEAM}  # fmt: skip
    code, out, err = _hook(project, "task-completed", "TaskCompleted", **completed)
    assert (code, out) == (2, "")
    assert "task 1 cannot be completed yet" in err and "exited 1" in err and "3 tests failed" in err
    assert next(t for t in _store(project).tasks(TEAM) if t["id"] == "1")["check"] == "red"
    (project / "green").write_text("")
    assert _hook(project, "task-completed", "TaskCompleted", **completed) == (0, "", "")
    task = next(t for t in _store(project).tasks(TEAM) if t["id"] == "1")
    # The hook fires before the completion takes effect: the status is the task file's until then.
    assert (task["check"], task["status"], task["owner"]) == ("green", "in_progress", "alice")
    assert task["completion_asked_ms"] > 0


def test_no_check_command_no_refusal(
    project: Path, claude: Path, lead_process: subprocess.Popen[bytes], monkeypatch: pytest.MonkeyPatch
) -> None:
    _run_team(project, claude, lead_process, monkeypatch)
    assert _hook(project, "task-completed", "TaskCompleted", task_id="1", task_subject="task 1",
                 teammate_name="alice", team_name=TEAM) == (0, "", "")  # fmt: skip


def test_teammate_idle_keeps_a_teammate_on_its_claimed_task(
    backend: str, project: Path, claude: Path, lead_process: subprocess.Popen[bytes], monkeypatch: pytest.MonkeyPatch
) -> None:
    _run_team(project, claude, lead_process, monkeypatch)
    idle = {"permission_mode": "default", "agent_id": f"alice@{TEAM}", "agent_type": "general-purpose",
            "teammate_name": "alice", "team_name": TEAM}  # fmt: skip
    assert _hook(project, "teammate-idle", "TeammateIdle", **idle) == (0, "", "")  # off by default
    _settings(project, "claude_team_keep_busy = true\nclaude_team_keep_busy_limit = 2\n")
    for _ in range(2):
        code, _out, err = _hook(project, "teammate-idle", "TeammateIdle", **idle)
        assert code == 2 and "you still own task 1 (task 1), in progress" in err
    assert _hook(project, "teammate-idle", "TeammateIdle", **idle) == (0, "", "")  # the limit: it may stop
    _task_file(claude, "1", status="completed", owner="alice")
    assert _hook(project, "teammate-idle", "TeammateIdle", **idle) == (0, "", "")
    bob = {**idle, "teammate_name": "bob", "agent_id": f"bob@{TEAM}"}
    assert _hook(project, "teammate-idle", "TeammateIdle", **bob) == (0, "", "")  # owns nothing


def test_a_broken_team_record_never_breaks_the_heartbeat(
    project: Path, claude: Path, lead_process: subprocess.Popen[bytes], monkeypatch: pytest.MonkeyPatch
) -> None:
    _run_team(project, claude, lead_process, monkeypatch)
    (claude / "teams" / TEAM / "config.json").write_text("{not json")
    code, _out, err = _hook(project, "post-tool-use", "PostToolUse", tool_name="SendMessage",
                           tool_input={"to": "alice", "message": "x"}, tool_response={"success": True})  # fmt: skip
    assert code == 0 and err == ""
    # The heartbeat stands and the team is still recorded (config.json is read as empty).
    assert (_store(project).team(TEAM) or {})["state"] == "live"
    from phoenix_protocol.integrations import _cc_teams

    def broken(*_args: object) -> None:
        raise RuntimeError("disk on fire")

    monkeypatch.setattr(_cc_teams, "record", broken)
    seq = Home(str(project / ".phoenix"))
    before = _agent_state(project).heartbeat_seq
    assert _hook(project, "post-tool-use", "PostToolUse", tool_name="SendMessage", tool_input={"to": "alice"},
                 tool_response={"success": True}) == (0, "", "")  # fmt: skip
    assert _agent_state(project).heartbeat_seq == before + 1
    from phoenix_protocol.services._agent import Agent

    events, _ = Agent.open("default", home=seq).ops.read()
    failed = [e for e in events if e["event"] == "hook_failed"]
    assert failed[-1]["status"] == "warn" and failed[-1]["meta"]["hook"] == "claude-team"
    assert "disk on fire" in failed[-1]["meta"]["error"]


def _agent_state(project: Path) -> Any:
    from phoenix_protocol.services._agent import Agent

    return Agent.open("default", home=Home(str(project / ".phoenix"))).state.read()


def test_the_recording_runs_detached_from_the_hook(
    project: Path, claude: Path, lead_process: subprocess.Popen[bytes], monkeypatch: pytest.MonkeyPatch
) -> None:
    _run_team(project, claude, lead_process, monkeypatch)
    monkeypatch.delenv("PHOENIX_HOOK_INLINE")
    _send(project, "alice", "team-lead", "detached", "m-detached")
    deadline = time.monotonic() + 30
    while not any(m["msg_id"] == "m-detached" for m in _store(project).messages(TEAM)):
        assert time.monotonic() < deadline, "the detached child recorded nothing"
        time.sleep(0.1)


def test_phx_team_claude_shows_the_record_and_sets_a_teams_own_guardrails(
    project: Path,
    claude: Path,
    lead_process: subprocess.Popen[bytes],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    from phoenix_protocol.cli._main import cli

    _run_team(project, claude, lead_process, monkeypatch)
    monkeypatch.chdir(project)

    def phx(*args: str) -> tuple[int, dict[str, Any]]:
        capsys.readouterr()
        code = cli(["team", "claude", *args, "--json"])
        return code, json.loads(capsys.readouterr().out)

    code, listed = phx()
    assert code == 0
    [team] = listed["teams"]
    assert (team["team_name"], team["state"], team["teammates"], team["tasks"], team["messages"]) == (
        TEAM,
        "live",
        1,
        2,
        2,
    )
    code, shown = phx(TEAM)
    assert code == 0 and shown["team"]["guardrails"]["check_command"] == ""
    assert [m["name"] for m in shown["team"]["members"]] == ["team-lead", "alice"]
    code, shown = phx(TEAM, "--check-command", "exit 1", "--keep-busy", "--keep-busy-limit", "5")
    assert code == 0
    assert {k: shown["team"]["guardrails"][k] for k in ("check_command", "keep_busy", "keep_busy_limit")} == {
        "check_command": "exit 1", "keep_busy": True, "keep_busy_limit": 5}  # fmt: skip
    code, _out, err = _hook(project, "task-completed", "TaskCompleted", task_id="2", task_subject="task 2",
                            teammate_name="alice", team_name=TEAM)  # fmt: skip
    assert code == 2 and "`exit 1` exited 1" in err  # the team's own check, none in phoenix.toml
    code, shown = phx(TEAM, "--project-settings")
    assert shown["team"]["guardrails"]["own"] == {} and shown["team"]["guardrails"]["check_command"] == ""
    assert _hook(project, "task-completed", "TaskCompleted", task_id="2", task_subject="task 2",
                 teammate_name="alice", team_name=TEAM)[0] == 0  # fmt: skip
    assert phx("no-such-team")[0] != 0
    assert cli(["team", "claude", "--keep-busy", "--json"]) == 2  # which team?


def test_a_teammate_is_recorded_from_the_agent_tool_before_config_lists_it(
    project: Path, claude: Path, lead_process: subprocess.Popen[bytes], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PHOENIX_AGENT_PID", str(lead_process.pid))
    monkeypatch.setenv("PHOENIX_HOOK_INLINE", "1")
    _config(claude, [LEAD_MEMBER])
    response = {"status": "teammate_spawned", "prompt": PROMPT, "agentId": "abob-1234567890abcdef",
                "teammate_id": f"bob@{TEAM}", "agent_id": "abob-1234567890abcdef", "model": "claude-opus-5-5",
                "name": "bob", "color": "green", "team_name": TEAM}  # fmt: skip
    assert _hook(project, "post-tool-use", "PostToolUse", tool_name="Agent",
                 tool_input={"description": "d", "prompt": PROMPT, "name": "bob"}, tool_response=response)[0] == 0  # fmt: skip
    bob = next(m for m in _store(project).members(TEAM) if m["name"] == "bob")
    assert (bob["prompt"], bob["agent_id"], bob["session_agent_id"]) == (PROMPT, f"bob@{TEAM}", "abob-1234567890abcdef")
