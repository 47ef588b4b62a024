"""Agents' checkpoints on PostgreSQL: ``PgCheckpoints``, the ``CheckpointBackend`` on the
``phx_checkpoints`` tables (migration 5 in ``_pg``), chosen by ``store = "postgresql://…"``.

The store (``_checkpoints``) builds the same envelope, checksum and name as on files; this
backend keeps the bytes in ``phx_checkpoints.content`` with the catalogue's metadata beside them,
so that listing reads no envelope.

- A write is one transaction: the agent's row in ``phx_checkpoint_seq`` is locked (``FOR
  UPDATE``: the agent's write lock, held until the commit, across machines), the catalogue is
  read, the checkpoint inserted, what retention drops deleted, and the next seq stored. The seq
  counter never goes back, so a seq is never reused even when retention deleted the newest.
- Retries: ``_pg.transaction(…, retry=True)`` runs the write again only when the connection
  failed before the commit was sent (nothing was written); the store's ``build`` is run again
  from the fresh view. A commit whose outcome is unknown is reported, not repeated.
- Operation outcomes (``operations.jsonl`` on files) are rows of ``phx_checkpoint_operations``,
  in the order they were recorded.

psycopg is imported only through ``_pg``, and this module only when the configuration names
PostgreSQL.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from phoenix_protocol import _pg
from phoenix_protocol._checkpoint_index import CheckpointInfo, View

if TYPE_CHECKING:
    import psycopg

    from phoenix_protocol._checkpoints import Build, Choose, Written

__all__ = ["PgCheckpoints"]

_SELECT = (
    "SELECT name, seq, checkpoint_type, timestamp_ms, label, operation_id, size FROM phx_checkpoints "
    "WHERE agent_id = %s ORDER BY seq"
)
_NEWEST = (
    "SELECT name, seq, checkpoint_type, timestamp_ms, label, operation_id, size FROM phx_checkpoints "
    "WHERE agent_id = %s AND (%s::text IS NULL OR checkpoint_type = %s) AND (%s::bigint IS NULL OR seq < %s) "
    "ORDER BY seq DESC LIMIT %s"
)
_NEWEST_WITH_FIRST = (
    "SELECT name, seq, checkpoint_type, timestamp_ms, label, operation_id, size, "
    "CASE WHEN row_number() OVER (ORDER BY seq DESC) = 1 THEN content END FROM phx_checkpoints "
    "WHERE agent_id = %s AND (%s::text IS NULL OR checkpoint_type = %s) AND (%s::bigint IS NULL OR seq < %s) "
    "ORDER BY seq DESC LIMIT %s"
)
_COUNTS = "SELECT checkpoint_type, count(*) FROM phx_checkpoints WHERE agent_id = %s GROUP BY checkpoint_type"
_CANDIDATES = (
    "SELECT name, seq, checkpoint_type, timestamp_ms, label, operation_id, size FROM ("
    "SELECT name, seq, checkpoint_type, timestamp_ms, label, operation_id, size, "
    "row_number() OVER (PARTITION BY checkpoint_type ORDER BY seq) AS n FROM phx_checkpoints WHERE agent_id = %s"
    ") c WHERE checkpoint_type IN ('recovery', 'pre-operation') OR (checkpoint_type = 'routine' AND n <= %s) "
    "OR (checkpoint_type = 'session' AND n <= %s) ORDER BY seq"
)
_INSERT = (
    "INSERT INTO phx_checkpoints (agent_id, name, seq, checkpoint_type, timestamp_ms, label, operation_id, size, "
    "content) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s)"
)


def _info(row: tuple[Any, ...]) -> CheckpointInfo:
    name, seq, ctype, ms, label, op_id, size = row
    return CheckpointInfo(str(name), int(seq), str(ctype), int(ms), label=label, operation_id=op_id, size=int(size))


class PgCheckpoints(_pg.PgBound):
    """One agent's checkpoints on the PostgreSQL server ``url``."""

    def __init__(
        self, url: str, agent_id: str, *, pool_size: int = 10, keep_routine: int = 3, keep_session: int = 50
    ) -> None:
        super().__init__(url, pool_size=pool_size)
        self.agent_id = agent_id
        self.keep = (keep_routine, keep_session)
        self._prefetched: tuple[str, bytes] | None = None  # the newest one's bytes, for the read that follows

    def where(self, name: str) -> str:
        return f"{self.server}/agents/{self.agent_id}/checkpoints/{name}"

    def _ordered(self, conn: psycopg.Connection[Any]) -> tuple[CheckpointInfo, ...]:
        rows = conn.execute(_SELECT, (self.agent_id,)).fetchall()
        return tuple(_info(row) for row in rows)

    def ordered(self) -> tuple[CheckpointInfo, ...]:
        return self._run(self._ordered)

    def newest(
        self, checkpoint_type: str | None, limit: int | None, *, reading: bool = False
    ) -> Iterator[CheckpointInfo]:
        """Newest first, fetched a page at a time (``latest`` usually needs the first only)."""
        page = min(limit, 50) if limit is not None else 8
        before: int | None = None
        given = 0
        while limit is None or given < limit:
            # For `latest` the first page brings the newest one's bytes along: no second round trip.
            with_content = reading and before is None
            rows = self._run(
                functools.partial(
                    self._page, checkpoint_type=checkpoint_type, before=before, size=page, with_content=with_content
                )
            )
            if with_content and rows:
                first = rows[0]
                self._prefetched = (str(first[0]), bytes(first[7])) if first[7] is not None else None
                rows = [row[:7] for row in rows]
            for row in rows:
                yield _info(row)
                given += 1
                if limit is not None and given >= limit:
                    return
            if len(rows) < page:
                return
            before = int(rows[-1][1])
            page = min(page * 4, 500)

    def _page(
        self,
        conn: psycopg.Connection[Any],
        checkpoint_type: str | None,
        before: int | None,
        size: int,
        *,
        with_content: bool = False,
    ) -> list[tuple[Any, ...]]:
        return conn.execute(
            _NEWEST_WITH_FIRST if with_content else _NEWEST,
            (self.agent_id, checkpoint_type, checkpoint_type, before, before, size),
        ).fetchall()

    def read(self, name: str) -> bytes | None:
        prefetched, self._prefetched = self._prefetched, None
        if prefetched is not None and prefetched[0] == name:
            return prefetched[1]

        def work(conn: psycopg.Connection[Any]) -> bytes | None:
            row = conn.execute(
                "SELECT content FROM phx_checkpoints WHERE agent_id = %s AND name = %s", (self.agent_id, name)
            ).fetchone()
            return bytes(row[0]) if row else None

        return self._run(work)

    def spare(self, name: str) -> bytes | None:
        return None  # the server keeps one copy (its own WAL and replicas are its business)

    def _locked_view(self, conn: psycopg.Connection[Any]) -> View:
        """The agent's catalogue, with its write lock (the seq row) held until the commit."""
        conn.execute(
            "INSERT INTO phx_checkpoint_seq (agent_id, next_seq) VALUES (%s, 1) ON CONFLICT DO NOTHING",
            (self.agent_id,),
        )
        row = conn.execute(
            "SELECT next_seq FROM phx_checkpoint_seq WHERE agent_id = %s FOR UPDATE", (self.agent_id,)
        ).fetchone()
        # What retention needs, not the whole catalogue: the count of each type, every recovery and
        # pre-operation checkpoint (few), and only the oldest routine and session ones that could
        # fall past what is kept once one more is written.
        view = View()
        view.counts = {str(kind): int(n) for kind, n in conn.execute(_COUNTS, (self.agent_id,)).fetchall()}
        routine_excess = max(0, view.counts.get("routine", 0) + 1 - self.keep[0])
        session_excess = max(0, view.counts.get("session", 0) + 1 - self.keep[1])
        for candidate in conn.execute(_CANDIDATES, (self.agent_id, routine_excess, session_excess)).fetchall():
            view.add(_info(candidate))
        view.next_seq = max(view.next_seq, int(row[0]) if row else 1)
        return view

    def _completed(self, conn: psycopg.Connection[Any]) -> set[str]:
        rows = conn.execute(
            "SELECT op_id FROM phx_checkpoint_operations WHERE agent_id = %s AND outcome = 'succeeded'",
            (self.agent_id,),
        ).fetchall()
        return {str(r[0]) for r in rows}

    def _delete(self, conn: psycopg.Connection[Any], drop: list[CheckpointInfo]) -> None:
        if drop:
            conn.execute(
                "DELETE FROM phx_checkpoints WHERE agent_id = %s AND name = ANY(%s)",
                (self.agent_id, [d.name for d in drop]),
            )

    def _insert(self, conn: psycopg.Connection[Any], info: CheckpointInfo, data: bytes) -> None:
        i = info
        conn.execute(
            _INSERT,
            (self.agent_id, i.name, i.seq, i.checkpoint_type, i.timestamp_ms, i.label, i.operation_id, i.size, data),
        )

    def write(self, build: Build, meanwhile: Written | None = None) -> tuple[CheckpointInfo, list[CheckpointInfo]]:
        def work(conn: psycopg.Connection[Any]) -> tuple[CheckpointInfo, list[CheckpointInfo]]:
            view = self._locked_view(conn)
            info, data, drop = build(view, lambda: self._completed(conn))
            self._insert(conn, info, data)
            self._delete(conn, drop)
            conn.execute(
                "UPDATE phx_checkpoint_seq SET next_seq = greatest(next_seq, %s) WHERE agent_id = %s",
                (info.seq + 1, self.agent_id),
            )
            return info, drop

        info, drop = self._run(work)  # committed
        if meanwhile is not None:
            meanwhile(info, drop)
        return info, drop

    def prune(self, choose: Choose) -> list[CheckpointInfo]:
        def work(conn: psycopg.Connection[Any]) -> list[CheckpointInfo]:
            view = self._locked_view(conn)
            drop = choose(view, lambda: self._completed(conn))
            self._delete(conn, drop)
            return drop

        return self._run(work)

    def record_operation(self, record: dict[str, Any]) -> None:
        def work(conn: psycopg.Connection[Any]) -> None:
            conn.execute(
                "INSERT INTO phx_checkpoint_operations (agent_id, op_id, outcome, at) VALUES (%s, %s, %s, %s)",
                (self.agent_id, str(record["id"]), str(record["outcome"]), str(record["at"])),
            )

        self._run(work)

    def completed_operations(self) -> set[str]:
        return self._run(self._completed)

    def operation_outcomes(self) -> dict[str, str]:
        outcomes: dict[str, str] = {}
        for record in self.operations():  # as on files: one success, recorded once, is the outcome
            if outcomes.get(record["id"]) != "succeeded":
                outcomes[str(record["id"])] = str(record["outcome"])
        return outcomes

    # -- export / import (``_transfer``) ---------------------------------------------------------

    def operations(self) -> list[dict[str, Any]]:
        """Every recorded outcome, in order (the lines ``operations.jsonl`` holds on files)."""

        def work(conn: psycopg.Connection[Any]) -> list[dict[str, Any]]:
            rows = conn.execute(
                "SELECT op_id, outcome, at FROM phx_checkpoint_operations WHERE agent_id = %s ORDER BY line",
                (self.agent_id,),
            ).fetchall()
            return [{"id": r[0], "outcome": r[1], "at": r[2]} for r in rows]

        return self._run(work)

    def put_existing(self, info: CheckpointInfo, data: bytes) -> None:
        """Store an existing checkpoint as it is (an import); its seq moves the counter past it."""

        def work(conn: psycopg.Connection[Any]) -> None:
            self._insert(conn, info, data)
            conn.execute(
                "INSERT INTO phx_checkpoint_seq (agent_id, next_seq) VALUES (%s, %s) "
                "ON CONFLICT (agent_id) DO UPDATE SET next_seq = greatest(phx_checkpoint_seq.next_seq, EXCLUDED.next_seq)",
                (self.agent_id, info.seq + 1),
            )

        self._run(work)


def agents_with_checkpoints(url: str) -> list[str]:
    """Every agent the server holds checkpoints or operation outcomes of."""
    return _pg.ids(
        url, "SELECT agent_id FROM phx_checkpoint_seq UNION SELECT agent_id FROM phx_checkpoint_operations ORDER BY 1"
    )
