"""``phx export`` / ``phx import``: files → PostgreSQL → files gives back everything (issue 8)."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import Any

import pytest

from phoenix_protocol.cli._main import cli
from phoenix_protocol.core._clock import ManualClock
from phoenix_protocol.core._errors import UsageError
from phoenix_protocol.core._home import Home
from phoenix_protocol.services import _sessions
from phoenix_protocol.services._agent import Agent
from phoenix_protocol.services._transfer import export_home, import_home, read_export
from phoenix_protocol.store._memory import open_memory_store
from phoenix_protocol.store._teams import Team
from phoenix_protocol.store._tokens import TokenStore


def _fill(home: Home, clock: ManualClock) -> None:
    agent = Agent.open("zero", home=home, clock=clock)
    agent.state.set_status("working", "Add JWT authentication")
    _sessions.begin(agent, "s-1")
    _sessions.record_memory(agent, "mem-0001")
    _sessions.end(agent, "s-1", summary="first session")
    _sessions.begin(agent, "s-2")
    agent.checkpoints.create("routine", summary="halfway")
    with agent.checkpoints.pre_operation("migrate db"):
        pass
    op = agent.checkpoints.begin_operation("drop table")
    agent.checkpoints.end_operation(op.id, success=False, error="refused")
    TokenStore(home, clock=clock).create(["agent:zero"], ["*"], label="laptop")
    team = Team.create(home, "release", lead="lead", team_id="release-1", clock=clock)
    team.join("alice")
    team.join("bob")
    first = team.add_task("Write the parser")
    second = team.add_task("Test the parser", after=[first["task_id"]])
    team.claim(first["task_id"], "alice")
    clock.advance(61)
    team.done(first["task_id"], "alice", files=["src/parser.py"])
    team.claim(second["task_id"], "bob")
    team.heartbeat("alice", session_id="s-a")
    team.heartbeat("bob")
    team.heartbeat("bob")
    for i in range(7):
        clock.advance(1)
        team.send("alice", "bob" if i % 2 else "*", subject=f"note {i}", body=f"body {i}", msg_id=f"m-{i}")
    box = team.mailbox
    inbox = box.fetch("bob")
    box.mark_delivered("bob", inbox.through_seq)
    box.ack("bob", inbox[0].seq)
    box.ack("bob", inbox[2].seq)
    team.checkpoint(kind="full", reason="before export")
    memory = open_memory_store(home, clock=clock)
    memory.store("zero", "the timer drifts under load", tags=["timers"], metadata={"source": "test"})
    clock.advance(1)
    memory.store("zero", "use monotonic clocks for intervals", tags=["timers", "fix"])
    memory.store("alice", "parser handles unicode", tags=[])


def _records(path: str) -> list[str]:
    _header, records = read_export(path)
    return sorted(json.dumps(r, sort_keys=True) for r in records)


def test_round_trip_files_postgres_files(
    tmp_path: Path, clock: ManualClock, pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    source = Home(str(tmp_path / "a"))
    _fill(source, clock)
    first = str(tmp_path / "a.jsonl")
    counts = export_home(source, first)
    assert counts["team"] == 1 and counts["message"] == 7 and counts["memory"] == 3 and counts["file"] >= 4
    assert stat.S_IMODE(os.stat(first).st_mode) == 0o600

    monkeypatch.setenv("PHOENIX_STORE", pg_url)
    middle = Home(str(tmp_path / "b"))
    import_home(middle, first)
    assert not os.path.exists(os.path.join(middle.root, "teams"))  # the team went to PostgreSQL
    on_pg = Agent.open("zero", home=middle, clock=clock).checkpoints
    assert not os.path.exists(os.path.join(middle.root, "agents/zero/checkpoints"))  # and the checkpoints
    assert [e.label for e in on_pg.entries()] == ["drop table", "halfway", "first session"]
    assert not os.path.exists(os.path.join(middle.root, "agents/zero/sessions"))  # sessions too
    pg_agent = Agent.open("zero", home=middle, clock=clock)
    assert not os.path.exists(pg_agent.state.path) and not os.path.exists(pg_agent.ops.path)  # state, ops: rows
    assert pg_agent.state.read().current_task == "Add JWT authentication"
    from_files = Agent.open("zero", home=source, config_overrides={"store": "files"})
    assert pg_agent.ops.read()[0] == from_files.ops.read()[0] and len(from_files.ops.read()[0]) > 5
    assert not os.path.exists(pg_agent.identity.path)  # the identity is a row too
    assert pg_agent.identity.read().as_dict() == from_files.identity.read().as_dict()
    assert from_files.identity.read().mutable["accumulated_experience"] == 2
    assert [s["session_id"] for s in _sessions.list_sessions(pg_agent)] == ["s-1", "s-2"]
    assert _sessions.read_current(pg_agent)["session_id"] == "s-2"  # type: ignore[index]
    assert on_pg.latest("routine")[0] is not None and on_pg.backend.completed_operations()
    second = str(tmp_path / "b.jsonl")
    export_home(middle, second)
    assert _records(second) == _records(first)

    monkeypatch.delenv("PHOENIX_STORE")
    last = Home(str(tmp_path / "c"))
    import_home(last, second)
    third = str(tmp_path / "c.jsonl")
    export_home(last, third)
    assert _records(third) == _records(first)

    # What came back works: the team, its mailbox and the agent.
    team = Team.open(last, "release-1", clock=clock)
    assert (
        team.mailbox.unread_count("bob") == 0 and team.mailbox.acked_by(1) == ["bob"] and team.mailbox.acked_by(2) == []
    )
    assert team.send("bob", "alice", subject="back", body="").seq == 8
    assert Agent.open("zero", home=last).state.read().current_task == "Add JWT authentication"
    back = Agent.open("zero", home=last, clock=clock).checkpoints
    assert [e.label for e in back.entries()] == ["drop table", "halfway", "first session"]
    assert back.latest()[1] == [] and back.create("session").seq == 5  # no seq reused
    assert [s["summary"] for s in _sessions.list_sessions(Agent.open("zero", home=last))] == ["first session", None]
    assert [r.text for r, _score in open_memory_store(last).recall("zero", "timer", k=1)] == [
        "the timer drifts under load"
    ]


def test_import_refuses_a_target_that_has_any_of_it(tmp_path: Path, clock: ManualClock) -> None:
    source = Home(str(tmp_path / "a"))
    _fill(source, clock)
    path = str(tmp_path / "a.jsonl")
    export_home(source, path)
    target = Home(str(tmp_path / "b"))
    Team.create(target, "other", lead="x", team_id="release-1", clock=clock)
    before = sorted(str(p) for p in Path(target.root).rglob("*"))
    with pytest.raises(UsageError, match="nothing was written"):
        import_home(target, path)
    assert sorted(str(p) for p in Path(target.root).rglob("*")) == before


def test_an_imported_state_lost_later_is_rebuilt_from_the_log(tmp_path: Path, clock: ManualClock) -> None:
    """Found in review: an import wrote state.json without its lock file (lock files are not
    exported), which is what says a state was written here: lost later, it was started fresh."""
    from phoenix_protocol.services._agent import Agent

    source = Agent.open("zero", home=Home(str(tmp_path / "a")), clock=clock)
    source.state.start_session("s1")
    source.state.set_status("working", "Port the scheduler", session_id="s1")
    path = str(tmp_path / "a.jsonl")
    export_home(source.home, path)
    import_home(Home(str(tmp_path / "b")), path)
    moved = Agent.open("zero", home=Home(str(tmp_path / "b")), clock=clock)
    os.unlink(moved.state.path)
    assert moved.state.read().current_task == "Port the scheduler"


def test_a_damaged_or_foreign_export_is_refused(tmp_path: Path) -> None:
    home = Home(str(tmp_path / "h"))
    bad = tmp_path / "bad.jsonl"
    bad.write_text(
        '{"kind": "phoenix.export", "format_version": 1}\n{"type": "file", "path": "../escape", "content": ""}\n'
    )
    with pytest.raises(UsageError, match="outside the home"):
        import_home(home, str(bad))
    bad.write_text('{"kind": "something else"}\n')
    with pytest.raises(UsageError, match="not a Phoenix export"):
        import_home(home, str(bad))
    bad.write_text('{"kind": "phoenix.export", "format_version": 1}\n{"type": "team", "team_id"\n')
    assert cli(["import", str(bad), "--home", home.root]) == 3  # damaged: exit 3, nothing written
    assert not os.path.exists(os.path.join(home.root, "teams"))


def test_cli_export_import(tmp_path: Path, clock: ManualClock, capsys: pytest.CaptureFixture[str]) -> None:
    source = Home(str(tmp_path / "a"))
    _fill(source, clock)
    path = str(tmp_path / "x.jsonl")
    assert cli(["export", path, "--home", source.root, "--json"]) == 0
    out: dict[str, Any] = json.loads(capsys.readouterr().out)
    assert out["records"]["message"] == 7
    assert cli(["import", path, "--home", str(tmp_path / "b"), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["records"] == out["records"]
    assert cli(["import", path, "--home", str(tmp_path / "b")]) == 2  # the second time: refused


HOMES = Path(__file__).resolve().parents[1] / "data" / "homes"


def test_an_export_by_0_1_0_brings_its_tokens_and_memories(backend: str, tmp_path: Path) -> None:
    """0.1.0 exported ``tokens.json`` as a file: its tokens go into the token store (on either
    engine), and an export made now has them as ``token`` records, never the file. The export is
    the one 0.1.0 wrote of the fixture home (``tests/data/homes/export-0.1.0.jsonl.gz``)."""
    import gzip

    expected = json.loads((HOMES / "expected-0.1.0.json").read_text())
    old_export = str(tmp_path / "old.jsonl")
    Path(old_export).write_bytes(gzip.decompress((HOMES / "export-0.1.0.jsonl.gz").read_bytes()))
    _header, old_records = read_export(old_export)
    assert [r["path"] for r in old_records if r["type"] == "file" and r["path"] == "tokens.json"] == ["tokens.json"]
    target = Home(str(tmp_path / "new"))
    counts = import_home(target, old_export)
    assert counts["memory"] == 4
    assert not os.path.exists(os.path.join(target.root, "tokens.json"))
    tokens = TokenStore(target, clock=ManualClock())
    now = tokens.clock.now_ms()
    assert {"ok": True, "tokens": [t.as_dict(now) for t in tokens.list()]} == expected["tokens"]
    assert tokens.verify(expected["reader_token"]) is not None
    memory = open_memory_store(target)
    for agent, data in expected["agents"].items():
        assert [m.as_dict() for m in memory.list(agent)] == data["memories"]["memories"]
    new_export = str(tmp_path / "new.jsonl")
    export_home(target, new_export)
    _header, new_records = read_export(new_export)
    assert not [r for r in new_records if r["type"] == "file" and r["path"] == "tokens.json"]
    assert [r["record"]["id"] for r in new_records if r["type"] == "token"] == [
        t["id"] for t in expected["tokens"]["tokens"]
    ]
    with pytest.raises(UsageError, match="nothing was written"):  # the tokens are there already
        import_home(Home(str(tmp_path / "new")), new_export)
