"""Docs are tested: every CLI command is documented, every example in docs/ runs, and
docs/state.md lists every ops event the source writes."""

from __future__ import annotations

import ast
import itertools
import os
import re
import subprocess
import sys
from pathlib import Path

import click
import pytest

from conftest import git
from phoenix_protocol.cli._main import main_group

ROOT = Path(__file__).resolve().parents[1]
DOCS = [*sorted((ROOT / "docs").glob("*.md")), ROOT / "README.md"]
BLOCK = re.compile(r"```(\w+)\n(.*?)```", re.DOTALL)


def _commands(group: click.Group, prefix: str = "phx") -> list[str]:
    out = []
    for name, command in sorted(group.commands.items()):
        path = f"{prefix} {name}"
        if isinstance(command, click.Group):
            out += _commands(command, path)
        else:
            out.append(path)
    return out


@pytest.mark.parametrize("command", _commands(main_group))
def test_every_command_is_documented(command: str) -> None:
    text = (ROOT / "docs" / "cli.md").read_text()
    assert f"### `{command}`" in text, f"{command} is missing from docs/cli.md"


def _blocks(path: Path, language: str) -> list[str]:
    return [body for lang, body in BLOCK.findall(path.read_text()) if lang == language]


@pytest.mark.parametrize("doc", [d for d in DOCS if _blocks(d, "console")], ids=lambda p: p.name)
def test_console_examples_run(doc: Path, tmp_path: Path) -> None:
    project = tmp_path / "project"
    project.mkdir()
    git(project, "init", "-q")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PHOENIX_", "CLAUDE"))}
    env["PATH"] = str(Path(sys.executable).parent) + os.pathsep + env["PATH"]
    ran = 0
    for block in _blocks(doc, "console"):
        for line in block.splitlines():
            if not line.startswith("$ "):
                continue
            command = line[2:]
            match = re.search(r"#\s*exit\s+(\d+)\s*$", command)
            expected = int(match.group(1)) if match else 0
            proc = subprocess.run(
                ["bash", "-c", command], cwd=project, env=env, capture_output=True, text=True, timeout=180, check=False
            )
            assert proc.returncode == expected, f"{doc.name}: {command!r} exited {proc.returncode}: {proc.stderr}"
            assert "Traceback" not in proc.stdout + proc.stderr
            ran += 1
    assert ran


@pytest.mark.parametrize("doc", [d for d in DOCS if _blocks(d, "python")], ids=lambda p: p.name)
def test_python_examples_run(doc: Path, tmp_path: Path) -> None:
    for block in _blocks(doc, "python"):
        proc = subprocess.run(
            [sys.executable, "-c", block], cwd=tmp_path, capture_output=True, text=True, timeout=60, check=False
        )
        assert proc.returncode == 0, f"{doc.name}: {proc.stderr}"


def test_install_lines_install_from_the_repository() -> None:
    """Phoenix is not on PyPI yet: every install line of the docs installs this repository (``.``
    or ``'.[extra]'`` with an extra pyproject.toml declares, or the git URL), or names
    ``phoenix-protocol`` on a line that says it is for once it is published; never ``phx`` (an
    unrelated project's name on PyPI). (The README's lines run in tests/e2e/test_wheel.py.)"""
    import tomllib

    extras = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"])
    lines = [
        (doc.name, line.split("#")[0].strip(), line.partition("#")[2])
        for doc in DOCS
        for body in _blocks(doc, "sh") + _blocks(doc, "console")
        for line in body.splitlines()
        if re.match(r"(\$ )?(pipx|pip|uv tool|python3? -m pip) install ", line.strip())
    ]
    readme = {line for name, line, _ in lines if name == "README.md"}
    assert {"pipx install .", "uv tool install .", "pipx install phoenix-protocol"} <= readme, readme
    for name, line, comment in lines:
        target = line.split()[-1].strip("'\"")
        if target.startswith("git+"):
            assert target == "git+https://github.com/<owner>/phoenix-protocol", f"{name}: {line!r}"
            continue
        match = re.fullmatch(r"(\.|phoenix-protocol)(?:\[([a-z,-]+)\])?", target)
        assert match, f"{name}: {line!r} does not install this repository"
        assert match.group(1) == "." or "once published" in comment, f"{name}: {line!r} is not on PyPI yet"
        assert set((match.group(2) or "").split(",")) - {""} <= extras, f"{name}: {line!r} names an unknown extra"


# -- the ops events docs/state.md lists -------------------------------------------------------------

_EVENT_CALLS = {"record", "record_later", "make_entry", "_log_best_effort", "Transition", "on_damage", "_tell"}
"""What writes an ops event, its name the first argument: ``Agent.record``, ``OpsLog.record`` /
``record_later`` / ``make_entry``, the hook's ``_log_best_effort``, a state ``Transition``, the
checkpoint catalogue's ``on_damage``, called through ``_tell`` (its store logs the event it names); and
any call's ``event=`` keyword (``set_status(..., event="stalled")``)."""


def _logged_ops_events() -> set[str]:
    """Every ops event name the source writes. A name given as a variable is followed to what is
    assigned to it in the enclosing functions (``name = event or {...}[status]``,
    ``outcome = "succeeded" if success else "failed"`` in ``f"operation_{outcome}"``) or to a
    module constant (``EVENT = "clinic_episode"``)."""
    trees = [ast.parse(path.read_text(encoding="utf-8")) for path in sorted((ROOT / "src").rglob("*.py"))]
    constants = {
        target.id: node.value.value
        for tree in trees
        for node in tree.body
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str)
        for target in node.targets
        if isinstance(target, ast.Name)
    }
    found: set[str] = set()
    for tree in trees:
        for scope in ast.walk(tree):
            if not isinstance(scope, (ast.Module, ast.FunctionDef)):
                continue
            local: dict[str, list[ast.expr]] = {}
            for node in ast.walk(scope):
                if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
                    local.setdefault(node.targets[0].id, []).append(node.value)

            def names(expr: ast.expr, local: dict[str, list[ast.expr]] = local) -> set[str]:
                if isinstance(expr, ast.Constant):
                    return {expr.value} if isinstance(expr.value, str) else set()
                if isinstance(expr, ast.IfExp):
                    return names(expr.body) | names(expr.orelse)
                if isinstance(expr, ast.BoolOp):
                    return set().union(*(names(value) for value in expr.values))
                if isinstance(expr, ast.Subscript) and isinstance(expr.value, ast.Dict):
                    return set().union(*(names(value) for value in expr.value.values))
                if isinstance(expr, ast.Name):
                    if expr.id in constants:
                        return {constants[expr.id]}
                    return set().union(*(names(value) for value in local.get(expr.id, [])))
                if isinstance(expr, ast.JoinedStr):
                    parts = [names(v.value if isinstance(v, ast.FormattedValue) else v) for v in expr.values]
                    return {"".join(combination) for combination in itertools.product(*parts)}
                return set()

            for node in ast.walk(scope):
                if not isinstance(node, ast.Call):
                    continue
                func = node.func
                called = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
                if called in _EVENT_CALLS and node.args:
                    found |= names(node.args[0])
                found |= set().union(*(names(k.value) for k in node.keywords if k.arg == "event"))
    return found


def _ops_section() -> str:
    """The ``## ops.jsonl`` section of docs/state.md."""
    text = (ROOT / "docs" / "state.md").read_text(encoding="utf-8")
    start = text.find("\n## ops.jsonl\n")
    assert start >= 0, "docs/state.md has no '## ops.jsonl' section"
    return text[start + 1 :].split("\n## ", 1)[0]


def test_state_md_lists_every_ops_event() -> None:
    """Each event the source writes has its row in docs/state.md's table of events (when it is
    written, at which status), and each row is an event the source writes."""
    logged = _logged_ops_events()
    assert {"session_start", "heartbeat", "task_started", "operation_succeeded", "clinic_episode"} <= logged
    section = _ops_section()
    named = set(re.findall(r"`([a-z_]+)`", section))
    assert not logged - named, f"ops events missing from docs/state.md: {sorted(logged - named)}"
    rows = re.findall(r"^\| `([a-z_]+)` \|", section, flags=re.MULTILINE)
    assert len(rows) == len(set(rows)), "an event has two rows in docs/state.md"
    assert not logged - set(rows), f"ops events without a row in docs/state.md: {sorted(logged - set(rows))}"
    assert not set(rows) - logged, f"docs/state.md has rows for events never logged: {sorted(set(rows) - logged)}"
