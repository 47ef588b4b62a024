"""Claude Code hook handlers: ``phx hook <event>`` reads the hook's JSON on stdin.

=================  ==============================================================================
event              what it does
=================  ==============================================================================
session-start      Records the session and the agent process (pid + start time); status working.
                   When the previous state was working or error (a crash, a kill, a lost
                   context) prints the recovery context (RECOVERY DETECTED, the state, a fresh
                   brief) as ``hookSpecificOutput.additionalContext``. On ``source`` compact or
                   resume it injects the brief again.
post-tool-use      The heartbeat: ``last_active``, ``heartbeat_seq``, the last tool and whether it
                   failed (also registered for PostToolUseFailure). Hot path: see below.
pre-compact        Refreshes ``brief.md``. Never blocks compaction.
stop               Heartbeat only; prints nothing (output there would keep the turn going).
session-end        Status idle, ops event session_end, ``brief.md`` refreshed.
=================  ==============================================================================

A hook never breaks the agent: whatever goes wrong (empty or malformed stdin, an unknown
event, a locked, corrupt or newer state file, a full disk) it exits 0 with one line on stderr
and, where it still can, an ops event with status warn or error. It never exits 2 and never
rewrites a state file it could not read.

Hot path: the PostToolUse handler imports only ``os``, ``sys``, ``time``, ``fcntl``, ``_json``
and Phoenix's own primitives. ``phx install`` registers it as
``<python> -P -c 'from phoenix_protocol._hooks import main; main()' post-tool-use``, which
skips the console-script wrapper (it imports ``re``) and the full CLI.
"""

from __future__ import annotations

import os
import sys

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from phoenix_protocol._agent import Agent

__all__ = ["EVENTS", "handle", "main", "run"]

EVENTS = {
    "session-start": "SessionStart",
    "post-tool-use": "PostToolUse",
    "post-tool-use-failure": "PostToolUseFailure",
    "pre-compact": "PreCompact",
    "stop": "Stop",
    "session-end": "SessionEnd",
}
_BY_CLAUDE_NAME = {v: k for k, v in EVENTS.items()}
_MAX_STDIN = 64 * 1024 * 1024
_NAME_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.:-")
_SESSION_END_BUDGET = 1.0  # Claude Code gives all SessionEnd hooks about 1.5 s together
_GIT_TIMEOUT = 1.0  # per git call of a brief, so that a hung git never eats a hook's budget
RECOVERY_BANNER = "RECOVERY DETECTED"


def _plain(value: object, limit: int = 100, default: str = "unknown") -> str:
    """A tool name, reason or source reduced to a safe token (these skip the redactor)."""
    if not isinstance(value, str) or not value:
        return default
    cleaned = "".join(ch if ch in _NAME_CHARS else "_" for ch in value[:limit])
    return cleaned or default


def _session_id(payload: dict[str, Any]) -> str | None:
    from phoenix_protocol._ids import is_valid_id

    value = payload.get("session_id")
    if is_valid_id(value, max_length=128):
        return str(value)
    return None


_COSMETIC_KEYS = frozenset({"description", "timeout", "run_in_background"})


def _normalized(value: object) -> object:
    """A tool input without what does not change the action taken: whitespace runs inside
    strings collapse, and cosmetic keys (the Bash tool's ``description``, ``timeout``) go."""
    if isinstance(value, str):
        return " ".join(value.split())
    if isinstance(value, dict):
        return {k: _normalized(v) for k, v in value.items() if k not in _COSMETIC_KEYS}
    if isinstance(value, list):
        return [_normalized(v) for v in value]
    return value


def _digest(value: object) -> str | None:
    """A short, stable digest of a tool's normalized input (drift detection compares them)."""
    if value is None:
        return None
    from phoenix_protocol._jsonio import dumps_canonical

    try:
        data = dumps_canonical(_normalized(value)).encode("utf-8", "surrogatepass")
    except (TypeError, ValueError):
        return None
    try:
        from _sha256 import sha256  # type: ignore[import-not-found]  # CPython 3.11: cheaper than hashlib
    except ImportError:  # pragma: no cover - 3.12+ names it _sha2
        try:
            from _sha2 import sha256  # type: ignore[import-not-found]
        except ImportError:
            from hashlib import sha256
    return str(sha256(data).hexdigest()[:16])


def _tool_outcome(event: str, payload: dict[str, Any]) -> tuple[bool, str | None]:
    """Whether the tool call succeeded, and its error text when it did not."""
    if event == "post-tool-use-failure" or payload.get("hook_event_name") == "PostToolUseFailure":
        error = payload.get("error")
        return False, error if isinstance(error, str) and error else "tool failed"
    response = payload.get("tool_response")
    if isinstance(response, dict):
        if response.get("is_error") is True or response.get("success") is False:
            error = response.get("error") or response.get("stderr") or response.get("message")
            return False, error if isinstance(error, str) and error else "tool reported an error"
        if response.get("interrupted") is True:
            return False, "tool call interrupted"
    return True, None


def _open_agent(payload: dict[str, Any], options: dict[str, str], *, lock_timeout_cap: float | None = None) -> Agent:
    from phoenix_protocol._agent import Agent
    from phoenix_protocol._home import Home

    cwd = payload.get("cwd")
    if not isinstance(cwd, str) or not os.path.isabs(cwd) or not os.path.isdir(cwd):
        cwd = os.environ.get("CLAUDE_PROJECT_DIR") or os.getcwd()
    home = Home(os.path.join(cwd, options["home"])) if "home" in options else Home.resolve(cwd)
    agent = Agent.open(options.get("agent"), home=home)
    timeout = agent.config.hook_lock_timeout
    if lock_timeout_cap is not None:
        timeout = min(timeout, lock_timeout_cap)
    agent.config.lock_timeout = timeout
    agent.ops.log.lock_timeout = timeout
    return agent


def _recovery_context(
    agent: Agent,
    before: Any,
    after: Any,
    source: str,
    notices: list[str],
    restored: Any = None,
    recovering: bool = True,
) -> str:
    from phoenix_protocol._jsonio import dumps_document

    header_lines = []
    if recovering:
        header_lines.append(f"=== {RECOVERY_BANNER} (Phoenix Protocol) ===")
        header_lines.append(
            f"The previous session of agent '{agent.id}' ended while its status was "
            f"'{before.status}'. Carry on from the state and brief below; they are authoritative, "
            "the old transcript is not needed."
        )
        header_lines.append(f"Status: {before.status}")
        header_lines.append(f"Last task: {before.current_task or '(none recorded)'}")
        if before.status == "error" and before.error_message:
            header_lines.append(f"Error: {before.error_message}")
        if before.last_active:
            header_lines.append(f"Last active: {before.last_active}")
    else:
        header_lines.append(f"=== Phoenix Protocol brief (session {source}) ===")
        header_lines.append(f"Agent '{agent.id}' continues; here is the brief of its work.")
    for notice in notices:
        header_lines.append(f"Note: {notice}")
    header_lines += _restored_lines(restored)
    state_view = {
        k: v
        for k, v in before.to_dict().items()
        if k
        in (
            "status",
            "current_task",
            "last_active",
            "last_output",
            "error_message",
            "updated_by",
            "session_id",
            "last_tool",
        )
        and v not in (None, "")
    }
    header = "\n".join(header_lines) + "\n\nstate.json (before this session):\n" + dumps_document(state_view) + "\n"
    budget = max(1000, agent.config.brief_max_chars - len(header) - 50)
    # The brief describes the work as the previous session left it.
    brief = agent.render_brief(before, max_chars=budget, git_timeout=_GIT_TIMEOUT)
    _write_brief_best_effort(agent, after)
    return (header + brief)[: agent.config.brief_max_chars]


def _restored_lines(restored: Any) -> list[str]:
    """What the PAIF restore brought back: the checkpoint, its summary, pending items, stack."""
    if restored is None or restored.checkpoint is None:
        return []
    checkpoint = restored.checkpoint
    lines = [f"Restored from checkpoint {checkpoint.name} ({checkpoint.checkpoint_type}, {checkpoint.timestamp})."]
    context = checkpoint.section("context") or {}
    if context.get("conversation_summary"):
        lines.append(f"Last session summary: {' '.join(str(context['conversation_summary']).split())[:500]}")
    for item in (context.get("pending_items") or [])[:10]:
        lines.append(f"Pending: {' '.join(str(item).split())[:200]}")
    working = checkpoint.section("working_memory") or {}
    stack = working.get("context_stack") or []
    if stack:
        lines.append("Context stack: " + " > ".join(" ".join(str(s).split())[:80] for s in stack[:5]))
    if working.get("open_files"):
        lines.append("Open files: " + ", ".join(str(f) for f in working["open_files"][:15]))
    identity = restored.identity
    if identity is not None:
        lines.append(
            f"Identity: {identity.immutable.get('name', '?')}"
            + (f", role {identity.immutable['role']}" if identity.immutable.get("role") else "")
            + f"; session #{identity.mutable.get('accumulated_experience', 0)}"
        )
    for problem in restored.problems[:3]:
        lines.append(f"Restore problem: {problem}")
    return lines


def _write_brief_best_effort(agent: Agent, state: Any, *, git_timeout: float = _GIT_TIMEOUT) -> None:
    """Refresh brief.md; a failure is logged, not raised (the state change already happened)."""
    from phoenix_protocol._errors import PhoenixError

    try:
        agent.write_brief(state, git_timeout=git_timeout)
    except (PhoenixError, OSError) as exc:
        agent.record("brief_failed", "warn", {"error": str(exc)[:300]})


def _export_env(agent: Agent, session_id: str | None) -> None:
    """Tell later Bash tool calls of this session who they are (Claude Code's CLAUDE_ENV_FILE)."""
    env_file = os.environ.get("CLAUDE_ENV_FILE")
    if not env_file:
        return

    def quote(value: str) -> str:
        return "'" + value.replace("'", "'\"'\"'") + "'"

    lines = [f"export PHOENIX_AGENT={quote(agent.id)}", f"export PHOENIX_HOME={quote(agent.home.root)}"]
    if session_id:
        lines.append(f"export PHOENIX_SESSION_ID={quote(session_id)}")
    with open(env_file, "a", encoding="utf-8") as fh:
        fh.write("\n".join(lines) + "\n")


def handle(event: str, payload: dict[str, Any], options: dict[str, str]) -> str | None:
    """Run one hook; returns what to print on stdout (or ``None``). Raises on failure."""
    session_id = _session_id(payload)
    if event in ("post-tool-use", "post-tool-use-failure"):
        agent = _open_agent(payload, options)
        ok, error = _tool_outcome(event, payload)
        due: list[str] = []
        drift: list[Any] = []
        tool = _plain(payload.get("tool_name"))
        duration = payload.get("duration_ms")
        from phoenix_protocol._drift import EDIT_TOOLS

        state = agent.state.heartbeat(
            session_id=session_id,
            tool=tool,
            ok=ok,
            input_digest=_digest(payload.get("tool_input")),
            error=error,
            durable=False,  # atomic, not fsynced: the next heartbeat replaces it (transitions stay durable)
            lock_timeout=agent.config.lock_timeout,
            due=due,
            duration_ms=duration if isinstance(duration, int) and not isinstance(duration, bool) else None,
            progress=tool in EDIT_TOOLS,
            drift=drift,
        )
        _team_heartbeat(agent, session_id)
        if drift:
            # Seed 003's emergency recovery replaces a plain recovery checkpoint due now.
            due = [k for k in due if k != "recovery"] + ["emergency:" + drift[0].detail]
        if not due:
            if "persona_reanchor" in state.extra:  # a persona check failed: re-anchor, once
                block = _reanchor(agent)
                if block:
                    from phoenix_protocol._jsonio import dumps_line

                    context = {"hookEventName": "PostToolUse", "additionalContext": block}
                    return dumps_line({"hookSpecificOutput": context})
            return None
        _take_due_checkpoints(payload, options, due)
        if drift:
            message = _drift_message(state, drift[0])
        elif "recovery" in due:
            hours = agent.config.refresh_after_minutes / 60
            message = (
                f"Phoenix Protocol: {hours:g} hours of continuous work on '{state.current_task or 'the current task'}'. "
                "A recovery checkpoint was taken and a refresh is due: finish the current step, record where you are "
                '(`phx state working "..."`, `phx note next-action "..."`), then start a fresh session (/clear); '
                "it will start from the brief."
            )
        else:
            return None
        from phoenix_protocol._jsonio import dumps_line

        return dumps_line({"hookSpecificOutput": {"hookEventName": "PostToolUse", "additionalContext": message}})
    if event == "stop":
        agent = _open_agent(payload, options)
        agent.state.heartbeat(session_id=session_id, tool=None, durable=False, lock_timeout=agent.config.lock_timeout)
        answer = payload.get("last_assistant_message")
        if isinstance(answer, str) and answer.strip() and os.path.exists(os.path.join(agent.dir, "identity.yaml")):
            _persona_check(agent, answer)
        return None  # Stop prints nothing: output there would keep the conversation going
    if event == "session-start":
        return _session_start(payload, options, session_id)
    if event == "pre-compact":
        agent = _open_agent(payload, options)
        agent.write_brief(git_timeout=_GIT_TIMEOUT)
        agent.record(
            "pre_compact", "ok", {"trigger": _plain(payload.get("trigger")), "session_id": session_id}, trusted=True
        )
        agent.checkpoints.create("routine", summary="before context compaction", extra={"git_timeout": _GIT_TIMEOUT})
        return None
    if event == "session-end":
        agent = _open_agent(payload, options, lock_timeout_cap=_SESSION_END_BUDGET)
        after = agent.state.end_session(session_id, reason=_plain(payload.get("reason"), default="other"))
        _write_brief_best_effort(agent, after, git_timeout=0.2)  # all SessionEnd hooks share about 1.5 s
        if agent.config.checkpoint_on_exit and after.session_id == session_id:
            from phoenix_protocol._sessions import end

            end(agent, session_id, git_timeout=0.2)
        return None
    raise ValueError(f"unknown hook event {event!r}; expected one of {', '.join(EVENTS)}")


def _session_start(payload: dict[str, Any], options: dict[str, str], session_id: str | None) -> str | None:
    from phoenix_protocol._errors import CorruptStateError, SchemaVersionError
    from phoenix_protocol._jsonio import dumps_line
    from phoenix_protocol._process import find_agent_process, liveness

    agent = _open_agent(payload, options)
    source = _plain(payload.get("source"), default="startup")
    notices: list[str] = []
    try:
        previous = agent.state.read()
    except (CorruptStateError, SchemaVersionError) as exc:
        # Do not touch the file; hand the new session what we still have.
        agent.record("session_start", "error", {"session_id": session_id, "source": source, "problem": str(exc)})
        brief = agent.read_brief()
        context = (
            f"=== {RECOVERY_BANNER} (Phoenix Protocol) ===\n"
            f"Agent '{agent.id}': {exc}\nThe last brief written before the problem follows.\n\n"
            + (brief or "(no brief.md either)")
        )[: agent.config.brief_max_chars]
        return dumps_line({"hookSpecificOutput": {"hookEventName": "SessionStart", "additionalContext": context}})
    if previous.pid and previous.session_id and previous.session_id != session_id and previous.status == "working":
        alive = liveness(
            previous.pid, previous.pid_start_time, previous.host, tolerance=agent.config.process_start_tolerance
        )
        if alive:
            notices.append(
                f"another live process (pid {previous.pid}, session {previous.session_id}) was recorded "
                f"for agent '{agent.id}'; give concurrent sessions their own PHOENIX_AGENT"
            )
        elif alive is False:
            notices.append(f"the previous session's agent process (pid {previous.pid}) is gone")
    proc = find_agent_process()
    before, after = agent.state.start_session(
        session_id or "unknown",
        source=source,
        process={"pid": proc.pid, "start_time": proc.start_time, "host": proc.host} if proc else None,
    )
    _export_env(agent, session_id)
    from phoenix_protocol._state import is_new_session

    new_session = is_new_session(before, session_id or "unknown", source)
    restored = None
    if new_session and agent.config.restore_on_start:
        restored = _paif_begin(agent, after.session_id, source)
    if before.refresh_requested:
        request = before.refresh_requested
        notices.append(
            f"a forced refresh was requested at {request.get('at')} ({request.get('reason')}; recovery checkpoint "
            f"{request.get('checkpoint')}): this session starts from the fresh brief below"
        )
    recovering = (before.status in ("working", "error") and source in ("startup", "clear", "resume")) or bool(
        before.refresh_requested
    )
    handover = restored is not None and restored.checkpoint is not None and _has_handover(restored)
    anchor = _reanchor(agent) if "persona_reanchor" in after.extra else None
    team = _team_context(agent)
    if not recovering and source not in ("compact", "resume") and not handover and not anchor and not team:
        _write_brief_best_effort(agent, after)
        return None
    context = _recovery_context(agent, before, after, source, notices if recovering else [], restored, recovering)
    for block in (team, anchor):
        if block:
            context = (block + "\n\n" + context)[: agent.config.brief_max_chars]
    return dumps_line({"hookSpecificOutput": {"hookEventName": "SessionStart", "additionalContext": context}})


def _take_due_checkpoints(payload: dict[str, Any], options: dict[str, str], due: list[str]) -> None:
    """Take the time-based checkpoints the heartbeat claimed, off the hot path: in a detached
    child (the hook returns at once; Claude Code does not wait for it), or inline when
    ``PHOENIX_HOOK_INLINE=1`` (tests, platforms without fork)."""
    if os.environ.get("PHOENIX_HOOK_INLINE") != "1" and hasattr(os, "fork"):
        pid = os.fork()
        if pid:
            return
        try:
            os.setsid()
            devnull = os.open(os.devnull, os.O_RDWR)
            for fd in (0, 1, 2):
                os.dup2(devnull, fd)
            _checkpoints_now(payload, options, due)
        finally:
            os._exit(0)
    _checkpoints_now(payload, options, due)


def _team_binding() -> tuple[str, str] | None:
    """``(team_id, teammate)`` when this session belongs to a team ($PHOENIX_TEAM, $PHOENIX_TEAMMATE)."""
    team = os.environ.get("PHOENIX_TEAM")
    mate = os.environ.get("PHOENIX_TEAMMATE")
    return (team, mate) if team and mate else None


def _team_heartbeat(agent: Agent, session_id: str | None) -> None:
    """The teammate's heartbeat, on the hot path: one small file, no roster lookup."""
    binding = _team_binding()
    if binding is None:
        return
    from phoenix_protocol._heartbeats import beat, runtime_dir

    beat(runtime_dir(agent.home.root, binding[0]), binding[1], now_ms=agent.clock.now_ms(), session_id=session_id)


def _team_context(agent: Agent) -> str | None:
    """SessionStart for a teammate: its tasks, unread messages, who is online, ZOMBIE mode."""
    binding = _team_binding()
    if binding is None:
        return None
    from phoenix_protocol._errors import PhoenixError

    try:
        from phoenix_protocol._team_resume import probe
        from phoenix_protocol._teams import Team

        team = Team.open(agent.home, binding[0], clock=agent.clock)
        view = team.status_for(binding[1])
        probed = probe(team)
    except PhoenixError as exc:
        return f"Team {binding[0]}: could not read the team state ({exc})."
    lines = [f"=== Team {team.id} ({view['status']}); you are {binding[1]}, lead {view['lead']} ==="]
    if view["zombie"]:
        lines.append(
            f"ZOMBIE mode: the lead has been silent for {(view['lead_silence_ms'] or 0) // 60_000} min. Keep working "
            "on your task; Phoenix checkpoints the team every 30 s; the lead re-attaches with `phx team resume`."
        )
    for task in view["tasks"]:
        lines.append(f"Your task {task['task_id']} [{task['status']}]: {task['title']}")
    if not view["tasks"]:
        lines.append(f"No task claimed: `phx team ready {team.id}` lists what you can claim.")
    lines.append(f"Unread messages: {view['unread']} (`phx team inbox {team.id} --as {binding[1]}`).")
    online = [m["name"] for m in probed["teammates"] if m["class"] == "online"]
    lines.append("Online: " + (", ".join(online) if online else "nobody"))
    return "\n".join(lines)


def _persona_check(agent: Agent, message: str) -> None:
    """Seed 002's persona gravity: compare the turn's last answer with the identity's core. A
    failed check flags a re-anchor for the next context injection; problems are logged."""
    from phoenix_protocol._errors import PhoenixError

    try:
        from phoenix_protocol._persona import check_persona

        check_persona(agent, [message])
    except PhoenixError as exc:
        agent.record("drift_check_failed", "warn", {"kind": "persona", "error": str(exc)[:300]})


def _reanchor(agent: Agent) -> str | None:
    """The "who you are" block when a persona check failed since the last injection (once)."""
    from phoenix_protocol._errors import PhoenixError

    try:
        from phoenix_protocol._persona import take_reanchor

        return take_reanchor(agent)
    except PhoenixError as exc:
        agent.record("persona_reanchor_failed", "warn", {"error": str(exc)[:300]})
        return None


def _drift_message(state: Any, signal: Any) -> str:
    """What the model is told, once per drift: what it is doing, and what the brief says it was doing."""
    lines = [f"Phoenix Protocol: you may be going in circles: {signal.detail}."]
    if state.current_task:
        lines.append(f"Your brief says you are working on: {state.current_task}.")
    actions = [item["text"] for item in state.next_actions[:3]]
    if actions:
        lines.append("Next actions recorded: " + "; ".join(actions) + ".")
    lines.append(
        "A recovery checkpoint was taken. Step back: try a different approach, record what you learned "
        '(`phx note open-loop "..."`), or start a fresh session (/clear), which starts from the brief.'
    )
    return " ".join(lines)


def _checkpoints_now(payload: dict[str, Any], options: dict[str, str], due: list[str]) -> None:
    agent = _open_agent(payload, options)
    try:
        for kind in due:
            if kind.startswith("emergency:"):
                agent.checkpoints.emergency_recovery(f"drift: {kind.split(':', 1)[1]}")
            elif kind == "recovery":
                minutes = agent.config.refresh_after_minutes
                agent.checkpoints.force_refresh(f"{minutes:g} minutes of continuous work")
            else:
                agent.checkpoints.create("routine", summary="every-interval checkpoint", extra={"git_timeout": 1.0})
    except Exception as exc:  # noqa: BLE001 - logged; the next interval tries again
        agent.record("checkpoint_failed", "error", {"types": due, "error": f"{type(exc).__name__}: {exc}"[:300]})


def _paif_begin(agent: Agent, session_id: str | None, source: str) -> Any:
    """PAIF session start (identity, restore from the newest checkpoint); never fails the hook."""
    try:
        from phoenix_protocol._sessions import begin

        return begin(agent, session_id, source=source)
    except Exception as exc:  # noqa: BLE001 - reported; the session starts without it
        agent.record("session_restore_failed", "error", {"error": f"{type(exc).__name__}: {exc}"[:300]})
        return None


def _has_handover(restored: Any) -> bool:
    checkpoint = restored.checkpoint
    context = checkpoint.section("context") or {}
    return bool(context.get("pending_items") or context.get("conversation_summary"))


def _parse_args(argv: list[str]) -> tuple[str, dict[str, str]]:
    event = ""
    options: dict[str, str] = {}
    i = 0
    while i < len(argv):
        arg = argv[i]
        if arg in ("--agent", "--home") and i + 1 < len(argv):
            options[arg[2:]] = argv[i + 1]
            i += 2
            continue
        if arg.startswith(("--agent=", "--home=")):
            key, _, value = arg[2:].partition("=")
            options[key] = value
        elif not event:
            event = arg
        i += 1
    return event, options


def _normalize_event(event: str, payload: dict[str, Any]) -> str:
    name = event.strip().lower().replace("_", "-")
    if name in EVENTS:
        return name
    by_claude = _BY_CLAUDE_NAME.get(event.strip())
    if by_claude:
        return by_claude
    if not event:
        named = payload.get("hook_event_name")
        if isinstance(named, str) and named in _BY_CLAUDE_NAME:
            return _BY_CLAUDE_NAME[named]
    return name


def run(argv: list[str], stdin: bytes) -> tuple[int, str, str]:
    """Run a hook from its arguments and stdin; returns ``(exit_code, stdout, stderr)``.

    The exit code is always 0. Nothing here raises.
    """
    event = "?"
    payload: dict[str, Any] = {}
    options: dict[str, str] = {}
    try:
        event, options = _parse_args(argv)
        from phoenix_protocol._jsonio import JSONError, loads

        problem = None
        if not stdin.strip():
            problem = "empty stdin (expected the hook's JSON)"
        else:
            try:
                decoded = loads(stdin)
            except JSONError as exc:
                problem = f"stdin is not JSON ({exc})"
            else:
                if isinstance(decoded, dict):
                    payload = decoded
                else:
                    problem = "stdin JSON is not an object"
        event = _normalize_event(event, payload)
        if event not in EVENTS:
            raise ValueError(f"unknown hook event {event or '(none)'!r}; expected one of {', '.join(EVENTS)}")
        if problem is not None:
            raise ValueError(problem)
        out = handle(event, payload, options)
        return 0, (out + "\n") if out else "", ""
    except BaseException as exc:  # noqa: BLE001 - a hook must never break the agent
        if isinstance(exc, KeyboardInterrupt):
            message = "interrupted"
        else:
            message = " ".join(str(exc).split()) or type(exc).__name__
        line = f"phoenix: {event} hook: {message[:300]} (the agent is unaffected)"
        _log_failure(event, payload, options, message)
        return 0, "", line + "\n"


def _log_failure(event: str, payload: dict[str, Any], options: dict[str, str], message: str) -> None:
    """Best effort: an ops event about the failed hook. Never raises."""
    try:
        agent = _open_agent(payload, options, lock_timeout_cap=0.5)
        agent.record("hook_failed", "error", {"hook": _plain(event), "error": message[:500]})
    except BaseException:  # noqa: BLE001, S110 - the stderr line already reports the failure
        pass


def main(argv: list[str] | None = None) -> None:
    """Entry point used by the installed hook commands. Always exits 0."""
    args = sys.argv[1:] if argv is None else argv
    try:
        data = sys.stdin.buffer.read(_MAX_STDIN) if sys.stdin is not None else b""
    except (OSError, ValueError):
        data = b""
    code, out, err = run(args, data)
    try:
        if out:
            sys.stdout.write(out)
            sys.stdout.flush()
        if err:
            sys.stderr.write(err)
            sys.stderr.flush()
    except (OSError, ValueError):
        pass
    raise SystemExit(code)
