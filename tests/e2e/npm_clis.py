"""The pinned Gemini CLI and Codex from npm, installed on first use into the test cache (as
``claude_code.ensure_claude_code`` does for Claude Code: a folder per version outside the repo,
a file lock beside it so that parallel runs install once)."""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import subprocess

from claude_code import cache_root

GEMINI_CLI_PACKAGE = ("@google/gemini-cli", "0.61.0", "gemini-cli", "gemini")
CODEX = ("@openai/codex", "0.171.0", "codex", "codex")


class NpmCliUnavailable(RuntimeError):
    """npm could not install the package (offline, no registry): the caller skips with this reason."""


def _installed(directory: str, package: str) -> str | None:
    try:
        with open(os.path.join(directory, "node_modules", *package.split("/"), "package.json"), "rb") as fh:
            version = json.load(fh).get("version")
    except (OSError, ValueError):
        return None
    return version if isinstance(version, str) else None


def ensure_npm_cli(spec: tuple[str, str, str, str]) -> str:
    """The path of the pinned CLI's command (``node_modules/.bin/<bin>``, a node script run as a
    user runs it), installed when it is not there yet. Raises ``NpmCliUnavailable``."""
    package, version, folder, binary = spec
    if shutil.which("node") is None:
        raise RuntimeError(f"the {package} end-to-end tests need `node` on PATH")
    directory = os.path.join(cache_root(), f"{folder}-{version}")
    command = os.path.join(directory, "node_modules", ".bin", binary)
    if _installed(directory, package) == version and os.path.exists(command):
        return command
    npm = shutil.which("npm")
    if npm is None:
        raise NpmCliUnavailable(f"{package}@{version} is not installed in {directory} and `npm` is not on PATH")
    os.makedirs(cache_root(), exist_ok=True)
    with open(directory + ".lock", "a+b") as lock:
        fcntl.flock(lock.fileno(), fcntl.LOCK_EX)
        if _installed(directory, package) != version or not os.path.exists(command):
            os.makedirs(directory, exist_ok=True)
            manifest = os.path.join(directory, "package.json")
            if not os.path.exists(manifest):
                with open(manifest, "w", encoding="utf-8") as fh:
                    json.dump({"private": True, "dependencies": {}}, fh)
            done = subprocess.run(
                [npm, "install", "--no-audit", "--no-fund", "--save-exact", f"{package}@{version}"],
                cwd=directory,
                capture_output=True,
                text=True,
                timeout=1800,
                check=False,
            )
            if done.returncode != 0 or not os.path.exists(command):
                raise NpmCliUnavailable(
                    f"npm could not install {package}@{version} into {directory} (exit {done.returncode}):\n"
                    f"{done.stderr[-2000:]}"
                )
    return command
