"""Namespaced memory (seed 002): store text with tags and metadata, recall it ranked by relevance.

``MemoryStore`` keeps the memories in the home's database (``phx_memories``: ``phoenix.db`` in the
home, or the PostgreSQL server that ``store = "postgresql://…"`` names; ``open_database`` decides).
It is written once, recall included: the memories' search terms are kept in plain tables and
ranked in Python by one scorer (``store._recall``: stop words, Snowball stemming, BM25 over the
namespace, a minimum score), so both engines return the same memories in the same order with the
same scores. Semantic recall (``embedder=``, the ``[persona]`` extra's model supplied by
``services``) adds the cosine of sentence embeddings, stored per memory and model the first time
a recall needs them, fused with the lexical ranking. Every memory belongs to a
namespace (an agent or a tenant; the id validator's alphabet) and nothing crosses namespaces:
every query filters on it.

- ``store(namespace, text, tags, metadata) -> MemoryRecord`` (id ``mem-…``): durable (committed)
  when it returns;
- ``recall(namespace, query, k, tags, since, until, min_score, embedder) -> [(record, score)]``:
  best first (a higher score is a better match; then newest first), restricted to memories
  carrying every tag given and stored in ``[since, until)``; the query is plain words OR-ed (a
  partial match still ranks when it reaches the minimum score; query syntax in it is treated as
  words, so user input is never a syntax error);
- ``list`` (newest first, then most recently stored; the same tag and time filters), ``get``, ``delete``, ``count``,
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

from phoenix_protocol.core._clock import Clock, iso_from_ms, ms_from_iso, system_clock
from phoenix_protocol.core._errors import UsageError
from phoenix_protocol.core._ids import validate_id

if TYPE_CHECKING:
    import builtins

    from phoenix_protocol.core._config import Config
    from phoenix_protocol.core._home import Home
    from phoenix_protocol.store._db import Tx
    from phoenix_protocol.store._recall import Embedder

__all__ = [
    "MAX_TEXT",
    "MEMORY_ID_REGEX",
    "MemoryBackend",
    "MemoryRecord",
    "MemoryStore",
    "open_memory_store",
    "redact_memory_value",
    "time_bound",
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


def time_bound(value: Any, name: str) -> int | None:
    """A ``since``/``until`` bound as milliseconds since the epoch: ``None``, an ``int`` (ms), a
    ``datetime`` or an ISO 8601 text (with ``Z`` or an offset; naive means UTC)."""
    from datetime import UTC, datetime

    if value is None:
        return None
    if isinstance(value, bool):
        raise UsageError(f"{name} must be a time (ISO 8601, or milliseconds since the epoch).")
    if isinstance(value, int):
        return value
    if isinstance(value, datetime):
        try:
            return int((value if value.tzinfo else value.replace(tzinfo=UTC)).timestamp() * 1000)
        except (OverflowError, ValueError):
            raise UsageError(f"{name} is out of range: {value!r}.") from None
    if isinstance(value, str):
        try:
            return ms_from_iso(value)
        except (ValueError, OverflowError):
            pass
    raise UsageError(f"{name} must be an ISO 8601 time like 2026-11-01T00:00:00Z, not {value!r}.")


def _check_window(since: Any, until: Any) -> tuple[int | None, int | None]:
    """``(since, until)`` in ms (``until`` before ``since``: an empty window, nothing matches)."""
    return time_bound(since, "since"), time_bound(until, "until")


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
        self,
        namespace: str,
        query: str,
        *,
        k: int = 5,
        tags: Any = None,
        since: Any = None,
        until: Any = None,
        min_score: float | None = None,
        embedder: Embedder | None = None,
    ) -> builtins.list[tuple[MemoryRecord, float]]: ...

    def list(
        self,
        namespace: str,
        *,
        tags: Any = None,
        limit: int = 50,
        offset: int = 0,
        since: Any = None,
        until: Any = None,
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
    for memory_id, namespace, text, tags, _meta, _ms in rows:
        if tx.one("SELECT 1 FROM phx_memories WHERE id = ? AND analyzed = 0", (memory_id,)) is not None:
            index_terms(tx, memory_id, namespace, text, tags)


def index_terms(tx: Tx, memory_id: str, namespace: str, text: str, tags: builtins.list[str]) -> None:
    """(Re)write a memory's search terms (``store._recall``) in ``tx``, as stored: redacted text and tags."""
    from phoenix_protocol.store._recall import ANALYZER_VERSION, document_terms

    counts = document_terms(text, tags)
    tx.execute("DELETE FROM phx_memory_terms WHERE memory_id = ?", (memory_id,))
    tx.executemany(
        "INSERT INTO phx_memory_terms (memory_id, namespace, term, tf) VALUES (?, ?, ?, ?)",
        [(memory_id, namespace, term, tf) for term, tf in sorted(counts.items())],
    )
    tx.execute(
        "UPDATE phx_memories SET analyzed = ?, term_count = ? WHERE id = ?",
        (ANALYZER_VERSION, sum(counts.values()), memory_id),
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
            index_terms(tx, memory_id, namespace, clean_text, clean_tags)

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

    @staticmethod
    def _window_filter(since: int | None, until: int | None) -> tuple[str, builtins.list[Any]]:
        sql, args = "", list[Any]()
        if since is not None:
            sql, args = sql + " AND m.created_ms >= ?", [*args, since]
        if until is not None:
            sql, args = sql + " AND m.created_ms < ?", [*args, until]
        return sql, args

    @staticmethod
    def _pending(tx: Tx, namespace: str) -> bool:
        """Whether ``namespace`` has memories whose terms are missing or stale (stored by an
        earlier release, or changed by hand since)."""
        from phoenix_protocol.store._recall import ANALYZER_VERSION

        sql = "SELECT 1 FROM phx_memories WHERE namespace = ? AND analyzed < ? LIMIT 1"
        return tx.one(sql, (namespace, ANALYZER_VERSION)) is not None

    def _analyze(self, namespace: str) -> None:
        """Analyse the memories of ``namespace`` that ``_pending`` finds, in one write transaction."""
        from phoenix_protocol.store._recall import ANALYZER_VERSION

        sql = "SELECT id, text, tags FROM phx_memories WHERE namespace = ? AND analyzed < ?"

        def work(tx: Tx) -> None:
            for memory_id, text, tags in tx.all(sql + tx.dialect.for_update, (namespace, ANALYZER_VERSION)):
                index_terms(tx, memory_id, namespace, text, tx.dialect.read_text_array(tags))

        self.db.transaction(work)

    def _read_analyzed(self, namespace: str, work: Callable[[Tx], T]) -> T:
        """``work`` in a read transaction once every memory of ``namespace`` is analysed (the
        check is part of that transaction: one round trip when there is nothing to analyse)."""

        def checked(tx: Tx) -> tuple[bool, T | None]:
            return (False, None) if self._pending(tx, namespace) else (True, work(tx))

        done, found = self.db.read(checked)
        if not done:
            self._analyze(namespace)
            return self.db.read(work)
        return found  # type: ignore[return-value]  # T, when done

    def recall(
        self,
        namespace: str,
        query: str,
        *,
        k: int = 5,
        tags: Any = None,
        since: Any = None,
        until: Any = None,
        min_score: float | None = None,
        embedder: Embedder | None = None,
    ) -> builtins.list[tuple[MemoryRecord, float]]:
        """The ``k`` memories of ``namespace`` that best match ``query``, best first, each with
        its score (higher is better; the same on both engines).

        Lexical (the default): the normalised BM25 score of ``store._recall`` (0 to 1), at least
        ``min_score`` (``MIN_SCORE`` when ``None``). With ``embedder`` (semantic recall): the
        lexical matches and the memories whose embedding's cosine with the query's is at least
        ``MIN_COSINE``, ranked by reciprocal rank fusion (1.0: first in both); the embeddings of
        memories that have none for this model are computed and stored first. ``tags``: only
        memories with every tag; ``since``/``until`` (ISO 8601 or ms): stored at or after
        ``since`` and before ``until``."""
        from phoenix_protocol.store._recall import MIN_SCORE, terms

        words, clean_tags = _check_recall(namespace, query, k, tags)
        low, high = _check_window(since, until)
        floor = MIN_SCORE if min_score is None else min_score
        if not isinstance(floor, int | float) or isinstance(floor, bool) or not 0.0 <= floor <= 1.0:
            raise UsageError("min_score must be between 0 and 1.")
        if not self._present():
            return []
        query_terms = list(dict.fromkeys(terms(" ".join(words))))

        def lexical(tx: Tx) -> builtins.list[tuple[str, float, int, int]]:
            """``(id, score, created_ms, seq)`` of the matches at or above the floor."""
            if not query_terms:
                return []
            from phoenix_protocol.store._recall import bm25_scorer

            count, total = tx.one(
                "SELECT count(*), coalesce(sum(term_count), 0) FROM phx_memories WHERE namespace = ?", (namespace,)
            ) or (0, 0)
            marks = tx.dialect.placeholders(len(query_terms))
            df = {
                str(term): int(n)
                for term, n in tx.all(
                    f"SELECT term, count(*) FROM phx_memory_terms WHERE namespace = ? AND term IN ({marks}) "  # noqa: S608 - '?' placeholders only
                    "GROUP BY term",
                    [namespace, *query_terms],
                )
            }
            tag_sql, tag_args = self._tag_filter(tx, clean_tags)
            time_sql, time_args = self._window_filter(low, high)
            rows = tx.all(
                "SELECT t.memory_id, t.term, t.tf, m.term_count, m.created_ms, m.seq FROM phx_memory_terms t "  # noqa: S608 - fragments and '?' placeholders only
                f"JOIN phx_memories m ON m.id = t.memory_id WHERE t.namespace = ? AND t.term IN ({marks}) "
                f"AND m.namespace = ?{tag_sql}{time_sql}",
                [namespace, *query_terms, namespace, *tag_args, *time_args],
            )
            docs: dict[str, dict[str, int]] = {}
            about: dict[str, tuple[int, int, int]] = {}
            for memory_id, term, tf, length, created_ms, seq in rows:  # text and integers on both engines
                doc = docs.get(memory_id)
                if doc is None:
                    doc = docs[memory_id] = {}
                    about[memory_id] = (length, created_ms, seq)
                doc[term] = tf
            mean = int(total) / int(count) if count else 0.0
            bm25 = bm25_scorer(query_terms, df=df, count=int(count), mean_length=mean)
            scored = []
            for memory_id, doc in docs.items():
                length, created_ms, seq = about[memory_id]
                score = round(bm25(doc, length), 6)
                if score > 0 and score >= floor:
                    scored.append((memory_id, score, created_ms, seq))
            return scored

        def fetch(tx: Tx, ids: builtins.list[str]) -> dict[str, MemoryRecord]:
            if not ids:
                return {}
            sql = f"SELECT {_COLUMNS} FROM phx_memories m WHERE m.id IN ({tx.dialect.placeholders(len(ids))})"  # noqa: S608 - constant and '?' placeholders
            return {str(row[0]): self._record(tx, row) for row in tx.all(sql, ids)}

        if embedder is None:

            def work(tx: Tx) -> builtins.list[tuple[MemoryRecord, float]]:
                best = sorted(lexical(tx), key=lambda r: (-r[1], -r[2], -r[3]))[:k]
                records = fetch(tx, [r[0] for r in best])
                return [(records[r[0]], r[1]) for r in best if r[0] in records]

            return self._read_analyzed(namespace, work)

        from phoenix_protocol.store._recall import fuse

        semantic = self._semantic(namespace, query, embedder, clean_tags, low, high)
        matches = self._read_analyzed(namespace, lexical)
        order = {r[0]: (r[2], r[3]) for r in matches} | {r[0]: (r[2], r[3]) for r in semantic}
        lexical_rank = [r[0] for r in sorted(matches, key=lambda r: (-r[1], -r[2], -r[3]))]
        semantic_rank = [r[0] for r in sorted(semantic, key=lambda r: (-r[1], -r[2], -r[3]))]
        fused = fuse([lexical_rank, semantic_rank])
        best_ids = sorted(fused, key=lambda i: (-round(fused[i], 6), -order[i][0], -order[i][1]))[:k]
        records = self.db.read(lambda tx: fetch(tx, best_ids))
        return [(records[i], round(fused[i], 6)) for i in best_ids if i in records]

    def _semantic(
        self,
        namespace: str,
        query: str,
        embedder: Embedder,
        tags: builtins.list[str],
        low: int | None,
        high: int | None,
    ) -> builtins.list[tuple[str, float, int, int]]:
        """``(id, cosine, created_ms, seq)`` of the memories (filtered) whose embedding is at least
        ``MIN_COSINE`` from the query's; missing embeddings are computed and stored first."""
        import importlib

        from phoenix_protocol.store._recall import MIN_COSINE

        np = importlib.import_module("numpy")  # the [persona] extra's, like the embedder itself
        model = embedder.name

        def read(tx: Tx) -> builtins.list[Any]:
            tag_sql, tag_args = self._tag_filter(tx, tags)
            time_sql, time_args = self._window_filter(low, high)
            sql = (
                "SELECT m.id, CASE WHEN v.vector IS NULL THEN m.text END, m.created_ms, m.seq, v.vector "  # noqa: S608 - fragments and '?' placeholders only
                "FROM phx_memories m "
                "LEFT JOIN phx_memory_vectors v ON v.memory_id = m.id AND v.model = ? "
                f"WHERE m.namespace = ?{tag_sql}{time_sql}"
            )
            return tx.all(sql, [model, namespace, *tag_args, *time_args])

        rows = self.db.read(read)
        if not rows:
            return []
        missing = [i for i, row in enumerate(rows) if row[4] is None]
        vectors: dict[int, Any] = {}
        if missing:
            from phoenix_protocol.core._redact import redact

            encoded = embedder.encode([redact(str(rows[i][1])) for i in missing])
            for j, i in enumerate(missing):
                vectors[i] = np.asarray(encoded[j], dtype="<f4")
            blobs = [(rows[i][0], vectors[i].tobytes()) for i in missing]

            def write(tx: Tx) -> None:
                tx.executemany(
                    "INSERT INTO phx_memory_vectors (memory_id, model, vector) SELECT ?, ?, ? "
                    "WHERE EXISTS (SELECT 1 FROM phx_memories WHERE id = ?) ON CONFLICT (memory_id, model) DO NOTHING",
                    [(memory_id, model, blob, memory_id) for memory_id, blob in blobs],
                )

            self._write(write)
        for i, row in enumerate(rows):
            if i not in vectors:
                vectors[i] = np.frombuffer(bytes(row[4]), dtype="<f4")
        matrix = np.stack([vectors[i] for i in range(len(rows))])
        query_vector = np.asarray(embedder.encode([query])[0], dtype="<f4")
        cosines = matrix @ query_vector
        out = []
        for i, row in enumerate(rows):
            cosine = round(float(cosines[i]), 6)
            if cosine >= MIN_COSINE:
                out.append((str(row[0]), cosine, int(row[2]), int(row[3])))
        return out

    def list(
        self,
        namespace: str,
        *,
        tags: Any = None,
        limit: int = 50,
        offset: int = 0,
        since: Any = None,
        until: Any = None,
    ) -> builtins.list[MemoryRecord]:
        """Memories of ``namespace``, newest first (``since``/``until`` as in ``recall``)."""
        clean_tags = _check_list(namespace, tags, limit, offset)
        low, high = _check_window(since, until)

        def work(tx: Tx) -> builtins.list[MemoryRecord]:
            tag_sql, tag_args = self._tag_filter(tx, clean_tags)
            time_sql, time_args = self._window_filter(low, high)
            sql = (
                f"SELECT {_COLUMNS} FROM phx_memories m WHERE m.namespace = ?{tag_sql}{time_sql} "  # noqa: S608 - fragments and '?' placeholders only
                "ORDER BY m.created_ms DESC, m.seq DESC LIMIT ? OFFSET ?"
            )
            rows = tx.all(sql, [namespace, *tag_args, *time_args, limit, offset])
            return [self._record(tx, row) for row in rows]

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
