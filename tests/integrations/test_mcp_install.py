"""``phx install <cli> --mcp``: Phoenix's MCP server registered in each CLI's file and scope, the
user's other settings kept byte for byte through an install and an uninstall."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest

from phoenix_protocol.core._errors import UsageError
from phoenix_protocol.integrations._mcp_install import install_mcp, is_phoenix_server, mcp_path, uninstall_mcp

CASES = [
    ("claude-code", "project", ".mcp.json", []),
    ("claude-code", "local", ".claude.json", ["projects", "<project>"]),
    ("claude-code", "user", ".claude.json", []),
    ("gemini-cli", "project", ".gemini/settings.json", []),
    ("gemini-cli", "user", ".gemini/settings.json", []),
    ("codex", "project", ".codex/config.toml", []),
    ("codex", "user", ".codex/config.toml", []),
]
THEIRS_JSON = (
    json.dumps({"theme": "dark", "mcpServers": {"github": {"command": "gh-mcp", "args": ["-v"]}}}, indent=4) + "\n"
)
THEIRS_TOML = '# my settings\nmodel = "o4"\n\n[mcp_servers.github]\ncommand = "gh-mcp"\nargs = []\n'


def _env(tmp_path: Path) -> dict[str, str]:
    return {"HOME": str(tmp_path / "user")}


def _read(path: str) -> dict[str, Any]:
    with open(path, "rb") as fh:
        data = fh.read()
    parsed = tomllib.loads(data.decode()) if path.endswith(".toml") else json.loads(data)
    assert isinstance(parsed, dict)
    return parsed


def _servers(path: str, container: list[str], project: str) -> dict[str, Any]:
    node: Any = _read(path)
    for key in container:
        node = node[project if key == "<project>" else key]
    servers = node["mcp_servers" if path.endswith(".toml") else "mcpServers"]
    assert isinstance(servers, dict)
    return servers


@pytest.mark.parametrize(("client", "scope", "where", "container"), CASES)
def test_install_then_uninstall_gives_back_the_file(
    tmp_path: Path, client: str, scope: str, where: str, container: list[str]
) -> None:
    project = tmp_path / "project"
    project.mkdir()
    env = _env(tmp_path)
    path = mcp_path(client, scope, project_dir=str(project), env=env)
    base = project if scope == "project" else tmp_path / "user"
    assert path == str(base / where)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    theirs = THEIRS_TOML if path.endswith(".toml") else THEIRS_JSON
    Path(path).write_text(theirs)

    dry = install_mcp(client, scope, project_dir=str(project), env=env, dry_run=True)
    assert dry.changed and Path(path).read_text() == theirs  # a dry run writes nothing
    result = install_mcp(client, scope, project_dir=str(project), env=env, agent="zero")
    assert result.changed and result.action == "added" and not result.created
    servers = _servers(path, container, str(project))
    assert set(servers) == ({"phoenix"} if container else {"github", "phoenix"})  # local: the project's own
    entry = servers["phoenix"]
    if scope == "project":
        assert (entry["command"], entry["args"]) == ("phx", ["mcp", "--agent", "zero"])
    else:
        assert (entry["command"], entry["args"]) == (
            sys.executable,
            ["-m", "phoenix_protocol", "mcp", "--agent", "zero"],
        )
    assert is_phoenix_server(entry)
    assert not install_mcp(client, scope, project_dir=str(project), env=env, agent="zero").changed  # idempotent
    again = install_mcp(client, scope, project_dir=str(project), env=env)  # another agent: replaced in place
    assert again.action == "updated" and "--agent" not in _servers(path, container, str(project))["phoenix"]["args"]
    if not path.endswith(".toml"):
        assert Path(path).read_text().startswith('{\n    "theme"')  # the file's indentation kept

    gone = uninstall_mcp(client, scope, project_dir=str(project), env=env)
    assert gone.changed and gone.action == "removed" and not gone.removed
    assert Path(path).read_text() == theirs  # the user's settings, byte for byte
    assert not uninstall_mcp(client, scope, project_dir=str(project), env=env).changed


@pytest.mark.parametrize(("client", "scope", "where", "container"), CASES)
def test_a_file_install_created_is_removed(
    tmp_path: Path, client: str, scope: str, where: str, container: list[str]
) -> None:
    project = tmp_path / "project"
    project.mkdir()
    env = _env(tmp_path)
    (tmp_path / "user").mkdir()
    result = install_mcp(client, scope, project_dir=str(project), env=env)
    assert result.created and os.path.isfile(result.path)
    assert _servers(result.path, container, str(project))["phoenix"]["command"]
    gone = uninstall_mcp(client, scope, project_dir=str(project), env=env)
    assert gone.removed and not os.path.exists(result.path)
    assert project.is_dir() and (tmp_path / "user").is_dir()  # never a project's root or a home
    assert sorted(os.listdir(project)) == [] and sorted(os.listdir(tmp_path / "user")) == []


@pytest.mark.parametrize("client", ["claude-code", "gemini-cli", "codex"])
def test_someone_elses_phoenix_server_is_refused(tmp_path: Path, client: str) -> None:
    env = _env(tmp_path)
    path = mcp_path(client, "user", env=env)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    text = (
        '[mcp_servers.phoenix]\ncommand = "node"\nargs = ["their-phoenix.js"]\n'
        if path.endswith(".toml")
        else '{"mcpServers": {"phoenix": {"command": "node", "args": ["their-phoenix.js"]}}}'
    )
    Path(path).write_text(text)
    for change in (install_mcp, uninstall_mcp):
        with pytest.raises(UsageError, match="not Phoenix's"):
            change(client, "user", env=env)
    assert Path(path).read_text() == text


def test_the_portable_entry_names_no_interpreter(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="names no interpreter"):
        install_mcp("gemini-cli", "project", project_dir=str(tmp_path), python="/usr/bin/python3")
    with pytest.raises(UsageError, match="scope must be one of"):
        install_mcp("gemini-cli", "local", project_dir=str(tmp_path))


def test_cli_install_and_uninstall_mcp_json(tmp_path: Path) -> None:
    src = str(Path(__file__).resolve().parents[2] / "src")
    env = {**os.environ, "HOME": str(tmp_path / "user"), "PYTHONPATH": src}
    project = tmp_path / "project"
    project.mkdir()

    def phx(*args: str) -> dict[str, Any]:
        done = subprocess.run(
            [sys.executable, "-m", "phoenix_protocol", *args, "--project-dir", str(project), "--json"],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        answer: dict[str, Any] = json.loads(done.stdout)
        return answer

    installed = phx("install", "gemini-cli", "--mcp")
    assert installed["ok"] and installed["action"] == "added" and installed["servers"]["phoenix"]["command"] == "phx"
    assert _read(str(project / ".gemini" / "settings.json")) == {
        "mcpServers": {"phoenix": {"command": "phx", "args": ["mcp"]}}
    }
    refused = phx("install", "gemini-cli", "--mcp", "--trust")
    assert not refused["ok"]
    removed = phx("uninstall", "gemini-cli", "--mcp")
    assert removed["ok"] and removed["removed"] and not (project / ".gemini").exists()
