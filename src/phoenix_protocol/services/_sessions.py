"""Sessions (seed 002, PAIF): restore at session start, checkpoint at session end.

Python agents use ``agent.sessions`` (``SessionStore``: ``begin``, ``end``, ``entries``) or
``with agent.session() as started:``; they do what ``phx restore`` and the Claude Code hooks do
(``start_session`` and ``end_session`` below, the state's session around the PAIF halves).

Session start (``begin``), per the seed: load ``identity.yaml``; load the newest valid checkpoint
and restore from it (working memory and context are handed back to the caller); set
``mutable.state.last_session_at``; increment ``accumulated_experience``; log it.

Session end (``end``): summarize what was done and what remains, collect the memory ids created in
the session, the identity updates and the drift checks, the duration; write the session
checkpoint; update the identity's session stats.

Kept in the home's database (``store._sessions.SessionRows``; SQLite's ``phoenix.db`` or
PostgreSQL, so that a session that ends on one machine is listed and restored on another):
``phx_session_current`` (the open session: its id, start, the identity as it was at the start,
memory ids created so far, the last recall query) and ``phx_session_log`` (a start and an end
record per session, with a ``seq``; ``list_sessions`` pairs them). The ``sessions/`` files of an
earlier release are imported on first use (``_checkpoint_import``).
"""

from __future__ import annotations

import contextlib
import os
import uuid
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from phoenix_protocol.core._clock import iso_from_ms, ms_from_iso
from phoenix_protocol.core._errors import PhoenixError, UsageError

if TYPE_CHECKING:
    from phoenix_protocol.agent._identity import Identity
    from phoenix_protocol.agent._state import AgentState
    from phoenix_protocol.services._agent import Agent
    from phoenix_protocol.services._checkpoints import Checkpoint, CheckpointInfo, RestoreResult
    from phoenix_protocol.store._memory import MemoryBackend, MemoryRecord
    from phoenix_protocol.store._sessions import SessionRows

__all__ = [
    "SessionStart",
    "SessionStore",
    "begin",
    "end",
    "end_session",
    "ending_session",
    "identity_updates",
    "list_sessions",
    "read_current",
    "read_sessions",
    "record_memory",
    "record_recall",
    "session_scope",
    "start_session",
]


def empty_current() -> dict[str, Any]:
    """The record of an agent with no open session."""
    from phoenix_protocol.store._sessions import empty_current as empty

    return empty()


def _open_start(records: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The start record of the newest session: the one ``current.json`` describes (it is replaced
    at each start; an end record does not close it: `phx checkpoint` writes one mid-session)."""
    for record in reversed(records):
        if record.get("event") == "start":
            return dict(record)
    return None


def storage(agent: Agent) -> SessionRows:
    """The agent's sessions in the home's database (its files of an earlier release imported
    first, on the first use in the process)."""
    from phoenix_protocol.services._checkpoint_import import importer
    from phoenix_protocol.store._db import open_database
    from phoenix_protocol.store._sessions import SessionRows

    rows = SessionRows(open_database(agent.home, agent.config), agent.id)
    rows.before_use = importer(agent, rows.db)
    return rows


def read_current(agent: Agent) -> dict[str, Any] | None:
    """The open session's record, or ``None``."""
    return storage(agent).current()


def ending_session(agent: Agent, current: dict[str, Any] | None = None, state: AgentState | None = None) -> str | None:
    """The id of the session a session checkpoint taken now ends: the open session's, else the
    last one state.json knows; ``None`` when the agent never started one (``phx restore`` and the
    SessionStart hook start sessions). ``current`` and ``state``: already read by the caller."""
    if current is None:
        current = read_current(agent) or {}
    if state is None:
        state = agent.state.read_or_none()
    sid = current.get("session_id") or (state.session_id if state else None)
    return str(sid) if sid else None


class SessionStart:
    """What a session start did: the session (``session_id``, ``started_at``), the ``identity``
    (``None`` when it could not be read), the ``checkpoint`` restored from and the ``restore``
    result (``restore.applied``, ``restore.checkpoint.data``: working memory and context), and
    ``problems`` (the session started anyway).

    ``summary``: what the session's end stores as its summary when ``Agent.session`` ends it
    (set it inside the block; default: from the state, as ``end`` makes it)."""

    def __init__(
        self,
        session_id: str,
        started_at: str,
        identity: Identity | None,
        checkpoint: Checkpoint | None,
        restore: RestoreResult | None,
        problems: list[str],
    ) -> None:
        self.session_id = session_id
        self.started_at = started_at
        self.identity = identity
        self.checkpoint = checkpoint
        self.restore = restore
        self.problems = problems
        self.summary: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return {
            "session_id": self.session_id,
            "started_at": self.started_at,
            "identity": self.identity.as_dict() if self.identity else None,
            "checkpoint": self.checkpoint.name if self.checkpoint else None,
            "restored": self.restore.applied if self.restore else {},
            "problems": self.problems,
        }


def begin(
    agent: Agent,
    session_id: str | None = None,
    *,
    source: str = "startup",
    restore: bool = True,
    force: bool = False,
    restored: RestoreResult | None = None,
) -> SessionStart:
    """Start a session (PAIF restore). Problems (a damaged checkpoint, an identity whose core was
    edited by hand or that holds what JSON cannot) are reported in the result and the ops log;
    the session starts anyway. The start is recorded before the identity's
    ``accumulated_experience`` is incremented, so that no failure counts a session never started.
    ``restored``: a restore already made for this session (``phx restore --checkpoint``, which
    refuses a bad checkpoint before anything is written), recorded as the session's in place of
    one made here (``restore`` is then not looked at)."""
    from phoenix_protocol.core._ids import validate_session_id
    from phoenix_protocol.core._redact import redact_value

    sid = validate_session_id(session_id) if session_id else str(uuid.uuid4())
    ms = agent.clock.now_ms()
    now = iso_from_ms(ms)
    problems: list[str] = []
    identity: Identity | None = None
    try:
        identity = agent.identity.read()
    except PhoenixError as exc:
        problems.append(str(exc))
    checkpoint = restored.checkpoint if restored is not None else None
    result = restored
    if restored is not None:
        problems += restored.problems
    elif restore:
        try:
            result = agent.checkpoints.restore(force=force)
            checkpoint = result.checkpoint
            problems += result.problems
        except PhoenixError as exc:
            if not (isinstance(exc, UsageError) and not agent.checkpoints.entries(limit=1)):
                problems.append(str(exc))  # none at all (a first session) is no problem
    # The start is recorded before the identity counts it: a session that fails to start is
    # never counted (a count without a recorded start was a session that never existed).
    sessions = storage(agent)
    sessions.set_current(
        {
            "session_id": sid,
            "started_at": now,
            "started_ms": ms,
            "source": source,
            "restored_from": checkpoint.name if checkpoint else None,
            "identity_at_start": redact_value(identity.mutable) if identity else None,
            "memory_ids": [],
            "last_recall_query": None,
        },
    )
    sessions.append(
        {
            "event": "start",
            "session_id": sid,
            "at": now,
            "source": source,
            "restored_from": checkpoint.name if checkpoint else None,
        }
    )
    if identity is not None:

        def stats(ident: Identity) -> None:
            ident.mutable["state"]["last_session_at"] = now
            ident.mutable["accumulated_experience"] = int(ident.mutable.get("accumulated_experience") or 0) + 1

        try:
            identity = agent.identity.update(stats, log=False)  # the session's event below carries it
        except PhoenixError as exc:
            problems.append(str(exc))
    agent.record(
        "session_restored" if checkpoint else "session_begun",
        "warn" if problems else "ok",
        {
            "session_id": sid,
            "checkpoint": checkpoint.name if checkpoint else None,
            "experience": identity.mutable.get("accumulated_experience") if identity else None,
            "at": now,
            "problems": problems[:5],
        },
    )
    return SessionStart(sid, now, identity, checkpoint, result, problems)


def start_session(
    agent: Agent,
    session_id: str | None = None,
    *,
    source: str = "startup",
    restore: bool | None = None,
    force: bool = False,
    process_from: int | None = None,
    restored: RestoreResult | None = None,
) -> SessionStart:
    """Start a session as ``phx restore`` does: the session in the state (status working, the
    agent's process: found upwards from ``process_from``, default this process's parent, as for
    ``phx``), then ``begin`` (restore per ``restore``, default the ``restore_on_start`` setting,
    or the restore already made, ``restored``; identity; start record). ``session_id``: default a
    new one."""
    from phoenix_protocol.core._ids import validate_session_id
    from phoenix_protocol.core._process import find_agent_process

    sid = validate_session_id(session_id) if session_id else str(uuid.uuid4())
    proc = find_agent_process(process_from)
    agent.state.start_session(
        sid,
        source="startup",
        process={"pid": proc.pid, "start_time": proc.start_time, "host": proc.host} if proc else None,
    )
    wanted = agent.config.restore_on_start if restore is None else restore
    return begin(agent, sid, source=source, restore=wanted, force=force, restored=restored)


def end_session(
    agent: Agent,
    session_id: str | None = None,
    *,
    summary: str | None = None,
    checkpoint: bool | None = None,
    reason: str = "other",
    git_timeout: float = 1.0,
) -> CheckpointInfo | None:
    """End a session as the SessionEnd hook does: the state's session ends (status idle),
    ``brief.md`` is written (a failure is an ops event: the session has ended), then, per
    ``checkpoint`` (default: the ``checkpoint_on_exit`` setting), ``end``: the session checkpoint
    with its summary and duration, and the end record. ``session_id``: default the state's; a
    session the state no longer holds (a newer one started) is not checkpointed. Returns the
    checkpoint, or ``None`` when none was taken.

    A ``state.json`` that cannot be changed (damaged, written by a newer Phoenix, locked past the
    timeout) does not cost the session its checkpoint: the session that ends is then the open
    session record's (``current.json``), the checkpoint is taken, and the state's error is
    raised after it, with a note naming the checkpoint."""
    from phoenix_protocol.core._errors import CorruptStateError, LockTimeoutError, SchemaVersionError
    from phoenix_protocol.core._ids import validate_session_id

    if session_id is not None:
        validate_session_id(session_id)  # before anything is written
    take = agent.config.checkpoint_on_exit if checkpoint is None else checkpoint
    try:
        after = agent.state.end_session(session_id, reason=reason)
    except (CorruptStateError, SchemaVersionError, LockTimeoutError) as exc:
        if not take:
            raise
        current = read_current(agent) or {}
        if session_id is not None and current.get("session_id") not in (None, session_id):
            raise  # a newer session started: this one is not checkpointed
        info = end(agent, session_id or ending_session(agent, current), summary=summary, git_timeout=git_timeout)
        exc.add_note(f"The session checkpoint was taken all the same: {info.name}.")
        raise
    try:
        agent.write_brief(after, git_timeout=git_timeout)
    except (PhoenixError, OSError) as exc:
        agent.record("brief_failed", "warn", {"error": str(exc)[:300]})
    if not take or (session_id is not None and after.session_id != session_id):
        return None
    return end(agent, session_id or after.session_id, summary=summary, git_timeout=git_timeout)


class SessionStore:
    """One agent's sessions (seed 002's PAIF protocol). Get it as ``agent.sessions``; or
    ``with agent.session() as started:`` (``session_scope``), which begins one and ends it.

    ``begin`` and ``end`` do what the Claude Code hooks and ``phx restore`` do, for an agent
    written in Python: the session in the state (status, process, work clock: the session
    checkpoint's ``session_id``, ``started_at`` and ``duration_seconds`` come from it), the
    restore, the identity's session count, the start and end records."""

    def __init__(self, agent: Agent) -> None:
        self.agent = agent

    def begin(self, session_id: str | None = None, *, restore: bool | None = None, force: bool = False) -> SessionStart:
        """Start a session (``session_id``: default a new one) and, per ``restore`` (default:
        the ``restore_on_start`` setting), restore from the newest valid checkpoint (``force``:
        its task and notes replace the state's). Problems (a damaged checkpoint, an unreadable
        identity) are in the result's ``problems``; the session starts anyway. The agent's
        process is this one (or ``$PHOENIX_AGENT_PID``)."""
        return start_session(
            self.agent, session_id, source="python", restore=restore, force=force, process_from=os.getpid()
        )

    def end(
        self,
        session_id: str | None = None,
        *,
        summary: str | None = None,
        checkpoint: bool | None = None,
        reason: str = "other",
    ) -> CheckpointInfo | None:
        """End the session (``session_id``: default the open one): status idle, ``brief.md``,
        and, per ``checkpoint`` (default: the ``checkpoint_on_exit`` setting), the session
        checkpoint with ``summary`` (default: the state's last output or task and what
        remains), its duration and the end record. Returns the checkpoint (``None``: none)."""
        return end_session(self.agent, session_id, summary=summary, checkpoint=checkpoint, reason=reason)

    def entries(self) -> list[dict[str, Any]]:
        """Every session, oldest first (see ``list_sessions``): what ``phx sessions`` lists."""
        return list_sessions(self.agent)

    def current(self) -> dict[str, Any] | None:
        """The open session's record (id, start, identity at the start, memory ids), or ``None``."""
        return read_current(self.agent)


@contextlib.contextmanager
def session_scope(
    store: SessionStore,
    session_id: str | None = None,
    *,
    restore: bool | None = None,
    force: bool = False,
    summary: str | None = None,
    checkpoint: bool | None = None,
) -> Iterator[SessionStart]:
    """``with agent.session() as started:`` begins a session (``SessionStore.begin``) and ends it
    when the block ends (``SessionStore.end``, with ``started.summary`` or ``summary``), also when
    it raises: then the block's exception is what the caller sees (a failure to end the session
    is added to it as a note)."""
    started = store.begin(session_id, restore=restore, force=force)
    try:
        yield started
    except BaseException as exc:
        try:
            store.end(started.session_id, summary=started.summary or summary, checkpoint=checkpoint, reason="exception")
        except (PhoenixError, OSError) as failed:
            exc.add_note(f"Phoenix could not end session {started.session_id}: {failed}")
        raise
    store.end(started.session_id, summary=started.summary or summary, checkpoint=checkpoint)


def identity_updates(agent: Agent, session_events: list[dict[str, Any]]) -> dict[str, Any]:
    """Beliefs, skills and relationships added or changed since the session started, and the
    drift checks of the session (``drift_check`` events with ``meta.passed``)."""
    current = read_current(agent) or {}
    before = current.get("identity_at_start") or {}
    try:
        now = agent.identity.read().mutable
    except PhoenixError:
        now = {}
    out: dict[str, Any] = {}
    for key, label in (("beliefs", "new_beliefs"), ("skills", "new_skills"), ("relationships", "new_relationships")):
        old = before.get(key) or [] if isinstance(before, dict) else []
        out[label] = [item for item in (now.get(key) or []) if item not in old]
    passed = failed = 0
    for event in session_events:
        if event.get("event") == "drift_check":
            if (event.get("meta") or {}).get("passed"):
                passed += 1
            else:
                failed += 1
    out["drift_checks"] = {"passed": passed, "failed": failed}
    return out


def end(
    agent: Agent,
    session_id: str | None = None,
    *,
    summary: str | None = None,
    git_timeout: float = 1.0,
) -> CheckpointInfo:
    """End a session (PAIF checkpoint): the session checkpoint, the end record, identity stats.
    ``summary``: what was done and what remains; none (or a blank one): the task and the number of
    open items, from the state."""
    current = read_current(agent) or {}
    state = agent.state.read_or_none()
    sid = session_id or ending_session(agent, current, state) or "unknown"
    if isinstance(summary, str) and not summary.strip():
        summary = None  # a blank summary says nothing: the default below
    if summary is None and state is not None:
        from phoenix_protocol.agent._state import task_notes

        done = state.last_output or state.current_task or "no task recorded"
        loops, actions = task_notes(state)  # the task's own: another task's are not its to finish
        remaining = len(loops) + len(actions)
        summary = f"{done} ({remaining} open item{' remains' if remaining == 1 else 's remain'})"
    info = agent.checkpoints.create("session", summary=summary, extra={"git_timeout": git_timeout})
    ms = info.timestamp_ms
    started = current.get("started_at") if current.get("session_id") == sid else None
    if started is None and state is not None and state.session_id == sid:
        started = state.session_started_at
    duration = None
    if isinstance(started, str):
        try:
            duration = max(0, (ms - ms_from_iso(started)) // 1000)
        except ValueError:
            started = None
    else:
        started = None
    storage(agent).append(
        {
            "event": "end",
            "session_id": sid,
            "at": iso_from_ms(ms),
            "started_at": started,  # what the duration is measured from (a session without a start record shows it)
            "duration_seconds": duration,
            "checkpoint": info.name,
            "summary": info.label,
        }
    )

    def stats(ident: Identity) -> None:
        ident.mutable["state"]["last_session_at"] = iso_from_ms(ms)

    try:
        if agent.identity.exists():
            agent.identity.update(stats, log=False)  # the session's event below carries it
    except PhoenixError as exc:
        agent.record("identity_not_updated", "warn", {"error": str(exc)[:300]})
    agent.record(
        "session_checkpointed",
        "ok",
        {"session_id": sid, "checkpoint": info.name, "duration_seconds": duration, "at": iso_from_ms(ms)},
    )
    return info


def list_sessions(agent: Agent) -> list[dict[str, Any]]:
    """Every session, oldest first: id, start, end, duration, checkpoint, summary and ``status``:
    ``ended``; ``open`` (the newest, not ended yet); ``interrupted`` (never ended, and a later
    session started: its process was killed or crashed before SessionEnd, or it ran alongside).
    A session id started again after its end (a resumed conversation) is a row of its own; a
    second end record of a session (a second ``phx checkpoint``) updates its row.
    ``read_sessions`` also gives the problems met on the way."""
    return read_sessions(agent)[0]


def read_sessions(agent: Agent) -> tuple[list[dict[str, Any]], list[Any]]:
    """``list_sessions``, and the problems met reading the records (a torn last line of
    ``sessions.jsonl``, an unreadable one: skipped, as every reader of a log does)."""
    records, problems = storage(agent).read()
    return _pair(records), problems


def _pair(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The sessions the start and end records make (see ``list_sessions``)."""
    rows: list[dict[str, Any]] = []
    last: dict[str, dict[str, Any]] = {}
    for record in records:
        sid = str(record.get("session_id"))
        if record.get("event") == "start":
            started: dict[str, Any] = {
                "session_id": sid,
                "status": "open",
                "started_at": record.get("at"),
                "ended_at": None,
                "duration_seconds": None,
                "checkpoint": None,
                "summary": None,
                "restored_from": record.get("restored_from"),
            }
            rows.append(started)
            last[sid] = started
        elif record.get("event") == "end":
            ended = last.get(sid)
            if ended is None or sid == "unknown":  # no start record kept; or a checkpoint taken outside any session
                ended = {"session_id": sid, "started_at": record.get("started_at"), "restored_from": None}
                rows.append(ended)
                last[sid] = ended
            ended.update(
                status="ended",
                ended_at=record.get("at"),
                # a duration measured from a start the row cannot show (older end records name none) is left out
                duration_seconds=record.get("duration_seconds") if ended.get("started_at") else None,
                checkpoint=record.get("checkpoint"),
                summary=record.get("summary"),
            )
    for row in rows[:-1]:
        if row["status"] == "open":
            row["status"] = "interrupted"
    return rows


def _update_current(agent: Agent, change: Callable[[dict[str, Any]], None]) -> dict[str, Any]:
    return storage(agent).update_current(change)


def record_memory(agent: Agent, memory_id: str) -> None:
    """Note a memory created in the open session (it goes into the session checkpoint's
    ``recent_memories``)."""
    from phoenix_protocol.core._ids import validate_id

    validate_id(memory_id, "memory id", max_length=128)

    def change(record: dict[str, Any]) -> None:
        ids = record.setdefault("memory_ids", [])
        if memory_id not in ids:
            ids.append(memory_id)

    _update_current(agent, change)


def record_recall(agent: Agent, query: str) -> None:
    """Note the last thing the agent searched its memory for (``last_recall_query``)."""
    from phoenix_protocol.core._redact import redact

    clean = redact(" ".join(query.split()))[:1000]

    def change(record: dict[str, Any]) -> None:
        record["last_recall_query"] = clean

    _update_current(agent, change)


def _agent_store(agent: Agent, store: MemoryBackend | None) -> MemoryBackend:
    from phoenix_protocol.store._memory import open_memory_store

    return store if store is not None else open_memory_store(agent.home, config=agent.config, clock=agent.clock)


def remember(
    agent: Agent,
    text: str,
    *,
    tags: Any = (),
    metadata: dict[str, Any] | None = None,
    store: MemoryBackend | None = None,
) -> MemoryRecord:
    """Store a memory in the agent's namespace and note it in the open session (its id goes into
    the session checkpoint's ``recent_memories``)."""
    record = _agent_store(agent, store).store(agent.id, text, tags=tags, metadata=metadata)
    record_memory(agent, record.id)
    return record


RECALL_MODES = ("lexical", "semantic")


def recall_mode(agent: Agent, mode: str | None) -> str:
    """``mode``, or the ``memory_recall`` setting when ``None``; ``ConfigError`` for another word."""
    from phoenix_protocol.core._errors import ConfigError

    chosen = (mode if mode is not None else getattr(agent.config, "memory_recall", "lexical")).strip().lower()
    if chosen not in RECALL_MODES:
        raise ConfigError(f"memory_recall must be one of {', '.join(RECALL_MODES)}, not {chosen!r}.")
    return chosen


def recall_for(
    agent: Agent,
    query: str,
    *,
    k: int = 5,
    tags: Any = None,
    since: Any = None,
    until: Any = None,
    mode: str | None = None,
    store: MemoryBackend | None = None,
) -> list[tuple[MemoryRecord, float]]:
    """Recall in the agent's namespace and note the query as the session's ``last_recall_query``.

    ``mode``: ``lexical`` (BM25 with stop words and a minimum score) or ``semantic`` (that fused
    with the embeddings of the ``[persona]`` extra's model; ``PersonaExtraMissing`` without it);
    ``None``: the ``memory_recall`` setting. ``since``/``until``: ISO 8601 or ms (``MemoryStore.recall``)."""
    embedder = None
    if recall_mode(agent, mode) == "semantic":
        from phoenix_protocol.services._persona import SentenceEmbedder

        embedder = SentenceEmbedder()
        embedder.ensure_available()
    found = _agent_store(agent, store).recall(
        agent.id, query, k=k, tags=tags, since=since, until=until, embedder=embedder
    )
    record_recall(agent, query)
    return found
