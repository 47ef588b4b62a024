"""A tmux server of a test's own (``tmux -S <socket>``, no configuration file) to run a real agent
CLI's interactive TUI in, as a user would: start a session with a command, type into the pane,
read its screen. ``kill()`` ends the server and everything running in its panes."""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence

import psutil

WAIT = 90.0


class TmuxServer:
    def __init__(self, socket: str) -> None:
        self.socket = socket

    def tmux(self, *args: str, env: Mapping[str, str] | None = None) -> str:
        done = subprocess.run(
            ["tmux", "-S", self.socket, "-f", os.devnull, *args],
            capture_output=True,
            text=True,
            check=True,
            env=dict(env) if env is not None else None,
            timeout=30,
        )
        return done.stdout

    def start(self, name: str, argv: Sequence[str], *, cwd: str, env: Mapping[str, str]) -> tuple[str, int]:
        """A new session running ``argv`` in ``cwd`` with exactly ``env`` (the server is started
        with it: its panes inherit it); returns the pane's id and pid."""
        import shlex

        env = {k: v for k, v in env.items() if k not in ("TMUX", "TMUX_PANE")}
        command = " ".join(shlex.quote(a) for a in argv)
        # remain-on-exit: a pane whose program dies keeps its last screen, so a failing test can
        # show what the CLI printed before it went (``screen`` says it died, and how).
        out = self.tmux(
            "start-server", ";", "set-option", "-g", "remain-on-exit", "on", ";",
            "new-session", "-d", "-P", "-F", "#{pane_id} #{pane_pid}", "-s", name, "-x", "160", "-y", "45",
            "-c", cwd, command, env=env,
        )  # fmt: skip
        pane_id, pane_pid = out.split()
        return pane_id, int(pane_pid)

    def screen(self, pane: str) -> str:
        """The pane's screen; an AssertionError with its last screen if its program has died."""
        text = self.tmux("capture-pane", "-p", "-t", pane)
        dead, status = self.tmux("display-message", "-p", "-t", pane, "#{pane_dead} #{pane_dead_status}").split(" ", 1)
        if dead == "1":
            raise AssertionError(
                f"the program in pane {pane} died (exit status {status.strip()!r}); its screen:\n{text}"
            )
        return text

    def type(self, pane: str, text: str) -> None:
        """Type ``text``, then Enter a moment later (a TUI may take text and Enter arriving
        together for a paste)."""
        self.tmux("send-keys", "-t", pane, "-l", text)
        time.sleep(0.3)
        self.tmux("send-keys", "-t", pane, "Enter")

    def wait_for(self, done: Callable[[], bool], what: str, pane: str, timeout: float = WAIT) -> None:
        deadline = time.monotonic() + timeout
        while not done():
            if time.monotonic() > deadline:
                raise AssertionError(f"not {what} within {timeout:.0f}s; the pane shows:\n{self.screen(pane)}")
            time.sleep(0.2)

    def kill(self) -> None:
        """End the server and what runs in it (and whatever those started and left behind)."""
        try:
            listed = self.tmux("list-panes", "-a", "-F", "#{pane_pid}")
            pids = [int(p) for p in listed.split()]
        except (subprocess.CalledProcessError, ValueError, subprocess.TimeoutExpired):
            pids = []
        procs = []
        for pid in pids:
            try:
                root = psutil.Process(pid)
                procs += [root, *root.children(recursive=True)]
            except psutil.NoSuchProcess:
                continue
        subprocess.run(["tmux", "-S", self.socket, "kill-server"], capture_output=True, check=False)
        for proc in procs:
            try:
                proc.kill()
            except psutil.NoSuchProcess:
                continue
        psutil.wait_procs(procs, timeout=10)
