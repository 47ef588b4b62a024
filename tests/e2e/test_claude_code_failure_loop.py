"""End to end with the real Claude Code CLI (issue 36, found 1): a failing loop's drift warning
reaches the model.

The scripted model makes the same failing Bash call again and again; Claude Code fires
PostToolUseFailure for each. On the fourth identical call Phoenix's repetition rule fires and the
hook answers with ``hookSpecificOutput.additionalContext``. Claude Code 2.1.330 checks the output's
``hookEventName`` against the event that ran ("Hook returned incorrect event name: expected
'PostToolUseFailure' but got 'PostToolUse'") and drops an output that names another: the warning
must name PostToolUseFailure to reach the model's next request.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest
from claude_code import ClaudeProject, FakeAnthropic, Turn, ensure_claude_code

WARNING = "Phoenix Protocol: you may be going in circles"
FAILING = "ls missing-phoenix-drift-e2e"


@pytest.fixture(scope="module")
def claude_argv() -> list[str]:
    """Install (once, under a lock) or find the pinned Claude Code; fails, never skips, without node/npm."""
    return ensure_claude_code()


@pytest.fixture
def project(claude_argv: list[str]) -> Iterator[ClaudeProject]:
    with ClaudeProject.create(claude_argv) as created:
        yield created


def _debug_log(project: ClaudeProject) -> str:
    text = []
    for dirpath, _dirs, files in os.walk(os.path.join(project.home, ".claude", "debug")):
        for name in sorted(files):
            path = os.path.join(dirpath, name)
            if name.endswith(".txt") and not os.path.islink(path):
                with open(path, encoding="utf-8", errors="replace") as fh:
                    text.append(fh.read())
    return "\n".join(text)


@pytest.mark.e2e
def test_a_failing_loops_warning_reaches_the_models_next_request(project: ClaudeProject) -> None:
    turns = [Turn.bash(FAILING) for _ in range(6)] + [Turn.say("Stopping here.")]
    with FakeAnthropic(turns) as api:
        run = project.run(
            ["-p", "make the listing work", "--allowedTools", "Bash(ls *)", "--output-format", "json", "--debug"],
            api=api,
        )
    assert run.returncode == 0, run.describe()
    main = api.main_requests()
    assert len(main) == 7, [r.path for r in api.requests]
    carrying = [i for i, request in enumerate(main) if WARNING in request.text]
    # The fourth identical failing call (its result goes out in request 4) is the first drift: the
    # warning is in that request and every later one (it stays in the conversation), never before.
    assert carrying and carrying[0] == 4, (carrying, run.describe())
    assert carrying == list(range(4, 7))
    assert "ls missing-phoenix-drift-e2e" in main[4].text

    failures = [e for e in project.ops() if e["event"] == "tool_failed"]
    assert len(failures) == 6, project.ops()
    detected = [e for e in project.ops() if e["event"] == "drift_detected"]
    assert len(detected) == 1 and detected[0]["meta"]["kind"] == "repetition", detected
    log = _debug_log(project)
    assert "PostToolUseFailure" in log  # the hooks ran for the failure event (the log is there)
    assert "incorrect event name" not in log, log[-3000:]
    assert not project.hook_errors()
    assert not [e for e in project.ops() if e["event"] == "hook_failed"]
