"""End to end (issue 36, found 1): the output of a failing tool call's hook, taken by the real
Gemini CLI (AfterTool) and Codex (PostToolUse): the same failing shell command again and again,
Phoenix's repetition rule fires once, and its warning reaches the model's next request, with no
error from the CLI about the hook's output. (Claude Code: test_claude_code_failure_loop.py.)"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator

import pytest
from claude_code import path_without_phx
from codex_cli import CodexProject, ensure_codex
from fake_models import FakeGemini, FakeResponses, Turn
from gemini_cli import GeminiProject, ensure_gemini_cli

import phoenix_protocol
from phoenix_protocol.integrations._install import install_hooks

WARNING = "Phoenix Protocol: you may be going in circles"
CODE = {  # every phx the hooks run is the code under test
    "PYTHONPATH": os.path.dirname(os.path.dirname(os.path.abspath(phoenix_protocol.__file__))),
    "PATH": path_without_phx(os.path.dirname(sys.executable)),
}


@pytest.fixture(scope="module")
def gemini_argv() -> list[str]:
    return ensure_gemini_cli()


@pytest.fixture(scope="module")
def codex_argv() -> list[str]:
    return ensure_codex()


@pytest.fixture
def gemini(gemini_argv: list[str]) -> Iterator[GeminiProject]:
    with GeminiProject.create(gemini_argv) as created:
        yield created


@pytest.fixture
def codex(codex_argv: list[str]) -> Iterator[CodexProject]:
    with CodexProject.create(codex_argv) as created:
        yield created


def _drift(project: GeminiProject | CodexProject) -> list[dict[str, object]]:
    return [e for e in project.ops() if e.get("event") == "drift_detected"]


@pytest.mark.e2e
def test_gemini_cli_takes_the_after_tool_warning_of_a_failing_loop(gemini: GeminiProject) -> None:
    install_hooks("gemini-cli", "project", project_dir=gemini.dir)
    # Four calls: Gemini CLI's own loop detection ends the turn at the fifth identical call.
    turns = [Turn.shell("ls /nonexistent-phoenix-drift") for _ in range(4)] + [Turn.say("Stopping.")]
    with FakeGemini(turns) as api:
        run = gemini.run("list it", api=api, env=CODE)
    assert run.returncode == 0, run.describe()
    assert "Hook(s) [" not in run.stderr and "invalid" not in run.stderr.lower(), run.stderr
    main = api.main_requests()
    assert len(main) == 5, len(main)
    carrying = [i for i, request in enumerate(main) if WARNING in request.text]
    # Gemini CLI appends AfterTool's context to the tool's result: the fourth call's, in request 4.
    assert carrying == [4], carrying
    failed = [e for e in gemini.ops() if e.get("event") == "tool_failed"]
    assert len(failed) == 4
    assert len(_drift(gemini)) == 1
    assert not [e for e in gemini.ops() if e.get("event") == "hook_failed"]


@pytest.mark.e2e
def test_codex_takes_the_post_tool_use_warning_of_a_failing_loop(codex: CodexProject) -> None:
    """Codex's PostToolUse payload does not say that a shell command failed (its response is the
    output alone): the repetition of one command is what fires here."""
    codex.install("project")
    turns = [Turn.bash("ls /nonexistent-phoenix-drift") for _ in range(6)] + [Turn.say("Stopping.")]
    with FakeResponses(turns) as api:
        run = codex.run(["list it"], api=api)
    assert run.returncode == 0, run.describe()
    assert "incorrect" not in run.stderr.lower() and "invalid" not in run.stderr.lower(), run.stderr[-3000:]
    main = api.main_requests()
    assert len(main) == 7, len(main)
    carrying = [i for i, request in enumerate(main) if WARNING in request.text]
    assert carrying and carrying[0] == 4, (carrying, run.stderr[-3000:])
    assert len(_drift(codex)) == 1
    assert not [e for e in codex.ops() if e.get("event") == "hook_failed"]
