"""``phx mcp``: every tool, resource and prompt through the MCP SDK's own client (in-process, on
both stores), the server as a subprocess over stdio, and over streamable HTTP with bearer tokens."""

from __future__ import annotations

import asyncio
import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from mcp import Client, StdioServerParameters
from mcp.types import CallToolResult, TextContent

from phoenix_protocol.core._clock import ManualClock
from phoenix_protocol.core._config import load_config
from phoenix_protocol.core._home import Home
from phoenix_protocol.server._mcp import McpSeat, compact_schema, create_mcp_server
from phoenix_protocol.services._agent import Agent
from phoenix_protocol.store._memory import open_memory_store
from phoenix_protocol.store._teams import Team

AGENT_TOOLS = {"brief", "set_status", "note", "checkpoint", "memory_search", "memory_get"}
TEAM_TOOLS = {"inbox", "send", "tasks"}


def seat(home: Home, clock: ManualClock, *, team: str | None = None, member: str | None = None) -> McpSeat:
    config = load_config(home.root, project_root=home.project_root)
    return McpSeat(home, "zero", config=config, team_id=team, member=member, clock=clock)


def run(the_seat: McpSeat, script: Callable[[Client], Awaitable[None]]) -> None:
    async def main() -> None:
        async with Client(create_mcp_server(the_seat)) as client:
            await script(client)

    asyncio.run(main())


def ok(result: CallToolResult) -> dict[str, Any]:
    assert not result.is_error, result.content
    content: dict[str, Any] | None = result.structured_content
    assert content is not None
    return content


def error_text(result: CallToolResult) -> str:
    assert result.is_error
    content = result.content[0]
    assert isinstance(content, TextContent)
    return content.text


@pytest.fixture
def team(home: Home, clock: ManualClock) -> Team:
    team = Team.create(home, "release", lead="lead", team_id="release-1", clock=clock)
    team.join("alice")
    team.join("bob")
    return team


def test_tool_list_is_small_typed_and_compact(home: Home, clock: ManualClock) -> None:
    async def script(client: Client) -> None:
        tools = {t.name: t for t in (await client.list_tools()).tools}
        assert set(tools) == AGENT_TOOLS  # no team seat: no team tools
        for tool in tools.values():
            assert tool.description
            assert tool.output_schema is not None, tool.name  # typed results: structured output
            text = json.dumps(tool.input_schema)
            assert '"title"' not in text and '"null"' not in text, text
        assert tools["brief"].annotations is not None and tools["brief"].annotations.read_only_hint
        assert tools["set_status"].input_schema["required"] == ["status"]

    run(seat(home, clock), script)


def test_team_seat_lists_team_tools(home: Home, clock: ManualClock, team: Team) -> None:
    async def script(client: Client) -> None:
        names = {t.name for t in (await client.list_tools()).tools}
        assert names == AGENT_TOOLS | TEAM_TOOLS
        templates = (await client.list_resource_templates()).resource_templates
        assert sorted(t.uri_template for t in templates) == ["phoenix://brief/{agent}", "phoenix://inbox/{name}"]

    run(seat(home, clock, team=team.id, member="alice"), script)


def test_status_notes_and_brief(home: Home, clock: ManualClock, backend: str) -> None:
    async def script(client: Client) -> None:
        assert ok(await client.call_tool("set_status", {"status": "working", "text": "Add refresh tokens"})) == {
            "agent": "zero",
            "status": "working",
            "task": "Add refresh tokens",
        }
        loop = ok(await client.call_tool("note", {"text": "token rotation untested", "kind": "open_loop"}))
        assert loop == {"id": 1, "kind": "open_loop", "text": "token rotation untested", "resolved": False}
        action = ok(await client.call_tool("note", {"text": "write the rotation test"}))
        assert action["kind"] == "next_action" and action["id"] == 2
        got = ok(await client.call_tool("brief", {}))
        assert got["status"] == "working" and got["task"] == "Add refresh tokens"
        assert got["open_loops"] == [{"id": 1, "text": "token rotation untested"}]
        assert "write the rotation test" in got["brief"] and "Add refresh tokens" in got["brief"]
        resolved = ok(await client.call_tool("note", {"resolve": 1}))
        assert resolved == {"id": 1, "kind": "open_loop", "text": "token rotation untested", "resolved": True}
        assert "no open loop or next action number 1" in error_text(await client.call_tool("note", {"resolve": 1}))
        assert error_text(await client.call_tool("note", {})).endswith(
            "UsageError: give the note's text, or resolve with a note's id."
        )
        done = ok(await client.call_tool("set_status", {"status": "idle", "text": "merged"}))
        assert done["status"] == "idle"

    run(seat(home, clock), script)
    state = Agent("zero", home, clock=clock).state.read()  # written where `phx` reads it
    assert state.status == "idle" and state.last_output == "merged"
    assert [n["text"] for n in state.next_actions] == ["write the rotation test"]
    assert state.open_loops == []


def test_invalid_arguments_are_tool_errors(home: Home, clock: ManualClock) -> None:
    async def script(client: Client) -> None:
        result = await client.call_tool("set_status", {"status": "sleeping"})
        assert result.is_error
        result = await client.call_tool("checkpoint", {"action": "list", "limit": 0})
        assert result.is_error

    run(seat(home, clock), script)


def test_checkpoints_create_list_show(home: Home, clock: ManualClock, backend: str) -> None:
    async def script(client: Client) -> None:
        assert ok(await client.call_tool("checkpoint", {})) == {"checkpoints": [], "checkpoint": None}
        assert "has no valid checkpoint" in error_text(await client.call_tool("checkpoint", {"action": "show"}))
        await client.call_tool("set_status", {"status": "working", "text": "migrate the store"})
        first = ok(await client.call_tool("checkpoint", {"action": "create", "summary": "before the migration"}))
        (made,) = first["checkpoints"]
        assert made["seq"] == 1 and made["type"] == "routine" and made["summary"] == "before the migration"
        clock.advance(1.0)
        ok(await client.call_tool("checkpoint", {"action": "create", "summary": "after"}))
        listed = ok(await client.call_tool("checkpoint", {"action": "list"}))["checkpoints"]
        assert [c["seq"] for c in listed] == [2, 1]
        assert [c["seq"] for c in ok(await client.call_tool("checkpoint", {"limit": 1}))["checkpoints"]] == [2]
        shown = ok(await client.call_tool("checkpoint", {"action": "show", "ref": "1"}))["checkpoint"]
        assert shown["summary"] == "before the migration" and shown["agent_id"] == "zero"
        assert "migrate the store" in json.dumps(shown["state"]["current_task"])
        newest = ok(await client.call_tool("checkpoint", {"action": "show"}))["checkpoint"]
        assert newest["seq"] == 2
        assert "no checkpoint #9" in error_text(await client.call_tool("checkpoint", {"action": "show", "ref": "9"}))

    run(seat(home, clock), script)
    entries = Agent("zero", home, clock=clock).checkpoints.entries()
    assert [e.label for e in entries] == ["after", "before the migration"]


def test_memory_search_then_get(home: Home, clock: ManualClock, backend: str) -> None:
    the_seat = seat(home, clock)
    long_text = "The deploy key for staging rotates every Monday; " + "details " * 60
    store = open_memory_store(home, config=the_seat.config, clock=clock)
    kept = store.store("zero", long_text, tags=["ops"])
    store.store("zero", "Alice prefers squash merges on the auth repo", tags=["people"])
    store.store("other", "The deploy key of another agent", tags=["ops"])

    async def script(client: Client) -> None:
        hits = ok(await client.call_tool("memory_search", {"query": "deploy key rotation"}))["hits"]
        assert [h["id"] for h in hits][:1] == [kept.id]
        assert all(h["id"] != "other" for h in hits)
        top = hits[0]
        assert len(top["snippet"]) <= 160 and top["snippet"].endswith("…") and top["tags"] == ["ops"]
        assert top["score"] > 0
        tagged = ok(await client.call_tool("memory_search", {"query": "merges", "tags": ["people"]}))["hits"]
        assert len(tagged) == 1 and "squash" in tagged[0]["snippet"]
        got = ok(await client.call_tool("memory_get", {"ids": [kept.id, "mem-" + "0" * 24]}))
        assert got["missing"] == ["mem-" + "0" * 24]
        (record,) = got["records"]
        assert record["text"] == long_text.strip() or record["text"] == long_text
        assert record["tags"] == ["ops"]
        assert (await client.call_tool("memory_get", {"ids": []})).is_error

    run(the_seat, script)


def test_memory_search_of_an_agent_without_memories_is_empty(home: Home, clock: ManualClock) -> None:
    async def script(client: Client) -> None:
        assert ok(await client.call_tool("memory_search", {"query": "anything"})) == {"hits": []}

    run(seat(home, clock), script)


def test_team_inbox_send_ack_tasks(home: Home, clock: ManualClock, team: Team, backend: str) -> None:
    team = Team.open(home, team.id, clock=clock) if backend == "sqlite" else _pg_team(home, clock)
    first = team.add_task("schema migration")
    second = team.add_task("API", after=[first["task_id"]])
    team.add_task("docs")
    team.send("bob", "alice", type="question", subject="Ready?", body="Is the schema done?")

    async def as_alice(client: Client) -> None:
        got = ok(await client.call_tool("inbox", {}))
        (message,) = got["messages"]
        assert message["sender"] == "bob" and message["subject"] == "Ready?" and got["acked"] == []
        assert ok(await client.call_tool("inbox", {}))["messages"] == []  # marked read
        acked = ok(await client.call_tool("inbox", {"ack": [message["seq"]]}))
        assert acked["acked"] == [message["seq"]]
        sent = ok(await client.call_tool("send", {"to": "bob", "subject": "Yes", "body": "done", "msg_id": "m-1"}))
        again = ok(await client.call_tool("send", {"to": "bob", "subject": "Yes", "body": "done", "msg_id": "m-1"}))
        assert again["duplicate"] and again["seq"] == sent["seq"] and not sent["duplicate"]
        assert "not in team" in error_text(await client.call_tool("send", {"to": "zed", "subject": "s", "body": "b"}))
        ready = ok(await client.call_tool("tasks", {}))
        assert [t["title"] for t in ready["ready"]] == ["schema migration", "docs"] and ready["claimed"] is None
        claimed = ok(await client.call_tool("tasks", {"claim": first["task_id"]}))
        assert claimed["claimed"]["assigned_to"] == "alice" and claimed["claimed"]["status"] == "in_progress"
        assert [t["title"] for t in claimed["ready"]] == ["docs"]
        nxt = ok(await client.call_tool("tasks", {"claim": "next"}))
        assert nxt["claimed"]["title"] == "docs" and nxt["ready"] == []
        assert "ready" in error_text(await client.call_tool("tasks", {"claim": "next"}))
        assert error_text(await client.call_tool("tasks", {"claim": second["task_id"]}))
        peek = await client.read_resource("phoenix://inbox/bob")
        (contents,) = peek.contents
        assert [m["subject"] for m in json.loads(getattr(contents, "text", ""))] == ["Yes"]

    run(seat(home, clock, team=team.id, member="alice"), as_alice)
    inbox = team.mailbox.fetch("bob")
    assert [m.subject for m in inbox] == ["Yes"]  # the resource only looked
    assert team.mailbox.acked_by(1) == ["alice"]


def _pg_team(home: Home, clock: ManualClock) -> Team:
    team = Team.create(home, "release", lead="lead", team_id="release-1", clock=clock)
    team.join("alice")
    team.join("bob")
    return team


def test_team_tools_without_a_team(home: Home, clock: ManualClock) -> None:
    with pytest.raises(Exception, match="both the team"):
        seat(home, clock, team="release-1")
    the_seat = seat(home, clock, team="nope-1", member="alice")

    async def script(client: Client) -> None:
        text = error_text(await client.call_tool("tasks", {}))
        assert text.endswith("NotFoundError: Nothing was found at this address that the credentials given may use.")

    run(the_seat, script)


def test_brief_resource_and_recover_prompt(home: Home, clock: ManualClock) -> None:
    Agent("zero", home, clock=clock).state.add_note("next_action", "run the migration on staging")

    async def script(client: Client) -> None:
        resources = (await client.list_resources()).resources
        assert [str(r.uri) for r in resources] == ["phoenix://brief"]
        (contents,) = (await client.read_resource("phoenix://brief")).contents
        assert "run the migration on staging" in getattr(contents, "text", "")
        (contents,) = (await client.read_resource("phoenix://brief/zero")).contents
        assert "run the migration on staging" in getattr(contents, "text", "")
        with pytest.raises(Exception, match="Nothing was found"):
            await client.read_resource("phoenix://brief/nobody")
        prompts = (await client.list_prompts()).prompts
        assert [p.name for p in prompts] == ["recover"]
        prompt = await client.get_prompt("recover")
        (message,) = prompt.messages
        assert isinstance(message.content, TextContent)
        assert "run the migration on staging" in message.content.text and "set_status" in message.content.text

    run(seat(home, clock), script)


def test_errors_hide_the_home_path(home: Home, clock: ManualClock) -> None:
    async def script(client: Client) -> None:
        text = error_text(await client.call_tool("checkpoint", {"action": "show", "ref": "../x"}))
        assert home.root not in text and text.startswith("Error executing tool checkpoint: UsageError:")

    run(seat(home, clock), script)


def test_compact_schema_keeps_property_names() -> None:
    schema = {
        "type": "object",
        "title": "x",
        "properties": {
            "title": {"type": "string", "title": "Title"},
            "n": {"anyOf": [{"type": "integer"}, {"type": "null"}], "default": None, "title": "N"},
            "m": {"anyOf": [{"type": "integer"}, {"type": "null"}], "default": 3},
        },
    }
    assert compact_schema(schema) == {
        "type": "object",
        "properties": {
            "title": {"type": "string"},
            "n": {"type": "integer"},
            "m": {"anyOf": [{"type": "integer"}, {"type": "null"}], "default": 3},
        },
    }


# -- the server as a process ------------------------------------------------------------------


def _phx_env(home: Home) -> dict[str, str]:
    src = str(Path(__file__).resolve().parents[2] / "src")
    return {**os.environ, "PHOENIX_HOME": home.root, "PYTHONPATH": src}


def test_stdio_subprocess(home: Home) -> None:
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "phoenix_protocol", "mcp", "--agent", "zero"],
        env=_phx_env(home),
    )

    async def main() -> None:
        async with Client(params, read_timeout_seconds=60) as client:
            names = {t.name for t in (await client.list_tools()).tools}
            assert names == AGENT_TOOLS
            ok(await client.call_tool("set_status", {"status": "working", "text": "over stdio"}))
            ok(await client.call_tool("note", {"text": "from a subprocess"}))

    asyncio.run(main())
    state = Agent("zero", home).state.read()
    assert state.current_task == "over stdio" and state.next_actions[0]["text"] == "from a subprocess"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture
def http_server(home: Home) -> Iterator[str]:
    port = _free_port()
    home.ensure()
    proc = subprocess.Popen(
        [sys.executable, "-m", "phoenix_protocol", "mcp", "--agent", "zero", "--http", "--port", str(port)],
        env=_phx_env(home),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            assert proc.poll() is None, proc.stderr.read() if proc.stderr else b""
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
                break
            except OSError:
                time.sleep(0.1)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        proc.kill()
        proc.wait(timeout=30)
        if proc.stderr:
            proc.stderr.close()


def test_http_with_bearer_tokens(home: Home, http_server: str) -> None:
    import httpx2  # the MCP SDK's HTTP client
    from mcp.client.streamable_http import streamable_http_client

    from phoenix_protocol.store._tokens import TokenStore

    tokens = TokenStore(home)
    mine, _ = tokens.create(["agent:zero"], ["checkpoint:*"])
    theirs, _ = tokens.create(["agent:other"], ["*"])
    reader, _ = tokens.create(["agent:zero"], ["checkpoint:read"])

    async def with_token(token: str | None, script: Callable[[Client], Awaitable[None]]) -> None:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        async with (
            httpx2.AsyncClient(headers=headers, timeout=30) as http,
            Client(streamable_http_client(http_server, http_client=http)) as client,
        ):
            await script(client)

    async def owner(client: Client) -> None:
        ok(await client.call_tool("set_status", {"status": "working", "text": "over http"}))
        (contents,) = (await client.read_resource("phoenix://brief/zero")).contents
        assert "over http" in getattr(contents, "text", "")
        assert "over http" in str((await client.get_prompt("recover")).messages[0].content)
        assert ok(await client.call_tool("brief", {}))["task"] == "over http"
        denied = error_text(await client.call_tool("memory_search", {"query": "x"}))  # no memory scope
        assert "Nothing was found at this address" in denied

    async def stranger(client: Client) -> None:
        assert "Nothing was found" in error_text(await client.call_tool("brief", {}))
        assert [str(r.uri) for r in (await client.list_resources()).resources] == []  # no unchecked brief
        with pytest.raises(Exception, match="Nothing was found"):
            await client.read_resource("phoenix://brief/zero")
        with pytest.raises(Exception, match="Nothing was found"):
            await client.get_prompt("recover")

    async def read_only(client: Client) -> None:
        ok(await client.call_tool("brief", {}))
        assert "Nothing was found" in error_text(await client.call_tool("note", {"text": "no"}))

    async def main() -> None:
        await with_token(mine, owner)
        await with_token(theirs, stranger)
        await with_token(reader, read_only)
        async with httpx2.AsyncClient(timeout=30) as http:
            response = await http.post(http_server, json={})
            assert response.status_code == 401
            assert response.headers["WWW-Authenticate"].startswith("Bearer")

    asyncio.run(main())
    assert Agent("zero", home).state.read().current_task == "over http"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--port", "9000"], "--host and --port go with --http"),
        (["--team", "release-1"], "needs both the team"),
        (["--agent", "../x"], "agent id"),
    ],
)
def test_cli_usage_errors(home: Home, args: list[str], message: str) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "phoenix_protocol", "mcp", *args],
        env=_phx_env(home),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2, done.stderr
    assert message in done.stderr and done.stdout == ""


def test_phx_mcp_reads_the_configuration_once(
    home: Home, backend: str, monkeypatch: pytest.MonkeyPatch, load_config_calls: list[str]
) -> None:
    """`phx mcp` with a team seat, every tool called through the server it built: ``load_config``
    runs once, in the command (the agent, the team, the memory store take its configuration)."""
    from phoenix_protocol.cli._main import cli
    from phoenix_protocol.server import _mcp

    home.ensure()
    team = Team.create(home, "release", lead="lead", team_id="release-1")
    team.join("alice")
    team.add_task("Write the parser")
    called: list[str] = []

    def serve(the_seat: McpSeat) -> None:  # serve_stdio, the session in process
        async def script(client: Client) -> None:
            calls: list[tuple[str, dict[str, Any]]] = [
                ("brief", {}),
                ("set_status", {"status": "working", "text": "parser"}),
                ("note", {"text": "tests"}),
                ("checkpoint", {"action": "create", "summary": "s"}),
                ("checkpoint", {"action": "show"}),
                ("memory_search", {"query": "parser"}),
                ("memory_get", {"ids": ["mem-" + "0" * 24]}),
                ("send", {"to": "lead", "subject": "s", "body": "b"}),
                ("inbox", {}),
                ("tasks", {"claim": "next"}),
            ]
            for name, arguments in calls:
                ok(await client.call_tool(name, arguments))
                called.append(name)
            await client.read_resource("phoenix://brief")

        run(the_seat, script)

    monkeypatch.setattr(_mcp, "serve_stdio", serve)
    load_config_calls.clear()
    assert cli(["mcp", "--home", home.root, "--agent", "zero", "--team", "release-1", "--as", "alice"]) == 0
    assert len(called) == 10
    assert len(load_config_calls) == 1, load_config_calls
