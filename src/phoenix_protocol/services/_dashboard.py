"""What ``phx ui`` shows, as JSON documents: one function per view, read-only, on either store.

The web page (``server/_ui``) renders these; the functions read through the same library calls as
``phx status``, ``phx checkpoint``, ``phx team status`` and ``phx clinic report``, so the page and
the CLI agree. ``allowed`` filters by namespace (``agent:<id>``, ``team:<id>``): the caller passes
what its token covers, and a view outside it is ``NotFoundError`` (the HTTP service's one answer
for "not yours" and "not there"). Nothing here writes, except ``take_checkpoint`` and
``take_team_checkpoint`` (the page's two actions, for a token with the write scope).

Texts come from the stores as they stored them: secrets were redacted when they were written
(``core/_redact``), and nothing else (tokens, settings) is read.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from phoenix_protocol.agent._replay import event_ms as _ms
from phoenix_protocol.core._clock import Clock, iso_from_ms, system_clock
from phoenix_protocol.core._errors import NotFoundError, PhoenixError

if TYPE_CHECKING:
    from phoenix_protocol.core._config import Config
    from phoenix_protocol.core._home import Home
    from phoenix_protocol.services._agent import Agent

__all__ = [
    "SCHEMA_VERSION",
    "Allowed",
    "agent_view",
    "checkpoint_content",
    "checkpoint_diff",
    "clinic_view",
    "fingerprint",
    "overview",
    "render_markdown",
    "take_checkpoint",
    "take_team_checkpoint",
    "team_view",
    "timeline",
]

SCHEMA_VERSION = 1
"""Of every document here: fields are added, never renamed or removed."""

Allowed = Callable[[str], bool]
"""Whether the reader may see a namespace (``agent:<id>`` or ``team:<id>``)."""

TIMELINE_KINDS = ("tool", "failure", "checkpoint", "session", "drift")
"""The timeline's series: tool calls, failed tool calls, checkpoints, session starts and ends,
drift episodes (the watchdog's ``drift_detected``, a hook's drift warning)."""

MAX_MESSAGES = 200
"""The newest mailbox messages a team view carries."""


def _everyone(_namespace: str) -> bool:
    return True


def _event_kind(event: dict[str, Any]) -> str | None:
    name = event.get("event")
    if name == "heartbeat":
        return "tool"
    if name == "tool_failed":
        return "failure"
    if name == "checkpoint_created":
        return "checkpoint"
    if name in ("session_start", "session_end"):
        return "session"
    if name == "drift_detected" or (name == "drift_check" and event.get("status") == "warn"):
        return "drift"
    return None


def _meta(event: dict[str, Any]) -> dict[str, Any]:
    meta = event.get("meta")
    return meta if isinstance(meta, dict) else {}


def _tool_calls(event: dict[str, Any], last_seq: int) -> tuple[int, int]:
    """``(tool calls, heartbeat seq)`` an event stands for. The ops log keeps one heartbeat per
    ``heartbeat_log_interval`` (and every failure): the calls between two logged ones are known
    from the ``heartbeat_seq`` they carry (a Stop hook counts a beat, not a call)."""
    meta = _meta(event)
    seq = meta.get("heartbeat_seq")
    stop = meta.get("tool") == "(stop)"
    if not isinstance(seq, int) or isinstance(seq, bool):
        return (0 if stop else 1), last_seq
    calls = seq - last_seq if 0 < last_seq < seq else 1
    return max(0, calls - 1 if stop else calls), seq


def timeline(
    events: list[dict[str, Any]], *, buckets: int = 48, beat: tuple[int, str | None] | None = None
) -> dict[str, Any]:
    """The ops events as a chart: ``start``/``end`` (ISO), ``bucket_ms``, ``series`` (per kind
    in ``TIMELINE_KINDS``, a count per bucket; ``tool`` counts every call, failed ones too), and ``marks``: every session start/end and drift
    episode with its time and a label (what the chart draws as lines)."""
    stamped: list[tuple[int, str, dict[str, Any], int]] = []
    last_seq = 0
    for event in events:
        kind = _event_kind(event)
        ms = _ms(event.get("ts")) if kind else None
        if event.get("event") == "session_start":
            last_seq = 0
        if not kind or ms is None:
            continue
        weight = 1
        if kind in ("tool", "failure"):
            weight, last_seq = _tool_calls(event, last_seq)
        if kind == "failure":
            stamped.append((ms, "tool", event, weight))
            weight = 1
        if weight:
            stamped.append((ms, kind, event, weight))
    series: dict[str, list[int]] = {kind: [0] * buckets for kind in TIMELINE_KINDS}
    if not stamped:
        return {"start": None, "end": None, "bucket_ms": 0, "series": series, "marks": [], "total": 0}
    start = min(ms for ms, _, _, _ in stamped)
    end = max(ms for ms, _, _, _ in stamped)
    width = max(1, -(-(end - start + 1) // buckets))
    marks: list[dict[str, Any]] = []
    if beat is not None:  # the calls after the last logged heartbeat: the state's seq knows them
        seq, at = beat
        last_ms = _ms(at)
        if seq > last_seq and last_ms is not None:
            stamped.append((last_ms, "tool", {}, seq - last_seq))
            end = max(end, last_ms)
            width = max(1, -(-(end - start + 1) // buckets))
    for ms, kind, event, weight in stamped:
        series[kind][min(buckets - 1, (ms - start) // width)] += weight
        if kind in ("session", "drift"):
            meta = _meta(event)
            label = str(event.get("event"))
            if kind == "drift":
                label = f"drift: {meta.get('drift') or meta.get('signal') or meta.get('detail') or 'detected'}"
            elif event.get("event") == "session_start" and meta.get("recovered"):
                label = "session_start (recovered)"
            marks.append({"ts": event.get("ts"), "ms": ms, "kind": kind, "label": label})
    return {
        "start": iso_from_ms(start),
        "end": iso_from_ms(end),
        "bucket_ms": width,
        "series": series,
        "marks": marks,
        "total": sum(weight for _, _, _, weight in stamped),
    }


def render_markdown(text: str) -> str:
    """Markdown as HTML (CommonMark with tables; raw HTML in the text is shown as text, links
    only http(s) and mailto)."""
    from markdown_it import MarkdownIt

    md = MarkdownIt("commonmark", {"html": False, "linkify": False}).enable("table")
    return str(md.render(text))


def _agents(home: Home, config: Config) -> list[str]:
    from phoenix_protocol.services._watchdog import known_agents

    return list(known_agents(home, config=config))


def overview(
    home: Home, *, config: Config, clock: Clock = system_clock, allowed: Allowed = _everyone
) -> dict[str, Any]:
    """The landing page: every agent's lanes as ``phx status`` rows (liveness by the watchdog's
    rules), every team with its counts, and the Clinic's episode counts."""
    from phoenix_protocol.services._status import home_rows
    from phoenix_protocol.store._db import is_postgres_url
    from phoenix_protocol.store._teams import list_teams

    rows = [r for r in home_rows(home, config=config, clock=clock) if allowed(f"agent:{r['agent']}")]
    counts: dict[str, int] = {}
    for row in rows:
        counts[row["verdict"]] = counts.get(row["verdict"], 0) + 1
    teams = []
    for team_id in list_teams(home, config=config):
        if not allowed(f"team:{team_id}"):
            continue
        try:
            teams.append(_team_summary(home, config, clock, team_id))
        except PhoenixError as exc:
            teams.append({"team_id": team_id, "problem": " ".join(str(exc).split())})
    episodes = clinic_view(home, config=config, clock=clock, allowed=allowed)["episodes"]
    return {
        "schema_version": SCHEMA_VERSION,
        "checked_at": iso_from_ms(clock.now_ms()),
        "home": home.root,
        "store": "postgresql" if is_postgres_url(config.store) else "sqlite",
        "agents": rows,
        "counts": counts,
        "teams": teams,
        "clinic": {
            "episodes": len(episodes),
            "healed": sum(1 for e in episodes if e["outcome"] == "healed"),
            "gave_up": sum(1 for e in episodes if e["outcome"] == "gave_up"),
        },
    }


def _agent(home: Home, config: Config, clock: Clock, agent_id: str, allowed: Allowed) -> Agent:
    from phoenix_protocol.services._agent import Agent

    if not allowed(f"agent:{agent_id}") or agent_id not in _agents(home, config):
        raise NotFoundError(f"no agent {agent_id!r} in this home.")
    return Agent(agent_id, home, config=config, clock=clock)


def agent_view(
    home: Home, agent_id: str, *, config: Config, clock: Clock = system_clock, allowed: Allowed = _everyone
) -> dict[str, Any]:
    """One agent: its lanes (``phx status`` rows), the brief (Markdown and rendered), the ops
    timeline, its checkpoints (newest first), its sessions with durations, its Clinic episodes."""
    from phoenix_protocol.core._process import hostname
    from phoenix_protocol.services._lanes import lane_views
    from phoenix_protocol.services._status import lane_row

    agent = _agent(home, config, clock, agent_id, allowed)
    now = clock.now_ms()
    here = hostname()
    lanes = [lane_row(view, now_ms=now, this_host=here) for view in (agent, *lane_views(agent))]
    brief = agent.read_brief()
    events, problems = agent.ops.read()
    checkpoints = [info.as_dict() for info in agent.checkpoints.entries()]  # newest first
    sessions = _sessions(agent, now)
    from phoenix_protocol.services._clinic_log import read_episodes

    episodes, _ = read_episodes(agent)
    return {
        "schema_version": SCHEMA_VERSION,
        "agent": agent_id,
        "lanes": lanes,
        "brief": brief,
        "brief_html": render_markdown(brief) if brief else None,
        "timeline": timeline(events, beat=_beat(agent)),
        "recent_events": events[-50:][::-1],
        "log_problems": [str(p) for p in problems],
        "checkpoints": checkpoints,
        "sessions": sessions,
        "clinic": [e.as_dict() for e in reversed(episodes)],
    }


def _beat(agent: Agent) -> tuple[int, str | None] | None:
    """The state's heartbeat seq and last activity (``timeline``'s last calls), if it reads."""
    try:
        state = agent.state.read_if_any()
    except PhoenixError:
        return None
    return None if state is None else (int(state.heartbeat_seq or 0), state.last_active)


def _sessions(agent: Agent, now_ms: int) -> list[dict[str, Any]]:
    """Every session (``phx sessions``: open, ended or interrupted), newest first; an open one's
    ``duration_seconds`` runs to now."""
    out = []
    for record in agent.sessions.entries():
        row = dict(record)
        started = _ms(row.get("started_at"))
        if row.get("status") == "open" and started is not None:
            row["duration_seconds"] = max(0, (now_ms - started) // 1000)
        out.append(row)
    return out[::-1]


def checkpoint_content(
    home: Home,
    agent_id: str,
    name: str,
    *,
    config: Config,
    clock: Clock = system_clock,
    allowed: Allowed = _everyone,
) -> dict[str, Any]:
    """A checkpoint's envelope as stored (``NotFoundError`` when it is not this agent's)."""
    agent = _agent(home, config, clock, agent_id, allowed)
    checkpoint = agent.checkpoints.read(agent.checkpoints.check_name(name))
    return {"schema_version": SCHEMA_VERSION, "agent": agent_id, "name": name, "content": checkpoint.data}


def checkpoint_diff(
    home: Home,
    agent_id: str,
    older: str,
    newer: str,
    *,
    config: Config,
    clock: Clock = system_clock,
    allowed: Allowed = _everyone,
) -> dict[str, Any]:
    """A unified diff of two checkpoints' contents (pretty JSON, keys sorted), and the sections
    that changed."""
    import json

    agent = _agent(home, config, clock, agent_id, allowed)
    docs = []
    for name in (older, newer):
        docs.append(agent.checkpoints.read(agent.checkpoints.check_name(name)).data)
    texts = [json.dumps(d, indent=2, sort_keys=True, ensure_ascii=False, default=str).splitlines() for d in docs]
    lines = list(difflib.unified_diff(texts[0], texts[1], fromfile=older, tofile=newer, lineterm="", n=3))
    sections = sorted(
        key
        for key in set(docs[0]) | set(docs[1])
        if key not in ("name", "seq") and docs[0].get(key) != docs[1].get(key)
    )
    return {
        "schema_version": SCHEMA_VERSION,
        "agent": agent_id,
        "older": older,
        "newer": newer,
        "changed": sections,
        "diff": lines,
    }


def _team(home: Home, config: Config, clock: Clock, team_id: str) -> Any:
    from phoenix_protocol.store._teams import Team

    return Team.open(home, team_id, clock=clock, config=config)


def _columns(tasks: list[dict[str, Any]]) -> dict[str, str]:
    """Each task's board column: ``done`` (completed), ``in_progress``, ``blocked`` (marked so, or
    pending while a task it depends on is not completed) or ``pending``."""
    status = {t["task_id"]: t.get("status") for t in tasks}
    out = {}
    for task in tasks:
        state = str(task.get("status") or "pending")
        waiting = any(status.get(d) != "completed" for d in task.get("dependencies") or [])
        if state == "completed":
            out[task["task_id"]] = "done"
        elif state == "in_progress":
            out[task["task_id"]] = "in_progress"
        elif state == "blocked" or waiting:
            out[task["task_id"]] = "blocked"
        else:
            out[task["task_id"]] = "pending"
    return out


def _acked(cursor: dict[str, Any], seq: int) -> bool:
    if seq <= int(cursor.get("acked_through") or 0):
        return True
    return any(first <= seq <= last for first, last in cursor.get("acked_ranges") or [])


def _team_summary(home: Home, config: Config, clock: Clock, team_id: str) -> dict[str, Any]:
    team = _team(home, config, clock, team_id)
    data = team.read()
    columns = _columns(data.get("tasks") or [])
    liveness = team.liveness_all()
    board: dict[str, int] = {"pending": 0, "in_progress": 0, "blocked": 0, "done": 0}
    for column in columns.values():
        board[column] += 1
    classes: dict[str, int] = {}
    for info in liveness.values():
        classes[info["class"]] = classes.get(info["class"], 0) + 1
    return {
        "team_id": team_id,
        "name": data.get("name"),
        "status": data.get("status"),
        "lead": data.get("lead"),
        "board": board,
        "teammates": len(liveness),
        "liveness": classes,
    }


def team_view(
    home: Home, team_id: str, *, config: Config, clock: Clock = system_clock, allowed: Allowed = _everyone
) -> dict[str, Any]:
    """One team: the board (tasks in columns, dependency edges), the roster with heartbeat class
    and clock-skew flag, the mailbox (newest ``MAX_MESSAGES``; per message who it was delivered
    to and who acknowledged it), consolidation, and the resume probe (zombie, stale teammates)."""
    from phoenix_protocol.services._team_resume import probe

    if not allowed(f"team:{team_id}"):
        raise NotFoundError(f"no team {team_id!r} in this home.")
    team = _team(home, config, clock, team_id)
    data = team.read()
    tasks = list(data.get("tasks") or [])
    columns = _columns(tasks)
    for task in tasks:
        task["column"] = columns[task["task_id"]]
    edges = [{"from": dep, "to": t["task_id"]} for t in tasks for dep in t.get("dependencies") or []]
    liveness = team.liveness_all()
    mailbox = team.mailbox
    roster = []
    names = []
    for mate in team.roster():
        names.append(mate["name"])
        roster.append({**mate, "liveness": liveness.get(mate["name"])})
    readers = sorted(set(names) | set(mailbox.readers()))
    cursors = mailbox.cursor_states(readers)
    messages = []
    for message in mailbox.replay(MAX_MESSAGES):
        record = message.as_dict()
        recipients = [r for r in readers if message.addressed_to(r)]
        record["recipients"] = [
            {
                "name": r,
                "delivered": int(cursors.get(r, {}).get("delivered_seq") or 0) >= message.seq,
                "acked": _acked(cursors.get(r, {}), message.seq),
            }
            for r in recipients
        ]
        messages.append(record)
    threads: dict[str, list[int]] = {}
    for record in messages:
        subject = str(record.get("subject") or "")
        key = subject[4:] if subject.lower().startswith("re: ") else subject
        threads.setdefault(key, []).append(int(record["seq"]))
    try:
        probed: dict[str, Any] | None = probe(team)
    except PhoenixError as exc:
        probed = {"problem": " ".join(str(exc).split())}
    meta = data.get("metadata") if isinstance(data.get("metadata"), dict) else {}
    return {
        "schema_version": SCHEMA_VERSION,
        "team": {k: v for k, v in data.items() if k not in ("tasks", "teammates", "metadata")},
        "tasks": tasks,
        "edges": edges,
        "roster": roster,
        "messages": messages[::-1],
        "threads": [  # the latest activity first; a thread's messages oldest first
            {"subject": s, "seqs": seqs} for s, seqs in sorted(threads.items(), key=lambda kv: -max(kv[1]))
        ],
        "mailbox": mailbox.stats(),
        "consolidation": team.partial_consolidation() or meta.get("consolidation"),
        "probe": probed,
        "claude_code": meta.get("claude_code"),
    }


def clinic_view(
    home: Home, *, config: Config, clock: Clock = system_clock, allowed: Allowed = _everyone
) -> dict[str, Any]:
    """Every Clinic episode of every agent the reader may see, newest first, each visit with its
    diagnosis (root cause, confidence, source), prescription (action) and outcome."""
    from phoenix_protocol.services._agent import Agent
    from phoenix_protocol.services._clinic_log import read_episodes

    episodes: list[dict[str, Any]] = []
    for agent_id in _agents(home, config):
        if not allowed(f"agent:{agent_id}"):
            continue
        found, _ = read_episodes(Agent(agent_id, home, config=config, clock=clock))
        episodes += [e.as_dict() for e in found]
    episodes.sort(key=lambda e: str(e["started_at"]), reverse=True)
    return {"schema_version": SCHEMA_VERSION, "episodes": episodes}


def fingerprint(home: Home, *, config: Config) -> str:
    """A short digest that changes when anything the views show changes: the agents' files
    (size and modification time) and the store (``phoenix.db`` and its WAL; on PostgreSQL the
    newest row of each table the views read)."""
    import hashlib
    import os

    from phoenix_protocol.store._db import is_postgres_url

    parts: list[str] = []
    agents_dir = os.path.join(home.root, "agents")
    try:
        for entry in sorted(os.scandir(agents_dir), key=lambda e: e.name):
            for root, _dirs, files in os.walk(entry.path):
                for name in sorted(files):
                    try:
                        st = os.stat(os.path.join(root, name))
                    except OSError:
                        continue
                    parts.append(f"{root}/{name}:{st.st_size}:{st.st_mtime_ns}")
    except OSError:
        pass
    if is_postgres_url(config.store):
        parts.append(_pg_fingerprint(home, config))
    else:
        for suffix in ("", "-wal"):
            try:
                st = os.stat(os.path.join(home.root, "phoenix.db" + suffix))
                parts.append(f"db{suffix}:{st.st_size}:{st.st_mtime_ns}")
            except OSError:
                continue
    return hashlib.blake2b("\n".join(parts).encode(), digest_size=12).hexdigest()


_PG_FINGERPRINT = """
SELECT
  (SELECT count(*) FROM phx_messages), (SELECT coalesce(max(seq), 0) FROM phx_messages),
  (SELECT count(*) FROM phx_acks), (SELECT coalesce(sum(delivered_seq), 0) FROM phx_cursors),
  (SELECT coalesce(max(ms), 0) FROM phx_heartbeats), (SELECT count(*) FROM phx_heartbeats),
  (SELECT count(*) FROM phx_checkpoints), (SELECT count(*) FROM phx_session_log),
  (SELECT count(*) FROM phx_team_checkpoints),
  (SELECT coalesce(string_agg(md5(CAST(t AS text)), '' ORDER BY team_id, task_id), '') FROM phx_tasks t),
  (SELECT coalesce(string_agg(md5(CAST(m AS text)), '' ORDER BY team_id), '') FROM phx_teams m),
  (SELECT count(*) FROM phx_cc_messages), (SELECT count(redelivered_ms) FROM phx_cc_messages),
  (SELECT count(delivered_ms) FROM phx_cc_messages), (SELECT coalesce(max(updated_ms), 0) FROM phx_cc_teams),
  (SELECT coalesce(max(updated_ms), 0) FROM phx_cc_tasks), (SELECT coalesce(max(updated_ms), 0) FROM phx_cc_members)
"""


def _pg_fingerprint(home: Home, config: Config) -> str:
    from phoenix_protocol.store._db import open_database

    db = open_database(home, config=config)
    try:
        row = db.read(lambda tx: tx.one(_PG_FINGERPRINT))
    except PhoenixError as exc:
        return f"pg-error:{exc}"
    return "pg:" + ":".join(str(v) for v in (row or ()))


def take_checkpoint(
    home: Home, agent_id: str, *, config: Config, clock: Clock = system_clock, allowed: Allowed = _everyone
) -> dict[str, Any]:
    """The page's action for an agent: a routine checkpoint now (what ``phx checkpoint create`` takes)."""
    agent = _agent(home, config, clock, agent_id, allowed)
    info = agent.checkpoints.create("routine")
    return {"schema_version": SCHEMA_VERSION, "agent": agent_id, "checkpoint": info.as_dict()}


def take_team_checkpoint(
    home: Home, team_id: str, *, config: Config, clock: Clock = system_clock, allowed: Allowed = _everyone
) -> dict[str, Any]:
    """The page's action for a team: a full team checkpoint now (``phx team checkpoint``)."""
    if not allowed(f"team:{team_id}"):
        raise NotFoundError(f"no team {team_id!r} in this home.")
    record = _team(home, config, clock, team_id).checkpoint(kind="full", reason="taken from the dashboard")
    return {"schema_version": SCHEMA_VERSION, "team_id": team_id, "checkpoint": record}
