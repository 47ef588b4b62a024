"""The OpenAI Agents SDK's session on Phoenix's SQL store (``phoenix_protocol.integrations.openai_agents``).

``PhoenixSession.from_home(session_id, home)`` (or ``PhoenixSession(session_id, db)``) is a
``SessionABC`` on a home's database (``store._db.open_database``: ``phoenix.db`` on SQLite, or the
PostgreSQL server ``store`` names), in the tables of migration 16: ``phx_oa_sessions`` (one row per
session: its item counter and times) and ``phx_oa_items`` (one row per item, in ``seq`` order; the
item as JSON text, its ``schema_version`` beside it).

Every item passes the secret redactor before it is stored (``core._redact.redact_value``), as every
Phoenix store's text does, except the value of an ``encrypted_content`` member (a reasoning item's
opaque blob, which the model provider encrypted and must get back byte for byte). The SDK is async:
each method runs its one transaction in a worker thread (``asyncio.to_thread``, as ``PhoenixSaver``
does: each thread has its own connection on SQLite, the pool's on PostgreSQL), so the event loop
never waits on the database; a write that is cancelled still finishes (a thread cannot be stopped),
and the cancellation reaches the caller once it has.

``add_items`` takes its seqs from the session's counter in the statement that bumps it (the session
row stays locked on PostgreSQL until the commit), ``pop_item`` locks that row before it takes the
newest item: two processes sharing a session never give two items one seq nor pop one item twice.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar, cast

try:
    from agents.items import TResponseInputItem
    from agents.memory.session import SessionABC
    from agents.memory.session_settings import SessionSettings, coerce_session_settings, resolve_session_limit
except ImportError as exc:  # pragma: no cover - the extra's absence is tested in a subprocess
    raise ImportError(
        "phoenix_protocol.integrations.openai_agents needs the OpenAI Agents SDK: "
        "pip install 'phoenix-protocol[openai-agents]'"
    ) from exc

from phoenix_protocol.core._clock import Clock, system_clock
from phoenix_protocol.core._errors import CorruptStateError, SchemaVersionError, UsageError
from phoenix_protocol.core._ids import validate_id
from phoenix_protocol.core._jsonio import JSONError, dumps_line, loads

if TYPE_CHECKING:
    from phoenix_protocol.core._config import Config
    from phoenix_protocol.core._home import Home
    from phoenix_protocol.store._db import Database, Row, Tx

__all__ = ["ITEM_SCHEMA_VERSION", "PhoenixSession"]

ITEM_SCHEMA_VERSION = 1
"""The version of a stored item's record (the ``schema_version`` column); a newer one is refused."""

_OPAQUE = "encrypted_content"
"""The one member the redactor leaves alone: a provider's encrypted blob, returned to it as it came."""

T = TypeVar("T")


def _redacted(item: object) -> object:
    """``item`` with every string redacted, the top-level ``encrypted_content`` kept as it is."""
    from phoenix_protocol.core._redact import redact_value

    if not isinstance(item, dict) or _OPAQUE not in item:
        return redact_value(item)
    clean = cast("dict[str, Any]", redact_value({k: v for k, v in item.items() if k != _OPAQUE}))
    return {k: item[k] if k == _OPAQUE else clean[k] for k in item}


async def _settled(work: Callable[[], T]) -> T:
    """``work()`` in a worker thread, awaited to its end even when the caller is cancelled (the
    thread would go on anyway): the cancellation is raised once the write is done or undone."""
    task = asyncio.ensure_future(asyncio.to_thread(work))
    cancelled: asyncio.CancelledError | None = None
    while not task.done():
        try:
            await asyncio.wait({task})
        except asyncio.CancelledError as exc:
            cancelled = cancelled or exc
    if cancelled is not None:
        raise cancelled
    return task.result()


class PhoenixSession(SessionABC):
    """An OpenAI Agents SDK conversation history in a Phoenix database.

    ``session_settings.limit`` (or ``get_items(limit=...)``) bounds the history a run replays: the
    newest items, oldest first. The store keeps every item until ``pop_item`` or ``clear_session``.
    """

    def __init__(
        self,
        session_id: str,
        db: Database,
        *,
        session_settings: SessionSettings | dict[str, Any] | None = None,
        clock: Clock | None = None,
    ) -> None:
        self.session_id = validate_id(session_id, "session id")
        self.db = db
        self.session_settings = (
            coerce_session_settings(session_settings) if session_settings is not None else SessionSettings()
        )
        self.clock = clock or system_clock

    @classmethod
    def from_home(
        cls,
        session_id: str,
        home: Home | str,
        *,
        config: Config | None = None,
        session_settings: SessionSettings | dict[str, Any] | None = None,
    ) -> PhoenixSession:
        """A session on ``home``'s database: the store its configuration names (``phoenix.db`` in the
        home, or ``PHOENIX_STORE``'s PostgreSQL server), read once here unless ``config`` is given."""
        from phoenix_protocol.core._home import Home
        from phoenix_protocol.store._db import open_database

        db = open_database(home if isinstance(home, Home) else Home(str(home)), config)
        return cls(session_id, db, session_settings=session_settings)

    # -- the rows ----------------------------------------------------------------------------

    def _item(self, row: Row) -> TResponseInputItem:
        seq, version, text = row
        if int(version) > ITEM_SCHEMA_VERSION:
            raise SchemaVersionError(
                f"item {seq} of session {self.session_id!r} in {self.db.where} was written by a newer Phoenix "
                f"(schema_version {version}; this one knows up to {ITEM_SCHEMA_VERSION}): upgrade phoenix-protocol.",
                path=self.db.where,
                found=int(version),
                supported=ITEM_SCHEMA_VERSION,
            )
        try:
            value = loads(str(text))
        except JSONError as exc:
            raise CorruptStateError(
                f"item {seq} of session {self.session_id!r} in {self.db.where} is not JSON ({exc}); "
                "pop_item() removes the newest item, clear_session() the whole session.",
                path=self.db.where,
            ) from None
        return cast("TResponseInputItem", value)

    def _get(self, limit: int | None) -> list[TResponseInputItem]:
        if limit is not None and limit < 0:
            raise UsageError(f"limit must be 0 or more (None for every item), not {limit}.")
        select = "SELECT seq, schema_version, item FROM phx_oa_items WHERE session_id = ?"

        def work(tx: Tx) -> list[Row]:
            if limit is None:
                return tx.all(select + " ORDER BY seq", (self.session_id,))
            rows = tx.all(select + " ORDER BY seq DESC LIMIT ?", (self.session_id, limit)) if limit else []
            rows.reverse()
            return rows

        return [self._item(row) for row in self.db.read(work)]

    def _add(self, items: list[TResponseInputItem]) -> None:
        texts = []
        for index, item in enumerate(items):
            try:
                texts.append(dumps_line(_redacted(item)))
            except (JSONError, TypeError) as exc:
                raise UsageError(f"item {index} cannot be stored as JSON: {exc}") from None
        now = self.clock.now_ms()

        def work(tx: Tx) -> None:
            # fetched whole (``all``): SQLite finishes an ``INSERT … RETURNING`` on its last row
            (returned,) = tx.all(
                "INSERT INTO phx_oa_sessions (session_id, last_seq, created_ms, updated_ms) VALUES (?, ?, ?, ?) "
                "ON CONFLICT (session_id) DO UPDATE SET last_seq = phx_oa_sessions.last_seq + excluded.last_seq, "
                "updated_ms = excluded.updated_ms RETURNING last_seq",
                (self.session_id, len(texts), now, now),
            )
            last = int(returned[0])
            first = last - len(texts) + 1
            tx.executemany(
                "INSERT INTO phx_oa_items (session_id, seq, schema_version, item) VALUES (?, ?, ?, ?)",
                [(self.session_id, first + i, ITEM_SCHEMA_VERSION, text) for i, text in enumerate(texts)],
            )

        self.db.transaction(work)

    def _pop(self) -> TResponseInputItem | None:
        now = self.clock.now_ms()

        def work(tx: Tx) -> Row | None:
            lock = "SELECT last_seq FROM phx_oa_sessions WHERE session_id = ?" + tx.dialect.for_update  # noqa: S608
            locked = tx.one(lock, (self.session_id,))
            if locked is None:
                return None
            row = tx.one(
                "SELECT seq, schema_version, item FROM phx_oa_items WHERE session_id = ? ORDER BY seq DESC LIMIT 1",
                (self.session_id,),
            )
            if row is None:
                return None
            self._item(row)  # refused before anything is deleted
            tx.execute("DELETE FROM phx_oa_items WHERE session_id = ? AND seq = ?", (self.session_id, row[0]))
            tx.execute("UPDATE phx_oa_sessions SET updated_ms = ? WHERE session_id = ?", (now, self.session_id))
            return row

        row = self.db.transaction(work)
        return None if row is None else self._item(row)

    def _clear(self) -> None:
        def work(tx: Tx) -> None:
            tx.execute("DELETE FROM phx_oa_items WHERE session_id = ?", (self.session_id,))
            tx.execute("DELETE FROM phx_oa_sessions WHERE session_id = ?", (self.session_id,))

        self.db.transaction(work)

    # -- the SDK's interface -----------------------------------------------------------------

    async def get_items(self, limit: int | None = None) -> list[TResponseInputItem]:
        """The history, oldest first: every item, or the newest ``limit`` (default:
        ``session_settings.limit``; 0 gives none)."""
        return await asyncio.to_thread(self._get, resolve_session_limit(limit, self.session_settings))

    async def add_items(self, items: list[TResponseInputItem]) -> None:
        """Append ``items`` (redacted) in one transaction."""
        if items:
            await _settled(lambda: self._add(list(items)))

    async def pop_item(self) -> TResponseInputItem | None:
        """Remove and return the newest item (``None`` when the session is empty)."""
        return await _settled(self._pop)

    async def clear_session(self) -> None:
        """Remove every item of the session, and the session."""
        await _settled(self._clear)
