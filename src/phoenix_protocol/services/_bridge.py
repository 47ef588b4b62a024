"""The memory bridge's operations (seed 002): one function per endpoint of ``phx serve``.

Each takes the library's objects (an ``Agent``, a ``Team``, the memory store) and plain values,
calls the same library functions as the CLI, and returns JSON-ready data. No HTTP here: the
FastAPI layer (``server/``) validates input, authorizes, and turns ``PhoenixError`` into problem
details; ``phx memory`` calls these functions directly on the local home.

A read of a namespace that does not exist raises ``NotFoundError`` with one fixed message, the same
one the server gives a token that does not cover the namespace (no existence oracle).
"""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING, Any

from phoenix_protocol.core import _errors
from phoenix_protocol.core._errors import CorruptStateError, UsageError
from phoenix_protocol.core._ids import validate_id, validate_session_id
from phoenix_protocol.services._agent import Agent

if TYPE_CHECKING:
    from phoenix_protocol.core._clock import Clock
    from phoenix_protocol.core._config import Config
    from phoenix_protocol.core._home import Home
    from phoenix_protocol.services._checkpoints import CollectContext, Collector
    from phoenix_protocol.store._memory import MemoryBackend
    from phoenix_protocol.store._teams import Team

__all__ = [
    "CHECKPOINT_SECTIONS",
    "NOT_FOUND",
    "NotFoundError",
    "identity_add",
    "identity_get",
    "identity_set",
    "latest_checkpoint",
    "memory_delete",
    "memory_get",
    "memory_list",
    "memory_recall",
    "memory_store",
    "open_agent",
    "open_team",
    "restore",
    "scrub",
    "sessions",
    "take_checkpoint",
    "team_ack",
    "team_claim",
    "team_delivered",
    "team_delivery",
    "team_heartbeat",
    "team_inbox",
    "team_send",
    "team_tasks",
]

NOT_FOUND = "Nothing was found at this address that the credentials given may use."
"""The one message for an unknown namespace and for a namespace the token does not cover."""

CHECKPOINT_SECTIONS = ("context", "working_memory", "identity_updates")
"""Seed 002's sections a checkpoint request may fill in (merged over what Phoenix collects)."""
_RESERVED_SECTIONS = frozenset(
    ("current_task", "mailbox", "operational_context", "memory", "recent_memories", "phoenix_state", "metadata")
)


class NotFoundError(_errors.NotFoundError):
    """Nothing at this address that the caller may use: no such namespace, or not theirs. Its
    default message is the same whichever it was."""

    def __init__(self, message: str = NOT_FOUND) -> None:
        super().__init__(message)


def scrub(text: str, home: Home) -> str:
    """``text`` with the home's path replaced by ``$PHOENIX_HOME`` (a client needs no server paths)."""
    return text.replace(home.root, "$PHOENIX_HOME")


# -- opening ---------------------------------------------------------------------------------


def open_agent(
    home: Home, agent_id: str, *, config: Config | None = None, clock: Clock | None = None, must_exist: bool = False
) -> Agent:
    """The agent ``agent_id``; with ``must_exist``, ``NotFoundError`` when it has nothing on disk."""
    from phoenix_protocol.core._clock import system_clock

    agent = Agent(validate_id(agent_id, "agent id"), home, config=config, clock=clock or system_clock)
    if must_exist and not agent.exists():
        raise NotFoundError()
    return agent


def open_team(home: Home, team_id: str, *, config: Config | None = None, clock: Clock | None = None) -> Team:
    """The team ``team_id``; ``NotFoundError`` (without the list of teams) when there is none."""

    from phoenix_protocol.core._clock import system_clock
    from phoenix_protocol.store._teams import Team

    team = Team(home, validate_id(team_id, "team id"), clock=clock or system_clock, config=config)
    if not team.exists():
        raise NotFoundError()
    return team


# -- checkpoints and sessions ------------------------------------------------------------------


def _merged(default: Collector, given: dict[str, Any]) -> Collector:
    def collect(ctx: CollectContext) -> object:
        base = default(ctx)
        return {**base, **given} if isinstance(base, dict) else given

    return collect


def _constant(value: object) -> Collector:
    def collect(ctx: CollectContext) -> object:
        return value

    return collect


def take_checkpoint(
    agent: Agent,
    summary: str,
    *,
    sections: dict[str, dict[str, Any]] | None = None,
    extensions: dict[str, Any] | None = None,
    checkpoint_type: str = "session",
) -> dict[str, Any]:
    """Take a checkpoint as ``phx checkpoint --summary`` does (a session checkpoint ends the session).

    ``sections`` (``context``, ``working_memory``, ``identity_updates``) are merged over what
    Phoenix collects; ``extensions`` are extra sections stored under ``extensions``.
    """
    from phoenix_protocol.services import _checkpoint_providers as providers

    defaults = {
        "context": providers.collect_context,
        "working_memory": providers.collect_working_memory,
        "identity_updates": providers.collect_identity_updates,
    }
    store = agent.checkpoints
    for name, given in (sections or {}).items():
        if name not in defaults:
            raise UsageError(f"unknown checkpoint section {name!r}; sections: {', '.join(CHECKPOINT_SECTIONS)}.")
        store.register(name, _merged(defaults[name], given))
    for name, value in (extensions or {}).items():
        validate_id(name, "section name")
        if name in _RESERVED_SECTIONS or name in defaults:
            raise UsageError(f"{name!r} is a section Phoenix fills in; name an extension differently.")
        store.register(name, _constant(value))
    if checkpoint_type == "session":
        from phoenix_protocol.services._sessions import end

        info = end(agent, summary=summary)
    else:
        info = store.create(checkpoint_type, summary=summary)
    return info.as_dict()


def latest_checkpoint(agent: Agent, checkpoint_type: str | None = None) -> dict[str, Any]:
    """The newest valid checkpoint (of a type): ``{name, checkpoint, problems}``."""
    if not agent.exists():
        raise NotFoundError()
    from phoenix_protocol.services._checkpoints import joined_problems

    checkpoint, problems = agent.checkpoints.latest(checkpoint_type)
    if checkpoint is None and problems:  # every one met is damaged: as `phx checkpoint latest` says it
        raise CorruptStateError(
            f"agent {agent.id!r} has no valid checkpoint"
            + (" of that type" if checkpoint_type else "")
            + f": {joined_problems(scrub(p, agent.home) for p in problems)} (run `phx doctor` on the server)."
        )
    if checkpoint is None:
        raise NotFoundError(
            f"agent {agent.id!r} has no valid checkpoint" + (" of that type." if checkpoint_type else ".")
        )
    return {
        "name": checkpoint.name,
        "checkpoint": checkpoint.data,
        "problems": [scrub(p, agent.home) for p in problems],
    }


def restore(
    agent: Agent, *, checkpoint: str | None = None, force: bool = False, session_id: str | None = None
) -> dict[str, Any]:
    """Start a session from a checkpoint, as ``phx restore`` does (seed 002's restore)."""
    from phoenix_protocol.services._sessions import begin

    if session_id is not None:
        validate_session_id(session_id)  # before anything is written
    result = None
    if checkpoint is not None:
        from phoenix_protocol.services._checkpoints import checkpoint_number, parse_name

        parsed = parse_name(checkpoint)
        if checkpoint_number(checkpoint) is None and (parsed is None or parsed[0] != agent.id):
            # no checkpoint can have that name, or another namespace's (a number is the agent's own)
            raise NotFoundError(f"no checkpoint {checkpoint!r} for agent {agent.id!r}.")
        result = agent.checkpoints.restore(checkpoint, force=force)  # ownership, checksum, version first
    sid = session_id or str(uuid.uuid4())
    agent.state.start_session(sid, source="startup", process=None)
    started = begin(agent, sid, source="restore", restore=checkpoint is None, force=force, restored=result)
    data = started.as_dict()
    data["problems"] = [scrub(str(p), agent.home) for p in data["problems"]]
    return data


def sessions(agent: Agent) -> list[dict[str, Any]]:
    """Every session of the agent, oldest first."""
    from phoenix_protocol.services._sessions import list_sessions

    if not agent.exists():
        raise NotFoundError()
    return list_sessions(agent)


# -- memory ------------------------------------------------------------------------------------


def _memory_namespace_exists(store: MemoryBackend, agent: Agent) -> bool:
    return agent.exists() or store.count(agent.id) > 0


def memory_store(
    store: MemoryBackend,
    agent: Agent,
    text: str,
    *,
    tags: list[str] | None = None,
    metadata: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Store a memory in the agent's namespace; its id joins the session's ``recent_memories``."""
    from phoenix_protocol.services._sessions import remember

    return remember(agent, text, tags=tags or (), metadata=metadata, store=store).as_dict()


def memory_recall(
    store: MemoryBackend,
    agent: Agent,
    query: str,
    *,
    k: int = 5,
    tags: list[str] | None = None,
    since: Any = None,
    until: Any = None,
    mode: str | None = None,
) -> list[dict[str, Any]]:
    """The best matches, best first, each with its ``score``; the query becomes ``last_recall_query``
    (``since``/``until``, ``mode``: ``recall_for``)."""
    from phoenix_protocol.services._sessions import recall_for

    if not _memory_namespace_exists(store, agent):
        raise NotFoundError()
    found = recall_for(agent, query, k=k, tags=tags, since=since, until=until, mode=mode, store=store)
    return [{**record.as_dict(), "score": score} for record, score in found]


def memory_list(
    store: MemoryBackend,
    agent: Agent,
    *,
    tags: list[str] | None = None,
    limit: int = 50,
    offset: int = 0,
    since: Any = None,
    until: Any = None,
) -> list[dict[str, Any]]:
    """The agent's memories, newest first (stored in ``[since, until)`` when given)."""
    if not _memory_namespace_exists(store, agent):
        raise NotFoundError()
    records = store.list(agent.id, tags=tags, limit=limit, offset=offset, since=since, until=until)
    return [r.as_dict() for r in records]


def memory_get(store: MemoryBackend, agent: Agent, memory_id: str) -> dict[str, Any]:
    """One memory of the agent's namespace."""
    record = store.get(agent.id, memory_id)
    if record is None:
        raise NotFoundError()
    return record.as_dict()


def memory_delete(store: MemoryBackend, agent: Agent, memory_id: str) -> None:
    """Delete one memory of the agent's namespace (``NotFoundError`` when there is none)."""
    if not store.delete(agent.id, memory_id):
        raise NotFoundError()


# -- identity ----------------------------------------------------------------------------------


def identity_get(agent: Agent) -> dict[str, Any]:
    """The agent's identity: ``{immutable, mutable}``."""
    if not agent.exists():
        raise NotFoundError()
    return agent.identity.read().as_dict()


def identity_set(agent: Agent, path: str, value: Any) -> dict[str, Any]:
    """Set a value in the mutable section (the immutable core is refused)."""
    return agent.identity.set(path, value).as_dict()


def identity_add(agent: Agent, kind: str, entry: dict[str, Any]) -> dict[str, Any]:
    """Add (or update) a belief, skill or relationship."""
    return agent.identity.add(kind, entry).as_dict()


# -- teams -------------------------------------------------------------------------------------


def _member(team: Team, name: str) -> str:
    validate_id(name, "teammate name")
    if name not in team.teammate_names():
        raise NotFoundError(f"{name!r} is not in team {team.id}.")
    return name


def team_send(
    team: Team, sender: str, to: str, *, type: str, subject: str, body: str, msg_id: str | None = None
) -> dict[str, Any]:
    """Send a message (idempotent by ``msg_id``): ``{message, duplicate}``."""
    if msg_id is not None:
        validate_id(msg_id, "message id", max_length=128)
    message = team.send(sender, to, type=type, subject=subject, body=body, msg_id=msg_id)
    return {"message": message.as_dict(), "duplicate": bool(getattr(message, "duplicate", False))}


def team_inbox(team: Team, name: str, *, limit: int | None = None) -> dict[str, Any]:
    """Messages ``name`` has not been handed yet, and ``through_seq`` to confirm with
    ``team_delivered`` once they are (the cursor does not move here)."""
    messages = team.mailbox.fetch(_member(team, name), limit=limit)
    return {"messages": [m.as_dict() for m in messages], "through_seq": messages.through_seq}


def team_delivered(team: Team, name: str, through_seq: int) -> dict[str, Any]:
    """Record that the messages for ``name`` up to ``through_seq`` were handed over."""
    team.mailbox.mark_delivered(_member(team, name), through_seq)
    return {"name": name, "through_seq": through_seq}


def team_ack(team: Team, seq: int, name: str) -> dict[str, Any]:
    """Acknowledge message ``seq`` as ``name`` (it must have been delivered to ``name``)."""
    team.mailbox.ack(_member(team, name), seq)
    return {"seq": seq, "acked_by": team.mailbox.acked_by(seq)}


def team_tasks(team: Team) -> list[dict[str, Any]]:
    """Every task of the team."""
    return list(team.read()["tasks"])


def team_claim(team: Team, task_id: str, name: str) -> dict[str, Any]:
    """Claim a ready task for ``name`` (exactly one of concurrent claimers wins)."""
    validate_id(task_id, "task id")
    member = _member(team, name)
    if all(t.get("task_id") != task_id for t in team.read()["tasks"]):
        raise NotFoundError(f"no task {task_id!r} in team {team.id}.")
    return team.claim(task_id, member)


def team_heartbeat(team: Team, name: str, *, session_id: str | None = None) -> dict[str, Any]:
    """Record a heartbeat of ``name``."""
    if session_id is not None:
        validate_session_id(session_id)
    return team.heartbeat(_member(team, name), session_id=session_id)


def team_delivery(team: Team, name: str, *, msg_ids: list[str] | None = None, last: int = 50) -> list[dict[str, Any]]:
    """The delivery state of the messages ``name`` sent (``Team.delivery``): read and
    acknowledged by whom."""
    if msg_ids is not None:
        for msg_id in msg_ids:
            validate_id(msg_id, "message id", max_length=128)
    return team.delivery(_member(team, name), msg_ids=msg_ids, last=last)
