"""End to end: the forced refresh typed into a real Gemini CLI's and a real Codex's tmux pane
(issue 31), as ``test_tmux_clear`` does for Claude Code.

Their hooks are written in the temporary HOME's settings as ``_clients`` lists them (the
prompt: Gemini ``BeforeAgent``, Codex ``UserPromptSubmit``, as ``phx hook user-prompt``; the end
of the turn: Gemini ``AfterAgent``, Codex ``Stop``, as ``phx hook stop``). Each CLI talks to a scripted local model
(``fake_models``, the fakes the other e2e tests use) whose answer is held: mid-turn, the watchdog types nothing; once the
turn has ended it takes a recovery checkpoint and types ``/clear``; the CLI starts a new
conversation (SessionStart, source ``clear``), whose first model request carries the fresh brief.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import threading
import time
from collections.abc import Iterator
from typing import Any

import npm_clis
import psutil
import pytest
from fake_models import FakeGemini, FakeResponses, Turn
from npm_clis import NpmCli, NpmCliUnavailable, ensure_npm_cli
from sandbox import git, home_env
from tmux import TmuxServer

from phoenix_protocol.core._clock import ManualClock
from phoenix_protocol.core._home import Home
from phoenix_protocol.integrations._clients import CODEX as CODEX_CLIENT
from phoenix_protocol.integrations._clients import GEMINI_CLI, Client
from phoenix_protocol.integrations._hooks import REFRESH_BANNER
from phoenix_protocol.integrations._install import hook_command
from phoenix_protocol.services._agent import Agent
from phoenix_protocol.services._watchdog import AgentVerdict, WatchdogReport, run_pass

TASK = "Port the parser to the new grammar"

pytestmark = pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed")


def _cli(cli: NpmCli) -> list[str]:
    try:
        return ensure_npm_cli(cli)
    except NpmCliUnavailable as exc:
        pytest.skip(str(exc))


@pytest.fixture(scope="module")
def gemini() -> list[str]:
    return _cli(npm_clis.GEMINI_CLI)


@pytest.fixture(scope="module")
def codex() -> list[str]:
    return _cli(npm_clis.CODEX)


class Sandbox:
    """A temporary git project, a temporary HOME, and a tmux server, all of the test's own."""

    def __init__(self, root: str) -> None:
        self.root = root
        self.project = os.path.join(root, "project")
        self.home = os.path.join(root, "home")
        os.makedirs(self.project)
        os.makedirs(self.home)
        git(self.project, "init", "-q")
        self.server = TmuxServer(os.path.join(root, "tmux.sock"))
        self.agent = Agent.open("default", home=Home(os.path.join(self.project, ".phoenix")))

    def env(self, **extra: str) -> dict[str, str]:
        return home_env(self.home, **extra)

    def write(self, relative: str, text: str) -> None:
        path = os.path.join(self.home, relative)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w", encoding="utf-8") as fh:
            fh.write(text)

    def watchdog(self) -> tuple[WatchdogReport, AgentVerdict]:
        """One pass, its clock 121 minutes ahead (a refresh is due), the agent opted in."""
        clock = ManualClock(int(time.time() * 1000) + 121 * 60_000)
        report = run_pass(
            self.agent.home,
            clock=clock,
            tmux=True,
            tmux_socket=self.server.socket,
            config_overrides={"tmux_refresh_agents": "default"},
        )
        [verdict] = report.verdicts
        return report, verdict

    def events(self) -> list[dict[str, Any]]:
        events, _ = self.agent.ops.read()
        return events

    def close(self) -> None:
        self.server.kill()
        # What a CLI left running detached (Codex's app-server daemon runs from the HOME).
        for proc in psutil.process_iter(["exe", "cmdline"]):
            try:
                where = " ".join([proc.info["exe"] or "", *(proc.info["cmdline"] or [])])
                if self.home in where:
                    proc.kill()
            except psutil.Error:
                continue
        shutil.rmtree(self.root, ignore_errors=True)


@pytest.fixture
def sandbox() -> Iterator[Sandbox]:
    box = Sandbox(tempfile.mkdtemp(prefix="phx-tmux-"))
    try:
        yield box
    finally:
        box.close()


def _hooks(client: Client) -> dict[str, Any]:
    """``{"hooks": {<CLI event>: [group]}}``: Phoenix's hook command for each event the CLI's
    entry in ``_clients`` registers (what ``phx install`` writes), this interpreter's Phoenix."""
    hooks: dict[str, Any] = {}
    for native, ours, timeout, matcher in client.hooks:
        entry: dict[str, Any] = {"type": "command", "command": hook_command(ours, client=client)}
        entry["timeout"] = timeout * 1000 if client.timeout_ms else timeout
        group: dict[str, Any] = {"hooks": [entry]}
        if matcher is not None:
            group["matcher"] = matcher
        hooks.setdefault(native, []).append(group)
    return {"hooks": hooks}


def _refresh_flow(
    box: Sandbox, pane: str, api: FakeGemini | FakeResponses, release: threading.Event, *, marker: str
) -> str:
    """The part both CLIs share, from a submitted prompt whose answer is held to the clear command
    typed; returns the session id the refresh ended."""
    agent, server = box.agent, box.server
    server.wait_for(lambda: len(api.main_requests()) >= 1 and agent.state.exists(), "the held model request", pane)
    server.wait_for(lambda: agent.state.read().turn == "busy", "the turn begun (prompt hook)", pane)
    server.wait_for(lambda: marker in server.screen(pane).lower(), f"the screen busy ({marker!r})", pane)
    state = agent.state.read()
    # The watchdog finds the agent in its pane, by the pid and start time the hook recorded.
    report, verdict = box.watchdog()
    [found] = [a for p in report.tmux or [] if p.pane_id == pane for a in p.agents]
    assert (found["pid"], found["start_time"]) == (state.pid, pytest.approx(state.pid_start_time, abs=1.0))
    assert verdict.verdict == "alive" and verdict.refresh is not None, verdict.as_dict()
    assert (verdict.refresh["action"], verdict.refresh["detail"]) == ("waiting", "mid-turn")
    assert box.agent.checkpoints.entries("recovery") == [] and verdict.action is None
    # The answer comes, the turn ends: now it types /clear.
    release.set()
    server.wait_for(lambda: agent.state.read().turn == "idle", "the turn ended (its Stop hook)", pane)
    server.wait_for(lambda: marker not in server.screen(pane).lower(), "the screen idle", pane)
    _report, verdict = box.watchdog()
    assert verdict.action == "refresh_sent" and verdict.refresh is not None, verdict.as_dict()
    [checkpoint] = agent.checkpoints.entries("recovery")
    assert verdict.refresh["checkpoint"] == checkpoint.name and verdict.refresh["command"] == "/clear"
    return str(state.session_id)


def _start_gemini(box: Sandbox, argv: list[str], env: dict[str, str]) -> str:
    """Gemini CLI started in a pane, up to its SessionStart hook and its prompt on screen; returns
    the pane. (A CI runner's ``CI=true`` once made it run headless and exit at start-up: the
    sandbox's environment drops such markers, and a dead pane fails the wait with its screen.)"""
    agent, server = box.agent, box.server
    pane, _ = server.start("agent", argv, cwd=box.project, env=env)

    def started() -> bool:
        state = agent.state.read() if agent.state.exists() else None
        return state is not None and state.turn == "idle" and (state.tmux or {}).get("pane") == pane

    server.wait_for(started, "SessionStart", pane)
    server.wait_for(lambda: "type your message" in server.screen(pane).lower(), "the prompt", pane)
    return pane


@pytest.mark.e2e
def test_watchdog_refreshes_an_idle_gemini_cli_in_its_tmux_pane(gemini: list[str], sandbox: Sandbox) -> None:
    hooks = _hooks(GEMINI_CLI)
    settings = {"security": {"auth": {"selectedType": "gemini-api-key"}}, **hooks}
    sandbox.write(".gemini/settings.json", json.dumps(settings))
    release = threading.Event()
    with FakeGemini([Turn.held(release, "Parser half ported.")]) as api:
        env = sandbox.env(GEMINI_CLI_TRUST_WORKSPACE="true", GEMINI_API_KEY="fake", GOOGLE_GEMINI_BASE_URL=api.url)
        agent, server = sandbox.agent, sandbox.server
        pane = _start_gemini(sandbox, [*gemini, "-m", "gemini-2.5-flash"], env)
        first = agent.state.read()
        assert first.tmux == {"pane": pane, "socket": server.socket}
        # The agent is the re-launched child node (the hooks' parent), not the node that launched it.
        proc = psutil.Process(first.pid or 0)
        parent = proc.parent()
        assert proc.name() == "node" and parent is not None and parent.name() == "node"
        agent.state.set_status("working", TASK)
        server.type(pane, "Port the parser, please")
        ended = _refresh_flow(sandbox, pane, api, release, marker="esc to cancel")
        # Gemini CLI clears at once: SessionEnd (reason clear), SessionStart (source clear).
        server.wait_for(lambda: agent.state.read().session_id != ended, "a new session", pane)
        assert [e for e in sandbox.events() if e["event"] == "session_start"][-1]["meta"]["source"] == "clear"
        assert agent.state.read().refresh_requested is None
        asked = len(api.main_requests())
        server.wait_for(lambda: "type your message" in server.screen(pane).lower(), "the prompt", pane)
        server.type(pane, "Carry on")
        server.wait_for(lambda: len(api.main_requests()) > asked, "the next model request", pane)
        request = api.main_requests()[asked].text
        assert REFRESH_BANNER in request and TASK in request, request[request.find("Phoenix") - 500 :][:3000]
        assert "Port the parser, please" not in request


@pytest.mark.e2e
def test_watchdog_refreshes_an_idle_codex_in_its_tmux_pane(codex: list[str], sandbox: Sandbox) -> None:
    hooks = _hooks(CODEX_CLIENT)
    sandbox.write(".codex/hooks.json", json.dumps(hooks))
    release = threading.Event()
    with FakeResponses([Turn.held(release, "Parser half ported.")]) as api:
        sandbox.write(
            ".codex/config.toml",
            'model = "fake-model"\nmodel_provider = "fake"\n'
            f'[model_providers.fake]\nname = "Fake local"\nbase_url = "{api.url}"\n'
            'env_key = "FAKE_OPENAI_KEY"\nwire_api = "responses"\n'
            f'[projects."{sandbox.project}"]\ntrust_level = "trusted"\n',
        )
        env = sandbox.env(FAKE_OPENAI_KEY="x")
        argv = [*codex, "--dangerously-bypass-hook-trust"]
        pane, _ = sandbox.server.start("agent", argv, cwd=sandbox.project, env=env)
        agent, server = sandbox.agent, sandbox.server
        server.wait_for(lambda: "›" in server.screen(pane), "the prompt", pane)
        agent.state.set_status("working", TASK)  # Codex starts its session with the first prompt
        server.type(pane, "Port the parser, please")
        server.wait_for(lambda: agent.state.read().session_id is not None, "SessionStart", pane)
        first = agent.state.read()
        assert first.tmux == {"pane": pane, "socket": server.socket}
        proc = psutil.Process(first.pid or 0)
        parent = proc.parent()  # the native binary, below its launcher
        assert proc.name() == "codex" and parent is not None and parent.name() == "node"
        ended = _refresh_flow(sandbox, pane, api, release, marker="esc to interrupt")
        asked = len(api.main_requests())
        server.wait_for(lambda: "›" in server.screen(pane), "the prompt", pane)
        server.type(pane, "Carry on")
        # Codex starts the new conversation's session with its first prompt: source clear.
        server.wait_for(lambda: agent.state.read().session_id != ended, "a new session", pane)
        assert [e for e in sandbox.events() if e["event"] == "session_start"][-1]["meta"]["source"] == "clear"
        server.wait_for(lambda: len(api.main_requests()) > asked, "the next model request", pane)
        request = api.main_requests()[asked].text
        assert REFRESH_BANNER in request and TASK in request, request[request.find("Phoenix") - 500 :][:3000]
        assert "Port the parser, please" not in request
