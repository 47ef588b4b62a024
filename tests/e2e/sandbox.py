"""What every end-to-end harness for an agent CLI shares: an environment scrubbed of the test
runner's identity, a temporary HOME's variables, git without the user's config, a temporary
project, the Phoenix files in it, and running a CLI in a process group of its own (to its end,
or killed as a crash would).

Nothing here touches the real ``~/.claude``, ``~/.gemini``, ``~/.codex`` or the user's git
config: the CLIs run with ``HOME`` set to a temporary folder, git with ``GIT_CONFIG_GLOBAL=/dev/null``.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, ClassVar

from fake_models import FakeModel

# Environment variables that must not leak from the test runner into an agent CLI or its hooks:
# an outer agent session, a real API key or base URL, an outer Phoenix home or agent.
_SCRUBBED_PREFIXES = (
    "ANTHROPIC_",
    "CLAUDE",
    "GEMINI_",
    "GOOGLE_",
    "VERTEX",
    "CLOUDSDK_",
    "CODEX_",
    "OPENAI_",
    "PHOENIX_",
    "OTEL_",
    "AWS_BEARER",
    "GIT_",
    "XDG_",
)
_SCRUBBED_NAMES = frozenset(
    {"HOME", "USERPROFILE", "PWD", "OLDPWD", "NODE_OPTIONS", "DEBUG", "MCP_TIMEOUT", "VIRTUAL_ENV", "PYTHONPATH"}
    # A CI runner's markers: with CI=true Gemini CLI 0.61 runs headless even on a terminal (it
    # exits 42, "No input provided via stdin", in a tmux pane). The agents under test are a
    # person's interactive sessions, so they must not see them.
    | {"CI", "CONTINUOUS_INTEGRATION", "GITHUB_ACTIONS", "BUILD_NUMBER", "RUN_ID", "BUILDKITE", "GITLAB_CI"}
)
# Keep a few that are plumbing, not identity.
_KEPT = frozenset({"GIT_SSL_CAINFO"})


def base_env() -> dict[str, str]:
    """This process's environment without what would reach a real account or an outer session."""
    return {
        k: v
        for k, v in os.environ.items()
        if k in _KEPT or (k not in _SCRUBBED_NAMES and not k.startswith(_SCRUBBED_PREFIXES))
    }


def home_env(home: str, **extra: str) -> dict[str, str]:
    """``base_env()`` for a user whose HOME is ``home`` (the XDG folders in it, git without the
    user's or the system's config, no colours), then ``extra``."""
    env = base_env()
    env.update(
        {
            "HOME": home,
            "USER": env.get("USER", "root"),
            "XDG_CONFIG_HOME": os.path.join(home, ".config"),
            "XDG_CACHE_HOME": os.path.join(home, ".cache"),
            "XDG_DATA_HOME": os.path.join(home, ".local", "share"),
            "XDG_STATE_HOME": os.path.join(home, ".local", "state"),
            "GIT_CONFIG_GLOBAL": os.devnull,
            "GIT_CONFIG_NOSYSTEM": "1",
            "NO_COLOR": "1",
        }
    )
    env.update(extra)
    return env


def git(cwd: str, *args: str) -> None:
    """Run git in ``cwd`` with a test identity and no user or system config."""
    env = {**base_env(), "GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_NOSYSTEM": "1"}
    identity = ["-c", "user.name=Phoenix E2E", "-c", "user.email=e2e@phoenix.invalid", "-c", "init.defaultBranch=main"]
    subprocess.run(["git", *identity, *args], cwd=cwd, env=env, check=True, capture_output=True, timeout=60)


def init_project(directory: str) -> None:
    """A new git repository at ``directory`` with one commit (a README)."""
    os.makedirs(directory)
    with open(os.path.join(directory, "README.md"), "w", encoding="utf-8") as fh:
        fh.write("# e2e project\n")
    git(directory, "init", "-q")
    git(directory, "add", "README.md")
    git(directory, "commit", "-q", "-m", "init")


@contextmanager
def temp_root(prefix: str) -> Iterator[str]:
    """A new temporary folder (for a project and its HOME), removed afterwards."""
    root = tempfile.mkdtemp(prefix=prefix)
    try:
        yield root
    finally:
        shutil.rmtree(root, ignore_errors=True)


class PhoenixFiles:
    """The Phoenix home of a project (``<dir>/.phoenix``, the default one) and its agents' files."""

    dir: str

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
        """The agent's ops events, in order (none when no hook has written any)."""
        path = os.path.join(self.agent_dir(agent), "ops.jsonl")
        if not os.path.exists(path):
            return []
        with open(path, encoding="utf-8") as fh:
            return [json.loads(line) for line in fh if line.strip()]


# -- running a CLI ---------------------------------------------------------------------------


@dataclass
class CliRun:
    """What one run of an agent CLI did."""

    name: ClassVar[str] = "the CLI"

    returncode: int
    stdout: str
    stderr: str
    seconds: float

    def describe(self) -> str:
        head = f"{self.name} exited {self.returncode} after {self.seconds:.1f}s"
        return f"{head}\n--- stdout\n{self.stdout}\n--- stderr\n{self.stderr}"


def start_cli(argv: Sequence[str], *, cwd: str, env: Mapping[str, str]) -> subprocess.Popen[str]:
    """Start ``argv`` and return at once, in a process group of its own, so that ``kill_group``
    kills the CLI (its node launcher, what that relaunched) and everything it started."""
    return subprocess.Popen(
        list(argv),
        cwd=cwd,
        env=dict(env),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )


def finish(proc: subprocess.Popen[str], timeout: float, what: str) -> tuple[str, str]:
    """Wait for ``proc`` to end; its (stdout, stderr). Past ``timeout`` it kills the process
    group and fails, saying ``what`` did not finish."""
    try:
        return proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        raise AssertionError(
            f"{what} did not finish within {timeout:.0f}s\n--- stdout\n{out}\n--- stderr\n{err}"
        ) from None


def kill_group(proc: subprocess.Popen[str]) -> None:
    """SIGKILL the process group ``proc`` leads (``start_cli``), as a crash would: no SessionEnd,
    no after-tool hook."""
    os.killpg(proc.pid, signal.SIGKILL)
    proc.communicate(timeout=30)


def wait_for_requests(proc: subprocess.Popen[str], api: FakeModel[Any], count: int, timeout: float = 120.0) -> None:
    """Wait until the model was asked for its ``count``-th turn, the session still running; fails
    if the CLI exits first."""
    deadline = time.monotonic() + timeout
    while len(api.main_requests()) < count:
        if proc.poll() is not None:
            out, err = proc.communicate()
            raise AssertionError(f"the CLI exited {proc.returncode} early\n--- stdout\n{out}\n--- stderr\n{err}")
        assert time.monotonic() < deadline, "the model never got that far"
        time.sleep(0.05)
