"""state-update beside seed 000's own script: the same inputs, the same files, output and exit codes.

The script is taken from the seed at test time (tests/data/seeds/, "Step 1": the reference
implementation of ``state-update``) and run with bash and jq; Phoenix's ``state-update`` runs as a
process too, on a copy of the same starting files, with the same environment. The resulting
``state.json`` files must be the same bytes, but for the value of ``last_active`` (each run's own
``date -Iseconds``), whose presence and format are checked.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from conftest import git
from phoenix_protocol.core._home import Home
from phoenix_protocol.services._agent import Agent

SEED = Path(__file__).parents[1] / "data" / "seeds" / "000_b11e0de0fac785af.txt"
TIMESTAMP = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}[+-]\d{2}:\d{2}$")  # date -Iseconds
USAGE = "Usage: state-update --working|--done|--error|--idle [message]\n"
PHOENIX = [sys.executable, "-c", "import sys; from phoenix_protocol.cli._state_update import main; sys.exit(main())"]


def seed_script() -> str:
    """The seed's reference ``state-update``: the bash block after "Reference implementation"."""
    text = SEED.read_text(encoding="utf-8")
    after = text[text.index("**Reference implementation** of `state-update`") :]
    match = re.search(r"```bash\n(.*?)```", after, re.DOTALL)
    assert match and match.group(1).startswith("#!/bin/bash\n# state-update:"), "seed 000's Step 1 moved"
    return match.group(1)


@pytest.fixture(scope="module")
def script(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if shutil.which("jq") is None or shutil.which("bash") is None:
        pytest.fail("the side-by-side tests run seed 000's script: they need bash and jq (apt-get install jq)")
    path = tmp_path_factory.mktemp("seed") / "state-update"
    path.write_text(seed_script(), encoding="utf-8")
    path.chmod(0o755)
    return path


def run(argv: list[str], cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(argv, cwd=cwd, env=env, capture_output=True, check=False, timeout=60)


def environment(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PHOENIX_", "CLAUDE"))}
    env["TZ"] = "Asia/Kolkata"  # an offset that is not +00:00, in both
    return {**env, **extra}


def without_timestamp(data: bytes) -> tuple[bytes, list[str]]:
    """``data`` with each ``last_active`` value replaced, and the values."""
    found: list[str] = []

    def keep(match: re.Match[bytes]) -> bytes:
        found.append(match.group(2).decode())
        return match.group(1) + b'"<ts>"'

    return re.sub(rb'("last_active":\s*)"([^"]*)"', keep, data), found


def side_by_side(
    script: Path,
    tmp_path: Path,
    calls: list[list[str]],
    *,
    files: dict[str, str] | None = None,
    env: dict[str, str] | None = None,
    state_file: str = "state.json",
) -> tuple[list[Any], Path, Path]:
    """Run ``calls`` (argument lists, in order) with the seed's script in one folder and Phoenix's
    ``state-update`` in another, both holding ``files`` first; compare exit codes, stdout, stderr,
    the folders' files and ``state_file``. Returns what each call gave and both folders."""
    dirs = []
    for name in ("seed", "phoenix"):
        folder = tmp_path / name
        folder.mkdir()
        for rel, content in (files or {}).items():
            (folder / rel).parent.mkdir(parents=True, exist_ok=True)
            (folder / rel).write_bytes(content.encode("utf-8"))
        dirs.append(folder)
    seed_dir, phoenix_dir = dirs
    results = []
    for args in calls:
        theirs = run(["bash", str(script), *args], seed_dir, environment(**(env or {})))
        ours = run([*PHOENIX, *args], phoenix_dir, environment(**(env or {})))
        assert (ours.returncode, ours.stdout, ours.stderr) == (theirs.returncode, theirs.stdout, theirs.stderr), args
        results.append((theirs.returncode, theirs.stdout.decode()))
        assert sorted(p.relative_to(seed_dir) for p in seed_dir.rglob("*")) == sorted(
            p.relative_to(phoenix_dir) for p in phoenix_dir.rglob("*")
        ), args
        seed_file, our_file = seed_dir / state_file, phoenix_dir / state_file
        assert seed_file.exists() == our_file.exists(), args
        if seed_file.exists():
            seed_bytes, seed_times = without_timestamp(seed_file.read_bytes())
            our_bytes, our_times = without_timestamp(our_file.read_bytes())
            assert our_bytes == seed_bytes, (args, our_file.read_text(), seed_file.read_text())
            assert len(our_times) == len(seed_times) == 1 and all(TIMESTAMP.match(t) for t in our_times + seed_times)
            assert our_times[0][-6:] == seed_times[0][-6:] == "+05:30"
            assert json.loads(our_file.read_bytes()) == {
                **json.loads(seed_file.read_bytes()),
                "last_active": our_times[0],
            }
            assert oct(our_file.stat().st_mode & 0o777) == oct(seed_file.stat().st_mode & 0o777)
    return results, seed_dir, phoenix_dir


def test_the_script_is_seed_000s() -> None:
    script = seed_script()
    assert 'STATE_FILE="${PHOENIX_STATE_DIR:-./state.json}"' in script
    for flag in ("--working", "--done", "--error", "--idle"):
        assert f"    {flag})" in script


@pytest.mark.parametrize(
    "args",
    [
        ["--working", "Test task"],
        ["--done", "All green"],
        ["--error", "boom: the tests fail"],
        ["--idle"],
        ["--working"],  # no text: an empty task, as the script's "$2"
        ["--done"],
        ["--error"],
        ["--working", "a", "b", "c"],  # the script ignores "$3" and the rest
        ["--idle", "ignored"],
        ["--working", "--json"],  # "$2", whatever it is
        ["--working", "café ✓ 日本 / a slash"],
        ["--working", ""],
    ],
    ids=lambda a: " ".join(a) or "(none)",
)
def test_a_new_state_file(script: Path, tmp_path: Path, args: list[str]) -> None:
    results, _, phoenix_dir = side_by_side(script, tmp_path, [args])
    assert results == [(0, "")]
    assert (phoenix_dir / "state.json").read_bytes().count(b"\n") == 1  # the script's one compact line


@pytest.mark.parametrize(
    "args",
    [[], ["--bogus"], ["-h"], ["--help"], ["working", "x"], ["foo", "--working", "x"], ["--WORKING", "x"]],
    ids=lambda a: " ".join(a) or "(none)",
)
def test_anything_else_prints_the_usage_line(script: Path, tmp_path: Path, args: list[str]) -> None:
    results, _, phoenix_dir = side_by_side(script, tmp_path, [args])
    assert results == [(0, USAGE)]
    assert list(phoenix_dir.iterdir()) == []


EXISTING = {
    "status": "working",
    "current_task": "Implementing user authentication",
    "last_output": "Added JWT validation middleware",
    "last_active": "2026-02-02T10:30:00Z",
    "error_message": None,
    "notes": {"open": ["refresh tokens", "clock skew"], "count": 2, "ratio": 0.5, "done": False},
    "unicode": "é ✓ \u007f",
}


@pytest.mark.parametrize(
    "layout",
    [
        json.dumps(EXISTING, indent=2, ensure_ascii=False) + "\n",
        json.dumps(EXISTING, separators=(",", ":")) + "\n",
        json.dumps({"custom": 1, "status": "idle"}),  # the fields missing: appended, in the script's order
        json.dumps({"status": "idle", "current_task": "x", "last_active": "t", "extra": [1, {"a": []}]}, indent=4),
    ],
    ids=["jq layout", "compact", "fields missing", "four spaces"],
)
def test_an_existing_state_file(script: Path, tmp_path: Path, layout: str) -> None:
    calls = [["--working", "Next task"], ["--done", "Merged"], ["--error", "CI red"], ["--idle"], ["--done"]]
    results, _, _ = side_by_side(script, tmp_path, calls, files={"state.json": layout})
    assert results == [(0, "")] * len(calls)


@pytest.mark.parametrize("rel", ["custom.json", "sub/dir/agent-state.json", "state.json"])
def test_phoenix_state_dir_names_the_file(script: Path, tmp_path: Path, rel: str) -> None:
    """The seed's ``STATE_FILE="${PHOENIX_STATE_DIR:-./state.json}"``: the variable names a file
    (here relative to the working directory, as the seed's ``./state.json``)."""
    calls = [["--working", "First"], ["--done", "Second"]]
    results, _, _ = side_by_side(
        script, tmp_path, calls, files={"sub/dir/.keep": ""}, env={"PHOENIX_STATE_DIR": rel}, state_file=rel
    )
    assert results == [(0, "")] * len(calls)


def test_phoenix_state_dir_names_an_absolute_file(script: Path, tmp_path: Path) -> None:
    """An absolute ``PHOENIX_STATE_DIR`` (the seed's advice), an existing file there, run from
    another folder: the same file results."""
    made = {}
    for name, argv in (("seed", ["bash", str(script)]), ("phoenix", PHOENIX)):
        target = tmp_path / name / "agent" / "state.json"
        target.parent.mkdir(parents=True)
        target.write_text(json.dumps(EXISTING, indent=2) + "\n")
        cwd = tmp_path / name / "elsewhere"
        cwd.mkdir()
        env = environment(PHOENIX_STATE_DIR=str(target))
        for args in (["--error", "disk full"], ["--working", "Retry"]):
            proc = run([*argv, *args], cwd, env)
            assert (proc.returncode, proc.stdout, proc.stderr) == (0, b"", b"")
        assert list(cwd.iterdir()) == []
        made[name] = without_timestamp(target.read_bytes())
    assert made["phoenix"][0] == made["seed"][0]


# -- where Phoenix's state-update differs from the script, on purpose ---------------------------------


def test_a_file_that_is_not_a_json_object_is_refused_untouched(script: Path, tmp_path: Path) -> None:
    """The script's jq fails, and its ``mv`` then empties the file (exit 0); Phoenix's refuses and
    leaves it as it was (exit 3, one line)."""
    for content in ("{ not json", "[1, 2]"):
        for name, argv in (("seed", ["bash", str(script)]), ("phoenix", PHOENIX)):
            folder = tmp_path / f"{name}-{len(content)}"
            folder.mkdir()
            (folder / "state.json").write_text(content)
            proc = run([*argv, "--working", "x"], folder, environment())
            if name == "seed":
                assert proc.returncode == 0 and (folder / "state.json").read_bytes() == b""  # the damage
            else:
                assert proc.returncode == 3 and proc.stdout == b""
                assert proc.stderr.decode().startswith("state-update: error: ") and proc.stderr.count(b"\n") == 1
                assert (folder / "state.json").read_text() == content


def test_text_the_script_would_break_is_escaped(script: Path, tmp_path: Path) -> None:
    """The script writes a new file with ``echo "{...\"$task\"...}"``: a ``"`` in the text makes
    it invalid JSON. Phoenix's writes the text as it is, escaped."""
    task = 'say "hi" \\ then \t leave'
    for name, argv in (("seed", ["bash", str(script)]), ("phoenix", PHOENIX)):
        folder = tmp_path / name
        folder.mkdir()
        assert run([*argv, "--working", task], folder, environment()).returncode == 0
    with pytest.raises(ValueError):
        json.loads((tmp_path / "seed" / "state.json").read_text())
    assert json.loads((tmp_path / "phoenix" / "state.json").read_text())["current_task"] == task


def test_an_empty_file_is_written_anew(tmp_path: Path) -> None:
    (tmp_path / "state.json").write_text("")
    assert run([*PHOENIX, "--error", "oops"], tmp_path, environment()).returncode == 0
    state = json.loads((tmp_path / "state.json").read_text())
    assert (state["status"], state["current_task"]) == ("error", "oops")


def test_a_secret_in_the_text_is_redacted(tmp_path: Path) -> None:
    secret = "ghp_" + "A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8"
    assert run([*PHOENIX, "--working", f"push with {secret}"], tmp_path, environment()).returncode == 0
    text = (tmp_path / "state.json").read_text()
    assert secret not in text and "[REDACTED" in text


def test_json_reports_the_file(tmp_path: Path) -> None:
    proc = run([*PHOENIX, "--json", "--working", "Task"], tmp_path, environment())
    data = json.loads(proc.stdout)
    assert proc.returncode == 0 and data["ok"] is True and data["path"] == str(tmp_path / "state.json")
    assert data["state"]["current_task"] == "Task"


# -- which file: the seed's, or the agent's state in a Phoenix home ------------------------------------


@pytest.fixture
def home_project(project: Path) -> Path:
    """A project with a Phoenix home (as a session of Claude Code with Phoenix's hooks leaves it)."""
    Home(str(project / ".phoenix")).ensure()
    return project


def agent_state(project: Path, agent: str = "default") -> dict[str, Any]:
    return json.loads((project / ".phoenix" / "agents" / agent / "state.json").read_text())  # type: ignore[no-any-return]


def ops_events(project: Path, agent: str = "default") -> list[dict[str, Any]]:
    path = project / ".phoenix" / "agents" / agent / "ops.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def test_with_a_phoenix_home_the_agents_state_gets_the_seeds_fields(home_project: Path) -> None:
    """No ``./state.json``, no ``PHOENIX_STATE_DIR``: the agent's state in the home, through the
    library (ops events, Phoenix's own fields), silently, with the seed's ``current_task``."""
    for args, status, fields in (
        (["--working", "Write the parser"], "working", {"current_task": "Write the parser"}),
        (["--done", "Parser merged"], "idle", {"current_task": "Parser merged", "last_output": "Parser merged"}),
        (["--error", "CI red"], "error", {"current_task": "CI red", "error_message": "CI red"}),
        (["--idle"], "idle", {"current_task": ""}),
    ):
        proc = run([*PHOENIX, *args], home_project, environment())
        assert (proc.returncode, proc.stdout, proc.stderr) == (0, b"", b""), args
        state = agent_state(home_project)
        assert state["status"] == status and {k: state[k] for k in fields} == fields, args
        assert state["updated_by"] == "model"
    assert [e["event"] for e in ops_events(home_project)] == ["task_started", "task_done", "task_error", "state_idle"]
    assert not (home_project / "state.json").exists()


def test_phoenix_state_dir_naming_a_folder_is_a_phoenix_home(tmp_path: Path) -> None:
    home = tmp_path / "myagent"
    home.mkdir()
    proc = run([*PHOENIX, "--working", "Task"], tmp_path, environment(PHOENIX_STATE_DIR=str(home)))
    assert proc.returncode == 0, proc.stderr
    assert json.loads((home / "agents" / "default" / "state.json").read_text())["current_task"] == "Task"


def test_phoenix_state_dir_naming_a_file_wins_over_the_home(home_project: Path) -> None:
    proc = run([*PHOENIX, "--working", "Task"], home_project, environment(PHOENIX_STATE_DIR="seed-state.json"))
    assert proc.returncode == 0, proc.stderr
    assert json.loads((home_project / "seed-state.json").read_text())["current_task"] == "Task"
    assert not (home_project / ".phoenix" / "agents").exists()


def test_an_existing_state_json_is_the_seeds_file(home_project: Path) -> None:
    (home_project / "state.json").write_text('{"status": "idle"}\n')
    proc = run([*PHOENIX, "--working", "Task"], home_project, environment())
    assert proc.returncode == 0, proc.stderr
    assert json.loads((home_project / "state.json").read_text())["current_task"] == "Task"
    assert not (home_project / ".phoenix" / "agents").exists()


@pytest.mark.parametrize("variable", ["PHOENIX_SESSION_ID", "PHOENIX_AGENT", "PHOENIX_HOME"])
def test_inside_a_phoenix_session_the_agents_state_wins(home_project: Path, variable: str) -> None:
    """In a session whose hooks Phoenix runs (it exports PHOENIX_SESSION_ID, PHOENIX_AGENT and
    PHOENIX_HOME to the Bash tool), the model's state-update goes to the agent Phoenix recovers,
    even where a ``state.json`` of someone else's lies in the folder."""
    (home_project / "state.json").write_text('{"status": "idle"}\n')
    value = {"PHOENIX_SESSION_ID": "sess-1", "PHOENIX_AGENT": "default", "PHOENIX_HOME": ".phoenix"}[variable]
    proc = run([*PHOENIX, "--working", "Task"], home_project, environment(**{variable: value}))
    assert proc.returncode == 0, proc.stderr
    assert agent_state(home_project)["current_task"] == "Task"
    assert (home_project / "state.json").read_text() == '{"status": "idle"}\n'


def test_options_choose_the_agent(home_project: Path) -> None:
    proc = run([*PHOENIX, "--agent", "reviewer", "--working", "Review", "--json"], home_project, environment())
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["agent"] == "reviewer"
    assert agent_state(home_project, "reviewer")["current_task"] == "Review"


def test_run_in_an_agents_folder_it_is_that_agents_state(home_project: Path) -> None:
    agent = Agent.open("zero", home=Home(str(home_project / ".phoenix")))
    agent.state.set_status("working", "First")
    proc = run([*PHOENIX, "--done", "Finished"], Path(agent.dir), environment())
    assert proc.returncode == 0, proc.stderr
    state = agent_state(home_project, "zero")
    assert (state["status"], state["current_task"], state["last_output"]) == ("idle", "Finished", "Finished")
    assert ops_events(home_project, "zero")[-1]["event"] == "task_done"


def test_without_a_home_the_seeds_default_file(project: Path) -> None:
    """A git project with no Phoenix home: ``./state.json``, as the seed; no home is made."""
    proc = run([*PHOENIX, "--working", "Task"], project, environment())
    assert proc.returncode == 0, proc.stderr
    assert json.loads((project / "state.json").read_text())["current_task"] == "Task"
    assert not (project / ".phoenix").exists()
    assert git(project, "status", "--porcelain") == "?? state.json\n"


def test_precedence_still_holds_in_a_phoenix_home(home_project: Path) -> None:
    agent = Agent.open("default", home=Home(str(home_project / ".phoenix")))
    agent.state.set_status("error", "stalled: process gone", source="watchdog", event="stalled")
    proc = run([*PHOENIX, "--working", "I am fine"], home_project, environment())
    assert proc.returncode == 4 and proc.stdout == b"" and b"precedence" in proc.stderr
    proc = run([*PHOENIX, "--working", "Checked by hand", "--force"], home_project, environment())
    assert proc.returncode == 0
    assert agent_state(home_project)["current_task"] == "Checked by hand"
