"""``phx ui``: the dashboard, served by the same app as the memory bridge::

    GET  /ui/                                  no token   the page (HTML, JS and CSS from the package)
    GET  /ui/assets/{name}                     no token   its script, style sheet and icon
    GET  /ui/api/session                       any token  what the token may see and do
    GET  /ui/api/overview                      *:read     agents (liveness), teams, Clinic counts
    GET  /ui/api/agents/{agent_id}             checkpoint:read   one agent (brief, timeline, ...)
    GET  /ui/api/agents/{agent_id}/checkpoints/{name}             a checkpoint's content
    GET  /ui/api/agents/{agent_id}/diff?older=A&newer=B           a diff between two
    GET  /ui/api/teams/{team_id}               team:read  board, roster, mailbox, consolidation
    GET  /ui/api/claude-teams/{team}           team:read  a Claude Code agent team and its recovery
    GET  /ui/api/clinic                        checkpoint:read   every Clinic episode
    GET  /ui/api/events?watch=VIEW             *:read     server-sent events: the view, as it changes
    POST /ui/api/agents/{agent_id}/checkpoint  checkpoint:write  take a checkpoint (a real token only)
    POST /ui/api/teams/{team_id}/checkpoint    team:write        take a team checkpoint (a real token only)

The page and its assets hold no data: they are served without a token. Every ``/ui/api`` route
goes through the app's ``Authentication``; what a token does not cover is left out of lists and is
a 404 when asked for by name, as everywhere in the bridge. The page is read-only unless it was
given a token with a write scope: a home served without tokens (loopback only) shows everything
and changes nothing. Answers are the ``services/_dashboard`` documents; the routes stay out of the
OpenAPI document (a page's plumbing, not the bridge's API).

Live updates: ``/ui/api/events`` sends the watched view (``overview``, ``clinic``, ``agent:<id>``,
``team:<id>`` or ``claude:<team>``) as an ``event: view`` whenever it changes, looking each ``UI_TICK`` seconds
(what it shows also changes with time alone: an agent goes from grace to stalled). On PostgreSQL
it waits on the mailbox's ``LISTEN`` channel meanwhile, so a message shows at once.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
from collections.abc import AsyncIterator, Callable
from importlib import resources
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query, Request
from fastapi.responses import RedirectResponse, Response, StreamingResponse

from phoenix_protocol._version import __version__
from phoenix_protocol.core._errors import NotFoundError, RefusedError, UsageError
from phoenix_protocol.server._common import _OPEN, AUTH_SCOPE_KEY, Served, ServedHome
from phoenix_protocol.server._params import AgentIdParam, TeamIdParam
from phoenix_protocol.services import _dashboard
from phoenix_protocol.store._db import is_postgres_url
from phoenix_protocol.store._tokens import TokenInfo

__all__ = ["ASSETS", "UI_PREFIX", "router"]

UI_PREFIX = "/ui"
ASSETS = {"app.js": "text/javascript", "app.css": "text/css", "icon.svg": "image/svg+xml"}
UI_TICK = 1.0
"""Seconds between two looks at the watched view (``/ui/api/events``)."""
KEEPALIVE_TICKS = 15
"""A comment line every this many ticks without news, so proxies keep the stream open."""
FULL_LOOK_TICKS = 5
"""Every this many ticks the view is rebuilt even when nothing was written (time alone moves
liveness)."""

_CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
    "base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
)

router = APIRouter(include_in_schema=False)


def _asset(name: str) -> bytes:
    return resources.files("phoenix_protocol.server").joinpath("ui", name).read_bytes()


def _page_headers(cache: bool = False) -> dict[str, str]:
    return {
        "Content-Security-Policy": _CSP,
        "X-Content-Type-Options": "nosniff",
        "Referrer-Policy": "no-referrer",
        "Cache-Control": "max-age=300" if cache else "no-store",
    }


@router.get(UI_PREFIX)
def ui_redirect() -> RedirectResponse:
    return RedirectResponse(UI_PREFIX + "/", status_code=308)


@router.get(UI_PREFIX + "/")
def ui_page() -> Response:
    return Response(_asset("index.html"), media_type="text/html; charset=utf-8", headers=_page_headers())


@router.get(UI_PREFIX + "/assets/{name}")
def ui_asset(name: str) -> Response:
    if name not in ASSETS:
        raise NotFoundError(f"no asset {name!r}.")
    return Response(_asset(name), media_type=ASSETS[name], headers=_page_headers(cache=True))


# -- who may see what ------------------------------------------------------------------------------


def _token(request: Request) -> TokenInfo:
    info = request.scope.get(AUTH_SCOPE_KEY)
    if not isinstance(info, TokenInfo):  # the middleware always sets it for /ui/api
        raise NotFoundError("not found.")
    return info


def _read_scope(namespace: str) -> str:
    return "team:read" if namespace.startswith("team:") else "checkpoint:read"


def _allowed(info: TokenInfo) -> Callable[[str], bool]:
    return lambda namespace: info.covers_namespace(namespace) and info.allows(_read_scope(namespace))


def _may_write(info: TokenInfo, namespace: str) -> bool:
    scope = "team:write" if namespace.startswith("team:") else "checkpoint:write"
    return info is not _OPEN and info.covers_namespace(namespace) and info.allows(scope)


Token = Annotated[TokenInfo, Depends(_token)]


def _answer(document: dict[str, Any]) -> Response:
    return Response(_dumps(document), media_type="application/json", headers={"Cache-Control": "no-store"})


def _dumps(document: dict[str, Any]) -> bytes:
    return json.dumps(document, ensure_ascii=False, default=str, separators=(",", ":")).encode("utf-8", "replace")


# -- the views -------------------------------------------------------------------------------------


@router.get(UI_PREFIX + "/api/session")
def ui_session(served: Served, info: Token) -> Response:
    open_home = info is _OPEN
    writes = [s for s in info.scopes if s == "*" or s.endswith((":write", ":*"))]
    return _answer(
        {
            "schema_version": _dashboard.SCHEMA_VERSION,
            "version": __version__,
            "home": served.home.root,
            "store": "postgresql" if is_postgres_url(served.config.store) else "sqlite",
            "authenticated": not open_home,
            "token": None if open_home else {"id": info.id, "label": info.label, "namespaces": info.namespaces},
            "read_only": open_home or not writes,
            "can_write": {
                "agents": not open_home and (info.allows("checkpoint:write")),
                "teams": not open_home and (info.allows("team:write")),
            },
            "live_tick_seconds": UI_TICK,
        }
    )


def _claude_teams(served: ServedHome, info: TokenInfo) -> list[dict[str, Any]]:
    """The Claude Code agent teams recorded for the home's project (issue 32), those the token may see."""
    from phoenix_protocol.integrations._cc_teams import list_claude_teams

    allowed = _allowed(info)
    return [t for t in list_claude_teams(served.home, config=served.config) if allowed(f"team:{t['team_name']}")]


def _claude_team(served: ServedHome, info: TokenInfo, team: str) -> dict[str, Any]:
    """One recorded Claude Code team and where its recovery stands: each message delivered,
    waiting to be delivered again (to whom) or delivered again (when)."""
    from phoenix_protocol.integrations._cc_teams import describe_team

    if not _allowed(info)(f"team:{team}"):
        raise NotFoundError(f"no Claude Code team {team!r} recorded here.")
    found = describe_team(served.home, team, config=served.config)
    for message in found["messages"]:
        if message.get("redelivered_ms") is not None:
            message["recovery"] = "delivered again"
        elif message.get("redeliver_to"):
            message["recovery"] = f"to be delivered again to {message['redeliver_to']}"
        elif message.get("delivered_ms") is not None:
            message["recovery"] = "delivered"
        else:
            message["recovery"] = "not known to be delivered"
    return {"schema_version": _dashboard.SCHEMA_VERSION, "claude_team": found}


def _view(served: ServedHome, info: TokenInfo, watch: str) -> dict[str, Any]:
    """The document of one watchable view."""
    common: dict[str, Any] = {"config": served.config, "clock": served.clock, "allowed": _allowed(info)}
    if watch == "overview":
        doc = _dashboard.overview(served.home, **common)
        doc["claude_teams"] = _claude_teams(served, info)
        return doc
    if watch == "clinic":
        return _dashboard.clinic_view(served.home, **common)
    kind, _, ident = watch.partition(":")
    from phoenix_protocol.core._ids import validate_id

    if kind == "agent" and ident:
        return _dashboard.agent_view(served.home, validate_id(ident, "agent id"), **common)
    if kind == "team" and ident:
        return _dashboard.team_view(served.home, validate_id(ident, "team id"), **common)
    if kind == "claude" and ident:
        return _claude_team(served, info, validate_id(ident, "team name"))
    raise UsageError(f"watch must be overview, clinic, agent:<id>, team:<id> or claude:<team>, not {watch!r}.")


@router.get(UI_PREFIX + "/api/overview")
def ui_overview(served: Served, info: Token) -> Response:
    return _answer(_view(served, info, "overview"))


@router.get(UI_PREFIX + "/api/clinic")
def ui_clinic(served: Served, info: Token) -> Response:
    return _answer(_view(served, info, "clinic"))


@router.get(UI_PREFIX + "/api/agents/{agent_id}")
def ui_agent(served: Served, info: Token, agent_id: AgentIdParam) -> Response:
    return _answer(_view(served, info, f"agent:{agent_id}"))


@router.get(UI_PREFIX + "/api/agents/{agent_id}/checkpoints/{name}")
def ui_checkpoint(served: Served, info: Token, agent_id: AgentIdParam, name: str) -> Response:
    return _answer(
        _dashboard.checkpoint_content(
            served.home, agent_id, name, config=served.config, clock=served.clock, allowed=_allowed(info)
        )
    )


@router.get(UI_PREFIX + "/api/agents/{agent_id}/diff")
def ui_diff(
    served: Served,
    info: Token,
    agent_id: AgentIdParam,
    older: Annotated[str, Query(max_length=200)],
    newer: Annotated[str, Query(max_length=200)],
) -> Response:
    return _answer(
        _dashboard.checkpoint_diff(
            served.home, agent_id, older, newer, config=served.config, clock=served.clock, allowed=_allowed(info)
        )
    )


@router.get(UI_PREFIX + "/api/teams/{team_id}")
def ui_team(served: Served, info: Token, team_id: TeamIdParam) -> Response:
    return _answer(_view(served, info, f"team:{team_id}"))


@router.get(UI_PREFIX + "/api/claude-teams/{team_id}")
def ui_claude_team(served: Served, info: Token, team_id: TeamIdParam) -> Response:
    return _answer(_view(served, info, f"claude:{team_id}"))


@router.post(UI_PREFIX + "/api/agents/{agent_id}/checkpoint")
def ui_take_checkpoint(served: Served, info: Token, agent_id: AgentIdParam) -> Response:
    namespace = f"agent:{agent_id}"
    if not _allowed(info)(namespace):
        raise NotFoundError(f"no agent {agent_id!r} in this home.")
    if not _may_write(info, namespace):
        raise RefusedError("The dashboard is read-only: give it a token with the checkpoint:write scope.")
    return _answer(_dashboard.take_checkpoint(served.home, agent_id, config=served.config, clock=served.clock))


@router.post(UI_PREFIX + "/api/teams/{team_id}/checkpoint")
def ui_take_team_checkpoint(served: Served, info: Token, team_id: TeamIdParam) -> Response:
    namespace = f"team:{team_id}"
    if not _allowed(info)(namespace):
        raise NotFoundError(f"no team {team_id!r} in this home.")
    if not _may_write(info, namespace):
        raise RefusedError("The dashboard is read-only: give it a token with the team:write scope.")
    return _answer(_dashboard.take_team_checkpoint(served.home, team_id, config=served.config, clock=served.clock))


# -- live updates ----------------------------------------------------------------------------------


def _wait_for_news(served: ServedHome, timeout: float) -> None:
    """Sleep ``timeout`` seconds, or less on PostgreSQL when a team message is committed."""
    import time

    if is_postgres_url(served.config.store):
        from phoenix_protocol.store._db import open_database
        from phoenix_protocol.store._team_store import CHANNEL

        db = open_database(served.home, config=served.config)
        woken = [False]

        def ready() -> bool:
            if woken[0]:
                return True
            woken[0] = True  # the first call is before anything arrived
            return False

        db.wait(CHANNEL, ready, timeout)
        return
    time.sleep(timeout)


@router.get(UI_PREFIX + "/api/events")
async def ui_events(
    request: Request, served: Served, info: Token, watch: Annotated[str, Query(max_length=200)] = "overview"
) -> StreamingResponse:
    first = await asyncio.to_thread(_view, served, info, watch)  # a bad watch is a 400/404 now, not mid-stream

    async def stream() -> AsyncIterator[bytes]:
        document = first
        sent = ""
        mark = ""
        ticks = 0
        quiet = 0
        while True:
            text = _dumps(document)
            digest = hashlib.blake2b(text, digest_size=12).hexdigest()
            if digest != sent:
                sent = digest
                quiet = 0
                yield b"event: view\ndata: " + text + b"\n\n"
            elif quiet >= KEEPALIVE_TICKS:
                quiet = 0
                yield b": keep-alive\n\n"
            if await request.is_disconnected():
                return
            await asyncio.to_thread(_wait_for_news, served, UI_TICK)
            ticks += 1
            quiet += 1
            now = await asyncio.to_thread(_dashboard.fingerprint, served.home, config=served.config)
            if now != mark or ticks % FULL_LOOK_TICKS == 0:
                mark = now
                try:
                    document = await asyncio.to_thread(_view, served, info, watch)
                except NotFoundError:
                    yield b"event: gone\ndata: {}\n\n"
                    return

    return StreamingResponse(
        stream(),
        media_type="text/event-stream",
        headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"},
    )
