"""``phx drift``: exemptions from the drift rules for the task at hand (docs/drift.md); ``phx persona
check``: the persona check over a Claude Code transcript (docs/persona.md).

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


@main_group.group("persona")
def persona_group() -> None:
    """Persona drift checks (seed 002's persona gravity; docs/persona.md).

    Example: phx persona check ~/.claude/projects/-repo/SESSION.jsonl
    """


@persona_group.command("check")
@click.argument("transcript", type=click.Path(dir_okay=False))
@click.option("--scorer", type=click.Choice(["lexical", "embedding"]), help="Default: the persona_scorer setting.")
@click.option("--threshold", type=float, help="Default: the persona_threshold setting (0.5).")
@click.option("--all", "show_all", is_flag=True, help="List every message, not only the ones that failed.")
@common
def persona_check(
    agent: Agent, out: Output, transcript: str, scorer: str | None, threshold: float | None, show_all: bool
) -> None:
    """Check each assistant message of a Claude Code transcript (JSONL) against the agent's
    identity core; exit 5 when a message fails. Changes nothing.

    Example: phx persona check ~/.claude/projects/-repo/SESSION.jsonl --json
    """
    from phoenix_protocol.cli._main import EXIT_ATTENTION, _Exit
    from phoenix_protocol.services._persona_transcript import check_transcript

    report = check_transcript(agent, transcript, scorer=scorer, threshold=threshold)
    if out.as_json:
        out.json({"agent": agent.id, **report})
    else:
        from rich.markup import escape

        if "skipped" in report:
            out.console.print(f"[yellow]not checked[/]: {escape(report['skipped'])}")
        for r in report["results"]:
            if r["passed"] and not show_all:
                continue
            colour, word = ("green", "ok") if r["passed"] else ("red", "drift")
            kinds = ", ".join(sorted({str(s["kind"]) for s in r["signals"]})) or "-"
            out.console.print(
                f"[{colour}]{word}[/] line {r['line']} score {r['score']:.2f} ({escape(kinds)}): {escape(r['text'])}"
            )
            for s in r["signals"]:
                if s["kind"] == "forbidden_action":
                    out.console.print(f"    forbidden by '{escape(s['principle'])}': {escape(s['evidence'])}")
        out.console.print(f"{report['messages']} assistant messages checked, {report['failed']} drifted")
    if report["failed"]:
        raise _Exit(EXIT_ATTENTION)
