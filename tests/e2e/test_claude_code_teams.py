"""End to end: Claude Code's own agent team, its lead SIGKILLed while a teammate's reply is in
flight, recovered by Phoenix (issue 32; docs/teams.md, "Claude Code agent teams").

The real Claude Code (pinned, ``npm_clis``) runs interactively in a tmux pane of the test's own
(teams exist only in interactive sessions: ``-p`` never creates one), with a temporary HOME, the
experimental teams on, Phoenix's hooks installed as ``phx install claude-code`` writes them, and a
scripted Anthropic API that tells the lead from the teammate by a marker in their first message.

The lead loads the team tools, creates a task, spawns the teammate ``alice`` (the spawn prompt),
gives her the task and sends her an order; its next model request is held (a turn in flight).
Alice's answer is released then: she sends her reply to the lead, whose poller takes it off the
inbox file into memory, and the lead's process is SIGKILLed. Then either ``claude --resume`` or a
fresh ``claude`` starts: the model's first request names alice with her prompt, task 1 with its
owner from before the crash, and the lost reply. The model respawns alice with that prompt (Claude
Code 2.1.330 reads the lead's inbox only while the lead has a teammate); at the end of that turn
Phoenix writes the reply into the lead's inbox, and it reaches the model (marked unverified, as
the context announced).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import tempfile
import threading
import time
from collections.abc import Iterator
from typing import Any

import psutil
import pytest
from claude_code import ClaudeProject, ensure_claude_code
from fake_models import AnthropicRequest, FakeAnthropic, Turn
from tmux import TmuxServer

from phoenix_protocol.core._home import Home
from phoenix_protocol.services._agent import Agent
from phoenix_protocol.store._cc_teams import ClaudeTeamStore
from phoenix_protocol.store._db import open_database

pytestmark = pytest.mark.skipif(not shutil.which("tmux"), reason="tmux is not installed")

API_KEY = "sk-ant-dummy"
LEAD_MARK = "LEAD-7Q3"
ALICE_MARK = "ALICE-4K9"
PROMPT = f"{ALICE_MARK} You are alice. Write the config parser (task 1), then report to team-lead."
ORDER = "Start on task 1, the config parser, now."
REPLY = "Parser written: parser.py, 42 tests pass (REPLY-8Z1)."
TEAM_TOOLS = ["Agent", "SendMessage", "TaskCreate", "TaskUpdate", "TaskList", "TaskGet", "ToolSearch"]


def _first_user_text(body: dict[str, Any]) -> str:
    messages = body.get("messages") or []
    first = messages[0] if messages and isinstance(messages[0], dict) else {}
    return json.dumps(first.get("content"))


class TeamAPI(FakeAnthropic):
    """The Anthropic API, scripted per agent: the lead's conversation (its first message holds
    ``LEAD_MARK``), alice's (``ALICE_MARK``), or any other (a new lead after the crash), each
    step chosen by how many assistant messages the conversation holds."""

    def __init__(self) -> None:
        super().__init__(fallback_text="Noted.")
        self.lead_held = threading.Event()  # the lead's request in flight when it is killed
        self.release_lead = threading.Event()
        self.release_alice = threading.Event()
        self.lead_script = [
            Turn.call("ToolSearch", query="select:TaskCreate,TaskUpdate,SendMessage", max_results=5),
            Turn.call("TaskCreate", subject="Write the config parser", description="parser.py with tests"),
            Turn.call("Agent", name="alice", description="parser teammate", prompt=PROMPT),
            Turn.call("TaskUpdate", taskId="1", owner="alice", status="in_progress"),
            Turn.call("SendMessage", to="alice", message=ORDER, summary="start task 1"),
        ]
        self.next_steps = 0
        self.next_script = [
            Turn.call("Agent", name="alice", description="parser teammate, respawned", prompt=PROMPT),
            Turn.say("alice is back."),
        ]
        self.alice_script = [
            Turn.call("ToolSearch", query="select:SendMessage", max_results=5),
            Turn.call("SendMessage", to="team-lead", message=REPLY, summary="parser done"),
        ]

    def _respond(self, request: AnthropicRequest) -> tuple[int, str, bytes]:
        body = request.body if isinstance(request.body, dict) else {}
        if request.method != "POST" or request.route != "/v1/messages" or not body.get("tools"):
            return super()._respond(request)
        first = _first_user_text(body)
        steps = sum(1 for m in body.get("messages") or [] if isinstance(m, dict) and m.get("role") == "assistant")
        after = self.release_lead.is_set()  # the first lead was killed: its successor runs
        if ALICE_MARK in first:
            script, who = ([] if after else self.alice_script), "alice"
            if steps == 1 and not after:
                self.release_alice.wait(120)  # her reply waits until the lead's turn is in flight
        elif not after:
            script, who = self.lead_script, "lead"
            if steps == len(script):
                self.lead_held.set()
                self.release_lead.wait(120)  # in flight until the test kills the lead
        else:
            # The next lead does what its recovery context says: it respawns alice with her stored
            # prompt (Claude Code reads the lead's inbox only while it has a teammate).
            script, who, steps = self.next_script, "next", self.next_steps
            self.next_steps += 1
        turn = script[steps] if steps < len(script) else Turn.say("Noted.")
        with self._lock:
            request.kind = "main"
            setattr(request, "who", who)  # noqa: B010 - the test reads it back
            self.requests.append(request)
        model = body["model"] if isinstance(body.get("model"), str) else "claude-opus-5-5"
        if body.get("stream"):
            return 200, "text/event-stream", self._stream(turn, model)
        return 200, "application/json", json.dumps(self._message(turn, model)).encode()

    @staticmethod
    def _stop_reason(turn: Turn) -> str:
        return "tool_use" if turn.command is not None or turn.tool is not None else "end_turn"

    def _block(self, turn: Turn) -> dict[str, Any]:
        if turn.tool is not None:
            return {"type": "tool_use", "id": f"toolu_fake{next(self._ids):08d}", "name": turn.tool,
                    "input": dict(turn.args)}  # fmt: skip
        return super()._block(turn)

    def requests_of(self, who: str) -> list[AnthropicRequest]:
        with self._lock:
            return [r for r in self.requests if r.kind == "main" and getattr(r, "who", None) == who]


@pytest.fixture(scope="module")
def claude_argv() -> list[str]:
    return ensure_claude_code()


@pytest.fixture
def project(claude_argv: list[str]) -> Iterator[ClaudeProject]:
    with ClaudeProject.create(claude_argv) as created:
        with open(os.path.join(created.home, ".claude.json"), "w", encoding="utf-8") as fh:
            json.dump(
                {
                    "hasCompletedOnboarding": True,
                    "theme": "dark",
                    "numStartups": 1,
                    "customApiKeyResponses": {"approved": [API_KEY[-20:]], "rejected": []},
                    "projects": {created.dir: {"hasTrustDialogAccepted": True, "allowedTools": []}},
                },
                fh,
            )
        settings_path = created.local_settings_path
        with open(settings_path, encoding="utf-8") as fh:
            settings = json.load(fh)
        settings["permissions"] = {"allow": TEAM_TOOLS}
        with open(settings_path, "w", encoding="utf-8") as fh:
            json.dump(settings, fh, indent=2)
        yield created


@pytest.fixture
def server() -> Iterator[TmuxServer]:
    folder = tempfile.mkdtemp(prefix="phx-tmux-")
    tmux = TmuxServer(os.path.join(folder, "tmux.sock"))
    try:
        yield tmux
    finally:
        tmux.kill()
        shutil.rmtree(folder, ignore_errors=True)


def _env(project: ClaudeProject, api: TeamAPI) -> dict[str, str]:
    return project.env(api, {"ANTHROPIC_API_KEY": API_KEY, "CLAUDE_CODE_EXPERIMENTAL_AGENT_TEAMS": "1",
                             "CLAUDE_CODE_ENABLE_TODO_TOOLS": "1"})  # fmt: skip


def _claude_files(project: ClaudeProject) -> str:
    return os.path.join(project.home, ".claude")


def _store(project: ClaudeProject) -> ClaudeTeamStore:
    return ClaudeTeamStore(open_database(Home(project.phoenix_home)))


_DEBUG: list[Any] = []


def _wait(what: str, done: Any, server: TmuxServer, pane: str, timeout: float = 90.0) -> None:
    try:
        server.wait_for(done, what, pane, timeout=timeout)
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n{_diagnosis()}") from None


def _submit(server: TmuxServer, pane: str, api: TeamAPI, text: str) -> None:
    """Type a prompt and Enter; Enter again while no model request came (a TUI still starting
    may take the Enter for the text's)."""
    asked = len(api.main_requests())
    server.type(pane, text)
    for _ in range(6):
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            if len(api.main_requests()) > asked or api.lead_held.is_set():
                return
            time.sleep(0.2)
        server.tmux("send-keys", "-t", pane, "Enter")


def _diagnosis() -> str:
    """What the API saw and what the hooks did, for a failure's message."""
    if not _DEBUG:
        return ""
    project, api = _DEBUG
    lines = []
    for r in api.main_requests():
        body = r.body if isinstance(r.body, dict) else {}
        steps = sum(1 for m in body.get("messages") or [] if isinstance(m, dict) and m.get("role") == "assistant")
        lines.append(f"request who={getattr(r, 'who', '?')} steps={steps} tail={r.text[-600:]!r}")
    for name in ("PostToolUse", "SubagentStart", "SubagentStop", "TeammateIdle", "TaskCreated", "TaskCompleted"):
        for rec in project.probe_records(name):
            lines.append(f"{name}: {json.dumps(rec['payload'])[:1500]}")
    lines += [f"ops: {json.dumps(e)[:400]}" for e in project.ops() if e.get("status") in ("warn", "error")]
    for dirpath, _dirs, files in [*os.walk(os.path.join(_claude_files(project), "teams")),
                                  *os.walk(os.path.join(_claude_files(project), "tasks"))]:  # fmt: skip
        for name in files:
            with open(os.path.join(dirpath, name), encoding="utf-8", errors="replace") as fh:
                lines.append(f"{os.path.join(dirpath, name)}: {fh.read()[:1500]}")
    return "\n".join(lines)


@pytest.mark.e2e
@pytest.mark.parametrize("restart", ["resume", "fresh"])
def test_a_killed_leads_team_is_recovered(project: ClaudeProject, server: TmuxServer, restart: str) -> None:
    api = TeamAPI()
    _DEBUG[:] = [project, api]
    project.add_probe(["PostToolUse", "SubagentStart", "SubagentStop", "TeammateIdle", "TaskCreated", "TaskCompleted"])
    with api:
        argv = [*project.claude, "--permission-mode", "default"]
        pane, _pid = server.start("lead", argv, cwd=project.dir, env=_env(project, api))
        agent = Agent.open("default", home=Home(project.phoenix_home))
        _wait("a session started", lambda: agent.state.exists() and agent.state.read().turn == "idle", server, pane)
        lead = agent.state.read()
        assert lead.pid and lead.session_id
        _submit(server, pane, api, f"{LEAD_MARK} Build the parser with a teammate.")
        _wait("the lead's turn in flight", api.lead_held.is_set, server, pane, timeout=120)
        team_name = "session-" + lead.session_id.replace("-", "")[:8]
        store = _store(project)
        _wait("alice recorded", lambda: any(m["name"] == "alice" for m in store.members(team_name)), server, pane)
        # Alice's reply goes to the lead now, while its turn is in flight.
        api.release_alice.set()
        _wait("the reply recorded", lambda: any(m["content"] == REPLY for m in store.messages(team_name)),
              server, pane)  # fmt: skip
        inbox = os.path.join(_claude_files(project), "teams", team_name, "inboxes", "team-lead.json")

        def taken() -> bool:  # the lead's poller took it off the file, into its memory
            try:
                with open(inbox, encoding="utf-8") as fh:
                    return not any(e.get("text") == REPLY for e in json.load(fh))
            except (OSError, ValueError):
                return False

        _wait("the reply taken off the inbox", taken, server, pane)
        time.sleep(1.0)
        os.kill(lead.pid, signal.SIGKILL)
        psutil.wait_procs([p for p in [psutil.Process(lead.pid)] if p.is_running()], timeout=10)
        api.release_lead.set()
        server.tmux("kill-session", "-t", "lead")
        transcript = (store.team(team_name) or {})["record"].get("lead_transcript")
        assert transcript and os.path.exists(transcript)
        with open(transcript, encoding="utf-8") as fh:
            assert REPLY not in fh.read()  # lost with the process: never reached the conversation
        recorded = {m["name"]: m for m in store.members(team_name)}
        assert recorded["alice"]["prompt"] == PROMPT
        tasks = {t["id"]: t for t in store.tasks(team_name)}
        assert (tasks["1"]["owner"], tasks["1"]["status"]) == ("alice", "in_progress"), _diagnosis()

        # The next lead: `claude --resume <id>`, or a fresh `claude`.
        asked = len(api.main_requests())
        args = [*argv, "--resume", lead.session_id] if restart == "resume" else argv
        pane2, _pid2 = server.start("next", args, cwd=project.dir, env=_env(project, api))
        _wait("the next session started", lambda: agent.state.read().pid not in (None, lead.pid), server, pane2)
        _submit(server, pane2, api, "Carry on with the team.")
        _wait("the first model request", lambda: len(api.main_requests()) > asked, server, pane2)
        text = api.main_requests()[asked].text
        assert "CLAUDE CODE TEAM RECOVERED" in text, text[:4000]
        assert "alice" in text and json.dumps(PROMPT)[1:-1] in text
        assert "task 1 [in_progress, owner alice]" in text
        assert REPLY in text
        # The turn ends (Stop): Phoenix writes the reply into the new lead's inbox; it reaches the model.
        _wait("the reply delivered again", lambda: any(r.text.count(REPLY) >= 2 for r in api.main_requests()[asked + 1 :]),
              server, pane2, timeout=60)  # fmt: skip
        delivered = next(r.text for r in api.main_requests()[asked + 1 :] if r.text.count(REPLY) >= 2)
        assert 'verified=\\"false\\"' in delivered, delivered[-3000:]
        message = next(m for m in store.messages(team_name) if m["content"] == REPLY)
        assert message["redelivered_ms"] is not None
        assert (store.team(team_name) or {})["state"] in ("live", "recovered", "archived")


class GuardAPI(TeamAPI):
    """The lead makes a task, gives it to alice and tries to complete one of its own; alice
    ends her first turn at once (idle with a task in progress)."""

    def __init__(self) -> None:
        super().__init__()
        self.release_alice.set()
        self.lead_script = [
            Turn.call("ToolSearch", query="select:TaskCreate,TaskUpdate,SendMessage", max_results=5),
            Turn.call("TaskCreate", subject="Write the config parser", description="parser.py with tests"),
            Turn.call("TaskCreate", subject="Write the docs", description="docs/parser.md"),
            Turn.call("Agent", name="alice", description="parser teammate", prompt=PROMPT),
            Turn.call("TaskUpdate", taskId="1", owner="alice", status="in_progress"),
            Turn.call("TaskUpdate", taskId="2", status="completed"),
            *[Turn.say("Waiting for alice.")] * 30,  # (no turn held here)
        ]
        self.alice_script = [Turn.say("Looking at it.")]


@pytest.mark.e2e
def test_the_guardrails_refuse_through_claude_code(project: ClaudeProject, server: TmuxServer) -> None:
    """TaskCompleted refused while the check is red (exit 2: the task stays, the model is told);
    TeammateIdle sends alice, idle with her task in progress, back to work (her next turn)."""
    os.makedirs(project.phoenix_home, exist_ok=True)
    with open(os.path.join(project.phoenix_home, "phoenix.toml"), "w", encoding="utf-8") as fh:
        fh.write('claude_team_check_command = "echo 2 tests failed; exit 1"\n')
        fh.write("claude_team_keep_busy = true\nclaude_team_keep_busy_limit = 1\n")
    api = GuardAPI()
    _DEBUG[:] = [project, api]
    with api:
        argv = [*project.claude, "--permission-mode", "default"]
        pane, _pid = server.start("lead", argv, cwd=project.dir, env=_env(project, api))
        agent = Agent.open("default", home=Home(project.phoenix_home))
        _wait("a session started", lambda: agent.state.exists() and agent.state.read().turn == "idle", server, pane)
        lead = agent.state.read()
        assert lead.session_id
        _submit(server, pane, api, f"{LEAD_MARK} Build the parser with a teammate.")
        refused = "task 2 cannot be completed yet: the team's check command `echo 2 tests failed; exit 1` exited 1"
        _wait("the refusal reached the model", lambda: any(refused in r.text for r in api.requests_of("lead")),
              server, pane)  # fmt: skip
        request = next(r.text for r in api.requests_of("lead") if refused in r.text)
        assert "2 tests failed" in request
        team_name = "session-" + lead.session_id.replace("-", "")[:8]
        with open(os.path.join(_claude_files(project), "tasks", team_name, "2.json"), encoding="utf-8") as fh:
            assert json.load(fh)["status"] != "completed"
        kept = "you still own task 1 (Write the config parser), in progress"
        _wait("alice sent back to work", lambda: any(kept in r.text for r in api.requests_of("alice")), server, pane)
        events = [e["event"] for e in project.ops()]
        assert "claude_team_completion_refused" in events and "claude_team_kept_busy" in events
