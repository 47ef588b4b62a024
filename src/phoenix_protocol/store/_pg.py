"""PostgreSQL plumbing for the ``postgresql://`` store: where the server is, one connection pool
per server per process, transactions with transparent retry for safe operations, error mapping,
and versioned schema migrations.

``PHOENIX_STORE=postgresql://user@host:5432/db`` (or ``store = "postgresql://…"`` in
``phoenix.toml``) selects the backend. Put the password in ``~/.pgpass`` or ``$PGPASSWORD``, not
in the URL: Phoenix never prints a password (``describe`` drops it) but a URL in a config file is
a secret in clear. A schema other than ``public`` is chosen the libpq way,
``?options=-csearch_path%3Dmy_schema``.

Migrations are applied on first use in each process (``ensure_schema``) under a transaction-level
advisory lock, so that concurrent first users wait for one another instead of racing;
``phx db migrate`` and ``phx db status`` do the same by hand. A database migrated by a newer
Phoenix is refused (``SchemaVersionError``), never written.

Faults: an operation runs in one transaction, so a connection killed in the middle
(``pg_terminate_backend``, a network cut) leaves nothing half-written. ``transaction(...,
retry=True)`` runs it again on a fresh connection when the failure happened before the commit was
sent (reads, upserts, idempotent writes); with ``retry=False`` the error is raised at once
(``StorageError`` naming the server), and a commit whose outcome is unknown is never retried.

Needs the ``[postgres]`` extra (psycopg 3 and psycopg-pool); nothing here is imported on the
file store's paths.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, TypeVar

from phoenix_protocol.core._errors import ConfigError, StorageError

if TYPE_CHECKING:
    import psycopg
    from psycopg_pool import ConnectionPool

    from phoenix_protocol.store._db import PostgresDatabase

__all__ = [
    "PgBound",
    "PgError",
    "describe",
    "ensure_schema",
    "is_postgres_url",
    "migrate",
    "pool",
    "status",
    "transaction",
]

T = TypeVar("T")

SCHEMES = ("postgresql://", "postgres://")
CONNECT_TIMEOUT = 5
POOL_WAIT = 10.0
POOL_FIRST_WAIT = 0.25
BROKEN_FOR = 5.0
"""After a connection was lost, transactions use connections of their own, not the pool's (whose
idle ones may be dead too), for this long: the pool refills with a growing back-off meanwhile."""
_broken_until: dict[tuple[int, str], float] = {}
"""Longest wait for a free pooled connection (all of them busy in other threads)."""
RETRIES = 3
"""Attempts of a transaction whose connection failed before its commit was sent (the later ones on
a new connection, not the pool's): a server dropping every connection gives a clear error in
well under a second instead of minutes of waits."""


class PgError(StorageError):
    """The PostgreSQL server refused or lost an operation; ``server`` names it (no password)."""

    def __init__(self, message: str, *, server: str) -> None:
        super().__init__(message)
        self.server = server


def is_postgres_url(value: str | None) -> bool:
    return bool(value) and str(value).startswith(SCHEMES)


def _require() -> None:
    """``ConfigError`` unless psycopg can be imported (its importers then import it)."""
    try:
        import psycopg  # noqa: F401
    except ImportError:
        raise ConfigError("the PostgreSQL store needs psycopg: pip install 'phoenix-protocol[postgres]'.") from None


def describe(url: str) -> str:
    """``host:port/dbname`` (and the schema, when the URL sets one): the server, never the password."""
    _require()
    import psycopg

    try:
        params = psycopg.conninfo.conninfo_to_dict(url)
    except psycopg.ProgrammingError as exc:
        raise ConfigError(f"PHOENIX_STORE is not a valid PostgreSQL URL: {exc}".rstrip(".") + ".") from None
    host = params.get("host") or os.environ.get("PGHOST") or "localhost"
    port = params.get("port") or os.environ.get("PGPORT") or "5432"
    db = params.get("dbname") or os.environ.get("PGDATABASE") or params.get("user") or "postgres"
    where = f"postgresql://{host}:{port}/{db}"
    options = str(params.get("options") or "")
    if "search_path" in options:
        where += f" ({options.split('search_path', 1)[1].lstrip('=').split()[0]})"
    return where


# -- pools -------------------------------------------------------------------------------------

_pools: dict[tuple[int, str], ConnectionPool] = {}
_pools_lock = threading.Lock()
ready: set[tuple[int, str]] = set()
"""``(pid, url)`` of the databases this process has migrated."""


def pool(url: str, *, max_size: int = 10) -> ConnectionPool:
    """The process's pool for ``url`` (a forked child gets its own, never its parent's sockets)."""
    key = (os.getpid(), url)
    found = _pools.get(key)
    if found is not None:
        return found
    _require()
    import logging

    import psycopg
    from psycopg_pool import ConnectionPool, PoolTimeout

    # The pool logs failed attempts; with no logging configured Python would print them.
    logging.getLogger("psycopg.pool").addHandler(logging.NullHandler())
    with _pools_lock:
        found = _pools.get(key)
        if found is None:
            try:  # one direct attempt first: a server that is not there fails fast, with its reason
                psycopg.connect(url, connect_timeout=CONNECT_TIMEOUT).close()
            except psycopg.Error as exc:
                raise PgError(
                    f"cannot reach the PostgreSQL server {describe(url)}: {_reason(exc)} "
                    "(is it running, and does PHOENIX_STORE name it?).",
                    server=describe(url),
                ) from None
            found = ConnectionPool(
                url,
                min_size=1,
                max_size=max(1, max_size),
                kwargs={"connect_timeout": CONNECT_TIMEOUT, "autocommit": False},
                timeout=CONNECT_TIMEOUT * 2,
                open=False,
                name=f"phoenix-{os.getpid()}",
                check=ConnectionPool.check_connection,
            )
            try:
                found.open(wait=True, timeout=CONNECT_TIMEOUT * 2)
            except PoolTimeout as exc:  # the server went away between the two attempts
                found.close()
                raise PgError(
                    f"cannot reach the PostgreSQL server {describe(url)}: {_reason(exc)} "
                    "(is it running, and does PHOENIX_STORE name it?).",
                    server=describe(url),
                ) from None
            _pools[key] = found
    return found


def close_all() -> None:
    """Close this process's pools (tests, and before a fork)."""
    with _pools_lock:
        for key in [k for k in _pools if k[0] == os.getpid()]:
            _pools.pop(key).close()
            ready.discard(key)


def _reason(exc: BaseException) -> str:
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text[:300]


def _retryable(exc: BaseException) -> bool:
    """A failure that happened before anything was committed and that a fresh connection may not meet."""
    _require()
    import psycopg

    if isinstance(exc, psycopg.errors.SerializationFailure | psycopg.errors.DeadlockDetected):
        return True
    if isinstance(exc, psycopg.errors.AdminShutdown | psycopg.errors.IdleSessionTimeout):
        return True
    return isinstance(exc, psycopg.OperationalError) and not isinstance(exc, psycopg.errors.QueryCanceled)


@contextmanager
def _pooled(url: str) -> Iterator[psycopg.Connection[Any]]:
    """A pooled connection. A pool that has none ready within ``POOL_FIRST_WAIT`` because it is refilling
    (connections lost) is not waited for: a new connection is made directly. Only a pool whose
    every connection is busy in other threads is waited for, up to ``POOL_WAIT``."""
    from psycopg_pool import PoolTimeout

    p = pool(url)
    key = (os.getpid(), url)
    try:
        if _broken_until.get(key, 0.0) > time.monotonic():
            raise PoolTimeout("the pool is refilling after lost connections")
        cm = p.connection(timeout=POOL_FIRST_WAIT)
        conn = cm.__enter__()
    except PoolTimeout:
        stats = p.get_stats()
        if stats.get("pool_size", 0) >= p.max_size and not stats.get("pool_available", 0):
            cm = p.connection(timeout=POOL_WAIT - POOL_FIRST_WAIT)  # busy, not broken: wait
            conn = cm.__enter__()
        else:
            _broken_until[key] = time.monotonic() + BROKEN_FOR
            _require()
            import psycopg

            with psycopg.connect(url, connect_timeout=CONNECT_TIMEOUT, autocommit=False) as direct:
                yield direct
            return
    try:
        yield conn
    except BaseException as exc:
        if not cm.__exit__(type(exc), exc, exc.__traceback__):
            raise
    else:
        cm.__exit__(None, None, None)


@contextmanager
def _connection(url: str, *, direct: bool = False) -> Iterator[psycopg.Connection[Any]]:
    """A connection from the process's pool, or (``direct``) a new one of its own, closed after:
    the retry after a lost connection does not wait for the pool, which refills with a growing
    back-off while the server keeps dropping connections."""
    try:
        if direct:
            _require()
            import psycopg

            with psycopg.connect(url, connect_timeout=CONNECT_TIMEOUT, autocommit=False) as conn:
                yield conn
        else:
            with _pooled(url) as conn:
                yield conn
    except StorageError:
        raise
    except Exception as exc:
        _require()
        import psycopg

        if isinstance(exc, psycopg.Error) or type(exc).__module__.startswith("psycopg_pool"):
            raise PgError(f"PostgreSQL server {describe(url)}: {_reason(exc)}", server=describe(url)) from exc
        raise


def transaction(url: str, work: Callable[[psycopg.Connection[Any]], T], *, retry: bool, ensure: bool = True) -> T:
    """Run ``work(conn)`` in one transaction and commit. ``retry``: run it again (up to 3 times)
    on a fresh connection when the connection failed before the commit was sent. ``ensure``:
    migrate the schema first (on the first use in the process)."""
    if ensure:
        ensure_schema(url)
    _require()
    import psycopg

    attempt = 0
    while True:
        attempt += 1
        committing = False
        try:
            with _connection(url, direct=attempt > 1) as conn:
                try:
                    result = work(conn)
                    committing = True
                    conn.commit()
                    return result
                except BaseException:
                    if not committing and not conn.closed:  # handed back clean (the pool warns otherwise)
                        with contextlib.suppress(psycopg.Error):
                            conn.rollback()
                    raise
        except PgError as exc:
            cause = exc.__cause__
            if cause is not None and _retryable(cause):
                _broken_until[(os.getpid(), url)] = time.monotonic() + BROKEN_FOR
            if retry and not committing and cause is not None and _retryable(cause) and attempt < RETRIES:
                time.sleep(0.02 * attempt)
                continue
            if not committing and cause is not None and _retryable(cause) and retry:
                raise PgError(
                    f"PostgreSQL server {describe(url)} dropped the connection {attempt} times in a row; nothing "
                    f"was written: check the server and try again ({_reason(cause)}).",
                    server=describe(url),
                ) from cause
            if committing:
                raise PgError(
                    f"PostgreSQL server {describe(url)}: the connection was lost while committing, so "
                    f"the outcome is unknown; check before repeating ({_reason(cause or exc)}).",
                    server=describe(url),
                ) from cause
            raise


class PgBound:
    """What a store kept on the server holds: its URL and pool size, and one way to run an
    operation (one transaction, retried only when nothing was sent)."""

    def __init__(self, url: str, *, pool_size: int = 10) -> None:
        self.url = url
        self.pool_size = pool_size

    @property
    def server(self) -> str:
        """``postgresql://host:port/db`` (and the schema), no password."""
        return describe(self.url)

    def _run(self, work: Callable[[psycopg.Connection[Any]], T]) -> T:
        pool(self.url, max_size=self.pool_size)  # the first use in the process sizes the pool
        return transaction(self.url, work, retry=True)


def ids(url: str, sql: str) -> list[str]:
    """The first column of a query without parameters, as strings (e.g. which agents have rows)."""

    def work(conn: psycopg.Connection[Any]) -> list[str]:
        return [str(row[0]) for row in conn.execute(sql.encode()).fetchall()]

    return transaction(url, work, retry=True)


# -- migrations --------------------------------------------------------------------------------
# The schema is the store layer's (``phoenix_protocol.store._schema``, the same migrations on both
# engines); these are the URL-based entry points the PostgreSQL-only modules use.


def _database(url: str) -> PostgresDatabase:
    from phoenix_protocol.store._db import PostgresDatabase

    return PostgresDatabase(url)


def migrate(url: str) -> list[dict[str, Any]]:
    """Apply every pending migration (one transaction each, under the advisory lock); returns
    what was applied."""
    ready.discard((os.getpid(), url))
    return list(_database(url).migrate())


def status(url: str) -> dict[str, Any]:
    """``{server, current, latest, pending: [...], applied: [...]}`` (changes nothing)."""
    from phoenix_protocol.store import _schema

    found = dict(_schema.status(_database(url)))
    found["server"] = found.pop("database")
    return found


def ensure_schema(url: str) -> None:
    """Migrate on first use in this process; refuse a database a newer Phoenix migrated."""
    if (os.getpid(), url) not in ready:
        _database(url).migrate()
