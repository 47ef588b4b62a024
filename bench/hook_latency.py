"""Whole-process PostToolUse hook latency, side by side in one run.

    .venv/bin/python bench/hook_latency.py [--runs 40]

Compares, interleaved round-robin so that machine noise hits all three alike:

(a) the bare interpreter of this venv: ``python -c pass``;
(b) a bash + jq equivalent of seed 000's ``state-update`` script (``bench/seed_heartbeat.sh``);
(c) Phoenix's PostToolUse hook, run with the exact command ``phx install claude-code`` writes
    into ``.claude/settings.json``, with the durability the code ships with (locked
    read-modify-write, atomic replace; transitions fsynced).

(i) is (c) for a second session that started beside the first and has a lane of its own
(docs/lanes.md): its heartbeat finds the lane with one ``stat`` and writes there.

(l) is Codex's PostToolUse hook (issue 31): the command ``phx install codex --scope user`` writes
(``--client codex``), through ``/bin/sh -c`` as Codex runs it, with the payload Codex 0.171.0 sends
(a string ``tool_response``, no timestamp), to compare with (a) via ``/bin/sh -c``.

(m) and (n) are Gemini CLI's AfterTool heartbeat (issue 31), with the payload Gemini CLI 0.61.0
sends (``run_shell_command``, ``tool_response: {llmContent, returnDisplay}``), through ``bash -c``
as Gemini CLI runs its hooks, to compare with ``(a) via bash -c``: (m) the fast command ``phx
install gemini-cli --scope user`` writes, (n) the command of the extension's ``hooks/hooks.json``
(the portable one, ``phx`` from ``PATH``; no user-scope registration, so it does the work).

(a) and (c) are executed directly (the argv of the installed command), so the ratio compares
the processes themselves; two extra rows run them through ``/bin/sh -c`` as Claude Code does
(the shell costs every hook the same).

Two more rows (issue 30) run the portable command ``phx install claude-code`` writes into the
shared (project) settings, through ``/bin/sh -c`` with this venv's ``bin`` on ``PATH``: (g) doing
the heartbeat (``phx`` from ``PATH``: the console-script wrapper, the site packages), and (h)
standing aside because this machine registers the fast command in ``settings.local.json`` (it
then runs beside that command, in parallel, and does nothing but read the settings).

Two rows (issue 31) run the PostToolUse command of Phoenix's Claude Code plugin
(``plugins/phoenix/hooks/hooks.json``, read from this repository) through ``/bin/sh -c`` as Claude
Code runs a plugin's hook, with ``CLAUDE_PLUGIN_ROOT`` set to the plugin's folder and this venv's
``bin`` on ``PATH``: (j) doing the heartbeat (no settings file registers Phoenix), and (k) standing
aside because the project's shared settings register the portable command (which then runs beside
it and does the work). A reference row runs the same through a small script in the plugin
(``"${CLAUDE_PLUGIN_ROOT}/hooks/phx-hook" post-tool-use``), the design the plugin does not use.

With ``--pg URL`` (issue 8) two more rows run the same hook for a teammate whose team is on the
PostgreSQL store (a fresh schema, dropped afterwards): (d) as it runs on most calls (the local
heartbeat file and this machine's copy of the agent's state; PostgreSQL gets both every 30 s),
(e) on a call where the 30 s are up (it starts the detached process that passes the heartbeat
and the agent's copy, state and new ops events, on to PostgreSQL, and returns), and (f) the hook
of an agent in no team on the PostgreSQL store (its copy passed on every 30 s, as in (e)).

Targets (issue 2): (c) <= 1.5 x (a) and (c) <= 0.6 x (b); issue 8: (d), (e) and (f) within the same 1.5 x. Prints a Markdown table for
docs/benchmarks.md. Python modules are byte-compiled first (as ``pip install`` does), since
this environment may set PYTHONDONTWRITEBYTECODE.
"""

from __future__ import annotations

import argparse
import compileall
import itertools
import json
import os
import platform
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import phoenix_protocol
from phoenix_protocol.core._home import Home
from phoenix_protocol.core._process import hostname, identity_of
from phoenix_protocol.integrations._clients import CODEX, GEMINI_CLI
from phoenix_protocol.integrations._install import MARKER, hook_command, install_claude_code, portable_command
from phoenix_protocol.integrations._plugin import PLUGIN_DIR
from phoenix_protocol.services._agent import Agent
from phoenix_protocol.services._lanes import start_placed

HERE = Path(__file__).resolve().parent
BENCH_SESSION = "5f0c2a1e-8d3b-4c7a-9e21-6b4d8f3a7c10"  # Claude Code gives every session a UUID
LANE_SESSION = "6a1d3b2f-9e4c-4d8b-8f32-7c5e9a4b8d21"  # a second session, beside the first (docs/lanes.md)
CODEX_SESSION = BENCH_SESSION  # Codex's hook heartbeats the same session (its ids are UUIDv7s)
CODEX_ROW = "(l) Codex PostToolUse hook (--client codex), via /bin/sh -c"
GEMINI_FAST = "(m) Gemini AfterTool, fast command (--scope user), via bash -c"
GEMINI_EXTENSION = "(n) Gemini AfterTool, the extension's command (phx from PATH), via bash -c"


CPU: dict[str, list[float]] = {}
"""Per command: the CPU time (user + system, ms) its whole process tree took, run by run."""


def _time(cmd: list[str], stdin: bytes, cwd: str, env: dict[str, str], name: str = "") -> float:
    """Wall-clock ms of one run of ``cmd``; its CPU time (``wait4``'s rusage of the process and
    the children it waited for) goes to ``CPU[name]``: the figure a busy machine disturbs least."""
    start = time.perf_counter()
    proc = subprocess.Popen(
        cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=cwd, env=env
    )
    assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
    try:  # a command that reads no stdin (python -c pass) may be gone already: as communicate()
        proc.stdin.write(stdin)
        proc.stdin.close()
    except BrokenPipeError:
        pass
    _pid, status, usage = os.wait4(proc.pid, 0)
    elapsed = time.perf_counter() - start
    proc.returncode = os.waitstatus_to_exitcode(status)
    stderr = proc.stderr.read()
    proc.stdout.close()
    proc.stderr.close()
    if proc.returncode != 0 or stderr:
        raise SystemExit(f"{cmd} failed: {proc.returncode} {stderr!r}")
    if name:
        CPU.setdefault(name, []).append((usage.ru_utime + usage.ru_stime) * 1000)
    return elapsed * 1000


def _import_report(payload: bytes, cwd: str) -> str:
    """What the hook's process imports beyond a bare interpreter while it handles one
    PostToolUse (``-X importtime``, median of 9)."""
    code = f"from phoenix_protocol.integrations._hooks import run; run(['post-tool-use'], {payload!r})"
    totals: list[float] = []
    modules: list[str] = []
    for _ in range(9):
        proc = subprocess.run(
            [sys.executable, "-X", "importtime", "-P", "-c", code], capture_output=True, text=True, check=True
        )
        bare = subprocess.run(
            [sys.executable, "-X", "importtime", "-c", "pass"], capture_output=True, text=True, check=True
        )
        baseline = {line.rsplit("|", 1)[-1].strip() for line in bare.stderr.splitlines() if "|" in line}
        extra = []
        total = 0.0
        for line in proc.stderr.splitlines()[1:]:
            parts = line.split("|")
            if len(parts) != 3:
                continue
            name = parts[2].strip()
            if name not in baseline:
                extra.append(name)
                total += int(parts[0].split(":")[1]) / 1000  # self time, ms
        totals.append(total)
        modules = extra
    return (
        f"Hook import path: {len(modules)} modules beyond a bare interpreter, "
        f"{statistics.median(totals):.1f} ms of import time (median of 9, -X importtime self times): "
        + ", ".join(sorted(modules))
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=40, help="runs of each command (median reported; at least 20)")
    parser.add_argument("--pg", metavar="URL", help="also run the hook with a team on this PostgreSQL server")
    args = parser.parse_args()
    runs = max(20, args.runs)
    if not shutil.which("jq"):
        raise SystemExit("jq is needed for baseline (b): apt-get install jq")
    compileall.compile_dir(os.path.dirname(phoenix_protocol.__file__), quiet=1)

    work = tempfile.mkdtemp(prefix="phoenix-bench-")
    schema = None
    try:
        project = os.path.join(work, "project")
        os.makedirs(project)
        subprocess.run(["git", "init", "-q", project], check=True)
        env = {k: v for k, v in os.environ.items() if not k.startswith(("PHOENIX_", "CLAUDE"))}
        # A realistic state: a session, a task, a few notes.
        agent = Agent.open("default", home=Home(os.path.join(project, ".phoenix")))
        # The session holds the agent's state.json, its process alive (this one), so that a
        # second session starting beside it gets a lane of its own: row (i).
        me = identity_of(os.getpid())
        held = {"pid": me.pid, "start_time": me.start_time, "host": me.host} if me else None
        agent.state.start_session("bench-session", process=held)
        agent.state.set_status("working", "Implement refresh tokens for the auth service", session_id=BENCH_SESSION)
        for text in ("Token rotation race", "Clock skew on expiry", "Integration tests missing"):
            agent.state.add_note("open_loop", text)
        beside = {"pid": os.getppid(), "start_time": 0.0, "host": hostname()}
        if start_placed(Agent.open("default", home=agent.home), LANE_SESSION, process=beside).lane != LANE_SESSION:
            raise SystemExit("the second session did not get a lane of its own")
        calls = itertools.count()

        def payload(session: str = BENCH_SESSION) -> bytes:
            """The next tool call's payload: a different command each time, as in a working
            session (the same input over and over would be drift: a repetition warning)."""
            n = next(calls)
            return json.dumps(
                {
                    "session_id": session,
                    "transcript_path": os.path.join(work, "t.jsonl"),
                    "cwd": project,
                    "hook_event_name": "PostToolUse",
                    "tool_name": "Bash",
                    "tool_input": {
                        "command": f"pytest -q tests/test_auth.py -k case_{n}",
                        "description": f"Run the auth tests, case {n}",
                    },
                    "tool_response": {
                        "stdout": f"{n % 40 + 1} passed in 0.8s\n",
                        "stderr": "",
                        "interrupted": False,
                        "isImage": False,
                    },
                    "tool_use_id": f"toolu_01ABC{n:06d}",
                }
            ).encode()

        def codex_payload(session: str = CODEX_SESSION) -> bytes:
            """A Codex 0.171.0 PostToolUse payload: the shell tool as "Bash", its output as a string."""
            n = next(calls)
            return json.dumps(
                {
                    "session_id": session,
                    "turn_id": "01a21f80-94ef-7cc3-8019-1e2b5863b00e",
                    "transcript_path": os.path.join(work, "rollout.jsonl"),
                    "cwd": project,
                    "hook_event_name": "PostToolUse",
                    "model": "gpt-5.5",
                    "permission_mode": "default",
                    "tool_name": "Bash",
                    "tool_input": {"command": f"pytest -q tests/test_auth.py -k case_{n}"},
                    "tool_response": f"{n % 40 + 1} passed in 0.8s\n",
                    "tool_use_id": f"call_{n:06d}",
                }
            ).encode()

        def gemini_payload(session: str = BENCH_SESSION) -> bytes:
            """A Gemini CLI 0.61.0 AfterTool payload (tests/data/gemini-cli/): a shell command's result."""
            n = next(calls)
            output = f"{n % 40 + 1} passed in 0.8s"
            return json.dumps(
                {
                    "session_id": session,
                    "transcript_path": os.path.join(work, "session.jsonl"),
                    "cwd": project,
                    "hook_event_name": "AfterTool",
                    "timestamp": "2026-11-28T00:14:30.460Z",
                    "tool_name": "run_shell_command",
                    "tool_input": {"command": f"pytest -q tests/test_auth.py -k case_{n}"},
                    "tool_response": {
                        "llmContent": f"<untrusted_context>\nOutput: {output}\nProcess Group PGID: {4000 + n}\n"
                        "</untrusted_context>",
                        "returnDisplay": output,
                    },
                }
            ).encode()

        bindir = os.path.dirname(sys.executable)
        if not os.path.isfile(os.path.join(bindir, "phx")):
            raise SystemExit(f"no phx beside {sys.executable}: install Phoenix in this venv (pip install -e .)")
        path_env = dict(env, PATH=bindir + os.pathsep + env.get("PATH", ""))
        # (h): a project whose local settings hold this machine's fast command.
        standing = os.path.join(work, "standing-aside")
        os.makedirs(standing)
        install_claude_code("local", project_dir=standing)
        aside_env = dict(path_env, CLAUDE_PROJECT_DIR=standing)
        # (j), (k): the plugin's command, as Claude Code runs it (CLAUDE_PLUGIN_ROOT set); (k) in a
        # project whose shared settings register Phoenix.
        plugin = HERE.parent / PLUGIN_DIR
        [plugin_group] = json.loads((plugin / "hooks" / "hooks.json").read_text())["hooks"]["PostToolUse"]
        plugin_command = plugin_group["hooks"][0]["command"]
        plugin_env = dict(path_env, CLAUDE_PLUGIN_ROOT=str(plugin))
        shared = os.path.join(work, "shared-settings")
        os.makedirs(shared)
        install_claude_code("project", project_dir=shared)
        plugin_aside_env = dict(plugin_env, CLAUDE_PROJECT_DIR=shared)
        # The reference: a copy of the plugin whose hook runs a script of its own.
        scripted = os.path.join(work, "plugin-with-script")
        shutil.copytree(plugin, scripted)
        script = os.path.join(scripted, "hooks", "phx-hook")
        with open(script, "w", encoding="utf-8") as fh:
            fh.write('#!/bin/sh\ncommand -v phx >/dev/null 2>&1 || exit 0\nexec phx hook "$@" --shared\n')
        os.chmod(script, 0o755)  # noqa: S103 - a hook script: executable, as a plugin ships it
        scripted_env = dict(path_env, CLAUDE_PLUGIN_ROOT=scripted)
        # (m), (n): Gemini CLI's hooks; its environment names the project; a HOME of their own (no
        # user settings registering Phoenix, which the extension's command would stand aside for).
        gemini_home = os.path.join(work, "gemini-home")
        os.makedirs(gemini_home)
        gemini_env = dict(env, HOME=gemini_home, GEMINI_PROJECT_DIR=project, GEMINI_CWD=project)
        gemini_path_env = dict(gemini_env, PATH=path_env["PATH"])
        seed_dir = os.path.join(work, "seed")
        os.makedirs(seed_dir)
        seed_env = dict(env, PHOENIX_STATE_DIR=seed_dir)
        commands = {
            "(a) python -c pass": ([sys.executable, "-c", "pass"], env),
            "(b) bash + jq (seed state-update)": ([str(HERE / "seed_heartbeat.sh")], seed_env),
            "(c) phx PostToolUse hook": (shlex.split(hook_command("post-tool-use")), env),
            "(a) via /bin/sh -c": (["/bin/sh", "-c", f"{shlex.quote(sys.executable)} -c pass"], env),
            "(c) via /bin/sh -c": (["/bin/sh", "-c", hook_command("post-tool-use")], env),
            "(g) portable command (shared settings), via /bin/sh -c": (
                ["/bin/sh", "-c", portable_command("post-tool-use")],
                path_env,
            ),
            "(h) portable command standing aside for (c), via /bin/sh -c": (
                ["/bin/sh", "-c", portable_command("post-tool-use")],
                aside_env,
            ),
            "(j) plugin's command (Claude Code plugin), via /bin/sh -c": (
                ["/bin/sh", "-c", plugin_command],
                plugin_env,
            ),
            "(k) plugin's command standing aside for (g), via /bin/sh -c": (
                ["/bin/sh", "-c", plugin_command],
                plugin_aside_env,
            ),
            "(j) through a script in the plugin (reference)": (
                ["/bin/sh", "-c", '"${CLAUDE_PLUGIN_ROOT}/hooks/phx-hook" post-tool-use'],
                scripted_env,
            ),
            # For reference, not targets: what -S saves a bare interpreter, and the hook run as
            # `phx install` wrote it before it used -S (python -P -c ...).
            "(a) python -S -c pass (reference)": ([sys.executable, "-S", "-c", "pass"], env),
            "(c) without -S (the command before 2026-11-24, reference)": (
                [sys.executable, "-P", "-c", f"from {MARKER} import main; main()", "post-tool-use"],
                env,
            ),
            "(i) phx PostToolUse hook, a session in a lane": (shlex.split(hook_command("post-tool-use")), env),
            CODEX_ROW: (["/bin/sh", "-c", hook_command("post-tool-use", client=CODEX)], env),
            "(a) via bash -c": (["bash", "-c", f"{shlex.quote(sys.executable)} -c pass"], env),
            GEMINI_FAST: (["bash", "-c", hook_command("post-tool-use", client=GEMINI_CLI)], gemini_env),
            GEMINI_EXTENSION: (["bash", "-c", portable_command("post-tool-use", client=GEMINI_CLI)], gemini_path_env),
        }
        sessions = {"(i) phx PostToolUse hook, a session in a lane": LANE_SESSION}
        payloads = {CODEX_ROW: codex_payload, GEMINI_FAST: gemini_payload, GEMINI_EXTENSION: gemini_payload}
        before: dict[str, Callable[[], None]] = {}
        after: dict[str, Callable[[], None]] = {}
        if args.pg:
            schema, pg_env, marker = _pg_team(args.pg, project, env)
            due = "(e) hook, team on PostgreSQL, sync due"
            commands["(d) hook, team on PostgreSQL"] = (shlex.split(hook_command("post-tool-use")), pg_env)
            commands[due] = (shlex.split(hook_command("post-tool-use")), pg_env)
            solo = {k: v for k, v in pg_env.items() if k not in ("PHOENIX_TEAM", "PHOENIX_TEAMMATE")}
            commands["(f) hook, no team, store on PostgreSQL"] = (shlex.split(hook_command("post-tool-use")), solo)
            before[due] = lambda: Path(marker).unlink(missing_ok=True)
            # (e) leaves a detached process writing the heartbeat: wait for it (untimed), so that
            # it does not slow down whatever is timed next.
            after[due] = _waiter(pg_env["PHOENIX_STORE"])
        samples: dict[str, list[float]] = {name: [] for name in commands}
        seq_before = agent.state.read().heartbeat_seq
        for name, (cmd, cmd_env) in commands.items():  # warm-up
            before.get(name, lambda: None)()
            _time(cmd, payloads.get(name, payload)(sessions.get(name, BENCH_SESSION)), project, cmd_env)
            after.get(name, lambda: None)()
        for _ in range(runs):
            for name, (cmd, cmd_env) in commands.items():
                before.get(name, lambda: None)()
                stdin = payloads.get(name, payload)(sessions.get(name, BENCH_SESSION))
                samples[name].append(_time(cmd, stdin, project, cmd_env, name))
                after.get(name, lambda: None)()
        state = agent.state.read()
        # Nine rows beat on the agent's state.json ((l) Codex's, (m) and (n) Gemini's too), (h) and
        # (k) stand aside, (i) beats in its lane.
        beats = state.heartbeat_seq - seq_before
        assert beats == 9 * (runs + 1), (
            f"{beats} heartbeats, not 9 a round: a hook did not beat, or did not stand aside"
        )
        lane = agent.in_lane(LANE_SESSION).state.read()
        assert lane.heartbeat_seq >= runs, "the hook of the session in a lane did not record its heartbeats"
        drift = [e for e in agent.ops.tail(100_000)[0] if e.get("event") == "drift_detected"]
        assert not drift, f"the benchmark's own calls looked like drift: {drift[0]}"
        imports = _import_report(payload(), project)
    finally:
        shutil.rmtree(work, ignore_errors=True)
        if schema is not None:
            import psycopg

            time.sleep(1)  # the detached children finish their heartbeat
            with psycopg.connect(args.pg, autocommit=True) as conn:
                conn.execute(f"DROP SCHEMA {schema} CASCADE")

    med = {name: statistics.median(values) for name, values in samples.items()}
    a, b, c = (med[n] for n in list(commands)[:3])
    cpu = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    print(
        f"Date: {time.strftime('%Y-%m-%d', time.gmtime())}; machine: {platform.system()} {platform.machine()}, "
        f"{os.cpu_count()} cores, {cpu or 'unknown CPU'}; Python {platform.python_version()}; {runs} runs each, interleaved."
    )
    print()
    print("| command | median ms | p90 ms | CPU median ms |")
    print("|---|---:|---:|---:|")
    for name, values in samples.items():
        p90 = statistics.quantiles(values, n=10)[-1]
        print(f"| {name} | {med[name]:.1f} | {p90:.1f} | {statistics.median(CPU[name]):.1f} |")
    print()
    print()
    print(imports)
    ok_a = c <= 1.5 * a
    ok_b = c <= 0.6 * b
    print(
        f"(c)/(a) = {c / a:.2f} (target <= 1.5: {'met' if ok_a else 'MISSED'}); "
        f"(c)/(b) = {c / b:.2f} (target <= 0.6: {'met' if ok_b else 'MISSED'})"
    )
    g, h, c_sh = (
        "(g) portable command (shared settings), via /bin/sh -c",
        "(h) portable command standing aside for (c), via /bin/sh -c",
        "(c) via /bin/sh -c",
    )
    cpu_med = {name: statistics.median(values) for name, values in CPU.items()}
    print(
        f"(g)/(c via sh) = {med[g] / med[c_sh]:.2f} wall, {cpu_med[g] / cpu_med[c_sh]:.2f} CPU "
        f"(+{cpu_med[g] - cpu_med[c_sh]:.1f} ms CPU a heartbeat for the portable command); "
        f"(h), beside (c): {cpu_med[h]:.1f} ms CPU"
    )
    j, k, j_script, a_sh = (
        "(j) plugin's command (Claude Code plugin), via /bin/sh -c",
        "(k) plugin's command standing aside for (g), via /bin/sh -c",
        "(j) through a script in the plugin (reference)",
        "(a) via /bin/sh -c",
    )
    print(
        f"(j)/(a via sh) = {med[j] / med[a_sh]:.2f}; (j)/(g) = {med[j] / med[g]:.2f} wall, "
        f"{cpu_med[j] / cpu_med[g]:.2f} CPU; (k), beside (g): {cpu_med[k]:.1f} ms CPU; "
        f"a script in the plugin: +{med[j_script] - med[j]:.1f} ms wall, +{cpu_med[j_script] - cpu_med[j]:.1f} ms CPU"
    )
    old_c = med["(c) without -S (the command before 2026-11-24, reference)"]
    print(f"(c)/(c without -S) = {c / old_c:.2f}; (c without -S)/(a) = {old_c / a:.2f} (reference)")
    i = med["(i) phx PostToolUse hook, a session in a lane"]
    print(f"(i)/(a) = {i / a:.2f} (target <= 1.5: {'met' if i <= 1.5 * a else 'MISSED'}); (i)/(c) = {i / c:.2f}")
    codex, bare_sh = med[CODEX_ROW], med["(a) via /bin/sh -c"]
    print(
        f"(l)/(a via sh) = {codex / bare_sh:.2f} (target <= 1.5: {'met' if codex <= 1.5 * bare_sh else 'MISSED'}); "
        f"(l)/(c via sh) = {codex / med[c_sh]:.2f}; CPU (l) {cpu_med[CODEX_ROW]:.1f} ms, (a via sh) "
        f"{cpu_med['(a) via /bin/sh -c']:.1f} ms"
    )
    bare_bash = med["(a) via bash -c"]
    for name in (GEMINI_FAST, GEMINI_EXTENSION):
        print(
            f"{name[:3]}/(a via bash) = {med[name] / bare_bash:.2f} wall, "
            f"{cpu_med[name] / cpu_med['(a) via bash -c']:.2f} CPU ({cpu_med[name]:.1f} ms)"
        )
    for name in [n for n in commands if n.startswith(("(d)", "(e)", "(f)"))]:
        ratio = med[name] / a
        print(f"{name[:3]}/(a) = {ratio:.2f} (target <= 1.5: {'met' if ratio <= 1.5 else 'MISSED'})")
    return 0


def _waiter(store: str) -> Callable[[], None]:
    """Wait until the detached heartbeat process has written its beat (the seq went up)."""
    import psycopg

    def seq() -> int:
        with psycopg.connect(store, autocommit=True) as conn:
            row = conn.execute("SELECT seq FROM phx_heartbeats WHERE team_id = 'bench-1' AND name = 'alice'").fetchone()
            return int(row[0]) if row else 0

    last = [seq()]

    def wait() -> None:
        deadline = time.monotonic() + 10
        while seq() <= last[0]:
            if time.monotonic() > deadline:
                raise SystemExit("the detached heartbeat did not reach PostgreSQL within 10 s")
            time.sleep(0.02)
        last[0] = seq()
        time.sleep(0.05)  # and its process is gone

    return wait


def _pg_team(url: str, project: str, env: dict[str, str]) -> tuple[str, dict[str, str], str]:
    """A team on a fresh schema of ``url`` with teammate ``alice``; the hook's environment for
    her, and the file whose age decides when her heartbeat and state go to PostgreSQL."""
    import uuid

    import psycopg

    from phoenix_protocol.integrations._hooks import SYNC_MARK
    from phoenix_protocol.store._teams import Team

    schema = "phx_hookbench_" + uuid.uuid4().hex[:8]
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {schema}")
    store = f"{url}?options=-csearch_path%3D{schema}"
    home = Home(os.path.join(project, ".phoenix"))
    os.environ["PHOENIX_STORE"] = store
    try:
        Team.create(home, "bench", lead="lead", team_id="bench-1").join("alice")
    finally:
        del os.environ["PHOENIX_STORE"]
    pg_env = dict(env, PHOENIX_STORE=store, PHOENIX_TEAM="bench-1", PHOENIX_TEAMMATE="alice")
    return schema, pg_env, os.path.join(home.agent_dir("default"), SYNC_MARK)


if __name__ == "__main__":
    raise SystemExit(main())
