"""Helpers for end-to-end tests against the real Gemini CLI.

* ``ensure_gemini_cli()``: the argv prefix that runs a pinned Gemini CLI (``npm_clis``: installed
  with npm into a cache folder outside the repo on first use, under a file lock).
* ``FakeGemini``, ``Turn``: the scripted Gemini API of ``fake_models`` (``streamGenerateContent``,
  SSE); ``kill_group``, ``wait_for_requests``: from ``sandbox``.
* ``GeminiProject``: a temporary git project with a temporary HOME whose ``.gemini/settings.json``
  selects API-key auth (what an offline run needs), Phoenix's hooks installed by
  ``phx install gemini-cli`` (or not), and a way to run ``gemini -p`` in it.

Facts this relies on (Gemini CLI 0.61.0, seen on these machines): with ``GOOGLE_GEMINI_BASE_URL``
pointing here, ``GEMINI_API_KEY`` set and ``security.auth.selectedType = "gemini-api-key"`` it
sends ``POST /v1beta/models/<model>:streamGenerateContent?alt=sse``; a pinned model (``-m``) skips
the model router's classifier calls; ``GEMINI_CLI_TRUST_WORKSPACE=true`` trusts the temporary
project (without it a headless run exits 55); ``--yolo`` lets the scripted tool calls run. Hooks
run as ``bash -c <command>`` with the project as their cwd.

Nothing here touches the real ``~/.gemini``: Gemini runs with ``HOME`` set to a temporary folder.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

from fake_models import FakeGemini, Turn
from fake_models import GeminiRequest as RecordedRequest
from npm_clis import GEMINI_CLI, ensure_npm_cli
from sandbox import (
    CliRun,
    PhoenixFiles,
    finish,
    home_env,
    init_project,
    kill_group,
    start_cli,
    temp_root,
    wait_for_requests,
)

__all__ = ["FakeGemini", "RecordedRequest", "Turn", "kill_group", "wait_for_requests"]

MODEL = "gemini-2.5-flash"
RUN_TIMEOUT = 120.0
AUTH_SETTINGS: dict[str, Any] = {"security": {"auth": {"selectedType": "gemini-api-key"}}}
"""What an offline run needs in the user settings: without it ``GOOGLE_GEMINI_BASE_URL`` alone
resolves to a "gateway" auth and the run exits 41."""


# -- installing the pinned CLI ---------------------------------------------------------------


def ensure_gemini_cli() -> list[str]:
    """The argv prefix that runs the pinned Gemini CLI (``npm_clis.GEMINI_CLI``): ``["node", ".../bundle/gemini.js"]``.

    Installed on first use (about 100 MB) by ``npm_clis.ensure_npm_cli`` into
    ``<cache>/gemini-cli-<version>``. Raises (never skips) when node or npm is missing or the
    install fails.
    """
    return ensure_npm_cli(GEMINI_CLI)


# -- a project -------------------------------------------------------------------------------


class GeminiRun(CliRun):
    """What one ``gemini`` invocation did."""

    name = "gemini"

    @property
    def session_id(self) -> str:
        """The session id ``--output-format json`` printed."""
        return str(json.loads(self.stdout)["session_id"])


class GeminiProject(PhoenixFiles):
    """A temporary git project and a temporary HOME for ``gemini``: the user settings select
    API-key auth; nothing of Phoenix is installed until a test says so.

    The Phoenix home is the default one, ``<project>/.phoenix`` (found from the hook payload's
    ``cwd``): no ``PHOENIX_*`` variable reaches Gemini or its hooks unless ``env`` passes one."""

    def __init__(self, root: str, gemini: Sequence[str] | None = None) -> None:
        self.root = root
        self.gemini = list(gemini) if gemini is not None else ensure_gemini_cli()
        self.dir = os.path.join(root, "project")
        self.home = os.path.join(root, "home")
        os.makedirs(os.path.join(self.home, ".gemini"))
        self.write_user_settings(AUTH_SETTINGS)
        init_project(self.dir)

    @classmethod
    @contextmanager
    def create(cls, gemini: Sequence[str] | None = None, *, prefix: str = "phx-gemini-") -> Iterator[GeminiProject]:
        """A project in a new temporary folder, removed afterwards."""
        with temp_root(prefix) as root:
            yield cls(root, gemini)

    # -- paths and files

    @property
    def settings_path(self) -> str:
        return os.path.join(self.dir, ".gemini", "settings.json")

    @property
    def user_settings_path(self) -> str:
        return os.path.join(self.home, ".gemini", "settings.json")

    def write_user_settings(self, settings: Mapping[str, Any]) -> None:
        with open(os.path.join(self.home, ".gemini", "settings.json"), "w", encoding="utf-8") as fh:
            json.dump(settings, fh, indent=2)

    def user_settings(self) -> dict[str, Any]:
        with open(self.user_settings_path, encoding="utf-8") as fh:
            data = json.load(fh)
        assert isinstance(data, dict)
        return data

    def add_user_hook(self, event: str, command: str, *, name: str, matcher: str | None = None) -> None:
        """Add a hook to the user settings (test probes stay out of Phoenix's entries)."""
        settings = self.user_settings()
        group: dict[str, Any] = {"hooks": [{"type": "command", "name": name, "command": command, "timeout": 10000}]}
        if matcher is not None:
            group["matcher"] = matcher
        settings.setdefault("hooks", {}).setdefault(event, []).append(group)
        self.write_user_settings(settings)

    # -- running gemini

    def env(self, api: FakeGemini | None = None, extra: Mapping[str, str] | None = None) -> dict[str, str]:
        env = home_env(self.home, GEMINI_CLI_TRUST_WORKSPACE="true")
        if api is not None:
            env["GOOGLE_GEMINI_BASE_URL"] = api.url
            env["GEMINI_API_KEY"] = "fake-e2e-key"
        if extra:
            env.update(extra)
        return env

    def argv(self, prompt: str, *more: str) -> list[str]:
        return [*self.gemini, "-m", MODEL, "-p", prompt, "--yolo", "--output-format", "json", *more]

    def start(
        self, prompt: str, *, api: FakeGemini | None = None, env: Mapping[str, str] | None = None
    ) -> subprocess.Popen[str]:
        """Start ``gemini -p <prompt>`` in the project and return at once. It runs in a process
        group of its own, so that ``kill_group`` kills Gemini (its launcher and the relaunched
        child) and everything it started, as a crash would."""
        return start_cli(self.argv(prompt), cwd=self.dir, env=self.env(api, env))

    def run(
        self,
        prompt: str,
        *,
        api: FakeGemini | None = None,
        env: Mapping[str, str] | None = None,
        timeout: float = RUN_TIMEOUT,
    ) -> GeminiRun:
        """Run ``gemini -p <prompt>`` in the project to its end."""
        started = time.monotonic()
        proc = self.start(prompt, api=api, env=env)
        out, err = finish(proc, timeout, "gemini")
        return GeminiRun(proc.returncode, out, err, time.monotonic() - started)

    def gemini_command(self, *args: str, env: Mapping[str, str] | None = None) -> subprocess.CompletedProcess[str]:
        """Run another ``gemini`` command (``extensions link …``) with the project's HOME."""
        return subprocess.run(
            [*self.gemini, *args],
            cwd=self.dir,
            env=self.env(None, env),
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=RUN_TIMEOUT,
            check=False,
        )
