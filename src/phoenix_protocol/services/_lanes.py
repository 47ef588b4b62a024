"""Sessions side by side (docs/lanes.md): where a starting session keeps its state, and the
recovery of a lane whose session died, by one session, once.

``start_placed``: the SessionStart of a session. Under the primary lane's lock it looks at who
holds the primary lane (``state.json``): nobody, an ended session, a dead one, this very session
or this very agent process (``/clear``), and the session starts there as it always did; another
live session (its recorded process alive by the watchdog's rules: pid *and* start time, on this
host), and the session gets a lane of its own (``agent._lanes``), where its state starts fresh.

``settle_lanes``: then every other lane of the agent is judged (``judge_lane``). A live one is
left alone; one whose session ended is retired (its folder moved to ``lanes/.retired/``); one
whose session died while working (or was marked stalled by the watchdog) is retired *and*
handed to the starting session for recovery. The retirement is a rename, which of the sessions
starting together exactly one wins: that one recovers it, the others never hear of it.

Lanes take no checkpoints: the agent's checkpoints are the primary lane's line (the next session
restores from the newest), and one taken of a side session's state would hand its task and notes
to whichever session restores next. A lane's own files (state, ops log, brief) are its record.
"""

from __future__ import annotations

import contextlib
import os
from typing import TYPE_CHECKING, Any

from phoenix_protocol.agent._lanes import PRIMARY, lane_ids, open_lane, retire_lane
from phoenix_protocol.core._errors import (
    CorruptStateError,
    LockTimeoutError,
    PhoenixError,
    SchemaVersionError,
    StorageError,
    UnsafeFileError,
)

if TYPE_CHECKING:
    from phoenix_protocol.agent._state import AgentState
    from phoenix_protocol.core._config import Config
    from phoenix_protocol.services._agent import Agent

__all__ = [
    "LANE_VERDICTS",
    "PRIMARY",
    "Placement",
    "RecoveredLane",
    "holder_of",
    "judge_lane",
    "lane_views",
    "primary_of",
    "settle_lanes",
    "start_placed",
]

LANE_VERDICTS = ("live", "dead", "ended")


class Placement:
    """Where a starting session went: ``lane`` (``None``: the primary lane), the state ``before``
    and ``after`` its start, and ``beside``: the primary lane's state when another live session
    holds it (the reason for the lane), else ``None``."""

    def __init__(self, lane: str | None, before: AgentState, after: AgentState, beside: AgentState | None) -> None:
        self.lane = lane
        self.before = before
        self.after = after
        self.beside = beside


class RecoveredLane:
    """A lane whose session died, claimed (retired) by the starting session to recover it: its
    ``lane`` id, its ``state`` as the dead session left it, ``view`` (an ``Agent`` reading its
    retired files: ``render_brief`` renders its brief), ``retired_to`` (its folder now) and
    ``reason`` (why it is judged dead)."""

    def __init__(self, lane: str, state: AgentState, view: Agent, retired_to: str, reason: str) -> None:
        self.lane = lane
        self.state = state
        self.view = view
        self.retired_to = retired_to
        self.reason = reason


def primary_of(agent: Agent) -> Agent:
    """``agent`` when it reads the primary lane, else a new ``Agent`` that does."""
    if agent.lane is None:
        return agent
    from phoenix_protocol.services._agent import Agent

    return Agent(agent.id, agent.home, config=agent.config, clock=agent.clock)


def lane_views(agent: Agent) -> list[Agent]:
    """A view (``Agent.in_lane``) of each lane of ``agent`` beside its primary lane, by lane id."""
    return [agent.in_lane(lane) for lane in lane_ids(agent.dir)]


def holder_of(state: AgentState, session_id: str, process: dict[str, Any] | None, *, tolerance: float) -> bool:
    """Whether another live session holds the lane whose state is ``state``, for session
    ``session_id`` of agent process ``process`` (``{"pid", "start_time", "host"}``) starting:
    a different session, not ended (SessionEnd) nor judged by the watchdog, whose recorded process
    is running (pid and start time, on this host: ``liveness``) and is not ``process`` itself (a
    ``/clear`` starts a new session in the same process)."""
    if not state.session_id or state.session_id == session_id or state.is_verdict or state.pid is None:
        return False
    if process is not None and process.get("pid") == state.pid and process.get("host") == state.host:
        return False
    from phoenix_protocol.core._process import liveness

    return liveness(state.pid, state.pid_start_time, state.host, tolerance=tolerance) is True


def start_placed(
    agent: Agent,
    session_id: str,
    *,
    source: str = "startup",
    process: dict[str, Any] | None = None,
    lock_timeout: float | None = None,
    client: str | None = None,
) -> Placement:
    """Start session ``session_id`` (``StateStore.start_session``) in the lane it belongs to (see
    the module docstring). When ``agent`` already reads a lane (the session has one: a resume, a
    compaction) it starts there. Otherwise the primary lane is looked at and started in under its
    lock, so that of two sessions starting together one takes it and the other gets a lane; a
    new lane is logged in the primary lane's ops log (``lane_opened``), and ``agent`` becomes a
    view of it (``Agent.use_lane``). ``client``: the agent CLI whose hook starts it (recorded)."""
    from phoenix_protocol.core._ids import lane_id_of, validate_session_id

    validate_session_id(session_id)
    if agent.lane is not None:
        before, after = agent.state.start_session(
            session_id, source=source, process=process, lock_timeout=lock_timeout, client=client
        )
        return Placement(agent.lane, before, after, None)
    import psutil  # noqa: F401 - loaded before the lock is taken: the liveness check needs it

    primary = agent.state
    with primary.lock(lock_timeout):
        try:
            current = primary.read_if_any()
        except (CorruptStateError, SchemaVersionError):
            current = None  # start_session below refuses it, as it always did
        tolerance = agent.config.process_start_tolerance
        if current is None or not holder_of(current, session_id, process, tolerance=tolerance):
            before, after = primary.start_session(
                session_id, source=source, process=process, lock_timeout=lock_timeout, client=client
            )
            return Placement(None, before, after, None)
        lane = lane_id_of(session_id)
        open_lane(agent.dir, lane)
        agent.record(
            "lane_opened",
            "ok",
            {
                "lane": lane,
                "session_id": session_id,
                "source": source,
                "pid": process.get("pid") if process else None,
                "beside_session_id": current.session_id,
                "beside_pid": current.pid,
            },
            trusted=True,  # ids and numbers
        )
    agent.use_lane(lane)
    before, after = agent.state.start_session(
        session_id, source=source, process=process, lock_timeout=lock_timeout, client=client
    )
    return Placement(lane, before, after, current)


def _silent_ms(state: AgentState, now_ms: int) -> int:
    return now_ms - (state.last_active_ms or 0)


def judge_lane(state: AgentState, config: Config, now_ms: int) -> tuple[str, str]:
    """``(verdict, reason)`` for a lane whose state is ``state``, by the watchdog's rules: ``live``
    (its process runs; or, none to look at, a heartbeat within ``watchdog_remote_grace``),
    ``dead`` (not idle, and its process is gone or was judged stalled by the watchdog: to be
    recovered), ``ended`` (idle, and its session ended or its process is gone: nothing to
    recover)."""
    from phoenix_protocol.core._process import liveness

    alive = liveness(state.pid, state.pid_start_time, state.host, tolerance=config.process_start_tolerance)
    ended = state.updated_by == "hook" and state.status_event == "session_end"
    quiet = _silent_ms(state, now_ms) >= config.watchdog_remote_grace * 1000
    if state.status == "idle":
        if ended:
            return "ended", "its session ended"
        if alive is False:
            return "ended", f"its agent process {state.pid} is gone (idle)"
        if alive is None and quiet:
            return "ended", "idle, no heartbeat within watchdog_remote_grace"
        return "live", "idle, its session goes on"
    if alive is True:
        return "live", f"its agent process {state.pid} is running"
    if alive is False:
        return "dead", f"its agent process {state.pid} on {state.host} is gone (or its PID was reused)"
    if state.updated_by == "watchdog":
        return "dead", f"marked {state.status_event or state.status} by the watchdog"
    if quiet:
        return "dead", "no process recorded, and no heartbeat within watchdog_remote_grace"
    return "live", "no process recorded; judged by its heartbeat"


def settle_lanes(agent: Agent, session_id: str | None) -> list[RecoveredLane]:
    """Judge every lane of ``agent`` but the one ``agent`` reads (``judge_lane``): retire those
    whose session ended (``lane_retired``), and retire and return those whose session died
    (``lane_recovered``, status warn), which session ``session_id`` is to recover. A lane another
    session retired first is skipped (it recovers it); a lane whose state cannot be read is left
    as it is (``phx status`` reports it, ``phx doctor`` repairs it), and one that cannot be moved
    is reported (``lanes_not_settled``) and left for the next start. Events go to the primary
    lane's ops log and to the retired lane's own. Never raises for one lane: the lanes claimed
    before a problem are recovered all the same."""
    primary = primary_of(agent)
    now = agent.clock.now_ms()
    recovered: list[RecoveredLane] = []
    for lane in lane_ids(agent.dir):
        if lane == agent.lane:
            continue
        view = agent.in_lane(lane)
        try:
            # Under the lane's lock, so that a write in progress (the watchdog marking it
            # stalled, a late hook) ends before the lane moves, and the judgement is on the last.
            with view.state.lock():
                state = view.state.read_if_any()
                if state is None:
                    continue  # being opened right now (no state written yet), or retired meanwhile
                verdict, reason = judge_lane(state, agent.config, now)
                if verdict == "live":
                    continue
                try:
                    retired = retire_lane(agent.dir, lane, now)
                except UnsafeFileError as exc:  # an entry in the way of lanes/.retired: reported below
                    raise StorageError(str(exc), path=exc.path) from exc
        except (CorruptStateError, SchemaVersionError, LockTimeoutError):
            continue  # left as it is: `phx status` reports it; busy: the next start looks again
        except (StorageError, OSError) as exc:
            if os.path.isdir(view.state.directory):  # not one retired between the listing and the lock
                with contextlib.suppress(PhoenixError, OSError):
                    primary.record(
                        "lanes_not_settled", "warn", {"lane": lane, "error": " ".join(str(exc).split())[:300]}
                    )
            continue  # the other lanes are settled all the same
        if retired is None:
            continue  # another session retired it first
        gone = agent.in_lane(lane, directory=retired)
        try:
            state = gone.state.read_if_any() or state  # as it was when it was retired
        except (CorruptStateError, SchemaVersionError):
            pass
        meta: dict[str, Any] = {
            "lane": lane,
            "session_id": state.session_id,
            "status": state.status,
            "task": state.current_task,
            "reason": reason,
            "by_session_id": session_id,
            "retired_to": os.path.relpath(retired, agent.dir),
        }
        name = "lane_recovered" if verdict == "dead" else "lane_retired"
        status = "warn" if verdict == "dead" else "ok"
        for log_to in (gone, primary):
            try:
                log_to.record(name, status, meta)
            except (PhoenixError, OSError):
                pass  # the claim is the rename, made: the recovery must not be lost for an event
        if verdict == "dead":
            recovered.append(RecoveredLane(lane, state, gone, retired, reason))
    return recovered
