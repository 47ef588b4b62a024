"""``phx serve`` and ``phx token …``: the memory bridge's server and its bearer tokens (seed 002).

Registered on the ``phx`` group by ``_cli``. FastAPI and uvicorn are imported only by ``phx serve``
(the ``[server]`` extra); the token commands need neither.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any, TypeVar

import click

from phoenix_protocol.cli._main import (
    Output,
    _Exit,
    _exit_code_for,
    _make_console,
    home_common,
    main_group,
    write_stdout,
)
from phoenix_protocol.core._config import Config
from phoenix_protocol.core._errors import PhoenixError, UsageError
from phoenix_protocol.core._home import Home

__all__: list[str] = []

F = TypeVar("F", bound=Callable[..., Any])


def _open_home(home_path: str | None) -> tuple[Home, Config]:
    """The home (``--home``, else the resolved one) and its settings, read once."""
    from phoenix_protocol.core._config import load_config

    home = Home(os.path.abspath(home_path)) if home_path else Home.resolve()
    return home, load_config(home.root, project_root=home.project_root)


def _address(home: Home, config: Config, host: str | None, port: int | None) -> tuple[str, int]:
    """The address and port to listen on (default: the settings'), refused as ``check_bind``
    refuses; ``UsageError`` without the [server] extra."""
    try:
        from phoenix_protocol.server._app import check_bind
    except ImportError as exc:
        raise UsageError(str(exc)) from None
    address = host or config.server_host
    number = port or config.server_port
    check_bind(home, address, config=config)
    return address, number


def _http_url(address: str, port: int, path: str = "") -> str:
    """The address a person opens: an IPv6 address in brackets (``http://[::1]:8765/mcp``)."""
    shown = f"[{address}]" if ":" in address else address
    return f"http://{shown}:{port}{path}"


def _bind(home_path: str | None, host: str | None, port: int | None) -> tuple[Home, Config, str, int]:
    """``phx serve``'s and ``phx ui``'s start: the home, its settings and the address (``_address``)."""
    home, config = _open_home(home_path)
    return home, config, *_address(home, config, host, port)


@main_group.command("serve")
@click.option("--host", metavar="ADDRESS", help="Address to listen on (default: the server_host setting, 127.0.0.1).")
@click.option("--port", type=click.IntRange(1, 65535), help="Port (default: the server_port setting, 8765).")
@click.option(
    "--log-level",
    type=click.Choice(["critical", "error", "warning", "info", "debug"]),
    default="info",
    show_default=True,
)
@click.option(
    "--home", "home_path", metavar="PATH", help="Phoenix home (default: $PHOENIX_HOME or .phoenix/ at the git root)."
)
def serve_command(host: str | None, port: int | None, log_level: str, home_path: str | None) -> None:
    """Serve this home over HTTP (the memory bridge): checkpoints, sessions, memory, identity, teams.

    Needs the [server] extra. Tokens are required as soon as the home has one; a non-loopback
    --host is refused until it does. Example: phx serve --port 8765
    """
    out = Output(False)
    try:
        home, config, address, number = _bind(home_path, host, port)
        from phoenix_protocol.server._app import is_loopback, serve
        from phoenix_protocol.store._tokens import TokenStore

        auth = (
            "bearer tokens required"
            if TokenStore(home, config=config).configured() or not is_loopback(address)
            else "no tokens in this home: open to this machine (`phx token create` turns authentication on)"
        )
        from rich.markup import escape

        _make_console(stderr=True).print(
            f"memory bridge for {escape(home.root)} on {escape(_http_url(address, number))} ({escape(auth)}); "
            "OpenAPI at /openapi.json"
        )
        serve(home, host=address, port=number, log_level=log_level, config=config)
    except PhoenixError as exc:
        code = _exit_code_for(exc)
        out.error(exc, code)
        raise _Exit(code) from None


@main_group.command("ui")
@click.option("--host", metavar="ADDRESS", help="Address to listen on (default: the server_host setting, 127.0.0.1).")
@click.option("--port", type=click.IntRange(1, 65535), help="Port (default: the server_port setting, 8765).")
@click.option(
    "--token",
    "token_env",
    metavar="VAR",
    help="Name of an environment variable holding a token: the printed address carries it (in the part after #, "
    "which browsers never send), so the page opens with that token's rights.",
)
@click.option("--open", "open_browser", is_flag=True, help="Open the page in this machine's browser.")
@click.option(
    "--log-level",
    type=click.Choice(["critical", "error", "warning", "info", "debug"]),
    default="warning",
    show_default=True,
)
@click.option(
    "--home", "home_path", metavar="PATH", help="Phoenix home (default: $PHOENIX_HOME or .phoenix/ at the git root)."
)
def ui_command(
    host: str | None, port: int | None, token_env: str | None, open_browser: bool, log_level: str, home_path: str | None
) -> None:
    """Serve the dashboard: agents, checkpoints, sessions, teams and the Clinic, live, in a browser.

    The same server as `phx serve` (which serves the page too, at /ui/); read-only unless the page
    is given a token with a write scope. Needs the [server] extra. Example: phx ui --open
    """
    out = Output(False)
    try:
        home, config, address, number = _bind(home_path, host, port)
        from phoenix_protocol.server._app import serve

        url = _http_url(address, number, "/ui/")
        if token_env:
            secret = os.environ.get(token_env, "").strip()
            if not secret:
                raise UsageError(f"--token {token_env}: that environment variable is empty or not set.")
            from urllib.parse import quote

            link = url + "#token=" + quote(secret, safe="")
        else:
            link = url
        from rich.markup import escape

        _make_console(stderr=True).print(f"Phoenix dashboard for {escape(home.root)}: {escape(url)}")
        if token_env:
            write_stdout(link + "\n")
        if open_browser:
            import webbrowser

            webbrowser.open(link)
        serve(home, host=address, port=number, log_level=log_level, config=config)
    except PhoenixError as exc:
        code = _exit_code_for(exc)
        out.error(exc, code)
        raise _Exit(code) from None


@main_group.group("token")
def token_group() -> None:
    """Bearer tokens for `phx serve`, scoped to namespaces and operations; stored hashed.

    Example: phx token create --agent zero --scope memory:read --expires 30d
    """


def _token_table(out: Output, infos: list[Any], now_ms: int) -> None:
    from rich.markup import escape
    from rich.table import Table

    table = Table(box=None, padding=(0, 1), header_style="bold")
    for column in ("id", "status", "namespaces", "scopes", "expires"):
        table.add_column(column, no_wrap=True)
    table.add_column("label", overflow="fold")
    for info in infos:
        data = info.as_dict(now_ms)
        if data["expires_at"] is not None:
            expires = data["expires_at"][:19].replace("T", " ")
        else:  # a record whose expiry does not read may have had one: not "never"
            expires = "never" if info.expiry_known else "-"
        table.add_row(
            escape(info.id),
            data["status"],
            escape(", ".join(info.namespaces)),
            escape(", ".join(info.scopes)),
            expires,
            escape(info.label or ""),
        )
    out.console.print(table)
    if not infos:
        out.console.print("(no tokens)")
    for info in infos:  # why each invalid one is: the file, the record, what is wrong, what to do
        if info.problem is not None:
            out.console.print(f"[red]invalid[/] {escape(info.id)}: {escape(info.problem)}")


@token_group.command("create")
@click.option("--agent", "agents", multiple=True, metavar="ID", help="An agent's namespace (repeatable).")
@click.option("--team", "teams", multiple=True, metavar="ID", help="A team's namespace (repeatable).")
@click.option("--all-namespaces", is_flag=True, help="Every namespace (an operator's token).")
@click.option(
    "--scope",
    "scopes",
    multiple=True,
    metavar="SCOPE",
    help="An operation: memory:read, memory:write, checkpoint:read, checkpoint:write, identity:read, "
    "identity:write, team:read, team:write, AREA:* or * (repeatable; default: *).",
)
@click.option("--expires", metavar="DURATION", help="Lifetime: 3600, 90m, 12h, 30d, 2w (default: never).")
@click.option("--label", metavar="TEXT", help="What the token is for (shown by `phx token list`).")
@home_common
def token_create(
    home: Home,
    config: Config,
    out: Output,
    agents: tuple[str, ...],
    teams: tuple[str, ...],
    all_namespaces: bool,
    scopes: tuple[str, ...],
    expires: str | None,
    label: str | None,
) -> None:
    """Create a token and print it once: the last line of the output (`token` with --json).

    Only its hash is stored. Example: phx token create --agent zero --scope memory:read --expires 30d
    """
    from phoenix_protocol.store._tokens import ALL, TokenStore, agent_namespace, parse_duration, team_namespace

    namespaces = [agent_namespace(a) for a in agents] + [team_namespace(t) for t in teams]
    if all_namespaces:
        namespaces.append(ALL)
    if not namespaces:
        raise UsageError("say whose token it is: --agent ID, --team ID (both repeatable) or --all-namespaces.")
    store = TokenStore(home, config=config)
    token, info = store.create(
        namespaces,
        list(scopes) or [ALL],
        expires_in=parse_duration(expires) if expires is not None else None,
        label=label,
    )
    if out.as_json:
        out.json({"token": token, "info": info.as_dict(store.clock.now_ms())})
        return
    from rich.markup import escape

    expiry = info.as_dict()["expires_at"] or "never"
    out.console.print(
        f"token [bold]{info.id}[/] for {escape(', '.join(info.namespaces))}, scopes "
        f"{escape(', '.join(info.scopes))}, expires {expiry}"
    )
    out.console.print("Store it now: it is shown only this once (Phoenix keeps only its hash).")
    write_stdout(token + "\n")


@token_group.command("list")
@home_common
def token_list(home: Home, config: Config, out: Output) -> None:
    """List tokens (never their secrets): id, status, namespaces, scopes, expiry, label.

    Example: phx token list --json
    """
    from phoenix_protocol.store._tokens import TokenStore

    store = TokenStore(home, config=config)
    now = store.clock.now_ms()
    infos = store.list()
    if out.as_json:
        out.json({"tokens": [i.as_dict(now) for i in infos]})
    else:
        _token_table(out, infos, now)


@token_group.command("revoke")
@click.argument("token_id", metavar="ID")
@home_common
def token_revoke(home: Home, config: Config, out: Output, token_id: str) -> None:
    """Revoke a token by id; a running server refuses it from its next request on.

    Example: phx token revoke 3f9a1c2b7d4e
    """
    from phoenix_protocol.store._tokens import TokenStore

    store = TokenStore(home, config=config)
    info = store.revoke(token_id)
    if out.as_json:
        out.json({"token": info.as_dict(store.clock.now_ms())})
    else:
        out.console.print(f"revoked {info.id}")


@main_group.command("mcp")
@click.option("--agent", "agent_id", metavar="ID", help="The agent (default: $PHOENIX_AGENT or default).")
@click.option("--team", "team_id", metavar="TEAM", help="A team seat's team (default: $PHOENIX_TEAM).")
@click.option("--as", "member", metavar="NAME", help="A team seat's teammate name (default: $PHOENIX_TEAMMATE).")
@click.option("--http", "http", is_flag=True, help="Serve streamable HTTP at /mcp instead of stdio (bearer tokens).")
@click.option("--host", metavar="ADDRESS", help="--http: address to listen on (default: the server_host setting).")
@click.option("--port", type=click.IntRange(1, 65535), help="--http: port (default: the server_port setting).")
@click.option(
    "--home", "home_path", metavar="PATH", help="Phoenix home (default: $PHOENIX_HOME or .phoenix/ at the git root)."
)
def mcp_command(
    agent_id: str | None,
    team_id: str | None,
    member: str | None,
    http: bool,
    host: str | None,
    port: int | None,
    home_path: str | None,
) -> None:
    """Serve this agent to MCP clients (stdio; --http for streamable HTTP): brief, status, notes,
    checkpoints, memory search, and with a team seat the inbox, messages and tasks.

    Needs the [mcp] extra. `phx install CLI --mcp` registers it with Claude Code, Gemini CLI or
    Codex. Example: phx mcp --agent zero --team auth-x1 --as alice
    """
    from phoenix_protocol.core._home import resolve_agent_id

    out = Output(False)
    try:
        if not http and (host is not None or port is not None):
            raise UsageError("--host and --port go with --http.")
        home, config = _open_home(home_path)
        try:
            from phoenix_protocol.server._mcp import McpSeat, serve_http, serve_stdio
        except ImportError as exc:
            raise UsageError(f"phx mcp needs the [mcp] extra: pip install 'phoenix-protocol[mcp]' ({exc}).") from None
        team = team_id if team_id is not None else os.environ.get("PHOENIX_TEAM") or None
        name = member if member is not None else os.environ.get("PHOENIX_TEAMMATE") or None
        seat = McpSeat(
            home,
            resolve_agent_id(agent_id, None, config.agent_id),
            config=config,
            team_id=team,
            member=name,
            http=http,
        )
        if not http:
            serve_stdio(seat)
            return
        from rich.markup import escape

        address, number = _address(home, config, host, port)
        _make_console(stderr=True).print(
            f"MCP server for agent {escape(seat.agent_id)} of {escape(home.root)} on "
            f"{escape(_http_url(address, number, '/mcp'))}"
        )
        serve_http(seat, host=address, port=number)
    except PhoenixError as exc:
        code = _exit_code_for(exc)
        out.error(exc, code)
        raise _Exit(code) from None
