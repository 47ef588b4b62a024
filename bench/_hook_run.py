"""What the hook benchmarks (``cc_team_hooks.py``, ``team_edit_hook.py``) share: the environment a
hook runs in, and one timed run of a hook's command as a CLI runs it (a whole process, the payload
on stdin)."""

from __future__ import annotations

import os
import subprocess
import time


def hook_env(**extra: str) -> dict[str, str]:
    """This process's environment without Phoenix's and Claude Code's variables and without
    ``PYTHONPATH`` (the installed hook command finds Phoenix itself), plus ``extra``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PHOENIX_", "CLAUDE")) and k != "PYTHONPATH"}
    env.update(extra)
    return env


def time_hook(cmd: list[str], stdin: bytes, cwd: str, env: dict[str, str]) -> tuple[float, float]:
    """Wall-clock and CPU ms (user + system of the hook's process, ``wait4``: the figure a busy
    machine disturbs least) of one run; a run that fails or writes to stderr stops the benchmark."""
    start = time.perf_counter()
    proc = subprocess.Popen(
        cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=cwd, env=env
    )
    assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
    proc.stdin.write(stdin)
    proc.stdin.close()
    _pid, status, usage = os.wait4(proc.pid, 0)
    elapsed = (time.perf_counter() - start) * 1000
    stderr = proc.stderr.read()
    proc.stdout.close()
    proc.stderr.close()
    if os.waitstatus_to_exitcode(status) != 0 or stderr:
        raise SystemExit(f"{cmd[-1]} failed: {status} {stderr!r}")
    return elapsed, (usage.ru_utime + usage.ru_stime) * 1000
