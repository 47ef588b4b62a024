"""The PostToolUse hook's import path stays light: measured here by what it loads, in
bench/hook_latency.py by time."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

# Modules the heartbeat may load beyond a bare interpreter. Anything else (re, json, typing,
# datetime, pathlib, psutil, rich, ...) costs more than the heartbeat's whole budget.
ALLOWED = {
    "__future__",
    "_json",
    "_sha256",
    "errno",
    "fcntl",
    "phoenix_protocol",
    "phoenix_protocol.agent",
    "phoenix_protocol.core",
    "phoenix_protocol.integrations",
    "phoenix_protocol.services",
    "phoenix_protocol.services._agent",
    "phoenix_protocol.core._clock",
    "phoenix_protocol.core._config",
    "phoenix_protocol.agent._drift",
    "phoenix_protocol.core._durable",
    "phoenix_protocol.core._errors",
    "phoenix_protocol.core._home",
    "phoenix_protocol.integrations._hooks",
    "phoenix_protocol.integrations._clients",
    "phoenix_protocol.core._ids",
    "phoenix_protocol.core._jsonio",
    "phoenix_protocol.core._screen",
    "phoenix_protocol.agent._ops",
    "phoenix_protocol.agent._seqlog",
    "phoenix_protocol.agent._state",
    "phoenix_protocol._version",
}

SESSION = "0b6f3c1e-7a2d-4e95-8c41-2f9d6a0b7e53"  # Claude Code gives each session a UUID

PROBE = r"""
import sys
before = set(sys.modules)
from phoenix_protocol.integrations._hooks import run
code, out, err = run(["post-tool-use"], sys.stdin.buffer.read())
assert (code, out, err) == (0, "", ""), err
print(" ".join(sorted(set(sys.modules) - before)))
"""


def test_post_tool_use_loads_only_the_allowed_modules(project: Path) -> None:
    payload = {
        "session_id": SESSION,
        "cwd": str(project),
        "tool_name": "Bash",
        "tool_input": {"command": "ls"},
        "tool_response": {},
    }
    for _ in range(2):  # the first call creates the home; the second is the steady state
        proc = subprocess.run(
            [sys.executable, "-P", "-c", PROBE], input=json.dumps(payload).encode(), capture_output=True, check=True
        )
        loaded = set(proc.stdout.decode().split())
        assert loaded <= ALLOWED, f"the hot path now also imports {sorted(loaded - ALLOWED)}"


def test_a_session_id_the_state_holds_is_not_checked_again(project: Path) -> None:
    """A session id that is no UUID is checked for secrets once, when the session starts (or is
    adopted); the heartbeats of that session, which give the state's own id, load nothing more."""
    from conftest import run_hook

    started = run_hook(project, "session-start", "SessionStart", {}, session_id="my-session-7", source="startup")
    assert started.returncode == 0, started.stderr
    payload = {
        "session_id": "my-session-7",
        "cwd": str(project),
        "tool_name": "Bash",
        "tool_input": {"command": "ls"},
        "tool_response": {},
    }
    proc = subprocess.run(
        [sys.executable, "-P", "-c", PROBE], input=json.dumps(payload).encode(), capture_output=True, check=True
    )
    loaded = set(proc.stdout.decode().split())
    assert loaded <= ALLOWED, f"the hot path now also imports {sorted(loaded - ALLOWED)}"


INSTALLED_PROBE = r"""
import sys
before = set(sys.modules)
from phoenix_protocol.integrations._hooks import main
try:
    main(["post-tool-use"])
except SystemExit as exit:
    assert exit.code == 0
sys.stderr.write(" ".join(sorted(set(sys.modules) - before)))
"""


def test_the_installed_command_skips_the_site_packages_on_the_hot_path(project: Path) -> None:
    """``phx install`` writes ``python -S ...`` with Phoenix's directory on ``sys.path``: the
    heartbeat runs without ``site`` (and loads only the allowed modules), while a path that needs
    a package from the site packages still gets it."""
    from conftest import HOOK_PREFIX

    assert HOOK_PREFIX[1:3] == ["-S", "-P"]
    setup = HOOK_PREFIX[-1].split("; from phoenix_protocol.integrations._hooks import")[0]
    payload = {"session_id": SESSION, "cwd": str(project), "tool_name": "Bash", "tool_input": {"command": "ls"}}
    bare_run = subprocess.run([sys.executable, "-c", "import sys; print(*sys.modules)"], capture_output=True, text=True)
    bare = set(bare_run.stdout.split()) - {"site"}
    for _ in range(2):
        proc = subprocess.run(
            [*HOOK_PREFIX[:-1], f"{setup}\n{INSTALLED_PROBE}"],
            input=json.dumps(payload).encode(),
            capture_output=True,
            check=True,
        )
        loaded = set(proc.stderr.decode().split())
        # beyond what a bare interpreter loads (here without site: os, stat, ... come with it)
        assert "site" not in loaded and loaded <= ALLOWED | bare, sorted(loaded - ALLOWED - bare)
    # A path that needs the site packages (a checkpoint needs xxhash; SessionStart psutil, yaml)
    cold = f"""{setup}
from phoenix_protocol.integrations._hooks import main
try:
    main(["stop"])  # empty stdin: reported on stderr, exit 0
except SystemExit as exit:
    assert exit.code == 0
import xxhash, yaml
print(sys.flags.no_site, sys.prefix)
"""
    ran = subprocess.run([*HOOK_PREFIX[:-1], cold], capture_output=True, text=True, check=True, cwd=project)
    assert ran.stdout.split() == ["1", sys.prefix], ran.stderr  # set up on demand: this venv's prefix


def test_a_teammate_whose_session_id_was_kept_as_a_hash_loads_nothing_more(project: Path, tmp_path: Path) -> None:
    """Found in review: a teammate's heartbeat passes its session id on to the team; with an id
    kept as a hash (a secret), each call checked it for secrets again, loading the redactor."""
    import os

    from conftest import run_hook
    from phoenix_protocol.core._home import Home
    from phoenix_protocol.store._teams import Team

    team = Team.create(Home(str(project / ".phoenix")), "demo", lead="lead", team_id="demo-1")
    team.join("alice")
    secret = "ghp_" + "x7Yq2Lm9Pz4Rt6Vb8Nc1Kd3Fg5Hj0Ws2Ea4Ub"
    env = {"XDG_RUNTIME_DIR": str(tmp_path), "PHOENIX_TEAM": "demo-1", "PHOENIX_TEAMMATE": "alice"}
    started = run_hook(project, "session-start", "SessionStart", env, session_id=secret, source="startup")
    assert started.returncode == 0, started.stderr
    payload = {"session_id": secret, "cwd": str(project), "tool_name": "Bash", "tool_input": {}, "tool_response": {}}
    proc = subprocess.run(
        [sys.executable, "-P", "-c", PROBE],
        input=json.dumps(payload).encode(),
        capture_output=True,
        check=True,
        env={**os.environ, **env},
    )
    loaded = set(proc.stdout.decode().split())
    team_path = ALLOWED | {"phoenix_protocol.agent._heartbeats"}  # a teammate beats for the team too
    assert loaded <= team_path, f"the hot path now also imports {sorted(loaded - team_path)}"
    beats = [p for p in tmp_path.rglob("alice*") if p.is_file()]
    assert beats and all(secret.encode() not in p.read_bytes() for p in beats)


def test_a_session_in_a_lane_of_its_own_loads_nothing_more(project: Path) -> None:
    """A session that runs beside another live one (docs/lanes.md): its heartbeat finds its lane
    with one stat and goes there, loading no module a heartbeat of the primary lane does not."""
    import os

    from phoenix_protocol.core._home import Home
    from phoenix_protocol.core._process import hostname, identity_of
    from phoenix_protocol.services._agent import Agent
    from phoenix_protocol.services._lanes import start_placed

    home = Home(str(project / ".phoenix"))
    me = identity_of(os.getpid())
    assert me is not None
    holder = {"pid": me.pid, "start_time": me.start_time, "host": hostname()}  # alive: this test
    start_placed(Agent.open(home=home), "a-live-session", process=holder)
    beside = {"pid": os.getppid(), "start_time": 0.0, "host": hostname()}
    assert start_placed(Agent.open(home=home), SESSION, process=beside).lane == SESSION
    payload = {"session_id": SESSION, "cwd": str(project), "tool_name": "Bash", "tool_input": {}, "tool_response": {}}
    for _ in range(2):
        proc = subprocess.run(
            [sys.executable, "-P", "-c", PROBE], input=json.dumps(payload).encode(), capture_output=True, check=True
        )
        loaded = set(proc.stdout.decode().split())
        assert loaded <= ALLOWED, f"the hot path now also imports {sorted(loaded - ALLOWED)}"
    lane = Agent.open(home=home).in_lane(SESSION).state.read()
    assert lane.heartbeat_seq == 2
    assert Agent.open(home=home).state.read().heartbeat_seq == 0


def test_claude_codes_own_tool_names_need_no_redactor() -> None:
    """The heartbeat records these names without the redactor: none of them is changed by it."""
    from phoenix_protocol.core._redact import redact
    from phoenix_protocol.integrations._hooks import CLAUDE_CODE_TOOLS

    assert all(redact(name) is name for name in CLAUDE_CODE_TOOLS)


def test_another_tool_name_is_redacted_once_then_loads_nothing_more(project: Path) -> None:
    """A tool name of no built-in tool (an MCP server's) passes the redactor when it is new to the
    state; the calls after it, which give the name the state holds, stay on the light path."""
    payload = {
        "session_id": SESSION,
        "cwd": str(project),
        "tool_name": "mcp__linear__list_issues",
        "tool_input": {"query": "open"},
        "tool_response": {},
    }
    loaded = []
    for n in range(3):
        payload["tool_input"] = {"query": f"open {n}"}
        proc = subprocess.run(
            [sys.executable, "-P", "-c", PROBE], input=json.dumps(payload).encode(), capture_output=True, check=True
        )
        loaded.append(set(proc.stdout.decode().split()))
    assert "phoenix_protocol.core._redact" in loaded[0]  # new to the state: redacted
    for later in loaded[1:]:
        assert later <= ALLOWED, f"the hot path now also imports {sorted(later - ALLOWED)}"
