"""End to end: seed 003's forced refresh typed into a real Claude Code's tmux pane (issue 31).

The interactive Claude Code TUI runs in a pane of a tmux server of the test's own, with a
temporary HOME (onboarding, the API key and the project's trust dialog answered in its
``~/.claude.json``) and Phoenix's hooks. The watchdog (``run_pass(tmux=True)``, its clock 121
minutes ahead: the refresh is due) finds the agent in the pane by its pid and start time; while
the model's answer is held (mid-turn) it types nothing; once the turn has ended it takes a
recovery checkpoint and types ``/clear``, and the next model request carries the fresh brief.
"""

from __future__ import annotations

import json
import os
import shlex
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from claude_code import ClaudeProject, FakeAnthropic, Turn, ensure_claude_code
from tmux import TmuxServer

import phoenix_protocol
from phoenix_protocol.core._clock import ManualClock
from phoenix_protocol.core._home import Home
from phoenix_protocol.integrations._hooks import REFRESH_BANNER
from phoenix_protocol.services._agent import Agent
from phoenix_protocol.services._watchdog import AgentVerdict, WatchdogReport, run_pass

SRC = os.path.dirname(os.path.dirname(os.path.abspath(phoenix_protocol.__file__)))
TASK = "Port the parser to the new grammar"
API_KEY = "sk-ant-api03-fake-e2e-key-" + "x" * 40  # what ClaudeProject.env gives Claude Code

pytestmark = pytest.mark.skipif(not __import__("shutil").which("tmux"), reason="tmux is not installed")


@pytest.fixture(scope="module")
def claude_argv() -> list[str]:
    return ensure_claude_code()


@pytest.fixture
def project(claude_argv: list[str]) -> Iterator[ClaudeProject]:
    with ClaudeProject.create(claude_argv) as created:
        script = os.path.join(created.root, "state-update")  # the Phoenix under test's writer
        with open(script, "w", encoding="utf-8") as fh:
            fh.write(
                "#!/bin/sh\n"
                f"PYTHONPATH={shlex.quote(SRC)} exec {shlex.quote(sys.executable)} -c "
                "'import sys; from phoenix_protocol.cli._state_update import main; sys.exit(main())' \"$@\"\n"
            )
        os.chmod(script, 0o700)
        # The interactive TUI's first run: onboarding done, the (fake) API key approved, the
        # project trusted; otherwise it waits in dialogs.
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
        yield created


@pytest.fixture
def server() -> Iterator[TmuxServer]:
    folder = tempfile.mkdtemp(prefix="phx-tmux-")
    tmux = TmuxServer(os.path.join(folder, "tmux.sock"))
    try:
        yield tmux
    finally:
        tmux.kill()
        import shutil

        shutil.rmtree(folder, ignore_errors=True)


def _events(agent: Agent) -> list[dict[str, Any]]:
    events, _ = agent.ops.read()
    return events


@pytest.mark.e2e
def test_watchdog_refreshes_an_idle_claude_code_in_its_tmux_pane(project: ClaudeProject, server: TmuxServer) -> None:
    release = threading.Event()
    writer = shlex.quote(os.path.join(project.root, "state-update"))
    script = [Turn.bash(f"{writer} --working {shlex.quote(TASK)}"), Turn.held(release, "Parser half ported.")]
    with FakeAnthropic(script) as api:
        argv = [*project.claude, "--allowedTools", f"Bash({os.path.join(project.root, 'state-update')} *)"]
        pane, _pane_pid = server.start("agent", argv, cwd=project.dir, env=project.env(api))
        agent = Agent.open("default", home=Home(project.phoenix_home))
        server.wait_for(lambda: agent.state.exists() and agent.state.read().turn == "idle", "a session started", pane)
        first = agent.state.read()
        assert first.turn == "idle" and first.tmux == {"pane": pane, "socket": server.socket}

        def watchdog(opted_in: str = "default") -> tuple[WatchdogReport, AgentVerdict]:
            clock = ManualClock(int(time.time() * 1000) + 121 * 60_000)  # 121 minutes of work: a refresh is due
            report = run_pass(Home(project.phoenix_home), clock=clock, tmux=True, tmux_socket=server.socket,
                              config_overrides={"tmux_refresh_agents": opted_in})  # fmt: skip
            [verdict] = report.verdicts
            return report, verdict

        # The watchdog finds the agent in its pane: the native `claude` (pid and start time as the
        # SessionStart hook recorded them), the npm launcher `node cli-wrapper.cjs` not counted.
        # (Not opted in yet: this pass only looks.)
        report, verdict = watchdog(opted_in="")
        assert verdict.refresh is None and verdict.action is None
        panes = [p for p in report.tmux or [] if p.pane_id == pane]
        [found] = panes[0].agents
        assert (found["cli"], found["pid"], found["name"]) == ("claude-code", first.pid, "claude")
        assert found["start_time"] == pytest.approx(first.pid_start_time, abs=1.0)
        assert len(found["launchers"]) == 1

        # Mid-turn: the prompt is submitted, the tool ran, the model's answer is held.
        server.type(pane, "Port the parser, please")
        server.wait_for(lambda: len(api.main_requests()) >= 2, "the held model request", pane)
        server.wait_for(lambda: agent.state.read().current_task == TASK, "the task recorded", pane)
        assert agent.state.read().turn == "busy"
        _report, verdict = watchdog()
        assert verdict.verdict == "alive" and verdict.refresh is not None, verdict.as_dict()
        assert verdict.refresh["action"] == "waiting", verdict.as_dict()
        assert verdict.refresh["detail"] == "mid-turn" and verdict.action is None
        assert "refresh_typed" not in [e["event"] for e in _events(agent)]
        assert agent.checkpoints.entries("recovery") == []
        assert "/clear" not in server.screen(pane)

        # The answer comes, the turn ends (Stop): now the watchdog refreshes.
        release.set()
        server.wait_for(lambda: agent.state.read().turn == "idle", "the turn ended (Stop hook)", pane)
        server.wait_for(lambda: "esc to interrupt" not in server.screen(pane), "the screen idle", pane)
        _report, verdict = watchdog()
        assert verdict.action == "refresh_sent", verdict.as_dict()
        [checkpoint] = agent.checkpoints.entries("recovery")
        assert verdict.refresh is not None and verdict.refresh["checkpoint"] == checkpoint.name

        # Claude Code clears: SessionEnd (reason clear), SessionStart (source clear) in the same process.
        server.wait_for(lambda: agent.state.read().session_id != first.session_id, "a new session", pane)
        starts = [e for e in _events(agent) if e["event"] == "session_start"]
        assert starts[-1]["meta"]["source"] == "clear"
        after = agent.state.read()
        assert after.refresh_requested is None and after.pid == first.pid and after.turn == "idle"

        # The next model request carries the fresh brief.
        asked = len(api.main_requests())
        server.type(pane, "Carry on")
        server.wait_for(lambda: len(api.main_requests()) > asked, "the next model request", pane)
        request = api.main_requests()[asked]
        assert REFRESH_BANNER in request.text and TASK in request.text, request.text[:3000]
        assert checkpoint.name in request.text
        # ...and only the new conversation: the cleared one's prompt is gone.
        assert "Port the parser, please" not in request.text
