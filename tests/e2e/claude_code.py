"""Helpers for end-to-end tests against the real Claude Code CLI.

* ``ensure_claude_code()``: the argv prefix that runs a pinned Claude Code (installed with npm
  into a cache folder outside the repo on first use, under a file lock).
* ``FakeAnthropic``: a local stand-in for the Anthropic Messages API that answers from a script
  of turns (a Bash ``tool_use`` or plain text) with the real SSE event sequence and records every
  request it gets.
* ``ClaudeProject``: a temporary git project with Phoenix's hooks installed, a temporary HOME,
  and a way to run ``claude`` in it; a clone of it (another checkout of the committed settings);
  what Claude Code's transcripts and debug log say about the hooks it ran.
* ``install_phoenix(dir)``: Phoenix installed from this repository into a new virtualenv, as the
  README says (``pip install .``), for a ``phx`` on ``PATH`` that is not the test runner's.

Nothing here touches the real ``~/.claude``, ``~/.gemini``, ``~/.codex`` or the user's git config:
Claude Code runs with ``HOME`` set to a temporary folder, git with ``GIT_CONFIG_GLOBAL=/dev/null``.
"""

from __future__ import annotations

import fcntl
import gzip
import itertools
import json
import os
import pwd
import shlex
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import zlib
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import urlsplit

from phoenix_protocol.integrations._install import InstallResult, install_claude_code

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CLAUDE_CODE_VERSION = "2.1.330"
CLAUDE_CODE_PACKAGE = "@anthropic-ai/claude-code"
CLI_WRAPPER = os.path.join("node_modules", "@anthropic-ai", "claude-code", "cli-wrapper.cjs")
RUN_TIMEOUT = 120.0
HOLD_TIMEOUT = 300.0  # the longest a held answer (``Turn.held``) waits to be released
MODEL = "claude-opus-5-5"  # what 2.1.330 asks for when no model is configured

# A test-only hook (registered in settings.local.json, never in Phoenix's settings.json) that
# records what a hook sees: its stdin payload, the CLAUDE*/PHOENIX* environment, and the chain of
# its ancestor processes (to check which process Phoenix recorded as the agent).
PROBE_SOURCE = """\
import json, os, sys
import psutil
out_dir, event = sys.argv[1], sys.argv[2]
raw = sys.stdin.read()
chain = []
proc = psutil.Process(os.getpid())
while proc is not None and len(chain) < 12:
    try:
        with proc.oneshot():
            chain.append({"pid": proc.pid, "ppid": proc.ppid(), "name": proc.name(), "exe": proc.exe(),
                          "cmdline": proc.cmdline()[:3], "create_time": proc.create_time()})
        proc = proc.parent()
    except psutil.Error:
        break
env = {k: v for k, v in os.environ.items() if k.startswith(("CLAUDE", "PHOENIX"))}
record = {"event": event, "payload": json.loads(raw) if raw.strip() else None, "env": env, "chain": chain}
with open(os.path.join(out_dir, "%s-%d.json" % (event, os.getpid())), "w") as fh:
    json.dump(record, fh)
"""

# Environment variables that must not leak from the test runner into Claude Code or its hooks:
# an outer Claude Code session, a real API key or base URL, an outer Phoenix home or agent.
_SCRUBBED_PREFIXES = ("ANTHROPIC_", "CLAUDE", "PHOENIX_", "OTEL_", "AWS_BEARER", "GIT_", "XDG_")
_SCRUBBED_NAMES = frozenset(
    {"HOME", "USERPROFILE", "PWD", "OLDPWD", "NODE_OPTIONS", "DEBUG", "MCP_TIMEOUT", "VIRTUAL_ENV", "PYTHONPATH"}
)
# Keep a few that are plumbing, not identity.
_KEPT = frozenset({"GIT_SSL_CAINFO"})


class ClaudeCodeUnavailable(RuntimeError):
    """Node or npm is missing, or the pinned Claude Code could not be installed."""


# -- installing the pinned CLI ---------------------------------------------------------------


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


def _install_dir() -> str:
    return os.path.join(cache_root(), f"claude-code-{CLAUDE_CODE_VERSION}")


def _installed_version(directory: str) -> str | None:
    try:
        with open(os.path.join(directory, "node_modules", "@anthropic-ai", "claude-code", "package.json"), "rb") as fh:
            version = json.load(fh).get("version")
    except (OSError, ValueError):
        return None
    return version if isinstance(version, str) else None


def ensure_claude_code() -> list[str]:
    """The argv prefix that runs Claude Code ``CLAUDE_CODE_VERSION``: ``["node", ".../cli-wrapper.cjs"]``.

    Installs it with npm into ``<cache>/claude-code-<version>`` when it is not there yet; a file
    lock next to that folder keeps parallel test runs from installing at the same time. npm
    blocks the package's postinstall script, so ``node_modules/.bin/claude`` is a placeholder;
    the wrapper script finds the native binary itself. Raises ``ClaudeCodeUnavailable`` (never
    skips) when node or npm is missing or the install fails.
    """
    node = shutil.which("node")
    if node is None:
        raise ClaudeCodeUnavailable("the Claude Code end-to-end tests need `node` on PATH (Node.js 20 or newer)")
    directory = _install_dir()
    wrapper = os.path.join(directory, CLI_WRAPPER)
    if _installed_version(directory) == CLAUDE_CODE_VERSION and os.path.isfile(wrapper):
        return [node, wrapper]
    npm = shutil.which("npm")
    if npm is None:
        raise ClaudeCodeUnavailable(
            f"Claude Code {CLAUDE_CODE_VERSION} is not installed in {directory} and `npm` is not on PATH to install it"
        )
    os.makedirs(cache_root(), exist_ok=True)
    with open(directory + ".lock", "a+b") as lock:
        fcntl.flock(lock.fileno(), fcntl.LOCK_EX)  # another run may be installing: wait for it
        if _installed_version(directory) != CLAUDE_CODE_VERSION or not os.path.isfile(wrapper):
            os.makedirs(directory, exist_ok=True)
            manifest = os.path.join(directory, "package.json")
            if not os.path.exists(manifest):
                with open(manifest, "w", encoding="utf-8") as fh:
                    json.dump({"private": True, "dependencies": {}}, fh)
            done = subprocess.run(
                [
                    npm,
                    "install",
                    "--no-audit",
                    "--no-fund",
                    "--save-exact",
                    f"{CLAUDE_CODE_PACKAGE}@{CLAUDE_CODE_VERSION}",
                ],
                cwd=directory,
                capture_output=True,
                text=True,
                timeout=900,
                check=False,
            )
            if done.returncode != 0 or not os.path.isfile(wrapper):
                raise ClaudeCodeUnavailable(
                    f"npm could not install {CLAUDE_CODE_PACKAGE}@{CLAUDE_CODE_VERSION} into {directory} "
                    f"(exit {done.returncode}):\n{done.stderr[-3000:]}"
                )
    return [node, wrapper]


# -- Phoenix installed elsewhere ---------------------------------------------------------------


class PhoenixInstallFailed(RuntimeError):
    """``pip install`` of this repository into a new virtualenv failed."""


def install_phoenix(directory: str) -> str:
    """Phoenix from this repository (its files as they are now) in a new virtualenv at
    ``directory``, as the README's install line does it: ``python3 -m venv``, then ``pip install
    .`` in the repository (pip's configured index brings the dependencies). Returns the venv's
    ``bin`` folder, which holds ``phx`` and ``state-update``. Raises ``PhoenixInstallFailed``
    (never skips)."""
    env = _base_env()
    bindir = os.path.join(directory, "bin")
    steps = [
        [sys.executable, "-m", "venv", directory],
        [os.path.join(bindir, "python"), "-m", "pip", "install", "--quiet", "."],
        [os.path.join(bindir, "python"), "-m", "compileall", "-q", os.path.join(directory, "lib")],
    ]
    for argv in steps:
        done = subprocess.run(argv, cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=600, check=False)
        if done.returncode != 0:
            raise PhoenixInstallFailed(f"{argv} exited {done.returncode}:\n{done.stderr[-3000:]}")
    if not os.path.isfile(os.path.join(bindir, "phx")):
        raise PhoenixInstallFailed(f"pip install . left no phx in {bindir}")
    return bindir


def path_without_phx(*first: str) -> str:
    """This process's ``PATH`` without the folders that hold a ``phx``, after ``first``."""
    kept = [d for d in os.environ.get("PATH", "").split(os.pathsep) if d and not shutil.which("phx", path=d)]
    return os.pathsep.join([*first, *kept])


# -- the fake Messages API -------------------------------------------------------------------


@dataclass(frozen=True)
class Turn:
    """One scripted model answer: a Bash tool call (``command``) or plain ``text``; with ``hold``,
    the answer waits until that event is set (a model that is still thinking: the session stays
    alive, its request open, until the test releases it or kills the session)."""

    text: str | None = None
    command: str | None = None
    hold: threading.Event | None = field(default=None, compare=False)

    @classmethod
    def bash(cls, command: str) -> Turn:
        return cls(command=command)

    @classmethod
    def say(cls, text: str) -> Turn:
        return cls(text=text)

    @classmethod
    def held(cls, until: threading.Event, text: str = "Done.") -> Turn:
        return cls(text=text, hold=until)


@dataclass
class RecordedRequest:
    """One HTTP request the fake server received."""

    method: str
    path: str
    headers: dict[str, str]
    raw: bytes
    body: Any = None
    kind: str = "other"  # "main" (scripted turn), "side" (a model call without tools), "count_tokens", "other"
    received: float = field(default_factory=time.monotonic)
    """When it arrived (``time.monotonic()``)."""

    @property
    def route(self) -> str:
        return urlsplit(self.path).path

    @property
    def text(self) -> str:
        return self.raw.decode("utf-8", "replace")

    @property
    def is_tool_follow_up(self) -> bool:
        """Whether the last message holds a tool_result (the request after a tool ran)."""
        return isinstance(self.body, dict) and _last_message_has_tool_result(self.body)


def _sse(event: str, data: Mapping[str, Any]) -> bytes:
    return f"event: {event}\ndata: {json.dumps(data, separators=(',', ':'))}\n\n".encode()


def _usage(input_tokens: int, output_tokens: int) -> dict[str, int]:
    return {
        "input_tokens": input_tokens,
        "output_tokens": output_tokens,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": 0,
    }


def _last_message_has_tool_result(body: Mapping[str, Any]) -> bool:
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        return False
    content = messages[-1].get("content") if isinstance(messages[-1], dict) else None
    return isinstance(content, list) and any(isinstance(b, dict) and b.get("type") == "tool_result" for b in content)


class FakeAnthropic:
    """A scripted Anthropic Messages API on ``127.0.0.1`` (an ephemeral port), in a thread.

    ``POST /v1/messages`` requests that offer tools are the agent's main loop: each one takes the
    next scripted ``Turn`` (when the script runs out it answers ``fallback_text``). Model calls
    without tools (titles, quota probes and other side requests) get a short text answer and do
    not use up the script. ``/v1/messages/count_tokens`` gets a token count; anything else a
    JSON ``{}``. Every request is recorded in ``requests``, in arrival order.
    """

    def __init__(self, turns: Sequence[Turn] = (), *, fallback_text: str = "Done.") -> None:
        self._turns = list(turns)
        self.fallback_text = fallback_text
        self.requests: list[RecordedRequest] = []
        self._lock = threading.Lock()
        self._ids = itertools.count(1)
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:  # the stdlib's signature
                pass

            def _read_body(self) -> bytes:
                if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
                    chunks = []
                    while True:
                        size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                        if size == 0:
                            while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                                pass
                            break
                        chunks.append(self.rfile.read(size))
                        self.rfile.readline()
                    data = b"".join(chunks)
                else:
                    data = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                encoding = self.headers.get("Content-Encoding", "").lower()
                if encoding == "gzip":
                    data = gzip.decompress(data)
                elif encoding == "deflate":
                    data = zlib.decompress(data)
                return data

            def _handle(self) -> None:
                raw = self._read_body() if self.command not in ("GET", "HEAD") else b""
                body: Any = None
                if raw:
                    try:
                        body = json.loads(raw)
                    except ValueError:
                        body = None
                request = RecordedRequest(
                    method=self.command,
                    path=self.path,
                    headers={k.lower(): v for k, v in self.headers.items()},
                    raw=raw,
                    body=body,
                )
                status, content_type, payload = fake._respond(request)
                self.send_response(status)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(payload)))
                self.send_header("request-id", f"req_fake_{next(fake._ids)}")
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(payload)
                    self.wfile.flush()

            do_GET = do_POST = do_PUT = do_DELETE = do_PATCH = do_HEAD = _handle

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, name="fake-anthropic", daemon=True)

    # -- lifecycle

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    def start(self) -> FakeAnthropic:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)

    def __enter__(self) -> FakeAnthropic:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- what was received

    def messages_requests(self) -> list[RecordedRequest]:
        """Every ``POST /v1/messages`` (main loop and side requests), in order."""
        return [r for r in self.requests if r.method == "POST" and r.route == "/v1/messages"]

    def main_requests(self) -> list[RecordedRequest]:
        """The ``/v1/messages`` requests that took (or would have taken) a scripted turn."""
        return [r for r in self.requests if r.kind == "main"]

    @property
    def turns_left(self) -> int:
        with self._lock:
            return len(self._turns)

    # -- answering

    def _respond(self, request: RecordedRequest) -> tuple[int, str, bytes]:
        route = request.route
        body = request.body if isinstance(request.body, dict) else {}
        if request.method == "POST" and route == "/v1/messages/count_tokens":
            request.kind = "count_tokens"
            self._record(request)
            return 200, "application/json", json.dumps({"input_tokens": max(1, len(request.raw) // 4)}).encode()
        if request.method == "POST" and route == "/v1/messages":
            turn: Turn
            with self._lock:
                if body.get("tools"):
                    request.kind = "main"
                    turn = self._turns.pop(0) if self._turns else Turn.say(self.fallback_text)
                else:
                    request.kind = "side"
                    turn = Turn.say(self.fallback_text)
                self.requests.append(request)
            if turn.hold is not None:
                turn.hold.wait(HOLD_TIMEOUT)  # in this request's own thread: the others are answered
            model = body["model"] if isinstance(body.get("model"), str) else MODEL
            if body.get("stream"):
                return 200, "text/event-stream", self._stream(turn, model)
            return 200, "application/json", json.dumps(self._message(turn, model)).encode()
        self._record(request)
        return 200, "application/json", b"{}"

    def _record(self, request: RecordedRequest) -> None:
        with self._lock:
            self.requests.append(request)

    @staticmethod
    def _stop_reason(turn: Turn) -> str:
        return "tool_use" if turn.command is not None else "end_turn"

    def _block(self, turn: Turn) -> dict[str, Any]:
        if turn.command is not None:
            return {
                "type": "tool_use",
                "id": f"toolu_fake{next(self._ids):08d}",
                "name": "Bash",
                "input": {"command": turn.command, "description": "Run the scripted command"},
            }
        return {"type": "text", "text": turn.text or ""}

    def _message(self, turn: Turn, model: str) -> dict[str, Any]:
        return {
            "id": f"msg_fake{next(self._ids):08d}",
            "type": "message",
            "role": "assistant",
            "model": model,
            "content": [self._block(turn)],
            "stop_reason": self._stop_reason(turn),
            "stop_sequence": None,
            "usage": _usage(12, 8),
        }

    def _stream(self, turn: Turn, model: str) -> bytes:
        block = self._block(turn)
        start: dict[str, Any]
        if block["type"] == "tool_use":
            start = {"type": "tool_use", "id": block["id"], "name": block["name"], "input": {}}
            partial = json.dumps(block["input"])
            cut = len(partial) // 2  # two deltas, as the real API sends the input in pieces
            deltas = [{"type": "input_json_delta", "partial_json": p} for p in (partial[:cut], partial[cut:])]
        else:
            start = {"type": "text", "text": ""}
            deltas = [{"type": "text_delta", "text": block["text"]}]
        events = [
            _sse(
                "message_start",
                {
                    "type": "message_start",
                    "message": {
                        "id": f"msg_fake{next(self._ids):08d}",
                        "type": "message",
                        "role": "assistant",
                        "model": model,
                        "content": [],
                        "stop_reason": None,
                        "stop_sequence": None,
                        "usage": _usage(12, 1),
                    },
                },
            ),
            _sse("content_block_start", {"type": "content_block_start", "index": 0, "content_block": start}),
            *(_sse("content_block_delta", {"type": "content_block_delta", "index": 0, "delta": d}) for d in deltas),
            _sse("content_block_stop", {"type": "content_block_stop", "index": 0}),
            _sse(
                "message_delta",
                {
                    "type": "message_delta",
                    "delta": {"stop_reason": self._stop_reason(turn), "stop_sequence": None},
                    "usage": {"output_tokens": 8},
                },
            ),
            _sse("message_stop", {"type": "message_stop"}),
        ]
        return b"".join(events)


# -- a project with Phoenix's hooks ----------------------------------------------------------


@dataclass
class ClaudeRun:
    """What one ``claude`` invocation did."""

    returncode: int
    stdout: str
    stderr: str
    pid: int
    seconds: float
    argv: list[str] = field(default_factory=list)

    def __iter__(self) -> Iterator[Any]:  # (returncode, stdout, stderr) = run
        return iter((self.returncode, self.stdout, self.stderr))

    def describe(self) -> str:
        head = f"claude exited {self.returncode} after {self.seconds:.1f}s"
        return f"{head}\n--- stdout\n{self.stdout}\n--- stderr\n{self.stderr}"


def _git(cwd: str, *args: str) -> None:
    env = {**_base_env(), "GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_NOSYSTEM": "1"}
    subprocess.run(
        [
            "git",
            "-c",
            "user.name=Phoenix E2E",
            "-c",
            "user.email=e2e@phoenix.invalid",
            "-c",
            "init.defaultBranch=main",
            *args,
        ],
        cwd=cwd,
        env=env,
        check=True,
        capture_output=True,
        timeout=60,
    )


def _base_env() -> dict[str, str]:
    return {
        k: v
        for k, v in os.environ.items()
        if k in _KEPT or (k not in _SCRUBBED_NAMES and not k.startswith(_SCRUBBED_PREFIXES))
    }


class ClaudeProject:
    """A temporary git project with Phoenix's hooks and a temporary HOME: the portable command in
    ``.claude/settings.json`` and, unless ``scopes`` says otherwise, this interpreter's fast command
    in ``.claude/settings.local.json`` (the code under test, whatever ``phx`` is on ``PATH``: the
    shared command stands aside for it). ``clone`` makes another checkout of the committed project.

    The Phoenix home is the default one, ``<project>/.phoenix`` (found from the hook payload's
    ``cwd``): no ``PHOENIX_*`` variable reaches Claude Code or its hooks unless ``env`` passes one.
    """

    def __init__(
        self,
        root: str,
        claude: Sequence[str] | None = None,
        *,
        scopes: Sequence[str] = ("project", "local"),
        name: str = "project",
        clone_of: str | None = None,
    ) -> None:
        self.root = root
        self.claude = list(claude) if claude is not None else ensure_claude_code()
        self.dir = os.path.join(root, name)
        self.home = os.path.join(root, "home" if name == "project" else f"home-{name}")
        os.makedirs(self.home)
        if clone_of is None:
            os.makedirs(self.dir)
            with open(os.path.join(self.dir, "README.md"), "w", encoding="utf-8") as fh:
                fh.write("# e2e project\n")
            _git(self.dir, "init", "-q")
            _git(self.dir, "add", "README.md")
            _git(self.dir, "commit", "-q", "-m", "init")
        else:
            _git(root, "clone", "-q", clone_of, self.dir)
        self.installs: dict[str, InstallResult] = {
            scope: install_claude_code(scope, project_dir=self.dir) for scope in scopes
        }

    @property
    def install(self) -> InstallResult:
        """What ``phx install claude-code`` (project scope) did."""
        return self.installs["project"]

    def commit_settings(self) -> None:
        """Commit ``.claude/settings.json``, as a team shares it."""
        _git(self.dir, "add", ".claude/settings.json")
        _git(self.dir, "commit", "-q", "-m", "Phoenix hooks")

    def clone(self, name: str) -> ClaudeProject:
        """Another checkout of this project (``git clone``: what is committed), its own HOME,
        nothing installed."""
        return ClaudeProject(self.root, self.claude, scopes=(), name=name, clone_of=self.dir)

    @classmethod
    @contextmanager
    def create(
        cls,
        claude: Sequence[str] | None = None,
        *,
        prefix: str = "phx-e2e-",
        scopes: Sequence[str] = ("project", "local"),
    ) -> Iterator[ClaudeProject]:
        """A project in a new temporary folder, removed afterwards. ``claude`` is the argv prefix
        from ``ensure_claude_code()`` (called here when not given)."""
        root = tempfile.mkdtemp(prefix=prefix)
        try:
            yield cls(root, claude, scopes=scopes)
        finally:
            shutil.rmtree(root, ignore_errors=True)

    # -- paths

    @property
    def settings_path(self) -> str:
        return os.path.join(self.dir, ".claude", "settings.json")

    @property
    def local_settings_path(self) -> str:
        return os.path.join(self.dir, ".claude", "settings.local.json")

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
        with open(path, encoding="utf-8") as fh:
            return [json.loads(line) for line in fh if line.strip()]

    def add_local_hook(self, event: str, command: str, *, matcher: str | None = None, timeout: int = 10) -> None:
        """Add a hook to ``.claude/settings.local.json`` (test probes stay out of Phoenix's file)."""
        path = os.path.join(self.dir, ".claude", "settings.local.json")
        try:
            with open(path, encoding="utf-8") as fh:
                settings = json.load(fh)
        except FileNotFoundError:
            settings = {}
        group: dict[str, Any] = {"hooks": [{"type": "command", "command": command, "timeout": timeout}]}
        if matcher is not None:
            group["matcher"] = matcher
        settings.setdefault("hooks", {}).setdefault(event, []).append(group)
        with open(path, "w", encoding="utf-8") as fh:
            json.dump(settings, fh, indent=2)

    def add_probe(self, events: Sequence[str]) -> str:
        """Register ``PROBE_SOURCE`` for ``events`` in ``settings.local.json``; returns its output folder."""
        out_dir = os.path.join(self.root, "probe")
        os.makedirs(out_dir, exist_ok=True)
        script = os.path.join(self.root, "probe.py")
        with open(script, "w", encoding="utf-8") as fh:
            fh.write(PROBE_SOURCE)
        for event in events:
            command = " ".join(shlex.quote(a) for a in (sys.executable, "-I", script, out_dir, event))
            self.add_local_hook(event, command, matcher="*" if "Tool" in event else None)
        return out_dir

    def probe_records(self, event: str) -> list[dict[str, Any]]:
        """What the probe saw for ``event``, one record per hook run (in no particular order)."""
        out_dir = os.path.join(self.root, "probe")
        records = []
        for name in sorted(os.listdir(out_dir)) if os.path.isdir(out_dir) else []:
            if name.startswith(event + "-") and name.endswith(".json"):
                with open(os.path.join(out_dir, name), encoding="utf-8") as fh:
                    records.append(json.load(fh))
        return records

    def transcript_session_ids(self) -> list[str]:
        """The session ids of the transcripts Claude Code wrote under the temporary HOME."""
        projects = os.path.join(self.home, ".claude", "projects")
        found = []
        for dirpath, _dirs, files in os.walk(projects):
            found += [f[: -len(".jsonl")] for f in files if f.endswith(".jsonl") and dirpath != projects]
        return sorted(found)

    def transcript_records(self) -> list[dict[str, Any]]:
        """Every record of the transcripts Claude Code wrote under the temporary HOME."""
        records = []
        for dirpath, _dirs, files in os.walk(os.path.join(self.home, ".claude", "projects")):
            for name in sorted(files):
                if name.endswith(".jsonl"):
                    with open(os.path.join(dirpath, name), encoding="utf-8") as fh:
                        records += [json.loads(line) for line in fh if line.strip()]
        return records

    def hook_errors(self) -> list[dict[str, Any]]:
        """The hook errors Claude Code recorded in its transcripts, which it shows the user
        (``hook_non_blocking_error`` attachments and any other hook attachment with a non-zero
        exit code or stderr, e.g. ``/bin/sh: 1: /…/python: not found``)."""
        found = []
        for record in self.transcript_records():
            attachment = record.get("attachment")
            if not isinstance(attachment, dict) or "hook" not in str(attachment.get("type", "")).lower():
                continue
            kind = str(attachment.get("type", ""))
            if "error" in kind or attachment.get("exitCode") not in (None, 0) or attachment.get("stderr"):
                found.append(attachment)
        return found

    def hook_runs(self) -> list[tuple[str, str, int]]:
        """The command hooks Claude Code ran, from its debug log (``--debug``): ``(hook, command,
        exit status)`` each, e.g. ``("PostToolUse:Bash", "command -v phx …", 0)``."""
        import re

        # "Hooks: PostToolUse:Bash [cmd] finished with status 0 (18ms)", "Hooks: Stop [cmd] ...",
        # "SessionEnd:other [cmd] completed with status 0" (2.1.330)
        pattern = re.compile(r"\] (?:Hooks: )?([A-Za-z]+(?::\S+)?) \[(.*)\] (?:completed|finished) with status (\d+)")
        runs = []
        for dirpath, _dirs, files in os.walk(os.path.join(self.home, ".claude", "debug")):
            for name in sorted(files):
                if name.endswith(".txt") and not os.path.islink(os.path.join(dirpath, name)):
                    with open(os.path.join(dirpath, name), encoding="utf-8", errors="replace") as fh:
                        for line in fh:
                            match = pattern.search(line)
                            if match:
                                runs.append((match.group(1), match.group(2), int(match.group(3))))
        return runs

    # -- running claude

    def env(self, api: FakeAnthropic | None = None, extra: Mapping[str, str] | None = None) -> dict[str, str]:
        env = _base_env()
        env.update(
            {
                "HOME": self.home,
                "USER": env.get("USER", "root"),
                "XDG_CONFIG_HOME": os.path.join(self.home, ".config"),
                "XDG_CACHE_HOME": os.path.join(self.home, ".cache"),
                "XDG_DATA_HOME": os.path.join(self.home, ".local", "share"),
                "XDG_STATE_HOME": os.path.join(self.home, ".local", "state"),
                "GIT_CONFIG_GLOBAL": os.devnull,
                "GIT_CONFIG_NOSYSTEM": "1",
                "DISABLE_TELEMETRY": "1",
                "DISABLE_ERROR_REPORTING": "1",
                "DISABLE_AUTOUPDATER": "1",
                "DISABLE_BUG_COMMAND": "1",
                "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
                "NO_COLOR": "1",
            }
        )
        if api is not None:
            env["ANTHROPIC_BASE_URL"] = api.url
            env["ANTHROPIC_API_KEY"] = "sk-ant-api03-fake-e2e-key-" + "x" * 40
        if extra:
            env.update(extra)
        return env

    def start(
        self, args: Sequence[str], *, api: FakeAnthropic | None = None, env: Mapping[str, str] | None = None
    ) -> subprocess.Popen[str]:
        """Start ``claude <args>`` in the project and return at once: a session that runs beside
        others. It runs in a process group of its own, so that ``os.killpg(proc.pid, SIGKILL)``
        kills Claude Code and everything it started, as a crash would."""
        return subprocess.Popen(
            [*self.claude, *args],
            cwd=self.dir,
            env=self.env(api, env),
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
        api: FakeAnthropic | None = None,
        env: Mapping[str, str] | None = None,
        timeout: float = RUN_TIMEOUT,
    ) -> ClaudeRun:
        """Run ``claude <args>`` in the project; returns (returncode, stdout, stderr) and more."""
        argv = [*self.claude, *args]
        started = time.monotonic()
        proc = self.start(args, api=api, env=env)
        try:
            out, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, 9)
            out, err = proc.communicate()
            raise AssertionError(
                f"claude did not finish within {timeout:.0f}s: {argv}\n--- stdout\n{out}\n--- stderr\n{err}"
            ) from None
        return ClaudeRun(proc.returncode, out, err, proc.pid, time.monotonic() - started, argv)
