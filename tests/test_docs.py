"""Docs are tested: every CLI command is documented, and every example in docs/ runs."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import click
import pytest

from conftest import git
from phoenix_protocol._cli import main_group

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
