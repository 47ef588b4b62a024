"""What the CLI prints is valid UTF-8 and cannot drive the terminal, whatever the files hold."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from conftest import phx_unread
from phoenix_protocol.cli._main import cli, visible
from phoenix_protocol.core._home import Home
from phoenix_protocol.core._jsonio import dumps_output
from phoenix_protocol.services._agent import Agent


def _hand_edit(path: str, old: str, new: str) -> None:
    text = Path(path).read_text(encoding="utf-8")
    assert old in text
    Path(path).write_text(text.replace(old, new), encoding="utf-8")


@pytest.fixture
def surrogates(home: Home) -> Home:
    """Agent zero whose identity.yaml and state.json were edited by hand to hold ``\\udce9``
    escapes standing alone (lone surrogates once read)."""
    agent = Agent.open("zero", home=home)
    agent.state.set_status("working", "task")
    agent.identity.set("state.current_focus", "focus")
    _hand_edit(agent.identity.path, "current_focus: focus", 'current_focus: "bad \\udce9 focus"')
    _hand_edit(agent.state.path, '"current_task": "task"', '"current_task": "bad \\udce9 task"')
    return home


def test_json_output_replaces_lone_surrogates(surrogates: Home, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli(["identity", "show", "--agent", "zero", "--json", "--home", surrogates.root]) == 0
    out = capsys.readouterr().out
    out.encode("utf-8")  # a lone surrogate would fail here
    assert json.loads(out)["identity"]["mutable"]["state"]["current_focus"] == "bad \ufffd focus"
    assert cli(["state", "show", "--agent", "zero", "--json", "--home", surrogates.root]) == 0
    out = capsys.readouterr().out
    out.encode("utf-8")
    assert json.loads(out)["state"]["current_task"] == "bad \ufffd task"


@pytest.mark.parametrize("as_json", [False, True])
def test_a_strict_utf8_stdout_gets_an_answer(surrogates: Home, as_json: bool) -> None:
    """With PYTHONIOENCODING=utf-8 (strict) a lone surrogate on stdout was an unexpected error
    (exit 1, a traceback)."""
    proc = subprocess.run(
        [sys.executable, "-m", "phoenix_protocol", "state", "show", "--agent", "zero", "--home", surrogates.root]
        + (["--json"] if as_json else []),
        capture_output=True,
        env={**os.environ, "PYTHONIOENCODING": "utf-8", "COLUMNS": "200"},
        check=False,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr.decode("utf-8", "replace")
    assert "bad \ufffd task" in proc.stdout.decode("utf-8")  # strict: valid UTF-8


def test_visible_replaces_lone_surrogates() -> None:
    assert visible("a\udce9b\x1b[2J") == "a\ufffdb\\x1b[2J"


def test_serve_banner_shows_control_characters(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """`phx serve` says where it serves on stderr through the CLI's console: a control character
    in the home's path is shown as \\xNN, not sent to the terminal."""
    pytest.importorskip("fastapi")
    from phoenix_protocol.server import _app as _server

    served: list[str] = []
    monkeypatch.setattr(_server, "serve", lambda home, **kwargs: served.append(home.root))
    root = tmp_path / "home\x1b]0;pwned\x07\u202e"
    assert cli(["serve", "--home", str(root), "--port", "8765"]) == 0
    assert served == [str(root)]
    err = capsys.readouterr().err
    assert "memory bridge for" in err and "http://127.0.0.1:8765" in err
    assert "\x1b" not in err and "\x07" not in err and "\u202e" not in err
    assert "home\\x1b]0;pwned\\x07\\u202e" in err


def test_json_error_document_is_utf8_text_like_the_answer(home: Home, capsys: pytest.CaptureFixture[str]) -> None:
    """The ``--json`` error document treats text as the answer does: "é" as itself, a lone
    surrogate (here from a path that was not UTF-8) as U+FFFD, not the escapes ``\\u00e9`` and
    ``\\udce9`` (the second read back as a lone surrogate, which UTF-8 cannot write)."""
    Path(home.root).parent.mkdir(parents=True, exist_ok=True)
    not_a_dir = os.path.join(os.path.dirname(home.root), "fé\udce9")
    Path(not_a_dir).write_bytes(b"")  # a file where the home should be: every command fails
    assert cli(["state", "show", "--json", "--home", not_a_dir]) == 2
    out = capsys.readouterr().out
    out.encode("utf-8")  # valid UTF-8
    assert "\\u00e9" not in out and "\\udce9" not in out
    data = json.loads(out)
    assert data["ok"] is False and data["error"]["exit_code"] == 2
    assert "fé\ufffd" in data["error"]["message"]
    assert "fé\ufffd" in out


# -- every --json output through the one writer ----------------------------------------------------


def _utf8_json(out: str) -> Any:
    """The one document ``out`` holds, checked to be valid UTF-8 with "é" as itself."""
    out.encode("utf-8")  # a lone surrogate would fail here
    assert "é" in out and "\\u00e9" not in out and "\\udce9" not in out
    return json.loads(out)


@pytest.mark.parametrize(
    "value",
    [
        {},
        [],
        "é",
        {"ok": True, "a": {}, "b": [], "c": [1, -2.5, 1e-07, 10**30, None, True, False, 'é\n"\\\x1b\u2028']},
        {"nested": [{"x": [[], {}, [{"y": {"z": "ü"}}]]}], "t": (1, (2, "é"))},
        {2: "int", True: "bool", None: "none", 1.5: "float", float("nan"): float("inf")},
    ],
)
def test_dumps_output_is_json_dumps_with_text_as_itself(value: Any) -> None:
    """``dumps_output`` (which does not import ``json``: the team resume fast path uses it)
    writes exactly what ``json.dumps(ensure_ascii=False)`` writes, indented or on one line."""
    assert dumps_output(value) == json.dumps(value, indent=2, ensure_ascii=False)
    assert dumps_output(value, one_line=True) == json.dumps(value, ensure_ascii=False).replace("\u2028", "\\u2028")
    assert dumps_output({"a": "b\udce9"}) == '{\n  "a": "b\ufffd"\n}'
    with pytest.raises(TypeError):
        dumps_output({"a": object()})
    with pytest.raises(TypeError):
        dumps_output({(1, 2): 1})


@pytest.fixture
def team_home(
    project: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> str:
    """A home whose path holds "é", with team ``rel-…`` (lead, alice, bob) and a message to bob
    whose subject holds "é" and a line separator."""
    monkeypatch.chdir(project)
    root = str(tmp_path / "hé")
    assert cli(["team", "create", "rel", "--lead", "lead", "--home", root, "--json"]) == 0
    team_id = json.loads(capsys.readouterr().out)["team"]["team_id"]
    for name in ("alice", "bob"):
        assert cli(["team", "join", team_id, name, "--home", root]) == 0
    send = ["team", "send", team_id, "--from", "alice", "--to", "bob", "--subject", "Sujet é\u2028", "--body", "b"]
    assert cli([*send, "--home", root]) == 0
    capsys.readouterr()
    return root


def _team_id(root: str) -> str:
    from phoenix_protocol.core._home import Home
    from phoenix_protocol.store._teams import list_teams

    (team_id,) = list_teams(Home(root))
    return team_id


def test_team_resume_json_fast_path_writes_text_as_itself(team_home: str, capsys: pytest.CaptureFixture[str]) -> None:
    """``phx team resume|probe --json``'s fast path (``_entry``, without the CLI) writes its
    answers and its error documents as the CLI does: "é" as itself, a lone surrogate as U+FFFD."""
    from phoenix_protocol.cli._entry import main

    team_id = _team_id(team_home)
    assert main(["team", "probe", team_id, "--json", "--home", team_home]) == 0
    data = _utf8_json(capsys.readouterr().out)
    assert data["ok"] is True and "hé" in data["steps"][0]["detail"]
    assert main(["team", "resume", team_id, "--json", "--session", "s1", "--home", team_home + "\udce9"]) == 2
    data = _utf8_json(capsys.readouterr().out)
    assert data["ok"] is False and "hé\ufffd" in data["steps"][0]["detail"]
    # An error document (an exception the fast path reports itself): the full CLI's text exactly.
    assert main(["team", "resume", "équipe", "--json", "--session", "s1", "--home", team_home]) == 2
    fast = capsys.readouterr().out
    assert _utf8_json(fast)["error"]["type"] == "InvalidIdError" and "'équipe'" in fast
    assert cli(["team", "resume", "équipe", "--json", "--session", "s1", "--home", team_home]) == 2
    assert capsys.readouterr().out == fast


def test_team_resume_inbox_json_write_text_as_itself(team_home: str, capsys: pytest.CaptureFixture[str]) -> None:
    """The full CLI's ``phx team resume --json`` and ``phx team inbox --json`` (one line per
    delivery, which a line separator in a subject does not break)."""
    team_id = _team_id(team_home)
    assert cli(["team", "probe", team_id, "--json", "--home", team_home]) == 0
    assert "hé" in _utf8_json(capsys.readouterr().out)["steps"][0]["detail"]
    assert cli(["team", "inbox", team_id, "--as", "bob", "--json", "--home", team_home]) == 0
    out = capsys.readouterr().out
    assert len(out.splitlines()) == 1 and out.endswith("}\n")
    (message,) = _utf8_json(out)["messages"]
    assert message["subject"] == "Sujet é\u2028"


def test_remote_inbox_json_writes_text_as_itself(capsys: pytest.CaptureFixture[str]) -> None:
    """``phx team inbox --server URL --json``: the messages the server sent, as the local command writes them."""
    from phoenix_protocol.cli._main import Output
    from phoenix_protocol.cli._remote import _team_inbox

    delivered: list[int] = []

    class Client:
        def team_inbox_page(self, team_id: str, name: str, *, limit: int | None = None) -> dict[str, Any]:
            return {"messages": [{"seq": 1, "subject": "Sujet é\udce9\u2029", "body": "b"}], "through_seq": 1}

        def team_mark_delivered(self, team_id: str, name: str, through_seq: int) -> None:
            delivered.append(through_seq)

    _team_inbox(Client(), Output(True), "rel-1", "bob", follow=False, limit=None)  # type: ignore[arg-type]
    assert delivered == [1]  # once written
    out = capsys.readouterr().out
    assert len(out.splitlines()) == 1
    assert _utf8_json(out) == {"ok": True, "messages": [{"seq": 1, "subject": "Sujet é\ufffd\u2029", "body": "b"}]}


def test_watchdog_json_writes_text_as_itself(home: Home, capsys: pytest.CaptureFixture[str]) -> None:
    """``phx watchdog --json``: one line per pass, "é" as itself."""
    Agent.open("zero", home=home).state.set_status("error", "échec \udce9")
    assert cli(["watchdog", "--once", "--json", "--home", home.root]) == 0
    out = capsys.readouterr().out
    assert len(out.splitlines()) == 1 and out.endswith("}\n")
    (verdict,) = _utf8_json(out)["agents"]
    assert verdict["detail"] == "échec \ufffd"


def test_install_dry_run_shows_the_settings_as_written(project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``phx install --dry-run`` shows the settings file it would write as it would write it
    (non-ASCII text as itself), as ``--json`` has them."""
    settings = project / ".claude" / "settings.json"
    settings.parent.mkdir()
    settings.write_text(json.dumps({"permissions": {"allow": ["Bash(échec)"]}}), encoding="utf-8")
    args = ["install", "claude-code", "--project-dir", str(project), "--dry-run"]
    assert cli([*args, "--json"]) == 0
    assert "Bash(échec)" in json.dumps(_utf8_json(capsys.readouterr().out), ensure_ascii=False)
    assert cli(args) == 0
    out = capsys.readouterr().out
    assert '"Bash(échec)"' in out and "\\u00e9" not in out


@pytest.mark.parametrize(
    ("args", "code"),
    [
        (["checkpoint", "--type", "routine"], 0),
        (["checkpoint", "list"], 0),
        (["checkpoint", "list", "--json"], 0),
        (["checkpoint", "show", "nope", "--json"], 2),
        (["checkpoint", "show", "nope"], 2),
        (["doctor", "--check"], 3),  # decided after the findings are printed
        (["doctor", "--check", "--json"], 3),
        (["watchdog", "--interval", "1"], 0),  # a loop: ends at its first pass, not every second forever
        (["watchdog", "--interval", "1", "--json"], 0),
    ],
)
def test_a_reader_that_goes_away_leaves_the_exit_code_as_it_was(tmp_path: Path, args: list[str], code: int) -> None:
    """Found in review: `phx checkpoint --type routine | true` exited 1 (rich's default on a broken
    pipe) though the checkpoint was written; scripts under `set -o pipefail` took it for a failure.
    The command goes on and ends with its own code; a loop ends."""
    home = str(tmp_path / "home")
    phx = [sys.executable, "-m", "phoenix_protocol"]
    subprocess.run([*phx, "checkpoint", "--type", "routine", "--agent", "zero", "--home", home], check=True, timeout=60)
    (tmp_path / "home" / "agents" / "zero" / "state.json").write_text("{not json")  # for doctor to find
    proc = phx_unread([*args, "--agent", "zero", "--home", home])
    assert proc.returncode == code, proc.stderr.decode("utf-8", "replace")
    assert b"Traceback" not in proc.stderr and b"BrokenPipe" not in proc.stderr


def test_install_says_what_it_wrote_where(project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The text names the file, its scope and the command; ``--json`` has the same, stably."""
    assert cli(["install", "claude-code", "--project-dir", str(project)]) == 0
    out = capsys.readouterr().out
    assert f"created {project / '.claude' / 'settings.json'} (project scope: shared" in out
    assert "exec phx hook <event> --shared" in out and "--scope local" in out
    assert cli(["install", "claude-code", "--project-dir", str(project), "--scope", "local", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert set(data) == {
        "ok", "client", "path", "scope", "kind", "changed", "dry_run", "created", "removed", "actions", "commands",
        "notes", "settings",
    }  # fmt: skip
    assert (data["scope"], data["kind"], data["created"]) == ("local", "machine", True)
    assert data["commands"]["PostToolUse"].startswith(f"{sys.executable} -S -P -c ")
    assert any("git does not ignore" in note for note in data["notes"])
    assert cli(["uninstall", "claude-code", "--project-dir", str(project), "--scope", "local"]) == 0
    assert "removed" in capsys.readouterr().out
    assert not (project / ".claude" / "settings.local.json").exists()


@pytest.mark.parametrize(
    ("address", "path", "url"),
    [
        ("127.0.0.1", "/mcp", "http://127.0.0.1:8765/mcp"),
        ("::1", "/mcp", "http://[::1]:8765/mcp"),
        ("fe80::1", "/ui/", "http://[fe80::1]:8765/ui/"),
        ("localhost", "", "http://localhost:8765"),
    ],
)
def test_the_address_printed_for_a_server_brackets_ipv6(address: str, path: str, url: str) -> None:
    from phoenix_protocol.cli._server import _http_url

    assert _http_url(address, 8765, path) == url
