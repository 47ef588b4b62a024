"""An earlier release's memories (``memory/memory.sqlite3``) and tokens (``tokens.json``) move
into the home's database on first use, on both engines, with nothing lost; an interrupted move
(SIGKILL) runs again safely; the old files are kept aside, never deleted."""

from __future__ import annotations

import contextlib
import glob
import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import tarfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from phoenix_protocol.core._clock import ManualClock
from phoenix_protocol.core._config import Config
from phoenix_protocol.core._errors import CorruptStateError
from phoenix_protocol.core._home import Home
from phoenix_protocol.store import _db
from phoenix_protocol.store._memory import MemoryStore
from phoenix_protocol.store._move_memory import MOVES_LOG, move_earlier_files
from phoenix_protocol.store._tokens import TokenStore

DATA = Path(__file__).resolve().parent.parent / "data" / "homes"
EXPECTED = json.loads((DATA / "expected-0.1.0.json").read_text())
SRC = str(Path(__file__).resolve().parents[2] / "src")


@pytest.fixture
def store(backend: str) -> str:
    """The ``store`` setting of ``backend``: ``sqlite`` (the home's database), or the URL of its
    fresh PostgreSQL schema (which ``PHOENIX_STORE`` names too)."""
    return os.environ["PHOENIX_STORE"] if backend == "postgres" else "sqlite"


@pytest.fixture
def old_home(tmp_path: Path) -> Home:
    """The home release 0.1.0 wrote (``tests/data/homes/home-0.1.0.tar.gz``), extracted."""
    with tarfile.open(DATA / "home-0.1.0.tar.gz") as tar:
        tar.extractall(tmp_path, filter="data")
    return Home(str(tmp_path / "home"))


def _expected_memories() -> dict[str, list[dict[str, Any]]]:
    return {agent: data["memories"]["memories"] for agent, data in EXPECTED["agents"].items()}


def _assert_all_back(home: Home, store: str) -> None:
    """Every memory and token release 0.1.0 read back from the home, as it read them."""
    config = Config({"store": store})
    memory = MemoryStore(home, config=config)
    for agent, memories in _expected_memories().items():
        assert [m.as_dict() for m in memory.list(agent)] == memories  # ids, text, tags, metadata, times, order
        for expected in memories:
            got = memory.get(agent, expected["id"])
            assert got is not None and got.as_dict() == expected
        assert memory.count(agent) == len(memories)
    assert memory.recall("alpha", "sharded tenant")[0][0].id == _expected_memories()["alpha"][1]["id"]
    tokens = TokenStore(home, clock=ManualClock(), config=config)
    now = tokens.clock.now_ms()
    assert {"ok": True, "tokens": [t.as_dict(now) for t in tokens.list()]} == EXPECTED["tokens"]
    reader = tokens.verify(EXPECTED["reader_token"])
    assert reader is not None and reader.id == EXPECTED["tokens"]["tokens"][0]["id"]
    assert reader.covers_namespace("agent:alpha") and reader.allows("memory:read")


def _kept_aside(home: Home) -> tuple[list[str], list[str]]:
    return (
        sorted(glob.glob(os.path.join(home.root, "memory.migrated-*", "memory.sqlite3"))),
        sorted(glob.glob(os.path.join(home.root, "tokens.json.migrated-*"))),
    )


def test_a_0_1_0_home_moves_on_first_use_with_nothing_lost(old_home: Home, store: str) -> None:
    memory_file = Path(old_home.root, "memory", "memory.sqlite3")
    tokens_file = Path(old_home.root, "tokens.json")
    before = (memory_file.read_bytes(), tokens_file.read_bytes())
    _assert_all_back(old_home, store)  # the first use moves them
    assert not memory_file.exists() and not tokens_file.exists()
    (kept_memory,), (kept_tokens,) = _kept_aside(old_home)
    assert Path(kept_tokens).read_bytes() == before[1]  # never rewritten, never deleted
    assert Path(kept_memory).stat().st_size > 0
    (line,) = Path(old_home.root, MOVES_LOG).read_text().splitlines()
    moved = json.loads(line)
    assert (moved["event"], moved["memories"], moved["tokens"]) == ("store.moved", 4, 2)
    assert sorted(moved["kept_aside"]) == sorted(
        os.path.relpath(p, old_home.root) for p in (os.path.dirname(kept_memory), kept_tokens)
    )
    _db.close_all()
    _assert_all_back(old_home, store)  # and again, from the database alone
    assert _kept_aside(old_home) == ([kept_memory], [kept_tokens])


def test_a_move_run_again_after_its_files_came_back_adds_nothing(old_home: Home, store: str) -> None:
    """As if the process died after the commit and before the files were kept aside: the same
    rows are found (ids are keys), nothing is doubled, and the files are kept aside again."""
    spare = Path(old_home.root).parent / "spare"
    shutil.copytree(os.path.join(old_home.root, "memory"), spare / "memory")
    shutil.copy(os.path.join(old_home.root, "tokens.json"), spare / "tokens.json")
    db = _db.open_database(old_home, Config({"store": store}))
    assert move_earlier_files(old_home, db) is not None
    shutil.copytree(spare / "memory", os.path.join(old_home.root, "memory"))
    shutil.copy(spare / "tokens.json", os.path.join(old_home.root, "tokens.json"))
    again = move_earlier_files(old_home, db)
    assert again is not None and (again["memories"], again["tokens"]) == (4, 2)
    assert move_earlier_files(old_home, db) is None  # nothing left to move
    _assert_all_back(old_home, store)
    counts = db.read(
        lambda tx: (tx.scalar("SELECT count(*) FROM phx_memories"), tx.scalar("SELECT count(*) FROM phx_tokens"))
    )
    assert counts == (4, 2)
    kept_memory, kept_tokens = _kept_aside(old_home)
    assert len(kept_memory) == 2 and len(kept_tokens) == 2  # both copies kept


@pytest.mark.parametrize("die_at_rename", [1, 2])
def test_a_move_killed_by_sigkill_runs_again_next_time(old_home: Home, store: str, die_at_rename: int) -> None:
    """A real process moving the home is SIGKILLed at the worst moments: after its commit, before
    it kept the first file aside (1) or between the two (2). The next use finishes the move."""
    script = f"""
import os, signal
from phoenix_protocol.core._config import Config
from phoenix_protocol.core._home import Home
from phoenix_protocol.store._db import open_database
from phoenix_protocol.store._move_memory import move_earlier_files

real, calls = os.rename, []
def rename(src, dst):
    calls.append(src)
    if len(calls) == {die_at_rename}:
        os.kill(os.getpid(), signal.SIGKILL)
    real(src, dst)
os.rename = rename
home = Home({old_home.root!r})
move_earlier_files(home, open_database(home, Config({{"store": {store!r}}})))
"""
    proc = subprocess.run(
        [sys.executable, "-c", script], env={**os.environ, "PYTHONPATH": SRC}, capture_output=True, timeout=60
    )
    assert proc.returncode == -signal.SIGKILL, proc.stderr.decode()
    left = [p for p in ("memory/memory.sqlite3", "tokens.json") if os.path.exists(os.path.join(old_home.root, p))]
    assert len(left) == (2 if die_at_rename == 1 else 1)  # the kill left the move unfinished
    _assert_all_back(old_home, store)
    db = _db.open_database(old_home, Config({"store": store}))
    counts = db.read(
        lambda tx: (tx.scalar("SELECT count(*) FROM phx_memories"), tx.scalar("SELECT count(*) FROM phx_tokens"))
    )
    assert counts == (4, 2)
    assert not os.path.exists(os.path.join(old_home.root, "tokens.json"))
    assert not os.path.exists(os.path.join(old_home.root, "memory", "memory.sqlite3"))


def test_a_damaged_old_file_is_named_and_nothing_moves(old_home: Home, store: str) -> None:
    memory_file = Path(old_home.root, "memory", "memory.sqlite3")
    memory_file.write_bytes(b"not a database at all" * 100)
    with pytest.raises(CorruptStateError, match="left in place"):
        TokenStore(old_home, config=Config({"store": store})).list()
    assert memory_file.exists() and Path(old_home.root, "tokens.json").exists()
    assert _kept_aside(old_home) == ([], [])


def test_what_an_earlier_release_stored_unredacted_is_redacted_when_moved(old_home: Home, store: str) -> None:
    """0.1.0 kept tags and metadata keys as given: a GitHub token as a tag, an AWS key id as a key.
    The row is added to the fixture home's memory.sqlite3 as 0.1.0's schema (its tables and
    triggers, in the file) stores it."""
    token, key = "ghp_" + "Zx9" * 12, "AKIA" + "Q7XZ2MRT4KPLW3VN"
    home = old_home
    memory_id = "mem-" + "ab" * 12
    path = os.path.join(home.root, "memory", "memory.sqlite3")
    with contextlib.closing(sqlite3.connect(path, isolation_level=None)) as conn:
        conn.execute("BEGIN")
        cur = conn.execute(
            "INSERT INTO memories (id, namespace, text, tags, metadata, created_ms) VALUES (?, ?, ?, ?, ?, ?)",
            (memory_id, "zero", "deploy notes", json.dumps([token.lower()]), json.dumps({key: 1}), 1_795_800_000_000),
        )
        conn.execute("INSERT INTO memory_tags (memory_rowid, tag) VALUES (?, ?)", (cur.lastrowid, token.lower()))
        conn.execute("COMMIT")
    old_bytes = b"".join(Path(p).read_bytes() for p in glob.glob(os.path.join(home.root, "memory", "memory.sqlite3*")))
    assert token.lower().encode() in old_bytes and key.encode() in old_bytes  # as the old release kept them
    got = MemoryStore(home, config=Config({"store": store})).get("zero", memory_id)
    assert got is not None and got.text == "deploy notes"
    assert token.lower() not in repr(got.as_dict()) and key not in repr(got.as_dict())
    assert "REDACTED" in got.tags[0] and list(got.metadata.values()) == [1]
    if store == "sqlite":
        for path in glob.glob(os.path.join(home.root, "phoenix.db*")):
            assert token.lower().encode() not in Path(path).read_bytes() and key.encode() not in Path(path).read_bytes()


def test_a_postgresql_store_at_schema_7_keeps_its_memories(
    pg_url: str, home: Home, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A database the previous release's PgMemoryStore wrote (schema 7: no ``seq``) migrates
    forward with every memory, listed newest first; what it kept unredacted comes back redacted."""
    from phoenix_protocol.store import _schema

    token = "ghp_" + "Zx9" * 12
    config = Config({"store": pg_url})
    with monkeypatch.context() as patch:
        patch.setattr(_schema, "MIGRATIONS", [m for m in _schema.MIGRATIONS if m.version <= 7])
        patch.setattr(_schema, "LATEST", 7)
        db = _db.open_database(home, config)
        db.migrate()
        rows = [
            (
                "mem-" + f"{i:024x}",
                "zero",
                f"note {i}",
                [token.lower()] if i == 2 else ["n"],
                json.dumps({"i": i}),
                1000 + i,
            )
            for i in range(4)
        ]
        db.transaction(
            lambda tx: tx.executemany(
                "INSERT INTO phx_memories (id, namespace, text, tags, metadata, created_ms) VALUES (?, ?, ?, ?, ?, ?)",
                rows,
            )
        )
    _db.close_all()
    from phoenix_protocol.store import _pg

    _pg.ready.clear()
    memory = MemoryStore(home, config=config)
    listed = memory.list("zero")
    assert [m.id for m in listed] == [r[0] for r in reversed(rows)]
    assert [m.metadata for m in listed] == [{"i": i} for i in (3, 2, 1, 0)]
    assert token.lower() not in repr([m.as_dict() for m in listed]) and "REDACTED" in listed[1].tags[0]
    assert _schema.status(memory.db)["current"] == _schema.LATEST
    stored = memory.store("zero", "note 4")
    assert memory.list("zero", limit=1)[0].id == stored.id  # the newest
    assert memory.count("zero") == 5


@pytest.mark.parametrize("first_use", ["delete", "count", "recall", "store", "configured", "create", "revoke"])
def test_any_first_use_moves_the_files(old_home: Home, store: str, first_use: str) -> None:
    config = Config({"store": store})
    memory = MemoryStore(old_home, config=config)
    tokens = TokenStore(old_home, config=config)
    alpha = _expected_memories()["alpha"]
    calls: dict[str, Callable[[], bool]] = {
        "delete": lambda: memory.delete("alpha", alpha[0]["id"]) is True,
        "count": lambda: memory.count("alpha") == 2,
        "recall": lambda: len(memory.recall("alpha", "backfills")) == 1,
        "store": lambda: bool(memory.store("alpha", "a new note")),
        "configured": tokens.configured,
        "create": lambda: bool(tokens.create(["agent:alpha"], ["*"])),
        "revoke": lambda: tokens.revoke(EXPECTED["tokens"]["tokens"][0]["id"]).revoked_ms is not None,
    }
    assert calls[first_use]()
    assert _kept_aside(old_home) != ([], []) and not os.path.exists(os.path.join(old_home.root, "tokens.json"))
    assert [t.id for t in tokens.list()][:2] == [t["id"] for t in EXPECTED["tokens"]["tokens"]]
    assert memory.count("beta") == 2


def test_doctor_reports_the_move_then_makes_it(old_home: Home, store: str) -> None:
    from phoenix_protocol.services._doctor import check_home

    (waiting,) = [f for f in check_home(old_home, [], repair=False) if "earlier release" in f.message]
    assert waiting.level == "warn" and not waiting.repaired
    assert Path(old_home.root, "tokens.json").exists()  # --check changes nothing
    (moved,) = [f for f in check_home(old_home, []) if "earlier release" in f.message]
    assert moved.repaired and "4 memories and 2 tokens" in moved.message
    assert not Path(old_home.root, "tokens.json").exists()
    _assert_all_back(old_home, store)
    assert not [f for f in check_home(old_home, []) if "earlier release" in f.message or "token" in f.message]


def test_doctor_reports_a_token_record_that_authenticates_nothing(home: Home) -> None:
    from phoenix_protocol.services._doctor import check_home

    tokens = TokenStore(home)
    _token, info = tokens.create(["agent:zero"], ["*"])
    tokens.db.transaction(
        lambda tx: tx.execute("UPDATE phx_tokens SET record = ? WHERE id = ?", (json.dumps({"id": info.id}), info.id))
    )
    (found,) = [f for f in check_home(home, []) if info.id in f.message]
    assert found.level == "warn" and "authenticates nothing" in found.message
