"""Stopped and hung agents (issue 36, found 4), with real processes and injected time: a SIGSTOPped
process is ``stopped``, a process that does nothing while its heartbeat goes stale is ``hung``, a
busy one is neither; both are told apart from a dead agent, leave the state alone, log one ops
event each, and make ``phx watchdog`` exit 5."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest
from test_notify import Receiver  # the webhook receiver of the notification tests (this folder)

from phoenix_protocol.cli._main import cli
from phoenix_protocol.core import _background
from phoenix_protocol.core._clock import ManualClock
from phoenix_protocol.core._home import Home
from phoenix_protocol.core._process import hostname, identity_of
from phoenix_protocol.services._agent import Agent
from phoenix_protocol.services._watchdog import HANG_SAMPLE_MS, run_pass


def _start(code: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-c", code])


@pytest.fixture
def sleeper() -> Iterator[subprocess.Popen[bytes]]:
    proc = _start("import time; time.sleep(600)")
    yield proc
    if proc.poll() is None:
        proc.send_signal(signal.SIGCONT)
        proc.kill()
        proc.wait()


@pytest.fixture
def spinner() -> Iterator[subprocess.Popen[bytes]]:
    proc = _start("while True: pass")
    yield proc
    proc.kill()
    proc.wait()


def _working(home: Home, clock: ManualClock, agent_id: str, pid: int, *, turn: str = "busy") -> Agent:
    """A working agent whose recorded process is ``pid``, mid-turn (a prompt was submitted) unless
    ``turn`` says it waits at its prompt."""
    ident = identity_of(pid)
    assert ident is not None
    agent = Agent.open(agent_id, home=home, clock=clock)
    session = f"session-{agent_id}"
    agent.state.start_session(session, process={"pid": pid, "start_time": ident.start_time, "host": hostname()})
    agent.state.set_status("working", f"task of {agent_id}", session_id=session)
    agent.state.heartbeat(session_id=session, tool=None, turn=turn)
    assert agent.state.read().turn == turn
    return agent


def _events(agent: Agent, name: str) -> list[dict[str, object]]:
    return [e for e in agent.ops.read()[0] if e["event"] == name]


def _wait_status(pid: int, wanted: str) -> None:
    deadline = time.monotonic() + 10
    while psutil.Process(pid).status() != wanted:
        assert time.monotonic() < deadline, f"process {pid} never became {wanted}"
        time.sleep(0.01)


def test_a_stopped_agent_is_reported_apart_from_a_dead_one(
    home: Home, clock: ManualClock, sleeper: subprocess.Popen[bytes]
) -> None:
    agent = _working(home, clock, "paused", sleeper.pid)
    assert run_pass(home, clock=clock).verdicts[0].verdict == "alive"
    os.kill(sleeper.pid, signal.SIGSTOP)
    _wait_status(sleeper.pid, psutil.STATUS_STOPPED)
    report = run_pass(home, clock=clock)
    [verdict] = report.verdicts
    assert verdict.verdict == "stopped" and verdict.action == "reported", verdict.detail
    assert f"kill -CONT {sleeper.pid}" in verdict.detail
    assert report.stopped == [verdict] and not report.stalled and report.needs_attention
    state = agent.state.read()
    assert state.status == "working" and state.updated_by != "watchdog"  # left alone: it may be resumed
    clock.advance(3600)  # however long: a stopped agent is not marked dead
    again = run_pass(home, clock=clock).verdicts[0]
    assert again.verdict == "stopped" and again.action is None  # reported once
    assert len(_events(agent, "agent_stopped")) == 1
    os.kill(sleeper.pid, signal.SIGCONT)
    _wait_status(sleeper.pid, psutil.STATUS_SLEEPING)
    assert run_pass(home, clock=clock).verdicts[0].verdict == "alive"
    assert "flag" not in agent.state.read().extra["watchdog"]
    # Dead is still dead: a SIGKILLed agent (its last heartbeat an hour ago) is stalled, never "stopped".
    sleeper.kill()
    sleeper.wait()
    dead = run_pass(home, clock=clock).verdicts[0]
    assert dead.verdict == "stalled" and dead.action == "marked_stalled"


def test_a_process_doing_nothing_with_a_stale_heartbeat_is_hung(
    home: Home, clock: ManualClock, sleeper: subprocess.Popen[bytes]
) -> None:
    agent = _working(home, clock, "stuck", sleeper.pid)
    clock.advance(29 * 60)  # within watchdog_hang_minutes (30): thinking, nothing measured
    assert run_pass(home, clock=clock).verdicts[0].verdict == "alive"
    assert "watchdog" not in agent.state.read().extra
    clock.advance(2 * 60)
    first = run_pass(home, clock=clock).verdicts[0]
    assert first.verdict == "alive"  # the first sample: nothing to compare yet
    assert agent.state.read().extra["watchdog"]["cpu"]["pid"] == sleeper.pid
    clock.advance(HANG_SAMPLE_MS / 1000 - 1)
    assert run_pass(home, clock=clock).verdicts[0].verdict == "alive"  # samples too close together
    clock.advance(1)
    report = run_pass(home, clock=clock)
    [verdict] = report.verdicts
    assert verdict.verdict == "hung" and verdict.action == "reported", verdict.detail
    assert "used no CPU" in verdict.detail and report.hung == [verdict]
    assert agent.state.read().status == "working"
    assert len(_events(agent, "agent_hung")) == 1
    # A heartbeat: not hung any more.
    agent.state.heartbeat(session_id="session-stuck", tool="Bash")
    assert run_pass(home, clock=clock).verdicts[0].verdict == "alive"


def test_an_agent_waiting_at_its_prompt_is_never_hung(
    home: Home, clock: ManualClock, sleeper: subprocess.Popen[bytes]
) -> None:
    """Its Stop hook ended the turn: no heartbeat and no CPU for hours is what waiting looks like."""
    agent = _working(home, clock, "waiting", sleeper.pid, turn="idle")
    for _ in range(4):
        clock.advance(3600)
        assert run_pass(home, clock=clock).verdicts[0].verdict == "alive"
    assert "watchdog" not in agent.state.read().extra  # nothing measured, nothing written


def test_a_busy_process_with_a_stale_heartbeat_is_not_hung(
    home: Home, clock: ManualClock, spinner: subprocess.Popen[bytes]
) -> None:
    _working(home, clock, "busy", spinner.pid)
    clock.advance(31 * 60)
    assert run_pass(home, clock=clock).verdicts[0].verdict == "alive"
    used = sum(psutil.Process(spinner.pid).cpu_times()[:2])
    deadline = time.monotonic() + 10
    while sum(psutil.Process(spinner.pid).cpu_times()[:2]) < used + 0.2:  # real CPU, not time, is awaited
        assert time.monotonic() < deadline
        time.sleep(0.02)
    clock.advance(HANG_SAMPLE_MS / 1000)
    assert run_pass(home, clock=clock).verdicts[0].verdict == "alive"


def test_hang_check_off_and_cli_exit_code(
    home: Home, clock: ManualClock, sleeper: subprocess.Popen[bytes], capsys: pytest.CaptureFixture[str]
) -> None:
    _working(home, clock, "paused", sleeper.pid)
    os.kill(sleeper.pid, signal.SIGSTOP)
    _wait_status(sleeper.pid, psutil.STATUS_STOPPED)
    assert cli(["watchdog", "--once", "--json", "--dry-run", "--home", home.root]) == 5
    out = json.loads(capsys.readouterr().out)
    assert out["stopped"] == ["paused"] and out["hung"] == [] and out["stalled"] == []
    assert out["agents"][0]["verdict"] == "stopped" and out["agents"][0]["action"] is None
    assert cli(["watchdog", "--once", "--home", home.root]) == 5
    assert "stopped" in capsys.readouterr().out
    # watchdog_hang_minutes 0: never hung.
    os.kill(sleeper.pid, signal.SIGCONT)
    agent = Agent.open("paused", home=home, clock=clock)
    config = agent.config.replace({"watchdog_hang_minutes": 0})
    for _ in range(3):
        clock.advance(3600)
        assert run_pass(home, clock=clock, config=config).verdicts[0].verdict == "alive"


def test_the_person_is_told_once_when_an_agent_stops_or_hangs(
    home: Home, clock: ManualClock, sleeper: subprocess.Popen[bytes]
) -> None:
    """Issue 36's notifications, for the two new verdicts: a webhook gets ``stopped`` then ``hung``
    (each once, however many passes see it)."""
    receiver = Receiver()
    try:
        Path(home.root).mkdir(parents=True, exist_ok=True)
        (Path(home.root) / "phoenix.toml").write_text(f'notify_desktop = false\nnotify_webhook = "{receiver.url}"\n')
        _working(home, clock, "worker", sleeper.pid)
        os.kill(sleeper.pid, signal.SIGSTOP)
        _wait_status(sleeper.pid, psutil.STATUS_STOPPED)
        for _ in range(3):
            assert run_pass(home, clock=clock).verdicts[0].verdict == "stopped"
        os.kill(sleeper.pid, signal.SIGCONT)
        _wait_status(sleeper.pid, psutil.STATUS_SLEEPING)
        clock.advance(31 * 60)
        run_pass(home, clock=clock)  # the CPU sample
        for _ in range(3):
            clock.advance(HANG_SAMPLE_MS / 1000)
            assert run_pass(home, clock=clock).verdicts[0].verdict == "hung"
        _background.wait()
        deadline = time.monotonic() + 10
        while len(receiver.requests) < 2 and time.monotonic() < deadline:
            time.sleep(0.02)
        kinds = [r["body"]["kind"] for r in receiver.requests]
        assert kinds == ["stopped", "hung"], kinds
        assert "kill -CONT" in receiver.requests[0]["body"]["message"]
        assert "used no CPU" in receiver.requests[1]["body"]["message"]
    finally:
        receiver.close()
