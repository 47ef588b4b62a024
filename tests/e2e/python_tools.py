"""The Python installers a user installs Phoenix with, pipx and uv, pinned and installed from the
package index on first use into the test cache (``<cache>/python-tools-pipx<version>-uv<version>``,
a virtualenv beside the agent CLIs of ``npm_clis``, a file lock beside it so that parallel runs
install once), and the caches their installs share between runs (pip's and uv's, in the same
folder: a test's HOME is temporary, its own cache would start empty every time)."""

from __future__ import annotations

import fcntl
import os
import subprocess
import sys

from npm_clis import cache_root

PIPX_VERSION = "1.18.4"
UV_VERSION = "0.13.9"
INSTALL_TIMEOUT = 600.0


class PythonToolsUnavailable(RuntimeError):
    """pipx or uv could not be installed from the package index (offline, no index)."""


def tools_dir() -> str:
    return os.path.join(cache_root(), f"python-tools-pipx{PIPX_VERSION}-uv{UV_VERSION}")


def pip_cache() -> str:
    return os.path.join(cache_root(), "pip-cache")


def uv_cache() -> str:
    return os.path.join(cache_root(), "uv-cache")


def ensure_python_tools() -> str:
    """The ``bin`` folder of the cached virtualenv holding ``pipx`` and ``uv`` (installed with
    ``pip`` from the configured index when missing). Raises ``PythonToolsUnavailable``."""
    directory = tools_dir()
    bindir = os.path.join(directory, "bin")

    def ready() -> bool:
        return all(os.access(os.path.join(bindir, name), os.X_OK) for name in ("pipx", "uv", "python"))

    if ready():
        return bindir
    os.makedirs(cache_root(), exist_ok=True)
    with open(directory + ".lock", "a+b") as lock:
        fcntl.flock(lock.fileno(), fcntl.LOCK_EX)  # another run may be installing: wait for it
        if ready():
            return bindir
        env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
        env["PIP_CACHE_DIR"] = pip_cache()
        steps = [
            [sys.executable, "-m", "venv", "--clear", directory],
            [
                os.path.join(bindir, "python"),
                "-m",
                "pip",
                "install",
                "--quiet",
                f"pipx=={PIPX_VERSION}",
                f"uv=={UV_VERSION}",
            ],
        ]
        for argv in steps:
            done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=INSTALL_TIMEOUT, check=False)
            if done.returncode != 0:
                raise PythonToolsUnavailable(
                    f"pipx {PIPX_VERSION} and uv {UV_VERSION} could not be installed from the package index "
                    f"into {directory} (exit {done.returncode}): {done.stderr.strip()[-500:]}"
                )
    if not ready():
        raise PythonToolsUnavailable(f"pip left no pipx or uv in {bindir}")
    return bindir
