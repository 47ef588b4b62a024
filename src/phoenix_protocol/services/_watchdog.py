"""The watchdog (seed 000): never trust state files alone; check them against real processes.

For every agent in the home whose status is ``working``:

==============================  ===============================================================
what is found                   verdict
==============================  ===============================================================
its process is alive            ``alive``, however long since the last tool call (long
                                thinking is not a stall)
its process is stopped          ``stopped`` (SIGSTOP, Ctrl-Z: status ``T``): reported, with an ops
                                event ``agent_stopped`` once; the state is left alone (``kill
                                -CONT`` or ``fg`` resumes it)
its process runs mid-turn, but  ``hung``: no heartbeat (``last_active``) for ``watchdog_hang_minutes``
neither it nor anything below   and no CPU progress of its process tree between two passes at
it used CPU since the last      least ``HANG_SAMPLE_MS`` apart (the first pass only takes a
pass                            sample, kept in state.json's ``watchdog``); reported, with an ops
                                event ``agent_hung`` once; the state is left alone. An agent
                                idle at its prompt (``turn: idle``) is never hung
its PID is free, a zombie, or   ``gone``: after ``watchdog_grace`` seconds since the last
taken by a process that         heartbeat the agent is marked **stalled** (status error,
started at another time         ``status_event`` ``stalled``, set by the watchdog, which outranks
(PID reuse)                     hook and model), with an ops event and a recovery checkpoint;
                                before that, ``grace``
recorded on another host        ``remote``: its process cannot be seen from here, only its
                                heartbeat: stalled after ``watchdog_remote_grace`` without one
no process recorded             ``unknown``: judged by its heartbeat, like a remote agent
==============================  ===============================================================

Every lane of every agent (docs/lanes.md: the state of a session that ran beside the one
``state.json`` holds) is judged the same way (``check_lanes``); a lane takes no checkpoint.

Seed 000 marks a dead agent *idle* after the grace; Phoenix marks it ``error``/stalled, so that the
next session, whose start hook recovers a state left working or in error, still recovers it
(docs/watchdog.md, "Where it departs from seed 000").

Agents that are idle or already in error are reported and left alone; a corrupt or newer
state.json is reported (``phx doctor`` repairs it), never touched. Operational drift (``_drift``)
is evaluated for live agents from the actions the heartbeat recorded: an agent whose calls keep
coming without progress gets the same emergency recovery the hook gives.

The tmux mode (seed 000's ``pstree`` of tmux panes) lists the agents in the pane trees of every
tmux session (the CLIs of ``core._clis``, one per running agent whatever its launcher and helper
processes, and ``watchdog_process_names``) and ties each working agent to the pane that holds it
(``_judge_tmux``): by its recorded process (PID *and* start time), else by the pane its
SessionStart recorded (``$TMUX_PANE``), else, for an agent with neither, by seed 000's convention
(a session named after it). A session is judged as a whole: an agent with no process recorded
whose session has no agent process in any pane is marked stalled once ``watchdog_grace`` has
passed since its last heartbeat (``grace`` before that). Panes are named ``session:window.pane``.
It also performs seed 003's forced refresh for the agents that opted in
(``tmux_refresh_agents``): when one is due and the agent is idle at its prompt, a recovery
checkpoint, then the CLI's clear command typed into its pane (``_tmux_refresh``).

The library never prints; ``phx watchdog`` renders ``WatchdogReport``.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from phoenix_protocol.core._clock import Clock, iso_from_ms, system_clock
from phoenix_protocol.core._config import comma_list
from phoenix_protocol.core._errors import CorruptStateError, PhoenixError, SchemaVersionError, StatusRefusedError
from phoenix_protocol.core._process import ProcessTable, hostname
from phoenix_protocol.services._notify import notify_or_record

if TYPE_CHECKING:
    from phoenix_protocol.core._config import Config
    from phoenix_protocol.core._home import Home
    from phoenix_protocol.services._agent import Agent

__all__ = [
    "AgentVerdict",
    "TmuxPane",
    "WatchdogReport",
    "check_agent",
    "check_lanes",
    "known_agents",
    "run_pass",
    "tmux_agents",
]

VERDICTS = ("alive", "stopped", "hung", "grace", "stalled", "remote", "unknown", "idle", "error", "corrupt")
ATTENTION = ("stopped", "hung")
"""Verdicts that need a person's attention without a change of the state (the process runs)."""
HANG_SAMPLE_MS = 60_000
"""The least time between the two CPU samples of a process that make it ``hung``."""
_CPU_EPSILON = 0.05
"""CPU seconds below which a process tree's use between two samples counts as none."""


class AgentVerdict:
    """What the watchdog concluded about one agent, and what it did."""

    __slots__ = (
        "action",
        "agent_id",
        "detail",
        "drift",
        "host",
        "lane",
        "last_active",
        "pane",
        "pid",
        "refresh",
        "status",
        "verdict",
    )

    def __init__(
        self,
        agent_id: str,
        verdict: str,
        detail: str,
        *,
        status: str | None = None,
        pid: int | None = None,
        host: str | None = None,
        last_active: str | None = None,
        action: str | None = None,
        drift: str | None = None,
        lane: str | None = None,
    ) -> None:
        self.agent_id = agent_id
        self.lane = lane
        """``None``: the agent's primary lane (``state.json``); else the lane of a session that
        ran beside it (docs/lanes.md)."""
        self.verdict = verdict
        self.detail = detail
        self.status = status
        self.pid = pid
        self.host = host
        self.last_active = last_active
        self.action = action
        self.drift = drift
        self.refresh: dict[str, Any] | None = None
        """The tmux mode's forced refresh (``_tmux_refresh.RefreshOutcome.as_dict``), when one is due."""
        self.pane: str | None = None
        """The tmux mode: the pane that holds the agent, ``session:window.pane``."""

    @property
    def label(self) -> str:
        """The agent id, and ``@<lane>`` for a lane beside the primary one."""
        return self.agent_id if self.lane is None else f"{self.agent_id}@{self.lane}"

    def as_dict(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in self.__slots__}


class TmuxPane:
    """A tmux pane and the agents in its process tree (``core._clis.agents_in_tree``: one per
    running agent, its launcher and helper processes not counted again). ``target``: its name as
    tmux takes it, ``session:window.pane``."""

    def __init__(
        self,
        session: str,
        pane_pid: int,
        agents: list[dict[str, Any]],
        pane_id: str | None = None,
        target: str | None = None,
    ) -> None:
        self.session = session
        self.pane_pid = pane_pid
        self.pane_id = pane_id
        self.target = target or session
        self.agents = agents

    def as_dict(self) -> dict[str, Any]:
        return {
            "session": self.session,
            "target": self.target,
            "pane_id": self.pane_id,
            "pane_pid": self.pane_pid,
            "agents": self.agents,
        }


class WatchdogReport:
    """One pass: when, every verdict, and (tmux mode) the panes."""

    def __init__(
        self,
        checked_at: str,
        verdicts: list[AgentVerdict],
        tmux: list[TmuxPane] | None,
        teammates: list[dict[str, Any]] | None = None,
    ) -> None:
        self.checked_at = checked_at
        self.verdicts = verdicts
        self.tmux = tmux
        self.teammates = teammates or []

    @property
    def stalled(self) -> list[AgentVerdict]:
        """Agents marked stalled in this pass."""
        return [v for v in self.verdicts if v.action == "marked_stalled"]

    @property
    def swept(self) -> list[dict[str, Any]]:
        """Teammates whose tasks this pass returned to their team's queue."""
        return [t for t in self.teammates if t.get("action") == "tasks_returned"]

    @property
    def refreshed(self) -> list[AgentVerdict]:
        """Agents whose forced refresh this pass typed into their tmux pane."""
        return [v for v in self.verdicts if v.action == "refresh_sent"]

    @property
    def drifting(self) -> list[AgentVerdict]:
        return [v for v in self.verdicts if v.drift]

    @property
    def stopped(self) -> list[AgentVerdict]:
        """Agents whose process is stopped (SIGSTOP, Ctrl-Z)."""
        return [v for v in self.verdicts if v.verdict == "stopped"]

    @property
    def hung(self) -> list[AgentVerdict]:
        """Agents whose process runs but does nothing: no heartbeat, no CPU progress."""
        return [v for v in self.verdicts if v.verdict == "hung"]

    @property
    def needs_attention(self) -> bool:
        """Whether the pass found something for a person (``phx watchdog`` exits 5)."""
        return bool(self.stalled or self.drifting or self.swept or self.refreshed or self.stopped or self.hung)

    def counts(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for v in self.verdicts:
            out[v.verdict] = out.get(v.verdict, 0) + 1
        return out

    def as_dict(self) -> dict[str, Any]:
        return {
            "checked_at": self.checked_at,
            "counts": self.counts(),
            "stalled": [v.label for v in self.stalled],
            "drifting": [v.label for v in self.drifting],
            "stopped": [v.label for v in self.stopped],
            "hung": [v.label for v in self.hung],
            "refreshed": [v.label for v in self.refreshed],
            "agents": [v.as_dict() for v in self.verdicts],
            "teammates": self.teammates,
            "tmux": [p.as_dict() for p in self.tmux] if self.tmux is not None else None,
        }


def _mark_stalled(agent: Agent, reason: str, session_id: str | None) -> str:
    """Status error/stalled by the watchdog, an ops event (the transition), a recovery checkpoint
    (not for a lane: lanes take no checkpoints, docs/lanes.md)."""
    try:
        agent.state.set_status("error", f"stalled: {reason}", source="watchdog", session_id=session_id, event="stalled")
    except StatusRefusedError:  # pragma: no cover - the watchdog outranks every writer
        return "refused"
    notify_or_record(agent, "stalled", reason)
    if agent.lane is not None:
        return "marked_stalled"
    try:
        agent.checkpoints.create("recovery", summary=f"stalled: {reason}")
    except PhoenixError as exc:
        agent.record("checkpoint_failed", "error", {"reason": "stalled", "error": str(exc)[:300]})
    return "marked_stalled"


def check_agent(
    agent: Agent,
    *,
    now_ms: int,
    act: bool = True,
    this_host: str | None = None,
    table: ProcessTable | None = None,
) -> AgentVerdict:
    """Judge one agent (see the module docstring); with ``act`` mark it stalled when it is.
    ``table``: the pass's process table, shared by the agents it judges (one is read when needed)."""
    from phoenix_protocol.core._process import observe

    host_here = this_host or hostname()
    try:
        state = agent.state.read()
    except (CorruptStateError, SchemaVersionError) as exc:
        return AgentVerdict(agent.id, "corrupt", str(exc))
    base: dict[str, Any] = {
        "status": state.status,
        "pid": state.pid,
        "host": state.host,
        "last_active": state.last_active,
    }
    if state.status != "working":
        label = "idle" if state.status == "idle" else "error"
        detail = state.error_message or "" if state.status == "error" else "not working"
        return AgentVerdict(agent.id, label, detail, **base)
    config = agent.config
    silent_ms = now_ms - (state.last_active_ms or 0)
    silent = f"{silent_ms / 1000:.0f}s since the last heartbeat"
    if state.pid is not None and state.host == host_here:
        alive, status = observe(state.pid, state.pid_start_time, state.host, tolerance=config.process_start_tolerance)
        if alive:
            condition = _stopped_or_hung(agent, state, status, now_ms=now_ms, act=act, base=base, table=table)
            if condition is not None:
                return condition
            verdict = AgentVerdict(agent.id, "alive", f"process {state.pid} is running; {silent}", **base)
            return _drift_check(agent, state, verdict, now_ms=now_ms, act=act)
        if silent_ms < config.watchdog_grace * 1000:
            return AgentVerdict(
                agent.id, "grace", f"process {state.pid} is gone; {silent} (grace {config.watchdog_grace:g}s)", **base
            )
        reason = f"agent process {state.pid} on {state.host} is gone (or its PID was reused); {silent}"
        action = _mark_stalled(agent, reason, state.session_id) if act else None
        return AgentVerdict(agent.id, "stalled", reason, action=action, **base)
    label = "remote" if state.host and state.host != host_here else "unknown"
    where = f"recorded on {state.host}" if label == "remote" else "no process recorded"
    if silent_ms < config.watchdog_remote_grace * 1000:
        return AgentVerdict(agent.id, label, f"{where}; judged by heartbeat: {silent}", **base)
    reason = f"{where}; no heartbeat for {silent_ms // 60_000} minutes"
    action = _mark_stalled(agent, reason, state.session_id) if act else None
    return AgentVerdict(agent.id, "stalled", reason, action=action, **base)


def _stopped_or_hung(
    agent: Agent,
    state: Any,
    status: str | None,
    *,
    now_ms: int,
    act: bool,
    base: dict[str, Any],
    table: ProcessTable | None,
) -> AgentVerdict | None:
    """``stopped`` or ``hung`` for a working agent whose recorded process runs (see the module
    docstring), else ``None``. With ``act``, the CPU sample is kept in state.json's ``watchdog``
    and the first sight of each condition is logged (``agent_stopped``, ``agent_hung``)."""
    from phoenix_protocol.core._process import STOPPED_STATES

    pid = state.pid
    record = state.extra.get("watchdog")
    record = dict(record) if isinstance(record, dict) else {}
    # The heartbeat (every hook, every `phx state` of the model); not the ops log's time, which the
    # watchdog's own events would move.
    quiet_ms = now_ms - (state.last_active_ms or 0)
    quiet = f"no heartbeat for {quiet_ms / 1000:.0f}s"
    hang_ms = float(agent.config.watchdog_hang_minutes) * 60_000
    # An agent waiting at its prompt (the Stop hook ended its turn) does nothing, rightly: never hung.
    may_hang = hang_ms > 0 and quiet_ms >= hang_ms and state.turn != "idle"
    cpu = 0.0
    if may_hang:  # the tree's CPU only when it may matter: it costs a walk of the process table
        measured = (table or ProcessTable()).tree_cpu(pid)
        if measured is None:
            return None
        cpu = measured
    condition: str | None = None
    detail = ""
    if status in STOPPED_STATES:
        condition = "stopped"
        detail = f"process {pid} is stopped (SIGSTOP or Ctrl-Z; `kill -CONT {pid}` or `fg` resumes it); {quiet}"
    sample = record.get("cpu") if isinstance(record.get("cpu"), dict) else None
    fresh = {"pid": pid, "start": state.pid_start_time, "cpu": round(cpu, 3), "at_ms": now_ms}
    new_sample: dict[str, Any] | None = None
    if condition is None and may_hang:
        same = sample is not None and sample.get("pid") == pid and sample.get("start") == state.pid_start_time
        if same and isinstance(sample, dict):
            waited = now_ms - int(sample.get("at_ms") or now_ms)
            used = cpu - float(sample.get("cpu") or 0.0)
            if used < _CPU_EPSILON and waited >= HANG_SAMPLE_MS:
                condition = "hung"
                detail = (
                    f"process {pid} runs but its process tree used no CPU in the last {waited / 1000:.0f}s; {quiet} "
                    f"(watchdog_hang_minutes {agent.config.watchdog_hang_minutes:g})"
                )
            elif used >= _CPU_EPSILON:
                new_sample = fresh  # it moved: the next pass measures from here
        else:
            new_sample = fresh
    flagged = record.get("flag")
    if act and (new_sample is not None or flagged != (condition and f"{condition}:{pid}")):
        _remember(agent, pid, condition, new_sample, detail)
    if condition is None:
        return None
    action = "reported" if flagged != f"{condition}:{pid}" else None
    return AgentVerdict(agent.id, condition, detail, action=action if act else None, **base)


def _remember(agent: Agent, pid: int, condition: str | None, sample: dict[str, Any] | None, detail: str) -> None:
    """Keep the CPU sample and the condition seen in state.json's ``watchdog`` (under the lock,
    for the same process only); log the first sight of a condition, and tell the person
    (``notify_or_record``: rate-limited)."""
    from phoenix_protocol.agent._state import Transition

    first: list[bool] = []

    def mark(current: Any) -> list[Any]:
        if current.status != "working" or current.pid != pid:
            return []
        record = current.extra.get("watchdog")
        record = dict(record) if isinstance(record, dict) else {}
        if sample is not None:
            record["cpu"] = sample
        flag = f"{condition}:{pid}" if condition else None
        events = []
        if condition and record.get("flag") != flag:
            name = "agent_stopped" if condition == "stopped" else "agent_hung"
            events.append(Transition(name, "warn", {"pid": pid, "detail": detail[:300]}))
            first.append(True)
        if flag is None:
            record.pop("flag", None)
        else:
            record["flag"] = flag
        current.extra["watchdog"] = record
        return events

    try:
        agent.state.change(mark)
    except PhoenixError:  # the report stands without its record
        return
    if first and condition:
        notify_or_record(agent, condition, detail)


def check_lanes(
    agent: Agent,
    *,
    now_ms: int,
    act: bool = True,
    this_host: str | None = None,
    table: ProcessTable | None = None,
) -> list[AgentVerdict]:
    """``check_agent`` for each lane of ``agent`` beside its primary one. A dead working lane is
    marked stalled (status error), never idle, so that the next session started in the project
    still recovers it; a lane retired while it was being checked is reported as ``idle``."""
    from phoenix_protocol.services._lanes import lane_views

    out = []
    for view in lane_views(agent):
        try:
            verdict = check_agent(view, now_ms=now_ms, act=act, this_host=this_host, table=table)
        except PhoenixError as exc:  # retired meanwhile (its folder moved), or unreadable
            verdict = AgentVerdict(agent.id, "idle" if not os.path.isdir(view.state.directory) else "corrupt", str(exc))
        verdict.lane = view.lane
        out.append(verdict)
    return out


def _drift_check(agent: Agent, state: Any, verdict: AgentVerdict, *, now_ms: int, act: bool) -> AgentVerdict:
    """Operational drift of a live agent (e.g. calls without progress, which the heartbeat only
    sees when the next call comes): the same emergency recovery as the hook, once per drift."""
    from phoenix_protocol.agent._drift import EXEMPT_KEY, Action, DriftConfig, detect, task_exemption, warn_once

    actions = []
    for item in state.recent_actions:
        try:
            actions.append(Action.from_list(item))
        except (TypeError, ValueError):
            continue
    since = state.last_progress_ms or state.work_started_ms
    config = DriftConfig.from_config(agent.config)
    exempt_rules = task_exemption(state.extra.get(EXEMPT_KEY), state.current_task, config.read_only_words)[0]
    signals = detect(actions, now_ms=now_ms, config=config, last_progress_ms=since, exempt_rules=exempt_rules)
    if not signals:
        return verdict
    verdict.drift = signals[0].detail
    if not act or warn_once(signals, state.drift, iso_from_ms(now_ms)) is None:
        return verdict
    opened: list[bool] = []

    def mark(current: Any) -> list[Any]:
        from phoenix_protocol.agent._state import Transition

        found = warn_once(signals, current.drift, iso_from_ms(now_ms))  # under the lock: the hook may have warned
        if found is None:
            return []
        signal, current.drift, opens = found
        opened.append(opens)
        meta = {"kind": signal.kind, "detail": signal.detail, "by": "watchdog", "episode_opened": opens}
        return [Transition("drift_detected", "warn", meta)]

    agent.state.change(mark)
    if opened and opened[0]:
        notify_or_record(agent, "drift", verdict.drift or "")
    if opened and opened[0] and agent.lane is None:  # once per episode of drift, as the hook (lanes: no checkpoint)
        agent.checkpoints.emergency_recovery(f"drift: {verdict.drift}")
        verdict.action = "emergency_recovery"
    return verdict


def tmux_agents(names: set[str], *, socket: str | None = None) -> list[TmuxPane] | None:
    """The agents in the pane trees of every tmux session (``None`` without a tmux server):
    the CLIs Phoenix knows (``core._clis``) and processes named in ``names``."""
    from phoenix_protocol.core._clis import agents_in_tree
    from phoenix_protocol.services._tmux_refresh import Tmux

    listed = Tmux(socket).panes()
    if listed is None:
        return None
    panes = []
    for pane in listed:
        found = [a.as_dict() for a in agents_in_tree(pane.pid, extra_names=names)]
        panes.append(TmuxPane(pane.session, pane.pid, found, pane.id, pane.target))
    return panes


def _recorded_pane(state: Any, socket: str | None) -> str | None:
    """The pane id (``%3``) the agent's SessionStart recorded (``$TMUX_PANE``), when it belongs to
    the tmux server the pass looks at: the recorded socket is that server's, or none was recorded
    or given."""
    recorded = state.tmux if isinstance(state.tmux, dict) else {}
    pane = recorded.get("pane")
    if not isinstance(pane, str):
        return None
    where = recorded.get("socket")
    if socket and isinstance(where, str) and os.path.realpath(where) != os.path.realpath(socket):
        return None
    if not socket and isinstance(where, str) and os.path.basename(where) != "default":
        return None
    return pane


def _judge_tmux(
    agents: list[Agent],
    verdicts: list[AgentVerdict],
    panes: list[TmuxPane],
    *,
    now_ms: int,
    act: bool,
    socket: str | None,
    host: str,
) -> None:
    """Seed 000's tmux check, a session judged as a whole (see the module docstring): each
    working agent's pane (``verdict.pane``), and a stall for an agent with no process recorded
    whose session holds no agent process, after ``watchdog_grace``."""
    by_process: dict[int, tuple[TmuxPane, float]] = {}
    for listed in panes:
        for found in listed.agents:
            for pid in [found["pid"], *found.get("launchers", [])]:
                by_process[pid] = (listed, float(found["start_time"]))
    by_id = {p.pane_id: p for p in panes if p.pane_id}
    sessions: dict[str, bool] = {}
    for listed in panes:
        sessions[listed.session] = sessions.get(listed.session, False) or bool(listed.agents)
    by_agent = {a.id: a for a in agents}
    for verdict in verdicts:
        agent = by_agent.get(verdict.agent_id)
        if agent is None or verdict.status != "working" or verdict.verdict in ("remote", "corrupt", "stalled"):
            continue
        if verdict.lane is not None:
            from phoenix_protocol.services._lanes import lane_views

            agent = next((v for v in lane_views(agent) if v.lane == verdict.lane), agent)
        try:
            state = agent.state.read()
        except PhoenixError:
            continue
        pane: TmuxPane | None = None
        tied = ""
        if state.pid is not None and state.host == host:
            hit = by_process.get(state.pid)
            tolerance = agent.config.process_start_tolerance
            if hit is not None and (state.pid_start_time is None or abs(hit[1] - state.pid_start_time) <= tolerance):
                pane, tied = hit[0], "process"
        if pane is None and state.pid is None:
            recorded = _recorded_pane(state, socket)
            if recorded is not None and recorded in by_id:
                pane, tied = by_id[recorded], "recorded pane"
            elif verdict.lane is None:  # seed 000's convention: a session named after the agent
                pane = next((p for p in panes if p.session == agent.id), None)
                tied = "session name"
        if pane is None:
            continue
        verdict.pane = pane.target
        if tied == "process" or verdict.verdict != "unknown" or sessions.get(pane.session):
            continue
        silent_ms = now_ms - (state.last_active_ms or 0)
        grace = agent.config.watchdog_grace
        where = f"tmux session {pane.session!r} (pane {pane.target}, by {tied}) has no agent process in any pane"
        if silent_ms < grace * 1000:
            verdict.verdict = "grace"
            verdict.detail += f"; {where} yet (grace {grace:g}s)"
            continue
        verdict.verdict = "stalled"
        verdict.detail += f"; {where}"
        if act:
            verdict.action = _mark_stalled(agent, where, state.session_id)


def run_pass(
    home: Home,
    *,
    agents: list[Agent] | None = None,
    clock: Clock = system_clock,
    act: bool = True,
    tmux: bool = False,
    tmux_socket: str | None = None,
    config_overrides: dict[str, Any] | None = None,
    config: Config | None = None,
) -> WatchdogReport:
    """One pass over every agent of ``home`` (or ``agents``), on ``config`` (default: the home's)
    with ``config_overrides`` applied."""
    from phoenix_protocol.services._agent import Agent

    config = _configured(home, config, config_overrides)
    if agents is None:
        agents = [Agent(aid, home, config=config, clock=clock) for aid in known_agents(home, config=config)]
    now_ms = clock.now_ms()
    host_here = hostname()
    table = ProcessTable()  # read once, if an agent's CPU time is needed (a hang check)
    verdicts = [check_agent(agent, now_ms=now_ms, act=act, this_host=host_here, table=table) for agent in agents]
    for agent in agents:  # and the lanes of sessions that ran beside the primary one (docs/lanes.md)
        verdicts += check_lanes(agent, now_ms=now_ms, act=act, this_host=host_here, table=table)
    panes = None
    tmux_socket = tmux_socket or str(config.watchdog_tmux_socket or "") or None
    if tmux:
        panes = tmux_agents(set(comma_list(config.watchdog_process_names)), socket=tmux_socket)
        if panes is not None:
            _judge_tmux(agents, verdicts, panes, now_ms=now_ms, act=act, socket=tmux_socket, host=host_here)
        _refresh_in_panes(agents, verdicts, now_ms=now_ms, act=act, socket=tmux_socket)
    teammates = check_teams(home, clock=clock, act=act, config=config)
    return WatchdogReport(iso_from_ms(now_ms), verdicts, panes, teammates)


def _refresh_in_panes(
    agents: list[Agent], verdicts: list[AgentVerdict], *, now_ms: int, act: bool, socket: str | None
) -> None:
    """Seed 003's forced refresh, typed into the tmux pane of each opted-in agent that is due one
    and idle at its prompt (``_tmux_refresh``; agents' primary lanes)."""
    from phoenix_protocol.services._tmux_refresh import opted_in, refresh_in_tmux

    by_id = {v.agent_id: v for v in verdicts if v.lane is None}
    for agent in agents:
        verdict = by_id.get(agent.id)
        if verdict is None or verdict.status != "working" or not opted_in(agent.id, agent.config):
            continue
        try:
            state = agent.state.read()
            outcome = refresh_in_tmux(
                agent, state, now_ms=now_ms, alive=verdict.verdict == "alive", socket=socket, act=act
            )
        except PhoenixError as exc:
            verdict.refresh = {"action": "failed", "detail": str(exc)[:300]}
            continue
        if outcome is None:
            continue
        verdict.refresh = outcome.as_dict()
        if outcome.action == "sent":
            verdict.action = "refresh_sent"


def _configured(home: Home, config: Config | None, overrides: dict[str, Any] | None) -> Config:
    """``config`` (or the home's, read now) with ``overrides`` applied."""
    if config is None:
        from phoenix_protocol.core._config import load_config

        return load_config(home.root, project_root=home.project_root, overrides=overrides)
    return config.replace(overrides) if overrides else config


def known_agents(
    home: Home, config_overrides: dict[str, Any] | None = None, *, config: Config | None = None
) -> list[str]:
    """The agents of ``home``; on the PostgreSQL store also those whose state the server holds
    (agents running on other machines)."""
    ids = home.agent_ids()
    store = str(_configured(home, config, config_overrides).store)
    if store.startswith(("postgresql://", "postgres://")):
        from phoenix_protocol.agent._state_pg import agents_with_state

        ids = sorted(set(ids) | set(agents_with_state(store)))
    return ids


def check_teams(
    home: Home, *, clock: Clock = system_clock, act: bool = True, config: Config | None = None
) -> list[dict[str, Any]]:
    """Every teammate of every team not completed: its liveness class from its heartbeats (a
    teammate's process may run on any machine: heartbeats are the ground truth here); tasks held
    by suspended or stale teammates go back to the queue (``Team.sweep``) when ``act``."""
    from phoenix_protocol.store._teams import Team, list_teams

    out: list[dict[str, Any]] = []
    if config is None:
        from phoenix_protocol.core._config import load_config

        config = load_config(home.root, project_root=home.project_root)
    for team_id in list_teams(home, config=config):
        try:
            team = Team.open(home, team_id, clock=clock, config=config)
            data = team.read()
            if data["status"] == "completed":
                continue
            holding = {
                t["assigned_to"]
                for t in data["tasks"]
                if t["status"] in ("in_progress", "blocked") and t["assigned_to"]
            }
            rows = []
            lives = team.liveness_all()
            for mate in team.roster():
                live = lives[mate["name"]]
                rows.append(
                    {
                        "team": team_id,
                        "name": mate["name"],
                        "class": live["class"],
                        "skew": live["skew"],
                        "task": mate.get("current_task"),
                    }
                )
            dead = [r for r in rows if r["class"] in ("suspended", "stale") and r["name"] in holding]
            if act:
                _periodic_snapshot(team, data)
            if dead and act:
                returned = team.sweep()
                for row in dead:
                    row["action"] = "tasks_returned"
                    row["returned"] = [
                        t["task_id"] for t in returned if t["checkpoint"].get("inherited_from") == row["name"]
                    ]
            out += rows
        except PhoenixError as exc:
            out.append({"team": team_id, "error": str(exc)})
    return out


def _periodic_snapshot(team: Any, data: dict[str, Any]) -> None:
    """Seed 004's periodic full snapshot, for a team whose transitions have stopped; in ZOMBIE
    mode (the lead silent for more than 5 minutes) every 30 seconds."""
    from phoenix_protocol.store._teams import FULL_SNAPSHOT_MS, LEAD_TIMEOUT_MS, ZOMBIE_CHECKPOINT_MS

    now = team.clock.now_ms()
    log = data["session_log"]
    silence = team.lead_silence_ms(now_ms=now)
    if data["status"] in ("active", "suspended") and silence is not None and silence > LEAD_TIMEOUT_MS:
        if now - (log.get("last_full_snapshot_ms") or 0) >= ZOMBIE_CHECKPOINT_MS:
            team.checkpoint(kind="full", reason="ZOMBIE: the lead is silent; teammates work on")
        return
    if now - (log.get("last_full_snapshot_ms") or 0) >= FULL_SNAPSHOT_MS:
        team.checkpoint(kind="full", reason="periodic (watchdog)")
