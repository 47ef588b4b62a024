"""An agent's state and ops log on the PostgreSQL store: ``PgAgentRecord``, on the tables
``phx_agent_state`` and ``phx_ops_events`` (migration 6 in ``_pg``).

The server holds the agent's record: its ``state.json`` text with a revision number (``rev``)
and the copy that wrote it (``origin``), and the ops events of every copy. Each machine that runs
or changes the agent keeps a *copy*: the ``state.json`` and ``ops.jsonl`` of the file store, plus
``store-link.json`` (the server and this copy's random ``origin`` id, written once) and
``.store-rev`` (the ``rev`` it last saw).

Why a copy: the PostToolUse hook's budget is a few milliseconds and psycopg's import alone costs
more, so the hot path writes the copy (``StateStore.heartbeat``) and a detached process started
every 30 s passes it on (``sync``). Every other writer (the CLI, the other hooks, the watchdog,
the service) goes through ``change``: one transaction that

1. takes the agent's lock on the server (a transaction-scoped advisory lock: across machines),
   then this copy's file lock (held for steps 2 and 3 only);
2. *pulls* if the server's record is newer than the copy (another machine wrote it since this
   copy last saw it): the copy takes the server's state, keeping what its own hot path wrote
   since (heartbeat fields, same session, newer) and logging ``state_pulled`` with the state it
   took (so the log alone still rebuilds the state) under a seq above every copy's events;
3. changes the copy exactly as the file store does (events first, then the state);
4. *pushes*: the copy's events the server lacks, and the state with ``rev + 1``.

So writers on different machines never lose each other's changes: the server's lock orders them
and each starts from the newest record. A hot-path change that meets a newer record on the server
keeps only its heartbeat fields (it never changes the status; the watchdog's verdict stands).

Readers (``read``, ``events``) return the newer of the server's record and this copy, and every
copy's events ordered by seq (each copy numbers its own, continuing from the server's highest
when it takes the record over), with this copy's not yet pushed.

Faults: a change is one transaction; a failure before the copy was changed leaves nothing
written anywhere (retried on a fresh connection when safe). A connection lost after the copy
changed (before the commit was sent) is retried: the retry only passes the copy on, from the
record the first attempt saw. If that cannot be done (the server unreachable, or, rarely, another
machine wrote the record in between), the change stays in the copy (``store_sync_failed``): the
next sync passes it on, or, in the rare case, takes the newer record and the change remains only
as events in the ops log.
With ``Agent.store_fallback`` (the hooks) an unreachable server does not stop a change (the copy
takes it and the next sync passes it on) nor a read (this copy is read). Elsewhere it is an error
naming the server.
"""

from __future__ import annotations

import contextlib
import os
import secrets
from typing import TYPE_CHECKING, Any

from phoenix_protocol.agent._state import AgentState
from phoenix_protocol.core._durable import atomic_write, read_bytes
from phoenix_protocol.core._errors import CorruptStateError, SchemaVersionError, StorageError
from phoenix_protocol.core._jsonio import JSONError, dumps_document, dumps_line, loads, loads_object
from phoenix_protocol.store import _pg

if TYPE_CHECKING:
    from collections.abc import Callable

    import psycopg

    from phoenix_protocol.agent._context import AgentContext
    from phoenix_protocol.agent._seqlog import LogProblem
    from phoenix_protocol.agent._state import Transition

__all__ = [
    "HOT_FIELDS",
    "LINK_NAME",
    "PgAgentRecord",
    "agents_with_state",
    "export_texts",
    "import_texts",
    "merge_hot",
]

LINK_NAME = "store-link.json"
REV_NAME = ".store-rev"

HOT_FIELDS = (
    "last_active",
    "last_active_ms",
    "heartbeat_seq",
    "tool_calls",
    "last_tool",
    "recent_work",
    "last_heartbeat_logged_ms",
    "recent_actions",
    "last_progress_ms",
    "drift",
    "last_checkpoint_ms",
    "checkpoint_claim",  # a due checkpoint's claim, and what a recovery claim sets with it
    "work_started_ms",
    "refresh_requested",
    "turn",
    "turn_at_ms",
)
"""What the hot path (``StateStore.heartbeat``) writes besides claims of a new session."""

RETAIN_EVERY = 256
"""Retention runs when a push crosses a multiple of this many seqs (it reads every event's size)."""

_ROW = "SELECT state, rev, origin, host FROM phx_agent_state WHERE agent_id = %s"


class _Row:
    __slots__ = ("host", "origin", "rev", "state")

    def __init__(self, state: str, rev: int, origin: str, host: str | None) -> None:
        self.state = state
        self.rev = rev
        self.origin = origin
        self.host = host


def merge_hot(server: AgentState, local: AgentState | None) -> AgentState:
    """The server's state, with what this copy's hot path wrote since when it belongs to the
    same session and is newer (the status and everything else stay the server's)."""
    if local is None or local.session_id != server.session_id:
        return server
    if (local.last_active_ms or 0) <= (server.last_active_ms or 0):
        return server
    merged = server.copy()
    for name in HOT_FIELDS:
        setattr(merged, name, getattr(local, name))
    merged.heartbeat_seq = max(local.heartbeat_seq, server.heartbeat_seq)
    return merged


class PgAgentRecord(_pg.PgBound):
    """One agent's state and ops events on the PostgreSQL server named by its configuration."""

    def __init__(self, agent: AgentContext) -> None:
        super().__init__(str(agent.config.store), pool_size=agent.config.pg_pool_size)
        self.agent = agent
        self.link_path = os.path.join(agent.dir, LINK_NAME)
        self.rev_path = os.path.join(agent.dir, REV_NAME)

    # -- this copy's link to the server ------------------------------------------------------------

    def link(self) -> dict[str, Any] | None:
        """``{"server", "origin", "rev"}`` of this copy, or ``None`` (none yet, unreadable, or
        written for another server). ``rev`` is ``None`` when this copy has not seen one."""
        value = loads_object(read_bytes(self.link_path))
        if value is None or value.get("server") != self.server or not isinstance(value.get("origin"), str):
            return None
        seen = read_bytes(self.rev_path)
        origin, _, rev = (seen or b"").decode("ascii", "replace").partition(" ")
        value["rev"] = int(rev) if origin == value["origin"] and rev.strip().isdigit() else None
        return value

    def _save_rev(self, origin: str, rev: int) -> None:
        """The revision this copy saw last. Atomic, not flushed: a lost update only costs a pull
        of the record this copy wrote itself (``_holds``)."""
        atomic_write(self.rev_path, f"{origin} {rev}".encode("ascii"), durable=False)

    def _origin(self) -> tuple[str, int | None]:
        """This copy's origin and the rev it last saw. A new origin is written once, durably,
        before any event is pushed under it (losing it would pass them on again under another)."""
        link = self.link()
        if link is not None:
            return str(link["origin"]), link["rev"]
        self.agent.ensure()
        origin = secrets.token_hex(8)
        atomic_write(self.link_path, dumps_document({"server": self.server, "origin": origin}).encode("ascii"))
        return origin, None

    @staticmethod
    def _holds(row: _Row | None, origin: str | None, seen: int | None, *, exists: bool) -> bool:
        """Whether this copy holds the newest record: there is none on the server, or nobody
        wrote it since this copy saw it (or last wrote it itself) and the copy still has its
        state.json (a copy without one takes the server's again)."""
        if row is None:
            return True
        if seen is None or origin is None or not exists:
            return False
        return row.rev == seen or (row.origin == origin and row.rev > seen)

    # -- reading ----------------------------------------------------------------------------------

    def _row(self, conn: psycopg.Connection[Any]) -> _Row | None:
        found = conn.execute(_ROW, (self.agent.id,)).fetchone()
        return _Row(str(found[0]), int(found[1]), str(found[2]), found[3]) if found else None

    def _parse(self, row: _Row) -> AgentState:
        where = f"the state of agent {self.agent.id!r} on {self.server}"
        try:
            decoded = loads(row.state)
        except JSONError as exc:
            raise CorruptStateError(f"{where} is not valid JSON ({exc}).", path=where) from None
        return AgentState.from_dict(decoded, path=where)

    def _local_or_none(self) -> AgentState | None:
        try:
            return self.agent.state.read_local() if os.path.exists(self.agent.state.path) else None
        except (CorruptStateError, SchemaVersionError):
            return None

    def read(self) -> AgentState:
        """The agent's state: this copy when it is the newest, else the server's (with this copy's
        newer heartbeat fields). A fresh idle state when neither holds one."""
        link = self.link()
        store = self.agent.state
        try:
            row = self._run(self._row)
        except _pg.PgError:
            if not self.agent.store_fallback:
                raise
            return store.read_local()  # a hook: this machine's copy rather than nothing
        origin, seen = (str(link["origin"]), link["rev"]) if link else (None, None)
        if row is None or self._holds(row, origin, seen, exists=os.path.exists(store.path)):
            return store.read_local()
        return merge_hot(self._parse(row), self._local_or_none())

    def events(self, *, since_seq: int = 0, tail: int | None = None) -> tuple[list[dict[str, Any]], list[LogProblem]]:
        """Every copy's events with a seq above ``since_seq`` (or the newest ``tail``), ordered
        by seq, with this copy's not yet on the server; and the problems met in this copy's log."""
        if tail is not None and tail <= 0:
            return [], []
        link = self.link()
        origin = str(link["origin"]) if link else None

        def work(conn: psycopg.Connection[Any]) -> tuple[list[str], int]:
            pushed = self._pushed(conn, origin) if origin else 0
            if tail is not None:
                rows = conn.execute(
                    "SELECT line FROM phx_ops_events WHERE agent_id = %s ORDER BY seq DESC, origin DESC LIMIT %s",
                    (self.agent.id, tail),
                ).fetchall()
                rows.reverse()
            else:
                rows = conn.execute(
                    "SELECT line FROM phx_ops_events WHERE agent_id = %s AND seq > %s ORDER BY seq, origin",
                    (self.agent.id, since_seq),
                ).fetchall()
            return [str(r[0]) for r in rows], pushed

        try:
            lines, pushed = self._run(work)
        except _pg.PgError:
            if not self.agent.store_fallback:
                raise
            log = self.agent.ops.log  # a hook: this machine's copy rather than nothing
            return log.read(since_seq=since_seq) if tail is None else log.tail(tail)
        out: list[dict[str, Any]] = []
        for line in lines:
            with contextlib.suppress(JSONError):
                value = loads(line)
                if isinstance(value, dict):
                    out.append(value)
        log = self.agent.ops.log
        problems: list[LogProblem] = []
        if os.path.exists(log.path):
            local, problems = log.read(since_seq=pushed) if tail is None else (log.since(pushed), [])
            out += [e for e in local if e["seq"] > since_seq]
        out.sort(key=lambda e: (e["seq"], str(e.get("ts", ""))))
        return (out[-tail:] if tail is not None else out), problems

    def pending(self) -> dict[str, Any]:
        """What this copy holds that the server lacks: ``events`` (how many), ``state`` (whether
        its state is newer than the record), and ``behind`` (the record changed elsewhere)."""
        link = self.link()
        origin = str(link["origin"]) if link else None
        store = self.agent.state

        def work(conn: psycopg.Connection[Any]) -> tuple[_Row | None, int]:
            return self._row(conn), (self._pushed(conn, origin) if origin else 0)

        row, pushed = self._run(work)
        events = len(self.agent.ops.log.since(pushed))
        data = read_bytes(store.path)
        holds = self._holds(row, origin, link["rev"] if link else None, exists=data is not None)
        state = data is not None and holds and (row is None or row.state != data.decode("utf-8", "replace"))
        return {"events": events, "state": state, "behind": not holds and data is not None}

    # -- writing ----------------------------------------------------------------------------------

    def change(
        self,
        mutate: Callable[[AgentState], list[Transition] | None],
        *,
        durable: bool = True,
        lock_timeout: float | None = None,
    ) -> AgentState:
        """``StateStore.change`` on this store (see the module docstring)."""
        state, _report = self._sync(mutate, durable=durable, lock_timeout=lock_timeout)
        if state is None:  # pragma: no cover - a change always yields a state
            raise StorageError(f"the state of agent {self.agent.id!r} was not changed.")
        return state

    def sync(self) -> dict[str, Any]:
        """Pass this copy's new events and state on to the server, or take the server's newer
        record (a copy that exists only). Returns what was done."""
        return self._sync(None)[1]

    def _sync(
        self,
        mutate: Callable[[AgentState], list[Transition] | None] | None,
        *,
        durable: bool = True,
        lock_timeout: float | None = None,
    ) -> tuple[AgentState | None, dict[str, Any]]:
        agent = self.agent
        store = agent.state
        result: list[AgentState] = []
        report: dict[str, Any] = {"server": self.server, "pulled": False, "events": 0, "rev": None}
        origin = ""
        first: list[Any] = []  # [rev seen, holds] once an attempt changed or pulled the copy

        def work(conn: psycopg.Connection[Any]) -> int | None:
            nonlocal origin
            conn.execute("SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))", ("phx_agent:" + agent.id,))
            row = self._row(conn)
            if mutate is None and not os.path.exists(store.path) and not os.path.exists(agent.ops.log.path):
                report["rev"] = row.rev if row else None
                return None  # no copy here: nothing to pass on or refresh
            with store.lock(lock_timeout):
                origin, seen = self._origin()
                if first:
                    # A retry (the connection failed before the commit was sent): the copy was
                    # changed by the first attempt, so only pass it on, from the record that
                    # attempt saw; if another machine wrote one since, the copy's change stays
                    # here (its events pass on) and the next sync takes the newer record.
                    if (row.rev if row else None) != first[0]:
                        raise _pg.PgError(
                            f"the state of agent {agent.id!r} on {self.server} changed while this change "
                            "was passed on; it stays in this machine's copy and log",
                            server=self.server,
                        )
                    holds = first[1]
                else:
                    exists = os.path.exists(store.path)
                    holds = self._holds(row, origin, seen, exists=exists)
                    if not holds and row is not None and (mutate is not None or exists):
                        self._pull_locked(conn, row, lock_timeout)
                        report["pulled"] = holds = True
                    if mutate is not None:
                        result.append(store.change_locked(mutate, durable=durable, lock_timeout=lock_timeout))
                    first[:] = [row.rev if row else None, holds]
            # The copy's lock is free again (the hot path does not wait on the pushes); the
            # server's lock still orders every other writer. A heartbeat written meanwhile is
            # passed on now or by the next sync.
            report["events"] = self._push_events(conn, origin)
            # The revision this copy holds, or None when it holds none (nothing to remember).
            return self._push_state(conn, row, origin) if holds else None

        try:
            rev = self._run(work)
        except _pg.PgError as exc:
            if result:
                # The copy holds the change; the next sync passes it on.
                agent.record("store_sync_failed", "warn", {"server": self.server, "error": str(exc)[:300]})
                return result[0], report
            if mutate is not None and agent.store_fallback:
                state = store.change(mutate, durable=durable, lock_timeout=lock_timeout, local=True)
                agent.record("store_unreachable", "warn", {"server": self.server, "error": str(exc)[:300]})
                return state, report
            raise
        if rev is not None and origin:
            self._save_rev(origin, rev)
            report["rev"] = rev
        return (result[0] if result else None), report

    def _pull_locked(self, conn: psycopg.Connection[Any], row: _Row, lock_timeout: float | None) -> None:
        """Make this copy the server's record (caller holds the state lock)."""
        taken = merge_hot(self._parse(row), self._local_or_none())
        top = conn.execute(
            "SELECT coalesce(max(seq), 0) FROM phx_ops_events WHERE agent_id = %s", (self.agent.id,)
        ).fetchone()
        meta = {"rev": row.rev, "from_host": row.host, "from": row.origin, "state": taken.to_dict()}
        entry = self.agent.ops.make_entry("state_pulled", "ok", meta, trusted=True)
        log = self.agent.ops.log
        with log.lock(lock_timeout):
            mark = log.mark()
            log.append_locked(entry, after=int(top[0]) if top else 0)
            try:
                self.agent.state.write_locked(taken)
            except BaseException:
                log.rollback(mark)
                raise

    def _pushed(self, conn: psycopg.Connection[Any], origin: str) -> int:
        """The newest seq of this copy's events on the server."""
        found = conn.execute(
            "SELECT coalesce(max(seq), 0) FROM phx_ops_events WHERE agent_id = %s AND origin = %s",
            (self.agent.id, origin),
        ).fetchone()
        return int(found[0]) if found else 0

    def _push_events(self, conn: psycopg.Connection[Any], origin: str) -> int:
        pending = self.agent.ops.log.since(self._pushed(conn, origin))
        if not pending:
            return 0
        with conn.cursor() as cur:
            cur.executemany(
                "INSERT INTO phx_ops_events (agent_id, origin, seq, ts, event, status, line) "
                "VALUES (%s, %s, %s, %s, %s, %s, %s) ON CONFLICT DO NOTHING",
                [
                    (
                        self.agent.id,
                        origin,
                        e["seq"],
                        str(e.get("ts", "")),
                        str(e.get("event", "")),
                        str(e.get("status", "")),
                        dumps_line(e),
                    )
                    for e in pending
                ],
            )
        if pending[0]["seq"] // RETAIN_EVERY != pending[-1]["seq"] // RETAIN_EVERY or len(pending) >= RETAIN_EVERY:
            self._retain(conn)
        return len(pending)

    def _retain(self, conn: psycopg.Connection[Any]) -> None:
        """Keep what the file store keeps: the newest events up to ``(ops_keep + 1) ×
        ops_max_bytes`` bytes of lines (the current file and its rotations); older ones go."""
        config = self.agent.config
        conn.execute(
            "DELETE FROM phx_ops_events e USING (SELECT origin, seq FROM (SELECT origin, seq, "
            "sum(length(line) + 1) OVER (ORDER BY seq DESC, origin DESC) AS total FROM phx_ops_events "
            "WHERE agent_id = %s) t WHERE total > %s) d WHERE e.agent_id = %s AND e.origin = d.origin AND e.seq = d.seq",
            (self.agent.id, (config.ops_keep + 1) * config.ops_max_bytes, self.agent.id),
        )

    def _push_state(self, conn: psycopg.Connection[Any], row: _Row | None, origin: str) -> int | None:
        """The copy's state as the server's record (``rev + 1``) unless it holds it already."""
        data = read_bytes(self.agent.state.path)
        if data is None:
            return None
        text = data.decode("utf-8")
        if row is not None and row.state == text:
            return row.rev
        state = self.agent.state.parse(data)  # never pass on a damaged copy
        found = conn.execute(
            "INSERT INTO phx_agent_state (agent_id, state, rev, origin, host) VALUES (%s, %s, 1, %s, %s) "
            "ON CONFLICT (agent_id) DO UPDATE SET state = EXCLUDED.state, rev = phx_agent_state.rev + 1, "
            "origin = EXCLUDED.origin, host = EXCLUDED.host, updated_at = now() RETURNING rev",
            (self.agent.id, text, origin, state.host),
        ).fetchone()
        return int(found[0]) if found else None


# -- export / import (``_transfer``) -------------------------------------------------------------


def export_texts(url: str, agent_id: str) -> tuple[str | None, list[str]]:
    """An agent's record as the file store's texts: ``state.json`` and ``ops.jsonl``'s lines."""

    def work(conn: psycopg.Connection[Any]) -> tuple[str | None, list[str]]:
        row = conn.execute("SELECT state FROM phx_agent_state WHERE agent_id = %s", (agent_id,)).fetchone()
        lines = conn.execute(
            "SELECT line FROM phx_ops_events WHERE agent_id = %s ORDER BY seq, origin", (agent_id,)
        ).fetchall()
        return (str(row[0]) if row else None), [str(r[0]) for r in lines]

    return _pg.transaction(url, work, retry=True)


def import_texts(url: str, agent_id: str, state: str | None, lines: list[str]) -> None:
    """Store an exported ``state.json`` and ops log lines as they are (origin ``import``)."""
    rows = []
    for line in lines:
        try:
            value = loads(line)
        except JSONError:
            continue  # an unreadable line of the source log: not an event
        if isinstance(value, dict) and isinstance(value.get("seq"), int):
            fields = (str(value.get("ts", "")), str(value.get("event", "")), str(value.get("status", "")))
            rows.append((agent_id, value["seq"], *fields, line))

    def work(conn: psycopg.Connection[Any]) -> None:
        if state is not None:
            conn.execute(
                "INSERT INTO phx_agent_state (agent_id, state, rev, origin) VALUES (%s, %s, 1, 'import')",
                (agent_id, state),
            )
        with conn.cursor() as cur:
            cur.executemany(
                "INSERT INTO phx_ops_events (agent_id, origin, seq, ts, event, status, line) "
                "VALUES (%s, 'import', %s, %s, %s, %s, %s) ON CONFLICT DO NOTHING",
                rows,
            )

    _pg.transaction(url, work, retry=True)


def agents_with_state(url: str) -> list[str]:
    """Every agent the server holds a state or ops events of."""
    return _pg.ids(url, "SELECT agent_id FROM phx_agent_state UNION SELECT agent_id FROM phx_ops_events ORDER BY 1")
