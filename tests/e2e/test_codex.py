"""End to end with the real Codex CLI 0.171.0 (issue 31, the Codex part).

Each test runs ``codex exec`` (the npm package: its node wrapper and the native binary) in a
temporary git project with a temporary HOME, against ``FakeResponses``, a scripted local Responses
API that records every request body. Phoenix's hooks are installed by this checkout's ``phx
install codex``, as a user would; Codex runs them with ``--dangerously-bypass-hook-trust`` except
where trust itself is tested. A crash is a SIGKILL of Codex's process group while the model's
answer is held.
"""

from __future__ import annotations

import json
import os
import shlex
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import jsonschema
import psutil
import pytest
from codex_cli import BIN, CodexProject, FakeResponses, RecordedRequest, Turn, ensure_codex, native_codex

from phoenix_protocol.integrations._codex_trust import hook_trust

SCHEMA = Path(__file__).parents[1] / "data" / "codex-hooks.schema.json"
STATE_UPDATE = os.path.join(BIN, "state-update")
EVENTS = {"SessionStart", "PostToolUse", "PreCompact", "Stop", "SessionEnd"}


@pytest.fixture(scope="module")
def codex_argv() -> list[str]:
    return ensure_codex()


@pytest.fixture
def project(codex_argv: list[str]) -> Iterator[CodexProject]:
    with CodexProject.create(codex_argv) as created:
        yield created


def phoenix_contexts(request: RecordedRequest) -> list[str]:
    """The developer messages of a request that Phoenix's SessionStart hook added."""
    return [t for t in request.texts("developer") if "Phoenix Protocol" in t or "# Brief: " in t]


def wait_for(predicate: object, what: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():  # type: ignore[operator]
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


# -- install, trust, uninstall ---------------------------------------------------------------


@pytest.mark.e2e
def test_install_trust_uninstall(project: CodexProject) -> None:
    """``phx install codex``: a hooks.json valid against the schema, idempotent, the user's own
    hooks kept; the trust keys and hashes Phoenix computes are the ones Codex reports; ``--trust``
    makes Codex see them trusted; uninstall gives the files back as they were."""
    hooks_path = project.hooks_path("project")
    os.makedirs(os.path.dirname(hooks_path))
    mine = {"hooks": {"Stop": [{"hooks": [{"type": "command", "command": "echo mine", "timeout": 3}]}]}}
    with open(hooks_path, "w", encoding="utf-8") as fh:
        json.dump(mine, fh, indent=4)
    original = Path(hooks_path).read_bytes()
    config_before = Path(project.config_path).read_bytes()

    result = project.install("project")
    assert result["changed"] and result["path"] == hooks_path
    assert any("Trust all and continue" in note for note in result["notes"]), result["notes"]
    settings = json.loads(Path(hooks_path).read_text())
    jsonschema.Draft7Validator(json.loads(SCHEMA.read_text())).validate(settings)
    assert set(settings["hooks"]) >= EVENTS
    assert settings["hooks"]["Stop"][0] == mine["hooks"]["Stop"][0]
    assert not project.install("project")["changed"]  # idempotent

    ours = hook_trust(hooks_path, settings, lambda h: "phx hook" in str(h.get("command")))
    assert {h.event for h in ours} >= EVENTS
    seen = {h["key"]: h for h in project.hooks_list()}
    for hook in ours:
        [key] = [k for k in hook.keys if k in seen]
        assert seen[key]["currentHash"] == hook.hash, (key, seen[key])
        assert seen[key]["trustStatus"] == "untrusted"
    assert seen[f"{hooks_path}:stop:0:0"]["command"] == "echo mine"

    trusted = project.install("project", "--trust")
    assert trusted["trust"]["changed"] and not trusted["changed"]
    seen = {h["key"]: h for h in project.hooks_list()}
    statuses = {seen[k]["eventName"]: seen[k]["trustStatus"] for h in ours for k in h.keys if k in seen}
    assert set(statuses.values()) == {"trusted"}, statuses
    assert seen[f"{hooks_path}:stop:0:0"]["trustStatus"] == "untrusted"  # the user's hook is the user's call

    project.phx("uninstall", "codex", "--scope", "project")
    assert Path(hooks_path).read_bytes() == original
    assert Path(project.config_path).read_bytes().rstrip(b"\n") == config_before.rstrip(b"\n")


# -- a session, a crash, the recovery ----------------------------------------------------------


@pytest.mark.e2e
def test_crash_then_recovery_context_in_the_first_request(project: CodexProject) -> None:
    project.install("project")
    task = "Migrate the billing tables"
    release = threading.Event()
    turns = [
        Turn.bash(f"{shlex.quote(STATE_UPDATE)} --working {shlex.quote(task)}"),
        Turn.bash("echo migrating-invoices"),
        Turn.held(release),
    ]
    with FakeResponses(turns) as api:
        proc = project.start(["migrate the billing tables"], api=api)
        try:
            wait_for(lambda: len(api.main_requests()) >= 3, "the third model request")
            state = project.state()
            # The agent process is the native Codex binary (the hooks' parent), not the node wrapper.
            agent = psutil.Process(state["pid"])
            assert agent.exe() == native_codex() and agent.name() == "codex"
            assert abs(agent.create_time() - state["pid_start_time"]) < 1.0
            parent = agent.parent()
            assert parent is not None and "node" in parent.name()
            assert state["status"] == "working" and state["current_task"] == task
            assert state["tool_calls"] == 2 and state["last_tool"]["name"] == "Bash"
            os.killpg(proc.pid, signal.SIGKILL)  # mid-task: the model is still thinking
        finally:
            release.set()
            proc.communicate(timeout=30)
    assert project.state()["status"] == "working"  # nothing ended the session

    with FakeResponses([Turn.say("Carrying on.")]) as api:
        run = project.run(["carry on"], api=api)
    assert run.returncode == 0, run.describe()
    first = api.main_requests()[0]
    [context] = phoenix_contexts(first)
    assert "RECOVERY DETECTED" in context and task in context
    assert "ran `echo migrating-invoices`" in context
    assert len(context) <= 10_000
    after = project.state()
    assert after["session_id"] == run.session_id and after["status"] == "idle"
    starts = [e for e in project.ops() if e["event"] == "session_start"]
    assert [e["meta"].get("client") for e in starts] == ["codex", "codex"]
    assert starts[-1]["meta"]["recovered"] is True


@pytest.mark.e2e
def test_clean_session_with_shell_and_patch(project: CodexProject) -> None:
    """A tool call of each kind, a clean end: the state is idle, the session closed, the brief says
    what was run and which file was written (apply_patch: gpt-5.5 gets Codex's freeform tool)."""
    project.install("project")
    patch = "*** Begin Patch\n*** Add File: notes/plan.md\n+# Plan\n*** End Patch\n"
    failing = "*** Begin Patch\n*** Update File: missing.txt\n@@\n-a\n+b\n*** End Patch\n"
    turns = [Turn.bash("echo hello-codex"), Turn.apply_patch(patch), Turn.apply_patch(failing), Turn.say("Done.")]
    with FakeResponses(turns) as api:
        run = project.run(["write the plan"], api=api, model="gpt-5.5")
    assert run.returncode == 0, run.describe()
    assert (Path(project.dir) / "notes" / "plan.md").read_text() == "# Plan\n"
    state = project.state()
    assert state["status"] == "idle" and state["session_id"] == run.session_id
    events = [e["event"] for e in project.ops()]
    assert "session_start" in events and events.count("session_end") == 1
    brief = Path(project.agent_dir(), "brief.md").read_text()
    assert "echo hello-codex" in brief and "notes/plan.md" in brief
    assert state["last_tool"]["name"] == "apply_patch" and state["last_tool"]["ok"] is True


@pytest.mark.e2e
def test_compaction_takes_a_checkpoint(project: CodexProject) -> None:
    """Codex compacts offline once a turn reports more tokens than ``model_auto_compact_token_limit``:
    PreCompact refreshes the brief and takes a checkpoint; the SessionStart after it (source
    compact) gives the brief back."""
    project.install("project")
    turns = [Turn.bash("echo before-compaction", tokens=50_000), Turn.say("Done after compaction.")]
    with FakeResponses(turns, summary="We ran echo.") as api:
        run = project.run(["-c", "model_auto_compact_token_limit=1000", "work a lot"], api=api)
    assert run.returncode == 0, run.describe()
    assert any(r.kind == "compact" for r in api.requests)
    ops = project.ops()
    [pre] = [e for e in ops if e["event"] == "pre_compact"]
    assert pre["meta"]["trigger"] == "auto"
    assert any(e["event"] == "checkpoint_created" and e["seq"] > pre["seq"] for e in ops), [e["event"] for e in ops]
    sources = [e["meta"]["source"] for e in ops if e["event"] == "session_start"]
    assert sources == ["startup", "compact"]
    after = api.main_requests()[-1]
    assert any("# Brief: " in t for t in phoenix_contexts(after))


# -- trust: an untrusted hook does not run, and the doctor says so ------------------------------


@pytest.mark.e2e
def test_untrusted_hooks_never_run_and_the_doctor_says_so(project: CodexProject) -> None:
    project.install("project")
    with FakeResponses([Turn.bash("echo hi"), Turn.say("Done.")]) as api:
        run = project.run(["hello"], api=api, bypass=False)
    assert run.returncode == 0, run.describe()
    assert project.ops() == []  # no hook ran: nothing recorded
    report = json.loads(project.phx("doctor", "--json", check=False).stdout)
    messages = [f["message"] for f in report["findings"]]
    assert any("not trusted" in m and "phx install codex --scope project --trust" in m for m in messages), messages
    assert any("never ran" in m and str(run.session_id) in m for m in messages), messages

    project.install("project", "--trust")
    with FakeResponses([Turn.bash("echo hi"), Turn.say("Done.")]) as api:
        run = project.run(["hello again"], api=api, bypass=False)
    assert run.returncode == 0, run.describe()
    assert project.state()["session_id"] == run.session_id  # the trusted hooks ran
    report = json.loads(project.phx("doctor", "--json", check=False).stdout)
    assert not [f for f in report["findings"] if "Codex" in f["message"]], report["findings"]


@pytest.mark.e2e
def test_a_failing_hook_never_breaks_codex(project: CodexProject) -> None:
    """state.json is a directory: every hook fails (exit 0, one stderr line, a ``hook_failed``
    event) and Codex goes on; SessionStart still tells the model what it can."""
    project.install("project")
    with FakeResponses([Turn.say("First.")]) as api:
        assert project.run(["hello"], api=api).returncode == 0
    state = Path(project.agent_dir(), "state.json")
    state.unlink()
    state.mkdir()
    with FakeResponses([Turn.bash("echo still-working"), Turn.say("Done.")]) as api:
        run = project.run(["carry on"], api=api)
    assert run.returncode == 0, run.describe()
    assert "still-working" in "\n".join(api.main_requests()[-1].tool_outputs())
    [context] = phoenix_contexts(api.main_requests()[0])
    assert "RECOVERY DETECTED" in context and "not a regular file" in context
    failed = [e for e in project.ops() if e["event"] == "hook_failed"]
    assert {e["meta"]["hook"] for e in failed} >= {"post-tool-use", "stop"}


@pytest.mark.e2e
def test_an_untrusted_project_loads_no_project_hooks(codex_argv: list[str]) -> None:
    """Codex loads no ``.codex/`` of a project it does not trust (it says so on stderr); the doctor
    names it, and the user scope, which Codex loads everywhere, is the way round it."""
    with CodexProject.create(codex_argv, trust_project=False) as project:
        project.install("project", "--trust")
        with FakeResponses([Turn.say("Done.")]) as api:
            run = project.run(["hello"], api=api, bypass=False)
        assert run.returncode == 0, run.describe()
        assert "Untrusted project-local configuration is disabled" in run.stderr
        assert project.ops() == []
        report = json.loads(project.phx("doctor", "--json", check=False).stdout)
        [finding] = [f for f in report["findings"] if "does not trust the project" in f["message"]]
        assert "phx install codex --scope user" in finding["message"]

        project.phx("uninstall", "codex")
        project.install("user", "--trust")
        with FakeResponses([Turn.say("Done.")]) as api:
            run = project.run(["hello"], api=api, bypass=False)
        assert run.returncode == 0, run.describe()
        assert project.state()["session_id"] == run.session_id
