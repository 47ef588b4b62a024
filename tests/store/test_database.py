"""The SQL layer on both engines: one transaction API, migrations, and clear errors for bad input."""

from __future__ import annotations

import os
import sqlite3

import pytest

from phoenix_protocol.core._config import Config
from phoenix_protocol.core._errors import ConfigError, CorruptStateError, LockTimeoutError, SchemaVersionError
from phoenix_protocol.core._home import Home
from phoenix_protocol.store import _db, _schema
from phoenix_protocol.store._db import Database, Dialect, Tx, open_database


@pytest.fixture
def db(backend: str, home: Home) -> Database:
    """The home's database on each engine in turn (``backend``)."""
    return open_database(home)


def test_a_fresh_database_is_migrated_on_first_use_and_writes_commit(db: Database) -> None:
    assert _schema.status(db)["current"] == 0  # status migrates nothing
    db.transaction(
        lambda tx: tx.execute("INSERT INTO phx_tokens (id, position, record) VALUES (?, ?, ?)", ("a", 1, "%?"))
    )
    assert db.read(lambda tx: tx.all("SELECT id, record FROM phx_tokens WHERE record LIKE '%?%'")) == [("a", "%?")]
    info = _schema.status(db)
    assert info["current"] == _schema.LATEST and not info["pending"]
    assert [m["version"] for m in info["applied"]] == [m.version for m in _schema.MIGRATIONS]


def test_an_exception_rolls_the_whole_transaction_back(db: Database) -> None:
    def work(tx: Tx) -> None:
        tx.execute("INSERT INTO phx_tokens (id, position, record) VALUES (?, ?, ?)", ("a", 1, "{}"))
        raise RuntimeError("boom")

    with pytest.raises(RuntimeError):
        db.transaction(work)
    assert db.read(lambda tx: tx.scalar("SELECT count(*) FROM phx_tokens")) == 0


def test_a_database_a_newer_phoenix_migrated_is_refused_and_left_alone(db: Database) -> None:
    db.migrate()
    db.transaction(
        lambda tx: tx.execute("INSERT INTO phx_schema_migrations (version, description) VALUES (?, ?)", (999, "future"))
    )
    db.close()
    if db.engine == "postgresql":
        from phoenix_protocol.store import _pg

        _pg.ready.clear()
    fresh: Database = (
        _db.PostgresDatabase(db.url) if isinstance(db, _db.PostgresDatabase) else _db.SqliteDatabase(db.where)
    )
    with pytest.raises(SchemaVersionError, match="newer Phoenix"):
        fresh.transaction(lambda tx: tx.execute("DELETE FROM phx_tokens"))
    assert fresh.peek(lambda tx: tx.scalar("SELECT max(version) FROM phx_schema_migrations")) == 999


def test_sqlite_file_is_private_and_in_wal_mode(home: Home) -> None:
    db = open_database(home, Config())
    db.migrate()
    path = os.path.join(home.root, _db.DB_NAME)
    assert os.stat(path).st_mode & 0o777 == 0o600
    for suffix in ("-wal", "-shm"):
        if os.path.exists(path + suffix):
            assert os.stat(path + suffix).st_mode & 0o777 == 0o600
    assert db.read(lambda tx: tx.scalar("PRAGMA journal_mode")) == "wal"
    assert db.read(lambda tx: tx.scalar("PRAGMA synchronous")) == 2  # FULL
    _db.close_all()


def test_a_file_that_is_not_a_database_is_reported_and_kept(home: Home) -> None:
    home.ensure()
    path = os.path.join(home.root, _db.DB_NAME)
    with open(path, "wb") as fh:
        fh.write(b"not a database at all\n" * 400)
    with pytest.raises(CorruptStateError, match="not a readable SQLite database"):
        open_database(home, Config()).read(lambda tx: tx.scalar("SELECT 1"))
    with open(path, "rb") as fh:
        assert fh.read(21) == b"not a database at all"
    _db.close_all()


def test_a_lock_held_past_the_timeout_is_a_clear_error(home: Home) -> None:
    db = open_database(home, Config({"lock_timeout": 0.2}))
    db.migrate()
    other = sqlite3.connect(os.path.join(home.root, _db.DB_NAME), isolation_level=None)
    other.execute("BEGIN IMMEDIATE")
    try:
        with pytest.raises(LockTimeoutError, match="stayed locked"):
            db.transaction(lambda tx: tx.execute("DELETE FROM phx_tokens"))
    finally:
        other.execute("ROLLBACK")
        other.close()
    db.transaction(lambda tx: tx.execute("DELETE FROM phx_tokens"))  # and works once it is free
    _db.close_all()


def test_a_store_setting_that_names_nothing_known_is_refused(home: Home) -> None:
    with pytest.raises(ConfigError, match="store must be"):
        open_database(home, Config({"store": "mysql://x"}))


def test_a_home_on_a_network_file_system_is_refused(home: Home, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_db, "_mount_type", lambda path: "nfs4")
    with pytest.raises(ConfigError, match="network file system"):
        open_database(home, Config()).migrate()
    _db.close_all()


def test_placeholders_are_converted_outside_quotes_only() -> None:
    pg = Dialect("postgresql")
    assert pg.sql("SELECT '?', x FROM t WHERE a = ? AND b LIKE '%' || ?") == (
        "SELECT '?', x FROM t WHERE a = %s AND b LIKE '%%' || %s"
    )
    assert Dialect("sqlite").sql("a = ?") == "a = ?"
