"""Agents' sessions on PostgreSQL: ``PgSessions``, the ``SessionStorage`` on
``phx_session_current`` and ``phx_session_log`` (migration 5 in ``_pg``).

The texts are those the file store writes (``current.json`` as a document, each log record as
its JSON line with its ``seq`` first), kept as text so that an export from either store holds the
same bytes. Changes to the open session's record lock its row; a log record takes the next seq
under a transaction-scoped advisory lock on the agent.

psycopg is imported only through ``_pg``, and this module only when the configuration names
PostgreSQL.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from phoenix_protocol import _pg
from phoenix_protocol._jsonio import dumps_document, dumps_line, loads, loads_object
from phoenix_protocol._sessions import empty_current

if TYPE_CHECKING:
    import psycopg

    from phoenix_protocol._seqlog import LogProblem

__all__ = ["PgSessions"]

_CURRENT = "SELECT record FROM phx_session_current WHERE agent_id = %s"
_CURRENT_FOR_UPDATE = "SELECT record FROM phx_session_current WHERE agent_id = %s FOR UPDATE"


class PgSessions(_pg.PgBound):
    """One agent's sessions on the PostgreSQL server ``url``."""

    def __init__(self, url: str, agent_id: str, *, pool_size: int = 10) -> None:
        super().__init__(url, pool_size=pool_size)
        self.agent_id = agent_id

    def _current(self, conn: psycopg.Connection[Any], *, lock: bool = False) -> dict[str, Any] | None:
        row = conn.execute(_CURRENT_FOR_UPDATE if lock else _CURRENT, (self.agent_id,)).fetchone()
        return loads_object(row[0]) if row else None

    def _put_current(self, conn: psycopg.Connection[Any], text: str) -> None:
        conn.execute(
            "INSERT INTO phx_session_current (agent_id, record) VALUES (%s, %s) "
            "ON CONFLICT (agent_id) DO UPDATE SET record = EXCLUDED.record",
            (self.agent_id, text),
        )

    def current(self) -> dict[str, Any] | None:
        return self._run(self._current)

    def set_current(self, record: dict[str, Any]) -> None:
        text = dumps_document(record)
        self._run(lambda conn: self._put_current(conn, text))

    def update_current(self, change: Callable[[dict[str, Any]], None]) -> dict[str, Any]:
        def work(conn: psycopg.Connection[Any]) -> dict[str, Any]:
            conn.execute(
                "INSERT INTO phx_session_current (agent_id, record) VALUES (%s, %s) ON CONFLICT DO NOTHING",
                (self.agent_id, dumps_document(empty_current())),
            )
            record = self._current(conn, lock=True) or empty_current()
            change(record)
            self._put_current(conn, dumps_document(record))
            return record

        return self._run(work)

    def append(self, record: dict[str, Any]) -> int:
        def work(conn: psycopg.Connection[Any]) -> int:
            conn.execute("SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))", ("phx_sessions:" + self.agent_id,))
            row = conn.execute(
                "SELECT coalesce(max(seq), 0) FROM phx_session_log WHERE agent_id = %s", (self.agent_id,)
            ).fetchone()
            seq = int(row[0] if row else 0) + 1
            self._insert_line(conn, seq, dumps_line({"seq": seq, **{k: v for k, v in record.items() if k != "seq"}}))
            return seq

        return self._run(work)

    def _insert_line(self, conn: psycopg.Connection[Any], seq: int, line: str) -> None:
        conn.execute(
            "INSERT INTO phx_session_log (agent_id, seq, line) VALUES (%s, %s, %s)", (self.agent_id, seq, line)
        )

    def lines(self) -> list[str]:
        """The log's lines, oldest first (the text ``sessions.jsonl`` holds on files)."""

        def work(conn: psycopg.Connection[Any]) -> list[str]:
            rows = conn.execute(
                "SELECT line FROM phx_session_log WHERE agent_id = %s ORDER BY seq", (self.agent_id,)
            ).fetchall()
            return [str(r[0]) for r in rows]

        return self._run(work)

    def records(self) -> list[dict[str, Any]]:
        out = []
        for line in self.lines():
            value = loads(line)
            if isinstance(value, dict):
                out.append(value)
        return out

    def read(self) -> tuple[list[dict[str, Any]], list[LogProblem]]:
        return self.records(), []  # rows, each written whole in its transaction: none torn

    # -- export / import (``_transfer``) ---------------------------------------------------------

    def current_text(self) -> str | None:
        def work(conn: psycopg.Connection[Any]) -> str | None:
            row = conn.execute(_CURRENT, (self.agent_id,)).fetchone()
            return str(row[0]) if row else None

        return self._run(work)

    def import_texts(self, current: str | None, lines: list[str]) -> None:
        """Store an exported ``current.json`` and ``sessions.jsonl`` as they are."""

        def work(conn: psycopg.Connection[Any]) -> None:
            if current is not None:
                self._put_current(conn, current)
            for line in lines:
                value = loads(line)
                self._insert_line(conn, int(value["seq"]), line)

        self._run(work)


def agents_with_sessions(url: str) -> list[str]:
    """Every agent the server holds a session record of."""
    return _pg.ids(
        url, "SELECT agent_id FROM phx_session_current UNION SELECT agent_id FROM phx_session_log ORDER BY 1"
    )
