"""Namespaced memory (seed 002): store text with tags and metadata, recall it ranked by BM25.

The embedded default is one SQLite database with an FTS5 index in ``<home>/memory/memory.sqlite3``
(WAL, ``synchronous=FULL``: a store that returned is durable). Every memory belongs to a
namespace (an agent or a tenant; the id validator's alphabet) and nothing crosses namespaces: every
query filters on it.

- ``store(namespace, text, tags, metadata) -> MemoryRecord`` (id ``mem-…``); text and metadata
  strings pass the secret redactor first;
- ``recall(namespace, query, k, tags) -> [(record, score)]``: BM25 over the text and tags (Porter
  stemming), best first, restricted to memories carrying every tag given; the query is plain words
  (FTS5 operators in it are treated as words, so user input can never be a syntax error);
- ``list``, ``get``, ``delete``, ``count``.

``store = "postgresql://…"`` (or ``PHOENIX_STORE``) keeps the memories on a PostgreSQL server
instead (``PgMemoryStore`` in ``_memory_pg``: same interface, validation, errors and redaction;
``tsvector`` recall ranked by ``ts_rank_cd``); ``open_memory_store`` picks the backend from the
configuration, and psycopg is imported only when it picks PostgreSQL.

``remember`` and ``recall_for`` do the same for an agent's session: the ids created go into the
session checkpoint's ``recent_memories`` and the query becomes its ``last_recall_query`` (seed 002).
"""

from __future__ import annotations

import contextlib
import json
import os
import sqlite3
import uuid
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, Protocol, cast

from phoenix_protocol._clock import Clock, iso_from_ms, system_clock
from phoenix_protocol._durable import FILE_MODE, ensure_dir
from phoenix_protocol._errors import StorageError, UsageError
from phoenix_protocol._ids import validate_id

if TYPE_CHECKING:
    import builtins

    from phoenix_protocol._agent import Agent
    from phoenix_protocol._config import Config
    from phoenix_protocol._home import Home

__all__ = [
    "MAX_TEXT",
    "MEMORY_ID_REGEX",
    "MemoryBackend",
    "MemoryRecord",
    "MemoryStore",
    "open_memory_store",
    "recall_for",
    "remember",
]

SCHEMA_VERSION = 1
MAX_TEXT = 64 * 1024
MEMORY_ID_REGEX = "mem-[0-9a-f]{24}"
"""Every memory id: ``mem-`` and 24 hex digits (96 random bits)."""
MAX_TAGS = 32
MAX_K = 100
MAX_LIST = 1000

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS memories (
    rowid INTEGER PRIMARY KEY,
    id TEXT NOT NULL UNIQUE,
    namespace TEXT NOT NULL,
    text TEXT NOT NULL,
    tags TEXT NOT NULL,
    metadata TEXT NOT NULL,
    created_ms INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS memories_by_namespace ON memories (namespace, created_ms);
CREATE TABLE IF NOT EXISTS memory_tags (memory_rowid INTEGER NOT NULL, tag TEXT NOT NULL, PRIMARY KEY (tag, memory_rowid));
CREATE VIRTUAL TABLE IF NOT EXISTS memories_fts USING fts5(
    text, tags, content='memories', content_rowid='rowid', tokenize='porter unicode61'
);
CREATE TRIGGER IF NOT EXISTS memories_ai AFTER INSERT ON memories BEGIN
    INSERT INTO memories_fts (rowid, text, tags) VALUES (new.rowid, new.text, new.tags);
END;
CREATE TRIGGER IF NOT EXISTS memories_ad AFTER DELETE ON memories BEGIN
    INSERT INTO memories_fts (memories_fts, rowid, text, tags) VALUES ('delete', old.rowid, old.text, old.tags);
    DELETE FROM memory_tags WHERE memory_rowid = old.rowid;
END;
"""


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


def _tags(tags: Any) -> list[str]:
    if tags is None:
        return []
    if isinstance(tags, str) or not all(isinstance(t, str) for t in tags):
        raise UsageError("tags must be a list of strings.")
    clean = list(dict.fromkeys(" ".join(t.split()).lower() for t in tags if t.strip()))
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


def _prepare_store(
    namespace: str, text: str, tags: Any, metadata: dict[str, Any] | None
) -> tuple[str, list[str], dict[str, Any], str]:
    """Validate and redact what ``store`` is given (every backend): ``(text, tags, metadata,
    metadata as JSON)``."""
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
    from phoenix_protocol._redact import redact, redact_value

    clean_text = redact(text)
    try:
        clean_meta = cast("dict[str, Any]", redact_value(metadata or {}))  # refuses NaN too
        meta_json = json.dumps(clean_meta, ensure_ascii=False, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise UsageError(f"metadata must be JSON: {exc}.") from None
    if _has_nul(clean_meta):
        raise UsageError("metadata must not contain a NUL character.")
    return clean_text, clean_tags, clean_meta, meta_json


def _query_words(query: str) -> list[str]:
    """The words of a recall query (at most 64): letters and digits; everything else separates."""
    words = [w for w in "".join(ch if ch.isalnum() else " " for ch in query).split() if w]
    if not words:
        raise UsageError("a recall query needs at least one word.")
    return words[:64]


def _fts5_query(words: list[str]) -> str:
    """Plain words as an FTS5 query (each word quoted, OR-ed): user input is never FTS5 syntax."""
    return " OR ".join('"' + w.replace('"', "") + '"' for w in words)


def _check_recall(namespace: str, query: Any, k: Any, tags: Any) -> tuple[list[str], list[str]]:
    """Validate ``recall``'s arguments (every backend): ``(query words, tags)``."""
    validate_id(namespace, "namespace")
    if not isinstance(query, str):
        raise UsageError("a recall query must be text.")
    if not isinstance(k, int) or isinstance(k, bool) or not 1 <= k <= MAX_K:
        raise UsageError(f"k must be between 1 and {MAX_K}.")
    return _query_words(query), _tags(tags)


def _check_list(namespace: str, tags: Any, limit: Any, offset: Any) -> list[str]:
    """Validate ``list``'s arguments (every backend): the tags."""
    validate_id(namespace, "namespace")
    for value in (limit, offset):
        if not isinstance(value, int) or isinstance(value, bool):
            raise UsageError("limit and offset must be integers.")
    if not 1 <= limit <= MAX_LIST or offset < 0:
        raise UsageError(f"limit must be between 1 and {MAX_LIST} and offset not negative.")
    return _tags(tags)


class MemoryBackend(Protocol):
    """What every memory store offers (``MemoryStore``, ``PgMemoryStore``): the same arguments,
    validation, errors, redaction and results."""

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


def _export_row(row: tuple[Any, ...]) -> dict[str, Any]:
    """A memory as ``phx export`` writes it (the same on every store)."""
    memory_id, namespace, text, tags, metadata, created_ms = row
    return {
        "id": memory_id,
        "namespace": namespace,
        "text": text,
        "tags": json.loads(tags) if isinstance(tags, str) else list(tags),
        "metadata": json.loads(metadata) if isinstance(metadata, str) else dict(metadata),
        "created_ms": int(created_ms),
    }


def _import_row(record: dict[str, Any]) -> tuple[str, str, str, builtins.list[str], str, int]:
    """Check an exported memory before it is written back (its text was redacted when stored)."""
    import re

    memory_id = str(record.get("id"))
    if not re.fullmatch(MEMORY_ID_REGEX, memory_id):
        raise UsageError(f"{memory_id!r} is not a memory id.")
    namespace = validate_id(str(record.get("namespace")), "namespace")
    text = record.get("text")
    metadata = record.get("metadata") or {}
    created = record.get("created_ms")
    if not isinstance(text, str) or not text or not isinstance(metadata, dict) or not isinstance(created, int):
        raise UsageError(f"memory {memory_id} in the export is incomplete.")
    meta_json = json.dumps(metadata, ensure_ascii=False, allow_nan=False)
    return memory_id, namespace, text, _tags(record.get("tags")), meta_json, created


def open_memory_store(home: Home, *, config: Config | None = None, clock: Clock = system_clock) -> MemoryBackend:
    """The memory store the configuration names: ``PgMemoryStore`` when ``store`` is a
    ``postgresql://`` URL, else the home's SQLite ``MemoryStore``."""
    from phoenix_protocol._config import load_config
    from phoenix_protocol._pg import is_postgres_url

    cfg = config if config is not None else load_config(home.root, project_root=home.project_root)
    if is_postgres_url(cfg.store):
        from phoenix_protocol._memory_pg import PgMemoryStore

        return PgMemoryStore(str(cfg.store), clock=clock, pool_size=cfg.pg_pool_size)
    return MemoryStore(home, clock=clock)


class MemoryStore:
    """The memories of a Phoenix home (all namespaces, each kept apart)."""

    def __init__(self, home: Home, *, clock: Clock = system_clock) -> None:
        self.home = home
        self.clock = clock
        self.dir = os.path.join(home.root, "memory")
        self.path = os.path.join(self.dir, "memory.sqlite3")
        self._prepared: tuple[int, int] | None = None  # (device, inode) of the file prepared

    def _prepare(self, conn: sqlite3.Connection) -> None:
        """Once per file (a file removed and made again, by this process or another, is prepared
        again): WAL mode, the schema, its version checked. Under the file's lock:
        SQLite answers "database is locked" at once, without waiting, to connections that switch
        a new file to WAL at the same time (8 clients of a fresh home; about 1 start in 8)."""
        from phoenix_protocol._durable import FileLock

        with FileLock(self.path, 30.0):
            conn.execute("PRAGMA journal_mode=WAL")
            conn.executescript(_SCHEMA)
            conn.execute("INSERT OR IGNORE INTO meta (key, value) VALUES ('schema_version', ?)", (str(SCHEMA_VERSION),))
            version = int(conn.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()[0])
            if version > SCHEMA_VERSION:
                from phoenix_protocol._errors import SchemaVersionError

                raise SchemaVersionError(
                    f"{self.path} was written by a newer Phoenix (memory schema {version}); upgrade phoenix-protocol.",
                    path=self.path,
                    found=version,
                    supported=SCHEMA_VERSION,
                )
            for suffix in ("-wal", "-shm"):  # SQLite creates them with the umask's mode
                with contextlib.suppress(FileNotFoundError):
                    os.chmod(self.path + suffix, FILE_MODE)

    @contextlib.contextmanager
    def _db(self) -> Iterator[sqlite3.Connection]:
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            self.home.ensure()
            ensure_dir(self.dir)
            with contextlib.suppress(FileExistsError):
                os.close(os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, FILE_MODE))
            st = os.stat(self.path)
        try:
            conn = sqlite3.connect(self.path, timeout=30, isolation_level=None)
        except sqlite3.Error as exc:
            raise StorageError(f"could not open {self.path}: {exc}.", path=self.path) from exc
        try:
            conn.execute("PRAGMA synchronous=FULL")  # per connection
            # A file not prepared here yet, or one with no schema (made empty again: its inode
            # may be the old one's): prepared (``PRAGMA schema_version`` is 0 for an empty one).
            if self._prepared != (st.st_dev, st.st_ino) or not conn.execute("PRAGMA schema_version").fetchone()[0]:
                self._prepare(conn)
                self._prepared = (st.st_dev, st.st_ino)
            yield conn
        except sqlite3.Error as exc:
            raise StorageError(f"memory store {self.path}: {exc}.", path=self.path) from exc
        finally:
            conn.close()

    @staticmethod
    def _record(row: tuple[Any, ...]) -> MemoryRecord:
        memory_id, namespace, text, tags, metadata, created_ms = row
        return MemoryRecord(
            memory_id, namespace, text, json.loads(tags), json.loads(metadata), iso_from_ms(int(created_ms))
        )

    def store(
        self, namespace: str, text: str, *, tags: Any = (), metadata: dict[str, Any] | None = None
    ) -> MemoryRecord:
        """Store a memory; returns it with its id. Durable when it returns."""
        clean_text, clean_tags, clean_meta, meta_json = _prepare_store(namespace, text, tags, metadata)
        ms = self.clock.now_ms()
        memory_id = _new_id()
        with self._db() as db:
            db.execute("BEGIN IMMEDIATE")
            try:
                cur = db.execute(
                    "INSERT INTO memories (id, namespace, text, tags, metadata, created_ms) VALUES (?, ?, ?, ?, ?, ?)",
                    (memory_id, namespace, clean_text, json.dumps(clean_tags), meta_json, ms),
                )
                db.executemany(
                    "INSERT INTO memory_tags (memory_rowid, tag) VALUES (?, ?)",
                    [(cur.lastrowid, t) for t in clean_tags],
                )
                db.execute("COMMIT")
            except BaseException:
                db.execute("ROLLBACK")
                raise
        return MemoryRecord(memory_id, namespace, clean_text, clean_tags, clean_meta, iso_from_ms(ms))

    def _tag_filter(self, tags: list[str]) -> tuple[str, list[Any]]:
        if not tags:
            return "", []
        marks = ",".join("?" * len(tags))
        sql = f" AND m.rowid IN (SELECT memory_rowid FROM memory_tags WHERE tag IN ({marks}) GROUP BY memory_rowid HAVING count(*) = ?)"  # noqa: S608 - only '?' placeholders are interpolated
        return sql, [*tags, len(tags)]

    def recall(self, namespace: str, query: str, *, k: int = 5, tags: Any = None) -> list[tuple[MemoryRecord, float]]:
        """The ``k`` memories of ``namespace`` that best match ``query`` (BM25), best first."""
        words, clean_tags = _check_recall(namespace, query, k, tags)
        match = _fts5_query(words)
        tag_sql, tag_args = self._tag_filter(clean_tags)
        sql = (
            "SELECT m.id, m.namespace, m.text, m.tags, m.metadata, m.created_ms, bm25(memories_fts) AS rank "  # noqa: S608 - only '?' placeholders are interpolated
            "FROM memories_fts JOIN memories m ON m.rowid = memories_fts.rowid "
            f"WHERE memories_fts MATCH ? AND m.namespace = ?{tag_sql} ORDER BY rank, m.created_ms DESC LIMIT ?"
        )
        if not os.path.exists(self.path):
            return []
        with self._db() as db:
            rows = db.execute(sql, [match, namespace, *tag_args, k]).fetchall()
        return [(self._record(row[:6]), round(-float(row[6]), 6)) for row in rows]

    def list(self, namespace: str, *, tags: Any = None, limit: int = 50, offset: int = 0) -> list[MemoryRecord]:
        """Memories of ``namespace``, newest first."""
        clean_tags = _check_list(namespace, tags, limit, offset)
        if not os.path.exists(self.path):
            return []
        tag_sql, tag_args = self._tag_filter(clean_tags)
        sql = (
            "SELECT m.id, m.namespace, m.text, m.tags, m.metadata, m.created_ms FROM memories m "  # noqa: S608 - only '?' placeholders are interpolated
            f"WHERE m.namespace = ?{tag_sql} ORDER BY m.created_ms DESC, m.rowid DESC LIMIT ? OFFSET ?"
        )
        with self._db() as db:
            rows = db.execute(sql, [namespace, *tag_args, limit, offset]).fetchall()
        return [self._record(row) for row in rows]

    def get(self, namespace: str, memory_id: str) -> MemoryRecord | None:
        """One memory of ``namespace`` (``None`` when absent, or in another namespace)."""
        validate_id(namespace, "namespace")
        validate_id(memory_id, "memory id")
        if not os.path.exists(self.path):
            return None
        with self._db() as db:
            row = db.execute(
                "SELECT id, namespace, text, tags, metadata, created_ms FROM memories WHERE id = ? AND namespace = ?",
                (memory_id, namespace),
            ).fetchone()
        return self._record(row) if row else None

    def delete(self, namespace: str, memory_id: str) -> bool:
        """Delete one memory of ``namespace``; ``False`` when there is none."""
        validate_id(namespace, "namespace")
        validate_id(memory_id, "memory id")
        if not os.path.exists(self.path):
            return False
        with self._db() as db:
            cur = db.execute("DELETE FROM memories WHERE id = ? AND namespace = ?", (memory_id, namespace))
        return cur.rowcount > 0

    def count(self, namespace: str) -> int:
        validate_id(namespace, "namespace")
        if not os.path.exists(self.path):
            return 0
        with self._db() as db:
            return int(db.execute("SELECT count(*) FROM memories WHERE namespace = ?", (namespace,)).fetchone()[0])

    def namespaces(self) -> builtins.list[str]:
        """Every namespace with at least one memory, sorted."""
        if not os.path.exists(self.path):
            return []
        with self._db() as db:
            return [r[0] for r in db.execute("SELECT DISTINCT namespace FROM memories ORDER BY namespace")]

    def exists(self, memory_id: str) -> bool:
        """Whether any namespace has a memory with this id (``phx import`` refuses to overwrite)."""
        if not os.path.exists(self.path):
            return False
        with self._db() as db:
            return db.execute("SELECT 1 FROM memories WHERE id = ?", (memory_id,)).fetchone() is not None

    def export(self, namespace: str) -> builtins.list[dict[str, Any]]:
        """Every memory of ``namespace``, oldest first, as ``phx export`` writes them."""
        validate_id(namespace, "namespace")
        if not os.path.exists(self.path):
            return []
        with self._db() as db:
            rows = db.execute(
                "SELECT id, namespace, text, tags, metadata, created_ms FROM memories WHERE namespace = ? "
                "ORDER BY created_ms, rowid",
                (namespace,),
            ).fetchall()
        return [_export_row(r) for r in rows]

    def import_records(self, records: builtins.list[dict[str, Any]]) -> int:
        """Write exported memories back as they were (ids and times kept), in one transaction."""
        rows = [_import_row(r) for r in records]
        with self._db() as db:
            db.execute("BEGIN IMMEDIATE")
            try:
                for memory_id, namespace, text, tags, meta_json, created in rows:
                    cur = db.execute(
                        "INSERT INTO memories (id, namespace, text, tags, metadata, created_ms) VALUES (?, ?, ?, ?, ?, ?)",
                        (memory_id, namespace, text, json.dumps(tags), meta_json, created),
                    )
                    for tag in tags:
                        db.execute("INSERT INTO memory_tags (memory_rowid, tag) VALUES (?, ?)", (cur.lastrowid, tag))
                db.execute("COMMIT")
            except BaseException:
                db.execute("ROLLBACK")
                raise
        return len(rows)


def _agent_store(agent: Agent, store: MemoryBackend | None) -> MemoryBackend:
    return store if store is not None else open_memory_store(agent.home, config=agent.config, clock=agent.clock)


def remember(
    agent: Agent,
    text: str,
    *,
    tags: Any = (),
    metadata: dict[str, Any] | None = None,
    store: MemoryBackend | None = None,
) -> MemoryRecord:
    """Store a memory in the agent's namespace and note it in the open session (its id goes into
    the session checkpoint's ``recent_memories``)."""
    from phoenix_protocol._sessions import record_memory

    record = _agent_store(agent, store).store(agent.id, text, tags=tags, metadata=metadata)
    record_memory(agent, record.id)
    return record


def recall_for(
    agent: Agent, query: str, *, k: int = 5, tags: Any = None, store: MemoryBackend | None = None
) -> list[tuple[MemoryRecord, float]]:
    """Recall in the agent's namespace and note the query as the session's ``last_recall_query``."""
    from phoenix_protocol._sessions import record_recall

    found = _agent_store(agent, store).recall(agent.id, query, k=k, tags=tags)
    record_recall(agent, query)
    return found
