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
    _client,
    _named,
    _open_agent,
    _take_due_checkpoints,
    _team_binding,
    native_event,
)

if TYPE_CHECKING:
    from phoenix_protocol.services._agent import Agent
    from phoenix_protocol.services._sessions import SessionStart

__all__ = ["after_tool", "handle_session_event", "take_pending_context"]


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
        if agent.lane is None:  # lanes take no checkpoints (docs/lanes.md)
            agent.checkpoints.create(
                "routine", summary="before context compaction", extra={"git_timeout": _GIT_TIMEOUT}
            )
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
    reason = _named(payload.get("reason"), default="other")
    if agent.lane is not None:  # the session's own lane goes idle; lanes take no checkpoints (docs/lanes.md)
        end_session(agent, session_id, reason=reason, git_timeout=0.2, checkpoint=False)
        return None
    end_session(agent, session_id, reason=reason, git_timeout=0.2)
    _cc_team_ended(agent, payload)
    _sync_best_effort(agent)
    _files_written(agent)
    return None


def _cc_team_ended(agent: Agent, payload: dict[str, Any]) -> None:
    """A lead that ends its session cleanly leaves nothing to recover (``_cc_teams``)."""
    try:
        from phoenix_protocol.integrations._cc_teams import find_team, session_ended

        if find_team(payload, scan=False) is not None:  # a stat or two: most sessions run no team
            session_ended(agent, payload)
    except Exception as exc:  # noqa: BLE001 - logged; the session's end is recorded
        agent.record("hook_failed", "warn", {"hook": "claude-team", "error": clip(str(exc), 300)})


def _cc_team_recovery(agent: Agent, payload: dict[str, Any], source: str) -> str | None:
    """The Claude Code teams of this project whose lead died, for the new lead (``_cc_teams``)."""
    try:
        from phoenix_protocol.integrations._cc_teams import recovery_context

        return recovery_context(agent, payload, source)
    except Exception as exc:  # noqa: BLE001 - logged; the session starts without it
        agent.record("claude_team_recovery_failed", "error", {"error": clip(f"{type(exc).__name__}: {exc}", 300)})
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
        return dumps_line(
            {
                "hookSpecificOutput": {
                    "hookEventName": native_event("post-tool-use", options),
                    "additionalContext": block,
                }
            }
        )
    if due:
        _take_due_checkpoints(payload, options, due)
    terminal: str | None = None
    if drift:
        signal, opens = drift[0]
        message = _drift_message(state, signal, recovered=opens)
        terminal = _tell_person(agent, options, signal.detail)
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
    output: dict[str, Any] = {
        "hookSpecificOutput": {"hookEventName": native_event("post-tool-use", options), "additionalContext": message}
    }
    if terminal is not None:
        output["terminalSequence"] = terminal  # Claude Code writes it to its terminal (hooks have none)
    return dumps_line(output)


def _tell_person(agent: Agent, options: dict[str, str], detail: str) -> str | None:
    """Notify the person of a drift episode (``_notify.notify_or_record``: rate-limited; desktop
    and webhook sent from a detached child, off the hook's budget); returns the terminal escape
    for Claude Code's ``terminalSequence``, if one is configured and the CLI is Claude Code."""
    from phoenix_protocol.integrations._clients import CLAUDE_CODE
    from phoenix_protocol.integrations._hooks import _detached
    from phoenix_protocol.services._notify import notify_or_record, terminal_sequence

    note = notify_or_record(agent, "drift", detail, spawn=_detached)
    if note is None or _client(options) is not CLAUDE_CODE:
        return None
    return terminal_sequence(note, agent.config.notify_terminal)


def _banner(agent: Agent, before: Any, source: str, session_id: str, *, crashed: bool, recovering: bool) -> list[str]:
    """The first lines of the context: a recovery (the previous session, or the previous run of
    this one, did not end cleanly), a forced refresh, or none (a brief handed over)."""
    if not recovering:
        return []
    if crashed:
        which = "this session's previous run" if before.session_id == session_id else "the previous session"
        return [
            f"=== {RECOVERY_BANNER} (Phoenix Protocol) ===",
            f"Agent '{agent.id}': {which} ended while its status was '{before.status}'.",
        ]
    return [
        f"=== {REFRESH_BANNER} (Phoenix Protocol) ===",
        f"Agent '{agent.id}' worked for a long stretch without a fresh start; this session ({source}) starts afresh.",
    ]


def _checkpoint_task(checkpoint: Any) -> str | None:
    """The task a checkpoint was taken on (its state snapshot's, else its current_task's)."""
    snapshot = checkpoint.section("phoenix_state")
    if isinstance(snapshot, dict) and isinstance(snapshot.get("current_task"), str):
        return str(snapshot["current_task"])
    task = checkpoint.section("current_task")
    context = task.get("context") if isinstance(task, dict) else None
    description = context.get("description") if isinstance(context, dict) else None
    return description if isinstance(description, str) else None


def _generated_summary(summary: str, checkpoint: Any, task: str | None) -> bool:
    """Whether a checkpoint's summary says only what the state says: the task or last output,
    with the count of open items a session checkpoint adds (``_sessions.end``)."""
    snapshot = checkpoint.section("phoenix_state")
    output = snapshot.get("last_output") if isinstance(snapshot, dict) else None
    head, _, tail = summary.rpartition(" (")
    if tail.endswith(("remain)", "remains)")) and "open item" in tail:
        summary = head
    return summary in (task, output, "no task recorded")


def _restored_notices(agent: Agent, restored: Any, described: Any) -> list[str]:
    """What a PAIF restore adds to the state (state.json wins, seed 000): why nothing could be
    restored, what it put back into a state.json that had lost it, and a summary the agent wrote
    at its last checkpoint, labelled with its age, when that checkpoint is about the current
    task. Everything else a checkpoint holds (its pending items, context stack, open files) is
    the state's own, or belongs to another or an older task: not repeated, never mixed in; a
    checkpoint of another kind was taken for a reason, which is no summary."""
    if restored is None:
        return []
    if restored.checkpoint is None:
        if not restored.problems:
            return []  # a first session: nothing to restore, nothing wrong
        return [f"restore problem: {clip(str(p), 400)}" for p in restored.problems[:2]] + [
            "no checkpoint could be restored; `phx doctor` repairs what it can"
        ]
    checkpoint = restored.checkpoint
    notes = [f"restore problem: {clip(str(p), 400)}" for p in restored.problems[:2]]
    from phoenix_protocol.agent._brief import short_time
    from phoenix_protocol.core._clock import ms_from_iso

    try:
        age = max(0, agent.clock.now_ms() - ms_from_iso(checkpoint.timestamp)) // 60_000
    except ValueError:
        age = None
    when = f"{short_time(checkpoint.timestamp, agent.clock.now_iso())}" + (
        f", {age} min ago" if age is not None else ""
    )
    brought = (restored.restore.applied.get("phoenix_state") or {}).get("restored") if restored.restore else None
    if brought:
        notes.append(
            f"state.json had lost its {', '.join(str(b).replace('_', ' ') for b in brought)}: put back from "
            f"the {checkpoint.checkpoint_type} checkpoint of {when}"
        )
    task = _checkpoint_task(checkpoint)
    context = checkpoint.section("context") or {}
    summary = " ".join(str(context.get("conversation_summary") or "").split())
    # A session checkpoint's summary says what was done and what remains; the others' say why they
    # were taken ("before context compaction", the watchdog's "stalled: ..."): bookkeeping.
    session = checkpoint.checkpoint_type == "session"
    if session and summary and task == described.current_task and not _generated_summary(summary, checkpoint, task):
        notes.append(f"summary at the {checkpoint.checkpoint_type} checkpoint of {when}: {clip(summary, 500)}")
    return notes


def _handover(state: Any) -> bool:
    """Whether a clean start has something to hand over: a task, or notes."""
    return bool(state.current_task or state.open_loops or state.next_actions or state.recent_work)


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


def _tmux_pane() -> dict[str, str] | None:
    """The tmux pane the agent runs in, as its environment (which the hook inherits) says:
    ``{"pane": $TMUX_PANE, "socket": <the server's socket, from $TMUX>}``, or ``None`` outside
    tmux (``phx watchdog --tmux`` checks that the pane's process tree holds the agent before it
    relies on it)."""
    pane = os.environ.get("TMUX_PANE", "")
    if not pane.startswith("%") or not pane[1:].isdigit():
        return None
    socket = os.environ.get("TMUX", "").split(",", 1)[0]
    return {"pane": pane, "socket": socket} if socket.startswith("/") else {"pane": pane}


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
        written = ""
        with contextlib.suppress(OSError):
            from phoenix_protocol.core._clock import iso_from_ms

            mtime_ms = int(os.stat(agent.brief_path).st_mtime * 1000)
            age = max(0, agent.clock.now_ms() - mtime_ms) // 60_000
            written = f" (written {iso_from_ms(mtime_ms)[:16]}Z, {age} min ago: it may be older than the damage)"
        context = (
            f"=== {RECOVERY_BANNER} (Phoenix Protocol) ===\n"
            f"Agent '{agent.id}': {exc}\nThe last brief.md{written} follows; `phx doctor` rebuilds the state "
            "from the ops log.\n\n" + (brief or "(no brief.md either)")
        )[: agent.config.brief_max_chars]
        return dumps_line(
            {
                "hookSpecificOutput": {
                    "hookEventName": native_event("session-start", options),
                    "additionalContext": context,
                }
            }
        )
    proc = find_agent_process()
    # The very process of the previous session starts a new one: a ``/clear``, which a CLI that
    # fires no SessionEnd before it (Codex) leaves looking like a crash. It is neither a crash
    # nor another live session.
    same_process = (
        proc is not None
        and previous.pid == proc.pid
        and previous.host == proc.host
        and previous.pid_start_time is not None
        and abs(previous.pid_start_time - proc.start_time) <= agent.config.process_start_tolerance
    )
    if (
        previous.pid
        and previous.session_id
        and previous.session_id != session_id
        and previous.status == "working"
        and not same_process
    ):
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
    from phoenix_protocol.integrations._hooks_lanes import lane_context, start_in_lane

    # The primary lane, or a lane of its own beside a live session (docs/lanes.md); dead lanes
    # of other sessions are claimed for this one to recover.
    process: dict[str, Any] | None = None
    if proc:
        process = {"pid": proc.pid, "start_time": proc.start_time, "host": proc.host}
        pane = _tmux_pane()
        if pane is not None:
            process["tmux"] = pane
    placed, recovered = start_in_lane(agent, session_id, source=source, process=process, client=_client(options).name)
    before, after = placed.before, placed.after
    if placed.beside is not None:
        notices = []  # about the primary lane, which this session does not take
    _export_env(agent, session_id)
    from phoenix_protocol.agent._state import is_new_session

    new_session = is_new_session(before, session_id, source)
    restored = None
    # restore_on_start = false skips the restore, not the session's start; a lane restores
    # nothing (the agent's checkpoints are its primary lane's).
    if new_session and agent.lane is None:
        restored = _paif_begin(agent, after.session_id, source, restore=agent.config.restore_on_start)
    if before.refresh_requested:
        request = before.refresh_requested
        taken = f"; recovery checkpoint {request['checkpoint']}" if request.get("checkpoint") else ""
        notices.append(
            f"a forced refresh was requested at {request.get('at')} ({request.get('reason')}{taken}): "
            "this session starts from the fresh brief below"
        )
    cleared = source == "clear" and same_process and before.status == "working"
    crashed = before.status in ("working", "error") and source in ("startup", "clear", "resume") and not cleared
    recovering = crashed or bool(before.refresh_requested)
    described = before  # the state as the previous session (or run) left it
    if (
        restored is not None
        and restored.restore
        and (restored.restore.applied.get("phoenix_state") or {}).get("restored")
    ):
        described = agent.state.read_or_none() or before  # a restore put back what state.json had lost
    notices = (notices if recovering else []) + _restored_notices(agent, restored, described)
    anchor = _reanchor(agent) if "persona_reanchor" in after.extra else None
    team = _team_context(agent)
    cc_team = _cc_team_recovery(agent, payload, source) if _client(options).name == "claude-code" else None
    from phoenix_protocol.integrations._context import session_context

    injected = session_context(
        agent,
        described,
        session_id=after.session_id,
        source=source,
        transcript_path=payload.get("transcript_path"),
        banner=_banner(agent, before, source, session_id, crashed=crashed, recovering=recovering),
        notices=notices,
        # A clean start hands the last session over as `restore_on_start` says (off: a clean slate).
        wanted=recovering
        or source in ("compact", "resume")
        or (agent.config.restore_on_start and _handover(described))
        or bool(notices),
    )
    _write_brief_best_effort(agent, after)
    lanes = lane_context(agent, placed, recovered)  # docs/lanes.md: sessions beside this one
    for block in (team, anchor, lanes, cc_team):
        if block:
            injected = (block + "\n\n" + injected)[: agent.config.brief_max_chars] if injected else block
    if not injected:
        return None
    if source == "clear" and _client(options).name == "gemini-cli":
        # Gemini CLI (0.61.0) drops a SessionStart context after /clear (it shows only a
        # systemMessage): the first prompt of the new conversation carries it (``user-prompt``).
        _keep_for_first_prompt(agent, after.session_id, injected)
    return dumps_line(
        {"hookSpecificOutput": {"hookEventName": native_event("session-start", options), "additionalContext": injected}}
    )


PENDING_CONTEXT = "pending-context.json"
"""In the session's lane folder: a SessionStart context the CLI will not deliver, for the first
prompt of that session to carry (``take_pending_context``)."""


def _keep_for_first_prompt(agent: Agent, session_id: str | None, context: str) -> None:
    from phoenix_protocol.core._durable import atomic_write
    from phoenix_protocol.core._jsonio import dumps_line

    record = {"session_id": session_id, "context": context}
    atomic_write(os.path.join(agent.state.directory, PENDING_CONTEXT), dumps_line(record).encode("utf-8"))


def take_pending_context(agent: Agent, session_id: str | None) -> str | None:
    """The context kept for the first prompt of ``session_id`` (then forgotten), or ``None``."""
    from phoenix_protocol.core._durable import read_bytes
    from phoenix_protocol.core._errors import PhoenixError
    from phoenix_protocol.core._jsonio import JSONError, loads

    path = os.path.join(agent.state.directory, PENDING_CONTEXT)
    if not os.path.exists(path):
        return None
    try:
        data = read_bytes(path, limit=4 * agent.config.brief_max_chars + 4096)
        record = loads(data) if data else None
    except (PhoenixError, JSONError):
        record = None
    with contextlib.suppress(OSError):
        os.unlink(path)
    if not isinstance(record, dict) or record.get("session_id") != session_id:
        return None
    context = record.get("context")
    return context if isinstance(context, str) and context else None


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
        team.absorb_files(name)  # what its Write/Edit calls changed, into its task's checkpoint
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

        team = Team.open(agent.home, binding[0], clock=agent.clock, config=agent.config)
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
    from phoenix_protocol.agent._state import task_notes

    actions = [item["text"] for item in task_notes(state)[1][:3]]
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
    lines.append(
        "If this is legitimate for the task (polling a deploy, a read-only investigation), exempt it: "
        f'`phx drift exempt {signal.kind}` or `phx drift exempt --command "<command prefix>"`.'
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


def _paif_begin(agent: Agent, session_id: str | None, source: str, *, restore: bool = True) -> SessionStart | None:
    """PAIF session start (identity, the start record, and with ``restore`` the restore from the
    newest checkpoint); never fails the hook."""
    try:
        from phoenix_protocol.services._sessions import begin

        return begin(agent, session_id, source=source, restore=restore)
    except Exception as exc:  # noqa: BLE001 - reported; the session starts without it
        agent.record("session_restore_failed", "error", {"error": clip(f"{type(exc).__name__}: {exc}", 300)})
        return None
