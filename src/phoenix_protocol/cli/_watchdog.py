"""``phx watchdog`` and ``phx recover``: the CLI of the watchdog and of seed 003's emergency recovery.

Registered on the ``phx`` group by ``_cli``.
"""

from __future__ import annotations

import os
import signal
import time
from typing import TYPE_CHECKING, Any

import click

from phoenix_protocol.cli._main import EXIT_ATTENTION, Output, _Exit, common, main_group, stdout_lost
from phoenix_protocol.core._config import SETTINGS
from phoenix_protocol.core._home import Home
from phoenix_protocol.services._agent import Agent

if TYPE_CHECKING:
    from phoenix_protocol.services._watchdog import WatchdogReport

__all__: list[str] = []

VERDICT_COLOURS = {
    "alive": "green",
    "stopped": "magenta",
    "hung": "magenta",
    "grace": "yellow",
    "stalled": "red",
    "remote": "cyan",
    "unknown": "yellow",
    "corrupt": "red",
}


def _render(out: Output, report: Any) -> None:
    from rich.markup import escape
    from rich.table import Table

    table = Table(box=None, padding=(0, 1), header_style="bold", title=f"watchdog pass at {report.checked_at}")
    for column in ("agent", "verdict", "status", "pid", "action"):
        table.add_column(column, no_wrap=True)
    table.add_column("detail", overflow="fold")
    for v in report.verdicts:
        colour = VERDICT_COLOURS.get(v.verdict, "white")
        detail = v.detail + (f"; drift: {v.drift}" if v.drift else "") + (f"; tmux pane {v.pane}" if v.pane else "")
        if v.refresh:
            detail += f"; refresh ({v.refresh.get('reason')}): {v.refresh['action']}: {v.refresh.get('detail')}"
        table.add_row(
            escape(v.label),
            f"[{colour}]{v.verdict}[/]",
            v.status or "-",
            str(v.pid or "-"),
            v.action or "",
            escape(detail),
        )
    out.console.print(table)
    if not report.verdicts:
        out.console.print("(no agents in this home)")
    for mate in report.teammates:
        if "error" in mate:
            out.console.print(f"team {escape(mate['team'])}: [red]{escape(mate['error'])}[/]")
            continue
        action = f" — tasks returned: {', '.join(mate.get('returned', []))}" if mate.get("action") else ""
        out.console.print(f"team {escape(mate['team'])}: {escape(mate['name'])} {mate['class']}{action}")
    if report.tmux is not None:
        for pane in report.tmux:
            found = ", ".join(f"{a['cli'] or a['name']}({a['pid']})" for a in pane.agents) or "no agent process"
            out.console.print(f"tmux {escape(pane.target)} ({escape(pane.pane_id or '')}): {escape(found)}")


@main_group.command("watchdog")
@click.option("--once", "once", is_flag=True, help="One pass, then exit (the default without --loop or --interval).")
@click.option("--loop", is_flag=True, help="Run a pass every `watchdog_interval` seconds (60) until SIGTERM/SIGINT.")
@click.option(
    "--interval",
    type=click.FloatRange(min=SETTINGS["watchdog_interval"][2], max=SETTINGS["watchdog_interval"][3]),
    help="Run a pass every SECONDS until SIGTERM/SIGINT (instead of `watchdog_interval`).",
)
@click.option(
    "--grace",
    type=click.FloatRange(min=0),
    help="Seconds after the last heartbeat before a dead agent is marked stalled.",
)
@click.option(
    "--tmux",
    "use_tmux",
    is_flag=True,
    help="Also look for agent processes in tmux panes (seed 000), and perform a due forced refresh "
    "in the pane of an agent listed in `tmux_refresh_agents` that is idle at its prompt (seed 003).",
)
@click.option(
    "--tmux-socket",
    type=click.Path(dir_okay=False),
    help="The tmux server's socket (tmux -S) for --tmux (setting `watchdog_tmux_socket`); default: the agent's "
    "recorded one, else tmux's default.",
)
@click.option("--dry-run", is_flag=True, help="Report only: mark nothing, take no checkpoint.")
@common
def watchdog_command(
    agent: Agent,
    out: Output,
    once: bool,
    loop: bool,
    interval: float | None,
    grace: float | None,
    use_tmux: bool,
    tmux_socket: str | None,
    dry_run: bool,
) -> None:
    """Check every agent of the home against its real process; mark dead ones stalled.

    Exit code 5 when a pass found agents that need attention: stalled (marked), stopped or hung
    (reported), drifting, teammates' tasks returned, or a refresh typed into a tmux pane.
    Example: phx watchdog --once --json
    """
    from phoenix_protocol.services._watchdog import run_pass

    if once and (loop or interval is not None):
        from phoenix_protocol.core._errors import UsageError

        raise UsageError("give --once, or --loop / --interval, not both.")
    if loop and interval is None:
        interval = agent.config.watchdog_interval
    overrides = {"watchdog_grace": grace} if grace is not None else None
    home: Home = agent.home

    def one_pass() -> WatchdogReport:
        report = run_pass(
            home,
            clock=agent.clock,
            act=not dry_run,
            tmux=use_tmux or tmux_socket is not None,
            tmux_socket=tmux_socket,
            config_overrides=overrides,
            config=agent.config,
        )
        if out.as_json:
            out.json(report.as_dict(), one_line=True)  # one line per pass, handed over at once (flushed)
        else:
            _render(out, report)
        return report

    if interval is None:
        report = one_pass()
        if report.needs_attention:
            raise _Exit(EXIT_ATTENTION)
        return
    stop = {"now": False}

    def handle(signum: int, frame: object) -> None:
        stop["now"] = True

    previous = {sig: signal.signal(sig, handle) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        while not stop["now"] and not stdout_lost():  # a reader gone (`| head`): the loop ends
            one_pass()
            deadline = time.monotonic() + interval
            while not stop["now"] and not stdout_lost() and time.monotonic() < deadline:
                time.sleep(min(0.2, max(0.0, deadline - time.monotonic())))
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    if not out.as_json:
        out.console.print(f"watchdog stopped (pid {os.getpid()})")


@main_group.command("recover")
@click.option("--reason", default="reported by hand", show_default=True, help="Why (logged).")
@common
def recover_command(agent: Agent, out: Output, reason: str) -> None:
    """Emergency recovery (seed 003): a recovery checkpoint, a forced refresh (the next session
    starts from a clean brief), and an ops event that reports it.

    Example: phx recover --agent zero --reason "repeating the same failing migration"
    """
    from phoenix_protocol.services._checkpoints import clean_reason

    info = agent.checkpoints.emergency_recovery(reason)
    if out.as_json:  # the reason as it was stored: redacted
        out.json({"agent": agent.id, "checkpoint": info.as_dict(), "reason": clean_reason(reason)})
    else:
        from rich.markup import escape

        out.console.print(
            f"[yellow]emergency recovery[/]: checkpoint {escape(info.name)}; the next session starts from a fresh brief"
        )
