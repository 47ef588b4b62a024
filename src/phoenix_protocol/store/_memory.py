"""Namespaced memory (seed 002): store text with tags and metadata, recall it ranked by relevance.

``MemoryStore`` keeps the memories in the home's database (``phx_memories``: ``phoenix.db`` in the
home, or the PostgreSQL server that ``store = "postgresql://…"`` names; ``open_database`` decides).
It is written once; full-text search is the one part that differs between the engines, and sits
behind ``Dialect.full_text`` (SQLite: an FTS5 table with Porter stemming, ranked by BM25;
PostgreSQL: a generated English ``tsvector``, ranked by ``ts_rank_cd``). Every memory belongs to a
namespace (an agent or a tenant; the id validator's alphabet) and nothing crosses namespaces:
every query filters on it.

- ``store(namespace, text, tags, metadata) -> MemoryRecord`` (id ``mem-…``): durable (committed)
  when it returns;
- ``recall(namespace, query, k, tags) -> [(record, score)]``: best first (a higher score is a
  better match; then newest first), restricted to memories carrying every tag given; the query is
  plain words OR-ed (a partial match still ranks; query syntax in it is treated as words, so user
  input is never a syntax error);
- ``list`` (newest first, then most recently stored), ``get``, ``delete``, ``count``,
  ``namespaces``, ``exists``, ``export`` and ``import_records`` (``phx export``/``phx import``).

Redaction: every text the store writes or returns passes the secret redactor: the text, the tags
(also those a query filters on), metadata values *and keys*; records read back are redacted again
(a database written by an earlier release may hold a secret in a tag or a key).

A home written by an earlier release (``memory/memory.sqlite3``, ``tokens.json``) is moved into
the database on first use (``store._move_memory``).

``remember`` and ``recall_for`` do the same for an agent's session: the ids created go into the
session checkpoint's ``recent_memories`` and the query becomes its ``last_recall_query`` (seed 002).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol, TypeVar, overload

from phoenix_protocol.core._clock import Clock, iso_from_ms, system_clock
from phoenix_protocol.core._errors import UsageError
from phoenix_protocol.core._ids import validate_id

if TYPE_CHECKING:
    import builtins

    from phoenix_protocol.core._config import Config
    from phoenix_protocol.core._home import Home
    from phoenix_protocol.store._db import Tx

__all__ = [
    "MAX_TEXT",
    "MEMORY_ID_REGEX",
    "MemoryBackend",
    "MemoryRecord",
    "MemoryStore",
    "open_memory_store",
    "redact_memory_value",
]

T = TypeVar("T")
MAX_TEXT = 64 * 1024
MEMORY_ID_REGEX = "mem-[0-9a-f]{24}"
"""Every memory id: ``mem-`` and 24 hex digits (96 random bits)."""
MAX_TAGS = 32
MAX_K = 100
MAX_LIST = 1000
_COLUMNS = "m.id, m.namespace, m.text, m.tags, m.metadata, m.created_ms"


class MemoryRecord:
    """One memory."""

    __slots__ = ("created_at", "id", "metadata", "namespace", "tags", "text")

    def __init__(
        self, memory_id: str, namespace: str, text: str, tags: list[str], metadata: dict[str, Any], created_at: str
    ) -> None:
        self.id = memory_id
        self.namespace = namespace
        self.text = text
        self.tags = tags
        self.metadata = metadata
        self.created_at = created_at

    def as_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "namespace": self.namespace,
            "text": self.text,
            "tags": self.tags,
            "metadata": self.metadata,
            "created_at": self.created_at,
        }

    def __repr__(self) -> str:
        return f"MemoryRecord({self.id!r}, {self.namespace!r})"


@overload
def redact_memory_value(value: dict[str, Any]) -> dict[str, Any]: ...


@overload
def redact_memory_value(value: list[Any]) -> list[Any]: ...


@overload
def redact_memory_value(value: object) -> object: ...


def redact_memory_value(value: object) -> object:
    """``value`` (JSON-like) with every string redacted, dict keys included (``redact_value``
    keeps keys as they are: a key can be a secret too, an AWS key id used as a name). A dict
    comes back a dict, a list a list."""
    from phoenix_protocol.core._redact import redact, redact_value

    value = redact_value(value)
    if isinstance(value, dict):
        return {redact(str(k)) if isinstance(k, str) else k: redact_memory_value(v) for k, v in value.items()}
    if isinstance(value, list):
        return [redact_memory_value(v) for v in value]
    return value


def _lower(tag: str) -> str:
    """``tag`` in lower case but its redaction markers (``[REDACTED:github-token]``): redacted
    before it is lowered, since a lowered secret may no longer look like one (``akia…``)."""
    import re

    parts = re.split(r"(\[REDACTED:[^\]]*\])", tag)
    return "".join(p if i % 2 else p.lower() for i, p in enumerate(parts))


def _tags(tags: Any) -> list[str]:
    """Tags as stored and matched: redacted, whitespace collapsed, lower case, unique, in order."""
    if tags is None:
        return []
    if isinstance(tags, str) or not all(isinstance(t, str) for t in tags):
        raise UsageError("tags must be a list of strings.")
    from phoenix_protocol.core._redact import redact

    clean = list(dict.fromkeys(_lower(" ".join(redact(t).split())) for t in tags if t.strip()))
    if len(clean) > MAX_TAGS:
        raise UsageError(f"at most {MAX_TAGS} tags.")
    for tag in clean:
        if len(tag) > 64:
            raise UsageError(f"tag {tag[:20]!r}… is longer than 64 characters.")
        if "\x00" in tag:
            raise UsageError("a tag must not contain a NUL character.")
    return clean


def _has_nul(value: Any) -> bool:
    """A NUL character anywhere in a JSON value (keys included): PostgreSQL text and jsonb refuse it."""
    if isinstance(value, str):
        return "\x00" in value
    if isinstance(value, dict):
        return any(_has_nul(k) or _has_nul(v) for k, v in value.items())
    if isinstance(value, list | tuple):
        return any(_has_nul(v) for v in value)
    return False


def _new_id() -> str:
    return "mem-" + uuid.uuid4().hex[:24]


def _clean_metadata(metadata: Any) -> tuple[dict[str, Any], str]:
    """Metadata redacted (keys too) and as JSON; ``UsageError`` for what JSON cannot hold."""
    if not isinstance(metadata, dict):
        raise UsageError("metadata must be a JSON object.")
    try:
        clean_meta = redact_memory_value(metadata)  # refuses NaN too
        meta_json = json.dumps(clean_meta, ensure_ascii=False, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise UsageError(f"metadata must be JSON: {exc}.") from None
    if _has_nul(clean_meta):
        raise UsageError("metadata must not contain a NUL character.")
    return clean_meta, meta_json


def _prepare_store(
    namespace: str, text: str, tags: Any, metadata: dict[str, Any] | None
) -> tuple[str, list[str], dict[str, Any], str]:
    """Validate and redact what ``store`` is given: ``(text, tags, metadata, metadata as JSON)``."""
    validate_id(namespace, "namespace")
    if not isinstance(text, str) or not text.strip():
        raise UsageError("a memory needs some text.")
    if len(text) > MAX_TEXT:
        raise UsageError(f"a memory's text is at most {MAX_TEXT} characters ({len(text)} given).")
    if "\x00" in text:
        raise UsageError("a memory's text must not contain a NUL character.")
    if metadata is not None and not isinstance(metadata, dict):
        raise UsageError("metadata must be a JSON object.")
    clean_tags = _tags(tags)
    from phoenix_protocol.core._redact import redact

    clean_meta, meta_json = _clean_metadata(metadata or {})
    return redact(text), clean_tags, clean_meta, meta_json


def _query_words(query: str) -> list[str]:
    """The words of a recall query (at most 64): letters and digits; everything else separates."""
    words = [w for w in "".join(ch if ch.isalnum() else " " for ch in query).split() if w]
    if not words:
        raise UsageError("a recall query needs at least one word.")
    return words[:64]


def _check_recall(namespace: str, query: Any, k: Any, tags: Any) -> tuple[list[str], list[str]]:
    """Validate ``recall``'s arguments: ``(query words, tags)``."""
    validate_id(namespace, "namespace")
    if not isinstance(query, str):
        raise UsageError("a recall query must be text.")
    if not isinstance(k, int) or isinstance(k, bool) or not 1 <= k <= MAX_K:
        raise UsageError(f"k must be between 1 and {MAX_K}.")
    return _query_words(query), _tags(tags)


def _check_list(namespace: str, tags: Any, limit: Any, offset: Any) -> list[str]:
    """Validate ``list``'s arguments: the tags."""
    validate_id(namespace, "namespace")
    for value in (limit, offset):
        if not isinstance(value, int) or isinstance(value, bool):
            raise UsageError("limit and offset must be integers.")
    if not 1 <= limit <= MAX_LIST or offset < 0:
        raise UsageError(f"limit must be between 1 and {MAX_LIST} and offset not negative.")
    return _tags(tags)


class MemoryBackend(Protocol):
    """What the memory store offers (``MemoryStore``; a test double may stand in for it)."""

    def store(
        self, namespace: str, text: str, *, tags: Any = (), metadata: dict[str, Any] | None = None
    ) -> MemoryRecord: ...

    def recall(
        self, namespace: str, query: str, *, k: int = 5, tags: Any = None
    ) -> builtins.list[tuple[MemoryRecord, float]]: ...

    def list(
        self, namespace: str, *, tags: Any = None, limit: int = 50, offset: int = 0
    ) -> builtins.list[MemoryRecord]: ...

    def get(self, namespace: str, memory_id: str) -> MemoryRecord | None: ...

    def delete(self, namespace: str, memory_id: str) -> bool: ...

    def count(self, namespace: str) -> int: ...

    def namespaces(self) -> builtins.list[str]: ...

    def exists(self, memory_id: str) -> bool: ...

    def export(self, namespace: str) -> builtins.list[dict[str, Any]]: ...

    def import_records(self, records: builtins.list[dict[str, Any]]) -> int: ...


def _import_row(record: dict[str, Any]) -> tuple[str, str, str, builtins.list[str], str, int]:
    """Check an exported (or an earlier release's) memory before it is written back as it was
    (id and time kept), redacted as ``store`` redacts: ``(id, namespace, text, tags, metadata
    as JSON, created_ms)``."""
    import re

    from phoenix_protocol.core._redact import redact

    memory_id = str(record.get("id"))
    if not re.fullmatch(MEMORY_ID_REGEX, memory_id):
        raise UsageError(f"{memory_id!r} is not a memory id.")
    namespace = validate_id(str(record.get("namespace")), "namespace")
    text = record.get("text")
    metadata = record.get("metadata") or {}
    created = record.get("created_ms")
    if not isinstance(text, str) or not text or not isinstance(metadata, dict) or not isinstance(created, int):
        raise UsageError(f"memory {memory_id} in the export is incomplete.")
    if "\x00" in text:
        raise UsageError(f"memory {memory_id}: a memory's text must not contain a NUL character.")
    _meta, meta_json = _clean_metadata(metadata)
    return memory_id, namespace, redact(text), _tags(record.get("tags")), meta_json, created


def insert_rows(tx: Tx, rows: builtins.list[tuple[str, str, str, builtins.list[str], str, int]]) -> None:
    """Write checked rows (``_import_row``) in ``tx``; an id already there is left as it is (the
    move of an earlier release's home runs again safely after an interruption)."""
    tx.executemany(
        "INSERT INTO phx_memories (id, namespace, text, tags, metadata, created_ms) VALUES (?, ?, ?, ?, ?, ?) "
        "ON CONFLICT (id) DO NOTHING",
        [(i, ns, text, tx.dialect.text_array(tags), meta, ms) for i, ns, text, tags, meta, ms in rows],
    )


def open_memory_store(home: Home, *, config: Config | None = None, clock: Clock = system_clock) -> MemoryStore:
    """The home's memory store, on the database the configuration names (``open_database``)."""
    return MemoryStore(home, config=config, clock=clock)


class MemoryStore:
    """The memories of a Phoenix home's database (all namespaces, each kept apart)."""

    def __init__(self, home: Home, *, config: Config | None = None, clock: Clock = system_clock) -> None:
        from phoenix_protocol.store._db import open_database

        self.home = home
        self.clock = clock
        self.db = open_database(home, config)

    def _present(self) -> bool:
        """Whether there is a database to look in, once an earlier release's files are moved into it."""
        from phoenix_protocol.store._move_memory import move_earlier_files

        move_earlier_files(self.home, self.db, clock=self.clock)
        return self.db.exists()

    def _write(self, work: Callable[[Tx], T]) -> T:
        self._present()
        return self.db.transaction(work)

    def _read(self, work: Callable[[Tx], T], empty: T) -> T:
        """``work`` in a read transaction; ``empty`` without creating anything when the home has
        no database yet and nothing to move into one."""
        return self.db.read(work) if self._present() else empty

    @staticmethod
    def _record(tx: Tx, row: Any) -> MemoryRecord:
        from phoenix_protocol.core._redact import redact

        memory_id, namespace, text, tags, metadata, created_ms = row[:6]
        return MemoryRecord(
            memory_id,
            namespace,
            redact(text),
            [redact(t) for t in tx.dialect.read_text_array(tags)],
            redact_memory_value(tx.dialect.read_json(metadata)),
            iso_from_ms(int(created_ms)),
        )

    def store(
        self, namespace: str, text: str, *, tags: Any = (), metadata: dict[str, Any] | None = None
    ) -> MemoryRecord:
        """Store a memory; returns it with its id. Durable (committed) when it returns.

        Its id is made before the first attempt: a PostgreSQL transaction retried on a fresh
        connection (nothing was committed) inserts the one memory once. A commit whose answer
        was lost (the connection failed while committing) is looked up: found, the memory was
        stored and is returned; else the original error is raised."""
        from phoenix_protocol.core._errors import PhoenixError

        clean_text, clean_tags, clean_meta, meta_json = _prepare_store(namespace, text, tags, metadata)
        ms = self.clock.now_ms()
        memory_id = _new_id()

        def insert(tx: Tx) -> None:
            tx.execute(
                "INSERT INTO phx_memories (id, namespace, text, tags, metadata, created_ms) VALUES (?, ?, ?, ?, ?, ?)",
                (memory_id, namespace, clean_text, tx.dialect.text_array(clean_tags), meta_json, ms),
            )

        try:
            self._write(insert)
        except PhoenixError as exc:
            # The server was reached (an unreachable one has no cause): the commit may have landed.
            if exc.__cause__ is None or not self._stored(memory_id, namespace):
                raise
        return MemoryRecord(memory_id, namespace, clean_text, clean_tags, clean_meta, iso_from_ms(ms))

    def _stored(self, memory_id: str, namespace: str) -> bool:
        """After a failed store: is the memory there all the same (a commit whose answer was lost)?"""
        from phoenix_protocol.core._errors import PhoenixError

        try:
            return self.get(namespace, memory_id) is not None
        except PhoenixError:
            return False

    def _tag_filter(self, tx: Tx, tags: builtins.list[str]) -> tuple[str, builtins.list[Any]]:
        if not tags:
            return "", []
        sql, params = tx.dialect.contains_all("m.tags", tags)
        return " AND " + sql, params

    def recall(
        self, namespace: str, query: str, *, k: int = 5, tags: Any = None
    ) -> builtins.list[tuple[MemoryRecord, float]]:
        """The ``k`` memories of ``namespace`` that best match ``query``, best first, each with
        its score (higher is better)."""
        words, clean_tags = _check_recall(namespace, query, k, tags)

        def work(tx: Tx) -> builtins.list[tuple[MemoryRecord, float]]:
            fts = tx.dialect.full_text("phx_memories", "m", words)
            tag_sql, tag_args = self._tag_filter(tx, clean_tags)
            sql = (
                f"SELECT {_COLUMNS}, {fts.rank} AS rank FROM phx_memories m {fts.join} "  # noqa: S608 - fragments and '?' placeholders only
                f"WHERE {fts.match} AND m.namespace = ?{tag_sql} ORDER BY rank DESC, m.created_ms DESC, m.seq DESC "
                "LIMIT ?"
            )
            rows = tx.all(sql, [*fts.join_params, *fts.match_params, namespace, *tag_args, k])
            return [(self._record(tx, row), round(float(row[6]), 6)) for row in rows]

        return self._read(work, [])

    def list(
        self, namespace: str, *, tags: Any = None, limit: int = 50, offset: int = 0
    ) -> builtins.list[MemoryRecord]:
        """Memories of ``namespace``, newest first."""
        clean_tags = _check_list(namespace, tags, limit, offset)

        def work(tx: Tx) -> builtins.list[MemoryRecord]:
            tag_sql, tag_args = self._tag_filter(tx, clean_tags)
            sql = (
                f"SELECT {_COLUMNS} FROM phx_memories m WHERE m.namespace = ?{tag_sql} "  # noqa: S608 - fragments and '?' placeholders only
                "ORDER BY m.created_ms DESC, m.seq DESC LIMIT ? OFFSET ?"
            )
            return [self._record(tx, row) for row in tx.all(sql, [namespace, *tag_args, limit, offset])]

        return self._read(work, [])

    def get(self, namespace: str, memory_id: str) -> MemoryRecord | None:
        """One memory of ``namespace`` (``None`` when absent, or in another namespace)."""
        validate_id(namespace, "namespace")
        validate_id(memory_id, "memory id")

        def work(tx: Tx) -> MemoryRecord | None:
            sql = f"SELECT {_COLUMNS} FROM phx_memories m WHERE m.id = ? AND m.namespace = ?"  # noqa: S608 - constant
            row = tx.one(sql, (memory_id, namespace))
            return self._record(tx, row) if row else None

        return self._read(work, None)

    def delete(self, namespace: str, memory_id: str) -> bool:
        """Delete one memory of ``namespace``; ``False`` when there is none."""
        validate_id(namespace, "namespace")
        validate_id(memory_id, "memory id")
        if not self._present():
            return False
        sql = "DELETE FROM phx_memories WHERE id = ? AND namespace = ?"
        return self.db.transaction(lambda tx: tx.execute(sql, (memory_id, namespace)).rowcount > 0)

    def count(self, namespace: str) -> int:
        """How many memories ``namespace`` has."""
        validate_id(namespace, "namespace")
        sql = "SELECT count(*) FROM phx_memories WHERE namespace = ?"
        return self._read(lambda tx: int(tx.scalar(sql, (namespace,)) or 0), 0)

    def namespaces(self) -> builtins.list[str]:
        """Every namespace with at least one memory, sorted."""
        sql = "SELECT DISTINCT namespace FROM phx_memories ORDER BY namespace"
        return self._read(lambda tx: [str(r[0]) for r in tx.all(sql)], [])

    def exists(self, memory_id: str) -> bool:
        """Whether any namespace has a memory with this id (``phx import`` refuses to overwrite)."""
        sql = "SELECT 1 FROM phx_memories WHERE id = ?"
        return self._read(lambda tx: tx.one(sql, (memory_id,)) is not None, False)

    def export(self, namespace: str) -> builtins.list[dict[str, Any]]:
        """Every memory of ``namespace``, oldest first, as ``phx export`` writes them."""
        validate_id(namespace, "namespace")

        def work(tx: Tx) -> builtins.list[dict[str, Any]]:
            sql = (
                f"SELECT {_COLUMNS} FROM phx_memories m WHERE m.namespace = ? "  # noqa: S608 - constant
                "ORDER BY m.created_ms, m.seq"
            )
            out = []
            for row in tx.all(sql, (namespace,)):
                record = self._record(tx, row).as_dict()
                del record["created_at"]
                out.append({**record, "created_ms": int(row[5])})
            return out

        return self._read(work, [])

    def import_records(self, records: builtins.list[dict[str, Any]]) -> int:
        """Write exported memories back as they were (ids and times kept), in one transaction.
        ``UsageError`` for an id already stored (``phx import`` checks first)."""
        rows = [_import_row(r) for r in records]

        def work(tx: Tx) -> int:
            for row in rows:
                if tx.one("SELECT 1 FROM phx_memories WHERE id = ?", (row[0],)) is not None:
                    raise UsageError(f"memory {row[0]} is already stored: nothing was imported.")
            insert_rows(tx, rows)
            return len(rows)

        return self._write(work)
