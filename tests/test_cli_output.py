"""What the CLI prints is valid UTF-8 and cannot drive the terminal, whatever the files hold."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from phoenix_protocol._agent import Agent
from phoenix_protocol._cli import cli, visible
from phoenix_protocol._home import Home


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
    from phoenix_protocol import _server

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
