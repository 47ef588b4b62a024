"""The SessionStart hook's part in lanes (docs/lanes.md): where the session starts, which dead
lanes it recovers, and what the model is told about both.

Kept apart from ``_hooks_session`` (which owns the recovery context of the session's own state)
so that the two change independently: this module only adds blocks in front of that context.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from phoenix_protocol.core._redact import clip
from phoenix_protocol.integrations._hooks import _GIT_TIMEOUT, RECOVERY_BANNER

if TYPE_CHECKING:
    from phoenix_protocol.agent._state import AgentState
    from phoenix_protocol.services._agent import Agent
    from phoenix_protocol.services._lanes import Placement, RecoveredLane

__all__ = ["lane_context", "start_in_lane"]

LANE_HEADER = "Phoenix Protocol: sessions side by side"


def start_in_lane(
    agent: Agent, session_id: str, *, source: str, process: dict[str, Any] | None, client: str | None = None
) -> tuple[Placement, list[RecoveredLane]]:
    """Start the session in its lane (``services._lanes.start_placed``), then claim the dead
    lanes of other sessions for it to recover (``settle_lanes``), and record the home in this
    user's list of homes (``phx status --all``). Claiming and the list never fail the start: a
    problem is an ops event."""
    from phoenix_protocol.core._errors import PhoenixError
    from phoenix_protocol.services._lanes import settle_lanes, start_placed

    placed = start_placed(agent, session_id, source=source, process=process, client=client)
    recovered: list[RecoveredLane] = []
    try:
        recovered = settle_lanes(agent, session_id)
    except (PhoenixError, OSError) as exc:
        agent.record("lanes_not_settled", "warn", {"error": clip(f"{type(exc).__name__}: {exc}", 300)})
    try:
        from phoenix_protocol.core._homes import register_home

        register_home(agent.home.root, now_ms=agent.clock.now_ms())
    except (PhoenixError, OSError) as exc:
        agent.record("home_not_registered", "warn", {"error": clip(f"{type(exc).__name__}: {exc}", 300)})
    return placed, recovered


def lane_context(agent: Agent, placed: Placement, recovered: list[RecoveredLane]) -> str | None:
    """What the starting session's model is told about lanes, or ``None`` (nothing to say):
    for each dead lane it recovers, a ``RECOVERY DETECTED`` block with that session's state and
    brief; when it runs beside a live session, a note saying so (never a recovery: that session
    is alive). At most half of ``brief_max_chars`` (the rest is the session's own context)."""
    budget = agent.config.brief_max_chars // 2
    blocks = []
    share = max(1000, budget // max(1, len(recovered)))
    for lane in recovered:
        blocks.append(_recovery_block(agent, lane, share))
    if placed.beside is not None:
        blocks.append(_beside_note(agent, placed.lane, placed.beside))
    if not blocks:
        return None
    return "\n\n".join(blocks)[:budget]


def _beside_note(agent: Agent, lane: str | None, other: AgentState) -> str:
    task = f", working on '{other.current_task}'" if other.current_task and other.status == "working" else ""
    return (
        f"=== {LANE_HEADER} ===\n"
        f"Another live session of agent '{agent.id}' is running in this project (session {other.session_id}, "
        f"process {other.pid}{task}). This session's state is kept apart from it, in lane {lane} "
        f"(`phx status` shows both); neither overwrites the other. Mind the files it may be changing."
    )


def _recovery_block(agent: Agent, lane: RecoveredLane, budget: int) -> str:
    state = lane.state
    lines = [
        f"=== {RECOVERY_BANNER} (Phoenix Protocol: a session that ran beside another) ===",
        f"Session {state.session_id} of agent '{agent.id}' (lane {lane.lane}) ended while its status was "
        f"'{state.status}': {lane.reason}. This session takes over its work: carry on from its state and brief "
        "below (they are authoritative), or record why not. No other session is told.",
        f"Status: {state.status}",
        f"Last task: {state.current_task or '(none recorded)'}",
    ]
    if state.status == "error" and state.error_message:
        lines.append(f"Error: {state.error_message}")
    if state.last_active:
        lines.append(f"Last active: {state.last_active}")
    lines.append(f"Its files are kept in {lane.retired_to}.")
    header = "\n".join(lines) + "\n\n"
    try:
        brief = lane.view.render_brief(state, max_chars=max(500, budget - len(header)), git_timeout=_GIT_TIMEOUT)
    except Exception as exc:  # noqa: BLE001 - the header is the recovery; the brief only adds to it
        brief = f"(its brief could not be rendered: {clip(str(exc), 200)})"
    return (header + brief)[:budget]
