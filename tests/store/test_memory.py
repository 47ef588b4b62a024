"""Namespaced memory: ranked recall, tags, isolation, redaction, sessions (on both engines)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from phoenix_protocol.core._clock import ManualClock
from phoenix_protocol.core._errors import InvalidIdError, UsageError
from phoenix_protocol.core._home import Home
from phoenix_protocol.services._agent import Agent
from phoenix_protocol.services._sessions import recall_for, remember
from phoenix_protocol.store._memory import MemoryStore


@pytest.fixture
def store(backend: str, home: Home, clock: ManualClock) -> MemoryStore:
    """The home's memory store on each engine in turn (``backend``)."""
    return MemoryStore(home, clock=clock)


def test_store_and_recall_ranked(store: MemoryStore, clock: ManualClock) -> None:
    store.store("zero", "Timers drift under load when the event loop is blocked", tags=["asyncio", "bug"])
    clock.advance(1)
    store.store("zero", "The release checklist: changelog, tag, publish", tags=["release"])
    clock.advance(1)
    store.store("zero", "Asyncio timers fire late if a callback blocks the loop", tags=["asyncio"])
    found = store.recall("zero", "why do asyncio timers drift", k=2)
    assert len(found) == 2
    assert all("timer" in record.text.lower() for record, _score in found)
    assert found[0][1] >= found[1][1] > 0
    tagged = store.recall("zero", "timers", tags=["bug"])
    assert [r.tags for r, _s in tagged] == [["asyncio", "bug"]]


def test_namespaces_are_isolated(store: MemoryStore) -> None:
    mine = store.store("zero", "secret plan for the migration")
    assert store.recall("other", "migration") == []
    assert store.get("other", mine.id) is None
    assert store.delete("other", mine.id) is False
    assert store.get("zero", mine.id) is not None
    assert store.count("zero") == 1 and store.count("other") == 0


def test_list_delete_and_pagination(store: MemoryStore, clock: ManualClock) -> None:
    ids = []
    for i in range(5):
        ids.append(store.store("zero", f"note number {i}", tags=["n"] if i % 2 else []).id)
        clock.advance(1)
    assert [r.id for r in store.list("zero", limit=2)] == ids[::-1][:2]
    assert [r.id for r in store.list("zero", limit=2, offset=2)] == ids[::-1][2:4]
    assert [r.id for r in store.list("zero", tags=["n"])] == [ids[3], ids[1]]
    assert store.delete("zero", ids[0]) is True
    assert store.recall("zero", "number", k=10) and ids[0] not in {
        r.id for r, _ in store.recall("zero", "number", k=10)
    }


@pytest.mark.parametrize("query", ['"unbalanced', "AND OR NOT", "a* NEAR(b)", "col:value", "((((x"])
def test_queries_are_words_never_syntax(store: MemoryStore, query: str) -> None:
    store.store("zero", "value of a and b near the column")
    store.recall("zero", query)  # no FTS5 syntax error, whatever the user typed
    with pytest.raises(UsageError, match="at least one word"):
        store.recall("zero", "((((")


def test_bad_input(store: MemoryStore) -> None:
    with pytest.raises(InvalidIdError):
        store.store("../x", "text")
    with pytest.raises(UsageError):
        store.store("zero", "   ")
    with pytest.raises(UsageError):
        store.store("zero", "x" * 70_000)
    with pytest.raises(UsageError):
        store.store("zero", "x", tags="not-a-list")
    with pytest.raises(UsageError):
        store.recall("zero", "!!!")
    with pytest.raises(UsageError):
        store.recall("zero", "x", k=0)


def test_secrets_are_redacted_and_files_private(home: Home, clock: ManualClock) -> None:
    store = MemoryStore(home, clock=clock)
    record = store.store(
        "zero", "deploy key ghp_" + "Zx9" * 12 + " for the bot", metadata={"password": "Hunter2Secret!"}
    )
    assert "Zx9Zx9" not in record.text and record.metadata["password"].startswith("[REDACTED")
    path = store.db.where
    assert path == os.path.join(home.root, "phoenix.db")
    for name in (path, path + "-wal"):
        assert "Zx9Zx9" not in Path(name).read_bytes().decode("latin-1")
        assert os.stat(name).st_mode & 0o777 == 0o600
    assert os.stat(home.root).st_mode & 0o777 == 0o700
    assert not os.path.exists(os.path.join(home.root, "memory"))  # the earlier release's file is no more


def test_reading_an_empty_home_creates_nothing(home: Home) -> None:
    store = MemoryStore(home)
    assert (store.count("zero"), store.list("zero"), store.recall("zero", "x"), store.namespaces()) == (0, [], [], [])
    assert store.get("zero", "mem-" + "0" * 24) is None and store.delete("zero", "mem-" + "0" * 24) is False
    assert not os.path.exists(os.path.join(home.root, "phoenix.db"))


def test_session_tracking(home: Home, clock: ManualClock) -> None:
    from phoenix_protocol.services._sessions import begin, end

    agent = Agent.open("zero", home=home, clock=clock)
    agent.state.start_session("s1")
    begin(agent, "s1")
    first = remember(agent, "The CI cache key includes the lockfile hash", tags=["ci"])
    recall_for(agent, "ci cache key")
    info = end(agent, "s1", summary="noted the CI cache")
    recent = agent.checkpoints.read(info.name).section("recent_memories")
    assert recent == {"memory_ids": [first.id], "last_recall_query": "ci cache key"}


def test_clients_starting_on_a_fresh_store_at_once_all_write(tmp_path: Path) -> None:
    """SQLite answers "database is locked" at once, without its busy wait, to connections that
    switch a new file to WAL together (the HTTP service's first requests on a new home): seen in
    about 1 start in 8 before the store prepared the file under a lock."""
    import threading

    for trial in range(30):
        home = Home(str(tmp_path / f"home{trial}"))
        errors: list[BaseException] = []

        def write(n: int, home: Home = home, errors: list[BaseException] = errors) -> None:
            try:
                MemoryStore(home).store("zero", f"note {n}")
            except BaseException as exc:  # reported below
                errors.append(exc)

        threads = [threading.Thread(target=write, args=(n,)) for n in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        assert not errors, (trial, errors)
        assert MemoryStore(home).count("zero") == 8
