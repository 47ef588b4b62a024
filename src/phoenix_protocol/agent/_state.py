"""``state.json``: what an agent is doing, written so that a new session can carry on.

The record (schema version 1) keeps seed 000's fields exactly (``status``, ``current_task``,
``last_active``, ``last_output``, ``error_message``) and adds what recovery needs: the session,
the agent's own process (host, pid and start time, so PID reuse is not mistaken for life), a
heartbeat counter, the last tool call, open loops and next actions, and who set the status.

Facts are tied to what they describe: each open loop and next action carries the task it was
written under (a new task starts clean; the notes of an earlier task stay with it, and come back
when that task does), ``recent_work`` holds what was done for the current task (commands run,
files written, screened on the hot path by ``core._screen``), and ``tool_calls`` and
``last_tool`` belong to the session (they start over with a new one). Notes an earlier Phoenix
wrote carry no task: the first write other than a heartbeat tags them from the ops log
(``StateStore._tag_notes``).

Writes: every change is a read-modify-write under the file's lock, written atomically
(``_durable.atomic_write``); the ops event describing a transition is appended *before* the
state is replaced, so the log can always rebuild the state (``phx doctor``). Unknown fields
written by other tools are kept. A file newer than this code is refused; older ones (the
seed's plain format has no ``schema_version``) are migrated forward in memory and written in
the new format on the next change.

Status precedence (seed 000): watchdog > hook > model. A *verdict* stands against lower-ranked
writers: the watchdog's judgement (e.g. "process gone") can only be changed by the watchdog, a
new session starting (the SessionStart hook), or ``force``; the SessionEnd hook's "session over"
cannot be contradicted by a model write from that same session (a late write of a dead
session). Outside verdicts the latest write wins: the model may mark its own task done or
failed in a live session. A refused write raises ``StatusRefusedError`` and changes nothing.

Hot path: no ``json``, ``re``, ``typing`` or ``dataclasses`` at import time.
"""

from __future__ import annotations

import os

from phoenix_protocol.agent._ops import OpsLog
from phoenix_protocol.core._clock import Clock, iso_from_ms, system_clock
from phoenix_protocol.core._config import Config
from phoenix_protocol.core._durable import FileLock, atomic_write, read_bytes
from phoenix_protocol.core._errors import CorruptStateError, SchemaVersionError, StatusRefusedError, UsageError
from phoenix_protocol.core._jsonio import JSONError, dumps_document, loads

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

    from phoenix_protocol.agent._state_pg import PgAgentRecord

__all__ = [
    "CHECKPOINT_CLAIM_LEASE_MS",
    "MAX_STATE_BYTES",
    "SCHEMA_VERSION",
    "SOURCES",
    "STATUSES",
    "TURNS",
    "AgentState",
    "StateStore",
    "Transition",
    "abandoned_claim",
    "claim_due_checkpoints",
    "claim_meta",
    "clock_stepped_back",
    "due_checkpoints",
    "is_new_session",
    "release_checkpoint_claim",
]

SCHEMA_VERSION = 1
STATUSES = ("idle", "working", "error")
SOURCES = ("model", "hook", "watchdog")
RANK = {"model": 1, "hook": 2, "watchdog": 3}
TURNS = ("busy", "idle")
"""``state.turn``: a turn runs (a prompt was submitted, tools are called) or the agent waits at
its prompt (the turn ended: the Stop hook; or a new session started)."""
MAX_TEXT = 4000
"""Longest free-text value kept in a state field (longer ones are cut with an ellipsis)."""
MAX_STATE_BYTES = 8 * 1024 * 1024
"""The largest ``state.json`` read, or written (a thousand notes of ``MAX_TEXT`` fit four times over):
a larger file is refused unread (``UnsafeFileError``: ``phx doctor`` moves it aside and rebuilds
the state from the ops log), so that no file on disk can make a hook slow."""
CHECKPOINT_CLAIM_LEASE_MS = 5 * 60_000
"""How long a claimed time-based checkpoint may stay untaken: the claimant (the PostToolUse hook's
detached child, a loop's ``maybe_checkpoint``) releases its claim once the checkpoint is written,
so a claim held longer is one whose claimant died or failed, and the next heartbeat claims it again."""

# field -> (accepted types, default factory). Order here is the order on disk.
_STR = (str,)
_OPT_STR = (str, type(None))
_OPT_INT = (int, type(None))
_OPT_NUM = (int, float, type(None))
_FIELDS: dict[str, tuple[tuple[type, ...], Callable[[], Any]]] = {
    "schema_version": ((int,), lambda: SCHEMA_VERSION),
    "status": (_STR, lambda: "idle"),
    "current_task": (_STR, lambda: ""),
    "last_active": (_OPT_STR, lambda: None),
    "last_active_ms": (_OPT_INT, lambda: None),
    "last_output": (_OPT_STR, lambda: None),
    "error_message": (_OPT_STR, lambda: None),
    "updated_by": (_STR, lambda: "model"),
    "status_event": (_OPT_STR, lambda: None),
    "session_id": (_OPT_STR, lambda: None),
    "session_started_at": (_OPT_STR, lambda: None),
    "host": (_OPT_STR, lambda: None),
    "pid": (_OPT_INT, lambda: None),
    "pid_start_time": (_OPT_NUM, lambda: None),
    "heartbeat_seq": ((int,), lambda: 0),
    "tool_calls": ((int,), lambda: 0),
    "last_tool": ((dict, type(None)), lambda: None),
    "open_loops": ((list,), list),
    "next_actions": ((list,), list),
    "note_seq": ((int,), lambda: 0),
    "recent_work": ((list,), list),
    "last_heartbeat_logged_ms": (_OPT_INT, lambda: None),
    "work_started_ms": (_OPT_INT, lambda: None),
    "last_checkpoint_ms": (_OPT_INT, lambda: None),
    "checkpoint_claim": ((dict, type(None)), lambda: None),
    "refresh_requested": ((dict, type(None)), lambda: None),
    "recent_actions": ((list,), list),
    "last_progress_ms": (_OPT_INT, lambda: None),
    "drift": ((dict, type(None)), lambda: None),
    "turn": (_OPT_STR, lambda: None),
    "turn_at_ms": (_OPT_INT, lambda: None),
    "tmux": ((dict, type(None)), lambda: None),
}


def _clip(text: str) -> str:
    return text if len(text) <= MAX_TEXT else text[: MAX_TEXT - 1] + "…"


def _clean_text(text: object, what: str) -> str:
    """Free text on its way into state: a string, redacted, clipped."""
    if not isinstance(text, str):
        raise UsageError(f"{what} must be text, not {type(text).__name__}.")
    if "\x00" in text:
        raise UsageError(f"{what} must not contain NUL characters.")
    from phoenix_protocol.core._redact import redact

    return _clip(redact(text.strip()))


def _logged_session(session_id: str | None) -> str | None:
    """A session id as an ops event written ``trusted`` may hold it: redacted (``phx state
    --session`` takes any text, where the hooks and ``phx restore`` give ids)."""
    if not session_id:
        return None
    from phoenix_protocol.core._redact import redact

    return _clip(redact(session_id))


class AgentState:
    """One agent's ``state.json`` as attributes. ``extra`` holds fields written by other tools."""

    schema_version: int
    status: str
    current_task: str
    last_active: str | None
    last_active_ms: int | None
    last_output: str | None
    error_message: str | None
    updated_by: str
    status_event: str | None
    session_id: str | None
    session_started_at: str | None
    host: str | None
    pid: int | None
    pid_start_time: float | None
    heartbeat_seq: int
    tool_calls: int
    last_tool: dict[str, Any] | None
    open_loops: list[dict[str, Any]]
    next_actions: list[dict[str, Any]]
    note_seq: int
    recent_work: list[list[Any]]
    last_heartbeat_logged_ms: int | None
    work_started_ms: int | None
    last_checkpoint_ms: int | None
    checkpoint_claim: dict[str, Any] | None
    refresh_requested: dict[str, Any] | None
    recent_actions: list[list[Any]]
    last_progress_ms: int | None
    drift: dict[str, Any] | None
    turn: str | None
    turn_at_ms: int | None
    tmux: dict[str, Any] | None

    def __init__(self, **fields: Any) -> None:
        self.extra: dict[str, Any] = {}
        for name, (_types, default) in _FIELDS.items():
            setattr(self, name, fields.pop(name) if name in fields else default())
        if fields:
            raise TypeError(f"unknown AgentState fields: {', '.join(sorted(fields))}")

    @classmethod
    def from_dict(cls, data: dict[str, Any], *, path: str = "state.json") -> AgentState:
        """Validate and migrate a decoded ``state.json``. Raises ``CorruptStateError`` or
        ``SchemaVersionError`` naming ``path``."""
        if not isinstance(data, dict):
            raise CorruptStateError(f"{path} is not a JSON object; run `phx doctor` to rebuild it.", path=path)
        version = data.get("schema_version", 0)
        if not isinstance(version, int) or isinstance(version, bool) or version < 0:
            raise CorruptStateError(f"{path}: schema_version {version!r} is not a version number.", path=path)
        if version > SCHEMA_VERSION:
            raise SchemaVersionError(
                f"{path} was written by a newer Phoenix (schema_version {version}; this one reads up to "
                f"{SCHEMA_VERSION}). Upgrade phoenix-protocol to read it; the file was left as it is.",
                path=path,
                found=version,
                supported=SCHEMA_VERSION,
            )
        data = dict(data)
        for step in range(version, SCHEMA_VERSION):
            data = MIGRATIONS[step](data)
        state = cls()
        for name, value in data.items():
            spec = _FIELDS.get(name)
            if spec is None:
                state.extra[name] = value
                continue
            types = spec[0]
            if not isinstance(value, types) or (isinstance(value, bool) and bool not in types):
                raise CorruptStateError(
                    f"{path}: field {name!r} has {type(value).__name__} {value!r:.60}, expected "
                    f"{' or '.join('null' if t is type(None) else t.__name__ for t in types)}; "
                    "run `phx doctor` to rebuild it.",
                    path=path,
                )
            setattr(state, name, value)
        if state.status not in STATUSES:
            raise CorruptStateError(
                f"{path}: status {state.status!r} is not one of {', '.join(STATUSES)}; run `phx doctor`.", path=path
            )
        if state.updated_by not in SOURCES:
            raise CorruptStateError(f"{path}: updated_by {state.updated_by!r} is not one of {SOURCES}.", path=path)
        for key in ("open_loops", "next_actions"):
            for item in getattr(state, key):
                if not (
                    isinstance(item, dict) and isinstance(item.get("id"), int) and isinstance(item.get("text"), str)
                ):
                    raise CorruptStateError(
                        f"{path}: {key} holds an entry without id and text: {item!r:.80}", path=path
                    )
                if not isinstance(item.get("task", ""), str):
                    raise CorruptStateError(
                        f"{path}: {key} holds an entry whose task is not text: {item!r:.80}", path=path
                    )
        return state

    def to_dict(self) -> dict[str, Any]:
        """The record as written: known fields in schema order, then unknown fields as found."""
        out: dict[str, Any] = {name: getattr(self, name) for name in _FIELDS}
        for key, value in self.extra.items():
            if key not in out:
                out[key] = value
        return out

    def copy(self) -> AgentState:
        """An independent copy (lists and dicts copied one level deep, which is all state has)."""
        clone = AgentState()
        for name in _FIELDS:
            value = getattr(self, name)
            if isinstance(value, list):
                value = [dict(v) if isinstance(v, dict) else list(v) if isinstance(v, list) else v for v in value]
            elif isinstance(value, dict):
                value = dict(value)
            setattr(clone, name, value)
        clone.extra = dict(self.extra)
        return clone

    @property
    def is_verdict(self) -> bool:
        """Whether the current status is a verdict lower-ranked writers may not contradict."""
        return self.updated_by == "watchdog" or (self.updated_by == "hook" and self.status_event == "session_end")

    def __repr__(self) -> str:
        return f"AgentState(status={self.status!r}, current_task={self.current_task!r}, session_id={self.session_id!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, AgentState) and self.to_dict() == other.to_dict()

    __hash__ = None  # type: ignore[assignment]


def _migrate_v0(data: dict[str, Any]) -> dict[str, Any]:
    """Seed 000's format (no schema_version): status, current_task, last_active (any ISO form)."""
    out = dict(data)
    out["schema_version"] = 1
    last = out.get("last_active")
    if isinstance(last, str) and last:
        from phoenix_protocol.core._clock import ms_from_iso

        try:
            ms = ms_from_iso(last)
            out["last_active_ms"] = ms
            out["last_active"] = iso_from_ms(ms)
        except ValueError:
            pass
    if out.get("current_task") is None:
        out["current_task"] = ""
    return out


MIGRATIONS: dict[int, Callable[[dict[str, Any]], dict[str, Any]]] = {0: _migrate_v0}


def is_new_session(state: AgentState, session_id: str, source: str) -> bool:
    """Whether a SessionStart begins a new session: a new id, or ``startup``/``clear``/``resume``
    (``claude --resume`` keeps the id of the session it brings back: a new life of it, since the
    old one ended or died). ``compact`` continues the session."""
    return source in ("startup", "clear", "resume") or state.session_id != session_id


def _progress(state: AgentState, now_ms: int | None) -> None:
    """The agent moved its own work on (task, notes): progress for the drift detectors."""
    if now_ms is not None:
        state.last_progress_ms = max(state.last_progress_ms or 0, now_ms)
    state.drift = None


def _track_work(state: AgentState, previous: str) -> None:
    """Keep ``work_started_ms``: set when work starts, cleared when it stops."""
    if state.status == "working" and (previous != "working" or state.work_started_ms is None):
        state.work_started_ms = state.last_active_ms
    elif state.status != "working":
        state.work_started_ms = None


# -- the facts of a task and of a session (what the brief hands over) -------------------------

WORK_KEEP = 12
"""Entries ``recent_work`` keeps: the newest commands run and files written for the current task."""


def note_task(item: dict[str, Any], state: AgentState) -> str:
    """The task a note belongs to: the one current when it was written (``task``). A note an
    earlier Phoenix wrote has none: it counts as the current task's until the next write tags it
    from the ops log (``StateStore.change_locked``)."""
    task = item.get("task")
    return task if isinstance(task, str) else state.current_task


def task_notes(state: AgentState) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The current task's open loops and next actions."""
    task = state.current_task
    return (
        [item for item in state.open_loops if note_task(item, state) == task],
        [item for item in state.next_actions if note_task(item, state) == task],
    )


def other_tasks(state: AgentState) -> list[tuple[str, int]]:
    """Earlier tasks that still hold open notes: ``(task, open items)``, oldest note first. A
    note written with no task at all counts under ``""``."""
    counts: dict[str, int] = {}
    for item in sorted(state.open_loops + state.next_actions, key=lambda i: i["id"]):
        task = note_task(item, state)
        if task != state.current_task:
            counts[task] = counts.get(task, 0) + 1
    return list(counts.items())


def switch_task(state: AgentState, task: str) -> None:
    """``task`` becomes the current task. When it is another one, the record of work done
    (``recent_work``) and the last output start over (they were the task before's), and notes
    written while there was no task at all are adopted by it; notes of the task before stay with
    that task."""
    if task == state.current_task:
        return
    if not state.current_task:
        for item in state.open_loops + state.next_actions:
            if item.get("task") == "":
                item["task"] = task
    state.recent_work = []
    state.last_output = None
    state.current_task = task


def begin_session_facts(state: AgentState) -> None:
    """A new session's own facts start from nothing: its tool calls and its last tool; and an
    error of an earlier session is no longer the state's (the status is working again)."""
    state.tool_calls = 0
    state.last_tool = None
    state.error_message = None


def record_work(state: AgentState, now_ms: int, tool: str, detail: str, ok: bool) -> None:
    """One thing done (a command run, a file written: ``detail``, already screened) joins
    ``recent_work``: ``[ms, tool, detail, ok]``, oldest first, each thing once (the same command
    run again, a file written and then edited, moves to the end), at most ``WORK_KEEP``."""
    ring = [entry for entry in state.recent_work if not (len(entry) > 2 and entry[2] == detail)]
    ring.append([now_ms, tool, detail, ok])
    state.recent_work = ring[-WORK_KEEP:]


def untagged_notes(state: AgentState) -> bool:
    """Whether a note has no task (written by an earlier Phoenix)."""
    return any("task" not in item for item in state.open_loops) or any(
        "task" not in item for item in state.next_actions
    )


def claim_due_checkpoints(state: AgentState, config: Config, now_ms: int) -> list[str]:
    """The time-based checkpoints due for ``state``, claimed: marked as taken in ``state``
    (``last_checkpoint_ms``; a recovery also starts a new stretch of work and sets the
    ``refresh_requested`` flag), so that of the processes and threads that look at the same state
    under its lock, one takes them. The claim is recorded (``checkpoint_claim``: kinds, time) until
    the claimant releases it (``release_checkpoint_claim``); one still held after
    ``CHECKPOINT_CLAIM_LEASE_MS`` is claimed again (its claimant died: the checkpoint was never
    taken). Times a clock stepped back left in the future are brought back to ``now_ms`` first
    (otherwise nothing would be due until the clock caught up with them)."""
    if state.work_started_ms is not None and state.work_started_ms > now_ms:
        state.work_started_ms = now_ms
    if state.last_checkpoint_ms is not None and state.last_checkpoint_ms > now_ms:
        state.last_checkpoint_ms = now_ms
    claim = state.checkpoint_claim
    if claim is not None and type(claim.get("ms")) is int and claim["ms"] > now_ms:
        claim["ms"] = now_ms
    kinds = due_checkpoints(state, config, now_ms)
    retake = abandoned_claim(state, now_ms) if claim is not None else []
    if retake:
        kinds = ["recovery"] if "recovery" in (*kinds, *retake) else ["routine"]
    elif claim is not None and not _claim_current(state):
        state.checkpoint_claim = None  # work stopped, or a new stretch began
    if kinds:
        state.last_checkpoint_ms = now_ms
        if "recovery" in kinds:
            state.work_started_ms = now_ms
            state.refresh_requested = {
                "at": iso_from_ms(now_ms),
                "reason": f"{config.refresh_after_minutes:g} minutes of continuous work",
                "checkpoint": None,  # named once taken
            }
        state.checkpoint_claim = {"kinds": kinds, "ms": now_ms}
        if retake and claim is not None:
            state.checkpoint_claim["taken_over_from"] = claim.get("ms")
    return kinds


def _claim_current(state: AgentState) -> bool:
    """Whether ``state.checkpoint_claim`` belongs to the stretch of work going on."""
    claim = state.checkpoint_claim or {}
    ms = claim.get("ms")
    return (
        state.status == "working"
        and type(ms) is int
        and state.work_started_ms is not None
        and state.work_started_ms <= ms
    )


def abandoned_claim(state: AgentState, now_ms: int) -> list[str]:
    """The kinds of a checkpoint claim held past ``CHECKPOINT_CLAIM_LEASE_MS`` in the stretch of
    work going on (its claimant never released it: they were not taken), else ``[]``."""
    claim = state.checkpoint_claim
    if not claim or not _claim_current(state):
        return []
    if now_ms - claim["ms"] < CHECKPOINT_CLAIM_LEASE_MS:
        return []
    kinds = claim.get("kinds")
    return [k for k in kinds if k in ("routine", "recovery")] if isinstance(kinds, list) else []


def claim_meta(state: AgentState) -> dict[str, Any]:
    """The ``checkpoint_due`` event's meta for the claim just made: its kinds, and the time of an
    abandoned claim it took over."""
    claim = state.checkpoint_claim or {}
    meta: dict[str, Any] = {"types": claim.get("kinds")}
    if "taken_over_from" in claim:
        meta["taken_over_from"] = claim["taken_over_from"]
    return meta


def release_checkpoint_claim(state: AgentState, started_ms: int) -> bool:
    """Drop the claim of a claimant that started at ``started_ms`` and has taken what it claimed
    (a claim made after that is someone else's). Returns whether there was one to drop."""
    claim = state.checkpoint_claim
    if claim is None:
        return False
    ms = claim.get("ms")
    if type(ms) is int and ms > started_ms:
        return False
    state.checkpoint_claim = None
    return True


def clock_stepped_back(state: AgentState, now_ms: int) -> bool:
    """Whether ``state`` holds work times after ``now_ms`` (the clock was set back since)."""
    claimed = (state.checkpoint_claim or {}).get("ms")
    return (
        (state.work_started_ms or 0) > now_ms
        or (state.last_checkpoint_ms or 0) > now_ms
        or (type(claimed) is int and claimed > now_ms)
    )


def due_checkpoints(state: AgentState, config: Config, now_ms: int) -> list[str]:
    """Time-based checkpoints due for ``state`` (pure; the heartbeat calls it on every tool call):
    ``recovery`` after ``refresh_after_minutes`` of continuous work, else ``routine`` after
    ``checkpoint_interval_minutes`` since the last checkpoint (or since work started)."""
    if state.status != "working" or state.work_started_ms is None:
        return []
    refresh = int(config.refresh_after_minutes * 60_000)
    if refresh and now_ms - state.work_started_ms >= refresh:
        return ["recovery"]
    interval = int(config.checkpoint_interval_minutes * 60_000)
    reference = max(state.last_checkpoint_ms or 0, state.work_started_ms)
    if interval and now_ms - reference >= interval:
        return ["routine"]
    return []


"""``MIGRATIONS[n]`` turns a version-``n`` record into version ``n + 1``."""


class Transition:
    """An ops event to log with a state change: ``(event, status, meta, trusted)``."""

    __slots__ = ("durable", "event", "meta", "status", "trusted")

    def __init__(
        self,
        event: str,
        status: str = "ok",
        meta: dict[str, Any] | None = None,
        *,
        trusted: bool = False,
        durable: bool = True,
    ) -> None:
        self.event = event
        self.status = status
        self.meta = meta
        self.trusted = trusted
        self.durable = durable


class StateStore:
    """Reads and changes one agent's ``state.json``, logging transitions to its ops log."""

    def __init__(
        self,
        directory: str,
        *,
        agent_id: str,
        ops: OpsLog,
        config: Config | None = None,
        clock: Clock = system_clock,
        prepare: Callable[[], None] | None = None,
    ) -> None:
        """``prepare`` runs before every locked write (``Agent`` uses it to create the agent
        directory and the home on first use)."""
        self.directory = directory
        self.prepare = prepare
        self.agent_id = agent_id
        self.path = os.path.join(directory, "state.json")
        self.ops = ops
        self.config = config or Config()
        self.clock = clock
        self._lost: tuple[tuple[tuple[str, int, int, int], ...], tuple[AgentState, dict[str, Any]] | None] | None = None
        """What ``lost`` last rebuilt, and from which files of the log (read again when they change)."""
        self.remote: Callable[[], PgAgentRecord] | None = None
        """On the PostgreSQL store: returns the agent's record on the server (``_state_pg``),
        through which ``read`` and ``change`` go; the file here is then this machine's copy."""

    def exists(self) -> bool:
        return os.path.exists(self.path)

    def read(self) -> AgentState:
        """The current state; a fresh idle state when there is none yet. On the PostgreSQL store,
        the newer of the server's record and this machine's copy.

        Raises ``CorruptStateError`` (unparsable or invalid) or ``SchemaVersionError`` (newer).
        """
        if self.remote is not None:
            return self.remote().read()
        return self.read_local()

    def read_local(self) -> AgentState:
        """This machine's ``state.json`` (see ``read``). A missing one is rebuilt from the ops
        log when that holds the agent's state events (``lost``), else it is a fresh state."""
        state, _lost = self._local()
        return state if state is not None else AgentState()

    def _local(self) -> tuple[AgentState | None, dict[str, Any] | None]:
        """This machine's ``state.json`` (one open, no stat first), or, missing, the state
        ``lost`` rebuilds and the meta of its ``state_rebuilt`` event; ``(None, None)``: neither."""
        data = read_bytes(self.path, limit=MAX_STATE_BYTES)
        if data is not None:
            return self.parse(data), None
        lost = self.lost(missing=True)
        return (lost[0], lost[1]) if lost is not None else (None, None)

    def read_if_any(self) -> AgentState | None:
        """The current state, or ``None`` when it is missing (and not rebuilt from the ops log:
        ``lost``). Raises as ``read`` does."""
        if self.remote is not None:
            return self.read()
        return self._local()[0]

    def read_or_none(self) -> AgentState | None:
        """The current state, or ``None`` when it is missing (and not rebuilt from the ops log:
        ``lost``), corrupt or newer (for readers that can do without it)."""
        try:
            return self.read_if_any()
        except (CorruptStateError, SchemaVersionError):
            return None

    def lost(self, *, thorough: bool = False, missing: bool = False) -> tuple[AgentState, dict[str, Any]] | None:
        """When ``state.json`` is missing though this machine's ops log holds the agent's state
        events (it was deleted, or lost with a disk), the state rebuilt from them
        (``_doctor.rebuild_state``, as ``phx doctor`` rebuilds a damaged one) and the meta of the
        ``state_rebuilt`` event its next write logs; ``None`` when there is a file, or no such
        history (a new agent starts fresh). Off the hot path: only a missing file reads the log,
        and only when its lock file says a state was written here (an agent that only takes
        checkpoints has a log, and never a state: its reads must not read the log each time);
        ``thorough`` (``phx doctor``) reads it all the same. ``missing``: the caller just found no
        file (it is not looked for again)."""
        if not missing and os.path.exists(self.path):
            return None
        if not thorough and not os.path.exists(self.path + ".lock"):
            return None
        files = self._log_files()
        if not files:
            return None
        if self._lost is not None and self._lost[0] == files:
            found = self._lost[1]  # the log has not changed since this process rebuilt from it
            return (found[0].copy(), dict(found[1])) if found is not None else None
        from phoenix_protocol.agent._replay import rebuild_state

        for _ in range(3):  # a rotation during the read would hide a whole file of events: read again
            events, _problems = self.ops.log.read()
            after = self._log_files()
            if after == files:
                break
            files = after
        state, used = rebuild_state(events)
        result = None
        if used:
            meta = {
                "reason": "missing",
                "events": len(events),
                "first_seq": events[0]["seq"],
                "last_seq": events[-1]["seq"],
                "used": used,
            }
            result = (state, meta)
        self._lost = (files, result)
        return (state.copy(), dict(result[1])) if result is not None else None

    def _log_files(self) -> tuple[tuple[str, int, int, int], ...]:
        """The ops log's files as they are now (name, inode, size, change time): what ``lost``
        rebuilt from, to tell whether it changed since."""
        out = []
        for path in self.ops.log.files():
            try:
                st = os.stat(path)
            except FileNotFoundError:
                continue
            out.append((path, st.st_ino, st.st_size, st.st_mtime_ns))
        return tuple(out)

    def parse(self, data: bytes) -> AgentState:
        """Parse the bytes of a ``state.json`` (see ``read``)."""
        if not data.strip():
            raise CorruptStateError(
                f"{self.path} is empty (a write was cut short?); run `phx doctor` to rebuild it from the ops log.",
                path=self.path,
            )
        try:
            decoded = loads(data)
        except JSONError as exc:
            raise CorruptStateError(
                f"{self.path} is not valid JSON ({exc}); it was left as it is. "
                "Run `phx doctor` to rebuild it from the ops log.",
                path=self.path,
            ) from None
        return AgentState.from_dict(decoded, path=self.path)

    def lock(self, timeout: float | None = None) -> FileLock:
        """The state file's lock (``change`` takes it; take it to read-modify-write by hand)."""
        if self.prepare is not None:
            self.prepare()
        return FileLock(self.path, self.config.lock_timeout if timeout is None else timeout)

    def change(
        self,
        mutate: Callable[[AgentState], list[Transition] | None],
        *,
        durable: bool = True,
        lock_timeout: float | None = None,
        local: bool = False,
        tag_notes: bool = True,
    ) -> AgentState:
        """Read-modify-write under the lock: ``mutate`` edits the state in place and returns the
        ops events to log. Events are appended first, then the state is replaced atomically;
        if the state write fails, the events are cut from the log again. Raise inside
        ``mutate`` to abort with nothing written.

        On the PostgreSQL store the change is made to this machine's copy and passed on to the
        server in the same step (``_state_pg``); ``local=True`` changes only the copy (the hot
        path: a detached process passes it on)."""
        if self.remote is not None and not local:
            return self.remote().change(mutate, durable=durable, lock_timeout=lock_timeout)
        with self.lock(lock_timeout):
            return self.change_locked(mutate, durable=durable, lock_timeout=lock_timeout, tag_notes=tag_notes)

    def change_locked(
        self,
        mutate: Callable[[AgentState], list[Transition] | None],
        *,
        durable: bool = True,
        lock_timeout: float | None = None,
        tag_notes: bool = True,
    ) -> AgentState:
        """``change`` of this machine's copy, for a caller holding ``lock()``. A missing
        ``state.json`` whose history the ops log holds is rebuilt from it first (``lost``), and
        the write logs ``state_rebuilt``: a lost state is never started again silently. Notes an
        earlier Phoenix wrote get their task first (``_tag_notes``; ``tag_notes=False``: not on
        the heartbeat's hot path, which would read the whole ops log)."""
        found, rebuilt = self._local()
        state = found if found is not None else AgentState()
        if tag_notes and untagged_notes(state):
            self._tag_notes(state)
        transitions = mutate(state) or []
        if rebuilt is not None:
            transitions.insert(0, Transition("state_rebuilt", "warn", rebuilt, trusted=True))
        if not transitions:
            self.write_locked(state, durable=durable)
            return state
        entries = [self.ops.make_entry(t.event, t.status, t.meta, trusted=t.trusted) for t in transitions]
        with self.ops.log.lock(lock_timeout):
            mark = self.ops.log.mark()
            try:
                for t, entry in zip(transitions, entries, strict=True):
                    self.ops.log.append_locked(entry, durable=t.durable)
                self.write_locked(state, durable=durable)
            except BaseException:
                # The change did not happen: its events must not say it did.
                self.ops.log.rollback(mark)
                raise
        return state

    def _tag_notes(self, state: AgentState) -> None:
        """Give each note an earlier Phoenix wrote (no ``task``) the task it was written under, as
        the ops log tells (``rebuild_state`` replays it); a note the log does not show gets the
        current task. Once per state: every note written from then on carries its task."""
        from phoenix_protocol.agent._replay import rebuild_state
        from phoenix_protocol.core._errors import PhoenixError

        try:
            events, _problems = self.ops.read()
        except PhoenixError:
            events = []
        replayed = rebuild_state(events)[0] if events else AgentState()
        known = {(item["id"], item["text"]): item.get("task") for item in replayed.open_loops + replayed.next_actions}
        for item in state.open_loops + state.next_actions:
            if "task" not in item:
                task = known.get((item["id"], item["text"]))
                item["task"] = task if isinstance(task, str) else state.current_task

    def write_locked(self, state: AgentState, *, durable: bool = True) -> None:
        """Replace the file with ``state`` (caller holds ``lock()``)."""
        state.schema_version = SCHEMA_VERSION
        data = dumps_document(state.to_dict()).encode("ascii")
        if len(data) > MAX_STATE_BYTES:
            raise UsageError(
                f"the state of agent {self.agent_id!r} would be {len(data):,} bytes, more than the "
                f"{MAX_STATE_BYTES:,} Phoenix reads back; resolve open loops or next actions (`phx note resolve`)."
            )
        atomic_write(self.path, data, durable=durable)

    # -- the transitions -------------------------------------------------------------------

    def _touch(self, state: AgentState, source: str) -> None:
        now = self.clock.now_ms()
        state.last_active_ms = now
        state.last_active = iso_from_ms(now)
        if source not in SOURCES:
            raise UsageError(f"source must be one of {', '.join(SOURCES)}, not {source!r}.")

    def _check_precedence(
        self, state: AgentState, source: str, session_id: str | None, *, force: bool, new_session: bool
    ) -> None:
        if force or new_session or RANK[source] >= RANK[state.updated_by] or not state.is_verdict:
            return
        if state.updated_by == "hook" and (session_id is None or session_id != state.session_id):
            # A session-end verdict only guards against late writes of the session it closed.
            return
        by = "the watchdog" if state.updated_by == "watchdog" else "the SessionEnd hook"
        what = f"{state.status} ({state.status_event})" if state.status_event else state.status
        raise StatusRefusedError(
            f"status not changed: {by} set it to {what} and a {source} write ranks lower "
            "(precedence watchdog > hook > model). A new session clears it; use --force to override."
        )

    def set_status(
        self,
        status: str,
        text: str | None = None,
        *,
        source: str = "model",
        session_id: str | None = None,
        force: bool = False,
        event: str | None = None,
        task: str | None = None,
    ) -> AgentState:
        """Change the status. ``text`` is the task (working), the summary (idle via done), or the
        error message (error). ``event`` names the transition in the ops log (default
        ``state_<status>``). ``task``: the task to record as well, whatever the status (seed
        000's ``state-update`` records its text as the task for each of its flags)."""
        if status not in STATUSES:
            raise UsageError(f"status must be one of {', '.join(STATUSES)}, not {status!r}.")
        clean = _clean_text(text, "the status text") if text is not None else None
        clean_task = _clean_text(task, "the task") if task is not None else None
        logged_session = _logged_session(session_id)
        name = event or {"working": "task_started", "idle": "task_done", "error": "task_error"}[status]

        def mutate(state: AgentState) -> list[Transition]:
            self._touch(state, source)
            self._check_precedence(state, source, session_id, force=force, new_session=False)
            previous = state.status
            state.status = status
            state.updated_by = source
            state.status_event = name
            _track_work(state, previous)
            if source == "model":
                _progress(state, state.last_active_ms)
            if status == "working":
                if clean is not None:
                    switch_task(state, clean)
                state.error_message = None
            elif status == "idle":
                if clean is not None:
                    state.last_output = clean
                elif name == "state_idle":
                    switch_task(state, "")
                state.error_message = None
            else:
                state.error_message = clean or state.error_message or "unspecified error"
            if clean_task is not None:
                state.current_task = clean_task
            meta: dict[str, Any] = {
                "from": previous,
                "to": status,
                "source": source,
                "task": state.current_task,
            }
            if logged_session:
                meta["session_id"] = logged_session
            if status == "idle" and clean is not None:
                meta["output"] = clean
            if status == "error":
                meta["error"] = state.error_message
            if force:
                meta["forced"] = True
            # Text was redacted on the way in: the meta needs no second pass.
            return [Transition(name, "error" if status == "error" else "ok", meta, trusted=True)]

        return self.change(mutate)

    def add_note(self, kind: str, text: str) -> tuple[AgentState, int]:
        """Add an open loop (``kind="open_loop"``) or a next action (``"next_action"``); return its number."""
        if kind not in ("open_loop", "next_action"):
            raise UsageError(f"note kind must be open_loop or next_action, not {kind!r}.")
        clean = _clean_text(text, "the note")
        if not clean:
            raise UsageError("a note needs some text.")
        number = 0

        def mutate(state: AgentState) -> list[Transition]:
            nonlocal number
            state.note_seq += 1
            number = state.note_seq
            item = {"id": number, "text": clean, "added_at": self.clock.now_iso(), "task": state.current_task}
            (state.open_loops if kind == "open_loop" else state.next_actions).append(item)
            _progress(state, self.clock.now_ms())
            meta = {"kind": kind, "id": number, "text": clean, "task": state.current_task}
            return [Transition("note_added", "ok", meta, trusted=True)]

        return self.change(mutate), number

    def resolve_note(self, number: int) -> tuple[AgentState, dict[str, Any]]:
        """Remove note ``number`` (an open loop or a next action); the ops log keeps it."""
        found: dict[str, Any] = {}

        def mutate(state: AgentState) -> list[Transition]:
            for kind, items in (("open_loop", state.open_loops), ("next_action", state.next_actions)):
                for i, item in enumerate(items):
                    if item.get("id") == number:
                        del items[i]
                        _progress(state, self.clock.now_ms())
                        found.update(item, kind=kind)
                        meta = {"kind": kind, "id": number, "text": item.get("text", "")}
                        return [Transition("note_resolved", "ok", meta, trusted=True)]
            known = [str(i["id"]) for i in state.open_loops + state.next_actions]
            raise UsageError(
                f"no open loop or next action number {number}"
                + (f"; the open ones are {', '.join(known)}." if known else "; there are none.")
            )

        return self.change(mutate), found

    # -- what the hooks write ----------------------------------------------------------------

    def start_session(
        self,
        session_id: str,
        *,
        source: str = "startup",
        process: dict[str, Any] | None = None,
        lock_timeout: float | None = None,
        client: str | None = None,
    ) -> tuple[AgentState, AgentState]:
        """Record a session start (SessionStart hook); returns ``(before, after)``.

        ``source`` is Claude Code's: ``startup``, ``resume``, ``clear`` or ``compact``. A new
        session id, or ``startup``/``clear``/``resume`` (``claude --resume`` keeps the id of the
        session it brings back), begins a new session: status working, set by the hook, which
        also clears any verdict about the previous one. ``compact`` keeps the session as it is,
        except that it answers a forced refresh (the flag is cleared, the work clock starts over).
        ``process`` is ``{"pid", "start_time", "host"}`` of the agent, and ``"tmux"`` when the
        agent runs in a tmux pane (``{"pane", "socket"}``: ``$TMUX_PANE``, and the server's socket
        from ``$TMUX``), which ``phx watchdog --tmux`` uses to find it. A new session waits at its
        prompt: its ``turn`` is ``idle`` until a prompt is submitted (``turn``). ``client`` the
        agent CLI whose hook reports the start (``codex``; the event's ``client``: ``phx doctor``
        tells from it which CLI's hooks ran).
        """
        from phoenix_protocol.core._ids import validate_session_id

        validate_session_id(session_id)  # stored and logged in clear: never a secret (hooks give a hash)
        before: list[AgentState] = []

        def mutate(state: AgentState) -> list[Transition]:
            before.append(state.copy())
            self._touch(state, "hook")
            new = is_new_session(state, session_id, source)
            recovered = new and state.status in ("working", "error")
            meta: dict[str, Any] = {
                "session_id": session_id,
                "source": source,
                "previous_status": state.status,
                "recovered": recovered,
            }
            if client is not None:
                meta["client"] = client
            if state.session_id and state.session_id != session_id:
                meta["previous_session_id"] = state.session_id
            if process:
                state.host = process.get("host")
                state.pid = process.get("pid")
                state.pid_start_time = process.get("start_time")
                meta["pid"] = state.pid
                meta["host"] = state.host
                state.tmux = process.get("tmux") or None
            if new:
                previous = state.status
                state.session_id = session_id
                state.session_started_at = state.last_active
                state.status = "working"
                state.updated_by = "hook"
                state.status_event = "session_start"
                if previous != "working" or state.work_started_ms is None or state.refresh_requested:
                    state.work_started_ms = state.last_active_ms
                state.refresh_requested = None  # this new session is the refresh
                state.turn, state.turn_at_ms = "idle", state.last_active_ms  # at its prompt
                begin_session_facts(state)
            elif state.refresh_requested and source == "compact":
                # The compacted conversation starts again from the fresh brief: that is the refresh
                # (and the continuous work it interrupts starts over).
                state.refresh_requested = None
                state.work_started_ms = state.last_active_ms if state.status == "working" else None
            meta["task"] = state.current_task
            return [Transition("session_start", "warn" if recovered else "ok", meta, trusted=True)]

        after = self.change(mutate, lock_timeout=lock_timeout)
        return before[0], after

    def heartbeat(
        self,
        *,
        session_id: str | None,
        tool: str | None,
        ok: bool = True,
        input_digest: str | None = None,
        error: str | None = None,
        durable: bool = True,
        lock_timeout: float | None = None,
        due: list[str] | None = None,
        duration_ms: int | None = None,
        progress: bool = False,
        drift: list[Any] | None = None,
        work: str | None = None,
        clean_tool: Callable[[], str] | None = None,
        turn: str | None = None,
        command: str | None = None,
    ) -> AgentState:
        """Record one tool call (PostToolUse hook): ``last_active``, ``heartbeat_seq``, ``last_tool``,
        the session's ``tool_calls`` and, with ``work`` (the command run or the file written,
        already screened: ``core._screen``), ``recent_work``.

        ``session_id`` may be the agent's text as it came: when it is not the state's own, it is
        kept as ``session_id_of`` says (a secret never is), so the hot path checks nothing more.

        A heartbeat line goes to the ops log at most every ``heartbeat_log_interval`` seconds;
        a failed tool is always logged. ``tool`` must be a plain name (checked by the caller);
        ``None`` (the Stop hook) leaves ``last_tool`` alone. ``error`` is free text and is redacted.
        ``clean_tool``: ``tool`` is a name the caller could not vouch for (not one of the agent
        CLI's own tools): unless it is the name of the last tool the state holds (which the
        redactor passed when it was written), the name recorded is what ``clean_tool()`` returns
        (the name through the redactor), so that the redactor (and ``re``) is loaded only for a
        name new to the state.

        ``turn``: where the conversation is (``TURNS``): ``busy`` from a submitted prompt (the
        ``user-prompt`` hook) until the turn ends (``idle``: the Stop hook); a tool call (``tool``
        given) is ``busy`` too. ``turn_at_ms`` is when it last changed.

        If ``due`` is a list, time-based checkpoints that are due (``due_checkpoints``) are
        *claimed* (marked as taken, so that no other process takes them too) and appended to it;
        the caller then takes them, off the hot path.

        The call joins ``recent_actions`` (the ring the drift detectors read: ``_drift``);
        ``progress`` says the tool is an editor: its success counts as progress unless the very
        same edit already succeeded recently (``_drift.is_progress``). If ``drift`` is a
        list, a *new* drift signal (one not already reported in this episode of drift:
        ``_drift.warn_once``) is recorded in ``state.drift``, logged, and appended to it with
        whether it opens the episode, so that the caller warns the model once per signal and takes
        a recovery checkpoint once per episode. ``command``: a shell tool's command, normalized
        (``_drift.normalize_command``), for the exempt commands (setting ``drift_exempt_commands``
        and the task's exemption, ``state.drift_exempt``).
        """
        # The tool's own output: sanitized, never refused (a heartbeat must always count). The
        # escape is \ufffd, not \N{...}: compiling a named escape imports unicodedata.
        clean_error = _clean_text(error.replace("\x00", "\ufffd"), "the tool error")[:500] if error else None
        interval_ms = int(self.config.heartbeat_log_interval * 1000)
        tool_name = tool

        def mutate(state: AgentState) -> list[Transition]:
            self._touch(state, "hook")
            state.heartbeat_seq += 1
            now = state.last_active_ms or 0
            tool = tool_name
            where = turn or ("busy" if tool is not None else None)
            if where is not None and state.turn != where:
                state.turn, state.turn_at_ms = where, now
            if tool is not None and clean_tool is not None and tool != (state.last_tool or {}).get("name"):
                tool = clean_tool()
            if tool is not None:
                state.tool_calls += 1
                if work is not None:
                    record_work(state, now, tool, work, ok)
                last_tool: dict[str, Any] = {"name": tool, "ok": ok, "at": state.last_active}
                if input_digest:
                    last_tool["input_digest"] = input_digest
                if clean_error:
                    last_tool["error"] = clean_error
                state.last_tool = last_tool
            out: list[Transition] = []
            adopted = session_id
            if session_id and session_id != state.session_id and (state.session_id is None or state.is_verdict):
                from phoenix_protocol.core._ids import hashed_session_id, session_id_of

                # Only now (the state's own id was kept so already); its hash first, which is cheap.
                own = state.session_id is not None and hashed_session_id(session_id) == state.session_id
                adopted = state.session_id if own else session_id_of(session_id)
            if adopted and adopted != state.session_id and (state.session_id is None or state.is_verdict):
                out.append(
                    Transition(
                        "session_adopted",
                        "warn",
                        {"session_id": adopted, "previous_session_id": state.session_id},
                        trusted=True,
                    )
                )
                state.session_id = adopted
            meta: dict[str, Any] = {"tool": tool or "(stop)", "heartbeat_seq": state.heartbeat_seq}
            if not ok:
                out.append(Transition("tool_failed", "warn", {**meta, "error": clean_error or ""}, trusted=True))
                state.last_heartbeat_logged_ms = now
            elif state.last_heartbeat_logged_ms is None or now - state.last_heartbeat_logged_ms >= interval_ms:
                out.append(Transition("heartbeat", "ok", meta, trusted=True, durable=durable))
                state.last_heartbeat_logged_ms = now
            if tool is not None:
                out += self._track_actions(state, now, tool, input_digest, ok, duration_ms, progress, drift, command)
            if due is not None:
                kinds = claim_due_checkpoints(state, self.config, now)
                if kinds:
                    due.extend(kinds)
                    out.append(Transition("checkpoint_due", "ok", claim_meta(state), trusted=True))
            return out

        # The hot path: this machine's copy only (the hook passes it on to a server store).
        return self.change(mutate, durable=durable, lock_timeout=lock_timeout, local=True, tag_notes=False)

    def _track_actions(
        self,
        state: AgentState,
        now: int,
        tool: str,
        digest: str | None,
        ok: bool,
        duration_ms: int | None,
        progress: bool,
        drift: list[Any] | None,
        command: str | None = None,
    ) -> list[Transition]:
        from phoenix_protocol.agent._drift import (
            EXEMPT_KEY,
            Action,
            DriftConfig,
            command_exempt,
            observe,
            task_exemption,
            warn_once,
        )

        config = DriftConfig.from_config(self.config)
        exempt_rules, exempt_commands = task_exemption(
            state.extra.get(EXEMPT_KEY), state.current_task, config.read_only_words
        )
        exempt = command is not None and command_exempt(command, config.exempt_commands + exempt_commands)
        actions = []
        for item in state.recent_actions:
            try:
                actions.append(Action.from_list(item))
            except (TypeError, ValueError):
                continue  # a hand-edited entry: skip it
        ring, progressed, signals = observe(
            actions,
            now_ms=now,
            tool=tool,
            digest=digest or "-",
            ok=ok,
            duration_ms=duration_ms,
            config=config,
            # Work that has not progressed since it started counts from its start.
            last_progress_ms=state.last_progress_ms or state.work_started_ms,
            edit=progress,
            exempt=exempt,
            exempt_rules=exempt_rules,
        )
        state.recent_actions = [a.to_list() for a in ring]
        if progressed:
            state.last_progress_ms = now
            state.drift = None
            return []
        if state.status != "working" or not signals:
            return []
        found = warn_once(signals, state.drift, state.last_active or "")
        if found is None:
            return []  # already reported in this episode: warn once
        signal, state.drift, opens = found
        if drift is not None and opens:
            # One warning per episode: the model hears the first signal (and a recovery
            # checkpoint is taken); later signals of the episode are logged, not injected.
            drift.append((signal, opens))
        meta = {"kind": signal.kind, "detail": signal.detail, "episode_opened": opens}
        return [Transition("drift_detected", "warn", meta, trusted=True)]

    def end_session(
        self, session_id: str | None, *, reason: str = "other", lock_timeout: float | None = None
    ) -> AgentState:
        """Record a clean session end (SessionEnd hook): status idle, unless the state already
        belongs to a newer session, in which case only the event is logged."""
        if session_id is not None:
            from phoenix_protocol.core._ids import validate_session_id

            validate_session_id(session_id)  # logged in clear: never a secret (hooks give a hash)

        def mutate(state: AgentState) -> list[Transition]:
            meta: dict[str, Any] = {"session_id": session_id, "reason": reason}
            if session_id and state.session_id and session_id != state.session_id:
                meta["current_session_id"] = state.session_id
                return [Transition("session_end", "warn", {**meta, "stale": True}, trusted=True)]
            self._touch(state, "hook")
            meta["previous_status"] = state.status
            meta["task"] = state.current_task
            previous = state.status
            state.status = "idle"
            state.updated_by = "hook"
            state.status_event = "session_end"
            state.error_message = None  # an error is the state's only while its status is error
            _track_work(state, previous)
            return [Transition("session_end", "ok", meta, trusted=True)]

        return self.change(mutate, lock_timeout=lock_timeout)
