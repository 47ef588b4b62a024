"""Namespaced memory on PostgreSQL: ``PgMemoryStore``, the ``MemoryStore`` interface on the
``phx_memories`` table (migration 2 in ``_pg``), chosen by ``store = "postgresql://…"``.

Same arguments, validation, errors, redaction and results as the SQLite store (the helpers are
``_memory``'s): only the storage and the ranking differ.

- recall: each query word becomes ``plainto_tsquery('english', word)`` and the words are OR-ed
  (``||``), so a partial match still ranks and user input is never tsquery syntax; ranked by
  ``ts_rank_cd`` over the generated ``document`` (text and tags, English stemming), best first
  (higher is better, as the SQLite store's negated BM25), then newest first;
- every query filters on ``namespace``; a tag filter is ``tags @> ARRAY[…]`` (GIN index);
- list: newest first (``created_ms``, then id: two memories stored in the same millisecond have
  no other order here, unlike SQLite's rowid).

Retries: every operation runs in one transaction through ``_pg.transaction(…, retry=True)``, which
runs it again only when the connection failed before the commit was sent, i.e. when nothing was
written. That is safe for ``store`` too: its id is generated here, before the first attempt, and a
rolled-back attempt left no row, so a second attempt inserts the one memory once (a plain
``INSERT``: an id collision, 96 random bits, is an error rather than silently someone else's
row). A commit whose outcome is unknown (the connection lost while committing) is not retried by
``_pg``; ``store`` then looks the id up: found, the memory was stored and is returned; not found
(or the server still unreachable), the original error is raised.

psycopg is imported only through ``_pg``, and this module only by ``open_memory_store`` when the
configuration names PostgreSQL.
"""

from __future__ import annotations

import builtins
from typing import TYPE_CHECKING, Any

from phoenix_protocol import _pg
from phoenix_protocol._clock import Clock, iso_from_ms, system_clock
from phoenix_protocol._ids import validate_id
from phoenix_protocol._memory import (
    MemoryRecord,
    _check_list,
    _check_recall,
    _export_row,
    _import_row,
    _new_id,
    _prepare_store,
)

if TYPE_CHECKING:
    import psycopg

__all__ = ["PgMemoryStore"]

_COLUMNS = "m.id, m.namespace, m.text, m.tags, m.metadata, m.created_ms"


def _record(row: tuple[Any, ...]) -> MemoryRecord:
    memory_id, namespace, text, tags, metadata, created_ms = row[:6]
    return MemoryRecord(memory_id, namespace, text, list(tags), dict(metadata), iso_from_ms(int(created_ms)))


def _tag_filter(tags: builtins.list[str]) -> tuple[str, builtins.list[Any]]:
    return (" AND m.tags @> %s::text[]", [tags]) if tags else ("", [])


class PgMemoryStore(_pg.PgBound):
    """The memories kept on the PostgreSQL server ``url`` (all namespaces, each kept apart)."""

    def __init__(self, url: str, *, clock: Clock = system_clock, pool_size: int = 10) -> None:
        super().__init__(url, pool_size=pool_size)
        self.clock = clock

    def store(
        self, namespace: str, text: str, *, tags: Any = (), metadata: dict[str, Any] | None = None
    ) -> MemoryRecord:
        """Store a memory; returns it with its id. Durable (committed) when it returns."""
        clean_text, clean_tags, clean_meta, meta_json = _prepare_store(namespace, text, tags, metadata)
        ms = self.clock.now_ms()
        memory_id = _new_id()

        def insert(conn: psycopg.Connection[Any]) -> None:
            conn.execute(
                "INSERT INTO phx_memories (id, namespace, text, tags, metadata, created_ms) "
                "VALUES (%s, %s, %s, %s, %s::jsonb, %s)",
                (memory_id, namespace, clean_text, clean_tags, meta_json, ms),
            )

        try:
            self._run(insert)
        except _pg.PgError as exc:
            # The server was reached (an unreachable one has no cause): the commit may have landed.
            if exc.__cause__ is None or not self._stored(memory_id, namespace):
                raise
        return MemoryRecord(memory_id, namespace, clean_text, clean_tags, clean_meta, iso_from_ms(ms))

    def _stored(self, memory_id: str, namespace: str) -> bool:
        """After a failed store: is the memory there all the same (a commit whose answer was lost)?"""

        def find(conn: psycopg.Connection[Any]) -> bool:
            sql = "SELECT 1 FROM phx_memories WHERE id = %s AND namespace = %s"
            return conn.execute(sql, (memory_id, namespace)).fetchone() is not None

        try:
            return self._run(find)
        except _pg.PgError:
            return False

    def recall(
        self, namespace: str, query: str, *, k: int = 5, tags: Any = None
    ) -> builtins.list[tuple[MemoryRecord, float]]:
        """The ``k`` memories of ``namespace`` that best match ``query`` (``ts_rank_cd``), best first."""
        words, clean_tags = _check_recall(namespace, query, k, tags)
        tsquery = " || ".join(["plainto_tsquery('english', %s)"] * len(words))
        tag_sql, tag_args = _tag_filter(clean_tags)
        sql = (
            f"SELECT {_COLUMNS}, ts_rank_cd(m.document, q.query) AS rank "  # noqa: S608 - only placeholders are interpolated
            f"FROM phx_memories m, (SELECT {tsquery} AS query) q "
            f"WHERE m.namespace = %s AND numnode(q.query) > 0 AND m.document @@ q.query{tag_sql} "
            "ORDER BY rank DESC, m.created_ms DESC, m.id LIMIT %s"
        )
        args = [*words, namespace, *tag_args, k]
        rows = self._run(lambda conn: conn.execute(sql, args).fetchall())
        return [(_record(row), round(float(row[6]), 6)) for row in rows]

    def list(
        self, namespace: str, *, tags: Any = None, limit: int = 50, offset: int = 0
    ) -> builtins.list[MemoryRecord]:
        """Memories of ``namespace``, newest first."""
        clean_tags = _check_list(namespace, tags, limit, offset)
        tag_sql, tag_args = _tag_filter(clean_tags)
        sql = (
            f"SELECT {_COLUMNS} FROM phx_memories m WHERE m.namespace = %s{tag_sql} "  # noqa: S608 - only placeholders are interpolated
            "ORDER BY m.created_ms DESC, m.id DESC LIMIT %s OFFSET %s"
        )
        args = [namespace, *tag_args, limit, offset]
        rows = self._run(lambda conn: conn.execute(sql, args).fetchall())
        return [_record(row) for row in rows]

    def get(self, namespace: str, memory_id: str) -> MemoryRecord | None:
        """One memory of ``namespace`` (``None`` when absent, or in another namespace)."""
        validate_id(namespace, "namespace")
        validate_id(memory_id, "memory id")
        sql = f"SELECT {_COLUMNS} FROM phx_memories m WHERE m.id = %s AND m.namespace = %s"  # noqa: S608 - constant
        row = self._run(lambda conn: conn.execute(sql, (memory_id, namespace)).fetchone())
        return _record(row) if row else None

    def delete(self, namespace: str, memory_id: str) -> bool:
        """Delete one memory of ``namespace``; ``False`` when there is none."""
        validate_id(namespace, "namespace")
        validate_id(memory_id, "memory id")
        sql = "DELETE FROM phx_memories WHERE id = %s AND namespace = %s"
        return self._run(lambda conn: conn.execute(sql, (memory_id, namespace)).rowcount > 0)

    def count(self, namespace: str) -> int:
        validate_id(namespace, "namespace")
        sql = "SELECT count(*) FROM phx_memories WHERE namespace = %s"
        row = self._run(lambda conn: conn.execute(sql, (namespace,)).fetchone())
        return int(row[0]) if row else 0

    def namespaces(self) -> builtins.list[str]:
        """Every namespace with at least one memory, sorted."""
        sql = "SELECT DISTINCT namespace FROM phx_memories ORDER BY namespace"
        return self._run(lambda conn: [r[0] for r in conn.execute(sql)])

    def exists(self, memory_id: str) -> bool:
        """Whether any namespace has a memory with this id (``phx import`` refuses to overwrite)."""
        sql = "SELECT 1 FROM phx_memories WHERE id = %s"
        return self._run(lambda conn: conn.execute(sql, (memory_id,)).fetchone() is not None)

    def export(self, namespace: str) -> builtins.list[dict[str, Any]]:
        """Every memory of ``namespace``, oldest first, as ``phx export`` writes them."""
        validate_id(namespace, "namespace")
        sql = (
            "SELECT id, namespace, text, tags, metadata, created_ms FROM phx_memories WHERE namespace = %s "
            "ORDER BY created_ms, id"
        )
        return self._run(lambda conn: [_export_row(r) for r in conn.execute(sql, (namespace,))])

    def import_records(self, records: builtins.list[dict[str, Any]]) -> int:
        """Write exported memories back as they were (ids and times kept), in one transaction."""
        rows = [_import_row(r) for r in records]

        def work(conn: psycopg.Connection[Any]) -> int:
            with conn.cursor() as cur:
                cur.executemany(
                    "INSERT INTO phx_memories (id, namespace, text, tags, metadata, created_ms) "
                    "VALUES (%s, %s, %s, %s, %s::jsonb, %s)",
                    rows,
                )
            return len(rows)

        return self._run(work)
