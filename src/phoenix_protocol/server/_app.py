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
    GET    /ui/, /ui/api/...                                       the dashboard (``_ui``, ``phx ui``)

One ``APIRouter`` per area: ``_checkpoints`` (checkpoints and sessions), ``_memory``,
``_identity``, ``_teams``, ``_health``; ``_common`` holds what they share (the served home and
its configuration, authentication, authorization, the body limit, problem details) and
``_params`` the validated input. ``create_app`` reads the configuration once and builds the app.

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

from collections.abc import Callable
from typing import Any

from fastapi import FastAPI
from pydantic import BaseModel, ConfigDict, Field

from phoenix_protocol._version import __version__
from phoenix_protocol.core._clock import Clock, system_clock
from phoenix_protocol.core._config import Config, load_config
from phoenix_protocol.core._errors import UsageError
from phoenix_protocol.core._home import Home
from phoenix_protocol.server import _checkpoints, _health, _identity, _memory, _teams, _ui
from phoenix_protocol.server._common import (
    PROBLEM_TYPE,
    PUBLIC_PATHS,
    Answer,
    Authentication,
    BodyLimit,
    ServedHome,
    add_error_handlers,
    api_routes,
)
from phoenix_protocol.store._memory import open_memory_store
from phoenix_protocol.store._tokens import TokenStore

__all__ = ["check_bind", "create_app", "is_loopback", "serve"]


class Problem(BaseModel):
    """An RFC 9457 problem detail."""

    model_config = ConfigDict(extra="allow")

    type: str = "about:blank"
    title: str
    status: int
    detail: str
    instance: str
    error: str = Field(description="The Phoenix error class (AuthenticationError, NotFoundError, UsageError, ...).")


_ERROR_RESPONSES = {
    "400": "Bad request: the input is valid JSON but Phoenix cannot do this (see detail).",
    "401": "No valid bearer token: missing, malformed, unknown, revoked or expired.",
    "404": "No such namespace or resource, or the token does not cover it (the same answer).",
    "409": "Refused on purpose: a claim conflict, a sealed identity core, a completed team, a message id reused.",
    "413": "The body is larger than the server accepts.",
    "422": "A body or path parameter is invalid.",
    "500": "The server's state could not be read or written (run `phx doctor` on the server).",
    "503": "The state was busy (a lock held too long): retry.",
}


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
            for route in api_routes(app)
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
    """The memory bridge for ``home``, on ``config`` (default: the home's, read here once).

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
    app.state.phoenix = ServedHome(home=home, config=cfg, clock=clock, tokens=tokens, memory=memory)
    app.add_middleware(BodyLimit, max_bytes=limit)
    app.add_middleware(Authentication, tokens=tokens, require=require_tokens, home=home)
    add_error_handlers(app)
    for area in (_health, _checkpoints, _memory, _identity, _teams, _ui):
        app.include_router(area.router)
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


def check_bind(home: Home, host: str, *, config: Config | None = None) -> None:
    """Refuse (``UsageError``) a non-loopback ``host`` while the home has no active token."""
    if not is_loopback(host) and not TokenStore(home, config=config).has_active():
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

    cfg = config if config is not None else load_config(home.root, project_root=home.project_root)
    check_bind(home, host, config=cfg)
    home.ensure()
    app = create_app(home, require_tokens=None if is_loopback(host) else True, config=cfg)
    uvicorn.run(app, host=host, port=port, log_level=log_level, server_header=False, proxy_headers=False)
