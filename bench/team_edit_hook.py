"""What recording a teammate's edited files costs its PostToolUse hook (issue 32), side by side.

    .venv/bin/python bench/team_edit_hook.py [--runs 40]

Interleaved round-robin, the command ``phx install claude-code`` writes, a teammate of a team on
the home's SQLite store (``PHOENIX_TEAM``/``PHOENIX_TEAMMATE`` set):

(a) a ``Bash`` call: the agent's heartbeat and the teammate's heartbeat file;
(b) an ``Edit`` call: the same, plus the edited file appended to the teammate's noted files;
(c) then, once, the cost of taking 1,000 noted files into the task's checkpoint
    (``Team.absorb_files``, what ``phx team status --as``, ``progress``, ``reassign`` do).

Prints a Markdown table (median wall-clock and CPU milliseconds) for docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import compileall
import json
import os
import shlex
import statistics
import subprocess
import tempfile
import time

from _hook_run import hook_env, time_hook

import phoenix_protocol
from phoenix_protocol.agent._heartbeats import note_files
from phoenix_protocol.core._home import Home
from phoenix_protocol.integrations._install import hook_command
from phoenix_protocol.services._agent import Agent
from phoenix_protocol.store._teams import Team


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=40)
    args = parser.parse_args()
    compileall.compile_dir(os.path.dirname(phoenix_protocol.__file__), quiet=1)
    with tempfile.TemporaryDirectory(prefix="phoenix-bench-") as work:
        project = os.path.join(work, "project")
        os.makedirs(project)
        subprocess.run(["git", "init", "-q", project], check=True)
        env = hook_env(XDG_RUNTIME_DIR=os.path.join(work, "run"))
        os.environ["XDG_RUNTIME_DIR"] = env["XDG_RUNTIME_DIR"]
        home = Home(os.path.join(project, ".phoenix"))
        Agent.open("default", home=home).state.set_status("working", "parser", session_id="bench")
        team = Team.create(home, "bench", lead="lead", team_id="bench-1")
        team.join("alice")
        tid = team.add_task("Write the parser")["task_id"]
        team.claim(tid, "alice")
        env.update(PHOENIX_HOME=home.root, PHOENIX_TEAM="bench-1", PHOENIX_TEAMMATE="alice")
        command = shlex.split(hook_command("post-tool-use"))
        calls = iter(range(10**6))

        def payload(tool: str) -> bytes:
            n = next(calls)
            tool_input = (
                {"command": f"pytest -q -k case_{n}"}
                if tool == "Bash"
                else {
                    "file_path": os.path.join(project, "src", f"mod_{n % 7}.py"),
                    "old_string": "a",
                    "new_string": f"b{n}",
                }
            )
            return json.dumps(
                {
                    "session_id": "bench",
                    "cwd": project,
                    "hook_event_name": "PostToolUse",
                    "tool_name": tool,
                    "tool_input": tool_input,
                    "tool_response": {},
                }
            ).encode()

        rows = {"(a) teammate hook, Bash call": "Bash", "(b) teammate hook, Edit call (file noted)": "Edit"}
        wall: dict[str, list[float]] = {name: [] for name in rows}
        cpu: dict[str, list[float]] = {name: [] for name in rows}
        for tool in rows.values():  # warm-up
            time_hook(command, payload(tool), project, env)
        for _ in range(args.runs):
            for name, tool in rows.items():
                w, c = time_hook(command, payload(tool), project, env)
                wall[name].append(w)
                cpu[name].append(c)
        noted = team.absorb_files("alice")
        assert noted, "the Edit calls noted no file"
        note_files(team.heartbeat_dir, "alice", [f"src/generated_{i}.py" for i in range(1000)])
        start = time.perf_counter()
        taken = team.absorb_files("alice")
        absorb_ms = (time.perf_counter() - start) * 1000
        assert len(taken) == 1000
    print(f"| row | median wall ms | median CPU ms | runs {args.runs} |")
    print("|---|---|---|---|")
    for name in rows:
        print(f"| {name} | {statistics.median(wall[name]):.1f} | {statistics.median(cpu[name]):.1f} | |")
    print(f"| (c) absorb_files, 1,000 noted files into the task's checkpoint | {absorb_ms:.1f} | | once |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
