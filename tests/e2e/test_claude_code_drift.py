"""End to end (issue 36): a loop of near-duplicate commands inside the real Claude Code CLI. The
drift warning, with the terminal notification Phoenix hands Claude Code (``terminalSequence``),
is accepted by Claude Code and reaches the model's next request, once; the person's webhook gets
the drift notification."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from claude_code import ClaudeProject, FakeAnthropic, Turn, ensure_claude_code

from phoenix_protocol import Agent
from phoenix_protocol.core._home import Home

TASK = "Make the greeting test pass"


@pytest.fixture(scope="module")
def claude_argv() -> list[str]:
    return ensure_claude_code()


@pytest.fixture
def project(claude_argv: list[str]) -> Iterator[ClaudeProject]:
    with ClaudeProject.create(claude_argv) as created:
        yield created


class _Receiver:
    def __init__(self) -> None:
        self.bodies: list[dict[str, Any]] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                outer.bodies.append(json.loads(self.rfile.read(int(self.headers.get("Content-Length", "0")))))
                self.send_response(204)
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/drift"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()


@pytest.mark.e2e
def test_a_loop_of_near_duplicates_warns_the_model_once(project: ClaudeProject) -> None:
    receiver = _Receiver()
    try:
        agent = Agent.open("default", home=Home(project.phoenix_home))
        agent.state.set_status("working", TASK)  # creates the home
        with open(f"{project.phoenix_home}/phoenix.toml", "w", encoding="utf-8") as fh:
            fh.write(f'notify_desktop = false\nnotify_webhook = "{receiver.url}"\nnotify_terminal = "osc9"\n')
        variants = [
            "echo phoenix-loop",
            "echo phoenix-loop | tail -5",
            "echo -n phoenix-loop",
            "echo phoenix-loop 2>&1 | head -3",
            "echo phoenix-loop | tail -1",
        ]
        with FakeAnthropic([*(Turn.bash(v) for v in variants), Turn.say("Stopping here.")]) as api:
            run = project.run(["-p", "make it pass", "--allowedTools", "Bash", "--output-format", "json"], api=api)
        assert run.returncode == 0, run.describe()
        main = api.main_requests()
        assert len(main) == 6, [r.path for r in api.requests]
        warned = [i for i, request in enumerate(main) if "going in circles" in request.text]
        # The 4th call's PostToolUse warns; every later request still carries that context, no new one.
        assert warned and warned[0] == 4, warned
        assert main[-1].text.count("Phoenix Protocol: you may be going in circles") == 1
        assert "the same Bash call 4 times" in main[4].text and TASK in main[4].text
        assert not project.hook_errors(), project.hook_errors()
        detected = [e for e in project.ops() if e["event"] == "drift_detected"]
        assert detected and detected[0]["meta"]["episode_opened"] is True
        # The person heard too (the detached child may finish after the CLI: wait for the ops event).
        import time

        deadline = time.monotonic() + 20
        while not receiver.bodies and time.monotonic() < deadline:
            time.sleep(0.2)
        assert [b["kind"] for b in receiver.bodies] == ["drift"], receiver.bodies
    finally:
        receiver.server.shutdown()
        receiver.server.server_close()
