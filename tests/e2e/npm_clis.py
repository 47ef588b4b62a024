"""The pinned agent CLIs from npm (Claude Code, Gemini CLI, Codex), installed on first use into
the test cache: a folder per version outside the repo (``<cache>/<folder>-<version>``), a file
lock beside it (``<folder>-<version>.lock``) so that parallel runs install once. The one
installer behind ``claude_code.ensure_claude_code``, ``gemini_cli.ensure_gemini_cli`` and
``codex_cli.ensure_codex``."""

from __future__ import annotations

import fcntl
import json
import os
import pwd
import shutil
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass

INSTALL_TIMEOUT = 1800.0


class NpmCliUnavailable(RuntimeError):
    """npm is not on ``PATH`` or could not install the pinned package (offline, no registry)."""


@dataclass(frozen=True)
class NpmCli:
    """A pinned npm package and the script in it that runs the CLI with ``node``."""

    title: str  # "Claude Code", for messages
    package: str  # "@anthropic-ai/claude-code"
    version: str
    folder: str  # the cache folder's name before "-<version>"
    entry: str  # the script, relative to the package's folder

    @property
    def directory(self) -> str:
        return os.path.join(cache_root(), f"{self.folder}-{self.version}")

    def package_dir(self, directory: str | None = None) -> str:
        return os.path.join(directory or self.directory, "node_modules", *self.package.split("/"))

    @property
    def entry_path(self) -> str:
        return os.path.join(self.package_dir(), self.entry)


CLAUDE_CODE = NpmCli("Claude Code", "@anthropic-ai/claude-code", "2.1.330", "claude-code", "cli-wrapper.cjs")
GEMINI_CLI = NpmCli("Gemini CLI", "@google/gemini-cli", "0.61.0", "gemini-cli", os.path.join("bundle", "gemini.js"))
CODEX = NpmCli("Codex", "@openai/codex", "0.171.0", "codex", os.path.join("bin", "codex.js"))


def cache_root() -> str:
    """``$PHOENIX_TEST_CACHE``, else ``~/.cache/phoenix-protocol`` of the real user.

    ``~`` comes from the password database, not ``$HOME``: the test suite's conftest points HOME
    at a fresh temporary folder for every test, which would mean a 360 MB install per test.
    """
    configured = os.environ.get("PHOENIX_TEST_CACHE")
    if configured:
        return os.path.abspath(os.path.expanduser(configured))
    try:
        home = pwd.getpwuid(os.getuid()).pw_dir
    except KeyError:
        home = os.path.expanduser("~")
    return os.path.join(home, ".cache", "phoenix-protocol")


def _installed_version(cli: NpmCli) -> str | None:
    try:
        with open(os.path.join(cli.package_dir(), "package.json"), "rb") as fh:
            version = json.load(fh).get("version")
    except (OSError, ValueError):
        return None
    return version if isinstance(version, str) else None


def ensure_npm_cli(cli: NpmCli, *, needs: Sequence[str] = ()) -> list[str]:
    """The argv prefix that runs the pinned CLI: ``["node", "<its entry script>"]``.

    Installs it with npm into ``cli.directory`` when it is not there yet (or when a file of
    ``needs``, e.g. a platform binary, is missing); a file lock next to that folder keeps parallel
    test runs from installing at the same time. npm blocks the packages' postinstall scripts, so
    the entry script is what runs, as a user's ``node_modules/.bin`` link would. Raises
    ``RuntimeError`` when ``node`` is missing and ``NpmCliUnavailable`` when npm is missing or the
    install fails (the caller fails, or skips with its message where npm cannot fetch).
    """
    node = shutil.which("node")
    if node is None:
        raise RuntimeError(f"the {cli.title} end-to-end tests need `node` on PATH (Node.js 20 or newer)")
    directory = cli.directory

    def ready() -> bool:
        files = (cli.entry_path, *needs)
        return _installed_version(cli) == cli.version and all(os.path.isfile(f) for f in files)

    if ready():
        return [node, cli.entry_path]
    npm = shutil.which("npm")
    if npm is None:
        raise NpmCliUnavailable(
            f"{cli.title} {cli.version} is not installed in {directory} and `npm` is not on PATH to install it"
        )
    os.makedirs(cache_root(), exist_ok=True)
    with open(directory + ".lock", "a+b") as lock:
        fcntl.flock(lock.fileno(), fcntl.LOCK_EX)  # another run may be installing: wait for it
        if not ready():
            os.makedirs(directory, exist_ok=True)
            manifest = os.path.join(directory, "package.json")
            if not os.path.exists(manifest):
                with open(manifest, "w", encoding="utf-8") as fh:
                    json.dump({"private": True, "dependencies": {}}, fh)
            done = subprocess.run(
                [npm, "install", "--no-audit", "--no-fund", "--save-exact", f"{cli.package}@{cli.version}"],
                cwd=directory,
                capture_output=True,
                text=True,
                timeout=INSTALL_TIMEOUT,
                check=False,
            )
            if done.returncode != 0 or not ready():
                raise NpmCliUnavailable(
                    f"npm could not install {cli.package}@{cli.version} into {directory} "
                    f"(exit {done.returncode}):\n{done.stderr[-3000:]}"
                )
    return [node, cli.entry_path]
