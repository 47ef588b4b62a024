"""``phx mcp`` end to end with the real Gemini CLI (offline, against ``FakeGemini``): registered by
``phx install gemini-cli --mcp`` in the project's settings, its tools reach the model request as
``mcp_phoenix_<tool>`` function declarations, exactly as ``bench/mcp_tool_tokens.py`` serializes
them to count their tokens, and a scripted call of one of them writes the agent's state."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterator
from typing import Any

import pytest
from claude_code import path_without_phx
from gemini_cli import FakeGemini, GeminiProject, Turn, ensure_gemini_cli

import phoenix_protocol
from phoenix_protocol.integrations._mcp_install import install_mcp

BIN = os.path.dirname(sys.executable)
CODE = {  # `phx` from PATH (the entry the project's settings hold) runs the code under test
    "PYTHONPATH": os.path.dirname(os.path.dirname(os.path.abspath(phoenix_protocol.__file__))),
    "PATH": path_without_phx(BIN),
}
TOOLS = {"brief", "set_status", "note", "checkpoint", "memory_search", "memory_get"}


@pytest.fixture(scope="module")
def gemini_argv() -> list[str]:
    return ensure_gemini_cli()


@pytest.fixture
def project(gemini_argv: list[str]) -> Iterator[GeminiProject]:
    with GeminiProject.create(gemini_argv, prefix="phx-mcp-gemini-") as created:
        yield created


def _declarations(body: Any) -> dict[str, dict[str, Any]]:
    found: dict[str, dict[str, Any]] = {}
    for group in body.get("tools") or [] if isinstance(body, dict) else []:
        for declaration in group.get("functionDeclarations") or []:
            found[declaration["name"]] = declaration
    return found


@pytest.mark.e2e
def test_gemini_lists_phoenix_tools_and_calls_one(project: GeminiProject) -> None:
    result = install_mcp("gemini-cli", "project", project_dir=project.dir)
    assert result.changed and result.entry == {"command": "phx", "args": ["mcp"]}
    turns = [
        Turn.call("mcp_phoenix_note", text="rotate the staging deploy key", kind="next_action"),
        Turn.say("Noted."),
    ]
    with FakeGemini(turns) as api:
        run = project.run("remember to rotate the key", api=api, env=CODE)
    assert run.returncode == 0, run.describe()
    first = api.main_requests()[0]
    declared = _declarations(first.body)
    ours = {name.removeprefix("mcp_phoenix_"): d for name, d in declared.items() if name.startswith("mcp_phoenix_")}
    assert set(ours) == TOOLS, sorted(declared)
    # What the model is given is what the bench counts (bench/mcp_tool_tokens.py, Gemini's form).
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "bench"))
    try:
        from mcp_tool_tokens import gemini_declarations, list_tools
    finally:
        sys.path.pop(0)
    counted = {d["name"]: d for d in gemini_declarations(list_tools(team=False))}
    for name, declaration in ours.items():
        mine = counted[f"mcp_phoenix_{name}"]
        assert declaration == mine  # Gemini CLI's own wait_for_previous included
    # The scripted call ran through the server: the note is in the agent's state.
    assert [n["text"] for n in project.state()["next_actions"]] == ["rotate the staging deploy key"]
    follow_up = json.dumps(api.main_requests()[1].body)
    assert "rotate the staging deploy key" in follow_up and "resolved" in follow_up
