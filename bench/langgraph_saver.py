"""``PhoenixSaver`` (``integrations.langgraph``) beside LangGraph's own ``SqliteSaver`` (and
``PostgresSaver`` with ``--pg``), side by side in one run.

    PYTHONPATH=src .venv/bin/python bench/langgraph_saver.py [--n 10000] [--pg URL] [--out FILE]

Needs ``langgraph-checkpoint-sqlite`` and, for ``--pg``, ``langgraph-checkpoint-postgres`` (the
``[bench]`` extra; not runtime dependencies of Phoenix).

The sides, each on a store of its own: ``PhoenixSaver`` with its default retention
(``keep=DEFAULT_KEEP``, 100), ``PhoenixSaver(keep=None)`` (every checkpoint kept, as LangGraph's
savers keep them), and LangGraph's saver; on SQLite each is a file in WAL mode with
``synchronous=FULL`` (Phoenix's ``phoenix.db`` in a fresh home; SqliteSaver's connection is checked
to be FULL too), on PostgreSQL each a fresh schema of the server ``--pg`` names (dropped
afterwards; every 1,000 rounds and before the reads each side's tables get the ``VACUUM (ANALYZE)``
that autovacuum would give them, untimed: the test server runs with autovacuum off, and without
statistics PostgresSaver's ``list`` takes 46 s for 1,000 checkpoints, 1.4 s with them). ``N`` checkpoints go onto one thread, each as a graph's step makes it: the
``messages`` channel (five 200-character messages) at a new version from the saver's own
``get_next_version``, its parent the previous one, and ``new_versions`` naming the channel (so that
``PostgresSaver`` stores the values, in its blobs table). Every round times one ``put`` per side in
a shuffled order, so that the machine's noise hits every side alike; then 200 rounds of
``get_tuple`` (the newest) and 10 of ``list`` (the whole thread, consumed). Disk: on SQLite the
database files once the WAL is checkpointed into the main file (``wal_checkpoint(TRUNCATE)``), on
PostgreSQL ``pg_total_relation_size`` of the side's tables after the last ``VACUUM (ANALYZE)``.

Prints a Markdown section (and writes it to ``--out`` when given).
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import os
import platform
import random
import shutil
import sqlite3
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from _report import cpu, revision, version
from langgraph.checkpoint.base import BaseCheckpointSaver, empty_checkpoint
from langgraph.checkpoint.sqlite import SqliteSaver  # type: ignore[import-not-found, import-untyped, unused-ignore]

from phoenix_protocol.core._home import Home
from phoenix_protocol.integrations.langgraph import DEFAULT_KEEP, PhoenixSaver
from phoenix_protocol.store._db import DB_NAME, open_database

MESSAGES = ["x" * 200] * 5
GETS = 200
LISTS = 10
MAINTAIN_EVERY = 1000
"""Every this many rounds of puts (and after the last), each PostgreSQL side is vacuumed and analysed."""


@dataclass
class Side:
    """One saver under test and what was measured on it."""

    name: str
    saver: BaseCheckpointSaver[Any]
    disk: Callable[[], tuple[int, int]]
    """``(bytes on disk, checkpoints kept)``, measured after the run."""
    maintain: Callable[[], None] | None = None
    """What the store's own upkeep would do meanwhile (PostgreSQL: autovacuum's ``VACUUM (ANALYZE)``)."""
    config: Any = field(default_factory=lambda: {"configurable": {"thread_id": "bench", "checkpoint_ns": ""}})
    version: Any = None
    put_ms: list[float] = field(default_factory=list)
    get_ms: list[float] = field(default_factory=list)
    list_ms: list[float] = field(default_factory=list)
    listed: int = 0

    def put(self, step: int) -> None:
        self.version = self.saver.get_next_version(self.version, None)
        checkpoint = empty_checkpoint()
        checkpoint["channel_values"] = {"messages": list(MESSAGES)}
        checkpoint["channel_versions"] = {"messages": self.version}
        t0 = time.perf_counter()
        self.config = self.saver.put(
            self.config, checkpoint, {"source": "loop", "step": step}, {"messages": self.version}
        )
        self.put_ms.append(1000 * (time.perf_counter() - t0))

    def get(self) -> None:
        t0 = time.perf_counter()
        found = self.saver.get_tuple({"configurable": {"thread_id": "bench"}})
        self.get_ms.append(1000 * (time.perf_counter() - t0))
        assert found is not None and found.checkpoint["channel_values"]["messages"] == MESSAGES, self.name

    def list(self) -> None:
        t0 = time.perf_counter()
        self.listed = sum(1 for _ in self.saver.list({"configurable": {"thread_id": "bench"}}))
        self.list_ms.append(1000 * (time.perf_counter() - t0))


# -- the stores -------------------------------------------------------------------------------


def _sqlite_disk(path: str, table: str) -> Callable[[], tuple[int, int]]:
    def measure() -> tuple[int, int]:
        with contextlib.closing(sqlite3.connect(path)) as conn:
            conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            rows = int(conn.execute(f"SELECT count(*) FROM {table}").fetchone()[0])  # noqa: S608 - a constant
        folder, base = os.path.split(path)
        size = sum(os.path.getsize(os.path.join(folder, f)) for f in os.listdir(folder) if f.startswith(base))
        return size, rows

    return measure


def _phoenix_home(root: str, url: str | None, keep: int | None) -> PhoenixSaver:
    previous = os.environ.pop("PHOENIX_STORE", None)
    if url is not None:
        os.environ["PHOENIX_STORE"] = url
    try:
        return PhoenixSaver(open_database(Home(root)), keep=keep)
    finally:
        os.environ.pop("PHOENIX_STORE", None)
        if previous is not None:
            os.environ["PHOENIX_STORE"] = previous


def sqlite_sides(stack: contextlib.ExitStack, tmp: str) -> list[Side]:
    sides = []
    for name, keep in (("PhoenixSaver keep=100", DEFAULT_KEEP), ("PhoenixSaver keep=None", None)):
        root = os.path.join(tmp, name.replace(" ", "-"))
        saver = _phoenix_home(root, None, keep)
        sides.append(Side(name, saver, _sqlite_disk(os.path.join(root, DB_NAME), "phx_lg_checkpoints")))
    path = os.path.join(tmp, "sqlitesaver", "checkpoints.db")
    os.makedirs(os.path.dirname(path))
    conn = stack.enter_context(contextlib.closing(sqlite3.connect(path, check_same_thread=False)))
    theirs = SqliteSaver(conn)
    theirs.setup()
    sync = conn.execute("PRAGMA synchronous").fetchone()[0]
    mode = conn.execute("PRAGMA journal_mode").fetchone()[0]
    assert (sync, mode) == (2, "wal"), f"SqliteSaver runs with synchronous={sync}, journal_mode={mode}"
    sides.append(Side("SqliteSaver", theirs, _sqlite_disk(path, "checkpoints")))
    return sides


def _pg_schema(stack: contextlib.ExitStack, server: str) -> str:
    """A fresh schema of ``server``, dropped when ``stack`` closes; returns a URL using it."""
    import psycopg

    schema = "phx_bench_" + uuid.uuid4().hex[:10]
    with psycopg.connect(server, autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {schema}")

    def drop() -> None:
        from phoenix_protocol.store import _pg

        _pg.close_all()
        with psycopg.connect(server, autocommit=True) as conn:
            conn.execute(f"DROP SCHEMA {schema} CASCADE")

    stack.callback(drop)
    joiner = "&" if "?" in server else "?"
    return f"{server}{joiner}options=-csearch_path%3D{schema}"


def _pg_disk(url: str, tables: tuple[str, ...], counted: str) -> Callable[[], tuple[int, int]]:
    import psycopg

    def measure() -> tuple[int, int]:
        def scalar(conn: psycopg.Connection[Any], sql: str, params: tuple[Any, ...] = ()) -> int:
            row = conn.execute(sql, params).fetchone()
            assert row is not None
            return int(row[0])

        with psycopg.connect(url, autocommit=True) as conn:
            size = sum(scalar(conn, "SELECT pg_total_relation_size(%s::regclass)", (t,)) for t in tables)
            rows = scalar(conn, f"SELECT count(*) FROM {counted}")  # noqa: S608 - a constant
        return size, rows

    return measure


def _vacuum(url: str, tables: tuple[str, ...]) -> Callable[[], None]:
    import psycopg

    def run() -> None:
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(f"VACUUM (ANALYZE) {', '.join(tables)}".encode())

    return run


def pg_sides(stack: contextlib.ExitStack, tmp: str, server: str) -> list[Side]:
    from langgraph.checkpoint.postgres import PostgresSaver  # type: ignore[import-not-found, unused-ignore]

    sides = []
    for name, keep in (
        ("PhoenixSaver keep=100, PostgreSQL", DEFAULT_KEEP),
        ("PhoenixSaver keep=None, PostgreSQL", None),
    ):
        url = _pg_schema(stack, server)
        saver = _phoenix_home(os.path.join(tmp, name.replace(" ", "-").replace(",", "")), url, keep)
        tables: tuple[str, ...] = ("phx_lg_checkpoints", "phx_lg_writes")
        sides.append(Side(name, saver, _pg_disk(url, tables, "phx_lg_checkpoints"), _vacuum(url, tables)))
    url = _pg_schema(stack, server)
    theirs = stack.enter_context(PostgresSaver.from_conn_string(url))
    theirs.setup()
    tables = ("checkpoints", "checkpoint_blobs", "checkpoint_writes", "checkpoint_migrations")
    sides.append(Side("PostgresSaver", theirs, _pg_disk(url, tables, "checkpoints"), _vacuum(url, tables)))
    return sides


# -- the run ----------------------------------------------------------------------------------


def rounds(sides: list[Side], count: int, op: Callable[[Side], None], rng: random.Random) -> None:
    for _ in range(count):
        order = list(sides)
        rng.shuffle(order)
        for side in order:
            op(side)


def _p(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def table(title: str, sides: list[Side], baseline: Side) -> list[str]:
    out = [
        f"#### {title}",
        "",
        "| side | put mean / p50 / p90 (ms) | get_tuple p50 (ms) | list whole thread p50 (ms) | checkpoints kept | disk (MB) |",
        "|---|---|---|---|---|---|",
    ]
    disks = {side.name: side.disk() for side in sides}
    for side in sides:
        size, rows = disks[side.name]
        out.append(
            f"| {side.name} | {statistics.fmean(side.put_ms):.3f} / {_p(side.put_ms, 0.5):.3f} / "
            f"{_p(side.put_ms, 0.9):.3f} | {_p(side.get_ms, 0.5):.3f} | {_p(side.list_ms, 0.5):.1f} ({side.listed}) | "
            f"{rows:,} | {size / 1e6:.2f} |"
        )
    out += ["", f"Ratios to {baseline.name} (below 1: Phoenix is faster or smaller):", ""]
    out += ["| side | put mean | put p50 | get_tuple p50 | list p50 | disk |", "|---|---|---|---|---|---|"]
    base_disk = disks[baseline.name][0]
    for side in sides:
        if side is baseline:
            continue
        out.append(
            f"| {side.name} | {statistics.fmean(side.put_ms) / statistics.fmean(baseline.put_ms):.2f}x | "
            f"{_p(side.put_ms, 0.5) / _p(baseline.put_ms, 0.5):.2f}x | "
            f"{_p(side.get_ms, 0.5) / _p(baseline.get_ms, 0.5):.2f}x | "
            f"{_p(side.list_ms, 0.5) / _p(baseline.list_ms, 0.5):.3f}x | {disks[side.name][0] / base_disk:.3f}x |"
        )
    return [*out, ""]


def run(args: argparse.Namespace) -> str:
    rng = random.Random(20261128)
    tmp = tempfile.mkdtemp(prefix="phx-lg-bench-")
    started = time.perf_counter()
    try:
        with contextlib.ExitStack() as stack:
            groups: list[tuple[str, list[Side]]] = [("SQLite", sqlite_sides(stack, tmp))]
            if args.pg:
                groups.append(("PostgreSQL", pg_sides(stack, tmp, args.pg)))
            everyone = [side for _, sides in groups for side in sides]
            for step in range(args.n):  # every side's put in each round, in a shuffled order
                order = list(everyone)
                rng.shuffle(order)
                for side in order:
                    side.put(step)
                if (step + 1) % MAINTAIN_EVERY == 0 or step + 1 == args.n:
                    for side in everyone:
                        if side.maintain is not None:
                            side.maintain()
            rounds(everyone, GETS, Side.get, rng)
            rounds(everyone, LISTS, Side.list, rng)
            wall = time.perf_counter() - started
            out = [
                "### Run",
                "",
                f"`PYTHONPATH=src .venv/bin/python bench/langgraph_saver.py {' '.join(sys.argv[1:])}`".replace(
                    " `", "`"
                ),
                "",
                f"{datetime.date.today().isoformat()}, {revision()}, Python {platform.python_version()}, SQLite "
                f"{sqlite3.sqlite_version}, langgraph-checkpoint {version('langgraph-checkpoint')}, "
                f"langgraph-checkpoint-sqlite {version('langgraph-checkpoint-sqlite')}, "
                f"langgraph-checkpoint-postgres {version('langgraph-checkpoint-postgres')}, {cpu()}, "
                f"{os.cpu_count()} CPUs; {args.n:,} checkpoints on one thread per side, puts interleaved; "
                f"{GETS} get_tuple and {LISTS} list rounds; PostgreSQL sides vacuumed and analysed every "
                f"{MAINTAIN_EVERY:,} rounds; {wall:.0f} s.",
                "",
            ]
            for title, sides in groups:
                out += table(title, sides, sides[-1])
            return "\n".join(out)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--n", type=int, default=10_000, help="checkpoints per side (default 10,000)")
    parser.add_argument("--pg", help="a PostgreSQL server URL: also PhoenixSaver and PostgresSaver on it")
    parser.add_argument("--out", help="also write the Markdown section to this file")
    args = parser.parse_args(argv)
    text = run(args)
    print(text)
    if args.out:
        with open(args.out, "w", encoding="utf-8") as fh:
            fh.write(text + "\n")


if __name__ == "__main__":
    main()
