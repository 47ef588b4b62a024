"""Helpers for end-to-end tests against the real Claude Code CLI.

* ``ensure_claude_code()``: the argv prefix that runs a pinned Claude Code (``npm_clis``: installed
  with npm into a cache folder outside the repo on first use, under a file lock).
* ``FakeAnthropic``, ``Turn``, ``RecordedRequest``: the scripted Anthropic Messages API of
  ``fake_models``, here under the names the Claude Code tests use.
* ``ClaudeProject``: a temporary git project with Phoenix's hooks installed, a temporary HOME,
  and a way to run ``claude`` in it; a clone of it (another checkout of the committed settings);
  what Claude Code's transcripts and debug log say about the hooks it ran.
* ``install_phoenix(dir)``: Phoenix installed from this repository into a new virtualenv, as the
  README says (``pip install .``), for a ``phx`` on ``PATH`` that is not the test runner's.

Nothing here touches the real ``~/.claude``, ``~/.gemini``, ``~/.codex`` or the user's git config:
Claude Code runs with ``HOME`` set to a temporary folder, git with ``GIT_CONFIG_GLOBAL=/dev/null``.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from fake_models import AnthropicRequest as RecordedRequest
from fake_models import FakeAnthropic, Turn
from npm_clis import CLAUDE_CODE, ensure_npm_cli
from sandbox import CliRun, PhoenixFiles, base_env, finish, git, home_env, init_project, start_cli, temp_root

from phoenix_protocol.integrations._install import InstallResult, install_claude_code

__all__ = ["FakeAnthropic", "RecordedRequest", "Turn"]

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
RUN_TIMEOUT = 120.0

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


# -- installing the pinned CLI ---------------------------------------------------------------


def ensure_claude_code() -> list[str]:
    """The argv prefix that runs the pinned Claude Code (``npm_clis.CLAUDE_CODE``): ``["node", ".../cli-wrapper.cjs"]``.

    Installed on first use by ``npm_clis.ensure_npm_cli`` into ``<cache>/claude-code-<version>``.
    npm blocks the package's postinstall script, so ``node_modules/.bin/claude`` is a placeholder;
    the wrapper script finds the native binary itself. Raises (never skips) when node or npm is
    missing or the install fails.
    """
    return ensure_npm_cli(CLAUDE_CODE)


# -- Phoenix installed elsewhere ---------------------------------------------------------------


class PhoenixInstallFailed(RuntimeError):
    """``pip install`` of this repository into a new virtualenv failed."""


def install_phoenix(directory: str) -> str:
    """Phoenix from this repository (its files as they are now) in a new virtualenv at
    ``directory``, as the README's install line does it: ``python3 -m venv``, then ``pip install
    .`` in the repository (pip's configured index brings the dependencies). Returns the venv's
    ``bin`` folder, which holds ``phx`` and ``state-update``. Raises ``PhoenixInstallFailed``
    (never skips)."""
    env = base_env()
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


# -- a project with Phoenix's hooks ----------------------------------------------------------


@dataclass
class ClaudeRun(CliRun):
    """What one ``claude`` invocation did."""

    name = "claude"

    pid: int = 0
    argv: list[str] = field(default_factory=list)

    def __iter__(self) -> Iterator[Any]:  # (returncode, stdout, stderr) = run
        return iter((self.returncode, self.stdout, self.stderr))


class ClaudeProject(PhoenixFiles):
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
            init_project(self.dir)
        else:
            git(root, "clone", "-q", clone_of, self.dir)
        self.installs: dict[str, InstallResult] = {
            scope: install_claude_code(scope, project_dir=self.dir) for scope in scopes
        }

    @property
    def install(self) -> InstallResult:
        """What ``phx install claude-code`` (project scope) did."""
        return self.installs["project"]

    def commit_settings(self) -> None:
        """Commit ``.claude/settings.json``, as a team shares it."""
        git(self.dir, "add", ".claude/settings.json")
        git(self.dir, "commit", "-q", "-m", "Phoenix hooks")

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
        with temp_root(prefix) as root:
            yield cls(root, claude, scopes=scopes)

    # -- paths

    @property
    def settings_path(self) -> str:
        return os.path.join(self.dir, ".claude", "settings.json")

    @property
    def local_settings_path(self) -> str:
        return os.path.join(self.dir, ".claude", "settings.local.json")

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
        env = home_env(
            self.home,
            DISABLE_TELEMETRY="1",
            DISABLE_ERROR_REPORTING="1",
            DISABLE_AUTOUPDATER="1",
            DISABLE_BUG_COMMAND="1",
            CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC="1",
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
        return start_cli([*self.claude, *args], cwd=self.dir, env=self.env(api, env))

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
        out, err = finish(proc, timeout, f"claude ({argv})")
        return ClaudeRun(proc.returncode, out, err, time.monotonic() - started, proc.pid, argv)
