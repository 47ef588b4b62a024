"""Phoenix as a user installs it (issue 37): ``python -m build`` makes an sdist and a wheel (the
wheel built from the sdist, as ``build`` does: a file missing from the sdist fails here), and the
wheel is installed outside the repository (a temporary HOME and working directory, a ``PATH``
without the test runner's ``phx``) three ways: ``pip`` into a fresh virtualenv, ``pipx install``
and ``uv tool install``. There ``phx --version``, ``phx demo``, ``phx install claude-code
--dry-run`` and a real install run, and the SessionStart hook runs through the very commands the
install wrote (the shared one through ``phx`` on ``PATH``, then this machine's fast one, which must
name the installed environment, never the repository's ``src/``). The extras install from the
wheel and import. The README's install lines that work before Phoenix is published (from a clone,
from a git URL) are run as written.

pipx and uv are installed from the package index into the test cache (``python_tools``); only when
that fails are their tests skipped, with one line saying so. The build runs once per session (per
xdist worker)."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
import tarfile
import tomllib
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from claude_code import REPO_ROOT, path_without_phx
from python_tools import PythonToolsUnavailable, ensure_python_tools, pip_cache, uv_cache
from sandbox import git, home_env

from phoenix_protocol import __version__

pytestmark = pytest.mark.e2e

PROJECT = tomllib.loads(Path(REPO_ROOT, "pyproject.toml").read_text(encoding="utf-8"))["project"]
RUN_TIMEOUT = 600


@dataclass(frozen=True)
class Dist:
    sdist: Path
    wheel: Path


def _run(
    argv: list[str], *, cwd: Path | str, env: dict[str, str], stdin: str | None = None, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    """``argv`` run to its end; it must exit 0 (else its output is in the failure)."""
    done = subprocess.run(
        argv, cwd=cwd, env=env, input=stdin, capture_output=True, text=True, timeout=timeout, check=False
    )
    assert done.returncode == 0, f"{argv} exited {done.returncode}:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done


@pytest.fixture(scope="session")
def dist(tmp_path_factory: pytest.TempPathFactory) -> Dist:
    """The sdist and the wheel of the repository as it is now, built once."""
    out = tmp_path_factory.mktemp("dist")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env["PIP_CACHE_DIR"] = pip_cache()
    _run([sys.executable, "-m", "build", "--outdir", str(out), REPO_ROOT], cwd=out, env=env, timeout=RUN_TIMEOUT)
    [sdist] = out.glob("*.tar.gz")
    [wheel] = out.glob("*.whl")
    return Dist(sdist, wheel)


@pytest.fixture
def user(tmp_path: Path) -> Iterator[dict[str, str]]:
    """A new user's environment: a temporary HOME (``~/.local/bin`` first on ``PATH``, where pipx
    and uv put ``phx``), no ``phx`` of the test runner's on ``PATH``, pip's and uv's caches shared
    with earlier runs, uv never downloading an interpreter."""
    home = tmp_path / "home"
    home.mkdir()
    bindir = home / ".local" / "bin"
    env = home_env(
        str(home),
        PATH=path_without_phx(str(bindir)),
        PIP_CACHE_DIR=pip_cache(),
        UV_CACHE_DIR=uv_cache(),
        UV_PYTHON_DOWNLOADS="never",
        UV_PYTHON=sys.executable,
        PIPX_DEFAULT_PYTHON=sys.executable,
    )
    yield env


def _tools(env: dict[str, str]) -> str:
    try:
        tools = ensure_python_tools()
    except PythonToolsUnavailable as exc:
        pytest.skip(f"pipx and uv cannot be installed from the package index: {exc}")
    env["PATH"] = env["PATH"] + os.pathsep + tools
    return tools


def _project(tmp_path: Path, env: dict[str, str]) -> Path:
    project = tmp_path / "project"
    project.mkdir()
    git(str(project), "init", "-q", "-b", "main")
    return project


def _check_installed(phx: str, tmp_path: Path, env: dict[str, str], *, venv_marker: str) -> None:
    """What a user does after installing: the version, the demo, the hooks of Claude Code (a dry
    run, the shared file, this machine's file), and the SessionStart hook through the commands
    the install wrote. ``venv_marker``: a part of the path of the environment Phoenix was
    installed into, which the fast command must name."""
    assert os.path.isabs(phx) and not phx.startswith(REPO_ROOT)
    version = _run([phx, "--version"], cwd=tmp_path, env=env)
    assert version.stdout.strip() == f"phx, version {__version__}"  # no commit: not a clone

    demo = _run([phx, "demo", "--json"], cwd=tmp_path, env=env, timeout=RUN_TIMEOUT)
    assert json.loads(demo.stdout)["recovery_detected"] is True

    project = _project(tmp_path, env)
    dry = json.loads(_run([phx, "install", "claude-code", "--dry-run", "--json"], cwd=project, env=env).stdout)
    assert dry["dry_run"] is True and dry["kind"] == "portable"
    assert not (project / ".claude").exists()

    _run([phx, "install", "claude-code"], cwd=project, env=env)
    _run([phx, "state", "working", "Ship the wheel"], cwd=project, env=env)
    shared = json.loads((project / ".claude" / "settings.json").read_text())
    [shared_command] = [h["command"] for g in shared["hooks"]["SessionStart"] for h in g["hooks"]]
    assert shared_command.startswith("command -v phx ")

    def session_start(command: str, session: str, path: str) -> dict[str, object]:
        payload = {
            "session_id": session,
            "transcript_path": str(tmp_path / f"{session}.jsonl"),
            "cwd": str(project),
            "hook_event_name": "SessionStart",
            "source": "startup",
        }
        hook_env = {**env, "PATH": path, "CLAUDE_PROJECT_DIR": str(project)}
        done = _run(["/bin/sh", "-c", command], cwd=project, env=hook_env, stdin=json.dumps(payload))
        assert done.stderr == "", done.stderr
        state = json.loads((project / ".phoenix" / "agents" / "default" / "state.json").read_text())
        assert state["session_id"] == session, (done.stdout, state)
        return json.loads(done.stdout) if done.stdout.strip() else {}

    # The shared command: phx from PATH, the previous session's task in the context it hands over.
    out = session_start(shared_command, "wheel-1", env["PATH"])
    assert "Ship the wheel" in json.dumps(out)

    # This machine's fast command: the installed environment by absolute path, whatever PATH.
    local = json.loads(_run([phx, "install", "claude-code", "--scope", "local", "--json"], cwd=project, env=env).stdout)
    fast = local["commands"]["SessionStart"]
    assert "/src/" not in fast and REPO_ROOT not in fast, fast
    assert venv_marker in fast and "site-packages" in fast, fast
    session_start(fast, "wheel-2", "/usr/bin:/bin")
    # ... and the shared command now stands aside for it: exit 0, nothing written.
    stood_aside = _run(["/bin/sh", "-c", shared_command], cwd=project, env=env, stdin="{}")
    assert stood_aside.stdout == "" and stood_aside.stderr == ""

    # phx doctor --env sees the installed Phoenix (no commit), both files and the last SessionStart.
    described = json.loads(_run([phx, "doctor", "--env", "--json"], cwd=project, env=env, timeout=60).stdout)
    assert described["phoenix"]["version"] == __version__ and described["phoenix"]["commit"] is None
    assert described["phoenix"]["installed_in"].startswith(venv_marker)
    hooks = {(h["client"], h["scope"]): h for h in described["hooks"]}
    assert hooks[("claude-code", "project")]["kind"] == "portable"
    assert hooks[("claude-code", "local")]["kind"] == "machine"
    assert hooks[("claude-code", "local")]["last_session_start"]["session_id"] == "wheel-2"
    assert described["store"]["engine"] == "sqlite" and described["store"]["exists"] is True


# -- what the build makes --------------------------------------------------------------------


def test_wheel_and_sdist_hold_the_package(dist: Dist) -> None:
    """Every module and data file of ``src/phoenix_protocol`` is in the wheel (and in the sdist,
    with the files a build from it needs), the entry points are ``phx`` and ``state-update``, and
    the metadata has the version of ``_version.py`` and the dependencies of pyproject.toml."""
    assert dist.wheel.name == f"phoenix_protocol-{__version__}-py3-none-any.whl"
    assert dist.sdist.name == f"phoenix_protocol-{__version__}.tar.gz"
    src = Path(REPO_ROOT, "src")
    package_files = {
        str(p.relative_to(src))
        for p in (src / "phoenix_protocol").rglob("*")
        if p.is_file() and "__pycache__" not in p.parts and not p.name.endswith(".pyc")
    }
    assert {"phoenix_protocol/py.typed", "phoenix_protocol/data/all-MiniLM-L6-v2-vocab.txt"} <= package_files
    with zipfile.ZipFile(dist.wheel) as whl:
        names = set(whl.namelist())
        info = f"phoenix_protocol-{__version__}.dist-info"
        metadata = whl.read(f"{info}/METADATA").decode()
        entry_points = whl.read(f"{info}/entry_points.txt").decode()
    assert package_files <= names, sorted(package_files - names)
    assert not [n for n in names if n.startswith(("src/", "tests/")) or "__pycache__" in n]
    assert "phx = phoenix_protocol.cli._entry:main" in entry_points
    assert "state-update = phoenix_protocol.cli._state_update:main" in entry_points
    assert f"\nVersion: {__version__}\n" in metadata
    requires = {line.split(": ", 1)[1] for line in metadata.splitlines() if line.startswith("Requires-Dist: ")}
    for dependency in PROJECT["dependencies"]:
        assert dependency in requires, dependency
    extras = {line.split(": ", 1)[1] for line in metadata.splitlines() if line.startswith("Provides-Extra: ")}
    assert extras == set(PROJECT["optional-dependencies"])
    with tarfile.open(dist.sdist) as sdist:
        members = {m.name.split("/", 1)[1] for m in sdist.getmembers() if "/" in m.name}
    assert {"pyproject.toml", "README.md", "LICENSE", "CHANGELOG.md"} <= members
    assert {f"src/{name}" for name in package_files} <= members


# -- installed three ways --------------------------------------------------------------------


def test_wheel_in_a_fresh_virtualenv(dist: Dist, tmp_path: Path, user: dict[str, str]) -> None:
    venv = tmp_path / "venv"
    _run([sys.executable, "-m", "venv", str(venv)], cwd=tmp_path, env=user)
    _run(
        [str(venv / "bin" / "python"), "-m", "pip", "install", "--quiet", str(dist.wheel)],
        cwd=tmp_path,
        env=user,
        timeout=RUN_TIMEOUT,
    )
    user["PATH"] = str(venv / "bin") + os.pathsep + user["PATH"]  # README: "a virtualenv whose bin/ is on PATH"
    _check_installed(str(venv / "bin" / "phx"), tmp_path, user, venv_marker=str(venv))


def test_wheel_with_pipx(dist: Dist, tmp_path: Path, user: dict[str, str]) -> None:
    tools = _tools(user)
    _run([os.path.join(tools, "pipx"), "install", str(dist.wheel)], cwd=tmp_path, env=user, timeout=RUN_TIMEOUT)
    phx = Path(user["HOME"], ".local", "bin", "phx")
    assert phx.is_file()
    _check_installed(
        str(phx),
        tmp_path,
        user,
        venv_marker=os.path.join(user["HOME"], ".local", "share", "pipx", "venvs", "phoenix-protocol"),
    )


def test_wheel_with_uv_tool(dist: Dist, tmp_path: Path, user: dict[str, str]) -> None:
    tools = _tools(user)
    _run([os.path.join(tools, "uv"), "tool", "install", str(dist.wheel)], cwd=tmp_path, env=user, timeout=RUN_TIMEOUT)
    phx = Path(user["HOME"], ".local", "bin", "phx")
    assert phx.is_file()
    _check_installed(
        str(phx),
        tmp_path,
        user,
        venv_marker=os.path.join(user["HOME"], ".local", "share", "uv", "tools", "phoenix-protocol"),
    )


# -- the extras ------------------------------------------------------------------------------

EXTRA_IMPORTS = {
    "server": "import uvicorn; from phoenix_protocol.server._app import create_app; create_app",
    "postgres": "import psycopg, psycopg_pool; import phoenix_protocol.store._pg",
    "clinic": "import pydantic_ai; import phoenix_protocol.clinic",
    "langgraph": "from phoenix_protocol.integrations.langgraph import PhoenixSaver; PhoenixSaver",
    "mcp": "from phoenix_protocol.server._mcp import create_mcp_server; create_mcp_server",
    "openai-agents": "from phoenix_protocol.integrations.openai_agents import PhoenixSession; PhoenixSession",
}
PERSONA = """
from phoenix_protocol.services._persona import EmbeddingScorer
core = {"name": "Ada", "role": "backend engineer", "about": "builds and reviews the payments API in Python"}
scorer = EmbeddingScorer()
on = scorer.score(core, ["I reviewed the payments API handler and added a test for the refund path."])
off = scorer.score(core, ["Here is a poem about the moon over the sea, and my favourite cake recipe."])
assert on > off, (on, off)  # 1 aligned with the core, 0 drifted
"""
"""The ``[persona]`` extra's model from the wheel's vocabulary (package data) and the model
package: an on-persona text scores as more aligned with the core than an off-persona one."""


def test_extras_install_and_import_from_the_wheel(dist: Dist, tmp_path: Path, user: dict[str, str]) -> None:
    """``[server]``, ``[postgres]``, ``[clinic]`` and ``[langgraph]`` from the wheel with pip, in one
    fresh virtualenv, each importing what it is for; ``[persona]`` (about 120 MB: onnxruntime and
    the model's package) with ``uv pip`` (its download cached between runs) into another, scoring
    two texts with the model."""
    assert set(EXTRA_IMPORTS) | {"persona", "test", "bench"} == set(PROJECT["optional-dependencies"])
    venv = tmp_path / "venv"
    python = str(venv / "bin" / "python")
    _run([sys.executable, "-m", "venv", str(venv)], cwd=tmp_path, env=user)
    target = f"{dist.wheel}[{','.join(EXTRA_IMPORTS)}]"
    _run([python, "-m", "pip", "install", "--quiet", target], cwd=tmp_path, env=user, timeout=RUN_TIMEOUT)
    for extra, code in EXTRA_IMPORTS.items():
        done = subprocess.run(
            [python, "-c", code], cwd=tmp_path, env=user, capture_output=True, text=True, timeout=120, check=False
        )
        assert done.returncode == 0, f"[{extra}]: {done.stderr[-2000:]}"
    where = _run([python, "-c", "import phoenix_protocol; print(phoenix_protocol.__file__)"], cwd=tmp_path, env=user)
    assert where.stdout.startswith(str(venv)), where.stdout

    tools = _tools(user)
    persona = tmp_path / "persona"
    _run([sys.executable, "-m", "venv", str(persona)], cwd=tmp_path, env=user)
    python = str(persona / "bin" / "python")
    uv = os.path.join(tools, "uv")
    _run(
        [uv, "pip", "install", "--quiet", "--python", python, f"{dist.wheel}[persona]"],
        cwd=tmp_path,
        env=user,
        timeout=RUN_TIMEOUT,
    )
    _run([python, "-c", PERSONA], cwd=tmp_path, env=user, timeout=RUN_TIMEOUT)


# -- the README's install lines ----------------------------------------------------------------

README = Path(REPO_ROOT, "README.md")
GIT_URL = "https://github.com/<owner>/phoenix-protocol"


def readme_install_lines() -> list[str]:
    """The install commands of the README's ``sh`` blocks, comments removed."""
    text = README.read_text(encoding="utf-8")
    lines = []
    for block in re.findall(r"```sh\n(.*?)```", text, flags=re.DOTALL):
        for line in block.splitlines():
            command = re.split(r"\s#", line, maxsplit=1)[0].strip()
            if re.match(r"(pipx|uv tool|pip|python3? -m pip) install ", command):
                lines.append(command)
    return lines


def test_readme_install_lines_from_a_clone_or_git_work(tmp_path: Path, user: dict[str, str]) -> None:
    """Each of the README's install lines that works before Phoenix is published runs as written
    (pipx and uv from this clone, ``.``, and from the git URL, here this repository's own
    ``file://`` URL: its committed files): ``phx`` ends up on ``PATH`` and answers. The lines for
    after publishing name ``phoenix-protocol`` (never ``phx``: another project's name there)."""
    tools = _tools(user)
    lines = readme_install_lines()
    clone_lines = [line for line in lines if line.split()[-1] == "." or GIT_URL in line]
    assert {
        "pipx install .",
        "uv tool install .",
        f"pipx install git+{GIT_URL}",
        f"uv tool install git+{GIT_URL}",
    } <= set(clone_lines), lines
    for line in lines:
        target = line.split()[-1].strip("'\"")
        assert not re.fullmatch(r"phx(\[.*\])?", target), line
    bindir = Path(user["HOME"], ".local", "bin")
    for line in clone_lines:
        argv = shlex.split(line.replace(GIT_URL, f"file://{REPO_ROOT}"))
        argv[0] = os.path.join(tools, argv[0])
        _run(argv, cwd=REPO_ROOT if argv[-1] == "." else tmp_path, env=user, timeout=RUN_TIMEOUT)
        version = _run(["phx", "--version"], cwd=tmp_path, env=user)
        assert version.stdout.strip() == f"phx, version {__version__}", line
        assert (bindir / "phx").is_file()
        uninstall = (
            [argv[0], "uninstall", "phoenix-protocol"]
            if argv[1] == "install"
            else [argv[0], "tool", "uninstall", "phoenix-protocol"]
        )
        _run(uninstall, cwd=tmp_path, env=user)
        assert not (bindir / "phx").exists(), line
