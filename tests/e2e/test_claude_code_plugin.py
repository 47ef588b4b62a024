"""End to end: Phoenix's Claude Code plugin in the real Claude Code CLI (pinned, from npm).

A user adds this repository as a plugin marketplace and installs the plugin, as the docs say
(``claude plugin marketplace add <path>``, ``claude plugin install phoenix@phoenix-protocol``: the
CLI's equivalents of ``/plugin marketplace add`` and ``/plugin install``), in a temporary HOME,
with no ``phx install`` in the project. The marketplace is a folder holding this repository's
``.claude-plugin/`` and ``plugins/`` as they are now (``add`` of a folder reads the plugin in
place; ``owner/repo`` clones the repository and copies the plugin into Claude Code's cache). Phoenix
is installed from this repository into a virtualenv of its own (``pip install .``), whose ``bin``
is on ``PATH``: the plugin ships no Python and runs that ``phx``.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import tempfile
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from claude_code import (
    REPO_ROOT,
    ClaudeProject,
    ClaudeRun,
    FakeAnthropic,
    Turn,
    ensure_claude_code,
    install_phoenix,
    path_without_phx,
)

from phoenix_protocol.integrations._plugin import MARKETPLACE_NAME, PLUGIN_DIR, PLUGIN_NAME, PLUGIN_VERSION

PLUGIN_ID = f"{PLUGIN_NAME}@{MARKETPLACE_NAME}"
TASK = "Migrate the billing tables"
_TOOL_TURNS = [Turn.bash("ls missing-phoenix-e2e"), Turn.bash("echo phoenix-e2e"), Turn.say("Done.")]
_TOOL_ARGS = ["-p", "go", "--allowedTools", "Bash(ls *)", "Bash(echo *)", "--output-format", "json", "--debug"]
_HOOKS_RUN = {"SessionStart", "PostToolUse", "PostToolUseFailure", "UserPromptSubmit", "Stop", "SessionEnd"}


@pytest.fixture(scope="module")
def claude_argv() -> list[str]:
    """Install (once, under a lock) or find the pinned Claude Code; fails, never skips, without node/npm."""
    return ensure_claude_code()


@pytest.fixture(scope="module")
def phoenix_bin() -> Iterator[str]:
    """The ``bin`` folder of Phoenix installed from this repository into a virtualenv elsewhere."""
    where = tempfile.mkdtemp(prefix="phx-e2e-venv-")
    try:
        yield install_phoenix(os.path.join(where, "venv"))
    finally:
        shutil.rmtree(where, ignore_errors=True)


@pytest.fixture(scope="module")
def marketplace() -> Iterator[str]:
    """A folder holding this repository's marketplace and plugin files as they are now."""
    where = tempfile.mkdtemp(prefix="phx-e2e-market-")
    try:
        for name in (".claude-plugin", "plugins"):
            shutil.copytree(os.path.join(REPO_ROOT, name), os.path.join(where, name))
        yield where
    finally:
        shutil.rmtree(where, ignore_errors=True)


@pytest.fixture
def project(claude_argv: list[str]) -> Iterator[ClaudeProject]:
    """A git project with nothing of Phoenix's in its settings, and a HOME of its own."""
    with ClaudeProject.create(claude_argv, scopes=()) as created:
        yield created


def claude_json(project: ClaudeProject, args: list[str], env: dict[str, str] | None = None) -> Any:
    """``claude <args> --json``: its output, or its last line (``marketplace add`` may print
    progress first), parsed (exit 0 asserted)."""
    run = project.run([*args, "--json"], env=env)
    assert run.returncode == 0, run.describe()
    try:
        return json.loads(run.stdout)
    except ValueError:
        return json.loads(run.stdout.strip().splitlines()[-1])


def install_plugin(project: ClaudeProject, marketplace: str, *, scope: str = "user") -> dict[str, Any]:
    """What a user types, non-interactively: add the marketplace, install the plugin; returns
    ``claude plugin list``'s entry for it."""
    added = claude_json(project, ["plugin", "marketplace", "add", marketplace])
    assert (added["outcome"], added["marketplace"]) == ("ok", MARKETPLACE_NAME), added
    installed = claude_json(project, ["plugin", "install", PLUGIN_ID, "--scope", scope])
    assert (installed["outcome"], installed["pluginId"]) == ("ok", PLUGIN_ID), installed
    [entry] = [e for e in claude_json(project, ["plugin", "list"]) if e["id"] == PLUGIN_ID]
    assert entry["enabled"] is True and entry["version"] == PLUGIN_VERSION, entry
    return dict(entry)


def events(project: ClaudeProject) -> list[str]:
    return [entry["event"] for entry in project.ops()]


def result_json(run: ClaudeRun) -> dict[str, Any]:
    data = json.loads(run.stdout.strip().splitlines()[-1])
    assert isinstance(data, dict)
    return data


# "Hooks: PostToolUse:Bash [command …] (plugin phoenix@phoenix-protocol) finished with status 0 (24ms)"
# (2.1.330's debug log; a settings file's hook has no "(plugin …)")
_HOOK_RUN = re.compile(
    r"\] (?:Hooks: )?([A-Za-z]+(?::\S+)?) \[(.*)\] (?:\(plugin (\S+)\) )?(?:completed|finished) with status (\d+)"
)


def shared_runs(project: ClaudeProject) -> list[tuple[str, str | None, int]]:
    """The runs of Phoenix's shared command that Claude Code's debug log (``--debug``) records:
    ``(hook, plugin id or None, exit status)`` each: None for a settings file's hook, and for
    every SessionEnd hook (2.1.330 logs those without their source)."""
    runs = []
    for dirpath, _dirs, files in os.walk(os.path.join(project.home, ".claude", "debug")):
        for name in sorted(files):
            if name.endswith(".txt") and not os.path.islink(os.path.join(dirpath, name)):
                with open(os.path.join(dirpath, name), encoding="utf-8", errors="replace") as fh:
                    for line in fh:
                        match = _HOOK_RUN.search(line)
                        if match and "exec phx hook " in match.group(2):
                            runs.append((match.group(1), match.group(3), int(match.group(4))))
    return runs


def plugin_runs(project: ClaudeProject) -> list[tuple[str, int]]:
    """The runs of the plugin's hooks in a project with no hooks of its own: ``(hook, exit
    status)`` each (SessionEnd's line names no plugin)."""
    runs = shared_runs(project)
    assert all(plugin == PLUGIN_ID for hook, plugin, _ in runs if not hook.startswith("SessionEnd")), runs
    return [(hook, status) for hook, _, status in runs]


@pytest.mark.e2e
def test_claude_code_validates_the_marketplace_and_the_plugin(project: ClaudeProject) -> None:
    """``claude plugin validate --strict`` (warnings are errors) passes the plugin, and names every
    event's hook; the marketplace passes but for one warning per Gemini CLI-only event of the Gemini CLI
    extension's ``hooks/hooks.json``, which shares the repository's root with the marketplace
    (Gemini installs an extension from the root of a repository; Claude Code ignores a hooks file
    at the marketplace's root at runtime: no plugin's source is the root)."""
    run = project.run(["plugin", "validate", "--strict", "--json", os.path.join(REPO_ROOT, PLUGIN_DIR)])
    assert run.returncode == 0, run.describe()
    run = project.run(["plugin", "validate", "--json", REPO_ROOT])
    assert run.returncode == 0, run.describe()
    root = json.loads(run.stdout)
    assert root["success"] is True and root["manifest"]["errors"] == root["manifest"]["warnings"] == [], root
    gemini = os.path.join(REPO_ROOT, "hooks", "hooks.json")
    assert [c["file"] for c in root["contents"]] == [gemini], root
    warned = sorted(w["message"] for c in root["contents"] for w in c["warnings"])
    assert warned == [
        f"hooks.{event}: unknown hook event; entry ignored at runtime"
        for event in ("AfterAgent", "AfterTool", "BeforeAgent", "PreCompress")
    ], root
    report = json.loads(project.run(["plugin", "validate", "--json", os.path.join(REPO_ROOT, PLUGIN_DIR)]).stdout)
    assert report["success"] is True and report["manifest"]["errors"] == [], report
    hooks = {(h["event"], h["command"]) for h in report["provides"]["hooks"]}
    assert {event for event, _ in hooks} == {"SessionStart", "PostToolUse", "PostToolUseFailure"} | {
        "PreCompact",
        "UserPromptSubmit",
        "Stop",
        "SessionEnd",
        "SubagentStart",
        "SubagentStop",
        "TaskCreated",
        "TaskCompleted",
        "TeammateIdle",
    }
    assert all(command.startswith("command -v phx ") for _, command in hooks), hooks


@pytest.mark.e2e
def test_the_installed_plugin_runs_phoenixs_hooks(project: ClaudeProject, marketplace: str, phoenix_bin: str) -> None:
    """After ``plugin install`` and nothing else, a session with tool calls is recorded by the
    plugin's hooks: the session, each tool call's heartbeat, the failed one, the session's end."""
    entry = install_plugin(project, marketplace)
    assert not os.path.exists(project.settings_path) and not os.path.exists(project.local_settings_path)
    with FakeAnthropic(_TOOL_TURNS) as api:
        run = project.run(_TOOL_ARGS, api=api, env={"PATH": path_without_phx(phoenix_bin)})
    assert run.returncode == 0, run.describe()
    assert result_json(run)["result"] == "Done."
    assert project.hook_errors() == [], run.describe()
    runs = plugin_runs(project)
    assert {hook.split(":")[0] for hook, _ in runs} >= _HOOKS_RUN, project.hook_runs()
    assert all(status == 0 for _, status in runs), runs
    logged = events(project)
    assert logged[0] == "session_start" and "session_end" in logged and "tool_failed" in logged, logged
    assert "hook_failed" not in logged, project.ops()
    state = project.state()
    assert state["session_id"] == result_json(run)["session_id"]
    assert state["status"] == "idle" and state["last_tool"]["name"] == "Bash"
    beats = [hook for hook, _ in runs if hook.startswith(("PostToolUse", "UserPromptSubmit", "Stop"))]
    assert state["heartbeat_seq"] == len(beats) >= 3, (state, runs)
    # A folder marketplace: Claude Code reads the plugin where the marketplace holds it.
    assert os.path.realpath(entry["readFromFolder"]) == os.path.realpath(os.path.join(marketplace, PLUGIN_DIR))


@pytest.mark.e2e
def test_the_plugin_does_nothing_where_phoenix_is_not_installed(project: ClaudeProject, marketplace: str) -> None:
    install_plugin(project, marketplace)
    with FakeAnthropic(_TOOL_TURNS) as api:
        run = project.run(_TOOL_ARGS, api=api, env={"PATH": path_without_phx()})
    assert run.returncode == 0, run.describe()
    assert result_json(run)["result"] == "Done."
    assert project.hook_errors() == [], run.describe()
    runs = plugin_runs(project)
    assert {hook.split(":")[0] for hook, _ in runs} >= _HOOKS_RUN and all(s == 0 for _, s in runs), runs
    assert not os.path.exists(project.phoenix_home)


@pytest.mark.e2e
def test_a_session_killed_under_the_plugin_is_recovered_by_the_next(
    project: ClaudeProject, marketplace: str, phoenix_bin: str
) -> None:
    """A session the plugin's hooks recorded as working is killed (SIGKILL to its process group:
    no SessionEnd); the next session's first model request carries the recovery context the
    plugin's SessionStart hook printed."""
    install_plugin(project, marketplace, scope="project")  # enabledPlugins in .claude/settings.json
    env = {"PATH": path_without_phx(phoenix_bin)}
    release = threading.Event()
    try:
        with FakeAnthropic([Turn.bash(f"echo {TASK}"), Turn.held(release)]) as api:
            proc = project.start(["-p", TASK, "--allowedTools", "Bash(echo *)"], api=api, env=env)
            deadline = time.monotonic() + 120
            while len(api.main_requests()) < 2:  # the tool ran: its heartbeat is written
                assert proc.poll() is None, proc.communicate()
                assert time.monotonic() < deadline, "the model never got that far"
                time.sleep(0.1)
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate(timeout=30)
    finally:
        release.set()
    killed = project.state()
    assert killed["status"] == "working" and killed["heartbeat_seq"] >= 1, killed
    assert "session_end" not in events(project)

    with FakeAnthropic([Turn.say("Resuming.")]) as api:
        run = project.run(["-p", "carry on", "--output-format", "json"], api=api, env=env)
    assert run.returncode == 0, run.describe()
    first = api.messages_requests()[0]
    assert "RECOVERY DETECTED" in first.text, first.text[:3000]
    assert "SessionStart hook additional context" in first.text
    start = [e for e in project.ops() if e["event"] == "session_start"][-1]
    assert start["meta"]["recovered"] is True and start["meta"]["session_id"] == result_json(run)["session_id"]
    assert project.state()["status"] == "idle"
    assert project.hook_errors() == []


@pytest.mark.e2e
def test_the_plugin_beside_committed_settings_handles_each_event_once(
    claude_argv: list[str], marketplace: str, phoenix_bin: str
) -> None:
    """Claude Code runs the plugin's hooks and the settings' hooks, the very same command too: with
    the plugin installed in a project whose settings.json registers Phoenix (``phx install
    claude-code``), both run for every event, and the plugin's stands aside."""
    with ClaudeProject.create(claude_argv, scopes=("project",)) as project:
        install_plugin(project, marketplace)
        with FakeAnthropic(_TOOL_TURNS) as api:
            run = project.run(_TOOL_ARGS, api=api, env={"PATH": path_without_phx(phoenix_bin)})
        assert run.returncode == 0, run.describe()
        assert project.hook_errors() == [], run.describe()
        runs = shared_runs(project)
        assert all(status == 0 for _, _, status in runs), runs
        plugin = sorted(hook for hook, source, _ in runs if source == PLUGIN_ID)
        settings = sorted(hook for hook, source, _ in runs if source is None and not hook.startswith("SessionEnd"))
        assert plugin == settings and {hook.split(":")[0] for hook in plugin} >= _HOOKS_RUN - {"SessionEnd"}, runs
        assert len([hook for hook, _, _ in runs if hook.startswith("SessionEnd")]) == 2, runs
        logged = events(project)
        assert logged.count("session_start") == 1 and logged.count("session_end") == 1, logged
        assert logged.count("tool_failed") == 1, logged
        beats = [hook for hook in plugin if hook.startswith(("PostToolUse", "UserPromptSubmit", "Stop"))]
        assert project.state()["heartbeat_seq"] == len(beats), (project.state(), runs)
