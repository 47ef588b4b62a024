"""Process identity: which process is the agent, and is it still the same process?

A PID alone is not an identity: after a crash the kernel may give the same PID to an unrelated
process. An identity is ``(host, pid, start_time)``: a process is "the agent" only if a process
with that PID exists on this host *and* started at that time (within a tolerance, because the
kernel reports start times relative to a boot time it rounds to whole seconds). A PID recorded
on another host is never judged here (``liveness`` returns ``None``).

A hook is a short-lived process started by a shell started by the agent. ``find_agent_process``
walks up from the hook's parent, skipping shells and wrappers, to the first process that is
neither: the agent (for Claude Code, the ``claude`` node process). ``PHOENIX_AGENT_PID`` pins it.
"""

from __future__ import annotations

import os

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping
    from typing import Any

__all__ = [
    "WRAPPERS",
    "ProcessIdentity",
    "ProcessTable",
    "find_agent_process",
    "hostname",
    "identity_of",
    "liveness",
    "observe",
    "process_state",
]

STOPPED_STATES = frozenset({"stopped", "tracing-stop"})
"""psutil's names of a stopped process (``T``: SIGSTOP, SIGTSTP from Ctrl-Z; ``t``: a tracer's stop)."""

WRAPPERS = frozenset(
    {
        "sh", "bash", "dash", "zsh", "fish", "ksh", "mksh", "tcsh", "csh", "busybox",
        "env", "timeout", "nice", "nohup", "time", "xargs", "stdbuf", "flock", "setsid",
        "sudo", "doas", "su", "runuser", "tini", "dumb-init", "script",
        "uv", "uvx", "pipx", "phx", "state-update",
    }
)  # fmt: skip
"""Process names skipped when walking up from a hook to the agent."""


def hostname() -> str:
    """This machine's name as the kernel reports it."""
    return os.uname().nodename


class ProcessIdentity:
    """A process as Phoenix records it: host, pid and start time (seconds since the epoch)."""

    __slots__ = ("host", "name", "pid", "start_time")

    def __init__(self, pid: int, start_time: float, host: str, name: str = "") -> None:
        self.pid = pid
        self.start_time = start_time
        self.host = host
        self.name = name

    def as_dict(self) -> dict[str, Any]:
        return {"pid": self.pid, "start_time": self.start_time, "host": self.host, "name": self.name}

    def __repr__(self) -> str:
        return f"ProcessIdentity(pid={self.pid}, start_time={self.start_time}, host={self.host!r}, name={self.name!r})"


def identity_of(pid: int) -> ProcessIdentity | None:
    """The identity of a running process, or ``None`` if there is none with that PID."""
    import psutil

    try:
        proc = psutil.Process(pid)
        with proc.oneshot():
            return ProcessIdentity(pid, proc.create_time(), hostname(), proc.name())
    except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
        return None


def find_agent_process(start_pid: int | None = None, env: Mapping[str, str] | None = None) -> ProcessIdentity | None:
    """The agent process above ``start_pid`` (default: this process's parent).

    ``$PHOENIX_AGENT_PID`` pins it. Otherwise the ancestors are walked upwards: the one whose
    pid is ``$CLAUDE_PID`` (Claude Code tells its hooks its own pid) wins; failing that, the
    nearest ancestor that is not a shell or wrapper (``WRAPPERS``).
    """
    import psutil

    environ = os.environ if env is None else env
    pinned = environ.get("PHOENIX_AGENT_PID")
    if pinned and pinned.isdigit():
        return identity_of(int(pinned))
    claude_pid = environ.get("CLAUDE_PID", "")
    wanted = int(claude_pid) if claude_pid.isdigit() else None
    first: ProcessIdentity | None = None
    pid = os.getppid() if start_pid is None else start_pid
    for _ in range(64):
        if pid <= 1:
            break
        try:
            proc = psutil.Process(pid)
            with proc.oneshot():
                name = proc.name()
                if pid == wanted or (first is None and name not in WRAPPERS and os.path.basename(name) not in WRAPPERS):
                    found = ProcessIdentity(pid, proc.create_time(), hostname(), name)
                    if pid == wanted or wanted is None:
                        return found
                    first = found
                pid = proc.ppid()
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            break
    return first


def liveness(pid: int | None, start_time: float | None, host: str | None, *, tolerance: float = 1.0) -> bool | None:
    """``True`` if that very process is running, ``False`` if it is not (gone, a zombie, or its
    PID now belongs to a process that started at another time), ``None`` if it cannot be
    judged here (no PID recorded, or recorded on another host)."""
    return observe(pid, start_time, host, tolerance=tolerance)[0]


def observe(
    pid: int | None, start_time: float | None, host: str | None, *, tolerance: float = 1.0
) -> tuple[bool | None, str | None]:
    """``liveness`` and, when that very process runs, its status as psutil names it (``running``,
    ``sleeping``, ``stopped``: ``STOPPED_STATES``), read together (one look at the process)."""
    if pid is None or host is None:
        return None, None
    if host != hostname():
        return None, None
    running, started, status = _look(pid)
    if not running:
        return False, None
    if started is None:  # pragma: no cover - exists, but not ours to inspect
        return (True, status) if start_time is None else (None, None)
    if start_time is None or abs(started - start_time) <= tolerance:
        return True, status
    return False, None


def process_state(pid: int) -> tuple[bool, float | None]:
    """Whether process ``pid`` of this host runs (a zombie does not), and when it started
    (``None``: it runs, but is not ours to inspect)."""
    running, started, _status = _look(pid)
    return running, started


def _look(pid: int) -> tuple[bool, float | None, str | None]:
    import psutil

    try:
        proc = psutil.Process(pid)
        with proc.oneshot():
            status = str(proc.status())
            if status == psutil.STATUS_ZOMBIE:
                return False, None, None
            return True, proc.create_time(), status
    except (psutil.NoSuchProcess, psutil.ZombieProcess):
        return False, None, None
    except psutil.AccessDenied:  # pragma: no cover - exists, but not ours to inspect
        return True, None, None


class ProcessTable:
    """This host's processes as a tree, read once (``children``: every process's children, from
    one walk of the process table) for the CPU time of many process trees in one pass: listing
    one tree's descendants costs a walk of every process of the machine."""

    def __init__(self) -> None:
        self._children: dict[int, list[int]] | None = None

    def children(self, pid: int) -> list[int]:
        """Every process below ``pid`` (as the table was when first asked)."""
        if self._children is None:
            import psutil

            tree: dict[int, list[int]] = {}
            for proc in psutil.process_iter(["ppid"]):
                parent = proc.info.get("ppid")
                if isinstance(parent, int):
                    tree.setdefault(parent, []).append(proc.pid)
            self._children = tree
        out: list[int] = []
        seen = {pid}
        todo = list(self._children.get(pid, []))
        while todo:
            child = todo.pop()
            if child in seen:
                continue
            seen.add(child)
            out.append(child)
            todo.extend(self._children.get(child, []))
        return out

    def tree_cpu(self, pid: int) -> float | None:
        """The CPU seconds (user and system) process ``pid`` and every process below it have used
        so far, waited-for children included; ``None`` when it is gone or not ours to inspect. A
        tree whose CPU time does not move is doing nothing: waiting on a model's answer, or hung."""
        import psutil

        try:
            times = psutil.Process(pid).cpu_times()
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            return None
        total = times.user + times.system + times.children_user + times.children_system
        for child in self.children(pid):
            try:
                below = psutil.Process(child).cpu_times()
            except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
                continue
            total += below.user + below.system
        return total
