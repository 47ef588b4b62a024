"""Lanes, unit by unit: who holds a lane, how a lane is judged, retiring (docs/lanes.md)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from phoenix_protocol.agent._lanes import lane_ids, open_lane, retire_lane, retired_lanes
from phoenix_protocol.agent._state import AgentState
from phoenix_protocol.core._clock import ManualClock
from phoenix_protocol.core._config import Config
from phoenix_protocol.core._errors import InvalidIdError
from phoenix_protocol.core._home import Home
from phoenix_protocol.core._process import hostname, identity_of
from phoenix_protocol.services._agent import Agent
from phoenix_protocol.services._lanes import holder_of, judge_lane, settle_lanes, start_placed

NOW = 1_767_225_600_000
SESSIONS = {
    "live": "11111111-7a2d-4e95-8c41-2f9d6a0b7e53",
    "gone": "22222222-7a2d-4e95-8c41-2f9d6a0b7e53",
    "broken": "33333333-7a2d-4e95-8c41-2f9d6a0b7e53",
    "new": "44444444-7a2d-4e95-8c41-2f9d6a0b7e53",
}


@pytest.fixture(scope="module")
def dead() -> dict[str, object]:
    """The identity of a process that ran and is gone (SIGKILLed)."""
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    ident = identity_of(proc.pid)
    proc.kill()
    proc.wait()
    assert ident is not None
    return {"pid": ident.pid, "start_time": ident.start_time, "host": hostname()}


def _me() -> dict[str, object]:
    ident = identity_of(os.getpid())
    assert ident is not None
    return {"pid": ident.pid, "start_time": ident.start_time, "host": hostname()}


def _state(process: dict[str, object] | None, **fields: object) -> AgentState:
    state = AgentState(session_id="s-other", last_active_ms=NOW, **fields)
    if process is not None:
        state.pid, state.pid_start_time, state.host = process["pid"], process["start_time"], process["host"]  # type: ignore[assignment]
    return state


@pytest.mark.parametrize(
    ("status", "who", "event", "alive", "quiet", "verdict"),
    [
        ("working", "hook", "session_start", True, False, "live"),
        ("working", "hook", "session_start", False, False, "dead"),
        ("error", "watchdog", "stalled", False, False, "dead"),
        ("error", "model", "task_error", True, False, "live"),  # the model said its task failed: alive
        ("working", "model", "task_started", None, False, "live"),  # no process: judged by heartbeat
        ("working", "model", "task_started", None, True, "dead"),
        ("error", "watchdog", "stalled", None, False, "dead"),
        ("idle", "hook", "session_end", True, False, "ended"),  # /clear: the process goes on
        ("idle", "model", "task_done", True, False, "live"),
        ("idle", "model", "task_done", False, False, "ended"),
        ("idle", "model", "task_done", None, True, "ended"),
    ],
)
def test_judge_lane(
    status: str, who: str, event: str, alive: bool | None, quiet: bool, verdict: str, dead: dict[str, object]
) -> None:
    process = {True: _me(), False: dead, None: None}[alive]
    state = _state(process, status=status, updated_by=who, status_event=event)
    config = Config()
    now = NOW + (int(config.watchdog_remote_grace * 1000) if quiet else 1000)
    assert judge_lane(state, config, now)[0] == verdict


def test_holder_of(dead: dict[str, object]) -> None:
    other = {"pid": os.getppid(), "start_time": 0.0, "host": hostname()}
    held = _state(_me(), status="working", updated_by="hook", status_event="session_start")
    assert holder_of(held, "s-new", other, tolerance=1.0)
    assert not holder_of(held, "s-other", other, tolerance=1.0)  # the same session (a resume)
    assert not holder_of(held, "s-new", _me(), tolerance=1.0)  # the same process (/clear)
    assert not holder_of(_state(dead, status="working"), "s-new", other, tolerance=1.0)
    assert not holder_of(_state(None, status="working"), "s-new", other, tolerance=1.0)
    ended = _state(_me(), status="idle", updated_by="hook", status_event="session_end")
    assert not holder_of(ended, "s-new", other, tolerance=1.0)
    done = _state(_me(), status="idle", updated_by="model", status_event="task_done")
    assert holder_of(done, "s-new", other, tolerance=1.0)  # a live session that finished its task
    moved = _state({**_me(), "start_time": 1.0}, status="working")  # its pid now another process's
    assert not holder_of(moved, "s-new", other, tolerance=1.0)


def test_retire_lane_is_a_claim_of_one(home: Home) -> None:
    agent_dir = home.ensure_agent_dir("a")
    open_lane(agent_dir, "s-1")
    Path(agent_dir, "lanes", "s-1", "state.json").write_text("{}")
    Path(agent_dir, "lanes", "s-1", "state.json.lock").write_text("")
    first = retire_lane(agent_dir, "s-1", NOW)
    assert first is not None and retire_lane(agent_dir, "s-1", NOW) is None
    assert lane_ids(agent_dir) == [] and retired_lanes(agent_dir) == [first]
    assert sorted(os.listdir(first)) == ["state.json"]  # lock files go: a kept descriptor reopens
    open_lane(agent_dir, "s-1")  # the same session, a lane again (a resume beside a live session)
    second = retire_lane(agent_dir, "s-1", NOW)
    assert second is not None and second != first and retired_lanes(agent_dir) == [first, second]
    with pytest.raises(InvalidIdError):
        open_lane(agent_dir, "../escape")


def test_settle_leaves_live_lanes_and_unreadable_ones(home: Home, dead: dict[str, object]) -> None:
    clock = ManualClock(NOW)
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    try:
        ident = identity_of(sleeper.pid)
        assert ident is not None
        alive = {"pid": sleeper.pid, "start_time": ident.start_time, "host": hostname()}
        start_placed(Agent.open("a", home=home, clock=clock), "primary-session", process=_me())
        lanes = {}
        for name, process in (("live", alive), ("gone", dead), ("broken", alive), ("new", alive)):
            sid = SESSIONS[name]
            agent = Agent.open("a", home=home, clock=clock)
            assert start_placed(agent, sid, process=process).lane == sid
            lanes[name] = (sid, agent)
        Path(lanes["broken"][1].state.path).write_text("{not json")
        newcomer = lanes["new"][1]
        recovered = settle_lanes(newcomer, lanes["new"][0])
        assert [r.lane for r in recovered] == [lanes["gone"][0]]
        assert recovered[0].state.session_id == lanes["gone"][0] and "is gone" in recovered[0].reason
        assert sorted(lane_ids(newcomer.dir)) == sorted(lanes[n][0] for n in ("live", "broken", "new"))
        assert settle_lanes(newcomer, lanes["new"][0]) == []  # once
    finally:
        sleeper.kill()
        sleeper.wait()


def test_a_lane_that_cannot_be_moved_is_reported_and_left(home: Home, dead: dict[str, object]) -> None:
    clock = ManualClock(NOW)
    start_placed(Agent.open("a", home=home, clock=clock), "primary-session", process=_me())
    gone = Agent.open("a", home=home, clock=clock)
    assert start_placed(gone, SESSIONS["gone"], process=dead).lane == SESSIONS["gone"]
    Path(gone.dir, "lanes", ".retired").write_text("in the way")  # no folder can be made there
    newcomer = Agent.open("a", home=home, clock=clock)
    assert start_placed(newcomer, SESSIONS["new"], process=_me() | {"pid": os.getppid()}).lane == SESSIONS["new"]
    assert settle_lanes(newcomer, SESSIONS["new"]) == []
    assert lane_ids(newcomer.dir) == [SESSIONS["gone"], SESSIONS["new"]]  # left for the next start
    events, _ = Agent.open("a", home=home).ops.read()
    [problem] = [e for e in events if e["event"] == "lanes_not_settled"]
    assert problem["meta"]["lane"] == SESSIONS["gone"] and "is not a directory" in problem["meta"]["error"]
