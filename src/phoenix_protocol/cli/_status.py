"""``phx status``: every agent and lane of the home, or of every home this user used (``--all``).

Registered on the ``phx`` group by ``_cli``.
"""

from __future__ import annotations

from typing import Any

import click

from phoenix_protocol.cli._main import Output, home_common, main_group
from phoenix_protocol.cli._watchdog import VERDICT_COLOURS
from phoenix_protocol.core._config import Config
from phoenix_protocol.core._home import Home

__all__: list[str] = []

_COLOURS = {**VERDICT_COLOURS, "error": "red", "idle": "white"}
_STATUS_COLOURS = {"working": "yellow", "idle": "green", "error": "red"}


def _age(seconds: int | None) -> str:
    if seconds is None:
        return "-"
    if seconds < 90:
        return f"{seconds}s ago"
    if seconds < 90 * 60:
        return f"{seconds // 60}m ago"
    if seconds < 36 * 3600:
        return f"{seconds // 3600}h ago"
    return f"{seconds // 86400}d ago"


_LEGEND = (
    "lane: primary is the agent's state.json; others are sessions that ran beside it (their id shortened; "
    "`--json` has it whole). liveness: the watchdog's verdict."
)


def _render(out: Output, report: dict[str, Any]) -> None:
    from rich.markup import escape
    from rich.table import Table

    for home in report["homes"]:
        rows = [r for r in report["lanes"] if r["home"] == home["path"]]
        title = f"{home['path']}"
        if not home["exists"]:
            out.console.print(f"[bold]{escape(title)}[/]: [yellow]no such home (moved or deleted)[/]")
            continue
        if home["error"]:
            out.console.print(f"[bold]{escape(title)}[/]: [red]{escape(home['error'])}[/]")
            continue
        if not rows:
            out.console.print(f"[bold]{escape(title)}[/]: no agents yet")
            continue
        table = Table(box=None, padding=(0, 1), header_style="bold", title=escape(title), title_justify="left")
        for column in ("agent", "lane", "status", "liveness", "active"):
            table.add_column(column, no_wrap=True)
        table.add_column("task", overflow="fold")
        table.add_column("next", overflow="fold")
        for row in rows:
            status = row["status"] or "?"
            colour = _STATUS_COLOURS.get(status, "red")
            verdict = row["verdict"]
            liveness = f"[{_COLOURS.get(verdict, 'white')}]{verdict}[/]"
            if row["recover"]:
                nxt = "[red]the next session recovers it[/]"
                if row["next_action"]:
                    nxt = f"{escape(row['next_action'])}; {nxt}"
            elif row["problem"]:
                nxt = f"[red]{escape(row['problem'])}[/]"
            else:
                nxt = escape(row["next_action"] or "-")
            table.add_row(
                escape(row["agent"]),
                "primary" if row["lane"] is None else escape(row["lane"][:8]),  # as git shortens ids
                f"[{colour}]{status}[/]",
                liveness,
                _age(row["idle_seconds"]),
                escape(row["task"] or "-"),
                nxt,
            )
        out.console.print(table)
    if any(row["lane"] is not None for row in report["lanes"]):
        out.console.print(f"[dim]{_LEGEND}[/]")
    if not report["homes"]:
        out.console.print("(no Phoenix homes recorded for this user yet: one is recorded when a session starts in it)")


@main_group.command("status")
@click.option(
    "--all", "all_homes", is_flag=True, help="Every home this user used on this machine (recorded at session starts)."
)
@home_common
def status_command(home: Home, config: Config, out: Output, all_homes: bool) -> None:
    """Every agent and lane of the home: status, task, liveness by the watchdog's rules, last
    activity, next action, and whether the next session started there recovers it.

    Reads only (the watchdog acts: `phx watchdog`). Example: phx status --all --json
    """
    import os

    from phoenix_protocol.core._homes import known_homes, register_home
    from phoenix_protocol.services._status import status_report

    if os.path.isdir(home.root):
        from phoenix_protocol.core._clock import system_clock
        from phoenix_protocol.core._errors import PhoenixError

        try:
            register_home(home.root, now_ms=system_clock.now_ms())
        except (PhoenixError, OSError):
            pass  # the list is a convenience: status is shown all the same
    homes = [home]
    if all_homes:
        recorded = [Home(entry["path"]) for entry in known_homes()]
        homes = recorded + (
            [] if any(h.root == home.root for h in recorded) or not os.path.isdir(home.root) else [home]
        )
    report = status_report(homes, configs={home.root: config})
    if out.as_json:
        out.json(report)
    else:
        _render(out, report)
