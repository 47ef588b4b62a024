"""What guarding Claude Code's agent teams (issue 32) costs the hooks, side by side in one run.

    PYTHONPATH=src .venv/bin/python bench/cc_team_hooks.py [--runs 40] [--before /path/to/main/src]

Each row runs Phoenix's hook as ``phx install claude-code --scope local`` registers it (the
interpreter with ``-S -P``, straight into ``_hooks.main``), whole process, with a payload shaped
as Claude Code 2.1.330 sends it, in a project whose ``~/.claude/teams/session-…/`` holds a team
(a lead and one teammate, two tasks), interleaved round-robin so that machine noise hits all rows
alike:

(a) PostToolUse of ``Bash`` in the team's session: what every other tool call pays;
(b) PostToolUse of ``SendMessage`` (the team is recorded: its files read, one transaction);
(c) Stop of the team's lead (one ``stat``, then the team recorded);
(d) Stop of a session that runs no team (one ``stat``).

With ``--before SRC`` (a checkout of Phoenix without issue 32, e.g. ``/work/main/src``), rows (a'),
(b') and (c') run the same payloads on that code: the difference is what this issue adds.
Prints a Markdown table for docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import compileall
import itertools
import json
import os
import platform
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from _hook_run import hook_env, time_hook

import phoenix_protocol
from phoenix_protocol.integrations._install import MARKER, hook_command, install_dir

SESSION = "1a2b3c4d-5e6f-4a7b-8c9d-0e1f2a3b4c5d"
OTHER = "9f8e7d6c-5b4a-4c3d-8e2f-1a0b9c8d7e6f"
TEAM = "session-1a2b3c4d"


def _command(src: str, event: str) -> list[str]:
    """The hook command of ``event`` as ``phx install claude-code`` writes it for this interpreter
    (``hook_command``), its ``sys.path`` entry ``src`` (another checkout for ``--before``)."""
    if src == install_dir():
        return shlex.split(hook_command(event))
    code = f"import sys; sys.path.append({src!r}); from {MARKER} import main; main()"
    return [sys.executable, "-S", "-P", "-c", code, event]


def _write(path: Path, value: object) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(value, indent=2))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=40, help="runs of each row (median reported; at least 10)")
    parser.add_argument("--before", metavar="SRC", help="another Phoenix's src/ to compare with (without issue 32)")
    args = parser.parse_args()
    runs = max(10, args.runs)
    src = os.path.dirname(os.path.dirname(phoenix_protocol.__file__))
    sources = {"": src}
    if args.before:
        sources["'"] = os.path.abspath(args.before)
    for path in sources.values():
        compileall.compile_dir(os.path.join(path, "phoenix_protocol"), quiet=1)

    work = Path(tempfile.mkdtemp(prefix="phoenix-bench-teams-"))
    home = work / "home"
    project = work / "project"
    project.mkdir()
    subprocess.run(["git", "init", "-q", str(project)], check=True)
    claude = home / ".claude"
    transcript = claude / "projects" / "-project" / f"{SESSION}.jsonl"
    transcript.parent.mkdir(parents=True)
    transcript.write_text("")
    lead = {"agentId": f"team-lead@{TEAM}", "name": "team-lead", "agentType": "team-lead", "joinedAt": 1,
            "backendType": "in-process"}  # fmt: skip
    alice = {"agentId": f"alice@{TEAM}", "name": "alice", "joinedAt": 2, "backendType": "in-process",
             "model": "claude-opus-5-5", "prompt": "You are alice. Write the config parser, then report."}  # fmt: skip
    _write(claude / "teams" / TEAM / "config.json",
           {"name": TEAM, "createdAt": 1, "leadAgentId": f"team-lead@{TEAM}", "leadSessionId": SESSION,
            "members": [lead, alice]})  # fmt: skip
    _write(claude / "teams" / TEAM / "inboxes" / "team-lead.json", [])
    for task_id, owner in (("1", "alice"), ("2", None)):
        _write(claude / "tasks" / TEAM / f"{task_id}.json",
               {"id": task_id, "subject": f"task {task_id}", "description": "d", "status": "pending",
                "blocks": [], "blockedBy": [], **({"owner": owner} if owner else {})})  # fmt: skip
    env = hook_env(HOME=str(home), CLAUDE_PROJECT_DIR=str(project), PHOENIX_AGENT_PID=str(os.getpid()))
    calls = itertools.count()

    def payload(event: str, session: str = SESSION, **extra: object) -> bytes:
        n = next(calls)
        body = {"session_id": session, "transcript_path": str(transcript), "cwd": str(project),
                "hook_event_name": event, **extra}  # fmt: skip
        if event == "PostToolUse" and "tool_name" not in extra:
            body.update(tool_name="Bash", tool_input={"command": f"pytest -q -k case_{n}"},
                        tool_response={"stdout": "1 passed", "stderr": "", "interrupted": False})  # fmt: skip
        return json.dumps(body).encode()

    def send() -> bytes:
        n = next(calls)
        return payload("PostToolUse", tool_name="SendMessage",
                       tool_input={"to": "alice", "message": f"status of task 1? ({n})", "summary": "status"},
                       tool_response={"success": True, "msg_id": f"m-{n}",
                                      "routing": {"sender": "team-lead", "target": "@alice", "summary": "status",
                                                  "content": "status of task 1?"}})  # fmt: skip

    start = {"session_id": SESSION, "transcript_path": str(transcript), "cwd": str(project),
             "hook_event_name": "SessionStart", "source": "startup"}  # fmt: skip
    for source in sources.values():
        subprocess.run(_command(source, "session-start"), input=json.dumps(start).encode(), cwd=project, env=env,
                       check=True, capture_output=True)  # fmt: skip

    rows: dict[str, tuple[list[str], Callable[[], bytes]]] = {}
    for mark, source in sources.items():
        rows[f"(a{mark}) PostToolUse Bash, in a team's session"] = (
            _command(source, "post-tool-use"),
            lambda: payload("PostToolUse"),
        )
        rows[f"(b{mark}) PostToolUse SendMessage (the team recorded)"] = (_command(source, "post-tool-use"), send)
        rows[f"(c{mark}) Stop of the team's lead"] = (_command(source, "stop"), lambda: payload("Stop"))
    rows["(d) Stop of a session without a team"] = (_command(src, "stop"), lambda: payload("Stop", OTHER))
    times: dict[str, list[float]] = {name: [] for name in rows}
    cpu: dict[str, list[float]] = {name: [] for name in rows}
    for _ in range(runs):
        for name, (cmd, make) in rows.items():
            wall, used = time_hook(cmd, make(), str(project), env)
            times[name].append(wall)
            cpu[name].append(used)
    import sqlite3

    deadline = time.monotonic() + 60  # the rows really recorded the team (in detached children)
    while True:
        with sqlite3.connect(project / ".phoenix" / "phoenix.db") as db:
            recorded = db.execute("SELECT count(*) FROM phx_cc_messages").fetchone()[0]
        if recorded >= runs or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    if recorded != runs:
        raise SystemExit(f"expected {runs} messages recorded, found {recorded}")
    print(f"{runs} runs each, interleaved; {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, "
          f"Python {platform.python_version()}, {time.strftime('%Y-%m-%d', time.gmtime())}")  # fmt: skip
    print()
    print("| hook | median ms | p90 ms | CPU median ms |")
    print("|---|---:|---:|---:|")
    for name, values in times.items():
        ordered = sorted(values)
        p90 = ordered[int(len(ordered) * 0.9) - 1]
        print(f"| {name} | {statistics.median(values):.1f} | {p90:.1f} | {statistics.median(cpu[name]):.1f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
