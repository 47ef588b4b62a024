"""``phx mcp``: Phoenix as an MCP server (the ``mcp`` SDK 2.x), for any MCP client.

One agent (and, when given, one team seat: ``--team``/``--as``, else ``$PHOENIX_TEAM`` and
``$PHOENIX_TEAMMATE``) per server. The tools call the same library functions as ``phx`` and the
HTTP bridge (``services/_bridge``, ``Agent``, ``Team``); their list is kept small and their
schemas short, because every model request carries them (docs/mcp.md measures it):

=================  ==================================================  ================
tool               what                                                scope (--http)
=================  ==================================================  ================
``brief``          status, task, notes and the brief                   checkpoint:read
``set_status``     working / idle / error, with its text               checkpoint:write
``note``           add an open loop or next action, or resolve one     checkpoint:write
``checkpoint``     create, list or show checkpoints                    checkpoint:*
``memory_search``  short hits (id, score, snippet)                     memory:read
``memory_get``     full records by id                                  memory:read
``inbox``          team messages not yet read (ack some first)         team:write
``send``           a team message                                      team:write
``tasks``          ready tasks, or claim one (``next`` or an id)       team:read/write
=================  ==================================================  ================

The team tools are listed only when the server has a team seat. Resources: ``phoenix://brief``
(stdio only), ``phoenix://brief/{agent}`` and ``phoenix://inbox/{name}`` (a teammate's unread
messages, nothing marked read); prompt ``recover``. Results are typed (structured output). A ``PhoenixError`` becomes a tool error
whose text is ``<ErrorClass>: <message>`` (the home's path replaced by ``$PHOENIX_HOME``).

Over streamable HTTP (``--http``) the bearer tokens of the HTTP bridge are required as soon as the
home has one (``server/_common.Authentication``), and each tool checks the token's namespace
(``agent:<id>``, ``team:<id>``) and scope as the bridge's routes do: a token that does not cover
them gets the bridge's one not-found message.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, Literal, TypeVar

from mcp.server import MCPServer
from mcp.server.mcpserver import Context
from mcp.server.mcpserver.exceptions import ResourceError, ToolError
from mcp.server.mcpserver.tools import Tool
from mcp.shared.exceptions import MCPError
from mcp.types import INVALID_PARAMS, ToolAnnotations
from pydantic import Field
from typing_extensions import TypedDict  # pydantic needs it before Python 3.12

from phoenix_protocol._version import __version__
from phoenix_protocol.core._clock import Clock, system_clock
from phoenix_protocol.core._errors import NotFoundError, PhoenixError, UsageError
from phoenix_protocol.core._text import one_line
from phoenix_protocol.server._common import AUTH_SCOPE_KEY, error_detail
from phoenix_protocol.services import _bridge
from phoenix_protocol.store._tokens import TokenInfo, agent_namespace, team_namespace

if TYPE_CHECKING:
    from typing import Annotated

    from phoenix_protocol.core._config import Config
    from phoenix_protocol.core._home import Home
    from phoenix_protocol.services._agent import Agent
    from phoenix_protocol.store._memory import MemoryStore
    from phoenix_protocol.store._teams import Team
else:
    from typing import Annotated

__all__ = [
    "INSTRUCTIONS",
    "SERVER_NAME",
    "McpSeat",
    "compact_schema",
    "create_http_app",
    "create_mcp_server",
    "serve_http",
    "serve_stdio",
]

F = TypeVar("F", bound=Callable[..., Any])

SERVER_NAME = "phoenix"
"""The server's name, and the key it is registered under in each CLI's settings."""
INSTRUCTIONS = (
    "Phoenix keeps this agent's state outside the conversation. Call `brief` first; keep the "
    "status and notes current; `memory_search` then `memory_get` for details."
)
"""The server's instructions (Codex sends them to the model as its tools' namespace description)."""
SNIPPET = 160
"""Characters of a memory's text in a search hit (``memory_get`` gives the whole record)."""

_READ = ToolAnnotations(read_only_hint=True, destructive_hint=False, idempotent_hint=True, open_world_hint=False)
_WRITE = ToolAnnotations(read_only_hint=False, destructive_hint=False, open_world_hint=False)


# -- typed results (structured output) ------------------------------------------------------------


class Note(TypedDict):
    id: int
    text: str


class BriefResult(TypedDict):
    agent: str
    status: str
    task: str
    open_loops: list[Note]
    next_actions: list[Note]
    brief: str


class StatusResult(TypedDict):
    agent: str
    status: str
    task: str


class NoteResult(TypedDict):
    id: int
    kind: str
    text: str
    resolved: bool


class CheckpointEntry(TypedDict):
    name: str
    seq: int
    type: str
    timestamp: str
    summary: str | None


class CheckpointResult(TypedDict):
    checkpoints: list[CheckpointEntry]
    checkpoint: dict[str, Any] | None


class MemoryHit(TypedDict):
    id: str
    score: float
    snippet: str
    tags: list[str]
    created_at: str


class MemoryHits(TypedDict):
    hits: list[MemoryHit]


class MemoryRecordOut(TypedDict):
    id: str
    text: str
    tags: list[str]
    metadata: dict[str, Any]
    created_at: str


class MemoryRecords(TypedDict):
    records: list[MemoryRecordOut]
    missing: list[str]


class MessageOut(TypedDict):
    seq: int
    sender: str
    to: str
    type: str
    subject: str
    body: str
    ts: str


class InboxResult(TypedDict):
    messages: list[MessageOut]
    acked: list[int]


class SendResult(TypedDict):
    seq: int
    msg_id: str
    duplicate: bool


class TaskOut(TypedDict):
    task_id: str
    title: str
    status: str
    assigned_to: str | None
    dependencies: list[str]


class TasksResult(TypedDict):
    ready: list[TaskOut]
    claimed: TaskOut | None


# -- the seat: what one server serves ---------------------------------------------------------


class McpSeat:
    """The home, agent and team seat one MCP server acts for, with its configuration (read once)
    and memory store. ``http``: tool calls are authorized against the request's token."""

    def __init__(
        self,
        home: Home,
        agent_id: str,
        *,
        config: Config,
        team_id: str | None = None,
        member: str | None = None,
        clock: Clock = system_clock,
        http: bool = False,
    ) -> None:
        from phoenix_protocol.core._ids import validate_id

        if (team_id is None) != (member is None):
            raise UsageError("a team seat needs both the team (--team) and the teammate's name (--as).")
        self.home = home
        self.config = config
        self.clock = clock
        self.agent_id = validate_id(agent_id, "agent id")
        self.team_id = validate_id(team_id, "team id") if team_id is not None else None
        self.member = validate_id(member, "teammate name") if member is not None else None
        self.http = http
        self._memory: MemoryStore | None = None

    def agent(self) -> Agent:
        """The agent, on the lane of ``$PHOENIX_SESSION_ID``'s session when it has one."""
        agent = _bridge.open_agent(self.home, self.agent_id, config=self.config, clock=self.clock)
        return agent.follow_session(os.environ.get("PHOENIX_SESSION_ID") or None)

    def team(self) -> tuple[Team, str]:
        if self.team_id is None or self.member is None:
            raise UsageError("this server has no team seat: start it with --team TEAM --as NAME.")
        return _bridge.open_team(self.home, self.team_id, config=self.config, clock=self.clock), self.member

    @property
    def memory(self) -> MemoryStore:
        if self._memory is None:
            from phoenix_protocol.store._memory import open_memory_store

            self._memory = open_memory_store(self.home, config=self.config, clock=self.clock)
        return self._memory

    def authorize(self, ctx: Context | None, namespace: str, scope: str) -> None:
        """Over HTTP: the request's token must cover ``namespace`` and ``scope`` (else the bridge's
        one not-found answer). Over stdio the caller is this machine's user: nothing to check."""
        if not self.http:
            return
        request = None
        if ctx is not None:
            with contextlib.suppress(ValueError):
                request = ctx.request_context.request
        info = getattr(request, "scope", {}).get(AUTH_SCOPE_KEY) if request is not None else None
        if not isinstance(info, TokenInfo) or not (info.covers_namespace(namespace) and info.allows(scope)):
            raise _bridge.NotFoundError()


class _PromptError(MCPError):
    """A prompt's error as the client reads it (the SDK turns any other into "Internal error")."""

    def __init__(self, message: str) -> None:
        super().__init__(INVALID_PARAMS, message)


@contextlib.contextmanager
def _tool_errors(home: Home, error: type[Exception] = ToolError) -> Iterator[None]:
    """A library error as the MCP error a client shows the model: ``<ErrorClass>: <message>``."""
    try:
        yield
    except PhoenixError as exc:
        raise error(f"{type(exc).__name__}: {error_detail(exc, home)}") from exc


def _notes(items: list[dict[str, Any]]) -> list[Note]:
    return [Note(id=int(i["id"]), text=str(i.get("text", ""))) for i in items]


def _task(task: dict[str, Any]) -> TaskOut:
    return TaskOut(
        task_id=str(task["task_id"]),
        title=str(task.get("title", "")),
        status=str(task.get("status", "")),
        assigned_to=task.get("assigned_to"),
        dependencies=[str(d) for d in task.get("dependencies") or []],
    )


def _message(m: dict[str, Any]) -> MessageOut:
    return MessageOut(
        seq=int(m["seq"]),
        sender=str(m["from"]),
        to=str(m["to"]),
        type=str(m["type"]),
        subject=str(m["subject"]),
        body=str(m["body"]),
        ts=str(m["ts"]),
    )


# -- the server ----------------------------------------------------------------------------------


def compact_schema(schema: Any, *, names: bool = False) -> Any:
    """``schema`` with what a model needs no token for left out: pydantic's generated ``title``s,
    and the ``null`` branch and ``default: null`` of an optional parameter (the server still
    validates against the full model). ``names``: ``schema`` is a ``properties`` mapping."""
    if isinstance(schema, list):
        return [compact_schema(item) for item in schema]
    if not isinstance(schema, dict):
        return schema
    if names:
        return {key: compact_schema(value) for key, value in schema.items()}
    out: dict[str, Any] = {}
    for key, value in schema.items():
        if key == "title" and isinstance(value, str):
            continue
        out[key] = compact_schema(value, names=key in ("properties", "$defs"))
    branches = out.get("anyOf")
    if isinstance(branches, list) and len(branches) == 2 and {"type": "null"} in branches and "default" in out:
        (kept,) = [b for b in branches if b != {"type": "null"}]
        if out["default"] is None and isinstance(kept, dict):
            del out["anyOf"], out["default"]
            out = {**kept, **out}
    return out


class _Tools:
    """The tools of one server, their input schemas compacted (``compact_schema``) before the
    server lists them."""

    def __init__(self, *, compact: bool = True) -> None:
        self.tools: list[Tool] = []
        self.compact = compact

    def add(self, annotations: ToolAnnotations) -> Callable[[F], F]:
        def register(fn: F) -> F:
            tool = Tool.from_function(fn, annotations=annotations)
            if self.compact:
                tool.parameters = compact_schema(tool.parameters)
            self.tools.append(tool)
            return fn

        return register


def create_mcp_server(seat: McpSeat, *, compact: bool = True) -> MCPServer:
    """The MCP server for ``seat``: its tools, resources and prompt (see the module's docstring).
    ``compact=False`` lists the input schemas as pydantic makes them (the bench's comparison)."""
    tools = _Tools(compact=compact)
    _agent_tools(tools, seat)
    if seat.team_id is not None:
        _team_tools(tools, seat, seat.team_id)
    server = MCPServer(
        SERVER_NAME,
        tools=tools.tools,
        version=__version__,
        log_level="WARNING",
        instructions=INSTRUCTIONS,
    )
    home = seat.home

    if not seat.http:  # a static resource gets no request context: nothing to authorize it by

        @server.resource("phoenix://brief", name="brief", mime_type="text/markdown")
        def brief_resource() -> str:
            """The agent's brief: the hand-off for the next session."""
            with _tool_errors(home, ResourceError):
                return seat.agent().render_brief()

    @server.resource("phoenix://brief/{agent}", name="agent-brief", mime_type="text/markdown")
    def agent_brief_resource(agent: str, ctx: Context) -> str:
        """An agent's brief, by its id (over HTTP: one the token covers)."""
        with _tool_errors(home, ResourceError):
            seat.authorize(ctx, agent_namespace(agent), "checkpoint:read")
            found = _bridge.open_agent(home, agent, config=seat.config, clock=seat.clock, must_exist=True)
            return found.render_brief()

    @server.prompt()
    def recover(ctx: Context) -> str:
        """Resume the work from Phoenix's brief after a crash, /clear or compaction."""
        with _tool_errors(home, _PromptError):
            seat.authorize(ctx, agent_namespace(seat.agent_id), "checkpoint:read")
            text = seat.agent().render_brief()
        return (
            "You are resuming work a previous session left. Phoenix kept its state; here is the brief:\n\n"
            f"{text}\n\n"
            "Continue from the next actions. Call `set_status` when the task changes, `note` for "
            "open loops and next actions, and `checkpoint` (action create) before risky steps."
        )

    if seat.team_id is not None:
        team_ns = team_namespace(seat.team_id)

        @server.resource("phoenix://inbox/{name}", name="inbox", mime_type="application/json")
        def inbox_resource(name: str, ctx: Context) -> str:
            """A teammate's unread team messages (a look: nothing is marked read)."""
            import json

            with _tool_errors(home, ResourceError):
                seat.authorize(ctx, team_ns, "team:read")
                team, _me = seat.team()
                got = _bridge.team_inbox(team, name)
                return json.dumps([_message(m) for m in got["messages"]], ensure_ascii=False)

    return server


def _agent_tools(tools: _Tools, seat: McpSeat) -> None:
    home = seat.home
    agent_ns = agent_namespace(seat.agent_id)

    @tools.add(_READ)
    def brief(ctx: Context) -> BriefResult:
        """The agent's status, task, open loops, next actions and brief (read this first)."""
        with _tool_errors(home):
            seat.authorize(ctx, agent_ns, "checkpoint:read")
            agent = seat.agent()
            state = agent.state.read()
            return BriefResult(
                agent=agent.id,
                status=state.status,
                task=state.current_task,
                open_loops=_notes(state.open_loops),
                next_actions=_notes(state.next_actions),
                brief=agent.render_brief(state),
            )

    @tools.add(_WRITE)
    def set_status(
        ctx: Context,
        status: Literal["working", "idle", "error"],
        text: Annotated[str | None, Field(description="working: the task; idle: a summary; error: the error")] = None,
    ) -> StatusResult:
        """Set the task status."""
        with _tool_errors(home):
            seat.authorize(ctx, agent_ns, "checkpoint:write")
            agent = seat.agent()
            session = os.environ.get("PHOENIX_SESSION_ID") or None
            event = "state_idle" if status == "idle" and text is None else None
            state = agent.state.set_status(status, text, source="model", session_id=session, event=event)
            return StatusResult(agent=agent.id, status=state.status, task=state.current_task)

    @tools.add(_WRITE)
    def note(
        ctx: Context,
        text: str | None = None,
        kind: Literal["open_loop", "next_action"] = "next_action",
        resolve: Annotated[int | None, Field(description="a note's id to resolve instead")] = None,
    ) -> NoteResult:
        """Add an open loop or next action for the next session, or resolve one by id."""
        with _tool_errors(home):
            seat.authorize(ctx, agent_ns, "checkpoint:write")
            agent = seat.agent()
            if resolve is not None:
                if text is not None:
                    raise UsageError("give text (to add a note) or resolve (an id), not both.")
                _state, item = agent.state.resolve_note(resolve)
                return NoteResult(id=resolve, kind=str(item["kind"]), text=str(item.get("text", "")), resolved=True)
            if text is None:
                raise UsageError("give the note's text, or resolve with a note's id.")
            state, number = agent.state.add_note(kind, text)
            item = next(i for i in state.open_loops + state.next_actions if i["id"] == number)
            return NoteResult(id=number, kind=kind, text=str(item["text"]), resolved=False)

    @tools.add(_WRITE)
    def checkpoint(
        ctx: Context,
        action: Literal["create", "list", "show"] = "list",
        summary: str | None = None,
        ref: Annotated[str | None, Field(description="show: a name or number (default: newest)")] = None,
        limit: Annotated[int, Field(ge=1, le=100)] = 10,
    ) -> CheckpointResult:
        """Create a checkpoint (with a summary), list them (newest first) or show one."""
        with _tool_errors(home):
            seat.authorize(ctx, agent_ns, "checkpoint:write" if action == "create" else "checkpoint:read")
            agent = seat.agent()
            store = agent.checkpoints
            if action == "create":
                info = store.create("routine", summary=summary)
                store.flush()
                return CheckpointResult(checkpoints=[_entry(info.as_dict())], checkpoint=None)
            if action == "list":
                infos = [_entry(i.as_dict()) for i in store.entries(limit=limit)]
                return CheckpointResult(checkpoints=infos, checkpoint=None)
            if ref is None:
                if not agent.exists():
                    raise NotFoundError(f"agent {agent.id!r} has no valid checkpoint.")
                data = _bridge.latest_checkpoint(agent)
                return CheckpointResult(checkpoints=[], checkpoint=data["checkpoint"])
            return CheckpointResult(checkpoints=[], checkpoint=store.read(ref).data)

    @tools.add(_READ)
    def memory_search(
        ctx: Context,
        query: str,
        k: Annotated[int, Field(ge=1, le=20)] = 5,
        tags: list[str] | None = None,
    ) -> MemoryHits:
        """Search the agent's memories: short hits; fetch the ones you need with memory_get."""
        with _tool_errors(home):
            seat.authorize(ctx, agent_ns, "memory:read")
            agent = seat.agent()
            try:
                found = _bridge.memory_recall(seat.memory, agent, query, k=k, tags=tags)
            except _bridge.NotFoundError:
                found = []  # no memory yet: nothing found, not an error for the agent itself
            hits = [
                MemoryHit(
                    id=r["id"],
                    score=round(float(r["score"]), 4),
                    snippet=one_line(r["text"], SNIPPET),
                    tags=list(r["tags"]),
                    created_at=r["created_at"],
                )
                for r in found
            ]
            return MemoryHits(hits=hits)

    @tools.add(_READ)
    def memory_get(ctx: Context, ids: Annotated[list[str], Field(min_length=1, max_length=20)]) -> MemoryRecords:
        """Full memory records by id (from memory_search)."""
        with _tool_errors(home):
            seat.authorize(ctx, agent_ns, "memory:read")
            agent = seat.agent()
            records: list[MemoryRecordOut] = []
            missing: list[str] = []
            for memory_id in dict.fromkeys(ids):
                try:
                    r = _bridge.memory_get(seat.memory, agent, memory_id)
                except _bridge.NotFoundError:
                    missing.append(memory_id)
                    continue
                records.append(
                    MemoryRecordOut(
                        id=r["id"], text=r["text"], tags=r["tags"], metadata=r["metadata"], created_at=r["created_at"]
                    )
                )
            return MemoryRecords(records=records, missing=missing)


def _entry(info: dict[str, Any]) -> CheckpointEntry:
    return CheckpointEntry(
        name=str(info["name"]),
        seq=int(info["seq"]),
        type=str(info["checkpoint_type"]),
        timestamp=str(info["timestamp"]),
        summary=info.get("label"),
    )


def _team_tools(tools: _Tools, seat: McpSeat, team_id: str) -> None:
    home = seat.home
    team_ns = team_namespace(team_id)

    @tools.add(_WRITE)
    def inbox(
        ctx: Context,
        ack: Annotated[list[int] | None, Field(description="seqs of read messages to acknowledge first")] = None,
        limit: Annotated[int, Field(ge=1, le=100)] = 20,
    ) -> InboxResult:
        """Team messages you have not read yet (then marked read); optionally acknowledge some first."""
        with _tool_errors(home):
            seat.authorize(ctx, team_ns, "team:write")
            team, me = seat.team()
            acked = [int(_bridge.team_ack(team, seq, me)["seq"]) for seq in dict.fromkeys(ack or [])]
            got = _bridge.team_inbox(team, me, limit=limit)
            if got["through_seq"]:
                _bridge.team_delivered(team, me, got["through_seq"])
            return InboxResult(messages=[_message(m) for m in got["messages"]], acked=acked)

    @tools.add(_WRITE)
    def send(
        ctx: Context,
        to: Annotated[str, Field(description="a teammate, or * for all")],
        subject: str,
        body: str,
        type: Literal["info", "question", "challenge", "resolution"] = "info",
        msg_id: Annotated[str | None, Field(description="idempotency key")] = None,
    ) -> SendResult:
        """Send a team message."""
        with _tool_errors(home):
            seat.authorize(ctx, team_ns, "team:write")
            team, me = seat.team()
            sent = _bridge.team_send(team, me, to, type=type, subject=subject, body=body, msg_id=msg_id)
            message = sent["message"]
            return SendResult(seq=int(message["seq"]), msg_id=str(message["msg_id"]), duplicate=sent["duplicate"])

    @tools.add(_WRITE)
    def tasks(
        ctx: Context,
        claim: Annotated[str | None, Field(description="a task id, or 'next': claim it for yourself")] = None,
    ) -> TasksResult:
        """The team's ready tasks; with claim, take one (one claimer wins)."""
        with _tool_errors(home):
            seat.authorize(ctx, team_ns, "team:read" if claim is None else "team:write")
            team, me = seat.team()
            claimed = None
            if claim == "next":
                task = team.claim_next(me)
                if task is None:
                    raise UsageError(f"no task of team {team.id} is ready to claim.")
                claimed = _task(task)
            elif claim is not None:
                claimed = _task(_bridge.team_claim(team, claim, me))
            return TasksResult(ready=[_task(t) for t in team.ready()], claimed=claimed)


# -- running -------------------------------------------------------------------------------------


def serve_stdio(seat: McpSeat) -> None:
    """Serve ``seat`` on standard input and output until the client closes them."""
    create_mcp_server(seat).run("stdio")


def serve_http(seat: McpSeat, *, host: str, port: int, log_level: str = "info") -> None:
    """Serve ``seat`` over streamable HTTP at ``http://host:port/mcp``, with the HTTP bridge's
    bearer tokens (required as soon as the home has one) and body limit."""
    import uvicorn

    uvicorn.run(create_http_app(seat, host=host), host=host, port=port, log_level=log_level)


def create_http_app(seat: McpSeat, *, host: str = "127.0.0.1") -> Any:
    """The ASGI app of ``serve_http``: the MCP app behind ``Authentication`` and ``BodyLimit``."""
    from phoenix_protocol.server._common import Authentication, BodyLimit
    from phoenix_protocol.store._tokens import TokenStore

    if not seat.http:
        raise UsageError("create_http_app needs a seat made with http=True.")
    app = create_mcp_server(seat).streamable_http_app(host=host)
    tokens = TokenStore(seat.home, config=seat.config, clock=seat.clock)
    limited = BodyLimit(app, max_bytes=seat.config.server_max_body_bytes)
    return Authentication(limited, tokens=tokens, require=None, home=seat.home)
