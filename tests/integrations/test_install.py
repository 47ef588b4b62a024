"""phx install / uninstall claude-code: merge, idempotence, preservation, schema, backup."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import jsonschema
import pytest

import phoenix_protocol
from phoenix_protocol.core._errors import UsageError
from phoenix_protocol.integrations._install import (
    HOOK_SPECS,
    MARKER,
    hook_command,
    install_claude_code,
    install_dir,
    settings_path,
    uninstall_claude_code,
)

# SchemaStore's Claude Code settings schema, copied unchanged (tests/data/SCHEMA-SOURCES.md).
SCHEMA = Path(__file__).parents[1] / "data" / "claude-code-settings.schema.json"


def _schema() -> dict[str, Any]:
    return json.loads(SCHEMA.read_text())  # type: ignore[no-any-return]


def _validate(settings: dict[str, Any]) -> None:
    jsonschema.Draft7Validator(_schema()).validate(settings)


EXISTING: dict[str, Any] = {
    "model": "opus",
    "permissions": {"allow": ["Bash(npm run test:*)"]},
    "hooks": {
        "PostToolUse": [
            {"matcher": "Edit|Write", "hooks": [{"type": "command", "command": "prettier --write", "timeout": 5}]}
        ],
        "Notification": [{"hooks": [{"type": "command", "command": "notify-send claude"}]}],
    },
}


def test_install_into_a_new_project_validates_against_the_schema(project: Path) -> None:
    result = install_claude_code("project", project_dir=str(project))
    assert result.path == str(project / ".claude" / "settings.json")
    settings = json.loads(Path(result.path).read_text())
    _validate(settings)
    for claude_event, event, timeout, _matcher in HOOK_SPECS:
        entries = [h for g in settings["hooks"][claude_event] for h in g["hooks"]]
        assert entries == [{"type": "command", "command": hook_command(event), "timeout": timeout}]
    assert settings["hooks"]["PostToolUse"][0]["hooks"][0]["timeout"] == 5


def test_install_preserves_everything_else_and_is_idempotent(project: Path) -> None:
    path = project / ".claude" / "settings.json"
    path.parent.mkdir()
    path.write_text(json.dumps(EXISTING, indent=2))
    first = install_claude_code("project", project_dir=str(project))
    assert first.changed and first.backup and Path(first.backup).read_text() == json.dumps(EXISTING, indent=2)
    after_first = path.read_bytes()
    settings = json.loads(after_first)
    _validate(settings)
    assert settings["model"] == "opus" and settings["permissions"] == EXISTING["permissions"]
    assert settings["hooks"]["Notification"] == EXISTING["hooks"]["Notification"]
    assert settings["hooks"]["PostToolUse"][0] == EXISTING["hooks"]["PostToolUse"][0]
    second = install_claude_code("project", project_dir=str(project))
    assert not second.changed and second.backup is None
    assert path.read_bytes() == after_first


def test_uninstall_removes_exactly_what_was_added(project: Path) -> None:
    path = project / ".claude" / "settings.json"
    path.parent.mkdir()
    path.write_text(json.dumps(EXISTING))
    install_claude_code("project", project_dir=str(project))
    result = uninstall_claude_code("project", project_dir=str(project))
    assert result.changed
    assert json.loads(path.read_text()) == EXISTING
    assert not uninstall_claude_code("project", project_dir=str(project)).changed


def test_uninstall_of_a_fresh_install_leaves_no_hooks_key(project: Path) -> None:
    install_claude_code("local", project_dir=str(project))
    uninstall_claude_code("local", project_dir=str(project))
    assert json.loads((project / ".claude" / "settings.local.json").read_text()) == {}


def test_an_older_phoenix_entry_is_updated_in_place(project: Path) -> None:
    install_claude_code("project", project_dir=str(project), python="/old/venv/bin/python")
    result = install_claude_code("project", project_dir=str(project))
    assert result.changed and all(a.startswith("updated") for a in result.actions)
    settings = json.loads(Path(result.path).read_text())
    commands = [h["command"] for groups in settings["hooks"].values() for g in groups for h in g["hooks"]]
    assert len(commands) == len(HOOK_SPECS)
    assert not any("/old/venv" in c for c in commands)


def test_dry_run_writes_nothing(project: Path) -> None:
    result = install_claude_code("project", project_dir=str(project), dry_run=True)
    assert result.changed and not os.path.exists(result.path)
    _validate(result.settings)


def test_invalid_settings_are_refused_untouched(project: Path) -> None:
    path = project / ".claude" / "settings.json"
    path.parent.mkdir()
    path.write_text("{ not json")
    with pytest.raises(UsageError, match="not valid JSON"):
        install_claude_code("project", project_dir=str(project))
    assert path.read_text() == "{ not json"


def test_scopes_map_to_claude_code_files(project: Path, tmp_path: Path) -> None:
    env = {"HOME": str(tmp_path / "u")}
    assert settings_path("project", project_dir=str(project)) == str(project / ".claude/settings.json")
    assert settings_path("local", project_dir=str(project)) == str(project / ".claude/settings.local.json")
    assert settings_path("user", env=env) == str(tmp_path / "u/.claude/settings.json")
    with pytest.raises(UsageError):
        settings_path("global")


def test_user_scope_goes_to_the_temporary_home(tmp_path: Path) -> None:
    result = install_claude_code("user")
    assert result.path == os.path.join(os.environ["HOME"], ".claude", "settings.json")
    _validate(json.loads(Path(result.path).read_text()))


def test_hook_commands_installed_by_0_1_0_still_run_and_are_replaced_by_install(project: Path) -> None:
    """0.1.0 wrote ``from phoenix_protocol._hooks import main`` into settings: that command still
    records the work, and ``phx install`` replaces those entries instead of adding its own beside them."""
    legacy_marker = "phoenix_protocol." + "_hooks"  # spelled apart: the path 0.1.0 wrote, not today's
    install_claude_code("project", project_dir=str(project))
    path = project / ".claude" / "settings.json"
    text = path.read_text().replace(MARKER, legacy_marker)
    path.write_text(text)
    old = json.loads(text)
    command = next(h["command"] for g in old["hooks"]["PostToolUse"] for h in g["hooks"])
    assert legacy_marker + " import main" in command
    payload = json.dumps(
        {"session_id": "s", "cwd": str(project), "tool_name": "Bash", "tool_input": {}, "tool_response": {}}
    )
    proc = subprocess.run(
        ["/bin/sh", "-c", command], input=payload.encode(), capture_output=True, cwd=project, check=False
    )
    assert proc.returncode == 0 and proc.stderr == b""
    assert (project / ".phoenix/agents/default/state.json").exists()
    result = install_claude_code("project", project_dir=str(project))
    assert result.changed and all(a.startswith("updated") for a in result.actions)
    settings = json.loads(path.read_text())
    commands = [h["command"] for groups in settings["hooks"].values() for g in groups for h in g["hooks"]]
    assert len(commands) == len(HOOK_SPECS) and all(MARKER in c for c in commands)


def test_the_command_runs_from_any_path(project: Path) -> None:
    """The written command works with an empty PATH, from another directory, via the shell."""
    command = hook_command("post-tool-use", agent="zero")
    assert MARKER in command and shlex.split(command)[0] == os.path.abspath(shlex.split(command)[0])
    payload = json.dumps(
        {"session_id": "s", "cwd": str(project), "tool_name": "Bash", "tool_input": {}, "tool_response": {}}
    )
    proc = subprocess.run(
        ["/bin/sh", "-c", command], input=payload.encode(), capture_output=True, env={"PATH": ""}, cwd="/", check=False
    )
    assert proc.returncode == 0 and proc.stderr == b""
    assert (project / ".phoenix/agents/zero/state.json").exists()


@pytest.mark.parametrize(
    "where", ["/opt/with space/site-packages", "/opt/it's/site-packages", '/opt/"q"\\x/site-packages']
)
def test_the_command_skips_site_and_names_where_phoenix_is(monkeypatch: pytest.MonkeyPatch, where: str) -> None:
    """``python -S``: the site packages are not set up on every heartbeat (about 2 ms); the
    command puts Phoenix's own directory on ``sys.path`` instead, quoted whatever it holds."""
    from phoenix_protocol.integrations import _install

    assert install_dir() == str(Path(phoenix_protocol.__file__).resolve().parent.parent)
    monkeypatch.setattr(_install, "install_dir", lambda: where)
    argv = shlex.split(hook_command("stop", agent="zero"))
    assert argv[0] == sys.executable and argv[1:3] == ["-S", "-P"] and argv[-3:] == ["stop", "--agent", "zero"]
    setup = argv[4].split("; from ")[0]
    scope: dict[str, object] = {}
    exec(setup.replace("import sys; sys.path.append(", "found = ("), scope)  # noqa: S102 - our own literal
    assert scope["found"] == where
    # Another interpreter finds Phoenix as its own start-up does.
    other = shlex.split(hook_command("stop", python="/usr/bin/python3"))
    assert other[:3] == ["/usr/bin/python3", "-P", "-c"] and "sys.path" not in other[3]
