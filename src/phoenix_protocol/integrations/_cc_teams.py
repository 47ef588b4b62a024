"""Claude Code's own agent teams, guarded by Phoenix without being asked (docs/teams.md,
"Claude Code agent teams"; what Claude Code 2.1.330 does on disk and through hooks is written
down in that section).

Recording. Every hook that sees a team (SubagentStart, SubagentStop, TaskCreated, TaskCompleted,
TeammateIdle, the lead's Stop, and PostToolUse of the team's tools: ``SendMessage``,
``TaskCreate``, ``TaskUpdate``, ``Agent``, …) finds the session's team under
``~/.claude/teams/`` (``find_team``) and records it in the home's database
(``store._cc_teams``): the roster with each teammate's spawn prompt (``config.json``) and
transcript (``subagents/*.meta.json``, SubagentStop), the task list (``tasks/<team>/*.json``,
TaskCreated, TaskUpdate's input), and every message: ``SendMessage``'s response (for the lead and
for the teammates: its ``msg_id`` and routing) and, as a fallback, the unread entries of the
inbox files. Claude Code's ids are kept. The PostToolUse heartbeat comes here only for those
tools (``TEAM_TOOLS``: one set lookup for every other call), and it and the lead's Stop record in
a detached child (``_hooks._record_team``): the hook returns at once.

Recovery (``recovery_context``, from SessionStart). A team whose lead died (its process is gone,
no SessionEnd came) is reported to the next lead of the project: resumed (``--resume``: the same
session) or fresh. Its context lists the teammates that died (name, role, spawn prompt,
transcript), each task's owner and status from before the crash (Claude Code resets them on
resume), and the messages sent but never delivered (a message to the lead that its transcript
does not hold; one to a teammate that its transcript does not hold). The messages to the lead
are queued for the new lead's inbox and written there by its first Stop hook (the lead is idle
at its prompt then; ``deliver_pending``), where Claude Code picks them up within a second and
shows them to the model marked unverified, as the context announced. A fresh session's
predecessor team is ``archived`` (offered once); a resumed one ``recovered``.

Guardrails (``task_completed``, ``teammate_idle``; optional): TaskCompleted refuses a completion
while the check command exits non-zero, TeammateIdle sends a teammate back to work while it owns
a task in progress (at most ``claude_team_keep_busy_limit`` times in a row for one task). Both
refuse by raising ``HookBlock``: the hook exits 2 with the reason on stderr, which Claude Code
gives the model.
"""

from __future__ import annotations

import contextlib
import os
import time

from phoenix_protocol.core._text import one_line
from phoenix_protocol.integrations._clients import CLAUDE_CODE, TEAM_TOOLS, claude_team_name
from phoenix_protocol.integrations._hooks import HookBlock

TYPE_CHECKING = False  # not typing's: it imports re, which a team tool's hook would pay for
if TYPE_CHECKING:
    from collections.abc import Iterator
    from typing import Any

    from phoenix_protocol.core._config import Config
    from phoenix_protocol.core._home import Home
    from phoenix_protocol.services._agent import Agent
    from phoenix_protocol.store._cc_teams import ClaudeTeamStore

__all__ = [
    "LEAD",
    "TEAM_TOOLS",
    "HookBlock",
    "deliver_pending",
    "describe_team",
    "find_team",
    "list_claude_teams",
    "on_event",
    "record",
    "recovery_context",
    "session_ended",
    "set_guardrails",
]

LEAD = "team-lead"
"""The lead's name in Claude Code's teams (2.1.330)."""
REDELIVER_MARK = "cc-redeliver"
"""In the session's lane folder: messages wait for this session's lead inbox (``deliver_pending``)."""
_NAME_OK = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.-")
_MAX_FILE = 8 * 1024 * 1024
_MAX_TRANSCRIPT = 64 * 1024 * 1024
_PROMPT_CHARS = 2000
_CONTENT_CHARS = 1500
_LOCK_STALE_S = 10.0  # proper-lockfile's default, which Claude Code's inbox lock uses
_LOCK_WAIT_S = 3.0
_PROTOCOL_KINDS = frozenset({"idle_notification", "task_assignment", "shutdown_request", "shutdown_response"})


# -- Claude Code's files ------------------------------------------------------------------------


def _safe_name(value: object) -> str | None:
    if isinstance(value, str) and 0 < len(value) <= 128 and value[0] not in ".-" and set(value) <= _NAME_OK:
        return value
    return None


def claude_dir() -> str:
    """Claude Code's folder (``$CLAUDE_CONFIG_DIR``, else ``~/.claude``)."""
    return CLAUDE_CODE.user_config_dir()


def _load(path: str, limit: int = _MAX_FILE) -> Any:
    """A JSON file of Claude Code's, or ``None`` (missing, unreadable, not JSON)."""
    from phoenix_protocol.core._durable import read_bytes
    from phoenix_protocol.core._errors import PhoenixError
    from phoenix_protocol.core._jsonio import JSONError, loads

    try:
        data = read_bytes(path, limit=limit)
        return loads(data) if data else None
    except (PhoenixError, JSONError, OSError):
        return None


def _team_dir(team: str) -> str:
    return os.path.join(claude_dir(), "teams", team)


def find_team(payload: dict[str, Any], *, scan: bool = True) -> str | None:
    """The Claude Code team of the hook's session: the payload's ``team_name``, else
    ``session-<first 8 hex of the session id>`` (2.1.330's one team per interactive session), else
    (with ``scan``) the team whose ``config.json`` names the session as its lead; ``None`` when
    the session runs no team (no ``teams/<name>/config.json``)."""
    named = _safe_name(payload.get("team_name"))
    if named and os.path.isfile(os.path.join(_team_dir(named), "config.json")):
        return named
    session = payload.get("session_id")
    if not isinstance(session, str) or not session:
        return None
    guess = _safe_name(claude_team_name(session))
    if guess and os.path.isfile(os.path.join(_team_dir(guess), "config.json")):
        return guess
    if not scan:
        return None
    root = os.path.join(claude_dir(), "teams")
    with contextlib.suppress(OSError):
        for name in sorted(os.listdir(root))[:200]:
            if _safe_name(name):
                config = _load(os.path.join(root, name, "config.json"))
                if isinstance(config, dict) and config.get("leadSessionId") == session:
                    return name
    return None


def _str(value: object) -> str | None:
    return value if isinstance(value, str) and value else None


def _ms(value: object) -> int | None:
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, str) and value:
        from phoenix_protocol.core._clock import ms_from_iso

        with contextlib.suppress(ValueError):
            return ms_from_iso(value)
    return None


def _redacted(value: object, limit: int) -> str | None:
    if not isinstance(value, str) or not value:
        return None
    from phoenix_protocol.core._redact import redact

    return redact(value[: limit * 4])[:limit]


def _transcripts(lead_transcript: str | None) -> dict[str, str]:
    """Teammate name → transcript, from ``<lead transcript without .jsonl>/subagents/*.meta.json``."""
    if not lead_transcript or not lead_transcript.endswith(".jsonl"):
        return {}
    folder = os.path.join(lead_transcript[: -len(".jsonl")], "subagents")
    found: dict[str, str] = {}
    with contextlib.suppress(OSError):
        for entry in sorted(os.listdir(folder))[:500]:
            if entry.endswith(".meta.json"):
                meta = _load(os.path.join(folder, entry), 1024 * 1024)
                name = _safe_name(meta.get("name")) if isinstance(meta, dict) else None
                if name:
                    found[name] = os.path.join(folder, entry[: -len(".meta.json")] + ".jsonl")
    return found


def _members(config: dict[str, Any], transcripts: dict[str, str]) -> list[dict[str, Any]]:
    lead_agent = config.get("leadAgentId")
    out: list[dict[str, Any]] = []
    for member in config.get("members") or []:
        if not isinstance(member, dict):
            continue
        name = _safe_name(member.get("name"))
        if name is None:
            continue
        lead = member.get("agentId") == lead_agent or name == LEAD
        out.append(
            {
                "name": name,
                "agent_id": _str(member.get("agentId")),
                "agent_type": _str(member.get("agentType")),
                "role": "lead" if lead else (_str(member.get("agentType")) or "teammate"),
                "model": _str(member.get("model")),
                "color": _str(member.get("color")),
                "cwd": _str(member.get("cwd")),
                "prompt": _redacted(member.get("prompt"), 100_000),
                "joined_ms": _ms(member.get("joinedAt")),
                "transcript": transcripts.get(name),
            }
        )
    return out


def _task(raw: dict[str, Any]) -> dict[str, Any] | None:
    task_id = raw.get("id", raw.get("taskId", raw.get("task_id")))
    if isinstance(task_id, int) and not isinstance(task_id, bool):
        task_id = str(task_id)
    if _safe_name(task_id) is None:
        return None
    task: dict[str, Any] = {"id": task_id}
    for ours, theirs in (("subject", "subject"), ("description", "description"), ("active_form", "activeForm")):
        text = _redacted(raw.get(theirs), 4000)
        if text:
            task[ours] = text
    status = raw.get("status")
    if isinstance(status, str) and status in ("pending", "in_progress", "completed", "deleted"):
        task["status"] = status
    if "owner" in raw:
        task["owner"] = _safe_name(raw.get("owner"))
    for ours, theirs in (("blocks", "blocks"), ("blocked_by", "blockedBy")):
        value = raw.get(theirs)
        if isinstance(value, list):
            task[ours] = [str(v) for v in value if isinstance(v, str | int)][:100]
    return task


def _task_files(team: str) -> list[dict[str, Any]]:
    folder = os.path.join(claude_dir(), "tasks", team)
    found: list[dict[str, Any]] = []
    with contextlib.suppress(OSError):
        for entry in sorted(os.listdir(folder))[:2000]:
            if entry.endswith(".json") and not entry.startswith("."):
                raw = _load(os.path.join(folder, entry), 1024 * 1024)
                task = _task(raw) if isinstance(raw, dict) else None
                if task is not None:
                    found.append(task)
    return found


def _kind(text: str) -> str:
    """``message``, or the ``type`` of a structured message (a JSON object inside ``text``)."""
    if text.startswith("{") and '"type"' in text[:200]:
        from phoenix_protocol.core._jsonio import JSONError, loads

        with contextlib.suppress(JSONError, ValueError):
            inner = loads(text)
            if isinstance(inner, dict) and isinstance(inner.get("type"), str):
                return _safe_name(inner["type"]) or "structured"
    return "message"


def _inbox_messages(team: str) -> list[dict[str, Any]]:
    """The entries waiting in the team's inbox files (delivered ones are taken off the files)."""
    folder = os.path.join(_team_dir(team), "inboxes")
    found: list[dict[str, Any]] = []
    with contextlib.suppress(OSError):
        for entry in sorted(os.listdir(folder))[:200]:
            recipient = _safe_name(entry[: -len(".json")]) if entry.endswith(".json") else None
            if recipient is None:
                continue
            items = _load(os.path.join(folder, entry))
            for item in items if isinstance(items, list) else []:
                message = _inbox_message(recipient, item)
                if message is not None:
                    found.append(message)
    return found


def _inbox_message(recipient: str, item: object) -> dict[str, Any] | None:
    if not isinstance(item, dict) or item.get("read") is True:
        return None
    msg_id, sender, text = _str(item.get("msg_id")), _str(item.get("from")), item.get("text")
    if msg_id is None or sender is None or not isinstance(text, str):
        return None
    return {
        "msg_id": msg_id,
        "sender": _safe_name(sender) or "unknown",
        "recipient": recipient,
        "kind": _kind(text),
        "summary": _redacted(item.get("summary"), 500),
        "content": _redacted(text, 100_000) or "",
        "timestamp": _str(item.get("timestamp")),
        "sent_ms": _ms(item.get("timestamp")),
        "source": "inbox",
    }


def _tool_message(payload: dict[str, Any]) -> dict[str, Any] | None:
    """The message a ``SendMessage`` call sent: its id and sender from the response (``{success,
    msg_id, routing: {sender, target, summary, content}}``), its text and reader from the input
    (``{to, message, summary}``)."""
    response = payload.get("tool_response")
    if not isinstance(response, dict) or response.get("success") is False:
        return None
    routing: dict[str, Any] = response["routing"] if isinstance(response.get("routing"), dict) else {}
    tool_input: dict[str, Any] = payload["tool_input"] if isinstance(payload.get("tool_input"), dict) else {}
    msg_id = _str(response.get("msg_id"))
    # The input holds the whole message; the routing's ``content`` is cut (2.1.330: about 40
    # characters and "…"), and names go with an "@" ("@team-lead").
    content = tool_input.get("message") if isinstance(tool_input.get("message"), str) else routing.get("content")
    target = (_str(tool_input.get("to")) or _str(routing.get("target")) or "").lstrip("@") or None
    if msg_id is None or not isinstance(content, str) or target is None:
        return None
    sender = (_str(routing.get("sender")) or _str(payload.get("teammate_name")) or LEAD).lstrip("@")
    return {
        "msg_id": msg_id,
        "sender": _safe_name(sender) or "unknown",
        "recipient": _safe_name(target) or ("*" if target == "*" else "unknown"),
        "kind": _kind(content),
        "summary": _redacted(routing.get("summary", tool_input.get("summary")), 500),
        "content": _redacted(content, 100_000) or "",
        "source": "tool",
    }


# -- recording ----------------------------------------------------------------------------------


def _store(agent: Agent) -> ClaudeTeamStore:
    return _home_store(agent.home, agent.config)


def _home_store(home: Home, config: Config | None) -> ClaudeTeamStore:
    from phoenix_protocol.store._cc_teams import ClaudeTeamStore
    from phoenix_protocol.store._db import open_database

    return ClaudeTeamStore(open_database(home, config))


# -- for people (phx team claude) ---------------------------------------------------------------


def list_claude_teams(home: Home, *, config: Config | None = None) -> list[dict[str, Any]]:
    """The Claude Code teams recorded for this home's project, oldest first, each with how many
    teammates, tasks and messages it has."""
    store = _home_store(home, config)
    counts = store.counts(home.root, besides=LEAD)
    out = []
    for team in store.teams(home.root):
        counted = counts.get(team["team_name"], {})
        out.append({**team, **{key: counted.get(key, 0) for key in ("teammates", "tasks", "messages")}})
    return out


def describe_team(home: Home, team: str, *, config: Config | None = None) -> dict[str, Any]:
    """One recorded Claude Code team: its row, roster, tasks, messages and guardrails."""
    from phoenix_protocol.core._errors import NotFoundError

    store = _home_store(home, config)
    found = store.team(team)
    if found is None or found["project"] != home.root:
        known = ", ".join(t["team_name"] for t in store.teams(home.root)) or "none"
        raise NotFoundError(f"no Claude Code team {team!r} recorded in {home.root} (recorded: {known}).")
    return {
        **found,
        "members": store.members(team),
        "tasks": store.tasks(team),
        "messages": store.messages(team),
        "guardrails": _guardrails(found, config),
    }


def _guardrails(team: dict[str, Any] | None, config: Config | None) -> dict[str, Any]:
    from phoenix_protocol.core._config import Config as _Config

    config = config if config is not None else _Config()
    own = ((team or {}).get("record") or {}).get("settings") or {}
    return {
        "check_command": own.get("check_command", config.claude_team_check_command) or "",
        "keep_busy": bool(own.get("keep_busy", config.claude_team_keep_busy)),
        "keep_busy_limit": int(own.get("keep_busy_limit", config.claude_team_keep_busy_limit)),
        "own": dict(own),
    }


def set_guardrails(home: Home, team: str, changes: dict[str, Any], *, config: Config | None = None) -> dict[str, Any]:
    """Set the team's own guardrails (``check_command``: a shell line, ``""`` for none;
    ``keep_busy``; ``keep_busy_limit``), over the project's settings; ``None`` removes the
    team's own value. Returns the guardrails in force."""
    from phoenix_protocol.core._clock import system_clock
    from phoenix_protocol.core._errors import UsageError

    found = describe_team(home, team, config=config)
    own = dict(found["record"].get("settings") or {})
    for key, value in changes.items():
        if key not in ("check_command", "keep_busy", "keep_busy_limit"):
            raise UsageError(f"unknown guardrail {key!r}")
        if value is None:
            own.pop(key, None)
        else:
            own[key] = value
    _home_store(home, config).update_record(team, {"settings": own}, now_ms=system_clock.now_ms())
    return _guardrails({"record": {"settings": own}}, config)


def _lead_process(agent: Agent, session: object) -> dict[str, Any] | None:
    """The agent process Phoenix recorded for the lead's ``session`` (its SessionStart), or
    ``None`` when the state now holds another session (a late write of a dead lead's, after the
    next session started: it must not pass for the team running again)."""
    state = agent.state.read_or_none()
    if state is None or not state.pid or state.session_id != session:
        return None
    return {"pid": state.pid, "start_time": state.pid_start_time, "host": state.host}


def record(agent: Agent, event: str, payload: dict[str, Any]) -> str | None:
    """Record what the hook ``event`` shows of the session's team (its files, plus what the
    payload adds); the team's name, or ``None`` when the session runs none."""
    team = find_team(payload)
    if team is None:
        return None
    now = agent.clock.now_ms()
    store = _store(agent)
    config = _load(os.path.join(_team_dir(team), "config.json"))
    config = config if isinstance(config, dict) else {}
    lead_session = _str(config.get("leadSessionId"))
    transcript = _str(payload.get("transcript_path"))
    binding: dict[str, Any] = {"claude_dir": claude_dir(), "cc_created_ms": _ms(config.get("createdAt"))}
    if transcript and lead_session and os.path.basename(transcript) == lead_session + ".jsonl":
        binding["lead_transcript"] = transcript
    if payload.get("session_id") == lead_session:  # in-process teammates run in the lead's process
        binding["lead_process"] = _lead_process(agent, lead_session)
    tasks = _task_files(team)
    if event in ("task-created", "task-completed"):
        task = _task(
            {"id": payload.get("task_id"), "subject": payload.get("task_subject"),
             "description": payload.get("task_description")}
        )  # fmt: skip
        if task is not None:
            if event == "task-completed":
                # Fired before the completion takes effect (a hook may refuse it; 2.1.330 also fires
                # it when a teammate that owns the task goes idle): the status stays the file's.
                task["completion_asked_ms"] = now
            tasks.append(task)
    tool = payload.get("tool_name")
    tool_input = payload.get("tool_input") if isinstance(payload.get("tool_input"), dict) else {}
    if tool == "TaskUpdate" and isinstance(tool_input, dict):
        task = _task({"id": tool_input.get("taskId"), **{k: v for k, v in tool_input.items() if k != "taskId"}})
        if task is not None:
            tasks.append(task)
    messages = _inbox_messages(team)
    if tool == "SendMessage":
        sent = _tool_message(payload)
        if sent is not None:
            messages.insert(0, sent)

    def write(tx: Any) -> None:  # one transaction: one commit for all of it
        bound = store.bind(
            team, project=agent.home.root, lead_session_id=lead_session, record=binding, now_ms=now, tx=tx
        )
        members = _members(config, _transcripts(bound.get("lead_transcript")))
        if event == "subagent-stop":
            name = _safe_name(payload.get("teammate_name")) or _name_of_agent(payload, members)
            if name:
                members.append(
                    {"name": name, "transcript": _str(payload.get("agent_transcript_path")), "last_stop_ms": now}
                )
        spawned = _spawned(payload)
        if spawned is not None:
            members.append(spawned)
        store.upsert_members(team, members, now_ms=now, tx=tx)
        store.upsert_tasks(team, tasks, now_ms=now, tx=tx)
        store.record_messages(team, messages, now_ms=now, tx=tx)

    store.transaction(write)
    return team


def _name_of_agent(payload: dict[str, Any], members: list[dict[str, Any]]) -> str | None:
    """The teammate a SubagentStop is about. 2.1.330 gives an in-process teammate's hooks
    ``agent_id: "a<name>-<16 hex>"`` and ``agent_type: <name>``; config.json calls it
    ``<name>@<team>``."""
    names = {str(m["name"]) for m in members}
    agent_type = payload.get("agent_type")
    if isinstance(agent_type, str) and agent_type in names:
        return agent_type
    agent_id = payload.get("agent_id")
    if not isinstance(agent_id, str) or not agent_id:
        return None
    for member in members:
        if member.get("agent_id") == agent_id or member.get("session_agent_id") == agent_id:
            return str(member["name"])
    if "@" in agent_id:
        return _safe_name(agent_id.split("@", 1)[0])
    head = agent_id[1:].rsplit("-", 1)[0] if agent_id.startswith("a") and "-" in agent_id else ""
    return head if head in names else None


def _spawned(payload: dict[str, Any]) -> dict[str, Any] | None:
    """The teammate an ``Agent`` call spawned (its response: ``{status: "teammate_spawned",
    name, prompt, agent_id, teammate_id, model, color, team_name, …}``), before config.json has it."""
    if payload.get("tool_name") != "Agent":
        return None
    response = payload.get("tool_response")
    if not isinstance(response, dict) or response.get("status") != "teammate_spawned":
        return None
    name = _safe_name(response.get("name"))
    if name is None:
        return None
    return {
        "name": name,
        "agent_id": _str(response.get("teammate_id")),
        "session_agent_id": _str(response.get("agent_id")),
        "model": _str(response.get("model")),
        "color": _str(response.get("color")),
        "prompt": _redacted(response.get("prompt"), 100_000),
    }


def on_event(agent: Agent, event: str, payload: dict[str, Any]) -> None:
    """SubagentStart, SubagentStop, TaskCreated, TaskCompleted, TeammateIdle: record the team,
    then apply the guardrails (``HookBlock``)."""
    team = record(agent, event, payload)
    if team is None:
        return
    if event == "task-completed":
        task_completed(agent, team, payload)
    elif event == "teammate-idle":
        teammate_idle(agent, team, payload)


def session_ended(agent: Agent, payload: dict[str, Any]) -> None:
    """SessionEnd of a lead: its team ended cleanly (nothing to recover)."""
    session = payload.get("session_id")
    if not isinstance(session, str) or not session:
        return
    store = _store(agent)
    for team in store.teams(agent.home.root, ["live"]):
        if team["lead_session_id"] == session:
            store.set_state(team["team_name"], "ended", now_ms=agent.clock.now_ms(), only_from="live")


# -- guardrails ---------------------------------------------------------------------------------


def _settings(agent: Agent, team: str) -> dict[str, Any]:
    """The team's guardrails: the project's settings, overridden by the team's own (``settings``
    in its record: ``phx team claude TEAM --check-command …``)."""
    return _guardrails(_store(agent).team(team), agent.config)


def task_completed(agent: Agent, team: str, payload: dict[str, Any]) -> None:
    """Refuse the completion while the team's check command is red (exit 2, stderr to the model)."""
    settings = _settings(agent, team)
    command = settings["check_command"]
    if not command:
        return
    import subprocess

    cwd = CLAUDE_CODE.project_dir(payload) or agent.home.project_root or os.getcwd()
    try:
        done = subprocess.run(  # noqa: S602 - the user's configured check command, run as a shell line
            command,
            shell=True,
            cwd=cwd,
            capture_output=True,
            timeout=float(agent.config.claude_team_check_timeout),
            stdin=subprocess.DEVNULL,
            check=False,
        )
    except subprocess.TimeoutExpired:
        agent.record("claude_team_check_timeout", "warn", {"team": team, "task": _str(payload.get("task_id"))})
        return
    task_id = _safe_name(str(payload.get("task_id", ""))) or "?"
    now = agent.clock.now_ms()
    check = "green" if done.returncode == 0 else "red"
    _store(agent).upsert_tasks(team, [{"id": task_id, "check": check, "check_ms": now}], now_ms=now)
    if done.returncode == 0:
        return
    from phoenix_protocol.core._redact import redact

    output = redact((done.stdout + done.stderr).decode("utf-8", "replace"))[-1500:].strip()
    agent.record("claude_team_completion_refused", "ok", {"team": team, "task": task_id, "exit": done.returncode})
    raise HookBlock(
        f"Phoenix Protocol: task {task_id} cannot be completed yet: the team's check command `{command}` "
        f"exited {done.returncode}. Fix what it reports, then complete the task again."
        + (f"\nIts output ends with:\n{output}" if output else "")
    )


def teammate_idle(agent: Agent, team: str, payload: dict[str, Any]) -> None:
    """Keep a teammate working while it owns a task in progress (exit 2: stderr is its next turn),
    at most ``keep_busy_limit`` times in a row for one task."""
    settings = _settings(agent, team)
    name = _safe_name(payload.get("teammate_name"))
    if not settings["keep_busy"] or name is None:
        return
    store = _store(agent)
    owned = [t for t in store.tasks(team) if t.get("owner") == name and t.get("status") == "in_progress"]
    found = store.team(team) or {}
    nudges = dict(found.get("record", {}).get("nudges") or {})
    if not owned:
        if name in nudges:
            nudges.pop(name)
            store.update_record(team, {"nudges": nudges}, now_ms=agent.clock.now_ms())
        return
    task = owned[0]
    last = nudges.get(name) or {}
    count = int(last.get("count", 0)) + 1 if last.get("task") == task["id"] else 1
    if count > settings["keep_busy_limit"]:
        return
    nudges[name] = {"task": task["id"], "count": count}
    store.update_record(team, {"nudges": nudges}, now_ms=agent.clock.now_ms())
    agent.record("claude_team_kept_busy", "ok", {"team": team, "teammate": name, "task": task["id"], "count": count})
    subject = task.get("subject") or ""
    raise HookBlock(
        f"Phoenix Protocol: you still own task {task['id']} ({subject}), in progress. Keep working on it; "
        "when it is done, mark it completed with TaskUpdate (or give it back: owner empty, status pending)."
    )


# -- recovery -----------------------------------------------------------------------------------


def _lead_alive(agent: Agent, team: dict[str, Any]) -> bool | None:
    process = team["record"].get("lead_process")
    if not isinstance(process, dict) or not process.get("pid"):
        return None
    from phoenix_protocol.core._process import liveness

    return liveness(
        process.get("pid"),
        process.get("start_time"),
        process.get("host"),
        tolerance=agent.config.process_start_tolerance,
    )


def _escaped(text: str) -> str:
    """``text`` as Claude Code's JSON lines hold it (``JSON.stringify``: UTF-8, not ASCII-escaped)."""
    import json

    return json.dumps(text, ensure_ascii=False)[1:-1]


def _holds(transcript: str | None, contents: list[str]) -> set[str]:
    """Which of ``contents`` the transcript holds (as its JSON lines write them, or plainly)."""
    if not transcript or not contents:
        return set()
    from phoenix_protocol.core._durable import read_range

    with contextlib.suppress(Exception):
        size = os.path.getsize(transcript)
        data = read_range(transcript, max(0, size - _MAX_TRANSCRIPT), limit=_MAX_TRANSCRIPT + 1)
        text = (data or b"").decode("utf-8", "replace")
        return {c for c in contents if c and (_escaped(c) in text or c in text)}
    return set()


def _report(agent: Agent, store: ClaudeTeamStore, team: dict[str, Any]) -> dict[str, Any]:
    """What the dead lead's team held: its teammates, tasks and undelivered messages."""
    name = team["team_name"]
    now = agent.clock.now_ms()
    store.record_messages(name, _inbox_messages(name), now_ms=now)  # what still waits in the files
    members = store.members(name)
    teammates = [m for m in members if m.get("role") != "lead" and m["name"] != LEAD]
    transcripts = {m["name"]: m.get("transcript") for m in members}
    transcripts[LEAD] = team["record"].get("lead_transcript")
    messages = [
        m
        for m in store.messages(name)
        if m["kind"] == "message" and m["delivered_ms"] is None and m["redelivered_ms"] is None
    ]
    by_reader: dict[str, list[dict[str, Any]]] = {}
    for message in messages:
        by_reader.setdefault(message["recipient"], []).append(message)
    delivered: list[str] = []
    undelivered: list[dict[str, Any]] = []
    for reader, waiting in by_reader.items():
        held = _holds(transcripts.get(reader), [m.get("content") or "" for m in waiting])
        for message in waiting:
            (delivered.append(message["msg_id"]) if message.get("content") in held else undelivered.append(message))
    store.mark_delivered(name, delivered, now_ms=now)
    tasks = [t for t in store.tasks(name) if t.get("status") != "deleted"]
    return {"team": name, "teammates": teammates, "tasks": tasks, "undelivered": undelivered}


def _context_block(report: dict[str, Any], *, resumed: bool, lead_session: str | None, redelivered: int) -> str:
    team = report["team"]
    how = (
        "this session's previous run (the team's lead) was killed"
        if resumed
        else f"the lead of team {team} (session {lead_session}) died without ending its session"
    )
    lines = [
        "=== CLAUDE CODE TEAM RECOVERED (Phoenix Protocol) ===",
        f"Agent team {team}: {how}. Phoenix recorded the team as it ran; Claude Code lost part of it "
        + (
            "(on resume it drops the teammates, resets their tasks and deletes the inboxes)."
            if resumed
            else "(this new session starts a new, empty team)."
        ),
    ]
    # The context is cut at brief_max_chars (10,000): many teammates share the prompts' room.
    prompt_chars = max(300, min(_PROMPT_CHARS, 5000 // max(1, len(report["teammates"]))))
    if report["teammates"]:
        lines.append(
            "Teammates that died with the lead (respawn each one you still need with the Agent tool, "
            "name and prompt as below):"
        )
        for mate in report["teammates"]:
            lines.append(
                f"- {mate['name']} (role {mate.get('role') or mate.get('agent_type') or 'teammate'}"
                + (f", model {mate['model']}" if mate.get("model") else "")
                + f"); transcript: {mate.get('transcript') or 'unknown'}"
            )
            lines.append(f"  spawn prompt: {one_line(mate.get('prompt') or '(not recorded)', prompt_chars)}")
    if report["tasks"]:
        lines.append("Tasks as they stood before the crash (Claude Code may show other owners and statuses now):")
        for task in report["tasks"]:
            deps = ", ".join(task.get("blocked_by") or [])
            lines.append(
                f"- task {task['id']} [{task.get('status', 'pending')}, owner {task.get('owner') or 'none'}]: "
                f"{one_line(task.get('subject'), 200)}" + (f" (blocked by {deps})" if deps else "")
            )
    if report["undelivered"]:
        lines.append("Messages that were sent but never delivered:")
        for message in report["undelivered"]:
            summary = f" ({one_line(message['summary'], 120)})" if message.get("summary") else ""
            lines.append(
                f"- from {message['sender']} to {message['recipient']}{summary}, msg {message['msg_id']}: "
                f"{one_line(message.get('content'), _CONTENT_CHARS)}"
            )
    if redelivered:
        lines.append(
            f"Phoenix will deliver the {redelivered} message(s) addressed to {LEAD} into your inbox again once "
            'this turn ends. They arrive marked verified="false" because Phoenix, not the teammate, wrote them '
            "into the inbox: they are the teammates' own messages, recorded when they were sent; trust them."
        )
    if not resumed:
        lines.append(
            f"That team's task list is still on disk (~/.claude/tasks/{team}); "
            "recreate the tasks you still need in this session's list."
        )
    return "\n".join(lines)


def recovery_context(agent: Agent, payload: dict[str, Any], source: str) -> str | None:
    """SessionStart: the teams of this project whose lead died, told to this (new or resumed)
    lead once; their undelivered messages to the lead queued for its inbox. ``None``: none."""
    session = payload.get("session_id")
    if not isinstance(session, str) or not session:
        return None
    store = _store(agent)
    blocks: list[str] = []
    queued = 0
    for team in store.teams(agent.home.root, ["live"]):
        lead = team["lead_session_id"]
        resumed = lead == session
        if resumed and source != "resume":
            continue  # a compaction or /clear of the running lead
        alive = _lead_alive(agent, team)
        if alive or (alive is None and not resumed):
            continue  # a lead still running (or one this machine cannot judge)
        report = _report(agent, store, team)
        moved = store.set_state(
            team["team_name"],
            "recovered" if resumed else "archived",
            now_ms=agent.clock.now_ms(),
            only_from="live",
            record={
                "recovery": {
                    "by_session": session,
                    "at_ms": agent.clock.now_ms(),
                    "source": source,
                    "undelivered": [m["msg_id"] for m in report["undelivered"]],
                }
            },
        )
        if not moved:
            continue  # another session took it
        to_lead = [m["msg_id"] for m in report["undelivered"] if m["recipient"] == LEAD]
        store.queue_redelivery(team["team_name"], to_lead, to=session)
        queued += len(to_lead)
        blocks.append(_context_block(report, resumed=resumed, lead_session=lead, redelivered=len(to_lead)))
        agent.record(
            "claude_team_recovered",
            "ok",
            {
                "team": team["team_name"],
                "resumed": resumed,
                "teammates": len(report["teammates"]),
                "tasks": len(report["tasks"]),
                "undelivered": len(report["undelivered"]),
            },
        )
    if queued:
        from phoenix_protocol.core._durable import atomic_write

        atomic_write(os.path.join(agent.state.directory, REDELIVER_MARK), session.encode("utf-8", "replace"))
    return "\n\n".join(blocks) if blocks else None


# -- delivering again ---------------------------------------------------------------------------


@contextlib.contextmanager
def _inbox_lock(path: str) -> Iterator[None]:
    """Claude Code's lock of an inbox file: the directory ``<inbox>.lock`` (proper-lockfile's
    protocol, which its mailbox uses: mkdir to take, rmdir to release, stale after 10 s without
    a touch). Waits up to ``_LOCK_WAIT_S``; raises ``TimeoutError``."""
    lock = path + ".lock"
    deadline = time.monotonic() + _LOCK_WAIT_S
    while True:
        try:
            os.mkdir(lock, 0o700)
            break
        except FileExistsError:
            with contextlib.suppress(OSError):
                if time.time() - os.stat(lock).st_mtime > _LOCK_STALE_S:
                    os.rmdir(lock)
                    continue
            if time.monotonic() > deadline:
                raise TimeoutError(f"{lock} is held") from None
            time.sleep(0.05)
    try:
        yield
    finally:
        with contextlib.suppress(OSError):
            os.rmdir(lock)


def deliver_pending(agent: Agent, payload: dict[str, Any]) -> int:
    """The lead's Stop (it waits at its prompt): write the messages queued for this session into
    its inbox file, where Claude Code delivers them within a second. How many were written."""
    mark = os.path.join(agent.state.directory, REDELIVER_MARK)
    session = payload.get("session_id")
    if not isinstance(session, str) or not session or payload.get("agent_id"):
        return 0
    store = _store(agent)
    pending = store.pending_redelivery(session)
    if not pending:
        with contextlib.suppress(OSError):
            os.unlink(mark)
        return 0
    team = find_team(payload) or _safe_name(claude_team_name(session))
    if team is None:
        return 0
    from phoenix_protocol.core._clock import iso_from_ms
    from phoenix_protocol.core._durable import atomic_write, ensure_dir
    from phoenix_protocol.core._jsonio import dumps_line

    folder = os.path.join(_team_dir(team), "inboxes")
    ensure_dir(folder)
    path = os.path.join(folder, LEAD + ".json")
    with _inbox_lock(path):
        entries = _load(path)
        entries = entries if isinstance(entries, list) else []
        present = {e.get("msg_id") for e in entries if isinstance(e, dict)}
        for message in pending:
            if message["msg_id"] in present:
                continue
            entry: dict[str, Any] = {
                "from": message["sender"],
                "text": message.get("content") or "",
                "timestamp": iso_from_ms(int(message.get("sent_ms") or agent.clock.now_ms())),
                "msgV": 1,
                "msg_id": message["msg_id"],
                "type": "message",
                "read": False,
            }
            if message.get("summary"):
                entry["summary"] = message["summary"]
            entries.append(entry)
        atomic_write(path, dumps_line(entries).encode("utf-8"))
    now = agent.clock.now_ms()
    by_team: dict[str, list[str]] = {}
    for message in pending:
        by_team.setdefault(message["team_name"], []).append(message["msg_id"])
    for name, ids in by_team.items():
        store.mark_redelivered(name, ids, now_ms=now)
    with contextlib.suppress(OSError):
        os.unlink(mark)
    agent.record("claude_team_redelivered", "ok", {"team": team, "messages": len(pending)})
    return len(pending)
