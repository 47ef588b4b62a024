"""``phx drift``: exemptions from the drift rules for the task at hand (docs/drift.md).

Registered on the ``phx`` group by ``_main``.
"""

from __future__ import annotations

from typing import Any

import click

from phoenix_protocol.cli._main import Output, common, main_group
from phoenix_protocol.services._agent import Agent

__all__: list[str] = []


@main_group.group("drift")
def drift_group() -> None:
    """Drift exemptions: what is legitimate for the task at hand (polling, a read-only investigation).

    Example: phx drift exempt no_progress
    """


def _show(out: Output, agent: Agent, record: dict[str, Any] | None, headline: str) -> None:
    if out.as_json:
        out.json({"agent": agent.id, "exemption": record})
        return
    from rich.markup import escape

    if record is None:
        out.console.print(f"{headline}: no drift exemption")
        return
    task = record.get("task")
    scope = "every task" if task is None else f"task '{escape(str(task))}'"
    rules = ", ".join(record.get("rules") or []) or "none"
    commands = ", ".join(f"'{escape(c)}'" for c in record.get("commands") or []) or "none"
    active = "" if record.get("active", True) else " [yellow](not active: the task changed)[/]"
    out.console.print(f"{headline}: {scope}: rules {rules}; commands {commands}{active}")


@drift_group.command("exempt")
@click.argument("rules", nargs=-1)
@click.option(
    "--command", "commands", multiple=True, metavar="PREFIX", help="A shell command prefix whose calls do not count."
)
@click.option("--any-task", is_flag=True, help="Hold for every task until cleared (default: the current task only).")
@common
def drift_exempt(agent: Agent, out: Output, rules: tuple[str, ...], commands: tuple[str, ...], any_task: bool) -> None:
    """Exempt the current task from drift RULES (repetition, persistent_failure, error_rate,
    slowdown, no_progress) and from counting calls of --command PREFIX (compared normalized).

    Example: phx drift exempt no_progress --command "kubectl rollout status"
    """
    from phoenix_protocol.services._drift_exempt import exempt

    record = exempt(agent, list(rules), commands=list(commands), any_task=any_task)
    _show(out, agent, {**record, "active": True}, "exempted")


@drift_group.command("clear")
@common
def drift_clear(agent: Agent, out: Output) -> None:
    """Remove the drift exemption.

    Example: phx drift clear
    """
    from phoenix_protocol.services._drift_exempt import clear_exemption

    cleared = clear_exemption(agent)
    if out.as_json:
        out.json({"agent": agent.id, "cleared": cleared})
    else:
        out.console.print("cleared the drift exemption" if cleared else "no drift exemption to clear")


@drift_group.command("show")
@common
def drift_show(agent: Agent, out: Output) -> None:
    """Show the drift exemption and whether it holds for the current task.

    Example: phx drift show --json
    """
    from phoenix_protocol.services._drift_exempt import exemption

    _show(out, agent, exemption(agent), "drift")
