"""Helpers for end-to-end tests against the real Gemini CLI.

* ``ensure_gemini_cli()``: the argv prefix that runs a pinned Gemini CLI (installed with npm into
  a cache folder outside the repo on first use, under a file lock).
* ``FakeGemini``: a local stand-in for the Gemini API (``streamGenerateContent``, SSE) that answers
  from a script of turns (a tool call or plain text) and records every request body it gets.
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

import fcntl
import json
import os
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import urlsplit

from claude_code import _base_env, _git, cache_root

GEMINI_CLI_VERSION = "0.61.0"
GEMINI_CLI_PACKAGE = "@google/gemini-cli"
GEMINI_JS = os.path.join("node_modules", "@google", "gemini-cli", "bundle", "gemini.js")
MODEL = "gemini-2.5-flash"
RUN_TIMEOUT = 120.0
HOLD_TIMEOUT = 300.0
AUTH_SETTINGS: dict[str, Any] = {"security": {"auth": {"selectedType": "gemini-api-key"}}}
"""What an offline run needs in the user settings: without it ``GOOGLE_GEMINI_BASE_URL`` alone
resolves to a "gateway" auth and the run exits 41."""

_SCRUBBED_PREFIXES = ("GEMINI_", "GOOGLE_", "VERTEX", "CLOUDSDK_")


class GeminiCliUnavailable(RuntimeError):
    """Node or npm is missing, or the pinned Gemini CLI could not be installed."""


# -- installing the pinned CLI ---------------------------------------------------------------


def _install_dir() -> str:
    return os.path.join(cache_root(), f"gemini-cli-{GEMINI_CLI_VERSION}")


def _installed_version(directory: str) -> str | None:
    try:
        with open(os.path.join(directory, "node_modules", "@google", "gemini-cli", "package.json"), "rb") as fh:
            version = json.load(fh).get("version")
    except (OSError, ValueError):
        return None
    return version if isinstance(version, str) else None


def ensure_gemini_cli() -> list[str]:
    """The argv prefix that runs Gemini CLI ``GEMINI_CLI_VERSION``: ``["node", ".../bundle/gemini.js"]``.

    Installs it with npm into ``<cache>/gemini-cli-<version>`` when it is not there yet (about
    100 MB); a file lock next to that folder keeps parallel test runs from installing at the same
    time. Raises ``GeminiCliUnavailable`` (never skips) when node or npm is missing or the
    install fails.
    """
    node = shutil.which("node")
    if node is None:
        raise GeminiCliUnavailable("the Gemini CLI end-to-end tests need `node` on PATH (Node.js 20 or newer)")
    directory = _install_dir()
    script = os.path.join(directory, GEMINI_JS)
    if _installed_version(directory) == GEMINI_CLI_VERSION and os.path.isfile(script):
        return [node, script]
    npm = shutil.which("npm")
    if npm is None:
        raise GeminiCliUnavailable(
            f"Gemini CLI {GEMINI_CLI_VERSION} is not installed in {directory} and `npm` is not on PATH to install it"
        )
    os.makedirs(cache_root(), exist_ok=True)
    with open(directory + ".lock", "a+b") as lock:
        fcntl.flock(lock.fileno(), fcntl.LOCK_EX)  # another run may be installing: wait for it
        if _installed_version(directory) != GEMINI_CLI_VERSION or not os.path.isfile(script):
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
                    f"{GEMINI_CLI_PACKAGE}@{GEMINI_CLI_VERSION}",
                ],
                cwd=directory,
                capture_output=True,
                text=True,
                timeout=900,
                check=False,
            )
            if done.returncode != 0 or not os.path.isfile(script):
                raise GeminiCliUnavailable(
                    f"npm could not install {GEMINI_CLI_PACKAGE}@{GEMINI_CLI_VERSION} into {directory} "
                    f"(exit {done.returncode}):\n{done.stderr[-3000:]}"
                )
    return [node, script]


# -- the fake Gemini API -----------------------------------------------------------------------


@dataclass(frozen=True)
class Turn:
    """One scripted model answer: a tool call (``tool`` with ``args``) or plain ``text``; with
    ``hold``, the answer waits until that event is set (a model still thinking: the session stays
    alive, its request open, until the test releases it or kills the session)."""

    text: str | None = None
    tool: str | None = None
    args: Mapping[str, Any] = field(default_factory=dict)
    hold: threading.Event | None = field(default=None, compare=False)

    @classmethod
    def shell(cls, command: str) -> Turn:
        return cls(tool="run_shell_command", args={"command": command})

    @classmethod
    def call(cls, tool: str, **args: Any) -> Turn:
        return cls(tool=tool, args=args)

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
    raw: bytes
    body: Any = None
    kind: str = "other"  # "main" (a scripted turn), "other"
    received: float = field(default_factory=time.monotonic)

    @property
    def route(self) -> str:
        return urlsplit(self.path).path

    def texts(self) -> str:
        """Every text part of the request's contents (and function responses), joined."""
        out: list[str] = []
        contents = self.body.get("contents") if isinstance(self.body, dict) else None
        for content in contents if isinstance(contents, list) else []:
            for part in content.get("parts") or [] if isinstance(content, dict) else []:
                if isinstance(part, dict) and isinstance(part.get("text"), str):
                    out.append(part["text"])
                elif isinstance(part, dict) and isinstance(part.get("functionResponse"), dict):
                    out.append(json.dumps(part["functionResponse"].get("response")))
        return "\n".join(out)


class FakeGemini:
    """A scripted Gemini API on ``127.0.0.1`` (an ephemeral port), in a thread.

    Each ``:streamGenerateContent`` request whose body offers tools takes the next scripted
    ``Turn`` (``fallback_text`` when the script runs out) and is answered as one SSE event; any
    other request gets a short text (``generateContent``) or ``{}``. Every request is recorded in
    ``requests``, in arrival order."""

    def __init__(self, turns: Sequence[Turn] = (), *, fallback_text: str = "Done.") -> None:
        self._turns = list(turns)
        self.fallback_text = fallback_text
        self.requests: list[RecordedRequest] = []
        self._lock = threading.Lock()
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:  # the stdlib's signature
                pass

            def _handle(self) -> None:
                size = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(size) if size else b""
                try:
                    body = json.loads(raw) if raw else None
                except ValueError:
                    body = None
                request = RecordedRequest(self.command, self.path, raw, body)
                content_type, payload = fake._respond(request)
                self.send_response(200)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)
                self.wfile.flush()

            do_GET = do_POST = _handle

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, name="fake-gemini", daemon=True)

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    def __enter__(self) -> FakeGemini:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)

    def main_requests(self) -> list[RecordedRequest]:
        """The requests that took (or would have taken) a scripted turn, in order."""
        with self._lock:
            return [r for r in self.requests if r.kind == "main"]

    def _respond(self, request: RecordedRequest) -> tuple[str, bytes]:
        body = request.body if isinstance(request.body, dict) else {}
        if request.method == "POST" and request.route.endswith(":streamGenerateContent") and body.get("tools"):
            with self._lock:
                request.kind = "main"
                turn = self._turns.pop(0) if self._turns else Turn.say(self.fallback_text)
                self.requests.append(request)
            if turn.hold is not None:
                turn.hold.wait(HOLD_TIMEOUT)  # in this request's own thread: the others are answered
            return "text/event-stream", b"data: " + json.dumps(self._chunk(turn)).encode() + b"\n\n"
        with self._lock:
            self.requests.append(request)
        if request.route.endswith(":streamGenerateContent"):
            return "text/event-stream", b"data: " + json.dumps(
                self._chunk(Turn.say(self.fallback_text))
            ).encode() + b"\n\n"
        if request.route.endswith(":generateContent"):
            return "application/json", json.dumps(self._chunk(Turn.say(self.fallback_text))).encode()
        return "application/json", b"{}"

    @staticmethod
    def _chunk(turn: Turn) -> dict[str, Any]:
        part: dict[str, Any]
        if turn.tool is not None:
            part = {"functionCall": {"name": turn.tool, "args": dict(turn.args)}}
        else:
            part = {"text": turn.text or ""}
        return {
            "candidates": [{"content": {"role": "model", "parts": [part]}, "finishReason": "STOP", "index": 0}],
            "usageMetadata": {"promptTokenCount": 12, "candidatesTokenCount": 8, "totalTokenCount": 20},
        }


# -- a project -------------------------------------------------------------------------------


@dataclass
class GeminiRun:
    """What one ``gemini`` invocation did."""

    returncode: int
    stdout: str
    stderr: str
    seconds: float

    def describe(self) -> str:
        return f"gemini exited {self.returncode} after {self.seconds:.1f}s\n--- stdout\n{self.stdout}\n--- stderr\n{self.stderr}"

    @property
    def session_id(self) -> str:
        """The session id ``--output-format json`` printed."""
        return str(json.loads(self.stdout)["session_id"])


def gemini_env_base() -> dict[str, str]:
    """This process's environment without what would reach a real account or an outer session."""
    return {k: v for k, v in _base_env().items() if not k.startswith(_SCRUBBED_PREFIXES)}


class GeminiProject:
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
        os.makedirs(self.dir)
        with open(os.path.join(self.dir, "README.md"), "w", encoding="utf-8") as fh:
            fh.write("# e2e project\n")
        _git(self.dir, "init", "-q")
        _git(self.dir, "add", "README.md")
        _git(self.dir, "commit", "-q", "-m", "init")

    @classmethod
    @contextmanager
    def create(cls, gemini: Sequence[str] | None = None, *, prefix: str = "phx-gemini-") -> Iterator[GeminiProject]:
        """A project in a new temporary folder, removed afterwards."""
        root = tempfile.mkdtemp(prefix=prefix)
        try:
            yield cls(root, gemini)
        finally:
            shutil.rmtree(root, ignore_errors=True)

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
        with open(os.path.join(self.agent_dir(agent), "ops.jsonl"), encoding="utf-8") as fh:
            return [json.loads(line) for line in fh if line.strip()]

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
        env = gemini_env_base()
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
                "GEMINI_CLI_TRUST_WORKSPACE": "true",
                "NO_COLOR": "1",
            }
        )
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
        return subprocess.Popen(
            self.argv(prompt),
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
        prompt: str,
        *,
        api: FakeGemini | None = None,
        env: Mapping[str, str] | None = None,
        timeout: float = RUN_TIMEOUT,
    ) -> GeminiRun:
        """Run ``gemini -p <prompt>`` in the project to its end."""
        started = time.monotonic()
        proc = self.start(prompt, api=api, env=env)
        try:
            out, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            out, err = proc.communicate()
            raise AssertionError(
                f"gemini did not finish within {timeout:.0f}s\n--- stdout\n{out}\n--- stderr\n{err}"
            ) from None
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


def kill_group(proc: subprocess.Popen[str]) -> None:
    """SIGKILL the process group ``proc`` leads (``GeminiProject.start``): no SessionEnd, no AfterTool."""
    os.killpg(proc.pid, signal.SIGKILL)
    proc.communicate(timeout=30)


def wait_for_requests(proc: subprocess.Popen[str], api: FakeGemini, count: int, timeout: float = 120.0) -> None:
    """Wait until the model was asked for its ``count``-th turn (the session still running)."""
    deadline = time.monotonic() + timeout
    while len(api.main_requests()) < count:
        if proc.poll() is not None:
            out, err = proc.communicate()
            raise AssertionError(f"gemini exited {proc.returncode} early\n--- stdout\n{out}\n--- stderr\n{err}")
        assert time.monotonic() < deadline, "the model never got that far"
        time.sleep(0.05)
