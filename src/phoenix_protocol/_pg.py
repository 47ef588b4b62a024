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

from phoenix_protocol._errors import ConfigError, SchemaVersionError, StorageError

if TYPE_CHECKING:
    import psycopg
    from psycopg_pool import ConnectionPool

__all__ = [
    "MIGRATIONS",
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
ADVISORY_KEY = 0x50484F454E4958  # "PHOENIX": serializes migrations across processes
CONNECT_TIMEOUT = 5
RETRIES = 3


class PgError(StorageError):
    """The PostgreSQL server refused or lost an operation; ``server`` names it (no password)."""

    def __init__(self, message: str, *, server: str) -> None:
        super().__init__(message)
        self.server = server


def is_postgres_url(value: str | None) -> bool:
    return bool(value) and str(value).startswith(SCHEMES)


def _require() -> Any:
    try:
        import psycopg
    except ImportError:
        raise ConfigError("the PostgreSQL store needs psycopg: pip install 'phoenix-protocol[postgres]'.") from None
    return psycopg


def describe(url: str) -> str:
    """``host:port/dbname`` (and the schema, when the URL sets one): the server, never the password."""
    psycopg = _require()
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
_ready: set[tuple[int, str]] = set()


def pool(url: str, *, max_size: int = 10) -> ConnectionPool:
    """The process's pool for ``url`` (a forked child gets its own, never its parent's sockets)."""
    key = (os.getpid(), url)
    found = _pools.get(key)
    if found is not None:
        return found
    psycopg = _require()
    import logging

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
            _ready.discard(key)


def _reason(exc: BaseException) -> str:
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text[:300]


def _retryable(exc: BaseException) -> bool:
    """A failure that happened before anything was committed and that a fresh connection may not meet."""
    psycopg = _require()
    if isinstance(exc, psycopg.errors.SerializationFailure | psycopg.errors.DeadlockDetected):
        return True
    if isinstance(exc, psycopg.errors.AdminShutdown | psycopg.errors.IdleSessionTimeout):
        return True
    return isinstance(exc, psycopg.OperationalError) and not isinstance(exc, psycopg.errors.QueryCanceled)


@contextmanager
def _connection(url: str) -> Iterator[psycopg.Connection[Any]]:
    p = pool(url)
    try:
        with p.connection() as conn:
            yield conn
    except StorageError:
        raise
    except Exception as exc:
        psycopg = _require()
        if isinstance(exc, psycopg.Error) or type(exc).__module__.startswith("psycopg_pool"):
            raise PgError(f"PostgreSQL server {describe(url)}: {_reason(exc)}", server=describe(url)) from exc
        raise


def transaction(url: str, work: Callable[[psycopg.Connection[Any]], T], *, retry: bool) -> T:
    """Run ``work(conn)`` in one transaction and commit. ``retry``: run it again (up to 3 times)
    on a fresh connection when the connection failed before the commit was sent."""
    ensure_schema(url)
    psycopg = _require()
    attempt = 0
    while True:
        attempt += 1
        committing = False
        try:
            with _connection(url) as conn:
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
            if retry and not committing and cause is not None and _retryable(cause) and attempt < RETRIES:
                time.sleep(0.05 * attempt)
                continue
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

MIGRATIONS: list[tuple[int, str, str]] = [
    (
        1,
        "teams: tasks, mailbox, cursors, acks, heartbeats, checkpoints",
        """
        CREATE TABLE phx_teams (
            team_id     text PRIMARY KEY,
            metadata    jsonb NOT NULL,
            roster      jsonb NOT NULL DEFAULT '[]'::jsonb,
            created_ms  bigint NOT NULL
        );
        CREATE TABLE phx_tasks (
            team_id      text NOT NULL REFERENCES phx_teams(team_id) ON DELETE CASCADE,
            task_id      text NOT NULL,
            position     integer NOT NULL,
            status       text NOT NULL,
            assigned_to  text,
            dependencies text[] NOT NULL DEFAULT '{}',
            record       jsonb NOT NULL,
            PRIMARY KEY (team_id, task_id)
        );
        CREATE INDEX phx_tasks_ready ON phx_tasks (team_id, position) WHERE status = 'pending';
        CREATE TABLE phx_team_seq (
            team_id   text PRIMARY KEY REFERENCES phx_teams(team_id) ON DELETE CASCADE,
            last_seq  bigint NOT NULL DEFAULT 0
        );
        CREATE TABLE phx_messages (
            team_id    text NOT NULL REFERENCES phx_teams(team_id) ON DELETE CASCADE,
            seq        bigint NOT NULL,
            msg_id     text NOT NULL,
            sender     text NOT NULL,
            recipient  text NOT NULL,
            type       text NOT NULL,
            subject    text NOT NULL,
            body       text NOT NULL,
            ts         text NOT NULL,
            ts_ms      bigint NOT NULL,
            PRIMARY KEY (team_id, seq),
            UNIQUE (team_id, msg_id)
        );
        CREATE INDEX phx_messages_to ON phx_messages (team_id, recipient, seq);
        CREATE TABLE phx_cursors (
            team_id    text NOT NULL REFERENCES phx_teams(team_id) ON DELETE CASCADE,
            reader     text NOT NULL,
            delivered  bigint NOT NULL DEFAULT 0,
            PRIMARY KEY (team_id, reader)
        );
        CREATE TABLE phx_acks (
            team_id   text NOT NULL,
            seq       bigint NOT NULL,
            reader    text NOT NULL,
            acked_ms  bigint NOT NULL,
            PRIMARY KEY (team_id, seq, reader),
            FOREIGN KEY (team_id, seq) REFERENCES phx_messages(team_id, seq) ON DELETE CASCADE
        );
        CREATE TABLE phx_heartbeats (
            team_id     text NOT NULL REFERENCES phx_teams(team_id) ON DELETE CASCADE,
            name        text NOT NULL,
            seq         bigint NOT NULL,
            ms          bigint NOT NULL,
            session_id  text,
            host        text,
            pid         integer,
            PRIMARY KEY (team_id, name)
        );
        CREATE TABLE phx_team_checkpoints (
            team_id  text NOT NULL REFERENCES phx_teams(team_id) ON DELETE CASCADE,
            seq      bigint NOT NULL,
            kind     text NOT NULL,
            record   jsonb NOT NULL,
            PRIMARY KEY (team_id, seq)
        );
        CREATE INDEX phx_team_checkpoints_kind ON phx_team_checkpoints (team_id, kind, seq DESC);
        """,
    ),
    (
        2,
        "memory: namespaced memories with full-text search",
        """
        CREATE FUNCTION phx_words(text[]) RETURNS text LANGUAGE sql IMMUTABLE PARALLEL SAFE
            AS $$ SELECT array_to_string($1, ' ') $$;
        CREATE TABLE phx_memories (
            id          text PRIMARY KEY,
            namespace   text NOT NULL,
            text        text NOT NULL,
            tags        text[] NOT NULL DEFAULT '{}',
            metadata    jsonb NOT NULL DEFAULT '{}'::jsonb,
            created_ms  bigint NOT NULL,
            document    tsvector GENERATED ALWAYS AS (
                to_tsvector('english'::regconfig, text || ' ' || phx_words(tags))
            ) STORED
        );
        CREATE INDEX phx_memories_namespace ON phx_memories (namespace, created_ms DESC);
        CREATE INDEX phx_memories_document ON phx_memories USING gin (document);
        CREATE INDEX phx_memories_tags ON phx_memories USING gin (tags);
        """,
    ),
    (
        3,
        "mailbox: a byte counter and an index of broadcasts (inboxes stay fast as the mailbox grows)",
        """
        ALTER TABLE phx_team_seq ADD COLUMN bytes bigint NOT NULL DEFAULT 0;
        UPDATE phx_team_seq s SET bytes = coalesce((SELECT sum(octet_length(m.subject) + octet_length(m.body))
            FROM phx_messages m WHERE m.team_id = s.team_id), 0);
        CREATE INDEX phx_messages_broadcast ON phx_messages (team_id, seq) WHERE recipient = '*';
        """,
    ),
    (
        4,
        "mailbox: counters that make a reader's unread count constant-time",
        """
        ALTER TABLE phx_team_seq ADD COLUMN broadcasts bigint NOT NULL DEFAULT 0;
        CREATE TABLE phx_mailbox_counts (
            team_id          text NOT NULL REFERENCES phx_teams(team_id) ON DELETE CASCADE,
            name             text NOT NULL,
            direct           bigint NOT NULL DEFAULT 0,
            broadcasts_sent  bigint NOT NULL DEFAULT 0,
            PRIMARY KEY (team_id, name)
        );
        ALTER TABLE phx_cursors ADD COLUMN addressed bigint NOT NULL DEFAULT 0;
        UPDATE phx_team_seq s SET broadcasts = (SELECT count(*) FROM phx_messages m
            WHERE m.team_id = s.team_id AND m.recipient = '*');
        INSERT INTO phx_mailbox_counts (team_id, name, direct, broadcasts_sent)
            SELECT team_id, name, sum(direct), sum(sent) FROM (
                SELECT team_id, recipient AS name, count(*) AS direct, 0 AS sent FROM phx_messages
                    WHERE recipient <> '*' GROUP BY team_id, recipient
                UNION ALL
                SELECT team_id, sender, 0, count(*) FROM phx_messages WHERE recipient = '*' GROUP BY team_id, sender
            ) AS c GROUP BY team_id, name;
        UPDATE phx_cursors c SET addressed = (SELECT count(*) FROM phx_messages m WHERE m.team_id = c.team_id
            AND m.seq <= c.delivered AND (m.recipient = c.reader OR (m.recipient = '*' AND m.sender <> c.reader)));
        """,
    ),
    (
        5,
        "agents' checkpoints (envelopes, a seq counter per agent, operation outcomes) and sessions",
        """
        CREATE TABLE phx_checkpoint_seq (
            agent_id  text PRIMARY KEY,
            next_seq  bigint NOT NULL
        );
        CREATE TABLE phx_checkpoints (
            agent_id         text NOT NULL,
            seq              bigint NOT NULL,
            name             text NOT NULL,
            checkpoint_type  text NOT NULL,
            timestamp_ms     bigint NOT NULL,
            label            text,
            operation_id     text,
            size             integer NOT NULL,
            content          bytea NOT NULL,
            PRIMARY KEY (agent_id, seq),
            UNIQUE (agent_id, name)
        );
        CREATE INDEX phx_checkpoints_by_type ON phx_checkpoints (agent_id, checkpoint_type, seq DESC);
        CREATE TABLE phx_checkpoint_operations (
            agent_id  text NOT NULL,
            line      bigserial,
            op_id     text NOT NULL,
            outcome   text NOT NULL,
            at        text NOT NULL,
            PRIMARY KEY (agent_id, line)
        );
        CREATE INDEX phx_checkpoint_operations_done ON phx_checkpoint_operations (agent_id, op_id)
            WHERE outcome = 'succeeded';
        CREATE TABLE phx_session_current (
            agent_id  text PRIMARY KEY,
            record    text NOT NULL
        );
        CREATE TABLE phx_session_log (
            agent_id  text NOT NULL,
            seq       bigint NOT NULL,
            line      text NOT NULL,
            PRIMARY KEY (agent_id, seq)
        );
        """,
    ),
    (
        6,
        "agents' state (one record per agent, with its revision) and every copy's ops events",
        """
        CREATE TABLE phx_agent_state (
            agent_id    text PRIMARY KEY,
            state       text NOT NULL,
            rev         bigint NOT NULL,
            origin      text NOT NULL,
            host        text,
            updated_at  timestamptz NOT NULL DEFAULT now()
        );
        CREATE TABLE phx_ops_events (
            agent_id  text NOT NULL,
            origin    text NOT NULL,
            seq       bigint NOT NULL,
            ts        text NOT NULL,
            event     text NOT NULL,
            status    text NOT NULL,
            line      text NOT NULL,
            PRIMARY KEY (agent_id, origin, seq)
        );
        CREATE INDEX phx_ops_events_by_seq ON phx_ops_events (agent_id, seq);
        """,
    ),
    (
        7,
        "agents' identities (identity.yaml and its seal)",
        """
        CREATE TABLE phx_identity (
            agent_id  text PRIMARY KEY,
            document  bytea NOT NULL,
            digest    text
        );
        """,
    ),
]
"""``(version, description, SQL)``, applied in order, each in the transaction that records it."""

LATEST = MIGRATIONS[-1][0]

_BOOKKEEPING = """
CREATE TABLE IF NOT EXISTS phx_schema_migrations (
    version     integer PRIMARY KEY,
    description text NOT NULL,
    applied_at  timestamptz NOT NULL DEFAULT now()
)
"""


def _current(conn: psycopg.Connection[Any]) -> int:
    row = conn.execute("SELECT to_regclass('phx_schema_migrations') IS NOT NULL").fetchone()
    if not row or not row[0]:
        return 0
    found = conn.execute("SELECT coalesce(max(version), 0) FROM phx_schema_migrations").fetchone()
    return int(found[0]) if found else 0


def _refuse_newer(url: str, current: int) -> None:
    if current > LATEST:
        raise SchemaVersionError(
            f"the PostgreSQL store {describe(url)} was migrated by a newer Phoenix (schema {current}; this one "
            f"knows up to {LATEST}): upgrade phoenix-protocol.",
            found=current,
            supported=LATEST,
        )


def migrate(url: str) -> list[dict[str, Any]]:
    """Apply every pending migration (one transaction each, under the advisory lock); returns
    what was applied."""
    applied: list[dict[str, Any]] = []
    with _connection(url) as conn:
        for version, description, sql in MIGRATIONS:
            with conn.transaction():
                conn.execute("SELECT pg_advisory_xact_lock(%s)", (ADVISORY_KEY,))
                conn.execute(_BOOKKEEPING)
                current = _current(conn)
                _refuse_newer(url, current)
                if version <= current:
                    continue
                conn.execute(sql.encode())
                conn.execute(
                    "INSERT INTO phx_schema_migrations (version, description) VALUES (%s, %s)", (version, description)
                )
                applied.append({"version": version, "description": description})
        conn.commit()
    _ready.add((os.getpid(), url))
    return applied


def status(url: str) -> dict[str, Any]:
    """``{server, current, latest, pending: [...], applied: [...]}``."""
    with _connection(url) as conn:
        current = _current(conn)
        rows: list[tuple[Any, ...]] = []
        if current:
            rows = conn.execute(
                "SELECT version, description, applied_at FROM phx_schema_migrations ORDER BY version"
            ).fetchall()
        conn.rollback()
    return {
        "server": describe(url),
        "current": current,
        "latest": LATEST,
        "applied": [{"version": v, "description": d, "applied_at": a.isoformat()} for v, d, a in rows],
        "pending": [{"version": v, "description": d} for v, d, _sql in MIGRATIONS if v > current],
    }


def ensure_schema(url: str) -> None:
    """Migrate on first use in this process; refuse a database a newer Phoenix migrated."""
    key = (os.getpid(), url)
    if key in _ready:
        return
    with _connection(url) as conn:
        current = _current(conn)
        conn.rollback()
    _refuse_newer(url, current)
    if current < LATEST:
        migrate(url)
    _ready.add(key)
