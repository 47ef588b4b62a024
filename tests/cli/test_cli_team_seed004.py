"""``phx team progress``, ``attach`` and ``outbox``, and ``resume``'s ZOMBIE report, through the CLI
(text and ``--json``), on both stores."""

from __future__ import annotations

import json
from typing import Any

import pytest

from phoenix_protocol.cli._main import cli
from phoenix_protocol.core._home import Home
from phoenix_protocol.store._teams import Team


def phx(capsys: pytest.CaptureFixture[str], home: Home, *args: str) -> tuple[int, Any]:
    code = cli([*args, "--home", home.root])
    out = capsys.readouterr().out
    return code, (json.loads(out) if "--json" in args else out)


@pytest.fixture
def team(backend: str, home: Home) -> Team:
    team = Team.create(home, "release", lead="lead", team_id="release-1")
    team.join("alice")
    team.join("bob")
    return team


def test_progress_attach_and_outbox(team: Team, home: Home, capsys: pytest.CaptureFixture[str]) -> None:
    tid = team.add_task("Engine semantic")["task_id"]
    team.claim(tid, "alice")
    code, data = phx(
        capsys, home, "team", "progress", "release-1", "--as", "alice", "--file", "engine.py", "--check", "red",
        "--note", "guard fixed, 2 red", "--json",
    )  # fmt: skip
    assert code == 0 and data["task"]["checkpoint"]["note"] == "guard fixed, 2 red"
    code, out = phx(capsys, home, "team", "progress", "release-1", tid, "--as", "alice", "--file", "test_engine.py")
    assert code == 0 and f"progress on {tid}: 2 file(s), check red, note: guard fixed, 2 red" in out
    assert phx(capsys, home, "team", "progress", "release-1", tid, "--as", "bob", "--note", "x")[0] == 4
    assert phx(capsys, home, "team", "progress", "release-1", "--as", "mallory", "--note", "x")[0] == 2

    code, data = phx(
        capsys, home, "team", "attach", "release-1", "--as", "alice", "--task", tid, "--session", "s-2", "--json"
    )
    assert code == 0 and data["checkpoint"]["files_modified"] == ["engine.py", "test_engine.py"]
    assert data["session_id"] == "s-2" and data["team_checkpoint"]["task"]["task_id"] == tid
    assert phx(capsys, home, "team", "attach", "release-1", "--as", "bob", "--task", tid)[0] == 4
    assert phx(capsys, home, "team", "reassign", "release-1", tid, "bob")[0] == 0
    code, out = phx(capsys, home, "team", "attach", "release-1", "--as", "bob", "--task", tid)
    assert code == 0 and "inherited from alice" in out and "modified: engine.py" in out and "guard fixed" in out

    team.send("lead", "alice", subject="status?", body="", msg_id="q-1")
    team.send("lead", "*", subject="standup", body="", msg_id="q-2")
    code, data = phx(capsys, home, "team", "outbox", "release-1", "--as", "lead", "--json")
    assert code == 0 and [(m["msg_id"], m["state"]) for m in data["messages"]] == [
        ("q-1", "delivered"),
        ("q-2", "delivered"),
    ]
    assert phx(capsys, home, "team", "inbox", "release-1", "--as", "alice")[0] == 0
    assert phx(capsys, home, "team", "ack", "release-1", "1", "--as", "alice")[0] == 0
    code, out = phx(capsys, home, "team", "outbox", "release-1", "--as", "lead")
    assert code == 0 and "#1 q-1 → alice acked read 1/1, acked 1/1 status?" in out
    assert "#2 q-2 → * delivered read 1/2, acked 0/2 standup" in out
    assert phx(capsys, home, "team", "outbox", "release-1", "--as", "mallory")[0] == 2


def test_resume_prints_the_zombie_episode(
    team: Team, home: Home, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    tid = team.add_task("Engine semantic")["task_id"]
    team.claim(tid, "alice")
    team.record_progress(tid, "alice", files=["engine.py"], check="green", note="ready to commit")
    created = team.read()["created_ms"]
    monkeypatch.setenv("PHOENIX_NOW_MS", str(created + 8 * 60_000))
    team.heartbeat("alice")  # the real clock here; the CLI's is pinned 8 minutes on
    code, out = phx(capsys, home, "team", "resume", "release-1", "--session", "lead-2")
    assert code == 0, out
    assert "zombie: Detected ZOMBIE at" in out and "alice worked on; asking them for their status" in out
    assert f"alice: {tid} [in_progress] check green, 1 file(s), note: ready to commit" in out
    assert "asked alice for its status (message #1)" in out
    code, data = phx(capsys, home, "team", "inbox", "release-1", "--as", "alice", "--json")
    (question,) = data["messages"]
    assert question["subject"].startswith("Detected ZOMBIE at ") and question["subject"].endswith(". Status?")
