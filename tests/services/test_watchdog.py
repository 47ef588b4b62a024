"""The watchdog against real processes: dead, reused PIDs, long thinkers, remote hosts, tmux."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from phoenix_protocol.cli._main import cli
from phoenix_protocol.core._clock import ManualClock
from phoenix_protocol.core._errors import StatusRefusedError
from phoenix_protocol.core._home import Home
from phoenix_protocol.core._process import hostname, identity_of
from phoenix_protocol.services._agent import Agent
from phoenix_protocol.services._watchdog import run_pass


@pytest.fixture
def sleeper() -> Iterator[subprocess.Popen[bytes]]:
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    yield proc
    if proc.poll() is None:
        proc.kill()
        proc.wait()


def _working(
    home: Home, clock: ManualClock, agent_id: str, pid: int, start_time: float, host: str | None = None
) -> Agent:
    agent = Agent.open(agent_id, home=home, clock=clock)
    agent.state.start_session(
        f"session-{agent_id}", process={"pid": pid, "start_time": start_time, "host": host or hostname()}
    )
    agent.state.set_status("working", f"task of {agent_id}", session_id=f"session-{agent_id}")
    return agent


def test_sigkilled_agent_is_marked_stalled_after_the_grace(
    home: Home, clock: ManualClock, sleeper: subprocess.Popen[bytes]
) -> None:
    ident = identity_of(sleeper.pid)
    assert ident is not None
    agent = _working(home, clock, "victim", sleeper.pid, ident.start_time)
    assert run_pass(home, clock=clock).verdicts[0].verdict == "alive"
    os.kill(sleeper.pid, signal.SIGKILL)
    sleeper.wait()
    clock.advance(10)
    report = run_pass(home, clock=clock)
    assert report.verdicts[0].verdict == "grace" and not report.stalled
    clock.advance(60)
    report = run_pass(home, clock=clock)
    [verdict] = report.verdicts
    assert (verdict.verdict, verdict.action) == ("stalled", "marked_stalled")
    state = agent.state.read()
    assert (state.status, state.status_event, state.updated_by) == ("error", "stalled", "watchdog")
    assert "is gone" in (state.error_message or "")
    assert [e.checkpoint_type for e in agent.checkpoints.entries()] == ["recovery"]
    events, _ = agent.ops.read()
    assert any(e["event"] == "stalled" and e["status"] == "error" for e in events)
    # Precedence: the dead session's late writes cannot contradict the watchdog...
    with pytest.raises(StatusRefusedError):
        agent.state.set_status("working", "still here", session_id="session-victim")
    # ...and a stalled agent is not marked twice.
    assert run_pass(home, clock=clock).verdicts[0].verdict == "error"
    # A new session takes over.
    _before, after = agent.state.start_session("session-2")
    assert after.status == "working"


def test_reused_pid_is_not_mistaken_for_the_agent(home: Home, clock: ManualClock) -> None:
    me = identity_of(os.getpid())
    assert me is not None
    _working(home, clock, "reused", os.getpid(), me.start_time - 3600)  # same PID, started an hour "earlier"
    clock.advance(120)
    [verdict] = run_pass(home, clock=clock).verdicts
    assert verdict.verdict == "stalled" and "PID was reused" in verdict.detail


def test_long_thinking_is_not_a_stall(home: Home, clock: ManualClock, sleeper: subprocess.Popen[bytes]) -> None:
    ident = identity_of(sleeper.pid)
    assert ident is not None
    agent = _working(home, clock, "thinker", sleeper.pid, ident.start_time)
    clock.advance(3 * 3600)
    [verdict] = run_pass(home, clock=clock).verdicts
    assert (verdict.verdict, verdict.action) == ("alive", None)
    assert agent.state.read().status == "working"


def test_remote_agents_are_judged_by_heartbeat_only(home: Home, clock: ManualClock) -> None:
    _working(home, clock, "faraway", 1, 1.0, host="some-other-host")  # PID 1 is alive here: must not matter
    clock.advance(600)
    [verdict] = run_pass(home, clock=clock).verdicts
    assert verdict.verdict == "remote" and verdict.action is None
    clock.advance(3600)
    [verdict] = run_pass(home, clock=clock).verdicts
    assert verdict.verdict == "stalled" and "no heartbeat" in verdict.detail


def test_idle_corrupt_and_dry_run(home: Home, clock: ManualClock) -> None:
    idle = Agent.open("resting", home=home, clock=clock)
    idle.state.set_status("idle", "done")
    broken = Agent.open("broken", home=home, clock=clock)
    broken.state.set_status("working", "x")
    Path(broken.state.path).write_text("{")
    gone = _working(home, clock, "gone", 999_999_999, 1.0)
    clock.advance(600)
    report = run_pass(home, clock=clock, act=False)
    verdicts = {v.agent_id: v.verdict for v in report.verdicts}
    assert verdicts == {"broken": "corrupt", "gone": "stalled", "resting": "idle"}
    assert Path(broken.state.path).read_text() == "{"
    assert gone.state.read().status == "working"  # dry run: nothing marked


def test_drift_of_a_live_agent_triggers_emergency_recovery(
    home: Home, clock: ManualClock, sleeper: subprocess.Popen[bytes]
) -> None:
    ident = identity_of(sleeper.pid)
    assert ident is not None
    agent = _working(home, clock, "looper", sleeper.pid, ident.start_time)
    for _ in range(5):
        clock.advance(20)
        agent.state.heartbeat(
            session_id="session-looper", tool="Bash", input_digest="same-command", ok=False, drift=None
        )
    # The heartbeat found it (drift=None: nobody to tell); the watchdog acts on it once.
    assert agent.state.read().drift is not None
    [verdict] = run_pass(home, clock=clock).verdicts
    assert verdict.verdict == "alive" and verdict.drift
    assert verdict.action is None  # the heartbeat already reported this drift: not twice


def test_watchdog_finds_drift_the_heartbeat_left(
    home: Home, clock: ManualClock, sleeper: subprocess.Popen[bytes]
) -> None:
    ident = identity_of(sleeper.pid)
    assert ident is not None
    agent = _working(home, clock, "busy", sleeper.pid, ident.start_time)
    agent.state.change(
        lambda s: setattr(s, "recent_actions", [[clock.now_ms(), "Bash", "same", False, None, False]] * 6)
    )
    [verdict] = run_pass(home, clock=clock).verdicts
    assert verdict.action == "emergency_recovery" and verdict.drift == "the same Bash call 6 times without progress"
    state = agent.state.read()
    assert state.drift is not None and state.refresh_requested is not None
    events, _ = agent.ops.read()
    assert any(e["event"] == "emergency_recovery" for e in events)
    assert run_pass(home, clock=clock).verdicts[0].action is None  # once per drift
    # Another signal in the same episode (another call repeated now): reported, no second recovery.
    agent.state.change(
        lambda s: setattr(
            s, "recent_actions", [*s.recent_actions, *[[clock.now_ms(), "Read", "x", False, None, False]] * 4]
        )
    )
    [verdict] = run_pass(home, clock=clock).verdicts
    assert verdict.action is None and verdict.drift == "the same Read call 4 times without progress"
    events, _ = agent.ops.read()
    detected = [e["meta"] for e in events if e["event"] == "drift_detected"]
    assert [d["episode_opened"] for d in detected] == [True, False]
    assert sum(1 for e in events if e["event"] == "emergency_recovery") == 1
    assert [e.checkpoint_type for e in agent.checkpoints.entries()] == ["recovery"]


def test_cli_once_json_and_exit_codes(home: Home, capsys: pytest.CaptureFixture[str]) -> None:
    Agent.open("ok", home=home).state.set_status("idle", "fine")
    assert cli(["watchdog", "--once", "--json", "--home", home.root]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["counts"] == {"idle": 1} and data["stalled"] == []
    agent = Agent.open("dead", home=home)
    agent.state.start_session("s", process={"pid": 999_999_999, "start_time": 1.0, "host": hostname()})
    assert cli(["watchdog", "--once", "--json", "--grace", "0", "--home", home.root]) == 5
    data = json.loads(capsys.readouterr().out)
    assert data["stalled"] == ["dead"]


def test_interval_loop_stops_cleanly_on_sigterm(home: Home) -> None:
    Agent.open("ok", home=home).state.set_status("idle", "fine")
    phx = str(Path(sys.executable).parent / "phx")
    proc = subprocess.Popen(
        [phx, "watchdog", "--interval", "1", "--json", "--home", home.root], stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout is not None
    first = json.loads(proc.stdout.readline())
    assert first["ok"] is True
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=10) == 0
    proc.stdout.close()


def test_loop_runs_a_pass_every_watchdog_interval(home: Home) -> None:
    Agent.open("ok", home=home).state.set_status("idle", "fine")
    phx = str(Path(sys.executable).parent / "phx")
    env = {**os.environ, "PHOENIX_WATCHDOG_INTERVAL": "1"}
    proc = subprocess.Popen(
        [phx, "watchdog", "--loop", "--json", "--home", home.root], stdout=subprocess.PIPE, text=True, env=env
    )
    assert proc.stdout is not None
    try:
        # Two passes within the test's timeout: the setting (1 s), not the default (60 s), paces them.
        started = time.monotonic()
        passes = [json.loads(proc.stdout.readline()) for _ in range(2)]
        assert all(p["ok"] is True for p in passes)
        assert time.monotonic() - started < 30  # the default would take 60 s
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=10) == 0
        proc.stdout.close()


@pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed")
def test_tmux_mode_finds_agent_processes_in_panes(home: Home, tmp_path: Path, clock: ManualClock) -> None:
    socket = str(tmp_path / "tmux.sock")
    fake_agent = tmp_path / "claude"
    fake_agent.write_text(f"#!{sys.executable}\nimport time\ntime.sleep(600)\n")
    fake_agent.chmod(0o755)
    env = {**os.environ, "TMUX": ""}
    subprocess.run(["tmux", "-S", socket, "new-session", "-d", "-s", "withagent", str(fake_agent)], check=True, env=env)
    subprocess.run(["tmux", "-S", socket, "new-session", "-d", "-s", "lonely", "sleep 600"], check=True, env=env)
    try:
        lonely = Agent.open("lonely", home=home, clock=clock)
        lonely.state.set_status("working", "x")  # no process recorded: judged by tmux
        deadline = time.monotonic() + 10
        report = run_pass(home, tmux=True, tmux_socket=socket, clock=clock)
        while time.monotonic() < deadline and not any(p.agents for p in report.tmux or []):
            time.sleep(0.1)
            report = run_pass(home, tmux=True, tmux_socket=socket, clock=clock)
        panes = {p.session: p for p in report.tmux or []}
        assert [a["name"] for a in panes["withagent"].agents] == ["claude"]
        assert panes["lonely"].agents == []
        verdict = next(v for v in report.verdicts if v.agent_id == "lonely")
        assert verdict.verdict == "grace" and "no agent process" in verdict.detail  # watchdog_grace first
        clock.advance(61)
        report = run_pass(home, tmux=True, tmux_socket=socket, clock=clock)
        verdict = next(v for v in report.verdicts if v.agent_id == "lonely")
        assert verdict.verdict == "stalled" and "no agent process" in verdict.detail
        assert verdict.pane == "lonely:0.0"
    finally:
        subprocess.run(["tmux", "-S", socket, "kill-server"], check=False)


def test_watchdog_checkpoints_a_zombie_team_every_30_seconds(home: Home, clock: ManualClock) -> None:
    from phoenix_protocol.store._teams import Team

    team = Team.create(home, "zombies", lead="lead", clock=clock)
    team.join("alice")
    clock.advance(6 * 60)  # the lead has been silent for 6 minutes
    team.heartbeat("alice")
    run_pass(home, clock=clock)
    first = team.latest_checkpoint(kind="full")
    assert first is not None and "ZOMBIE" in first["reason"]
    clock.advance(10)
    run_pass(home, clock=clock)
    assert team.latest_checkpoint(kind="full")["seq"] == first["seq"]  # type: ignore[index]
    clock.advance(30)
    run_pass(home, clock=clock)
    assert team.latest_checkpoint(kind="full")["seq"] > first["seq"]  # type: ignore[index]
