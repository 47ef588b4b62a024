"""An agent's state changes and reads on the file store and on PostgreSQL, side by side in one run.

    .venv/bin/python bench/state_store.py --pg postgresql://postgres@127.0.0.1:5432/test [--rounds 300]

Each round times, interleaved, on both stores (PostgreSQL in a fresh schema, dropped afterwards):

- ``change``: ``add_note`` + ``resolve_note`` (two state changes, each with its ops event, durable),
  as the CLI and the cold hooks make them; on PostgreSQL one transaction each (the agent's lock on
  the server, the copy changed, the new event and the state pushed);
- ``read``: ``state.read()`` from another home (on files the same home: another process's view;
  on PostgreSQL another machine's, which reads the server's record);
- ``tail``: the 20 newest ops events, from the same other home;
- ``heartbeat``: the hot path (``StateStore.heartbeat``), which on PostgreSQL changes the copy only;
- ``sync``: on PostgreSQL, what the PostToolUse hook's detached process does every 30 s (pass on
  one heartbeat's state and event).

Prints medians and p90 in milliseconds, and the PostgreSQL / files ratio, as Markdown.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import tempfile
import time
import uuid
from collections.abc import Callable

from phoenix_protocol.core._home import Home
from phoenix_protocol.services._agent import Agent
from phoenix_protocol.store import _pg


def _timed(samples: dict[str, list[float]], name: str, work: Callable[[], object]) -> None:
    start = time.perf_counter()
    work()
    samples.setdefault(name, []).append((time.perf_counter() - start) * 1000)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--pg", metavar="URL", required=True, help="the PostgreSQL server (a schema is created)")
    parser.add_argument("--rounds", type=int, default=300)
    args = parser.parse_args()
    import psycopg

    schema = "phx_statebench_" + uuid.uuid4().hex[:8]
    with psycopg.connect(args.pg, autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {schema}")
    url = f"{args.pg}?options=-csearch_path%3D{schema}"
    work = tempfile.mkdtemp(prefix="phx-statebench-", dir=os.getcwd())
    try:
        here = Home(os.path.join(work, "here"))
        there = Home(os.path.join(work, "there"))
        files = Agent.open("zero", home=here, config_overrides={"store": "files"})
        files_other = Agent.open("zero", home=here, config_overrides={"store": "files"})
        pg_agent = Agent.open("one", home=here, config_overrides={"store": url})
        pg_other = Agent.open("one", home=there, config_overrides={"store": url})
        sides = {"files": (files, files_other), "PostgreSQL": (pg_agent, pg_other)}
        for agent, _other in sides.values():
            agent.state.start_session("bench", process={"pid": os.getpid(), "start_time": 0.0, "host": "bench"})
            agent.state.set_status("working", "benchmark the state store")
        samples: dict[str, dict[str, list[float]]] = {side: {} for side in sides}
        for round_ in range(args.rounds + 10):
            keep = round_ >= 10  # the first ten warm up
            for side, (agent, other) in sides.items():
                got: dict[str, list[float]] = samples[side] if keep else {}

                def change(agent: Agent = agent) -> None:
                    _state, number = agent.state.add_note("next_action", "a step to take")
                    agent.state.resolve_note(number)

                _timed(got, "change (add + resolve a note)", change)
                _timed(got, "read (elsewhere)", other.state.read)

                def tail(other: Agent = other) -> None:
                    other.ops.tail(20)

                def beat(agent: Agent = agent) -> None:
                    agent.state.heartbeat(session_id="bench", tool="Bash", durable=False)

                _timed(got, "tail 20 events (elsewhere)", tail)
                _timed(got, "heartbeat (hot path)", beat)
                if side == "PostgreSQL":
                    _timed(got, "sync (every 30 s)", agent.sync_store)
        seen = pg_other.state.read()
        assert seen.heartbeat_seq == args.rounds + 10, "the syncs did not pass the heartbeats on"
    finally:
        _pg.close_all()
        with psycopg.connect(args.pg, autocommit=True) as conn:
            conn.execute(f"DROP SCHEMA {schema} CASCADE")
        import shutil

        shutil.rmtree(work, ignore_errors=True)

    cpu = ""
    if os.path.exists("/proc/cpuinfo"):
        with open("/proc/cpuinfo") as fh:
            cpu = next((line.split(":", 1)[1].strip() for line in fh if line.startswith("model name")), "")
    print(
        f"Date: {time.strftime('%Y-%m-%d', time.gmtime())}; {platform.system()} {platform.machine()}, "
        f"{os.cpu_count()} cores, {cpu or 'unknown CPU'}; Python {platform.python_version()}; "
        f"{args.rounds} rounds, interleaved."
    )
    print()
    print("| operation | files median | files p90 | PostgreSQL median | PostgreSQL p90 | PostgreSQL / files |")
    print("|---|---:|---:|---:|---:|---:|")
    for name in samples["PostgreSQL"]:
        pg = samples["PostgreSQL"][name]
        fl = samples["files"].get(name)
        pg_med, pg_p90 = statistics.median(pg), statistics.quantiles(pg, n=10)[-1]
        if fl:
            fl_med, fl_p90 = statistics.median(fl), statistics.quantiles(fl, n=10)[-1]
            print(
                f"| {name} | {fl_med:.3f} ms | {fl_p90:.3f} ms | {pg_med:.3f} ms | {pg_p90:.3f} ms | "
                f"{pg_med / fl_med:.1f}x |"
            )
        else:
            print(f"| {name} | - | - | {pg_med:.3f} ms | {pg_p90:.3f} ms | - |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
