"""One database per home, on either engine, behind one way to run a transaction.

``open_database(home, config)`` is the only code that reads the ``store`` setting:

- ``sqlite`` (the default; ``files``, the earlier releases' name, means the same): ``phoenix.db``
  in the home through the standard library's ``sqlite3``. WAL journal, ``synchronous=FULL`` (a
  transaction that returned is on disk), a busy timeout of ``lock_timeout`` seconds, the file
  0600. A home on a network file system is refused: SQLite's WAL needs shared memory that NFS and
  SMB do not give; use PostgreSQL there, or a local home.
- ``postgresql://…``: the server, through psycopg 3 and one pool per process (``phoenix_protocol.store._pg``).

``Database.transaction(work)`` runs ``work(tx)`` in one transaction and commits; an exception
rolls everything back. SQL is written once, with ``?`` placeholders (``tx.execute``); what differs
between the engines is in ``Dialect``. Failures become ``PhoenixError``s that say what to do:
a file that is not a database (``CorruptStateError``), a lock held past the timeout
(``LockTimeoutError``), a full disk or an I/O error (``StorageError``), a database written by a
newer Phoenix (``SchemaVersionError``, nothing written).
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import threading
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any, Literal, Protocol, TypeAlias, TypeVar, overload

import orjson

from phoenix_protocol.core._durable import FILE_MODE, FileLock
from phoenix_protocol.core._errors import ConfigError, CorruptStateError, LockTimeoutError, StorageError

if TYPE_CHECKING:
    from psycopg.types.json import Jsonb

    from phoenix_protocol.core._config import Config
    from phoenix_protocol.core._home import Home
    from phoenix_protocol.core._jsonio import JSON

__all__ = [
    "DB_NAME",
    "POLL_SECONDS",
    "AgentRows",
    "Database",
    "Dialect",
    "Tx",
    "close_all",
    "is_postgres_url",
    "open_database",
]

T = TypeVar("T")
Engine = Literal["sqlite", "postgresql"]
Row: TypeAlias = tuple[Any, ...]
"""A row as either engine returns it (a tuple; its values' types are the SQL's)."""

DB_NAME = "phoenix.db"
"""The embedded database's file name, in the home."""
POLL_SECONDS = 0.2
"""How often ``Database.wait`` looks again on SQLite."""

_PG_SCHEMES = ("postgresql://", "postgres://")
NETWORK_FILE_SYSTEMS = frozenset(
    {"nfs", "nfs4", "cifs", "smb3", "smbfs", "ncpfs", "afs", "9p", "fuse.sshfs", "fuse.s3fs", "glusterfs", "ceph"}
)


def is_postgres_url(value: str | None) -> bool:
    """``store`` names a PostgreSQL server."""
    return bool(value) and str(value).startswith(_PG_SCHEMES)


class Cursor(Protocol):
    """What a statement returns, on either engine."""

    @property
    def rowcount(self) -> int: ...

    def fetchone(self) -> Row | None: ...

    def fetchall(self) -> list[Row]: ...


class Dialect:
    """What differs between SQLite and PostgreSQL, in one place. Stores ask it, never the engine's name."""

    def __init__(self, name: Engine) -> None:
        self.name: Engine = name
        self._converted: dict[str, str] = {}
        pg = name == "postgresql"
        self.for_update = " FOR UPDATE" if pg else ""
        """A row lock on a read in a write transaction (SQLite's ``BEGIN IMMEDIATE`` already holds the database)."""
        self.skip_locked = " FOR UPDATE SKIP LOCKED" if pg else ""
        """Claim a row other transactions are not holding (SQLite serialises writers instead)."""
        self.now_ms = (
            "CAST(extract(epoch FROM clock_timestamp()) * 1000 AS bigint)"
            if pg
            else "CAST((julianday('now') - 2440587.5) * 86400000 AS INTEGER)"
        )
        """The database server's wall clock in UTC milliseconds, as an SQL expression: one clock for
        every client of a shared store, however theirs disagree."""

    @property
    def postgres(self) -> bool:
        return self.name == "postgresql"

    def sql(self, text: str) -> str:
        """``text`` with ``?`` placeholders as this engine wants them (``%s`` and ``%%`` on PostgreSQL)."""
        if self.name == "sqlite":
            return text
        found = self._converted.get(text)
        if found is None:
            out: list[str] = []
            quoted = False
            for ch in text:
                if ch == "'":
                    quoted = not quoted
                if ch == "%":
                    out.append("%%")
                elif ch == "?" and not quoted:
                    out.append("%s")
                else:
                    out.append(ch)
            found = self._converted[text] = "".join(out)
        return found

    def text_array(self, values: Iterable[str]) -> list[str] | str:
        """A list of strings as a parameter: ``text[]`` on PostgreSQL, JSON text on SQLite."""
        items = list(values)
        return items if self.postgres else orjson.dumps(items).decode()

    def read_text_array(self, value: Any) -> list[str]:
        """A ``text_array`` column read back."""
        if value is None:
            return []
        if isinstance(value, str):
            return [str(v) for v in orjson.loads(value)]
        return [str(v) for v in value]

    def read_json(self, value: object) -> JSON:
        """A JSON column read back (``jsonb`` arrives decoded from PostgreSQL, text from SQLite)."""
        if isinstance(value, str | bytes | bytearray | memoryview):
            return orjson.loads(bytes(value) if isinstance(value, memoryview) else value)
        return value

    def placeholders(self, count: int) -> str:
        """``?, ?, …`` for an ``IN (…)`` list of ``count`` values."""
        return ", ".join("?" * count)

    def json(self, value: object) -> Jsonb | str:
        """A value for a JSON column (``jsonb`` on PostgreSQL, JSON text on SQLite)."""
        if self.postgres:
            from psycopg.types.json import Jsonb

            return Jsonb(value)
        try:
            return orjson.dumps(value).decode()
        except TypeError:  # a lone surrogate read from a hand edit: written back escaped, as read
            from phoenix_protocol.core._jsonio import dumps_line

            return dumps_line(value)

    def array_table(self, column: str) -> str:
        """A ``text_array`` column as a table ``dep`` with one row per element (column ``value``)."""
        return f"unnest({column}) AS dep(value)" if self.postgres else f"json_each({column}) AS dep"

    def byte_length(self, expr: str) -> str:
        """The length of a text expression in UTF-8 bytes."""
        return f"octet_length({expr})" if self.postgres else f"length(CAST({expr} AS BLOB))"

    def notify(self, tx: Tx, channel: str, payload: str) -> None:
        """Wake ``Database.wait`` on ``channel`` when ``tx`` commits (PostgreSQL ``NOTIFY``;
        SQLite has no such signal: its waiters poll)."""
        if self.postgres:
            tx.execute("SELECT pg_notify(?, ?)", (channel, payload))

    def contains_all(self, column: str, values: Sequence[str]) -> tuple[str, list[Any]]:
        """``(sql, params)``: the ``text_array`` column holds every one of ``values`` (``@>`` on
        PostgreSQL, its GIN index; ``json_each`` on SQLite)."""
        if self.postgres:
            return f"{column} @> ?::text[]", [list(values)]
        marks = self.placeholders(len(values))
        sql = f"(SELECT count(DISTINCT value) FROM json_each({column}) WHERE value IN ({marks})) = ?"  # noqa: S608 - only '?' placeholders
        return sql, [*values, len(values)]


class Tx:
    """One transaction: ``execute`` statements written with ``?`` placeholders."""

    __slots__ = ("_conn", "db", "dialect")

    def __init__(self, conn: Any, db: Database) -> None:
        self._conn = conn
        self.db = db
        self.dialect = db.dialect

    def execute(self, sql: str, params: Sequence[Any] = ()) -> Cursor:
        cursor: Cursor = self._conn.execute(self.dialect.sql(sql), params)
        return cursor

    def executemany(self, sql: str, rows: Iterable[Sequence[Any]]) -> None:
        if self.dialect.postgres:
            with self._conn.cursor() as cur:
                cur.executemany(self.dialect.sql(sql), list(rows))
        else:
            self._conn.executemany(sql, rows)

    def one(self, sql: str, params: Sequence[Any] = ()) -> Row | None:
        """The first row, or ``None``."""
        return self.execute(sql, params).fetchone()

    def all(self, sql: str, params: Sequence[Any] = ()) -> list[Row]:
        return self.execute(sql, params).fetchall()

    def scalar(self, sql: str, params: Sequence[Any] = ()) -> Any:
        """The first column of the first row, or ``None`` (``Any``: its type is the SQL's)."""
        row = self.execute(sql, params).fetchone()
        return None if row is None else row[0]

    def script(self, sql: str) -> None:
        """Several statements without parameters (a migration), inside this transaction."""
        if self.dialect.postgres:
            self._conn.execute(sql.encode())
            return
        pending = ""
        for line in sql.splitlines(keepends=True):
            pending += line
            if sqlite3.complete_statement(pending):
                self._conn.execute(pending)
                pending = ""
        if pending.strip():
            self._conn.execute(pending)


class Database:
    """A home's database. Subclasses: ``SqliteDatabase``, ``PostgresDatabase``."""

    engine: Engine
    dialect: Dialect
    where: str
    """The database for people: a path, or ``postgresql://host:port/db`` (never a password)."""

    def transaction(self, work: Callable[[Tx], T], *, write: bool = True, retry: bool = True) -> T:
        """Run ``work(tx)`` in one transaction and commit (the schema migrated first, on the first
        use in the process). ``write=False`` for reads. ``retry``: on PostgreSQL, run it again on
        a fresh connection when the connection failed before the commit was sent (so ``work``
        must do nothing outside the database)."""
        self.migrate()
        return self._run(work, write, retry)

    def read(self, work: Callable[[Tx], T]) -> T:
        """``transaction(work, write=False)``."""
        return self.transaction(work, write=False)

    def peek(self, work: Callable[[Tx], T]) -> T:
        """A read that migrates nothing (``phx db status``, ``phx doctor --check``)."""
        return self._run(work, False, True)

    def migrate(self) -> list[dict[str, Any]]:
        """Apply the pending migrations (what was applied); refuse a newer schema."""
        raise NotImplementedError

    def _run(self, work: Callable[[Tx], T], write: bool, retry: bool) -> T:
        raise NotImplementedError

    def close(self) -> None:
        """Close this process's connections (they reopen on the next use)."""

    def wait(
        self,
        channel: str,
        ready: Callable[[], bool],
        timeout: float,
        *,
        relevant: Callable[[str], bool] = lambda _payload: True,
    ) -> bool:
        """Block until ``ready()`` (``True``) or ``timeout`` seconds pass (``False``), looking
        again when something is written: every ``POLL_SECONDS`` here (SQLite has no wake-up
        signal); PostgreSQL overrides this with ``LISTEN`` on ``channel`` (payloads for which
        ``relevant`` is true)."""
        import time

        deadline = time.monotonic() + timeout
        while True:
            if ready():
                return True
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            time.sleep(min(POLL_SECONDS, left))

    def exists(self) -> bool:
        """Whether the database is there at all (a home with no ``phoenix.db`` has stored nothing)."""
        return True


class AgentRows:
    """The rows of one agent in ``db`` (its checkpoints, its sessions): reads create nothing, and
    ``before_use`` runs first (the import of an earlier release's files)."""

    def __init__(self, db: Database, agent_id: str) -> None:
        self.db = db
        self.agent_id = agent_id
        self.before_use: Callable[[], None] = lambda: None
        """Run before the first use (the import of a home's files: ``_checkpoint_import``)."""

    @overload
    def _read(self, work: Callable[[Tx], T]) -> T | None: ...

    @overload
    def _read(self, work: Callable[[Tx], T], empty: T) -> T: ...

    def _read(self, work: Callable[[Tx], T], empty: T | None = None) -> T | None:
        """``work`` in a read transaction; ``empty`` without one when there is no database yet
        (a reader creates nothing)."""
        self.before_use()
        if not self.db.exists():
            return empty
        return self.db.read(work)

    def _write(self, work: Callable[[Tx], T]) -> T:
        self.before_use()
        return self.db.transaction(work)


# -- SQLite ------------------------------------------------------------------------------------


def _mount_type(path: str) -> str | None:
    """The file system type of the mount holding ``path`` (Linux ``/proc/self/mounts``; else None)."""
    try:
        with open("/proc/self/mounts", encoding="utf-8", errors="replace") as fh:
            mounts = [line.split() for line in fh]
    except OSError:
        return None
    real = os.path.realpath(path)
    best, kind = "", None
    for parts in mounts:
        if len(parts) < 3:
            continue
        point = parts[1].replace("\\040", " ")
        if (real == point or real.startswith(point.rstrip("/") + "/")) and len(point) >= len(best):
            best, kind = point, parts[2]
    return kind


def _sqlite_error(exc: sqlite3.Error, path: str, timeout: float) -> Exception:
    text = str(exc)
    low = text.lower()
    if "locked" in low or "busy" in low:
        return LockTimeoutError(
            f"{path} stayed locked by another process for more than {timeout:g}s; try again, or raise lock_timeout.",
            path=path,
        )
    if "not a database" in low or "malformed" in low or "file is encrypted" in low:
        return CorruptStateError(
            f"{path} is not a readable SQLite database ({text}); run `phx doctor` (it keeps the file aside).",
            path=path,
        )
    if "disk is full" in low or "database or disk is full" in low:
        return StorageError(f"the disk holding {path} is full; nothing was written: free some space.", path=path)
    if "readonly" in low or "read-only" in low:
        return StorageError(f"{path} cannot be written ({text}): check its permissions.", path=path)
    return StorageError(f"{path}: {text}.", path=path)


class SqliteDatabase(Database):
    """``phoenix.db`` in a home: one connection per thread per process."""

    engine: Engine = "sqlite"

    def __init__(self, path: str, *, timeout: float = 10.0) -> None:
        self.path = path
        self.where = path
        self.timeout = timeout
        self.dialect = Dialect("sqlite")
        self._local = threading.local()
        self._prepared: tuple[int, int, int] | None = None  # (pid, device, inode) checked and migrated

    def exists(self) -> bool:
        return os.path.exists(self.path)

    def _create(self) -> None:
        directory = os.path.dirname(self.path)
        from phoenix_protocol.core._durable import ensure_dir

        ensure_dir(directory)
        kind = _mount_type(directory)
        if kind in NETWORK_FILE_SYSTEMS:
            raise ConfigError(
                f"{directory} is on a network file system ({kind}), where SQLite's WAL is not safe: "
                'use store = "postgresql://…" there, or a home on a local disk (PHOENIX_HOME).'
            )
        with contextlib.suppress(FileExistsError):
            os.close(os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, FILE_MODE))

    def _connect(self) -> sqlite3.Connection:
        local = self._local
        conn: sqlite3.Connection | None = getattr(local, "conn", None)
        if conn is not None and getattr(local, "pid", None) == os.getpid():
            return conn
        if not os.path.exists(self.path):
            self._create()
        from phoenix_protocol.core._durable import check_entry

        for suffix in ("", "-wal", "-shm", "-journal"):
            # SQLite opens these itself, following links and blocking on a FIFO: looked at first
            problem = check_entry(self.path + suffix)
            if problem is not None:
                raise problem
        try:
            conn = sqlite3.connect(
                self.path, timeout=self.timeout, isolation_level=None, check_same_thread=False, cached_statements=256
            )
            conn.execute(f"PRAGMA busy_timeout = {int(self.timeout * 1000)}")
            conn.execute("PRAGMA synchronous = FULL")
            conn.execute("PRAGMA foreign_keys = ON")
        except sqlite3.Error as exc:
            raise _sqlite_error(exc, self.path, self.timeout) from exc
        local.conn, local.pid = conn, os.getpid()
        return conn

    def migrate(self) -> list[dict[str, Any]]:
        """Once per process per file: WAL on, the schema migrated (or a newer one refused).
        Under the file's lock: connections switching a fresh file to WAL together get "database
        is locked" at once, without the busy timeout."""
        conn = self._connect()
        st = os.stat(self.path)
        key = (os.getpid(), st.st_dev, st.st_ino)
        if self._prepared == key:
            return []
        from phoenix_protocol.store import _schema

        try:
            with FileLock(self.path, self.timeout):
                if str(conn.execute("PRAGMA journal_mode").fetchone()[0]).lower() != "wal":
                    conn.execute("PRAGMA journal_mode = WAL")
                for suffix in ("-wal", "-shm"):  # created with the umask's mode
                    with contextlib.suppress(FileNotFoundError):
                        os.chmod(self.path + suffix, FILE_MODE)
                applied = _schema.ensure(self, lambda work, write: self._run(work, write, True))
        except sqlite3.Error as exc:
            raise _sqlite_error(exc, self.path, self.timeout) from exc
        self._prepared = key
        return applied

    def _run(self, work: Callable[[Tx], T], write: bool, retry: bool) -> T:
        conn = self._connect()
        try:
            conn.execute("BEGIN IMMEDIATE" if write else "BEGIN")
        except sqlite3.Error as exc:
            raise _sqlite_error(exc, self.path, self.timeout) from exc
        try:
            result = work(Tx(conn, self))
            conn.execute("COMMIT")
            return result
        except BaseException as exc:
            if conn.in_transaction:
                with contextlib.suppress(sqlite3.Error):
                    conn.execute("ROLLBACK")
            if isinstance(exc, sqlite3.Error):
                raise _sqlite_error(exc, self.path, self.timeout) from exc
            raise

    def close(self) -> None:
        conn = getattr(self._local, "conn", None)
        if conn is not None and getattr(self._local, "pid", None) == os.getpid():
            conn.close()
        self._local = threading.local()
        self._prepared = None


# -- PostgreSQL --------------------------------------------------------------------------------


class PostgresDatabase(Database):
    """A PostgreSQL server (``[postgres]`` extra), through the process's pool."""

    engine: Engine = "postgresql"

    def __init__(self, url: str, *, pool_size: int = 10) -> None:
        from phoenix_protocol.store import _pg

        self.url = url
        self.pool_size = pool_size
        self.where = _pg.describe(url)
        self.dialect = Dialect("postgresql")

    def migrate(self) -> list[dict[str, Any]]:
        from phoenix_protocol.store import _pg

        key = (os.getpid(), self.url)
        if key in _pg.ready:
            return []
        from phoenix_protocol.store import _schema

        applied = _schema.ensure(self, lambda work, write: self._run(work, write, True))
        _pg.ready.add(key)
        return applied

    def _run(self, work: Callable[[Tx], T], write: bool, retry: bool) -> T:
        from phoenix_protocol.store import _pg

        _pg.pool(self.url, max_size=self.pool_size)  # the first use in the process sizes the pool
        return _pg.transaction(self.url, lambda conn: work(Tx(conn, self)), retry=retry, ensure=False)

    def close(self) -> None:
        from phoenix_protocol.store import _pg

        _pg.close_all()

    def wait(
        self,
        channel: str,
        ready: Callable[[], bool],
        timeout: float,
        *,
        relevant: Callable[[str], bool] = lambda _payload: True,
    ) -> bool:
        """``LISTEN`` on ``channel``: woken by the writer's commit, no polling."""
        import time

        import psycopg

        from phoenix_protocol.store import _pg

        deadline = time.monotonic() + timeout
        try:
            with psycopg.connect(self.url, autocommit=True, connect_timeout=_pg.CONNECT_TIMEOUT) as conn:
                conn.execute(f"LISTEN {channel}")
                if ready():
                    return True
                while True:
                    left = deadline - time.monotonic()
                    if left <= 0:
                        return False
                    for note in conn.notifies(timeout=left, stop_after=1):
                        if relevant(note.payload) and ready():
                            return True
        except psycopg.Error as exc:
            raise _pg.PgError(
                f"PostgreSQL server {self.where}: {' '.join(str(exc).split())}", server=self.where
            ) from exc


# -- the factory -------------------------------------------------------------------------------

_open: dict[tuple[int, str], Database] = {}
_open_lock = threading.Lock()


def open_database(home: Home, config: Config | None = None) -> Database:
    """The database the configuration names for ``home`` (one object per process per target)."""
    if config is None:
        from phoenix_protocol.core._config import load_config

        config = load_config(home.root, project_root=home.project_root)
    store = str(config.store or "sqlite")
    if is_postgres_url(store):
        key = (os.getpid(), store)
    elif store in ("sqlite", "files"):
        key = (os.getpid(), os.path.join(home.root, DB_NAME))
    else:
        raise ConfigError(f"store must be sqlite or a postgresql:// URL, not {store!r}.")
    with _open_lock:
        found = _open.get(key)
        if found is None:
            if is_postgres_url(store):
                found = PostgresDatabase(store, pool_size=config.pg_pool_size)
            else:
                found = SqliteDatabase(key[1], timeout=config.lock_timeout)
            _open[key] = found
    return found


def close_all() -> None:
    """Close every database this process opened (tests; before a fork)."""
    with _open_lock:
        for db in _open.values():
            db.close()
        _open.clear()
