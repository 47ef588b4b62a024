"""Seed 003's forced refresh, performed where Phoenix can reach the agent: its tmux pane.

A due refresh (``refresh_after_minutes`` of continuous work, a drift episode's emergency
recovery, ``phx recover``) otherwise only sets ``refresh_requested`` and tells the model, which
may or may not start a fresh session. ``phx watchdog --tmux`` performs it for the agents that
opted in (``tmux_refresh_agents``): a recovery checkpoint, then the agent CLI's own clear command
(``core._clis``: ``/clear``) typed into the agent's pane, so that the next SessionStart
(``source: clear``) injects the fresh brief into a clean context.

Before typing, every one of these must hold (else the pass reports why it waits, and types
nothing):

1. the agent opted in (``tmux_refresh_agents``: its id, or ``*``), and a refresh is due: the
   state's ``refresh_requested``, or ``refresh_after_minutes`` of continuous work that no
   heartbeat has claimed yet (an agent idle at its prompt calls no tools);
2. its recorded process (pid *and* start time, this host) runs: the watchdog's ``alive``;
3. it is idle at its prompt: ``state.turn`` is ``idle`` (the Stop hook ended the last turn, or a
   new session waits at its prompt; a submitted prompt and every tool call make it ``busy``); an
   unknown turn (hooks without ``user-prompt``) is never taken for idle;
4. a pane of the tmux server (the given socket, else the recorded ``$TMUX`` one, else tmux's default) holds
   that very process in its process tree, preferring the recorded ``$TMUX_PANE``; the process is a
   CLI Phoenix knows (its clear command);
5. the pane is not in a mode (copy mode: keys would go to tmux), and its screen (``capture-pane``)
   shows none of the CLI's busy marks (``esc to interrupt``) and, where the CLI's empty prompt is
   recognisable (Claude Code, Gemini CLI), an empty prompt: no draft of the user's is completed
   by the keystrokes;
6. under the state's lock, just before typing, the turn is still idle and the session the same;
   the request is marked as typed (``refresh_requested.typed_at``), with an ops event
   ``refresh_typed``, so that the next pass does not type it again (it does after
   ``RETYPE_AFTER_MS`` if no new session answered it).

The recovery checkpoint is taken after these checks, and the screen is read once more after it.
The command text is typed, then Enter after ``KEY_DELAY`` (Codex takes text and Enter arriving
together for a paste); where the CLI's empty prompt is recognisable, Enter is pressed again while
the command stays in the input line (a loaded machine delivered both at once: seen with Gemini
CLI, whose completion menu then kept ``/clear`` unsubmitted). What stays open is the window from that last look to the Enter, about
``KEY_DELAY``: a prompt submitted then would be followed by the clear command as its next input,
and keys typed then would join the command's text.

The library returns a ``RefreshOutcome``; ``phx watchdog`` renders it.
"""

from __future__ import annotations

import subprocess
import time
from typing import TYPE_CHECKING, Any

from phoenix_protocol.core._clock import iso_from_ms
from phoenix_protocol.core._config import comma_list

if TYPE_CHECKING:
    from collections.abc import Callable

    from phoenix_protocol.agent._state import AgentState
    from phoenix_protocol.core._clis import AgentCli
    from phoenix_protocol.core._config import Config
    from phoenix_protocol.services._agent import Agent

__all__ = [
    "ENTER_RETRIES",
    "KEY_DELAY",
    "RETYPE_AFTER_MS",
    "SUBMIT_WAIT",
    "PaneInfo",
    "RefreshOutcome",
    "Tmux",
    "opted_in",
    "refresh_due",
    "refresh_in_tmux",
]

RETYPE_AFTER_MS = 10 * 60_000
"""A clear command typed this long ago with no new session since is typed again."""
KEY_DELAY = 0.3
"""Seconds between typing the command and pressing Enter."""
SUBMIT_WAIT = 3.0
"""Seconds to wait for the screen to show the command taken (an empty prompt again) before Enter
is pressed again (``ENTER_RETRIES`` times at most): only for CLIs whose empty prompt Phoenix
recognises (``AgentCli.idle_prompt``)."""
ENTER_RETRIES = 2
_TMUX_TIMEOUT = 5.0


class PaneInfo:
    """A tmux pane: its id (``%3``), the pid of its process, its session, its name as tmux takes it
    (``target``: ``session:window.pane``), and whether it is in a mode (copy mode) or dead."""

    __slots__ = ("dead", "id", "in_mode", "pid", "session", "target")

    def __init__(
        self,
        pane_id: str,
        pid: int,
        session: str,
        *,
        in_mode: bool = False,
        dead: bool = False,
        target: str | None = None,
    ) -> None:
        self.id = pane_id
        self.pid = pid
        self.session = session
        self.target = target or session
        self.in_mode = in_mode
        self.dead = dead


class Tmux:
    """The ``tmux`` command for one server (``socket``: ``-S``; ``None``: the default server)."""

    def __init__(self, socket: str | None = None, *, runner: Callable[..., Any] = subprocess.run) -> None:
        self.socket = socket
        self.runner = runner

    def run(self, *args: str) -> str | None:
        """``tmux <args>``'s output, or ``None`` when it failed (no server, no tmux)."""
        command = ["tmux", *(["-S", self.socket] if self.socket else []), *args]
        try:
            done = self.runner(command, capture_output=True, text=True, timeout=_TMUX_TIMEOUT, check=False)
        except (OSError, subprocess.SubprocessError):
            return None
        return str(done.stdout) if done.returncode == 0 else None

    def panes(self) -> list[PaneInfo] | None:
        """Every pane of the server (``None``: no server)."""
        listed = self.run(
            "list-panes",
            "-a",
            "-F",
            "#{pane_id}\t#{pane_pid}\t#{pane_in_mode}\t#{pane_dead}\t#{window_index}\t#{pane_index}\t#{session_name}",
        )
        if listed is None:
            return None
        out = []
        for line in listed.splitlines():
            parts = line.split("\t", 6)  # the session's name last: it may hold a tab
            if len(parts) != 7 or not parts[1].isdigit():
                continue
            pane_id, pid, mode, dead, window, index, session = parts
            target = f"{session}:{window}.{index}"
            out.append(PaneInfo(pane_id, int(pid), session, in_mode=mode == "1", dead=dead == "1", target=target))
        return out

    def capture(self, pane_id: str) -> str | None:
        """What the pane shows now (its visible screen), or ``None``."""
        return self.run("capture-pane", "-p", "-t", pane_id)

    def type_command(
        self,
        pane_id: str,
        text: str,
        *,
        sleep: Callable[[float], None] = time.sleep,
        submitted: Callable[[str], bool] | None = None,
    ) -> bool:
        """Type ``text`` into the pane (literally), then Enter after ``KEY_DELAY``. With
        ``submitted`` (does this screen show the command taken?), Enter is pressed again, up to
        ``ENTER_RETRIES`` times, while the screen does not show it within ``SUBMIT_WAIT`` seconds:
        a TUI that read the text and the Enter together (a busy machine) took them for a paste
        or a completion, and left the command in its input line. ``False``: tmux failed."""
        if self.run("send-keys", "-t", pane_id, "-l", text) is None:
            return False
        for _attempt in range(1 + (ENTER_RETRIES if submitted is not None else 0)):
            sleep(KEY_DELAY)
            if self.run("send-keys", "-t", pane_id, "Enter") is None:
                return False
            if submitted is None:
                return True
            for _look in range(int(SUBMIT_WAIT / KEY_DELAY)):
                sleep(KEY_DELAY)
                screen = self.capture(pane_id)
                if screen is None or submitted(screen):
                    return True
        return True


class RefreshOutcome:
    """What the tmux refresh did for one agent: ``action`` is ``sent`` (the command was typed),
    ``would_send`` (a dry run), ``waiting`` (due, but not now: ``detail`` says why) or
    ``unreachable`` (due, and Phoenix cannot type it: no pane holds the agent, an unknown CLI)."""

    __slots__ = ("action", "checkpoint", "cli", "command", "detail", "pane", "reason")

    def __init__(
        self,
        action: str,
        detail: str,
        *,
        reason: str,
        pane: str | None = None,
        cli: str | None = None,
        command: str | None = None,
        checkpoint: str | None = None,
    ) -> None:
        self.action = action
        self.detail = detail
        self.reason = reason
        self.pane = pane
        self.cli = cli
        self.command = command
        self.checkpoint = checkpoint

    def as_dict(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in self.__slots__}

    def __repr__(self) -> str:
        return f"RefreshOutcome({self.action!r}, {self.detail!r})"


def opted_in(agent_id: str, config: Config) -> bool:
    """Whether ``tmux_refresh_agents`` names ``agent_id`` (or is ``*``)."""
    names = comma_list(config.tmux_refresh_agents)
    return "*" in names or agent_id in names


def refresh_due(state: AgentState, config: Config, now_ms: int) -> str | None:
    """Why ``state`` is due a forced refresh (the request's reason, or the stretch of continuous
    work no heartbeat has claimed yet), or ``None``."""
    if state.status != "working":
        return None
    request = state.refresh_requested
    if isinstance(request, dict):
        return str(request.get("reason") or "refresh requested")
    from phoenix_protocol.agent._state import due_checkpoints

    if "recovery" in due_checkpoints(state, config, now_ms):
        return f"{config.refresh_after_minutes:g} minutes of continuous work"
    return None


def _typed_recently(state: AgentState, now_ms: int) -> str | None:
    request = state.refresh_requested
    typed = request.get("typed_at_ms") if isinstance(request, dict) else None
    if type(typed) is int and 0 <= now_ms - typed < RETYPE_AFTER_MS:
        return str(request.get("typed_at") if isinstance(request, dict) else "")
    return None


def _screen_says(cli: AgentCli, screen: str) -> str | None:
    """Why the screen says not to type now, or ``None``."""
    lowered = screen.lower()
    for mark in cli.busy_markers:
        if mark in lowered:
            return f"its screen shows {cli.title} busy ({mark!r})"
    if cli.idle_prompt is not None and not _prompt_empty(cli.idle_prompt, screen):
        return f"its screen shows no empty {cli.title} prompt (a draft, a dialog or a menu)"
    return None


def _prompt_empty(idle_prompt: str, screen: str) -> bool:
    """Whether a line of ``screen`` matches ``idle_prompt`` (``AgentCli.idle_prompt``): the CLI's
    prompt is empty."""
    import re

    pattern = re.compile(idle_prompt)
    return any(pattern.search(line) for line in screen.splitlines())


def _pane_of(tmux: Tmux, pid: int, recorded: str | None, extra_names: set[str]) -> tuple[Any, Any] | str:
    """``(pane, agent process)`` of the pane whose process tree holds agent ``pid``, the recorded
    pane first; or why there is none."""
    from phoenix_protocol.core._clis import agents_in_tree

    panes = tmux.panes()
    if panes is None:
        return f"no tmux server{' at ' + tmux.socket if tmux.socket else ''}"
    panes.sort(key=lambda p: p.id != recorded)
    for pane in panes:
        for found in agents_in_tree(pane.pid, extra_names=extra_names):
            if found.pid == pid or pid in found.launchers:
                return pane, found
    return f"no tmux pane holds agent process {pid}"


def refresh_in_tmux(
    agent: Agent,
    state: AgentState,
    *,
    now_ms: int,
    alive: bool,
    socket: str | None = None,
    act: bool = True,
    sleep: Callable[[float], None] = time.sleep,
    runner: Callable[..., Any] = subprocess.run,
) -> RefreshOutcome | None:
    """Perform ``agent``'s due forced refresh in its tmux pane (see the module docstring);
    ``state`` is its state as the watchdog read it, ``alive`` the watchdog's verdict on its
    process. ``None``: nothing to do (not opted in, or no refresh due). ``socket``: the tmux
    server to look in (default: the one the state records, else tmux's default). With ``act``
    false nothing is taken or typed."""
    config = agent.config
    if not opted_in(agent.id, config):
        return None
    reason = refresh_due(state, config, now_ms)
    if reason is None:
        return None

    def outcome(action: str, detail: str, **more: Any) -> RefreshOutcome:
        return RefreshOutcome(action, detail, reason=reason, **more)

    typed = _typed_recently(state, now_ms)
    if typed is not None:
        return outcome("waiting", f"the clear command was typed at {typed}; waiting for the new session")
    if not alive or state.pid is None:
        return outcome("unreachable", "its recorded process does not run on this host")
    if state.turn != "idle":
        why = "mid-turn" if state.turn == "busy" else "its turn is unknown (no prompt or Stop hook has run)"
        return outcome("waiting", why)
    recorded = state.tmux if isinstance(state.tmux, dict) else {}
    server = recorded.get("socket") if isinstance(recorded.get("socket"), str) else None
    tmux = Tmux(socket or server, runner=runner)
    names = set(comma_list(config.watchdog_process_names))
    pane_id = recorded.get("pane") if isinstance(recorded.get("pane"), str) else None
    found = _pane_of(tmux, state.pid, pane_id, names)
    if isinstance(found, str):
        return outcome("unreachable", found)
    pane, process = found
    where: dict[str, Any] = {"pane": pane.id}
    if process.cli is None:
        return outcome("unreachable", f"process {state.pid} ({process.name}) is no agent CLI Phoenix knows", **where)
    cli = process.cli
    where.update(cli=cli.name, command=cli.clear_command)
    if pane.dead:
        return outcome("unreachable", f"pane {pane.id} is dead", **where)
    if pane.in_mode:
        return outcome("waiting", f"pane {pane.id} is in a mode (copy mode)", **where)
    screen = tmux.capture(pane.id)
    if screen is None:
        return outcome("waiting", f"could not read pane {pane.id}", **where)
    problem = _screen_says(cli, screen)
    if problem is not None:
        return outcome("waiting", problem, **where)
    if not act:
        return outcome("would_send", f"would type {cli.clear_command} into pane {pane.id}", **where)
    return _send(agent, state, tmux, pane, cli, reason, now_ms=now_ms, sleep=sleep, where=where)


def _send(
    agent: Agent,
    state: AgentState,
    tmux: Tmux,
    pane: PaneInfo,
    cli: AgentCli,
    reason: str,
    *,
    now_ms: int,
    sleep: Callable[[float], None],
    where: dict[str, Any],
) -> RefreshOutcome:
    """The recovery checkpoint, the mark under the lock, the keystrokes."""
    from phoenix_protocol.agent._state import Transition

    if state.refresh_requested is None:  # due by time, unclaimed: the forced refresh seed 003 describes
        info = agent.checkpoints.force_refresh(reason, now_ms=now_ms)
    else:  # requested earlier: a checkpoint of where the agent is now, just before its context goes
        info = agent.checkpoints.create(
            "recovery", summary=f"forced refresh in tmux pane {pane.id}: {reason}", now_ms=now_ms
        )
    where["checkpoint"] = info.name
    screen = tmux.capture(pane.id)  # again, after the checkpoint: the last look before the keys
    problem = "could not read the pane" if screen is None else _screen_says(cli, screen)
    if problem is not None:
        return RefreshOutcome("waiting", problem, reason=reason, **where)
    changed: list[str] = []

    def mark(current: AgentState) -> list[Transition]:
        if current.turn != "idle" or current.session_id != state.session_id or current.pid != state.pid:
            return []
        request = current.refresh_requested
        if not isinstance(request, dict):  # answered meanwhile (a new session), or due by time only
            request = current.refresh_requested = {"at": iso_from_ms(now_ms), "reason": reason, "checkpoint": info.name}
        request.update(typed_at=iso_from_ms(now_ms), typed_at_ms=now_ms, pane=pane.id, command=cli.clear_command)
        changed.append("typed")
        meta = {"reason": reason, "checkpoint": info.name, "session_id": current.session_id, "pid": current.pid}
        return [Transition("refresh_typed", "warn", {**meta, **where})]

    agent.state.change(mark)
    if not changed:
        return RefreshOutcome("waiting", "a turn began (or the session changed) meanwhile", reason=reason, **where)
    idle_prompt = cli.idle_prompt
    submitted = None
    if idle_prompt is not None:

        def submitted(screen: str) -> bool:  # the prompt is empty again: the command was taken
            return _prompt_empty(idle_prompt, screen)

    if not tmux.type_command(pane.id, cli.clear_command, sleep=sleep, submitted=submitted):
        agent.record("refresh_type_failed", "error", {"reason": reason, **where})
        return RefreshOutcome("unreachable", f"tmux could not type into pane {pane.id}", reason=reason, **where)
    return RefreshOutcome("sent", f"typed {cli.clear_command} into pane {pane.id}", reason=reason, **where)
