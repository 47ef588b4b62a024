"""Phoenix's checkpoint store side by side with LangGraph's ``SqliteSaver``, in one run.

    PYTHONPATH=src .venv/bin/python bench/checkpoints_vs_langgraph.py [--quick] [--pg URL]

Needs ``langgraph-checkpoint-sqlite`` (the ``[bench]`` extra; not a runtime dependency of Phoenix).

Both sides are SQLite files in WAL mode with ``synchronous=FULL`` (every commit fsyncs the WAL):
Phoenix's ``phoenix.db`` (the default store) and the ``SqliteSaver`` database. Phoenix keeps every
session checkpoint, as SqliteSaver keeps every checkpoint, so that a timed write is a write only
(with the default retention each write past the 50th would also delete the oldest). For agent states of
10 KB and 1 MB (the compact JSON size of the same Python dict on both sides), with ``--history``
checkpoints (1,000) already held on each side, interleaved in a shuffled order so that machine
noise hits both alike:

- **write**: the store's write of an already collected document,
  ``store.write_collected("session", {"payload": state})`` (the envelope encoded as JSON, its
  xxh3-128, one transaction: the agent's lock, retention, the insert, the commit), vs
  ``SqliteSaver.put()`` (its serde, the insert, the commit). Targets: p50 <= 1.0x, p90 <= 1.5x.
- **create()**: the whole ``create()`` as the hooks run it (the default providers: state.json,
  the ops log, brief, git, identity; plus the same state as a section; redaction; the write), a
  row of its own, no target.
- **restore latest, fresh process**: a new process per sample, imports done before the clock
  starts: ``Agent.open()`` + ``checkpoints.latest()`` (the database opened, the newest row read,
  its checksum and schema verified, JSON parsed) vs ``sqlite3.connect()`` + ``SqliteSaver`` +
  ``get_tuple()``. Targets: <= 1.0x at 10 KB, <= 1.5x at 1 MB.
- **list 10 newest**: ``entries(limit=10)`` vs ``list(limit=10)`` consumed. Target: <= 0.25x.

Prints a Markdown section for docs/benchmarks.md and writes it to
bench/results/checkpoints_vs_langgraph.md (full run only, unless ``--out`` is given).
``--quick`` scales everything down to check the script, not to quote.
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
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

from _report import cpu, revision, version

# langgraph-checkpoint-sqlite is a bench-only dependency: where it is not installed (``make test``
# type-checks bench/ without it) the imports are Any, hence the two-code ignores.
from langchain_core.runnables import RunnableConfig  # type: ignore[import-not-found, unused-ignore]
from langgraph.checkpoint.base import ChannelVersions, Checkpoint, CheckpointMetadata  # type: ignore[import-not-found, unused-ignore]
from langgraph.checkpoint.base.id import uuid6  # type: ignore[import-not-found, unused-ignore]
from langgraph.checkpoint.sqlite import SqliteSaver  # type: ignore[import-not-found, import-untyped, unused-ignore]

import phoenix_protocol.core._redact as redact_mod
from phoenix_protocol import Agent, Home
from phoenix_protocol.core._jsonio import dumps_line
from phoenix_protocol.services._checkpoints import CheckpointStore

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
RESULTS = os.path.join(HERE, "results", "checkpoints_vs_langgraph.md")
THREAD = "bench"
KB = 1024
KEEP_ALL = 1_000_000  # keep_session_checkpoints: every checkpoint kept, as SqliteSaver keeps them


# -- the agent state ---------------------------------------------------------------------------

_WORD_TEXT = (
    "the a an of to in for on with by from as at is are was be it this that which when then if not "
    "and or but so we you they our file files test tests function class module method value values "
    "result results error errors config path paths change changes update fix bug issue step plan "
    "next first last new old check run runs build cache cached key keys index list dict string "
    "number count size limit time read write load save parse return call calls handler request "
    "response user users session agent task tool output input line lines block data table row rows "
    "column query database schema field fields type types default option options retry timeout "
    "token count budget context window summary memory state status done pending failed passed "
    "works looks should would could need needs make makes add added remove removed keep kept "
    "because after before while until around about into over under between same other each every"
)
_WORDS = _WORD_TEXT.split()
_CODE = (
    "def {f}(self, {a}: str) -> list[str]:",
    "    {a} = self.{f}({b})",
    "    for {a} in {b}:",
    "        if not {a}:",
    "            continue",
    "    return [{a} for {a} in {b} if {a}]",
    "class {F}Handler:",
    "    cache_size = {n}",
    "    {a}.append({b}.strip())",
    "    with open({a}_path) as fh:",
    "        {b} = fh.read().splitlines()",
    "assert {f}({a}) == {n}",
)
_TOOL = (
    "tests/test_{f}.py::test_{a}_{b} PASSED",
    "tests/test_{f}.py::test_{a} FAILED - AssertionError: expected {n}, got {m}",
    "src/{a}/{f}.py:{n}:    {b} = {a}.{f}()",
    "{n} passed, {m} skipped in {n}.{m}s",
    "M src/{a}/{f}.py",
    "drwxr-xr-x  2 agent agent {n} Nov 21 {m}:{n} {a}",
)


def _sentence(rng: random.Random, n: int) -> str:
    words = [rng.choice(_WORDS) for _ in range(n)]
    return " ".join(words).capitalize() + "."


def _fill(rng: random.Random, template: str) -> str:
    return template.format(
        f=rng.choice(_WORDS[40:120]),
        F=rng.choice(_WORDS[40:120]).capitalize(),
        a=rng.choice(_WORDS[40:120]),
        b=rng.choice(_WORDS[40:120]),
        n=rng.randrange(1, 999),
        m=rng.randrange(0, 59),
    )


def _message(rng: random.Random, i: int) -> dict[str, Any]:
    kind = i % 3
    if kind == 0:
        role, content = "user", " ".join(_sentence(rng, rng.randrange(8, 25)) for _ in range(rng.randrange(1, 4)))
    elif kind == 1:
        prose = " ".join(_sentence(rng, rng.randrange(8, 25)) for _ in range(rng.randrange(2, 6)))
        code = "\n".join(_fill(rng, rng.choice(_CODE)) for _ in range(rng.randrange(4, 14)))
        role, content = "assistant", f"{prose}\n\n```python\n{code}\n```\n"
    else:
        role, content = "tool", "\n".join(_fill(rng, rng.choice(_TOOL)) for _ in range(rng.randrange(5, 30)))
    return {"role": role, "id": f"msg-{i:06d}", "content": content}


def encoded_size(state: dict[str, Any]) -> int:
    return len(dumps_line(state).encode("ascii"))


def make_state(size: int, seed: int = 3) -> dict[str, Any]:
    """A coding agent's conversation state whose compact JSON encoding is exactly ``size`` bytes."""
    rng = random.Random(seed)
    state: dict[str, Any] = {
        "step": 0,
        "plan": [_sentence(rng, 10) for _ in range(5)],
        "open_files": [f"src/{rng.choice(_WORDS[40:120])}/{rng.choice(_WORDS[40:120])}.py" for _ in range(6)],
        "messages": [],
    }
    messages: list[dict[str, Any]] = state["messages"]
    while encoded_size(state) < size:
        messages.append(_message(rng, len(messages)))
    last = messages[-1]
    while (excess := encoded_size(state) - size) > 0:
        last["content"] = last["content"][: max(0, len(last["content"]) - max(1, excess // 2))]
    last["content"] += " " * (size - encoded_size(state))
    assert encoded_size(state) == size
    return state


# -- the two stores ---------------------------------------------------------------------------------


class LangGraphThread:
    """One SqliteSaver thread with ``synchronous=FULL``; ``put`` chains successive checkpoints."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.conn = sqlite3.connect(path, check_same_thread=False)
        self.default_synchronous = int(self.conn.execute("PRAGMA synchronous").fetchone()[0])
        self.saver = SqliteSaver(self.conn)
        self.saver.setup()  # sets journal_mode=WAL
        self.conn.execute("PRAGMA synchronous=FULL")
        self.conn.commit()
        self.synchronous = int(self.conn.execute("PRAGMA synchronous").fetchone()[0])
        self.journal_mode = str(self.conn.execute("PRAGMA journal_mode").fetchone()[0])
        self.config: RunnableConfig = {"configurable": {"thread_id": THREAD, "checkpoint_ns": ""}}
        self.query: RunnableConfig = {"configurable": {"thread_id": THREAD, "checkpoint_ns": ""}}
        self.step = 0

    def prepare(self, state: dict[str, Any]) -> tuple[Checkpoint, CheckpointMetadata, ChannelVersions]:
        """The arguments of the next ``put`` (LangGraph's loop builds them before calling it)."""
        self.step += 1
        checkpoint: Checkpoint = {
            "v": 2,
            "id": str(uuid6(clock_seq=self.step)),
            "ts": datetime.datetime.now(datetime.UTC).isoformat(),
            "channel_values": dict(state),
            "channel_versions": dict.fromkeys(state, self.step),
            "versions_seen": {},
            "updated_channels": list(state),
        }
        meta: CheckpointMetadata = {"source": "loop", "step": self.step, "parents": {}}
        return checkpoint, meta, dict.fromkeys(state, self.step)

    def put(self, args: tuple[Checkpoint, CheckpointMetadata, ChannelVersions]) -> None:
        self.config = self.saver.put(self.config, args[0], args[1], args[2])

    def latest(self) -> object:
        return self.saver.get_tuple(self.query)

    def newest(self) -> list[Any]:
        return list(self.saver.list(self.query, limit=10))

    def row_size(self) -> int:
        row = self.conn.execute(
            "SELECT length(checkpoint) + length(metadata) FROM checkpoints ORDER BY checkpoint_id DESC LIMIT 1"
        ).fetchone()
        return int(row[0])

    def close(self) -> None:
        self.conn.close()

    def files(self) -> list[str]:
        return [self.path + suffix for suffix in ("", "-wal", "-shm")]


class Holder:
    """The state the Phoenix collector returns."""

    def __init__(self, state: dict[str, Any]) -> None:
        self.state = state


def open_phoenix(
    home: str, agent_id: str, holder: Holder, *, defaults: bool = False, **overrides: Any
) -> CheckpointStore:
    """An agent's store whose checkpoints carry ``holder.state`` as a section; ``defaults``: with
    Phoenix's own providers too (state.json, ops log, brief, git, identity), as the hooks run it."""
    agent = Agent.open(agent_id, home=Home(home), config_overrides=overrides)
    store = agent.checkpoints
    if not defaults:
        store._collectors.clear()
    store.register("payload", collector=lambda ctx: holder.state)
    return store


def timed(fn: Callable[[], object]) -> float:
    start = time.perf_counter()
    fn()
    return (time.perf_counter() - start) * 1000


def p90(samples: list[float]) -> float:
    return statistics.quantiles(samples, n=10, method="inclusive")[8] if len(samples) > 1 else samples[0]


class Stats:
    def __init__(self, samples: list[float]) -> None:
        self.samples = samples
        self.median = statistics.median(samples)
        self.p90 = p90(samples)


Op = tuple[Callable[[], object] | None, Callable[[], object]]
"""(untimed setup run before each call or None, the timed call)."""


def interleave(ops: dict[str, Op], rounds: int) -> dict[str, Stats]:
    """Milliseconds per call, every side once per round, in an order shuffled each round (fixed
    seed), so that each side follows each other side equally often."""
    names = list(ops)
    samples: dict[str, list[float]] = {name: [] for name in names}
    shuffler = random.Random(20261127)
    for _ in range(rounds):
        order = names[:]
        shuffler.shuffle(order)
        for name in order:
            setup, call = ops[name]
            if setup is not None:
                setup()
            samples[name].append(timed(call))
    return {name: Stats(values) for name, values in samples.items()}


# The fresh process: everything imported first, then the clock runs for open + read only.
FRESH = r"""
import sys, time, sqlite3
side, where, agent_id = sys.argv[1:4]
if side == "phoenix":
    import phoenix_protocol.services._agent, phoenix_protocol.services._checkpoints, phoenix_protocol.services._checkpoint_providers
    import phoenix_protocol.services._checkpoint_import, phoenix_protocol.core._config, phoenix_protocol.store._db
    import phoenix_protocol.store._schema, phoenix_protocol.store._checkpoints, phoenix_protocol.agent._state
    import xxhash, orjson
    from phoenix_protocol import Agent, Home
    start = time.perf_counter()
    checkpoint, problems = Agent.open(agent_id, home=Home(where)).checkpoints.latest()
    elapsed = time.perf_counter() - start
    assert checkpoint is not None and not problems and checkpoint.section("payload")["messages"]
else:
    from langgraph.checkpoint.sqlite import SqliteSaver
    start = time.perf_counter()
    conn = sqlite3.connect(where, check_same_thread=False)
    got = SqliteSaver(conn).get_tuple({"configurable": {"thread_id": "bench", "checkpoint_ns": ""}})
    elapsed = time.perf_counter() - start
    assert got is not None and got.checkpoint["channel_values"]["messages"]
print(elapsed * 1000)
"""


def fresh_latest(side: str, where: str, agent_id: str) -> float:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([os.path.join(REPO, "src"), os.environ.get("PYTHONPATH", "")])}
    out = subprocess.run(
        [sys.executable, "-c", FRESH, side, where, agent_id], capture_output=True, text=True, env=env, check=True
    ).stdout
    return float(out.strip().splitlines()[-1])


class SizeResult:
    def __init__(self, size: int) -> None:
        self.size = size
        self.stats: dict[str, dict[str, Stats]] = {}
        self.bytes_per_checkpoint: dict[str, int] = {}


# -- the report helpers ---


def _fs(path: str) -> str:
    best, kind = "", "unknown"
    with contextlib.suppress(OSError), open("/proc/mounts") as fh:
        for line in fh:
            fields = line.split()
            if len(fields) > 2 and path.startswith(fields[1]) and len(fields[1]) >= len(best):
                best, kind = fields[1], fields[2]
    return kind


def _ms(value: float) -> str:
    return f"{value:.3f}" if value < 1 else f"{value:.2f}" if value < 100 else f"{value:.0f}"


def _mb(value: int) -> str:
    return f"{value / 1e6:,.2f} MB" if value >= 1e5 else f"{value / 1e3:,.1f} KB"


def _pg_schema(server: str) -> tuple[str, str]:
    """A fresh schema on ``server``; returns its store URL and its name."""
    import uuid

    import psycopg

    schema = "phx_ckptbench_" + uuid.uuid4().hex[:8]
    with psycopg.connect(server, autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {schema}")
    return f"{server}?options=-csearch_path%3D{schema}", schema


def _drop_schema(server: str, schema: str) -> None:
    import psycopg

    from phoenix_protocol.store import _pg

    _pg.close_all()
    with psycopg.connect(server, autocommit=True) as conn:
        conn.execute(f"DROP SCHEMA {schema} CASCADE")


def _pg_where(url: str | None) -> str:
    from phoenix_protocol.store._pg import describe

    return describe(url) if url else ""


def run_size(work: str, size: int, history: int, reps: int, fresh: int, pg: str | None = None) -> SizeResult:
    result = SizeResult(size)
    holder = Holder(make_state(size))
    if redact_mod.redact_value(holder.state) != holder.state:
        raise SystemExit("the generated state contains something redaction changes: fix make_state")
    base = os.path.join(work, f"s{size}")
    os.makedirs(base)
    home = os.path.join(base, ".phoenix")
    # Retention keeps every one (as SqliteSaver does): a timed write is a write, not also a delete.
    store = open_phoenix(home, "sessions", holder, keep_session_checkpoints=KEEP_ALL)
    hooks = open_phoenix(home, "hooked", holder, defaults=True, keep_session_checkpoints=history)
    hooks.agent.state.set_status("working", "Port the scheduler to asyncio")
    lg = LangGraphThread(os.path.join(base, "langgraph.sqlite"))
    on_pg = (
        open_phoenix(home, f"pg-{size}", holder, store=pg, keep_session_checkpoints=KEEP_ALL)
        if pg is not None
        else None
    )
    sections = {"payload": holder.state}
    print(f"  {size // KB} KB: building {history} checkpoints of history on each side...", flush=True)
    for i in range(history):
        holder.state["step"] = i
        store.write_collected("session", sections)
        lg.put(lg.prepare(holder.state))
        if on_pg is not None:
            on_pg.write_collected("session", sections)
    print(f"  {size // KB} KB: timing {reps} interleaved rounds of each operation...", flush=True)
    counter = [history]
    pending: dict[str, Any] = {}

    def next_state() -> None:
        counter[0] += 1
        holder.state["step"] = counter[0]

    def next_put() -> None:
        next_state()
        pending["args"] = lg.prepare(holder.state)

    ops: dict[str, dict[str, Op]] = {
        "write": {
            "phoenix": (next_state, lambda: store.write_collected("session", sections)),
            "langgraph": (next_put, lambda: lg.put(pending["args"])),
        },
        "create": {"phoenix": (next_state, lambda: hooks.create("session"))},
        "list": {
            "phoenix": (None, lambda: store.entries(limit=10)),
            "langgraph": (None, lambda: list(lg.saver.list(lg.query, limit=10))),
        },
    }
    if on_pg is not None:
        ops["write"]["phoenix_pg"] = (next_state, lambda: on_pg.write_collected("session", sections))
        ops["list"]["phoenix_pg"] = (None, lambda: on_pg.entries(limit=10))
    for op, sides in ops.items():
        result.stats[op] = interleave(sides, reps if op != "list" else reps * 4)
    store.flush()
    hooks.flush()
    print(f"  {size // KB} KB: restoring the latest in {fresh} fresh processes per side...", flush=True)
    fresh_ops: dict[str, Op] = {
        "phoenix": (None, lambda: None),
        "langgraph": (None, lambda: None),
    }
    samples: dict[str, list[float]] = {name: [] for name in fresh_ops}
    shuffler = random.Random(7)
    for _ in range(fresh):
        order = list(fresh_ops)
        shuffler.shuffle(order)
        for side in order:
            where = home if side == "phoenix" else lg.path
            samples[side].append(fresh_latest(side, where, "sessions"))
    result.stats["fresh latest"] = {name: Stats(values) for name, values in samples.items()}
    assert len(store.entries()) >= history
    latest, problems = store.latest()
    assert latest is not None and not problems and latest.section("payload")["messages"] == holder.state["messages"]
    result.bytes_per_checkpoint = {"phoenix": store.entries(limit=1)[0].size, "langgraph": lg.row_size()}
    lg.close()
    shutil.rmtree(base)
    return result


TARGETS: dict[str, dict[int, tuple[float, float | None]]] = {
    # op -> size -> (p50 ratio, p90 ratio or None)
    "write": {10 * KB: (1.0, 1.5), 1024 * KB: (1.0, 1.5)},
    "fresh latest": {10 * KB: (1.0, None), 1024 * KB: (1.5, None)},
    "list": {10 * KB: (0.25, None), 1024 * KB: (0.25, None)},
}
LABEL = {
    "write": "write an already collected document: `write_collected()` vs `put()`",
    "create": "the whole `create()` as the hooks run it (providers, redaction, write)",
    "fresh latest": "restore the latest in a fresh process: `Agent.open()` + `latest()` vs connect + `get_tuple()`",
    "list": "list the 10 newest: `entries(limit=10)` vs `list(limit=10)`",
}


def render(sizes: list[SizeResult], args: argparse.Namespace, wall: float, history: int) -> str:
    out = [
        "### Run",
        "",
        f"`PYTHONPATH=src .venv/bin/python bench/checkpoints_vs_langgraph.py {' '.join(sys.argv[1:])}`".replace(
            " `", "`"
        ),
        "",
        f"{datetime.date.today().isoformat()}, {revision()}, Python {platform.python_version()}, SQLite "
        f"{sqlite3.sqlite_version}, langgraph-checkpoint-sqlite {version('langgraph-checkpoint-sqlite')}, "
        f"{cpu()}, {os.cpu_count()} CPUs, {_fs(tempfile.gettempdir())}; {history} checkpoints of history on each "
        f"side; both WAL + `synchronous=FULL`; {wall:.0f} s.",
        "",
        "| operation | state | Phoenix p50 / p90 (ms) | SqliteSaver p50 / p90 (ms) | ratio p50 / p90 | target | met |",
        "|---|---|---|---|---|---|---|",
    ]
    for op in ("write", "create", "fresh latest", "list"):
        for r in sizes:
            st = r.stats.get(op)
            if not st:
                continue
            phx = st["phoenix"]
            lg = st.get("langgraph")
            size = f"{r.size // KB} KB"
            if lg is None:
                out.append(f"| {LABEL[op]} | {size} | {_ms(phx.median)} / {_ms(phx.p90)} | | | | |")
                continue
            p50, p90r = phx.median / lg.median, phx.p90 / lg.p90
            target = TARGETS[op][r.size]
            met = p50 <= target[0] and (target[1] is None or p90r <= target[1])
            wanted = f"p50 <= {target[0]}x" + (f", p90 <= {target[1]}x" if target[1] else "")
            out.append(
                f"| {LABEL[op]} | {size} | {_ms(phx.median)} / {_ms(phx.p90)} | {_ms(lg.median)} / {_ms(lg.p90)} "
                f"| {p50:.2f}x / {p90r:.2f}x | {wanted} | {'yes' if met else '**no**'} |"
            )
            pg = st.get("phoenix_pg")
            if pg is not None:
                out.append(f"| ... Phoenix on PostgreSQL | {size} | {_ms(pg.median)} / {_ms(pg.p90)} | | | | |")
    out += [
        "",
        "Bytes per checkpoint: "
        + "; ".join(
            f"{r.size // KB} KB state: Phoenix {r.bytes_per_checkpoint['phoenix']:,}, SqliteSaver "
            f"{r.bytes_per_checkpoint['langgraph']:,}"
            for r in sizes
        )
        + " (Phoenix's body is indented JSON text, for `jq`; SqliteSaver's msgpack).",
        "",
    ]
    return "\n".join(out) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="scaled down: check the script, do not quote")
    parser.add_argument("--history", type=int, help="checkpoints of history (default 1000; --quick 50)")
    parser.add_argument("--reps", type=int, help="timed writes per side for 10 KB (default 200; --quick 20)")
    parser.add_argument("--fresh", type=int, help="fresh processes per side and size (default 30; --quick 5)")
    parser.add_argument(
        "--out", help=f"write the Markdown here (default: {os.path.relpath(RESULTS, REPO)}, full run only)"
    )
    parser.add_argument("--workdir", help="where to put the stores (default: a temporary directory, removed)")
    parser.add_argument(
        "--pg", metavar="URL", help="also time Phoenix on this PostgreSQL server (in a fresh schema, dropped after)"
    )
    args = parser.parse_args(argv)
    history = args.history or (50 if args.quick else 1000)
    reps = args.reps or (20 if args.quick else 200)
    fresh = args.fresh or (5 if args.quick else 30)
    started = time.perf_counter()
    work = tempfile.mkdtemp(prefix="phx-vs-langgraph-", dir=args.workdir)
    pg_store, schema = _pg_schema(args.pg) if args.pg else (None, None)
    try:
        sizes = [
            run_size(work, 10 * KB, history, reps, fresh, pg=pg_store),
            run_size(work, 1024 * KB, history, max(10, reps // 4), fresh, pg=pg_store),
        ]
    finally:
        shutil.rmtree(work, ignore_errors=True)
        if schema is not None:
            _drop_schema(args.pg, schema)
    text = render(sizes, args, time.perf_counter() - started, history)
    print()
    print(text)
    out = args.out or (None if args.quick else RESULTS)
    if out:
        os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
        with open(out, "w") as fh:
            fh.write(text)
        print(f"written to {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
