"""phx: output, --json, exit codes, one-line errors, state-update compatibility."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from phoenix_protocol.cli._main import EXIT_CODES, cli
from phoenix_protocol.cli._state_update import main as state_update
from phoenix_protocol.core._home import Home


def phx(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = cli(list(args))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def phx_json(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, dict[str, Any]]:
    code, out, _err = phx(capsys, *args, "--json")
    return code, json.loads(out)


@pytest.fixture(autouse=True)
def _in_project(project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(project)


def test_state_cycle_with_json(capsys: pytest.CaptureFixture[str], project: Path) -> None:
    code, data = phx_json(capsys, "state", "working", "Implementing user authentication")
    assert code == 0 and data["ok"] is True
    assert data["state"]["status"] == "working"
    assert data["path"] == str(project / ".phoenix/agents/default/state.json")
    _, data = phx_json(capsys, "state", "done", "JWT middleware merged")
    assert (data["state"]["status"], data["state"]["last_output"]) == ("idle", "JWT middleware merged")
    code, data = phx_json(capsys, "state", "error", "CI red")
    assert data["state"]["error_message"] == "CI red"
    code, data = phx_json(capsys, "state", "idle")
    assert (data["state"]["status"], data["state"]["current_task"]) == ("idle", "")
    code, data = phx_json(capsys, "state", "show")
    assert code == 0 and data["agent"] == "default"


def test_human_output_is_readable(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = phx(capsys, "state", "working", "Write docs", "--agent", "zero")
    assert code == 0 and err == "", err
    assert "working" in out and "Write docs" in out and "zero" in out


def test_notes_and_brief(capsys: pytest.CaptureFixture[str], project: Path) -> None:
    phx(capsys, "state", "working", "Ship the release")
    code, data = phx_json(capsys, "note", "open-loop", "Changelog incomplete")
    assert data["note"]["id"] == 1 and data["note"]["kind"] == "open_loop"
    phx(capsys, "note", "next-action", "Tag v1.0")
    code, data = phx_json(capsys, "note", "list")
    assert [n["text"] for n in data["next_actions"]] == ["Tag v1.0"]
    code, data = phx_json(capsys, "note", "resolve", "1")
    assert data["resolved"]["text"] == "Changelog incomplete"
    code, data = phx_json(capsys, "brief")
    assert code == 0 and "Tag v1.0" in data["brief"] and "Ship the release" in data["brief"]
    assert (project / ".phoenix/agents/default/brief.md").read_text() == data["brief"]
    code, out, _ = phx(capsys, "brief", "--no-write")
    assert "Current State" in out


def test_log_tail_and_json(capsys: pytest.CaptureFixture[str]) -> None:
    for i in range(5):
        phx(capsys, "state", "working", f"task {i}")
    _, data = phx_json(capsys, "log", "--tail", "2")
    assert [e["seq"] for e in data["events"]] == [4, 5]
    _, out, _ = phx(capsys, "log")
    assert "task_started" in out


@pytest.mark.parametrize("columns", [80, 160])
def test_log_keeps_long_meta_readable_in_any_width(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, columns: int
) -> None:
    """A checkpoint's 55-character name stays on one line at 80 columns (meta under its event)
    and at 160 (meta in its column); no line is wider than the terminal."""
    monkeypatch.setenv("COLUMNS", str(columns))
    phx(capsys, "state", "working", "task")
    phx(capsys, "checkpoint", "--type", "routine")
    _, data = phx_json(capsys, "checkpoint", "list")
    name = data["checkpoints"][0]["name"]
    _, out, _ = phx(capsys, "log")
    lines = out.splitlines()
    assert max(len(line.rstrip()) for line in lines) <= columns
    assert any(f"name={name}" in line for line in lines)
    created = next(i for i, line in enumerate(lines) if "checkpoint_created" in line)
    assert (f"name={name}" in lines[created]) == (columns == 160)


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["state", "working"], 2),  # missing argument
        (["state", "fly"], 2),  # no such command
        (["state", "show", "--agent", "../x"], 2),  # bad id
        (["note", "resolve", "9"], 2),  # nothing to resolve
        (["log", "--tail", "0"], 2),
    ],
)
def test_usage_errors_are_one_line_and_exit_2(
    capsys: pytest.CaptureFixture[str], args: list[str], expected: int
) -> None:
    code, out, err = phx(capsys, *args)
    assert code == expected
    assert err.strip().count("\n") == 0 and err.startswith("error:")
    assert "Traceback" not in out + err


def test_corrupt_state_exits_3_and_json_error(capsys: pytest.CaptureFixture[str], project: Path) -> None:
    phx(capsys, "state", "working", "x")
    (project / ".phoenix/agents/default/state.json").write_text("{")
    code, out, err = phx(capsys, "state", "show")
    assert code == 3 and "phx doctor" in err
    code, out, err = phx(capsys, "state", "show", "--json")
    data = json.loads(out)
    assert (
        code == 3
        and data["ok"] is False
        and data["error"]["type"] == "CorruptStateError"
        and data["error"]["exit_code"] == 3
    )


def test_precedence_refusal_exits_4(capsys: pytest.CaptureFixture[str], project: Path) -> None:
    from phoenix_protocol.services._agent import Agent

    agent = Agent.open()
    agent.state.set_status("error", "stalled", source="watchdog", event="stalled")
    code, _out, err = phx(capsys, "state", "working", "back")
    assert code == 4 and "watchdog" in err
    code, _out, _err = phx(capsys, "state", "working", "back", "--force")
    assert code == 0


def test_help_lists_exit_codes(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = phx(capsys, "--help")
    assert code == 0
    for number in EXIT_CODES:
        assert f"  {number}  " in out


@pytest.mark.parametrize("flag", ["--help", "-h"])
def test_hook_help_is_help_not_an_unknown_event(flag: str) -> None:
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys; from phoenix_protocol.cli._entry import main; sys.exit(main())",
            "hook",
            flag,
        ],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert done.returncode == 0 and "Run a Claude Code hook" in done.stdout and "unknown hook event" not in done.stderr


def test_state_update_accepts_the_seed_flags(capsys: pytest.CaptureFixture[str], project: Path) -> None:
    """In a project with a Phoenix home, state-update writes the agent's state, silently, with the
    seed's fields (tests/cli/test_state_update.py compares it with the seed's own script)."""
    Home(str(project / ".phoenix")).ensure()
    state_file = project / ".phoenix/agents/default/state.json"
    assert state_update(["--working", "Test task"]) == 0
    assert json.loads(state_file.read_text())["current_task"] == "Test task"
    assert state_update(["--done", "All green"]) == 0
    assert json.loads(state_file.read_text())["status"] == "idle"
    assert json.loads(state_file.read_text())["current_task"] == "All green"
    assert state_update(["--error", "boom"]) == 0
    assert json.loads(state_file.read_text())["status"] == "error"
    assert state_update(["--idle"]) == 0
    assert json.loads(state_file.read_text())["status"] == "idle"
    assert capsys.readouterr() == ("", "")
    assert state_update([]) == 0  # the seed's script: its usage line on stdout, exit 0
    assert capsys.readouterr().out == "Usage: state-update --working|--done|--error|--idle [message]\n"
    assert state_update(["--bogus"]) == 0
    assert "Usage: state-update" in capsys.readouterr().out
    assert not (project / "state.json").exists()


def test_console_scripts_run_as_processes(project: Path) -> None:
    bindir = Path(sys.executable).parent
    Home(str(project / ".phoenix")).ensure()
    proc = subprocess.run(
        [str(bindir / "state-update"), "--working", "From the shell"], capture_output=True, text=True, check=False
    )
    assert (proc.returncode, proc.stdout, proc.stderr) == (0, "", "")
    proc = subprocess.run([str(bindir / "phx"), "state", "show", "--json"], capture_output=True, text=True, check=False)
    assert proc.returncode == 0 and json.loads(proc.stdout)["state"]["current_task"] == "From the shell"
    proc = subprocess.run(
        [str(bindir / "phx"), "hook", "post-tool-use"], input="garbage", capture_output=True, text=True, check=False
    )
    assert proc.returncode == 0 and proc.stderr.startswith("phoenix:")


@pytest.mark.parametrize(
    "args",
    [
        ["checkpoint", "--type", "bogus"],
        ["checkpoint", "list", "--limit", "-1"],
        ["checkpoint", "list", "--limit", "abc"],
        ["checkpoint", "list", "--type", "bogus"],
        ["checkpoint", "begin-op"],
        ["checkpoint", "end-op"],
        ["identity", "add", "bogus", "x"],
        ["identity", "set"],
        ["identity", "reset-core", "--from-file", "/nonexistent/core.yaml"],
        ["state", "working"],
        ["state", "show", "--bogus"],
        ["log", "--tail", "0"],
        ["note", "resolve", "one"],
        ["team", "create", "x"],
        ["memory", "recall"],
        ["state", "fly"],
    ],
)
def test_usage_errors_click_finds_are_one_json_document_under_json(
    capsys: pytest.CaptureFixture[str], args: list[str]
) -> None:
    code, out, err = phx(capsys, *args, "--json")
    data = json.loads(out)
    assert code == 2 and err == ""
    assert data["ok"] is False and data["error"]["type"] == "UsageError" and data["error"]["exit_code"] == 2
    assert "--help" in data["error"]["message"]
    code, out, err = phx(capsys, *args)  # without --json: one line on stderr, as before
    assert code == 2 and out == "" and err.startswith("error:") and err.count("\n") == 1


def test_json_after_a_double_dash_is_an_argument_not_the_option(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = phx(capsys, "state", "show", "--bogus", "--", "--json")
    assert code == 2 and out == "" and err.startswith("error:")


def test_a_bug_under_json_is_still_one_json_document(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from phoenix_protocol.services._agent import Agent

    def broken(*_args: Any, **_kwargs: Any) -> Any:
        raise ZeroDivisionError("division by zero")

    monkeypatch.setattr(Agent, "open", broken)
    code, out, err = phx(capsys, "state", "show", "--json")
    data = json.loads(out)
    assert code == 1 and data["ok"] is False and data["error"]["exit_code"] == 1
    assert data["error"]["type"] == "ZeroDivisionError" and "a bug in Phoenix" in data["error"]["message"]
    assert "Traceback" in err  # for the bug report
    with pytest.raises(ZeroDivisionError):  # without --json: the traceback, as Python shows it
        cli(["state", "show"])


def test_control_characters_in_users_text_are_shown_not_sent_to_the_terminal(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "200")
    nasty = "x\x1b[31mRED\x9b2J\x07\x7f\u202egnp.exe"
    phx(capsys, "state", "working", f"task {nasty}")
    phx(capsys, "note", "open-loop", f"loop {nasty}")
    phx(capsys, "restore", "--session", "s-1")
    phx(capsys, "checkpoint", "--summary", f"summary {nasty}")
    phx(capsys, "identity", "set", "state.current_focus", f"focus {nasty}")
    for args in (
        ["state", "show"],
        ["checkpoint", "list"],
        ["checkpoint", "show", "latest"],
        ["checkpoint", "latest"],
        ["sessions"],
        ["note", "list"],
        ["log"],
        ["brief", "--no-write"],
    ):
        code, out, err = phx(capsys, *args)
        assert code == 0, (args, err)
        assert not any(c in out for c in "\x1b\x9b\x07\x7f\u202e"), args
        assert "x\\x1b[31mRED\\x9b2J" in out and "\\u202egnp" in out, (args, out)
    code, out, err = phx(capsys, "note", "resolve", nasty)  # an error quoting what was typed
    assert code == 2 and "\x1b" not in err and "\\x1b" in err
    code, out, _err = phx(capsys, "checkpoint", "latest", "--json")  # JSON escapes them itself
    assert json.loads(out)["checkpoint"]["summary"] == f"summary {nasty}"


SECRET = "ghp_" + "aB3" * 12 + "aBE"


def _files_holding(root: Path, text: str) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file() and text.encode() in p.read_bytes())


def test_recover_redacts_its_reason_everywhere_it_is_stored(capsys: pytest.CaptureFixture[str], project: Path) -> None:
    code, data = phx_json(capsys, "recover", "--agent", "q", "--reason", f"leaked  token={SECRET}")
    assert code == 0 and _files_holding(project / ".phoenix", SECRET) == []
    assert data["reason"] == "leaked token=[REDACTED:github-token]"  # as stored
    state = json.loads((project / ".phoenix/agents/q/state.json").read_text())
    assert state["refresh_requested"]["reason"] == data["reason"]  # the same text everywhere
    _code, log = phx_json(capsys, "log", "--agent", "q")
    reasons = {e["meta"]["reason"] for e in log["events"] if e["event"] in ("forced_refresh", "emergency_recovery")}
    assert reasons == {data["reason"]}
    _code, latest = phx_json(capsys, "checkpoint", "latest", "--agent", "q")
    assert latest["checkpoint"]["summary"] == f"forced refresh: {data['reason']}"


def test_a_status_commands_session_option_is_redacted_in_the_ops_log(
    capsys: pytest.CaptureFixture[str], project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    phx(capsys, "state", "working", "Port the scheduler", "--session", f"token={SECRET}")
    monkeypatch.setenv("PHOENIX_SESSION_ID", f"token={SECRET}")
    phx(capsys, "state", "done", "ported")
    assert _files_holding(project / ".phoenix", SECRET) == []
    _code, log = phx_json(capsys, "log")
    assert [e["meta"]["session_id"] for e in log["events"]] == ["token=[REDACTED:github-token]"] * 2


def test_end_op_error_is_redacted_before_it_is_cut(capsys: pytest.CaptureFixture[str], project: Path) -> None:
    _code, data = phx_json(capsys, "checkpoint", "begin-op", "deploy")
    error = "x" * 480 + f" token {SECRET}"  # the token straddles the 500 characters kept
    code, _ = phx_json(capsys, "checkpoint", "end-op", data["operation"]["id"], "--error", error)
    assert code == 0 and _files_holding(project / ".phoenix", SECRET[:10]) == []


def test_memory_recall_and_list_windows_and_mode(capsys: pytest.CaptureFixture[str]) -> None:
    code, stored = phx_json(capsys, "memory", "store", "Alice edits code in Neovim with pyright", "--tag", "editor")
    assert code == 0
    memory_id = stored["memory"]["id"]
    for window, expected in (
        (("--since", "1h"), [memory_id]),
        (("--until", "1h"), []),
        (("--since", "2000-01-01"), [memory_id]),
    ):
        code, found = phx_json(capsys, "memory", "recall", "neovim", *window)
        assert code == 0 and [m["id"] for m in found["results"]] == expected, window
        code, listed = phx_json(capsys, "memory", "list", *window)
        assert code == 0 and [m["id"] for m in listed["memories"]] == expected, window
    question = "which typing tool does she program with"
    assert phx_json(capsys, "memory", "recall", question, "--mode", "lexical")[1]["results"] == []
    code, found = phx_json(capsys, "memory", "recall", question, "--mode", "semantic")
    assert code == 0 and [m["id"] for m in found["results"]] == [memory_id] and found["results"][0]["score"] == 0.5
    code, _out, err = phx(capsys, "memory", "recall", "neovim", "--since", "last tuesday")
    assert code == 2 and "ISO 8601" in err
