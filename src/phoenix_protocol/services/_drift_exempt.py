"""Drift exemptions for a task: what the model (``phx drift exempt``) or the user says is
legitimate for the work at hand (a read-only investigation: ``no_progress``; polling a deploy:
``--command "kubectl rollout status"``).

The exemption is ``state.json``'s ``drift_exempt`` field (``{"task", "rules", "commands", "at",
"by"}``): it holds while the agent's current task is the one it was set for (``task``; ``None``:
until cleared), and the heartbeat (``_state._track_actions``) and the watchdog read it
(``_drift.task_exemption``). Every change is logged (``drift_exempted`` / ``drift_exemption_cleared``).
Exemptions for every task are settings (``drift_exempt_rules``, ``drift_exempt_commands``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from phoenix_protocol.agent._drift import EXEMPT_KEY, RULES, normalize_command
from phoenix_protocol.core._errors import UsageError

if TYPE_CHECKING:
    from phoenix_protocol.agent._state import AgentState, Transition
    from phoenix_protocol.services._agent import Agent

__all__ = ["clear_exemption", "exempt", "exemption"]

MAX_COMMANDS = 16
MAX_COMMAND_CHARS = 200


def exempt(
    agent: Agent,
    rules: list[str] | tuple[str, ...] = (),
    *,
    commands: list[str] | tuple[str, ...] = (),
    any_task: bool = False,
    by: str = "model",
) -> dict[str, Any]:
    """Exempt the agent's current task (every task with ``any_task``) from ``rules`` (names in
    ``_drift.RULES``) and from counting calls of ``commands`` (prefixes of shell commands, compared
    normalized). Adds to an exemption already set for the same task. Returns the record.
    ``UsageError`` for an unknown rule, nothing to exempt, or no task to exempt without
    ``any_task``."""
    unknown = [r for r in rules if r not in RULES]
    if unknown:
        raise UsageError(f"unknown drift rule {unknown[0]!r}; the rules are: {', '.join(RULES)}.")
    cleaned = []
    for command in commands:
        if len(command) > MAX_COMMAND_CHARS:
            raise UsageError(f"an exempt command is at most {MAX_COMMAND_CHARS} characters.")
        if not normalize_command(command):
            raise UsageError(f"nothing left of the command {command!r} to match once normalized (docs/drift.md).")
        cleaned.append(" ".join(command.split()))
    if not rules and not cleaned:
        raise UsageError("name a rule to exempt (e.g. no_progress) or give --command PREFIX.")
    record: dict[str, Any] = {}

    def mutate(state: AgentState) -> list[Transition]:
        from phoenix_protocol.agent._state import Transition

        task = None if any_task else state.current_task
        if task is None and not any_task:
            raise UsageError('no current task to exempt: set one (`phx state working "..."`) or pass --any-task.')
        old = state.extra.get(EXEMPT_KEY)
        same = isinstance(old, dict) and old.get("task") == task
        old_rules = [r for r in old.get("rules", []) if isinstance(r, str)] if same and isinstance(old, dict) else []
        old_commands = (
            [c for c in old.get("commands", []) if isinstance(c, str)] if same and isinstance(old, dict) else []
        )
        merged_rules = [r for r in RULES if r in set(old_rules) | set(rules)]
        merged_commands = list(dict.fromkeys([*old_commands, *cleaned]))
        if len(merged_commands) > MAX_COMMANDS:
            raise UsageError(f"at most {MAX_COMMANDS} exempt commands per task; clear them first.")
        new = {
            "task": task,
            "rules": merged_rules,
            "commands": merged_commands,
            "at": state.last_active,
            "by": by,
        }
        state.extra[EXEMPT_KEY] = new
        record.update(new)
        meta = {"task": task, "rules": merged_rules, "commands": merged_commands, "by": by}
        return [Transition("drift_exempted", "ok", meta)]

    agent.state.change(mutate)
    return record


def clear_exemption(agent: Agent) -> bool:
    """Remove the task's exemption; returns whether there was one."""
    if not agent.state.exists():
        return False
    cleared = False

    def mutate(state: AgentState) -> list[Transition]:
        from phoenix_protocol.agent._state import Transition

        nonlocal cleared
        cleared = state.extra.pop(EXEMPT_KEY, None) is not None
        return [Transition("drift_exemption_cleared", "ok", {})] if cleared else []

    agent.state.change(mutate)
    return cleared


def exemption(agent: Agent) -> dict[str, Any] | None:
    """The exemption recorded in state.json (``None``: none), with ``active``: whether it holds
    for the current task."""
    state = agent.state.read_or_none()
    record = state.extra.get(EXEMPT_KEY) if state is not None else None
    if not isinstance(record, dict) or state is None:
        return None
    return {**record, "active": record.get("task") is None or record.get("task") == state.current_task}
