"""End to end: Phoenix's hooks inside the real Claude Code CLI (pinned, from npm).

Every test runs ``claude -p`` in a temporary git project whose ``.claude/settings.json`` was
written by ``install_claude_code("project", ...)`` (the portable command) and, unless a test says
otherwise, ``.claude/settings.local.json`` by ``install_claude_code("local", ...)`` (this
interpreter's fast command, the code under test), with a temporary HOME. Without a login
Claude Code still runs the SessionStart and SessionEnd hooks; with ``FakeAnthropic`` as its API
it runs tools, so PostToolUse fires with the real payload, and the SessionStart hook's context
can be found in the model request it sends.

Test-only probes go to ``.claude/settings.local.json`` so that Phoenix's shared file stays exactly
as Phoenix wrote it. The tests of the portable command install Phoenix from this repository into a
virtualenv of their own (``pip install .``, as the README says) and put its ``bin`` on ``PATH``, or
run in a clone of the project where no ``phx`` is on ``PATH`` at all.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import tempfile
from collections.abc import Iterator
from typing import Any

import jsonschema
import pytest
from claude_code import (
    ClaudeProject,
    ClaudeRun,
    FakeAnthropic,
    Turn,
    ensure_claude_code,
    install_phoenix,
    path_without_phx,
)

from phoenix_protocol import Agent
from phoenix_protocol.core._home import Home
from phoenix_protocol.core._process import liveness
from phoenix_protocol.integrations._clients import CLAUDE_CODE
from phoenix_protocol.integrations._hooks import _digest, _shell_command

SCHEMA = "/work/shared/schemas/claude-code-settings.schema.json"
TASK = "Migrate the billing tables"
PHOENIX_EVENTS = (
    "SessionStart",
    "PostToolUse",
    "PostToolUseFailure",
    "PreCompact",
    "UserPromptSubmit",
    "Stop",
    "SessionEnd",
    # Claude Code's agent teams (issue 32)
    "SubagentStart",
    "SubagentStop",
    "TaskCreated",
    "TaskCompleted",
    "TeammateIdle",
)


@pytest.fixture(scope="module")
def claude_argv() -> list[str]:
    """Install (once, under a lock) or find the pinned Claude Code; fails, never skips, without node/npm."""
    return ensure_claude_code()


@pytest.fixture(scope="module")
def phoenix_bin() -> Iterator[str]:
    """The ``bin`` folder of Phoenix installed from this repository into a virtualenv elsewhere
    (``pip install .``): a ``phx`` on ``PATH`` that is neither the test runner's nor its code's path."""
    where = tempfile.mkdtemp(prefix="phx-e2e-venv-")
    try:
        yield install_phoenix(os.path.join(where, "venv"))
    finally:
        shutil.rmtree(where, ignore_errors=True)


@pytest.fixture
def state_update(phoenix_bin: str) -> str:
    """The model's own writer: ``state-update`` of the Phoenix under test, by absolute path."""
    return os.path.join(phoenix_bin, "state-update")


@pytest.fixture
def project(claude_argv: list[str]) -> Iterator[ClaudeProject]:
    with ClaudeProject.create(claude_argv) as created:
        yield created


def events(project: ClaudeProject) -> list[str]:
    return [entry["event"] for entry in project.ops()]


def assert_no_hook_failed(project: ClaudeProject, run: ClaudeRun) -> None:
    failed = [entry for entry in project.ops() if entry["event"] == "hook_failed"]
    assert not failed, f"a Phoenix hook failed inside Claude Code: {failed}\n{run.describe()}"


def result_json(run: ClaudeRun) -> dict[str, Any]:
    """The ``--output-format json`` result line of a ``claude -p`` run."""
    data = json.loads(run.stdout.strip().splitlines()[-1])
    assert isinstance(data, dict)
    return data


def tool_results(api: FakeAnthropic) -> dict[str, dict[str, Any]]:
    """Every tool_result Claude Code sent back to the fake API, by tool_use_id."""
    found: dict[str, dict[str, Any]] = {}
    for request in api.main_requests():
        for message in request.body.get("messages", []):
            content = message.get("content")
            for block in content if isinstance(content, list) else []:
                if isinstance(block, dict) and block.get("type") == "tool_result":
                    found[block["tool_use_id"]] = block
    return found


def state_update_turn(state_update: str, task: str) -> Turn:
    return Turn.bash(f"{shlex.quote(state_update)} --working {shlex.quote(task)}")


# -- a. no login: SessionStart and SessionEnd ------------------------------------------------


@pytest.mark.e2e
def test_session_start_and_end_without_login(project: ClaudeProject) -> None:
    probe = project.add_probe(["SessionStart", "SessionEnd"])
    run = project.run(["-p", "hello"])

    assert "Not logged in" in run.stdout + run.stderr, run.describe()
    assert os.path.isdir(probe)
    [start_probe] = project.probe_records("SessionStart")
    [end_probe] = project.probe_records("SessionEnd")

    # The session id Phoenix recorded is Claude Code's own: the one in the hook payloads, in the
    # hooks' environment and in the name of the transcript it wrote under HOME.
    state = project.state()
    session_id = start_probe["payload"]["session_id"]
    assert state["session_id"] == session_id
    assert end_probe["payload"]["session_id"] == session_id
    assert start_probe["env"]["CLAUDE_CODE_SESSION_ID"] == session_id
    assert project.transcript_session_ids() == [session_id]
    assert start_probe["payload"]["source"] == "startup"
    assert end_probe["payload"]["reason"] == "other"

    # ops.jsonl: session_start then session_end; the state ends idle, closed by the hook.
    logged = events(project)
    assert logged.index("session_start") < logged.index("session_end"), logged
    start = next(e for e in project.ops() if e["event"] == "session_start")
    end = next(e for e in project.ops() if e["event"] == "session_end")
    assert start["meta"]["session_id"] == end["meta"]["session_id"] == session_id
    assert start["meta"]["source"] == "startup"
    assert state["status"] == "idle"
    assert state["updated_by"] == "hook"
    assert state["status_event"] == "session_end"
    assert os.path.isfile(os.path.join(project.agent_dir(), "brief.md"))
    assert_no_hook_failed(project, run)

    # The agent process Phoenix recorded. The hook's ancestry, as the probe hook (a sibling of
    # Phoenix's hook: both are started by Claude Code through `/bin/sh -c`) saw it while Claude
    # Code was running: probe python -> sh -> claude (the native binary) -> node cli-wrapper.cjs
    # (the process this test started, which only waits for the binary). Phoenix must have
    # recorded the `claude` process: not a hook, not the shell, not the npm wrapper.
    chain = start_probe["chain"]
    pids = [p["pid"] for p in chain]
    assert state["pid"] in pids, (state["pid"], chain)
    position = pids.index(state["pid"])
    agent = chain[position]
    assert position >= 2, f"recorded pid is the hook or its shell: {chain[: position + 1]}"
    assert all(p["name"] in ("sh", "bash", "dash") for p in chain[1:position]), chain
    assert agent["name"] == "claude", agent
    packages = os.path.dirname(os.path.dirname(os.path.realpath(project.claude[-1])))  # node_modules/@anthropic-ai
    assert agent["exe"].startswith(packages + os.sep), (agent, packages)
    assert agent["ppid"] == run.pid, "the agent's parent is the `node cli-wrapper.cjs` this test started"
    wrapper = chain[position + 1]
    assert wrapper["pid"] == run.pid and wrapper["name"] == "node", wrapper
    # Claude Code also tells hooks its pid (CLAUDE_PID): it agrees.
    assert start_probe["env"].get("CLAUDE_PID") == str(state["pid"])
    assert state["pid_start_time"] == pytest.approx(agent["create_time"], abs=1.0)
    # ...and after claude exited, both identities are gone (a pid may be reused, pid + start time not).
    assert liveness(state["pid"], state["pid_start_time"], state["host"]) is False
    assert liveness(wrapper["pid"], wrapper["create_time"], state["host"]) is False


# -- b. the fake API: PostToolUse with a real Bash call ----------------------------------------


@pytest.mark.e2e
def test_post_tool_use_records_a_real_bash_call(project: ClaudeProject) -> None:
    with FakeAnthropic([Turn.bash("echo phoenix-e2e"), Turn.say("All done.")]) as api:
        run = project.run(
            ["-p", "Say phoenix-e2e with echo", "--allowedTools", "Bash(echo *)", "--output-format", "json"], api=api
        )
    assert run.returncode == 0, run.describe()
    result = result_json(run)
    assert result["result"] == "All done."

    # Claude Code ran the tool: the follow-up request carries its output as a tool_result.
    main = api.main_requests()
    assert len(main) == 2, [r.path for r in api.requests]
    assert not main[0].is_tool_follow_up and main[1].is_tool_follow_up
    tool_use = next(b for b in main[1].body["messages"][-2]["content"] if b.get("type") == "tool_use")
    tool_result = next(b for b in main[1].body["messages"][-1]["content"] if b.get("type") == "tool_result")
    assert tool_use["name"] == "Bash"
    assert "phoenix-e2e" in json.dumps(tool_result["content"])
    assert tool_result.get("is_error") is not True

    state = project.state()
    assert state["session_id"] == result["session_id"]
    assert state["heartbeat_seq"] >= 1  # PostToolUse (and Stop) beat
    last_tool = state["last_tool"]
    assert last_tool["name"] == "Bash"
    assert last_tool["ok"] is True
    assert "error" not in last_tool
    assert isinstance(last_tool["at"], str) and last_tool["at"].endswith("Z")
    # The digest is of the tool_input Claude Code passed to the hook (the input it executed), its
    # command normalised (docs/drift.md).
    assert last_tool["input_digest"] == _digest(_shell_command("Bash", tool_use["input"], CLAUDE_CODE)[0])
    assert state["status"] == "idle"
    logged = events(project)
    assert logged[0] == "session_start" and "session_end" in logged, logged
    assert logged[-1] == "session_checkpointed", logged  # SessionEnd also takes the session checkpoint
    assert "heartbeat" in logged
    assert_no_hook_failed(project, run)


@pytest.mark.e2e
def test_post_tool_use_failure_and_session_env(project: ClaudeProject) -> None:
    """A Bash call that exits non-zero fires PostToolUseFailure; the next call sees the variables
    Phoenix's SessionStart hook exported through CLAUDE_ENV_FILE."""
    with FakeAnthropic(
        [
            Turn.bash("ls missing-phoenix-e2e"),
            Turn.bash("printenv PHOENIX_AGENT PHOENIX_HOME PHOENIX_SESSION_ID"),
            Turn.say("Checked."),
        ]
    ) as api:
        run = project.run(
            ["-p", "check", "--allowedTools", "Bash(ls *)", "Bash(printenv *)", "--output-format", "json"], api=api
        )
    assert run.returncode == 0, run.describe()
    session_id = result_json(run)["session_id"]
    main = api.main_requests()
    assert len(main) == 3, [r.path for r in api.requests]
    failed_result = main[1].body["messages"][-1]["content"][0]
    env_result = main[2].body["messages"][-1]["content"][0]
    assert failed_result["is_error"] is True, failed_result
    # Tool results come back as a string in 2.1.330 (with a system reminder appended).
    printed = env_result["content"] if isinstance(env_result["content"], str) else json.dumps(env_result["content"])
    assert printed.splitlines()[:3] == ["default", project.phoenix_home, session_id], printed

    failures = [e for e in project.ops() if e["event"] == "tool_failed"]
    assert len(failures) == 1, project.ops()
    assert failures[0]["meta"]["tool"] == "Bash"
    assert "missing-phoenix-e2e" in failures[0]["meta"]["error"]
    state = project.state()
    assert state["heartbeat_seq"] >= 2
    assert state["last_tool"]["name"] == "Bash"
    assert state["last_tool"]["ok"] is True  # the printenv call came last
    assert_no_hook_failed(project, run)


# -- c. recovery with the real client --------------------------------------------------------


@pytest.mark.e2e
def test_recovery_context_reaches_the_model(project: ClaudeProject) -> None:
    agent = Agent.open("default", home=Home(project.phoenix_home))
    agent.state.set_status("working", TASK)  # the previous session died while working on this

    with FakeAnthropic([Turn.say("Resuming the migration.")]) as api:
        run = project.run(["-p", "carry on", "--output-format", "json"], api=api)
    assert run.returncode == 0, run.describe()

    messages = api.messages_requests()
    assert messages, f"no /v1/messages request reached the fake API\n{run.describe()}"
    first = messages[0]
    assert "RECOVERY DETECTED" in first.text
    assert TASK in first.text
    # Where Claude Code puts it depends on the model: 2.1.330 with its default model sends a
    # message with role "system" inside `messages`; with claude-sonnet-4-5 it is a
    # <system-reminder> text block of the first user message. Either way it is a message text.
    texts = [
        block.get("text", "") if isinstance(block, dict) else str(block)
        for message in first.body["messages"]
        for block in (message["content"] if isinstance(message.get("content"), list) else [message.get("content")])
    ]
    context = next((t for t in texts if "RECOVERY DETECTED" in t), "")
    assert "SessionStart hook additional context" in context, json.dumps(first.body["messages"])[:3000]
    assert f"Working on: {TASK}" in context  # the state the crashed session left

    start = next(e for e in project.ops() if e["event"] == "session_start")
    assert start["status"] == "warn"
    assert start["meta"]["recovered"] is True
    assert start["meta"]["previous_status"] == "working"
    assert start["meta"]["session_id"] == result_json(run)["session_id"]
    state = project.state()
    assert state["status"] == "idle"  # this session ended cleanly
    assert state["current_task"] == TASK
    assert_no_hook_failed(project, run)


# -- d. the settings file: accepted by the real client, valid against the schema ---------------


def _validate(settings: dict[str, Any]) -> None:
    with open(SCHEMA, encoding="utf-8") as fh:
        schema = json.load(fh)
    validator_class = jsonschema.validators.validator_for(schema)
    validator_class.check_schema(schema)
    errors = sorted(validator_class(schema).iter_errors(settings), key=lambda e: list(e.absolute_path))
    # The schema (SchemaStore, 2026-08-07) and Claude Code 2.1.330 agree on these files today. Should a
    # future schema reject what the real client accepts, the client wins: relax this check then.
    assert not errors, [f"{list(e.absolute_path)}: {e.message}" for e in errors]


@pytest.mark.e2e
def test_settings_json_accepted_by_claude_code_and_schema(claude_argv: list[str], phoenix_bin: str) -> None:
    with ClaudeProject.create(claude_argv, scopes=("project",)) as project:
        with open(project.settings_path, "rb") as fh:
            written = fh.read()
        settings = json.loads(written)
        assert set(settings["hooks"]) == set(PHOENIX_EVENTS)
        assert project.install.changed and not os.path.exists(
            os.path.join(project.dir, ".claude", "settings.local.json")
        )
        _validate(settings)

        # The real client accepted the file: with only Phoenix's settings.json (no probes, no local
        # settings) and a `phx` on PATH, its hooks ran at session start and end.
        run = project.run(["-p", "hello"], env={"PATH": path_without_phx(phoenix_bin)})
        assert "Not logged in" in run.stdout + run.stderr, run.describe()
        logged = events(project)
        assert logged.index("session_start") < logged.index("session_end"), logged
        assert project.state()["status"] == "idle"
        assert_no_hook_failed(project, run)
        assert project.hook_errors() == []
        # ...and left it as Phoenix wrote it.
        with open(project.settings_path, "rb") as fh:
            assert fh.read() == written
    # This machine's settings, beside the shared ones, validate too.
    with ClaudeProject.create(claude_argv) as project, open(project.local_settings_path, "rb") as fh:
        _validate(json.loads(fh.read()))


# -- e. the portable install: committed settings on other machines and checkouts ----------------

_TOOL_TURNS = [Turn.bash("ls missing-phoenix-e2e"), Turn.bash("echo phoenix-e2e"), Turn.say("Done.")]
_TOOL_ARGS = ["-p", "go", "--allowedTools", "Bash(ls *)", "Bash(echo *)", "--output-format", "json", "--debug"]
_HOOKS_RUN = {"SessionStart", "PostToolUse", "PostToolUseFailure", "UserPromptSubmit", "Stop", "SessionEnd"}


def _shared_checkout(origin: ClaudeProject) -> ClaudeProject:
    """The project as a teammate gets it: the committed settings.json, cloned."""
    origin.commit_settings()
    checkout = origin.clone("checkout")
    with open(checkout.settings_path, "rb") as theirs, open(origin.settings_path, "rb") as ours:
        assert theirs.read() == ours.read()
    assert not os.path.exists(os.path.join(checkout.dir, ".claude", "settings.local.json"))
    return checkout


@pytest.mark.e2e
def test_committed_settings_do_nothing_where_phoenix_is_not_installed(claude_argv: list[str]) -> None:
    """A teammate (or CI) without Phoenix clones the project: every hook of the committed
    settings runs, exits 0 and prints nothing; Claude Code records no hook error. The same
    checkout with the machine-specific command an earlier Phoenix committed gets the errors this
    prevents."""
    with ClaudeProject.create(claude_argv, scopes=("project",)) as origin:
        checkout = _shared_checkout(origin)
        env = {"PATH": path_without_phx()}
        with FakeAnthropic(_TOOL_TURNS) as api:
            run = checkout.run(_TOOL_ARGS, api=api, env=env)
        assert run.returncode == 0, run.describe()
        assert result_json(run)["result"] == "Done."
        assert checkout.hook_errors() == [], run.describe()
        runs = [(hook, status) for hook, command, status in checkout.hook_runs() if "phx hook" in command]
        assert {hook.split(":")[0] for hook, _ in runs} >= _HOOKS_RUN, runs
        assert all(status == 0 for _, status in runs), runs
        assert not os.path.exists(checkout.phoenix_home)

        # Before: this machine's interpreter in the shared file, from another machine's view.
        install_claude_code_old(checkout)
        with FakeAnthropic(_TOOL_TURNS) as api:
            run = checkout.run(_TOOL_ARGS, api=api, env=env)
        errors = checkout.hook_errors()
        assert errors and any("not found" in str(e.get("stderr")) for e in errors), checkout.hook_runs()
        assert any(status == 127 for _, _, status in checkout.hook_runs())


def install_claude_code_old(project: ClaudeProject) -> None:
    """What Phoenix 0.2.0.dev wrote into the shared settings: a fast command naming a virtualenv,
    here one that this checkout's machine does not have."""
    from phoenix_protocol.integrations._install import install_claude_code

    install_claude_code(
        "project", project_dir=project.dir, portable=False, python="/home/someone/phoenix/.venv/bin/python"
    )


@pytest.mark.e2e
def test_committed_settings_run_phx_from_path(claude_argv: list[str], phoenix_bin: str) -> None:
    """A teammate who installed Phoenix elsewhere (its own virtualenv, on PATH) clones the project:
    the committed settings run that Phoenix, and every hook does its work."""
    with ClaudeProject.create(claude_argv, scopes=("project",)) as origin:
        checkout = _shared_checkout(origin)
        with FakeAnthropic(_TOOL_TURNS) as api:
            run = checkout.run(_TOOL_ARGS, api=api, env={"PATH": path_without_phx(phoenix_bin)})
        assert run.returncode == 0, run.describe()
        assert checkout.hook_errors() == [], run.describe()
        runs = [(hook, status) for hook, command, status in checkout.hook_runs() if "phx hook" in command]
        assert {hook.split(":")[0] for hook, _ in runs} >= _HOOKS_RUN, runs
        assert all(status == 0 for _, status in runs), runs
        logged = events(checkout)
        assert logged[0] == "session_start" and "session_end" in logged and "tool_failed" in logged, logged
        assert_no_hook_failed(checkout, run)
        state = checkout.state()
        assert state["session_id"] == result_json(run)["session_id"]
        assert state["status"] == "idle" and state["last_tool"]["name"] == "Bash"


@pytest.mark.e2e
def test_shared_and_local_commands_handle_each_event_once(project: ClaudeProject, phoenix_bin: str) -> None:
    """Claude Code runs the hooks of settings.json and settings.local.json, both: with Phoenix in
    both (the shared command, this machine's fast one) and `phx` on PATH, both run for every event,
    and the shared one stands aside, so that each event is handled once."""
    from phoenix_protocol.integrations._install import MARKER

    with FakeAnthropic(_TOOL_TURNS) as api:
        run = project.run(_TOOL_ARGS, api=api, env={"PATH": path_without_phx(phoenix_bin)})
    assert run.returncode == 0, run.describe()
    assert project.hook_errors() == [], run.describe()
    runs = project.hook_runs()
    shared = sorted(hook for hook, command, status in runs if "phx hook" in command and status == 0)
    fast = sorted(hook for hook, command, status in runs if MARKER in command and status == 0)
    assert shared == fast and {hook.split(":")[0] for hook in fast} >= _HOOKS_RUN, runs
    logged = events(project)
    assert logged.count("session_start") == 1 and logged.count("session_end") == 1, logged
    assert logged.count("tool_failed") == 1, logged
    beats = [hook for hook in fast if hook.startswith(("PostToolUse", "UserPromptSubmit", "Stop"))]
    assert project.state()["heartbeat_seq"] == len(beats), (project.state(), runs)
    assert_no_hook_failed(project, run)


# -- more of the real client: the model's own writes, resume, compaction ------------------------


@pytest.mark.e2e
def test_model_state_update_inside_a_session(project: ClaudeProject, state_update: str) -> None:
    """The model records its task with `state-update` through Bash; the write carries the session id
    that Phoenix's SessionStart hook exported through CLAUDE_ENV_FILE."""
    with FakeAnthropic([state_update_turn(state_update, "Write the e2e tests"), Turn.say("Noted.")]) as api:
        run = project.run(["-p", "go", "--allowedTools", f"Bash({state_update} *)", "--output-format", "json"], api=api)
    assert run.returncode == 0, run.describe()
    session_id = result_json(run)["session_id"]
    [result] = tool_results(api).values()
    assert result.get("is_error") is not True, result
    started = [e for e in project.ops() if e["event"] == "task_started"]
    assert len(started) == 1, project.ops()
    assert started[0]["meta"]["source"] == "model"
    assert started[0]["meta"]["task"] == "Write the e2e tests"
    assert started[0]["meta"]["session_id"] == session_id
    state = project.state()
    assert state["status"] == "idle"  # then the session ended
    assert state["current_task"] == "Write the e2e tests"
    assert_no_hook_failed(project, run)


@pytest.mark.e2e
def test_manual_compact_of_a_resumed_session(project: ClaudeProject) -> None:
    """`claude -p /compact --resume <id>`: SessionStart (resume), PreCompact (manual), SessionStart
    (compact), SessionEnd, all with the same session id, all handled without a hook failure."""
    with FakeAnthropic([Turn.bash("echo one"), Turn.say("First turn done.")]) as api:
        first = project.run(["-p", "echo one", "--allowedTools", "Bash(echo *)", "--output-format", "json"], api=api)
    assert first.returncode == 0, first.describe()
    session_id = result_json(first)["session_id"]
    before = len(project.ops())

    with FakeAnthropic(fallback_text="<summary>We echoed one.</summary>") as api:
        second = project.run(["-p", "/compact", "--resume", session_id, "--output-format", "json"], api=api)
    assert second.returncode == 0, second.describe()
    assert result_json(second)["session_id"] == session_id  # --resume keeps the id
    assert api.messages_requests(), "compaction asks the model for a summary"

    later = project.ops()[before:]
    hooks = ("session_start", "pre_compact", "session_end")
    summary = [(e["event"], e["meta"].get("source") or e["meta"].get("trigger")) for e in later if e["event"] in hooks]
    assert summary == [
        ("session_start", "resume"),
        ("pre_compact", "manual"),
        ("session_start", "compact"),
        ("session_end", None),
    ], later
    assert {e["meta"]["session_id"] for e in later if e["event"] in hooks} == {session_id}
    # Checkpoints (issue 3): resume restores, PreCompact takes a routine one, SessionEnd a session one.
    events = [e["event"] for e in later]
    assert "checkpoint_restored" in events and events[-1] == "session_checkpointed"
    created = [e["meta"]["type"] for e in later if e["event"] == "checkpoint_created"]
    assert created == ["routine", "session"]
    assert os.path.isfile(os.path.join(project.agent_dir(), "brief.md"))
    assert_no_hook_failed(project, second)


@pytest.mark.e2e
def test_model_state_update_after_resume(project: ClaudeProject, state_update: str) -> None:
    allow = ["--allowedTools", f"Bash({state_update} *)", "--output-format", "json"]
    with FakeAnthropic([state_update_turn(state_update, "Write the e2e tests"), Turn.say("Noted.")]) as api:
        first = project.run(["-p", "go", *allow], api=api)
    assert first.returncode == 0, first.describe()
    session_id = result_json(first)["session_id"]

    with FakeAnthropic([state_update_turn(state_update, "Resume the e2e tests"), Turn.say("Noted.")]) as api:
        second = project.run(["-p", "go on", "--resume", session_id, *allow], api=api)
    assert second.returncode == 0, second.describe()
    assert result_json(second)["session_id"] == session_id
    assert_no_hook_failed(project, second)
    assert not [e for e in project.ops() if e["event"] == "tool_failed"], project.ops()
    tasks = [e["meta"]["task"] for e in project.ops() if e["event"] == "task_started"]
    assert tasks == ["Write the e2e tests", "Resume the e2e tests"]
