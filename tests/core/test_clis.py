"""The agent CLIs' process rule against real process trees shaped like the npm packages' (a node
launcher and the native binary, Gemini's re-launch, Codex's app-server helpers), and the table."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from phoenix_protocol.core._clis import CLIS, agents_in_tree, classify, cli_named

NODE = shutil.which("node")
needs_node = pytest.mark.skipif(NODE is None, reason="node is not installed (the CLIs' launchers are node scripts)")


def test_the_table_names_each_cli_once_with_its_clear_command() -> None:
    assert sorted(CLIS) == ["claude-code", "codex", "gemini-cli"]
    assert {name: cli.clear_command for name, cli in CLIS.items()} == {
        "claude-code": "/clear",
        "gemini-cli": "/clear",
        "codex": "/clear",
    }
    assert cli_named("codex") is CLIS["codex"] and cli_named("cursor") is None


@pytest.mark.parametrize(
    ("name", "argv", "expected"),
    [
        ("claude", ["/x/@anthropic-ai/claude-code-linux-x64/claude"], ("claude-code", False)),
        ("node", ["node", "/x/node_modules/@anthropic-ai/claude-code/cli-wrapper.cjs"], ("claude-code", True)),
        ("node", ["node", "/usr/local/bin/gemini", "-m", "gemini-2.5-flash"], ("gemini-cli", True)),
        ("node", ["/usr/bin/node", "--max-old-space-size=12052", "/x/.bin/gemini", "-m"], ("gemini-cli", True)),
        ("node", ["node", "/x/node_modules/@google/gemini-cli/bundle/gemini.js"], ("gemini-cli", True)),
        ("node", ["node", "/x/node_modules/.bin/codex", "--dangerously-bypass-hook-trust"], ("codex", True)),
        ("codex", ["/x/vendor/x86_64-unknown-linux-musl/bin/codex"], ("codex", False)),
        ("node", ["node", "server.js"], (None, False)),
        ("node", ["node"], (None, False)),
        ("python3", ["python3", "/x/gemini"], (None, False)),  # an interpreter that is no CLI's
        ("bash", ["bash", "-c", "claude"], (None, False)),
        # Nothing but the interpreter's script counts (issue 36: no agent by a substring of its command line).
        ("tail", ["tail", "-f", "/var/log/@openai/codex/codex"], (None, False)),
        ("node", ["node", "server.js", "--log", "/tmp/codex"], (None, False)),
        ("node", ["node", "-r", "/x/codex.js", "server.js"], (None, False)),  # -r's value is no script
        ("node", ["node", "-e", "run()", "/x/node_modules/@openai/codex/bin/codex.js"], (None, False)),
        ("node", ["node", "--eval=run()", "/x/gemini"], (None, False)),
        ("node", ["node", "-r", "./preload.js", "/x/node_modules/@openai/codex/bin/codex.js"], ("codex", True)),
        ("node", ["node", "--", "/x/.bin/gemini"], ("gemini-cli", True)),
    ],
)
def test_classify(name: str, argv: list[str], expected: tuple[str | None, bool]) -> None:
    cli, interpreted = classify(name, argv)
    assert ((cli.name if cli else None), interpreted) == expected


def _wait_for(pid: int, count: int, timeout: float = 20.0) -> None:
    """Until the tree of ``pid`` has ``count`` processes (launchers start their children)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if len(psutil.Process(pid).children(recursive=True)) >= count:
            return
        time.sleep(0.05)
    raise AssertionError(f"the tree of {pid} never had {count} children")


@pytest.fixture
def started() -> Iterator[list[subprocess.Popen[bytes]]]:
    procs: list[subprocess.Popen[bytes]] = []
    yield procs
    for proc in procs:
        try:
            for child in psutil.Process(proc.pid).children(recursive=True):
                child.kill()
        except psutil.NoSuchProcess:
            pass
        proc.kill()
        proc.wait()


def _binary(tmp_path: Path, name: str) -> str:
    """A long-running process named ``name``: a link to ``sleep`` (the kernel names a process
    after the file it executes)."""
    path = tmp_path / "bin" / name
    path.parent.mkdir(exist_ok=True)
    sleep = shutil.which("sleep")
    assert sleep is not None
    os.symlink(sleep, path)
    return str(path)


@needs_node
def test_a_node_launcher_and_its_native_binary_are_one_agent(
    tmp_path: Path, started: list[subprocess.Popen[bytes]]
) -> None:
    # Codex from npm: `node …/bin/codex.js` spawns the native `codex`, which runs the hooks.
    binary = _binary(tmp_path, "codex")
    script = tmp_path / "node_modules" / "@openai" / "codex" / "bin" / "codex.js"
    script.parent.mkdir(parents=True)
    script.write_text(
        f"const c = require('child_process').spawn({binary!r}, ['600'], {{stdio: 'inherit'}});\n"
        "setInterval(() => {}, 1000);\n"
    )
    assert NODE is not None
    launcher = subprocess.Popen([NODE, str(script)])
    started.append(launcher)
    _wait_for(launcher.pid, 1)
    [agent] = agents_in_tree(launcher.pid)
    native = psutil.Process(launcher.pid).children()[0]
    assert agent.cli is CLIS["codex"]
    assert (agent.pid, agent.name, agent.launchers, agent.helpers) == (native.pid, "codex", [launcher.pid], [])
    assert agent.start_time == pytest.approx(native.create_time())


def test_a_native_agents_own_children_are_its_helpers(tmp_path: Path, started: list[subprocess.Popen[bytes]]) -> None:
    # Codex's TUI starts `codex app-server` children: helpers of the agent, not more agents.
    tui = tmp_path / "tui" / "codex"
    tui.parent.mkdir()
    tui.write_text(
        f"#!{sys.executable}\nimport os, subprocess, time\n"
        f"subprocess.Popen(['codex', '600'], executable={_binary(tmp_path, 'codex')!r})\n"
        "time.sleep(600)\n"
    )
    tui.chmod(0o755)
    proc = subprocess.Popen([str(tui)])
    started.append(proc)
    _wait_for(proc.pid, 1)
    agents = agents_in_tree(proc.pid)
    assert [(a.cli.name if a.cli else None, a.pid) for a in agents] == [("codex", proc.pid)]
    [codex_child] = [c for c in psutil.Process(proc.pid).children() if c.name() == "codex"]
    assert agents[0].helpers == [codex_child.pid]


@needs_node
def test_geminis_relaunch_counts_once_and_the_child_is_the_agent(
    tmp_path: Path, started: list[subprocess.Popen[bytes]]
) -> None:
    # Gemini CLI re-launches itself as a child `node --max-old-space-size=… …/gemini`, which runs
    # the hooks; the parent only waits for it.
    script = tmp_path / "bin" / "gemini"
    script.parent.mkdir()
    script.write_text(
        "if (!process.env.RELAUNCHED) {\n"
        "  require('child_process').spawn(process.execPath, ['--max-old-space-size=64', __filename],\n"
        "    {stdio: 'inherit', env: {...process.env, RELAUNCHED: '1'}});\n"
        "}\n"
        "setInterval(() => {}, 1000);\n"
    )
    assert NODE is not None
    outer = subprocess.Popen([NODE, str(script), "-m", "gemini-2.5-flash"])
    started.append(outer)
    _wait_for(outer.pid, 1)
    [agent] = agents_in_tree(outer.pid)
    inner = psutil.Process(outer.pid).children()[0]
    assert (agent.cli, agent.pid, agent.launchers) == (CLIS["gemini-cli"], inner.pid, [outer.pid])


def test_two_agents_in_one_tree_and_the_configured_names(
    tmp_path: Path, started: list[subprocess.Popen[bytes]]
) -> None:
    claude = _binary(tmp_path, "claude")
    other = _binary(tmp_path, "aider")
    shell = subprocess.Popen(["sh", "-c", f"{claude} 600 & {other} 600 & wait"])
    started.append(shell)
    _wait_for(shell.pid, 2)
    deadline = time.monotonic() + 20  # forked is not yet exec'd: until both children bear their names
    while {c.name() for c in psutil.Process(shell.pid).children()} != {"claude", "aider"}:
        assert time.monotonic() < deadline, "the children never exec'd"
        time.sleep(0.05)
    assert [a.name for a in agents_in_tree(shell.pid)] == ["claude"]
    found = agents_in_tree(shell.pid, extra_names={"aider"})
    assert sorted((a.cli.name if a.cli else "-", a.name) for a in found) == [("-", "aider"), ("claude-code", "claude")]


def test_a_tree_that_is_gone_has_no_agents() -> None:
    proc = subprocess.Popen(["true"])
    proc.wait()
    assert agents_in_tree(proc.pid) == []
