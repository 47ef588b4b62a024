"""Helpers for end-to-end tests against the real Codex CLI (``@openai/codex``, npm).

* ``ensure_codex()``: the argv prefix that runs a pinned Codex (installed with npm into a cache
  folder outside the repo on first use, under a file lock), and ``native_codex()``, the platform
  binary the npm package's node wrapper starts (hooks are its children).
* ``FakeResponses``: a local stand-in for the OpenAI Responses API (``POST /v1/responses``, SSE)
  that answers from a script of turns (an ``exec_command`` call, an ``apply_patch`` call, or plain
  text) and records every request body.
* ``CodexProject``: a temporary git project, a temporary HOME whose ``~/.codex/config.toml``
  trusts the project, ``phx install codex`` run in it as a user would, a way to run ``codex exec``
  against ``FakeResponses``, and ``hooks_list()``: the hooks Codex itself sees with their trust
  keys, hashes and status (``codex app-server``'s ``hooks/list``).

Nothing here touches the real ``~/.codex``: Codex runs with ``HOME`` set to a temporary folder,
git with ``GIT_CONFIG_GLOBAL=/dev/null``. ``phx`` is this checkout's (the test interpreter's
``bin/``, first on ``PATH``, and ``PYTHONPATH`` naming this source tree).
"""

from __future__ import annotations

import fcntl
import itertools
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from claude_code import _base_env, _git, cache_root

import phoenix_protocol

CODEX_VERSION = "0.171.0"
CODEX_PACKAGE = "@openai/codex"
WRAPPER = os.path.join("node_modules", "@openai", "codex", "bin", "codex.js")
RUN_TIMEOUT = 120.0
HOLD_TIMEOUT = 300.0
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


class CodexUnavailable(RuntimeError):
    """Node or npm is missing, or the pinned Codex could not be installed."""


def _install_dir() -> str:
    return os.path.join(cache_root(), f"codex-{CODEX_VERSION}")


def _installed_version(directory: str) -> str | None:
    try:
        with open(os.path.join(directory, "node_modules", "@openai", "codex", "package.json"), "rb") as fh:
            version = json.load(fh).get("version")
    except (OSError, ValueError):
        return None
    return version if isinstance(version, str) else None


def native_codex() -> str:
    """The platform binary of the pinned Codex (what the node wrapper spawns)."""
    machine = os.uname().machine
    package, triple = _TRIPLES.get((sys.platform, machine), ("", ""))
    if not package:
        raise CodexUnavailable(f"no Codex binary for {sys.platform}/{machine}")
    return os.path.join(_install_dir(), "node_modules", "@openai", package, "vendor", triple, "bin", "codex")


def ensure_codex() -> list[str]:
    """The argv prefix that runs Codex ``CODEX_VERSION``: ``["node", ".../bin/codex.js"]``.

    Installs it with npm into ``<cache>/codex-<version>`` when it is not there yet (about 420 MB:
    the package ships the platform binary); a file lock next to that folder keeps parallel test
    runs from installing at the same time. Raises ``CodexUnavailable`` (never skips) when node or
    npm is missing or the install fails."""
    node = shutil.which("node")
    if node is None:
        raise CodexUnavailable("the Codex end-to-end tests need `node` on PATH")
    directory = _install_dir()
    wrapper = os.path.join(directory, WRAPPER)

    def ready() -> bool:
        return (
            _installed_version(directory) == CODEX_VERSION
            and os.path.isfile(wrapper)
            and os.path.isfile(native_codex())
        )

    if ready():
        return [node, wrapper]
    npm = shutil.which("npm")
    if npm is None:
        raise CodexUnavailable(f"Codex {CODEX_VERSION} is not installed in {directory} and `npm` is not on PATH")
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
                [npm, "install", "--no-audit", "--no-fund", "--save-exact", f"{CODEX_PACKAGE}@{CODEX_VERSION}"],
                cwd=directory,
                capture_output=True,
                text=True,
                timeout=1800,
                check=False,
            )
            if done.returncode != 0 or not ready():
                raise CodexUnavailable(
                    f"npm could not install {CODEX_PACKAGE}@{CODEX_VERSION} into {directory} "
                    f"(exit {done.returncode}):\n{done.stderr[-3000:]}"
                )
    return [node, wrapper]


# -- the fake Responses API ---------------------------------------------------------------------


@dataclass(frozen=True)
class Turn:
    """One scripted model answer: a shell command (``exec_command``), a patch (the freeform
    ``apply_patch`` tool), or plain ``text``; ``tokens``: the usage it reports (a large one makes
    Codex compact its context before the next request); with ``hold``, the answer waits until
    that event is set (the session stays alive, its request open)."""

    text: str | None = None
    command: str | None = None
    patch: str | None = None
    tokens: int = 20
    hold: threading.Event | None = field(default=None, compare=False)

    @classmethod
    def bash(cls, command: str, *, tokens: int = 20) -> Turn:
        return cls(command=command, tokens=tokens)

    @classmethod
    def apply_patch(cls, patch: str) -> Turn:
        return cls(patch=patch)

    @classmethod
    def say(cls, text: str, *, tokens: int = 20) -> Turn:
        return cls(text=text, tokens=tokens)

    @classmethod
    def held(cls, until: threading.Event, text: str = "Done.") -> Turn:
        return cls(text=text, hold=until)


@dataclass
class RecordedRequest:
    """One HTTP request the fake server received."""

    method: str
    path: str
    body: Any
    kind: str = "other"  # "main" (offered tools: a scripted turn), "compact" (no tools), "other"
    received: float = field(default_factory=time.monotonic)

    def inputs(self) -> list[dict[str, Any]]:
        items = self.body.get("input") if isinstance(self.body, dict) else None
        return [i for i in items if isinstance(i, dict)] if isinstance(items, list) else []

    def texts(self, role: str | None = None) -> list[str]:
        """The text of every message of the request's input (of ``role`` only, when given)."""
        out = []
        for item in self.inputs():
            if item.get("type") != "message" or (role is not None and item.get("role") != role):
                continue
            content = item.get("content")
            for part in content if isinstance(content, list) else [content]:
                if isinstance(part, dict) and isinstance(part.get("text"), str):
                    out.append(part["text"])
                elif isinstance(part, str):
                    out.append(part)
        return out

    def tool_outputs(self) -> list[str]:
        return [
            str(i.get("output"))
            for i in self.inputs()
            if i.get("type") in ("function_call_output", "custom_tool_call_output")
        ]


def _sse(event: str, data: Mapping[str, Any]) -> bytes:
    return f"event: {event}\ndata: {json.dumps(data, separators=(',', ':'))}\n\n".encode()


class FakeResponses:
    """A scripted Responses API on ``127.0.0.1`` (an ephemeral port), in a thread.

    ``POST /v1/responses`` requests that offer tools are the agent's turns: each one takes the
    next scripted ``Turn`` (past the script: ``fallback_text``). One without tools (Codex's
    compaction asks for a summary) gets ``summary``. Every request is recorded in ``requests``."""

    def __init__(self, turns: Sequence[Turn] = (), *, fallback_text: str = "Done.", summary: str = "Summary.") -> None:
        self._turns = list(turns)
        self.fallback_text = fallback_text
        self.summary = summary
        self.requests: list[RecordedRequest] = []
        self._lock = threading.Lock()
        self._ids = itertools.count(1)
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def _handle(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b""
                if self.headers.get("Content-Encoding", "").lower() == "zstd":  # pragma: no cover - not seen
                    raise RuntimeError("zstd request bodies are not supported by FakeResponses")
                try:
                    body = json.loads(raw) if raw else None
                except ValueError:
                    body = None
                request = RecordedRequest(self.command, self.path, body)
                status, content_type, payload = fake._respond(request)
                self.send_response(status)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)
                self.wfile.flush()

            do_GET = do_POST = _handle

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, name="fake-responses", daemon=True)

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}/v1"

    def __enter__(self) -> FakeResponses:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)

    def main_requests(self) -> list[RecordedRequest]:
        return [r for r in self.requests if r.kind == "main"]

    def _respond(self, request: RecordedRequest) -> tuple[int, str, bytes]:
        body = request.body if isinstance(request.body, dict) else {}
        if request.method != "POST" or not request.path.rstrip("/").endswith("/responses"):
            with self._lock:
                self.requests.append(request)
            return 404, "application/json", b'{"error": "not found"}'
        with self._lock:
            if body.get("tools"):
                request.kind = "main"
                turn = self._turns.pop(0) if self._turns else Turn.say(self.fallback_text)
            else:
                request.kind = "compact"
                turn = Turn.say(self.summary)
            self.requests.append(request)
        if turn.hold is not None:
            turn.hold.wait(HOLD_TIMEOUT)
        return 200, "text/event-stream", self._stream(turn)

    def _stream(self, turn: Turn) -> bytes:
        rid = f"resp_{next(self._ids)}"
        item: dict[str, Any]
        if turn.command is not None:
            arguments = json.dumps({"cmd": turn.command})
            item = {"type": "function_call", "id": f"fc_{rid}", "call_id": f"call_{rid}", "name": "exec_command"}
            item["arguments"] = arguments
        elif turn.patch is not None:
            item = {"type": "custom_tool_call", "id": f"ctc_{rid}", "call_id": f"call_{rid}", "name": "apply_patch"}
            item.update(input=turn.patch, status="completed")
        else:
            content = [{"type": "output_text", "text": turn.text or ""}]
            item = {"type": "message", "role": "assistant", "id": f"msg_{rid}", "content": content}
        usage = {"input_tokens": turn.tokens, "output_tokens": 5, "total_tokens": turn.tokens + 5}
        return b"".join(
            [
                _sse("response.created", {"type": "response.created", "response": {"id": rid}}),
                _sse("response.output_item.done", {"type": "response.output_item.done", "item": item}),
                _sse("response.completed", {"type": "response.completed", "response": {"id": rid, "usage": usage}}),
            ]
        )


# -- a project with Phoenix's Codex hooks -------------------------------------------------------


@dataclass
class CodexRun:
    """What one ``codex exec`` did."""

    returncode: int
    stdout: str
    stderr: str
    seconds: float

    def describe(self) -> str:
        return f"codex exited {self.returncode} after {self.seconds:.1f}s\n--- stdout\n{self.stdout}\n--- stderr\n{self.stderr}"

    @property
    def session_id(self) -> str | None:
        for line in self.stderr.splitlines():
            if line.startswith("session id: "):
                return line.split(": ", 1)[1].strip()
        return None


class CodexProject:
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
        os.makedirs(self.dir)
        with open(os.path.join(self.dir, "README.md"), "w", encoding="utf-8") as fh:
            fh.write("# e2e project\n")
        _git(self.dir, "init", "-q")
        _git(self.dir, "add", "README.md")
        _git(self.dir, "commit", "-q", "-m", "init")
        if trust_project:
            with open(self.config_path, "w", encoding="utf-8") as fh:
                fh.write(
                    f'# the tester\'s own settings\n[projects."{os.path.realpath(self.dir)}"]\ntrust_level = "trusted"\n'
                )

    @classmethod
    @contextmanager
    def create(cls, codex: Sequence[str] | None = None, **kwargs: Any) -> Iterator[CodexProject]:
        root = tempfile.mkdtemp(prefix="phx-codex-")
        try:
            yield cls(root, codex, **kwargs)
        finally:
            shutil.rmtree(root, ignore_errors=True)

    # -- paths

    @property
    def config_path(self) -> str:
        return os.path.join(self.home, ".codex", "config.toml")

    def hooks_path(self, scope: str = "project") -> str:
        return os.path.join(self.dir if scope == "project" else self.home, ".codex", "hooks.json")

    @property
    def phoenix_home(self) -> str:
        return os.path.join(self.dir, ".phoenix")

    def agent_dir(self, agent: str = "default") -> str:
        return os.path.join(self.phoenix_home, "agents", agent)

    def state(self, agent: str = "default") -> dict[str, Any]:
        with open(os.path.join(self.agent_dir(agent), "state.json"), encoding="utf-8") as fh:
            data = json.load(fh)
        assert isinstance(data, dict)
        return data

    def ops(self, agent: str = "default") -> list[dict[str, Any]]:
        path = os.path.join(self.agent_dir(agent), "ops.jsonl")
        if not os.path.exists(path):
            return []
        with open(path, encoding="utf-8") as fh:
            return [json.loads(line) for line in fh if line.strip()]

    # -- environment

    def env(self, extra: Mapping[str, str] | None = None) -> dict[str, str]:
        env = _base_env()
        env = {k: v for k, v in env.items() if not k.startswith(("CODEX_", "OPENAI_"))}
        env.update(
            {
                "HOME": self.home,
                "USER": env.get("USER", "root"),
                "PATH": os.pathsep.join([BIN, env.get("PATH", "")]),
                "PYTHONPATH": SRC,  # `phx` on PATH runs this checkout
                "XDG_CONFIG_HOME": os.path.join(self.home, ".config"),
                "XDG_CACHE_HOME": os.path.join(self.home, ".cache"),
                "XDG_DATA_HOME": os.path.join(self.home, ".local", "share"),
                "XDG_STATE_HOME": os.path.join(self.home, ".local", "state"),
                "GIT_CONFIG_GLOBAL": os.devnull,
                "GIT_CONFIG_NOSYSTEM": "1",
                "FAKE_OPENAI_KEY": "sk-fake-e2e-key",
                "NO_COLOR": "1",
            }
        )
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
        return subprocess.Popen(
            self.argv(args, api, bypass=bypass, model=model),
            cwd=self.dir,
            env=self.env(env),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )

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
        try:
            out, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            out, err = proc.communicate()
            raise AssertionError(f"codex did not finish within {timeout:.0f}s\n{out}\n{err}") from None
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
