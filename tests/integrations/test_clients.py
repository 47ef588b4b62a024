"""Every agent CLI through one vocabulary (``_clients``): ``phx install gemini-cli|codex`` writes
schema-valid settings in each CLI's files and takes them back byte for byte; ``phx hook … --client``
maps each CLI's events and payloads onto the same handlers; the shared command stands aside for
this machine's per CLI."""

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

from phoenix_protocol.cli._main import cli
from phoenix_protocol.core._errors import UsageError
from phoenix_protocol.integrations._clients import CLAUDE_CODE, CLIENTS, CODEX, GEMINI_CLI, client_named
from phoenix_protocol.integrations._hooks import run
from phoenix_protocol.integrations._install import (
    check_installed,
    hook_command,
    install_hooks,
    portable_command,
    settings_path,
    uninstall_hooks,
)

DATA = Path(__file__).parents[1] / "data"


def _validate(client: str, document: dict[str, Any]) -> None:
    name = {"gemini-cli": "gemini-cli-settings", "codex": "codex-hooks", "claude-code": "claude-code-settings"}[client]
    schema = json.loads((DATA / f"{name}.schema.json").read_text())
    validator = jsonschema.validators.validator_for(schema)
    validator(schema).validate(document)


@pytest.mark.parametrize("client", ["gemini-cli", "codex"])
@pytest.mark.parametrize("scope", ["project", "user"])
def test_install_writes_each_clis_own_file_valid_against_its_schema(project: Path, client: str, scope: str) -> None:
    spec = client_named(client)
    result = install_hooks(client, scope, project_dir=str(project))
    folder = {"gemini-cli": ".gemini", "codex": ".codex"}[client]
    name = {"gemini-cli": "settings.json", "codex": "hooks.json"}[client]
    base = project if scope == "project" else Path(os.environ["HOME"])
    assert result.path == str(base / folder / name)
    document = json.loads(Path(result.path).read_text())
    _validate(client, document)
    assert list(document["hooks"]) == [native for native, _, _, _ in spec.hooks]
    for native, event, timeout, _matcher in spec.hooks:
        (entry,) = document["hooks"][native][0]["hooks"]
        if scope == "project":
            assert entry["command"] == portable_command(event, client=spec)
            assert entry["command"].endswith(f"phx hook {event} --client {client} --shared")
        else:
            assert entry["command"] == hook_command(event, client=spec)
        # Gemini's timeouts are milliseconds and its entries carry a name (shown, fingerprinted for trust).
        assert entry["timeout"] == (timeout * 1000 if client == "gemini-cli" else timeout)
        assert ("name" in entry) is (client == "gemini-cli")
    assert install_hooks(client, scope, project_dir=str(project)).changed is False  # idempotent


@pytest.mark.parametrize("client", ["gemini-cli", "codex"])
def test_install_then_uninstall_gives_back_the_users_file_byte_for_byte(project: Path, client: str) -> None:
    path = Path(settings_path("project", project_dir=str(project), client=client_named(client)))
    path.parent.mkdir()
    theirs: dict[str, Any] = {"hooks": {"SessionStart": [{"hooks": [{"type": "command", "command": "echo hi"}]}]}}
    if client == "gemini-cli":
        theirs = {"general": {"vimMode": True}, "model": {"name": "gemini-2.5-pro"}, **theirs}
    original = (json.dumps(theirs, indent=4) + "\n").encode()
    path.write_bytes(original)
    install_hooks(client, "project", project_dir=str(project))
    merged = json.loads(path.read_text())
    _validate(client, merged)
    assert merged["hooks"]["SessionStart"][0] == theirs["hooks"]["SessionStart"][0]
    assert uninstall_hooks(client, "project", project_dir=str(project)).changed
    assert path.read_bytes() == original


def test_codex_user_scope_follows_codex_home(project: Path, tmp_path: Path) -> None:
    env = {"HOME": os.environ["HOME"], "CODEX_HOME": str(tmp_path / "codex-home")}
    result = install_hooks("codex", "user", env=env)
    assert result.path == str(tmp_path / "codex-home" / "hooks.json")


def test_a_scope_the_cli_does_not_have_is_a_usage_error(project: Path) -> None:
    with pytest.raises(UsageError, match="Gemini CLI: scope must be one of project, user"):
        install_hooks("gemini-cli", "local", project_dir=str(project))
    with pytest.raises(UsageError, match="unknown agent CLI"):
        install_hooks("cursor", "project", project_dir=str(project))
    assert not (project / ".gemini").exists()


def test_the_cli_installs_each_client_and_says_so(project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli(["install", "gemini-cli", "--project-dir", str(project)]) == 0
    out = capsys.readouterr().out
    assert f"created {project / '.gemini' / 'settings.json'}" in out
    assert "phx install gemini-cli --scope user" in out  # this machine's fast command, in the scope Gemini has
    assert cli(["install", "codex", "--project-dir", str(project), "--dry-run", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert (data["client"], data["dry_run"], data["changed"]) == ("codex", True, True)
    assert not (project / ".codex").exists()
    assert cli(["uninstall", "gemini-cli", "--project-dir", str(project)]) == 0
    assert not (project / ".gemini").exists()


def test_every_client_maps_its_events_onto_phoenixs_in_one_table() -> None:
    for client in CLIENTS.values():
        for native, event, _, _ in client.hooks:
            assert client.event_of(native) == event
            assert client.native_event(event) == native
    assert GEMINI_CLI.event_of("AfterTool") == "post-tool-use"
    assert GEMINI_CLI.event_of("AfterAgent") == "stop"
    assert GEMINI_CLI.event_of("PreCompress") == "pre-compact"
    assert CODEX.event_of("PreCompact") == "pre-compact"
    assert CLAUDE_CODE.event_of("BeforeTool") is None


def _state(project: Path) -> dict[str, Any]:
    return json.loads((project / ".phoenix" / "agents" / "default" / "state.json").read_text())  # type: ignore[no-any-return]


def test_a_gemini_after_tool_is_the_heartbeat_with_its_shell_tools_work(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PHOENIX_HOOK_INLINE", "1")
    monkeypatch.setenv("GEMINI_PROJECT_DIR", str(project))
    base = {"session_id": "g-1", "transcript_path": "/tmp/t.jsonl", "cwd": str(project), "timestamp": "x"}
    start = {**base, "hook_event_name": "SessionStart", "source": "startup"}
    code, out, err = run(["SessionStart", "--client", "gemini-cli"], json.dumps(start).encode())
    assert (code, err) == (0, ""), err
    after = {
        **base,
        "hook_event_name": "AfterTool",
        "tool_name": "run_shell_command",
        "tool_input": {"command": "pytest -q tests/test_x.py"},
        "tool_response": {"llmContent": "ok", "returnDisplay": "ok"},
    }
    code, out, err = run(["post-tool-use", "--client", "gemini-cli"], json.dumps(after).encode())
    assert (code, out, err) == (0, "", "")
    state = _state(project)
    assert (state["session_id"], state["last_tool"]["name"], state["status"]) == ("g-1", "run_shell_command", "working")
    assert "pytest -q tests/test_x.py" in json.dumps(state["recent_work"])
    # Without --client, the name is not Claude Code's: the hook says so and exits 0.
    code, out, err = run(["AfterTool"], json.dumps(after).encode())
    assert code == 0 and "unknown hook event" in err
    code, out, err = run(["session-end", "--client", "gemini-cli"], json.dumps({**base, "reason": "exit"}).encode())
    assert (code, err) == (0, "")
    assert _state(project)["status"] == "idle"


def test_the_event_is_taken_from_the_payload_when_the_command_names_none(project: Path) -> None:
    payload = {"session_id": "c-1", "cwd": str(project), "hook_event_name": "PostToolUse", "tool_name": "Bash"}
    code, _out, err = run(["--client", "codex"], json.dumps({**payload, "tool_response": "exit 0"}).encode())
    assert (code, err) == (0, "")
    assert _state(project)["last_tool"]["name"] == "Bash"


def _sh(
    command: str, project: Path, payload: dict[str, Any], env: dict[str, str]
) -> subprocess.CompletedProcess[bytes]:
    bindir = os.path.dirname(sys.executable)
    path = os.pathsep.join([bindir, "/usr/local/bin", "/usr/bin", "/bin"])
    environ = {k: v for k, v in os.environ.items() if k not in ("PATH", "CLAUDE_PROJECT_DIR")}
    return subprocess.run(
        ["/bin/sh", "-c", command],
        input=json.dumps(payload).encode(),
        capture_output=True,
        cwd=project,
        env={**environ, "PATH": path, **env},
        check=False,
        timeout=60,
    )


@pytest.mark.parametrize("client", ["gemini-cli", "codex"])
def test_the_shared_command_stands_aside_for_this_machines_per_cli(project: Path, client: str) -> None:
    spec = client_named(client)
    env = {"HOME": os.environ["HOME"], "GEMINI_PROJECT_DIR": str(project)}
    tool = "run_shell_command" if client == "gemini-cli" else "Bash"
    payload = {"session_id": "s", "cwd": str(project), "tool_name": tool, "tool_input": {}, "tool_response": {}}
    shared = portable_command("post-tool-use", client=spec)
    assert _sh(shared, project, payload, env).returncode == 0
    state = project / ".phoenix" / "agents" / "default" / "state.json"
    assert json.loads(state.read_text())["heartbeat_seq"] == 1
    # Claude Code's fast command registered for this user does not make another CLI's hook stand aside.
    install_hooks("claude-code", "user", env=env)
    assert _sh(shared, project, payload, env).returncode == 0
    assert json.loads(state.read_text())["heartbeat_seq"] == 2
    install_hooks(client, "user", env=env)
    proc = _sh(shared, project, payload, env)
    assert (proc.returncode, proc.stdout, proc.stderr) == (0, b"", b"")
    assert json.loads(state.read_text())["heartbeat_seq"] == 2  # stood aside
    fast = shlex.split(hook_command("post-tool-use", client=spec))
    assert fast[-2:] == ["--client", client]


def test_doctor_checks_each_clis_files(project: Path) -> None:
    install_hooks("gemini-cli", "project", project_dir=str(project))
    install_hooks("codex", "user", project_dir=str(project))
    assert check_installed(project_dir=str(project), env={**os.environ, "PATH": "/nonexistent"}) != []
    with_phx = {**os.environ, "PATH": os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", "")}
    problems = check_installed(project_dir=str(project), env=with_phx)
    assert problems == []
    # A machine command in Gemini's shared settings (an edit, or an earlier Phoenix) is named, with the fix.
    path = Path(settings_path("project", project_dir=str(project), client=GEMINI_CLI))
    document = json.loads(path.read_text())
    document["hooks"]["AfterTool"][0]["hooks"][0]["command"] = hook_command("post-tool-use", client=GEMINI_CLI)
    path.write_text(json.dumps(document))
    problems = check_installed(project_dir=str(project), env=with_phx)
    assert [(scope, p) for scope, p, _ in problems] == [("project", str(path))]
    assert "`phx install gemini-cli --scope project`" in problems[0][2]


@pytest.mark.parametrize(
    ("first", "then"), [("claude-code", "gemini-cli"), ("gemini-cli", "codex"), ("codex", "claude-code")]
)
def test_an_agent_killed_in_one_cli_is_recovered_in_another(
    project: Path, monkeypatch: pytest.MonkeyPatch, first: str, then: str
) -> None:
    """One agent, any CLI (docs/recovery.md): the brief comes from Phoenix's state, not from the
    CLI that wrote it; the next CLI's SessionStart gets it in its own output form."""
    monkeypatch.setenv("PHOENIX_HOOK_INLINE", "1")
    monkeypatch.chdir(project)  # phx state: the project's home
    shell = {"claude-code": "Bash", "gemini-cli": "run_shell_command", "codex": "Bash"}
    agent_process = subprocess.Popen(["sleep", "600"])  # the first CLI's process, killed below
    try:
        monkeypatch.setenv("PHOENIX_AGENT_PID", str(agent_process.pid))
        base = {"session_id": "first-1", "cwd": str(project), "transcript_path": str(project / "none.jsonl")}
        args = ["--client", first]
        assert run(["session-start", *args], json.dumps({**base, "source": "startup"}).encode())[2] == ""
        assert cli(["state", "working", "Port the billing export to the new API"]) == 0
        tool = {"tool_name": shell[first], "tool_input": {"command": "make export-check"}, "tool_response": "ok"}
        assert run(["post-tool-use", *args], json.dumps({**base, **tool}).encode())[2] == ""
    finally:
        agent_process.kill()
        agent_process.wait()
    monkeypatch.setenv("PHOENIX_AGENT_PID", str(os.getpid()))
    after = {"session_id": "then-1", "cwd": str(project), "source": "startup", "hook_event_name": "SessionStart"}
    code, out, err = run(["session-start", "--client", then], json.dumps(after).encode())
    assert (code, err) == (0, "")
    output = json.loads(out)["hookSpecificOutput"]
    assert output["hookEventName"] == "SessionStart"
    context = output["additionalContext"]
    assert "RECOVERY DETECTED" in context
    assert "Port the billing export to the new API" in context and "make export-check" in context
