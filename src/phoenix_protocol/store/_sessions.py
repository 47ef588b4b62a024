"""Agents' sessions as rows of the home's database: ``phx_session_current`` (the open session's
record, a JSON document) and ``phx_session_log`` (a start and an end record per session, each a
JSON line with its ``seq`` first), on either engine.

The texts are those earlier releases wrote to ``sessions/current.json`` and
``sessions/sessions.jsonl``, so that an export holds the same bytes. A change to the open
session's record and a new log record take the agent's write lock (``lock_agent``: its row of
``phx_checkpoint_seq``), so that two processes never give two records one seq; each is written
whole in its transaction.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from phoenix_protocol.core._jsonio import dumps_document, dumps_line, loads, loads_object
from phoenix_protocol.store._checkpoints import lock_agent
from phoenix_protocol.store._db import AgentRows

if TYPE_CHECKING:
    from phoenix_protocol.store._db import Tx

__all__ = ["SessionRows", "empty_current"]


def empty_current() -> dict[str, Any]:
    """The record of an agent with no open session."""
    return {"session_id": None, "memory_ids": [], "last_recall_query": None}


class SessionRows(AgentRows):
    """One agent's sessions in ``db``."""

    def current_text(self) -> str | None:
        """The open session's record as stored, or ``None``."""

        def work(tx: Tx) -> str | None:
            found = tx.scalar("SELECT record FROM phx_session_current WHERE agent_id = ?", (self.agent_id,))
            return None if found is None else str(found)

        result: str | None = self._read(work)
        return result

    def current(self) -> dict[str, Any] | None:
        """The open session's record, or ``None``."""
        text = self.current_text()
        return loads_object(text.encode("utf-8")) if text is not None else None

    def put_current(self, tx: Tx, text: str) -> None:
        tx.execute(
            "INSERT INTO phx_session_current (agent_id, record) VALUES (?, ?) "
            "ON CONFLICT (agent_id) DO UPDATE SET record = excluded.record",
            (self.agent_id, text),
        )

    def set_current(self, record: dict[str, Any]) -> None:
        text = dumps_document(record)
        self._write(lambda tx: self.put_current(tx, text))

    def update_current(self, change: Callable[[dict[str, Any]], None]) -> dict[str, Any]:
        """Change the open session's record under the agent's write lock; returns it."""

        def work(tx: Tx) -> dict[str, Any]:
            lock_agent(tx, self.agent_id)
            found = tx.scalar("SELECT record FROM phx_session_current WHERE agent_id = ?", (self.agent_id,))
            record = (loads_object(str(found).encode("utf-8")) if found is not None else None) or empty_current()
            change(record)
            self.put_current(tx, dumps_document(record))
            return record

        result: dict[str, Any] = self._write(work)
        return result

    def append(self, record: dict[str, Any]) -> int:
        """Add a start or end record with the next ``seq``; returns the seq."""

        def work(tx: Tx) -> int:
            lock_agent(tx, self.agent_id)
            seq = (
                int(
                    tx.scalar("SELECT coalesce(max(seq), 0) FROM phx_session_log WHERE agent_id = ?", (self.agent_id,))
                    or 0
                )
                + 1
            )
            self.insert_line(tx, seq, dumps_line({"seq": seq, **{k: v for k, v in record.items() if k != "seq"}}))
            return seq

        result: int = self._write(work)
        return result

    def insert_line(self, tx: Tx, seq: int, line: str) -> bool:
        """Store a log line as it is unless its seq is taken (``False``)."""
        cursor = tx.execute(
            "INSERT INTO phx_session_log (agent_id, seq, line) VALUES (?, ?, ?) ON CONFLICT DO NOTHING",
            (self.agent_id, seq, line),
        )
        return bool(cursor.rowcount)

    def lines(self) -> list[str]:
        """The log's lines, oldest first (the text ``sessions.jsonl`` held)."""

        def work(tx: Tx) -> list[str]:
            rows = tx.all("SELECT line FROM phx_session_log WHERE agent_id = ? ORDER BY seq", (self.agent_id,))
            return [str(r[0]) for r in rows]

        result: list[str] = self._read(work, [])
        return result

    def records(self) -> list[dict[str, Any]]:
        """Every start and end record, oldest first."""
        out = []
        for line in self.lines():
            value = loads(line)
            if isinstance(value, dict):
                out.append(value)
        return out

    def read(self) -> tuple[list[dict[str, Any]], list[Any]]:
        """``records()`` and the problems met (none: each row was written whole in its transaction)."""
        return self.records(), []

    def import_texts(self, current: str | None, lines: list[str]) -> None:
        """Store an exported ``current.json`` and ``sessions.jsonl`` as they are."""

        def work(tx: Tx) -> None:
            lock_agent(tx, self.agent_id)
            if current is not None:
                self.put_current(tx, current)
            for line in lines:
                value = loads(line)
                self.insert_line(tx, int(value["seq"]), line)

        self._write(work)
