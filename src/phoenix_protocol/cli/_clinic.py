"""``phx clinic report``: the Clinic's episodes (seed 001), read from the agent's ops log.

Registered on the ``phx`` group by ``_cli``. Reads only the ops log (``_clinic_log``), so it works
without the ``[clinic]`` extra (pydantic-ai) installed.
"""

from __future__ import annotations

import click

from phoenix_protocol.cli._main import Output, common, main_group
from phoenix_protocol.services._agent import Agent

__all__: list[str] = []

_COLOURS = {"healed": "green", "gave_up": "red", "in_progress": "yellow"}


@main_group.group("clinic")
def clinic_group() -> None:
    """The Clinic: failure recovery for pydantic-ai agents (phoenix_protocol.clinic).

    Example: phx clinic report --agent worker-1
    """


@clinic_group.command("report")
@click.option("--last", "last", type=click.IntRange(min=1), help="Only the newest N episodes.")
@common
def clinic_report(agent: Agent, out: Output, last: int | None) -> None:
    """List the Clinic's episodes: each failure, its diagnosis, the prescription, the outcome.

    Example: phx clinic report --json
    """
    from phoenix_protocol.services._clinic_log import read_episodes

    episodes, problems = read_episodes(agent)
    if last is not None:
        episodes = episodes[-last:]
    if out.as_json:
        out.json(
            {
                "agent": agent.id,
                "path": agent.ops.path,
                "episodes": [e.as_dict() for e in episodes],
                "healed": sum(1 for e in episodes if e.outcome == "healed"),
                "gave_up": sum(1 for e in episodes if e.outcome == "gave_up"),
                "problems": [p.as_dict() for p in problems],
            }
        )
        return
    from rich.markup import escape

    if not episodes:
        out.console.print(f"no Clinic episodes for agent {escape(agent.id)}")
    for e in episodes:
        colour = _COLOURS.get(e.outcome, "white")
        recoveries = sum(1 for v in e.visits if v.get("attempt"))
        out.console.print(
            f"[bold]{escape(e.id)}[/] {escape(e.started_at)} [{colour}]{e.outcome}[/] "
            f"({recoveries} recover{'y' if recoveries == 1 else 'ies'}"
            + (f" of {e.max_recoveries})" if e.max_recoveries is not None else ")")
        )
        if e.prompt:
            out.console.print(f"  prompt: {escape(e.prompt)}")
        for v in e.visits:
            if not v.get("attempt"):
                out.console.print(
                    f"  untreated: {escape(str(v.get('error_type')))}: {escape(str(v.get('error') or ''))}"
                )
                continue
            line = (
                f"  {v['attempt']}. {escape(str(v.get('error_type')))} -> [bold]{escape(str(v.get('root_cause')))}[/] "
                f"({escape(str(v.get('source')))}) -> {escape(str(v.get('action')))}"
            )
            out.console.print(line + f": {escape(str(v.get('outcome')))}")
    for problem in problems:
        out.console.print(f"[yellow]warning:[/] {problem}")
