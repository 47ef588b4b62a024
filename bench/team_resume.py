"""``phx team resume`` of a big team, whole process (issue 4; target: at most 150 ms, and at most
1.2x that with 1,000,000 messages).

    .venv/bin/python bench/team_resume.py [--runs 21] [--big 1000000] [--profile] [--pg URL]

With ``--pg URL`` (issue 8) the same two teams are also built on the PostgreSQL store (a fresh
schema of that server, dropped afterwards; messages loaded with ``COPY``) and timed in the same
rounds, side by side with the embedded store (SQLite ``phoenix.db``).

Builds, in a temporary git project, two teams that differ only in their mailbox: 1,000 tasks
(300 completed, 200 in progress, 500 pending, a third of them with dependencies), 20 teammates
plus the lead (heartbeats of every age: online, idle, suspended, stale), readers' delivered and
acknowledged cursors, a full checkpoint (so "verify facts" has a hash to compare), and 10,000
messages in one, 1,000,000 in the other. The state is written through the library (``Team``'s
one change for the tasks, rows inserted straight into ``phx_messages`` for the messages (``COPY``
on PostgreSQL), then ``recount`` for the counters sends would have kept), not timed.

Then, after ``compileall`` of the package, times ``phx team resume TEAM --json --session ...``
as a user runs it: the ``phx`` console script in a new process, median of ``--runs`` rounds (one
warm-up run per team first, not counted); each round runs both teams and the floors (the
interpreter alone, the CLI's imports, the imports resume itself needs), so that all of them see
the same machine load. ``--profile`` adds
``-X importtime`` and cProfile of one in-process resume. Prints Markdown and writes
``bench/results/team_resume.md``.
"""

from __future__ import annotations

import argparse
import compileall
import cProfile
import io
import os
import platform
import pstats
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
PHX = str(Path(sys.executable).with_name("phx"))
GIT_ENV = {"GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_NOSYSTEM": "1"}
FLOORS = (
    ("the interpreter (`python -c pass`)", "pass"),
    (
        "the CLI's imports (`import phoenix_protocol.cli._main`: click, every command module)",
        "import phoenix_protocol.cli._main",
    ),
    (
        "what resume needs (`import phoenix_protocol.services._team_resume, phoenix_protocol.store._team_store`)",
        "import phoenix_protocol.services._team_resume, phoenix_protocol.store._team_store",
    ),
)


def _git(cwd: str, *args: str) -> None:
    subprocess.run(
        ["git", "-c", "user.name=Bench", "-c", "user.email=bench@phoenix.invalid", *args],
        cwd=cwd,
        check=True,
        capture_output=True,
        env={**os.environ, **GIT_ENV},
    )


def build_team(project: str, name: str, messages: int, store: str | None = None) -> tuple[str, dict[str, Any]]:
    """A team with 1,000 tasks, 20 teammates and ``messages`` messages, on SQLite or on
    the PostgreSQL ``store``; returns (id, counts)."""
    if store:
        os.environ["PHOENIX_STORE"] = store
    try:
        return _build_team(project, name, messages, store)
    finally:
        os.environ.pop("PHOENIX_STORE", None)


def _copy_messages(store: str, team_id: str, records: list[dict[str, Any]], first_seq: int) -> None:
    import psycopg

    with psycopg.connect(store) as conn:
        with conn.cursor().copy(
            "COPY phx_messages (team_id, seq, msg_id, sender, recipient, type, subject, body, ts, ts_ms) FROM STDIN"
        ) as copy:
            for k, r in enumerate(records):
                row = (team_id, first_seq + k, r["msg_id"], r["from"], r["to"], r["type"], r["subject"], r["body"])
                copy.write_row((*row, r["ts"], r["ts_ms"]))
        size = sum(len(r["subject"].encode()) + len(r["body"].encode()) for r in records)
        conn.execute(
            "UPDATE phx_team_seq SET last_seq = %s, bytes = bytes + %s WHERE team_id = %s",
            (first_seq + len(records) - 1, size, team_id),
        )
        conn.commit()


def _insert_messages(team: Any, records: list[dict[str, Any]], first_seq: int) -> None:
    """Messages straight into ``phx_messages`` in one transaction (``recount`` fixes the counters after)."""
    rows = [
        (
            team.id,
            first_seq + k,
            r["msg_id"],
            r["from"],
            r["to"],
            r["type"],
            r["subject"],
            r["body"],
            r["ts"],
            r["ts_ms"],
        )
        for k, r in enumerate(records)
    ]
    team.store.db.transaction(
        lambda tx: tx.executemany(
            "INSERT INTO phx_messages (team_id, seq, msg_id, sender, recipient, type, subject, body, ts, ts_ms) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            rows,
        )
    )


def _build_team(project: str, name: str, messages: int, store: str | None) -> tuple[str, dict[str, Any]]:
    from phoenix_protocol.core._clock import iso_from_ms
    from phoenix_protocol.core._home import Home
    from phoenix_protocol.store._teams import Team

    home = Home(os.path.join(project, ".phoenix" if store is None else ".phoenix-pg"))
    team = Team.create(home, name, lead="lead", check_command="true")
    mates = [f"engineer-{i:02d}" for i in range(20)]
    for i, mate in enumerate(mates):
        team.join(mate, role=("engineer", "tester", "validator", "integrator")[i % 4], session_id=f"claude-tm-{i:03d}")
    now = int(time.time() * 1000)

    def add_tasks(data: dict[str, Any]) -> None:
        for i in range(1000):
            tid = f"task-{i + 1:04d}"
            status = "completed" if i < 300 else "in_progress" if i < 500 else "pending"
            owner = mates[i % 20] if status != "pending" else None
            deps = [f"task-{i - 2:04d}"] if i % 3 == 0 and i >= 3 else []
            data["tasks"].append(
                {
                    "task_id": tid,
                    "title": f"Task {i}: implement part {i} of the engine semantic",
                    "assigned_to": owner,
                    "status": status,
                    "dependencies": deps,
                    "created_at": iso_from_ms(now - 3_600_000),
                    "started_at": iso_from_ms(now - 1_800_000) if owner else None,
                    "completed_at": iso_from_ms(now - 600_000) if status == "completed" else None,
                    "checkpoint": {
                        "last_progress_at": iso_from_ms(now - 300_000) if owner else None,
                        "files_modified": [f"src/engine/part_{i}.py", f"tests/test_part_{i}.py"] if owner else [],
                        "check_status": "green" if status == "completed" else "pending",
                        "checkpoint_seq": i,
                        "name": None,
                    },
                }
            )
        data["task_seq"] = 1000

    team._change(add_tasks)
    ages = (0, 2, 5, 15, 25, 40, 90)  # minutes: online, online, online, idle, idle, suspended, stale
    for i, mate in enumerate(mates):
        team.store.put_beat(
            {
                "schema_version": 1,
                "name": mate,
                "seq": 1,
                "ms": now - ages[i % len(ages)] * 60_000,
                "host": "bench",
                "session_id": f"claude-tm-{i:03d}",
            }
        )

    mailbox = team.mailbox
    chunk = 50_000
    sent = 0
    while sent < messages:
        n = min(chunk, messages - sent)
        records = []
        for j in range(sent, sent + n):
            sender = mates[j % 20]
            to = "*" if j % 10 == 0 else ("lead" if j % 3 == 0 else mates[(j * 7 + 3) % 20])
            if to == sender:
                to = "lead"
            ms = now - (messages - j) * 50
            records.append(
                {
                    "schema_version": 1,
                    "kind": "message",
                    "msg_id": f"m-{j:08d}",
                    "from": sender,
                    "to": to,
                    "type": ("info", "question", "challenge", "resolution")[j % 4],
                    "subject": f"Progress on part {j % 1000}",
                    "body": f"Finished step {j} of part {j % 1000}; tests green; next: review the guard logic.",
                    "ts": iso_from_ms(ms),
                    "ts_ms": ms,
                }
            )
        if store:
            _copy_messages(store, team.id, records, sent + 1)
        else:
            _insert_messages(team, records, sent + 1)
        sent += n
    from phoenix_protocol.store._team_store import recount

    team.store.db.transaction(lambda tx: recount(tx, team.id))  # the counters sends would have kept
    last = mailbox.stats()["count"]
    for k, mate in enumerate(mates):  # readers at every distance from the end
        upto = max(1, last - k * (last // 25))
        mailbox.mark_delivered(mate, upto)
    team.checkpoint(reason="benchmark setup")  # records the facts hash
    if store:
        mailbox_bytes = 0  # shared tables: see the PostgreSQL row's note
    else:
        db_path = os.path.join(home.root, "phoenix.db")
        mailbox_bytes = sum(os.path.getsize(p) for p in (db_path, db_path + "-wal") if os.path.exists(p))
    return team.id, {
        "messages": last,
        "mailbox_bytes": mailbox_bytes,
        "metadata_bytes": len(str(team.read())),
        "segments": 1,
        "home": home.root,
        "store": store,
    }


def _time(cmd: list[str], cwd: str, env: dict[str, str]) -> tuple[float, subprocess.CompletedProcess[bytes]]:
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, check=False)
    return time.perf_counter() - t0, proc


def _ms(values: list[float]) -> str:
    return f"{statistics.median(values) * 1000:.0f} ms"


def _machine() -> str:
    model = ""
    try:
        with open("/proc/cpuinfo", encoding="ascii", errors="replace") as f:
            model = next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), "")
    except OSError:
        pass
    return (
        f"{platform.system()} {platform.machine()}, {os.cpu_count()} cores ({model or 'unknown CPU'}), "
        f"Python {platform.python_version()}"
    )


def _commit() -> str:
    out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True, check=False)
    return out.stdout.strip() or "unknown"


def _importtime(cmd: list[str], cwd: str, env: dict[str, str]) -> list[tuple[int, str]]:
    """The slowest top-level imports (cumulative microseconds) of one run under ``-X importtime``."""
    proc = subprocess.run(
        [sys.executable, "-X", "importtime", *cmd], cwd=cwd, env=env, capture_output=True, text=True, check=False
    )
    rows = []
    for line in proc.stderr.splitlines():
        if not line.startswith("import time:") or "cumulative" in line:
            continue
        _self, cumulative, name = (part.strip() for part in line[len("import time:") :].split("|"))
        if not name.startswith(" ") and name == name.lstrip():  # top level only
            rows.append((int(cumulative), name))
    return sorted(rows, reverse=True)[:12]


def _cprofile(team_id: str, home: str, cwd: str) -> str:
    from phoenix_protocol.cli._main import cli

    old = os.getcwd()
    os.chdir(cwd)
    saved = sys.stdout
    try:
        sys.stdout = io.StringIO()
        cli(["team", "resume", team_id, "--json", "--session", "lead-bench", "--home", home])  # warm
        profile = cProfile.Profile()
        profile.enable()
        cli(["team", "resume", team_id, "--json", "--session", "lead-bench", "--home", home])
        profile.disable()
    finally:
        sys.stdout = saved
        os.chdir(old)
    text = io.StringIO()
    pstats.Stats(profile, stream=text).sort_stats("cumulative").print_stats(22)
    return text.getvalue()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Time `phx team resume` of a big team, whole process.")
    parser.add_argument("--runs", type=int, default=21)
    parser.add_argument("--small", type=int, default=10_000, help="messages in the first team")
    parser.add_argument("--big", type=int, default=1_000_000, help="messages in the second team")
    parser.add_argument("--profile", action="store_true", help="add -X importtime and cProfile breakdowns")
    parser.add_argument("--out", default=str(HERE / "results" / "team_resume.md"))
    parser.add_argument("--pg", metavar="URL", help="also build and time the teams on this PostgreSQL server")
    args = parser.parse_args(argv)

    compileall.compile_dir(str(ROOT / "src" / "phoenix_protocol"), quiet=1)
    tmp = tempfile.mkdtemp(prefix="phx-team-resume-bench-")
    run_dir = os.path.join(tmp, "run")
    os.makedirs(run_dir, mode=0o700)
    os.environ["XDG_RUNTIME_DIR"] = run_dir  # heartbeats: the same directory for setup and runs
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PHOENIX_", "CLAUDE"))}
    env.update(GIT_ENV)
    try:
        project = os.path.join(tmp, "project")
        os.makedirs(project)
        _git(project, "init", "-q")
        Path(project, "README.md").write_text("# bench\n")
        _git(project, "add", "README.md")
        _git(project, "commit", "-qm", "init")
        t0 = time.perf_counter()
        teams = [build_team(project, "small", args.small), build_team(project, "big", args.big)]
        schema = None
        if args.pg:
            import uuid

            import psycopg

            schema = "phx_resume_" + uuid.uuid4().hex[:8]
            with psycopg.connect(args.pg, autocommit=True) as conn:
                conn.execute(f"CREATE SCHEMA {schema}")
            pg_store = f"{args.pg}?options=-csearch_path%3D{schema}"
            teams += [
                build_team(project, "small", args.small, pg_store),
                build_team(project, "big", args.big, pg_store),
            ]
        setup = time.perf_counter() - t0

        def resume_cmd(team_id: str, home: str) -> list[str]:
            return [PHX, "team", "resume", team_id, "--json", "--session", "lead-bench", "--home", home]

        def env_of(info: dict[str, Any]) -> dict[str, str]:
            return {**env, "PHOENIX_STORE": info["store"]} if info.get("store") else env

        times: list[list[float]] = [[] for _ in teams]
        for i, (team_id, info) in enumerate(teams):  # warm-up, and check the answer
            _elapsed, proc = _time(resume_cmd(team_id, info["home"]), project, env_of(info))
            if proc.returncode != 0:
                raise SystemExit(f"phx team resume failed ({proc.returncode}): {proc.stdout!r} {proc.stderr!r}")
            import json

            answer = json.loads(proc.stdout)
            teams[i][1]["summary"] = answer["summary"]
            teams[i][1]["levels"] = {s["step"]: s["level"] for s in answer["steps"]}
        floors: dict[str, list[float]] = {label: [] for label, _code in FLOORS}
        for _ in range(args.runs):  # one round: both teams and the floors, under the same load
            for i, (team_id, info) in enumerate(teams):
                elapsed, proc = _time(resume_cmd(team_id, info["home"]), project, env_of(info))
                assert proc.returncode == 0, proc.stderr
                times[i].append(elapsed)
            for label, code in FLOORS:
                floors[label].append(_time([sys.executable, "-c", code], project, env)[0])
        importtime = _importtime([PHX, *resume_cmd(*[teams[0][0], teams[0][1]["home"]])[1:]], project, env)
        profile = _cprofile(teams[0][0], teams[0][1]["home"], project) if args.profile else ""
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
        if args.pg and schema:
            import psycopg

            from phoenix_protocol.store import _pg

            _pg.close_all()
            with psycopg.connect(args.pg, autocommit=True) as conn:
                conn.execute(f"DROP SCHEMA {schema} CASCADE")

    small, big = (statistics.median(t) for t in times[:2])
    ratio = big / small
    target = 0.150
    s_info, b_info = teams[0][1], teams[1][1]
    lines = [
        "## `phx team resume`: 1,000 tasks, 20 teammates, 10,000 vs 1,000,000 messages",
        "",
        "```sh",
        ".venv/bin/python bench/team_resume.py" + (" --profile" if args.profile else ""),
        "```",
        "",
        f"**{time.strftime('%Y-%m-%d')}**, {_machine()}, phoenix-protocol commit {_commit()}. Both teams built "
        f"in {setup:.0f} s (not timed). Command, whole process (the `phx` console script, after `compileall`), "
        f"median of {args.runs} rounds after one warm-up; each round runs both teams and the floors:",
        "",
        "```sh",
        "phx team resume TEAM --json --session lead-bench --home HOME",
        "```",
        "",
        "| team | messages | mailbox on disk | metadata.json | median | min | max | target |",
        "|---|---:|---:|---:|---:|---:|---:|---|",
        f"| small | {s_info['messages']:,} | {s_info['mailbox_bytes'] / 1e6:.1f} MB | "
        f"{s_info['metadata_bytes'] / 1e3:.0f} KB | {small * 1000:.0f} ms | {min(times[0]) * 1000:.0f} ms | "
        f"{max(times[0]) * 1000:.0f} ms | <= 150 ms: **{'met' if small <= target else 'missed'}** |",
        f"| big | {b_info['messages']:,} | {b_info['mailbox_bytes'] / 1e6:.0f} MB | "
        f"{b_info['metadata_bytes'] / 1e3:.0f} KB | {big * 1000:.0f} ms | {min(times[1]) * 1000:.0f} ms | "
        f"{max(times[1]) * 1000:.0f} ms | <= 1.2x small: **{'met' if ratio <= 1.2 else 'missed'}** ({ratio:.2f}x) |",
        *[
            f"| {label} on PostgreSQL | {info['messages']:,} | (tables) | (rows) | {statistics.median(t) * 1000:.0f} ms | "
            f"{min(t) * 1000:.0f} ms | {max(t) * 1000:.0f} ms | {statistics.median(t) / ref:.2f}x SQLite |"
            for label, (_tid, info), t, ref in zip(("small", "big"), teams[2:], times[2:], (small, big), strict=False)
        ],
        *[
            f"| floor: {label} | | | | {_ms(values)} | {min(values) * 1000:.0f} ms | | |"
            for label, values in floors.items()
        ],
        "",
        f"Summary (small): {s_info['summary']['tasks']}, teammates {s_info['summary']['teammates']}; "
        f"steps: {s_info['levels']}.",
        "",
        "Slowest top-level imports of one resume (`-X importtime`, cumulative):",
        "",
        "| module | ms |",
        "|---|---:|",
        *[f"| `{name}` | {us / 1000:.1f} |" for us, name in importtime],
    ]
    if profile:
        lines += [
            "",
            "cProfile of one in-process resume (small team, after a warm-up):",
            "",
            "```text",
            profile.strip(),
            "```",
        ]
    text = "\n".join(lines)
    print(text)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(text + "\n", encoding="utf-8")
    print(f"\nwritten to {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
