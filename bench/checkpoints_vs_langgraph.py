"""Phoenix's checkpoint store side by side with LangGraph's ``SqliteSaver``, in one run.

    .venv/bin/python bench/checkpoints_vs_langgraph.py [--quick]

Needs ``langgraph-checkpoint-sqlite`` in the venv (not a runtime dependency of Phoenix).

For agent states of 10 KB and 1 MB (JSON-encoded size of the same Python dict on both sides), with
1,000 checkpoints of history on each side, interleaved in a shuffled order so that machine noise hits both
alike:

- a durable checkpoint write: Phoenix ``store.create()`` vs ``SqliteSaver.put()``;
- reading the latest: Phoenix ``store.latest()`` (checksum verified) vs ``get_tuple()``;
- listing the 10 newest: Phoenix ``store.entries(limit=10)`` vs ``list(limit=10)`` consumed fully.

Phoenix is measured twice: "session" checkpoints with ``keep_session_checkpoints=1000`` (so it really
holds 1,000, like the SQLite database) and "routine" checkpoints with the default retention (keeps 3).
Then the disk test: 10,000 successive checkpoints of a 100 KB state (Phoenix routine, default
retention) vs 10,000 ``put``s on one SqliteSaver thread; bytes on disk of each.

Fairness: SQLite runs with ``PRAGMA synchronous=FULL`` (every commit fsyncs the WAL) in the WAL
journal mode ``SqliteSaver.setup()`` selects. Phoenix's default section providers (state.json, ops
log, git...) are replaced by one section carrying the same state dict LangGraph stores as its channel
values. Untimed bulk phases (building the history, the disk test) skip Phoenix's secret redaction of
the state, after checking once that redaction leaves that state unchanged (the bytes written are the
same); every timed Phoenix call runs the code as shipped, redaction included.

Targets (the issue): write <= 1.0x put, latest <= 1.0x get_tuple, entries <= 0.25x list, disk after
10,000 routine checkpoints <= 1% of SqliteSaver's files. Prints a Markdown section for
docs/benchmarks.md and writes it to bench/results/checkpoints_vs_langgraph.md (full run only, unless
``--out`` is given). ``--quick`` scales everything down (100 checkpoints of history, 1,000 in the disk
test) to check the script, not to quote.
"""

from __future__ import annotations

import argparse
import compileall
import contextlib
import datetime
import fcntl
import functools
import gc
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
from collections.abc import Callable, Iterator
from importlib import metadata
from typing import Any

import xxhash

# langgraph-checkpoint-sqlite is a bench-only dependency: where it is not installed (``make test``
# type-checks bench/ without it) the imports are Any, hence the two-code ignores.
from langchain_core.runnables import RunnableConfig  # type: ignore[import-not-found, unused-ignore]
from langgraph.checkpoint.base import ChannelVersions, Checkpoint, CheckpointMetadata  # type: ignore[import-not-found, unused-ignore]
from langgraph.checkpoint.base.id import uuid6  # type: ignore[import-not-found, unused-ignore]
from langgraph.checkpoint.sqlite import SqliteSaver  # type: ignore[import-not-found, unused-ignore]
from phoenix_protocol._checkpoint_index import Catalog

import phoenix_protocol
import phoenix_protocol._checkpoints as cp_mod
import phoenix_protocol._durable as durable_mod
import phoenix_protocol._redact as redact_mod
from phoenix_protocol import Agent, Home
from phoenix_protocol._checkpoints import CheckpointStore
from phoenix_protocol._durable import FileLock, InPlaceFile
from phoenix_protocol._jsonio import dumps_indented_bytes, dumps_line, loads_large

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
RESULTS = os.path.join(HERE, "results", "checkpoints_vs_langgraph.md")
THREAD = "bench"
KB = 1024
TARGETS = {"write": 1.0, "latest": 1.0, "list": 0.25}
OPS = ("write", "latest", "list")
OP_LABEL = {
    "write": "durable write",
    "latest": "read latest",
    "list": "list 10 newest",
}
PHX_CALL = {"write": "`create()`", "latest": "`latest()`", "list": "`entries(limit=10)`"}
LG_CALL = {"write": "`put()`", "latest": "`get_tuple()`", "list": "`list(limit=10)`"}


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


class Holder:
    """The state the Phoenix collector returns (shared by every Phoenix store of a run)."""

    def __init__(self, state: dict[str, Any]) -> None:
        self.state = state


def open_phoenix(home: str, agent_id: str, holder: Holder, **overrides: Any) -> CheckpointStore:
    agent = Agent.open(agent_id, home=Home(home), config_overrides=overrides)
    store = agent.checkpoints
    store._collectors.clear()  # no state.json / ops / git providers: only the state, like LangGraph
    store.register("payload", collector=lambda ctx: holder.state)
    return store


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


@contextlib.contextmanager
def no_redaction() -> Iterator[None]:
    """Untimed bulk phases only: skip redacting the (verified secret-free) state."""
    original = redact_mod.redact_value
    redact_mod.redact_value = lambda value: value
    try:
        yield
    finally:
        redact_mod.redact_value = original


class Floor:
    """The least a durable write made this way does, for the analysis only: the same state
    encoded by the same encoder as one section, its xxh3-128, one write in place into a log whose
    blocks exist, ``posix_fadvise`` + one ``fdatasync``, under a file lock. No redaction, no check
    of the log's identity or of other writers' frames, no session metadata, no retention, no ops
    event: what Phoenix's ``create()`` adds to this is its bookkeeping."""

    def __init__(self, directory: str, holder: Holder) -> None:
        self.holder = holder
        self.region = max(4 << 20, 8 * (encoded_size(holder.state) + 4096))
        self.fd = os.open(os.path.join(directory, "floor.log"), os.O_RDWR | os.O_CREAT, 0o600)
        self.lock_fd = os.open(os.path.join(directory, "floor.log.lock"), os.O_RDWR | os.O_CREAT, 0o600)
        os.pwrite(self.fd, b"\0" * self.region, 0)
        os.fsync(self.fd)
        self.pos = 0

    def write(self) -> None:
        fcntl.flock(self.lock_fd, fcntl.LOCK_EX)
        try:
            body = dumps_indented_bytes({"payload": self.holder.state})
            digest = xxhash.xxh3_128_hexdigest(body).encode()
            length = len(digest) + 1 + len(body)
            if self.pos + length > self.region:
                self.pos = 0
            os.pwritev(self.fd, [digest, b"\n", body], self.pos)
            if durable_mod._ADVISE:
                os.posix_fadvise(self.fd, self.pos, length, os.POSIX_FADV_DONTNEED)
            durable_mod._datasync(self.fd)  # skipped with the others' flushes by without_flushes
            self.pos += length
        finally:
            fcntl.flock(self.lock_fd, fcntl.LOCK_UN)

    def close(self) -> None:
        os.close(self.fd)
        os.close(self.lock_fd)


# -- measuring ------------------------------------------------------------------------------


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
        self.mean = statistics.fmean(samples)
        self.p90 = p90(samples)


Op = tuple[Callable[[], object] | None, Callable[[], object]]
"""(untimed setup run before each call or None, the timed call)."""


def interleave(ops: dict[str, Op], rounds: int, burst: int = 1) -> dict[str, Stats]:
    """Milliseconds per call, every side once per round, in an order shuffled each round (with a
    fixed seed) so that each side follows each other side equally often: what ran just before
    (its cache footprint, its I/O) weighs on all alike. ``burst=1``: each call follows another
    side's call ("interleaved"); ``burst=n``: each side makes ``n`` consecutive calls per turn
    and only calls 2..n are kept ("back-to-back", warm caches)."""
    names = list(ops)
    samples: dict[str, list[float]] = {name: [] for name in names}
    shuffler = random.Random(20261124)
    gc.collect()
    for _rnd in range(rounds):
        order = names[:]
        shuffler.shuffle(order)
        for name in order:
            setup, call = ops[name]
            for i in range(burst):
                if setup is not None:
                    setup()
                elapsed = timed(call)
                if burst == 1 or i > 0:
                    samples[name].append(elapsed)
    return {name: Stats(values) for name, values in samples.items()}


def disk_bytes(paths: list[str]) -> tuple[int, int]:
    """(apparent size, allocated blocks) of files and of every file under directories."""
    size = blocks = 0
    for path in paths:
        if os.path.isdir(path):
            st = os.stat(path)
            blocks += st.st_blocks * 512  # the directory itself
            for root, dirs, files in os.walk(path):
                for name in files + dirs:
                    st = os.stat(os.path.join(root, name))
                    if name in files:
                        size += st.st_size
                    blocks += st.st_blocks * 512
        elif os.path.exists(path):
            st = os.stat(path)
            size += st.st_size
            blocks += st.st_blocks * 512
    return size, blocks


class Breakdown:
    """Wraps functions to add up the time spent in each (and count fsyncs) while ``run`` runs."""

    def __init__(self) -> None:
        self.spent: dict[str, float] = {}
        self.calls: dict[str, int] = {}
        self._undo: list[tuple[object, str, object]] = []

    def wrap(self, owner: object, attr: str, label: str) -> None:
        original: Callable[..., Any] = getattr(owner, attr)
        spent, calls = self.spent, self.calls
        spent.setdefault(label, 0.0)
        calls.setdefault(label, 0)

        depth = [0]

        def wrapper(*args: Any, **kwargs: Any) -> Any:
            if depth[0]:  # a recursive call (redact_value): counted in the outermost one
                return original(*args, **kwargs)
            depth[0] += 1
            start = time.perf_counter()
            try:
                return original(*args, **kwargs)
            finally:
                spent[label] += (time.perf_counter() - start) * 1000
                calls[label] += 1
                depth[0] -= 1

        self._undo.append((owner, attr, original))
        setattr(owner, attr, wrapper)

    def restore(self) -> None:
        for owner, attr, original in reversed(self._undo):
            setattr(owner, attr, original)
        self._undo.clear()

    def run(
        self, fn: Callable[[], object], reps: int, after: Callable[[], object] | None = None
    ) -> tuple[float, dict[str, tuple[float, float]]]:
        """Mean ms per call of ``fn``, and per label (mean ms per call of ``fn``, calls per call);
        ``after`` runs (untimed, but its parts counted) before the wrappers come off."""
        self.wrap(os, "fsync", "fsync")
        self.wrap(os, "fdatasync", "fdatasync")
        total = 0.0
        try:
            for _ in range(reps):
                total += timed(fn)
            if after is not None:
                after()
        finally:
            self.restore()
        return total / reps, {k: (self.spent[k] / reps, self.calls[k] / reps) for k in self.spent}


def phoenix_breakdown(store: CheckpointStore, reps: int) -> dict[str, tuple[float, dict[str, tuple[float, float]]]]:
    """Where ``create``, ``latest`` and ``entries`` spend their time ("- " rows are parts of the row
    above; "behind" rows run in the write-behind worker thread, not in the call)."""
    from phoenix_protocol._ops import OpsLog
    from phoenix_protocol._state import StateStore

    index = (
        (
            Catalog,
            "load",
            "load the catalogue (stat the log and the directory; a writer reads the header and past the end)",
        ),
        (Catalog, "_full_load", "- read index.json + the whole log"),
        (Catalog, "_reconcile", "- list the directory"),
    )
    plans: dict[
        str, tuple[Callable[[], object], int, tuple[tuple[object, str, str], ...], Callable[[], object] | None]
    ] = {
        "write": (
            lambda: store.create("session"),
            reps,
            (
                (CheckpointStore, "collect", "collect sections"),
                (cp_mod, "redact_sections", "redact secrets in the state (long lists: encoded, by slices)"),
                (StateStore, "read_or_none", "read state.json (session metadata)"),
                (FileLock, "acquire", "take the lock"),
                (FileLock, "release", "release the lock"),
                *index,
                (cp_mod, "encode", "encode: JSON + xxh3-128"),
                (CheckpointStore, "_retain", "retention (reads operations.jsonl while it changed)"),
                (Catalog, "put", "make it durable: one log frame"),
                (InPlaceFile, "write", "- write the frame + fdatasync"),
                (Catalog, "_settle", "- settle the log (when the next frame would not fit)"),
                (OpsLog, "record_later", "queue the ops event"),
                (Catalog, "flush_deferred", "behind: named files created, dropped ones removed"),
                (OpsLog, "flush_later", "behind: ops events appended"),
            ),
            store.flush,
        ),
        "latest": (
            store.latest,
            reps * 4,
            (
                *index,
                (cp_mod, "read_bytes", "read the checkpoint file"),
                (cp_mod, "decode", "verify checkpoint: xxh3-128 + JSON parse"),
            ),
            None,
        ),
        "list": (lambda: store.entries(limit=10), reps * 4, index, None),
    }
    out = {}
    for op, (fn, n, targets, after) in plans.items():
        b = Breakdown()
        for owner, attr, label in targets:
            if hasattr(owner, attr):  # the store's internals change: measure what exists
                b.wrap(owner, attr, label)
        out[op] = b.run(fn, n, after)
    return out


def codec_costs(state: dict[str, Any], lg: LangGraphThread, reps: int) -> dict[str, float]:
    """Medians (ms, back-to-back) of the codecs each side runs, outside any store."""
    text = dumps_indented_bytes(state)
    serde = lg.saver.serde
    typed = serde.dumps_typed(state)
    cases: dict[str, Callable[[], object]] = {
        "Phoenix: JSON encode (orjson, indented)": lambda: dumps_indented_bytes(state),
        "Phoenix: xxh3-128": lambda: xxhash.xxh3_128_hexdigest(text),
        "Phoenix: JSON decode (orjson)": lambda: loads_large(text),
        "Phoenix: redact the state (redact_value)": lambda: redact_mod.redact_value(state),
        "Phoenix: redact the sections as create() does (redact_sections)": lambda: cp_mod.redact_sections(
            {"payload": state}
        ),
        "LangGraph: serde dumps_typed (ormsgpack)": lambda: serde.dumps_typed(state),
        "LangGraph: serde loads_typed": lambda: serde.loads_typed(typed),
    }
    return {
        name: Stats(s.samples).median
        for name, s in interleave({k: (None, v) for k, v in cases.items()}, reps, burst=3).items()
    }


# -- the run -----------------------------------------------------------------------------------


class SizeResult:
    def __init__(self, size: int) -> None:
        self.size = size
        self.stats: dict[str, dict[str, Stats]] = {}
        self.warm: dict[str, dict[str, Stats]] = {}
        self.bytes_per_checkpoint: dict[str, int] = {}
        self.held: dict[str, int] = {}
        self.setup_seconds: dict[str, float] = {}
        self.breakdown: dict[str, tuple[float, dict[str, tuple[float, float]]]] = {}
        self.codecs: dict[str, float] = {}
        self.unflushed: dict[str, Stats] = {}


@contextlib.contextmanager
def without_flushes(lg: LangGraphThread) -> Iterator[None]:
    """Neither side flushes (SQLite ``synchronous=OFF``; Phoenix's ``fdatasync`` skipped): what
    a write costs besides its flush, for the analysis only."""
    import phoenix_protocol._durable as durable_mod

    datasync, advise = durable_mod._datasync, durable_mod._ADVISE
    lg.conn.execute("PRAGMA synchronous=OFF")
    durable_mod._datasync = lambda fd: None
    durable_mod._ADVISE = False
    try:
        yield
    finally:
        durable_mod._datasync, durable_mod._ADVISE = datasync, advise
        lg.conn.execute("PRAGMA synchronous=FULL")


def run_size(work: str, size: int, history: int, reps: int, breakdown_reps: int, pg: str | None = None) -> SizeResult:
    result = SizeResult(size)
    holder = Holder(make_state(size))
    if redact_mod.redact_value(holder.state) != holder.state:
        raise SystemExit("the generated state contains something redaction changes: fix make_state")
    base = os.path.join(work, f"s{size}")
    os.makedirs(base)
    home = os.path.join(base, ".phoenix")
    session = open_phoenix(home, "sessions", holder, keep_session_checkpoints=history)
    routine = open_phoenix(home, "routine", holder)
    synced = open_phoenix(home, "flushed", holder, keep_session_checkpoints=history)
    lg = LangGraphThread(os.path.join(base, "langgraph.sqlite"))
    floor = Floor(base, holder)
    on_pg = (
        open_phoenix(home, f"pg-{size}", holder, store=pg, keep_session_checkpoints=history) if pg is not None else None
    )

    def history_of(label: str, write: Callable[[], object]) -> None:
        """``history`` writes, each with the next step, timed into the setup figures."""
        started = time.perf_counter()
        for i in range(history):
            holder.state["step"] = i
            write()
        result.setup_seconds[label] = time.perf_counter() - started

    print(f"  {size // KB} KB: building {history} checkpoints of history on each side...", flush=True)
    with no_redaction():
        history_of("phoenix session history (no redaction)", lambda: session.create("session"))
        history_of("phoenix routine history (no redaction)", lambda: routine.create("routine"))
        history_of("phoenix flushed history (no redaction)", lambda: synced.create("session"))
        if on_pg is not None:
            history_of("phoenix on PostgreSQL history (no redaction)", lambda: on_pg.create("session"))
    history_of("SqliteSaver history", lambda: lg.put(lg.prepare(holder.state)))
    for store in (session, routine, synced):
        store.flush()  # the history's named files and events, before timing starts

    print(f"  {size // KB} KB: timing {reps} interleaved rounds of each operation...", flush=True)
    counter = [history]
    pending: dict[str, Any] = {}

    def next_state() -> None:
        counter[0] += 1
        holder.state["step"] = counter[0]

    def next_put() -> None:
        next_state()
        pending["args"] = lg.prepare(holder.state)

    def create_and_flush() -> None:
        synced.create("session")
        synced.flush()

    ops: dict[str, dict[str, Op]] = {
        "write": {
            "phoenix_session": (next_state, lambda: session.create("session")),
            "phoenix_routine": (next_state, lambda: routine.create("routine")),
            "phoenix_flushed": (next_state, create_and_flush),
            "floor": (next_state, floor.write),
            "langgraph": (next_put, lambda: lg.put(pending["args"])),
        },
        "latest": {
            "phoenix_session": (None, session.latest),
            "phoenix_routine": (None, routine.latest),
            "langgraph": (None, lg.latest),
        },
        "list": {
            "phoenix_session": (None, lambda: session.entries(limit=10)),
            "phoenix_routine": (None, lambda: routine.entries(limit=10)),
            "langgraph": (None, lg.newest),
        },
    }
    if on_pg is not None:
        ops["write"]["phoenix_pg"] = (next_state, lambda: on_pg.create("session"))
        ops["latest"]["phoenix_pg"] = (None, on_pg.latest)
        ops["list"]["phoenix_pg"] = (None, lambda: on_pg.entries(limit=10))
    for op, sides in ops.items():
        rounds = reps if op == "write" else reps * 4
        result.stats[op] = interleave(sides, rounds)
        result.warm[op] = interleave(sides, max(5, rounds // 4), burst=3)
    with without_flushes(lg):
        unflushed = {k: v for k, v in ops["write"].items() if k != "phoenix_flushed"}
        result.unflushed = interleave(unflushed, reps)
    assert lg.synchronous == int(lg.conn.execute("PRAGMA synchronous").fetchone()[0])
    checkpoint, problems = session.latest()
    assert (
        checkpoint is not None
        and not problems
        and checkpoint.section("payload")["messages"] == holder.state["messages"]
    )
    got = lg.latest()
    assert got is not None and got.checkpoint["channel_values"]["messages"] == holder.state["messages"]  # type: ignore[attr-defined, unused-ignore]
    assert len(session.entries()) == history and len(lg.newest()) == 10
    result.held = {
        "phoenix_session": len(session.entries()),
        "phoenix_routine": len(routine.entries()),
        "langgraph": int(lg.conn.execute("SELECT count(*) FROM checkpoints").fetchone()[0]),
    }
    if on_pg is not None:
        result.held["phoenix_pg"] = len(on_pg.entries())
        pg_latest, pg_problems = on_pg.latest()
        assert pg_latest is not None and not pg_problems
    result.bytes_per_checkpoint = {
        "phoenix": session.entries(limit=1)[0].size,
        "langgraph": lg.row_size(),
    }
    print(f"  {size // KB} KB: breakdown of Phoenix's calls...", flush=True)
    for store in (session, routine, synced):
        store.flush()
    result.breakdown = phoenix_breakdown(session, breakdown_reps)
    result.codecs = codec_costs(holder.state, lg, breakdown_reps * 2)
    lg.close()
    floor.close()
    for store in (session, routine, synced):
        store.flush()  # nothing of the write-behind may run into the removal
    shutil.rmtree(base)
    return result


class DiskResult:
    def __init__(self) -> None:
        self.count = 0
        self.size = 0
        self.phoenix: tuple[int, int] = (0, 0)
        self.phoenix_agent_dir: tuple[int, int] = (0, 0)
        self.phoenix_files = 0
        self.langgraph: dict[str, tuple[int, int]] = {}
        self.seconds: dict[str, float] = {}


def run_disk(work: str, count: int, size: int) -> DiskResult:
    result = DiskResult()
    result.count, result.size = count, size
    holder = Holder(make_state(size, seed=5))
    if redact_mod.redact_value(holder.state) != holder.state:
        raise SystemExit("the generated state contains something redaction changes: fix make_state")
    base = os.path.join(work, "disk")
    os.makedirs(base)
    store = open_phoenix(os.path.join(base, ".phoenix"), "routine", holder)  # default retention
    lg = LangGraphThread(os.path.join(base, "langgraph.sqlite"))
    spent = {"phoenix": 0.0, "langgraph": 0.0}
    print(f"  disk: {count} checkpoints of a {size // KB} KB state on each side...", flush=True)
    with no_redaction():
        for i in range(count):
            holder.state["step"] = i
            args = lg.prepare(holder.state)
            spent["phoenix"] += timed(lambda: store.create("routine"))
            spent["langgraph"] += timed(functools.partial(lg.put, args))
            if (i + 1) % max(1, count // 10) == 0:
                print(f"    {i + 1}/{count}", flush=True)
    flush_started = time.perf_counter()
    store.flush()  # the named files of the checkpoints retention kept, the events
    spent["phoenix"] += (time.perf_counter() - flush_started) * 1000
    result.seconds = {k: v / 1000 for k, v in spent.items()}
    lg.conn.commit()
    database = store.backend.db.where
    result.phoenix = disk_bytes([p for p in (database, database + "-wal") if os.path.exists(p)])
    result.phoenix_files = 1
    result.phoenix_agent_dir = disk_bytes([store.agent.dir])
    result.langgraph = {os.path.basename(p): disk_bytes([p]) for p in lg.files()}
    lg.close()
    shutil.rmtree(base)
    return result


# -- the report ------------------------------------------------------------------------------


def _version(dist: str) -> str:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return "not installed"


def _cpu() -> str:
    with contextlib.suppress(OSError), open("/proc/cpuinfo") as fh:
        for line in fh:
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or "unknown CPU"


def _revision() -> str:
    """The commit measured, and whether the store's source differed from it."""
    try:
        head = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True, check=True
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--", "src"], cwd=REPO, capture_output=True, text=True, check=True
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown revision"
    return f"commit {head}" + (" with uncommitted changes in src/" if dirty else "")


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

    from phoenix_protocol import _pg

    _pg.close_all()
    with psycopg.connect(server, autocommit=True) as conn:
        conn.execute(f"DROP SCHEMA {schema} CASCADE")


def _pg_where(url: str | None) -> str:
    from phoenix_protocol._pg import describe

    return describe(url) if url else ""


def render(
    sizes: list[SizeResult], disk: DiskResult, lg_info: dict[str, Any], args: argparse.Namespace, work: str, wall: float
) -> str:
    out: list[str] = []
    w = out.append
    today = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d")
    quick = (" --quick" if args.quick else "") + (f" --pg {args.pg}" if args.pg else "")
    w("## Checkpoint store vs LangGraph `SqliteSaver`\n")
    w("```sh")
    w(f".venv/bin/python bench/checkpoints_vs_langgraph.py{quick}")
    w("```\n")
    w(
        f"**{today}**, {platform.system()} {platform.machine()}, {os.cpu_count()} cores ({_cpu()}, a shared VM), "
        f"{_fs(work)} file system, Python {platform.python_version()}, SQLite {sqlite3.sqlite_version}, "
        f"phoenix-protocol {phoenix_protocol.__version__} ({_revision()}), langgraph-checkpoint-sqlite "
        f"{_version('langgraph-checkpoint-sqlite')} (langgraph-checkpoint {_version('langgraph-checkpoint')}, "
        f"ormsgpack {_version('ormsgpack')}). The whole run took {wall / 60:.1f} min.\n"
    )
    history = sizes[0].held["phoenix_session"] if sizes else 0
    w(
        f"Each side holds {history:,} checkpoints of one thread/agent before timing starts. The sides take turns "
        "(each round in a shuffled order, so that each side follows each other equally often and machine noise "
        "hits all alike), in two ways: *interleaved*, one call "
        "per turn, so every call follows another side's work (as a checkpoint call follows an agent's other "
        "work); *back-to-back*, three consecutive calls per turn of which the 2nd and 3rd are kept (warm CPU "
        "caches; what a tight loop measures). Times in ms, median (p90). Ratio = Phoenix median / SqliteSaver "
        "median.\n"
    )
    for res in sizes:
        w(
            f"### {res.size // KB:,} KB state ({res.bytes_per_checkpoint['phoenix']:,} B per Phoenix file, "
            f"{res.bytes_per_checkpoint['langgraph']:,} B per SQLite row)\n"
        )
        w(
            f"| operation | timing | SqliteSaver | Phoenix, {res.held['phoenix_session']:,} kept (`session`) "
            "| ratio | target "
            "| Phoenix `routine` (default retention: 3 kept) | ratio |"
        )
        w("|---|---|---:|---:|---:|---|---:|---:|")
        for op in OPS:
            for mode, table in (("interleaved", res.stats), ("back-to-back", res.warm)):
                lgs = table[op]["langgraph"]
                ses = table[op]["phoenix_session"]
                rou = table[op]["phoenix_routine"]
                ratio = ses.median / lgs.median
                verdict = "pass" if ratio <= TARGETS[op] else "**miss**"
                name = f"{OP_LABEL[op]}: {PHX_CALL[op]} vs {LG_CALL[op]}" if mode == "interleaved" else ""
                w(
                    f"| {name} | {mode}, {len(lgs.samples)} calls "
                    f"| {_ms(lgs.median)} ({_ms(lgs.p90)}) | {_ms(ses.median)} ({_ms(ses.p90)}) "
                    f"| {ratio:.2f}× | ≤ {TARGETS[op]:.2f}×: {verdict} "
                    f"| {_ms(rou.median)} ({_ms(rou.p90)}) | {rou.median / lgs.median:.2f}× |"
                )
        w("")
        lgs, ses, rou, syn = (
            res.stats["write"][k] for k in ("langgraph", "phoenix_session", "phoenix_routine", "phoenix_flushed")
        )
        w(
            f"Means of the interleaved writes (ms; the median hides what runs now and then: SQLite's WAL "
            f"checkpoints, Phoenix's log settling): SqliteSaver {_ms(lgs.mean)}, Phoenix `session` "
            f"{_ms(ses.mean)} ({ses.mean / lgs.mean:.2f}×), `routine` {_ms(rou.mean)} "
            f"({rou.mean / lgs.mean:.2f}×). A write that also waits for its named file and its ops event "
            f"(`create()` + `flush()`, a third agent holding as many session checkpoints, in the same rounds): "
            f"median {_ms(syn.median)} ({syn.median / lgs.median:.2f}× SqliteSaver), mean {_ms(syn.mean)}.\n"
        )
        flo, flw = res.stats["write"]["floor"], res.warm["write"]["floor"]
        ses_w = res.warm["write"]["phoenix_session"]
        w(
            "The floor of this design, in the same rounds (for the analysis only): the same state encoded "
            "the same way, its xxh3-128, one write in place into a log and one `fdatasync`, under a file "
            "lock, and nothing else (no redaction, no check of the log against other writers, no session "
            f"metadata, no retention, no ops event): median {_ms(flo.median)} interleaved "
            f"({flo.median / lgs.median:.2f}× SqliteSaver), {_ms(flw.median)} back-to-back "
            f"({flw.median / res.warm['write']['langgraph'].median:.2f}×). Phoenix's `create()` adds "
            f"{_ms(ses.median - flo.median)} ({_ms(ses_w.median - flw.median)} back-to-back): its "
            "bookkeeping.\n"
        )
        lgu, sesu, rouu, flu = (res.unflushed[k] for k in ("langgraph", "phoenix_session", "phoenix_routine", "floor"))
        w(
            f"The same writes without any flush (SQLite `synchronous=OFF`, Phoenix's `fdatasync` skipped; "
            f"interleaved, {len(lgu.samples)} calls, for the analysis only): SqliteSaver {_ms(lgu.median)}, "
            f"Phoenix `session` {_ms(sesu.median)} ({sesu.median / lgu.median:.2f}×), `routine` "
            f"{_ms(rouu.median)} ({rouu.median / lgu.median:.2f}×), the floor {_ms(flu.median)} "
            f"({flu.median / lgu.median:.2f}×): what each write costs besides its flush.\n"
        )
    if sizes and "phoenix_pg" in sizes[0].held:
        w("### The same checkpoints on PostgreSQL (issue 8)\n")
        w(
            f"`--pg {_pg_where(args.pg)}`: a third side in the same interleaved rounds, Phoenix with "
            "`store = postgresql://…` holding as many `session` checkpoints (one transaction per write: the "
            "agent's seq row locked, the catalogue read, the row inserted, retention's rows deleted). "
            "The server runs on the same machine; `synchronous_commit` as configured there.\n"
        )
        w(
            "| state | operation | SqliteSaver | Phoenix, files | Phoenix, PostgreSQL | PostgreSQL / files | PostgreSQL / SqliteSaver |"
        )
        w("|---|---|---:|---:|---:|---:|---:|")
        for res in sizes:
            for op in OPS:
                lgs, fil, pgs = (res.stats[op][k] for k in ("langgraph", "phoenix_session", "phoenix_pg"))
                w(
                    f"| {res.size // KB:,} KB | {OP_LABEL[op]} | {_ms(lgs.median)} | {_ms(fil.median)} "
                    f"| {_ms(pgs.median)} | {pgs.median / fil.median:.2f}× | {pgs.median / lgs.median:.2f}× |"
                )
        w("")
    ratio = disk.phoenix[0] / max(1, sum(v[0] for v in disk.langgraph.values()))
    lg_total = sum(v[0] for v in disk.langgraph.values())
    lg_alloc = sum(v[1] for v in disk.langgraph.values())
    w(f"### Disk after {disk.count:,} successive checkpoints of a {disk.size // KB} KB state\n")
    w("| | bytes (apparent) | allocated on disk | write time for all |")
    w("|---|---:|---:|---:|")
    w(
        f"| SqliteSaver: {' + '.join(f'{k} {_mb(v[0])}' for k, v in disk.langgraph.items())} "
        f"| {lg_total:,} | {lg_alloc:,} | {disk.seconds['langgraph']:.0f} s |"
    )
    w(
        f"| Phoenix `routine`, default retention: `checkpoints/` ({disk.phoenix_files} files incl. index) "
        f"| {disk.phoenix[0]:,} | {disk.phoenix[1]:,} | {disk.seconds['phoenix']:.0f} s (no redaction) |"
    )
    w(
        f"| Phoenix, whole agent directory (plus `ops.jsonl`, `state.json`) | {disk.phoenix_agent_dir[0]:,} "
        f"| {disk.phoenix_agent_dir[1]:,} | |"
    )
    verdict = "**pass**" if ratio <= 0.01 else "**miss**"
    w(f"\nPhoenix / SqliteSaver: **{ratio * 100:.3f}%** of the bytes (target ≤ 1%): {verdict}.\n")

    w("### What was measured, and how it was made fair\n")
    w(
        f"- Durability: SqliteSaver's connection runs `PRAGMA synchronous=FULL` (set explicitly; "
        f"`sqlite3.connect` already defaults to {lg_info['default_synchronous']}, i.e. FULL here) in journal mode "
        f"`{lg_info['journal_mode']}`, which `SqliteSaver.setup()` selects: every `put` commits and fsyncs the WAL "
        "(one `fdatasync`; the periodic WAL checkpoint adds more). Phoenix's `create` as shipped: the checkpoint "
        "is one frame written in place into `index.log` and `fdatasync`-ed (one flush, over blocks already "
        "allocated, as SQLite's WAL) before `create` returns; its named file, the removal of what retention "
        "dropped and the `checkpoint_created` ops event are written behind by a worker thread, "
        "`checkpoint_files_delay` (0.5 s) later in one batch (the row `create()` + `flush()` above waits for "
        "them instead). When the log fills, the next write settles it: the named files it holds are fsynced "
        "and `index.json` is replaced (the means show it)."
    )
    w(
        "- Same data: a deterministic coding-agent conversation (user turns, replies with code, tool output) "
        "whose compact JSON is exactly 10 KB / 1 MB / 100 KB; LangGraph stores it as its channel values "
        "(`Checkpoint.channel_values`, serialized by its default `JsonPlusSerializer`, i.e. ormsgpack), Phoenix as "
        'one registered section (`store.register("payload", ...)`) after clearing the default providers '
        "(`store._collectors.clear()`), so that neither side collects anything else. A `step` counter changes "
        "on every checkpoint."
    )
    w(
        "- Write: `store.create(type)` (collect, redact, encode + xxh3-128, retention, the log frame) vs "
        "`SqliteSaver.put(config, checkpoint, metadata, new_versions)` chained on the previous checkpoint; "
        "LangGraph's checkpoint dict (uuid6 id, versions) is built before the timer starts, as LangGraph's loop "
        "does before calling `put`. Read: `store.latest()` (checks the catalogue, reads the file, verifies the xxh3-128 "
        "and the schema, parses) vs `get_tuple(config)` without a checkpoint id (newest row, deserialized; "
        "no checksum). List: `store.entries(limit=10)` returns metadata from the catalogue in memory only, while "
        "`list(config, limit=10)` yields `CheckpointTuple`s with each checkpoint deserialized (the issue's "
        "comparison; LangGraph has no metadata-only listing)."
    )
    w(
        "- Timed Phoenix calls run the code as shipped, secret redaction of the state included. The untimed bulk "
        "phases (the history, the disk test) skip redaction after checking that it leaves the state unchanged, "
        "so the files are byte-identical; with redaction (about 0.4 s per 1 MB checkpoint here) the two 1 MB histories alone would take about 13 minutes. "
        "Both sides run in one process, one thread, on the same file system; the page cache is warm for both."
    )
    w(
        f"- Disk: Phoenix's whole `checkpoints/` directory (files, `index.json`, its lock file, the directory "
        f"itself in the allocated column) vs SqliteSaver's database, `-wal` and `-shm` files after "
        f"{disk.count:,} `put`s on one thread (LangGraph never deletes old checkpoints; "
        "`delete_thread` drops a whole thread)."
    )
    w("")
    w("### Where Phoenix's time goes\n")
    w(
        "Mean ms per call over extra calls on the store holding the history (each part is a wrapped function, "
        'so totals are a little above the medians above). Rows starting with "-" are parts of the row above; '
        'rows starting with "behind" run in the write-behind worker thread (flushed once after the calls), '
        "not in the call; the fsync rows count every fsync, also inside the rows that do them.\n"
    )
    for res in sizes:
        w(f"**{res.size // KB:,} KB state**\n")
        w("| call | part | ms per call | calls per call |")
        w("|---|---|---:|---:|")
        for op in OPS:
            total, parts = res.breakdown[op]
            w(f"| {PHX_CALL[op]} | **total** | **{_ms(total)}** | |")
            for label, (ms, calls) in parts.items():
                w(f"| | {label} | {_ms(ms)} | {calls:g} |")
        w("")
        w(
            "Codecs alone, outside any store (median ms, back-to-back): "
            + "; ".join(f"{k} {_ms(v)}" for k, v in res.codecs.items())
            + ".\n"
        )
    w(
        "Setup (untimed): "
        + "; ".join(
            f"{res.size // KB:,} KB: " + ", ".join(f"{k} {v:.0f} s" for k, v in res.setup_seconds.items())
            for res in sizes
        )
        + ".\n"
    )
    return "\n".join(out) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="scaled down: check the script, do not quote")
    parser.add_argument("--history", type=int, help="checkpoints of history (default 1000; --quick 100)")
    parser.add_argument("--reps", type=int, help="timed writes per side for 10 KB (default 100; --quick 20)")
    parser.add_argument("--disk-count", type=int, help="checkpoints in the disk test (default 10000; --quick 1000)")
    parser.add_argument(
        "--out", help=f"write the Markdown here (default: {os.path.relpath(RESULTS, REPO)}, full run only)"
    )
    parser.add_argument("--workdir", help="where to put the stores (default: a temporary directory, removed)")
    parser.add_argument(
        "--pg", metavar="URL", help="also time Phoenix on this PostgreSQL server (in a fresh schema, dropped after)"
    )
    args = parser.parse_args(argv)
    history = args.history or (100 if args.quick else 1000)
    reps = args.reps or (20 if args.quick else 100)
    disk_count = args.disk_count or (1000 if args.quick else 10_000)
    compileall.compile_dir(os.path.dirname(phoenix_protocol.__file__), quiet=1)
    started = time.perf_counter()
    work = tempfile.mkdtemp(prefix="phx-vs-langgraph-", dir=args.workdir)
    pg_store, schema = _pg_schema(args.pg) if args.pg else (None, None)
    try:
        probe = LangGraphThread(os.path.join(work, "probe.sqlite"))
        lg_info = {"default_synchronous": probe.default_synchronous, "journal_mode": probe.journal_mode}
        assert probe.synchronous == 2, "PRAGMA synchronous=FULL did not take"
        probe.close()
        print(f"working in {work}", flush=True)
        sizes = [
            run_size(work, 10 * KB, history, reps, breakdown_reps=40, pg=pg_store),
            run_size(work, 1024 * KB, history, max(10, reps // 5), breakdown_reps=8, pg=pg_store),
        ]
        disk = run_disk(work, disk_count, 100 * KB)
    finally:
        shutil.rmtree(work, ignore_errors=True)
        if schema is not None:
            _drop_schema(args.pg, schema)
    text = render(sizes, disk, lg_info, args, work, time.perf_counter() - started)
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
