"""What a benchmark's report says about the run: the commit measured, a package's version, the CPU
(shared by ``checkpoints_vs_langgraph.py`` and ``langgraph_saver.py``; a script imports it from its
own folder, which Python puts first on ``sys.path``)."""

from __future__ import annotations

import contextlib
import os
import platform
import subprocess
from importlib import metadata

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def version(dist: str) -> str:
    """The installed version of ``dist``, or ``not installed``."""
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return "not installed"


def cpu() -> str:
    """The CPU's model name (``/proc/cpuinfo``), else what ``platform`` knows."""
    with contextlib.suppress(OSError), open("/proc/cpuinfo") as fh:
        for line in fh:
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or "unknown CPU"


def revision() -> str:
    """The commit measured, and whether the source in src/ differed from it."""
    try:
        head = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True, check=True
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--", "src"], cwd=REPO, capture_output=True, text=True, check=True
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown revision"
    return f"commit {head}" + (" with uncommitted changes in src/" if dirty else "")
