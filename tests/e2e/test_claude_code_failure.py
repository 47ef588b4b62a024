"""End to end: when Phoenix itself breaks inside the real Claude Code CLI (a damaged state.json),
the user sees one line naming ``phx doctor``, once per session, and the model does not.

Claude Code 2.1.330 shows a hook's ``systemMessage`` to the user: ``claude -p --output-format
stream-json --verbose`` prints a PostToolUse hook's as ``{"type": "system", "subtype":
"informational", "content": "PostToolUse:Bash says: ..."}`` and never sends it to the model; a
SessionStart hook's appears in the terminal UI ("SessionStart:startup says: ...") and, in print
mode, in that hook's ``hook_response`` (its stdout). The hooks run with their own runtime
directory (``XDG_RUNTIME_DIR``), where Phoenix remembers which sessions were told.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from typing import Any

import pytest
from claude_code import ClaudeProject, ClaudeRun, FakeAnthropic, Turn, ensure_claude_code

NOTICE = "Phoenix Protocol:"


@pytest.fixture(scope="module")
def claude_argv() -> list[str]:
    """Install (once, under a lock) or find the pinned Claude Code; fails, never skips, without node/npm."""
    return ensure_claude_code()


@pytest.fixture
def project(claude_argv: list[str]) -> Iterator[ClaudeProject]:
    with ClaudeProject.create(claude_argv) as created:
        yield created


def stream(run: ClaudeRun) -> list[dict[str, Any]]:
    """The ``--output-format stream-json`` lines of a run."""
    lines = [json.loads(line) for line in run.stdout.splitlines() if line.startswith("{")]
    assert lines, run.describe()
    return lines


def shown_to_user(lines: list[dict[str, Any]]) -> list[str]:
    """Phoenix's notices among what Claude Code shows the user: informational system lines, and
    the systemMessage of a SessionStart hook's output."""
    found = [
        line["content"]
        for line in lines
        if line.get("type") == "system" and line.get("subtype") == "informational" and NOTICE in line.get("content", "")
    ]
    for line in lines:
        if line.get("subtype") == "hook_response" and line.get("hook_event") == "SessionStart" and line.get("stdout"):
            message = json.loads(line["stdout"]).get("systemMessage")
            if message:
                found.append(message)
    return found


def model_text(api: FakeAnthropic) -> str:
    return "\n".join(request.text for request in api.messages_requests())


def damaged_events(project: ClaudeProject) -> list[dict[str, Any]]:
    return [e for e in project.ops() if e["event"] == "hook_failed"]


@pytest.mark.e2e
def test_state_damaged_mid_session_is_shown_to_the_user_once(project: ClaudeProject) -> None:
    """The model's first command tears state.json; every PostToolUse after it fails: the user
    sees one line (the first), the model nothing, the hooks exit 0 and log each failure."""
    state = os.path.join(project.agent_dir(), "state.json")
    runtime = os.path.join(project.root, "runtime")  # removed with the project
    turns = [
        Turn.bash(f"truncate -s 40 {state}"),
        Turn.bash("echo second"),
        Turn.bash("echo third"),
        Turn.say("Finished."),
    ]
    with FakeAnthropic(turns) as api:
        run = project.run(
            ["-p", "go", "--allowedTools", "Bash(truncate *)", "Bash(echo *)", "--output-format", "stream-json",
             "--verbose"],
            api=api,
            env={"XDG_RUNTIME_DIR": runtime},
        )  # fmt: skip
    assert run.returncode == 0, run.describe()
    lines = stream(run)
    assert lines[-1].get("result") == "Finished.", run.describe()

    shown = shown_to_user(lines)
    assert len(shown) == 1, (shown, run.describe())
    assert shown[0].startswith("PostToolUse:Bash says: Phoenix Protocol: the PostToolUse hook failed: ")
    assert ".phoenix/agents/default/state.json is not valid JSON" in shown[0]
    assert "Run `phx doctor` to repair it." in shown[0]

    # The model got its tool results and nothing of Phoenix's trouble (the line is the user's).
    text = model_text(api)
    assert len(api.main_requests()) == 4
    assert NOTICE not in text and "phx doctor" not in text and "RECOVERY DETECTED" not in text

    # Each failing hook still logged its failure (three tool calls, Stop), and left the file alone.
    failed = damaged_events(project)
    assert len(failed) >= 3 and all("not valid JSON" in e["meta"]["error"] for e in failed), project.ops()
    with open(state, "rb") as fh:
        assert len(fh.read()) == 40
    assert os.listdir(os.path.join(runtime, f"phoenix-{os.getuid()}", "hook-notices"))  # remembered


@pytest.mark.e2e
def test_state_damaged_before_the_session_is_shown_once_and_the_model_hears_the_same(
    project: ClaudeProject,
) -> None:
    """SessionStart finds state.json damaged: its output tells the user (systemMessage) and the
    model (additionalContext) the same thing; the failing PostToolUse hooks after it add nothing."""
    os.makedirs(project.agent_dir(), mode=0o700)
    with open(os.path.join(project.agent_dir(), "state.json"), "wb") as fh:
        fh.write(b'{"schema_version": 1, "status": "work')
    runtime = os.path.join(project.root, "runtime")  # removed with the project
    with FakeAnthropic([Turn.bash("echo one"), Turn.bash("echo two"), Turn.say("Done.")]) as api:
        run = project.run(
            ["-p", "go", "--allowedTools", "Bash(echo *)", "--output-format", "stream-json", "--verbose"],
            api=api,
            env={"XDG_RUNTIME_DIR": runtime},
        )
    assert run.returncode == 0, run.describe()
    lines = stream(run)
    shown = shown_to_user(lines)
    assert shown == [
        "Phoenix Protocol: .phoenix/agents/default/state.json is not valid JSON "
        "(Unterminated string starting at line 1 column 33). Run `phx doctor` to repair it."
    ], run.describe()

    first = api.main_requests()[0].text
    # The model is told the state is damaged and what repairs it: not that all is well, and not
    # the user's line itself.
    assert "is not valid JSON (Unterminated string starting at line 1 column 33)" in first
    assert "phx doctor" in first and "Run `phx doctor` to repair it." not in first
    assert "state.json is valid" not in first
    later = "\n".join(request.text for request in api.main_requests()[1:])
    assert NOTICE not in later

    starts = [e for e in project.ops() if e["event"] == "session_start"]
    assert starts and starts[0]["status"] == "error"
    assert len(damaged_events(project)) >= 2  # the PostToolUse hooks failed too, quietly for the user


@pytest.mark.e2e
@pytest.mark.parametrize("attack", ["fifo", "foreign-link"])
def test_a_hostile_state_file_neither_hangs_claude_nor_reaches_the_model(
    project: ClaudeProject, attack: str, tmp_path: Any
) -> None:
    """Issue 30, item 10, in the real CLI: a FIFO placed at state.json (which blocked every hook on
    open) or a foreign file linked there (taken as the agent's state): the session runs through,
    each hook within its budget, the user is told once, the model hears nothing of the foreign
    file's task, and `phx doctor` moves the entry aside and rebuilds the state."""
    import subprocess
    import sys
    import time

    os.makedirs(project.agent_dir(), mode=0o700)
    state = os.path.join(project.agent_dir(), "state.json")
    foreign = tmp_path / "foreign-state.json"
    if attack == "fifo":
        os.mkfifo(state, 0o600)
    else:
        foreign.write_text(json.dumps({"status": "working", "current_task": "FOREIGN TASK", "last_active": "x"}))
        os.symlink(foreign, state)
    runtime = os.path.join(project.root, "runtime")
    started = time.monotonic()
    with FakeAnthropic([Turn.bash("echo one"), Turn.say("Done.")]) as api:
        run = project.run(
            ["-p", "go", "--allowedTools", "Bash(echo *)", "--output-format", "stream-json", "--verbose"],
            api=api,
            env={"XDG_RUNTIME_DIR": runtime},
        )
    elapsed = time.monotonic() - started
    assert run.returncode == 0, run.describe()
    # A hook blocked on the FIFO waits out its timeout: SessionStart 10 s, PostToolUse and Stop 5 s,
    # SessionEnd 2 s, 22 s more than a session that takes a few seconds.
    assert elapsed < 20, f"the session took {elapsed:.1f} s"
    shown = shown_to_user(stream(run))
    assert len(shown) == 1 and "phx doctor" in shown[0], shown
    assert "FOREIGN TASK" not in model_text(api)
    assert [e for e in project.ops() if e["event"] == "hook_failed"], "the hooks did not report the entry"

    doctor = subprocess.run(
        [os.path.join(os.path.dirname(sys.executable), "phx"), "doctor", "--home", project.phoenix_home],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert doctor.returncode == 0, doctor.stdout + doctor.stderr
    assert os.path.isfile(state) and not os.path.islink(state)  # a regular state.json again
    assert any(name.startswith("state.json.quarantine-") for name in os.listdir(project.agent_dir()))
    if attack == "foreign-link":
        assert "FOREIGN TASK" in foreign.read_text()  # the link's target untouched
