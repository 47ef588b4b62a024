"""Claude Code hook handlers: ``phx hook <event>`` reads the hook's JSON on stdin.

=================  ==============================================================================
event              what it does
=================  ==============================================================================
session-start      Picks the session's lane (its own beside another live session: docs/lanes.md)
                   and claims dead sessions' lanes for recovery (``_hooks_lanes``).
                   Records the session and the agent process (pid + start time); status working.
                   When the previous state was working or error (a crash, a kill, a lost
                   context) prints the recovery context (RECOVERY DETECTED, a fresh brief) as
                   ``hookSpecificOutput.additionalContext``; a conversation that still holds
                   the brief gets only what changed since (``_context``, docs/recovery.md).
post-tool-use      The heartbeat: ``last_active``, ``heartbeat_seq``, the session's tool calls,
                   the last tool and whether it failed, what it did (a command run, a file
                   written: ``_work``) (also registered for PostToolUseFailure). Hot path: see
                   below.
pre-compact        Refreshes ``brief.md``, takes a routine checkpoint. Never blocks compaction. For a
                   CLI that fires it before every model call (Gemini's PreCompress), throttled
                   (``_pre_compact``).
stop               Heartbeat; the turn ends (``turn: idle``: the agent waits at its prompt).
                   Prints nothing (output there would keep the turn going).
user-prompt        A prompt was submitted (UserPromptSubmit): heartbeat, ``turn: busy`` until
                   the Stop hook (``phx watchdog --tmux`` never types into a busy agent's pane).
                   Prints nothing; for Gemini CLI (BeforeAgent), the context of a SessionStart
                   after /clear, which Gemini CLI drops, once.
session-end        Status idle, ops event session_end, ``brief.md`` refreshed.
subagent-start,    Claude Code's agent teams: the team's roster, tasks and messages recorded
subagent-stop,     (``_cc_teams``), as on PostToolUse of its tools (``SendMessage``, …) and the
task-created,      lead's Stop (which also delivers the messages a recovery queued). TaskCompleted
task-completed,    and TeammateIdle apply the team's guardrails: a refusal exits 2
teammate-idle      (``HookBlock``), the only non-zero exit.
=================  ==============================================================================

Every event of a session that has a lane of its own goes to that lane (``_open_agent``: one
``stat`` of ``lanes/<lane-id>/state.json``); the others to the agent's ``state.json``.

A hook never breaks the agent: whatever goes wrong (empty or malformed stdin, an unknown
event, a locked, corrupt or newer state file, a full disk) it exits 0 with one line on stderr
and, where it still can, an ops event with status warn or error. It never exits 2 and never
rewrites a state file it could not read.

The user sees it too: the first time in a session that a hook fails, or that SessionStart finds
the state damaged (``note_problem``), the hook's JSON output carries a ``systemMessage``, the one
line Claude Code shows the user (never the model), naming ``phx doctor`` (``_hook_notice``).

A payload over ``_MAX_STDIN`` (64 MiB: a tool's whole output) is decoded with its values over
``_MAX_VALUE`` (1 MiB) left out (``_loads_oversized``, msgspec): the hook still runs on the ids,
names and flags, and logs ``hook_payload_oversized``.

Hot path: the PostToolUse handler imports only ``os``, ``sys``, ``time``, ``fcntl``, ``_json``
and Phoenix's own primitives. ``phx install --scope local`` (or ``user``) registers it as
``<python> -S -P -c 'import sys; sys.path.append(<dir>); from phoenix_protocol.integrations._hooks import main; main()' post-tool-use``
(``<dir>``: the directory Phoenix is installed in), which skips the console-script wrapper (it
imports ``re``), the full CLI and the set-up of the site packages (``-S``); ``main()`` sets
those up the first time an import needs them (``_SiteOnFirstMiss``). The shared settings
(``--scope project``) run ``phx hook <event> --shared`` from ``PATH`` instead (``_portable``).
"""

from __future__ import annotations

import os
import sys

from phoenix_protocol.integrations._clients import (
    CLAUDE_CODE,
    TEAM_EVENTS,
    TEAM_TOOLS,
    adapt_output,
    adapt_payload,
    claude_team_name,
    client_named,
)

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable
    from importlib.machinery import ModuleSpec
    from typing import Any

    from phoenix_protocol.agent._state import AgentState
    from phoenix_protocol.integrations._clients import Client
    from phoenix_protocol.services._agent import Agent

__all__ = ["EVENTS", "HookBlock", "handle", "main", "run"]

EVENTS = {ours: native for native, ours, _, _ in CLAUDE_CODE.hooks}
"""Phoenix's hook events and Claude Code's name for each (every CLI's: ``_clients``)."""
_MAX_STDIN = 64 * 1024 * 1024
"""A payload up to this size is decoded whole; a larger one with its large values left out."""
_MAX_VALUE = 1024 * 1024
"""In a payload over ``_MAX_STDIN``: the largest value kept, in bytes (others become ``"<N bytes left out>"``)."""
_NAME_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.:-[]")
"""What a name the payload gives is reduced to (``[]`` keep the redactor's ``[REDACTED:kind]``)."""
_SESSION_END_BUDGET = 1.0  # Claude Code gives all SessionEnd hooks about 1.5 s together
_GIT_TIMEOUT = 1.0  # per git call of a brief, so that a hung git never eats a hook's budget
RECOVERY_BANNER = "RECOVERY DETECTED"
REFRESH_BANNER = "FORCED REFRESH"


class HookBlock(Exception):
    """A guardrail of Claude Code's agent teams refuses what its hook was asked (TaskCompleted,
    TeammateIdle: ``_cc_teams``): the hook exits 2 with this message on stderr, which Claude Code
    gives the model. The only way a hook exits non-zero."""


CLAUDE_CODE_TOOLS = CLAUDE_CODE.own_tools
"""Claude Code's own tools: names no secret hides in (``redact`` returns each unchanged: a test
says so), which the heartbeat records without loading the redactor (each CLI's: ``Client.own_tools``)."""


def _plain(value: object, limit: int = 100, default: str = "unknown") -> str:
    """A tool name, reason or source reduced to a token of ``_NAME_CHARS`` (not redacted: see
    ``_named``)."""
    if not isinstance(value, str) or not value:
        return default
    cleaned = "".join(ch if ch in _NAME_CHARS else "_" for ch in value[:limit])
    return cleaned or default


def _named(value: object, limit: int = 100, default: str = "unknown") -> str:
    """A name the payload gives (a tool's, a session's ``source``, ``reason``, ``trigger``) as
    Phoenix writes it: redacted, then ``_plain`` (it goes into events logged ``trusted``, the
    state and the session records, where nothing else would redact it; a token of safe
    characters may still be a key: ``sk-ant-api03-...``). Redacted first, whole (up to 4,096
    characters): ``_plain`` turns separators into ``_``, which glues a secret to the word before
    it, where the redactor no longer sees a token."""
    if not isinstance(value, str) or not value:
        return default
    from phoenix_protocol.core._redact import redact

    return _plain(redact(value[:4096]), limit, default)


def _raw_session_id(payload: dict[str, Any]) -> str | None:
    """The payload's session id as it came (text, or ``None``), for the heartbeat: the state
    keeps only ids ``session_id_of`` gave, so one equal to the state's needs no further look."""
    value = payload.get("session_id")
    return value if isinstance(value, str) and value else None


def _session_id(payload: dict[str, Any], state: AgentState | None = None) -> str | None:
    """The payload's session id as Phoenix keeps it (``session_id_of``: one it cannot keep as it
    is, a secret among them, becomes ``sid-`` and a hash of it, the same in every hook of that
    session). When it is ``state``'s own already, that is it: no secret check on the hot path."""
    raw = _raw_session_id(payload)
    if raw is not None and state is not None and state.session_id is not None:
        if raw == state.session_id:
            return raw
        if state.session_id.startswith("sid-"):
            from phoenix_protocol.core._ids import hashed_session_id

            if hashed_session_id(raw) == state.session_id:
                return state.session_id  # the session's own id, kept as a hash (a secret, say)
    from phoenix_protocol.core._ids import session_id_of

    return session_id_of(raw)


_COSMETIC_KEYS = frozenset({"description", "timeout", "run_in_background", "is_background", "instruction"})
"""Claude Code's Bash ``description``, ``timeout``, ``run_in_background``; Gemini CLI's
``run_shell_command`` ``description``, ``is_background`` and ``replace``'s ``instruction`` (what the
model says the edit is for)."""


def _normalized(value: object) -> object:
    """A tool input without what does not change the action taken: whitespace runs inside
    strings collapse, and cosmetic keys (``_COSMETIC_KEYS``) go."""
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
    from phoenix_protocol.core._jsonio import dumps_canonical

    try:
        data = dumps_canonical(_normalized(value)).encode("utf-8", "surrogatepass")
    except (TypeError, ValueError):
        return None
    from phoenix_protocol.core._ids import short_digest

    return short_digest(data)


def _shell_command(tool: str, tool_input: object, client: Client) -> tuple[object, str | None]:
    """A shell tool's input with its command normalized (``_drift.normalize_command``: near-
    duplicate commands are one action), and that command; other tools' input as it is."""
    if tool not in client.shell_tools or not isinstance(tool_input, dict):
        return tool_input, None
    command = tool_input.get("command")
    if not isinstance(command, str):
        return tool_input, None
    from phoenix_protocol.agent._drift import normalize_command

    normalized = normalize_command(command)
    return {**tool_input, "command": normalized}, normalized


_BOOKKEEPING = frozenset({"phx", "state-update"})
_WORK_CHARS = 160
"""Longest record of a command run or a file written (``recent_work``)."""
_WORK_SCAN = 600
_WORK_WORD = 200


def _edited_path(tool: str | None, payload: dict[str, Any], client: Client = CLAUDE_CODE) -> str | None:
    """The file a Write or an Edit tool call changed (relative to the project when inside it), or ``None``."""
    tool_input = payload.get("tool_input")
    if tool not in client.file_tools or not isinstance(tool_input, dict):
        return None
    path = tool_input.get("file_path") or tool_input.get("notebook_path")
    if not isinstance(path, str) or not path:
        return None
    root = client.project_dir(payload)
    if root is not None and path.startswith(root.rstrip("/") + "/"):
        path = path[len(root.rstrip("/")) + 1 :]
    return path


def _work(tool: str, payload: dict[str, Any], client: Client = CLAUDE_CODE) -> str | None:
    """What a tool call did, for the brief: the command a shell tool ran (its first line), or the
    file a Write or an Edit changed (relative to the project); ``client`` says which tools those
    are (``Client.shell_tools``, ``file_tools``). Screened for secrets on the way
    (``core._screen``: the redactor costs more than this hook's budget), cut at ``_WORK_CHARS``
    at a word. ``None``: nothing to record (another tool; Phoenix's own ``phx`` and
    ``state-update`` calls, whose effect the state shows)."""
    tool_input = payload.get("tool_input")
    if not isinstance(tool_input, dict):
        return None
    more = False
    if tool in client.shell_tools:
        command = tool_input.get("command")
        if not isinstance(command, str):
            return None
        lines = command.strip().split("\n", 1)
        words = lines[0].split()
        if not words or words[0].rsplit("/", 1)[-1] in _BOOKKEEPING:
            return None
        more = len(lines) > 1
    elif tool in client.file_tools:
        path = _edited_path(tool, payload, client)
        if path is None:
            return None
        words = path.split()
    else:
        return None
    from phoenix_protocol.core._screen import MASK, screen

    kept: list[str] = []
    size = 0
    for word in words:  # whole words: a word cut before the screen could hide what it would mask
        if size > _WORK_SCAN:
            more = True
            break
        kept.append(word if len(word) <= _WORK_WORD else MASK)
        size += len(word) + 1
    detail = screen(" ".join(kept))
    if len(detail) > _WORK_CHARS:
        detail, more = detail[:_WORK_CHARS].rsplit(" ", 1)[0], True
    return detail + " …" if more else detail


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
    from phoenix_protocol.core._home import Home
    from phoenix_protocol.services._agent import Agent

    # The project the CLI was started in, which a `cd` in the session does not change; the
    # payload's cwd (where the session is now) only when the CLI does not say.
    cwd = _client(options).project_dir(payload) or os.getcwd()
    home = Home(os.path.join(cwd, options["home"])) if "home" in options else Home.resolve(cwd)
    agent = Agent.open(options.get("agent"), home=home).follow_session(_raw_session_id(payload))  # docs/lanes.md
    timeout = agent.config.hook_lock_timeout
    if lock_timeout_cap is not None:
        timeout = min(timeout, lock_timeout_cap)
    agent.config.lock_timeout = timeout
    agent.ops.log.lock_timeout = timeout
    agent.store_fallback = True  # a hook's state change never waits on an unreachable server
    return agent


def _client(options: dict[str, str]) -> Client:
    """The agent CLI running the hook (``--client``; default Claude Code)."""
    return client_named(options.get("client"))


def native_event(event: str, options: dict[str, str]) -> str:
    """The running CLI's name for Phoenix's ``event`` (the ``hookEventName`` of its output)."""
    return _client(options).native_event(event) or EVENTS.get(event, event)


def handle(event: str, payload: dict[str, Any], options: dict[str, str]) -> str | None:
    """Run one hook; returns what to print on stdout (or ``None``). Raises on failure.
    ``payload`` is in the running CLI's shape (``options["client"]``): ``adapt_payload`` turns it
    into the one the handlers read; ``run`` puts the output into the shape that CLI accepts for the
    event that fired (``adapt_output``)."""
    client = _client(options)
    payload = adapt_payload(client, payload)
    raw_session = _raw_session_id(payload)
    if event in ("post-tool-use", "post-tool-use-failure"):
        agent = _open_agent(payload, options)
        ok, error = _tool_outcome(event, payload)
        due: list[str] = []
        drift: list[Any] = []
        tool = _plain(payload.get("tool_name"))
        duration = payload.get("duration_ms")
        from phoenix_protocol.agent._drift import EDIT_TOOLS

        tool_input, command = _shell_command(tool, payload.get("tool_input"), client)

        state = agent.state.heartbeat(
            session_id=raw_session,
            tool=tool,
            ok=ok,
            input_digest=_digest(tool_input),
            error=error,
            durable=False,  # atomic, not fsynced: the next heartbeat replaces it (transitions stay durable)
            lock_timeout=agent.config.lock_timeout,
            due=due if agent.lane is None else None,  # lanes take no checkpoints (docs/lanes.md)
            duration_ms=duration if isinstance(duration, int) and not isinstance(duration, bool) else None,
            progress=tool in EDIT_TOOLS or tool in client.file_tools,
            drift=drift,
            work=_work(tool, payload, client),
            clean_tool=None if tool in client.own_tools else lambda: _named(payload.get("tool_name")),
            command=command,
        )
        _share_heartbeat(agent, payload, state, (tool, client) if ok else None)
        if tool in TEAM_TOOLS and client is CLAUDE_CODE:
            _record_team(agent, event, payload)  # Claude Code's agent teams (_cc_teams)
        if drift and drift[0][1] and agent.lane is None:
            # Seed 003's emergency recovery (once per episode of drift) replaces a plain recovery
            # checkpoint due now.
            due = [k for k in due if k != "recovery"] + ["emergency:" + drift[0][0].detail]
        if not due and not drift and "persona_reanchor" not in state.extra:
            return None  # the common case ends here: nothing more is imported
        from phoenix_protocol.integrations._hooks_session import after_tool

        return after_tool(agent, state, payload, options, due, drift)
    if event == "user-prompt":
        agent = _open_agent(payload, options)
        agent.state.heartbeat(
            session_id=raw_session, tool=None, durable=False, lock_timeout=agent.config.lock_timeout, turn="busy"
        )
        if _client(options).name != "gemini-cli":
            return None
        from phoenix_protocol.integrations._hooks_session import take_pending_context

        context = take_pending_context(agent, _session_id(payload))  # what Gemini's /clear dropped
        if context is None:
            return None
        from phoenix_protocol.core._jsonio import dumps_line

        hook = native_event("user-prompt", options)
        return dumps_line({"hookSpecificOutput": {"hookEventName": hook, "additionalContext": context}})
    if event == "stop":
        agent = _open_agent(payload, options)
        agent.state.heartbeat(
            session_id=raw_session, tool=None, durable=False, lock_timeout=agent.config.lock_timeout, turn="idle"
        )
        if client is CLAUDE_CODE and raw_session is not None:
            _lead_stopped(agent, payload, raw_session)
        answer = payload.get("last_assistant_message")
        if isinstance(answer, str) and answer.strip() and os.path.exists(os.path.join(agent.dir, "identity.yaml")):
            from phoenix_protocol.integrations._hooks_session import _persona_check

            _persona_check(agent, answer)
        return None  # Stop prints nothing: output there would keep the conversation going
    if event in TEAM_EVENTS:
        from phoenix_protocol.integrations._cc_teams import on_event

        on_event(_open_agent(payload, options), event, payload)  # raises HookBlock to refuse
        return None
    if event in ("session-start", "pre-compact", "session-end"):
        if event == "pre-compact" and client.pre_compact_every_call:
            from phoenix_protocol.integrations._pre_compact import throttled

            if throttled(_open_agent(payload, options), payload):
                return None  # Gemini's PreCompress before every model call (_pre_compact)
        from phoenix_protocol.integrations._hooks_session import handle_session_event

        return handle_session_event(event, payload, options, _session_id(payload))
    raise ValueError(f"unknown hook event {event!r}; expected one of {', '.join(EVENTS)}")


def _record_team(agent: Agent, event: str, payload: dict[str, Any]) -> None:
    """A team tool's call (``SendMessage``, ``TaskUpdate``, …) into Phoenix's record of Claude
    Code's team, off the hot path: the session's team is found here (a ``stat``), the recording
    (Claude Code's files read, one transaction) runs in a detached child (``_detached``: Claude
    Code does not wait for it; it outlives a lead killed right after the call). A failure is an
    ops event, never the heartbeat's."""
    from phoenix_protocol.integrations._cc_teams import find_team

    if find_team(payload, scan=False) is None:  # two stats at most: an Agent call in a session without a team
        return

    def work() -> None:
        try:
            from phoenix_protocol.integrations._cc_teams import record

            record(agent, event, payload)
        except Exception as exc:  # noqa: BLE001 - recorded instead; the heartbeat stands
            agent.record("hook_failed", "warn", {"hook": "claude-team", "error": _describe(exc)[:500]})

    _detached(work)


def _lead_stopped(agent: Agent, payload: dict[str, Any], session: str) -> None:
    """Stop of a session that runs a Claude Code team (one ``stat``: ``teams/session-<8 hex>``)
    or has messages waiting to be delivered again into its inbox (one ``stat``): record the team
    (the inbox files' unread messages among it) and deliver the waiting messages, now that the
    lead waits at its prompt (``_cc_teams``), in a detached child as ``_record_team`` does."""
    team_config = os.path.join(CLAUDE_CODE.user_config_dir(), "teams", claude_team_name(session), "config.json")
    waiting = os.path.exists(os.path.join(agent.state.directory, "cc-redeliver"))
    if not waiting and not os.path.exists(team_config):
        return

    def work() -> None:
        try:
            from phoenix_protocol.integrations._cc_teams import deliver_pending, record

            record(agent, "stop", payload)
            if waiting:
                deliver_pending(agent, payload)
        except Exception as exc:  # noqa: BLE001 - recorded instead; the heartbeat stands
            agent.record("hook_failed", "warn", {"hook": "claude-team", "error": _describe(exc)[:500]})

    _detached(work)


PG_BEAT_INTERVAL_MS = 30_000
SYNC_MARK = ".store-sync"
"""In the agent's directory: when the PostToolUse hook last passed its copy on to PostgreSQL."""


def _take_due_checkpoints(payload: dict[str, Any], options: dict[str, str], due: list[str]) -> None:
    """Take the time-based checkpoints the heartbeat claimed, off the hot path: in a detached
    child (the hook returns at once; Claude Code does not wait for it), or inline when
    ``PHOENIX_HOOK_INLINE=1`` (tests, platforms without fork)."""

    def work() -> None:
        from phoenix_protocol.integrations._hooks_session import _checkpoints_now

        _checkpoints_now(payload, options, due)

    _detached(work)


def _detached(work: Callable[[], None]) -> None:
    """Run ``work`` off the hot path: in a detached child (the hook returns at once; Claude Code
    does not wait for it; the child imports what it needs), or inline when
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
            os.nice(10)  # yield the CPU to the agent (and to this hook's parent finishing)
            work()
        finally:
            behind = sys.modules.get("phoenix_protocol.core._background")
            if behind is not None:  # os._exit skips atexit: finish what was written behind
                behind.drain()
            os._exit(0)
    work()


def _team_binding() -> tuple[str, str] | None:
    """``(team_id, teammate)`` when this session belongs to a team ($PHOENIX_TEAM, $PHOENIX_TEAMMATE)."""
    team = os.environ.get("PHOENIX_TEAM")
    mate = os.environ.get("PHOENIX_TEAMMATE")
    return (team, mate) if team and mate else None


def _share_heartbeat(
    agent: Agent, payload: dict[str, Any], state: AgentState, edit: tuple[str, Client] | None = None
) -> None:
    """The teammate's heartbeat, on the hot path: one small file, no roster lookup; and the file
    a Write or Edit changed (``edit``: the successful call's tool and its CLI, ``_edited_path``),
    one line appended, for its task's checkpoint
    (``Team.absorb_files``). On the PostgreSQL store, every 30 s, the heartbeat, the files and
    this machine's copy of the agent's state and ops events are passed on to the server from a
    detached process (psycopg and a connection cost more than the hook's budget)."""
    binding = _team_binding()
    now = agent.clock.now_ms()
    if binding is not None:
        from phoenix_protocol.agent._heartbeats import beat, note_files, runtime_dir

        session_id = _session_id(payload, state)
        directory = runtime_dir(agent.home.root, binding[0])
        beat(directory, binding[1], now_ms=now, session_id=session_id)
        edited = _edited_path(edit[0], payload, edit[1]) if edit is not None else None
        if edited is not None:
            note_files(directory, binding[1], [edited])
    if str(agent.config.store).startswith(("postgresql://", "postgres://")):
        from phoenix_protocol.core._durable import atomic_write, read_bytes

        mark = os.path.join(agent.dir, SYNC_MARK)
        last = read_bytes(mark, limit=64)
        if last is None or not last.strip().isdigit() or now - int(last) >= PG_BEAT_INTERVAL_MS:
            atomic_write(mark, str(now).encode("ascii"), durable=False)
            _spawn_share(agent, binding, _session_id(payload, state))


def _spawn_share(agent: Agent, binding: tuple[str, str] | None, session_id: str | None) -> None:
    """Start a detached interpreter that passes the heartbeat and the agent's copy on to
    PostgreSQL. ``posix_spawn`` costs this hook about a millisecond, where ``fork`` of this
    process costs several."""
    team, name = binding or ("", "")
    argv = [agent.home.root, agent.id, team, name, session_id or ""]
    if os.environ.get("PHOENIX_HOOK_INLINE") == "1" or not hasattr(os, "posix_spawn"):
        from phoenix_protocol.integrations._hooks_session import share_main

        share_main(argv)
        return
    code = "import sys; from phoenix_protocol.integrations._hooks_session import share_main; share_main(sys.argv[1:])"
    devnull = [(os.POSIX_SPAWN_OPEN, fd, os.devnull, os.O_RDWR, 0) for fd in (0, 1, 2)]
    os.posix_spawn(
        sys.executable, [sys.executable, "-P", "-c", code, *argv], os.environ, file_actions=devnull, setsid=True
    )


def _parse_args(argv: list[str]) -> tuple[str, dict[str, str]]:
    event = ""
    options: dict[str, str] = {}
    i = 0
    while i < len(argv):
        arg = argv[i]
        if arg in ("--agent", "--home", "--client") and i + 1 < len(argv):
            options[arg[2:]] = argv[i + 1]
            i += 2
            continue
        if arg.startswith(("--agent=", "--home=", "--client=")):
            key, _, value = arg[2:].partition("=")
            options[key] = value
        elif not event:
            event = arg
        i += 1
    return event, options


def _normalize_event(event: str, payload: dict[str, Any], client: Client = CLAUDE_CODE) -> str:
    """Phoenix's event for the hook's argument: Phoenix's own name, or the CLI's (``AfterTool``);
    with none, the payload's ``hook_event_name``."""
    name = event.strip().lower().replace("_", "-")
    if name in EVENTS:
        return name
    native = event.strip()
    if not native:
        named = payload.get("hook_event_name")
        native = named if isinstance(named, str) else ""
    return client.event_of(native) or name


def run(argv: list[str], stdin: bytes) -> tuple[int, str, str]:
    """Run a hook from its arguments and stdin; returns ``(exit_code, stdout, stderr)``.

    The exit code is 0, except 2 when a team guardrail refuses (``HookBlock``: TaskCompleted,
    TeammateIdle). Nothing here raises.
    """
    event = "?"
    payload: dict[str, Any] = {}
    options: dict[str, str] = {}
    oversized: dict[str, Any] | None = None
    try:
        event, options = _parse_args(argv)
        client = _client(options)
        from phoenix_protocol.core._jsonio import JSONError, loads

        problem = None
        if len(stdin) <= _MAX_STDIN and not stdin.strip():
            problem = "empty stdin (expected the hook's JSON)"
        else:
            try:
                if len(stdin) <= _MAX_STDIN:
                    decoded = loads(stdin)
                else:
                    decoded, oversized = _loads_oversized(stdin)
            except JSONError as exc:
                problem = f"stdin is not JSON ({exc})"
            else:
                if isinstance(decoded, dict):
                    payload = decoded
                else:
                    problem = "stdin JSON is not an object"
        event = _normalize_event(event, payload, client)
        if event not in EVENTS:
            raise ValueError(f"unknown hook event {event or '(none)'!r}; expected one of {', '.join(EVENTS)}")
        if problem is not None:
            raise ValueError(problem)
        if oversized is not None:
            _log_best_effort("hook_payload_oversized", "warn", event, payload, options, oversized)
        del _noted[:]
        out = handle(event, payload, options)
        line = ""
        if _noted:  # the hook got round a problem (its ops event is written): the user hears of it
            from phoenix_protocol.integrations._hook_notice import notice_once, with_system_message

            message = _describe(_noted[0])
            notice = notice_once(event, payload, message, failed=False, client=client)
            if notice is not None:
                out = with_system_message(out, notice)
            line = f"phoenix: {event} hook: {message[:300]} (the agent is unaffected)\n"
        out = adapt_output(client, event, out, payload)  # the shape this CLI takes for the event that fired
        if line:
            return 0, (out + "\n") if out else _quiet(options), line
        return 0, (out + "\n") if out else "", ""
    except HookBlock as block:  # a team guardrail's refusal: the one exit 2 (_cc_teams)
        return 2, "", str(block) + "\n"
    except BaseException as exc:  # noqa: BLE001 - a hook must never break the agent
        message = "interrupted" if isinstance(exc, KeyboardInterrupt) else _describe(exc)
        line = f"phoenix: {event} hook: {message[:300]} (the agent is unaffected)"
        _log_best_effort("hook_failed", "error", event, payload, options, {"error": message[:500]})
        notice = None if isinstance(exc, KeyboardInterrupt) else _notice(event, payload, message, options)
        return 0, notice + "\n" if notice else _quiet(options), line + "\n"


def _quiet(options: dict[str, str]) -> str:
    """What a hook that has a line for stderr but nothing to say prints on stdout: ``{}`` (no
    output) for a CLI that shows the user the stderr of a hook whose stdout is empty (Gemini CLI:
    every time, where the ``systemMessage`` notice tells once a session), else nothing."""
    try:
        return "{}\n" if _client(options).stderr_shown else ""
    except ValueError:  # an unknown --client: what runs the hook is not known
        return ""


_noted: list[BaseException] = []
"""What the running hook got round (``note_problem``), for ``run`` to report."""


def _notice(event: str, payload: dict[str, Any], message: str, options: dict[str, str]) -> str | None:
    """The output that tells the user of a failed hook (``_hook_notice``), or ``None``. Never raises."""
    try:
        from phoenix_protocol.integrations._hook_notice import notice_once, with_system_message

        client = _client(options)
        notice = notice_once(event, payload, message, failed=True, client=client)
        return adapt_output(client, event, with_system_message(None, notice), payload) if notice else None
    except Exception:  # noqa: BLE001 - the hook's own failure must not get worse
        return None


def note_problem(exc: BaseException) -> None:
    """Say that the running hook met ``exc`` and went on without what it could not read (the
    SessionStart hook with a damaged state.json): ``run`` reports it as a failure is reported,
    on stderr and to the user once per session; the caller logs its own ops event."""
    _noted.append(exc)


def _describe(exc: BaseException) -> str:
    """``exc`` as one line, redacted (before anything cuts it: a cut secret no longer matches)."""
    message = " ".join(str(exc).split()) or type(exc).__name__
    try:  # off the hot path
        from phoenix_protocol.core._redact import redact

        message = redact(message)
    except Exception:  # noqa: BLE001, S110 - the hook's own failure must not get worse
        pass
    return message


def _loads_oversized(data: bytes) -> tuple[Any, dict[str, Any]]:
    """A payload over ``_MAX_STDIN`` with its values over ``_MAX_VALUE`` bytes left out; and what
    to log about it. msgspec checks the whole document and hands each member over as a slice of
    ``data`` (``msgspec.Raw``), which is decoded only when small. A larger object fewer than three
    keys deep (``tool_input``, ``tool_response`` and the objects directly in them) keeps its
    members by the same rule; any other larger value becomes ``"<N bytes left out>"``.

    Why msgspec (``bench/json_skim.py``, docs/benchmarks.md): the fastest reader measured, twice
    as fast as the streaming skimmer Phoenix had (``_jsonskim``, until bbfa878), with the payload
    held once (the skimmer stayed near 80 MB; at 70 MB both take that); decoding it whole with
    the standard library or orjson takes 2 to 12 times the payload in memory, ijson seconds. Unlike
    the standard library, msgspec refuses an unpaired surrogate escape (``"\\ud83d"``): such a
    payload fails as not JSON. Raises ``JSONError``."""
    import msgspec

    from phoenix_protocol.core._jsonio import JSONError

    members = msgspec.json.Decoder(dict[str, msgspec.Raw]).decode
    left_out: dict[str, int] = {}

    def read(raw: bytes | msgspec.Raw, path: str, depth: int) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for key, value in members(raw).items():
            where = f"{path}.{key}" if path else key
            size = len(value)
            if size <= _MAX_VALUE:
                out[key] = msgspec.json.decode(value)
            elif depth < 3 and memoryview(value)[:1].tobytes() == b"{":
                out[key] = read(value, where, depth + 1)
            else:
                left_out[where] = size
                out[key] = f"<{size} bytes left out>"
        return out

    try:
        payload: Any = read(data, "", 1)
    except msgspec.ValidationError:  # valid JSON, not an object
        payload = None
    except (msgspec.DecodeError, RecursionError) as exc:
        raise JSONError(str(exc)) from None
    largest = sorted(left_out.items(), key=lambda item: -item[1])[:10]
    note = {"bytes": len(data), "limit": _MAX_STDIN, "left_out": {_plain(path, 200): n for path, n in largest}}
    return payload, note


def _log_best_effort(
    name: str, status: str, event: str, payload: dict[str, Any], options: dict[str, str], meta: dict[str, Any]
) -> None:
    """Best effort: an ops event about the hook itself (``hook_failed``, whose stderr line already
    reports it; ``hook_payload_oversized``, only a note). Never raises."""
    try:
        agent = _open_agent(payload, options, lock_timeout_cap=0.5)
        agent.record(name, status, {"hook": _plain(event), **meta})
    except BaseException:  # noqa: BLE001, S110 - the hook goes on either way
        pass


class _SiteOnFirstMiss:
    """An import finder for the installed hook command, which runs Python with ``-S``: setting
    up the site packages (``site``, its ``.pth`` files) costs every heartbeat about 2 ms, and the
    heartbeat needs only the standard library and Phoenix (the command puts Phoenix's directory
    on ``sys.path``). Last on ``sys.meta_path``, it is asked only when no other finder found a
    top-level module: it then sets up the site packages once (``site.main()``, as a normal start
    would have) and looks again, so the cold paths (a checkpoint, SessionStart) import their
    dependencies as usual."""

    done = False

    @classmethod
    def find_spec(cls, name: str, path: object = None, target: object = None) -> ModuleSpec | None:
        if path is not None or cls.done:  # a submodule: its package was found without this
            return None
        cls.done = True
        import site

        site.main()
        for finder in list(sys.meta_path):
            find = getattr(finder, "find_spec", None)
            if finder is cls or find is None:
                continue
            spec: ModuleSpec | None = find(name, None, target)
            if spec is not None:
                return spec
        return None


def main(argv: list[str] | None = None) -> None:
    """Entry point used by the installed hook commands. Always exits 0."""
    if sys.flags.no_site and _SiteOnFirstMiss not in sys.meta_path:
        sys.meta_path.append(_SiteOnFirstMiss)
    args = sys.argv[1:] if argv is None else argv
    try:
        data = sys.stdin.buffer.read() if sys.stdin is not None else b""  # to its end: Claude Code's pipe never fills
    except (OSError, ValueError):
        data = b""
    code, out, err = run(args, data)
    del data
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
