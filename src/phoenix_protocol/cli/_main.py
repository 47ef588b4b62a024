"""The ``phx`` command line: a thin translator over the library.

Every command takes ``--agent`` (default ``$PHOENIX_AGENT`` or ``default``), ``--home``
(default ``$PHOENIX_HOME``, else ``.phoenix/`` at the git work tree root) and ``--json`` (a
stable machine-readable answer on stdout). Errors are one line on stderr (or, under ``--json``,
a JSON object with ``"ok": false`` on stdout, click's own usage errors included), never a
traceback; a bug (an unexpected exception) has its traceback on stderr, and under ``--json`` that
JSON object as well (exit 1).
Text from users (summaries, tasks, names) is printed with its control characters made visible
(``visible``): a stored ESC cannot drive the terminal.

Exit codes:

=====  ===============================================================
0      success
1      the operation failed (I/O error, lock timeout, ...)
2      usage error or bad input; nothing was changed
3      a state file is corrupt or from a newer Phoenix: run ``phx doctor`` / upgrade
4      status change refused by precedence (watchdog > hook > model); ``--force`` overrides
=====  ===============================================================
"""

from __future__ import annotations

import contextlib
import functools
import os
import sys
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, TypeVar

import click

from phoenix_protocol.agent._state import AgentState
from phoenix_protocol.cli._entry import stdout_to_devnull
from phoenix_protocol.cli._entry import write_stdout as _write_stdout
from phoenix_protocol.core._errors import (
    CorruptStateError,
    OperationError,
    PhoenixError,
    RefusedError,
    SchemaVersionError,
    UsageError,
)
from phoenix_protocol.core._home import Home
from phoenix_protocol.core._jsonio import dumps_output, valid_text
from phoenix_protocol.integrations._clients import CLIENTS
from phoenix_protocol.services._agent import Agent

if TYPE_CHECKING:
    from rich.console import Console
    from rich.text import Text

__all__ = ["EXIT_CODES", "cli", "visible"]

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_DATA, EXIT_REFUSED, EXIT_ATTENTION = 0, 1, 2, 3, 4, 5
EXIT_CODES = {
    EXIT_OK: "success",
    EXIT_FAILED: "the operation failed (I/O error, lock timeout, ...)",
    EXIT_USAGE: "usage error or bad input; nothing was changed",
    EXIT_DATA: "a state file is corrupt or from a newer Phoenix: run `phx doctor` or upgrade",
    EXIT_REFUSED: "refused on purpose: status precedence (watchdog > hook > model; --force overrides), "
    "a sealed identity core, another agent's checkpoint",
    EXIT_ATTENTION: "the watchdog found agents that need attention (stalled, or drifting) and acted",
}

F = TypeVar("F", bound=Callable[..., Any])


_CONTROLS = {c: f"\\x{c:02x}" for c in (*range(0x20), *range(0x7F, 0xA0))}
# Bidirectional overrides and isolates reorder what follows them on screen ("Trojan Source").
_CONTROLS.update({c: f"\\u{c:04x}" for c in (*range(0x202A, 0x202F), *range(0x2066, 0x206A))})
_LAYOUT = {ord("\n"), ord("\t")}
_VISIBLE = {c: text for c, text in _CONTROLS.items() if c not in _LAYOUT}


def visible(text: str, *, layout: bool = True) -> str:
    """``text`` safe to print on a terminal: each control character (C0, DEL, C1) shown as
    ``\\xNN`` instead of acting on the terminal (an ESC would start an escape sequence, a CR
    overwrite the line), and each bidirectional override or isolate as ``\\uNNNN`` (they would
    reorder the text after them), and each lone surrogate (UTF-8 cannot write one: a ``\\udXXX``
    escape in a file written by hand) as U+FFFD. ``layout``: newlines and tabs are kept. Every
    string the ``Output`` console prints goes through it; call it for text printed another way."""
    return valid_text(text).translate(_VISIBLE if layout else _CONTROLS)


@functools.cache
def _console_class() -> type[Console]:
    from rich.console import Console

    class _Console(Console):
        """Strings (markup, table cells, panels) pass through ``visible`` before rich renders
        them: markup never holds a control character, so only users' text changes."""

        def render_str(self, text: str, **kwargs: Any) -> Text:
            return super().render_str(visible(text), **kwargs)

        def on_broken_pipe(self) -> None:
            self.quiet = True
            if not self.stderr:
                lose_stdout()

    return _Console


_stdout_lost = [False]  # one command line at a time (``cli`` resets it)


def lose_stdout() -> None:
    """The reader of stdout went away (``phx checkpoint list | head -1``): stdout points at
    /dev/null from then on, so that what the command still writes (and the interpreter's last
    flush) fails nothing, and the command ends with its own exit code (rich's default was exit 1).
    What must not go on unread asks ``stdout_lost``: a loop stops, a delivery is not marked."""
    _stdout_lost[0] = True
    stdout_to_devnull()


def stdout_lost() -> bool:
    """Whether the reader of stdout went away during this command (``lose_stdout``)."""
    return _stdout_lost[0]


def write_stdout(text: str) -> None:
    """``text`` on stdout, flushed; a reader gone is ``lose_stdout``, not an error."""
    if not _write_stdout(text):
        _stdout_lost[0] = True


def _make_console(*, stderr: bool = False) -> Console:
    """The rich console of ``phx``'s text output (stdout, or stderr for errors)."""
    return _console_class()(stderr=stderr, highlight=False, soft_wrap=True)


class _Exit(Exception):
    def __init__(self, code: int) -> None:
        self.code = code


def _exit_code_for(exc: PhoenixError) -> int:
    if isinstance(exc, UsageError):
        return EXIT_USAGE
    if isinstance(exc, (CorruptStateError, SchemaVersionError)):
        return EXIT_DATA
    if isinstance(exc, RefusedError):
        return EXIT_REFUSED
    return EXIT_FAILED


class Output:
    """Where a command's answer goes: rich text for people, one JSON document with ``--json``."""

    def __init__(self, as_json: bool) -> None:
        self.as_json = as_json
        self._console: Console | None = None

    @property
    def console(self) -> Console:
        if self._console is None:
            self._console = _make_console()
        return self._console

    @staticmethod
    def write_document(document: dict[str, Any], *, one_line: bool = False) -> None:
        """One ``--json`` document on stdout, answer or error alike, the only way one is
        written (``phx team resume|probe``'s fast path in ``_entry`` writes the same text):
        UTF-8 text as itself (``ensure_ascii=False``), each lone surrogate (from a file written
        by hand, a path that was not UTF-8) as U+FFFD (``valid_text``): UTF-8 cannot write one,
        and a ``\\udce9`` escape would hand the reader one back. Indented, or ``one_line`` for
        a stream of documents, one a line (``phx watchdog --loop``, ``phx team inbox --follow``).
        Use ``json`` for an answer (``"ok": true``); this for a document whose ``ok`` is its own."""
        write_stdout(dumps_output(document, one_line=one_line) + "\n")

    def json(self, data: dict[str, Any], *, one_line: bool = False) -> None:
        """The answer ``{"ok": true, **data}`` (``write_document``)."""
        self.write_document({"ok": True, **data}, one_line=one_line)

    def error(self, exc: BaseException, code: int, *, message: str | None = None) -> None:
        message = " ".join((str(exc) if message is None else message).split()) or type(exc).__name__
        if self.as_json:
            self.write_document(
                {"ok": False, "error": {"type": type(exc).__name__, "message": message, "exit_code": code}}
            )
        else:
            from rich.markup import escape

            _make_console(stderr=True).print(f"[bold red]error:[/] {escape(message)}")


@contextlib.contextmanager
def reported(out: Output) -> Iterator[None]:
    """Errors as every command reports them: a ``PhoenixError`` with its exit code, any other
    ``OSError`` (one the library did not wrap) as a failure; both end the command, never a traceback."""
    try:
        yield
    except PhoenixError as exc:
        code = _exit_code_for(exc)
        out.error(exc, code)
        raise _Exit(code) from None
    except OSError as exc:
        out.error(exc, EXIT_FAILED)
        raise _Exit(EXIT_FAILED) from None


_HANDED_DOWN = "phoenix.handed_down"
"""``ctx.meta`` key (the dict every context of a command line shares): the options a group that is
a command too (``phx checkpoint``) was given before its subcommand, for the subcommand."""

HANDED_DOWN_OPTIONS = frozenset({"agent_id", "home", "as_json", "server", "token"})
"""The options of such a group that its subcommands take too: given before the subcommand, they
apply to it, unless it gives its own."""


def handed_down(ctx: click.Context) -> dict[str, Any]:
    """The options given to the parent group before this subcommand (``phx checkpoint --agent a
    list``): ``agent_id``, ``home``, ``as_json``, and ``server`` and ``token`` when given there."""
    given: dict[str, Any] = ctx.meta.get(_HANDED_DOWN) or {}
    return given


def hand_down(ctx: click.Context, **options: Any) -> None:
    """A group with a subcommand to run: keep ``options`` (those of ``HANDED_DOWN_OPTIONS`` it was
    given) for the subcommand, and refuse (a usage error) its other options given on the command
    line, which are the group's own command's (``phx checkpoint --summary S``) and mean nothing
    to a subcommand. Nothing is opened: the subcommand opens the agent, so that its own
    ``--agent`` wins over a bad ``$PHOENIX_AGENT`` and its errors follow its ``--json``."""
    from click.core import ParameterSource

    own = [
        param.opts[0]
        for param in ctx.command.params
        if param.name not in HANDED_DOWN_OPTIONS
        and param.opts
        and ctx.get_parameter_source(param.name or "") is ParameterSource.COMMANDLINE
    ]
    if own:
        raise click.UsageError(
            f"{', '.join(own)} {'applies' if len(own) == 1 else 'apply'} to `{ctx.command_path}` without a "
            "subcommand, not to "
            f"`{ctx.command_path} {ctx.invoked_subcommand}`.",
            ctx,
        )
    ctx.meta.setdefault(_HANDED_DOWN, {}).update({k: v for k, v in options.items() if v})


LANE_COMMANDS = frozenset({"state", "note", "brief", "log"})
"""The commands that work on the lane of the session they run in (``$PHOENIX_SESSION_ID``, or
``--session``) when it has one; every other command works on the agent's primary lane."""


def common(func: F) -> F:
    """``--agent``, ``--home`` and ``--json`` for a command; builds the ``Agent`` and maps errors.

    On a group that is a command too (``phx checkpoint``), they apply to its subcommand when it
    runs one (``hand_down``), unless the subcommand gives its own; the group opens no agent then."""

    @click.option("--json", "as_json", is_flag=True, help="Print one JSON document (stable format) instead of text.")
    @click.option(
        "--home", "home", metavar="PATH", help="Phoenix home (default: $PHOENIX_HOME or .phoenix/ at the git root)."
    )
    @click.option("--agent", "agent_id", metavar="ID", help="Agent id (default: $PHOENIX_AGENT or 'default').")
    @functools.wraps(func)
    def wrapper(*args: Any, agent_id: str | None, home: str | None, as_json: bool, **kwargs: Any) -> object:
        ctx = click.get_current_context()
        if isinstance(ctx.command, click.Group) and ctx.invoked_subcommand is not None:
            hand_down(ctx, agent_id=agent_id, home=home, as_json=as_json)
            return None
        given = handed_down(ctx)
        agent_id = given.get("agent_id") if agent_id is None else agent_id
        home = given.get("home") if home is None else home
        out = Output(as_json or bool(given.get("as_json")))
        with reported(out):
            if given.get("server"):  # a subcommand that takes --server took it (``_cli_remote.attach``)
                raise UsageError(f"--server does not apply to `{ctx.command_path}`: it works on the local home only.")
            agent = Agent.open(agent_id, home=Home(os.path.abspath(home)) if home else None)
            if ctx.find_root().invoked_subcommand in LANE_COMMANDS:
                # A session with a lane of its own writes there (docs/lanes.md).
                agent.follow_session(kwargs.get("session") or os.environ.get("PHOENIX_SESSION_ID"))
            return func(*args, agent=agent, out=out, **kwargs)

    return wrapper  # type: ignore[return-value]


def home_common(func: F) -> F:
    """``--home`` and ``--json`` for a command that works on the home, not on one agent (teams,
    the server, tokens, the store); gives it ``home``, its ``config`` (read once, here) and ``out``
    and maps errors to exit codes."""

    @click.option("--json", "as_json", is_flag=True, help="Print one JSON document (stable format) instead of text.")
    @click.option(
        "--home",
        "home_path",
        metavar="PATH",
        help="Phoenix home (default: $PHOENIX_HOME or .phoenix/ at the git root).",
    )
    @functools.wraps(func)
    def wrapper(*args: Any, home_path: str | None, as_json: bool, **kwargs: Any) -> object:
        out = Output(as_json)
        with reported(out):
            from phoenix_protocol.core._config import load_config

            home = Home(os.path.abspath(home_path)) if home_path else Home.resolve()
            config = load_config(home.root, project_root=home.project_root)
            return func(*args, home=home, config=config, out=out, **kwargs)

    return wrapper  # type: ignore[return-value]


def _state_payload(agent: Agent, state: AgentState) -> dict[str, Any]:
    store = "files"
    if agent.state.remote is not None:
        from phoenix_protocol.store._pg import describe

        store = describe(str(agent.config.store))
    return {
        "agent": agent.id,
        "home": agent.home.root,
        "path": agent.state.path,
        "store": store,
        "state": state.to_dict(),
    }


def _print_state(out: Output, agent: Agent, state: AgentState, *, headline: str | None = None) -> None:
    if out.as_json:
        out.json(_state_payload(agent, state))
        return
    from rich.markup import escape
    from rich.table import Table

    colour = {"working": "yellow", "idle": "green", "error": "red"}[state.status]
    if headline:
        out.console.print(headline)
    table = Table(show_header=False, box=None, padding=(0, 2))
    table.add_column(style="bold")
    table.add_column()
    table.add_row("agent", escape(agent.id))
    table.add_row(
        "status",
        f"[{colour}]{state.status}[/] (by {state.updated_by}{', ' + state.status_event if state.status_event else ''})",
    )
    table.add_row("task", escape(state.current_task or "-"))
    if state.last_output:
        table.add_row("last output", escape(state.last_output))
    if state.error_message:
        table.add_row("error", f"[red]{escape(state.error_message)}[/]")
    table.add_row("last active", state.last_active or "-")
    if state.session_id:
        table.add_row("session", escape(state.session_id))
    if state.pid:
        table.add_row("process", f"pid {state.pid} on {escape(state.host or '?')}")
    table.add_row("heartbeats", str(state.heartbeat_seq))
    if state.last_tool:
        ok = "ok" if state.last_tool.get("ok", True) else "[red]failed[/]"
        table.add_row("last tool", f"{escape(str(state.last_tool.get('name')))} ({ok})")
    drift = state.drift if isinstance(state.drift, dict) else None
    if drift is not None:  # an episode of operational drift, until the next progress (docs/drift.md)
        kind = escape(str(drift.get("kind") or "drift"))
        since = f" (since {escape(str(drift['since']))})" if drift.get("since") else ""
        table.add_row("drift", f"[red]{kind}[/]: {escape(str(drift.get('detail') or ''))}{since}")
    refresh = state.refresh_requested if isinstance(state.refresh_requested, dict) else None
    if refresh is not None:  # a forced refresh due: the next session starts from a fresh brief
        line = f"pending: {escape(str(refresh.get('reason') or 'requested'))}"
        line += f" (at {escape(str(refresh['at']))})" if refresh.get("at") else ""
        if refresh.get("checkpoint"):
            line += f"; checkpoint {escape(str(refresh['checkpoint']))}"
        if refresh.get("typed_at"):
            line += f"; {escape(str(refresh.get('command') or 'clear'))} typed into tmux pane at {escape(str(refresh['typed_at']))}"
        table.add_row("refresh", f"[yellow]{line}[/]")
    watched = state.extra.get("watchdog")
    flag = watched.get("flag") if isinstance(watched, dict) else None
    if isinstance(flag, str) and ":" in flag:  # the watchdog found the process stopped or hung
        condition, pid = flag.split(":", 1)
        table.add_row("watchdog", f"[magenta]{escape(condition)}[/] (process {escape(pid)})")
    from phoenix_protocol.agent._state import other_tasks, task_notes

    loops, actions = task_notes(state)  # the current task's; an earlier task's are counted
    for item in loops:
        table.add_row("open loop", f"[{item['id']}] {escape(item['text'])}")
    for item in actions:
        table.add_row("next action", f"[{item['id']}] {escape(item['text'])}")
    for task, count in other_tasks(state):
        table.add_row(
            "earlier task", f"{escape(task) if task else '(no task)'}: {count} open item{'' if count == 1 else 's'}"
        )
    out.console.print(table)


class _Group(click.Group):
    def format_epilog(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        with formatter.section("Exit codes"):
            formatter.write_dl([(str(k), v) for k, v in EXIT_CODES.items()])


def version_line() -> str:
    """``phx --version``'s answer: the version (``phoenix_protocol._version``, the one place it is
    written; the wheel's metadata is built from it), and the commit when Phoenix runs from a clone
    (an editable install, ``make demo``): ``phx, version 0.2.0.dev0 (git a55e476-dirty)``."""
    from phoenix_protocol import __version__
    from phoenix_protocol.core._git import checkout_revision
    from phoenix_protocol.integrations._install import install_dir

    revision = checkout_revision(install_dir())
    return f"phx, version {__version__}" + (f" (git {revision})" if revision else "")


def _print_version(ctx: click.Context, _param: click.Parameter, value: bool) -> None:
    if value and not ctx.resilient_parsing:
        click.echo(version_line())
        ctx.exit()


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.option(
    "--version",
    is_flag=True,
    expose_value=False,
    is_eager=True,
    callback=_print_version,
    help="Show the version (and the commit, run from a clone) and exit.",
)
def main_group() -> None:
    """Phoenix Protocol: AI-agent sessions are disposable, their state is not.

    State lives in a Phoenix home (.phoenix/ at the root of your git work tree), is written
    by Claude Code hooks (`phx install claude-code`), and is handed to the next session as a
    brief. Start with `phx demo`.
    """


# -- phx state ------------------------------------------------------------------------------


@main_group.group("state")
def state_group() -> None:
    """Read or set the agent's status (working, idle, error).

    Example: phx state working "Implementing user authentication"
    """


def _status_command(name: str, status: str, help_text: str, *, arg: str | None, event: str | None = None) -> None:
    def command(
        agent: Agent, out: Output, text: str | None = None, session: str | None = None, force: bool = False
    ) -> None:
        state = agent.state.set_status(
            status,
            text,
            source="model",
            session_id=session or os.environ.get("PHOENIX_SESSION_ID") or None,
            force=force,
            event=event,
        )
        _print_state(out, agent, state, headline=f"[bold]{agent.id}[/]: {name}")

    command.__doc__ = help_text
    command.__name__ = f"state_{name}"
    wrapped: Any = common(command)
    wrapped = click.option("--force", is_flag=True, help="Override a higher-precedence status (logged).")(wrapped)
    wrapped = click.option("--session", metavar="ID", help="Session making the change (default: $PHOENIX_SESSION_ID).")(
        wrapped
    )
    if arg == "required":
        wrapped = click.argument("text")(wrapped)
    elif arg == "optional":
        wrapped = click.argument("text", required=False)(wrapped)
    state_group.command(name)(wrapped)


_status_command(
    "working",
    "working",
    'Mark the agent working on TASK.\n\nExample: phx state working "Add refresh tokens"',
    arg="required",
)
_status_command(
    "done",
    "idle",
    'Mark the task done (status idle) with a SUMMARY.\n\nExample: phx state done "JWT middleware merged"',
    arg="optional",
)
_status_command(
    "error",
    "error",
    'Mark the agent in error with MESSAGE.\n\nExample: phx state error "tests fail on CI"',
    arg="required",
)
_status_command(
    "idle", "idle", "Mark the agent idle and clear its task.\n\nExample: phx state idle", arg=None, event="state_idle"
)


@state_group.command("show")
@common
def state_show(agent: Agent, out: Output) -> None:
    """Show the agent's state.json.

    Example: phx state show --json
    """
    state = agent.state.read()
    _print_state(out, agent, state)


# -- phx note -------------------------------------------------------------------------------


@main_group.group("note")
def note_group() -> None:
    """Keep the open loops and next actions the brief hands over.

    Example: phx note next-action "Write integration tests"
    """


def _note_added(out: Output, agent: Agent, state: AgentState, number: int, kind: str, text: str) -> None:
    if out.as_json:
        item = next(i for i in state.open_loops + state.next_actions if i["id"] == number)
        out.json({"agent": agent.id, "note": {"kind": kind, **item}, "state": state.to_dict()})
    else:
        from rich.markup import escape

        label = "open loop" if kind == "open_loop" else "next action"
        out.console.print(f"added {label} [bold][{number}][/] {escape(text)}")


@note_group.command("open-loop")
@click.argument("text")
@common
def note_open_loop(agent: Agent, out: Output, text: str) -> None:
    """Record an open loop (something unfinished to keep in mind).

    Example: phx note open-loop "Refresh token logic not written"
    """
    state, number = agent.state.add_note("open_loop", text)
    _note_added(out, agent, state, number, "open_loop", text)


@note_group.command("next-action")
@click.argument("text")
@common
def note_next_action(agent: Agent, out: Output, text: str) -> None:
    """Record a next action for whoever picks the work up.

    Example: phx note next-action "Write integration tests for auth endpoints"
    """
    state, number = agent.state.add_note("next_action", text)
    _note_added(out, agent, state, number, "next_action", text)


@note_group.command("resolve")
@click.argument("number", type=int)
@common
def note_resolve(agent: Agent, out: Output, number: int) -> None:
    """Resolve (remove) open loop or next action NUMBER; the ops log keeps it.

    Example: phx note resolve 2
    """
    state, item = agent.state.resolve_note(number)
    if out.as_json:
        out.json({"agent": agent.id, "resolved": item, "state": state.to_dict()})
    else:
        from rich.markup import escape

        out.console.print(f"resolved [bold][{number}][/] {escape(str(item.get('text', '')))}")


@note_group.command("list")
@common
def note_list(agent: Agent, out: Output) -> None:
    """List open loops and next actions.

    Example: phx note list
    """
    state = agent.state.read()
    if out.as_json:
        out.json({"agent": agent.id, "open_loops": state.open_loops, "next_actions": state.next_actions})
        return
    from rich.markup import escape

    from phoenix_protocol.agent._state import note_task, task_notes

    loops, actions = task_notes(state)  # the current task's; each note belongs to its task
    for title, items in (("Open loops", loops), ("Next actions", actions)):
        out.console.print(f"[bold]{title}[/]")
        for item in items:
            out.console.print(f"  [{item['id']}] {escape(item['text'])}")
        if not items:
            out.console.print("  (none)")
    earlier: dict[str, list[str]] = {}
    for item in sorted(state.open_loops + state.next_actions, key=lambda i: i["id"]):
        if item not in loops and item not in actions:
            earlier.setdefault(note_task(item, state), []).append(f"  [{item['id']}] {escape(item['text'])}")
    for task, lines in earlier.items():
        out.console.print(f"[bold]Earlier task[/] {escape(task) if task else '(no task)'}")
        for line in lines:
            out.console.print(line)


# -- phx brief / log ------------------------------------------------------------------------


@main_group.command("brief")
@click.option("--no-write", is_flag=True, help="Print the brief without writing brief.md.")
@common
def brief_command(agent: Agent, out: Output, no_write: bool) -> None:
    """Generate brief.md from state, recent ops, notes and git, and print it.

    Example: phx brief
    """
    text = agent.render_brief() if no_write else agent.write_brief()
    if out.as_json:
        out.json({"agent": agent.id, "path": agent.brief_path, "written": not no_write, "brief": text})
    else:
        from rich.markdown import Markdown

        out.console.print(Markdown(visible(text)))


@main_group.command("log")
@click.option("--tail", "tail", type=click.IntRange(min=1), default=20, show_default=True, help="Newest N events.")
@click.option("--all", "show_all", is_flag=True, help="Every event, across rotations.")
@common
def log_command(agent: Agent, out: Output, tail: int, show_all: bool) -> None:
    """Show the ops log (ops.jsonl), newest last.

    Example: phx log --tail 50 --json
    """
    events, problems = agent.ops.read() if show_all else agent.ops.tail(tail)
    if out.as_json:
        out.json(
            {"agent": agent.id, "path": agent.ops.path, "events": events, "problems": [p.as_dict() for p in problems]}
        )
        return
    _print_events(out, events)
    for problem in problems:
        out.console.print(f"[yellow]warning:[/] {problem}")


def _compact_meta(meta: Any, limit: int = 120) -> str:
    import json

    if not isinstance(meta, dict):
        return visible(json.dumps(meta, ensure_ascii=False), layout=False)[:limit]
    parts = []
    for key, value in meta.items():
        text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
        parts.append(f"{key}={' '.join(str(text).split())}")
    joined = visible(" ".join(parts), layout=False)
    return joined if len(joined) <= limit else joined[: limit - 1] + "…"


def _event_cells(event: dict[str, Any]) -> tuple[str, str, str, str]:
    """An ops event's seq, time, name and coloured status, as rich markup."""
    from rich.markup import escape

    colours = {"ok": "green", "warn": "yellow", "error": "red"}
    status = str(event.get("status", ""))
    return (
        escape(str(event.get("seq", ""))),
        escape(str(event.get("ts", ""))[:23].replace("T", " ")),
        escape(str(event.get("event", ""))),
        f"[{colours.get(status, 'white')}]{escape(status)}[/]",
    )


def _print_events(out: Output, events: list[dict[str, Any]]) -> None:
    from rich.markup import escape
    from rich.table import Table

    if out.console.width < 110:
        # Narrow terminal: a meta column would be a sliver; each event's meta goes on its own
        # indented line(s) under it instead.
        from rich.padding import Padding
        from rich.text import Text

        for event in events:
            seq, ts, name, status = _event_cells(event)
            out.console.print(f"[bold]{seq:>5}[/]  {ts}  {name}  {status}")
            meta = event.get("meta")
            if meta:
                text = Text(_compact_meta(meta, 300), style="dim")
                out.console.print(Padding(text, (0, 0, 0, 7)), soft_wrap=False)
    else:
        table = Table(box=None, padding=(0, 1), header_style="bold")
        for column in ("seq", "time (UTC)", "event", "status"):
            table.add_column(column, no_wrap=True)
        table.add_column("meta", overflow="fold", ratio=1)
        for event in events:
            meta = event.get("meta")
            table.add_row(*_event_cells(event), escape(_compact_meta(meta)) if meta else "")
        out.console.print(table)
    if not events:
        out.console.print("(no events yet)")


# -- phx doctor -----------------------------------------------------------------------------


@main_group.command("doctor")
@click.option("--check", "check_only", is_flag=True, help="Report only; repair nothing.")
@click.option("--all-agents", is_flag=True, help="Check every agent in the home, not just --agent.")
@click.option(
    "--env",
    "describe_env",
    is_flag=True,
    help="Describe the environment instead (Python, SQLite, psycopg, agent CLIs, hooks, store); changes nothing.",
)
@common
def doctor_command(agent: Agent, out: Output, check_only: bool, all_agents: bool, describe_env: bool) -> None:
    """Check the home and repair what can be repaired (state rebuilt from the ops log).

    Exit code 3 when a problem remains. Example: phx doctor --all-agents; phx doctor --env
    """
    if describe_env:
        _doctor_env(agent, out)
        return
    from phoenix_protocol.integrations._install import check_installed
    from phoenix_protocol.services._doctor import check_home

    def _hook_problems(project_dir: str | None) -> list[tuple[str, str, str]]:
        from phoenix_protocol.integrations._codex_check import check_codex
        from phoenix_protocol.integrations._install import is_phoenix_hook

        def events() -> list[list[dict[str, Any]]]:
            home = agent.home
            return [Agent(aid, home, config=agent.config).ops.tail(10_000)[0] for aid in home.agent_ids()]

        return check_installed(project_dir=project_dir) + check_codex(project_dir, ours=is_phoenix_hook, events=events)

    agents = [agent]
    unchecked: list[str] = []
    if all_agents:
        agents = [Agent(aid, agent.home, config=agent.config, clock=agent.clock) for aid in agent.home.agent_ids()] or [
            agent
        ]
    else:  # named in the report: a "healthy" that checked one agent must not pass for the home's
        unchecked = [aid for aid in agent.home.agent_ids() if aid != agent.id]
    if out.as_json or len(agents) < 10:
        findings = check_home(
            agent.home, agents, repair=not check_only, hook_problems=_hook_problems, config=agent.config
        )
    else:
        from rich.progress import track

        from phoenix_protocol.services._doctor import check_agent_apart

        findings = check_home(agent.home, [], repair=not check_only, hook_problems=_hook_problems, config=agent.config)
        for each in track(agents, description="checking agents", console=out.console, transient=True):
            findings.extend(check_agent_apart(each, repair=not check_only))
    remaining = [f for f in findings if f.level == "error" and not f.repaired]
    repaired = [f for f in findings if f.repaired]
    if out.as_json:
        out.json(
            {
                "home": agent.home.root,
                "healthy": not remaining,
                "repaired": len(repaired),
                "findings": [f.as_dict() for f in findings],
                "agents_not_checked": unchecked,
            }
        )
    else:
        from rich.markup import escape

        colours = {"ok": "green", "warn": "yellow", "error": "red"}
        for f in findings:
            tag = " [cyan](repaired)[/]" if f.repaired else ""
            where = f" {escape(f.path)}" if f.path else ""
            out.console.print(f"[{colours[f.level]}]{f.level:5}[/]{where}: {escape(f.message)}{tag}")
        if unchecked:
            names = ", ".join(unchecked[:5]) + (f" and {len(unchecked) - 5} more" if len(unchecked) > 5 else "")
            out.console.print(
                f"[yellow]not checked[/]: {len(unchecked)} other agent(s) in this home ({escape(names)}); "
                "`phx doctor --all-agents` checks every agent"
            )
        out.console.print("[green]healthy[/]" if not remaining else f"[red]{len(remaining)} problem(s) remain[/]")
    if remaining:
        raise _Exit(EXIT_DATA)


def _doctor_env(agent: Agent, out: Output) -> None:
    """``phx doctor --env``: ``describe_environment`` as a table (``--json``: the document)."""
    from phoenix_protocol.integrations._environment import describe_environment

    def events() -> list[dict[str, Any]]:
        home = agent.home
        found: list[dict[str, Any]] = []
        for aid in home.agent_ids():
            tail = Agent(aid, home, config=agent.config).ops.tail(2_000)[0]
            found += [{**event, "agent": aid} for event in tail if event.get("event") == "session_start"]
        return found

    doc = describe_environment(agent.home, config=agent.config, project_dir=agent.home.project_root, events=events)
    if out.as_json:
        out.json(doc)
        return
    from rich.markup import escape
    from rich.table import Table

    table = Table(show_header=False, box=None, pad_edge=False)
    table.add_column(style="bold", no_wrap=True)
    table.add_column(overflow="fold")
    phoenix = doc["phoenix"]
    commit = f" (git {phoenix['commit']})" if phoenix["commit"] else ""
    table.add_row("phoenix", f"{phoenix['version']}{commit} in {escape(phoenix['installed_in'])}")
    table.add_row("python", f"{doc['python']['version']} ({escape(phoenix['executable'])})")
    table.add_row("sqlite", doc["sqlite"]["version"])
    psycopg = doc["psycopg"]["version"]
    table.add_row("psycopg", psycopg or "not installed (the [postgres] extra)")
    for cli in doc["clis"]:
        if cli["path"] is None:
            state = f"not installed (no `{cli['command']}` on PATH)"
        else:
            state = f"{escape(cli['version'] or cli['problem'] or '?')} ({escape(cli['path'])})"
        table.add_row(cli["label"], state)
    for hook in doc["hooks"]:
        name = f"{hook['client']} {hook['scope']}"
        if hook["problem"]:
            text = f"[red]{escape(hook['problem'])}[/]"
        elif not hook["installed"] and hook["plugin"]:
            what = "extension" if hook["client"] == "gemini-cli" else "plugin"
            text = f"Phoenix's {what} {escape(hook['plugin'])} enabled for {escape(hook['path'])}"
        elif not hook["installed"]:
            text = f"no Phoenix hooks in {escape(hook['path'])}"
        else:
            ran = hook["last_session_start"]
            when = f"SessionStart last ran {ran['at']}" if ran else "SessionStart has not run in this home"
            text = f"{hook['kind']} command in {escape(hook['path'])} ({len(hook['events'])} events); {when}"
        table.add_row(f"hooks {name}", text)
    store = doc["store"]
    table.add_row("store", f"{store['engine']}: {escape(store['where'])}")
    table.add_row("home", escape(store["home"]))
    out.console.print(table)


# -- phx install / uninstall ----------------------------------------------------------------


def _install_output(out: Output, result: Any, verb: str) -> None:
    """What an install or uninstall wrote where: the file and what it is, the events, the
    command (``--json``: ``InstallResult.as_dict``, a stable document)."""
    if out.as_json:
        out.json(result.as_dict())
        return
    from rich.markup import escape

    path = escape(result.path)
    if result.dry_run:
        if result.removed:
            out.console.print(f"[bold]dry run[/]: {path} would hold nothing and be removed")
        else:
            out.console.print(f"[bold]dry run[/]: {path} would become:")
            # as the file is written: indented, non-ASCII text as itself (a lone surrogate as U+FFFD)
            write_stdout(dumps_output(result.settings) + "\n")
    if not result.changed:
        out.console.print(f"{path} ({escape(result.description)}): nothing to {verb}, already up to date")
        _trust_output(out, result, verb)
        for note in result.notes:
            out.console.print(f"  [yellow]note[/]: {escape(note)}")
        return
    done = "would be " if result.dry_run else ""
    if result.removed:
        out.console.print(f"{done}[green]removed[/] {path}: it held nothing but Phoenix's hooks")
    else:
        what = "created" if result.created else "updated"
        out.console.print(f"{done}[green]{what}[/] {path} ({escape(result.description)})")
    events = sorted({a.split(" ", 1)[1] for a in result.actions}, key=list(result.commands).index)
    first = result.actions[0].split(" ", 1)[0] if result.actions else verb
    out.console.print(f"  {first} the hooks of {escape(', '.join(events))}")
    if verb == "install":
        out.console.print(f"  each runs: [dim]{escape(result.template)}[/]")
        if result.kind == "portable":
            client = result.client
            fast = "local" if "local" in client.scopes else "user"
            out.console.print(
                "  `phx` from PATH wherever Phoenix is installed; nothing at all where it is not. For this "
                f"machine's faster command: `phx install {client.name} --scope {fast}` (the shared one then stands aside)"
            )
        else:
            out.console.print("  this machine's interpreter by absolute path; the shared hooks stand aside for it")
    _trust_output(out, result, verb)
    for note in result.notes:
        out.console.print(f"  [yellow]note[/]: {escape(note)}")


def _trust_output(out: Output, result: Any, verb: str) -> None:
    """Codex's trust entries an install wrote (``--trust``) or an uninstall removed."""
    trust = result.trust
    if not trust or not trust["changed"]:
        return
    from rich.markup import escape

    done = "would be " if result.dry_run else ""
    what = "trusted" if verb == "install" else "forgot the trust of"
    out.console.print(f"  {done}{what} {len(trust['keys'])} hook(s) in {escape(trust['path'])}")


def _mcp_install_output(out: Output, result: Any, verb: str) -> None:
    """What ``phx install --mcp`` or ``phx uninstall --mcp`` wrote where (``--json``:
    ``McpInstallResult.as_dict``)."""
    if out.as_json:
        out.json(result.as_dict())
        return
    from rich.markup import escape

    path = escape(result.path)
    label = escape(result.client.label)
    if result.dry_run and result.changed:
        out.console.print(f"[bold]dry run[/]: the MCP servers of {path} would become:")
        write_stdout(dumps_output(result.servers) + "\n")
    if not result.changed:
        what = "registered" if verb == "install" else "not registered"
        out.console.print(f"{path} ({escape(result.description)}): Phoenix's MCP server is already {what}")
    else:
        done = "would be " if result.dry_run else ""
        out.console.print(
            f"{done}[green]{result.action}[/] the MCP server [bold]phoenix[/] of {label} in {path} "
            f"({escape(result.description)})"
            + (": the file held nothing else and is removed" if result.removed else "")
        )
    if verb == "install" and result.entry is not None:
        argv = " ".join([result.entry["command"], *result.entry["args"]])
        out.console.print(f"  it runs: [dim]{escape(argv)}[/] (in the project, which finds the home)")
    for note in result.notes:
        out.console.print(f"  [yellow]note[/]: {escape(note)}")


_TARGETS = click.Choice(list(CLIENTS))
_SCOPE_HELP = "Which settings: project (shared, commit it), local (this machine; Claude Code only) or user."


def _settings_options(command: Callable[..., None]) -> Callable[..., None]:
    """``--scope`` and ``--project-dir``, which ``phx install`` and ``phx uninstall`` share."""
    command = click.option(
        "--project-dir",
        metavar="DIR",
        help="Project whose .claude/, .gemini/ or .codex/ to use (default: the git work tree root).",
    )(command)
    return click.option(
        "--scope",
        type=click.Choice(["project", "local", "user"]),
        default="project",
        show_default=True,
        help=_SCOPE_HELP,
    )(command)


@main_group.command("install")
@click.argument("target", type=_TARGETS)
@_settings_options
@click.option("--agent", "agent_id", metavar="ID", help="Bake this agent id into the hook commands.")
@click.option(
    "--trust",
    is_flag=True,
    help="Codex: trust Phoenix's hooks (their trusted_hash in ~/.codex/config.toml); Codex runs no untrusted hook.",
)
@click.option("--mcp", "mcp", is_flag=True, help="Register `phx mcp` as the CLI's MCP server instead of the hooks.")
@click.option("--dry-run", is_flag=True, help="Show the result without writing it.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON document instead of text.")
def install_command(
    target: str,
    scope: str,
    project_dir: str | None,
    agent_id: str | None,
    trust: bool,
    mcp: bool,
    dry_run: bool,
    as_json: bool,
) -> None:
    """Install Phoenix's hooks into an agent CLI's settings (claude-code, gemini-cli, codex);
    with --mcp, register Phoenix's MCP server (`phx mcp`) instead.

    Example: phx install claude-code --scope local; phx install codex --trust; phx install gemini-cli --mcp
    """
    from phoenix_protocol.integrations._install import install_hooks

    out = Output(as_json)
    try:
        if mcp:
            from phoenix_protocol.integrations._mcp_install import install_mcp

            if trust:
                raise UsageError("--trust is for Codex's hooks; an MCP server needs no trusted hash.")
            _mcp_install_output(
                out, install_mcp(target, scope, project_dir=project_dir, agent=agent_id, dry_run=dry_run), "install"
            )
            return
        result = install_hooks(target, scope, project_dir=project_dir, agent=agent_id, dry_run=dry_run, trust=trust)
    except PhoenixError as exc:
        out.error(exc, _exit_code_for(exc))
        raise _Exit(_exit_code_for(exc)) from None
    _install_output(out, result, "install")


@main_group.command("uninstall")
@click.argument("target", type=_TARGETS)
@_settings_options
@click.option("--mcp", "mcp", is_flag=True, help="Remove the MCP server `phx install --mcp` registered instead.")
@click.option("--dry-run", is_flag=True, help="Show the result without writing it.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON document instead of text.")
def uninstall_command(
    target: str, scope: str, project_dir: str | None, mcp: bool, dry_run: bool, as_json: bool
) -> None:
    """Remove exactly the hooks `phx install` added (with --mcp: its MCP server).

    Example: phx uninstall claude-code --scope local; phx uninstall codex --mcp --scope user
    """
    from phoenix_protocol.integrations._install import uninstall_hooks

    out = Output(as_json)
    try:
        if mcp:
            from phoenix_protocol.integrations._mcp_install import uninstall_mcp

            _mcp_install_output(
                out, uninstall_mcp(target, scope, project_dir=project_dir, dry_run=dry_run), "uninstall"
            )
            return
        result = uninstall_hooks(target, scope, project_dir=project_dir, dry_run=dry_run)
    except PhoenixError as exc:
        out.error(exc, _exit_code_for(exc))
        raise _Exit(_exit_code_for(exc)) from None
    _install_output(out, result, "uninstall")


# -- phx hook / demo ------------------------------------------------------------------------


@main_group.command("hook", context_settings={"ignore_unknown_options": True})
@click.argument(
    "event",
    type=click.Choice(
        ["session-start", "post-tool-use", "post-tool-use-failure", "pre-compact", "stop", "session-end"]
    ),
)
@click.argument("args", nargs=-1, type=click.UNPROCESSED)
def hook_command(event: str, args: tuple[str, ...]) -> None:
    """Run a Claude Code hook: reads the hook JSON on stdin. Always exits 0.

    With --shared (the command of the shared .claude/settings.json), it does nothing when this
    machine registers Phoenix's own command for the event in local or user scope.

    Example: echo '{"session_id":"s1","cwd":"/repo"}' | phx hook session-start
    """
    from phoenix_protocol.integrations._hooks import main as hook_main

    hook_main([event, *args])


@main_group.command("demo")
@click.option("--keep", is_flag=True, help="Keep the demo's temporary project and print where it is.")
@click.option("--json", "as_json", is_flag=True, help="Print the demo's steps as one JSON document.")
def demo_command(keep: bool, as_json: bool) -> None:
    """Play a real agent session through the real hooks: crash it, recover it.

    Example: phx demo
    """
    import shutil
    import tempfile

    from phoenix_protocol.integrations._demo import DemoStep, run_demo

    out = Output(as_json)
    workdir = tempfile.mkdtemp(prefix="phoenix-demo-")
    steps: list[DemoStep] = []
    try:
        if as_json:
            summary = run_demo(workdir, steps.append)
            out.json({"workdir": workdir if keep else None, "steps": [s.as_dict() for s in steps], **summary})
        else:
            with out.console.status("[bold]starting the agent…", spinner="dots") as status:

                def show(step: DemoStep) -> None:
                    steps.append(step)
                    status.update(f"[bold]{step.title}…")
                    _print_demo_step(out, step)

                summary = run_demo(workdir, show)
            verdict = (
                "[bold green]recovered[/]" if summary["recovery_detected"] else "[bold red]recovery NOT detected[/]"
            )
            out.console.rule(verdict)
            if keep:
                out.console.print(f"demo project kept in {workdir}")
    finally:
        if not keep:
            shutil.rmtree(workdir, ignore_errors=True)
    if not summary["recovery_detected"]:
        raise _Exit(EXIT_FAILED)


def _print_demo_step(out: Output, step: Any) -> None:
    from rich.markup import escape
    from rich.panel import Panel

    console = out.console
    data = step.data
    if step.kind == "setup":
        console.print(f"[bold cyan]●[/] {escape(step.title)}" + (f" (pid {data['pid']})" if "pid" in data else ""))
    elif step.kind == "tool":
        detail = data.get("command") or data.get("path") or ""
        failed = data.get("exit") not in (None, 0)
        mark = "[red]✗[/]" if failed else "[green]✓[/]"
        console.print(f"  {mark} model runs {escape(step.title)}: [dim]{escape(str(detail))}[/]")
    elif step.kind == "hook":
        for res in data.get("results", []):
            code = res["exit"]
            colour = "green" if code == 0 else "red"
            tool = f" ({data['tool']})" if data.get("tool") else ""
            console.print(f"    [{colour}]hook {escape(step.title)}{escape(tool)}[/] exit {code}, {res['ms']} ms")
            if res.get("stderr", "").strip():
                console.print(f"      [yellow]{escape(res['stderr'].strip())}[/]")
    elif step.kind == "crash":
        console.print(f"[bold red]✝ {escape(step.title)}[/] (pid {data.get('pid')})")
    elif step.kind == "check":
        state = data["state"]
        alive = {True: "alive", False: "[red]gone[/]", None: "unknown"}[data["process_alive"]]
        console.print(
            f"[bold cyan]●[/] state.json says [yellow]{state['status']}[/] on "
            f"{escape(repr(state['current_task']))}; recorded agent pid {data['recorded_pid']} is {alive}"
        )
    elif step.kind == "recovery":
        panel = Panel(
            escape(data["context"] or "(no context)"),
            title="additionalContext for the new session",
            border_style="green",
        )
        console.print(panel, soft_wrap=False)
    elif step.kind == "log":
        console.print("[bold]ops.jsonl[/]")
        _print_events(out, data["events"])


def cli(argv: list[str] | None = None) -> int:
    """Run ``phx`` with ``argv``; returns the exit code. Never raises for user errors."""
    _stdout_lost[0] = False
    try:
        return _run(sys.argv[1:] if argv is None else argv)
    finally:
        _finish_behind()


def _finish_behind() -> None:
    """A command returns once what its writes left to the write-behind is done too (a
    checkpoint's ops event): the user looks at the ops log next. A failure there loses no
    checkpoint (the database holds it); it is reported as a warning."""
    behind = sys.modules.get("phoenix_protocol.core._background")
    if behind is None:
        return
    try:
        behind.wait()
    except Exception as exc:  # noqa: BLE001 - the command's own outcome stands
        click.echo(visible(f"warning: finishing what this command wrote behind: {exc}"), err=True)


def _wants_json(args: list[str]) -> bool:
    """Whether the command line asks for ``--json`` (before a ``--``): errors met before a
    command runs (click's parsing) are reported as JSON then too."""
    end = args.index("--") if "--" in args else len(args)
    return "--json" in args[:end]


def _run(args: list[str]) -> int:
    out = Output(_wants_json(args))
    try:
        main_group.main(args=args, prog_name="phx", standalone_mode=False)
    except _Exit as exc:
        return exc.code
    except click.UsageError as exc:
        if type(exc).__name__ == "NoArgsIsHelpError" and exc.ctx is not None:  # click >= 8.2: bare `phx`
            write_stdout(exc.ctx.get_help() + "\n")
            return EXIT_OK
        hint = f" (see `{exc.ctx.command_path} --help`)" if exc.ctx else ""
        _click_error(out, UsageError(f"{exc.format_message()}{hint}"), EXIT_USAGE)
        return EXIT_USAGE
    except click.Abort:
        _click_error(out, OperationError("aborted"), EXIT_FAILED, prefix="")
        return EXIT_FAILED
    except click.exceptions.Exit as exc:
        return int(exc.exit_code)
    except click.ClickException as exc:
        _click_error(out, OperationError(exc.format_message()), exc.exit_code)
        return exc.exit_code
    except Exception as exc:
        if not out.as_json:
            raise  # a bug: its traceback, as Python shows it
        # A bug under --json: the caller still gets one JSON document; the traceback, for the
        # report, goes to stderr.
        import traceback

        traceback.print_exc()
        out.error(exc, EXIT_FAILED, message=f"unexpected error, a bug in Phoenix (traceback on stderr): {exc}")
        return EXIT_FAILED
    return EXIT_OK


def _click_error(out: Output, exc: PhoenixError, code: int, *, prefix: str = "error: ") -> None:
    """An error click met (parsing, an abort): one JSON document under ``--json``, else one line
    on stderr as click would print it."""
    if out.as_json:
        out.error(exc, code)
    else:
        click.echo(prefix + visible(str(exc), layout=False), err=True)


# The commands of seeds 003 and 002 live in their own module; importing it registers them.
# _cli_remote gives the commands that also work on a memory bridge their --server option.
from phoenix_protocol.cli import _cc_teams as _cli_cc_teams  # noqa: E402, F401
from phoenix_protocol.cli import _clinic as _cli_clinic  # noqa: E402, F401
from phoenix_protocol.cli import _db as _cli_db  # noqa: E402, F401
from phoenix_protocol.cli import _drift as _cli_drift  # noqa: E402, F401
from phoenix_protocol.cli import _memory as _cli_memory  # noqa: E402, F401
from phoenix_protocol.cli import _remote as _cli_remote  # noqa: E402, F401
from phoenix_protocol.cli import _server as _cli_server  # noqa: E402, F401
from phoenix_protocol.cli import _sessions as _cli_sessions  # noqa: E402, F401
from phoenix_protocol.cli import _status as _cli_status  # noqa: E402, F401
from phoenix_protocol.cli import _teams as _cli_teams  # noqa: E402, F401
from phoenix_protocol.cli import _watchdog as _cli_watchdog  # noqa: E402, F401
