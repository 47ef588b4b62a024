"""Notifications to the person (issue 36), delivered to a real HTTP server on loopback: the
watchdog's stalled verdict (a SIGKILLed process), the drift hook's warning (with Claude Code's
terminal escape), the Slack and ntfy shapes, the rate limit, a desktop notifier on PATH, and a
webhook that is down."""

from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from phoenix_protocol.core import _background
from phoenix_protocol.core._clock import ManualClock
from phoenix_protocol.core._errors import ConfigError
from phoenix_protocol.core._home import Home
from phoenix_protocol.core._process import hostname, identity_of
from phoenix_protocol.integrations._hooks import run
from phoenix_protocol.services._agent import Agent
from phoenix_protocol.services._notify import Notification, claim, deliver, notify, terminal_sequence, webhook_request
from phoenix_protocol.services._watchdog import run_pass


class Receiver:
    """A webhook receiver: a real HTTP server on 127.0.0.1, recording each POST."""

    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []
        self.got = threading.Event()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length", "0"))
                body = self.rfile.read(length)
                outer.requests.append(
                    {"path": self.path, "type": self.headers.get("Content-Type"), "body": json.loads(body)}
                )
                self.send_response(200)
                self.end_headers()
                outer.got.set()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    r = Receiver()
    yield r
    r.close()


def _settings(root: Path, text: str) -> None:
    root.mkdir(parents=True, exist_ok=True)
    (root / "phoenix.toml").write_text("notify_desktop = false\n" + text)


def test_the_watchdog_posts_a_stalled_agent(home: Home, clock: ManualClock, receiver: Receiver) -> None:
    _settings(Path(home.root), f'notify_webhook = "{receiver.url}/hooks/phoenix"\n')
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    ident = identity_of(proc.pid)
    assert ident is not None
    agent = Agent.open("worker", home=home, clock=clock)
    agent.state.start_session("s-1", process={"pid": proc.pid, "start_time": ident.start_time, "host": hostname()})
    agent.state.set_status("working", "Migrate the users table", session_id="s-1")
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    clock.advance(120)
    report = run_pass(home, clock=clock)
    assert report.verdicts[0].verdict == "stalled"
    _background.wait()
    assert receiver.got.wait(10)
    [request] = receiver.requests
    assert request["path"] == "/hooks/phoenix" and request["type"] == "application/json"
    body = request["body"]
    assert (body["kind"], body["agent"], body["source"]) == ("stalled", "worker", "phoenix-protocol")
    assert "is gone" in body["message"] and body["title"] == "Phoenix: worker: agent stalled"
    sent = [e for e in agent.ops.read()[0] if e["event"] == "notification_sent"]
    assert sent and sent[-1]["meta"]["channels"] == {"webhook": "ok: HTTP 200"}
    assert receiver.url not in json.dumps(sent)  # the webhook URL (often a secret) is never logged


@pytest.mark.parametrize("fmt", ["slack", "ntfy"])
def test_slack_and_ntfy_shapes_reach_the_receiver(agent: Agent, receiver: Receiver, fmt: str) -> None:
    note = Notification("zero", "drift", "7 of the last 7 calls failed", at="2026-11-28T03:00:00Z")
    target, body = webhook_request(note, f"{receiver.url}/alerts/phoenix-zero", fmt)
    decoded = json.loads(body)
    if fmt == "slack":
        assert target.endswith("/alerts/phoenix-zero")
        assert decoded == {"text": "*Phoenix: zero: agent drifting*\n7 of the last 7 calls failed"}
    else:  # ntfy's JSON publishing: the topic in the body, posted to the server's root (path prefix kept)
        assert target == f"{receiver.url}/alerts/"
        assert decoded["topic"] == "phoenix-zero" and decoded["title"] == "Phoenix: zero: agent drifting"
        assert decoded["message"] == "7 of the last 7 calls failed" and decoded["priority"] == 4
    agent.config = agent.config.replace(
        {"notify_desktop": False, "notify_webhook": f"{receiver.url}/alerts/phoenix-zero", "notify_webhook_format": fmt}
    )
    outcomes = deliver(agent, note)
    assert outcomes == {"webhook": "ok: HTTP 200"}
    assert receiver.requests[-1]["body"] == decoded


def test_rate_limited_per_agent_and_kind(home: Home, clock: ManualClock) -> None:
    a = Agent.open("a", home=home, clock=clock)
    b = Agent.open("b", home=home, clock=clock)
    assert claim(a, "stalled") is True
    assert claim(a, "stalled") is False  # within notify_interval_minutes (30)
    assert claim(a, "drift") is True  # another kind
    assert claim(b, "stalled") is True  # another agent
    clock.advance(29 * 60)
    assert claim(a, "stalled") is False
    clock.advance(61)
    assert claim(a, "stalled") is True
    a.config = a.config.replace({"notify_interval_minutes": 0})
    assert claim(a, "stalled") is True and claim(a, "stalled") is True


def test_a_desktop_notifier_on_path(agent: Agent, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``notify-send`` where it is installed: a real program on PATH, which writes its arguments."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    seen = tmp_path / "seen.txt"
    script = bin_dir / "notify-send"
    script.write_text(f'#!/bin/sh\nprintf "%s\\n" "$@" > {seen}\n')
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    note = notify(agent, "hung", "no CPU progress for 10 minutes", background=False)
    assert note is not None
    args = seen.read_text().splitlines()
    assert args[-2:] == ["Phoenix: tester: agent hung", "no CPU progress for 10 minutes"]
    assert "--urgency=critical" in args


def test_a_webhook_that_is_down_fails_quietly(agent: Agent, receiver: Receiver) -> None:
    url = receiver.url + "/x"
    receiver.close()  # nothing listens there any more
    agent.config = agent.config.replace({"notify_desktop": False, "notify_webhook": url})
    outcomes = deliver(agent, Notification("tester", "stalled", "gone", at="t"))
    assert outcomes["webhook"].startswith("failed: URLError")
    assert url not in outcomes["webhook"]
    logged = [e for e in agent.ops.read()[0] if e["event"] == "notification_sent"]
    assert logged[-1]["meta"]["channels"]["webhook"].startswith("failed")


def test_bad_settings_are_refused(agent: Agent) -> None:
    agent.config = agent.config.replace({"notify_webhook_format": "teams"})
    with pytest.raises(ConfigError, match="notify_webhook_format"):
        notify(agent, "drift", "x")
    agent.config = agent.config.replace({"notify_webhook_format": "json", "notify_webhook": "file:///etc/passwd"})
    with pytest.raises(ConfigError, match="http"):
        notify(agent, "drift", "x")


def test_terminal_sequences() -> None:
    note = Notification("zero", "drift", "a; b\x1b]0;evil\x07 c", at="t")
    assert terminal_sequence(note, "osc9") == "\x1b]9;Phoenix: zero: agent drifting: a; b]0;evil c\x07"
    assert terminal_sequence(note, "osc777") == "\x1b]777;notify;Phoenix: zero: agent drifting;a, b]0,evil c\x07"
    assert terminal_sequence(note, "off") is None


def _hook(project: Path, event: str, **payload: Any) -> str:
    body = {"session_id": "s1", "cwd": str(project), "transcript_path": "/dev/null", **payload}
    code, out, err = run([event], json.dumps(body).encode())
    assert code == 0, err
    return out


def test_the_drift_hook_notifies_once_and_hands_claude_code_the_escape(
    project: Path, receiver: Receiver, monkeypatch: pytest.MonkeyPatch
) -> None:
    _settings(project / ".phoenix", f'notify_webhook = "{receiver.url}/drift"\nnotify_terminal = "osc777"\n')
    monkeypatch.setenv("PHOENIX_HOOK_INLINE", "1")  # the detached child's work, inline
    _hook(project, "session-start", hook_event_name="SessionStart", source="startup")
    agent = Agent.open("default", home=Home(str(project / ".phoenix")))
    agent.state.set_status("working", "Make the migration pass", session_id="s1")
    outputs = []
    for _ in range(6):
        outputs.append(
            _hook(
                project,
                "post-tool-use-failure",
                hook_event_name="PostToolUseFailure",
                tool_name="Bash",
                tool_input={"command": "alembic upgrade head"},
                error="boom",
            )
        )
    [warning] = [json.loads(o) for o in outputs if o]
    assert warning["terminalSequence"].startswith("\x1b]777;notify;Phoenix: default: agent drifting;")
    assert warning["terminalSequence"].endswith("\x07")
    assert "going in circles" in warning["hookSpecificOutput"]["additionalContext"]
    [request] = receiver.requests
    assert request["body"]["kind"] == "drift" and "the same Bash call 4 times" in request["body"]["message"]
    # A new episode within the interval: the model is warned, the person not again.
    agent.state.add_note("open_loop", "the enum type")
    outputs = [
        _hook(
            project,
            "post-tool-use-failure",
            hook_event_name="PostToolUseFailure",
            tool_name="Bash",
            tool_input={"command": "make migrate"},
            error="boom",
        )
        for _ in range(4)
    ]
    [second] = [json.loads(o) for o in outputs if o]
    assert "terminalSequence" not in second and len(receiver.requests) == 1


def test_the_watchdog_posts_drift_it_finds_once_and_respects_a_task_exemption(
    home: Home, clock: ManualClock, receiver: Receiver
) -> None:
    """Drift the watchdog finds between tool calls: the person is told once per episode; a task
    exempt from the rule (``phx drift exempt``) is not judged by it."""
    from phoenix_protocol.services._drift_exempt import exempt

    _settings(Path(home.root), f'notify_webhook = "{receiver.url}/w"\n')
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    try:
        ident = identity_of(proc.pid)
        assert ident is not None
        agent = Agent.open("busy", home=home, clock=clock)
        agent.state.start_session("s-2", process={"pid": proc.pid, "start_time": ident.start_time, "host": hostname()})
        agent.state.set_status("working", "Read the logs", session_id="s-2")
        exempt(agent, ["repetition"])
        ring = [[clock.now_ms(), "Bash", "same", False, None, False]] * 8
        agent.state.change(lambda s: setattr(s, "recent_actions", ring))
        [verdict] = run_pass(home, clock=clock).verdicts
        assert verdict.drift == "8 of the last 8 calls failed, with no progress in between"  # not repetition
        _background.wait()
        assert [b["body"]["kind"] for b in receiver.requests] == ["drift"]
        assert "8 of the last 8 calls failed" in receiver.requests[0]["body"]["message"]
        run_pass(home, clock=clock)  # the same episode: no second notification
        _background.wait()
        assert len(receiver.requests) == 1
    finally:
        proc.kill()
        proc.wait()
