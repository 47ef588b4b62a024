"""Seed 004 §4.3's outbox: messages for a team on a server (``phx team send --server``), kept in
the sender's own home's database until the server has stored them.

A message is written here first (``queued``), with its message id, and only then posted; a server
that cannot be reached leaves it queued, and the next send or ``phx team outbox`` posts it again
with the same id (the server stores a message id once: a retry is never a duplicate). A message the
server stored is ``sent`` (with its ``seq``); one it refused for good (a reused id with other
content) is ``refused``. One table, ``phx_team_outbox`` (migration 14), on SQLite and PostgreSQL.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from phoenix_protocol.core._clock import Clock, iso_from_ms, system_clock
from phoenix_protocol.core._ids import validate_id
from phoenix_protocol.store._team_store import MessageConflictError

if TYPE_CHECKING:
    from phoenix_protocol.store._db import Database, Tx

__all__ = ["OUTBOX_STATES", "Outbox"]

OUTBOX_STATES = ("queued", "sent", "refused")
_FIELDS = ("sender", "to", "type", "subject", "body")
_COLUMNS = "msg_id, position, record, state, attempts, queued_ms, sent_ms, seq, last_error"


class Outbox:
    """The outbox of one home's database, for every server and team it sent to."""

    def __init__(self, db: Database, *, clock: Clock = system_clock) -> None:
        self.db = db
        self.clock = clock

    def enqueue(self, target: str, team_id: str, fields: dict[str, Any]) -> dict[str, Any]:
        """Queue a prepared message (``Mailbox.prepare``'s fields) for ``target``'s team; the same
        id with the same content returns the row already there, with other content it is a
        ``MessageConflictError``."""
        validate_id(team_id, "team id")
        ms = self.clock.now_ms()

        def work(tx: Tx) -> dict[str, Any]:
            found = self._row(tx, target, team_id, fields["msg_id"])
            if found is not None:
                if any(found["message"].get(k) != fields[k] for k in _FIELDS):
                    raise MessageConflictError(
                        f"message id {fields['msg_id']} is already in the outbox for {target} with different "
                        "content: a retry must send the same message; give a new message a new id."
                    )
                return found
            position = int(
                tx.scalar(
                    "SELECT coalesce(max(position), 0) FROM phx_team_outbox WHERE target = ? AND team_id = ?",
                    (target, team_id),
                )
                or 0
            )
            record = {k: fields[k] for k in (*_FIELDS, "ts", "ts_ms")}
            tx.execute(
                "INSERT INTO phx_team_outbox (target, team_id, msg_id, position, sender, record, state, attempts, "
                "queued_ms) VALUES (?, ?, ?, ?, ?, ?, 'queued', 0, ?)",
                (target, team_id, fields["msg_id"], position + 1, fields["sender"], tx.dialect.json(record), ms),
            )
            row = self._row(tx, target, team_id, fields["msg_id"])
            assert row is not None  # noqa: S101 - written just above
            return row

        return self.db.transaction(work)

    def queued(self, target: str, team_id: str) -> list[dict[str, Any]]:
        """The messages still queued for ``target``'s team, in the order they were queued."""
        return self._rows("state = 'queued'", (target, team_id))

    def listing(self, target: str, team_id: str, sender: str, *, last: int = 50) -> list[dict[str, Any]]:
        """``sender``'s newest ``last`` messages in the outbox for ``target``'s team, oldest first."""
        return self._rows("sender = ?", (target, team_id, sender))[-last:]

    def get(self, target: str, team_id: str, msg_id: str) -> dict[str, Any] | None:
        return self.db.read(lambda tx: self._row(tx, target, team_id, msg_id))

    def attempted(self, target: str, team_id: str, msg_id: str, *, error: str | None = None) -> None:
        """One more attempt that did not reach the server (``error`` says why)."""
        self._update(target, team_id, msg_id, "attempts = attempts + 1, last_error = ?", (error,))

    def sent(self, target: str, team_id: str, msg_id: str, seq: int) -> None:
        """The server stored it as message ``seq``."""
        ms = self.clock.now_ms()
        self._update(
            target,
            team_id,
            msg_id,
            "state = 'sent', attempts = attempts + 1, sent_ms = ?, seq = ?, last_error = NULL",
            (ms, seq),
        )

    def refused(self, target: str, team_id: str, msg_id: str, error: str) -> None:
        """The server refused it for good: it is not posted again."""
        self._update(target, team_id, msg_id, "state = 'refused', attempts = attempts + 1, last_error = ?", (error,))

    # -- rows --------------------------------------------------------------------------------------

    def _update(self, target: str, team_id: str, msg_id: str, assignments: str, values: tuple[Any, ...]) -> None:
        self.db.transaction(
            lambda tx: tx.execute(
                f"UPDATE phx_team_outbox SET {assignments} WHERE target = ? AND team_id = ? AND msg_id = ?",  # noqa: S608 - constant SQL
                (*values, target, team_id, msg_id),
            )
        )

    def _rows(self, where: str, params: tuple[Any, ...]) -> list[dict[str, Any]]:
        def work(tx: Tx) -> list[dict[str, Any]]:
            rows = tx.all(
                f"SELECT {_COLUMNS} FROM phx_team_outbox WHERE target = ? AND team_id = ? AND {where} "  # noqa: S608 - constant SQL
                "ORDER BY position",
                params,
            )
            return [self._shape(tx, r) for r in rows]

        return self.db.read(work)

    def _row(self, tx: Tx, target: str, team_id: str, msg_id: str) -> dict[str, Any] | None:
        row = tx.one(
            f"SELECT {_COLUMNS} FROM phx_team_outbox WHERE target = ? AND team_id = ? AND msg_id = ?",  # noqa: S608 - constant SQL
            (target, team_id, msg_id),
        )
        return self._shape(tx, row) if row is not None else None

    @staticmethod
    def _shape(tx: Tx, row: Any) -> dict[str, Any]:
        msg_id, _position, record, state, attempts, queued_ms, sent_ms, seq, last_error = row
        message = dict(tx.dialect.read_json(record))
        return {
            "msg_id": str(msg_id),
            "state": str(state),
            "attempts": int(attempts),
            "queued_at": iso_from_ms(int(queued_ms)),
            "sent_at": iso_from_ms(int(sent_ms)) if sent_ms is not None else None,
            "seq": int(seq) if seq is not None else None,
            "last_error": last_error,
            "message": message,
        }
