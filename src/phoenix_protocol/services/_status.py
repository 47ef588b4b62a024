"""``phx status``: every agent and lane of a home (or of every home this user used) on one screen.

One row per lane (the agent's primary lane, ``state.json``, and each lane of a session that ran
beside it: docs/lanes.md) with its status, task, session, process, liveness by the watchdog's
rules (``check_agent``, which acts on nothing here), last activity, next action, and whether the
next session started in the project recovers it. Reading never writes: a home that does not
exist is reported as such, not created.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from phoenix_protocol.core._clock import Clock, system_clock
from phoenix_protocol.core._errors import PhoenixError

if TYPE_CHECKING:
    from phoenix_protocol.core._config import Config
    from phoenix_protocol.core._home import Home
    from phoenix_protocol.services._agent import Agent

__all__ = ["SCHEMA_VERSION", "home_rows", "lane_row", "status_report"]

SCHEMA_VERSION = 1
"""Of ``phx status --json`` (docs/cli.md#phx-status): fields are added, never renamed or removed."""


def lane_row(view: Agent, *, now_ms: int, this_host: str) -> dict[str, Any]:
    """The row of one lane (``view``: an ``Agent`` of the primary lane, or ``Agent.in_lane``)."""
    import os

    from phoenix_protocol.core._errors import CorruptStateError, SchemaVersionError
    from phoenix_protocol.core._process import liveness
    from phoenix_protocol.services._watchdog import check_agent

    row: dict[str, Any] = {
        "home": view.home.root,
        "agent": view.id,
        "lane": view.lane,
        "path": view.state.path,
        "session_id": None,
        "status": None,
        "status_event": None,
        "updated_by": None,
        "task": None,
        "error_message": None,
        "verdict": "corrupt",
        "detail": "",
        "process": "none",
        "pid": None,
        "host": None,
        "last_active": None,
        "idle_seconds": None,
        "next_action": None,
        "open_loops": 0,
        "recover": False,
        "problem": None,
    }
    try:
        state = view.state.read_if_any()
    except (CorruptStateError, SchemaVersionError) as exc:
        row["problem"] = str(exc)
        row["detail"] = "run `phx doctor`"
        return row
    if state is None:
        if view.lane is not None and not os.path.isdir(view.state.directory):
            row.update(verdict="idle", detail="retired while it was read")
        else:
            row.update(verdict="idle", detail="no state yet")
        return row
    verdict = check_agent(view, now_ms=now_ms, act=False, this_host=this_host)
    alive = liveness(state.pid, state.pid_start_time, state.host, tolerance=view.config.process_start_tolerance)
    process = "none" if state.pid is None else {True: "running", False: "gone", None: "elsewhere"}[alive]
    if view.lane is None:
        recover = state.status != "idle" and alive is not True
    else:
        from phoenix_protocol.services._lanes import judge_lane

        recover = judge_lane(state, view.config, now_ms)[0] == "dead"
    from phoenix_protocol.agent._state import task_notes

    loops, actions = task_notes(state)  # the current task's (docs/state.md)
    row.update(
        session_id=state.session_id,
        status=state.status,
        status_event=state.status_event,
        updated_by=state.updated_by,
        task=state.current_task or None,
        error_message=state.error_message,
        verdict=verdict.verdict,
        detail=verdict.detail + (f"; drift: {verdict.drift}" if verdict.drift else ""),
        process=process,
        pid=state.pid,
        host=state.host,
        last_active=state.last_active,
        idle_seconds=max(0, (now_ms - state.last_active_ms) // 1000) if state.last_active_ms else None,
        next_action=actions[0]["text"] if actions else None,
        open_loops=len(loops),
        recover=recover,
    )
    return row


def home_rows(home: Home, *, config: Config | None = None, clock: Clock = system_clock) -> list[dict[str, Any]]:
    """A row per lane of every agent of ``home`` (the primary lane first, then its lanes by id);
    ``config``: the home's settings, read here when not given."""
    from phoenix_protocol.core._config import load_config
    from phoenix_protocol.core._process import hostname
    from phoenix_protocol.services._agent import Agent
    from phoenix_protocol.services._lanes import lane_views
    from phoenix_protocol.services._watchdog import known_agents

    now = clock.now_ms()
    here = hostname()
    rows = []
    if config is None:
        config = load_config(home.root, project_root=home.project_root)
    for agent_id in known_agents(home, config=config):
        agent = Agent(agent_id, home, config=config, clock=clock)
        for view in (agent, *lane_views(agent)):
            rows.append(lane_row(view, now_ms=now, this_host=here))
    return rows


def status_report(
    homes: list[Home], *, configs: dict[str, Config] | None = None, clock: Clock = system_clock
) -> dict[str, Any]:
    """``phx status``'s document: ``checked_at``, ``homes`` (each: ``path``, ``exists``, and
    ``error`` when it could not be read), ``lanes`` (every row of every home), and ``counts`` by
    verdict and of lanes to ``recover``. ``configs``: settings already read, by home root."""
    import os

    from phoenix_protocol.core._clock import iso_from_ms

    out_homes: list[dict[str, Any]] = []
    rows: list[dict[str, Any]] = []
    for home in homes:
        entry: dict[str, Any] = {"path": home.root, "exists": os.path.isdir(home.root), "error": None}
        if entry["exists"]:
            try:
                rows += home_rows(home, config=(configs or {}).get(home.root), clock=clock)
            except (PhoenixError, OSError) as exc:
                entry["error"] = " ".join(str(exc).split())
        out_homes.append(entry)
    counts: dict[str, int] = {}
    for row in rows:
        counts[row["verdict"]] = counts.get(row["verdict"], 0) + 1
    return {
        "schema_version": SCHEMA_VERSION,
        "checked_at": iso_from_ms(clock.now_ms()),
        "homes": out_homes,
        "lanes": rows,
        "counts": counts,
        "recover": sum(1 for row in rows if row["recover"]),
    }
