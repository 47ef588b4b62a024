"""One conformance suite for the memory store on both engines: the home's SQLite database and
PostgreSQL (the real server of ``pg_url``). Both must give the same results, errors and redaction."""

from __future__ import annotations

import json
import os
import re
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from phoenix_protocol.core._clock import ManualClock, iso_from_ms
from phoenix_protocol.core._config import load_config
from phoenix_protocol.core._errors import InvalidIdError, UsageError
from phoenix_protocol.core._home import Home
from phoenix_protocol.services._agent import Agent
from phoenix_protocol.services._sessions import recall_for, remember
from phoenix_protocol.store import _db
from phoenix_protocol.store._memory import (
    MAX_TAGS,
    MEMORY_ID_REGEX,
    MemoryBackend,
    MemoryStore,
    open_memory_store,
)
from phoenix_protocol.store._pg import PgError

AWS_KEY = "AKIA" + "Q7XZ2MRT4KPLW3VN"
GITHUB_TOKEN = "ghp_" + "Zx9" * 12


@pytest.fixture(params=["sqlite", "postgresql"])
def backend(request: pytest.FixtureRequest, home: Home, clock: ManualClock) -> Iterator[MemoryStore]:
    """The memory store of a temporary home, on its SQLite database or on a fresh PostgreSQL
    schema, through the factory."""
    store = "sqlite" if request.param == "sqlite" else request.getfixturevalue("pg_url")
    found = open_memory_store(home, config=load_config(home.root, overrides={"store": store}), clock=clock)
    assert found.db.engine == request.param
    yield found
    _db.close_all()


def stored_bytes(store: MemoryStore) -> str:
    """Everything the store keeps, as text (the database file and its WAL; the table's rows)."""
    if store.db.engine == "sqlite":
        path = store.db.where
        return b"".join(Path(p).read_bytes() for p in (path, path + "-wal") if os.path.exists(p)).decode("latin-1")
    with psycopg.connect(store.db.url) as conn:  # type: ignore[attr-defined]
        rows = conn.execute("SELECT id, namespace, text, tags::text, metadata::text FROM phx_memories").fetchall()
    return repr(rows)


def test_store_get_round_trip(backend: MemoryBackend, clock: ManualClock) -> None:
    record = backend.store("zero", "The CI cache key includes the lockfile hash", tags=["ci"])
    assert re.fullmatch(MEMORY_ID_REGEX, record.id)
    assert (record.namespace, record.tags, record.metadata) == ("zero", ["ci"], {})
    assert record.created_at == iso_from_ms(clock.now_ms())
    got = backend.get("zero", record.id)
    assert got is not None and got.as_dict() == record.as_dict()
    assert backend.get("zero", "mem-" + "0" * 24) is None


def test_tags_are_normalized(backend: MemoryBackend) -> None:
    record = backend.store("zero", "tags test", tags=["  Event   Loop ", "BUG", "bug", "", "  "])
    assert record.tags == ["event loop", "bug"]
    got = backend.get("zero", record.id)
    assert got is not None and got.tags == ["event loop", "bug"]
    assert [r.id for r in backend.list("zero", tags=["Event Loop"])] == [record.id]


def test_metadata_round_trip(backend: MemoryBackend) -> None:
    metadata = {"source": "review", "n": 3, "ratio": 0.5, "ok": True, "none": None, "nested": {"l": [1, "é", {}]}}
    record = backend.store("zero", "with metadata", metadata=metadata)
    assert record.metadata == metadata
    got = backend.get("zero", record.id)
    assert got is not None and got.metadata == metadata
    assert backend.list("zero")[0].metadata == metadata


def test_recall_ranks_the_better_match_first(backend: MemoryBackend, clock: ManualClock) -> None:
    best = backend.store("zero", "Asyncio timers drift when the event loop is blocked", tags=["asyncio"])
    clock.advance(1)
    partial = backend.store("zero", "Kitchen timers beep loudly")
    clock.advance(1)
    backend.store("zero", "The release checklist: changelog, tag, publish", tags=["release"])
    found = backend.recall("zero", "why do asyncio timers drift?", k=5)
    assert [r.id for r, _ in found] == [best.id, partial.id]  # OR-ed words: a partial match still ranks
    assert found[0][1] > found[1][1] > 0
    assert found[0][0].as_dict() == best.as_dict()
    stemmed = backend.recall("zero", "drifting timer")  # both stem: drift, timer
    assert stemmed[0][0].id == best.id
    assert [r.id for r, _ in backend.recall("zero", "asyncio", k=1)] == [best.id]  # tags are searched, k honoured
    assert backend.recall("zero", "nothing matches this") == []


@pytest.mark.parametrize("query", ['"unbalanced', "AND OR NOT", "a* NEAR(b)", "col:value", "x & !y | (z", "'quote"])
def test_queries_are_words_never_syntax(backend: MemoryBackend, query: str) -> None:
    backend.store("zero", "value of a and b near the column x y z quote")
    assert isinstance(backend.recall("zero", query), list)


def test_tag_filter(backend: MemoryBackend, clock: ManualClock) -> None:
    both = backend.store("zero", "timers drift under load", tags=["asyncio", "bug"])
    clock.advance(1)
    one = backend.store("zero", "timers fire late", tags=["asyncio"])
    clock.advance(1)
    backend.store("zero", "timers are fine", tags=[])
    assert [r.id for r, _ in backend.recall("zero", "timers", tags=["bug"])] == [both.id]
    assert [r.id for r, _ in backend.recall("zero", "timers", tags=["BUG", "asyncio"])] == [both.id]
    assert {r.id for r, _ in backend.recall("zero", "timers", tags=["asyncio"])} == {both.id, one.id}
    assert backend.recall("zero", "timers", tags=["asyncio", "missing"]) == []
    assert [r.id for r in backend.list("zero", tags=["asyncio"])] == [one.id, both.id]
    assert len(backend.recall("zero", "timers", tags=[])) == 3


def test_namespaces_are_isolated(backend: MemoryBackend) -> None:
    mine = backend.store("alpha", "secret plan for the migration", tags=["plan"])
    theirs = backend.store("beta", "another plan for the migration", tags=["plan"])
    assert [r.id for r, _ in backend.recall("alpha", "plan migration")] == [mine.id]
    assert [r.id for r in backend.list("beta")] == [theirs.id]
    assert backend.recall("gamma", "migration") == [] and backend.list("gamma") == []
    assert backend.recall("beta", "secret", tags=["plan"]) == []
    assert backend.get("beta", mine.id) is None
    assert backend.delete("beta", mine.id) is False
    assert backend.get("alpha", mine.id) is not None
    assert (backend.count("alpha"), backend.count("beta"), backend.count("gamma")) == (1, 1, 0)


def test_delete_and_count(backend: MemoryBackend, clock: ManualClock) -> None:
    first = backend.store("zero", "first note about caching")
    clock.advance(1)
    second = backend.store("zero", "second note about caching")
    assert backend.count("zero") == 2
    assert backend.delete("zero", first.id) is True
    assert backend.delete("zero", first.id) is False
    assert backend.get("zero", first.id) is None
    assert backend.count("zero") == 1
    assert [r.id for r, _ in backend.recall("zero", "note caching", k=10)] == [second.id]
    assert [r.id for r in backend.list("zero")] == [second.id]


def test_list_order_and_paging(backend: MemoryBackend, clock: ManualClock) -> None:
    ids = []
    for i in range(5):
        ids.append(backend.store("zero", f"note number {i}").id)
        clock.advance(1)
    newest_first = ids[::-1]
    assert [r.id for r in backend.list("zero")] == newest_first
    assert [r.id for r in backend.list("zero", limit=2)] == newest_first[:2]
    assert [r.id for r in backend.list("zero", limit=2, offset=2)] == newest_first[2:4]
    assert [r.id for r in backend.list("zero", limit=2, offset=4)] == newest_first[4:]
    assert backend.list("zero", offset=5) == []


BAD_CALLS: list[tuple[str, type[Exception], Callable[[MemoryBackend], Any]]] = [
    ("empty text", UsageError, lambda s: s.store("zero", "   ")),
    ("text not a string", UsageError, lambda s: s.store("zero", 42)),  # type: ignore[arg-type]
    ("text too long", UsageError, lambda s: s.store("zero", "x" * 70_000)),
    ("NUL in text", UsageError, lambda s: s.store("zero", "a\x00b")),
    ("bad namespace", InvalidIdError, lambda s: s.store("../x", "text")),
    ("empty namespace", InvalidIdError, lambda s: s.count("")),
    ("too many tags", UsageError, lambda s: s.store("zero", "x", tags=[f"t{i}" for i in range(MAX_TAGS + 1)])),
    ("tags as a string", UsageError, lambda s: s.store("zero", "x", tags="not-a-list")),
    ("tag too long", UsageError, lambda s: s.store("zero", "x", tags=["t" * 65])),
    ("metadata not an object", UsageError, lambda s: s.store("zero", "x", metadata=["a"])),  # type: ignore[arg-type]
    ("metadata not JSON", UsageError, lambda s: s.store("zero", "x", metadata={"x": float("nan")})),
    ("NUL in metadata", UsageError, lambda s: s.store("zero", "x", metadata={"k\x00": "v"})),
    ("k = 0", UsageError, lambda s: s.recall("zero", "x", k=0)),
    ("k = 101", UsageError, lambda s: s.recall("zero", "x", k=101)),
    ("k = True", UsageError, lambda s: s.recall("zero", "x", k=True)),
    ("query without words", UsageError, lambda s: s.recall("zero", "((((")),
    ("query not text", UsageError, lambda s: s.recall("zero", None)),  # type: ignore[arg-type]
    ("recall bad namespace", InvalidIdError, lambda s: s.recall("a/b", "x")),
    ("list limit 0", UsageError, lambda s: s.list("zero", limit=0)),
    ("list negative offset", UsageError, lambda s: s.list("zero", offset=-1)),
    ("list bad tags", UsageError, lambda s: s.list("zero", tags=[1])),
    ("get bad id", InvalidIdError, lambda s: s.get("zero", "../mem")),
    ("delete bad id", InvalidIdError, lambda s: s.delete("zero", "")),
]


@pytest.mark.parametrize(("case", "error", "call"), BAD_CALLS, ids=[c[0] for c in BAD_CALLS])
def test_bad_input_raises_the_same_errors(
    backend: MemoryBackend, case: str, error: type[Exception], call: Callable[[MemoryBackend], Any]
) -> None:
    backend.store("zero", "something already there")
    with pytest.raises(error) as info:
        call(backend)
    assert type(info.value) is error, case
    assert backend.count("zero") == 1


def test_secrets_are_redacted_before_they_are_stored(backend: MemoryStore) -> None:
    record = backend.store(
        "zero",
        f"deploy with {AWS_KEY} and {GITHUB_TOKEN} for the bot",
        tags=["deploy"],
        metadata={"password": "Hunter2Secret!", "note": f"token {GITHUB_TOKEN}"},
    )
    for value in (record.text, record.metadata["note"]):
        assert AWS_KEY not in value and GITHUB_TOKEN not in value and "[REDACTED" in value
    assert record.metadata["password"].startswith("[REDACTED")
    got = backend.get("zero", record.id)
    assert got is not None and got.as_dict() == record.as_dict()
    assert [r.text for r, _ in backend.recall("zero", "deploy bot")] == [record.text]
    kept = stored_bytes(backend)
    assert record.id in kept  # the check below reads the right place
    for secret in (AWS_KEY, GITHUB_TOKEN, "Zx9Zx9", "Hunter2Secret"):
        assert secret not in kept


def test_session_tracking(backend: MemoryBackend, home: Home, clock: ManualClock) -> None:
    from phoenix_protocol.services._sessions import begin, end

    agent = Agent.open("zero", home=home, clock=clock)
    agent.state.start_session("s1")
    begin(agent, "s1")
    first = remember(agent, "The CI cache key includes the lockfile hash", tags=["ci"], store=backend)
    found = recall_for(agent, "ci cache key", store=backend)
    assert [r.id for r, _ in found] == [first.id]
    info = end(agent, "s1", summary="noted the CI cache")
    recent = agent.checkpoints.read(info.name).section("recent_memories")
    assert recent == {"memory_ids": [first.id], "last_recall_query": "ci cache key"}


# -- choosing the backend ----------------------------------------------------------------------


def test_phoenix_store_selects_postgresql(
    pg_url: str, home: Home, clock: ManualClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert open_memory_store(home, clock=clock).db.engine == "sqlite"
    monkeypatch.setenv("PHOENIX_STORE", pg_url)
    store = open_memory_store(home, clock=clock)
    assert store.db.engine == "postgresql" and store.db.url == pg_url  # type: ignore[attr-defined]
    agent = Agent.open("zero", home=home, clock=clock)
    record = remember(agent, "kept on the server")  # no store given: the configuration's
    assert store.get("zero", record.id) is not None
    assert [r.id for r, _ in recall_for(agent, "server")] == [record.id]
    assert not Path(home.root, "phoenix.db").exists()  # nothing went to the home's SQLite database


def test_unreachable_server_is_named_quickly(home: Home) -> None:
    url = "postgresql://postgres@127.0.0.1:5499/test"
    store = open_memory_store(home, config=load_config(home.root, overrides={"store": url}))
    assert store.db.engine == "postgresql"
    for call in (lambda: store.store("zero", "text"), lambda: store.recall("zero", "text"), lambda: store.count("z")):
        started = time.monotonic()
        with pytest.raises(PgError) as info:
            call()
        assert time.monotonic() - started < 10
        assert "127.0.0.1:5499/test" in str(info.value) and info.value.server == "postgresql://127.0.0.1:5499/test"


def test_a_failed_commit_stores_nothing(pg_url: str, clock: ManualClock, tmp_path: Path) -> None:
    """A commit that fails (here a deferred constraint refusing every row) raises, and the check
    ``store`` makes for a lost commit answer does not mistake it for a success."""
    store = MemoryStore(
        Home(str(tmp_path / "h")), config=load_config(str(tmp_path), overrides={"store": pg_url}), clock=clock
    )
    assert store.count("zero") == 0  # migrated
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute(
            "CREATE FUNCTION refuse() RETURNS trigger LANGUAGE plpgsql AS "
            "$$ BEGIN RAISE EXCEPTION 'refused at commit'; END $$"
        )
        conn.execute(
            "CREATE CONSTRAINT TRIGGER refuse AFTER INSERT ON phx_memories "
            "DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION refuse()"
        )
    with pytest.raises(PgError, match="refused at commit"):
        store.store("zero", "never kept")
    assert store.count("zero") == 0


# -- redaction of every text written or returned --------------------------------------------


def test_tags_and_metadata_keys_are_redacted(backend: MemoryStore) -> None:
    """A token used as a tag and an AWS key id used as a metadata key (at any depth) are
    redacted before they are stored; a tag filter naming the secret finds the redacted tag."""
    record = backend.store(
        "zero",
        "deploy notes",
        tags=[GITHUB_TOKEN, "deploy", f"key {AWS_KEY}"],
        metadata={AWS_KEY: "the key id", "nested": {f"user-{AWS_KEY}": [1, {GITHUB_TOKEN: True}]}},
    )
    returned = [
        record.as_dict(),
        backend.get("zero", record.id).as_dict(),  # type: ignore[union-attr]
        backend.list("zero")[0].as_dict(),
        backend.recall("zero", "deploy notes")[0][0].as_dict(),
        backend.export("zero"),
    ]
    for value in (*returned, stored_bytes(backend)):
        for secret in (AWS_KEY, GITHUB_TOKEN, GITHUB_TOKEN.lower(), AWS_KEY.lower(), "Zx9Zx9", "zx9zx9"):
            assert secret not in repr(value)
    assert record.tags == ["[REDACTED:github-token]", "deploy", "key [REDACTED:aws-access-key]"]
    assert all(k.startswith("[REDACTED") for k in record.metadata if k != "nested")
    assert [r.id for r in backend.list("zero", tags=[GITHUB_TOKEN])] == [record.id]
    assert [r.id for r, _ in backend.recall("zero", "deploy", tags=[GITHUB_TOKEN])] == [record.id]


def test_what_an_earlier_release_stored_unredacted_is_redacted_when_returned(backend: MemoryStore) -> None:
    """Rows written before tags and keys were redacted (an earlier release's PostgreSQL table)
    come back redacted from every read."""
    record = backend.store("zero", "an old note", tags=["old"])
    tags = backend.db.dialect.text_array([GITHUB_TOKEN, "old"])
    meta = json.dumps({AWS_KEY: f"and {GITHUB_TOKEN}"})
    backend.db.transaction(
        lambda tx: tx.execute("UPDATE phx_memories SET tags = ?, metadata = ? WHERE id = ?", (tags, meta, record.id))
    )
    for value in (
        backend.get("zero", record.id).as_dict(),  # type: ignore[union-attr]
        backend.list("zero")[0].as_dict(),
        backend.recall("zero", "old note")[0][0].as_dict(),
        backend.export("zero"),
    ):
        assert AWS_KEY not in repr(value) and GITHUB_TOKEN not in repr(value) and "REDACTED" in repr(value)


def test_recall_never_echoes_a_secret_in_its_query(
    backend: MemoryStore, home: Home, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from phoenix_protocol.cli._main import cli

    if backend.db.engine == "postgresql":
        monkeypatch.setenv("PHOENIX_STORE", backend.db.url)  # type: ignore[attr-defined]
    backend.store("zero", "deploy notes for the bot")
    question = f"deploy notes for the bot with {GITHUB_TOKEN}"  # enough words in common to pass the minimum score
    assert cli(["memory", "recall", question, "--agent", "zero", "--json", "--home", home.root]) == 0
    out = capsys.readouterr().out
    answer = json.loads(out)
    assert GITHUB_TOKEN not in out and "REDACTED" in answer["query"] and len(answer["results"]) == 1


def test_memories_of_the_same_millisecond_list_in_the_order_stored(backend: MemoryStore) -> None:
    ids = [backend.store("zero", f"same instant {i}").id for i in range(5)]  # the clock does not move
    assert [r.id for r in backend.list("zero")] == ids[::-1]
    assert [r["id"] for r in backend.export("zero")] == ids


def test_a_row_changed_by_hand_is_found_by_its_new_words(backend: MemoryStore) -> None:
    """The full-text index follows an UPDATE (a hand repair, a redaction run), not only inserts."""
    record = backend.store("zero", "apples and pears")
    backend.db.transaction(
        lambda tx: tx.execute("UPDATE phx_memories SET text = ? WHERE id = ?", ("plums and cherries", record.id))
    )
    assert backend.recall("zero", "apples") == []
    assert [r.id for r, _ in backend.recall("zero", "plums")] == [record.id]
    assert backend.delete("zero", record.id) is True and backend.recall("zero", "plums") == []
