"""Phoenix's Claude Code plugin and this repository's marketplace entry: the manifests hold what
Claude Code requires and the package's version, the hooks are the shared command of every event
``phx install`` registers, nothing in them names a machine path; the plugin's hook stands aside for
Phoenix's command in any settings file (so no event runs twice) and ``phx doctor`` sees the plugin.
Claude Code itself validates, installs and runs the plugin in tests/e2e/test_claude_code_plugin.py."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import jsonschema
import pytest

import phoenix_protocol
from phoenix_protocol.integrations._install import (
    HOOK_SPECS,
    check_installed,
    hook_command,
    install_claude_code,
    install_dir,
    portable_command,
    settings_path,
    uninstall_claude_code,
)
from phoenix_protocol.integrations._plugin import (
    MARKETPLACE_NAME,
    PLUGIN_DIR,
    PLUGIN_NAME,
    PLUGIN_VERSION,
    enabled_plugin,
    plugin_hooks,
)
from phoenix_protocol.integrations._portable import machine_registration, plugin_root

REPO = Path(__file__).parents[2]
MARKETPLACE = REPO / ".claude-plugin" / "marketplace.json"
PLUGIN = REPO / PLUGIN_DIR
SCHEMA = REPO / "tests" / "data" / "claude-code-settings.schema.json"  # SchemaStore's (SCHEMA-SOURCES.md)
KEBAB = re.compile(r"^[a-z0-9]+(?:-[a-z0-9]+)*$")


def _json(path: Path) -> Any:
    return json.loads(path.read_text(encoding="utf-8"))


# -- the manifests ---------------------------------------------------------------------------


def test_the_marketplace_lists_the_plugin_with_the_fields_claude_code_requires() -> None:
    market = _json(MARKETPLACE)
    assert market["name"] == MARKETPLACE_NAME and KEBAB.match(market["name"])
    assert isinstance(market["owner"], dict) and market["owner"]["name"]
    assert isinstance(market.get("description"), str) and market["description"]
    [entry] = market["plugins"]
    assert entry["name"] == PLUGIN_NAME and KEBAB.match(entry["name"])
    # A relative source starts with ./ and resolves inside the marketplace's folder.
    assert entry["source"] == "./" + PLUGIN_DIR
    assert (REPO / entry["source"]).resolve() == PLUGIN.resolve()
    assert (PLUGIN / ".claude-plugin" / "plugin.json").is_file()


def test_the_plugin_manifest_names_the_plugin() -> None:
    manifest = _json(PLUGIN / ".claude-plugin" / "plugin.json")
    assert manifest["name"] == PLUGIN_NAME
    assert isinstance(manifest["description"], str) and manifest["description"]
    assert manifest["license"] == "MIT"
    # hooks/hooks.json is loaded by convention: naming it again in "hooks" loads it twice.
    assert "hooks" not in manifest
    # The manifest folder holds the manifest only; the parts sit at the plugin's root.
    assert sorted(p.name for p in (PLUGIN / ".claude-plugin").iterdir()) == ["plugin.json"]


def test_the_plugin_version_is_the_package_version() -> None:
    """A release bumps ``_version.py``: this fails until the plugin's manifests say the same
    (Claude Code keys its plugin cache and updates by this version)."""
    assert phoenix_protocol.__version__ == PLUGIN_VERSION
    assert _json(PLUGIN / ".claude-plugin" / "plugin.json")["version"] == phoenix_protocol.__version__
    [entry] = _json(MARKETPLACE)["plugins"]
    assert entry["version"] == phoenix_protocol.__version__


def test_the_plugin_hooks_are_the_shared_command_of_every_event_phx_install_registers() -> None:
    hooks = _json(PLUGIN / "hooks" / "hooks.json")
    assert hooks == plugin_hooks(), (
        "plugins/phoenix/hooks/hooks.json is not what this Phoenix registers; write it again with\n"
        "python -c 'import json; from phoenix_protocol.integrations._plugin import plugin_hooks; "
        "print(json.dumps(plugin_hooks(), indent=2))' > plugins/phoenix/hooks/hooks.json"
    )
    assert list(hooks["hooks"]) == [claude_event for claude_event, _, _, _ in HOOK_SPECS]
    for claude_event, event, timeout, matcher in HOOK_SPECS:
        [group] = hooks["hooks"][claude_event]
        assert group.get("matcher") == matcher
        assert group["hooks"] == [{"type": "command", "command": portable_command(event), "timeout": timeout}]


def test_the_plugin_hooks_validate_against_the_settings_schemas_hooks() -> None:
    """A plugin's hooks.json holds ``hooks`` as settings do (plus a description): the settings
    schema's definition of ``hooks`` applies to it."""
    hooks = _json(PLUGIN / "hooks" / "hooks.json")
    assert set(hooks) == {"description", "hooks"}
    jsonschema.Draft7Validator(_json(SCHEMA)).validate({"hooks": hooks["hooks"]})
    bad = {"hooks": {"PostToolUse": [{"matcher": "*", "hooks": [{"type": "command"}]}]}}  # no command
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.Draft7Validator(_json(SCHEMA)).validate(bad)


def test_nothing_in_the_plugin_or_the_marketplace_names_a_machine_path() -> None:
    files = [MARKETPLACE, *(p for p in PLUGIN.rglob("*") if p.is_file())]
    assert len(files) >= 3
    machine = [sys.executable, install_dir(), str(REPO), os.path.expanduser("~"), "/home/", "/root", "/tmp", "/usr/"]
    for path in files:
        text = path.read_text(encoding="utf-8")
        for found in machine:
            assert found not in text, f"{path} names {found}"


# -- standing aside --------------------------------------------------------------------------


def _with_phx() -> str:
    bindir = os.path.dirname(sys.executable)
    assert os.path.isfile(os.path.join(bindir, "phx"))
    return bindir + os.pathsep + _without_phx()


def _without_phx() -> str:
    path = os.pathsep.join(d for d in ("/usr/local/bin", "/usr/bin", "/bin") if not shutil.which("phx", path=d))
    assert shutil.which("phx", path=path) is None
    return path


def _plugin_command(claude_event: str) -> str:
    [group] = plugin_hooks()["hooks"][claude_event]
    command = group["hooks"][0]["command"]
    assert isinstance(command, str)
    return command


def _run(command: str, project: Path, *, plugin: Path | None = PLUGIN, path: str | None = None) -> Any:
    """Run ``command`` with ``/bin/sh -c`` as Claude Code runs a hook: the plugin's (``plugin``:
    ``CLAUDE_PLUGIN_ROOT`` set, as Claude Code sets it for a plugin's hooks only) or a settings
    file's (``plugin=None``)."""
    env = {k: v for k, v in os.environ.items() if k != "PATH"}
    env.update({"PATH": path or _with_phx(), "CLAUDE_PROJECT_DIR": str(project)})
    if plugin is not None:
        env["CLAUDE_PLUGIN_ROOT"] = str(plugin)
    payload = {"session_id": "s", "cwd": str(project), "tool_name": "Bash", "tool_input": {}, "tool_response": {}}
    return subprocess.run(
        ["/bin/sh", "-c", command],
        input=json.dumps(payload).encode(),
        capture_output=True,
        cwd=project,
        env=env,
        check=False,
        timeout=60,
    )


def _heartbeats(project: Path, agent: str = "default") -> int:
    state = project / ".phoenix" / "agents" / agent / "state.json"
    return int(json.loads(state.read_text())["heartbeat_seq"]) if state.exists() else 0


def test_the_plugin_hook_runs_phx_where_no_settings_file_registers_phoenix(project: Path) -> None:
    proc = _run(_plugin_command("PostToolUse"), project)
    assert (proc.returncode, proc.stdout, proc.stderr) == (0, b"", b"")
    assert _heartbeats(project) == 1


def test_the_plugin_hook_is_silent_where_phoenix_is_not_installed(project: Path) -> None:
    for claude_event, _event, _timeout, _matcher in HOOK_SPECS:
        proc = _run(_plugin_command(claude_event), project, path=_without_phx())
        assert (proc.returncode, proc.stdout, proc.stderr) == (0, b"", b""), claude_event
    assert not (project / ".phoenix").exists()


@pytest.mark.parametrize("scope", ["project", "local", "user"])
def test_the_plugin_hook_stands_aside_for_phoenix_in_any_settings_file(project: Path, scope: str) -> None:
    """Claude Code runs a plugin's hooks beside every settings file's, the very same command too
    (seen with 2.1.330): with Phoenix registered in a settings file, the plugin's hook does
    nothing and that file's command does the work, once."""
    install_claude_code(scope, project_dir=str(project))
    proc = _run(_plugin_command("PostToolUse"), project)
    assert (proc.returncode, proc.stdout, proc.stderr) == (0, b"", b"")
    assert _heartbeats(project) == 0
    settings_command = portable_command("post-tool-use") if scope == "project" else hook_command("post-tool-use")
    proc = _run(settings_command, project, plugin=None)
    assert (proc.returncode, proc.stderr) == (0, b"")
    assert _heartbeats(project) == 1
    uninstall_claude_code(scope, project_dir=str(project))
    proc = _run(_plugin_command("PostToolUse"), project)
    assert (proc.returncode, proc.stderr) == (0, b"")
    assert _heartbeats(project) == 2


def test_the_plugin_hook_stands_aside_only_for_its_own_event(project: Path) -> None:
    shared = Path(settings_path("project", project_dir=str(project)))
    shared.parent.mkdir()
    stop_only = {"hooks": {"Stop": [{"hooks": [{"type": "command", "command": portable_command("stop")}]}]}}
    shared.write_text(json.dumps(stop_only))
    assert machine_registration("Stop", {**os.environ, "CLAUDE_PLUGIN_ROOT": str(PLUGIN)}, str(project)) == str(shared)
    proc = _run(_plugin_command("PostToolUse"), project)
    assert (proc.returncode, proc.stderr) == (0, b"")
    assert _heartbeats(project) == 1


def test_the_settings_shared_command_never_stands_aside_for_itself(project: Path, tmp_path: Path) -> None:
    """``CLAUDE_PLUGIN_ROOT`` reaches a settings file's hook only when Claude Code itself inherited
    it (say, started by another plugin's process): naming a plugin that is not Phoenix's, it does
    not make the project's shared command take itself for the plugin and do nothing."""
    install_claude_code("project", project_dir=str(project))
    other = tmp_path / "other-plugin"
    (other / "hooks").mkdir(parents=True)
    (other / "hooks" / "hooks.json").write_text(
        '{"hooks": {"Stop": [{"hooks": [{"type": "command", "command": "x"}]}]}}'
    )
    for root in (other, tmp_path / "gone"):
        assert plugin_root({"CLAUDE_PLUGIN_ROOT": str(root)}) is None
        proc = _run(portable_command("post-tool-use"), project, plugin=root)
        assert (proc.returncode, proc.stderr) == (0, b"")
    assert _heartbeats(project) == 2
    assert plugin_root({"CLAUDE_PLUGIN_ROOT": str(PLUGIN)}) == str(PLUGIN)
    assert plugin_root({}) is None


# -- where it is enabled; phx doctor ----------------------------------------------------------


def test_enabled_plugin_reads_the_most_specific_scope() -> None:
    on = {"enabledPlugins": {f"{PLUGIN_NAME}@{MARKETPLACE_NAME}": True}}
    off = {"enabledPlugins": {f"{PLUGIN_NAME}@{MARKETPLACE_NAME}": False}}
    assert enabled_plugin({}) is None
    assert enabled_plugin({"user": on}) == ("user", f"{PLUGIN_NAME}@{MARKETPLACE_NAME}")
    assert enabled_plugin({"user": on, "local": off}) is None
    assert enabled_plugin({"user": off, "project": on}) == ("project", f"{PLUGIN_NAME}@{MARKETPLACE_NAME}")
    assert enabled_plugin({"user": {"enabledPlugins": {"phoenix@a-fork": ["0.2.0"]}}}) == ("user", "phoenix@a-fork")
    assert enabled_plugin({"user": {"enabledPlugins": {"phoenixish@x": True, "other@x": True}}}) is None
    assert enabled_plugin({"user": {"enabledPlugins": ["phoenix@x"]}}) is None


def _enable_plugin(path: str) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="utf-8") as fh:
        json.dump({"enabledPlugins": {f"{PLUGIN_NAME}@{MARKETPLACE_NAME}": True}}, fh)


def test_doctor_names_an_enabled_plugin_whose_phx_is_not_on_path(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    user = settings_path("user")
    _enable_plugin(user)
    monkeypatch.setenv("PATH", _without_phx())
    [(scope, path, problem)] = check_installed(project_dir=str(project))
    assert (scope, path) == ("user", user)
    assert f"plugin {PLUGIN_NAME}@{MARKETPLACE_NAME}" in problem and "PATH" in problem
    # This machine's command for every event: the plugin stands aside for it, nothing is missing.
    install_claude_code("local", project_dir=str(project))
    assert check_installed(project_dir=str(project)) == []
    uninstall_claude_code("local", project_dir=str(project))
    monkeypatch.setenv("PATH", _with_phx())
    assert check_installed(project_dir=str(project)) == []


def test_doctor_finds_nothing_wrong_with_the_plugin_beside_phoenixs_settings(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The plugin's hooks stand aside for the settings' own: nothing runs twice, nothing to report."""
    monkeypatch.setenv("PATH", _with_phx())
    _enable_plugin(settings_path("local", project_dir=str(project)))
    for scope in ("project", "user"):
        install_claude_code(scope, project_dir=str(project))
    assert check_installed(project_dir=str(project)) == []
