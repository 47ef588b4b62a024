"""Load test of the memory bridge on loopback (issue 7): throughput, p50/p99, zero errors, zero lost writes.

    .venv/bin/python bench/memory_bridge_load.py [--clients 50] [--requests 200] [--agents 10] [--pg URL]

With ``--pg URL`` (issue 8) the server keeps memory on that PostgreSQL server (a fresh schema,
dropped afterwards; checkpoints stay in the home's files) and the results go to
``bench/results/memory_bridge_load_pg.md``.

Starts ``phx serve`` (the console script's code, ``python -m phoenix_protocol serve``) on a
temporary home with one token, then runs ``--clients`` threads, each with its own
``PhoenixClient`` (one kept-alive HTTP/1.1 connection), each sending ``--requests`` requests: 40 %
memory stores, 30 % recalls, 15 % session checkpoints (writes), 15 % latest-checkpoint reads,
spread over ``--agents`` agents (each restored first: a session start) so that writers contend on the same memory database and the same
checkpoint indexes. Every request is timed from the client's side.

Afterwards every acknowledged write is read back: each memory id through ``GET /memory/...``
(the list of the agent's namespace) and each checkpoint name in the agent's checkpoint index on
disk (retention is raised for the run so that none is pruned). Prints Markdown and writes
``bench/results/memory_bridge_load.md``.
"""

from __future__ import annotations

import argparse
import os
import platform
import random
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from phoenix_protocol.client import NotFoundError, PhoenixClient, ServerError
from phoenix_protocol.core._home import Home
from phoenix_protocol.services._agent import Agent
from phoenix_protocol.store._tokens import TokenStore

ROOT = Path(__file__).resolve().parents[1]
WORDS = ("timer", "drift", "loop", "event", "callback", "release", "parser", "schema", "index", "token", "namespace")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return 0.0
    index = min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))
    return ordered[index]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--clients", type=int, default=50)
    parser.add_argument("--requests", type=int, default=200)
    parser.add_argument("--agents", type=int, default=10)
    parser.add_argument("--no-write", action="store_true", help="Do not write bench/results/memory_bridge_load.md.")
    parser.add_argument("--pg", metavar="URL", help="keep memory on this PostgreSQL server (a fresh schema)")
    args = parser.parse_args()
    env = {k: v for k, v in os.environ.items() if k != "PHOENIX_STORE"}
    schema = None
    if args.pg:
        import uuid

        import psycopg

        schema = "phx_bridgebench_" + uuid.uuid4().hex[:8]
        with psycopg.connect(args.pg, autocommit=True) as conn:
            conn.execute(f"CREATE SCHEMA {schema}")
        env["PHOENIX_STORE"] = f"{args.pg}?options=-csearch_path%3D{schema}"

    work = tempfile.mkdtemp(prefix="phoenix-bridge-bench-")
    home = Home(os.path.join(work, "home"))
    home.ensure()
    with open(os.path.join(home.root, "phoenix.toml"), "w", encoding="utf-8") as fh:
        fh.write("keep_session_checkpoints = 100000\n")
    token, _info = TokenStore(home).create(["*"], ["*"], label="bench")
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    server = subprocess.Popen(
        [sys.executable, "-m", "phoenix_protocol", "serve", "--port", str(port), "--home", home.root],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=env,
    )
    try:
        with PhoenixClient(url, token) as probe:
            deadline = time.monotonic() + 30
            while True:
                try:
                    probe.health()
                    break
                except ServerError:
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(0.05)
        with PhoenixClient(url, token) as phx:
            for a in range(args.agents):  # each agent starts a session (seed 002's restore) first
                phx.restore(f"agent-{a}")
        result = run(url, token, args.clients, args.requests, args.agents)
        verify(url, token, home, result)
    finally:
        server.terminate()
        server.wait(timeout=30)
        if schema is not None:
            import psycopg

            with psycopg.connect(args.pg, autocommit=True) as conn:
                conn.execute(f"DROP SCHEMA {schema} CASCADE")
    report = render(args, result)
    print(report)
    if not args.no_write:
        name = "memory_bridge_load_pg.md" if args.pg else "memory_bridge_load.md"
        (ROOT / "bench" / "results" / name).write_text(report)
    return 0 if not result["errors"] and not result["lost"] else 1


def run(url: str, token: str, clients: int, per_client: int, agents: int) -> dict[str, Any]:
    timings: dict[str, list[float]] = {
        "memory store": [],
        "memory recall": [],
        "checkpoint write": [],
        "checkpoint read": [],
    }
    memories: dict[str, list[str]] = {f"agent-{a}": [] for a in range(agents)}
    checkpoints: dict[str, list[str]] = {f"agent-{a}": [] for a in range(agents)}
    errors: list[str] = []
    lock = threading.Lock()
    start_gate = threading.Barrier(clients + 1)

    def client(n: int) -> None:
        rng = random.Random(n)
        agent = f"agent-{n % agents}"
        local: dict[str, list[float]] = {k: [] for k in timings}
        mine: list[str] = []
        taken: list[str] = []
        with PhoenixClient(url, token, timeout=60) as phx:
            start_gate.wait()
            for i in range(per_client):
                roll = rng.random()
                words = " ".join(rng.choice(WORDS) for _ in range(8))
                t0 = time.perf_counter()
                try:
                    if roll < 0.40:
                        kind = "memory store"
                        mine.append(phx.memory_store(agent, f"{words} ({n}-{i})", tags=[rng.choice(WORDS)])["id"])
                    elif roll < 0.70:
                        kind = "memory recall"
                        phx.memory_recall(agent, words, k=5)
                    elif roll < 0.85:
                        kind = "checkpoint write"
                        taken.append(phx.checkpoint(agent, f"client {n} request {i}")["name"])
                    else:
                        kind = "checkpoint read"
                        try:
                            phx.latest_checkpoint(agent)
                        except NotFoundError:
                            pass  # before the agent's first checkpoint
                except Exception as exc:  # noqa: BLE001 - every failure is counted and reported
                    with lock:
                        errors.append(f"{type(exc).__name__}: {exc}")
                    continue
                local[kind].append((time.perf_counter() - t0) * 1000)
        with lock:
            for kind, values in local.items():
                timings[kind].extend(values)
            memories[agent].extend(mine)
            checkpoints[agent].extend(taken)

    threads = [threading.Thread(target=client, args=(n,)) for n in range(clients)]
    for t in threads:
        t.start()
    start_gate.wait()
    t0 = time.perf_counter()
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - t0
    return {
        "timings": timings,
        "memories": memories,
        "checkpoints": checkpoints,
        "errors": errors,
        "elapsed": elapsed,
        "clients": clients,
        "per_client": per_client,
        "agents": agents,
    }


def verify(url: str, token: str, home: Home, result: dict[str, Any]) -> None:
    lost: list[str] = []
    with PhoenixClient(url, token, timeout=60) as phx:
        for agent, ids in result["memories"].items():
            stored: set[str] = set()
            offset = 0
            while True:
                page = phx.memory_list(agent, limit=1000, offset=offset)
                stored.update(m["id"] for m in page)
                if len(page) < 1000:
                    break
                offset += 1000
            lost += [f"memory {i} of {agent}" for i in ids if i not in stored]
    for agent, names in result["checkpoints"].items():
        on_disk = {info.name for info in Agent.open(agent, home=home).checkpoints.entries("session")}
        lost += [f"checkpoint {name}" for name in names if name not in on_disk]
    result["lost"] = lost
    result["acknowledged"] = sum(len(v) for v in result["memories"].values()) + sum(
        len(v) for v in result["checkpoints"].values()
    )


def render(args: argparse.Namespace, result: dict[str, Any]) -> str:
    timings = result["timings"]
    everything = [v for values in timings.values() for v in values]
    total = len(everything) + len(result["errors"])
    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True
    ).stdout.strip()
    lines = [
        f"## Memory bridge under load: {args.clients} clients x {args.requests} requests on loopback",
        "",
        "```sh",
        f".venv/bin/python bench/memory_bridge_load.py --clients {args.clients} --requests {args.requests} --agents {args.agents}"
        + (f" --pg {args.pg}" if args.pg else ""),
        "```",
        "",
        f"**{time.strftime('%Y-%m-%d')}**, {platform.system()} {platform.machine()}, {os.cpu_count()} cores, "
        f"Python {platform.python_version()}, phoenix-protocol commit {commit or '?'}. One `phx serve` process "
        f"(uvicorn, FastAPI), {args.clients} client threads each with one kept-alive connection, "
        f"{args.agents} agents shared by the clients; bearer token on every request; memory on "
        + ("PostgreSQL (same machine)" if args.pg else "the home's SQLite")
        + ".",
        "",
        "| requests | wall time | throughput | p50 | p99 | errors | acknowledged writes | lost writes |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|",
        f"| {total:,} | {result['elapsed']:.1f} s | {total / result['elapsed']:,.0f} req/s | "
        f"{percentile(everything, 0.50):.1f} ms | {percentile(everything, 0.99):.1f} ms | {len(result['errors'])} | "
        f"{result['acknowledged']:,} | {len(result['lost'])} |",
        "",
        "| operation | requests | p50 | p99 | max |",
        "|---|---:|---:|---:|---:|",
    ]
    for kind, values in timings.items():
        if values:
            lines.append(
                f"| {kind} | {len(values):,} | {statistics.median(values):.1f} ms | "
                f"{percentile(values, 0.99):.1f} ms | {max(values):.1f} ms |"
            )
    if result["errors"]:
        lines += ["", "Errors (first 10):", ""] + [f"- {e}" for e in result["errors"][:10]]
    if result["lost"]:
        lines += ["", "Lost writes (first 10):", ""] + [f"- {x}" for x in result["lost"][:10]]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
