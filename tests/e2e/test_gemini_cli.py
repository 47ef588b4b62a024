"""End to end: Phoenix's hooks inside the real Gemini CLI (0.61.0, pinned, from npm), offline.

Every test runs ``gemini -p`` in a temporary git project with a temporary HOME against
``FakeGemini`` (a scripted model that records each request body). Phoenix's hooks are installed as
a user would: ``phx install gemini-cli`` (the portable command in the project's
``.gemini/settings.json``, run by the ``phx`` of this test environment from ``PATH``; or this
interpreter's fast command in the user's settings), or the extension at the repository's root
linked with ``gemini extensions link``. ``PYTHONPATH`` makes every ``phx`` and the model's own
``state-update`` run the code under test. A crash is a SIGKILL of Gemini's process group while
the model is still answering.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import threading
from collections.abc import Iterator
from typing import Any

import jsonschema
import psutil
import pytest
from claude_code import REPO_ROOT, path_without_phx
from gemini_cli import FakeGemini, GeminiProject, Turn, ensure_gemini_cli, kill_group, wait_for_requests

import phoenix_protocol
from phoenix_protocol.core._process import liveness
from phoenix_protocol.integrations._install import install_hooks

BIN = os.path.dirname(sys.executable)
STATE_UPDATE = os.path.join(BIN, "state-update")
SCHEMA = os.path.join(os.path.dirname(os.path.dirname(__file__)), "data", "gemini-cli-settings.schema.json")
TASK = "Migrate the billing tables"
# Every phx (from PATH, the fast command, the model's state-update) runs the code under test.
CODE = {
    "PYTHONPATH": os.path.dirname(os.path.dirname(os.path.abspath(phoenix_protocol.__file__))),
    "PATH": path_without_phx(BIN),
}
HOOK_FAILED = "Hook(s) ["  # what Gemini CLI prints when a hook exits non-zero or times out


@pytest.fixture(scope="module")
def gemini_argv() -> list[str]:
    """Install (once, under a lock) or find the pinned Gemini CLI; fails, never skips, without node/npm."""
    return ensure_gemini_cli()


@pytest.fixture
def project(gemini_argv: list[str]) -> Iterator[GeminiProject]:
    with GeminiProject.create(gemini_argv) as created:
        yield created


def _validate(path: str) -> dict[str, Any]:
    with open(path, encoding="utf-8") as fh:
        document = json.load(fh)
    with open(SCHEMA, encoding="utf-8") as fh:
        schema = json.load(fh)
    jsonschema.validators.validator_for(schema)(schema).validate(document)
    assert isinstance(document, dict)
    return document


def _events(project: GeminiProject, name: str) -> list[dict[str, Any]]:
    return [e for e in project.ops() if e.get("event") == name]


def _count_hook(project: GeminiProject, event: str) -> str:
    """A test-only hook in the user's settings that appends a line to a file for each ``event``
    Gemini fires; returns the file."""
    out = os.path.join(project.root, f"{event}.count")
    project.add_user_hook(event, f"cat >/dev/null; echo x >> {shlex.quote(out)}", name=f"count-{event}")
    return out


def _lines(path: str) -> int:
    try:
        with open(path, encoding="utf-8") as fh:
            return sum(1 for _ in fh)
    except FileNotFoundError:
        return 0


# -- phx install gemini-cli (project scope): a session with tool calls ------------------------------


@pytest.mark.e2e
def test_project_install_records_a_session_with_its_tool_calls(project: GeminiProject) -> None:
    theirs = {"general": {"vimMode": True}, "hooksConfig": {"notifications": False}}
    os.makedirs(os.path.dirname(project.settings_path))
    with open(project.settings_path, "w", encoding="utf-8") as fh:
        json.dump(theirs, fh, indent=2)
    result = install_hooks("gemini-cli", "project", project_dir=project.dir)
    assert result.kind == "portable" and result.changed
    settings = _validate(project.settings_path)
    assert {k: v for k, v in settings.items() if k != "hooks"} == theirs  # the user's settings as they were
    assert not install_hooks("gemini-cli", "project", project_dir=project.dir).changed  # idempotent

    turns = [
        Turn.shell("echo migrating-invoices"),
        Turn.call("write_file", file_path=os.path.join(project.dir, "notes.txt"), content="step 1\n"),
        Turn.shell("ls /nonexistent-dir"),
        Turn.say("Done for now."),
    ]
    with FakeGemini(turns) as api:
        run = project.run("migrate", api=api, env=CODE)
    assert run.returncode == 0, run.describe()
    assert HOOK_FAILED not in run.stderr, run.stderr
    state = project.state()
    assert state["session_id"] == run.session_id
    assert state["status"] == "idle" and state["status_event"] == "session_end"  # SessionEnd closed it
    assert (state["tool_calls"], state["heartbeat_seq"]) == (3, 5)  # each AfterTool once, BeforeAgent, AfterAgent
    assert state["last_tool"]["name"] == "run_shell_command" and state["last_tool"]["ok"] is False
    work = json.dumps(state["recent_work"])
    assert "echo migrating-invoices" in work and "notes.txt" in work and project.dir not in work
    [failed] = _events(project, "tool_failed")
    assert failed["meta"]["error"] == "exit code 2"
    assert _events(project, "session_end")
    # The untrusted-hooks warning names Phoenix's hooks (their names), once; then they are trusted.
    assert "phoenix-session-start" in run.stderr
    with open(os.path.join(project.home, ".gemini", "trusted_hooks.json"), encoding="utf-8") as fh:
        trusted = json.load(fh)[project.dir]
    assert len([key for key in trusted if key.startswith("phoenix-")]) == len(settings["hooks"])


# -- a crash mid-task, then the recovery context in the next session's first request ----------------


@pytest.mark.e2e
def test_crash_mid_task_then_recovery_reaches_the_model(project: GeminiProject) -> None:
    result = install_hooks("gemini-cli", "user", env={"HOME": project.home})
    assert result.kind == "machine" and result.path == project.user_settings_path
    settings = _validate(project.user_settings_path)
    assert settings["security"] == {"auth": {"selectedType": "gemini-api-key"}}  # kept

    release = threading.Event()
    turns = [
        Turn.shell(f"{shlex.quote(STATE_UPDATE)} --working {shlex.quote(TASK)}"),
        Turn.shell("echo migrating-invoices"),
        Turn.held(release),  # the model is still thinking when the session dies
    ]
    with FakeGemini(turns) as api:
        proc = project.start("migrate", api=api, env=CODE)
        try:
            wait_for_requests(proc, api, 3)
            state = project.state()
            assert (state["status"], state["current_task"], state["tool_calls"]) == ("working", TASK, 2)
            # The agent process Phoenix recorded: the Gemini process that runs the hooks and lives
            # as long as the session, the child the `gemini` launcher (the process started here)
            # re-launched with a larger heap, not a shell, not the launcher.
            agent = psutil.Process(state["pid"])
            assert agent.ppid() == proc.pid
            assert agent.name() == "node" and any(a.endswith("gemini.js") for a in agent.cmdline())
            assert liveness(state["pid"], state["pid_start_time"], state["host"]) is True
        finally:
            kill_group(proc)
            release.set()
    assert liveness(state["pid"], state["pid_start_time"], state["host"]) is False
    crashed = project.state()
    assert crashed["status"] == "working" and crashed["session_id"] is not None

    with FakeGemini([Turn.say("Carrying on.")]) as api:
        run = project.run("carry on", api=api, env=CODE)
    assert run.returncode == 0, run.describe()
    first = api.main_requests()[0].texts()
    assert "RECOVERY DETECTED" in first and TASK in first
    assert f"agent process (pid {state['pid']}) is gone" in first
    assert "echo migrating-invoices" in first
    assert first.index("RECOVERY DETECTED") < first.index("carry on")  # before the user's prompt
    end = project.state()
    assert end["status"] == "idle" and end["session_id"] == run.session_id


# -- PreCompress: before every model call, throttled -----------------------------------------------


@pytest.mark.e2e
def test_pre_compress_before_every_model_call_takes_few_checkpoints(project: GeminiProject) -> None:
    install_hooks("gemini-cli", "user", env={"HOME": project.home})
    fired = _count_hook(project, "PreCompress")
    # A manual compression always takes one. (`gemini -p /compress` compresses, then sends the
    # prompt to the model as text; only while no SessionStart context is put before the prompt:
    # here, a first session.)
    with FakeGemini([Turn.say("Compressed.")]) as api:
        run = project.run("/compress", api=api, env=CODE)
    assert run.returncode == 0, run.describe()
    assert [e["meta"]["trigger"] for e in _events(project, "pre_compact")] == ["manual"]
    before = _lines(fired)

    script = [Turn.shell(f"echo step-{i}") for i in range(6)] + [Turn.say("Done.")]
    with FakeGemini(script) as api:
        run = project.run("work", api=api, env=CODE)
    assert run.returncode == 0, run.describe()
    calls = len(api.main_requests())
    assert calls == 7 and _lines(fired) - before == calls  # Gemini fired PreCompress before each model call
    assert len(_events(project, "pre_compact")) == 1  # throttled: within 10 minutes of the session's start

    # Unthrottled (pre_compact_interval_minutes = 0), a session takes one per model call.
    with FakeGemini([Turn.shell(f"echo again-{i}") for i in range(3)] + [Turn.say("Done.")]) as api:
        run = project.run("work", api=api, env={**CODE, "PHOENIX_PRE_COMPACT_INTERVAL_MINUTES": "0"})
    assert run.returncode == 0, run.describe()
    triggers = [e["meta"]["trigger"] for e in _events(project, "pre_compact")]
    assert triggers == ["manual"] + ["auto"] * len(api.main_requests()) and len(triggers) == 5


# -- the extension ----------------------------------------------------------------------------------


@pytest.mark.e2e
def test_the_linked_extension_works_the_same_and_never_doubles_an_event(project: GeminiProject) -> None:
    validated = project.gemini_command("extensions", "validate", REPO_ROOT)
    assert validated.returncode == 0 and "Warning" not in validated.stdout + validated.stderr, validated
    linked = project.gemini_command("extensions", "link", REPO_ROOT, "--consent")
    assert linked.returncode == 0, linked.stderr
    assert "phoenix-protocol" in linked.stdout + linked.stderr

    # A session that died while working (as the crash test leaves it): the next one recovers.
    with FakeGemini([Turn.shell(f"{shlex.quote(STATE_UPDATE)} --working {shlex.quote(TASK)}")]) as api:
        proc = project.start("migrate", api=api, env=CODE)
        wait_for_requests(proc, api, 2)
        kill_group(proc)
    assert project.state()["status"] == "working"
    with FakeGemini([Turn.shell("echo one"), Turn.shell("echo two"), Turn.say("Carrying on.")]) as api:
        run = project.run("carry on", api=api, env=CODE)
    assert run.returncode == 0, run.describe()
    assert HOOK_FAILED not in run.stderr, run.stderr
    first = api.main_requests()[0].texts()
    assert first.count("RECOVERY DETECTED") == 1 and TASK in first
    _ran_once(project, run.session_id, tools=2)

    # With phx install gemini-cli in the project too: Gemini runs each event's hook once (same name
    # and command); with the user's fast command, the extension's and the project's stand aside.
    for scope in ("project", "user"):
        install_hooks("gemini-cli", scope, project_dir=project.dir, env={"HOME": project.home})
        with FakeGemini([Turn.shell("echo three"), Turn.say("Done.")]) as api:
            run = project.run("more", api=api, env=CODE)
        assert run.returncode == 0, run.describe()
        assert HOOK_FAILED not in run.stderr, run.stderr
        _ran_once(project, run.session_id, tools=1)


@pytest.mark.e2e
def test_the_extension_installs_from_a_clone_of_the_repository(project: GeminiProject) -> None:
    """`gemini extensions install <git URL>` clones the repository and reads the extension from the
    clone's root, as `install` of a local folder does from that folder (0.61.0: both through
    `loadExtensionConfig(<root>)`): installed from a clone of this repository (what is committed),
    the copy's hooks record a session."""
    clone = os.path.join(project.root, "clone")
    _git_clone(REPO_ROOT, clone)
    installed = project.gemini_command("extensions", "install", clone, "--consent")
    assert installed.returncode == 0, installed.stderr
    copy = os.path.join(project.home, ".gemini", "extensions", "phoenix-protocol")
    with open(os.path.join(copy, "gemini-extension.json"), encoding="utf-8") as fh:
        assert json.load(fh)["name"] == "phoenix-protocol"
    with FakeGemini([Turn.shell("echo from-the-extension"), Turn.say("Done.")]) as api:
        run = project.run("work", api=api, env=CODE)
    assert run.returncode == 0, run.describe()
    _ran_once(project, run.session_id, tools=1)
    assert "echo from-the-extension" in json.dumps(project.state()["recent_work"])


def _git_clone(source: str, target: str) -> None:
    env = {**os.environ, "GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_NOSYSTEM": "1"}
    subprocess.run(["git", "clone", "-q", source, target], check=True, capture_output=True, env=env, timeout=120)


def _ran_once(project: GeminiProject, session_id: str, *, tools: int) -> None:
    """Each of the session's hooks ran once: one session start, one end, each tool call counted once."""
    mine = [e for e in project.ops() if (e.get("meta") or {}).get("session_id") == session_id]
    assert [e["event"] for e in mine].count("session_start") == 1
    assert [e["event"] for e in mine].count("session_end") == 1
    state = project.state()
    assert (state["status"], state["session_id"], state["tool_calls"]) == ("idle", session_id, tools)


# -- a hook never breaks the agent --------------------------------------------------------------------


@pytest.mark.e2e
def test_a_damaged_state_is_told_to_the_user_and_the_session_goes_on(project: GeminiProject) -> None:
    install_hooks("gemini-cli", "user", env={"HOME": project.home})
    with FakeGemini([Turn.say("Hello.")]) as api:
        assert project.run("hello", api=api, env=CODE).returncode == 0
    damaged = b'{"schema_version": 1, "status": "work'
    with open(os.path.join(project.agent_dir(), "state.json"), "wb") as fh:
        fh.write(damaged)
    with FakeGemini([Turn.shell("echo still-working"), Turn.say("Done.")]) as api:
        run = project.run("carry on", api=api, env=CODE)
    assert run.returncode == 0, run.describe()
    assert HOOK_FAILED not in run.stderr  # every hook exited 0
    # Gemini shows a hook's systemMessage to the user (-p: on stderr; the terminal UI: an info line
    # in the conversation, under the hook's name), once per session; never to the model.
    # Gemini shows a hook's stderr the same way when its stdout is empty: the hooks' own
    # "phoenix: … hook: …" lines stay out of sight (they print {}), the user hears it once.
    assert "phoenix: " not in run.stderr, run.stderr
    notices = {line.removeprefix("Hook system message: ") for line in run.stderr.splitlines() if "Phoenix" in line}
    assert len(notices) == 1, run.stderr
    [notice] = notices
    assert notice.startswith("Phoenix Protocol: .phoenix/agents/default/state.json is not valid JSON")
    assert notice.endswith(". Run `phx doctor` to repair it.")
    requests = "\n".join(r.texts() for r in api.main_requests())
    assert "Run `phx doctor` to repair it." not in requests
    first = api.main_requests()[0].texts()
    assert "RECOVERY DETECTED" in first and "`phx doctor` rebuilds the state" in first  # the model is told too
    with open(os.path.join(project.agent_dir(), "state.json"), "rb") as fh:
        assert fh.read() == damaged  # never rewritten
    assert [e for e in project.ops() if e.get("event") == "hook_failed"]
