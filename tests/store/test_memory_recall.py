"""Recall worth using (issue 34), on both engines: stop words, a minimum score, since/until, the
same ranking on SQLite and PostgreSQL, and semantic recall with the ``[persona]`` extra's model."""

from __future__ import annotations

import json
import random
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from phoenix_protocol.core._clock import ManualClock, iso_from_ms
from phoenix_protocol.core._config import load_config
from phoenix_protocol.core._errors import UsageError
from phoenix_protocol.core._home import Home
from phoenix_protocol.services._persona import SentenceEmbedder
from phoenix_protocol.store import _db
from phoenix_protocol.store._memory import MemoryStore, open_memory_store
from phoenix_protocol.store._recall import MIN_SCORE, bm25, fuse, terms

DAY = 86_400_000
DEV_SET = Path(__file__).parents[2] / "bench" / "data" / "recall_dev.json"


def _open(home: Home, clock: ManualClock, engine: str, request: pytest.FixtureRequest) -> MemoryStore:
    store = "sqlite" if engine == "sqlite" else request.getfixturevalue("pg_url")
    found = open_memory_store(home, config=load_config(home.root, overrides={"store": store}), clock=clock)
    assert found.db.engine == engine
    return found


@pytest.fixture(params=["sqlite", "postgresql"])
def memory(request: pytest.FixtureRequest, home: Home, clock: ManualClock) -> Iterator[MemoryStore]:
    """The memory store of a temporary home on each engine in turn."""
    yield _open(home, clock, request.param, request)
    _db.close_all()


class CountingEmbedder:
    """The real model (``SentenceEmbedder``), counting the texts it embeds."""

    def __init__(self) -> None:
        self.inner = SentenceEmbedder()
        self.name = self.inner.name
        self.embedded: list[str] = []

    def encode(self, texts: Sequence[str]) -> Any:
        self.embedded.extend(texts)
        return self.inner.encode(texts)


@pytest.fixture(scope="module")
def embedder() -> SentenceEmbedder:
    model = SentenceEmbedder()
    model.ensure_available()
    return model


def test_the_analyzer_drops_stop_words_and_stems() -> None:
    assert terms("How do we rotate the Keys? Rotating keys!") == ["rotat", "key", "rotat", "key"]
    assert terms("what is it that we should do") == []
    assert terms("Python 3.13 x y") == ["python", "3", "13"]


def test_bm25_is_a_share_of_the_query_weight() -> None:
    df = {"timer": 2, "drift": 1}
    full = bm25(["timer", "drift"], {"timer": 1, "drift": 1}, 4, df=df, count=10, mean_length=4.0)
    half = bm25(["timer", "drift"], {"timer": 1}, 4, df=df, count=10, mean_length=4.0)
    assert 0 < half < full < 1
    assert bm25(["timer"], {"other": 3}, 4, df=df, count=10, mean_length=4.0) == 0.0
    assert fuse([["a", "b"], ["a"]])["a"] == pytest.approx(1.0)
    assert fuse([["a", "b"], ["b"]])["b"] > fuse([["a", "b"], ["b"]])["a"]


def test_stop_words_never_match(memory: MemoryStore) -> None:
    deploy = memory.store("zero", "The deploy script is in the tools folder")
    memory.store("zero", "How do we do it? What is that for?")
    assert memory.recall("zero", "what is it that we should do") == []  # only stop words: nothing, no error
    assert [r.id for r, _ in memory.recall("zero", "where is the deploy script")] == [deploy.id]
    assert [r.id for r, _ in memory.recall("zero", "how do we deploy", min_score=0.0)] == [deploy.id]


def test_an_unrelated_question_gets_nothing(memory: MemoryStore) -> None:
    cache = memory.store("zero", "The cache warms up after every deploy of the API gateway service")
    memory.store("zero", "Nightly backups are copied to the S3 bucket acme-backups")
    question = "how do we warm the sauna before guests arrive in the evening on weekends"
    weak = memory.recall("zero", question, min_score=0.0)
    assert [r.id for r, _ in weak] == [cache.id] and 0 < weak[0][1] < MIN_SCORE  # one shared word
    assert memory.recall("zero", question) == []
    assert memory.recall("zero", "recipe for banana bread") == []
    with pytest.raises(UsageError, match="min_score"):
        memory.recall("zero", "cache", min_score=1.5)


def test_since_and_until(memory: MemoryStore, clock: ManualClock) -> None:
    start = clock.now_ms()
    ids = []
    for day in range(3):
        clock.set(start + day * DAY)
        ids.append(memory.store("zero", f"timer drift report of day {day}").id)

    def recalled(**window: Any) -> list[str]:
        return [r.id for r, _ in memory.recall("zero", "timer drift", k=10, **window)]

    def listed(**window: Any) -> list[str]:
        return [r.id for r in memory.list("zero", **window)]

    assert recalled() == ids[::-1]
    assert recalled(since=start + DAY) == listed(since=start + DAY) == [ids[2], ids[1]]
    assert recalled(until=start + DAY) == listed(until=start + DAY) == [ids[0]]  # until is exclusive
    window = {"since": iso_from_ms(start + DAY), "until": iso_from_ms(start + 2 * DAY)}
    assert recalled(**window) == listed(**window) == [ids[1]]
    aware = datetime.fromtimestamp((start + 2 * DAY) / 1000, tz=UTC)
    assert recalled(since=aware) == [ids[2]]
    assert recalled(since="2026-01-02") == recalled(since=start + DAY)  # a date alone: midnight UTC
    assert recalled(since=start + 3 * DAY) == []
    assert recalled(since=start + DAY, until=start) == listed(since=start + DAY, until=start) == []  # empty window
    for bad in ({"since": "yesterday"}, {"until": True}, {"since": [1]}):
        with pytest.raises(UsageError):
            memory.recall("zero", "timer", **bad)
        with pytest.raises(UsageError):
            memory.list("zero", **bad)


def test_a_memory_stored_before_the_index_is_analysed_on_recall(memory: MemoryStore) -> None:
    """Rows an earlier release stored (``analyzed`` 0, no terms) are found: analysed on the first recall."""
    record = memory.store("zero", "Redis evicted the session keys", tags=["cache"])
    memory.db.transaction(lambda tx: tx.execute("DELETE FROM phx_memory_terms WHERE memory_id = ?", (record.id,)))
    memory.db.transaction(lambda tx: tx.execute("UPDATE phx_memories SET analyzed = 0, term_count = 0"))
    assert [r.id for r, _ in memory.recall("zero", "evicted sessions")] == [record.id]
    assert [r.id for r, _ in memory.recall("zero", "cache")] == [record.id]  # its tags too
    row = memory.db.read(lambda tx: tx.one("SELECT analyzed, term_count FROM phx_memories"))
    assert row is not None and tuple(int(v) for v in row) == (1, 5)  # redis evict session key cache


def _corpus(seed: int) -> tuple[list[tuple[str, list[str], int]], list[str]]:
    """Memories of a small vocabulary (many ties, repeated words, shared stems) and queries."""
    rng = random.Random(seed)
    vocab = [
        "timer",
        "timers",
        "drift",
        "drifting",
        "cache",
        "caches",
        "deploy",
        "deployed",
        "key",
        "keys",
        "rotate",
        "index",
        "queue",
        "lock",
    ]
    vocab += [
        "backup",
        "restore",
        "worker",
        "pool",
        "socket",
        "retry",
        "retries",
        "token",
        "alert",
        "disk",
        "report",
        "schema",
    ]
    memories = []
    for i in range(120):
        words = rng.choices(vocab, k=rng.randint(1, 12))
        memories.append((" ".join(words), rng.sample(["ops", "bug", "api"], rng.randint(0, 2)), i // 7))
    queries = [" ".join(rng.choices(vocab, k=rng.randint(1, 5))) for _ in range(40)]
    return memories, queries


def test_both_engines_rank_the_same(home: Home, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    """The same memories, stored the same way, come back in the same order with the same scores."""
    dev = json.loads(DEV_SET.read_text())
    synthetic, synthetic_queries = _corpus(34)
    answers: dict[str, list[Any]] = {}
    for engine in ("sqlite", "postgresql"):
        clock = ManualClock()
        store = _open(Home(str(tmp_path / engine)), clock, engine, request)
        for text, tags, tick in synthetic:
            clock.set(1_767_225_600_000 + tick * 1000)  # several memories per instant: ties by order stored
            store.store("synthetic", text, tags=tags)
        for memory in dev["memories"]:
            store.store("dev", memory["text"], tags=memory["tags"])
        out: list[Any] = []
        for query in synthetic_queries:
            for only in (None, ["ops"]):
                found = store.recall("synthetic", query, k=20, tags=only, min_score=0.0)
                out.append([(r.text, r.tags, r.created_at, score) for r, score in found])
        for query in dev["queries"]:
            out.append([(r.text, score) for r, score in store.recall("dev", query["query"], k=5)])
        answers[engine] = out
        _db.close_all()
    assert sum(1 for found in answers["sqlite"] if len(found) > 1) > 40  # rankings, not single hits
    assert answers["sqlite"] == answers["postgresql"]


def test_semantic_recall_finds_a_paraphrase_and_keeps_embeddings(
    memory: MemoryStore, clock: ManualClock, embedder: SentenceEmbedder
) -> None:
    editor = memory.store("zero", "Alice edits code in Neovim with pyright as language server")
    clock.advance(1)
    release = memory.store("zero", "The release checklist: changelog, tag, publish")
    memory.store("zero", "Nightly backups are copied to the S3 bucket acme-backups")
    question = "which typing tool does she use for programming"
    assert memory.recall("zero", question) == []  # no word in common
    counting = CountingEmbedder()
    found = memory.recall("zero", question, embedder=counting)
    assert [r.id for r, _ in found] == [editor.id] and found[0][1] == 0.5  # first of one ranking in two
    assert len(counting.embedded) == 4  # three memories, once, and the query
    both = memory.recall("zero", "release steps before shipping a version", embedder=counting)
    assert [r.id for r, _ in both][:1] == [release.id] and both[0][1] == 1.0  # first in both rankings
    assert len(counting.embedded) == 5  # only the new query
    count = "SELECT count(*) FROM phx_memory_vectors"
    assert memory.db.read(lambda tx: tx.scalar(count)) == 3
    assert memory.recall("zero", "recipe for banana bread", embedder=counting) == []
    memory.db.transaction(
        lambda tx: tx.execute("UPDATE phx_memories SET text = ? WHERE id = ?", ("plums and cherries", editor.id))
    )
    assert memory.db.read(lambda tx: tx.scalar(count)) == 2  # a changed text drops its embedding
    assert memory.recall("zero", question, embedder=counting) == []
    assert counting.embedded[-2:] == ["plums and cherries", question]
    assert memory.delete("zero", release.id)
    assert memory.db.read(lambda tx: tx.scalar(count)) == 2  # the deleted memory's went with it


def test_semantic_recall_ranks_the_same_on_both_engines(
    home: Home, tmp_path: Path, request: pytest.FixtureRequest, embedder: SentenceEmbedder
) -> None:
    dev = json.loads(DEV_SET.read_text())
    answers = {}
    for engine in ("sqlite", "postgresql"):
        store = _open(Home(str(tmp_path / engine)), ManualClock(), engine, request)
        for memory in dev["memories"]:
            store.store("dev", memory["text"], tags=memory["tags"])
        answers[engine] = [
            [(r.text, s) for r, s in store.recall("dev", q["query"], k=5, embedder=embedder)] for q in dev["queries"]
        ]
        _db.close_all()
    assert sum(1 for found in answers["sqlite"] if found) >= 12
    assert answers["sqlite"] == answers["postgresql"]
