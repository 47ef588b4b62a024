"""The line a Claude Code user sees when Phoenix breaks: a hook that fails, or a SessionStart
that finds the state damaged (``_hooks.note_problem``), puts it in its JSON output's
``systemMessage``, which Claude Code shows the user (in the terminal UI "PostToolUse:Bash says:
...", in ``claude -p --output-format stream-json --verbose`` an ``informational`` system line)
and never sends to the model. Once per session: which sessions were told is an empty file per
session id in the runtime directory (``_heartbeats.runtime_root``), outside the home that may be
the trouble. Stop and SessionEnd print none (Stop's output would keep the turn going; nobody
reads SessionEnd's).

Off the hot path: ``_hooks`` imports this only when a hook failed or noted a problem.
"""

from __future__ import annotations

import os
from typing import Any

from phoenix_protocol.integrations._clients import CLAUDE_CODE, Client
from phoenix_protocol.integrations._hooks import _raw_session_id

__all__ = ["NOTICE_DIR", "notice_once", "with_system_message"]

_NOTICE_EVENTS = frozenset({"session-start", "post-tool-use", "post-tool-use-failure", "pre-compact"})
"""The hooks whose output may carry the user's notice (see the module docstring)."""
NOTICE_DIR = "hook-notices"
"""In the runtime directory (``_heartbeats.runtime_root``): one empty file per session told."""


def notice_once(
    event: str, payload: dict[str, Any], message: str, *, failed: bool, client: Client = CLAUDE_CODE
) -> str | None:
    """The line to show the user (``systemMessage``) about ``message``, the first time in this
    session (``None`` after that, and for hooks whose output must stay empty). Sessions already
    told are files in the runtime directory, created exclusively (hooks of one session may run at
    once); when that cannot be written, the line is shown all the same: better twice than never."""
    if event not in _NOTICE_EVENTS:
        return None
    first = message
    for stop in ("; ", ". "):  # the first clause says what is wrong; the rest is advice
        first = first.split(stop, 1)[0]
    project = client.project_dir(payload)
    if project is not None and len(project) > 1:
        first = first.replace(project.rstrip("/") + "/", "")  # paths relative to the project
    first = first.rstrip(".")
    if len(first) > 200:
        first = first[:199] + "…"
    name = client.native_event(event) or event
    text = (
        f"Phoenix Protocol: the {name} hook failed: {first}. Run `phx doctor` to repair it."
        if failed
        else f"Phoenix Protocol: {first}. Run `phx doctor` to repair it."
    )
    try:
        from phoenix_protocol.agent._heartbeats import runtime_root
        from phoenix_protocol.core._durable import atomic_create, ensure_dir
        from phoenix_protocol.core._ids import short_digest

        session = _raw_session_id(payload) or "(no session id)"
        directory = os.path.join(runtime_root(), NOTICE_DIR)
        ensure_dir(directory)
        marker = short_digest(session.encode("utf-8", "surrogatepass"), 32)
        atomic_create(os.path.join(directory, marker), b"", durable=False)
    except FileExistsError:
        return None  # this session was told already
    except Exception:  # noqa: BLE001, S110 - cannot remember it: tell the user anyway
        pass
    return text


def with_system_message(out: str | None, notice: str | None) -> str:
    """The hook's JSON output ``out`` (or none) with ``systemMessage`` set to ``notice``."""
    from phoenix_protocol.core._jsonio import dumps_line, loads

    document: dict[str, Any] = {}
    if out:
        try:
            decoded = loads(out)
        except ValueError:
            decoded = None
        if not isinstance(decoded, dict):
            return out  # not JSON (no hook prints such output): left as it is
        document = decoded
    return dumps_line({"systemMessage": notice, **{k: v for k, v in document.items() if k != "systemMessage"}})
