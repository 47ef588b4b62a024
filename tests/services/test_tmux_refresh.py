"""Seed 003's forced refresh typed into a tmux pane (``phx watchdog --tmux``): a real tmux server
(its own socket), a stand-in agent named ``claude`` that draws Claude Code's prompt and records
what is typed into it, and the watchdog's pass on an injected clock."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from phoenix_protocol.cli._main import cli
from phoenix_protocol.core._clock import ManualClock
from phoenix_protocol.core._home import Home
from phoenix_protocol.core._process import identity_of
from phoenix_protocol.services._agent import Agent
from phoenix_protocol.services._tmux_refresh import RETYPE_AFTER_MS, refresh_due
from phoenix_protocol.services._watchdog import run_pass

pytestmark = pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed")

# A stand-in for an agent CLI's TUI: its screen is a prompt line ("❯ ", Claude Code's empty
# prompt; "busy": a busy mark instead), each line typed into it is appended to a log.
FAKE_TUI = """\
import sys
log, mode = sys.argv[1], sys.argv[2]
lines = 0
while True:
    sys.stdout.write("\\x1b[2J\\x1b[H")  # a TUI redraws its screen
    if mode == "slow" and lines == 1:
        sys.stdout.write("\\u276f /clear\\n")  # kept in the input line: no empty prompt until Enter again
    elif mode == "busy":
        sys.stdout.write("* Working... (3s - esc to interrupt)\\n")
    elif mode == "draft":
        sys.stdout.write("\\u276f half a thought\\n")
    else:
        sys.stdout.write("\\u276f \\n")
    sys.stdout.flush()
    line = sys.stdin.readline()
    if not line:
        break
    lines += 1
    with open(log, "a", encoding="utf-8") as fh:
        fh.write(line)
"""

MINUTES = 60_000
OPTED_IN = {"tmux_refresh_agents": "zero"}


class Pane:
    def __init__(self, socket: str, pane_id: str, agent_pid: int, log: Path) -> None:
        self.socket = socket
        self.id = pane_id
        self.agent_pid = agent_pid
        self.log = log

    def typed(self) -> list[str]:
        return self.log.read_text().splitlines() if self.log.exists() else []

    def screen(self) -> str:
        done = subprocess.run(
            ["tmux", "-S", self.socket, "capture-pane", "-p", "-t", self.id], capture_output=True, text=True, check=True
        )
        return done.stdout


@pytest.fixture
def tmux_server(tmp_path: Path) -> Iterator[Callable[..., Pane]]:
    socket = str(tmp_path / "tmux.sock")
    env = {k: v for k, v in os.environ.items() if k not in ("TMUX", "TMUX_PANE")}
    tui = tmp_path / "claude"  # the process is named after the file it runs: `claude`
    tui.write_text(f"#!{sys.executable}\n" + FAKE_TUI)
    tui.chmod(0o755)
    count = [0]

    def start(mode: str = "idle") -> Pane:
        from phoenix_protocol.core._clis import agents_in_tree

        count[0] += 1
        log = tmp_path / f"typed-{count[0]}.txt"
        argv = ["tmux", "-S", socket, "-f", os.devnull, "new-session", "-d", "-P", "-F", "#{pane_id} #{pane_pid}"]
        argv += ["-s", f"s{count[0]}", "-x", "120", "-y", "20", f"{tui} {log} {mode}"]
        pane_id, pane_pid = subprocess.run(argv, capture_output=True, text=True, check=True, env=env).stdout.split()
        deadline = time.monotonic() + 20
        pane = None
        while time.monotonic() < deadline:
            found = agents_in_tree(int(pane_pid))
            if found:
                pane = Pane(socket, pane_id, found[0].pid, log)
                if pane.screen().strip():
                    return pane
            time.sleep(0.05)
        raise AssertionError(f"the stand-in agent never drew its screen in pane {pane_id}")

    try:
        yield start
    finally:
        subprocess.run(["tmux", "-S", socket, "kill-server"], capture_output=True, check=False)


def _agent_in(home: Home, clock: ManualClock, pane: Pane, *, recorded_pane: str | None = None) -> Agent:
    """Agent ``zero``, its session started in ``pane`` (the process and pane the SessionStart
    hook records), working for 121 minutes: a forced refresh is due."""
    agent = Agent.open("zero", home=home, clock=clock)
    ident = identity_of(pane.agent_pid)
    assert ident is not None
    process: dict[str, Any] = {"pid": ident.pid, "start_time": ident.start_time, "host": ident.host}
    process["tmux"] = {"pane": recorded_pane or pane.id, "socket": pane.socket}
    agent.state.start_session("sess-1", process=process)
    agent.state.set_status("working", "Port the parser", session_id="sess-1")
    clock.advance(121 * 60)
    return agent


def _pass(home: Home, clock: ManualClock, *, act: bool = True, **overrides: Any) -> Any:
    report = run_pass(home, clock=clock, act=act, tmux=True, config_overrides={**OPTED_IN, **overrides})
    [verdict] = [v for v in report.verdicts if v.agent_id == "zero"]
    return report, verdict


def _events(agent: Agent) -> list[str]:
    events, _ = agent.ops.read()
    return [e["event"] for e in events]


def _wait_typed(pane: Pane, count: int = 1) -> list[str]:
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and len(pane.typed()) < count:
        time.sleep(0.05)
    return pane.typed()


def test_refresh_due_by_request_or_by_unclaimed_continuous_work(agent: Agent, clock: ManualClock) -> None:
    agent.state.start_session("s")
    config = agent.config
    assert refresh_due(agent.state.read(), config, clock.now_ms()) is None
    later = clock.now_ms() + 120 * MINUTES
    assert refresh_due(agent.state.read(), config, later) == "120 minutes of continuous work"
    agent.checkpoints.emergency_recovery("drift: the same failing call")
    assert refresh_due(agent.state.read(), config, clock.now_ms()) == "drift: the same failing call"
    agent.state.set_status("idle")
    assert refresh_due(agent.state.read(), config, later) is None


def test_an_idle_agent_due_a_refresh_gets_a_checkpoint_then_clear_typed_once(
    home: Home, clock: ManualClock, tmux_server: Callable[..., Pane]
) -> None:
    pane = tmux_server()
    agent = _agent_in(home, clock, pane)
    assert agent.state.read().turn == "idle"  # a new session waits at its prompt

    report, verdict = _pass(home, clock)
    assert verdict.verdict == "alive" and verdict.action == "refresh_sent", verdict.as_dict()
    assert verdict.refresh["action"] == "sent"
    assert (verdict.refresh["pane"], verdict.refresh["cli"], verdict.refresh["command"]) == (
        pane.id,
        "claude-code",
        "/clear",
    )
    assert report.refreshed == [verdict] and report.as_dict()["refreshed"] == ["zero"]
    assert _wait_typed(pane) == ["/clear"]
    # Seed 003: a recovery checkpoint, the forced refresh, then the keystrokes (logged).
    [checkpoint] = agent.checkpoints.entries("recovery")
    assert verdict.refresh["checkpoint"] == checkpoint.name
    events = _events(agent)
    assert events.index("forced_refresh") < events.index("refresh_typed")
    state = agent.state.read()
    request = state.refresh_requested
    assert request is not None and request["checkpoint"] == checkpoint.name and request["pane"] == pane.id
    # The next pass does not type it again while the new session has not come...
    clock.advance(60)
    _report, again = _pass(home, clock)
    assert again.refresh["action"] == "waiting" and "was typed at" in again.refresh["detail"]
    time.sleep(0.5)
    assert pane.typed() == ["/clear"]
    # ...and a new session (the CLI's SessionStart, source clear) answers the request.
    agent.state.start_session(
        "sess-2", source="clear", process={"pid": state.pid, "start_time": state.pid_start_time, "host": state.host}
    )
    assert agent.state.read().refresh_requested is None
    _report, after = _pass(home, clock)
    assert after.refresh is None and after.action is None


def test_mid_turn_nothing_is_typed_until_the_turn_ends(
    home: Home, clock: ManualClock, tmux_server: Callable[..., Pane]
) -> None:
    pane = tmux_server()
    agent = _agent_in(home, clock, pane)
    agent.state.heartbeat(session_id="sess-1", tool=None, turn="busy")  # the user-prompt hook
    _report, verdict = _pass(home, clock)
    assert verdict.refresh["action"] == "waiting" and verdict.refresh["detail"] == "mid-turn"
    assert verdict.action is None
    assert agent.checkpoints.entries("recovery") == []
    agent.state.heartbeat(session_id="sess-1", tool="Bash")  # a tool call: still busy
    assert agent.state.read().turn == "busy"
    assert _pass(home, clock)[1].refresh["detail"] == "mid-turn"
    time.sleep(0.5)
    assert pane.typed() == []
    agent.state.heartbeat(session_id="sess-1", tool=None, turn="idle")  # the Stop hook
    assert _pass(home, clock)[1].refresh["action"] == "sent"
    assert _wait_typed(pane) == ["/clear"]


def test_not_opted_in_dry_run_and_unknown_turn_type_nothing(
    home: Home, clock: ManualClock, tmux_server: Callable[..., Pane]
) -> None:
    pane = tmux_server()
    agent = _agent_in(home, clock, pane)
    _report, verdict = _pass(home, clock, tmux_refresh_agents="")
    assert verdict.refresh is None and verdict.action is None
    _report, verdict = _pass(home, clock, tmux_refresh_agents="someone-else")
    assert verdict.refresh is None
    _report, verdict = _pass(home, clock, act=False, tmux_refresh_agents="*")
    assert verdict.refresh["action"] == "would_send" and verdict.action is None

    def forget_turn(state: Any) -> None:
        state.turn = None  # hooks installed before the user-prompt hook existed

    agent.state.change(forget_turn)
    _report, verdict = _pass(home, clock)
    assert verdict.refresh["action"] == "waiting" and "unknown" in verdict.refresh["detail"]
    time.sleep(0.5)
    assert pane.typed() == [] and agent.checkpoints.entries("recovery") == []


@pytest.mark.parametrize(
    ("mode", "why"), [("busy", "busy ('esc to interrupt')"), ("draft", "no empty Claude Code prompt")]
)
def test_the_screen_is_an_extra_guard(
    home: Home, clock: ManualClock, tmux_server: Callable[..., Pane], mode: str, why: str
) -> None:
    pane = tmux_server(mode)
    _agent_in(home, clock, pane)
    _report, verdict = _pass(home, clock)
    assert verdict.refresh["action"] == "waiting" and why in verdict.refresh["detail"], verdict.refresh
    time.sleep(0.5)
    assert pane.typed() == []


def test_copy_mode_waits(home: Home, clock: ManualClock, tmux_server: Callable[..., Pane]) -> None:
    pane = tmux_server()
    _agent_in(home, clock, pane)
    subprocess.run(["tmux", "-S", pane.socket, "copy-mode", "-t", pane.id], check=True)
    _report, verdict = _pass(home, clock)
    assert verdict.refresh["action"] == "waiting" and "copy mode" in verdict.refresh["detail"]
    subprocess.run(["tmux", "-S", pane.socket, "send-keys", "-t", pane.id, "-X", "cancel"], check=True)
    assert _pass(home, clock)[1].refresh["action"] == "sent"
    assert _wait_typed(pane) == ["/clear"]


def test_the_pane_is_the_one_holding_the_agent_not_only_the_recorded_one(
    home: Home, clock: ManualClock, tmux_server: Callable[..., Pane]
) -> None:
    decoy = tmux_server()
    pane = tmux_server()
    _agent_in(home, clock, pane, recorded_pane=decoy.id)  # a stale pane id: the process decides
    _report, verdict = _pass(home, clock)
    assert verdict.refresh["action"] == "sent" and verdict.refresh["pane"] == pane.id
    assert _wait_typed(pane) == ["/clear"] and decoy.typed() == []


def test_a_process_in_no_pane_is_unreachable(home: Home, clock: ManualClock, tmux_server: Callable[..., Pane]) -> None:
    pane = tmux_server()
    agent = Agent.open("zero", home=home, clock=clock)
    me = identity_of(os.getpid())
    assert me is not None
    process = {
        "pid": me.pid,
        "start_time": me.start_time,
        "host": me.host,
        "tmux": {"pane": pane.id, "socket": pane.socket},
    }
    agent.state.start_session("sess-1", process=process)
    clock.advance(121 * 60)
    _report, verdict = _pass(home, clock)
    assert (
        verdict.refresh["action"] == "unreachable"
        and f"no tmux pane holds agent process {me.pid}" in verdict.refresh["detail"]
    )


def test_a_typed_request_without_a_new_session_is_typed_again_later(
    home: Home, clock: ManualClock, tmux_server: Callable[..., Pane]
) -> None:
    pane = tmux_server()
    _agent_in(home, clock, pane)
    assert _pass(home, clock)[1].refresh["action"] == "sent"
    assert _wait_typed(pane) == ["/clear"]
    clock.advance(RETYPE_AFTER_MS / 1000 + 1)
    assert _pass(home, clock)[1].refresh["action"] == "sent"
    assert _wait_typed(pane, 2) == ["/clear", "/clear"]


def test_phx_watchdog_tmux_json_and_exit_code(
    home: Home,
    clock: ManualClock,
    tmux_server: Callable[..., Pane],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    pane = tmux_server()
    agent = _agent_in(home, clock, pane)

    def backdate(state: Any) -> None:  # phx reads the real clock: the work began 121 minutes ago for it
        state.work_started_ms = int(time.time() * 1000) - 121 * MINUTES

    agent.state.change(backdate)
    monkeypatch.setenv("PHOENIX_TMUX_REFRESH_AGENTS", "zero")
    assert cli(["watchdog", "--once", "--json", "--home", home.root, "--tmux-socket", pane.socket]) == 5
    report = json.loads(capsys.readouterr().out)
    assert report["refreshed"] == ["zero"]
    [row] = report["agents"]
    assert row["action"] == "refresh_sent" and row["refresh"]["command"] == "/clear"
    assert _wait_typed(pane) == ["/clear"]
    # The table, on the next pass: typed already, waiting for the new session (nothing to act on).
    assert cli(["watchdog", "--once", "--home", home.root, "--tmux-socket", pane.socket]) == 0
    shown = " ".join(capsys.readouterr().out.split())
    assert "refresh (120 minutes of continuous work): waiting" in shown and "claude-code(" in shown


def test_a_refresh_the_heartbeat_claimed_mid_turn_is_typed_once_the_turn_ends(
    home: Home, clock: ManualClock, tmux_server: Callable[..., Pane]
) -> None:
    pane = tmux_server()
    agent = _agent_in(home, clock, pane)
    agent.state.heartbeat(session_id="sess-1", tool=None, turn="busy")  # a prompt
    due: list[str] = []
    agent.state.heartbeat(session_id="sess-1", tool="Bash", due=due)  # 121 minutes in: the hook claims it
    assert due == ["recovery"]
    claimed = agent.checkpoints.take_claimed(due, clock.now_ms())  # what the hook's detached child does
    request = agent.state.read().refresh_requested
    assert request is not None and request["checkpoint"] == claimed[0].name
    assert _pass(home, clock)[1].refresh["detail"] == "mid-turn"
    clock.advance(300)
    agent.state.heartbeat(session_id="sess-1", tool=None, turn="idle")  # Stop
    _report, verdict = _pass(home, clock)
    assert verdict.refresh["action"] == "sent" and verdict.refresh["reason"] == "120 minutes of continuous work"
    # A second recovery checkpoint, of where the agent is now; the request it answers stays the same.
    assert len(agent.checkpoints.entries("recovery")) == 2 and verdict.refresh["checkpoint"] != claimed[0].name
    assert [e for e in _events(agent) if e == "forced_refresh"] == ["forced_refresh"]
    request = agent.state.read().refresh_requested
    assert request is not None and request["checkpoint"] == claimed[0].name and request["pane"] == pane.id
    assert _wait_typed(pane) == ["/clear"]


def test_enter_again_when_the_command_stays_in_the_input_line(
    home: Home, clock: ManualClock, tmux_server: Callable[..., Pane]
) -> None:
    # A loaded machine: the TUI read the command and the Enter together and kept the command;
    # the prompt does not come back empty until Enter is pressed again.
    pane = tmux_server("slow")
    _agent_in(home, clock, pane)
    assert _pass(home, clock)[1].refresh["action"] == "sent"
    assert _wait_typed(pane, 2) == ["/clear", ""]
    time.sleep(0.5)
    assert pane.typed() == ["/clear", ""]  # once the prompt is back, no more Enter
