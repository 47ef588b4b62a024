"""The Claude Code hooks' colder half: session start and end, pre-compact, and what follows a
heartbeat only now and then (a due checkpoint, a drift warning, a persona re-anchor).

Split from ``_hooks`` so that the PostToolUse heartbeat, which runs on every tool call, does not
load (unmarshal) this code: ``_hooks`` imports it only when one of these is needed.
"""

from __future__ import annotations

import contextlib
import os
from typing import TYPE_CHECKING, Any

from phoenix_protocol.core._redact import clip
from phoenix_protocol.integrations._hooks import (
    _GIT_TIMEOUT,
    _SESSION_END_BUDGET,
    RECOVERY_BANNER,
    REFRESH_BANNER,
    _named,
    _open_agent,
    _take_due_checkpoints,
    _team_binding,
)

if TYPE_CHECKING:
    from phoenix_protocol.services._agent import Agent

__all__ = ["after_tool", "handle_session_event"]


def handle_session_event(
    event: str, payload: dict[str, Any], options: dict[str, str], session_id: str | None
) -> str | None:
    """SessionStart, PreCompact and SessionEnd (see ``_hooks``)."""
    if event == "session-start":
        return _session_start(payload, options, session_id)
    if event == "pre-compact":
        from phoenix_protocol.core._errors import PhoenixError

        agent = _open_agent(payload, options)
        failed: list[PhoenixError] = []  # the brief and the event must not cost the checkpoint
        try:
            agent.write_brief(git_timeout=_GIT_TIMEOUT)  # needs a state.json that reads
        except PhoenixError as exc:
            failed.append(exc)
        try:
            agent.record(
                "pre_compact", "ok", {"trigger": _named(payload.get("trigger")), "session_id": session_id}, trusted=True
            )
        except PhoenixError as exc:
            failed.append(exc)
        agent.checkpoints.create("routine", summary="before context compaction", extra={"git_timeout": _GIT_TIMEOUT})
        _sync_best_effort(agent)
        _files_written(agent)
        if failed:
            raise failed[0]  # reported as the hook's failure (exit 0), once the checkpoint is taken
        return None
    agent = _open_agent(payload, options, lock_timeout_cap=_SESSION_END_BUDGET)
    from phoenix_protocol.services._sessions import end_session

    # The state's session ends, brief.md, the session checkpoint (checkpoint_on_exit); no session
    # id in the payload: the session that ends is the one the state holds. All SessionEnd hooks
    # share about 1.5 s: git gets 0.2 s.
    end_session(agent, session_id, reason=_named(payload.get("reason"), default="other"), git_timeout=0.2)
    _sync_best_effort(agent)
    _files_written(agent)
    return None


def _files_written(agent: Agent) -> None:
    """Write the checkpoint's ops event now (the process ends next, which would do it without
    telling anyone): the checkpoint itself is durable in the database."""
    agent.checkpoints.flush()


def _sync_best_effort(agent: Agent) -> None:
    """On the PostgreSQL store: pass on the events this hook recorded after its state change
    (checkpoints, the session's end), so that other machines see them now, not at the next sync."""
    from phoenix_protocol.core._errors import PhoenixError

    try:
        agent.sync_store()
    except PhoenixError as exc:
        agent.record("store_sync_failed", "warn", {"error": clip(str(exc), 300)})


def after_tool(
    agent: Agent, state: Any, payload: dict[str, Any], options: dict[str, str], due: list[str], drift: list[Any]
) -> str | None:
    """After a heartbeat that claimed checkpoints, found drift, or has a persona re-anchor due:
    take the checkpoints off the hot path and say what the model should hear, once."""
    from phoenix_protocol.core._jsonio import dumps_line

    if not due and not drift:
        block = _reanchor(agent)  # a persona check failed: re-anchor, once
        if not block:
            return None
        return dumps_line({"hookSpecificOutput": {"hookEventName": "PostToolUse", "additionalContext": block}})
    if due:
        _take_due_checkpoints(payload, options, due)
    if drift:
        signal, opens = drift[0]
        message = _drift_message(state, signal, recovered=opens)
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
    return dumps_line({"hookSpecificOutput": {"hookEventName": "PostToolUse", "additionalContext": message}})


def _recovery_context(
    agent: Agent,
    before: Any,
    after: Any,
    source: str,
    notices: list[str],
    restored: Any = None,
    recovering: bool = True,
    *,
    crashed: bool = True,
) -> str:
    """``recovering``: the previous session did not end cleanly (``crashed``) or a forced refresh
    was requested (a long stretch of work; the session may have ended cleanly, or go on after a
    compaction)."""
    from phoenix_protocol.core._jsonio import dumps_document

    header_lines = []
    if recovering:
        if crashed:
            header_lines.append(f"=== {RECOVERY_BANNER} (Phoenix Protocol) ===")
            header_lines.append(
                f"The previous session of agent '{agent.id}' ended while its status was "
                f"'{before.status}'. Carry on from the state and brief below; they are authoritative, "
                "the old transcript is not needed."
            )
        else:
            header_lines.append(f"=== {REFRESH_BANNER} (Phoenix Protocol) ===")
            header_lines.append(
                f"Agent '{agent.id}' worked for a long stretch without a fresh start; this session "
                f"({source}) starts from the state and brief below. They are authoritative."
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
    """What the PAIF restore brought back: the checkpoint, its summary, pending items, stack; or
    why nothing could be (every checkpoint damaged)."""
    if restored is None:
        return []
    if restored.checkpoint is None:
        if not restored.problems:
            return []  # a first session: nothing to restore, nothing wrong
        return [f"Restore problem: {problem}" for problem in restored.problems[:3]] + [
            "No checkpoint could be restored; `phx doctor` repairs what it can. Carry on from the state below."
        ]
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
    from phoenix_protocol.core._errors import PhoenixError

    try:
        agent.write_brief(state, git_timeout=git_timeout)
    except (PhoenixError, OSError) as exc:
        agent.record("brief_failed", "warn", {"error": clip(str(exc), 300)})


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


def _session_start(payload: dict[str, Any], options: dict[str, str], session_id: str | None) -> str | None:
    from phoenix_protocol.core._errors import CorruptStateError, SchemaVersionError
    from phoenix_protocol.core._jsonio import dumps_line
    from phoenix_protocol.core._process import find_agent_process, liveness

    agent = _open_agent(payload, options)
    source = _named(payload.get("source"), default="startup")
    notices: list[str] = []
    try:
        previous = agent.state.read()
    except (CorruptStateError, SchemaVersionError) as exc:
        # Do not touch the file; hand the new session what we still have, and tell the user.
        from phoenix_protocol.integrations._hooks import note_problem

        note_problem(exc)
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
    if session_id is None:  # the payload has none: compact goes on with the session; others start one
        import uuid

        session_id = (source == "compact" and previous.session_id) or f"sid-{uuid.uuid4().hex[:24]}"
    proc = find_agent_process()
    before, after = agent.state.start_session(
        session_id,
        source=source,
        process={"pid": proc.pid, "start_time": proc.start_time, "host": proc.host} if proc else None,
    )
    _export_env(agent, session_id)
    from phoenix_protocol.agent._state import is_new_session

    new_session = is_new_session(before, session_id, source)
    restored = None
    if new_session:  # restore_on_start = false skips the restore, not the session's start
        restored = _paif_begin(agent, after.session_id, source, restore=agent.config.restore_on_start)
    if before.refresh_requested:
        request = before.refresh_requested
        taken = f"; recovery checkpoint {request['checkpoint']}" if request.get("checkpoint") else ""
        notices.append(
            f"a forced refresh was requested at {request.get('at')} ({request.get('reason')}{taken}): "
            "this session starts from the fresh brief below"
        )
    crashed = before.status in ("working", "error") and source in ("startup", "clear", "resume")
    recovering = crashed or bool(before.refresh_requested)
    handover = restored is not None and (
        (restored.checkpoint is not None and _has_handover(restored)) or bool(restored.problems)
    )
    anchor = _reanchor(agent) if "persona_reanchor" in after.extra else None
    team = _team_context(agent)
    if not recovering and source not in ("compact", "resume") and not handover and not anchor and not team:
        _write_brief_best_effort(agent, after)
        return None
    context = _recovery_context(
        agent, before, after, source, notices if recovering else [], restored, recovering, crashed=crashed
    )
    for block in (team, anchor):
        if block:
            context = (block + "\n\n" + context)[: agent.config.brief_max_chars]
    return dumps_line({"hookSpecificOutput": {"hookEventName": "SessionStart", "additionalContext": context}})


def share_main(argv: list[str]) -> None:
    """``HOME AGENT TEAM NAME SESSION``: pass this machine's copy of the agent's state and ops
    events on to the PostgreSQL store, and the teammate's heartbeat when ``TEAM`` is set
    (started detached by the PostToolUse hook every 30 s). A failure is an ops event: a hook
    never fails the agent."""
    from phoenix_protocol.core._home import Home
    from phoenix_protocol.services._agent import Agent

    with contextlib.suppress(OSError):
        os.nice(10)  # the agent's work comes first
    root, agent_id, team_id, name, session_id = (argv + [""] * 5)[:5]
    agent = Agent.open(agent_id, home=Home(root))
    try:
        agent.sync_store()
    except Exception as exc:  # noqa: BLE001 - recorded instead
        with contextlib.suppress(Exception):
            agent.record("hook_failed", "error", {"hook": "store-sync", "error": clip(str(exc), 500)})
    if not team_id:
        return
    try:
        from phoenix_protocol.store._teams import Team

        team = Team(agent.home, team_id, clock=agent.clock, config=agent.config)
        team.store.beat(name, now_ms=agent.clock.now_ms(), session_id=session_id or None)
    except Exception as exc:  # noqa: BLE001 - recorded instead
        with contextlib.suppress(Exception):
            agent.record("hook_failed", "error", {"hook": "team-heartbeat", "error": clip(str(exc), 500)})


def _team_context(agent: Agent) -> str | None:
    """SessionStart for a teammate: its tasks, unread messages, who is online, ZOMBIE mode."""
    binding = _team_binding()
    if binding is None:
        return None
    from phoenix_protocol.core._errors import PhoenixError

    try:
        from phoenix_protocol.services._team_resume import probe
        from phoenix_protocol.store._teams import Team

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
    from phoenix_protocol.core._errors import PhoenixError

    try:
        from phoenix_protocol.services._persona import check_persona

        check_persona(agent, [message])
    except PhoenixError as exc:
        agent.record("drift_check_failed", "warn", {"kind": "persona", "error": clip(str(exc), 300)})


def _reanchor(agent: Agent) -> str | None:
    """The "who you are" block when a persona check failed since the last injection (once)."""
    from phoenix_protocol.core._errors import PhoenixError

    try:
        from phoenix_protocol.services._persona import take_reanchor

        return take_reanchor(agent)
    except PhoenixError as exc:
        agent.record("persona_reanchor_failed", "warn", {"error": clip(str(exc), 300)})
        return None


def _drift_message(state: Any, signal: Any, *, recovered: bool = True) -> str:
    """What the model is told, once per drift signal: what it is doing, and what the brief says it
    was doing. ``recovered``: this warning opened the episode and took the recovery checkpoint."""
    lines = [f"Phoenix Protocol: you may be going in circles: {signal.detail}."]
    if state.current_task:
        lines.append(f"Your brief says you are working on: {state.current_task}.")
    actions = [item["text"] for item in state.next_actions[:3]]
    if actions:
        lines.append("Next actions recorded: " + "; ".join(actions) + ".")
    since = (state.drift or {}).get("since")
    taken = (
        "A recovery checkpoint was taken."
        if recovered
        else f"A recovery checkpoint was taken when this began ({since})."
    )
    lines.append(
        f"{taken} Step back: try a different approach, record what you learned "
        '(`phx note open-loop "..."`), or start a fresh session (/clear), which starts from the brief.'
    )
    return " ".join(lines)


def _checkpoints_now(payload: dict[str, Any], options: dict[str, str], due: list[str]) -> None:
    """Take the checkpoints the heartbeat claimed, then release the claim. A claimant that fails
    or dies leaves it: the first heartbeat after ``CHECKPOINT_CLAIM_LEASE_MS`` claims it again."""
    agent = _open_agent(payload, options)
    started = agent.clock.now_ms()
    try:
        state = agent.state.read_or_none()
        claim = (state.checkpoint_claim if state is not None else None) or {}
        claimed = claim["ms"] if type(claim.get("ms")) is int and claim["ms"] <= started else started
        for kind in due:
            if kind.startswith("emergency:"):
                agent.checkpoints.emergency_recovery(f"drift: {kind.split(':', 1)[1]}")
            else:
                agent.checkpoints.take_claimed([kind], claimed)
        agent.checkpoints.release_claim(started)
    except Exception as exc:  # noqa: BLE001 - logged; the claim is taken again after its lease
        agent.record("checkpoint_failed", "error", {"types": due, "error": clip(f"{type(exc).__name__}: {exc}", 300)})


def _paif_begin(agent: Agent, session_id: str | None, source: str, *, restore: bool = True) -> Any:
    """PAIF session start (identity, the start record, and with ``restore`` the restore from the
    newest checkpoint); never fails the hook."""
    try:
        from phoenix_protocol.services._sessions import begin

        return begin(agent, session_id, source=source, restore=restore)
    except Exception as exc:  # noqa: BLE001 - reported; the session starts without it
        agent.record("session_restore_failed", "error", {"error": clip(f"{type(exc).__name__}: {exc}", 300)})
        return None


def _has_handover(restored: Any) -> bool:
    checkpoint = restored.checkpoint
    context = checkpoint.section("context") or {}
    return bool(context.get("pending_items") or context.get("conversation_summary"))
