"""When a pre-compaction hook that its CLI fires before every model call does its work.

Gemini CLI 0.61.0 fires PreCompress (trigger ``auto``) before every model call, before it checks
whether the context needs compressing at all (``_clients.Client.pre_compact_every_call``). Taking
a checkpoint and writing the brief each time would cost every model call a checkpoint; so an
automatic one does its work only when the last time it did (``MARK``; the first PreCompress of a
session counts as that: the session has just started from its brief) and the last checkpoint are
more than ``pre_compact_interval_minutes`` ago. A session's many model calls take a checkpoint now
and then, and the one before a real compression is at most that old. A manual one (``/compress``,
trigger ``manual``) always does. Claude Code's and Codex's PreCompact mean a compaction: never
throttled.

Called before every model call, it stays light: ``os``, ``core._durable`` and the state read the
heartbeat does (no redactor, no database, no ``datetime``).
"""

from __future__ import annotations

import os

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from phoenix_protocol.services._agent import Agent

__all__ = ["MARK", "throttled"]

MARK = ".pre-compact"
"""In the session's lane (the agent's directory for the primary one): ``<ms> <session digest>`` of
the last time the hook did its work, or of the session's first PreCompress."""


def throttled(agent: Agent, payload: dict[str, Any]) -> bool:
    """Whether this automatic pre-compaction hook does nothing now (see the module docstring);
    when it does its work, the mark says so first. Raises what reading and writing the agent's
    files raise (the hook reports it, exit 0)."""
    if payload.get("trigger") == "manual":
        return False
    from phoenix_protocol.core._durable import atomic_write, read_bytes
    from phoenix_protocol.core._errors import PhoenixError
    from phoenix_protocol.core._ids import short_digest

    raw = payload.get("session_id")
    session = short_digest(raw.encode("utf-8", "surrogatepass")) if isinstance(raw, str) and raw else "-"
    now = agent.clock.now_ms()
    mark = os.path.join(os.path.dirname(agent.state.path), MARK)
    fields = (read_bytes(mark, limit=256) or b"").decode("ascii", "replace").split()
    marked = int(fields[0]) if len(fields) == 2 and fields[0].isdigit() else None
    first = marked is None or fields[1] != session
    reference = now if first or marked is None else marked
    try:
        state = agent.state.read_or_none()
    except PhoenixError:
        state = None  # the hook's own work reports it
    if state is not None and state.last_checkpoint_ms is not None:
        reference = max(reference, state.last_checkpoint_ms)
    wait = int(agent.config.pre_compact_interval_minutes * 60_000)
    skip = 0 <= now - reference < wait
    if first or not skip:
        agent.ensure()
        atomic_write(mark, f"{now} {session}".encode("ascii"), durable=False)
    return skip
