"""Recall quality on a labelled set, per engine and per mode, beside the ranking it replaced.

    .venv/bin/python bench/recall_quality.py                 # the held-out set, both engines
    .venv/bin/python bench/recall_quality.py --set dev       # the tuning set
    .venv/bin/python bench/recall_quality.py --engines sqlite --modes baseline,lexical

Each engine gets a fresh store (a temporary home's ``phoenix.db``; a fresh schema of the
PostgreSQL server ``--pg`` names, dropped afterwards) holding the set's memories, stored with a
``ManualClock`` at their ``age_days``. Then every query is recalled with ``k = 3`` by:

- ``baseline``: the ranking before issue 34 (the engines' full-text search: FTS5 BM25 on SQLite,
  ``ts_rank_cd`` on PostgreSQL; no stop words, no minimum score), run here as that code ran it;
- ``lexical``: ``MemoryStore.recall`` (BM25 in Python, stop words, minimum score);
- ``semantic``: the same fused with the ``[persona]`` extra's sentence embeddings (``recall_for``'s
  ``mode="semantic"``).

Figures: hit@1 and hit@3 over the queries that have an answer; no-answer precision: the share of
the queries without an answer that got nothing back; answered-but-empty: queries with an answer
that got nothing; mean ms per recall; and whether the two engines returned the same memories in
the same order with the same scores for every query.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from phoenix_protocol.core._clock import ManualClock
from phoenix_protocol.core._config import load_config
from phoenix_protocol.core._home import Home
from phoenix_protocol.store import _db, _pg
from phoenix_protocol.store._db import Tx
from phoenix_protocol.store._memory import MemoryStore, _query_words

DATA = Path(__file__).parent / "data"
DAY_MS = 86_400_000
NOW_MS = 1_795_000_000_000
NAMESPACE = "bench"


def baseline_recall(store: MemoryStore, query: str, k: int) -> list[tuple[str, float]]:
    """Recall as it was before issue 34 (``MemoryStore.recall`` at a55e476): the engine's own
    full-text match of the OR-ed words, its own rank, newest first on ties."""
    words = _query_words(query)
    order = " AND m.namespace = ? ORDER BY rank DESC, m.created_ms DESC, m.seq DESC LIMIT ?"

    def work(tx: Tx) -> list[tuple[str, float]]:
        if tx.dialect.postgres:  # the generated ``document`` tsvector, each word an English plainto_tsquery
            tsquery = " || ".join(["plainto_tsquery('english', ?)"] * len(words))
            sql = (
                "SELECT m.id, ts_rank_cd(m.document, q.query) AS rank FROM phx_memories m "  # noqa: S608 - '?' only
                f"CROSS JOIN (SELECT {tsquery} AS query) q WHERE numnode(q.query) > 0 AND m.document @@ q.query"
            )
            params: list[Any] = [*words, NAMESPACE, k]
        else:  # the FTS5 table (Porter stemming), each word quoted; BM25 negated (FTS5's best is its lowest)
            sql = (
                "SELECT m.id, -bm25(phx_memories_fts) AS rank FROM phx_memories m "
                "JOIN phx_memories_fts ON phx_memories_fts.rowid = m.seq WHERE phx_memories_fts MATCH ?"
            )
            params = [" OR ".join('"' + w.replace('"', "") + '"' for w in words), NAMESPACE, k]
        rows = tx.all(sql + order, params)
        return [(str(r[0]), round(float(r[1]), 6)) for r in rows]

    return store.db.read(work)


def fill(store: MemoryStore, clock: ManualClock, memories: list[dict[str, Any]]) -> dict[str, str]:
    """Store the set's memories; ``{memory id: key}``."""
    keys = {}
    for i, memory in enumerate(memories):
        clock.set(NOW_MS - int(memory["age_days"]) * DAY_MS + i)
        keys[store.store(NAMESPACE, memory["text"], tags=memory["tags"]).id] = memory["key"]
    clock.set(NOW_MS + DAY_MS)
    return keys


def run_mode(store: MemoryStore, mode: str, query: str, embedder: Any) -> list[tuple[str, float]]:
    if mode == "baseline":
        return baseline_recall(store, query, 3)
    found = store.recall(NAMESPACE, query, k=3, embedder=embedder if mode == "semantic" else None)
    return [(r.id, s) for r, s in found]


def evaluate(
    store: MemoryStore, keys: dict[str, str], queries: list[dict[str, Any]], mode: str, embedder: Any
) -> tuple[dict[str, Any], list[list[tuple[str, float]]]]:
    if mode == "semantic":
        run_mode(store, mode, "warm up", embedder)  # embeds the memories once, as a first recall would
    answered = [q for q in queries if q["answer"]]
    unanswerable = [q for q in queries if not q["answer"]]
    hit1 = hit3 = empty = abstained = 0
    times = []
    outputs = []
    misses = []
    for q in queries:
        start = time.perf_counter()
        found = run_mode(store, mode, q["query"], embedder)
        times.append((time.perf_counter() - start) * 1000)
        named = [(keys[i], s) for i, s in found]
        outputs.append(named)
        got = [key for key, _ in named]
        if q["answer"]:
            hit1 += got[:1] == [q["answer"]]
            hit3 += q["answer"] in got[:3]
            empty += not got
            if got[:1] != [q["answer"]]:
                misses.append(f"{q['query']!r}: want {q['answer']}, got {got}")
        else:
            abstained += not got
            if got:
                misses.append(f"{q['query']!r}: want nothing, got {got}")
    figures = {
        "hit@1": f"{hit1}/{len(answered)} ({100 * hit1 / len(answered):.0f} %)",
        "hit@3": f"{hit3}/{len(answered)} ({100 * hit3 / len(answered):.0f} %)",
        "no-answer precision": f"{abstained}/{len(unanswerable)}",
        "answered but empty": f"{empty}/{len(answered)}",
        "ms per recall": f"{statistics.median(times):.1f}",
        "misses": misses,
    }
    return figures, outputs


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--set", choices=("test", "dev"), default="test")
    parser.add_argument("--engines", default="sqlite,postgresql")
    parser.add_argument("--modes", default="baseline,lexical,semantic")
    parser.add_argument("--pg", default=os.environ.get("PHOENIX_TEST_PG", "postgresql://postgres@127.0.0.1:5432/test"))
    parser.add_argument("--misses", action="store_true", help="list every query not answered right")
    args = parser.parse_args(argv)
    data = json.loads((DATA / f"recall_{args.set}.json").read_text())
    modes = args.modes.split(",")
    embedder = None
    if "semantic" in modes:
        from phoenix_protocol.services._persona import SentenceEmbedder

        embedder = SentenceEmbedder()
        embedder.ensure_available()
    results: dict[tuple[str, str], dict[str, Any]] = {}
    outputs: dict[tuple[str, str], list[Any]] = {}
    for engine in args.engines.split(","):
        with tempfile.TemporaryDirectory() as tmp:
            schema = None
            store_setting = "sqlite"
            if engine == "postgresql":
                import psycopg

                schema = "phx_bench_" + uuid.uuid4().hex[:12]
                with psycopg.connect(args.pg, autocommit=True) as conn:
                    conn.execute(f"CREATE SCHEMA {schema}")
                store_setting = f"{args.pg}?options=-csearch_path%3D{schema}"
            try:
                home = Home(str(Path(tmp) / "home"))
                clock = ManualClock()
                config = load_config(home.root, overrides={"store": store_setting})
                store = MemoryStore(home, config=config, clock=clock)
                keys = fill(store, clock, data["memories"])
                for mode in modes:
                    results[engine, mode], outputs[engine, mode] = evaluate(
                        store, keys, data["queries"], mode, embedder
                    )
            finally:
                _db.close_all()
                if schema:
                    _pg.close_all()
                    import psycopg

                    with psycopg.connect(args.pg, autocommit=True) as conn:
                        conn.execute(f"DROP SCHEMA {schema} CASCADE")
    answered = sum(1 for q in data["queries"] if q["answer"])
    print(
        f"set {args.set}: {len(data['memories'])} memories, {len(data['queries'])} queries "
        f"({answered} with an answer), k = 3\n"
    )
    columns = ["hit@1", "hit@3", "no-answer precision", "answered but empty", "ms per recall"]
    print("| engine | mode | " + " | ".join(columns) + " |")
    print("|---|---|" + "---:|" * len(columns))
    for (engine, mode), figures in results.items():
        print(f"| {engine} | {mode} | " + " | ".join(str(figures[c]) for c in columns) + " |")
    engines = args.engines.split(",")
    if len(engines) == 2:
        print()
        for mode in modes:
            same = outputs[engines[0], mode] == outputs[engines[1], mode]
            differ = sum(a != b for a, b in zip(outputs[engines[0], mode], outputs[engines[1], mode], strict=True))
            print(f"{mode}: same results on both engines: {'yes' if same else f'no ({differ} queries differ)'}")
    if args.misses:
        for (engine, mode), figures in results.items():
            print(f"\n{engine} / {mode}:")
            for miss in figures["misses"]:
                print("  " + miss)
    return 0


if __name__ == "__main__":
    sys.exit(main())
