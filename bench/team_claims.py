"""Claim latency with concurrent claimers, file store and PostgreSQL side by side (issue 8).

    .venv/bin/python bench/team_claims.py [--claimers 50] [--tasks 1000] [--pg postgresql://postgres@127.0.0.1:5432/test]

For each store: a fresh home (and a fresh PostgreSQL schema, dropped afterwards), one team with
``--claimers`` teammates and ``--tasks`` ready tasks; then ``--claimers`` processes, released
together, each claiming with ``Team.claim_next`` until nothing is ready, timing every call from
its own side (a claim includes its task checkpoint and the roster update, as in ``phx team
claim``). Afterwards every task must be claimed exactly once. Prints Markdown and writes
``bench/results/team_claims.md``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]

CLAIMER = r"""
import json, sys, time
from phoenix_protocol.core._home import Home
from phoenix_protocol.store._teams import Team
home, team_id, name, start_at = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4])
team = Team.open(Home(home), team_id)
team.read()  # connect (and open the pool) before the start
while time.time() < start_at:
    time.sleep(0.001)
out = []
while True:
    t0 = time.perf_counter()
    task = team.claim_next(name)
    out.append([task["task_id"] if task else None, (time.perf_counter() - t0) * 1000])
    if task is None:
        break
print(json.dumps(out))
"""


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))] if ordered else 0.0


def run(store: str, claimers: int, tasks: int) -> dict[str, Any]:
    from phoenix_protocol.core._home import Home
    from phoenix_protocol.store._teams import Team

    work = tempfile.mkdtemp(prefix="phoenix-claims-")
    env = dict(os.environ)
    env.pop("PHOENIX_STORE", None)
    if store != "files":
        env["PHOENIX_STORE"] = store
        os.environ["PHOENIX_STORE"] = store
    else:
        os.environ.pop("PHOENIX_STORE", None)
    home = Home(os.path.join(work, "home"))
    team = Team.create(home, "bench", lead="lead", team_id="bench-1")
    names = [f"agent-{i:02d}" for i in range(claimers)]
    for name in names:
        team.join(name)
    for i in range(tasks):
        team.add_task(f"task {i}")
    start_at = time.time() + 3 + claimers * 0.08
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", CLAIMER, home.root, team.id, name, str(start_at)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        for name in names
    ]
    outputs = [p.communicate(timeout=1800) for p in procs]
    failed = [err for p, (_out, err) in zip(procs, outputs, strict=True) if p.returncode != 0]
    if failed:
        raise SystemExit(f"a claimer failed: {failed[0][-2000:]}")
    rows = [row for out, _err in outputs for row in json.loads(out)]
    wall = max(0.0, time.time() - start_at)
    claimed = Counter(task for task, _ms in rows if task)
    timings = [ms for task, ms in rows if task]
    stored = team.read()["tasks"]
    return {
        "claims": len(timings),
        "double": sum(1 for n in claimed.values() if n > 1),
        "lost": tasks - len(claimed),
        "unclaimed_in_store": sum(1 for t in stored if t["status"] != "in_progress"),
        "p50": percentile(timings, 0.50),
        "p99": percentile(timings, 0.99),
        "mean": statistics.fmean(timings) if timings else 0.0,
        "wall": wall,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--claimers", type=int, default=50)
    parser.add_argument("--tasks", type=int, default=1000)
    parser.add_argument("--pg", default="postgresql://postgres@127.0.0.1:5432/test")
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args()

    import psycopg

    schema = "phx_bench_" + uuid.uuid4().hex[:8]
    with psycopg.connect(args.pg, autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {schema}")
    try:
        results = {
            "files": run("files", args.claimers, args.tasks),
            "postgresql": run(f"{args.pg}?options=-csearch_path%3D{schema}", args.claimers, args.tasks),
        }
    finally:
        from phoenix_protocol.store import _pg

        _pg.close_all()
        with psycopg.connect(args.pg, autocommit=True) as conn:
            conn.execute(f"DROP SCHEMA {schema} CASCADE")
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True)
    lines = [
        f"## Claims: {args.claimers} concurrent claimers, {args.tasks} tasks",
        "",
        "```sh",
        f".venv/bin/python bench/team_claims.py --claimers {args.claimers} --tasks {args.tasks}",
        "```",
        "",
        f"**{time.strftime('%Y-%m-%d')}**, {platform.system()} {platform.machine()}, {os.cpu_count()} cores, "
        f"Python {platform.python_version()}, commit {commit.stdout.strip() or '?'}; PostgreSQL on the same machine.",
        "",
        "| store | claims | claim p50 | claim p99 | mean | wall time | claims/s | double claims | lost |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for store, r in results.items():
        lines.append(
            f"| {store} | {r['claims']:,} | {r['p50']:.1f} ms | {r['p99']:.1f} ms | {r['mean']:.1f} ms | "
            f"{r['wall']:.1f} s | {r['claims'] / r['wall']:.0f} | {r['double']} | {r['lost']} |"
        )
    ratio = results["postgresql"]["p50"] / results["files"]["p50"] if results["files"]["p50"] else 0.0
    lines += ["", f"PostgreSQL / files, claim p50: {ratio:.2f}x."]
    report = "\n".join(lines) + "\n"
    print(report)
    if not args.no_write:
        (ROOT / "bench" / "results" / "team_claims.md").write_text(report)
    bad = any(r["double"] or r["lost"] or r["unclaimed_in_store"] for r in results.values())
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
