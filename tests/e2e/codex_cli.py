"""Helpers for end-to-end tests against the real Codex CLI (``@openai/codex``, npm).

* ``ensure_codex()``: the argv prefix that runs a pinned Codex (``npm_clis``: installed with npm
  into a cache folder outside the repo on first use, under a file lock), and ``native_codex()``, the platform
  binary the npm package's node wrapper starts (hooks are its children).
* ``FakeResponses``, ``Turn``, ``RecordedRequest``: the scripted OpenAI Responses API of
  ``fake_models`` (``POST /v1/responses``, SSE: an ``exec_command`` call, an ``apply_patch`` call,
  or plain text).
* ``CodexProject``: a temporary git project, a temporary HOME whose ``~/.codex/config.toml``
  trusts the project, ``phx install codex`` run in it as a user would, a way to run ``codex exec``
  against ``FakeResponses``, and ``hooks_list()``: the hooks Codex itself sees with their trust
  keys, hashes and status (``codex app-server``'s ``hooks/list``).

Nothing here touches the real ``~/.codex``: Codex runs with ``HOME`` set to a temporary folder,
git with ``GIT_CONFIG_GLOBAL=/dev/null``. ``phx`` is this checkout's (the test interpreter's
``bin/``, first on ``PATH``, and ``PYTHONPATH`` naming this source tree).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

from fake_models import FakeResponses, Turn
from fake_models import ResponsesRequest as RecordedRequest
from npm_clis import CODEX, ensure_npm_cli
from sandbox import CliRun, PhoenixFiles, finish, home_env, init_project, start_cli, temp_root

import phoenix_protocol

__all__ = ["FakeResponses", "RecordedRequest", "Turn"]

RUN_TIMEOUT = 120.0
MODEL = "fake-model"
SRC = os.path.dirname(os.path.dirname(os.path.abspath(phoenix_protocol.__file__)))
BIN = os.path.dirname(sys.executable)
PHX = os.path.join(BIN, "phx")

_TRIPLES = {
    ("linux", "x86_64"): ("codex-linux-x64", "x86_64-unknown-linux-musl"),
    ("linux", "aarch64"): ("codex-linux-arm64", "aarch64-unknown-linux-musl"),
    ("darwin", "x86_64"): ("codex-darwin-x64", "x86_64-apple-darwin"),
    ("darwin", "arm64"): ("codex-darwin-arm64", "aarch64-apple-darwin"),
}


def native_codex() -> str:
    """The platform binary of the pinned Codex (what the node wrapper spawns)."""
    machine = os.uname().machine
    package, triple = _TRIPLES.get((sys.platform, machine), ("", ""))
    if not package:
        raise RuntimeError(f"no Codex binary for {sys.platform}/{machine}")
    return os.path.join(CODEX.directory, "node_modules", "@openai", package, "vendor", triple, "bin", "codex")


def ensure_codex() -> list[str]:
    """The argv prefix that runs the pinned Codex (``npm_clis.CODEX``): ``["node", ".../bin/codex.js"]``.

    Installed on first use (about 420 MB: the package ships the platform binary) by
    ``npm_clis.ensure_npm_cli`` into ``<cache>/codex-<version>``; ready only with that binary
    there. Raises (never skips) when node or npm is missing or the install fails."""
    return ensure_npm_cli(CODEX, needs=(native_codex(),))


# -- a project with Phoenix's Codex hooks -------------------------------------------------------


class CodexRun(CliRun):
    """What one ``codex exec`` did."""

    name = "codex"

    @property
    def session_id(self) -> str | None:
        for line in self.stderr.splitlines():
            if line.startswith("session id: "):
                return line.split(": ", 1)[1].strip()
        return None


class CodexProject(PhoenixFiles):
    """A temporary git project and HOME for Codex. ``~/.codex/config.toml`` trusts the project
    (as a user who said yes to Codex's folder prompt), nothing else; ``install`` runs ``phx
    install codex`` (this checkout's) with that HOME. ``run`` runs ``codex exec`` against a
    ``FakeResponses`` given on the command line (``-c``), with ``--dangerously-bypass-hook-trust``
    unless ``bypass=False``."""

    def __init__(self, root: str, codex: Sequence[str] | None = None, *, trust_project: bool = True) -> None:
        self.root = root
        self.codex = list(codex) if codex is not None else ensure_codex()
        self.dir = os.path.join(root, "project")
        self.home = os.path.join(root, "home")
        os.makedirs(os.path.join(self.home, ".codex"))
        init_project(self.dir)
        if trust_project:
            with open(self.config_path, "w", encoding="utf-8") as fh:
                fh.write(
                    f'# the tester\'s own settings\n[projects."{os.path.realpath(self.dir)}"]\ntrust_level = "trusted"\n'
                )

    @classmethod
    @contextmanager
    def create(cls, codex: Sequence[str] | None = None, **kwargs: Any) -> Iterator[CodexProject]:
        with temp_root("phx-codex-") as root:
            yield cls(root, codex, **kwargs)

    # -- paths

    @property
    def config_path(self) -> str:
        return os.path.join(self.home, ".codex", "config.toml")

    def hooks_path(self, scope: str = "project") -> str:
        return os.path.join(self.dir if scope == "project" else self.home, ".codex", "hooks.json")

    # -- environment

    def env(self, extra: Mapping[str, str] | None = None) -> dict[str, str]:
        env = home_env(self.home, PYTHONPATH=SRC, FAKE_OPENAI_KEY="sk-fake-e2e-key")  # `phx` on PATH: this checkout
        env["PATH"] = os.pathsep.join([BIN, env.get("PATH", "")])
        if extra:
            env.update(extra)
        return env

    def phx(
        self, *args: str, check: bool = True, env: Mapping[str, str] | None = None
    ) -> subprocess.CompletedProcess[str]:
        """Run this checkout's ``phx`` in the project, as the user (the temporary HOME)."""
        done = subprocess.run(
            [PHX, *args], cwd=self.dir, env=self.env(env), capture_output=True, text=True, timeout=120, check=False
        )
        if check:
            assert done.returncode == 0, f"phx {' '.join(args)} exited {done.returncode}\n{done.stdout}\n{done.stderr}"
        return done

    def install(self, scope: str = "project", *extra: str) -> dict[str, Any]:
        """``phx install codex --scope <scope> --json``; returns what it printed."""
        done = self.phx("install", "codex", "--scope", scope, "--json", *extra)
        result = json.loads(done.stdout)
        assert isinstance(result, dict)
        return result

    # -- running codex

    def argv(
        self, args: Sequence[str], api: FakeResponses | None, *, bypass: bool = True, model: str = MODEL
    ) -> list[str]:
        flags = ["exec", "--skip-git-repo-check"]
        if bypass:
            flags.append("--dangerously-bypass-hook-trust")
        if api is not None:
            flags += [
                "-c",
                f'model="{model}"',
                "-c",
                'model_provider="fake"',
                "-c",
                'model_providers.fake.name="Fake local"',
                "-c",
                f'model_providers.fake.base_url="{api.url}"',
                "-c",
                'model_providers.fake.env_key="FAKE_OPENAI_KEY"',
                "-c",
                'model_providers.fake.wire_api="responses"',
            ]
        return [*self.codex, *flags, *args]

    def start(
        self,
        args: Sequence[str],
        *,
        api: FakeResponses | None = None,
        env: Mapping[str, str] | None = None,
        bypass: bool = True,
        model: str = MODEL,
    ) -> subprocess.Popen[str]:
        """Start ``codex exec <args>`` and return at once; in a process group of its own, so that
        ``os.killpg(proc.pid, SIGKILL)`` kills the node wrapper, the native binary and its tools."""
        return start_cli(self.argv(args, api, bypass=bypass, model=model), cwd=self.dir, env=self.env(env))

    def run(
        self,
        args: Sequence[str],
        *,
        api: FakeResponses | None = None,
        env: Mapping[str, str] | None = None,
        bypass: bool = True,
        model: str = MODEL,
        timeout: float = RUN_TIMEOUT,
    ) -> CodexRun:
        started = time.monotonic()
        proc = self.start(args, api=api, env=env, bypass=bypass, model=model)
        out, err = finish(proc, timeout, "codex")
        return CodexRun(proc.returncode, out, err, time.monotonic() - started)

    def hooks_list(self) -> list[dict[str, Any]]:
        """The hooks Codex sees for this project (``codex app-server``, ``hooks/list``): each with
        its ``key``, ``currentHash``, ``trustStatus``, ``eventName``, ``command``."""
        requests = [
            {
                "jsonrpc": "2.0",
                "id": 1,
                "method": "initialize",
                "params": {"clientInfo": {"name": "phx-e2e", "version": "1"}},
            },
            {"jsonrpc": "2.0", "method": "initialized"},
            {"jsonrpc": "2.0", "id": 2, "method": "hooks/list", "params": {}},
        ]
        proc = subprocess.Popen(
            [*self.codex, "app-server"],
            cwd=self.dir,
            env=self.env(),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            start_new_session=True,
        )
        assert proc.stdin is not None and proc.stdout is not None
        try:
            for request in requests:
                proc.stdin.write(json.dumps(request) + "\n")
            proc.stdin.flush()
            deadline = time.monotonic() + 60
            for line in proc.stdout:
                message = json.loads(line)
                if message.get("id") == 2:
                    assert "result" in message, message
                    return [hook for entry in message["result"]["data"] for hook in entry["hooks"]]
                assert time.monotonic() < deadline, "no answer to hooks/list"
            raise AssertionError("codex app-server closed without answering hooks/list")
        finally:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=30)
