"""Claude Code's own agent teams, as Phoenix records them from Claude Code's hooks and files
(``integrations._cc_teams`` decides what to record; this module only keeps it).

Tables (migration 15 of ``store._schema``), keyed by Claude Code's team name (``session-<8 hex>``
in 2.1.330) and Claude Code's own ids:

- ``phx_cc_teams``: one row per team: its project (the Phoenix home), its ``state`` (``live``
  while its lead runs; ``ended`` after a clean exit; ``recovered`` once a resumed lead was told
  what was lost; ``archived`` once a fresh lead of the project was offered it), the lead's
  session id, and a JSON ``record`` (the lead's process and transcript, the guardrail settings,
  the recovery report given to the next lead);
- ``phx_cc_members``: the roster, one row per teammate name (agent id, type, the spawn prompt,
  the transcript path, when it was seen starting and stopping); never deleted (Claude Code cuts
  its own roster on ``--resume``: Phoenix's is what was);
- ``phx_cc_tasks``: the task list (Claude Code's task id, status, owner, subject, description,
  blocks and blocked-by);
- ``phx_cc_messages``: every message, by Claude Code's ``msg_id`` (a message seen twice, from
  the ``SendMessage`` tool and from an inbox file, is kept once), numbered by ``seq`` in the
  order Phoenix saw them, with when it was known delivered and whether it is queued for
  delivery again (``redeliver_to``: the session of the lead that gets it).

Each change is one transaction on the store of the home (SQLite or PostgreSQL, written once).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    from phoenix_protocol.store._db import Database, Tx

__all__ = ["TEAM_STATES", "ClaudeTeamStore"]

T = TypeVar("T")

_TEAM_COLUMNS = "team_name, project, state, lead_session_id, record, created_ms, updated_ms"
_MESSAGE_COLUMNS = (
    "msg_id, seq, sender, recipient, kind, record, sent_ms, delivered_ms, redeliver_to, redelivered_ms, team_name"
)

TEAM_STATES = ("live", "ended", "recovered", "archived")


def _merge(old: dict[str, Any], new: dict[str, Any]) -> dict[str, Any]:
    """``old`` updated with the members of ``new`` that say something (``None`` and ``""`` never
    erase what was recorded: a later, poorer view of a teammate must not lose its prompt)."""
    out = dict(old)
    for key, value in new.items():
        if value is None or value in ("", []):
            out.setdefault(key, value)
        else:
            out[key] = value
    return out


def _locked_record(tx: Tx, table: str, key_column: str, team: str, key: str) -> dict[str, Any] | None:
    """The ``record`` of the team's row ``key`` in ``table`` (locked for this transaction), or
    ``None`` when there is no such row."""
    row = tx.one(
        f"SELECT record FROM {table} WHERE team_name = ? AND {key_column} = ?{tx.dialect.for_update}",  # noqa: S608
        (team, key),
    )
    return None if row is None else dict(tx.dialect.read_json(row[0]) or {})


def _put_row(tx: Tx, table: str, key_column: str, team: str, key: str, values: dict[str, Any], *, exists: bool) -> None:
    """Write ``values`` (column: value) to the team's row ``key`` in ``table``: an update when it
    ``exists``, else an insert."""
    columns = list(values)
    if exists:
        assignments = ", ".join(f"{c} = ?" for c in columns)
        sql = f"UPDATE {table} SET {assignments} WHERE team_name = ? AND {key_column} = ?"  # noqa: S608
    else:
        names = ", ".join([*columns, "team_name", key_column])
        sql = f"INSERT INTO {table} ({names}) VALUES ({tx.dialect.placeholders(len(columns) + 2)})"  # noqa: S608
    tx.execute(sql, (*values.values(), team, key))


class ClaudeTeamStore:
    """The records of Claude Code's teams in one database."""

    def __init__(self, db: Database) -> None:
        self.db = db

    def transaction(self, work: Callable[[Tx], T]) -> T:
        """Run ``work(tx)`` in one transaction: the write methods given ``tx=`` join it (one
        commit, one fsync, for what a hook records)."""
        return self.db.transaction(work)

    def _write(self, work: Callable[[Tx], T], tx: Tx | None) -> T:
        return work(tx) if tx is not None else self.db.transaction(work)

    # -- teams ---------------------------------------------------------------------------------

    def bind(
        self,
        team: str,
        *,
        project: str,
        lead_session_id: str | None,
        record: dict[str, Any],
        now_ms: int,
        tx: Tx | None = None,
    ) -> dict[str, Any]:
        """Create or update the team's row (its ``record`` merged). A team that ``ended`` runs
        again (``live``); a recovered or archived one only when its lead's process is another
        than the one recorded (a resumed lead: it can be recovered again; a late write of the
        dead lead's does not bring it back). The recovery report stays in the record."""

        def work(tx: Tx) -> dict[str, Any]:
            row = tx.one(
                f"SELECT record, state FROM phx_cc_teams WHERE team_name = ?{tx.dialect.for_update}",  # noqa: S608
                (team,),
            )
            if row is None:
                tx.execute(
                    "INSERT INTO phx_cc_teams (team_name, project, state, lead_session_id, record, created_ms, "
                    "updated_ms) VALUES (?, ?, 'live', ?, ?, ?, ?)",
                    (team, project, lead_session_id, tx.dialect.json(record), now_ms, now_ms),
                )
                return {"state": "live", **record}
            old = dict(tx.dialect.read_json(row[0]) or {})
            state = str(row[1])
            if state == "ended" or (record.get("lead_process") and record["lead_process"] != old.get("lead_process")):
                state = "live"  # a recovered or archived team runs again only under a new lead process
            merged = _merge(old, record)
            tx.execute(
                "UPDATE phx_cc_teams SET state = ?, lead_session_id = coalesce(?, lead_session_id), record = ?, "
                "updated_ms = ? WHERE team_name = ?",
                (state, lead_session_id, tx.dialect.json(merged), now_ms, team),
            )
            return {"state": state, **merged}

        return self._write(work, tx)

    def team(self, team: str) -> dict[str, Any] | None:
        """The team's row (``team_name``, ``project``, ``state``, ``lead_session_id``, ``record``,
        ``created_ms``, ``updated_ms``), or ``None``."""

        def work(tx: Tx) -> dict[str, Any] | None:
            row = tx.one(f"SELECT {_TEAM_COLUMNS} FROM phx_cc_teams WHERE team_name = ?", (team,))  # noqa: S608
            return None if row is None else self._team_row(tx, row)

        return self.db.read(work)

    @staticmethod
    def _team_row(tx: Tx, row: Sequence[Any]) -> dict[str, Any]:
        return {
            "team_name": row[0],
            "project": row[1],
            "state": row[2],
            "lead_session_id": row[3],
            "record": dict(tx.dialect.read_json(row[4]) or {}),
            "created_ms": int(row[5]),
            "updated_ms": int(row[6]),
        }

    def teams(self, project: str, states: Iterable[str] = TEAM_STATES) -> list[dict[str, Any]]:
        """The teams of ``project`` in one of ``states``, oldest first."""
        wanted = list(states)

        def work(tx: Tx) -> list[dict[str, Any]]:
            among = tx.dialect.placeholders(len(wanted))
            rows = tx.all(
                f"SELECT {_TEAM_COLUMNS} FROM phx_cc_teams WHERE project = ? AND state IN ({among}) "  # noqa: S608
                "ORDER BY created_ms, team_name",
                (project, *wanted),
            )
            return [self._team_row(tx, r) for r in rows]

        return self.db.read(work)

    def counts(self, project: str, *, besides: str) -> dict[str, dict[str, int]]:
        """For each team of ``project``: how many members (``besides`` that one, the lead), tasks
        and messages it has, counted by the database in one read."""

        def work(tx: Tx) -> dict[str, dict[str, int]]:
            out: dict[str, dict[str, int]] = {}
            for key, table, extra, params in (
                ("teammates", "phx_cc_members", " AND t.name <> ?", (besides,)),
                ("tasks", "phx_cc_tasks", "", ()),
                ("messages", "phx_cc_messages", "", ()),
            ):
                rows = tx.all(
                    f"SELECT t.team_name, COUNT(*) FROM {table} t JOIN phx_cc_teams c "  # noqa: S608
                    f"ON c.team_name = t.team_name WHERE c.project = ?{extra} GROUP BY t.team_name",
                    (project, *params),
                )
                for team, number in rows:
                    out.setdefault(str(team), {})[key] = int(number)
            return out

        return self.db.read(work)

    def set_state(
        self, team: str, state: str, *, now_ms: int, record: dict[str, Any] | None = None, only_from: str | None = None
    ) -> bool:
        """Move the team to ``state`` (and merge ``record``); with ``only_from``, only when it is
        in that state now (two sessions starting at once: one of them recovers it). Whether it moved."""
        if state not in TEAM_STATES:
            raise ValueError(f"team state must be one of {', '.join(TEAM_STATES)}, not {state!r}")

        def work(tx: Tx) -> bool:
            row = tx.one(
                f"SELECT state, record FROM phx_cc_teams WHERE team_name = ?{tx.dialect.for_update}",  # noqa: S608
                (team,),
            )
            if row is None or (only_from is not None and row[0] != only_from):
                return False
            merged = _merge(dict(tx.dialect.read_json(row[1]) or {}), record or {})
            tx.execute(
                "UPDATE phx_cc_teams SET state = ?, record = ?, updated_ms = ? WHERE team_name = ?",
                (state, tx.dialect.json(merged), now_ms, team),
            )
            return True

        return self.db.transaction(work)

    def update_record(self, team: str, record: dict[str, Any], *, now_ms: int) -> bool:
        """Merge ``record`` into the team's (its state unchanged); whether the team exists."""

        def work(tx: Tx) -> bool:
            row = tx.one(
                f"SELECT record FROM phx_cc_teams WHERE team_name = ?{tx.dialect.for_update}",  # noqa: S608
                (team,),
            )
            if row is None:
                return False
            merged = {**dict(tx.dialect.read_json(row[0]) or {}), **record}
            tx.execute(
                "UPDATE phx_cc_teams SET record = ?, updated_ms = ? WHERE team_name = ?",
                (tx.dialect.json(merged), now_ms, team),
            )
            return True

        return self.db.transaction(work)

    # -- members -------------------------------------------------------------------------------

    def upsert_members(
        self, team: str, members: Sequence[dict[str, Any]], *, now_ms: int, tx: Tx | None = None
    ) -> None:
        """Record teammates (each a dict with ``name``; other members merged into its record)."""
        if not members:
            return

        def work(tx: Tx) -> None:
            for member in members:
                name = str(member["name"])
                old = _locked_record(tx, "phx_cc_members", "name", team, name)
                merged = _merge(old or {}, member)
                if old is None:
                    merged = {k: v for k, v in merged.items() if v is not None}
                    merged.setdefault("first_seen_ms", now_ms)
                values = {"record": tx.dialect.json(merged), "updated_ms": now_ms}
                _put_row(tx, "phx_cc_members", "name", team, name, values, exists=old is not None)

        self._write(work, tx)

    def members(self, team: str) -> list[dict[str, Any]]:
        """The roster as recorded, in the order the teammates joined (as Claude Code says, else as
        Phoenix first saw them)."""

        def work(tx: Tx) -> list[dict[str, Any]]:
            rows = tx.all("SELECT name, record FROM phx_cc_members WHERE team_name = ?", (team,))
            found = [{**dict(tx.dialect.read_json(r[1]) or {}), "name": r[0]} for r in rows]
            return sorted(
                found,
                key=lambda m: (
                    int(m.get("joined_ms") or m.get("first_seen_ms") or 0),
                    int(m.get("first_seen_ms") or 0),
                    m["name"],
                ),
            )

        return self.db.read(work)

    # -- tasks ---------------------------------------------------------------------------------

    def upsert_tasks(self, team: str, tasks: Sequence[dict[str, Any]], *, now_ms: int, tx: Tx | None = None) -> None:
        """Record tasks (each a dict with ``id``; ``status`` and ``owner`` as Claude Code gives
        them; the other members merged into its record)."""
        if not tasks:
            return

        def work(tx: Tx) -> None:
            for task in tasks:
                task_id = str(task["id"])
                old = _locked_record(tx, "phx_cc_tasks", "task_id", team, task_id)
                merged = _merge(old or {}, task)
                if "owner" in task:  # an owner taken away is news, not a poorer view
                    merged["owner"] = task["owner"] or None
                merged.setdefault("status", "pending")
                merged.setdefault("first_seen_ms", now_ms)
                values = {"status": str(merged["status"]), "owner": merged.get("owner"),
                          "record": tx.dialect.json(merged), "updated_ms": now_ms}  # fmt: skip
                _put_row(tx, "phx_cc_tasks", "task_id", team, task_id, values, exists=old is not None)

        self._write(work, tx)

    def tasks(self, team: str) -> list[dict[str, Any]]:
        """The task list as recorded, by task id (numerically where the ids are numbers)."""

        def work(tx: Tx) -> list[dict[str, Any]]:
            rows = tx.all("SELECT task_id, record FROM phx_cc_tasks WHERE team_name = ?", (team,))
            return [{**dict(tx.dialect.read_json(r[1]) or {}), "id": r[0]} for r in rows]

        found = self.db.read(work)
        return sorted(found, key=lambda t: (0, int(t["id"]), "") if str(t["id"]).isdigit() else (1, 0, str(t["id"])))

    # -- messages ------------------------------------------------------------------------------

    def record_messages(
        self, team: str, messages: Sequence[dict[str, Any]], *, now_ms: int, tx: Tx | None = None
    ) -> list[str]:
        """Record messages (each with ``msg_id``, ``sender``, ``recipient``, ``kind``, and what else
        it says: ``summary``, ``content``, ``timestamp``, ``source``), once per ``msg_id``: one
        already recorded is left as it is (the tool's view and the inbox's are one message).
        Returns the ids that were new."""
        if not messages:
            return []

        def work(tx: Tx) -> list[str]:
            seq = int(tx.scalar("SELECT coalesce(max(seq), 0) FROM phx_cc_messages WHERE team_name = ?", (team,)))
            new: list[str] = []
            for message in messages:
                msg_id = str(message["msg_id"])
                if tx.one("SELECT 1 FROM phx_cc_messages WHERE team_name = ? AND msg_id = ?", (team, msg_id)):
                    continue
                seq += 1
                record = {
                    k: v for k, v in message.items() if k not in ("msg_id", "sender", "recipient", "kind", "delivered")
                }
                tx.execute(
                    "INSERT INTO phx_cc_messages (team_name, msg_id, seq, sender, recipient, kind, record, sent_ms, "
                    "delivered_ms) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    (
                        team,
                        msg_id,
                        seq,
                        str(message["sender"]),
                        str(message["recipient"]),
                        str(message.get("kind") or "message"),
                        tx.dialect.json(record),
                        int(message.get("sent_ms") or now_ms),
                        now_ms if message.get("delivered") else None,
                    ),
                )
                new.append(msg_id)
            return new

        return self._write(work, tx)

    def messages(self, team: str) -> list[dict[str, Any]]:
        """Every message of the team, in ``seq`` order."""

        def work(tx: Tx) -> list[dict[str, Any]]:
            rows = tx.all(
                f"SELECT {_MESSAGE_COLUMNS} FROM phx_cc_messages WHERE team_name = ? ORDER BY seq",  # noqa: S608
                (team,),
            )
            return [self._message_row(tx, r) for r in rows]

        return self.db.read(work)

    @staticmethod
    def _message_row(tx: Tx, r: Sequence[Any]) -> dict[str, Any]:
        return {
            **dict(tx.dialect.read_json(r[5]) or {}),
            "msg_id": r[0],
            "seq": int(r[1]),
            "sender": r[2],
            "recipient": r[3],
            "kind": r[4],
            "sent_ms": int(r[6]),
            "delivered_ms": None if r[7] is None else int(r[7]),
            "redeliver_to": r[8],
            "redelivered_ms": None if r[9] is None else int(r[9]),
        }

    def mark_delivered(self, team: str, msg_ids: Iterable[str], *, now_ms: int) -> None:
        """Note that these messages reached their reader (first time only)."""
        self._set_on_messages(team, msg_ids, "delivered_ms", now_ms, only_unset="delivered_ms")

    def queue_redelivery(self, team: str, msg_ids: Iterable[str], *, to: str) -> None:
        """Queue these messages for delivery again, to the lead session ``to`` (``pending_redelivery``);
        one already delivered again is not queued twice."""
        self._set_on_messages(team, msg_ids, "redeliver_to", to, only_unset="redelivered_ms")

    def _set_on_messages(
        self, team: str, msg_ids: Iterable[str], column: str, value: object, *, only_unset: str | None = None
    ) -> None:
        """Set ``column`` of these messages of ``team`` to ``value`` (with ``only_unset``: of those
        whose ``only_unset`` column is still NULL)."""
        ids = list(msg_ids)
        if not ids:
            return
        unset = f" AND {only_unset} IS NULL" if only_unset else ""
        self.db.transaction(
            lambda tx: tx.execute(
                f"UPDATE phx_cc_messages SET {column} = ? WHERE team_name = ?{unset} "  # noqa: S608
                f"AND msg_id IN ({tx.dialect.placeholders(len(ids))})",
                (value, team, *ids),
            )
        )

    def pending_redelivery(self, to: str) -> list[dict[str, Any]]:
        """The messages queued for the lead session ``to`` and not delivered again yet, in order
        (each with its ``team_name``)."""

        def work(tx: Tx) -> list[dict[str, Any]]:
            rows = tx.all(
                f"SELECT {_MESSAGE_COLUMNS} FROM phx_cc_messages WHERE redeliver_to = ? "  # noqa: S608
                "AND redelivered_ms IS NULL ORDER BY sent_ms, seq",
                (to,),
            )
            return [{**self._message_row(tx, r), "team_name": r[10]} for r in rows]

        return self.db.read(work)

    def mark_redelivered(self, team: str, msg_ids: Iterable[str], *, now_ms: int) -> None:
        """Note that these messages were written into the new lead's inbox."""
        self._set_on_messages(team, msg_ids, "redelivered_ms", now_ms)
