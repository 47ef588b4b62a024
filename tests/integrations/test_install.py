"""phx install / uninstall claude-code: merge, idempotence, preservation, schema, the portable command
of the shared settings, byte-identical round trips."""

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
from conftest import git
from phoenix_protocol.core._errors import UsageError
from phoenix_protocol.integrations._install import (
    HOOK_SPECS,
    MARKER,
    hook_command,
    install_claude_code,
    install_dir,
    portable_command,
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
        assert entries == [{"type": "command", "command": portable_command(event), "timeout": timeout}]
    assert settings["hooks"]["PostToolUse"][0]["hooks"][0]["timeout"] == 5
    # The shared file names nothing of this machine: no interpreter, no directory, no home.
    text = Path(result.path).read_text()
    for machine_specific in (sys.executable, install_dir(), os.environ["HOME"], str(project)):
        assert machine_specific not in text
    assert result.created and result.kind == "portable" and result.scope == "project"


def test_local_and_user_scopes_get_this_machines_fast_command(project: Path) -> None:
    for scope in ("local", "user"):
        result = install_claude_code(scope, project_dir=str(project))
        settings = json.loads(Path(result.path).read_text())
        _validate(settings)
        assert result.kind == "machine"
        for claude_event, event, timeout, _matcher in HOOK_SPECS:
            entries = [h for g in settings["hooks"][claude_event] for h in g["hooks"]]
            assert entries == [{"type": "command", "command": hook_command(event), "timeout": timeout}]


def test_install_preserves_everything_else_and_is_idempotent(project: Path) -> None:
    path = project / ".claude" / "settings.json"
    path.parent.mkdir()
    path.write_text(json.dumps(EXISTING, indent=2))
    first = install_claude_code("project", project_dir=str(project))
    assert first.changed and not first.created
    assert os.listdir(path.parent) == ["settings.json"]  # no backup beside it
    after_first = path.read_bytes()
    settings = json.loads(after_first)
    _validate(settings)
    assert settings["model"] == "opus" and settings["permissions"] == EXISTING["permissions"]
    assert settings["hooks"]["Notification"] == EXISTING["hooks"]["Notification"]
    assert settings["hooks"]["PostToolUse"][0] == EXISTING["hooks"]["PostToolUse"][0]
    second = install_claude_code("project", project_dir=str(project))
    assert not second.changed
    assert path.read_bytes() == after_first


def test_uninstall_removes_exactly_what_was_added(project: Path) -> None:
    path = project / ".claude" / "settings.json"
    path.parent.mkdir()
    path.write_text(json.dumps(EXISTING))
    install_claude_code("project", project_dir=str(project))
    result = uninstall_claude_code("project", project_dir=str(project))
    assert result.changed and not result.removed
    assert path.read_text() == json.dumps(EXISTING)
    assert not uninstall_claude_code("project", project_dir=str(project)).changed


@pytest.mark.parametrize("scope", ["project", "local", "user"])
def test_uninstall_of_a_fresh_install_leaves_no_file_behind(project: Path, scope: str) -> None:
    """A settings file install created is removed when uninstall leaves it holding nothing, with
    the ``.claude`` folder it created: no ``{}`` where there was no file."""
    installed = install_claude_code(scope, project_dir=str(project))
    assert installed.created and os.path.isfile(installed.path)
    removed = uninstall_claude_code(scope, project_dir=str(project))
    assert removed.changed and removed.removed and removed.path == installed.path
    assert not os.path.exists(installed.path) and not os.path.exists(os.path.dirname(installed.path))
    assert git(project, "status", "--porcelain") == ""


def test_uninstall_keeps_a_folder_that_holds_other_files(project: Path) -> None:
    (project / ".claude").mkdir()
    (project / ".claude" / "agents.md").write_text("mine\n")
    install_claude_code("project", project_dir=str(project))
    uninstall_claude_code("project", project_dir=str(project))
    assert os.listdir(project / ".claude") == ["agents.md"]


def test_dry_run_of_uninstall_changes_nothing(project: Path) -> None:
    installed = install_claude_code("local", project_dir=str(project))
    before = Path(installed.path).read_bytes()
    result = uninstall_claude_code("local", project_dir=str(project), dry_run=True)
    assert result.changed and result.removed and result.settings == {}
    assert Path(installed.path).read_bytes() == before


def test_an_older_phoenix_entry_is_updated_in_place(project: Path) -> None:
    install_claude_code("local", project_dir=str(project), python="/old/venv/bin/python")
    result = install_claude_code("local", project_dir=str(project))
    assert result.changed and all(a.startswith("updated") for a in result.actions)
    settings = json.loads(Path(result.path).read_text())
    commands = [h["command"] for groups in settings["hooks"].values() for g in groups for h in g["hooks"]]
    assert len(commands) == len(HOOK_SPECS)
    assert not any("/old/venv" in c for c in commands)


def test_a_machine_specific_command_in_the_shared_file_becomes_the_portable_one(project: Path) -> None:
    """An earlier Phoenix wrote this machine's interpreter into .claude/settings.json: install
    replaces each entry in place with the portable command (nothing added beside them)."""
    path = project / ".claude" / "settings.json"
    path.parent.mkdir()
    path.write_text(json.dumps(EXISTING, indent=4) + "\n")
    install_claude_code("project", project_dir=str(project), portable=False)
    assert MARKER in path.read_text()
    result = install_claude_code("project", project_dir=str(project))
    assert result.changed and sorted(result.actions) == sorted(f"updated {e}" for e, _, _, _ in HOOK_SPECS)
    settings = json.loads(path.read_text())
    ours = [
        h["command"]
        for groups in settings["hooks"].values()
        for g in groups
        for h in g["hooks"]
        if "phx" in h["command"] or MARKER in h["command"]
    ]
    assert sorted(ours) == sorted(portable_command(event) for _, event, _, _ in HOOK_SPECS)
    uninstall_claude_code("project", project_dir=str(project))
    assert path.read_text() == json.dumps(EXISTING, indent=4) + "\n"


def test_the_portable_command_takes_no_interpreter(project: Path) -> None:
    with pytest.raises(UsageError, match="names no interpreter"):
        install_claude_code("project", project_dir=str(project), python="/usr/bin/python3")


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
    # Claude Code reads the user's settings from $CLAUDE_CONFIG_DIR when that is set (seen in
    # 2.1.330: a hook there ran, the one in ~/.claude/settings.json did not).
    env["CLAUDE_CONFIG_DIR"] = str(tmp_path / "config")
    assert settings_path("user", env=env) == str(tmp_path / "config/settings.json")
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
    install_claude_code("local", project_dir=str(project))
    path = project / ".claude" / "settings.local.json"
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
    result = install_claude_code("local", project_dir=str(project))
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


# -- round trips: install then uninstall gives back the very bytes --------------------------------

_LAYOUTS = {
    "two spaces": json.dumps(EXISTING, indent=2) + "\n",
    "four spaces, no final newline": json.dumps(EXISTING, indent=4),
    "tabs": json.dumps(EXISTING, indent="\t") + "\n",
    "one line": json.dumps(EXISTING) + "\n",
    "minified": json.dumps(EXISTING, separators=(",", ":")),
    "lines without indent": json.dumps(EXISTING, indent=0) + "\n",
    "CRLF": (json.dumps(EXISTING, indent=2) + "\n").replace("\n", "\r\n"),
    "non-ASCII as itself": json.dumps({"model": "opus", "note": "café ✓ 日本"}, indent=2, ensure_ascii=False) + "\n",
    "non-ASCII escaped": json.dumps({"note": "café ✓", "tab": "a\tb"}, indent=2) + "\n",
    "escaped controls only": json.dumps({"note": "a\u0001b"}, indent=2) + "\n",
    "keys out of order": '{\n  "hooks": {},\n  "zeta": 1,\n  "alpha": [1, 2]\n}\n'.replace(
        "[1, 2]", "[\n    1,\n    2\n  ]"
    ),
    "strings holding separators": json.dumps({"a": '": x, y', "b": ['k":v', ", "]}, separators=(",", ":")),
    "byte-order mark": "\ufeff" + json.dumps(EXISTING, indent=2) + "\n",
    "no hooks key": json.dumps({"model": "opus", "env": {"A": "1"}}, indent=2) + "\n",
}


@pytest.mark.parametrize("scope", ["project", "local"])
@pytest.mark.parametrize("layout", list(_LAYOUTS))
def test_install_then_uninstall_is_byte_identical(project: Path, layout: str, scope: str) -> None:
    original = _LAYOUTS[layout]
    if layout == "keys out of order":  # an empty "hooks" is dropped with our last entry: not this test's
        original = original.replace('  "hooks": {},\n', "")
    path = Path(settings_path(scope, project_dir=str(project)))
    path.parent.mkdir()
    path.write_bytes(original.encode("utf-8"))
    os.chmod(path, 0o640)
    installed = install_claude_code(scope, project_dir=str(project))
    assert installed.changed
    written = path.read_bytes()
    # The install kept the layout too: re-indented the same way, the user's keys first and in order.
    data = json.loads(written.decode("utf-8-sig"))
    assert list(data)[: len(json.loads(original.lstrip("\ufeff")))] == list(json.loads(original.lstrip("\ufeff")))
    assert written.endswith(b"\n") == original.endswith("\n")
    assert (b"\r\n" in written) == ("\r\n" in original)
    assert uninstall_claude_code(scope, project_dir=str(project)).changed
    assert path.read_bytes() == original.encode("utf-8"), layout
    assert oct(os.stat(path).st_mode & 0o777) == oct(0o640)
    assert sorted(os.listdir(path.parent)) == [path.name]


def test_install_keeps_the_indentation_of_the_file(project: Path) -> None:
    path = project / ".claude" / "settings.json"
    path.parent.mkdir()
    path.write_text(json.dumps(EXISTING, indent=4) + "\n")
    install_claude_code("project", project_dir=str(project))
    settings = json.loads(path.read_text())
    assert path.read_text() == json.dumps(settings, indent=4) + "\n"


# -- the portable command as Claude Code runs it: /bin/sh -c, stdin the payload --------------------


def _run(
    command: str, project: Path, path: str, payload: dict[str, Any] | None = None, env: dict[str, str] | None = None
) -> Any:
    body = payload or {
        "session_id": "s",
        "cwd": str(project),
        "tool_name": "Bash",
        "tool_input": {},
        "tool_response": {},
    }
    environ = {k: v for k, v in os.environ.items() if k != "PATH"}
    return subprocess.run(
        ["/bin/sh", "-c", command],
        input=json.dumps(body).encode(),
        capture_output=True,
        cwd=project,
        env={**environ, "PATH": path, "CLAUDE_PROJECT_DIR": str(project), **(env or {})},
        check=False,
        timeout=60,
    )


def _without_phx() -> str:
    """A PATH with the system's tools and no ``phx``."""
    import shutil

    path = os.pathsep.join(d for d in ("/usr/local/bin", "/usr/bin", "/bin") if not shutil.which("phx", path=d))
    assert shutil.which("phx", path=path) is None
    return path


def _with_phx() -> str:
    """A PATH whose ``phx`` is this environment's (it runs the code under test: PYTHONPATH is inherited)."""
    bindir = os.path.dirname(sys.executable)
    assert os.path.isfile(os.path.join(bindir, "phx"))
    return bindir + os.pathsep + _without_phx()


def _heartbeats(project: Path, agent: str = "default") -> int:
    state = project / ".phoenix" / "agents" / agent / "state.json"
    return int(json.loads(state.read_text())["heartbeat_seq"]) if state.exists() else 0


def test_the_portable_command_is_silent_where_phoenix_is_not_installed(project: Path) -> None:
    install_claude_code("project", project_dir=str(project))
    for _claude_event, event, _timeout, _matcher in HOOK_SPECS:
        proc = _run(portable_command(event), project, _without_phx())
        assert (proc.returncode, proc.stdout, proc.stderr) == (0, b"", b""), event
    assert not (project / ".phoenix").exists()


def test_the_portable_command_runs_phx_from_path(project: Path) -> None:
    proc = _run(portable_command("post-tool-use"), project, _with_phx())
    assert (proc.returncode, proc.stderr) == (0, b"")
    assert _heartbeats(project) == 1
    proc = _run(portable_command("post-tool-use", agent="zero"), project, _with_phx())
    assert (proc.returncode, proc.stderr) == (0, b"")
    assert _heartbeats(project, "zero") == 1


@pytest.mark.parametrize("where", ["local", "user", "config dir"])
def test_the_portable_command_stands_aside_for_this_machines_command(project: Path, tmp_path: Path, where: str) -> None:
    """Claude Code runs the hooks of every settings file: with the fast command registered in
    local or user scope too, the shared one does nothing, so that no event is handled twice."""
    env = {"HOME": os.environ["HOME"]}
    if where == "config dir":
        env["CLAUDE_CONFIG_DIR"] = str(tmp_path / "claude-config")
    install_claude_code("project", project_dir=str(project))
    install_claude_code("local" if where == "local" else "user", project_dir=str(project), env=env)
    shared = portable_command("post-tool-use")
    big = {
        "session_id": "s",
        "cwd": str(project),
        "tool_name": "Bash",
        "tool_input": {},
        "tool_response": {"stdout": "x" * 3_000_000},
    }
    proc = _run(shared, project, _with_phx(), big, env)
    assert (proc.returncode, proc.stdout, proc.stderr) == (0, b"", b"")  # stdin read to its end: no broken pipe
    assert _heartbeats(project) == 0
    fast = hook_command("post-tool-use")
    proc = _run(fast, project, _without_phx(), env=env)
    assert (proc.returncode, proc.stderr) == (0, b"")
    assert _heartbeats(project) == 1
    # Only for the events the fast command is registered for; and not once it is gone.
    uninstall_claude_code("local" if where == "local" else "user", project_dir=str(project), env=env)
    proc = _run(shared, project, _with_phx(), env=env)
    assert (proc.returncode, proc.stderr) == (0, b"")
    assert _heartbeats(project) == 2


def test_the_portable_command_does_not_stand_aside_for_another_event(project: Path) -> None:
    install_claude_code("project", project_dir=str(project))
    local = Path(settings_path("local", project_dir=str(project)))
    local.parent.mkdir(exist_ok=True)
    local.write_text(
        json.dumps({"hooks": {"Stop": [{"hooks": [{"type": "command", "command": hook_command("stop")}]}]}})
    )
    proc = _run(portable_command("post-tool-use"), project, _with_phx())
    assert (proc.returncode, proc.stderr) == (0, b"")
    assert _heartbeats(project) == 1
    local.write_text("{ not json " + MARKER)  # Claude Code runs nothing from a file it cannot read
    proc = _run(portable_command("post-tool-use"), project, _with_phx())
    assert (proc.returncode, proc.stderr) == (0, b"")
    assert _heartbeats(project) == 2


def test_an_older_phx_ignores_the_shared_flag(project: Path) -> None:
    """A teammate's older Phoenix on PATH gets ``--shared`` after the event: its hook ignores
    what follows the event, and runs."""
    from phoenix_protocol.integrations._hooks import run

    payload = json.dumps(
        {"session_id": "s", "cwd": str(project), "tool_name": "Bash", "tool_input": {}, "tool_response": {}}
    )
    assert run(["post-tool-use", "--shared"], payload.encode()) == (0, "", "")
    assert _heartbeats(project) == 1
