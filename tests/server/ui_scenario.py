"""A home filled as a person would see it (issue 35's scripted scenario), for the dashboard's tests:

- ``builder``: working on a task, its process running (a real ``sleep`` child), tool calls with a
  failure, a drift warning, two checkpoints, a session, a brief, and a Clinic episode (healed);
- ``scout``: working, its process gone (a real child, killed), silent for ten minutes: stalled;
- team ``release`` (lead ``lead``; ``alice`` beating, ``bob`` silent for an hour: stale), tasks ``cut`` (done),
  ``notes`` (alice, in progress, after ``cut``) and ``publish`` (after ``notes``: blocked);
  messages: a question to alice answered and acknowledged, one to bob never delivered.

Time is a ``ManualClock``: everything is written at ``T0`` and after, and the views are read at
about an hour after ``T0`` (``advance`` moves it on).
"""

from __future__ import annotations

import subprocess
import sys
from dataclasses import dataclass, field

from phoenix_protocol.core._clock import ManualClock
from phoenix_protocol.core._config import load_config
from phoenix_protocol.core._home import Home
from phoenix_protocol.core._process import identity_of
from phoenix_protocol.services._agent import Agent
from phoenix_protocol.store._teams import Team

T0 = 1_795_000_000_000
TASK = "Port the parser to the new grammar"


@dataclass
class Scenario:
    home: Home
    clock: ManualClock
    running: subprocess.Popen[bytes]
    checkpoints: list[str] = field(default_factory=list)

    def close(self) -> None:
        self.running.kill()
        self.running.wait()


def _child() -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-c", "import time; time.sleep(3600)"])


def fill(home: Home) -> Scenario:
    home.ensure()
    clock = ManualClock(T0)
    config = load_config(home.root, project_root=home.project_root)
    running = _child()
    scenario = Scenario(home, clock, running)
    gone = _child()
    gone_identity = identity_of(gone.pid)
    gone.kill()
    gone.wait()
    live_identity = identity_of(running.pid)
    assert live_identity is not None and gone_identity is not None

    builder = Agent("builder", home, config=config, clock=clock)
    builder.state.start_session("sess-builder", process=live_identity.as_dict(), client="claude-code")
    builder.sessions.begin("sess-builder")
    builder.state.set_status("working", TASK, session_id="sess-builder")
    for i, (tool, ok) in enumerate([("Bash", True), ("Write", True), ("Bash", False), ("Bash", False), ("Read", True)]):
        clock.advance(20)
        builder.state.heartbeat(
            session_id="sess-builder",
            tool=tool,
            ok=ok,
            error=None if ok else "exit code 1: 3 tests failed",
            work=f"step {i}",
        )
    builder.record("drift_detected", "warn", {"drift": "repetition: the same failing Bash call 3 times"})
    builder.state.add_note("open_loop", "Refresh tokens are not implemented yet")
    scenario.checkpoints.append(builder.checkpoints.create("routine", summary="parser half ported").name)
    clock.advance(30)
    builder.state.add_note("next_action", "Make test_grammar pass")
    scenario.checkpoints.append(builder.checkpoints.create("routine", summary="grammar tests next").name)
    builder.write_brief()
    for attempt, (cause, action, outcome, final) in enumerate(
        [
            ("transient_error", "retry_with_backoff", "relapsed", False),
            ("hallucinated_tool", "modify_prompt", "healed", True),
        ]
    ):
        builder.record(
            "clinic_episode",
            "ok",
            {
                "schema_version": 1,
                "episode": "ep0000000001",
                "attempt": attempt + 1,
                "max_recoveries": 2,
                "agent_name": "weather",
                "prompt": "What is the weather in Paris?",
                "root_cause": cause,
                "confidence": 0.9 - attempt * 0.1,
                "source": "fast_path",
                "action": action,
                "outcome": outcome,
                "error_type": "ModelHTTPError",
                "error": "503 Service Unavailable",
                "final": final,
                **({"episode_outcome": "healed"} if final else {}),
            },
        )

    scout = Agent("scout", home, config=config, clock=clock)
    scout.state.start_session("sess-scout", process=gone_identity.as_dict(), client="gemini-cli")
    scout.state.set_status("working", "Survey the logging call sites", session_id="sess-scout")

    team = Team.create(home, "Release 2", lead="lead", team_id="release", clock=clock, config=config)
    for name in ("alice", "bob"):
        team.join(name, role="engineer")
    cut = team.add_task("Cut the release branch")
    notes = team.add_task("Write the release notes", after=[cut["task_id"]])
    team.add_task("Publish the release", after=[notes["task_id"]])
    team.claim(cut["task_id"], "alice")
    team.done(cut["task_id"], "alice")
    team.claim(notes["task_id"], "alice")
    question = team.send("lead", "alice", type="question", subject="Notes format", body="Markdown or plain text?")
    team.send("alice", "lead", type="resolution", subject="Re: Notes format", body="Markdown, as last time.")
    team.send("lead", "bob", subject="Publishing", body="Please prepare the upload credentials.")
    team.heartbeat("bob")
    clock.advance(60)
    team.heartbeat("alice")
    team.heartbeat("lead")
    team.mailbox.mark_delivered("alice", team.mailbox.fetch("alice").through_seq)
    team.mailbox.ack("alice", question.seq)
    team.mailbox.mark_delivered("lead", team.mailbox.fetch("lead").through_seq)
    clock.advance(61 * 60)  # an hour on: scout stalled, bob silent for more than an hour (stale)
    team.heartbeat("alice")
    team.heartbeat("lead")
    _claude_team(home, config, clock.now_ms())
    return scenario


CLAUDE_TEAM = "session-1a2b3c4d"


def _claude_team(home: Home, config: object, now_ms: int) -> None:
    """A Claude Code agent team as its hooks record it (issue 32), its lead dead and recovered: a
    teammate's reply waits to be delivered again to the new lead."""
    from phoenix_protocol.store._cc_teams import ClaudeTeamStore
    from phoenix_protocol.store._db import open_database

    store = ClaudeTeamStore(open_database(home, config))  # type: ignore[arg-type]
    store.bind(CLAUDE_TEAM, project=home.root, lead_session_id="lead-1", record={}, now_ms=now_ms)
    store.upsert_members(
        CLAUDE_TEAM,
        [
            {"name": "team-lead", "role": "lead"},
            {
                "name": "researcher",
                "role": "researcher",
                "prompt": "Find every caller of parse()",
                "transcript": "/t/r.jsonl",
            },
        ],
        now_ms=now_ms,
    )
    store.upsert_tasks(
        CLAUDE_TEAM,
        [{"id": "1", "subject": "List parse() callers", "status": "in_progress", "owner": "researcher"}],
        now_ms=now_ms,
    )
    store.record_messages(
        CLAUDE_TEAM,
        [
            {
                "msg_id": "m1",
                "sender": "team-lead",
                "recipient": "researcher",
                "kind": "message",
                "content": "Start with src/",
            },
            {
                "msg_id": "m2",
                "sender": "researcher",
                "recipient": "team-lead",
                "kind": "message",
                "content": "12 callers found",
            },
        ],
        now_ms=now_ms,
    )
    store.mark_delivered(CLAUDE_TEAM, ["m1"], now_ms=now_ms)
    store.queue_redelivery(CLAUDE_TEAM, ["m2"], to="team-lead")
    store.set_state(CLAUDE_TEAM, "recovered", now_ms=now_ms)
