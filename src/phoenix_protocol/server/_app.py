"""The memory bridge over HTTP (seed 002): ``phx serve`` runs ``create_app(home)`` under uvicorn.

Endpoints (namespace ``agent:<agent_id>`` or ``team:<team_id>``; scope the token needs)::

    POST   /checkpoint/{agent_id}               checkpoint:write   take a (session) checkpoint
    GET    /checkpoint/{agent_id}/latest        checkpoint:read    the newest valid checkpoint
    POST   /restore/{agent_id}                  checkpoint:write   start a session from a checkpoint
    GET    /sessions/{agent_id}                 checkpoint:read    every session
    POST   /memory/{agent_id}                   memory:write       store a memory
    POST   /memory/{agent_id}/recall            memory:read        recall, ranked (BM25)
    GET    /memory/{agent_id}                   memory:read        list, newest first
    GET    /memory/{agent_id}/{memory_id}       memory:read        one memory
    DELETE /memory/{agent_id}/{memory_id}       memory:write       delete one memory
    GET    /identity/{agent_id}                 identity:read      identity.yaml
    PATCH  /identity/{agent_id}                 identity:write     set a value in the mutable section
    POST   /identity/{agent_id}/entries         identity:write     add a belief, skill or relationship
    POST   /teams/{team_id}/messages            team:write         send (idempotent by msg_id)
    GET    /teams/{team_id}/inbox/{name}        team:read          messages not yet handed to NAME
    POST   /teams/{team_id}/inbox/{name}/delivered  team:write     confirm they were handed over
    POST   /teams/{team_id}/messages/{seq}/ack  team:write         acknowledge a message
    GET    /teams/{team_id}/tasks               team:read          every task
    POST   /teams/{team_id}/tasks/{task_id}/claim  team:write      claim a task (atomic)
    POST   /teams/{team_id}/heartbeat/{name}    team:write         record a heartbeat
    GET    /healthz, /readyz, /openapi.json, /docs                 no token

Order of checks, each before anything is read or written: the ``Authorization`` header (401 with
``WWW-Authenticate: Bearer`` when missing, malformed, unknown, wrong, revoked or expired), the
body size (413, from ``Content-Length`` or while streaming), the body and path parameters (422;
ids through ``validate_id``), then the token's namespaces and scopes: a token that does not cover
the namespace or the operation gets exactly the 404 a namespace that does not exist gets. A home
without any token serves without authentication; ``phx serve`` refuses a non-loopback address
unless the home has an active token.

Every error is an RFC 9457 problem (``application/problem+json``: ``type``, ``title``,
``status``, ``detail``, ``instance``, plus ``error``, the Phoenix error class, and for 422 the
``errors``). Library errors map to statuses: usage 400, not found 404, refused 409, a lock held
too long 503 (``Retry-After``), corrupt or newer state and storage failures 500.
Answers are valid UTF-8 (``Answer``): a lone surrogate read from a file written by hand is U+FFFD.

Needs the ``[server]`` extra (FastAPI and uvicorn).
"""

from __future__ import annotations

import logging
import math
import os
from collections.abc import Awaitable, Callable, MutableMapping
from http import HTTPStatus
from typing import TYPE_CHECKING, Annotated, Any, Literal, TypeVar

try:
    from fastapi import Depends, FastAPI, Path, Query, Request
    from fastapi.exceptions import RequestValidationError
    from fastapi.responses import JSONResponse, Response
    from fastapi.routing import APIRoute
    from pydantic import (
        AfterValidator,
        BaseModel,
        BeforeValidator,
        ConfigDict,
        Field,
        WithJsonSchema,
        model_validator,
    )
    from starlette.convertors import Convertor, register_url_convertor
    from starlette.datastructures import Headers
    from starlette.exceptions import HTTPException as StarletteHTTPException
    from starlette.routing import Match
except ImportError as _exc:  # pragma: no cover - exercised by hand without the extra
    raise ImportError(
        "the Phoenix HTTP service needs FastAPI and uvicorn: pip install 'phoenix-protocol[server]'"
    ) from _exc

from phoenix_protocol._version import __version__
from phoenix_protocol.core._clock import Clock, system_clock
from phoenix_protocol.core._config import Config, load_config
from phoenix_protocol.core._errors import (
    ConfigError,
    InvalidIdError,
    LockTimeoutError,
    NotFoundError,
    PhoenixError,
    RefusedError,
    UsageError,
)
from phoenix_protocol.core._home import Home
from phoenix_protocol.core._ids import MAX_ID_LENGTH, validate_id, validate_session_id
from phoenix_protocol.core._jsonio import valid_text
from phoenix_protocol.services import _bridge
from phoenix_protocol.services._bridge import NOT_FOUND
from phoenix_protocol.store._memory import MAX_TEXT, MEMORY_ID_REGEX, open_memory_store
from phoenix_protocol.store._teams import TeamNotFoundError
from phoenix_protocol.store._tokens import ALL, TokenInfo, TokenStore, agent_namespace, team_namespace

if TYPE_CHECKING:
    from phoenix_protocol.services._agent import Agent
    from phoenix_protocol.store._teams import Team

T = TypeVar("T")

__all__ = ["PUBLIC_PATHS", "Answer", "check_bind", "create_app", "is_loopback", "serve"]

log = logging.getLogger("phoenix_protocol.server")

PUBLIC_PATHS = frozenset(("/healthz", "/readyz", "/openapi.json", "/docs", "/docs/oauth2-redirect", "/redoc"))
"""Paths served without a token (nothing in them belongs to a namespace)."""
AUTH_SCOPE_KEY = "phoenix.auth"
PROBLEM_TYPE = "application/problem+json"
MAX_JSON_DEPTH = 32
ID_PATTERN = rf"^[A-Za-z0-9][A-Za-z0-9._-]{{0,{MAX_ID_LENGTH - 1}}}$"
LONG_ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$"
# A checkpoint's file name, or its number (seq) as ``7`` or ``#7``.
CHECKPOINT_REF_PATTERN = (
    rf"^(?:{ID_PATTERN[1:-1]}_[0-9]{{17}}-[0-9]{{1,12}}_(routine|pre-operation|recovery|session)\.checkpoint"
    r"|#?[0-9]{1,12})$"
)
_OPEN = TokenInfo("open", [ALL], [ALL], label="no tokens configured")


# -- problem details -------------------------------------------------------------------------


class Answer(JSONResponse):
    """Every JSON answer of the service, problems included: Starlette's ``JSONResponse``, except
    that text UTF-8 cannot encode is answered with U+FFFD (``valid_text``) instead of failing with
    500. Only a lone surrogate is such text, and only a file written by hand holds one (a
    ``\\udXXX`` escape in ``identity.yaml``, ``state.json``, a team's files): requests refuse it."""

    def render(self, content: Any) -> bytes:
        try:
            return super().render(content)
        except UnicodeEncodeError:
            import json

            text = json.dumps(content, ensure_ascii=False, allow_nan=False, indent=None, separators=(",", ":"))
            return valid_text(text).encode("utf-8")


def problem(
    status: int,
    detail: str,
    *,
    instance: str,
    error: str,
    headers: dict[str, str] | None = None,
    **extra: Any,
) -> Answer:
    """An RFC 9457 problem response. ``type`` is ``about:blank``: the status says what kind of
    problem it is, ``error`` names the Phoenix error class."""
    body = {
        "type": "about:blank",
        "title": HTTPStatus(status).phrase,
        "status": status,
        "detail": detail,
        "instance": instance,
        "error": error,
        **extra,
    }
    return Answer(body, status_code=status, headers=headers, media_type=PROBLEM_TYPE)


def status_for(exc: PhoenixError) -> int:
    """The HTTP status of a library error."""
    if isinstance(exc, NotFoundError):
        return 404
    if isinstance(exc, InvalidIdError):
        return 422
    if isinstance(exc, ConfigError):
        return 500  # the server's configuration, not the request
    if isinstance(exc, UsageError):
        return 400
    if isinstance(exc, LockTimeoutError):
        return 503
    if isinstance(exc, RefusedError):
        return 409
    return 500


def _unauthorized(instance: str, *, presented: bool) -> Answer:
    challenge = 'Bearer realm="phoenix"' + (', error="invalid_token"' if presented else "")
    return problem(
        401,
        "A valid bearer token is required (Authorization: Bearer phx_…); it was missing, "
        "malformed, unknown, revoked or expired.",
        instance=instance,
        error="AuthenticationError",
        headers={"WWW-Authenticate": challenge},
    )


# -- ASGI middleware: authentication and the body limit ----------------------------------------

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


class Authentication:
    """Checks the bearer token of every request outside ``PUBLIC_PATHS`` before the body is read;
    puts the token's ``TokenInfo`` in the scope for the routes to authorize against."""

    def __init__(self, app: ASGIApp, *, tokens: TokenStore, require: bool | None, home: Home) -> None:
        self.app = app
        self.tokens = tokens
        self.require = require
        self.home = home

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] in PUBLIC_PATHS:
            await self.app(scope, receive, send)
            return
        header = Headers(scope=scope).get("authorization")
        try:
            required = self.require if self.require is not None else self.tokens.configured()
            info: TokenInfo | None = _OPEN
            if required:
                info = None
                scheme, _, credentials = (header or "").partition(" ")
                if scheme.lower() == "bearer" and credentials.strip():
                    info = self.tokens.verify(credentials.strip())
        except PhoenixError as exc:
            log.error("token store: %s", exc)
            response = problem(
                500,
                _bridge.scrub(str(exc), self.home),
                instance=scope["path"],
                error=type(exc).__name__,
            )
            await response(scope, receive, send)
            return
        if info is None:
            await _unauthorized(scope["path"], presented=header is not None)(scope, receive, send)
            return
        scope[AUTH_SCOPE_KEY] = info
        await self.app(scope, receive, send)


class BodyLimit:
    """Refuses a body larger than ``max_bytes`` with 413: at once from ``Content-Length``, or as
    soon as the bytes streamed so far exceed it (the body is never read whole first)."""

    def __init__(self, app: ASGIApp, *, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    def _too_large(self) -> str:
        return f"The request body is larger than this server accepts ({self.max_bytes} bytes)."

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        length = Headers(scope=scope).get("content-length")
        if length is not None:
            if not length.strip().isdigit():
                response = problem(400, "Content-Length is not a number.", instance=scope["path"], error="UsageError")
                await response(scope, receive, send)
                return
            if int(length) > self.max_bytes:
                response = problem(
                    413, self._too_large(), instance=scope["path"], error="UsageError", headers={"Connection": "close"}
                )
                await response(scope, receive, send)
                return
        received = 0

        async def limited() -> Message:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > self.max_bytes:
                    # FastAPI re-raises an HTTPException met while reading the body; the handler
                    # below turns it into the same 413 problem.
                    raise StarletteHTTPException(413, self._too_large(), headers={"Connection": "close"})
            return message

        await self.app(scope, limited, send)


# -- validated input -----------------------------------------------------------------------------


def _check_text(value: str) -> None:
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError("text must be valid Unicode (no lone surrogates)") from None


def check_json(value: T) -> T:
    """Refuse what JSON parsers accept but Phoenix cannot store: lone surrogates, NaN and
    infinities, nesting deeper than ``MAX_JSON_DEPTH``. Iterative: no recursion on deep input."""
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if depth > MAX_JSON_DEPTH:
            raise ValueError(f"JSON nested deeper than {MAX_JSON_DEPTH} levels")
        if isinstance(item, str):
            _check_text(item)
        elif isinstance(item, float):
            if not math.isfinite(item):
                raise ValueError("NaN and infinities are not JSON")
        elif isinstance(item, dict):
            for key, child in item.items():
                _check_text(str(key))
                stack.append((child, depth + 1))
        elif isinstance(item, (list, tuple)):
            stack.extend((child, depth + 1) for child in item)
    return value


def _id_validator(kind: str, max_length: int = MAX_ID_LENGTH) -> AfterValidator:
    return AfterValidator(lambda value: validate_id(value, kind, max_length=max_length))


ID_DOC = "1-64 characters from A-Z a-z 0-9 . _ - starting with a letter or digit."
AgentIdParam = Annotated[
    str,
    Path(pattern=ID_PATTERN, max_length=MAX_ID_LENGTH, description="Agent id: " + ID_DOC),
    _id_validator("agent id"),
]
TeamIdParam = Annotated[
    str, Path(pattern=ID_PATTERN, max_length=MAX_ID_LENGTH, description="Team id: " + ID_DOC), _id_validator("team id")
]
NameParam = Annotated[
    str,
    Path(pattern=ID_PATTERN, max_length=MAX_ID_LENGTH, description="Teammate name: " + ID_DOC),
    _id_validator("teammate name"),
]
MemoryIdParam = Annotated[str, Path(pattern=f"^{MEMORY_ID_REGEX}$", description="Memory id (mem-…).")]


class _MemoryIdConvertor(Convertor[str]):
    """``{memory_id:memory_id}`` in a route: only a well-formed memory id matches, so that
    ``/memory/{agent_id}/recall`` is never read as the memory called ``recall``."""

    regex = MEMORY_ID_REGEX

    def convert(self, value: str) -> str:
        return value

    def to_string(self, value: str) -> str:
        return value


register_url_convertor("memory_id", _MemoryIdConvertor())
TaskIdParam = Annotated[
    str, Path(pattern=ID_PATTERN, max_length=MAX_ID_LENGTH, description="Task id."), _id_validator("task id")
]
TeammateName = Annotated[str, Field(pattern=ID_PATTERN, max_length=MAX_ID_LENGTH), _id_validator("teammate name")]
SessionId = Annotated[str, Field(pattern=LONG_ID_PATTERN, max_length=128), AfterValidator(validate_session_id)]
MessageId = Annotated[str, Field(pattern=LONG_ID_PATTERN, max_length=128), _id_validator("message id", 128)]
Tag = Annotated[str, Field(min_length=1, max_length=64)]
ShortText = Annotated[str, Field(max_length=2000)]


def _json_int(value: object) -> object:
    """JSON Schema's integer: ``3.0`` is one (strict pydantic would refuse it), ``true`` and
    ``"3"`` are not (lax pydantic would take them)."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


class _Part(BaseModel):
    """Strict: JSON types as the schema says them (``false`` is not ``0``, ``"1"`` is not ``1``)."""

    model_config = ConfigDict(extra="forbid", strict=True)


class _Request(_Part):
    """A request body: unknown fields are refused, and so is JSON Phoenix cannot store."""

    @model_validator(mode="before")
    @classmethod
    def _storable(cls, data: object) -> object:
        return check_json(data)


class ContextSection(_Part):
    """Seed 002's ``context``; fields given replace what Phoenix collects."""

    current_focus: ShortText | None = None
    active_project_ids: list[Annotated[str, Field(max_length=200)]] | None = Field(default=None, max_length=100)
    conversation_summary: Annotated[str, Field(max_length=20_000)] | None = None
    pending_items: list[ShortText] | None = Field(default=None, max_length=200)


class WorkingMemorySection(_Part):
    """Seed 002's ``working_memory``: temporary state that is not long-term memory."""

    scratchpad: Annotated[str, Field(max_length=100_000)] | None = None
    open_files: list[Annotated[str, Field(max_length=4096)]] | None = Field(default=None, max_length=1000)
    context_stack: list[ShortText] | None = Field(default=None, max_length=200)


class Belief(_Part):
    subject: Annotated[str, Field(min_length=1, max_length=500)]
    confidence: Annotated[float, Field(ge=0, le=1, allow_inf_nan=False)]


class Skill(_Part):
    name: Annotated[str, Field(min_length=1, max_length=200)]
    level: Annotated[str, Field(max_length=100)]


class Relationship(_Part):
    entity: Annotated[str, Field(min_length=1, max_length=200)]
    type: Annotated[str, Field(max_length=100)]


class DriftChecks(_Part):
    passed: Annotated[int, Field(ge=0, le=1_000_000), BeforeValidator(_json_int)] = 0
    failed: Annotated[int, Field(ge=0, le=1_000_000), BeforeValidator(_json_int)] = 0


class IdentityUpdatesSection(_Part):
    """Seed 002's ``identity_updates``: what changed in the identity during the session."""

    new_beliefs: list[Belief] | None = Field(default=None, max_length=200)
    new_skills: list[Skill] | None = Field(default=None, max_length=200)
    new_relationships: list[Relationship] | None = Field(default=None, max_length=200)
    drift_checks: DriftChecks | None = None


class CheckpointRequest(_Request):
    """``POST /checkpoint/{agent_id}``: a summary, and optionally seed 002's sections."""

    summary: Annotated[str, Field(min_length=1, max_length=2000, description="What was done and what remains.")]
    checkpoint_type: Literal["session", "routine", "recovery"] = Field(
        default="session", description="A session checkpoint ends the session (seed 002's checkpoint)."
    )
    context: ContextSection | None = None
    working_memory: WorkingMemorySection | None = None
    identity_updates: IdentityUpdatesSection | None = None
    extensions: (
        Annotated[
            dict[Annotated[str, Field(pattern=ID_PATTERN)], Any],
            Field(max_length=16),
            # Only keys matching the pattern: pydantic alone would leave other keys allowed.
            WithJsonSchema(
                {
                    "type": "object",
                    "maxProperties": 16,
                    "patternProperties": {ID_PATTERN: {}},
                    "additionalProperties": False,
                }
            ),
        ]
        | None
    ) = Field(default=None, description="Extra sections, stored under `extensions`.")


class CheckpointInfoModel(BaseModel):
    name: str
    seq: int
    checkpoint_type: str
    timestamp: str
    timestamp_ms: int
    label: str | None
    operation_id: str | None
    size: int


class CheckpointResponse(BaseModel):
    agent_id: str
    checkpoint: CheckpointInfoModel


class LatestCheckpointResponse(BaseModel):
    agent_id: str
    name: str
    checkpoint: dict[str, Any] = Field(description="The checkpoint envelope (checksum verified).")
    problems: list[str] = Field(description="Damaged newer checkpoints that were skipped.")


class RestoreRequest(_Request):
    """``POST /restore/{agent_id}``: all optional."""

    checkpoint: Annotated[str, Field(pattern=CHECKPOINT_REF_PATTERN, max_length=255)] | None = Field(
        default=None,
        description='A checkpoint name, or its number (seq) as the string "7" or "#7" (default: the newest valid one).',
    )
    force: bool = Field(default=False, description="Overwrite the current task and notes with the checkpoint's.")
    session_id: SessionId | None = Field(default=None, description="The new session's id (default: a new UUID).")


class RestoreResponse(BaseModel):
    agent_id: str
    session_id: str
    started_at: str
    identity: dict[str, Any] | None
    checkpoint: str | None
    restored: dict[str, Any] = Field(description="What each section's restorer handed back (context, working memory).")
    problems: list[str]


class SessionModel(BaseModel):
    session_id: str
    status: Literal["open", "ended", "interrupted"] = Field(
        description="ended; open (the newest, not ended yet); interrupted (never ended, and a later session started)."
    )
    started_at: str | None = None
    ended_at: str | None = None
    duration_seconds: int | None = None
    checkpoint: str | None = None
    summary: str | None = None
    restored_from: str | None = None


class SessionsResponse(BaseModel):
    agent_id: str
    sessions: list[SessionModel]


class MemoryStoreRequest(_Request):
    """``POST /memory/{agent_id}``."""

    text: Annotated[str, Field(min_length=1, max_length=MAX_TEXT)]
    tags: list[Tag] = Field(default_factory=list, max_length=32)
    metadata: dict[str, Any] | None = None


class MemoryModel(BaseModel):
    id: str
    namespace: str
    text: str
    tags: list[str]
    metadata: dict[str, Any]
    created_at: str


class ScoredMemoryModel(MemoryModel):
    score: float = Field(description="Relevance (BM25 on SQLite, ts_rank_cd on PostgreSQL): higher is better.")


class MemoryResponse(BaseModel):
    agent_id: str
    memory: MemoryModel


class RecallRequest(_Request):
    """``POST /memory/{agent_id}/recall``."""

    query: Annotated[str, Field(min_length=1, max_length=1000)]
    k: Annotated[int, Field(ge=1, le=100), BeforeValidator(_json_int)] = 5
    tags: list[Tag] | None = Field(default=None, max_length=32)


class RecallResponse(BaseModel):
    agent_id: str
    query: str
    results: list[ScoredMemoryModel]


class MemoryListResponse(BaseModel):
    agent_id: str
    memories: list[MemoryModel]
    limit: int
    offset: int


class IdentityModel(BaseModel):
    immutable: dict[str, Any]
    mutable: dict[str, Any]


class IdentityResponse(BaseModel):
    agent_id: str
    identity: IdentityModel


class IdentitySetRequest(_Request):
    """``PATCH /identity/{agent_id}``: one value in the mutable section."""

    path: Annotated[
        str,
        Field(
            min_length=1,
            max_length=200,
            pattern=r"^[A-Za-z0-9_][A-Za-z0-9_-]*(\.[A-Za-z0-9_][A-Za-z0-9_-]*)*$",
            description="A dotted path in the mutable section, e.g. state.current_focus.",
        ),
    ]
    value: Any = Field(description="Any JSON value.")


class IdentityEntryRequest(_Request):
    """``POST /identity/{agent_id}/entries``: add (or update) a belief, skill or relationship."""

    kind: Literal["belief", "skill", "relationship"]
    name: Annotated[str, Field(min_length=1, max_length=500, description="The subject, skill or entity.")]
    confidence: Annotated[float, Field(ge=0, le=1, allow_inf_nan=False)] | None = None
    level: Annotated[str, Field(max_length=100)] | None = None
    type: Annotated[str, Field(max_length=100)] | None = None


class SendRequest(_Request):
    """``POST /teams/{team_id}/messages``."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    sender: TeammateName = Field(alias="from")
    to: Annotated[str, Field(pattern=rf"^(\*|{ID_PATTERN[1:-1]})$", max_length=MAX_ID_LENGTH)] = Field(
        description="A teammate, or * for every teammate but the sender."
    )
    type: Literal["info", "question", "challenge", "resolution"] = "info"
    subject: Annotated[str, Field(min_length=1, max_length=1024)]
    body: Annotated[str, Field(max_length=65536)]
    msg_id: MessageId | None = Field(default=None, description="Idempotency key: the same id is stored once.")


class MessageModel(BaseModel):
    model_config = ConfigDict(populate_by_name=True)

    seq: int
    msg_id: str
    sender: str = Field(alias="from")
    to: str
    type: str
    subject: str
    body: str
    ts: str
    ts_ms: int
    acked_by: list[str]


class SendResponse(BaseModel):
    team_id: str
    message: MessageModel
    duplicate: bool


class InboxResponse(BaseModel):
    team_id: str
    name: str
    messages: list[MessageModel]
    through_seq: int = Field(description="Confirm with POST …/delivered once the messages are handed over.")


class DeliveredRequest(_Request):
    through_seq: Annotated[int, Field(ge=0, le=2**53), BeforeValidator(_json_int)]


class DeliveredResponse(BaseModel):
    team_id: str
    name: str
    through_seq: int


class AckRequest(_Request):
    name: TeammateName


class AckResponse(BaseModel):
    team_id: str
    seq: int
    acked_by: list[str]


class TaskModel(BaseModel):
    model_config = ConfigDict(extra="allow")

    task_id: str
    title: str
    status: str
    assigned_to: str | None = None
    dependencies: list[str] = Field(default_factory=list)


class TasksResponse(BaseModel):
    team_id: str
    tasks: list[TaskModel]


class ClaimRequest(_Request):
    name: TeammateName


class ClaimResponse(BaseModel):
    team_id: str
    task: TaskModel


class HeartbeatRequest(_Request):
    session_id: SessionId | None = None


class HeartbeatResponse(BaseModel):
    team_id: str
    name: str
    heartbeat: dict[str, Any]


class HealthResponse(BaseModel):
    status: Literal["ok"]
    version: str


class ReadyResponse(BaseModel):
    status: Literal["ready"]


class Problem(BaseModel):
    """An RFC 9457 problem detail."""

    model_config = ConfigDict(extra="allow")

    type: str = "about:blank"
    title: str
    status: int
    detail: str
    instance: str
    error: str = Field(description="The Phoenix error class (AuthenticationError, NotFoundError, UsageError, ...).")


# -- the application ---------------------------------------------------------------------------


def _authorize(request: Request, namespace: str, scope: str) -> TokenInfo:
    """The one check for both "not yours" and "not there": a token that does not cover the
    namespace or the operation gets the 404 of a namespace that does not exist."""
    info = request.scope.get(AUTH_SCOPE_KEY)
    if not isinstance(info, TokenInfo) or not (info.covers_namespace(namespace) and info.allows(scope)):
        raise _bridge.NotFoundError()
    return info


def agent_access(scope: str) -> Callable[[Request, str], str]:
    """A dependency: the path's agent id, once the token may do ``scope`` in that agent's namespace."""

    def dependency(request: Request, agent_id: AgentIdParam) -> str:
        _authorize(request, agent_namespace(agent_id), scope)
        return agent_id

    return dependency


def team_access(scope: str) -> Callable[[Request, str], str]:
    """A dependency: the path's team id, once the token may do ``scope`` in that team's namespace."""

    def dependency(request: Request, team_id: TeamIdParam) -> str:
        _authorize(request, team_namespace(team_id), scope)
        return team_id

    return dependency


def _validation_errors(exc: RequestValidationError) -> tuple[str, list[dict[str, Any]]]:
    errors = []
    for err in exc.errors():
        loc = [str(part) for part in err.get("loc", ())]
        errors.append({"loc": loc, "msg": str(err.get("msg", "")), "type": str(err.get("type", ""))})
    first = errors[0] if errors else {"loc": [], "msg": "invalid request"}
    where = ".".join(first["loc"])
    detail = f"{where}: {first['msg']}" if where else str(first["msg"])
    if len(errors) > 1:
        detail += f" (and {len(errors) - 1} more)"
    return detail, errors


_ERROR_RESPONSES = {
    "400": "Bad request: the input is valid JSON but Phoenix cannot do this (see detail).",
    "401": "No valid bearer token: missing, malformed, unknown, revoked or expired.",
    "404": "No such namespace or resource, or the token does not cover it (the same answer).",
    "409": "Refused on purpose: a claim conflict, a sealed identity core, a completed team.",
    "413": "The body is larger than the server accepts.",
    "422": "A body or path parameter is invalid.",
    "500": "The server's state could not be read or written (run `phx doctor` on the server).",
    "503": "The state was busy (a lock held too long): retry.",
}

_RESTORE_REFUSED = (
    "Refused on purpose (CheckpointOwnershipError), only for a planted checkpoint: the checkpoint asked "
    "for, by a name of this agent's own (`zero_…`) or by its number, is a file in the agent's "
    "checkpoints directory whose content is another agent's checkpoint. It is never restored; a "
    "restore without `checkpoint` skips it and lists it in `problems`. (Another agent's checkpoint "
    "name is 404, as an unknown one; a file whose content is another checkpoint of this agent is "
    "damage: 500.)"
)
"""The only 409 of ``POST /restore/{agent_id}`` (``_ERROR_RESPONSES``' cases do not arise there)."""


def _allowed_methods(app: FastAPI, request: Request) -> str:
    """Every method some route serves at the request's path (Starlette names only the first
    route's, and the same path has several routes here)."""
    methods: set[str] = set()
    for route in app.router.routes:
        if isinstance(route, APIRoute) and route.matches(request.scope)[0] != Match.NONE:
            methods |= route.methods or set()
    return ", ".join(sorted(methods))


def _customize_openapi(app: FastAPI) -> Callable[[], dict[str, Any]]:
    """Problem details for every error response, and the bearer scheme on every protected route."""
    original = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is not None:
            return app.openapi_schema
        schema = original()
        components = schema.setdefault("components", {})
        schemas = components.setdefault("schemas", {})
        schemas["Problem"] = Problem.model_json_schema(ref_template="#/components/schemas/{model}")
        for name in ("HTTPValidationError", "ValidationError"):
            schemas.pop(name, None)
        components["securitySchemes"] = {
            "bearerAuth": {"type": "http", "scheme": "bearer", "description": "A token from `phx token create`."}
        }
        problem_content = {PROBLEM_TYPE: {"schema": {"$ref": "#/components/schemas/Problem"}}}
        # An error response a route declares itself (``responses=``) says what it means there.
        declared: dict[tuple[str, str], dict[int | str, dict[str, Any]]] = {
            (route.path_format, method.lower()): route.responses
            for route in app.routes
            if isinstance(route, APIRoute)
            for method in route.methods or ()
        }
        for path, operations in schema.get("paths", {}).items():
            for method, operation in operations.items():
                own = declared.get((path, method), {})
                responses = operation.setdefault("responses", {})
                codes = ["500"]
                if path not in PUBLIC_PATHS:
                    operation["security"] = [{"bearerAuth": []}]
                    codes += ["400", "401", "404", "409", "422", "503"]
                    if method in ("post", "put", "patch"):
                        codes.append("413")
                elif path == "/readyz":
                    codes.append("503")
                for code in codes:
                    description = own.get(int(code), {}).get("description") or _ERROR_RESPONSES[code]
                    responses[code] = {"description": description, "content": problem_content}
        app.openapi_schema = schema
        return schema

    return openapi


def create_app(
    home: Home,
    *,
    clock: Clock = system_clock,
    require_tokens: bool | None = None,
    config: Config | None = None,
    max_body_bytes: int | None = None,
) -> FastAPI:
    """The memory bridge for ``home``.

    ``require_tokens``: ``True`` refuses every request without a valid token; ``False`` serves
    without authentication (tests); ``None`` (default) requires tokens as soon as the home has any
    (``phx token create``), checked on every request.
    """
    cfg = config if config is not None else load_config(home.root, project_root=home.project_root)
    limit = max_body_bytes if max_body_bytes is not None else cfg.server_max_body_bytes
    tokens = TokenStore(home, clock=clock, config=cfg)
    memory = open_memory_store(home, config=cfg, clock=clock)
    app = FastAPI(
        title="Phoenix Protocol memory bridge",
        version=__version__,
        description=(
            "Checkpoints, sessions, namespaced memory, identity and team operations of one Phoenix "
            "home (seed 002's memory-bridge). Errors are RFC 9457 problem details."
        ),
        default_response_class=Answer,
    )
    app.add_middleware(BodyLimit, max_bytes=limit)
    app.add_middleware(Authentication, tokens=tokens, require=require_tokens, home=home)

    def agent(agent_id: str, *, must_exist: bool = False) -> Agent:
        return _bridge.open_agent(home, agent_id, config=cfg, clock=clock, must_exist=must_exist)

    def team(team_id: str) -> Team:
        return _bridge.open_team(home, team_id, clock=clock)

    # -- errors --

    @app.exception_handler(PhoenixError)
    async def phoenix_error(request: Request, exc: PhoenixError) -> Response:
        status = status_for(exc)
        detail = _bridge.scrub(" ".join(str(exc).split()), home) or type(exc).__name__
        if isinstance(exc, TeamNotFoundError):
            detail = NOT_FOUND  # its message lists the teams that exist
        if status >= 500:
            log.error("%s %s: %s: %s", request.method, request.url.path, type(exc).__name__, exc)
        headers = {"Retry-After": "1"} if status == 503 else None
        error = "NotFoundError" if status == 404 else type(exc).__name__
        return problem(status, detail, instance=request.url.path, error=error, headers=headers)

    @app.exception_handler(RequestValidationError)
    async def validation_error(request: Request, exc: RequestValidationError) -> Response:
        detail, errors = _validation_errors(exc)
        return problem(422, detail, instance=request.url.path, error="ValidationError", errors=errors)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException) -> Response:
        status = exc.status_code
        names = {404: "NotFoundError", 413: "UsageError", 405: "UsageError"}
        detail = exc.detail if isinstance(exc.detail, str) else HTTPStatus(status).description
        headers = dict(exc.headers) if exc.headers else {}
        if status == 404:
            detail = "No such endpoint (see /openapi.json)."
        elif status == 405:
            headers["Allow"] = _allowed_methods(app, request)
        return problem(
            status,
            detail,
            instance=request.url.path,
            error=names.get(status, "UsageError" if status < 500 else "OperationError"),
            headers=headers or None,
        )

    @app.exception_handler(Exception)
    async def unexpected(request: Request, exc: Exception) -> Response:
        log.exception("%s %s failed", request.method, request.url.path)
        return problem(500, "Internal error; see the server's log.", instance=request.url.path, error="OperationError")

    # -- health --

    @app.get("/healthz", response_model=HealthResponse, tags=["health"])
    def healthz() -> dict[str, Any]:
        """The process is up."""
        return {"status": "ok", "version": __version__}

    @app.get("/readyz", response_model=ReadyResponse, tags=["health"])
    def readyz(request: Request) -> Response | dict[str, str]:
        """Ready when the home exists and is writable, and its token store can be read."""
        ok = os.path.isdir(home.root) and os.access(home.root, os.W_OK | os.X_OK)
        if ok:
            try:
                tokens.configured()
            except PhoenixError:
                ok = False
        if not ok:
            return problem(
                503, "The Phoenix home is not writable or not readable.", instance="/readyz", error="StorageError"
            )
        return {"status": "ready"}

    # -- checkpoints and sessions --

    @app.post("/checkpoint/{agent_id}", status_code=201, response_model=CheckpointResponse, tags=["checkpoints"])
    def post_checkpoint(
        agent_id: Annotated[str, Depends(agent_access("checkpoint:write"))], body: CheckpointRequest
    ) -> dict[str, Any]:
        """Take a checkpoint (default: a session checkpoint, which ends the session: seed 002)."""
        sections = {
            name: part.model_dump(exclude_none=True)
            for name, part in (
                ("context", body.context),
                ("working_memory", body.working_memory),
                ("identity_updates", body.identity_updates),
            )
            if part is not None
        }
        info = _bridge.take_checkpoint(
            agent(agent_id),
            body.summary,
            sections=sections,
            extensions=body.extensions,
            checkpoint_type=body.checkpoint_type,
        )
        return {"agent_id": agent_id, "checkpoint": info}

    @app.get("/checkpoint/{agent_id}/latest", response_model=LatestCheckpointResponse, tags=["checkpoints"])
    def get_latest_checkpoint(
        agent_id: Annotated[str, Depends(agent_access("checkpoint:read"))],
        checkpoint_type: Annotated[
            Literal["routine", "pre-operation", "recovery", "session"] | None, Query(alias="type")
        ] = None,
    ) -> dict[str, Any]:
        """The newest valid checkpoint; damaged newer ones are skipped and listed in ``problems``."""
        return {"agent_id": agent_id, **_bridge.latest_checkpoint(agent(agent_id), checkpoint_type)}

    @app.post(
        "/restore/{agent_id}",
        response_model=RestoreResponse,
        tags=["checkpoints"],
        responses={409: {"description": _RESTORE_REFUSED}},
    )
    def post_restore(
        agent_id: Annotated[str, Depends(agent_access("checkpoint:write"))], body: RestoreRequest | None = None
    ) -> dict[str, Any]:
        """Start a session from the newest (or the named) checkpoint: identity, context, working memory."""
        req = body or RestoreRequest()
        data = _bridge.restore(agent(agent_id), checkpoint=req.checkpoint, force=req.force, session_id=req.session_id)
        return {"agent_id": agent_id, **data}

    @app.get("/sessions/{agent_id}", response_model=SessionsResponse, tags=["checkpoints"])
    def get_sessions(agent_id: Annotated[str, Depends(agent_access("checkpoint:read"))]) -> dict[str, Any]:
        """Every session of the agent, oldest first."""
        return {"agent_id": agent_id, "sessions": _bridge.sessions(agent(agent_id))}

    # -- memory --

    @app.post("/memory/{agent_id}", status_code=201, response_model=MemoryResponse, tags=["memory"])
    def post_memory(
        agent_id: Annotated[str, Depends(agent_access("memory:write"))], body: MemoryStoreRequest
    ) -> dict[str, Any]:
        """Store a memory; its id joins the open session's ``recent_memories``."""
        record = _bridge.memory_store(memory, agent(agent_id), body.text, tags=body.tags, metadata=body.metadata)
        return {"agent_id": agent_id, "memory": record}

    @app.post("/memory/{agent_id}/recall", response_model=RecallResponse, tags=["memory"])
    def post_recall(
        agent_id: Annotated[str, Depends(agent_access("memory:read"))], body: RecallRequest
    ) -> dict[str, Any]:
        """Recall the best matches (BM25), best first; the query becomes ``last_recall_query``."""
        results = _bridge.memory_recall(memory, agent(agent_id), body.query, k=body.k, tags=body.tags)
        from phoenix_protocol.core._redact import redact

        return {"agent_id": agent_id, "query": redact(body.query), "results": results}

    @app.get("/memory/{agent_id}", response_model=MemoryListResponse, tags=["memory"])
    def get_memories(
        agent_id: Annotated[str, Depends(agent_access("memory:read"))],
        tag: Annotated[list[Tag] | None, Query(max_length=32, description="Only memories with every tag.")] = None,
        limit: Annotated[int, Query(ge=1, le=1000)] = 50,
        offset: Annotated[int, Query(ge=0, le=1_000_000_000)] = 0,
    ) -> dict[str, Any]:
        """The agent's memories, newest first."""
        records = _bridge.memory_list(memory, agent(agent_id), tags=tag, limit=limit, offset=offset)
        return {"agent_id": agent_id, "memories": records, "limit": limit, "offset": offset}

    @app.get("/memory/{agent_id}/{memory_id:memory_id}", response_model=MemoryResponse, tags=["memory"])
    def get_memory(
        agent_id: Annotated[str, Depends(agent_access("memory:read"))], memory_id: MemoryIdParam
    ) -> dict[str, Any]:
        """One memory."""
        return {"agent_id": agent_id, "memory": _bridge.memory_get(memory, agent(agent_id), memory_id)}

    @app.delete("/memory/{agent_id}/{memory_id:memory_id}", status_code=204, tags=["memory"])
    def delete_memory(
        agent_id: Annotated[str, Depends(agent_access("memory:write"))], memory_id: MemoryIdParam
    ) -> Response:
        """Delete one memory."""
        _bridge.memory_delete(memory, agent(agent_id), memory_id)
        return Response(status_code=204)

    # -- identity --

    @app.get("/identity/{agent_id}", response_model=IdentityResponse, tags=["identity"])
    def get_identity(agent_id: Annotated[str, Depends(agent_access("identity:read"))]) -> dict[str, Any]:
        """The agent's identity.yaml (refused with 409 if its sealed core was edited by hand)."""
        return {"agent_id": agent_id, "identity": _bridge.identity_get(agent(agent_id, must_exist=True))}

    @app.patch("/identity/{agent_id}", response_model=IdentityResponse, tags=["identity"])
    def patch_identity(
        agent_id: Annotated[str, Depends(agent_access("identity:write"))], body: IdentitySetRequest
    ) -> dict[str, Any]:
        """Set one value in the mutable section; a path in the immutable core is refused (409)."""
        return {"agent_id": agent_id, "identity": _bridge.identity_set(agent(agent_id), body.path, body.value)}

    @app.post("/identity/{agent_id}/entries", response_model=IdentityResponse, tags=["identity"])
    def post_identity_entry(
        agent_id: Annotated[str, Depends(agent_access("identity:write"))], body: IdentityEntryRequest
    ) -> dict[str, Any]:
        """Add (or update, by name) a belief, skill or relationship."""
        if body.kind == "belief":
            entry: dict[str, Any] = {
                "subject": body.name,
                "confidence": 0.5 if body.confidence is None else body.confidence,
            }
        elif body.kind == "skill":
            entry = {"name": body.name, "level": body.level or "familiar"}
        else:
            entry = {"entity": body.name, "type": body.type or "peer"}
        return {"agent_id": agent_id, "identity": _bridge.identity_add(agent(agent_id), body.kind, entry)}

    # -- teams --

    @app.post("/teams/{team_id}/messages", status_code=201, response_model=SendResponse, tags=["teams"])
    def post_message(team_id: Annotated[str, Depends(team_access("team:write"))], body: SendRequest) -> dict[str, Any]:
        """Send a message to a teammate or to every teammate (``*``); idempotent by ``msg_id``."""
        sent = _bridge.team_send(
            team(team_id),
            body.sender,
            body.to,
            type=body.type,
            subject=body.subject,
            body=body.body,
            msg_id=body.msg_id,
        )
        return {"team_id": team_id, **sent}

    @app.get("/teams/{team_id}/inbox/{name}", response_model=InboxResponse, tags=["teams"])
    def get_inbox(
        team_id: Annotated[str, Depends(team_access("team:read"))],
        name: NameParam,
        limit: Annotated[int | None, Query(ge=1, le=1000)] = None,
    ) -> dict[str, Any]:
        """Messages NAME has not been handed yet. Nothing moves until ``…/delivered`` confirms them."""
        return {"team_id": team_id, "name": name, **_bridge.team_inbox(team(team_id), name, limit=limit)}

    @app.post("/teams/{team_id}/inbox/{name}/delivered", response_model=DeliveredResponse, tags=["teams"])
    def post_delivered(
        team_id: Annotated[str, Depends(team_access("team:write"))], name: NameParam, body: DeliveredRequest
    ) -> dict[str, Any]:
        """Confirm that the messages up to ``through_seq`` were handed to NAME (the cursor never moves back)."""
        return {"team_id": team_id, **_bridge.team_delivered(team(team_id), name, body.through_seq)}

    @app.post("/teams/{team_id}/messages/{seq}/ack", response_model=AckResponse, tags=["teams"])
    def post_ack(
        team_id: Annotated[str, Depends(team_access("team:write"))],
        seq: Annotated[int, Path(ge=1, le=2**53)],
        body: AckRequest,
    ) -> dict[str, Any]:
        """Acknowledge message SEQ as ``name`` (it must have been delivered to ``name``)."""
        return {"team_id": team_id, **_bridge.team_ack(team(team_id), seq, body.name)}

    @app.get("/teams/{team_id}/tasks", response_model=TasksResponse, tags=["teams"])
    def get_tasks(team_id: Annotated[str, Depends(team_access("team:read"))]) -> dict[str, Any]:
        """Every task of the team."""
        return {"team_id": team_id, "tasks": _bridge.team_tasks(team(team_id))}

    @app.post("/teams/{team_id}/tasks/{task_id}/claim", response_model=ClaimResponse, tags=["teams"])
    def post_claim(
        team_id: Annotated[str, Depends(team_access("team:write"))], task_id: TaskIdParam, body: ClaimRequest
    ) -> dict[str, Any]:
        """Claim a ready task: of concurrent claimers exactly one wins, the others get 409."""
        return {"team_id": team_id, "task": _bridge.team_claim(team(team_id), task_id, body.name)}

    @app.post("/teams/{team_id}/heartbeat/{name}", response_model=HeartbeatResponse, tags=["teams"])
    def post_heartbeat(
        team_id: Annotated[str, Depends(team_access("team:write"))],
        name: NameParam,
        body: HeartbeatRequest | None = None,
    ) -> dict[str, Any]:
        """Record a heartbeat of NAME."""
        session_id = body.session_id if body is not None else None
        record = _bridge.team_heartbeat(team(team_id), name, session_id=session_id)
        return {"team_id": team_id, "name": name, "heartbeat": record}

    app.openapi = _customize_openapi(app)  # type: ignore[method-assign]
    return app


# -- running it ------------------------------------------------------------------------------------


def is_loopback(host: str) -> bool:
    """Whether ``host`` only accepts connections from this machine (``localhost``, 127.0.0.0/8, ::1)."""
    import ipaddress

    if host.strip().lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip().strip("[]")).is_loopback
    except ValueError:
        return False  # a host name: it may resolve to anything


def check_bind(home: Home, host: str) -> None:
    """Refuse (``UsageError``) a non-loopback ``host`` while the home has no active token."""
    if not is_loopback(host) and not TokenStore(home).has_active():
        raise UsageError(
            f"refusing to listen on {host}, which other machines can reach, without tokens: create one "
            "first (`phx token create --agent ID`), or serve on 127.0.0.1."
        )


def serve(
    home: Home,
    *,
    host: str = "127.0.0.1",
    port: int = 8765,
    log_level: str = "info",
    config: Config | None = None,
) -> None:
    """Run the memory bridge under uvicorn until interrupted.

    A non-loopback ``host`` is refused (``UsageError``) unless the home has an active token; the
    server then requires a token on every request, whatever happens to the token file.
    """
    import uvicorn

    check_bind(home, host)
    home.ensure()
    app = create_app(home, require_tokens=None if is_loopback(host) else True, config=config)
    uvicorn.run(app, host=host, port=port, log_level=log_level, server_header=False, proxy_headers=False)
