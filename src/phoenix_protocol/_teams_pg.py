"""Teams on PostgreSQL (``store = "postgresql://…"``): ``PgTeamStore`` and ``PgMailbox``, the
same interface as the file store (``FileTeamStore``, ``Mailbox``), so that teammates on several
machines share one team.

Tables (migration 1 in ``_pg``): ``phx_teams`` (metadata and roster as jsonb, one row per team),
``phx_tasks`` (one row per task: claims lock one row, not the team), ``phx_team_seq`` (the
mailbox's counter), ``phx_messages``, ``phx_cursors``, ``phx_acks``, ``phx_heartbeats``,
``phx_team_checkpoints``.

- A change of the team (``change``) locks the team's row and its task rows (``FOR UPDATE``),
  runs the same mutation as on files, and writes back the metadata and the tasks that changed, in
  one transaction.
- ``claim_next`` picks the first ready task with ``FOR UPDATE SKIP LOCKED``: fifty claimers take
  fifty different tasks at once, and no task is claimed twice.
- A message takes its sequence number from ``phx_team_seq`` in the transaction that inserts it:
  the counter row's lock orders the senders, a rollback gives the number back, so the sequence has
  no gaps and no duplicates and commits happen in sequence order. The same ``msg_id`` is stored
  once. Each send notifies channel ``phx_mailbox`` (payload ``<team_id> <seq>``) at commit, which
  wakes ``PgMailbox.wait`` (``phx team inbox --follow``) without polling.
- Heartbeats are one upsert; checkpoint retention is one ``DELETE`` in the transaction that
  writes the checkpoint.

Every operation is one transaction; reads and idempotent writes are retried on a fresh connection
when the connection fails before the commit (``_pg.transaction``).
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from phoenix_protocol import _pg
from phoenix_protocol._clock import Clock, iso_from_ms, system_clock
from phoenix_protocol._errors import UsageError
from phoenix_protocol._ids import validate_id
from phoenix_protocol._jsonio import dumps_document
from phoenix_protocol._mailbox import BROADCAST, Inbox, Message, _new_msg_id, check_message
from phoenix_protocol._mailbox import SCHEMA_VERSION as MAILBOX_SCHEMA
from phoenix_protocol._teams import TeamNotFoundError, TeamReadOnlyError, migrate

if TYPE_CHECKING:
    import psycopg

    from phoenix_protocol._teams import Team

__all__ = ["CHANNEL", "PgMailbox", "PgTeamStore", "pg_list_teams"]

CHANNEL = "phx_mailbox"
# "Addressed to READER" is two index range scans (direct: phx_messages_to; broadcasts by others:
# phx_messages_broadcast), never one OR that would read the whole mailbox.
_FETCH_SQL = """
SELECT seq, msg_id, sender, recipient, type, subject, body, ts, ts_ms FROM (
    (SELECT * FROM phx_messages WHERE team_id = %(team)s AND recipient = %(reader)s
        AND seq > %(start)s AND seq <= %(last)s ORDER BY seq LIMIT %(limit)s)
    UNION ALL
    (SELECT * FROM phx_messages WHERE team_id = %(team)s AND recipient = '*' AND sender <> %(reader)s
        AND seq > %(start)s AND seq <= %(last)s ORDER BY seq LIMIT %(limit)s)
) AS m ORDER BY seq LIMIT %(limit)s
"""
# Unread = messages for the reader so far (direct + others' broadcasts, counters kept by send)
# - messages for it up to its cursor (kept by mark_delivered): constant time, one snapshot.
_UNREAD_SQL = """
SELECT coalesce((SELECT direct - broadcasts_sent FROM phx_mailbox_counts WHERE team_id = %(team)s
            AND name = %(reader)s), 0)
     + coalesce((SELECT broadcasts FROM phx_team_seq WHERE team_id = %(team)s), 0)
     - coalesce((SELECT addressed FROM phx_cursors WHERE team_id = %(team)s AND reader = %(reader)s), 0)
"""
_SEND_SQL = """
WITH s AS (
    UPDATE phx_team_seq SET last_seq = last_seq + 1, bytes = bytes + %(size)s,
        broadcasts = broadcasts + %(broadcast)s
    WHERE team_id = %(team)s RETURNING last_seq
), m AS (
    INSERT INTO phx_messages (team_id, seq, msg_id, sender, recipient, type, subject, body, ts, ts_ms)
    SELECT %(team)s, last_seq, %(msg_id)s, %(sender)s, %(to)s, %(type)s, %(subject)s, %(body)s, %(ts)s, %(ts_ms)s
    FROM s RETURNING seq
), c AS (
    INSERT INTO phx_mailbox_counts AS c (team_id, name, direct, broadcasts_sent)
    SELECT %(team)s, %(counted)s, %(direct)s, %(broadcast)s FROM m
    ON CONFLICT (team_id, name) DO UPDATE SET direct = c.direct + EXCLUDED.direct,
        broadcasts_sent = c.broadcasts_sent + EXCLUDED.broadcasts_sent
    RETURNING 1
)
SELECT m.seq, pg_notify(%(channel)s, %(team)s || ' ' || m.seq), (SELECT count(*) FROM c) FROM m
"""
_DELIVER_SQL = """
UPDATE phx_cursors SET delivered = %(upto)s, addressed = addressed
    + (SELECT count(*) FROM phx_messages WHERE team_id = %(team)s AND recipient = %(reader)s
        AND seq > %(start)s AND seq <= %(upto)s)
    + (SELECT count(*) FROM phx_messages WHERE team_id = %(team)s AND recipient = '*'
        AND sender <> %(reader)s AND seq > %(start)s AND seq <= %(upto)s)
WHERE team_id = %(team)s AND reader = %(reader)s
"""
_CURSORS_SQL = """
SELECT c.reader, c.delivered,
    LEAST(
        (SELECT min(m.seq) FROM phx_messages m WHERE m.team_id = c.team_id AND m.recipient = c.reader
            AND m.seq <= c.delivered AND NOT EXISTS (SELECT 1 FROM phx_acks a
                WHERE a.team_id = m.team_id AND a.seq = m.seq AND a.reader = c.reader)),
        (SELECT min(m.seq) FROM phx_messages m WHERE m.team_id = c.team_id AND m.recipient = '*'
            AND m.sender <> c.reader AND m.seq <= c.delivered AND NOT EXISTS (SELECT 1 FROM phx_acks a
                WHERE a.team_id = m.team_id AND a.seq = m.seq AND a.reader = c.reader))
    ),
    (SELECT array_agg(a.seq ORDER BY a.seq) FROM phx_acks a WHERE a.team_id = c.team_id AND a.reader = c.reader)
FROM phx_cursors c WHERE c.team_id = %(team)s AND c.reader = ANY(%(readers)s)
"""


def _jsonb(value: Any) -> Any:
    from psycopg.types.json import Jsonb

    return Jsonb(value)


def pg_list_teams(url: str) -> list[str]:
    """Ids of the teams in the PostgreSQL store, sorted."""

    def work(conn: psycopg.Connection[Any]) -> list[str]:
        return [row[0] for row in conn.execute("SELECT team_id FROM phx_teams ORDER BY team_id")]

    return _pg.transaction(url, work, retry=True)


class PgTeamStore:
    """One team's state in PostgreSQL (see the module docstring)."""

    def __init__(self, team: Team, url: str) -> None:
        self.team = team
        self.url = url
        self.id = team.id
        self.where = f"{_pg.describe(url)} team {team.id}"

    @property
    def location(self) -> str:
        """Where the team is, for people: the server (no password) and the team."""
        return self.where

    # -- metadata ------------------------------------------------------------------------------

    def exists(self) -> bool:
        def work(conn: psycopg.Connection[Any]) -> bool:
            return conn.execute("SELECT 1 FROM phx_teams WHERE team_id = %s", (self.id,)).fetchone() is not None

        return _pg.transaction(self.url, work, retry=True)

    def create(self, metadata: dict[str, Any]) -> None:
        meta = {k: v for k, v in metadata.items() if k != "tasks"}

        def work(conn: psycopg.Connection[Any]) -> None:
            row = conn.execute(
                "INSERT INTO phx_teams (team_id, metadata, roster, created_ms) VALUES (%s, %s, '[]', %s) "
                "ON CONFLICT (team_id) DO NOTHING RETURNING team_id",
                (self.id, _jsonb(meta), int(metadata.get("created_ms") or 0)),
            ).fetchone()
            if row is None:
                raise UsageError(f"team {self.id} already exists.")
            conn.execute("INSERT INTO phx_team_seq (team_id, last_seq) VALUES (%s, 0)", (self.id,))
            for position, task in enumerate(metadata.get("tasks") or []):
                self._insert_task(conn, position, task)

        _pg.transaction(self.url, work, retry=True)

    def _assemble(self, meta: Any, tasks: list[Any]) -> dict[str, Any]:
        data = dict(meta)
        data["tasks"] = tasks
        return migrate(data, self.where)

    def read(self) -> dict[str, Any]:
        def work(conn: psycopg.Connection[Any]) -> dict[str, Any]:
            row = conn.execute("SELECT metadata FROM phx_teams WHERE team_id = %s", (self.id,)).fetchone()
            if row is None:
                raise TeamNotFoundError(f"team {self.id} is not in {_pg.describe(self.url)}.")
            tasks = conn.execute(
                "SELECT record FROM phx_tasks WHERE team_id = %s ORDER BY position", (self.id,)
            ).fetchall()
            return self._assemble(row[0], [t[0] for t in tasks])

        return _pg.transaction(self.url, work, retry=True)

    def _insert_task(self, conn: psycopg.Connection[Any], position: int, task: dict[str, Any]) -> None:
        conn.execute(
            "INSERT INTO phx_tasks (team_id, task_id, position, status, assigned_to, dependencies, record) "
            "VALUES (%s, %s, %s, %s, %s, %s, %s)",
            (
                self.id,
                task["task_id"],
                position,
                task["status"],
                task.get("assigned_to"),
                list(task.get("dependencies") or []),
                _jsonb(task),
            ),
        )

    def _update_task(self, conn: psycopg.Connection[Any], position: int, task: dict[str, Any], old: str) -> int:
        """Write a task if its row still holds ``old`` (the JSON read); the rows written (0 or 1)."""
        cur = conn.execute(
            "UPDATE phx_tasks SET position = %s, status = %s, assigned_to = %s, dependencies = %s, record = %s "
            "WHERE team_id = %s AND task_id = %s AND record = %s::jsonb",
            (
                position,
                task["status"],
                task.get("assigned_to"),
                list(task.get("dependencies") or []),
                _jsonb(task),
                self.id,
                task["task_id"],
                old,
            ),
        )
        return cur.rowcount

    def read_metadata(self) -> dict[str, Any]:
        """The team's metadata without its tasks (one small row)."""

        def work(conn: psycopg.Connection[Any]) -> dict[str, Any]:
            row = conn.execute("SELECT metadata FROM phx_teams WHERE team_id = %s", (self.id,)).fetchone()
            if row is None:
                raise TeamNotFoundError(f"team {self.id} is not in {_pg.describe(self.url)}.")
            return dict(row[0])

        return _pg.transaction(self.url, work, retry=True)

    def change(
        self, mutate: Callable[[dict[str, Any]], Any], *, task_id: str | None = None
    ) -> tuple[dict[str, Any], Any]:
        """Lock the team's row, run ``mutate`` on the metadata and tasks, write back what changed.
        Task rows are not locked while ``mutate`` runs (a claim elsewhere must not wait for it):
        each changed task is written only if it is still as read, else the whole change runs
        again on fresh data (a serialization failure, retried by ``_pg.transaction``)."""
        import psycopg

        def work(conn: psycopg.Connection[Any]) -> tuple[dict[str, Any], Any]:
            row = conn.execute(
                "SELECT metadata::text FROM phx_teams WHERE team_id = %s FOR UPDATE", (self.id,)
            ).fetchone()
            if row is None:
                raise TeamNotFoundError(f"team {self.id} is not in {_pg.describe(self.url)}.")
            if task_id is None:
                cur = conn.execute(
                    "SELECT record::text FROM phx_tasks WHERE team_id = %s ORDER BY position", (self.id,)
                )
            else:  # the caller looks at one task: the others are neither read nor written
                cur = conn.execute(
                    "SELECT record::text FROM phx_tasks WHERE team_id = %s AND task_id = %s", (self.id, task_id)
                )
            texts = [r[0] for r in cur]
            data = self._assemble(json.loads(row[0]), [json.loads(t) for t in texts])
            before = {t["task_id"]: (t, text) for t, text in zip(map(json.loads, texts), texts, strict=True)}
            result = mutate(data)
            meta = {k: v for k, v in data.items() if k != "tasks"}
            conn.execute("UPDATE phx_teams SET metadata = %s WHERE team_id = %s", (_jsonb(meta), self.id))
            positions = self._positions(conn, data["tasks"]) if task_id is not None else None
            for position, task in enumerate(data["tasks"]):
                if positions is not None:
                    position = positions.get(task["task_id"], position)  # noqa: PLW2901 - kept in place
                old = before.get(task["task_id"])
                if old is None:
                    if positions is not None:
                        raise UsageError("a change that names one task cannot add tasks.")
                    self._insert_task(conn, position, task)
                elif old[0] != task and self._update_task(conn, position, task, old[1]) != 1:
                    raise psycopg.errors.SerializationFailure(f"task {task['task_id']} changed meanwhile")
            return data, result

        return _pg.transaction(self.url, work, retry=True)

    def _positions(self, conn: psycopg.Connection[Any], tasks: list[dict[str, Any]]) -> dict[str, int]:
        rows = conn.execute(
            "SELECT task_id, position FROM phx_tasks WHERE team_id = %s AND task_id = ANY(%s)",
            (self.id, [t["task_id"] for t in tasks]),
        ).fetchall()
        return {r[0]: int(r[1]) for r in rows}

    # -- roster --------------------------------------------------------------------------------

    def roster(self) -> list[dict[str, Any]]:
        def work(conn: psycopg.Connection[Any]) -> list[dict[str, Any]]:
            row = conn.execute("SELECT roster FROM phx_teams WHERE team_id = %s", (self.id,)).fetchone()
            return [dict(m) for m in (row[0] if row else [])]

        return _pg.transaction(self.url, work, retry=True)

    def change_roster(self, mutate: Callable[[list[dict[str, Any]]], Any]) -> Any:
        def work(conn: psycopg.Connection[Any]) -> Any:
            row = conn.execute("SELECT roster FROM phx_teams WHERE team_id = %s FOR UPDATE", (self.id,)).fetchone()
            if row is None:
                raise TeamNotFoundError(f"team {self.id} is not in {_pg.describe(self.url)}.")
            teammates = [dict(m) for m in row[0]]
            result = mutate(teammates)
            conn.execute("UPDATE phx_teams SET roster = %s WHERE team_id = %s", (_jsonb(teammates), self.id))
            return result

        return _pg.transaction(self.url, work, retry=True)

    # -- claims --------------------------------------------------------------------------------

    _READY = (
        "FROM phx_tasks WHERE team_id = %(team)s AND status = 'pending' AND assigned_to IS NULL "
        "AND dependencies <@ ARRAY(SELECT task_id FROM phx_tasks WHERE team_id = %(team)s AND status = 'completed')"
    )

    def claim_next(self, name: str, claim: Callable[[dict[str, Any]], Any]) -> dict[str, Any] | None:
        """The first ready task, claimed for ``name``: ``FOR UPDATE SKIP LOCKED`` takes a task no
        other transaction holds; when every ready task is held for a moment (another claimer, a
        change of the team), it looks again until none is ready."""
        started = iso_from_ms(self.team.clock.now_ms())
        deadline = time.monotonic() + self.team.config.lock_timeout

        def work(conn: psycopg.Connection[Any]) -> tuple[dict[str, Any] | None, bool]:
            row = conn.execute("SELECT metadata->>'status' FROM phx_teams WHERE team_id = %s", (self.id,)).fetchone()
            if row is None:
                raise TeamNotFoundError(f"team {self.id} is not in {_pg.describe(self.url)}.")
            if row[0] == "completed":
                raise TeamReadOnlyError(f"team {self.id} is completed: its state is read-only.")
            found = conn.execute(
                f"SELECT record {self._READY} ORDER BY position FOR UPDATE SKIP LOCKED LIMIT 1",
                {"team": self.id},
            ).fetchone()
            if found is None:
                waiting = conn.execute(f"SELECT count(*) {self._READY}", {"team": self.id}).fetchone()
                return None, bool(waiting and waiting[0])
            task = dict(found[0])
            task.update(assigned_to=name, status="in_progress", started_at=started)
            conn.execute(
                "UPDATE phx_tasks SET status = 'in_progress', assigned_to = %s, record = %s "
                "WHERE team_id = %s AND task_id = %s",
                (name, _jsonb(task), self.id, task["task_id"]),
            )
            return task, False

        while True:
            task, held = _pg.transaction(self.url, work, retry=True)
            if task is not None or not held or time.monotonic() > deadline:
                return task
            time.sleep(0.005)

    # -- heartbeats ------------------------------------------------------------------------------

    def beat(self, name: str, *, now_ms: int, session_id: str | None) -> dict[str, Any]:
        validate_id(name, "teammate name")
        host = os.uname().nodename

        def work(conn: psycopg.Connection[Any]) -> dict[str, Any]:
            row = conn.execute(
                "INSERT INTO phx_heartbeats AS h (team_id, name, seq, ms, session_id, host, pid) "
                "VALUES (%s, %s, 1, %s, %s, %s, %s) ON CONFLICT (team_id, name) DO UPDATE SET "
                "seq = h.seq + 1, ms = EXCLUDED.ms, session_id = EXCLUDED.session_id, host = EXCLUDED.host, "
                "pid = EXCLUDED.pid RETURNING seq",
                (self.id, name, now_ms, session_id, host, os.getpid()),
            ).fetchone()
            return {
                "schema_version": 1,
                "name": name,
                "seq": int(row[0]) if row else 1,
                "ms": now_ms,
                "host": host,
                "session_id": session_id,
            }

        return _pg.transaction(self.url, work, retry=True)

    def read_beat(self, name: str) -> dict[str, Any] | None:
        def work(conn: psycopg.Connection[Any]) -> dict[str, Any] | None:
            row = conn.execute(
                "SELECT seq, ms, host, session_id FROM phx_heartbeats WHERE team_id = %s AND name = %s",
                (self.id, name),
            ).fetchone()
            if row is None:
                return None
            return {
                "schema_version": 1,
                "name": name,
                "seq": int(row[0]),
                "ms": int(row[1]),
                "host": row[2],
                "session_id": row[3],
            }

        return _pg.transaction(self.url, work, retry=True)

    def read_beats(self, names: list[str]) -> dict[str, dict[str, Any] | None]:
        def work(conn: psycopg.Connection[Any]) -> dict[str, dict[str, Any] | None]:
            rows = conn.execute(
                "SELECT name, seq, ms, host, session_id FROM phx_heartbeats WHERE team_id = %s AND name = ANY(%s)",
                (self.id, names),
            ).fetchall()
            found = {
                r[0]: {
                    "schema_version": 1,
                    "name": r[0],
                    "seq": int(r[1]),
                    "ms": int(r[2]),
                    "host": r[3],
                    "session_id": r[4],
                }
                for r in rows
            }
            return {name: found.get(name) for name in names}

        return _pg.transaction(self.url, work, retry=True)

    # -- checkpoints -----------------------------------------------------------------------------

    def write_checkpoint(self, name: str, seq: int, kind: str, record: dict[str, Any], keep: int) -> bytes:
        def work(conn: psycopg.Connection[Any]) -> None:
            conn.execute(
                "INSERT INTO phx_team_checkpoints (team_id, seq, kind, record) VALUES (%s, %s, %s, %s) "
                "ON CONFLICT (team_id, seq) DO UPDATE SET kind = EXCLUDED.kind, record = EXCLUDED.record",
                (self.id, seq, kind, _jsonb(record)),
            )
            conn.execute(
                "DELETE FROM phx_team_checkpoints WHERE team_id = %s AND seq <= "
                "(SELECT max(seq) FROM phx_team_checkpoints WHERE team_id = %s) - %s",
                (self.id, self.id, keep),
            )

        _pg.transaction(self.url, work, retry=True)
        return dumps_document(record).encode("ascii")

    def latest_checkpoint(self, kind: str | None) -> dict[str, Any] | None:
        def work(conn: psycopg.Connection[Any]) -> dict[str, Any] | None:
            if kind is None:
                row = conn.execute(
                    "SELECT record FROM phx_team_checkpoints WHERE team_id = %s ORDER BY seq DESC LIMIT 1", (self.id,)
                ).fetchone()
            else:
                row = conn.execute(
                    "SELECT record FROM phx_team_checkpoints WHERE team_id = %s AND kind = %s ORDER BY seq DESC LIMIT 1",
                    (self.id, kind),
                ).fetchone()
            return dict(row[0]) if row else None

        return _pg.transaction(self.url, work, retry=True)

    def checkpoint_names(self) -> list[str]:
        def work(conn: psycopg.Connection[Any]) -> list[str]:
            rows = conn.execute("SELECT seq FROM phx_team_checkpoints WHERE team_id = %s ORDER BY seq", (self.id,))
            return [f"checkpoint-{int(r[0]):08d}.json" for r in rows]

        return _pg.transaction(self.url, work, retry=True)

    def read_checkpoint(self, name: str) -> dict[str, Any] | None:
        """One checkpoint by name (``checkpoint-<seq>.json``), or ``None``."""
        digits = name.removeprefix("checkpoint-").removesuffix(".json")
        if not digits.isdigit():
            raise UsageError(f"{name!r} is not a team checkpoint name.")

        def work(conn: psycopg.Connection[Any]) -> dict[str, Any] | None:
            row = conn.execute(
                "SELECT record FROM phx_team_checkpoints WHERE team_id = %s AND seq = %s", (self.id, int(digits))
            ).fetchone()
            return dict(row[0]) if row else None

        return _pg.transaction(self.url, work, retry=True)

    def put_beat(self, record: dict[str, Any]) -> None:
        """Store a heartbeat record as it is (``phx import``)."""
        name = validate_id(str(record.get("name")), "teammate name")

        def work(conn: psycopg.Connection[Any]) -> None:
            conn.execute(
                "INSERT INTO phx_heartbeats (team_id, name, seq, ms, session_id, host, pid) "
                "VALUES (%s, %s, %s, %s, %s, %s, NULL) ON CONFLICT (team_id, name) DO UPDATE SET "
                "seq = EXCLUDED.seq, ms = EXCLUDED.ms, session_id = EXCLUDED.session_id, host = EXCLUDED.host",
                (self.id, name, int(record["seq"]), int(record["ms"]), record.get("session_id"), record.get("host")),
            )

        _pg.transaction(self.url, work, retry=True)

    def mailbox(self) -> PgMailbox:
        return PgMailbox(self.url, team_id=self.id, clock=self.team.clock)


class _Duplicate(Exception):
    def __init__(self, message: Message) -> None:
        self.message = message


class PgMailbox:
    """A team's mailbox in PostgreSQL: ``Mailbox``'s methods and guarantees (see the module docstring)."""

    def __init__(self, url: str, *, team_id: str, clock: Clock = system_clock) -> None:
        self.url = url
        self.team_id = validate_id(team_id, "team id")
        self.clock = clock

    def close(self) -> None:
        """Nothing to release (connections belong to the process's pool)."""

    def __enter__(self) -> PgMailbox:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- writing ---------------------------------------------------------------------------------

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
        """Store a message and return it; a ``msg_id`` already stored returns the original
        (``duplicate=True``) and writes nothing. Subject and body are redacted."""
        validate_id(sender, "sender")
        if to != BROADCAST:
            validate_id(to, "recipient")
        check_message(type, subject, body)
        msg_id = _new_msg_id() if msg_id is None else validate_id(msg_id, "message id")
        from phoenix_protocol._redact import redact

        ms = self.clock.now_ms()
        fields: dict[str, Any] = {
            "msg_id": msg_id,
            "sender": sender,
            "to": to,
            "type": type,
            "subject": redact(subject),
            "body": redact(body),
            "ts": iso_from_ms(ms),
            "ts_ms": ms,
        }

        def work(conn: psycopg.Connection[Any]) -> Message:
            found = self._by_id(conn, msg_id)
            if found is not None:
                raise _Duplicate(found)
            size = len(fields["subject"].encode("utf-8", "surrogatepass")) + len(
                fields["body"].encode("utf-8", "surrogatepass")
            )
            direct = int(to != BROADCAST)
            # One statement under the counter row's lock (then COMMIT): the number, the message,
            # the recipient's counters and the notification. A sender with the same msg_id that
            # committed meanwhile makes the INSERT fail: the transaction, counter included, is
            # rolled back (no gap) and send() returns that sender's message.
            row = conn.execute(
                _SEND_SQL,
                {
                    "team": self.team_id,
                    "size": size,
                    "broadcast": 1 - direct,
                    "direct": direct,
                    "counted": to if direct else sender,
                    "msg_id": msg_id,
                    "sender": sender,
                    "to": to,
                    "type": type,
                    "subject": fields["subject"],
                    "body": fields["body"],
                    "ts": fields["ts"],
                    "ts_ms": ms,
                    "channel": CHANNEL,
                },
            ).fetchone()
            if row is None:
                raise TeamNotFoundError(f"team {self.team_id} is not in {_pg.describe(self.url)}.")
            return Message(seq=int(row[0]), **fields)

        try:
            return _pg.transaction(self.url, work, retry=True)
        except _Duplicate as dup:
            dup.message.duplicate = True
            return dup.message
        except _pg.PgError as exc:
            import psycopg

            if not isinstance(exc.__cause__, psycopg.errors.UniqueViolation):
                raise
            found = _pg.transaction(self.url, lambda conn: self._by_id(conn, msg_id), retry=True)
            if found is None:
                raise
            found.duplicate = True
            return found

    def _by_id(self, conn: psycopg.Connection[Any], msg_id: str) -> Message | None:
        row = conn.execute(
            f"SELECT {self._COLUMNS} FROM phx_messages WHERE team_id = %s AND msg_id = %s",  # noqa: S608 - constant SQL
            (self.team_id, msg_id),
        ).fetchone()
        if row is None:
            return None
        message = self._message(row)
        self._fill_acks(conn, [message])
        return message

    _COLUMNS = "seq, msg_id, sender, recipient, type, subject, body, ts, ts_ms"

    @staticmethod
    def _message(row: tuple[Any, ...]) -> Message:
        seq, msg_id, sender, to, type_, subject, body, ts, ts_ms = row
        return Message(
            seq=int(seq),
            msg_id=msg_id,
            sender=sender,
            to=to,
            type=type_,
            subject=subject,
            body=body,
            ts=ts,
            ts_ms=int(ts_ms),
        )

    def _fill_acks(self, conn: psycopg.Connection[Any], messages: list[Message]) -> None:
        if not messages:
            return
        rows = conn.execute(
            "SELECT seq, array_agg(reader ORDER BY reader) FROM phx_acks WHERE team_id = %s AND seq = ANY(%s) "
            "GROUP BY seq",
            (self.team_id, [m.seq for m in messages]),
        ).fetchall()
        acks = {int(seq): list(readers) for seq, readers in rows}
        for message in messages:
            message.acked_by = acks.get(message.seq, [])

    def _delivered(self, conn: psycopg.Connection[Any], reader: str) -> int:
        row = conn.execute(
            "SELECT delivered FROM phx_cursors WHERE team_id = %s AND reader = %s", (self.team_id, reader)
        ).fetchone()
        return int(row[0]) if row else 0

    def _last(self, conn: psycopg.Connection[Any]) -> int:
        row = conn.execute("SELECT last_seq FROM phx_team_seq WHERE team_id = %s", (self.team_id,)).fetchone()
        if row is None:
            raise TeamNotFoundError(f"team {self.team_id} is not in {_pg.describe(self.url)}.")
        return int(row[0])

    # -- reading ---------------------------------------------------------------------------------

    def fetch(self, reader: str, *, limit: int | None = None) -> Inbox:
        """Messages for ``reader`` past its delivered cursor, oldest first; the cursor does not move."""
        reader = validate_id(reader, "reader")
        if limit is not None and limit < 1:
            raise UsageError(f"limit must be at least 1, not {limit}.")

        def work(conn: psycopg.Connection[Any]) -> Inbox:
            last = self._last(conn)  # commits happen in seq order: everything up to it is visible
            start = self._delivered(conn, reader)
            rows = conn.execute(
                _FETCH_SQL, {"team": self.team_id, "start": start, "last": last, "reader": reader, "limit": limit}
            ).fetchall()
            out = Inbox(self._message(r) for r in rows)
            out.through_seq = out[-1].seq if limit is not None and len(out) >= limit else max(last, start)
            self._fill_acks(conn, list(out))
            return out

        return _pg.transaction(self.url, work, retry=True)

    def mark_delivered(self, reader: str, up_to_seq: int) -> None:
        """Record that every message for ``reader`` up to ``up_to_seq`` was handed over (never backwards)."""
        reader = validate_id(reader, "reader")
        if not isinstance(up_to_seq, int) or up_to_seq < 0:
            raise UsageError(f"a seq is a non-negative integer, not {up_to_seq!r}.")

        def work(conn: psycopg.Connection[Any]) -> None:
            last = self._last(conn)
            if up_to_seq > last:
                raise UsageError(
                    f"cannot mark message #{up_to_seq} delivered to {reader}: the mailbox ends at #{last}."
                )
            conn.execute(
                "INSERT INTO phx_cursors (team_id, reader, delivered) VALUES (%s, %s, 0) ON CONFLICT DO NOTHING",
                (self.team_id, reader),
            )
            row = conn.execute(
                "SELECT delivered FROM phx_cursors WHERE team_id = %s AND reader = %s FOR UPDATE",
                (self.team_id, reader),
            ).fetchone()
            delivered = int(row[0]) if row else 0
            if up_to_seq <= delivered:
                return
            # Keep the count of messages for the reader up to the cursor: unread is then a subtraction.
            conn.execute(_DELIVER_SQL, {"team": self.team_id, "reader": reader, "start": delivered, "upto": up_to_seq})

        _pg.transaction(self.url, work, retry=True)

    def ack(self, reader: str, seq: int) -> None:
        """Record that ``reader`` acknowledges message ``seq`` (idempotent; only a recipient, once delivered)."""
        reader = validate_id(reader, "reader")
        if not isinstance(seq, int) or seq < 1:
            raise UsageError(f"a message seq is a positive integer, not {seq!r}.")

        def work(conn: psycopg.Connection[Any]) -> None:
            message = self._get(conn, seq)
            if message is None:
                raise UsageError(f"there is no message #{seq} in team {self.team_id}'s mailbox.")
            if not message.addressed_to(reader):
                whom = "a broadcast by " + message.sender if message.broadcast else "addressed to " + message.to
                raise UsageError(f"message #{seq} is {whom}, not for {reader}: only a recipient can acknowledge it.")
            if seq > self._delivered(conn, reader):
                raise UsageError(
                    f"message #{seq} has not been delivered to {reader} yet: read it first "
                    f"(`phx team inbox {self.team_id} --as {reader}`), then acknowledge it."
                )
            conn.execute(
                "INSERT INTO phx_acks (team_id, seq, reader, acked_ms) VALUES (%s, %s, %s, %s) ON CONFLICT DO NOTHING",
                (self.team_id, seq, reader, self.clock.now_ms()),
            )

        _pg.transaction(self.url, work, retry=True)

    def _get(self, conn: psycopg.Connection[Any], seq: int) -> Message | None:
        row = conn.execute(
            f"SELECT {self._COLUMNS} FROM phx_messages WHERE team_id = %s AND seq = %s",  # noqa: S608 - constant SQL
            (self.team_id, seq),
        ).fetchone()
        return self._message(row) if row else None

    def get(self, seq: int) -> Message | None:
        """Message ``seq`` with its ``acked_by``, or ``None``."""

        def work(conn: psycopg.Connection[Any]) -> Message | None:
            message = self._get(conn, seq)
            if message is not None:
                self._fill_acks(conn, [message])
            return message

        return _pg.transaction(self.url, work, retry=True)

    def acked_by(self, seq: int) -> list[str]:
        """The readers who acknowledged message ``seq`` (sorted); ``[]`` for an unknown seq."""
        message = self.get(seq)
        return message.acked_by if message is not None else []

    def replay(self, last: int) -> list[Message]:
        """The newest ``last`` messages, whoever they are for, oldest first."""
        if last <= 0:
            return []

        def work(conn: psycopg.Connection[Any]) -> list[Message]:
            rows = conn.execute(
                f"SELECT {self._COLUMNS} FROM phx_messages WHERE team_id = %s ORDER BY seq DESC LIMIT %s",  # noqa: S608
                (self.team_id, last),
            ).fetchall()
            out = [self._message(r) for r in reversed(rows)]
            self._fill_acks(conn, out)
            return out

        return _pg.transaction(self.url, work, retry=True)

    def stats(self) -> dict[str, Any]:
        """The same keys as the file mailbox's (segments and archives are the table's: one, none)."""

        def work(conn: psycopg.Connection[Any]) -> dict[str, Any]:
            last = self._last(conn)
            row = conn.execute(
                "SELECT (SELECT seq FROM phx_messages WHERE team_id = %s ORDER BY seq LIMIT 1), "
                "(SELECT bytes FROM phx_team_seq WHERE team_id = %s)",
                (self.team_id, self.team_id),
            ).fetchone()
            first, size = (int(row[0] or 0), int(row[1] or 0)) if row else (0, 0)
            return {
                "schema_version": MAILBOX_SCHEMA,
                "team_id": self.team_id,
                "count": last,
                "first_seq": first,
                "segments": 1 if last else 0,
                "bytes": size,
                "archived_segments": 0,
                "archived_bytes": 0,
                "indexed_seq": last,
            }

        return _pg.transaction(self.url, work, retry=True)

    def unread_count(self, reader: str) -> int:
        """How many messages for ``reader`` are past its delivered cursor."""
        reader = validate_id(reader, "reader")

        def work(conn: psycopg.Connection[Any]) -> int:
            row = conn.execute(_UNREAD_SQL, {"team": self.team_id, "reader": reader}).fetchone()
            return int(row[0]) if row else 0

        return _pg.transaction(self.url, work, retry=True)

    def cursor_state(self, reader: str) -> dict[str, Any]:
        """Delivered seq, acknowledged-through seq (every message for the reader up to it is
        acknowledged) and the acknowledged seqs beyond it, as runs ``[first, last]``."""
        return self.cursor_states([reader])[validate_id(reader, "reader")]

    def cursor_states(self, readers: list[str]) -> dict[str, dict[str, Any]]:
        """``cursor_state`` of each reader, in one query."""
        names = [validate_id(r, "reader") for r in readers]

        def work(conn: psycopg.Connection[Any]) -> dict[str, dict[str, Any]]:
            rows = conn.execute(_CURSORS_SQL, {"team": self.team_id, "readers": names}).fetchall()
            found = {r[0]: (int(r[1]), r[2], list(r[3] or [])) for r in rows}
            out = {}
            for name in names:
                delivered, first_unacked, acked = found.get(name, (0, None, []))
                through = delivered if first_unacked is None else int(first_unacked) - 1
                out[name] = {
                    "schema_version": MAILBOX_SCHEMA,
                    "reader": name,
                    "delivered_seq": delivered,
                    "acked_through": through,
                    "acked_ranges": _runs([int(a) for a in acked if a > through]),
                }
            return out

        return _pg.transaction(self.url, work, retry=True)

    def readers(self) -> list[str]:
        """Everyone who has a cursor, sorted."""

        def work(conn: psycopg.Connection[Any]) -> list[str]:
            rows = conn.execute("SELECT reader FROM phx_cursors WHERE team_id = %s ORDER BY reader", (self.team_id,))
            return [r[0] for r in rows]

        return _pg.transaction(self.url, work, retry=True)

    def compact(self, recipients: Callable[[Message], Iterable[str]] | Iterable[str]) -> dict[str, Any]:
        """Nothing to move: the table is indexed by (team, seq), so old messages cost reads nothing."""
        return {"archived": [], "kept": [], "stats": self.stats()}

    def wait(self, reader: str, timeout: float) -> bool:
        """Block until ``reader`` has an unread message (``True``) or ``timeout`` seconds pass:
        LISTEN on the mailbox channel, woken by the sender's commit (no polling)."""
        import psycopg

        deadline = time.monotonic() + timeout
        try:
            with psycopg.connect(self.url, autocommit=True, connect_timeout=_pg.CONNECT_TIMEOUT) as conn:
                conn.execute(f"LISTEN {CHANNEL}")
                if self.unread_count(reader):
                    return True
                while True:
                    left = deadline - time.monotonic()
                    if left <= 0:
                        return False
                    for note in conn.notifies(timeout=left, stop_after=1):
                        team, _, _seq = note.payload.partition(" ")
                        if team == self.team_id and self.unread_count(reader):
                            return True
        except psycopg.Error as exc:
            raise _pg.PgError(
                f"PostgreSQL server {_pg.describe(self.url)}: {' '.join(str(exc).split())}",
                server=_pg.describe(self.url),
            ) from exc


def _runs(seqs: list[int]) -> list[list[int]]:
    """Sorted seqs as runs of consecutive numbers ``[first, last]``."""
    runs: list[list[int]] = []
    for seq in seqs:
        if runs and runs[-1][1] == seq - 1:
            runs[-1][1] = seq
        else:
            runs.append([seq, seq])
    return runs
