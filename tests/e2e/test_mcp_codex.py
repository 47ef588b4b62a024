"""``phx mcp`` end to end with the real Codex CLI (offline, against ``FakeResponses``): registered by
``phx install codex --mcp --scope user`` in ``~/.codex/config.toml``, its tools reach the model
request as the namespace ``mcp__phoenix``, exactly as ``bench/mcp_tool_tokens.py`` serializes it to
count its tokens.

Codex starts its MCP servers while the session starts and does not wait for them: its first
request may go without their tools. The scripted model's first turn runs ``sleep 10`` in the
shell, so that the request after it comes once the server (a Python process importing the MCP SDK,
about a second here) has answered."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterator
from typing import Any

import pytest
import tomlkit
from codex_cli import SRC, CodexProject, FakeResponses, Turn, ensure_codex

TOOLS = ["brief", "checkpoint", "memory_get", "memory_search", "note", "set_status"]


@pytest.fixture(scope="module")
def codex_argv() -> list[str]:
    return ensure_codex()


@pytest.fixture
def project(codex_argv: list[str]) -> Iterator[CodexProject]:
    with CodexProject.create(codex_argv) as created:
        yield created


def _namespace(body: Any) -> dict[str, Any] | None:
    for tool in body.get("tools") or [] if isinstance(body, dict) else []:
        if isinstance(tool, dict) and tool.get("name") == "mcp__phoenix":
            return tool
    return None


@pytest.mark.e2e
def test_codex_lists_phoenix_tools(project: CodexProject) -> None:
    installed = json.loads(project.phx("install", "codex", "--mcp", "--scope", "user", "--json").stdout)
    assert installed["changed"] and installed["path"] == project.config_path
    with open(project.config_path, encoding="utf-8") as fh:
        config = tomlkit.parse(fh.read())
    assert "projects" in config  # the tester's own settings kept
    # Codex gives an MCP server only a few variables of its environment: the code under test is
    # named in the entry (a real install imports the installed Phoenix).
    config["mcp_servers"]["phoenix"]["env"] = {"PYTHONPATH": SRC}
    with open(project.config_path, "w", encoding="utf-8") as fh:
        fh.write(tomlkit.dumps(config))

    with FakeResponses([Turn.shell("sleep 10"), Turn.say("Done.")]) as api:
        run = project.run(["look at the project"], api=api)
    assert run.returncode == 0, run.describe()
    listed = [ns for ns in (_namespace(r.body) for r in api.main_requests()) if ns is not None]
    assert listed, [sorted(str(t.get("name")) for t in r.body.get("tools") or []) for r in api.main_requests()]
    namespace = listed[-1]
    assert [t["name"] for t in namespace["tools"]] == TOOLS
    # What the model is given is what the bench counts (bench/mcp_tool_tokens.py, Codex's form).
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "bench"))
    try:
        from mcp_tool_tokens import codex_tools, list_tools
    finally:
        sys.path.pop(0)
    assert [namespace] == codex_tools(list_tools(team=False))
