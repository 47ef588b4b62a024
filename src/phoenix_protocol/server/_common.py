"""What every router of the memory bridge shares: the served home (its configuration, loaded
once, and the stores opened at startup), authentication and authorization, the body limit, and
the translation of errors into RFC 9457 problem details."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, MutableMapping
from dataclasses import dataclass
from http import HTTPStatus
from typing import TYPE_CHECKING, Annotated, Any, cast

from fastapi import Depends, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from fastapi.routing import APIRoute
from starlette.datastructures import Headers
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import Match

from phoenix_protocol.core._errors import (
    ConfigError,
    InvalidIdError,
    LockTimeoutError,
    NotFoundError,
    PhoenixError,
    RefusedError,
    UsageError,
)
from phoenix_protocol.core._jsonio import valid_text
from phoenix_protocol.server._params import AgentIdParam, TeamIdParam
from phoenix_protocol.services import _bridge
from phoenix_protocol.services._bridge import NOT_FOUND
from phoenix_protocol.store._teams import TeamNotFoundError
from phoenix_protocol.store._tokens import ALL, TokenInfo, TokenStore, agent_namespace, team_namespace

if TYPE_CHECKING:
    from phoenix_protocol.core._clock import Clock
    from phoenix_protocol.core._config import Config
    from phoenix_protocol.core._home import Home
    from phoenix_protocol.services._agent import Agent
    from phoenix_protocol.store._memory import MemoryStore
    from phoenix_protocol.store._teams import Team

__all__ = [
    "PROBLEM_TYPE",
    "PUBLIC_PATHS",
    "Answer",
    "Authentication",
    "BodyLimit",
    "Served",
    "ServedHome",
    "add_error_handlers",
    "agent_access",
    "api_routes",
    "error_detail",
    "problem",
    "status_for",
    "team_access",
]

log = logging.getLogger("phoenix_protocol.server")

PUBLIC_PATHS = frozenset(("/healthz", "/readyz", "/openapi.json", "/docs", "/docs/oauth2-redirect", "/redoc"))
"""Paths served without a token (nothing in them belongs to a namespace)."""
AUTH_SCOPE_KEY = "phoenix.auth"


def _ui_page(path: str) -> bool:
    """The dashboard's page and assets (``server/_ui``): no data in them, served without a token."""
    return path in ("/ui", "/ui/") or path.startswith("/ui/assets/")


PROBLEM_TYPE = "application/problem+json"
_OPEN = TokenInfo("open", [ALL], [ALL], label="no tokens configured")


# -- the served home ----------------------------------------------------------------------------


@dataclass(frozen=True)
class ServedHome:
    """The home one app serves, with its configuration (read once, by ``create_app``) and the
    stores opened at startup; the app keeps it in ``app.state.phoenix``."""

    home: Home
    config: Config
    clock: Clock
    tokens: TokenStore
    memory: MemoryStore

    def agent(self, agent_id: str, *, must_exist: bool = False) -> Agent:
        """The agent ``agent_id`` (``_bridge.open_agent``), on the served configuration."""
        return _bridge.open_agent(self.home, agent_id, config=self.config, clock=self.clock, must_exist=must_exist)

    def team(self, team_id: str) -> Team:
        """The team ``team_id`` (``_bridge.open_team``), on the served configuration."""
        return _bridge.open_team(self.home, team_id, config=self.config, clock=self.clock)


def served_home(request: Request) -> ServedHome:
    """A dependency: the home the request's app serves."""
    return cast("ServedHome", request.app.state.phoenix)


Served = Annotated[ServedHome, Depends(served_home)]


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


def error_detail(exc: PhoenixError, home: Home) -> str:
    """A library error's message as a client reads it (a problem's ``detail``, an MCP tool error):
    on one line, the home's path as ``$PHOENIX_HOME``; ``NOT_FOUND`` for a team not found (its
    message lists the teams that exist)."""
    if isinstance(exc, TeamNotFoundError):
        return NOT_FOUND
    return _bridge.scrub(" ".join(str(exc).split()), home) or type(exc).__name__


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


def api_routes(app: FastAPI) -> list[APIRoute]:
    """Every path operation of ``app``, those of its routers included (since FastAPI 0.137 an
    included router is one node of ``app.routes``, which ``iter_route_contexts`` expands)."""
    try:
        from fastapi.routing import iter_route_contexts
    except ImportError:  # before 0.137.2: include_router copied each route into app.routes
        routes = list(app.routes)
    else:
        routes = [context.original_route for context in iter_route_contexts(app.routes)]
    return [route for route in routes if isinstance(route, APIRoute)]


def _allowed_methods(request: Request) -> str:
    """Every method some route serves at the request's path (Starlette names only the first
    route's, and the same path has several routes here)."""
    methods: set[str] = set()
    for route in api_routes(request.app):
        if route.matches(request.scope)[0] != Match.NONE:
            methods |= route.methods or set()
    return ", ".join(sorted(methods))


def add_error_handlers(app: FastAPI) -> None:
    """Every error as a problem: library errors by ``status_for``, invalid requests 422, HTTP
    errors as they are (404 for no such endpoint, 405 with ``Allow``), anything else 500."""

    @app.exception_handler(PhoenixError)
    async def phoenix_error(request: Request, exc: PhoenixError) -> Response:
        status = status_for(exc)
        detail = error_detail(exc, served_home(request).home)
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
            headers["Allow"] = _allowed_methods(request)
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
        if scope["type"] != "http" or scope["path"] in PUBLIC_PATHS or _ui_page(scope["path"]):
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
                    # of ``add_error_handlers`` turns it into the same 413 problem.
                    raise StarletteHTTPException(413, self._too_large(), headers={"Connection": "close"})
            return message

        await self.app(scope, limited, send)


# -- authorization ---------------------------------------------------------------------------------


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
