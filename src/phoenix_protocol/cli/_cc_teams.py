"""``phx team claude``: the Claude Code agent teams Phoenix recorded from Claude Code's hooks, and
their guardrails (docs/teams.md, "Claude Code agent teams"). Registered on ``phx team`` by
``_main``; the library is ``integrations._cc_teams``."""

from __future__ import annotations

from typing import Any

import click

from phoenix_protocol.cli._main import Output, home_common
from phoenix_protocol.cli._teams import team_group
from phoenix_protocol.core._config import Config
from phoenix_protocol.core._home import Home

__all__: list[str] = []


@team_group.command("claude")
@click.argument("team", metavar="TEAM", required=False)
@click.option("--check-command", metavar="CMD", help="The team's check: TaskCompleted is refused while it fails.")
@click.option("--no-check", is_flag=True, help="No check for this team (whatever phoenix.toml says).")
@click.option(
    "--keep-busy/--no-keep-busy", default=None, help="Send a teammate that goes idle back to its task in progress."
)
@click.option("--keep-busy-limit", type=click.IntRange(1, 1000), metavar="N", help="At most N times in a row per task.")
@click.option("--project-settings", is_flag=True, help="Drop the team's own guardrails: the project's apply.")
@home_common
def team_claude(
    home: Home,
    config: Config,
    out: Output,
    team: str | None,
    check_command: str | None,
    no_check: bool,
    keep_busy: bool | None,
    keep_busy_limit: int | None,
    project_settings: bool,
) -> None:
    """Claude Code's agent teams as Phoenix recorded them: without TEAM, the teams of this
    project; with TEAM, its roster (spawn prompts, transcripts), tasks and messages, and its
    guardrails, which the options set for this team alone.

    Example: phx team claude session-1a2b3c4d --check-command "make test" --keep-busy
    """
    from phoenix_protocol.core._errors import UsageError
    from phoenix_protocol.integrations._cc_teams import describe_team, list_claude_teams, set_guardrails

    changes: dict[str, Any] = {}
    if project_settings:
        changes = {"check_command": None, "keep_busy": None, "keep_busy_limit": None}
    if check_command is not None and no_check:
        raise UsageError("give --check-command or --no-check, not both.")
    if check_command is not None or no_check:
        changes["check_command"] = "" if no_check else check_command
    if keep_busy is not None:
        changes["keep_busy"] = keep_busy
    if keep_busy_limit is not None:
        changes["keep_busy_limit"] = keep_busy_limit
    if team is None:
        if changes:
            raise UsageError("name the team whose guardrails to set (`phx team claude` lists them).")
        teams = list_claude_teams(home, config=config)
        if out.as_json:
            out.json({"teams": teams})
            return
        _teams_table(out, teams)
        return
    if changes:
        set_guardrails(home, team, changes, config=config)
    found = describe_team(home, team, config=config)
    if out.as_json:
        out.json({"team": found})
        return
    _print_team(out, found)


def _teams_table(out: Output, teams: list[dict[str, Any]]) -> None:
    from rich.markup import escape
    from rich.table import Table

    if not teams:
        out.console.print("(no Claude Code team recorded in this project)")
        return
    table = Table(box=None, padding=(0, 1), header_style="bold")
    for column in ("team", "state", "lead session"):
        table.add_column(column, overflow="fold")
    for column in ("teammates", "tasks", "messages"):
        table.add_column(column, justify="right")
    for t in teams:
        table.add_row(
            escape(t["team_name"]),
            t["state"],
            escape(t["lead_session_id"] or "-"),
            str(t["teammates"]),
            str(t["tasks"]),
            str(t["messages"]),
        )
    out.console.print(table)


def _print_team(out: Output, team: dict[str, Any]) -> None:
    from rich.markup import escape

    print_ = out.console.print
    print_(
        f"[bold]{escape(team['team_name'])}[/] ({team['state']}), lead session {escape(team['lead_session_id'] or '-')}"
    )
    for mate in team["members"]:
        prompt = " ".join(str(mate.get("prompt") or "").split())
        print_(
            f"  {escape(mate['name'])} ({escape(str(mate.get('role') or mate.get('agent_type') or '-'))})"
            + (f": {escape(prompt[:100])}" if prompt else "")
        )
    for task in team["tasks"]:
        print_(
            f"  task {escape(task['id'])} [{escape(str(task.get('status')))}, owner "
            f"{escape(str(task.get('owner') or 'none'))}] {escape(str(task.get('subject') or ''))}"
        )
    for message in team["messages"]:
        state = "delivered" if message["delivered_ms"] else ("delivered again" if message["redelivered_ms"] else "")
        print_(
            f"  #{message['seq']} {escape(message['sender'])} → {escape(message['recipient'])} ({message['kind']})"
            + (f" [{state}]" if state else "")
            + f": {escape(' '.join(str(message.get('content') or '').split())[:80])}"
        )
    guard = team["guardrails"]
    print_(
        f"  guardrails: check {escape(guard['check_command'] or '(none)')}, keep busy "
        f"{'on' if guard['keep_busy'] else 'off'} (limit {guard['keep_busy_limit']})"
    )
