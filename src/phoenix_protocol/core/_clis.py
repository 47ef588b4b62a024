"""The agent CLIs Phoenix knows, in one place: how to recognise each one's process, and how to
clear its conversation.

==============  ==================================  ===========================================
CLI             its processes (seen with the npm    its clear command (a new conversation; the
                packages, 2026-11)                  next SessionStart has ``source: clear``)
==============  ==================================  ===========================================
``claude-code`` ``node …/cli-wrapper.cjs`` (the     ``/clear``
                launcher npm installs) runs the
                native ``claude`` binary: the
                agent, whose children run the hooks
``gemini-cli``  ``node …/gemini`` re-launches       ``/clear``
                itself as a child ``node
                --max-old-space-size=… …/gemini``:
                the child is the agent (it runs the
                hooks); the parent only waits
``codex``       ``node …/codex.js`` (or ``…/bin/    ``/clear`` ("clear the terminal and start
                codex``) runs the native ``codex``  a new chat"; ``/new`` starts one without
                binary: the agent, which runs the   clearing the screen)
                hooks and starts ``codex
                app-server`` children (helpers)
==============  ==================================  ===========================================

The rule (``classify``): a process is a CLI's when its name is one of the CLI's binaries
(``claude``, ``codex``, ``gemini``), or when it is an interpreter (``node``, ``bun``, ``deno``)
running one of the CLI's scripts (by the script's file name, or a path inside the CLI's npm
package). In a process tree (a tmux pane's), one running agent is one ``AgentProcess``
(``agents_in_tree``): an interpreter running the CLI's script with a process of the same CLI
below it is a *launcher* (the npm wrapper, Gemini's re-launching parent), and a process of the CLI
below the agent is a *helper* (``codex app-server``); neither counts as another agent. The agent
is the process the hooks run under, which ``core._process.find_agent_process`` records.

``busy_markers`` are what each CLI's screen shows while a turn runs (lower case; the watchdog's
extra guard before it types into a pane: ``services._tmux_refresh``); ``idle_prompt`` a regular
expression matching a line of the screen when its prompt is empty (``None``: an empty prompt is
not told apart from a draft).
"""

from __future__ import annotations

import os

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterable, Sequence
    from typing import Any

__all__ = [
    "CLIS",
    "INTERPRETERS",
    "AgentCli",
    "AgentProcess",
    "agents_in_tree",
    "classify",
    "cli_named",
]

INTERPRETERS = frozenset({"node", "nodejs", "bun", "deno"})
"""Process names of the runtimes a CLI's script runs under (its process is named after them)."""


_INLINE_CODE = frozenset({"-e", "--eval", "-p", "--print"})
"""Interpreter options that run code given on the command line: no script file follows."""
_INLINE_CODE_GIVEN = tuple(option + "=" for option in _INLINE_CODE)
_VALUE_OPTIONS = frozenset(
    {"-r", "--require", "--import", "--loader", "--experimental-loader", "-C", "--conditions", "--input-type",
     "--env-file", "--title", "--stack-size", "--inspect-port", "--disable-warning", "--watch-path"}
)  # fmt: skip
"""Interpreter options (node's; bun and deno share the first ones) whose value is the next argument."""


class AgentCli:
    """One agent CLI: its name (Phoenix's vocabulary: ``claude-code``, ``gemini-cli``, ``codex``),
    the names of its own binaries, the file names and npm package folders of its scripts, the
    command that clears its conversation, and what its screen shows while busy or idle."""

    __slots__ = ("binaries", "busy_markers", "clear_command", "idle_prompt", "name", "packages", "scripts", "title")

    def __init__(
        self,
        name: str,
        title: str,
        *,
        binaries: Iterable[str],
        scripts: Iterable[str],
        packages: Iterable[str],
        clear_command: str,
        busy_markers: Sequence[str] = (),
        idle_prompt: str | None = None,
    ) -> None:
        self.name = name
        self.title = title
        self.binaries = frozenset(binaries)
        self.scripts = frozenset(scripts)
        self.packages = tuple(packages)
        self.clear_command = clear_command
        self.busy_markers = tuple(busy_markers)
        self.idle_prompt = idle_prompt

    def runs_script(self, argv: Sequence[str]) -> bool:
        """Whether ``argv`` (an interpreter's command line) runs one of this CLI's scripts: its
        first argument that is neither an option nor an option's value (``node -r ./x.js``), by
        its file name or a folder of the CLI's npm package on its path; never when the code is
        given inline (``node -e``, ``-p``). Nothing else on the command line counts: a ``tail -f
        …/codex`` or ``node server.js --log /tmp/codex`` is no agent."""
        args = iter(argv[1:])
        for arg in args:
            if arg == "--":  # what follows is the script, whatever it looks like
                script = next(args, "")
            elif arg in _INLINE_CODE or arg.startswith(_INLINE_CODE_GIVEN):
                return False
            elif arg in _VALUE_OPTIONS:
                next(args, None)
                continue
            elif arg.startswith("-"):
                continue
            else:
                script = arg
            return os.path.basename(script) in self.scripts or any(pkg in script for pkg in self.packages)
        return False

    def __repr__(self) -> str:
        return f"AgentCli({self.name!r})"


CLIS: dict[str, AgentCli] = {
    cli.name: cli
    for cli in (
        AgentCli(
            "claude-code",
            "Claude Code",
            binaries={"claude"},
            scripts={"claude", "cli-wrapper.cjs"},
            packages=("/@anthropic-ai/claude-code",),
            clear_command="/clear",
            busy_markers=("esc to interrupt",),
            idle_prompt=r"^\s*❯\s*$",
        ),
        AgentCli(
            "gemini-cli",
            "Gemini CLI",
            binaries={"gemini"},
            scripts={"gemini", "gemini.js"},
            packages=("/@google/gemini-cli/",),
            clear_command="/clear",
            busy_markers=("esc to cancel",),
            idle_prompt=r"^\s*>\s+Type your message",
        ),
        AgentCli(
            "codex",
            "Codex",
            binaries={"codex"},
            scripts={"codex", "codex.js"},
            packages=("/@openai/codex/",),
            clear_command="/clear",
            busy_markers=("esc to interrupt",),
            idle_prompt=None,
        ),
    )
}
"""The CLIs Phoenix knows, by name."""


def cli_named(name: str) -> AgentCli | None:
    """The CLI called ``name`` (``claude-code``, ``gemini-cli``, ``codex``), or ``None``."""
    return CLIS.get(name)


def classify(name: str, argv: Sequence[str]) -> tuple[AgentCli | None, bool]:
    """Which CLI a process is (``name``: its process name, ``argv``: its command line), and
    whether it is an interpreter running the CLI's script (a possible launcher);
    ``(None, False)`` for any other process."""
    base = os.path.basename(name)
    for cli in CLIS.values():
        if base in cli.binaries:
            return cli, False
    if base in INTERPRETERS:
        for cli in CLIS.values():
            if cli.runs_script(argv):
                return cli, True
    return None, False


class AgentProcess:
    """One agent found in a process tree: its CLI (``None``: a process named in
    ``watchdog_process_names`` that no known CLI claims), the agent process (pid, name, start
    time), and the launchers and helpers of the same CLI around it."""

    __slots__ = ("cli", "helpers", "launchers", "name", "pid", "start_time")

    def __init__(
        self,
        cli: AgentCli | None,
        pid: int,
        name: str,
        start_time: float,
        *,
        launchers: list[int] | None = None,
        helpers: list[int] | None = None,
    ) -> None:
        self.cli = cli
        self.pid = pid
        self.name = name
        self.start_time = start_time
        self.launchers = launchers or []
        self.helpers = helpers or []

    def as_dict(self) -> dict[str, Any]:
        return {
            "cli": self.cli.name if self.cli is not None else None,
            "pid": self.pid,
            "name": self.name,
            "start_time": self.start_time,
            "launchers": self.launchers,
            "helpers": self.helpers,
        }

    def __repr__(self) -> str:
        cli = self.cli.name if self.cli is not None else None
        return f"AgentProcess({cli!r}, pid={self.pid}, name={self.name!r})"


def agents_in_tree(root_pid: int, *, extra_names: Iterable[str] = ()) -> list[AgentProcess]:
    """The agents running in the process tree of ``root_pid`` (a tmux pane's process), one per
    running agent however many processes it is made of (see the module docstring). A process
    named in ``extra_names`` that no known CLI claims counts as an agent of its own (the outermost
    of a chain of them). Processes that vanish or cannot be read meanwhile are left out."""
    import psutil

    extra = frozenset(extra_names)
    try:
        root = psutil.Process(root_pid)
        members = [root, *root.children(recursive=True)]
    except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
        return []
    found: dict[int, tuple[AgentCli | None, bool, str, float, int]] = {}
    parents: dict[int, int] = {}
    for proc in members:
        try:
            with proc.oneshot():
                name = proc.name()
                cli, interpreted = classify(name, proc.cmdline())
                known = cli is not None or os.path.basename(name) in extra
                parents[proc.pid] = proc.ppid()
                if known:
                    found[proc.pid] = (cli, interpreted, name, proc.create_time(), proc.ppid())
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue

    def same(a: int, b: int) -> bool:
        ca, cb = found[a][0], found[b][0]
        return ca is cb and (ca is not None or found[a][2] == found[b][2])

    def ancestors(pid: int) -> list[int]:
        out = []
        seen = {pid}
        parent = parents.get(pid)
        while parent is not None and parent in parents and parent not in seen:
            out.append(parent)
            seen.add(parent)
            parent = parents.get(parent)
        return out

    below: dict[int, list[int]] = {pid: [] for pid in found}
    for pid in found:
        for up in ancestors(pid):
            if up in found and same(up, pid):
                below[up].append(pid)
    launchers = {pid for pid, info in found.items() if info[1] and below[pid]}
    agents: list[AgentProcess] = []
    for pid, (cli, _interpreted, name, started, _ppid) in found.items():
        if pid in launchers:
            continue
        if any(up in found and up not in launchers and same(up, pid) for up in ancestors(pid)):
            continue  # a helper of an agent above it
        mine = [up for up in ancestors(pid) if up in launchers and same(up, pid)]
        helpers = sorted(p for p in below[pid] if p not in launchers)
        agents.append(AgentProcess(cli, pid, name, started, launchers=mine, helpers=helpers))
    agents.sort(key=lambda a: a.pid)
    return agents
