"""The watchdog (seed 000): never trust state files alone; check them against real processes.

For every agent in the home whose status is ``working``:

==============================  ===============================================================
what is found                   verdict
==============================  ===============================================================
its process is alive            ``alive``, however long since the last tool call (long
                                thinking is not a stall)
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
processes, and ``watchdog_process_names``), and reports a session whose agent process has gone
while an agent named after it is working. It also performs seed 003's forced refresh for the
agents that opted in (``tmux_refresh_agents``): when one is due and the agent is idle at its
prompt, a recovery checkpoint, then the CLI's clear command typed into its pane
(``_tmux_refresh``).

The library never prints; ``phx watchdog`` renders ``WatchdogReport``.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from phoenix_protocol.core._clock import Clock, iso_from_ms, system_clock
from phoenix_protocol.core._errors import CorruptStateError, PhoenixError, SchemaVersionError, StatusRefusedError
from phoenix_protocol.core._process import hostname

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

VERDICTS = ("alive", "grace", "stalled", "remote", "unknown", "idle", "error", "corrupt")


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

    @property
    def label(self) -> str:
        """The agent id, and ``@<lane>`` for a lane beside the primary one."""
        return self.agent_id if self.lane is None else f"{self.agent_id}@{self.lane}"

    def as_dict(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in self.__slots__}


class TmuxPane:
    """A tmux pane and the agents in its process tree (``core._clis.agents_in_tree``: one per
    running agent, its launcher and helper processes not counted again)."""

    def __init__(self, session: str, pane_pid: int, agents: list[dict[str, Any]], pane_id: str | None = None) -> None:
        self.session = session
        self.pane_pid = pane_pid
        self.pane_id = pane_id
        self.agents = agents

    def as_dict(self) -> dict[str, Any]:
        return {"session": self.session, "pane_id": self.pane_id, "pane_pid": self.pane_pid, "agents": self.agents}


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
            "refreshed": [v.label for v in self.refreshed],
            "agents": [v.as_dict() for v in self.verdicts],
            "teammates": self.teammates,
            "tmux": [p.as_dict() for p in self.tmux] if self.tmux is not None else None,
        }


def tell_person(agent: Agent, kind: str, message: str) -> None:
    """``_notify.notify`` (rate-limited, delivered on a background thread), which never stops a
    pass: a failure to notify is an ops event."""
    from phoenix_protocol.services._notify import notify

    try:
        notify(agent, kind, message)
    except PhoenixError as exc:
        agent.record("notification_failed", "warn", {"kind": kind, "error": str(exc)[:300]})


def _mark_stalled(agent: Agent, reason: str, session_id: str | None) -> str:
    """Status error/stalled by the watchdog, an ops event (the transition), a recovery checkpoint
    (not for a lane: lanes take no checkpoints, docs/lanes.md)."""
    try:
        agent.state.set_status("error", f"stalled: {reason}", source="watchdog", session_id=session_id, event="stalled")
    except StatusRefusedError:  # pragma: no cover - the watchdog outranks every writer
        return "refused"
    tell_person(agent, "stalled", reason)
    if agent.lane is not None:
        return "marked_stalled"
    try:
        agent.checkpoints.create("recovery", summary=f"stalled: {reason}")
    except PhoenixError as exc:
        agent.record("checkpoint_failed", "error", {"reason": "stalled", "error": str(exc)[:300]})
    return "marked_stalled"


def check_agent(agent: Agent, *, now_ms: int, act: bool = True, this_host: str | None = None) -> AgentVerdict:
    """Judge one agent (see the module docstring); with ``act`` mark it stalled when it is."""
    from phoenix_protocol.core._process import liveness

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
        alive = liveness(state.pid, state.pid_start_time, state.host, tolerance=config.process_start_tolerance)
        if alive:
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


def check_lanes(agent: Agent, *, now_ms: int, act: bool = True, this_host: str | None = None) -> list[AgentVerdict]:
    """``check_agent`` for each lane of ``agent`` beside its primary one. A dead working lane is
    marked stalled (status error), never idle, so that the next session started in the project
    still recovers it; a lane retired while it was being checked is reported as ``idle``."""
    from phoenix_protocol.services._lanes import lane_views

    out = []
    for view in lane_views(agent):
        try:
            verdict = check_agent(view, now_ms=now_ms, act=act, this_host=this_host)
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
        tell_person(agent, "drift", verdict.drift or "")
    if opened and opened[0] and agent.lane is None:  # once per episode of drift, as the hook (lanes: no checkpoint)
        agent.checkpoints.emergency_recovery(f"drift: {verdict.drift}")
        verdict.action = "emergency_recovery"
    return verdict


def _process_names(config: Any) -> set[str]:
    return {n.strip() for n in str(config.watchdog_process_names).split(",") if n.strip()}


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
        panes.append(TmuxPane(pane.session, pane.pid, found, pane.id))
    return panes


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
    verdicts = [check_agent(agent, now_ms=now_ms, act=act, this_host=host_here) for agent in agents]
    for agent in agents:  # and the lanes of sessions that ran beside the primary one (docs/lanes.md)
        verdicts += check_lanes(agent, now_ms=now_ms, act=act, this_host=host_here)
    panes = None
    if tmux:
        names = _process_names(agents[0].config) if agents else {"claude", "gemini", "codex"}
        panes = tmux_agents(names, socket=tmux_socket)
        if panes is not None:
            by_id = {v.agent_id: v for v in verdicts if v.lane is None}
            for pane in panes:
                verdict = by_id.get(pane.session)
                # Seed 000: a tmux session named after a working agent, with no agent process in it.
                if verdict is not None and verdict.verdict in ("alive", "unknown", "remote") and not pane.agents:
                    verdict.detail += f"; tmux session {pane.session!r} has no agent process"
                    if verdict.verdict != "alive":
                        verdict.verdict = "stalled"
                        agent = next(a for a in agents if a.id == pane.session)
                        if act:
                            verdict.action = _mark_stalled(
                                agent, f"no agent process in tmux session {pane.session!r}", None
                            )
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
