"""Default checkpoint providers: every section filled from what any agent already has.

=====================  ==========================================================================
section                collected from
=====================  ==========================================================================
current_task           state.json: a stable id for the task text, status, progress (if recorded),
                       and the task's context (description, last output, error, last tool)
mailbox                the agent's team mailbox cursor when it belongs to a team, else empty
operational_context    goals (the task, then next actions), constraints, decisions (resolved notes)
memory                 short term: the newest ops events; session: this session's events
context (PAIF)         current focus (identity, else the task), active project, summary, pending
recent_memories        memory ids created this session and the last recall query (sessions/current.json)
identity_updates       beliefs, skills, relationships added since the session started; drift checks
working_memory         scratchpad (brief.md), open files (git changes), context stack
phoenix_state          the restorable part of state.json: task, notes, last output
identity               a copy of identity.yaml and its seal, when the agent has one and it reads
                       (``phx doctor`` restores a damaged identity.yaml from the newest copy)
=====================  ==========================================================================

Restorers: ``phoenix_state`` puts the task and notes back into state.json when state.json has none
(or always with ``force``); ``context`` and ``working_memory`` are handed back to the caller (the
SessionStart hook injects them), since they describe the agent's mind rather than a file.
``identity`` has none: the identity file is the authority, and a restore never writes it.
"""

from __future__ import annotations

import hashlib
import os
from collections import Counter
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    from phoenix_protocol.agent._identity import Identity
    from phoenix_protocol.agent._state import AgentState
    from phoenix_protocol.core._errors import PhoenixError
    from phoenix_protocol.core._git import GitContext
    from phoenix_protocol.services._agent import Agent
    from phoenix_protocol.services._checkpoints import CheckpointStore, CollectContext

__all__ = ["register_defaults"]

T = TypeVar("T")

SHORT_TERM_EVENTS = 20
SESSION_EVENTS = 200


def _state(ctx: CollectContext) -> AgentState | None:
    return _state_read(ctx)[1]


def _state_read(ctx: CollectContext) -> tuple[int | None, AgentState | None, PhoenixError | None]:
    """The state, read once per checkpoint, and the seq of the newest ops event read before it
    (``_events``, read first for that): every event after it may be missing from the state. The
    state is ``None`` when there is none, or when it does not read: then the error too (the
    ``phoenix_state`` section records it; the other sections do without the state)."""

    def read() -> tuple[int | None, AgentState | None, PhoenixError | None]:
        from phoenix_protocol.core._errors import CorruptStateError, PhoenixError, SchemaVersionError

        try:
            events = _events(ctx)
        except PhoenixError:  # the ops log does not read: restore falls back to the earlier rule
            events = [{"seq": None}]
        seq = events[-1].get("seq") if events else 0
        try:
            state, error = ctx.agent.state.read_if_any(), None
        except (CorruptStateError, SchemaVersionError) as exc:
            state, error = None, exc
        return (seq if type(seq) is int else None), state, error

    found: tuple[int | None, AgentState | None, PhoenixError | None] = ctx.cached("state", read)
    return found


def _events(ctx: CollectContext) -> list[dict[str, Any]]:
    def tail() -> list[dict[str, Any]]:
        events, _problems = ctx.agent.ops.tail(SESSION_EVENTS)
        return events

    return ctx.cached("events", tail)


def _compact(event: dict[str, Any]) -> dict[str, Any]:
    out = {"seq": event.get("seq"), "ts": event.get("ts"), "event": event.get("event"), "status": event.get("status")}
    if event.get("meta"):
        out["meta"] = event["meta"]
    return out


def _git(ctx: CollectContext) -> GitContext | None:
    from phoenix_protocol.core._git import git_context

    root = ctx.agent.home.project_root
    timeout = float(ctx.extra.get("git_timeout", 1.0))
    return ctx.cached("git", lambda: git_context(root, timeout=timeout) if root else None)


def task_id(text: str) -> str | None:
    """A stable id for a task description (the same text gives the same id)."""
    if not text:
        return None
    return "task-" + hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:10]


def collect_current_task(ctx: CollectContext) -> dict[str, Any]:
    state = _state(ctx)
    if state is None:
        return {"id": None, "status": "unknown", "progress_percentage": None, "context": {}}
    status = {"working": "in_progress", "idle": "idle", "error": "error"}[state.status]
    progress = state.extra.get("progress_percentage")
    return {
        "id": task_id(state.current_task),
        "status": status,
        "progress_percentage": progress if isinstance(progress, (int, float)) else None,
        "context": {
            "description": state.current_task,
            "last_output": state.last_output,
            "error_message": state.error_message,
            "last_tool": state.last_tool,
            "heartbeat_seq": state.heartbeat_seq,
        },
    }


def collect_mailbox(ctx: CollectContext) -> dict[str, Any]:
    cursor = ctx.extra.get("mailbox")
    if isinstance(cursor, dict):
        return cursor
    return {"last_processed_id": None, "pending_count": 0}


def collect_operational_context(ctx: CollectContext) -> dict[str, Any]:
    from phoenix_protocol.agent._state import task_notes

    state = _state(ctx)
    goals = []
    if state is not None:
        if state.current_task:
            goals.append(state.current_task)
        goals += [item["text"] for item in task_notes(state)[1]]
    decisions = [
        {"ts": e.get("ts"), "resolved": (e.get("meta") or {}).get("text")}
        for e in _events(ctx)
        if e.get("event") == "note_resolved"
    ]
    constraints = ctx.extra.get("constraints")
    return {
        "goals": goals,
        "constraints": list(constraints) if isinstance(constraints, list) else [],
        "decisions": decisions[-20:],
    }


def _session_events(ctx: CollectContext) -> list[dict[str, Any]]:
    events = _events(ctx)
    for i in range(len(events) - 1, -1, -1):
        if events[i].get("event") == "session_start":
            return events[i:]
    return events


def collect_memory(ctx: CollectContext) -> dict[str, Any]:
    events = _events(ctx)
    return {
        "short_term": [_compact(e) for e in events[-SHORT_TERM_EVENTS:]],
        "session": [_compact(e) for e in _session_events(ctx)],
    }


def _current_session_file(agent: Agent) -> dict[str, Any]:
    from phoenix_protocol.services._sessions import read_current

    return read_current(agent) or {}


def _identity(ctx: CollectContext) -> Identity | None:
    """The agent's identity, read once per checkpoint (``None``: there is none, or it does not read:
    the ``identity`` section records why; the others do without it)."""
    return _identity_read(ctx)[1]


def _identity_read(ctx: CollectContext) -> tuple[int, Identity | None, PhoenixError | None]:
    """``_identity``, the time (ms) just before it was read (every change logged from then on may
    be missing from it: ``IdentityStore.repair`` replays them over the copy), and the error that
    kept it from reading."""

    def read() -> tuple[int, Identity | None, PhoenixError | None]:
        from phoenix_protocol.core._errors import CorruptStateError, PhoenixError

        ms = ctx.agent.clock.now_ms()
        store = ctx.agent.identity
        try:
            if store.remote is None and not store.exists():
                if not os.path.exists(store.digest_path):
                    return ms, None, None  # no identity
                # A seal without its file is damage (deleted by hand): ``read`` says so, unless the
                # seal does not read either (it would give the default identity: a copy of nothing).
                store.read()
                raise CorruptStateError(
                    f"{store.path} is missing while {store.digest_path} is there; run `phx doctor`",
                    path=store.path,
                )
            return ms, (store.read() if store.remote is None or store.exists() else None), None
        except PhoenixError as exc:
            return ms, None, exc

    found: tuple[int, Identity | None, PhoenixError | None] = ctx.cached("identity", read)
    return found


def collect_context(ctx: CollectContext) -> dict[str, Any]:
    from phoenix_protocol.agent._state import task_notes

    state = _state(ctx)
    identity = _identity(ctx)
    focus = identity.current_focus if identity is not None else ""
    git = _git(ctx)
    pending = []
    if state is not None:
        loops, actions = task_notes(state)  # the current task's: another task's are not pending on it
        pending = [item["text"] for item in loops + actions]
    summary = ctx.summary or (state.last_output if state else None) or (state.current_task if state else "")
    return {
        "current_focus": focus or (state.current_task if state else ""),
        "active_project_ids": [os.path.basename(git.root)] if git else [],
        "conversation_summary": summary or "",
        "pending_items": pending,
    }


def collect_recent_memories(ctx: CollectContext) -> dict[str, Any]:
    current = _current_session_file(ctx.agent)
    ids = current.get("memory_ids")
    query = current.get("last_recall_query")
    return {"memory_ids": list(ids) if isinstance(ids, list) else [], "last_recall_query": query}


def collect_identity_updates(ctx: CollectContext) -> dict[str, Any]:
    given = ctx.extra.get("identity_updates")
    if isinstance(given, dict):
        return given
    from phoenix_protocol.services._sessions import identity_updates

    return identity_updates(ctx.agent, _session_events(ctx))


def collect_working_memory(ctx: CollectContext) -> dict[str, Any]:
    from phoenix_protocol.agent._state import task_notes

    state = _state(ctx)
    git = _git(ctx)
    scratchpad = ctx.agent.read_brief() or ""
    stack = []
    if state is not None:
        if state.current_task:
            stack.append(state.current_task)
        stack += [item["text"] for item in task_notes(state)[1][:5]]
    return {
        "scratchpad": scratchpad[:20_000],
        "open_files": [path for _status, path in git.changed] if git else [],
        "context_stack": stack,
    }


def collect_state_snapshot(ctx: CollectContext) -> dict[str, Any] | None:
    """The restorable part of state.json; a state.json that does not read fails the section (the
    checkpoint records the error: a copy of nothing must not pass for one)."""
    ops_seq, state, error = _state_read(ctx)
    if error is not None:
        raise error
    if state is None:
        return None
    return {
        "status": state.status,
        "current_task": state.current_task,
        "last_output": state.last_output,
        "error_message": state.error_message,
        "open_loops": state.open_loops,
        "next_actions": state.next_actions,
        "note_seq": state.note_seq,
        "session_id": state.session_id,
        "status_event": state.status_event,
        "ops_seq": ops_seq,
    }


def _since_snapshot(agent: Agent, value: dict[str, Any]) -> tuple[list[dict[str, Any]], bool]:
    """The ops events kept that were logged after the snapshot's state was read (``ops_seq``:
    the newest before it), and whether they are all of them. Not all: a snapshot from before
    ``ops_seq`` was kept, a log rotated past it (its oldest event kept is newer), one that does not
    read, or the PostgreSQL store's (each machine's copy numbers its own events: none used)."""
    from phoenix_protocol.core._errors import PhoenixError

    seq = value.get("ops_seq")
    if agent.ops.remote is not None:
        return [], False
    try:
        events = agent.ops.since(seq if type(seq) is int else 0)
    except PhoenixError:
        return [], False
    complete = type(seq) is int and (not events or events[0].get("seq") == seq + 1)
    return events, complete


def _task_finished(value: dict[str, Any], since: list[dict[str, Any]]) -> bool:
    """Whether the snapshot's task was finished by the last status change known (``since``, else
    the snapshot's own): `phx state done` or `idle` (to idle). A session's end, a failure or a
    stall leave it unfinished."""
    for event in reversed(since):
        meta = event.get("meta")
        if isinstance(meta, dict) and "to" in meta and "task" in meta:
            return bool(meta["to"] == "idle")
    return value.get("status") == "idle" and value.get("status_event") in ("task_done", "state_idle")


def _highest_note(events: list[dict[str, Any]]) -> int:
    """The highest note number the events gave."""
    numbers = [
        e["meta"]["id"]
        for e in events
        if e.get("event") == "note_added" and isinstance(e.get("meta"), dict) and type(e["meta"].get("id")) is int
    ]
    return max(numbers, default=0)


def _snapshot_state(value: dict[str, Any]) -> AgentState:
    """The snapshot as a state (task, output, notes, numbering), for ``rebuild_state`` to replay
    the events since over it."""
    from phoenix_protocol.agent._state import AgentState

    state = AgentState()
    for key in ("current_task", "last_output"):
        if isinstance(value.get(key), str):
            setattr(state, key, value[key])
    if value.get("status") in ("idle", "working", "error"):
        state.status = value["status"]
    numbers: set[int] = set()
    for key in ("open_loops", "next_actions"):
        items = value.get(key)
        clean = []
        for item in items if isinstance(items, list) else []:
            well_formed = isinstance(item, dict) and type(item.get("id")) is int and isinstance(item.get("text"), str)
            if well_formed and item["id"] not in numbers:  # a snapshot edited by hand: one note per number
                numbers.add(item["id"])
                note = dict(item)
                if not isinstance(note.get("task"), str):  # a snapshot an earlier Phoenix took
                    note["task"] = state.current_task
                clean.append(note)
        setattr(state, key, clean)
    seq = value.get("note_seq")
    state.note_seq = max([seq if type(seq) is int else 0, *numbers])
    return state


def restore_state_snapshot(value: Any, agent: Agent, force: bool) -> dict[str, Any]:
    """Put task and notes back into state.json: the checkpoint's in place of state.json's with
    ``force``; otherwise what state.json lost, never what was finished since the checkpoint.

    What is true now is the snapshot with the ops events logged since replayed over it
    (``rebuild_state``, as ``phx doctor`` rebuilds a lost state.json from the log): a task resumed
    comes back, one done, cleared or replaced does not (``_task_finished``); a note resolved since
    does not come back, one added since and lost does. Of that, state.json gets the task and the
    last output where it has none, and each note its list does not hold (matched by number and
    text, else by text); a note whose number state.json gave to another gets the next number.

    When the events since the snapshot are not all known (``_since_snapshot``), the snapshot
    stands for the truth and only what state.json has none of (the task, a list of notes) comes
    back, as earlier versions did: better to bring back what may have been finished than to lose
    what was not. Either way, and with ``force``, numbering goes on past every note number the
    kept log gave. Every note put back is logged as ``note_added`` and every note ``force`` drops
    as ``note_resolved``, so that a rebuild from the log, and the next restore, agree. The events
    are read under the state's lock, so that no change slips in between."""
    if not isinstance(value, dict):
        return {"restored": []}
    from phoenix_protocol.agent._replay import rebuild_state
    from phoenix_protocol.agent._state import Transition, switch_task

    snapshot = _snapshot_state(value)
    restored: list[str] = []

    def note_event(name: str, kind: str, item: dict[str, Any]) -> Transition:
        meta = {"kind": kind, "id": item["id"], "text": item["text"]}
        if isinstance(item.get("task"), str):
            meta["task"] = item["task"]
        return Transition(name, "ok", meta, trusted=True)

    def mutate(state: AgentState) -> list[Any]:
        restored.clear()
        logged: list[Transition] = []
        since, complete = _since_snapshot(agent, value)
        state.note_seq = max(state.note_seq, snapshot.note_seq, _highest_note(since))
        lists = (("open_loops", "open_loop"), ("next_actions", "next_action"))
        if force:
            if snapshot.current_task:
                switch_task(state, snapshot.current_task)
                restored.append("current_task")
            if snapshot.last_output:
                state.last_output = snapshot.last_output
                restored.append("last_output")
            if snapshot.open_loops or snapshot.next_actions:
                added: list[Transition] = []  # logged after every removal: a number may pass between lists
                for key, kind in lists:
                    held = {(i.get("id"), i.get("text")) for i in getattr(state, key)}
                    wanted = {(i["id"], i["text"]) for i in getattr(snapshot, key)}
                    logged += [
                        note_event("note_resolved", kind, i)
                        for i in getattr(state, key)
                        if (i.get("id"), i.get("text")) not in wanted
                    ]
                    added += [
                        note_event("note_added", kind, i)
                        for i in getattr(snapshot, key)
                        if (i["id"], i["text"]) not in held
                    ]
                    setattr(state, key, getattr(snapshot, key))
                logged += added
                restored.extend(["open_loops", "next_actions"])
        else:
            truth = rebuild_state(since, start=snapshot)[0] if complete else snapshot
            state.note_seq = max(state.note_seq, truth.note_seq)
            finished = _task_finished(value, since if complete else [])
            if not state.current_task and truth.current_task and not finished:
                switch_task(state, truth.current_task)
                restored.append("current_task")
            if not state.last_output and truth.last_output:
                state.last_output = truth.last_output
                restored.append("last_output")
            numbers = {i.get("id") for i in state.open_loops + state.next_actions}
            state.note_seq = max([state.note_seq, *(n for n in numbers if type(n) is int)])
            for key, kind in lists:
                mine: list[dict[str, Any]] = getattr(state, key)
                theirs: list[dict[str, Any]] = getattr(truth, key)
                if not complete and mine:
                    continue  # unknown history: a list state.json has is left as it is
                pairs = {(i.get("id"), i.get("text")) for i in mine}
                true_pairs = {(t["id"], t["text"]) for t in theirs}
                # state.json's notes the truth does not hold as they are (renumbered by a restore
                # the log does not show yet, say): each stands for one of the truth's, by text
                texts = Counter(i.get("text") for i in mine if (i.get("id"), i.get("text")) not in true_pairs)
                lost = []
                for item in theirs:
                    if (item["id"], item["text"]) in pairs:
                        continue
                    if texts[item["text"]] > 0:
                        texts[item["text"]] -= 1
                        continue
                    back = dict(item)
                    if back["id"] in numbers:  # its number went to another note since state.json was lost
                        state.note_seq += 1
                        back["id"] = state.note_seq
                    numbers.add(back["id"])
                    lost.append(back)
                    logged.append(note_event("note_added", kind, back))
                if lost:
                    setattr(state, key, sorted([*mine, *lost], key=lambda i: int(i.get("id") or 0)))
                    restored.append(key)
        if not restored:
            return []
        meta: dict[str, Any] = {"fields": list(restored)}
        if "current_task" in restored:
            meta["task"] = state.current_task  # for a rebuild from the log (``rebuild_state``)
        if "last_output" in restored:
            meta["output"] = state.last_output
        return [*logged, Transition("state_restored", "ok", meta, trusted=True)]

    agent.state.change(mutate)
    return {"restored": list(restored)}


def collect_identity(ctx: CollectContext) -> dict[str, Any] | None:
    """A copy of the identity as it reads now (its seal checked) and that seal: what ``phx doctor``
    writes back when identity.yaml is damaged (``IdentityStore.repair``)."""
    read_ms, identity, error = _identity_read(ctx)
    if error is not None:
        raise error  # recorded as the section's error: this checkpoint holds no copy to restore
    if identity is None:
        return None
    from phoenix_protocol.agent._identity import digest_of

    return {"document": identity.as_dict(), "digest": digest_of(identity.immutable), "read_ms": read_ms}


def hand_back(value: T, agent: Agent, force: bool) -> T:
    """Sections that describe the agent's mind are returned to the caller to hand over."""
    return value


def register_defaults(store: CheckpointStore) -> None:
    """Register the default collector (and restorer) of every section."""
    store.register("current_task", collect_current_task)
    store.register("mailbox", collect_mailbox)
    store.register("operational_context", collect_operational_context, hand_back)
    store.register("memory", collect_memory)
    store.register("context", collect_context, hand_back)
    store.register("recent_memories", collect_recent_memories, hand_back)
    store.register("identity_updates", collect_identity_updates)
    store.register("working_memory", collect_working_memory, hand_back)
    store.register("phoenix_state", collect_state_snapshot, restore_state_snapshot)
    store.register("identity", collect_identity)
