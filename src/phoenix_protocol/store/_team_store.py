"""Teams and their mailbox in the home's database: ``TeamStore`` and ``Mailbox``, written once
over ``store._db`` (SQLite ``phoenix.db`` in the home by default, PostgreSQL with
``store = "postgresql://…"``).

Tables (migrations 1, 3 and 4 of ``store._schema``): ``phx_teams`` (metadata and roster as JSON,
one row per team), ``phx_tasks`` (one row per task: a claim writes one row), ``phx_team_seq``
(the mailbox's counter, its byte and broadcast counts), ``phx_messages``, ``phx_cursors``,
``phx_acks``, ``phx_mailbox_counts`` (per-name counters that make unread counts constant-time),
``phx_heartbeats``, ``phx_team_checkpoints``.

Guarantees, on both engines:

- **A change of the team is one transaction.** ``change`` locks the team's row (on SQLite,
  ``BEGIN IMMEDIATE`` holds the database), runs the mutation on the metadata and its tasks, and
  writes back the metadata and the tasks that changed. A task row is written only if its status
  and owner are still as read: a claim made meanwhile by ``claim_next`` (which does not take the
  team's row) makes the whole change run again on fresh data.
- **No double claim.** ``claim_next`` picks the first ready task with ``dialect.skip_locked``
  (``FOR UPDATE SKIP LOCKED`` on PostgreSQL: fifty claimers take fifty tasks at once; SQLite
  serialises writers) and writes it only if it is still pending and unowned.
- **Gap-free seq, exactly one row per message id.** A message takes its number from
  ``phx_team_seq`` in the transaction that inserts it, after the counter row is locked and the id
  looked up: a rollback gives the number back, a reused id returns the stored message
  (``duplicate=True``), and a reused id with *different* content is refused
  (``MessageConflictError``). ``Team.send`` is one small transaction: the team's row (roster and
  status check, the message counter of its session log), the counter, the message, the counters.
- **Delivered only once handed over.** ``fetch`` never moves the reader's cursor;
  ``mark_delivered`` does (never backwards); ``ack`` refuses a message not yet delivered to that
  reader or not addressed to it.
- **Durable before it returns**: every write is a committed transaction (SQLite: WAL,
  ``synchronous=FULL``).
- **Woken, not polled, where the engine can**: each send notifies ``phx_mailbox`` (PostgreSQL
  ``NOTIFY``, payload ``<team_id> <seq>``) and ``Mailbox.wait`` (``phx team inbox --follow``)
  waits through ``Database.wait`` (``LISTEN`` there, a short poll on SQLite).

Heartbeats are the hottest write of a team, made by the PostToolUse hook, which must not open a
database: on one machine (SQLite) they stay one small file per teammate in the runtime directory
(``_heartbeats``); on PostgreSQL, where teammates span machines, they are rows of
``phx_heartbeats`` (the hook passes them on from a detached process).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any, TypeVar

from phoenix_protocol.core._clock import Clock, iso_from_ms, system_clock
from phoenix_protocol.core._errors import CorruptStateError, RefusedError, UsageError
from phoenix_protocol.core._ids import validate_id

if TYPE_CHECKING:
    from phoenix_protocol.core._jsonio import JSON
    from phoenix_protocol.store._db import Database, Tx

T = TypeVar("T")

__all__ = [
    "BROADCAST",
    "CHANNEL",
    "MAX_BODY_BYTES",
    "MAX_SUBJECT_BYTES",
    "MESSAGE_TYPES",
    "SCHEMA_VERSION",
    "Inbox",
    "Mailbox",
    "Message",
    "MessageConflictError",
    "TeamStore",
    "check_message",
    "list_team_ids",
]

SCHEMA_VERSION = 1
"""Of a message, a cursor, a heartbeat record."""
BROADCAST = "*"
"""The ``to`` of a message for every teammate but its sender."""
MESSAGE_TYPES = ("info", "question", "challenge", "resolution")
MAX_SUBJECT_BYTES = 1024
MAX_BODY_BYTES = 64 * 1024
CHANNEL = "phx_mailbox"
_NO_LIMIT = 1 << 62


class MessageConflictError(RefusedError):
    """A message id already stored with different content: a retry must resend the same message."""


class _Conflict(Exception):
    """A task changed under a team change (a concurrent ``claim_next``): run the change again."""


class Message:
    """One mailbox message. ``sender`` is ``"from"`` in JSON; ``to`` is a name or ``"*"``.

    ``acked_by`` lists the readers who acknowledged it (filled in when the message is read);
    ``duplicate`` is True when ``send`` found the id already stored and returned the original.
    """

    __slots__ = ("acked_by", "body", "duplicate", "msg_id", "sender", "seq", "subject", "to", "ts", "ts_ms", "type")

    def __init__(
        self,
        *,
        seq: int,
        msg_id: str,
        sender: str,
        to: str,
        type: str,
        subject: str,
        body: str,
        ts: str,
        ts_ms: int,
        acked_by: list[str] | None = None,
        duplicate: bool = False,
    ) -> None:
        self.seq = seq
        self.msg_id = msg_id
        self.sender = sender
        self.to = to
        self.type = type
        self.subject = subject
        self.body = body
        self.ts = ts
        self.ts_ms = ts_ms
        self.acked_by: list[str] = list(acked_by or [])
        self.duplicate = duplicate

    @classmethod
    def from_record(cls, record: dict[str, Any]) -> Message:
        """A message from its JSON record (``from`` for the sender)."""
        return cls(
            seq=int(record["seq"]),
            msg_id=str(record.get("msg_id", "")),
            sender=str(record.get("from", "")),
            to=str(record.get("to", "")),
            type=str(record.get("type", "info")),
            subject=str(record.get("subject", "")),
            body=str(record.get("body", "")),
            ts=str(record.get("ts", "")),
            ts_ms=int(record.get("ts_ms") or 0),
            acked_by=[str(r) for r in record.get("acked_by") or []],
        )

    @property
    def broadcast(self) -> bool:
        """Whether the message is for every teammate but its sender."""
        return self.to == BROADCAST

    def addressed_to(self, reader: str) -> bool:
        """Whether ``reader`` is a recipient: named in ``to``, or any teammate but the sender of a broadcast."""
        return self.to == reader or (self.to == BROADCAST and self.sender != reader)

    def as_dict(self) -> dict[str, Any]:
        """The message as JSON (``from`` for the sender)."""
        out: dict[str, Any] = {
            "seq": self.seq,
            "msg_id": self.msg_id,
            "from": self.sender,
            "to": self.to,
            "type": self.type,
            "subject": self.subject,
            "body": self.body,
            "ts": self.ts,
            "ts_ms": self.ts_ms,
            "acked_by": list(self.acked_by),
        }
        if self.duplicate:
            out["duplicate"] = True
        return out

    def __repr__(self) -> str:
        dup = " duplicate" if self.duplicate else ""
        return f"<Message #{self.seq} {self.msg_id} {self.sender}->{self.to} {self.type}{dup}>"

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Message):
            return NotImplemented
        return self.as_dict() == other.as_dict()

    __hash__ = None  # type: ignore[assignment]


class Inbox(list[Message]):
    """What ``fetch`` returns: the messages, oldest first, and ``through_seq``, the seq up to which
    the reader has now seen everything addressed to it (pass it to ``mark_delivered`` once the
    messages were handed over, so the next fetch starts after the messages it skipped)."""

    through_seq: int = 0


def check_message(type: str, subject: object, body: object) -> None:
    """The checks a message passes before it is stored."""
    if type not in MESSAGE_TYPES:
        raise UsageError(f"message type must be one of {', '.join(MESSAGE_TYPES)}, not {type!r}.")
    if not isinstance(subject, str) or not subject.strip():
        raise UsageError("a message needs a non-empty subject.")
    if not isinstance(body, str):
        raise UsageError("a message body must be a string.")
    if len(subject.encode("utf-8", "surrogatepass")) > MAX_SUBJECT_BYTES:
        raise UsageError(f"the subject is longer than {MAX_SUBJECT_BYTES} bytes: shorten it.")
    if len(body.encode("utf-8", "surrogatepass")) > MAX_BODY_BYTES:
        raise UsageError(f"the body is longer than {MAX_BODY_BYTES // 1024} KB: send a path or a summary instead.")


def _new_msg_id() -> str:
    return "m-" + os.urandom(12).hex()


def _fingerprint(record: dict[str, Any]) -> bytes:
    """A record's JSON, to tell whether a mutation changed it (a deep copy costs 50 times more)."""
    import orjson

    try:
        return orjson.dumps(record)
    except TypeError:  # a lone surrogate from a hand edit
        return repr(record).encode("utf-8", "surrogatepass")


def list_team_ids(db: Database) -> list[str]:
    """Ids of the teams in ``db``, sorted."""
    return db.read(lambda tx: [str(r[0]) for r in tx.all("SELECT team_id FROM phx_teams ORDER BY team_id")])


def _json(tx: Tx, value: object, where: str) -> JSON:
    try:
        return tx.dialect.read_json(value)
    except ValueError as exc:
        if isinstance(value, str):  # a hand edit may hold what orjson refuses (a lone surrogate escape)
            from phoenix_protocol.core._jsonio import JSONError, loads

            try:
                return loads(value.encode("utf-8", "surrogatepass"))
            except JSONError:
                pass
        raise CorruptStateError(f"{where} is not valid JSON ({exc}); restore it from a team checkpoint.") from None


# -- SQL written once ----------------------------------------------------------------------------

_COLUMNS = "seq, msg_id, sender, recipient, type, subject, body, ts, ts_ms"
# "Addressed to READER" is two index range scans (direct: phx_messages_to; broadcasts by others:
# phx_messages_broadcast), never one OR that would read the whole mailbox.
_FETCH_SQL = f"""
SELECT {_COLUMNS} FROM (
    SELECT * FROM (SELECT {_COLUMNS} FROM phx_messages WHERE team_id = ? AND recipient = ?
        AND seq > ? AND seq <= ? ORDER BY seq LIMIT ?) AS d
    UNION ALL
    SELECT * FROM (SELECT {_COLUMNS} FROM phx_messages WHERE team_id = ? AND recipient = '*' AND sender <> ?
        AND seq > ? AND seq <= ? ORDER BY seq LIMIT ?) AS b
) AS m ORDER BY seq LIMIT ?
"""  # noqa: S608 - constant SQL
# Unread = messages for the reader so far (direct + others' broadcasts, counters kept by send)
# - messages for it up to its cursor (kept by mark_delivered): constant time, one snapshot.
_UNREAD_SQL = """
SELECT coalesce((SELECT direct - broadcasts_sent FROM phx_mailbox_counts WHERE team_id = ? AND name = ?), 0)
     + coalesce((SELECT broadcasts FROM phx_team_seq WHERE team_id = ?), 0)
     - coalesce((SELECT addressed FROM phx_cursors WHERE team_id = ? AND reader = ?), 0)
"""
_DELIVER_SQL = """
UPDATE phx_cursors SET delivered = ?, addressed = addressed
    + (SELECT count(*) FROM phx_messages WHERE team_id = ? AND recipient = ? AND seq > ? AND seq <= ?)
    + (SELECT count(*) FROM phx_messages WHERE team_id = ? AND recipient = '*' AND sender <> ? AND seq > ? AND seq <= ?)
WHERE team_id = ? AND reader = ?
"""
_COUNTS_SQL = """
INSERT INTO phx_mailbox_counts (team_id, name, direct, broadcasts_sent) VALUES (?, ?, ?, ?)
ON CONFLICT (team_id, name) DO UPDATE SET direct = phx_mailbox_counts.direct + excluded.direct,
    broadcasts_sent = phx_mailbox_counts.broadcasts_sent + excluded.broadcasts_sent
"""
_FIRST_UNACKED_SQL = """
SELECT min(m.seq) FROM phx_messages m WHERE m.team_id = ? AND {who} AND m.seq <= ?
    AND NOT EXISTS (SELECT 1 FROM phx_acks a WHERE a.team_id = m.team_id AND a.seq = m.seq AND a.reader = ?)
"""


def recount(tx: Tx, team_id: str) -> None:
    """Rebuild a team's mailbox counters from its messages and cursors (after a bulk import)."""
    size = tx.dialect.byte_length("subject") + " + " + tx.dialect.byte_length("body")
    tx.execute(
        "UPDATE phx_team_seq SET last_seq = coalesce((SELECT max(seq) FROM phx_messages WHERE team_id = ?), 0), "  # noqa: S608 - dialect SQL
        f"bytes = coalesce((SELECT sum({size}) FROM phx_messages WHERE team_id = ?), 0), "
        "broadcasts = (SELECT count(*) FROM phx_messages WHERE team_id = ? AND recipient = '*') WHERE team_id = ?",
        (team_id, team_id, team_id, team_id),
    )
    tx.execute("DELETE FROM phx_mailbox_counts WHERE team_id = ?", (team_id,))
    tx.execute(
        "INSERT INTO phx_mailbox_counts (team_id, name, direct, broadcasts_sent) "
        "SELECT team_id, name, sum(direct), sum(sent) FROM ("
        "SELECT team_id, recipient AS name, count(*) AS direct, 0 AS sent FROM phx_messages "
        "WHERE team_id = ? AND recipient <> '*' GROUP BY team_id, recipient "
        "UNION ALL SELECT team_id, sender, 0, count(*) FROM phx_messages WHERE team_id = ? AND recipient = '*' "
        "GROUP BY team_id, sender) AS c GROUP BY team_id, name",
        (team_id, team_id),
    )
    tx.execute(
        "UPDATE phx_cursors SET addressed = (SELECT count(*) FROM phx_messages m WHERE m.team_id = phx_cursors.team_id "
        "AND m.seq <= phx_cursors.delivered AND (m.recipient = phx_cursors.reader "
        "OR (m.recipient = '*' AND m.sender <> phx_cursors.reader))) WHERE team_id = ?",
        (team_id,),
    )


class TeamStore:
    """One team's state in the database (see the module docstring)."""

    def __init__(
        self,
        db: Database,
        team_id: str,
        *,
        clock: Clock = system_clock,
        lock_timeout: float = 10.0,
        heartbeat_dir: str | None = None,
    ) -> None:
        self.db = db
        self.id = validate_id(team_id, "team id")
        self.clock = clock
        self.lock_timeout = lock_timeout
        self.where = f"{db.where} team {self.id}"
        self.shared_beats = db.dialect.postgres
        """Heartbeats in ``phx_heartbeats`` (PostgreSQL: teammates on several machines), else
        in ``heartbeat_dir`` (one machine; the hook writes them without opening the database)."""
        self.heartbeat_dir = heartbeat_dir

    @property
    def location(self) -> str:
        """Where the team is, for people: the database (no password) and the team."""
        return self.where

    def _missing(self) -> Exception:
        from phoenix_protocol.store._teams import TeamNotFoundError

        return TeamNotFoundError(f"team {self.id} is not in {self.db.where}.")

    # -- metadata ------------------------------------------------------------------------------

    def exists(self) -> bool:
        return bool(self.db.read(lambda tx: tx.one("SELECT 1 FROM phx_teams WHERE team_id = ?", (self.id,))))

    def create(self, metadata: dict[str, Any], roster: list[dict[str, Any]] | None = None) -> None:
        """Store a new team (with its tasks and roster); ``UsageError`` if the id is taken."""
        meta = {k: v for k, v in metadata.items() if k != "tasks"}

        def work(tx: Tx) -> None:
            if tx.one("SELECT 1 FROM phx_teams WHERE team_id = ?", (self.id,)) is not None:
                raise UsageError(f"team {self.id} already exists.")
            self.insert(tx, meta, metadata.get("tasks") or [], roster or [])

        self.db.transaction(work)

    def insert(self, tx: Tx, meta: dict[str, Any], tasks: list[dict[str, Any]], roster: list[dict[str, Any]]) -> None:
        """The rows of a new team, in ``tx``."""
        d = tx.dialect
        tx.execute(
            "INSERT INTO phx_teams (team_id, metadata, roster, created_ms) VALUES (?, ?, ?, ?)",
            (self.id, d.json(meta), d.json(roster), int(meta.get("created_ms") or 0)),
        )
        tx.execute("INSERT INTO phx_team_seq (team_id, last_seq) VALUES (?, 0)", (self.id,))
        for position, task in enumerate(tasks):
            self._insert_task(tx, position, task)

    def _assemble(self, tx: Tx, meta: Any, tasks: list[Any]) -> dict[str, Any]:
        from phoenix_protocol.store._teams import migrate

        data = dict(_json(tx, meta, self.where))
        data["tasks"] = [_json(tx, t, self.where) for t in tasks]
        return migrate(data, self.where)

    def read(self) -> dict[str, Any]:
        """The metadata with its tasks (migrated)."""

        def work(tx: Tx) -> dict[str, Any]:
            row = tx.one("SELECT metadata FROM phx_teams WHERE team_id = ?", (self.id,))
            if row is None:
                raise self._missing()
            tasks = tx.all("SELECT record FROM phx_tasks WHERE team_id = ? ORDER BY position", (self.id,))
            return self._assemble(tx, row[0], [t[0] for t in tasks])

        return self.db.read(work)

    def read_metadata(self) -> dict[str, Any]:
        """The team's metadata without its tasks (one small row, migrated)."""

        def work(tx: Tx) -> dict[str, Any]:
            row = tx.one("SELECT metadata FROM phx_teams WHERE team_id = ?", (self.id,))
            if row is None:
                raise self._missing()
            data = self._assemble(tx, row[0], [])
            del data["tasks"]
            return data

        return self.db.read(work)

    def _insert_task(self, tx: Tx, position: int, task: dict[str, Any]) -> None:
        d = tx.dialect
        tx.execute(
            "INSERT INTO phx_tasks (team_id, task_id, position, status, assigned_to, dependencies, record) "
            "VALUES (?, ?, ?, ?, ?, ?, ?)",
            (
                self.id,
                task["task_id"],
                position,
                task["status"],
                task.get("assigned_to"),
                d.text_array(task.get("dependencies") or []),
                d.json(task),
            ),
        )

    def change(
        self,
        mutate: Callable[[dict[str, Any]], T],
        *,
        task_id: str | None = None,
        metadata_only: bool = False,
    ) -> tuple[dict[str, Any], T]:
        """Lock the team's row, run ``mutate`` on the metadata and tasks, write back what changed
        (``task_id``: only that task is read, and ``mutate`` may change only it;
        ``metadata_only``: no task is read, ``data["tasks"]`` is empty and stays unwritten). Task rows are
        not locked while ``mutate`` runs (a claim elsewhere must not wait for it): each changed
        task is written only if its status and owner are still as read, else the change runs
        again on fresh data."""

        def work(tx: Tx) -> tuple[dict[str, Any], T]:
            d = tx.dialect
            row = tx.one(f"SELECT metadata FROM phx_teams WHERE team_id = ?{d.for_update}", (self.id,))  # noqa: S608
            if row is None:
                raise self._missing()
            if metadata_only:
                rows = []
            elif task_id is None:
                rows = tx.all("SELECT record FROM phx_tasks WHERE team_id = ? ORDER BY position", (self.id,))
            else:  # the caller looks at one task: the others are neither read nor written
                rows = tx.all("SELECT record FROM phx_tasks WHERE team_id = ? AND task_id = ?", (self.id, task_id))
            data = self._assemble(tx, row[0], [r[0] for r in rows])
            before = {t["task_id"]: (_fingerprint(t), t["status"], t.get("assigned_to")) for t in data["tasks"]}
            result = mutate(data)
            meta = {k: v for k, v in data.items() if k != "tasks"}
            tx.execute("UPDATE phx_teams SET metadata = ? WHERE team_id = ?", (d.json(meta), self.id))
            if metadata_only:
                return data, result
            positions = self._positions(tx, data["tasks"]) if task_id is not None else None
            for position, task in enumerate(data["tasks"]):
                if positions is not None:
                    position = positions.get(task["task_id"], position)  # noqa: PLW2901 - kept in place
                old = before.get(task["task_id"])
                if old is None:
                    if positions is not None:
                        raise UsageError("a change that names one task cannot add tasks.")
                    self._insert_task(tx, position, task)
                elif old[0] != _fingerprint(task):
                    written = tx.execute(
                        "UPDATE phx_tasks SET position = ?, status = ?, assigned_to = ?, dependencies = ?, record = ? "
                        "WHERE team_id = ? AND task_id = ? AND status = ? AND coalesce(assigned_to, '') = ?",
                        (
                            position,
                            task["status"],
                            task.get("assigned_to"),
                            d.text_array(task.get("dependencies") or []),
                            d.json(task),
                            self.id,
                            task["task_id"],
                            old[1],
                            old[2] or "",
                        ),
                    ).rowcount
                    if written != 1:
                        raise _Conflict(task["task_id"])
            return data, result

        deadline = time.monotonic() + self.lock_timeout
        while True:
            try:
                return self.db.transaction(work)
            except _Conflict:
                if time.monotonic() > deadline:
                    from phoenix_protocol.core._errors import LockTimeoutError

                    raise LockTimeoutError(
                        f"team {self.id}'s tasks kept changing for {self.lock_timeout:g}s; try again."
                    ) from None
                time.sleep(0.002)

    def _positions(self, tx: Tx, tasks: list[dict[str, Any]]) -> dict[str, int]:
        ids = [t["task_id"] for t in tasks]
        if not ids:
            return {}
        rows = tx.all(
            f"SELECT task_id, position FROM phx_tasks WHERE team_id = ? AND task_id IN ({tx.dialect.placeholders(len(ids))})",  # noqa: S608
            (self.id, *ids),
        )
        return {str(r[0]): int(r[1]) for r in rows}

    # -- roster --------------------------------------------------------------------------------

    def roster(self) -> list[dict[str, Any]]:
        def work(tx: Tx) -> list[dict[str, Any]]:
            row = tx.one("SELECT roster FROM phx_teams WHERE team_id = ?", (self.id,))
            return [dict(m) for m in (_json(tx, row[0], self.where) if row else [])]

        return self.db.read(work)

    def change_roster(self, mutate: Callable[[list[dict[str, Any]]], T]) -> T:
        def work(tx: Tx) -> T:
            row = tx.one(f"SELECT roster FROM phx_teams WHERE team_id = ?{tx.dialect.for_update}", (self.id,))  # noqa: S608
            if row is None:
                raise self._missing()
            teammates = [dict(m) for m in _json(tx, row[0], self.where)]
            result = mutate(teammates)
            tx.execute("UPDATE phx_teams SET roster = ? WHERE team_id = ?", (tx.dialect.json(teammates), self.id))
            return result

        return self.db.transaction(work)

    # -- claims --------------------------------------------------------------------------------

    def claim_next(self, name: str, started_at: str) -> dict[str, Any] | None:
        """The first ready task, claimed for ``name``: ``dialect.skip_locked`` takes a task no
        other transaction holds; when every ready task is held for a moment (another claimer, a
        change of the team), it looks again until none is ready."""
        deadline = time.monotonic() + self.lock_timeout

        def work(tx: Tx) -> tuple[dict[str, Any] | None, bool]:
            from phoenix_protocol.store._teams import TeamReadOnlyError

            d = tx.dialect
            row = tx.one("SELECT metadata FROM phx_teams WHERE team_id = ?", (self.id,))
            if row is None:
                raise self._missing()
            if _json(tx, row[0], self.where).get("status") == "completed":
                raise TeamReadOnlyError(f"team {self.id} is completed: its state is read-only.")
            ready = (
                "FROM phx_tasks t WHERE t.team_id = ? AND t.status = 'pending' AND t.assigned_to IS NULL "  # noqa: S608
                f"AND NOT EXISTS (SELECT 1 FROM {d.array_table('t.dependencies')} WHERE dep.value NOT IN "
                "(SELECT c.task_id FROM phx_tasks c WHERE c.team_id = ? AND c.status = 'completed'))"
            )
            found = tx.one(f"SELECT t.record {ready} ORDER BY t.position LIMIT 1{d.skip_locked}", (self.id, self.id))
            if found is None:
                waiting = tx.scalar(f"SELECT count(*) {ready}", (self.id, self.id))
                return None, bool(waiting)
            task = dict(_json(tx, found[0], self.where))
            task.update(assigned_to=name, status="in_progress", started_at=started_at)
            written = tx.execute(
                "UPDATE phx_tasks SET status = 'in_progress', assigned_to = ?, record = ? "
                "WHERE team_id = ? AND task_id = ? AND status = 'pending' AND assigned_to IS NULL",
                (name, d.json(task), self.id, task["task_id"]),
            ).rowcount
            return (task, False) if written == 1 else (None, True)

        while True:
            task, held = self.db.transaction(work)
            if task is not None or not held or time.monotonic() > deadline:
                return task
            time.sleep(0.005)

    # -- heartbeats ------------------------------------------------------------------------------

    def beat(self, name: str, *, now_ms: int, session_id: str | None) -> dict[str, Any]:
        validate_id(name, "teammate name")
        host = os.uname().nodename
        if not self.shared_beats:
            from phoenix_protocol.agent._heartbeats import beat

            return beat(self._beat_dir(), name, now_ms=now_ms, host=host, session_id=session_id)

        def work(tx: Tx) -> int:
            return int(
                tx.scalar(
                    "INSERT INTO phx_heartbeats (team_id, name, seq, ms, session_id, host, pid, observed_ms) "  # noqa: S608 - dialect SQL
                    f"VALUES (?, ?, 1, ?, ?, ?, ?, {tx.dialect.now_ms}) ON CONFLICT (team_id, name) DO UPDATE SET "
                    "seq = phx_heartbeats.seq + 1, ms = excluded.ms, session_id = excluded.session_id, "
                    "host = excluded.host, pid = excluded.pid, observed_ms = excluded.observed_ms RETURNING seq",
                    (self.id, name, now_ms, session_id, host, os.getpid()),
                )
                or 1
            )

        seq = self.db.transaction(work)
        return {"schema_version": 1, "name": name, "seq": seq, "ms": now_ms, "host": host, "session_id": session_id}

    def _beat_dir(self) -> str:
        if self.heartbeat_dir is None:
            raise UsageError("this team store has no heartbeat directory.")
        return self.heartbeat_dir

    def read_beat(self, name: str, *, observed: bool = False) -> dict[str, Any] | None:
        return self.read_beats([name], observed=observed)[name]

    def read_beats(self, names: list[str], *, observed: bool = False) -> dict[str, dict[str, Any] | None]:
        """The last heartbeat of each of ``names``; ``observed``: with ``observed_age_ms``, how
        long ago the store received it by the store's own clock (for liveness; never stored)."""
        if not self.shared_beats:
            return self.beats_in(None, names, observed=observed)
        return self.db.read(lambda tx: self.beats_in(tx, names, observed=observed))

    def beats_in(self, tx: Tx | None, names: list[str], *, observed: bool = False) -> dict[str, dict[str, Any] | None]:
        """The last heartbeat of each of ``names`` (``None`` if none), read in ``tx``."""
        if not self.shared_beats or tx is None:
            return {name: self._file_beat(name, observed=observed) for name in names}
        if not names:
            return {}
        rows = tx.all(
            f"SELECT name, seq, ms, host, session_id, {tx.dialect.now_ms} - observed_ms FROM phx_heartbeats "  # noqa: S608
            f"WHERE team_id = ? AND name IN ({tx.dialect.placeholders(len(names))})",
            (self.id, *names),
        )
        found = {
            r[0]: {
                "schema_version": 1,
                "name": r[0],
                "seq": int(r[1]),
                "ms": int(r[2]),
                "host": r[3],
                "session_id": r[4],
                **({"observed_age_ms": max(int(r[5]), 0)} if observed and r[5] is not None else {}),
            }
            for r in rows
        }
        return {name: found.get(name) for name in names}

    def _file_beat(self, name: str, *, observed: bool) -> dict[str, Any] | None:
        """A heartbeat file's record, with how long ago it was written by this machine's clock
        (the file's modification time: when the store received it, whatever its ``ms`` says)."""
        from phoenix_protocol.agent._heartbeats import read_beat

        record = read_beat(self._beat_dir(), name)
        if record is None or not observed:
            return record
        try:
            mtime_ns = os.stat(os.path.join(self._beat_dir(), name + ".json")).st_mtime_ns
        except OSError:
            return record
        return {**record, "observed_age_ms": max(time.time_ns() - mtime_ns, 0) // 1_000_000}

    def put_beat(self, record: dict[str, Any]) -> None:
        """Store a heartbeat record as it is (``phx import``)."""
        name = validate_id(str(record.get("name")), "teammate name")
        if not self.shared_beats:
            from phoenix_protocol.core._durable import atomic_write, ensure_dir
            from phoenix_protocol.core._jsonio import dumps_line

            ensure_dir(self._beat_dir())
            atomic_write(
                os.path.join(self._beat_dir(), name + ".json"),
                (dumps_line(record) + "\n").encode("ascii"),
                durable=False,
            )
            return
        self.db.transaction(
            lambda tx: tx.execute(
                "INSERT INTO phx_heartbeats (team_id, name, seq, ms, session_id, host, pid) "
                "VALUES (?, ?, ?, ?, ?, ?, NULL) ON CONFLICT (team_id, name) DO UPDATE SET "
                "seq = excluded.seq, ms = excluded.ms, session_id = excluded.session_id, host = excluded.host",
                (self.id, name, int(record["seq"]), int(record["ms"]), record.get("session_id"), record.get("host")),
            )
        )

    # -- checkpoints -----------------------------------------------------------------------------

    def write_checkpoint(self, name: str, seq: int, kind: str, record: dict[str, Any], keep: int) -> bytes:
        """Store a team checkpoint and keep the newest ``keep``; its JSON document."""
        from phoenix_protocol.core._jsonio import dumps_document

        self.db.transaction(lambda tx: self.write_checkpoint_in(tx, seq, kind, record, keep))
        return dumps_document(record).encode("ascii")

    def write_checkpoint_in(self, tx: Tx, seq: int, kind: str, record: dict[str, Any], keep: int) -> None:
        """``write_checkpoint`` in ``tx``."""
        tx.execute(
            "INSERT INTO phx_team_checkpoints (team_id, seq, kind, record) VALUES (?, ?, ?, ?) "
            "ON CONFLICT (team_id, seq) DO UPDATE SET kind = excluded.kind, record = excluded.record",
            (self.id, seq, kind, tx.dialect.json(record)),
        )
        tx.execute(
            "DELETE FROM phx_team_checkpoints WHERE team_id = ? AND seq <= "
            "(SELECT max(seq) FROM phx_team_checkpoints WHERE team_id = ?) - ?",
            (self.id, self.id, keep),
        )

    def latest_checkpoint(self, kind: str | None) -> dict[str, Any] | None:
        def work(tx: Tx) -> dict[str, Any] | None:
            if kind is None:
                row = tx.one(
                    "SELECT record FROM phx_team_checkpoints WHERE team_id = ? ORDER BY seq DESC LIMIT 1", (self.id,)
                )
            else:
                row = tx.one(
                    "SELECT record FROM phx_team_checkpoints WHERE team_id = ? AND kind = ? ORDER BY seq DESC LIMIT 1",
                    (self.id, kind),
                )
            return dict(_json(tx, row[0], self.where)) if row else None

        return self.db.read(work)

    def checkpoint_names(self) -> list[str]:
        rows = self.db.read(
            lambda tx: tx.all("SELECT seq FROM phx_team_checkpoints WHERE team_id = ? ORDER BY seq", (self.id,))
        )
        return [f"checkpoint-{int(r[0]):08d}.json" for r in rows]

    def read_checkpoint(self, name: str) -> dict[str, Any] | None:
        """One checkpoint by name (``checkpoint-<seq>.json``), or ``None``."""
        digits = name.removeprefix("checkpoint-").removesuffix(".json")
        if not digits.isdigit():
            raise UsageError(f"{name!r} is not a team checkpoint name.")

        def work(tx: Tx) -> dict[str, Any] | None:
            row = tx.one(
                "SELECT record FROM phx_team_checkpoints WHERE team_id = ? AND seq = ?", (self.id, int(digits))
            )
            return dict(_json(tx, row[0], self.where)) if row else None

        return self.db.read(work)

    def read_checkpoints(self) -> list[dict[str, Any]]:
        """Every kept checkpoint, oldest first."""

        def work(tx: Tx) -> list[dict[str, Any]]:
            rows = tx.all("SELECT record FROM phx_team_checkpoints WHERE team_id = ? ORDER BY seq", (self.id,))
            return [dict(_json(tx, r[0], self.where)) for r in rows]

        return self.db.read(work)

    # -- messages --------------------------------------------------------------------------------

    def mailbox(self) -> Mailbox:
        return Mailbox(self.db, team_id=self.id, clock=self.clock)

    def send(
        self,
        sender: str,
        to: str,
        *,
        type: str,
        subject: str,
        body: str,
        msg_id: str | None,
        after: Callable[[dict[str, Any]], bool],
        checkpoint: Callable[[dict[str, Any], dict[str, Any], dict[str, Any]], tuple[int, dict[str, Any]]],
        keep: int,
    ) -> Message:
        """``Team.send`` in one transaction: the team's row (the sender and recipient must be
        teammates, the team not completed; ``after(metadata)`` updates its session log and says
        whether a checkpoint is due), the message, the counters, and when due the checkpoint
        (``checkpoint(metadata, heartbeats, mailbox position)`` numbers it in the metadata and
        returns its seq and record). A duplicate writes nothing."""
        from phoenix_protocol.store._teams import TeamReadOnlyError

        box = self.mailbox()
        fields = box.prepare(sender, to, type=type, subject=subject, body=body, msg_id=msg_id)

        def work(tx: Tx) -> Message:
            d = tx.dialect
            row = tx.one(f"SELECT metadata, roster FROM phx_teams WHERE team_id = ?{d.for_update}", (self.id,))  # noqa: S608
            if row is None:
                raise self._missing()
            roster = [str(m["name"]) for m in _json(tx, row[1], self.where)]
            names = set(roster)
            if sender not in names:
                raise UsageError(f"{sender!r} is not in team {self.id}.")
            if to != BROADCAST and to not in names:
                raise UsageError(f"{to!r} is not in team {self.id} (use * to broadcast).")
            meta = dict(_json(tx, row[0], self.where))
            if meta.get("status") == "completed":
                raise TeamReadOnlyError(f"team {self.id} is completed: its state is read-only.")
            message = box.insert(tx, fields)
            if message.duplicate:
                return message
            if after(meta):
                position = {"stats": box.stats_in(tx), "cursors": box.cursor_states_in(tx, roster)}
                seq, record = checkpoint(meta, self.beats_in(tx, roster), position)
                self.write_checkpoint_in(tx, seq, str(record["checkpoint_type"]), record, keep)
            tx.execute("UPDATE phx_teams SET metadata = ? WHERE team_id = ?", (d.json(meta), self.id))
            return message

        return self.db.transaction(work)


class Mailbox:
    """A team's mailbox in the database (see the module docstring)."""

    def __init__(self, db: Database, *, team_id: str, clock: Clock = system_clock) -> None:
        self.db = db
        self.team_id = validate_id(team_id, "team id")
        self.clock = clock

    def close(self) -> None:
        """Nothing to release (connections belong to the process)."""

    def __enter__(self) -> Mailbox:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _missing(self) -> Exception:
        from phoenix_protocol.store._teams import TeamNotFoundError

        return TeamNotFoundError(f"team {self.team_id} is not in {self.db.where}.")

    # -- writing ---------------------------------------------------------------------------------

    def prepare(
        self, sender: str, to: str, *, type: str, subject: str, body: str, msg_id: str | None
    ) -> dict[str, Any]:
        """A message's fields, checked and redacted, before its transaction."""
        validate_id(sender, "sender")
        if to != BROADCAST:
            validate_id(to, "recipient")
        check_message(type, subject, body)
        msg_id = _new_msg_id() if msg_id is None else validate_id(msg_id, "message id")
        from phoenix_protocol.core._redact import redact

        ms = self.clock.now_ms()
        return {
            "msg_id": msg_id,
            "sender": sender,
            "to": to,
            "type": type,
            "subject": redact(subject),
            "body": redact(body),
            "ts": iso_from_ms(ms),
            "ts_ms": ms,
        }

    def insert(self, tx: Tx, fields: dict[str, Any], *, seq: int | None = None) -> Message:
        """Store a prepared message in ``tx`` (the next seq, or ``seq`` for an import): the
        counter row is locked first, so the id lookup sees every sender that went before."""
        d = tx.dialect
        last = tx.one(f"SELECT last_seq FROM phx_team_seq WHERE team_id = ?{d.for_update}", (self.team_id,))  # noqa: S608
        if last is None:
            raise self._missing()
        found = self._by_id(tx, fields["msg_id"])
        if found is not None:
            same = (found.sender, found.to, found.type, found.subject, found.body) == (
                fields["sender"],
                fields["to"],
                fields["type"],
                fields["subject"],
                fields["body"],
            )
            if not same:
                raise MessageConflictError(
                    f"message id {fields['msg_id']} is already stored (#{found.seq}, from {found.sender} to "
                    f"{found.to}) with different content: a retry must send the same message; give a new "
                    "message a new id."
                )
            found.duplicate = True
            return found
        size = len(fields["subject"].encode("utf-8", "surrogatepass")) + len(
            fields["body"].encode("utf-8", "surrogatepass")
        )
        direct = int(fields["to"] != BROADCAST)
        number = int(last[0]) + 1 if seq is None else seq
        tx.execute(
            "UPDATE phx_team_seq SET last_seq = ?, bytes = bytes + ?, broadcasts = broadcasts + ? WHERE team_id = ?",
            (max(number, int(last[0])), size, 1 - direct, self.team_id),
        )
        tx.execute(
            f"INSERT INTO phx_messages (team_id, {_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",  # noqa: S608
            (
                self.team_id,
                number,
                fields["msg_id"],
                fields["sender"],
                fields["to"],
                fields["type"],
                fields["subject"],
                fields["body"],
                fields["ts"],
                fields["ts_ms"],
            ),
        )
        counted = fields["to"] if direct else fields["sender"]
        tx.execute(_COUNTS_SQL, (self.team_id, counted, direct, 1 - direct))
        d.notify(tx, CHANNEL, f"{self.team_id} {number}")
        return Message(seq=number, **fields)

    def send(
        self,
        sender: str,
        to: str,
        *,
        type: str = "info",
        subject: str,
        body: str,
        msg_id: str | None = None,
    ) -> Message:
        """Store a message and return it; a ``msg_id`` already stored with the same content
        returns the original (``duplicate=True``) and writes nothing, with other content it is a
        ``MessageConflictError``. Subject and body are redacted."""
        fields = self.prepare(sender, to, type=type, subject=subject, body=body, msg_id=msg_id)
        return self.db.transaction(lambda tx: self.insert(tx, fields))

    def _by_id(self, tx: Tx, msg_id: str) -> Message | None:
        row = tx.one(
            f"SELECT {_COLUMNS} FROM phx_messages WHERE team_id = ? AND msg_id = ?",  # noqa: S608 - constant SQL
            (self.team_id, msg_id),
        )
        if row is None:
            return None
        message = _message(row)
        self._fill_acks(tx, [message])
        return message

    def _fill_acks(self, tx: Tx, messages: list[Message]) -> None:
        if not messages:
            return
        rows = tx.all(
            "SELECT seq, reader FROM phx_acks WHERE team_id = ? AND seq >= ? AND seq <= ? ORDER BY seq, reader",
            (self.team_id, min(m.seq for m in messages), max(m.seq for m in messages)),
        )
        acks: dict[int, list[str]] = {}
        for seq, reader in rows:
            acks.setdefault(int(seq), []).append(str(reader))
        for message in messages:
            message.acked_by = acks.get(message.seq, [])

    def _delivered(self, tx: Tx, reader: str) -> int:
        value = tx.scalar("SELECT delivered FROM phx_cursors WHERE team_id = ? AND reader = ?", (self.team_id, reader))
        return int(value or 0)

    def _last(self, tx: Tx) -> int:
        value = tx.scalar("SELECT last_seq FROM phx_team_seq WHERE team_id = ?", (self.team_id,))
        if value is None:
            raise self._missing()
        return int(value)

    # -- reading ---------------------------------------------------------------------------------

    def fetch(self, reader: str, *, limit: int | None = None) -> Inbox:
        """Messages for ``reader`` past its delivered cursor, oldest first; the cursor does not move."""
        reader = validate_id(reader, "reader")
        if limit is not None and limit < 1:
            raise UsageError(f"limit must be at least 1, not {limit}.")
        cap = _NO_LIMIT if limit is None else limit

        def work(tx: Tx) -> Inbox:
            last = self._last(tx)  # commits happen in seq order: everything up to it is visible
            start = self._delivered(tx, reader)
            team = self.team_id
            rows = tx.all(_FETCH_SQL, (team, reader, start, last, cap, team, reader, start, last, cap, cap))
            out = Inbox(_message(r) for r in rows)
            out.through_seq = out[-1].seq if limit is not None and len(out) >= limit else max(last, start)
            self._fill_acks(tx, list(out))
            return out

        return self.db.read(work)

    def mark_delivered(self, reader: str, up_to_seq: int) -> None:
        """Record that every message for ``reader`` up to ``up_to_seq`` was handed over (never backwards)."""
        reader = validate_id(reader, "reader")
        if not isinstance(up_to_seq, int) or up_to_seq < 0:
            raise UsageError(f"a seq is a non-negative integer, not {up_to_seq!r}.")

        def work(tx: Tx) -> None:
            last = self._last(tx)
            if up_to_seq > last:
                raise UsageError(
                    f"cannot mark message #{up_to_seq} delivered to {reader}: the mailbox ends at #{last}."
                )
            tx.execute(
                "INSERT INTO phx_cursors (team_id, reader, delivered) VALUES (?, ?, 0) ON CONFLICT DO NOTHING",
                (self.team_id, reader),
            )
            delivered = int(
                tx.scalar(
                    f"SELECT delivered FROM phx_cursors WHERE team_id = ? AND reader = ?{tx.dialect.for_update}",  # noqa: S608
                    (self.team_id, reader),
                )
                or 0
            )
            if up_to_seq <= delivered:
                return
            # Keep the count of messages for the reader up to the cursor: unread is then a subtraction.
            t = self.team_id
            tx.execute(
                _DELIVER_SQL, (up_to_seq, t, reader, delivered, up_to_seq, t, reader, delivered, up_to_seq, t, reader)
            )

        self.db.transaction(work)

    def ack(self, reader: str, seq: int) -> None:
        """Record that ``reader`` acknowledges message ``seq`` (idempotent; only a recipient, once delivered)."""
        reader = validate_id(reader, "reader")
        if not isinstance(seq, int) or seq < 1:
            raise UsageError(f"a message seq is a positive integer, not {seq!r}.")

        def work(tx: Tx) -> None:
            message = self._get(tx, seq)
            if message is None:
                raise UsageError(f"there is no message #{seq} in team {self.team_id}'s mailbox.")
            if not message.addressed_to(reader):
                whom = "a broadcast by " + message.sender if message.broadcast else "addressed to " + message.to
                raise UsageError(f"message #{seq} is {whom}, not for {reader}: only a recipient can acknowledge it.")
            if seq > self._delivered(tx, reader):
                raise UsageError(
                    f"message #{seq} has not been delivered to {reader} yet: read it first "
                    f"(`phx team inbox {self.team_id} --as {reader}`), then acknowledge it."
                )
            tx.execute(
                "INSERT INTO phx_acks (team_id, seq, reader, acked_ms) VALUES (?, ?, ?, ?) ON CONFLICT DO NOTHING",
                (self.team_id, seq, reader, self.clock.now_ms()),
            )

        self.db.transaction(work)

    def _get(self, tx: Tx, seq: int) -> Message | None:
        row = tx.one(
            f"SELECT {_COLUMNS} FROM phx_messages WHERE team_id = ? AND seq = ?",  # noqa: S608 - constant SQL
            (self.team_id, seq),
        )
        return _message(row) if row else None

    def get(self, seq: int) -> Message | None:
        """Message ``seq`` with its ``acked_by``, or ``None``."""

        def work(tx: Tx) -> Message | None:
            message = self._get(tx, seq)
            if message is not None:
                self._fill_acks(tx, [message])
            return message

        return self.db.read(work)

    def acked_by(self, seq: int) -> list[str]:
        """The readers who acknowledged message ``seq`` (sorted); ``[]`` for an unknown seq."""
        message = self.get(seq)
        return message.acked_by if message is not None else []

    def replay(self, last: int) -> list[Message]:
        """The newest ``last`` messages, whoever they are for, oldest first."""
        if last <= 0:
            return []

        def work(tx: Tx) -> list[Message]:
            rows = tx.all(
                f"SELECT {_COLUMNS} FROM phx_messages WHERE team_id = ? ORDER BY seq DESC LIMIT ?",  # noqa: S608
                (self.team_id, last),
            )
            out = [_message(r) for r in reversed(rows)]
            self._fill_acks(tx, out)
            return out

        return self.db.read(work)

    def sent_by(self, sender: str, *, msg_ids: list[str] | None = None, last: int = 50) -> list[Message]:
        """Messages ``sender`` sent, oldest first, with their ``acked_by``: those of ``msg_ids``
        (the ones stored), else the newest ``last``."""
        sender = validate_id(sender, "sender")

        def work(tx: Tx) -> list[Message]:
            if msg_ids is not None:
                if not msg_ids:
                    return []
                rows = tx.all(
                    f"SELECT {_COLUMNS} FROM phx_messages WHERE team_id = ? AND sender = ? "  # noqa: S608 - constant SQL
                    f"AND msg_id IN ({tx.dialect.placeholders(len(msg_ids))}) ORDER BY seq",
                    (self.team_id, sender, *msg_ids),
                )
            else:
                rows = tx.all(
                    f"SELECT {_COLUMNS} FROM phx_messages WHERE team_id = ? AND sender = ? "  # noqa: S608 - constant SQL
                    "ORDER BY seq DESC LIMIT ?",
                    (self.team_id, sender, max(last, 0)),
                )
                rows = list(reversed(rows))
            out = [_message(r) for r in rows]
            for message in out:  # one by one: a sender's messages may be far apart
                self._fill_acks(tx, [message])
            return out

        return self.db.read(work)

    def stats(self) -> dict[str, Any]:
        """Message count, first seq, bytes of subjects and bodies."""
        return self.db.read(self.stats_in)

    def stats_in(self, tx: Tx) -> dict[str, Any]:
        """``stats``, read in ``tx``."""
        row = tx.one("SELECT last_seq, bytes FROM phx_team_seq WHERE team_id = ?", (self.team_id,))
        if row is None:
            raise self._missing()
        first = tx.scalar("SELECT min(seq) FROM phx_messages WHERE team_id = ?", (self.team_id,))
        return {
            "schema_version": SCHEMA_VERSION,
            "team_id": self.team_id,
            "count": int(row[0]),
            "first_seq": int(first or 0),
            "bytes": int(row[1] or 0),
        }

    def unread_count(self, reader: str) -> int:
        """How many messages for ``reader`` are past its delivered cursor."""
        reader = validate_id(reader, "reader")
        t = self.team_id
        return int(self.db.read(lambda tx: tx.scalar(_UNREAD_SQL, (t, reader, t, t, reader))) or 0)

    def cursor_state(self, reader: str) -> dict[str, Any]:
        """Delivered seq, acknowledged-through seq (the last message of the reader's first run of
        acknowledged ones: every message for it up to there is acknowledged; 0 if none) and the
        acknowledged seqs beyond it, as runs ``[first, last]``."""
        return self.cursor_states([reader])[validate_id(reader, "reader")]

    def cursor_states(self, readers: list[str]) -> dict[str, dict[str, Any]]:
        """``cursor_state`` of each reader, in one transaction."""
        names = [validate_id(r, "reader") for r in readers]
        return self.db.read(lambda tx: self.cursor_states_in(tx, names))

    def cursor_states_in(self, tx: Tx, names: list[str]) -> dict[str, dict[str, Any]]:
        """``cursor_states``, read in ``tx``."""
        out = {}
        for name in names:
            delivered = self._delivered(tx, name)
            firsts = [
                tx.scalar(_FIRST_UNACKED_SQL.format(who="m.recipient = ?"), (self.team_id, name, delivered, name)),
                tx.scalar(
                    _FIRST_UNACKED_SQL.format(who="m.recipient = '*' AND m.sender <> ?"),
                    (self.team_id, name, delivered, name),
                ),
            ]
            first = min((int(f) for f in firsts if f is not None), default=None)
            # Every message for the reader before ``first`` is acknowledged: the last of them.
            bound = delivered + 1 if first is None else first
            through = int(
                tx.scalar(
                    "SELECT coalesce(max(seq), 0) FROM phx_acks WHERE team_id = ? AND reader = ? AND seq < ?",
                    (self.team_id, name, bound),
                )
                or 0
            )
            acked = tx.all(
                "SELECT seq FROM phx_acks WHERE team_id = ? AND reader = ? AND seq > ? ORDER BY seq",
                (self.team_id, name, through),
            )
            out[name] = {
                "schema_version": SCHEMA_VERSION,
                "reader": name,
                "delivered_seq": delivered,
                "acked_through": through,
                "acked_ranges": _runs([int(a[0]) for a in acked]),
            }
        return out

    def readers(self) -> list[str]:
        """Everyone who has a cursor, sorted."""
        rows = self.db.read(
            lambda tx: tx.all("SELECT reader FROM phx_cursors WHERE team_id = ? ORDER BY reader", (self.team_id,))
        )
        return [str(r[0]) for r in rows]

    def wait(self, reader: str, timeout: float) -> bool:
        """Block until ``reader`` has an unread message (``True``) or ``timeout`` seconds pass:
        woken by the sender's commit on PostgreSQL (``LISTEN``), a short poll on SQLite."""
        team = self.team_id

        def relevant(payload: str) -> bool:
            return payload.partition(" ")[0] == team

        return self.db.wait(CHANNEL, lambda: self.unread_count(reader) > 0, timeout, relevant=relevant)


def _message(row: Any) -> Message:
    seq, msg_id, sender, to, type_, subject, body, ts, ts_ms = row
    return Message(
        seq=int(seq),
        msg_id=str(msg_id),
        sender=str(sender),
        to=str(to),
        type=str(type_),
        subject=str(subject),
        body=str(body),
        ts=str(ts),
        ts_ms=int(ts_ms),
    )


def _runs(seqs: Iterable[int]) -> list[list[int]]:
    """Sorted seqs as runs of consecutive numbers ``[first, last]``."""
    runs: list[list[int]] = []
    for seq in seqs:
        if runs and runs[-1][1] == seq - 1:
            runs[-1][1] = seq
        else:
            runs.append([seq, seq])
    return runs
